//! One rollout, from start to end: take the locks of the pools it changes, observe and plan
//! under them (taking more if that plan changes more pools), carry the plan out a batch at a
//! time, observing and planning again between batches, and release the locks however it ended.
//! `apply`, `apply PLAN_FILE` and every reconcile of `watch` call it; none replays it.
//!
//! The plan shown before a rollout ([`preview`]) is made without the locks: another run may be
//! changing the same pools. Only the plan made once they are held is carried out, after the
//! caller's check has compared it with what was shown or saved ([`Rollout::run`]). After
//! waiting for another run, that plan is typically empty.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::backend::LockGuard;
use crate::backend::{BackendError, Cluster, Connect, Containers, Locks};
use crate::model::{Desired, LockHolder, World};
use crate::plan::{Action, Fate, Plan, PlanOptions, PoolPlan};
use crate::rollout::cancel::Interrupt;
use crate::rollout::execute::{DrainTurns, Executor, PreflightCheck, PreflightError, Report};
use crate::rollout::lock::{LockFailure, LockSettings, PoolLocks, inspect_locks};
use crate::rollout::observe::{ObserveError, Observed, observe, observe_again};

pub mod cancel;
pub mod event;
pub mod execute;
pub mod lock;
pub mod observe;

use event::Sink;

/// How many times the locks are topped up when the plan made under them changes other pools.
const MAX_LOCK_ROUNDS: usize = 3;

/// A plan made without the locks, to show (or save) before anything changes, and what it was
/// made from.
pub struct Preview<K> {
    pub world: World,
    /// The cluster of each pool whose instances are Nodes, by pool name: what a rollout of the
    /// plan acts through.
    pub clusters: BTreeMap<String, K>,
    pub plan: Plan,
    /// The choices the plan was made with; a rollout of it plans again with the same.
    pub options: PlanOptions,
}

impl<K> Preview<K> {
    /// The pools another run is changing: the plan waits for instances in the making there,
    /// under another run's lock.
    pub fn busy_pools(&self) -> BTreeSet<String> {
        self.plan.waiting_pools().into_iter().filter(|p| self.world.locked.contains(p)).collect()
    }
}

/// Observe the world that `desired` is compared with, connecting to the clusters its pools
/// name, and plan: what `plan`, `apply` and every reconcile of `watch` do first.
pub async fn preview<C: Containers + Locks, N: Connect>(
    desired: &Desired,
    containers: &C,
    connect: &N,
    options: PlanOptions,
) -> Result<Preview<N::Cluster>, ObserveError> {
    let Observed { mut world, clusters } = observe(desired, containers, connect).await?;
    // Whether an instance that has not finished coming up is in the making depends on who holds
    // its pool's lock: read only for the pools of this plan that have such an instance.
    let planned = crate::plan::scope::planned_pools(desired, &world);
    let starting: BTreeSet<String> = world
        .containers
        .iter()
        .filter(|c| c.came_up.is_none() && planned.contains(c.pool.as_str()))
        .map(|c| c.pool.clone())
        .collect();
    if !starting.is_empty() {
        let locks = read_locks(starting.iter().map(String::as_str), containers, &clusters).await;
        mark_locked(&mut world, &locks);
    }
    let mut plan = crate::plan::plan(desired, &world, options.clone());
    // A pool that looks stalled may be another run's, busy with a drain a budget holds up: the
    // holder judges its own progress. Its lock is read only then.
    let stalled: Vec<&str> = plan
        .pools
        .iter()
        .filter(|p| p.degraded.is_some() && !starting.contains(&p.name))
        .map(|p| p.name.as_str())
        .collect();
    if !stalled.is_empty() {
        let now = SystemTime::now();
        let locks = read_locks(stalled, containers, &clusters).await;
        let held: Vec<String> = locks.into_iter().filter(|(_, h)| !h.expired(now)).map(|(p, _)| p).collect();
        if !held.is_empty() {
            world.locked.extend(held);
            plan = crate::plan::plan(desired, &world, options.clone());
        }
    }
    Ok(Preview { world, clusters, plan, options })
}

/// What `plan` holds back that the cluster's users must hear of, by pool: its rollout stalled
/// past its `progressDeadline` (`RolloutDegraded`), and going back to its previous template
/// (`RollingBack`), or replacing none of its unhealthy instances because more are than
/// `maxUnhealthy` allows (`RemediationHeld`), or its canaries up and waiting for promotion
/// (`CanaryWaiting`, the one that is no warning). Each with the plan's words.
pub fn conditions(plan: &Plan) -> Vec<(&str, &'static str, &str)> {
    let mut said = Vec::new();
    for pool in &plan.pools {
        if let Some(why) = &pool.degraded {
            let rolling_back = plan.rollbacks.iter().any(|r| r.name() == pool.name);
            let reason = if rolling_back { "RollingBack" } else { "RolloutDegraded" };
            said.push((pool.name.as_str(), reason, why.as_str()));
        }
        if let Some(why) = &pool.unhealthy_held {
            said.push((pool.name.as_str(), "RemediationHeld", why.as_str()));
        }
        if let Some(canary) = pool.canary.as_ref().filter(|c| c.waits_for_promotion()) {
            said.push((pool.name.as_str(), "CanaryWaiting", canary.message.as_str()));
        }
    }
    said
}

/// Tell the cluster's users what [`conditions`] finds in `plan` of the pools `told` picks,
/// each as an Event on the pool's Lease (a Warning but for canaries waiting): `kubectl get
/// events` shows it, and a repeat only counts up the Event's series. What `apply` and `watch`
/// do; `plan` tells nothing.
pub fn tell_conditions(plan: &Plan, told: impl Fn(&str) -> bool, sink: &dyn Sink) {
    for (pool, reason, note) in conditions(plan).into_iter().filter(|(pool, ..)| told(pool)) {
        let warning = reason != "CanaryWaiting";
        sink.event(&event::Event::Kube { about: event::About::Pool(pool), reason, note, warning });
    }
}

/// Record the ends of revisions that `plan`, made without the locks, finds
/// ([`PoolPlan::revision_end`]): what the world shows, a rollout that completed or stalled. What
/// `apply` and `watch` do with the plan they start from; `plan` writes nothing. A rollback is
/// not recorded here but by the rollout that carries it out: it is a decision, which a
/// cancelled `apply --rollback` never made, and once recorded it holds.
pub async fn record_ends<C: Containers>(plan: &Plan, desired: &Desired, containers: &C) {
    record_ends_of(plan, desired, containers, false).await;
}

/// Record the ends of revisions that `plan` finds, the rollbacks it decides too when
/// `rollbacks` (a plan made under the locks, carried out). An end is written once and stands,
/// so two runs that find the same end write it once. Best effort: an end that cannot be written
/// is said, and the next plan finds it again.
async fn record_ends_of<C: Containers>(plan: &Plan, desired: &Desired, containers: &C, rollbacks: bool) {
    let ends = plan.pools.iter().filter_map(|pool| {
        let (number, result) = pool.revision_end?;
        if result == crate::model::RolloutResult::RolledBack && !rollbacks {
            return None;
        }
        let labels = desired.pools.iter().find(|p| p.name() == pool.name).map_or_else(
            || BTreeMap::from([(crate::model::labels::POOL.to_owned(), pool.name.clone())]),
            crate::rollout::execute::record_labels,
        );
        Some(async move {
            match containers.record_revision_end(&pool.name, number, result, &labels).await {
                Ok(()) => tracing::info!("pool {}: revision {number} {result}", pool.name),
                Err(e) => tracing::warn!(
                    "pool {}: cannot record that revision {number} ended {result}: {e}",
                    pool.name
                ),
            }
            // A rollout over needs no promotion: tidied, so that the same template coming back
            // later is tried on its canaries again rather than promoted by a record of old.
            let completed = result == crate::model::RolloutResult::Complete;
            if completed
                && containers.promotions().contains_key(&pool.name)
                && let Err(e) = containers.tidy_promotion(&pool.name).await
            {
                tracing::warn!("pool {}: cannot remove its promotion record: {e}", pool.name);
            }
        })
    });
    futures::future::join_all(ends).await;
}

/// `world` with every lock of the pools a plan of `desired` covers read, and the plan made
/// from it: what `status` shows (the locks held, and whether an instance that has not finished
/// coming up is in the making). [`preview`] reads only the locks its plan depends on.
pub async fn view<C: Locks, K: Locks>(
    desired: &Desired,
    mut world: World,
    containers: &C,
    clusters: &BTreeMap<String, K>,
    options: PlanOptions,
) -> (World, BTreeMap<String, LockHolder>, Plan) {
    let locks = read_locks(crate::plan::scope::planned_pools(desired, &world), containers, clusters).await;
    mark_locked(&mut world, &locks);
    let plan = crate::plan::plan(desired, &world, options);
    (world, locks, plan)
}

/// The locks held on `pools`, read without taking any. One that cannot be read is reported
/// and taken as held: an instance in the making is waited for rather than replaced.
async fn read_locks<'p, C: Locks, K: Locks>(
    pools: impl IntoIterator<Item = &'p str>,
    containers: &C,
    clusters: &BTreeMap<String, K>,
) -> BTreeMap<String, LockHolder> {
    let (mut held, unreadable) = inspect_locks(containers, clusters, pools).await;
    for (pool, e) in unreadable {
        tracing::warn!("cannot read the lock of pool {pool}: {e}");
        let unknown = LockHolder {
            who: "(unreadable)".to_owned(),
            since: SystemTime::now(),
            expires: SystemTime::now() + Duration::from_secs(60),
        };
        held.insert(pool, unknown);
    }
    held
}

/// Record in `world` which pools another run holds the lock of, unexpired (see
/// [`World::locked`]).
fn mark_locked(world: &mut World, locks: &BTreeMap<String, LockHolder>) {
    let now = SystemTime::now();
    world.locked = locks.iter().filter(|(_, h)| !h.expired(now)).map(|(p, _)| p.clone()).collect();
}

/// Release `locks`, first tidying what the rollout recorded under them: the pool's record of
/// joining instances (see [`settle_joining`]).
pub async fn tidy_and_release<C: Containers + Locks, K: Cluster + Locks>(
    locks: PoolLocks<'_, C, K>,
    containers: &C,
    clusters: &BTreeMap<String, K>,
) {
    for (pool, record) in locks.held() {
        if let Some(cluster) = clusters.get(pool)
            && let Err(e) = settle_joining(containers, cluster, record).await
        {
            tracing::warn!("cannot tidy the record of joining instances of pool {pool} ({e}); kept as it is");
        }
    }
    locks.release().await;
}

/// Forget the joining instances of the pool that no longer need finding by name: the ones
/// whose Node carries a pool label, and the ones with neither a Node nor a container. A Node
/// without the label stays recorded (the next plan labels it, or deletes it as an orphan),
/// and so does a container whose Node has not registered yet. Only while the lock is still
/// `held`: a run that took it over since may have just recorded a name whose container it
/// is about to create.
async fn settle_joining<C: Containers, K: Cluster>(
    containers: &C,
    cluster: &K,
    held: &crate::backend::LockRecord,
) -> Result<(), BackendError> {
    use futures::{StreamExt, TryStreamExt};
    let Some(names) = cluster.joining(held).await?.filter(|n| !n.is_empty()) else { return Ok(()) };
    let nodes: Vec<(String, Option<crate::model::Node>)> = futures::stream::iter(names)
        .map(|name| async move { cluster.node(&name).await.map(|node| (name, node)) })
        .buffered(8)
        .try_collect()
        .await?;
    let listed: BTreeSet<String> = if nodes.iter().any(|(_, node)| node.is_none()) {
        containers.list().await?.into_iter().map(|c| c.name).collect()
    } else {
        BTreeSet::new()
    };
    let done: Vec<String> = nodes
        .into_iter()
        .filter(|(name, node)| match node {
            Some(node) => node.pool.is_some(),
            None => !listed.contains(name),
        })
        .map(|(name, _)| name)
        .collect();
    cluster.forget_joining(&done).await
}

/// Why a rollout ended without a report.
#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    /// The locks could not be taken; nothing was changed.
    #[error(transparent)]
    Lock(#[from] LockFailure),
    /// The world could not be observed again under the locks; nothing was changed.
    #[error("cannot observe the world once the locks were taken")]
    ObserveLocked(#[source] BackendError),
    /// Each plan made under the locks changed pools that were not locked yet.
    #[error("the pools to change kept changing while their locks were taken; run again")]
    PoolsKeepChanging,
    #[error("preflight failed, nothing was changed")]
    Preflight(#[from] PreflightError),
    #[error("cannot observe the world between batches")]
    Observe(#[source] BackendError),
    /// Every batch left as much to do as before (an image that crashes right after it comes
    /// up, say).
    #[error(
        "the world keeps changing under the rollout: still {} to go after {rounds} batches; see the plan above",
        crate::style::count(*left, "step")
    )]
    KeepsChanging { left: usize, rounds: usize },
}

/// How a rollout that ran ended; `E` is why its caller's check refused the plan made under
/// the locks.
#[derive(Debug)]
pub enum Outcome<E> {
    /// The plan made under the locks had nothing to do: another run made the changes.
    NothingLeft,
    /// The plan was carried out, completely or not: the report says.
    Done(Report),
    /// The check refused the plan made under the locks: nothing was changed.
    Refused(E),
}

/// One rollout of a previewed plan over the backends: who takes part, which pools it locks and
/// where progress goes. Built by [`Rollout::new`] only.
pub struct Rollout<'a, C, K> {
    desired: &'a Desired,
    containers: &'a C,
    /// The cluster of each pool whose instances are Nodes ([`Preview::clusters`]).
    clusters: &'a BTreeMap<String, K>,
    options: PlanOptions,
    locks: &'a LockSettings,
    /// Stops the rollout at the next step boundary (a signal, a newer desired state, a lost lock).
    interrupt: &'a Interrupt,
    /// Where what the rollout says goes: its steps, its locks (waiting for one, one lost).
    sink: &'a dyn Sink,
    /// The pools to lock first; more are locked if the plan made under them changes more.
    scope: BTreeSet<String>,
    /// The preflight checks not to make (`--skip-preflight`).
    skip_preflight: BTreeSet<PreflightCheck>,
    /// The drain turns, shared with the other rollouts of this process.
    drain_turns: Arc<DrainTurns>,
}

impl<'a, C, K> Rollout<'a, C, K> {
    /// A rollout of the plan `preview` shows, made from `desired` over `containers`. It locks the
    /// pools that plan changes and, unless this run stands by while others hold a pool
    /// ([`LockSettings::standby`], `watch`), the pools another run is changing
    /// ([`Preview::busy_pools`]): it waits for their locks (`--lock-timeout`) and plans them again.
    pub fn new(
        desired: &'a Desired,
        containers: &'a C,
        preview: &'a Preview<K>,
        locks: &'a LockSettings,
        interrupt: &'a Interrupt,
        sink: &'a dyn Sink,
    ) -> Self {
        let mut scope = preview.plan.changed_pools();
        scope.extend(preview.plan.dependents_waiting());
        if !locks.standby {
            scope.extend(preview.busy_pools());
        }
        let (clusters, options) = (&preview.clusters, preview.options.clone());
        let (skip_preflight, drain_turns) = (BTreeSet::new(), Arc::default());
        Self {
            desired,
            containers,
            clusters,
            options,
            locks,
            interrupt,
            sink,
            scope,
            skip_preflight,
            drain_turns,
        }
    }

    /// Drain one Node at a time per cluster together with the other rollouts that share
    /// `turns` (the pools of one `watch`, each rolled out on its own).
    #[must_use]
    pub fn sharing_drain_turns(mut self, turns: &Arc<DrainTurns>) -> Self {
        self.drain_turns = Arc::clone(turns);
        self
    }

    /// Make none of the preflight checks `skipped` (`--skip-preflight`).
    #[must_use]
    pub fn skipping_preflight(mut self, skipped: &BTreeSet<PreflightCheck>) -> Self {
        self.skip_preflight.clone_from(skipped);
        self
    }
}

impl<C: Containers + Locks, K: Cluster + Locks> Rollout<'_, C, K> {
    /// Take the locks of the rollout's pools, plan again under them, and hand that plan and the
    /// world it was made from to `check`: an `Err` from it ends the rollout, changing nothing
    /// ([`Outcome::Refused`]). Otherwise carry the plan out, keeping the locks renewed, and
    /// release them, however it ended.
    pub async fn run<E>(
        &self,
        check: impl FnOnce(&Plan, &World) -> Result<(), E>,
    ) -> Result<Outcome<E>, RolloutError> {
        let mut locks = PoolLocks::new(self.containers, self.clusters, self.locks, self.sink);
        let result = async {
            let (plan, world) = self.lock_and_plan(&mut locks, self.scope.clone()).await?;
            if let Err(refused) = check(&plan, &world) {
                return Ok(Outcome::Refused(refused));
            }
            if !plan.has_changes() {
                return Ok(Outcome::NothingLeft);
            }
            let guard = locks.guard();
            let carried = locks.hold_while(self.interrupt, Box::pin(self.carry_out(&plan, &guard))).await;
            carried.map(Outcome::Done)
        }
        .await;
        tidy_and_release(locks, self.containers, self.clusters).await;
        result
    }

    /// Take the locks of `wanted`, then observe and plan again under them, until the plan
    /// changes only locked pools. On failure, the locks taken so far stay held.
    async fn lock_and_plan(
        &self,
        locks: &mut PoolLocks<'_, C, K>,
        mut wanted: BTreeSet<String>,
    ) -> Result<(Plan, World), RolloutError> {
        for _ in 0..MAX_LOCK_ROUNDS {
            locks.acquire(&wanted, self.interrupt).await?;
            let world =
                observe_again(self.containers, self.clusters).await.map_err(RolloutError::ObserveLocked)?;
            let plan = crate::plan::plan(self.desired, &world, self.options.clone());
            wanted = plan.changed_pools();
            wanted.extend(plan.dependents_waiting());
            if wanted.iter().all(|p| locks.pools().contains(p.as_str())) {
                return Ok((plan, world));
            }
        }
        Err(RolloutError::PoolsKeepChanging)
    }

    /// Carry `plan`, made under the locks, out after its preflight, one batch at a time (what
    /// [`Rollout::run`] does once its check passed). Between batches the world is
    /// observed again and the rest planned again from it: a new instance that died after it
    /// came up, or an instance someone removed, changes what the next batch may safely retire,
    /// and a plan made before the first batch cannot know that. No irreversible call is made
    /// unless `guard` says the pool's lock is known to be held.
    pub async fn carry_out(&self, plan: &Plan, guard: &LockGuard) -> Result<Report, RolloutError> {
        self.tell(plan, |pool| {
            let created = pool.steps.iter().filter(|s| matches!(s.action, Action::Create { .. })).count();
            let retired = pool.instances.iter().filter(|i| i.fate == Fate::Retire).count();
            let template = pool.template_hash.as_deref().unwrap_or("none (pruned)");
            let note = format!(
                "{created} to create, {retired} to retire; template {template}, from {}",
                self.desired.origin
            );
            Some(("RolloutStarted", note))
        });
        // What the plan made under the locks found ended (a stalled rollout tried again or
        // rolled back) is recorded before its new revision begins.
        record_ends_of(plan, self.desired, self.containers, true).await;
        let result = self.carry_out_batches(plan, guard).await;
        self.tell(plan, |pool| match &result {
            Ok(report) => {
                if let Some(f) = report.failure() {
                    return Some(("RolloutFailed", f.failure_line()));
                }
                let done = report.attempted.iter().filter(|s| s.pool == pool.name).count();
                report
                    .complete()
                    .then(|| ("RolloutSucceeded", format!("{} done", crate::style::count(done, "step"))))
            }
            Err(e) => Some(("RolloutFailed", crate::backend::cause_chain(e))),
        });
        result
    }

    /// Tell the cluster's users of each pool `plan` changes what `what` says, as an Event on
    /// the pool's Lease.
    fn tell(&self, plan: &Plan, what: impl Fn(&PoolPlan) -> Option<(&'static str, String)>) {
        for pool in plan.pools.iter().filter(|p| !p.steps.is_empty()) {
            let Some((reason, note)) = what(pool) else { continue };
            let warning = reason != "RolloutStarted" && reason != "RolloutSucceeded";
            let about = event::About::Pool(&pool.name);
            self.sink.event(&event::Event::Kube { about, reason, note: &note, warning });
        }
    }

    async fn carry_out_batches(&self, plan: &Plan, guard: &LockGuard) -> Result<Report, RolloutError> {
        // Each batch is built from the desired state of the plan it comes from: a pool rolled
        // back, from the template it goes back to, also when the rollback is decided between
        // two batches (see `Executor::run_batch`).
        let executor = Executor::new(self.desired, self.containers, self.clusters, self.sink, self.interrupt)
            .with_lock_guard(guard.clone())
            .on_node(self.options.own_node.clone())
            .skipping(self.skip_preflight.clone())
            .sharing_drain_turns(Arc::clone(&self.drain_turns));
        executor.preflight(plan).await?;
        // Every round finishes at least one step, so a plan that keeps changing under our feet
        // ends instead of looping. An instance waited for may turn into a retirement (at most
        // five steps) once it serves again.
        let max_rounds = plan.steps().count() + 6 * plan.summary.unavailable + plan.summary.waiting_for_pools;
        let mut report = Report::default();
        let mut current = plan.clone();
        executor.number_plan(plan);
        // Pools with a failed step: they stop there, the others go on to the end.
        let mut failed: BTreeSet<String> = BTreeSet::new();
        // Whether a plan was made from the world the last batch left (its ends recorded).
        let mut settled = false;
        for round in 1.. {
            let (batch, mut rest) = current.split_first_batch();
            executor.announce_batch(&batch);
            let done = executor.run_batch(&batch).await;
            failed.extend(done.attempted.iter().filter(|o| o.error.is_some()).map(|o| o.pool.clone()));
            let interrupted = done.stop_reason.is_some();
            report.attempted.extend(done.attempted);
            report.not_started.extend(done.not_started);
            report.stop_reason = done.stop_reason;
            let stopped = |p: &PoolPlan| interrupted || failed.contains(&p.name);
            report.not_started.extend(
                rest.steps()
                    .filter(|(p, _)| stopped(p))
                    .map(|(p, s)| (p.name.clone(), s.instance.to_string(), s.action.verb())),
            );
            rest.pools.retain(|p| !stopped(p));
            // Done, unless instances the plan waited for may have come back since, or pools wait
            // for the pools this batch changed (`dependsOn`): then the world is looked at once
            // more, and what they held up is planned.
            let waited = current.summary.unavailable + current.summary.waiting_for_pools;
            if interrupted || (!rest.has_changes() && waited == 0) {
                break;
            }
            let world = observe_again(self.containers, self.clusters).await.map_err(RolloutError::Observe)?;
            // The steps left keep the names the plan showed for them.
            current = crate::plan::replan(self.desired, &world, self.options.clone(), plan);
            // Only the pools this rollout set out to change (those that waited for them
            // included) and that have not failed: it holds their locks; work the world now shows
            // elsewhere is left to the next run.
            current.pools.retain(|p| {
                !failed.contains(&p.name)
                    && plan
                        .pools
                        .iter()
                        .any(|q| q.name == p.name && (!q.steps.is_empty() || q.waits_for.is_some()))
            });
            // A rollback decided now ends the revision it gives up.
            record_ends_of(&current, self.desired, self.containers, true).await;
            if !current.has_changes() {
                settled = true;
                break;
            }
            if round >= max_rounds {
                return Err(RolloutError::KeepsChanging { left: current.steps().count(), rounds: round });
            }
            executor.renumber(&rest, &current, report.attempted.len());
        }
        if report.stop_reason.is_none() && !settled {
            self.record_history(plan).await;
        }
        Ok(report)
    }

    /// Record how the revisions this rollout carried ended, as the world its last batch left
    /// says (a pool whose revision every replica now runs and serves completed it), when that
    /// batch left nothing that made the rollout look at the world again: it is looked at once
    /// more, if some pool has a revision under way.
    async fn record_history(&self, plan: &Plan) {
        if !plan.pools.iter().any(|p| p.revision.is_some() && !p.steps.is_empty()) {
            return;
        }
        let world = match observe_again(self.containers, self.clusters).await {
            Ok(world) => world,
            Err(e) => {
                tracing::warn!("cannot observe the world once the rollout is done: {e}");
                return;
            }
        };
        let mut settled = crate::plan::replan(self.desired, &world, self.options.clone(), plan);
        settled.pools.retain(|p| plan.pools.iter().any(|q| q.name == p.name && !q.steps.is_empty()));
        // No batch follows to carry a rollback out: what the world shows, nothing more.
        record_ends_of(&settled, self.desired, self.containers, false).await;
    }
}

#[cfg(test)]
mod tests;
