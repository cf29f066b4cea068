//! One reconcile of `watch`: observe, plan, print, and (unless `--dry-run`) carry the plan out
//! under the locks of the pools it changes, which watch holds only while it reconciles.
//! Generic over the backends, so that a whole reconcile runs against fakes in tests.

use std::convert::Infallible;
use std::io::Write;
use std::sync::Mutex;

use std::collections::{BTreeMap, BTreeSet};

use tracing::{error, info, warn};

use super::machine::{Ended, Findings, Trigger};
use crate::backend::{Cluster, Connect, Containers, Locks};
use crate::metrics::InstanceCounts;
use crate::model::Desired;
use crate::plan::{CanaryState, Fate, Plan, PlanOptions, PoolPlan, describe_health, render_text};
use crate::report::{Metrics, Notice, Notifier, Progress};
use crate::rollout::cancel::{Interrupt, StopReason};
use crate::rollout::execute::{DrainTurns, PreflightCheck, Report};
use crate::rollout::lock::{LockFailure, LockSettings};
use crate::rollout::{Outcome, Preview, Rollout, RolloutError, preview};

/// The shortest and longest wait of a standby replica before it looks at a held lock again.
const STANDBY_MIN: std::time::Duration = std::time::Duration::from_secs(1);
const STANDBY_MAX: std::time::Duration = std::time::Duration::from_secs(30);

/// What a reconcile needs besides the desired state.
pub(super) struct Reconcile<'a, C, N> {
    pub containers: &'a C,
    pub connect: &'a N,
    pub options: PlanOptions,
    pub dry_run: bool,
    /// Where the plan and the progress lines go (stdout).
    pub out: &'a Progress,
    /// What the last reconciles saw of the instances' health.
    pub health: &'a Mutex<HealthLog>,
    /// Where rollouts are announced (`--notify`).
    pub notifier: Option<&'a Notifier>,
    /// The source's revision, as notifications name it.
    pub revision: &'a str,
    /// The full commit id of a Git source's revision, which commit statuses are set on.
    pub commit: Option<&'a str>,
    /// How rollouts take locks: one value for the whole watch, so that what a standby saw of
    /// another replica's locks counts from one reconcile to the next.
    pub locks: &'a LockSettings,
    /// Where the rollout's own stops and removals are noted.
    pub acting: &'a Acting,
    /// `--skip-preflight`: the preflight checks not to make.
    pub skip_preflight: BTreeSet<PreflightCheck>,
    /// The drain turns every reconcile of this watch shares: each pool rolls out on its own,
    /// a cluster's drains still go one Node at a time.
    pub drain_turns: &'a std::sync::Arc<DrainTurns>,
}

/// The containers the rollouts stop or remove themselves, by pool, noted as each such step
/// starts (Docker may tell of the container's death before the step ends): a sink of the
/// rollouts' events.
#[derive(Debug, Default)]
pub(super) struct Acting(Mutex<BTreeMap<String, BTreeSet<String>>>);

impl Acting {
    fn pools(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, BTreeSet<String>>> {
        crate::locked(&self.0)
    }

    /// Forget what the rollouts of the pools `covers` says did: it is in the world now, and
    /// whatever Docker says of it from here on is news.
    pub(super) fn clear(&self, covers: impl Fn(&str) -> bool) {
        self.pools().retain(|pool, _| !covers(pool));
    }

    /// Every one of `names` is a container a rollout stopped or removed.
    pub(super) fn covers(&self, names: &BTreeSet<String>) -> bool {
        let acted = self.pools();
        !names.is_empty() && names.iter().all(|n| acted.values().any(|names| names.contains(n)))
    }
}

impl crate::rollout::event::Sink for Acting {
    fn event(&self, event: &crate::rollout::event::Event<'_>) {
        if let crate::rollout::event::Event::Started(step) = event
            && matches!(step.verb, "stop" | "remove")
        {
            self.pools().entry(step.pool.to_owned()).or_default().insert(step.instance.to_owned());
        }
    }
}

/// Tells `--notify` when a retirement begins to wait for what another controller holds (its
/// Node's deletion hooks, its volumes): once per wait, naming the instance and what holds it.
struct Waits<'a> {
    notifier: Option<&'a Notifier>,
    revision: &'a str,
}

impl crate::rollout::event::Sink for Waits<'_> {
    fn event(&self, event: &crate::rollout::event::Event<'_>) {
        if let (
            Some(notifier),
            crate::rollout::event::Event::RetirementWaits { pool, instance, waiting: true, what, .. },
        ) = (self.notifier, *event)
        {
            let mut notice = Notice::new(pool, self.revision, "waiting");
            notice.error = Some(format!("{instance}: {what}"));
            notifier.send(notice);
        }
    }
}

/// How a reconcile ended for each pool, as `poolctl_reconcile_total` counts it.
type Results = Vec<(String, &'static str)>;

/// The instances that did not serve at the last look of their pool, and when the first one
/// waited for turns unhealthy: what watch logs changes of, and when it plans again by itself.
/// Each reconcile updates the pools it planned, and only those.
#[derive(Debug, Default)]
pub(super) struct HealthLog {
    /// Instance name -> its pool, and `starting`, `unavailable` or `unhealthy`.
    troubled: BTreeMap<String, (String, &'static str)>,
    /// The pools whose rollout stalled past its `progressDeadline` at the last look: their
    /// reconciles end `degraded`, never in sync.
    pub degraded: BTreeSet<String>,
    /// When the first instance each pool waits for turns unhealthy: how long after the plan,
    /// by the world's clock, and when (by this process's monotonic clock) that plan was made.
    /// Never this process's wall clock, which may be off from the world's.
    next_check: BTreeMap<String, (std::time::Instant, i64)>,
    /// What the last plan held back (see [`crate::rollout::conditions`]), by pool and reason:
    /// told when it begins, not at every look.
    told: BTreeSet<(String, &'static str)>,
    /// The last failure notified of each pool, and when: the same failure again is told with
    /// backoff, not at every retry.
    failures: BTreeMap<String, Told>,
}

/// A failure notified, when, and how many times in a row.
#[derive(Debug)]
struct Told {
    line: String,
    at: std::time::Instant,
    times: u32,
}

/// The first repeat of the same failure is told after this long, each next one after twice
/// the wait before, up to [`REPEAT_MAX`].
const REPEAT_FIRST: std::time::Duration = std::time::Duration::from_secs(300);
const REPEAT_MAX: std::time::Duration = std::time::Duration::from_secs(3600);

impl HealthLog {
    /// Whether to notify that `pool` failed with `line` now: a new failure at once, the same
    /// one again only once its backoff has passed.
    fn tell_failure(&mut self, pool: &str, line: &str, now: std::time::Instant) -> bool {
        if let Some(told) = self.failures.get_mut(pool)
            && told.line == line
        {
            let wait = crate::backend::retry::delay(told.times, REPEAT_FIRST, REPEAT_MAX);
            if now.duration_since(told.at) < wait {
                return false;
            }
            (told.at, told.times) = (now, told.times + 1);
            return true;
        }
        self.failures.insert(pool.to_owned(), Told { line: line.to_owned(), at: now, times: 1 });
        true
    }

    /// `pool` ended well: its next failure is news.
    fn succeeded(&mut self, pool: &str) {
        self.failures.remove(pool);
    }

    /// Log the instances of `plan`'s pools that turned unhealthy and those that serve again
    /// since their last plan.
    fn update(&mut self, plan: &Plan) {
        let planned = |pool: &str| plan.pools.iter().any(|p| p.name == pool);
        let mut now = BTreeMap::new();
        for pool in &plan.pools {
            for instance in &pool.instances {
                let Some(note) = &instance.health else { continue };
                let name = instance.name.to_string();
                let was = self.troubled.get(&name).map(|(_, state)| *state);
                if note.state == "unhealthy" && was != Some("unhealthy") {
                    warn!("instance {name} of pool {} turned {}", pool.name, describe_health(note));
                }
                now.insert(name, (pool.name.clone(), note.state));
            }
        }
        for (name, _) in self.troubled.iter().filter(|(n, (pool, _))| planned(pool) && !now.contains_key(*n))
        {
            if plan.pools.iter().any(|p| p.instances.iter().any(|i| i.name == *name)) {
                info!("instance {name} serves again");
            }
        }
        self.troubled.retain(|_, (pool, _)| !planned(pool));
        self.troubled.extend(now);
        self.degraded.retain(|pool| !planned(pool));
        self.degraded.extend(plan.pools.iter().filter(|p| p.degraded.is_some()).map(|p| p.name.clone()));
        self.next_check.retain(|pool, _| !planned(pool));
        let made = std::time::Instant::now();
        self.next_check.extend(
            plan.pools
                .iter()
                .filter_map(|p| p.next_check.map(|at| (p.name.clone(), (made, at.saturating_sub(plan.now))))),
        );
    }

    /// When the first instance of the pools `covers` says waits for turns unhealthy, as an
    /// instant of this process's monotonic clock; a second more, so that the plan made then
    /// sees it past its timeout.
    pub(super) fn next_check(&self, covers: impl Fn(&str) -> bool) -> Option<std::time::Instant> {
        self.next_check
            .iter()
            .filter(|(pool, _)| covers(pool))
            .map(|(_, (made, after))| {
                *made + std::time::Duration::from_secs(u64::try_from(*after).unwrap_or(0) + 1)
            })
            .min()
    }

    /// What `plan` holds back that the last plan did not: a pool turned Degraded, rolling
    /// back, or held by `maxUnhealthy`, as (pool, reason, why). Its words change from look to
    /// look (the last failure's "1 second ago"): that is no news.
    fn newly_held(&mut self, plan: &Plan) -> Vec<(String, &'static str, String)> {
        let planned = |pool: &str| plan.pools.iter().any(|p| p.name == pool);
        let now: BTreeSet<(String, &'static str)> = crate::rollout::conditions(plan)
            .iter()
            .map(|(pool, reason, _)| ((*pool).to_owned(), *reason))
            .collect();
        let new = crate::rollout::conditions(plan)
            .into_iter()
            .filter(|(pool, reason, _)| !self.told.contains(&((*pool).to_owned(), *reason)))
            .map(|(pool, reason, why)| (pool.to_owned(), reason, why.to_owned()))
            .collect();
        self.told.retain(|(pool, _)| !planned(pool));
        self.told.extend(now);
        new
    }
}

impl<C: Containers + Locks, N: Connect> Reconcile<'_, C, N> {
    /// Observe, plan and apply once; `interrupt` stops it between steps.
    pub(super) async fn run(&self, desired: &Desired, trigger: Trigger, interrupt: &Interrupt) -> Ended {
        let started = std::time::Instant::now();
        let mut results = Results::new();
        let ended = self.reconcile(desired, trigger, interrupt, &mut results).await;
        if trigger == Trigger::Requested {
            self.consume_requests(desired).await;
        }
        let degraded = self.health().degraded.clone();
        for (pool, result) in &mut results {
            if degraded.contains(pool) && matches!(*result, "in_sync" | "applied") {
                *result = "degraded";
            }
        }
        crate::metrics::record(|m| {
            m.reconcile_took(started.elapsed());
            for (pool, result) in &results {
                m.reconciled(pool, trigger.label(), result);
            }
        });
        ended
    }

    /// Remove the reconcile requests of the pools this reconcile covered: acted on, they are
    /// consumed (a request that fails to go stays, and asks for one reconcile more). A node
    /// pool's is on its Lease, cleared only if it is still the one this reconcile observed.
    async fn consume_requests(&self, desired: &Desired) {
        let covered = desired.pools.iter().filter(|p| self.options.covers(p.name()));
        for pool in covered {
            let name = pool.name();
            if let Err(e) = self.containers.consume_request(name).await {
                warn!("pool {name}: cannot remove its reconcile request: {e}");
            }
            let Some(cluster) = pool.cluster() else { continue };
            let consumed = match self.connect.connect(&cluster, name).await {
                Ok(cluster) => cluster.consume_request().await,
                Err(e) => Err(e),
            };
            if let Err(e) = consumed {
                warn!("pool {name}: cannot remove its reconcile request from its Lease: {e}");
            }
        }
    }

    /// Observe the world and plan, and tell what the plan holds back (log, Events,
    /// notifications, the ends of revisions the world shows): what every reconcile and survey
    /// begins with. A survey (`surveying`) leaves the log and Events of a pool with changes to
    /// that pool's own reconcile, which looks again, so that each is said once. `None` when
    /// the world could not be observed, said here.
    async fn look(
        &self,
        desired: &Desired,
        results: &mut Results,
        surveying: bool,
    ) -> Option<Preview<N::Cluster>> {
        let preview = match preview(desired, self.containers, self.connect, self.options.clone()).await {
            Ok(preview) => preview,
            Err(e) => {
                error!("{:#}", anyhow::Error::from(e));
                let pools = desired
                    .pools
                    .iter()
                    .map(crate::model::DesiredPool::name)
                    .filter(|p| self.options.covers(p));
                results.extend(pools.map(|p| (p.to_owned(), "failed")));
                return None;
            }
        };
        let plan = &preview.plan;
        record_instances(plan);
        let changed = plan.changed_pools();
        results.extend(plan.pools.iter().map(|p| (p.name.clone(), result_of(&changed, &p.name, "failed"))));
        let held = {
            let mut health = self.health();
            health.update(plan);
            health.newly_held(plan)
        };
        let told = |pool: &str| !surveying || !changed.contains(pool);
        for pool in plan.pools.iter().filter(|p| told(&p.name)) {
            if let Some(why) = &pool.degraded {
                warn!("pool {}: {why}", pool.name);
            }
        }
        if !self.dry_run {
            let tell =
                |sink: &dyn crate::rollout::event::Sink| crate::rollout::tell_conditions(plan, told, sink);
            crate::report::tell_now(&preview.clusters, tell).await;
            for (pool, reason, why) in held {
                let mut notice = self.notice(&pool, Notice::result_of(reason));
                notice.error = Some(why);
                self.notify(notice);
            }
            crate::rollout::record_ends(plan, desired, self.containers).await;
        }
        Some(preview)
    }

    /// One look at every pool for a resync, carrying nothing out: the pools whose plan changes
    /// something are left to their own reconciles (which plan again, under the locks), the
    /// others are in sync. `None` when the world could not be observed.
    pub(super) async fn survey(&self, desired: &Desired) -> Option<Findings> {
        let started = std::time::Instant::now();
        let mut results = Results::new();
        let preview = self.look(desired, &mut results, true).await;
        let changed = preview.as_ref().map(|p| p.plan.changed_pools()).unwrap_or_default();
        let degraded = self.health().degraded.clone();
        crate::metrics::record(|m| {
            m.reconcile_took(started.elapsed());
            for (pool, result) in results.iter().filter(|(pool, _)| !changed.contains(pool)) {
                let result =
                    if degraded.contains(pool) && *result == "in_sync" { "degraded" } else { result };
                m.reconciled(pool, Trigger::Resync.label(), result);
            }
        });
        let plan = &preview?.plan;
        if changed.is_empty() {
            say_unchanged(Trigger::Resync, plan);
        } else {
            let pools: Vec<&str> = changed.iter().map(String::as_str).collect();
            info!("plan (Resync): to reconcile: {}; {} unchanged", pools.join(", "), plan.summary.unchanged);
        }
        let health = self.health();
        let deadlines = plan
            .pools
            .iter()
            .filter_map(|p| Some((p.name.clone(), health.next_check(|pool| pool == p.name)?)))
            .map(|(pool, at)| (pool, tokio::time::Instant::from_std(at)))
            .collect();
        Some(Findings { changed, deadlines })
    }

    async fn reconcile(
        &self,
        desired: &Desired,
        trigger: Trigger,
        interrupt: &Interrupt,
        results: &mut Results,
    ) -> Ended {
        let Some(preview) = self.look(desired, results, false).await else { return Ended::Failed };
        let plan = &preview.plan;
        let changed = plan.changed_pools();
        let s = plan.summary;
        if !plan.has_changes() {
            if trigger == Trigger::Start || trigger.new_spec() {
                self.print(|out| render_text(plan, out));
            }
            say_unchanged(trigger, plan);
            return Ended::Converged;
        }
        info!(
            "plan ({trigger:?}): {} to create, {} to retire, {} unchanged",
            s.create, s.retire, s.unchanged
        );
        self.print(|out| render_text(plan, out));
        if self.dry_run {
            set_results(results, |pool| result_of(&changed, pool, "dry_run"));
            return Ended::Converged;
        }
        let ended = Box::pin(self.carry(desired, &preview, &changed, interrupt, results)).await;
        // Canaries made now are judged from when they came up: when `autoPromote` lets the rest
        // roll is known only from the world after the rollout, so it is looked at again, and
        // the watch wakes then rather than at its next resync.
        let canaries = plan.pools.iter().any(|p| p.canary.as_ref().is_some_and(CanaryState::holds));
        if (crate::metrics::installed() || canaries)
            && ended == Ended::Converged
            && let Ok(after) =
                crate::rollout::preview(desired, self.containers, self.connect, self.options.clone()).await
        {
            // What the pools look like now, for the instance gauges, rather than at the next resync.
            record_instances(&after.plan);
            if canaries {
                self.health().update(&after.plan);
            }
        }
        ended
    }

    /// Carry the previewed plan out under the locks of the pools it changes.
    async fn carry(
        &self,
        desired: &Desired,
        preview: &Preview<N::Cluster>,
        changed: &BTreeSet<String>,
        interrupt: &Interrupt,
        results: &mut Results,
    ) -> Ended {
        // A pool another run holds is retried with watch's backoff, not waited on here.
        let shown = (self.out, &Metrics);
        let waits = Waits { notifier: self.notifier, revision: self.revision };
        let told = (self.acting, &waits);
        let events = crate::report::KubeEvents::default();
        let sink = (&(&shown, &told), &events);
        let rollout = Rollout::new(desired, self.containers, preview, self.locks, interrupt, &sink)
            .skipping_preflight(&self.skip_preflight)
            .sharing_drain_turns(self.drain_turns);
        // Announced once the locks are held and the plan made under them changes something.
        // The pools that plan finds Degraded: the deadline may have passed since the preview.
        let mut degraded_under_locks = BTreeSet::new();
        let announce = |locked: &Plan, _: &_| {
            for pool in locked.changed_pools() {
                self.notify(self.notice(&pool, "started"));
            }
            for pool in &locked.pools {
                let Some(why) = &pool.degraded else { continue };
                // Said of the preview already, unless the deadline passed since.
                let shown =
                    preview.plan.pools.iter().find(|p| p.name == pool.name).and_then(|p| p.degraded.as_ref());
                if shown != Some(why) {
                    warn!("pool {}: {why}", pool.name);
                }
                degraded_under_locks.insert(pool.name.clone());
            }
            Ok::<(), Infallible>(())
        };
        let carried = events.beside(&preview.clusters, Box::pin(rollout.run(announce))).await;
        match carried {
            Ok(Outcome::NothingLeft) => {
                info!("nothing left to do once the locks were taken");
                let result =
                    |pool: &str| if degraded_under_locks.contains(pool) { "degraded" } else { "in_sync" };
                set_results(results, result);
                Ended::Converged
            }
            Ok(Outcome::Done(report)) => {
                set_results(results, |pool| result_of(changed, pool, pool_result(&report, pool)));
                self.announce_end(changed, &report);
                self.ended(&report)
            }
            Ok(Outcome::Refused(never)) => match never {},
            Err(RolloutError::Lock(LockFailure::Held { pool, holder, seen, lease, .. })) => {
                let now = std::time::SystemTime::now();
                // Another replica of this watch, or an apply: it acts; this one stands by, and
                // looks again when the record it saw would have stood unchanged for its lease
                // (by this process's clock, never the holder's expiry).
                let again = lease.saturating_sub(seen).clamp(STANDBY_MIN, STANDBY_MAX);
                info!(
                    "pool {pool} is locked by {}: standing by while the holder carries the changes out; \
                     looking again in {}s",
                    holder.describe(now),
                    again.as_secs()
                );
                set_results(
                    results,
                    |p| if p == pool { "locked" } else { result_of(changed, p, "not_started") },
                );
                Ended::Locked(again)
            }
            Err(e) => {
                let e = anyhow::Error::from(e);
                error!("{e:#}");
                let line = format!("{e:#}");
                let now = std::time::Instant::now();
                for pool in changed {
                    if !self.health().tell_failure(pool, &line, now) {
                        continue;
                    }
                    let mut notice = self.notice(pool, "failed");
                    notice.error = Some(line.clone());
                    self.notify(notice);
                }
                Ended::Failed
            }
        }
    }

    /// Say how the rollout ended for each pool it changed, each by its own steps: a pool that
    /// failed alone does not fail the others, which go on to the end. A pool a stop at a step
    /// boundary (a signal, a newer spec) left unfinished is not over: the next run goes on,
    /// and says how it ends.
    fn announce_end(&self, changed: &BTreeSet<String>, report: &Report) {
        for pool in changed {
            let Some(notice) = Notice::ended(pool, self.revision, report) else { continue };
            {
                let mut health = self.health();
                match &notice.error {
                    Some(line) if !health.tell_failure(pool, line, std::time::Instant::now()) => continue,
                    Some(_) => {}
                    None => health.succeeded(pool),
                }
            }
            self.notify(notice.on_commit(self.commit));
        }
    }

    /// What the last reconciles saw of the instances' health.
    fn health(&self) -> std::sync::MutexGuard<'_, HealthLog> {
        crate::locked(self.health)
    }

    /// A notice of `pool`, of this reconcile's revision.
    fn notice(&self, pool: &str, result: &'static str) -> Notice {
        Notice::new(pool, self.revision, result).on_commit(self.commit)
    }

    fn notify(&self, notice: Notice) {
        if let Some(notifier) = self.notifier {
            notifier.send(notice);
        }
    }

    /// Print how a rollout ended, and what that means to the watch.
    fn ended(&self, report: &Report) -> Ended {
        self.print(|out| crate::report::write_summary(report, out));
        match report.stop_reason {
            _ if report.complete() => Ended::Converged,
            Some(StopReason::Superseded) if report.failure().is_none() => Ended::Superseded,
            Some(StopReason::Signal) if report.failure().is_none() => Ended::Stopped,
            _ => {
                if let Some(f) = report.failure() {
                    error!(
                        "step {} {} failed: {}",
                        f.verb,
                        f.instance,
                        f.error.as_ref().map_or_else(String::new, ToString::to_string)
                    );
                }
                Ended::Failed
            }
        }
    }

    /// Output is best effort: a closed stdout must not stop the watch.
    fn print(&self, f: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) {
        self.out.print(f);
    }
}

/// Say that a plan changes nothing: in sync, or nothing to do yet while instances are waited
/// for.
fn say_unchanged(trigger: Trigger, plan: &Plan) {
    let s = plan.summary;
    if s.unavailable + s.unremediated + s.window_held + s.canary_waiting > 0 {
        info!(
            "plan ({trigger:?}): nothing to do yet, {} unchanged, {} waited for, {} unhealthy not replaced, \
             {} held by disruption windows, {} waiting for canary promotion",
            s.unchanged,
            s.unavailable,
            s.unremediated,
            s.window_held,
            crate::style::count(s.canary_waiting, "pool")
        );
    } else {
        info!("plan ({trigger:?}): in sync, {} unchanged", s.unchanged);
    }
}

/// `changed_result` for a pool the plan changes; a pool it leaves alone is in sync.
fn result_of(changed: &BTreeSet<String>, pool: &str, changed_result: &'static str) -> &'static str {
    if changed.contains(pool) { changed_result } else { "in_sync" }
}

/// How a rollout ended for `pool`, as `poolctl_reconcile_total` counts it.
fn pool_result(report: &Report, pool: &str) -> &'static str {
    if report.attempted.iter().any(|s| s.pool == pool && s.error.is_some()) {
        return "failed";
    }
    if report.complete() || !report.not_started.iter().any(|(p, ..)| p == pool) {
        return "applied";
    }
    match report.stop_reason {
        Some(StopReason::Superseded) => "superseded",
        Some(StopReason::Signal) => "stopped",
        _ => "not_started",
    }
}

fn set_results(results: &mut Results, result: impl Fn(&str) -> &'static str) {
    for (pool, r) in results.iter_mut() {
        *r = result(pool);
    }
}

/// The instance gauges of every pool of `plan`, and whether it is Degraded.
fn record_instances(plan: &Plan) {
    crate::metrics::record(|m| {
        for pool in &plan.pools {
            m.instances(&pool.name, instance_counts(pool));
            m.degraded(&pool.name, pool.degraded.is_some());
            m.remediation_held(&pool.name, pool.unhealthy_held.is_some());
            m.canary_waiting(&pool.name, pool.canary.as_ref().is_some_and(CanaryState::waits_for_promotion));
        }
    });
}

fn instance_counts(pool: &PoolPlan) -> InstanceCounts {
    let mut counts = InstanceCounts { desired: pool.replicas, ..InstanceCounts::default() };
    for i in &pool.instances {
        let serving = i.health.is_none() && i.container == "running" && i.node != Some("not-ready");
        counts.up += usize::from(serving);
        counts.unavailable += usize::from(i.health.is_some());
        counts.outdated += usize::from(pool.template_hash.as_deref() != Some(i.template_hash.as_str()));
        counts.retiring += usize::from(i.fate == Fate::Retire || i.retiring);
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ClusterIdentity, ClusterRef};
    use crate::testing::build::{PoolArgs, desired};
    use crate::testing::fake::FakeWorld;

    fn output() -> Progress {
        Progress::new(Box::new(std::io::sink()), crate::report::ProgressUi::default())
    }

    /// A health log for a test's reconciles, for as long as the test runs.
    fn health() -> &'static Mutex<HealthLog> {
        Box::leak(Box::default())
    }

    /// Lock settings for a test's reconciles, as `watch` keeps one for its whole life.
    fn locks() -> &'static LockSettings {
        Box::leak(Box::new(LockSettings::new("watch", std::time::Duration::ZERO).unwrap()))
    }

    /// A reconcile that carries its plans out against the fake world.
    fn applying<'a>(fake: &'a FakeWorld, out: &'a Progress) -> Reconcile<'a, FakeWorld, FakeWorld> {
        Reconcile {
            containers: fake,
            connect: fake,
            options: PlanOptions::default(),
            dry_run: false,
            out,
            health: health(),
            notifier: None,
            revision: "r1",
            commit: None,
            locks: locks(),
            acting: Box::leak(Box::default()),
            skip_preflight: BTreeSet::new(),
            drain_turns: Box::leak(Box::default()),
        }
    }

    #[test]
    fn the_same_failure_is_notified_with_backoff_and_a_new_one_at_once() {
        let mut log = HealthLog::default();
        let start = std::time::Instant::now();
        let at = |secs: u64| start + std::time::Duration::from_secs(secs);
        assert!(log.tell_failure("w", "step create w-1 failed", at(0)));
        assert!(!log.tell_failure("w", "step create w-1 failed", at(60)), "a retry a minute later");
        assert!(log.tell_failure("w", "step create w-1 failed", at(300)), "after 5 minutes");
        assert!(!log.tell_failure("w", "step create w-1 failed", at(600)), "then after 10 more");
        assert!(log.tell_failure("w", "step create w-1 failed", at(900)));
        assert!(log.tell_failure("w", "step create w-2 failed", at(901)), "another failure is news");
        assert!(log.tell_failure("q", "step create w-2 failed", at(901)), "so is another pool's");
        log.succeeded("w");
        assert!(log.tell_failure("w", "step create w-2 failed", at(902)), "after a success, news again");
    }

    #[tokio::test]
    async fn a_reconcile_creates_a_node_pool_then_rolls_it_over_with_drains() {
        let fake = FakeWorld::default();
        let out = output();
        let reconcile = applying(&fake, &out);
        let v1 = desired(vec![PoolArgs { nodes: true, ..PoolArgs::new("k", 2) }.build()]);
        let interrupt = Interrupt::default();

        assert_eq!(reconcile.run(&v1, Trigger::Start, &interrupt).await, Ended::Converged);
        let world = fake.world();
        assert_eq!(world.containers.len(), 2);
        assert!(world.nodes.iter().all(|n| n.ready && n.pool.as_deref() == Some("k")), "{:?}", world.nodes);
        let first = fake.calls();

        // Converged: the next reconcile changes nothing.
        assert_eq!(reconcile.run(&v1, Trigger::Resync, &interrupt).await, Ended::Converged);
        assert_eq!(fake.calls(), first);

        // A new template: every old instance is cordoned and drained before its container stops.
        let v2 = desired(vec![PoolArgs { nodes: true, image: "busybox:2", ..PoolArgs::new("k", 2) }.build()]);
        assert_eq!(reconcile.run(&v2, Trigger::SourceChanged, &interrupt).await, Ended::Converged);
        let calls = fake.calls()[first.len()..].to_vec();
        let pos =
            |c: String| calls.iter().position(|x| *x == c).unwrap_or_else(|| panic!("no {c}: {calls:?}"));
        for old in &world.containers {
            let name = &old.name;
            assert!(pos(format!("cordon {name}")) < pos(format!("drain {name}")));
            assert!(pos(format!("drain {name}")) < pos(format!("stop {name}")));
            assert!(pos(format!("stop {name}")) < pos(format!("delete-node {name}")));
            assert!(pos(format!("delete-node {name}")) < pos(format!("remove {name}")));
        }
        let after = fake.world();
        assert_eq!(after.containers.len(), 2);
        assert!(after.containers.iter().all(|c| c.image == "busybox:2"), "{:?}", after.containers);
        assert_eq!(after.nodes.len(), 2, "the old Nodes are deleted: {:?}", after.nodes);

        // What Docker says of the containers it stopped and removed is the rollout's own doing;
        // of the new ones, news.
        let old: BTreeSet<String> = world.containers.iter().map(|c| c.name.clone()).collect();
        assert!(reconcile.acting.covers(&old), "{:?}", reconcile.acting);
        let new: BTreeSet<String> = after.containers.iter().map(|c| c.name.clone()).collect();
        assert!(!reconcile.acting.covers(&new), "{:?}", reconcile.acting);
        let mixed = BTreeSet::from([old.first().unwrap().clone(), new.first().unwrap().clone()]);
        assert!(!reconcile.acting.covers(&mixed), "one of them is news");
    }

    #[tokio::test]
    async fn a_reconcile_holds_the_locks_only_while_it_changes_the_pools() {
        let fake = FakeWorld::default();
        let out = output();
        let reconcile = applying(&fake, &out);
        let v1 = desired(vec![
            PoolArgs::new("w", 1).build(),
            PoolArgs { nodes: true, ..PoolArgs::new("k", 1) }.build(),
        ]);
        let interrupt = Interrupt::default();

        // Another run holds w: nothing of w changes, and the reconcile is retried later.
        let until = std::time::SystemTime::now() + std::time::Duration::from_secs(60);
        fake.hold_lock("docker", "w", "poolctl apply (pid 9 on there)", until);
        let Ended::Locked(lapse) = reconcile.run(&v1, Trigger::Start, &interrupt).await else {
            panic!("a held lock is standing by, not failing")
        };
        // Not the holder's expiry a minute off by its clock: this replica looks again once it
        // would have seen the same record for a lease (its own, the record naming none).
        assert_eq!(lapse, crate::rollout::lock::DEFAULT_LEASE);
        assert!(fake.world().containers.is_empty(), "{:?}", fake.world().containers);
        assert_eq!(fake.locks().into_keys().collect::<Vec<_>>(), ["docker/w"], "k's lock was given up");

        fake.break_lock("docker", "w");
        assert_eq!(reconcile.run(&v1, Trigger::Retry, &interrupt).await, Ended::Converged);
        let calls = fake.calls();
        let pos = |c: &str| calls.iter().position(|x| x == c).unwrap_or_else(|| panic!("no {c}: {calls:?}"));
        let first_create = calls.iter().position(|c| c.starts_with("create ")).unwrap();
        let last_create = calls.iter().rposition(|c| c.starts_with("create ")).unwrap();
        assert!(pos("lock k") < first_create && pos("lock w") < first_create, "{calls:?}");
        assert!(calls.iter().rposition(|c| c == "release w").unwrap() > last_create, "{calls:?}");
        assert!(fake.locks().is_empty(), "released after the rollout: {:?}", fake.locks());
    }

    #[tokio::test]
    async fn a_dry_run_reconcile_changes_nothing_and_a_failed_step_ends_failed() {
        let v1 = desired(vec![PoolArgs::new("w", 1).build()]);
        let interrupt = Interrupt::default();
        let out = output();

        let fake = FakeWorld::default();
        let dry = Reconcile { dry_run: true, ..applying(&fake, &out) };
        assert_eq!(dry.run(&v1, Trigger::Start, &interrupt).await, Ended::Converged);
        assert!(fake.calls().is_empty(), "{:?}", fake.calls());

        let fake = FakeWorld::default().failing("image busybox:latest");
        let failing = applying(&fake, &out);
        assert_eq!(failing.run(&v1, Trigger::Start, &interrupt).await, Ended::Failed);
        assert!(fake.world().containers.is_empty(), "a failed preflight creates nothing");
    }

    #[tokio::test]
    async fn a_kubelet_outside_the_skew_fails_the_reconcile_unless_watch_skips_the_check() {
        let pool = PoolArgs { image: "kindest/node:v1.32.0", nodes: true, ..PoolArgs::new("k", 1) };
        let v1 = desired(vec![pool.build()]);
        let (interrupt, out) = (Interrupt::default(), output());
        let fake = FakeWorld::default().server_version("v1.30.2");
        let mut reconcile = applying(&fake, &out);
        assert_eq!(reconcile.run(&v1, Trigger::Start, &interrupt).await, Ended::Failed);
        assert!(fake.world().containers.is_empty(), "a failed preflight creates nothing");
        reconcile.skip_preflight = BTreeSet::from([PreflightCheck::VersionSkew]);
        assert_eq!(reconcile.run(&v1, Trigger::Start, &interrupt).await, Ended::Converged);
        assert_eq!(fake.world().containers.len(), 1);
    }

    #[tokio::test]
    async fn a_switched_context_is_refused_and_switching_back_lets_the_rollout_drain() {
        let fake = FakeWorld::default();
        let out = output();
        let reconcile = applying(&fake, &out);
        let interrupt = Interrupt::default();
        // `node:` names no context: the current one, whichever that is.
        let v1 = desired(vec![PoolArgs { nodes: true, ..PoolArgs::new("k", 2) }.build()]);
        assert_eq!(reconcile.run(&v1, Trigger::Start, &interrupt).await, Ended::Converged);
        let before = fake.world();
        let current = ClusterRef { kubeconfig: None, context: None };
        let first = fake.identity_of(&current);
        assert!(
            before.containers.iter().all(|c| c.cluster_id.as_ref() == Some(&first)),
            "{:?}",
            before.containers
        );

        // `kubectl config use-context other`: the same spec now resolves to another cluster.
        let other = ClusterIdentity {
            context: "other".into(),
            server: "https://other".into(),
            uid: Some("u2".into()),
        };
        fake.clone().resolve(current.clone(), other);
        let v2 = desired(vec![PoolArgs { nodes: true, image: "busybox:2", ..PoolArgs::new("k", 2) }.build()]);
        let calls = fake.calls().len();
        assert_eq!(reconcile.run(&v2, Trigger::SourceChanged, &interrupt).await, Ended::Failed);
        assert_eq!(fake.calls().len(), calls, "nothing was touched: {:?}", &fake.calls()[calls..]);
        assert_eq!(fake.world(), before);

        // Switching back: the rollout goes on, every old Node drained before its container stops.
        fake.clone().resolve(current, first);
        assert_eq!(reconcile.run(&v2, Trigger::SourceChanged, &interrupt).await, Ended::Converged);
        for old in &before.containers {
            let calls = fake.calls();
            let pos = |v: &str| calls.iter().position(|c| *c == format!("{v} {}", old.name)).unwrap();
            assert!(pos("drain") < pos("stop"), "{calls:?}");
        }
    }
}
