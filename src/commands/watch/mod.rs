//! `poolctl watch`: continuous reconciliation of a directory or Git source, with drift
//! correction.
//!
//! Shaped like kube-runtime's watcher: every decision lives in a small pure state machine
//! ([`machine`]) that returns a decision instead of doing anything; [`watch_command`] is a thin
//! loop that turns its inputs (source looks and notify events from [`inputs`], Docker events,
//! timers, signals) into events and carries the decisions out. One reconcile ([`reconcile`])
//! runs at a time, as a spawned task; a newer desired state stops it at the next step boundary
//! and the loop re-plans from the world at once, so a retirement cut short is simply resumed
//! by the next plan.
//!
//! Nothing accumulates across reconciles: the loop keeps the last good desired state, the last
//! seen source revision, a few counters and its clients (Docker, and each cluster with the
//! watch-backed lists of its pool), so memory stays flat over a long run.

mod inputs;
mod machine;
mod reconcile;

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior, interval, sleep_until};
use tracing::{debug, error, info, warn};

use super::common::{source_failure, source_spec, write_stdout};
use super::exit::{EXIT_INTERRUPTED, Exit};
use crate::backend::docker::{
    DockerBackend, DockerEnv, EndpointsError, connect_endpoints, drift_events, resolve_endpoints,
};
use crate::backend::endpoints::Endpoints;
use crate::backend::kube::{KeptConnect, KubeCluster};
use crate::cli::WatchArgs;
use crate::execute::{Interrupt, StopReason};
use crate::model::{Desired, World};
use crate::observe::observe_again;
use crate::source::{Location, Revision, SourceError, SourceSpec};
use inputs::{Checked, check_source, source_label, watch_files};
use machine::{Decision, Ended, Event, SourceNews, State, Trigger, next_action};
use reconcile::Reconcile;

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

/// Whether two desired states ask for the same world: the pools and their template hashes,
/// not file bytes (a comment or a reformatting changes nothing) nor the commit.
fn same_spec(a: &Desired, b: &Desired) -> bool {
    a.pools.len() == b.pools.len()
        && a.pools.iter().zip(&b.pools).all(|(x, y)| x.template_hash == y.template_hash && x.pool == y.pool)
}

/// Run `poolctl watch` until a signal.
pub(super) async fn watch_command(args: WatchArgs) -> Result<Exit> {
    let spec = source_spec(&args.source)?;
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
    Checked(Result<Checked, tokio::task::JoinError>),
    Drift(String),
    Retry,
    Finished(Result<Ended, tokio::task::JoinError>),
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
    /// When to look at an unreadable source again.
    look_again: Option<Instant>,
    /// Why the last look at the source failed, until it is reported (or watch fails with it).
    problem: Option<SourceError>,
    retry: Option<Instant>,
    run: Option<(JoinHandle<Ended>, Arc<Interrupt>)>,
    /// Docker and cluster clients, kept from one reconcile to the next.
    clients: Arc<Clients>,
    /// The Docker event streams followed, by endpoint address: one per endpoint of the pools.
    drift: BTreeMap<String, JoinHandle<()>>,
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
        let state = State { source_cap: config.interval.max(Duration::from_secs(1)), ..State::default() };
        Self {
            spec,
            config,
            state,
            good: None,
            seen: None,
            check: None,
            recheck: false,
            look_again: None,
            problem: None,
            retry: None,
            run: None,
            clients: Arc::default(),
            drift: BTreeMap::new(),
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
            source_label(&self.spec),
            self.config.interval,
            self.config.resync
        );
        self.request_check();

        loop {
            let wake = {
                let (check, run) = (&mut self.check, &mut self.run);
                let is_git = matches!(self.spec.location, Location::Git { .. });
                let (look_again, retry) = (self.look_again, self.retry);
                tokio::select! {
                    Some(()) = self.changed_rx.recv() => Wake::Look,
                    _ = fetch.tick(), if is_git => Wake::Look,
                    () = sleep_until(look_again.unwrap_or_else(Instant::now)), if look_again.is_some() => Wake::Look,
                    checked = async { check.as_mut().expect("guarded").await }, if check.is_some() => Wake::Checked(checked),
                    Some(what) = self.drift_rx.recv() => Wake::Drift(what),
                    _ = resync.tick() => Wake::Event(Event::Trigger(Trigger::Resync)),
                    () = sleep_until(retry.unwrap_or_else(Instant::now)), if retry.is_some() => Wake::Retry,
                    ended = async { (&mut run.as_mut().expect("guarded").0).await }, if run.is_some() => Wake::Finished(ended),
                    _ = sigterm.recv() => Wake::Event(Event::Signal),
                    _ = sigint.recv() => Wake::Event(Event::Signal),
                }
            };
            let Some(event) = self.on_wake(wake) else { continue };
            let (state, decision) = next_action(self.state, event);
            self.state = state;
            debug!(?event, ?decision, "watch step");
            if event == Event::Source(SourceNews::Invalid)
                && decision != Decision::Fail
                && let Some(e) = self.problem.take()
            {
                error!(
                    "the source has errors; the world is left as it is (keeping the last good state):\n{e:#}"
                );
            }
            match decision {
                Decision::Wait => {}
                Decision::Reconcile(trigger) => self.start_reconcile(trigger),
                Decision::Supersede => {
                    info!("a newer desired state arrived: stopping the rollout at the next step boundary");
                    if let Some((_, interrupt)) = &self.run {
                        interrupt.stop(StopReason::Superseded);
                    }
                }
                Decision::RetryAfter(after) => {
                    warn!("backing off: retrying in {}s", after.as_secs());
                    self.retry = Some(Instant::now() + after);
                }
                Decision::LookAgainAfter(after) => {
                    let why = self
                        .problem
                        .take()
                        .map(|e| format!("{:#}", anyhow::Error::from(e)))
                        .unwrap_or_default();
                    warn!(
                        "cannot read the source: {why}; keeping the last good state; backing off, retrying in {}s",
                        after.as_secs()
                    );
                    self.look_again = Some(Instant::now() + after);
                }
                Decision::StopRun => {
                    info!("signal: stopping at the next step boundary (signal again to exit at once)");
                    if let Some((_, interrupt)) = &self.run {
                        interrupt.trigger();
                    }
                }
                Decision::Exit => {
                    info!("signal: stopping");
                    self.print_pool_state().await;
                    return Ok(Exit::Success);
                }
                Decision::Fail => {
                    let e = self.problem.take().map_or_else(
                        || anyhow::anyhow!("the source could not be read"),
                        |e| source_failure(&source_label(&self.spec), e),
                    );
                    return Err(e.context("watch cannot start: no good desired state was read"));
                }
                Decision::ExitNow => {
                    warn!("second signal: exiting at once; a later apply or watch resumes from the world");
                    std::process::exit(EXIT_INTERRUPTED);
                }
            }
        }
    }

    /// The loop's own bookkeeping for a wake-up, and the event it means to the state machine,
    /// if any.
    fn on_wake(&mut self, wake: Wake) -> Option<Event> {
        match wake {
            Wake::Look => {
                self.look_again = None;
                self.request_check();
                None
            }
            Wake::Checked(checked) => {
                self.check = None;
                let event = match checked {
                    Ok(checked) => Some(Event::Source(self.on_checked(checked))),
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
            Wake::Finished(ended) => {
                self.run = None;
                Some(Event::Finished(ended.unwrap_or_else(|e| {
                    error!("reconcile failed: {e}");
                    Ended::Failed
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

    /// Keep what the look found and report it; the state machine decides what it means.
    fn on_checked(&mut self, checked: Checked) -> SourceNews {
        match checked {
            Checked::Unchanged => SourceNews::Unchanged,
            Checked::Loaded(revision, desired) => {
                self.seen = Some(revision);
                self.follow_drift_events(&desired);
                let news = match &self.good {
                    None => {
                        info!("source read: {}", desired.origin);
                        SourceNews::Changed
                    }
                    Some(good) if same_spec(good, &desired) => {
                        info!("source changed ({}), the pools are the same: nothing to do", desired.origin);
                        SourceNews::Unchanged
                    }
                    Some(_) => {
                        info!("source changed: {}", desired.origin);
                        SourceNews::Changed
                    }
                };
                // Kept even when equal, so that new containers name the newest commit.
                self.good = Some(Arc::new(desired));
                news
            }
            // Reported as the state machine decides: kept past, or the reason watch ends.
            Checked::Invalid(revision, e) => {
                self.seen = Some(revision);
                self.problem = Some(e);
                SourceNews::Invalid
            }
            Checked::Unreachable(e) => {
                self.problem = Some(e);
                SourceNews::Unreachable
            }
        }
    }

    fn start_reconcile(&mut self, trigger: Trigger) {
        let desired =
            self.good.clone().expect("the state machine reconciles only once a good state was read");
        // A reconcile that starts now does what a pending retry would have done.
        self.retry = None;
        let interrupt = Arc::new(Interrupt::default());
        let clients = Arc::clone(&self.clients);
        let task = tokio::spawn(reconcile(desired, trigger, self.config, Arc::clone(&interrupt), clients));
        self.run = Some((task, interrupt));
    }

    /// Follow Docker's events for the containers of this source (their scope label) on every
    /// endpoint its pools live on, each from a task that re-subscribes with backoff whenever the
    /// daemon goes away; stop following an endpoint no pool lives on any more.
    fn follow_drift_events(&mut self, desired: &Desired) {
        let endpoints = match resolve_endpoints(desired, &DockerEnv::from_process()) {
            Ok((endpoints, _)) => endpoints,
            // The reconcile reports it, with the rest of what is wrong.
            Err(e) => {
                debug!("not following Docker events: {e}");
                return;
            }
        };
        self.drift.retain(|host, task| {
            let keep = endpoints.iter().any(|e| &e.host == host);
            if !keep {
                task.abort();
            }
            keep
        });
        for endpoint in endpoints {
            if !self.drift.contains_key(&endpoint.host) {
                let host = endpoint.host.clone();
                let task = drift_events(endpoint, desired.origin.scope(), self.drift_tx.clone());
                self.drift.insert(host, tokio::spawn(task));
            }
        }
    }

    /// What the pools look like now, for the last words.
    async fn print_pool_state(&self) {
        let Some(desired) = &self.good else {
            let _ = write_stdout(|out| writeln!(out, "Stopped: no good desired state was ever read."));
            return;
        };
        // Docker alone: the summary counts containers, and a cluster may be what went away.
        let no_clusters = BTreeMap::<String, KubeCluster>::new();
        let world = match connect_endpoints(desired, &DockerEnv::from_process()).await {
            Ok(docker) => observe_again(&docker, &no_clusters).await.map_err(anyhow::Error::from),
            Err(e) => Err(anyhow::Error::from(e)),
        };
        let world = match world {
            Ok(world) => world,
            Err(e) => {
                warn!("cannot observe the pools: {e:#}");
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

/// The clients a watch keeps for its whole life: the Docker endpoints of the pools, and each
/// pool's cluster with its watch-backed lists. A failed reconcile drops them all, so the next
/// one connects afresh; a desired state whose pools name other endpoints connects again.
#[derive(Default)]
struct Clients {
    /// The endpoints as resolved (the key), and their connections.
    docker: Mutex<Option<(String, Arc<Endpoints<DockerBackend>>)>>,
    clusters: KeptConnect,
}

impl Clients {
    async fn docker(&self, desired: &Desired) -> Result<Arc<Endpoints<DockerBackend>>, EndpointsError> {
        let env = DockerEnv::from_process();
        let key = format!("{:?}", resolve_endpoints(desired, &env)?);
        let kept = self.docker.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        if let Some((kept_key, docker)) = kept
            && kept_key == key
        {
            return Ok(docker);
        }
        let docker = Arc::new(connect_endpoints(desired, &env).await?);
        *self.docker.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some((key, Arc::clone(&docker)));
        Ok(docker)
    }

    fn forget(&self) {
        *self.docker.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
        self.clusters.forget();
    }
}

/// One reconcile as a task of its own, so that the loop keeps listening: [`Reconcile::run`]
/// over the kept clients, with stdout for output.
async fn reconcile(
    desired: Arc<Desired>,
    trigger: Trigger,
    config: Config,
    interrupt: Arc<Interrupt>,
    clients: Arc<Clients>,
) -> Ended {
    let docker = match clients.docker(&desired).await {
        Ok(d) => d,
        Err(e) => {
            error!("{:#}", anyhow::Error::from(e));
            return Ended::Failed;
        }
    };
    let out: Mutex<Box<dyn Write + Send>> = Mutex::new(Box::new(io::stdout()));
    let reconcile = Reconcile {
        containers: &*docker,
        connect: &clients.clusters,
        options: config.options,
        dry_run: config.dry_run,
        out: &out,
    };
    let ended = reconcile.run(&desired, trigger, &interrupt).await;
    if ended == Ended::Failed {
        clients.forget();
    }
    ended
}
