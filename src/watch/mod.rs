//! `poolctl watch` as a library: continuous reconciliation of a directory or Git source, with
//! drift correction.
//!
//! Shaped like kube-runtime's controller: every decision and every timer lives in a small state
//! machine ([`machine`]) that returns decisions instead of doing anything; [`run`] is a thin
//! loop that turns its inputs (source looks and notify events from [`inputs`], Docker events,
//! the reconcile requests on the node pools' Leases, the machine's next wake-up, signals) into
//! events and carries the decisions out. Each pool
//! is reconciled ([`reconcile`]) in a lane of its own, as a spawned task, so that a long
//! rollout of one pool never holds up another's (the first reconcile covers the whole source);
//! a newer desired state of a pool stops its reconcile at the next step boundary and the loop
//! re-plans it from the world at once, so a retirement cut short is simply resumed by the next
//! plan. The rollouts share the drain turns: a cluster's drains still go one Node at a time.
//!
//! Nothing accumulates across reconciles: the loop keeps the last good desired state, the last
//! seen source revision, a few counters and its clients (Docker, and each cluster with the
//! watch-backed lists of its pool), so memory stays flat over a long run.

mod inputs;
mod machine;
mod reconcile;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::{Instant, sleep_until};
use tracing::{debug, error, info, warn};

use crate::backend::{Clusters, Connections, ContainerNews, Containers, DockerEndpoints, Events};
use crate::config::WatchConfig;
use crate::model::{Desired, World};
use crate::plan::PlanOptions;
use crate::report::{Notifier, Probes, Receiver, source_failure, write_stdout};
use crate::rollout::cancel::{EXIT_INTERRUPTED, Interrupt, Signals, StopReason};
use crate::rollout::execute::DrainTurns;
use crate::rollout::lock::LockSettings;
use crate::source::{Location, Revision, SourceError, SourceSpec};
use inputs::{Checked, check_source, source_label, watch_files};
use machine::{Decision, Ended, Event, Findings, Lane, Machine, Periods, SourceNews, Trigger, fingerprints};
use reconcile::{Acting, HealthLog, Reconcile};

/// Watch `config`'s source until a signal, telling `probes` how the loop is and `notifier` of
/// every rollout. Ends `Ok` after a signal, and with an error only when no good desired state
/// was ever read.
/// A receiver's news of a push comes in on `pushes`.
pub async fn run(
    config: WatchConfig,
    probes: Arc<Probes>,
    notifier: Option<Notifier>,
    pushes: mpsc::Receiver<Receiver>,
) -> Result<()> {
    // One for the whole watch: what a standby saw of another replica's locks carries over from
    // one reconcile to the next (see `crate::rollout::lock`).
    // A replica that finds a pool locked stands by: the holder acts on it.
    let locks = Arc::new(LockSettings { standby: true, ..LockSettings::new("watch", Duration::ZERO)? });
    Loop::new(config, probes, notifier, locks, pushes).run().await
}

/// How many lines of a broken source's errors `/readyz` answers with.
const PROBE_LINES: usize = 6;

/// The loop's I/O state; every decision and timer is the [`Machine`]'s.
struct Loop {
    spec: SourceSpec,
    machine: Machine,
    /// The last desired state that loaded without errors.
    good: Option<Arc<Desired>>,
    /// The last revision looked at, good or bad, so that a bad one is reported once.
    seen: Option<Revision>,
    check: Option<JoinHandle<Checked>>,
    /// What every reconcile shares with the loop.
    shared: Shared,
    /// The reconciles in flight, one per lane at most, and how to stop each.
    runs: JoinSet<(Lane, Ended)>,
    interrupts: BTreeMap<Lane, Arc<Interrupt>>,
    /// The lane of each task, for a task that panicked.
    lanes: HashMap<tokio::task::Id, Lane>,
    /// The resync's survey of every pool, under way.
    survey: Option<JoinHandle<Option<Findings>>>,
    /// The Docker event streams followed, by endpoint address: one per endpoint of the pools.
    drift: BTreeMap<String, JoinHandle<()>>,
    drift_tx: mpsc::Sender<ContainerNews>,
    drift_rx: mpsc::Receiver<ContainerNews>,
    /// The Leases followed for reconcile requests (`poolctl reconcile`), one per node pool, by
    /// pool and cluster; what they hear comes in with Docker's news.
    requests: BTreeMap<String, JoinHandle<()>>,
    changed_rx: mpsc::Receiver<()>,
    /// The receivers' news of pushes (`watch --listen --hook-secret`).
    pushes: mpsc::Receiver<Receiver>,
    /// What `/healthz` and `/readyz` answer (served with `--listen`).
    probes: Arc<Probes>,
    /// Keeps the notify watcher alive.
    _files: Option<notify::RecommendedWatcher>,
}

impl Loop {
    fn new(
        config: WatchConfig,
        probes: Arc<Probes>,
        notifier: Option<Notifier>,
        locks: Arc<LockSettings>,
        pushes: mpsc::Receiver<Receiver>,
    ) -> Self {
        let (changed_tx, changed_rx) = mpsc::channel(1);
        let (drift_tx, drift_rx) = mpsc::channel(1);
        let spec = config.source.spec.clone();
        let files = watch_files(&spec, changed_tx);
        let periods = Periods {
            fetch: matches!(spec.location, Location::Git { .. }).then_some(config.interval),
            resync: config.resync,
            source_cap: config.interval.max(Duration::from_secs(1)),
            max_running: config.max_concurrent_pools,
        };
        let shared = Shared {
            connections: Arc::new(Connections::kept()),
            config: Arc::new(config),
            health: Arc::default(),
            notifier,
            revision: String::new(),
            locks,
            acting: Arc::default(),
            drain_turns: Arc::default(),
        };
        Self {
            spec,
            machine: Machine::new(periods, Instant::now()),
            shared,
            good: None,
            seen: None,
            check: None,
            runs: JoinSet::new(),
            interrupts: BTreeMap::new(),
            lanes: HashMap::new(),
            survey: None,
            drift: BTreeMap::new(),
            drift_tx,
            drift_rx,
            requests: BTreeMap::new(),
            changed_rx,
            pushes,
            probes,
            _files: files,
        }
    }

    async fn run(mut self) -> Result<()> {
        let mut signals = Signals::listen()?;
        info!(
            "watching {} (fetch every {:?}, resync every {:?})",
            source_label(&self.spec),
            self.shared.config.interval,
            self.shared.config.resync
        );
        let mut heard = Some(Event::Look);
        loop {
            if let Some(event) = heard.take() {
                // A new revision was loaded: what the decision about it says is logged.
                let fresh = matches!(event, Event::Checked(Some(SourceNews::Loaded(_))));
                let decisions = self.machine.on(event, Instant::now());
                debug!(?decisions, "watch step");
                if fresh {
                    self.say(&decisions);
                }
                for decision in decisions {
                    if let Some(end) = self.carry_out(decision).await {
                        return end;
                    }
                }
            }
            heard = {
                let (check, survey) = (&mut self.check, &mut self.survey);
                tokio::select! {
                    Some(()) = self.changed_rx.recv() => Some(Event::Look),
                    Some(receiver) = self.pushes.recv() => {
                        info!("receiver {receiver}: a push; looking at the source now");
                        Some(Event::Pushed)
                    }
                    checked = async { check.as_mut().expect("guarded").await }, if check.is_some() => {
                        self.check = None;
                        Some(Event::Checked(self.on_checked(checked)))
                    }
                    Some(news) = self.drift_rx.recv() => self.on_drift(news),
                    () = sleep_until(self.machine.next_wake()) => Some(Event::Time),
                    Some(ended) = self.runs.join_next_with_id() => Some(self.on_finished(ended)),
                    findings = async { survey.as_mut().expect("guarded").await }, if survey.is_some() => {
                        self.survey = None;
                        Some(Event::Surveyed(findings.inspect_err(|e| error!("survey failed: {e}")).ok().flatten()))
                    }
                    () = signals.recv() => Some(Event::Signal),
                }
            };
            self.probes.beat();
        }
    }

    /// What Docker's news means: drift of the pools it names, unless a rollout did it.
    fn on_drift(&self, mut news: ContainerNews) -> Option<Event<SourceError>> {
        let requested = std::mem::take(&mut news.requested);
        if requested.is_empty() {
            return self.on_container_news(news);
        }
        let pools: Vec<&str> = requested.iter().map(String::as_str).collect();
        info!("reconcile requested: {}", pools.join(", "));
        let drift = match (!news.names.is_empty()).then(|| self.on_container_news(news)).flatten() {
            Some(Event::Drift(pools)) => Some(pools),
            _ => None,
        };
        Some(Event::Requested { pools: requested, drift })
    }

    /// What Docker's news of containers means: drift of the pools it names, unless a rollout
    /// did it.
    fn on_container_news(&self, news: ContainerNews) -> Option<Event<SourceError>> {
        if self.shared.acting.covers(&news.names) {
            debug!("the rollout's own doing, not drift: {}", news.what);
            return None;
        }
        if self.machine.running() {
            debug!("drift seen during a reconcile: {}", news.what);
        } else {
            info!("drift seen: {}", news.what);
        }
        Some(Event::Drift((!news.pools.is_empty()).then_some(news.pools)))
    }

    /// A lane's reconcile ended (or its task failed, which counts as a failed reconcile).
    fn on_finished(
        &mut self,
        ended: Result<(tokio::task::Id, (Lane, Ended)), tokio::task::JoinError>,
    ) -> Event<SourceError> {
        let (lane, ended) = match ended {
            Ok((id, ended)) => {
                self.lanes.remove(&id);
                ended
            }
            Err(e) => {
                error!("reconcile failed: {e}");
                let lane = self.lanes.remove(&e.id()).unwrap_or(Lane::All);
                (lane, Ended::Failed)
            }
        };
        self.interrupts.remove(&lane);
        self.probes.ready();
        let deadline = self.next_deadline(&lane);
        Event::Finished(lane, ended, deadline)
    }

    /// Carry one decision out; `Some` when the watch ends, and how.
    async fn carry_out(&mut self, decision: Decision<SourceError>) -> Option<Result<()>> {
        match decision {
            Decision::Check => self.request_check(),
            // Said by `say`; the reconcile says why and when it stands by.
            Decision::Same | Decision::StandBy(..) => {}
            Decision::KeepLastGood(e) => {
                let (source, errors) = (self.seen_label(), format!("{:#}", anyhow::Error::from(e)));
                error!(
                    "{source} has errors; the world is left as it is (keeping the last good state):\n{errors}"
                );
                crate::metrics::record(|m| m.source_error("invalid"));
                // Not ready until a good revision: what a broken commit says is in the answer.
                let shown: Vec<&str> = errors.lines().take(PROBE_LINES).collect();
                self.probes.source_broken(Some(format!(
                    "{source} has errors; keeping the last good state:\n{}",
                    shown.join("\n")
                )));
            }
            Decision::Reconcile(lane, trigger) => self.start_reconcile(lane, trigger),
            Decision::Survey => self.start_survey(),
            Decision::Supersede(lane) => {
                info!(
                    "a newer desired state arrived ({lane}): stopping its rollout at the next step boundary"
                );
                if let Some(interrupt) = self.interrupts.get(&lane) {
                    interrupt.stop(StopReason::Superseded);
                }
            }
            Decision::RetryAfter(lane, after) => {
                warn!("backing off: retrying {lane} in {}s", after.as_secs());
            }
            Decision::LookAgainAfter(after, e) => {
                crate::metrics::record(|m| m.source_error("unreachable"));
                warn!(
                    "cannot read the source: {:#}; keeping the last good state; backing off, retrying in {}s",
                    anyhow::Error::from(e),
                    after.as_secs()
                );
            }
            Decision::StopRun => {
                info!("signal: stopping at the next step boundary (signal again to exit at once)");
                for interrupt in self.interrupts.values() {
                    interrupt.trigger();
                }
            }
            Decision::Exit => {
                info!("signal: stopping");
                self.print_pool_state().await;
                return Some(Ok(()));
            }
            Decision::Fail(e) => {
                let e = source_failure(&self.seen_label(), e);
                return Some(Err(e.context("watch cannot start: no good desired state was read")));
            }
            Decision::ExitNow => {
                warn!("second signal: exiting at once; a later apply or watch resumes from the world");
                std::process::exit(EXIT_INTERRUPTED);
            }
        }
        None
    }

    /// When the first instance the last plan of `lane` waited for turns unhealthy, as a timer:
    /// the world's clock says how long after that plan, this process's monotonic clock counts
    /// it down.
    fn next_deadline(&self, lane: &Lane) -> Option<Instant> {
        let health = crate::locked(&self.shared.health);
        health.next_check(|pool| covers(lane, pool)).map(Instant::from_std)
    }

    /// The source as last looked at, for an error about it: a Git source names the commit (its
    /// short id), which is what the user fixes or reverts.
    fn seen_label(&self) -> String {
        match &self.seen {
            Some(Revision::Commit(commit)) => {
                format!("{} (commit {})", source_label(&self.spec), commit.get(..7).unwrap_or(commit))
            }
            _ => source_label(&self.spec),
        }
    }

    /// Look at the source, in a blocking task: git2 and the file system block. The machine
    /// asks for one look at a time.
    fn request_check(&mut self) {
        let spec = self.spec.clone();
        let seen = self.seen.clone();
        self.check = Some(tokio::task::spawn_blocking(move || check_source(&spec, seen.as_ref())));
    }

    /// Say what the decisions about a new revision of the source mean, once.
    fn say(&self, decisions: &[Decision<SourceError>]) {
        let Some(origin) = self.good.as_ref().map(|good| &good.origin) else { return };
        let said = decisions.iter().find_map(|decision| match decision {
            Decision::Reconcile(_, Trigger::Start) => Some("source read"),
            Decision::Same => Some("same"),
            Decision::Reconcile(_, trigger) if trigger.new_spec() => Some("source changed"),
            Decision::Supersede(_) => Some("source changed"),
            _ => None,
        });
        match said {
            Some("same") => info!("source changed ({origin}), the pools are the same: nothing to do"),
            Some(said) => info!("{said}: {origin}"),
            None => {}
        }
    }

    /// Keep what the look found, and tell the machine; it decides what that means. A look that
    /// failed itself (a panic in the blocking task) tells nothing.
    fn on_checked(
        &mut self,
        checked: Result<Checked, tokio::task::JoinError>,
    ) -> Option<SourceNews<SourceError>> {
        let checked = checked.inspect_err(|e| error!("source check failed: {e}")).ok()?;
        Some(match checked {
            Checked::Unchanged => SourceNews::Unchanged,
            Checked::Loaded(revision, desired) => {
                self.shared.revision = crate::plan::scope::revision_label(&desired);
                crate::metrics::record(|m| m.source(&self.shared.revision));
                if self.good.is_none() {
                    self.probes.not_ready("the source was read; the first reconcile has not ended");
                }
                self.probes.source_broken(None);
                self.seen = Some(revision);
                self.follow_drift_events(&desired);
                self.follow_lease_requests(&desired);
                self.machine.depend(dependents(&desired));
                let mut prints = fingerprints(&desired);
                prints.retain(|pool, _| self.shared.config.options.covers(pool));
                let news = SourceNews::Loaded(prints);
                // Kept even when it asks for the same pools, so that new containers name the
                // newest commit.
                self.good = Some(Arc::new(desired));
                news
            }
            // Reported as the machine decides: kept past, or the reason watch ends.
            Checked::Invalid(revision, e) => {
                self.seen = Some(revision);
                SourceNews::Invalid(e)
            }
            Checked::Unreachable(e) => SourceNews::Unreachable(e),
        })
    }

    fn start_reconcile(&mut self, lane: Lane, trigger: Trigger) {
        let desired =
            self.good.clone().expect("the state machine reconciles only once a good state was read");
        let interrupt = Arc::new(Interrupt::default());
        let mut options = self.shared.config.options.clone();
        if let Lane::Pool(pool) = &lane {
            options.pools = BTreeSet::from([pool.clone()]);
        }
        // What the lane's reconcile before did is in the world now: whatever Docker says of it
        // from here on is news.
        self.shared.acting.clear(|pool| covers(&lane, pool));
        let task = self.shared.clone().reconcile(desired, trigger, options, Arc::clone(&interrupt));
        let named = lane.clone();
        let handle = self.runs.spawn(async move { (named, task.await) });
        self.lanes.insert(handle.id(), lane.clone());
        self.interrupts.insert(lane, interrupt);
    }

    /// Look at every pool once for a resync, in a task of its own; what it finds comes back as
    /// [`Event::Surveyed`].
    fn start_survey(&mut self) {
        let desired = self.good.clone().expect("the state machine surveys only once a good state was read");
        self.survey = Some(tokio::spawn(self.shared.clone().survey(desired)));
    }

    /// Follow Docker's events for the containers of this source (their scope label) on every
    /// endpoint its pools live on, each from a task that re-subscribes with backoff whenever the
    /// daemon goes away; stop following an endpoint no pool lives on any more.
    fn follow_drift_events(&mut self, desired: &Desired) {
        match Connections::follow_events(desired, Events::Drift, &self.drift_tx) {
            Ok(follow) => keep_following(&mut self.drift, follow),
            // The reconcile reports it, with the rest of what is wrong.
            Err(e) => debug!("not following Docker events: {e}"),
        }
    }

    /// Follow the Lease of every node pool this watch covers, where `poolctl reconcile` asks
    /// for a node pool's reconcile; stop following the pools no longer there (or moved).
    fn follow_lease_requests(&mut self, desired: &Desired) {
        let options = &self.shared.config.options;
        let follow = crate::backend::follow_requests(desired, |pool| options.covers(pool), &self.drift_tx);
        keep_following(&mut self.requests, follow);
    }

    /// What the pools look like now, for the last words.
    async fn print_pool_state(&self) {
        let Some(desired) = &self.good else {
            let _ = write_stdout(|out| writeln!(out, "Stopped: no good desired state was ever read."));
            return;
        };
        // Docker alone: the summary counts containers, and a cluster may be what went away. The
        // copies resolved, so that a pool's template hash is the one its instances carry.
        let listed = async {
            let (desired, docker) = self.shared.connections.connect_docker(Desired::clone(desired)).await?;
            anyhow::Ok((desired, docker.list().await?))
        };
        match listed.await {
            Ok((desired, containers)) => {
                let world = World { containers, ..World::default() };
                let _ = write_stdout(|out| write_pool_state(&desired, &world, out));
            }
            Err(e) => warn!("cannot observe the pools: {e:#}"),
        }
    }
}

/// Run a task for each of `follow` not running yet, by key, and stop those no longer in it.
fn keep_following<F>(tasks: &mut BTreeMap<String, JoinHandle<()>>, follow: Vec<(String, F)>)
where
    F: Future<Output = ()> + Send + 'static,
{
    tasks.retain(|key, task| {
        let keep = follow.iter().any(|(k, _)| k == key);
        if !keep {
            task.abort();
        }
        keep
    });
    for (key, task) in follow {
        tasks.entry(key).or_insert_with(|| tokio::spawn(task));
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
            "  {}: {} of {} replicas up, {}, {} on template {}: {state}",
            pool.name(),
            up,
            pool.pool.spec.replicas,
            crate::style::count(mine.len(), "instance"),
            current,
            pool.template_hash
        )?;
    }
    Ok(())
}

/// What every reconcile shares with the loop, as each reconcile's task takes it along.
#[derive(Clone)]
struct Shared {
    /// Docker and cluster clients, kept from one reconcile to the next.
    connections: Arc<Connections>,
    config: Arc<WatchConfig>,
    /// What the reconciles saw of the instances' health (for the log, and the deadline timer).
    health: Arc<Mutex<HealthLog>>,
    notifier: Option<Notifier>,
    /// The revision of the last good desired state, as notifications name it.
    revision: String,
    /// How every reconcile takes locks, and what this process saw of other replicas' locks.
    locks: Arc<LockSettings>,
    /// The containers the last reconcile's rollout stopped or removed: Docker's events about
    /// them are its own doing, not drift.
    acting: Arc<Acting>,
    /// Shared by every reconcile's rollout: one drain at a time per cluster.
    drain_turns: Arc<DrainTurns>,
}

impl Shared {
    /// One reconcile of the pools `options` covers, as a task of its own, so that the loop
    /// keeps listening: [`Reconcile::run`] over the kept connections, with stdout for output. A
    /// failed one drops them all, so that the next one connects afresh.
    async fn reconcile(
        self,
        desired: Arc<Desired>,
        trigger: Trigger,
        options: PlanOptions,
        interrupt: Arc<Interrupt>,
    ) -> Ended {
        let Some((desired, docker)) = self.connected(&desired).await else { return Ended::Failed };
        let out = crate::report::Progress::stdout();
        let ended =
            self.reconciling(&desired, &docker, options, &out).run(&desired, trigger, &interrupt).await;
        if ended == Ended::Failed {
            self.connections.forget();
        }
        ended
    }

    /// One look at every pool for a resync ([`Reconcile::survey`]).
    async fn survey(self, desired: Arc<Desired>) -> Option<Findings> {
        let (desired, docker) = self.connected(&desired).await?;
        let out = crate::report::Progress::stdout();
        let options = self.config.options.clone();
        let found = self.reconciling(&desired, &docker, options, &out).survey(&desired).await;
        if found.is_none() {
            self.connections.forget();
        }
        found
    }

    /// `desired` with its copies resolved, and the Docker endpoints of its pools over the kept
    /// connections; `None` when they cannot be had, said here.
    async fn connected(&self, desired: &Desired) -> Option<(Desired, Arc<DockerEndpoints>)> {
        let connected = self.connections.connect_docker(Desired::clone(desired)).await;
        connected.inspect_err(|e| error!("{e:#}")).ok()
    }

    /// A reconcile of the pools `options` covers over the kept connections, with `out` for
    /// output.
    fn reconciling<'a>(
        &'a self,
        desired: &'a Desired,
        docker: &'a DockerEndpoints,
        options: PlanOptions,
        out: &'a crate::report::Progress,
    ) -> Reconcile<'a, DockerEndpoints, Clusters> {
        Reconcile {
            containers: docker,
            connect: self.connections.clusters(),
            options,
            dry_run: self.config.dry_run,
            out,
            health: &self.health,
            notifier: self.notifier.as_ref(),
            revision: &self.revision,
            commit: desired.origin.commit(),
            locks: &self.locks,
            acting: &self.acting,
            skip_preflight: self.config.skip_preflight.clone(),
            drain_turns: &self.drain_turns,
        }
    }
}

/// The pools that depend on each pool (`spec.dependsOn`).
fn dependents(desired: &Desired) -> BTreeMap<String, BTreeSet<String>> {
    let mut dependents: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for pool in &desired.pools {
        for on in &pool.pool.spec.depends_on {
            dependents.entry(on.clone()).or_default().insert(pool.name().to_owned());
        }
    }
    dependents
}

/// Whether `lane` covers `pool`.
fn covers(lane: &Lane, pool: &str) -> bool {
    match lane {
        Lane::All => true,
        Lane::Pool(name) => name == pool,
    }
}
