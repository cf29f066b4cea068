//! `poolctl apply`: the plan, a confirmation, the locks of the pools it changes, then the
//! rollout under them, with progress on stdout.
//!
//! The locks are taken after the confirmation (nobody is kept waiting on a prompt) and before
//! anything else (the image pulls of the preflight included). The plan shown was made without
//! them, so the world is observed and planned again once they are held, and that plan is the
//! one carried out: after waiting for another run (`--lock-timeout`) it is typically empty. If
//! it differs from the confirmed one, it is shown, and carried out only with `--yes`.

use std::collections::BTreeSet;
use std::io::{self, IsTerminal};
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use anyhow::{Context, Result, anyhow, bail};

use super::common::{
    NOTIFY_FLUSH, Planned, check_named, check_pools, check_replace, compute, confirm, held_locks,
    load_source, notifier,
};
use super::exit::Exit;
use crate::backend::Connections;
use crate::config::{ApplyConfig, Format, Source, Ui};
use crate::model::Origin;
use crate::plan::saved::{self, SavedPlan};
use crate::plan::{
    HeldLocks, JSON_FORMAT_VERSION, Plan, PlanOptions, render_json_saved, render_text, render_text_styled,
};
use crate::report::write_stdout;
use crate::report::{
    KubeEvents, Notice, Notifier, Progress, ProgressFormat, ProgressUi, end_event, tell_now, write_summary,
};
use crate::rollout::cancel::EXIT_INTERRUPTED;
use crate::rollout::cancel::{Interrupt, Signals, StopReason};
use crate::rollout::execute::{PreflightCheck, Report};
use crate::rollout::lock::{LockFailure, LockSettings};
use crate::rollout::{Outcome, Rollout, RolloutError};
use crate::style::Style;

pub(super) async fn apply_command(config: &ApplyConfig, ui: Ui) -> Result<Exit> {
    let progress_ui = progress_ui(config, ui);
    if let Some(file) = &config.plan_file {
        return apply_saved(file, config, progress_ui).await;
    }
    let source = config.source.as_ref().expect("clap requires --source without a plan file");
    let desired = load_source(source)?;
    let revision = crate::plan::scope::revision_label(&desired);
    check_pools(&desired, &config.options.pools)?;
    check_named(&desired, &config.options.rollback, "--rollback")?;
    let planned = compute(&Connections::once(), desired, config.options.clone()).await?;
    let plan = &planned.preview.plan;
    check_replace(plan, &config.options)?;
    check_rollback(&planned)?;
    if !config.dry_run {
        tell_now(&planned.preview.clusters, |sink| crate::rollout::tell_conditions(plan, |_| true, sink))
            .await;
        crate::rollout::record_ends(plan, &planned.desired, &*planned.docker).await;
    }
    let locks = held_locks(plan, &planned.docker, &planned.preview.clusters).await;
    match progress_ui.format {
        ProgressFormat::Text => {
            let held = HeldLocks { locks: &locks, now: SystemTime::now() };
            write_stdout(|out| render_text_styled(plan, held, ui.color.stdout(), ui.verbose > 0, out))?;
        }
        ProgressFormat::Json => {
            let provenance =
                saved::provenance(&planned.desired, &planned.preview.world, config.options.clone());
            let mut json = Vec::new();
            render_json_saved(plan, &locks, Some(&provenance), &mut json)?;
            let json: serde_json::Value = serde_json::from_slice(&json)?;
            let event = serde_json::json!({"event": "plan", "dry_run": config.dry_run, "plan": json});
            write_stdout(|out| writeln!(out, "{event}"))?;
        }
    }
    if config.dry_run {
        // The plan alone reads like the prompt of a real apply: say that none follows.
        tell(progress_ui, "\nDry run: nothing was changed.")?;
        return Ok(Exit::Success);
    }
    // After the plan is shown, which says what the suspension holds back.
    check_suspended(plan)?;
    // A pool another run is changing shows instances in the making, waited for: its lock is
    // waited for too (`--lock-timeout`), and the plan made under it carried out.
    let busy = planned.preview.busy_pools();
    if !plan.has_changes() && busy.is_empty() {
        return Ok(Exit::Success);
    }
    if plan.has_changes() && !config.yes && !confirm("Do you want to perform these actions?", "apply")? {
        bail!("apply cancelled: nothing was changed");
    }
    if !plan.has_changes() {
        let pools: Vec<&str> = busy.iter().map(String::as_str).collect();
        tell(
            progress_ui,
            &format!("\nAnother run is changing {}: planning again once it is done.", pools.join(", ")),
        )?;
    }

    let session = Session::start(config, progress_ui, revision)?;
    // The plan made under the locks is carried out; it was not the one confirmed if the world
    // changed meanwhile: shown, and carried out only with --yes.
    let check = |current: &Plan, _: &_| {
        if !current.has_changes() || saved::skeleton(plan) == saved::skeleton(current) {
            return Ok(());
        }
        let mut text = b"\nThe world changed before the locks were taken. The plan is now:\n\n".to_vec();
        render_text(current, &mut text)?;
        tell(progress_ui, String::from_utf8_lossy(&text).trim_end())?;
        if config.yes {
            Ok(())
        } else {
            bail!(
                "the plan changed after it was confirmed: nothing was changed; run apply again to review it"
            )
        }
    };
    session.roll_out(&planned, check).await
}

/// Refuse an `--rollback` that has nothing to roll back to, saying why, before anything is shown
/// as if it would happen.
fn check_rollback(planned: &Planned) -> Result<()> {
    let plan = &planned.preview.plan;
    for pool in &planned.preview.options.rollback {
        if plan.rollbacks.iter().any(|r| r.name() == pool) {
            continue;
        }
        let Some(dp) = planned.desired.pools.iter().find(|p| p.name() == pool) else { continue };
        if let Err(why) = crate::plan::rollback_target(dp, &planned.preview.world) {
            bail!(
                "cannot roll back pool {pool}: {why}; nothing was changed (`poolctl history {pool}` shows what was \
                 rolled out)"
            );
        }
    }
    Ok(())
}

/// `apply PLAN_FILE`: carry out exactly the saved plan, or refuse it, changing nothing, when
/// the source or the world changed since it was made. No question is asked: the plan was
/// reviewed when it was saved, as with `terraform apply PLANFILE`.
///
/// The plan is stale exactly when the source revision differs, or when the plan made again
/// under the locks (with the same options) has other steps than the saved one.
async fn apply_saved(file: &Path, config: &ApplyConfig, progress_ui: ProgressUi) -> Result<Exit> {
    let saved = read_saved(file)?;
    let source = match &config.source {
        Some(source) => source.clone(),
        None => Source::of_origin(&saved.origin)?,
    };
    let desired = load_source(&source)?;
    let label = crate::plan::scope::revision_label(&desired);
    let connections = Connections::once();
    // Before the revision: the settings a pool copies are part of its template.
    let (desired, docker) = connections.connect_docker(desired).await?;
    let name = file.display();
    // A plan saved by an earlier poolctl may name its Git URL with a user name, as it was shown then.
    if desired.origin.scope() != crate::source::scope_as_written_now(&saved.origin.scope()) {
        bail!(
            "{name} is a plan for the source {}, not {}: nothing was changed",
            crate::source::shown(&saved.origin.to_string()),
            desired.origin
        );
    }
    let revision = crate::plan::scope::revision(&desired);
    if revision != saved.provenance.revision {
        let change = match (&saved.origin, &desired.origin) {
            (Origin::Git { commit: then, .. }, Origin::Git { commit: now, .. }) => {
                format!("the source moved from commit {then} to {now}")
            }
            _ => "the pool files changed".to_owned(),
        };
        return Err(stale(file, &[change]));
    }
    let steps = saved.skeleton();
    if steps.is_empty() {
        tell(progress_ui, &format!("The saved plan {name} has no changes: nothing to do."))?;
        return Ok(Exit::Success);
    }
    // The Node this poolctl runs on is this process's, not the saved plan's.
    let options =
        PlanOptions { own_node: config.options.own_node.clone(), ..saved.provenance.options.options() };
    let preview = crate::rollout::preview(&desired, &*docker, connections.clusters(), options).await?;
    let planned = Planned { desired, docker, preview };
    tell(
        progress_ui,
        &progress_ui.style.bold(&format!(
            "Carrying out the saved plan {name}: {}.",
            crate::style::count(steps.len(), "step")
        )),
    )?;
    let session = Session::start(config, progress_ui, label)?;
    // Checked against the plan made under the locks: nobody else can change the pools from then on.
    let check = |current: &Plan, world: &_| {
        if saved::skeleton(current) == steps {
            return Ok(());
        }
        let mut changes =
            saved::world_changes(&saved.provenance.observed, &saved::observe_pools(&planned.desired, world));
        if changes.is_empty() {
            // The world agrees on everything the observation records, yet the plan made from it
            // differs (a Node's labels, say): never carry out another plan.
            changes
                .push("the plan made now differs from the saved one (run poolctl plan to see it)".to_owned());
        }
        Err(stale(file, &changes))
    };
    session.roll_out(&planned, check).await
}

/// Read a plan saved by `plan --out` (or printed by `plan -o json`).
fn read_saved(file: &Path) -> Result<SavedPlan> {
    let name = file.display();
    let text = std::fs::read_to_string(file).with_context(|| format!("cannot read the plan file {name}"))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{name} is not a plan file (not JSON)"))?;
    let version = value.get("format_version").and_then(serde_json::Value::as_u64);
    if version != Some(u64::from(JSON_FORMAT_VERSION)) {
        bail!(
            "{name}: plan format_version {} is not the one this poolctl reads ({JSON_FORMAT_VERSION}); make the plan again",
            version.map_or_else(|| "(none)".to_owned(), |v| v.to_string())
        );
    }
    serde_json::from_value(value).with_context(|| {
        format!("{name} is not a saved plan (made by `poolctl plan --out FILE` or `poolctl plan -o json`)")
    })
}

/// A stale saved plan is refused, saying what changed.
fn stale(file: &Path, changes: &[String]) -> anyhow::Error {
    let list: Vec<String> = changes.iter().map(|c| format!("  - {c}")).collect();
    anyhow!(
        "the saved plan {} is stale, nothing was changed; since it was made:\n{}\nMake a new plan and review it.",
        file.display(),
        list.join("\n")
    )
}

/// What a rollout needs once confirmed: the lock settings, the interrupt flag (armed on
/// Ctrl-C and SIGTERM) and where progress goes.
struct Session {
    settings: LockSettings,
    /// `--skip-preflight`.
    skip_preflight: BTreeSet<PreflightCheck>,
    interrupt: Arc<Interrupt>,
    /// Where the rollout's progress goes: stdout, as lines, a live line or JSON events.
    progress: Progress,
    ui: ProgressUi,
    /// `--notify`: where each pool's rollout is told.
    notifier: Option<Notifier>,
    /// The source's revision, as notifications name it (as `watch` does: from the pool files,
    /// before any `copyFrom` is resolved).
    revision: String,
}

impl Session {
    fn start(config: &ApplyConfig, ui: ProgressUi, revision: String) -> Result<Self> {
        let settings = LockSettings::new("apply", config.lock_timeout)?;
        let interrupt = Arc::new(Interrupt::default());
        spawn_interrupt_handler(Arc::clone(&interrupt));
        let progress = Progress::new(Box::new(io::stdout()), ui);
        let notifier = notifier(config.notify.as_ref())?;
        let skip_preflight = config.skip_preflight.clone();
        Ok(Self { settings, skip_preflight, interrupt, progress, ui, notifier, revision })
    }

    /// Roll `planned` out, `check` deciding whether the plan made under the locks may be
    /// carried out, and say how it ended.
    async fn roll_out(
        self,
        planned: &Planned,
        check: impl FnOnce(&Plan, &crate::model::World) -> Result<()>,
    ) -> Result<Exit> {
        let Planned { desired, docker, preview, .. } = planned;
        let events = KubeEvents::default();
        let sink = (&self.progress, &events);
        let rollout = Rollout::new(desired, &**docker, preview, &self.settings, &self.interrupt, &sink)
            .skipping_preflight(&self.skip_preflight);
        let (notifier, revision) = (self.notifier.as_ref(), self.revision.clone());
        let tell = Tell { notifier, revision, commit: desired.origin.commit() };
        // Each pool the plan made under the locks changes is told when it starts and ends.
        let mut started = BTreeSet::new();
        let announce = |current: &Plan, world: &crate::model::World| {
            check(current, world)?;
            started = current.changed_pools();
            tell.started(&started);
            Ok(())
        };
        let carried = events.beside(&preview.clusters, Box::pin(rollout.run(announce))).await;
        tell.ended(&started, &carried);
        let exit = self.ended_as(carried.map_err(rollout_failure));
        if let Some(notifier) = self.notifier {
            notifier.close(NOTIFY_FLUSH).await;
        }
        exit
    }

    /// What the rollout's end means to apply.
    fn ended_as(&self, carried: Result<Outcome<anyhow::Error>>) -> Result<Exit> {
        match carried? {
            Outcome::NothingLeft => {
                let text = "\nNo changes left: the world changed before the locks were taken, and matches the source.";
                tell(self.ui, text)?;
                Ok(Exit::Success)
            }
            Outcome::Done(report) => self.ended(&report),
            Outcome::Refused(why) => Err(why),
        }
    }

    /// Say how the rollout ended.
    fn ended(&self, report: &Report) -> Result<Exit> {
        match self.ui.format {
            ProgressFormat::Text => write_stdout(|out| write_summary(report, out))?,
            ProgressFormat::Json => write_stdout(|out| writeln!(out, "{}", end_event(report)))?,
        }
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

/// Who hears of each pool's rollout besides stdout (`--notify`), and of which revision.
struct Tell<'n> {
    notifier: Option<&'n Notifier>,
    revision: String,
    commit: Option<&'n str>,
}

impl Tell<'_> {
    fn send(&self, notice: Notice) {
        if let Some(notifier) = self.notifier {
            notifier.send(notice.on_commit(self.commit));
        }
    }

    fn started(&self, pools: &BTreeSet<String>) {
        for pool in pools {
            self.send(Notice::new(pool, &self.revision, "started"));
        }
    }

    /// How the rollout of `pools` ended, each pool by its own steps; a rollout that failed
    /// as a whole (a lock lost, Docker gone) failed each of them.
    fn ended<E>(&self, pools: &BTreeSet<String>, carried: &Result<Outcome<E>, RolloutError>) {
        match carried {
            Ok(Outcome::Done(report)) => {
                for pool in pools {
                    if let Some(notice) = Notice::ended(pool, &self.revision, report) {
                        self.send(notice);
                    }
                }
            }
            Err(e) => {
                let line = crate::backend::cause_chain(e);
                for pool in pools {
                    let mut notice = Notice::new(pool, &self.revision, "failed");
                    notice.error = Some(line.clone());
                    self.send(notice);
                }
            }
            Ok(Outcome::NothingLeft | Outcome::Refused(_)) => {}
        }
    }
}

/// How apply shows progress: `-o`, a live line on a terminal, `--color`, `-v`.
fn progress_ui(config: &ApplyConfig, ui: Ui) -> ProgressUi {
    let format = match config.format {
        Format::Text => ProgressFormat::Text,
        Format::Json => ProgressFormat::Json,
    };
    ProgressUi {
        format,
        live: format == ProgressFormat::Text && io::stdout().is_terminal(),
        style: if format == ProgressFormat::Json { Style::PLAIN } else { ui.color.stdout() },
        verbose: ui.verbose > 0,
    }
}

/// A message of apply's own: a line of text, or with `-o json` a `message` event.
fn tell(ui: ProgressUi, text: &str) -> Result<()> {
    match ui.format {
        ProgressFormat::Text => write_stdout(|out| writeln!(out, "{text}")),
        ProgressFormat::Json => {
            let event = serde_json::json!({"event": "message", "message": text.trim()});
            write_stdout(|out| writeln!(out, "{event}"))
        }
    }
}

/// A lock held by another run names the holder and the ways out.
fn rollout_failure(e: RolloutError) -> anyhow::Error {
    match &e {
        RolloutError::Lock(LockFailure::Held { pool, .. }) => anyhow!(
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
        let listening =
            Signals::listen().inspect_err(|e| tracing::warn!("cannot listen for Ctrl-C and SIGTERM: {e}"));
        let Ok(mut signals) = listening else { return };
        signals.recv().await;
        eprintln!("interrupt: stopping at the next step boundary (interrupt again to exit at once)");
        interrupt.trigger();
        signals.recv().await;
        eprintln!("interrupt: exiting now; run apply again to continue");
        std::process::exit(EXIT_INTERRUPTED);
    });
}

/// Refuse a pool that `poolctl suspend` suspended and that this apply would change: a stop
/// button that an apply silently skipped would look pressed and not be. Said with who pressed
/// it, why, and the two ways on.
fn check_suspended(plan: &Plan) -> Result<()> {
    let held = |p: &&crate::plan::PoolPlan| p.paused.as_ref().is_some_and(|h| !h.steps.is_empty());
    let Some(pool) = plan.pools.iter().filter(held).find(|p| p.suspended.is_some()) else { return Ok(()) };
    let suspension = pool.suspended.as_ref().map(crate::model::Suspension::describe).unwrap_or_default();
    bail!(
        "pool {} is {suspension}: nothing was changed. Resume it with `poolctl resume {} --source ...`, \
         or apply with --ignore-suspend to roll it all the same",
        pool.name,
        pool.name
    )
}
