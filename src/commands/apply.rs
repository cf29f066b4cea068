//! `poolctl apply`: the plan, a confirmation, the locks of the pools it changes, then the
//! rollout under them, with progress on stdout.
//!
//! The locks are taken after the confirmation (nobody is kept waiting on a prompt) and before
//! anything else (the image pulls of the preflight included). The plan shown was made without
//! them, so the world is observed and planned again once they are held, and that plan is the
//! one carried out: after waiting for another run (`--lock-timeout`) it is typically empty. If
//! it differs from the confirmed one, it is shown, and carried out only with `--yes`.

use std::io::{self, Write};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use anyhow::{Result, anyhow, bail};

use super::common::{Planned, compute, confirm, held_locks, write_stdout};
use super::exit::{EXIT_INTERRUPTED, Exit};
use crate::backend::docker::DockerBackend;
use crate::backend::endpoints::Endpoints;
use crate::backend::kube::KubeCluster;
use crate::cli::ApplyArgs;
use crate::execute::{Executor, Interrupt, StopReason};
use crate::lock::{LockFailure, LockSettings, PoolLocks};
use crate::model::Desired;
use crate::plan::{HeldLocks, Plan, PlanOptions, render_text, render_text_locked};

pub(super) async fn apply_command(args: ApplyArgs) -> Result<Exit> {
    // One seed for the plan shown and the plan made under the locks: in an unchanged world the
    // two are the same, new instance names included.
    let options = args.planning.options();
    let planned = compute(&args.source, options).await?;
    let locks = held_locks(&planned).await;
    let held = HeldLocks { locks: &locks, now: SystemTime::now() };
    write_stdout(|out| render_text_locked(&planned.plan, held, out))?;
    if !planned.plan.has_changes() || args.dry_run {
        return Ok(Exit::Success);
    }
    if !args.yes && !confirm("Do you want to perform these actions?", "apply")? {
        bail!("apply cancelled: nothing was changed");
    }

    let settings = LockSettings::new("apply", args.lock_timeout.get())?;
    let interrupt = Arc::new(Interrupt::default());
    spawn_interrupt_handler(Arc::clone(&interrupt));
    let progress: Mutex<Box<dyn Write + Send>> = Mutex::new(Box::new(io::stdout()));
    let Planned { desired, docker, clusters, plan } = &planned;
    let mut locks = PoolLocks::new(docker, clusters, &settings, &progress);
    let result = match locks.lock_and_replan(desired, plan, options, &interrupt).await {
        Ok(current) => {
            let run = Run { desired, docker, clusters, progress: &progress, interrupt: &interrupt, options };
            locks.hold_while(&interrupt, Box::pin(run.carry_out(plan, &current, args.yes))).await
        }
        Err(e) => Err(lock_failure(e)),
    };
    locks.release().await;
    result
}

/// What carrying a plan out needs.
struct Run<'a> {
    desired: &'a Desired,
    docker: &'a Endpoints<DockerBackend>,
    clusters: &'a std::collections::BTreeMap<String, KubeCluster>,
    progress: &'a Mutex<Box<dyn Write + Send>>,
    interrupt: &'a Interrupt,
    options: PlanOptions,
}

impl Run<'_> {
    /// Carry out `current`, the plan made under the locks; `shown` is the one confirmed.
    async fn carry_out(&self, shown: &Plan, current: &Plan, yes: bool) -> Result<Exit> {
        if !current.has_changes() {
            write_stdout(|out| {
                writeln!(
                    out,
                    "\nNo changes left: the world changed before the locks were taken, and matches the source."
                )
            })?;
            return Ok(Exit::Success);
        }
        if skeleton(shown) != skeleton(current) {
            write_stdout(|out| {
                writeln!(out, "\nThe world changed before the locks were taken. The plan is now:\n")?;
                render_text(current, out)
            })?;
            if !yes {
                bail!(
                    "the plan changed after it was confirmed: nothing was changed; run apply again to review it"
                );
            }
        }
        let (desired, containers, clusters) = (self.desired, self.docker, self.clusters);
        let executor = Executor::new(desired, containers, clusters, self.progress, self.interrupt);
        let report = executor.execute(current, self.options).await?;
        write_stdout(|out| report.write_summary(out))?;
        if report.complete() {
            Ok(Exit::Success)
        } else if report.interrupted() {
            bail!("apply was interrupted; run it again to continue")
        } else if report.stop_reason == Some(StopReason::LockLost) {
            bail!("apply stopped: it lost a lock (see above), so another run may be changing the pool")
        } else {
            bail!("apply halted at a failed step; see above")
        }
    }
}

/// What a plan does, without what the world looked like: the steps, by pool and instance. A
/// pod rescheduled since the confirmation changes a drain preview, not what apply will do.
fn skeleton(plan: &Plan) -> Vec<(&str, &str, &str)> {
    plan.steps().map(|(p, s)| (p.name.as_str(), s.instance.as_str(), s.action.verb())).collect()
}

/// A lock held by another run names the holder and the ways out.
fn lock_failure(e: LockFailure) -> anyhow::Error {
    match &e {
        LockFailure::Held { pool, .. } => anyhow!(
            "{e}\nWait for it with --lock-timeout; if that run is gone, break its lock with `poolctl unlock \
             {pool}` and the same --source"
        ),
        _ => anyhow::Error::from(e),
    }
}

/// The first Ctrl-C or SIGTERM stops at the next step boundary; a second one exits at once
/// (the world shows how far it got, and the next apply resumes from there; the locks lapse
/// on their own).
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
