//! `poolctl plan`: observe and print the plan; change nothing.

use anyhow::Result;

use super::common::{Planned, compute, write_stdout};
use super::exit::Exit;
use crate::cli::{OutputFormat, PlanArgs};
use crate::plan::{render_json, render_text};

pub(super) async fn plan_command(args: PlanArgs) -> Result<Exit> {
    let Planned { plan, .. } = compute(&args.source, args.planning.options()).await?;
    write_stdout(|out| match args.output {
        OutputFormat::Text => render_text(&plan, out),
        OutputFormat::Json => render_json(&plan, out),
    })?;
    Ok(if args.detailed_exitcode && plan.has_changes() { Exit::Changes } else { Exit::Success })
}
