//! `poolctl watch`: continuous reconciliation of a directory or Git source, with drift
//! correction.
//!
//! Shaped like kube-runtime's watcher: the decisions live in a small pure state machine
//! ([`State`], [`Event`], [`next_action`]) that returns an [`Action`] instead of doing anything;
//! [`watch_command`] is a thin loop that turns notify events, fetch and resync ticks, Docker
//! events and signals into [`Event`]s and carries the actions out. One reconcile runs at a time
//! (a spawned task); a newer desired state stops it at the next step boundary
//! ([`StopReason::Superseded`]) and the loop re-plans from the world at once, so a retirement cut
//! short is simply resumed by the next plan.
//!
//! Nothing accumulates across reconciles: the loop keeps the last good desired state, the last
//! seen source revision and a few counters, so memory stays flat over a long run.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use bollard::query_parameters::EventsOptions;
use futures::StreamExt;
use notify::event::ModifyKind;
use notify::{EventKind, RecursiveMode, Watcher};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior, interval, sleep, sleep_until};
use tracing::{debug, error, info, warn};

use crate::apply::{Interrupt, StopReason};
use crate::cli::WatchArgs;
use crate::docker::DockerBackend;
use crate::plan::{labels, render_text};
use crate::run::{self, Exit, write_stdout};
use crate::source::{self, Desired, Location, Revision, SourceError, SourceSpec};
use crate::world::World;

/// Why a reconcile starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// The first good desired state was read.
    Start,
    /// A new desired state differs from the last one (hash-wise).
    SourceChanged,
    /// Docker reported that a container of the pool died, stopped or went away.
    Drift,
    /// The periodic re-observation of the world.
    Resync,
    /// A failed reconcile's backoff ran out.
    Retry,
}

/// How a reconcile ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The plan was carried out (or was empty, or `--dry-run` printed it).
    Converged,
    /// A newer desired state stopped it at a step boundary.
    Superseded,
    /// A signal stopped it at a step boundary.
    Stopped,
    /// Observing, a preflight or a step failed; the world is as far as it got.
    Failed,
}

/// What the loop tells the state machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Trigger(Trigger),
    Finished(Outcome),
    /// SIGINT or SIGTERM.
    Signal,
}

/// What the loop should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Start a reconcile.
    Reconcile(Trigger),
    /// Ask the running reconcile to stop at its next step boundary; a reconcile towards the
    /// newest state follows when it has.
    Supersede,
    /// Nothing now (the event was absorbed or queued).
    Wait,
    /// Schedule a [`Trigger::Retry`] after this long.
    RetryAfter(Duration),
    /// Ask the running reconcile to stop at its next step boundary, then exit.
    StopRun,
    /// Print the pool state and exit 0.
    Exit,
    /// A second signal: exit at once.
    ExitNow,
}

/// Everything the decisions depend on: a handful of values, never a history.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct State {
    /// A reconcile is in flight.
    pub running: bool,
    /// What to reconcile for once the running one ends (triggers coalesce).
    pub pending: Option<Trigger>,
    /// Consecutive failed reconciles, for the backoff.
    pub failures: u32,
    /// Waiting out a backoff: drift and resync are absorbed, the retry re-observes anyway.
    pub backing_off: bool,
    /// A signal arrived: no new reconcile starts.
    pub stopping: bool,
}

/// The longest wait between retries.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Exponential backoff after `failures` consecutive failures: 1s, 2s, 4s... up to `cap`.
pub fn backoff(failures: u32, cap: Duration) -> Duration {
    let secs = 1u64 << failures.saturating_sub(1).min(16);
    Duration::from_secs(secs).min(cap)
}

/// The watcher's one step function: where it is, what happened -> where it is now, what to do.
pub fn next_action(mut state: State, event: Event) -> (State, Action) {
    let action = match event {
        Event::Signal if state.stopping => Action::ExitNow,
        Event::Signal => {
            state.stopping = true;
            if state.running { Action::StopRun } else { Action::Exit }
        }
        Event::Trigger(_) if state.stopping => Action::Wait,
        Event::Trigger(trigger) if state.running => {
            // A newer spec outranks whatever was queued; drift and resyncs coalesce into one.
            if trigger == Trigger::SourceChanged || state.pending.is_none() {
                state.pending = Some(trigger);
            }
            if trigger == Trigger::SourceChanged { Action::Supersede } else { Action::Wait }
        }
        Event::Trigger(Trigger::Drift | Trigger::Resync) if state.backing_off => Action::Wait,
        Event::Trigger(trigger) => {
            state.running = true;
            state.backing_off = false;
            Action::Reconcile(trigger)
        }
        Event::Finished(_) if state.stopping => {
            state.running = false;
            Action::Exit
        }
        Event::Finished(outcome) => {
            state.running = false;
            let pending = state.pending.take();
            match (outcome, pending) {
                (Outcome::Failed, Some(Trigger::SourceChanged)) => {
                    // A new spec may be exactly the fix: try it at once.
                    state.failures += 1;
                    state.running = true;
                    Action::Reconcile(Trigger::SourceChanged)
                }
                (Outcome::Failed, _) => {
                    state.failures += 1;
                    state.backing_off = true;
                    Action::RetryAfter(backoff(state.failures, MAX_BACKOFF))
                }
                (_, Some(trigger)) => {
                    state.failures = 0;
                    state.running = true;
                    Action::Reconcile(trigger)
                }
                (_, None) => {
                    state.failures = 0;
                    Action::Wait
                }
            }
        }
    };
    (state, action)
}

/// The settings of one watch.
#[derive(Debug, Clone, Copy)]
struct Config {
    interval: Duration,
    resync: Duration,
    dry_run: bool,
    options: crate::plan::PlanOptions,
}

/// The shortest interval accepted: a zero period would spin (and tokio refuses it).
const MIN_PERIOD: Duration = Duration::from_millis(100);

/// How long a directory must stay quiet before it is re-read: editors write in several steps.
const DIR_DEBOUNCE: Duration = Duration::from_millis(300);
/// Git writes a ref by renaming a lock file: one event, so a short settle is enough.
const GIT_DEBOUNCE: Duration = Duration::from_millis(100);
/// `docker rm -f` sends kill, die and destroy: let the burst end before observing.
const DRIFT_DEBOUNCE: Duration = Duration::from_millis(250);

/// What one look at the source found.
enum Checked {
    /// The same revision as last time.
    Unchanged,
    Loaded(Revision, Desired),
    /// The revision's pool files are invalid.
    Invalid(Revision, SourceError),
    /// The source could not be read or fetched at all.
    Unreachable(SourceError),
}

fn check_source(spec: &SourceSpec, seen: Option<&Revision>) -> Checked {
    let revision = match source::resolve(spec) {
        Ok(r) => r,
        Err(e) => return Checked::Unreachable(e),
    };
    if seen == Some(&revision) {
        return Checked::Unchanged;
    }
    match source::load(spec) {
        // The commit that was read, should the ref have moved since the resolve.
        Ok(d) => Checked::Loaded(d.origin.commit().map_or(revision, |c| Revision::Commit(c.to_owned())), d),
        Err(e @ SourceError::Spec(_)) => Checked::Invalid(revision, e),
        Err(e) => Checked::Unreachable(e),
    }
}

/// Whether two desired states ask for the same world: the pools and their template hashes,
/// not file bytes (a comment or a reformatting changes nothing) nor the commit.
fn same_spec(a: &Desired, b: &Desired) -> bool {
    a.pools.len() == b.pools.len()
        && a.pools.iter().zip(&b.pools).all(|(x, y)| x.template_hash == y.template_hash && x.pool == y.pool)
}

/// Run `poolctl watch` until a signal.
pub async fn watch_command(args: WatchArgs) -> Result<Exit> {
    let spec = run::source_spec(&args.source)?;
    let config = Config {
        interval: args.interval.get().max(MIN_PERIOD),
        resync: args.resync.get().max(MIN_PERIOD),
        dry_run: args.dry_run,
        options: args.planning.options(),
    };
    Loop::new(spec, config).run().await
}

/// What woke the loop up.
enum Wake {
    /// The source may have changed (notify or the fetch interval).
    Look,
    SourceRetry,
    Checked(Result<Checked, tokio::task::JoinError>),
    Drift(String),
    Retry,
    Finished(Result<Outcome, tokio::task::JoinError>),
    Event(Event),
}

/// The loop's I/O state; every decision is [`next_action`]'s.
struct Loop {
    spec: SourceSpec,
    config: Config,
    state: State,
    /// The last desired state that loaded without errors.
    good: Option<Arc<Desired>>,
    /// The last revision looked at, good or bad, so that a bad one is reported once.
    seen: Option<Revision>,
    check: Option<JoinHandle<Checked>>,
    recheck: bool,
    source_failures: u32,
    source_retry: Option<Instant>,
    retry: Option<Instant>,
    run: Option<(JoinHandle<Outcome>, Arc<Interrupt>)>,
    drift: Option<JoinHandle<()>>,
    drift_tx: mpsc::Sender<String>,
    drift_rx: mpsc::Receiver<String>,
    changed_rx: mpsc::Receiver<()>,
    /// Keeps the notify watcher alive.
    _files: Option<notify::RecommendedWatcher>,
}

impl Loop {
    fn new(spec: SourceSpec, config: Config) -> Self {
        let (changed_tx, changed_rx) = mpsc::channel(1);
        let (drift_tx, drift_rx) = mpsc::channel(1);
        let files = watch_files(&spec, changed_tx);
        Self {
            spec,
            config,
            state: State::default(),
            good: None,
            seen: None,
            check: None,
            recheck: false,
            source_failures: 0,
            source_retry: None,
            retry: None,
            run: None,
            drift: None,
            drift_tx,
            drift_rx,
            changed_rx,
            _files: files,
        }
    }

    async fn run(mut self) -> Result<Exit> {
        let mut sigterm = signal(SignalKind::terminate())?;
        let mut sigint = signal(SignalKind::interrupt())?;
        let mut fetch = interval(self.config.interval);
        let mut resync = interval(self.config.resync);
        for tick in [&mut fetch, &mut resync] {
            tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
            tick.reset(); // the first tick would fire at once; the start reads everything anyway
        }
        info!(
            "watching {} (fetch every {:?}, resync every {:?})",
            describe(&self.spec),
            self.config.interval,
            self.config.resync
        );
        self.request_check();

        loop {
            let wake = {
                let (check, run) = (&mut self.check, &mut self.run);
                let is_git = matches!(self.spec.location, Location::Git { .. });
                let (source_retry, retry) = (self.source_retry, self.retry);
                tokio::select! {
                    Some(()) = self.changed_rx.recv() => Wake::Look,
                    _ = fetch.tick(), if is_git => Wake::Look,
                    () = sleep_until(source_retry.unwrap_or_else(Instant::now)), if source_retry.is_some() => Wake::SourceRetry,
                    checked = async { check.as_mut().expect("guarded").await }, if check.is_some() => Wake::Checked(checked),
                    Some(what) = self.drift_rx.recv() => Wake::Drift(what),
                    _ = resync.tick() => Wake::Event(Event::Trigger(Trigger::Resync)),
                    () = sleep_until(retry.unwrap_or_else(Instant::now)), if retry.is_some() => Wake::Retry,
                    outcome = async { (&mut run.as_mut().expect("guarded").0).await }, if run.is_some() => Wake::Finished(outcome),
                    _ = sigterm.recv() => Wake::Event(Event::Signal),
                    _ = sigint.recv() => Wake::Event(Event::Signal),
                }
            };
            let Some(event) = self.on_wake(wake) else { continue };
            let (state, action) = next_action(self.state, event);
            self.state = state;
            debug!(?event, ?action, "watch step");
            match action {
                Action::Wait => {}
                Action::Reconcile(trigger) => self.start_reconcile(trigger),
                Action::Supersede => {
                    info!("a newer desired state arrived: stopping the rollout at the next step boundary");
                    if let Some((_, interrupt)) = &self.run {
                        interrupt.stop(StopReason::Superseded);
                    }
                }
                Action::RetryAfter(after) => {
                    warn!("backing off: retrying in {}s", after.as_secs());
                    self.retry = Some(Instant::now() + after);
                }
                Action::StopRun => {
                    info!("signal: stopping at the next step boundary (signal again to exit at once)");
                    if let Some((_, interrupt)) = &self.run {
                        interrupt.trigger();
                    }
                }
                Action::Exit => {
                    info!("signal: stopping");
                    self.print_pool_state().await;
                    return Ok(Exit::Success);
                }
                Action::ExitNow => {
                    warn!("second signal: exiting at once; a later apply or watch resumes from the world");
                    std::process::exit(130);
                }
            }
        }
    }

    /// The loop's own bookkeeping for a wake-up, and the event it means to the state machine,
    /// if any.
    fn on_wake(&mut self, wake: Wake) -> Option<Event> {
        match wake {
            Wake::Look => {
                self.request_check();
                None
            }
            Wake::SourceRetry => {
                self.source_retry = None;
                self.request_check();
                None
            }
            Wake::Checked(checked) => {
                self.check = None;
                let event = match checked {
                    Ok(checked) => self.on_checked(checked),
                    Err(e) => {
                        error!("source check failed: {e}");
                        None
                    }
                };
                if std::mem::take(&mut self.recheck) {
                    self.request_check();
                }
                event
            }
            Wake::Drift(what) => {
                if self.state.running {
                    debug!("drift seen during a reconcile: {what}");
                } else {
                    info!("drift seen: {what}");
                }
                Some(Event::Trigger(Trigger::Drift))
            }
            Wake::Retry => {
                self.retry = None;
                Some(Event::Trigger(Trigger::Retry))
            }
            Wake::Finished(outcome) => {
                self.run = None;
                Some(Event::Finished(outcome.unwrap_or_else(|e| {
                    error!("reconcile failed: {e}");
                    Outcome::Failed
                })))
            }
            Wake::Event(event) => Some(event),
        }
    }

    /// Look at the source (in a blocking task: git2 and the file system block), unless a look
    /// is already under way, in which case look again once it ends.
    fn request_check(&mut self) {
        if self.check.is_some() {
            self.recheck = true;
            return;
        }
        let spec = self.spec.clone();
        let seen = self.seen.clone();
        self.check = Some(tokio::task::spawn_blocking(move || check_source(&spec, seen.as_ref())));
    }

    fn on_checked(&mut self, checked: Checked) -> Option<Event> {
        match checked {
            Checked::Unchanged => {
                self.source_failures = 0;
                None
            }
            Checked::Loaded(revision, desired) => {
                self.source_failures = 0;
                self.seen = Some(revision);
                let trigger = match &self.good {
                    None => {
                        info!("source read: {}", desired.origin);
                        self.start_drift_events(&desired);
                        Some(Trigger::Start)
                    }
                    Some(good) if same_spec(good, &desired) => {
                        info!("source changed ({}), the pools are the same: nothing to do", desired.origin);
                        None
                    }
                    Some(_) => {
                        info!("source changed: {}", desired.origin);
                        Some(Trigger::SourceChanged)
                    }
                };
                // Kept even when equal, so that new containers name the newest commit.
                self.good = Some(Arc::new(desired));
                trigger.map(Event::Trigger)
            }
            Checked::Invalid(revision, e) => {
                self.source_failures = 0;
                self.seen = Some(revision);
                let keeping =
                    if self.good.is_some() { "keeping the last good state" } else { "nothing to apply yet" };
                error!("the source has errors; the world is left as it is ({keeping}):\n{e:#}");
                None
            }
            Checked::Unreachable(e) => {
                self.source_failures += 1;
                let after = backoff(self.source_failures, self.config.interval.max(Duration::from_secs(1)));
                warn!(
                    "cannot read the source: {:#}; keeping the last good state; backing off, retrying in {}s",
                    anyhow::Error::from(e),
                    after.as_secs()
                );
                self.source_retry = Some(Instant::now() + after);
                None
            }
        }
    }

    fn start_reconcile(&mut self, trigger: Trigger) {
        let Some(desired) = self.good.clone() else {
            // Nothing good was ever read: there is no desired state to reconcile towards.
            self.state.running = false;
            return;
        };
        // A reconcile that starts now does what a pending retry would have done.
        self.retry = None;
        let interrupt = Arc::new(Interrupt::default());
        let task = tokio::spawn(reconcile(desired, trigger, self.config, Arc::clone(&interrupt)));
        self.run = Some((task, interrupt));
    }

    /// Follow Docker's events for the containers of this source (their scope label), from a task
    /// that re-subscribes with backoff whenever the daemon goes away.
    fn start_drift_events(&mut self, desired: &Desired) {
        if self.drift.is_none() {
            self.drift = Some(tokio::spawn(drift_events(desired.origin.scope(), self.drift_tx.clone())));
        }
    }

    /// What the pools look like now, for the last words.
    async fn print_pool_state(&self) {
        let Some(desired) = &self.good else {
            let _ = write_stdout(|out| writeln!(out, "Stopped: no good desired state was ever read."));
            return;
        };
        // Docker alone: the summary counts containers, and a cluster may be what went away.
        let no_clusters = BTreeMap::<String, crate::kube::KubeCluster>::new();
        let world = match DockerBackend::connect().await {
            Ok(docker) => run::observe(&docker, &no_clusters).await,
            Err(e) => Err(e),
        };
        let world = match world {
            Ok(world) => world,
            Err(e) => {
                warn!("cannot observe the pools: {e}");
                return;
            }
        };
        let _ = write_stdout(|out| write_pool_state(desired, &world, out));
    }
}

/// One line per declared pool: how many instances exist, run, and run the current template.
fn write_pool_state(desired: &Desired, world: &World, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(out, "Stopped. Pool state ({}):", desired.origin)?;
    for pool in &desired.pools {
        let mine: Vec<_> = world.containers.iter().filter(|c| c.pool == pool.name()).collect();
        let up = mine.iter().filter(|c| c.is_up()).count();
        let current = mine.iter().filter(|c| c.template_hash == pool.template_hash).count();
        let replicas = usize::try_from(pool.pool.spec.replicas).ok();
        let state = if replicas == Some(up) && current == mine.len() && up == mine.len() {
            "in sync"
        } else {
            "not in sync (a later apply or watch continues)"
        };
        writeln!(
            out,
            "  {}: {} of {} replicas up, {} instances, {} on template {}: {state}",
            pool.name(),
            up,
            pool.pool.spec.replicas,
            mine.len(),
            current,
            pool.template_hash
        )?;
    }
    Ok(())
}

/// One reconcile: observe, plan, print, apply. Runs as its own task so that the loop keeps
/// listening; `interrupt` stops it between steps.
async fn reconcile(
    desired: Arc<Desired>,
    trigger: Trigger,
    config: Config,
    interrupt: Arc<Interrupt>,
) -> Outcome {
    let docker = match DockerBackend::connect().await {
        Ok(d) => d,
        Err(e) => {
            error!("{e}");
            return Outcome::Failed;
        }
    };
    let (clusters, plan) = match run::observe_and_plan(&desired, &docker, config.options.reseeded()).await {
        Ok(planned) => planned,
        Err(e) => {
            error!("{e:#}");
            return Outcome::Failed;
        }
    };
    let s = plan.summary;
    if !plan.has_changes() {
        if matches!(trigger, Trigger::Start | Trigger::SourceChanged) {
            let _ = write_stdout(|out| render_text(&plan, out));
        }
        info!("plan ({trigger:?}): in sync, {} unchanged", s.unchanged);
        return Outcome::Converged;
    }
    info!("plan ({trigger:?}): {} to create, {} to retire, {} unchanged", s.create, s.retire, s.unchanged);
    let _ = write_stdout(|out| render_text(&plan, out));
    if config.dry_run {
        return Outcome::Converged;
    }
    let report = match run::execute(&desired, &docker, &clusters, &plan, config.options, &interrupt).await {
        Ok(r) => r,
        Err(e) => {
            error!("{e:#}");
            return Outcome::Failed;
        }
    };
    let _ = write_stdout(|out| report.write_summary(out));
    match report.stop_reason {
        _ if report.complete() => Outcome::Converged,
        Some(StopReason::Superseded) if report.failure().is_none() => Outcome::Superseded,
        Some(StopReason::Signal) if report.failure().is_none() => Outcome::Stopped,
        _ => {
            if let Some(f) = report.failure() {
                error!(
                    "step {} {} failed: {}",
                    f.verb,
                    f.instance,
                    f.error.as_ref().map_or_else(String::new, ToString::to_string)
                );
            }
            Outcome::Failed
        }
    }
}

/// Forward Docker's die/stop/destroy events of this source's containers, debounced, as
/// one-line descriptions; re-subscribe with backoff when the daemon goes away.
async fn drift_events(scope: String, tx: mpsc::Sender<String>) {
    let mut failures = 0;
    loop {
        match subscribe(&scope, &tx).await {
            Ok(()) => failures = 0,
            Err(e) => {
                failures += 1;
                let after = backoff(failures, MAX_BACKOFF);
                warn!("Docker events: {e}; backing off, re-subscribing in {}s", after.as_secs());
                sleep(after).await;
            }
        }
        if tx.is_closed() {
            return;
        }
    }
}

async fn subscribe(scope: &str, tx: &mpsc::Sender<String>) -> Result<(), String> {
    let docker = DockerBackend::connect().await.map_err(|e| e.to_string())?;
    let filters = [
        ("type", vec!["container".to_owned()]),
        ("event", vec!["die".to_owned(), "stop".to_owned(), "destroy".to_owned()]),
        ("label", vec![format!("{}={scope}", labels::SCOPE)]),
    ];
    let options = EventsOptions {
        filters: Some(filters.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()),
        ..Default::default()
    };
    let mut events = docker.client().events(Some(options));
    debug!("following Docker events of {scope}");
    while let Some(event) = events.next().await {
        let event = event.map_err(|e| format!("the event stream failed: {e}"))?;
        let name = event
            .actor
            .as_ref()
            .and_then(|a| a.attributes.as_ref())
            .and_then(|a| a.get("name"))
            .cloned()
            .unwrap_or_default();
        let what = format!("container {name} {}", event.action.unwrap_or_default());
        // Let the burst end: the loop observes once for all of it.
        let mut more = 0;
        while let Ok(Some(Ok(_))) = tokio::time::timeout(DRIFT_DEBOUNCE, events.next()).await {
            more += 1;
        }
        let what = if more == 0 { what } else { format!("{what} (+{more} more events)") };
        if tx.send(what).await.is_err() {
            return Ok(());
        }
    }
    Err("the daemon closed the event stream".into())
}

fn describe(spec: &SourceSpec) -> String {
    match &spec.location {
        Location::Path { .. } => spec.local_path().map_or_else(String::new, |p| p.display().to_string()),
        Location::Git { url, reference, path, .. } => {
            format!(
                "{url} @ {}{}",
                reference.as_deref().unwrap_or("HEAD"),
                if path.is_empty() { String::new() } else { format!(" path {path}") }
            )
        }
    }
}

/// Watch what can change a source on this machine: the directory (or file) of a path source,
/// or the refs of a local Git repository. Events are debounced here; the loop only hears "look
/// again". Without notify (e.g. no inotify left) the source is still fetched on the interval.
fn watch_files(spec: &SourceSpec, tx: mpsc::Sender<()>) -> Option<notify::RecommendedWatcher> {
    let (paths, debounce): (Vec<(PathBuf, RecursiveMode)>, Duration) = match &spec.location {
        Location::Path { .. } => {
            let path = spec.local_path()?;
            // A file is watched through its directory: editors that save by writing a new file
            // and renaming it over the old one would leave a watch on the file itself blind
            // after the first save. A look at an unchanged spec costs one read and changes
            // nothing.
            let watched = if path.is_file() {
                (path.parent()?.to_path_buf(), RecursiveMode::NonRecursive)
            } else {
                (path, RecursiveMode::Recursive)
            };
            (vec![watched], DIR_DEBOUNCE)
        }
        Location::Git { url, .. } => {
            let local = url.strip_prefix("file://").unwrap_or(url);
            if !local.starts_with('/') {
                return None;
            }
            let repo = git2::Repository::open(local).ok()?;
            let git_dir = repo.path().to_path_buf();
            // HEAD and packed-refs sit in the git dir itself; branches and tags below refs/.
            (
                vec![
                    (git_dir.clone(), RecursiveMode::NonRecursive),
                    (git_dir.join("refs"), RecursiveMode::Recursive),
                ],
                GIT_DEBOUNCE,
            )
        }
    };
    let (raw_tx, mut raw_rx) = mpsc::unbounded_channel::<()>();
    let mut watcher = match notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok_and(|e| changes_content(e.kind) && e.paths.iter().any(|p| relevant(p))) {
            let _ = raw_tx.send(());
        }
    }) {
        Ok(w) => w,
        Err(e) => {
            warn!("cannot watch the source for changes ({e}); relying on the fetch interval");
            return None;
        }
    };
    for (path, mode) in &paths {
        if let Err(e) = watcher.watch(path, *mode) {
            warn!("cannot watch {} for changes ({e}); relying on the fetch interval", path.display());
        }
    }
    tokio::spawn(async move {
        while raw_rx.recv().await.is_some() {
            // Quiet for `debounce` since the last event: then look once.
            while let Ok(Some(())) = tokio::time::timeout(debounce, raw_rx.recv()).await {}
            // A full channel already holds a "look again".
            let _ = tx.try_send(());
        }
    });
    Some(watcher)
}

/// Whether an event can change what a file says. Reads are not: our own fetch opens the
/// watched refs, and counting that as a change would fetch in a loop.
fn changes_content(kind: EventKind) -> bool {
    match kind {
        EventKind::Access(_) | EventKind::Modify(ModifyKind::Metadata(_)) => false,
        EventKind::Any
        | EventKind::Create(_)
        | EventKind::Modify(_)
        | EventKind::Remove(_)
        | EventKind::Other => true,
    }
}

/// Whether a changed path can change the source: not Git's index, logs or lock files, nor
/// hidden editor files in a directory source.
// Git names its lock files `*.lock` in lower case; this is a name pattern, not a file type.
#[allow(clippy::case_sensitive_file_extension_comparisons)]
fn relevant(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    !(name == "index"
        || name.ends_with(".lock")
        || name.starts_with(".#")
        || name.ends_with('~')
        || path.components().any(|c| c.as_os_str() == "logs" || c.as_os_str() == "objects"))
}

#[cfg(test)]
mod tests {
    use notify::event::{AccessKind, MetadataKind};

    use super::*;

    fn step(state: State, event: Event) -> (State, Action) {
        next_action(state, event)
    }

    #[test]
    fn start_reconciles_once_at_a_time_and_coalesces_drift() {
        let (s, a) = step(State::default(), Event::Trigger(Trigger::Start));
        assert_eq!(a, Action::Reconcile(Trigger::Start));
        let (s, a) = step(s, Event::Trigger(Trigger::Drift));
        assert_eq!(a, Action::Wait);
        let (s, a) = step(s, Event::Trigger(Trigger::Resync));
        assert_eq!(a, Action::Wait);
        assert_eq!(s.pending, Some(Trigger::Drift));
        let (s, a) = step(s, Event::Finished(Outcome::Converged));
        assert_eq!(a, Action::Reconcile(Trigger::Drift), "one more look for everything that came in");
        let (s, a) = step(s, Event::Finished(Outcome::Converged));
        assert_eq!(a, Action::Wait);
        assert_eq!(s, State::default());
    }

    #[test]
    fn a_new_spec_during_a_rollout_supersedes_it_and_is_planned_next() {
        let (s, _) = step(State::default(), Event::Trigger(Trigger::Start));
        let (s, a) = step(s, Event::Trigger(Trigger::Drift));
        assert_eq!(a, Action::Wait);
        let (s, a) = step(s, Event::Trigger(Trigger::SourceChanged));
        assert_eq!(a, Action::Supersede);
        let (s, a) = step(s, Event::Trigger(Trigger::Drift));
        assert_eq!(a, Action::Wait);
        assert_eq!(s.pending, Some(Trigger::SourceChanged), "the newer spec is not downgraded to a drift");
        let (s, a) = step(s, Event::Finished(Outcome::Superseded));
        assert_eq!(a, Action::Reconcile(Trigger::SourceChanged));
        assert!(s.running);
    }

    #[test]
    fn failures_back_off_exponentially_and_a_new_spec_skips_the_wait() {
        let (s, _) = step(State::default(), Event::Trigger(Trigger::Start));
        let (s, a) = step(s, Event::Finished(Outcome::Failed));
        assert_eq!(a, Action::RetryAfter(Duration::from_secs(1)));
        let (s, a) = step(s, Event::Trigger(Trigger::Resync));
        assert_eq!(a, Action::Wait, "the retry re-observes anyway");
        let (s, a) = step(s, Event::Trigger(Trigger::Retry));
        assert_eq!(a, Action::Reconcile(Trigger::Retry));
        let (s, a) = step(s, Event::Finished(Outcome::Failed));
        assert_eq!(a, Action::RetryAfter(Duration::from_secs(2)));
        let (s, a) = step(s, Event::Trigger(Trigger::SourceChanged));
        assert_eq!(a, Action::Reconcile(Trigger::SourceChanged));
        let (s, a) = step(s, Event::Finished(Outcome::Converged));
        assert_eq!(a, Action::Wait);
        assert_eq!(s.failures, 0);

        // A new spec queued behind a failing run is tried at once, not after a backoff.
        let (s, _) = step(State::default(), Event::Trigger(Trigger::Start));
        let (s, _) = step(s, Event::Trigger(Trigger::SourceChanged));
        let (_, a) = step(s, Event::Finished(Outcome::Failed));
        assert_eq!(a, Action::Reconcile(Trigger::SourceChanged));
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let secs: Vec<u64> = (1..=8).map(|n| backoff(n, MAX_BACKOFF).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(backoff(1000, MAX_BACKOFF), MAX_BACKOFF);
        assert_eq!(backoff(5, Duration::from_secs(3)), Duration::from_secs(3));
    }

    #[test]
    fn a_signal_stops_the_run_at_a_boundary_then_exits_and_a_second_exits_at_once() {
        let (s, a) = step(State::default(), Event::Signal);
        assert_eq!(a, Action::Exit, "idle: nothing to wait for");
        assert_eq!(step(s, Event::Signal).1, Action::ExitNow);

        let (s, _) = step(State::default(), Event::Trigger(Trigger::Start));
        let (s, a) = step(s, Event::Signal);
        assert_eq!(a, Action::StopRun);
        let (s, a) = step(s, Event::Trigger(Trigger::SourceChanged));
        assert_eq!(a, Action::Wait, "nothing new starts once stopping");
        assert_eq!(step(s, Event::Finished(Outcome::Stopped)).1, Action::Exit);
        assert_eq!(step(s, Event::Signal).1, Action::ExitNow);
    }

    #[test]
    fn reads_and_metadata_are_not_changes() {
        assert!(!changes_content(EventKind::Access(AccessKind::Any)));
        assert!(!changes_content(EventKind::Modify(ModifyKind::Metadata(MetadataKind::AccessTime))));
        assert!(changes_content(EventKind::Modify(ModifyKind::Any)));
        assert!(changes_content(EventKind::Create(notify::event::CreateKind::File)));
    }

    #[test]
    fn git_housekeeping_files_are_not_changes() {
        assert!(relevant(Path::new("/r/.git/refs/heads/main")));
        assert!(relevant(Path::new("/r/.git/packed-refs")));
        assert!(relevant(Path::new("/d/pools/a.yaml")));
        assert!(!relevant(Path::new("/r/.git/index")));
        assert!(!relevant(Path::new("/r/.git/refs/heads/main.lock")));
        assert!(!relevant(Path::new("/r/.git/logs/HEAD")));
        assert!(!relevant(Path::new("/d/.#a.yaml")));
    }
}
