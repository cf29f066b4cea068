//! `poolctl plan`: observe and print the plan, and who holds a pool's lock; change nothing.
//! `--out FILE` also saves it, for `apply FILE` to carry out exactly.

use std::time::SystemTime;

use anyhow::{Context, Result};

use super::Ui;
use super::common::{compute, held_locks, write_stdout};
use super::exit::Exit;
use crate::cli::{OutputFormat, PlanArgs};
use crate::plan::{HeldLocks, render_json_saved, render_text_styled};

pub(super) async fn plan_command(args: PlanArgs, ui: Ui) -> Result<Exit> {
    let planned = compute(&args.source, args.planning.options()).await?;
    // Read, never taken: a plan changes nothing, and shows whoever is changing a pool now.
    let locks = held_locks(&planned).await;
    let plan = &planned.plan;
    let provenance = Some(&planned.provenance);
    write_stdout(|out| match args.output {
        OutputFormat::Text => {
            let held = HeldLocks { locks: &locks, now: SystemTime::now() };
            render_text_styled(plan, held, ui.color.stdout(), out)
        }
        OutputFormat::Json => render_json_saved(plan, &locks, provenance, out),
    })?;
    if let Some(file) = &args.out {
        let mut saved = Vec::new();
        render_json_saved(plan, &locks, provenance, &mut saved)?;
        std::fs::write(file, saved).with_context(|| format!("cannot save the plan to {}", file.display()))?;
        let path = file.display();
        let next =
            format!("\nSaved the plan to {path}. To carry out exactly this plan: poolctl apply {path}\n");
        // On stdout with the text plan; beside a JSON one, on stderr, to keep stdout one document.
        match args.output {
            OutputFormat::Text => write_stdout(|out| out.write_all(next.as_bytes()))?,
            OutputFormat::Json => eprint!("{next}"),
        }
    }
    // A pool left alone is a difference too: CI must see it even though apply will not act.
    Ok(if args.detailed_exitcode && !plan.in_sync() { Exit::Changes } else { Exit::Success })
}
