//! `poolctl apply`: the plan, a confirmation, the locks of the pools it changes, then the
//! rollout under them, with progress on stdout.
//!
//! The locks are taken after the confirmation (nobody is kept waiting on a prompt) and before
//! anything else (the image pulls of the preflight included). The plan shown was made without
//! them, so the world is observed and planned again once they are held, and that plan is the
//! one carried out: after waiting for another run (`--lock-timeout`) it is typically empty. If
//! it differs from the confirmed one, it is shown, and carried out only with `--yes`.

use std::io::{self, IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};

use super::Ui;
use super::common::{Planned, compute, compute_for, confirm, held_locks, load_source, write_stdout};
use super::exit::{EXIT_INTERRUPTED, Exit};
use crate::backend::docker::DockerBackend;
use crate::backend::endpoints::Endpoints;
use crate::backend::kube::KubeCluster;
use crate::cli::{ApplyArgs, OutputFormat, SourceArgs};
use crate::execute::{Executor, Interrupt, ProgressFormat, ProgressUi, StopReason};
use crate::lock::{LockFailure, LockSettings, PoolLocks};
use crate::model::{Desired, Origin};
use crate::plan::saved::{self, SavedPlan};
use crate::plan::{
    HeldLocks, JSON_FORMAT_VERSION, Plan, PlanOptions, render_json_saved, render_text, render_text_styled,
};
use crate::style::Style;

pub(super) async fn apply_command(args: ApplyArgs, ui: Ui) -> Result<Exit> {
    if let Some(file) = &args.plan_file {
        return apply_saved(file, &args, ui).await;
    }
    let progress_ui = progress_ui(&args, ui);
    if progress_ui.format == ProgressFormat::Json && !args.yes && !args.dry_run {
        bail!("apply -o json asks no question: pass --yes (or apply a saved plan)");
    }
    let planned = compute(&args.source, args.planning.options()).await?;
    // The options the plan was made with, its seed included: the plan made under the locks in
    // an unchanged world is the same, new instance names included.
    let options = planned.options;
    let locks = held_locks(&planned).await;
    match progress_ui.format {
        ProgressFormat::Text => {
            let held = HeldLocks { locks: &locks, now: SystemTime::now() };
            write_stdout(|out| render_text_styled(&planned.plan, held, ui.color.stdout(), out))?;
        }
        ProgressFormat::Json => {
            let mut plan = Vec::new();
            render_json_saved(&planned.plan, &locks, Some(&planned.provenance), &mut plan)?;
            let plan: serde_json::Value = serde_json::from_slice(&plan)?;
            write_stdout(|out| writeln!(out, "{}", serde_json::json!({"event": "plan", "plan": plan})))?;
        }
    }
    if !planned.plan.has_changes() || args.dry_run {
        return Ok(Exit::Success);
    }
    if !args.yes && !confirm("Do you want to perform these actions?", "apply")? {
        bail!("apply cancelled: nothing was changed");
    }

    let session = Session::start(&args, progress_ui)?;
    let Planned { desired, docker, clusters, plan, .. } = &planned;
    let interrupt = &session.interrupt;
    let mut locks = PoolLocks::new(docker, clusters, &session.settings, &session.lock_progress);
    let result = match locks.lock_and_replan(desired, plan, options, interrupt).await {
        Ok(current) => {
            let run = session.run(&planned, options);
            locks.hold_while(interrupt, Box::pin(run.carry_out(plan, &current, args.yes))).await
        }
        Err(e) => Err(lock_failure(e)),
    };
    locks.release().await;
    result
}

/// `apply PLAN_FILE`: carry out exactly the saved plan, or refuse it, changing nothing, when
/// the source or the world changed since it was made. No question is asked: the plan was
/// reviewed when it was saved, as with `terraform apply PLANFILE`.
async fn apply_saved(file: &Path, args: &ApplyArgs, ui: Ui) -> Result<Exit> {
    let progress_ui = progress_ui(args, ui);
    let saved = read_saved(file)?;
    let source = match &args.source.source {
        Some(_) => args.source.clone(),
        None => source_of(&saved.origin),
    };
    let desired = load_source(&source)?;
    let name = file.display();
    if desired.origin.scope() != saved.origin.scope() {
        bail!(
            "{name} is a plan for the source {}, not {}: nothing was changed",
            saved.origin,
            desired.origin
        );
    }
    let options = saved.provenance.plan_options().ok_or_else(|| {
        anyhow!("{name}: `options.seed` is not 16 hex digits; is this a plan poolctl saved?")
    })?;
    let revision = saved::revision(&desired);
    if revision != saved.provenance.revision {
        let change = match (&saved.origin, &desired.origin) {
            (Origin::Git { commit: then, .. }, Origin::Git { commit: now, .. }) => {
                format!("the source moved from commit {then} to {now}")
            }
            _ => "the pool files changed".to_owned(),
        };
        return Err(stale(file, &[change]));
    }
    let planned = compute_for(desired, options).await?;
    // A first look without the locks: a stale plan is refused before any is taken.
    let changes = saved::world_changes(&saved.provenance.observed, &planned.provenance.observed);
    if !changes.is_empty() {
        return Err(stale(file, &changes));
    }
    let steps = saved.skeleton().len();
    if steps == 0 {
        tell(progress_ui, &format!("The saved plan {name} has no changes: nothing to do."))?;
        return Ok(Exit::Success);
    }
    tell(
        progress_ui,
        &progress_ui.style.bold(&format!("Carrying out the saved plan {name}: {steps} steps.")),
    )?;

    let session = Session::start(args, progress_ui)?;
    let Planned { desired, docker, clusters, plan, .. } = &planned;
    let interrupt = &session.interrupt;
    let mut locks = PoolLocks::new(docker, clusters, &session.settings, &session.lock_progress);
    let result = match locks.lock_and_observe(desired, plan, options, interrupt).await {
        // The world the saved plan is checked against is the one observed under the locks:
        // nobody else can change the pools from then on.
        Ok((current, world)) => {
            let changes =
                saved::world_changes(&saved.provenance.observed, &saved::observe_pools(desired, &world));
            if !changes.is_empty() {
                Err(stale(file, &changes))
            } else if saved::skeleton(&current) != saved.skeleton() {
                // The world agrees on everything the observation records, yet the plan made
                // from it differs (a Node's labels, say): never carry out another plan.
                Err(stale(
                    file,
                    &["the plan made now differs from the saved one (run poolctl plan to see it)".to_owned()],
                ))
            } else {
                let run = session.run(&planned, options);
                locks.hold_while(interrupt, Box::pin(run.carry_out(&current, &current, true))).await
            }
        }
        Err(e) => Err(lock_failure(e)),
    };
    locks.release().await;
    result
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

/// The `--source`, `--ref` and `--path` that read `origin` again.
fn source_of(origin: &Origin) -> SourceArgs {
    match origin {
        Origin::Path { path } => SourceArgs { source: Some(path.clone()), ..SourceArgs::default() },
        Origin::Git { url, reference, path, .. } => SourceArgs {
            source: Some(url.clone()),
            reference: Some(reference.clone()),
            path: Some(path.clone()).filter(|p| !p.is_empty()),
            ..SourceArgs::default()
        },
    }
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
    interrupt: Arc<Interrupt>,
    /// The executor's progress (it writes JSON events itself with `-o json`).
    progress: Mutex<Box<dyn Write + Send>>,
    /// The locks' lines (waiting for one, one lost): JSON `message` events with `-o json`.
    lock_progress: Mutex<Box<dyn Write + Send>>,
    ui: ProgressUi,
}

impl Session {
    fn start(args: &ApplyArgs, ui: ProgressUi) -> Result<Self> {
        let settings = LockSettings::new("apply", args.lock_timeout.get())?;
        let interrupt = Arc::new(Interrupt::default());
        spawn_interrupt_handler(Arc::clone(&interrupt));
        let lock_progress: Box<dyn Write + Send> = match ui.format {
            ProgressFormat::Text => Box::new(io::stdout()),
            ProgressFormat::Json => Box::new(JsonMessages::default()),
        };
        Ok(Self {
            settings,
            interrupt,
            progress: Mutex::new(Box::new(io::stdout())),
            lock_progress: Mutex::new(lock_progress),
            ui,
        })
    }

    /// Carrying out a plan of `planned` made with `options`, in this session.
    fn run<'a>(&'a self, planned: &'a Planned, options: PlanOptions) -> Run<'a> {
        let Planned { desired, docker, clusters, .. } = planned;
        let (progress, interrupt, ui) = (&self.progress, &*self.interrupt, self.ui);
        Run { desired, docker, clusters, progress, interrupt, options, ui }
    }
}

/// How apply shows progress: `-o`, a live line on a terminal, `--color`, `-v`.
fn progress_ui(args: &ApplyArgs, ui: Ui) -> ProgressUi {
    let format = match args.output {
        OutputFormat::Text => ProgressFormat::Text,
        OutputFormat::Json => ProgressFormat::Json,
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

/// Stdout that turns each line written into a JSON `message` event.
#[derive(Default)]
struct JsonMessages {
    pending: Vec<u8>,
}

impl Write for JsonMessages {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.pending.extend_from_slice(buf);
        while let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            let text = String::from_utf8_lossy(&line).trim().to_owned();
            let event = serde_json::json!({"event": "message", "message": text});
            writeln!(io::stdout(), "{event}")?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stdout().flush()
    }
}

/// What carrying a plan out needs.
struct Run<'a> {
    desired: &'a Desired,
    docker: &'a Endpoints<DockerBackend>,
    clusters: &'a std::collections::BTreeMap<String, KubeCluster>,
    progress: &'a Mutex<Box<dyn Write + Send>>,
    interrupt: &'a Interrupt,
    options: PlanOptions,
    ui: ProgressUi,
}

impl Run<'_> {
    /// Carry out `current`, the plan made under the locks; `shown` is the one confirmed.
    async fn carry_out(&self, shown: &Plan, current: &Plan, yes: bool) -> Result<Exit> {
        if !current.has_changes() {
            let text =
                "\nNo changes left: the world changed before the locks were taken, and matches the source.";
            tell(self.ui, text)?;
            return Ok(Exit::Success);
        }
        if skeleton(shown) != skeleton(current) {
            let mut text = b"\nThe world changed before the locks were taken. The plan is now:\n\n".to_vec();
            render_text(current, &mut text)?;
            tell(self.ui, String::from_utf8_lossy(&text).trim_end())?;
            if !yes {
                bail!(
                    "the plan changed after it was confirmed: nothing was changed; run apply again to review it"
                );
            }
        }
        let (desired, containers, clusters) = (self.desired, self.docker, self.clusters);
        let executor =
            Executor::new(desired, containers, clusters, self.progress, self.interrupt).with_ui(self.ui);
        let report = Box::pin(executor.execute(current, self.options)).await?;
        match self.ui.format {
            ProgressFormat::Text => write_stdout(|out| report.write_summary(out))?,
            ProgressFormat::Json => write_stdout(|out| writeln!(out, "{}", end_event(&report)))?,
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

/// The last JSON event of `apply -o json`: how the rollout ended.
fn end_event(report: &crate::execute::Report) -> serde_json::Value {
    let failed: Vec<serde_json::Value> = report
        .attempted
        .iter()
        .filter_map(|o| {
            let e = o.error.as_ref()?;
            Some(serde_json::json!({"pool": o.pool, "instance": o.instance, "action": o.verb, "error": e.to_string()}))
        })
        .collect();
    serde_json::json!({
        "event": "end",
        "complete": report.complete(),
        "done": report.attempted.iter().filter(|o| o.error.is_none()).count(),
        "failed": failed,
        "not_started": report.not_started.len(),
    })
}

/// What a plan does, without what the world looked like: the steps, by pool and instance. A
/// pod rescheduled since the confirmation changes a drain preview, not what apply will do.
fn skeleton(plan: &Plan) -> Vec<(&str, &str, &str)> {
    saved::skeleton(plan)
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
