//! `poolctl plan`: observe and print the plan, and who holds a pool's lock; change nothing.
//! `--out FILE` also saves it, for `apply FILE` to carry out exactly.

use std::time::SystemTime;

use anyhow::{Context, Result};

use super::common::{check_pools, check_replace, compute, held_locks, load_source};
use super::exit::Exit;
use crate::backend::Connections;
use crate::config::{Format, PlanConfig, Ui};
use crate::plan::saved::provenance;
use crate::plan::{HeldLocks, render_json_saved, render_text_styled};
use crate::report::write_stdout;

pub(super) async fn plan_command(config: &PlanConfig, ui: Ui) -> Result<Exit> {
    let desired = load_source(&config.source)?;
    check_pools(&desired, &config.options.pools)?;
    let planned = compute(&Connections::once(), desired, config.options.clone()).await?;
    let (plan, clusters) = (&planned.preview.plan, &planned.preview.clusters);
    check_replace(plan, &config.options)?;
    // Read, never taken: a plan changes nothing, and shows whoever is changing a pool now.
    let locks = held_locks(plan, &planned.docker, clusters).await;
    let provenance = provenance(&planned.desired, &planned.preview.world, config.options.clone());
    let provenance = Some(&provenance);
    write_stdout(|out| match config.format {
        Format::Text => {
            let held = HeldLocks { locks: &locks, now: SystemTime::now() };
            render_text_styled(plan, held, ui.color.stdout(), ui.verbose > 0, out)
        }
        Format::Json => render_json_saved(plan, &locks, provenance, out),
    })?;
    if let Some(file) = &config.out {
        let mut saved = Vec::new();
        render_json_saved(plan, &locks, provenance, &mut saved)?;
        std::fs::write(file, saved).with_context(|| format!("cannot save the plan to {}", file.display()))?;
        let path = file.display();
        let next =
            format!("\nSaved the plan to {path}. To carry out exactly this plan: poolctl apply {path}\n");
        // On stdout with the text plan; beside a JSON one, on stderr, to keep stdout one document.
        match config.format {
            Format::Text => write_stdout(|out| out.write_all(next.as_bytes()))?,
            Format::Json => eprint!("{next}"),
        }
    }
    // A pool left alone is a difference too: CI must see it even though apply will not act.
    Ok(if config.detailed_exitcode && !plan.in_sync() { Exit::Changes } else { Exit::Success })
}
