//! `poolctl plan`: observe and print the plan, and who holds a pool's lock; change nothing.

use std::time::SystemTime;

use anyhow::Result;

use super::common::{compute, held_locks, write_stdout};
use super::exit::Exit;
use crate::cli::{OutputFormat, PlanArgs};
use crate::plan::{HeldLocks, render_json_locked, render_text_locked};

pub(super) async fn plan_command(args: PlanArgs) -> Result<Exit> {
    let planned = compute(&args.source, args.planning.options()).await?;
    // Read, never taken: a plan changes nothing, and shows whoever is changing a pool now.
    let locks = held_locks(&planned).await;
    let plan = &planned.plan;
    write_stdout(|out| match args.output {
        OutputFormat::Text => {
            render_text_locked(plan, HeldLocks { locks: &locks, now: SystemTime::now() }, out)
        }
        OutputFormat::Json => render_json_locked(plan, &locks, out),
    })?;
    // A pool left alone is a difference too: CI must see it even though apply will not act.
    Ok(if args.detailed_exitcode && !plan.in_sync() { Exit::Changes } else { Exit::Success })
}
