//! `poolctl apply`: the plan, a confirmation, then the rollout, with progress on stdout.

use std::io::{self, BufRead, IsTerminal, Write};
use std::sync::{Arc, Mutex};

use anyhow::{Result, bail};

use super::common::{Planned, compute, write_stdout};
use super::exit::{EXIT_INTERRUPTED, Exit};
use crate::cli::ApplyArgs;
use crate::execute::{Executor, Interrupt};
use crate::plan::render_text;

pub(super) async fn apply_command(args: ApplyArgs) -> Result<Exit> {
    let Planned { desired, docker, clusters, plan } = compute(&args.source, args.planning.options()).await?;
    write_stdout(|out| render_text(&plan, out))?;
    if !plan.has_changes() || args.dry_run {
        return Ok(Exit::Success);
    }
    if !args.yes && !confirm()? {
        bail!("apply cancelled: nothing was changed");
    }

    let interrupt = Arc::new(Interrupt::default());
    spawn_interrupt_handler(Arc::clone(&interrupt));
    let progress: Mutex<Box<dyn Write + Send>> = Mutex::new(Box::new(io::stdout()));
    let executor = Executor::new(&desired, &docker, &clusters, &progress, &interrupt);
    let report = executor.execute(&plan, args.planning.options()).await?;
    write_stdout(|out| report.write_summary(out))?;
    if report.complete() {
        Ok(Exit::Success)
    } else if report.interrupted() {
        bail!("apply was interrupted; run it again to continue")
    } else {
        bail!("apply halted at a failed step; see above")
    }
}

/// Ask on the terminal. Without a terminal there is nobody to ask: refuse rather than guess.
fn confirm() -> Result<bool> {
    if !io::stdin().is_terminal() {
        bail!("refusing to apply without confirmation: stdin is not a terminal (pass --yes)");
    }
    write_stdout(|out| {
        write!(out, "\nDo you want to perform these actions? Only 'yes' will be accepted: ")?;
        out.flush()
    })?;
    let mut answer = String::new();
    io::stdin().lock().read_line(&mut answer)?;
    Ok(answer.trim() == "yes")
}

/// The first Ctrl-C or SIGTERM stops at the next step boundary; a second one exits at once
/// (the world shows how far it got, and the next apply resumes from there).
fn spawn_interrupt_handler(interrupt: Arc<Interrupt>) {
    tokio::spawn(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        let mut next = async || {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                () = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
            }
        };
        next().await;
        eprintln!("interrupt: stopping at the next step boundary (interrupt again to exit at once)");
        interrupt.trigger();
        next().await;
        eprintln!("interrupt: exiting now; run apply again to continue");
        std::process::exit(EXIT_INTERRUPTED);
    });
}
