//! The plan as data: what will happen to each pool, step by step, computed from (desired,
//! observed) alone by the pure [`plan`] function, and rendered as text or JSON.

mod canary;
mod deadline;
mod health;
mod planner;
mod render;
pub mod saved;
pub mod scope;
#[cfg(test)]
mod tests;
mod window;

use std::collections::BTreeSet;
use std::sync::Arc;

use serde::Serialize;

use crate::model::Origin;

pub use canary::CanaryState;
pub use deadline::rollback_target;
pub use health::{HealthNote, describe as describe_health};
pub use planner::{PlanOptions, is_up};
pub(crate) use render::table;
pub use render::{
    HeldLocks, JSON_FORMAT_VERSION, do_not_disrupt_note, on_delete_note, render_json, render_json_saved,
    render_text, render_text_styled, window_note,
};

use crate::model::{Desired, World};

/// Compute the plan that takes `world` to `desired` ([`planner::plan`]), with the steps of
/// each paused pool (`spec.paused`) and each suspended one (`poolctl suspend`, recorded in the
/// world) held back: shown, never carried out.
///
/// The random part of new instance names comes from a seed derived from the source revision
/// and the observed pools ([`saved::seed`]): planning the same revision in the same world names
/// the same instances (so that `apply` finds the plan it showed, and `apply FILE` the plan it
/// saved), and any change of either gives other names, so that a name given up by a retired
/// instance is not handed straight to its replacement.
// By value: callers build the options for the call (tests, mostly `PlanOptions::default()`).
#[allow(clippy::needless_pass_by_value)]
pub fn plan(desired: &Desired, world: &World, options: PlanOptions) -> Plan {
    plan_with(desired, world, &options, planner::Seed::Derive(desired))
}

/// Plan again in the middle of carrying out `first`: as [`plan`], with `first`'s seed, so that
/// the steps left keep the instance names `first` showed for them.
#[allow(clippy::needless_pass_by_value)] // as `plan`
pub fn replan(desired: &Desired, world: &World, options: PlanOptions, first: &Plan) -> Plan {
    let seed = first.seed.map_or(planner::Seed::Derive(desired), planner::Seed::Known);
    plan_with(desired, world, &options, seed)
}

fn plan_with(desired: &Desired, world: &World, options: &PlanOptions, seed: planner::Seed<'_>) -> Plan {
    let planned = mark_own_node(planner::plan(desired, world, options, seed), options);
    hold_dependents(desired, world, options, hold_paused(desired, world, options, planned))
}

/// Mark the instance whose Node this poolctl runs on, if the plan retires it: the plan shows
/// before apply what the executor will refuse (the plan is a preview; the executor checks).
fn mark_own_node(mut plan: Plan, options: &PlanOptions) -> Plan {
    let Some(own) = options.own_node.as_deref() else { return plan };
    let retired = plan.pools.iter_mut().flat_map(|p| &mut p.instances).filter(|i| i.fate == Fate::Retire);
    for instance in retired.filter(|i| i.name == own) {
        instance.refused = Some(
            "this poolctl runs on its Node (POOLCTL_NODE_NAME): apply refuses its retirement; move poolctl \
             off the pool's Nodes (deploy/ keeps it off them)",
        );
    }
    plan
}

/// Hold back the steps of each paused or suspended pool. A suspension holds a pool whatever
/// the source says of it, declared or not: a stop button must stop everything, a prune too.
fn hold_paused(desired: &Desired, world: &World, options: &PlanOptions, mut plan: Plan) -> Plan {
    for pool in plan.pools.iter_mut().filter(|_| !options.ignore_suspend) {
        pool.suspended = world.suspended.get(&pool.name).cloned();
    }
    let paused = |name: &str| desired.pools.iter().any(|p| p.name() == name && p.pool.spec.paused);
    for pool in plan.pools.iter_mut().filter(|p| paused(&p.name) || p.suspended.is_some()) {
        let steps = hold_back(pool, &mut plan.summary);
        plan.summary.held += steps.len();
        pool.paused = Some(HeldBack { steps });
    }
    plan
}

/// Take `pool`'s steps out of the plan, and out of `summary`'s counts: held back, shown, never
/// carried out.
fn hold_back(pool: &mut PoolPlan, s: &mut Summary) -> Vec<Step> {
    let steps = std::mem::take(&mut pool.steps);
    s.create -= steps.iter().filter(|s| matches!(s.action, Action::Create { .. })).count();
    s.configure -= steps.iter().filter(|s| matches!(s.action, Action::Configure(_))).count();
    s.update_in_place -= steps.iter().filter(|s| matches!(s.action, Action::UpdateInPlace { .. })).count();
    let retired = pool.instances.iter().filter(|i| i.fate == Fate::Retire).count();
    (s.retire, s.unchanged) = (s.retire - retired, s.unchanged + retired);
    steps
}

/// Hold back the steps of each pool that depends on a pool not in sync and serving
/// (`spec.dependsOn`): once that pool's rollout ends, a plan made again (the rollout's next
/// one, or watch's) gives the dependent its steps. A pool the plan does not cover (`--pool`,
/// watch's reconcile of one pool) is judged by a plan of its own.
fn hold_dependents(desired: &Desired, world: &World, options: &PlanOptions, mut plan: Plan) -> Plan {
    let mut judged: std::collections::BTreeMap<String, bool> =
        plan.pools.iter().map(|p| (p.name.clone(), ready(p))).collect();
    let mut ready_of = |name: &str| {
        *judged.entry(name.to_owned()).or_insert_with(|| {
            let only = PlanOptions { pools: BTreeSet::from([name.to_owned()]), ..options.clone() };
            let alone = hold_paused(
                desired,
                world,
                &only,
                planner::plan(desired, world, &only, planner::Seed::Known(0)),
            );
            alone.pools.iter().all(ready)
        })
    };
    for pool in &mut plan.pools {
        let Some(dp) = desired.pools.iter().find(|p| p.name() == pool.name) else { continue };
        let waiting: Vec<String> =
            dp.pool.spec.depends_on.iter().filter(|on| !ready_of(on.as_str())).cloned().collect();
        if waiting.is_empty() || pool.steps.is_empty() {
            continue;
        }
        let steps = hold_back(pool, &mut plan.summary);
        plan.summary.waiting_for_pools += steps.len();
        pool.waits_for = Some(DependencyWait { pools: waiting, steps });
    }
    plan
}

/// Whether a pool is in sync and serving: nothing to do, nothing held back, every instance
/// up, as many as it asks for.
fn ready(pool: &PoolPlan) -> bool {
    pool.steps.is_empty()
        && pool.paused.as_ref().is_none_or(|held| held.steps.is_empty())
        && pool.waits_for.is_none()
        && pool.degraded.is_none()
        && pool.instances.iter().all(|i| i.health.is_none() && i.fate == Fate::Keep)
        && pool.instances.len() == usize::try_from(pool.replicas).unwrap_or(usize::MAX)
}

/// The whole plan for one source.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    pub origin: Origin,
    pub pools: Vec<PoolPlan>,
    pub summary: Summary,
    /// The seed its new instance names came from, once one was needed.
    #[serde(skip)]
    pub seed: Option<u64>,
    /// The pools that go back to an earlier template (`failureAction: rollback`, `apply
    /// --rollback`), as that template: what the executor creates their instances from.
    #[serde(skip)]
    pub rollbacks: Vec<crate::model::DesiredPool>,
    /// The world's "now" it was made at (seconds since the Unix epoch, by the world's clock):
    /// what its `next_check` times are counted from.
    #[serde(skip)]
    pub now: i64,
}

impl Plan {
    /// Whether carrying the plan out would change anything.
    pub fn has_changes(&self) -> bool {
        self.pools.iter().any(|p| !p.steps.is_empty())
    }

    /// Whether the world matches the source: nothing to do, and no pool left alone (one that
    /// is no longer declared but not pruned, or declared but another source's). A GitOps CI
    /// wants to hear about those even though poolctl will not act on them.
    pub fn in_sync(&self) -> bool {
        let s = &self.summary;
        !self.has_changes()
            && s.undeclared + s.foreign == 0
            && s.unavailable == 0
            && s.unremediated == 0
            && s.degraded == 0
            && s.window_held == 0
            && s.canary_waiting == 0
    }

    /// The pools with instances that are waited for (starting or unavailable within their
    /// timeouts).
    pub fn waiting_pools(&self) -> BTreeSet<String> {
        let waiting = |i: &InstanceStatus| i.health.as_ref().is_some_and(|h| h.action == "waiting");
        self.pools.iter().filter(|p| p.instances.iter().any(waiting)).map(|p| p.name.clone()).collect()
    }

    /// The pools whose steps wait for the pools they depend on (`spec.dependsOn`): a rollout
    /// that changes those takes their locks too, and gives them their steps once it has.
    pub fn dependents_waiting(&self) -> BTreeSet<String> {
        self.pools.iter().filter(|p| p.waits_for.is_some()).map(|p| p.name.clone()).collect()
    }

    /// When the next instance that is waited for turns unhealthy, if the world says: when to
    /// plan again even if nothing else happens (`watch` wakes then).
    /// Or when a window that holds something back opens.
    pub fn next_check(&self) -> Option<i64> {
        self.pools.iter().filter_map(|p| p.next_check).min()
    }

    /// `desired` as this plan carries it out: with the pools it rolls back at the template they
    /// go back to.
    pub fn desired_for<'d>(&self, desired: &'d Desired) -> std::borrow::Cow<'d, Desired> {
        if self.rollbacks.is_empty() {
            return std::borrow::Cow::Borrowed(desired);
        }
        let mut effective = desired.clone();
        for pool in &mut effective.pools {
            if let Some(rollback) = self.rollbacks.iter().find(|r| r.name() == pool.name()) {
                *pool = rollback.clone();
            }
        }
        std::borrow::Cow::Owned(effective)
    }

    /// The pools the plan changes: the ones whose locks carrying it out needs.
    pub fn changed_pools(&self) -> BTreeSet<String> {
        self.pools.iter().filter(|p| !p.steps.is_empty()).map(|p| p.name.clone()).collect()
    }

    /// Split off each pool's first batch: the part to carry out before the world is looked at
    /// again. Returns that part and the rest.
    pub fn split_first_batch(&self) -> (Plan, Plan) {
        let (mut first, mut rest) = (self.clone(), self.clone());
        for (f, r) in first.pools.iter_mut().zip(&mut rest.pools) {
            let batch = f.steps.first().map(|s| s.batch);
            f.steps.retain(|s| Some(s.batch) == batch);
            r.steps.retain(|s| Some(s.batch) != batch);
        }
        (first, rest)
    }

    /// Every step of every pool, in execution order.
    pub fn steps(&self) -> impl Iterator<Item = (&PoolPlan, &Step)> {
        self.pools.iter().flat_map(|p| p.steps.iter().map(move |s| (p, s)))
    }
}

/// Counts for the summary line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Instances to create.
    pub create: usize,
    /// Instances to retire.
    pub retire: usize,
    /// Instances kept as they are (those of pools left alone included).
    pub unchanged: usize,
    /// Kept instances whose Node's labels or taints differ from the spec.
    pub configure: usize,
    /// Instances updated in place (`docker update`): kept, not counted as unchanged.
    #[serde(skip_serializing_if = "is_zero")]
    pub update_in_place: usize,
    /// Pools that have containers from this source but are no longer declared, left alone
    /// without `--prune`.
    pub undeclared: usize,
    /// Declared pools whose containers another source created, left alone without `--adopt`.
    pub foreign: usize,
    /// Steps that paused pools hold back (not counted above).
    pub held: usize,
    /// Steps that pools hold back while the pools they depend on are not ready (not counted
    /// above).
    #[serde(skip_serializing_if = "is_zero")]
    pub waiting_for_pools: usize,
    /// Instances that do not serve and are waited for: starting, or unavailable within their
    /// timeout.
    #[serde(skip_serializing_if = "is_zero")]
    pub unavailable: usize,
    /// Instances replaced because they are unhealthy (counted in `retire` too).
    #[serde(skip_serializing_if = "is_zero")]
    pub unhealthy: usize,
    /// Unhealthy instances not replaced: more of their pool are than `maxUnhealthy`, or their
    /// Node skips remediation.
    #[serde(skip_serializing_if = "is_zero")]
    pub unremediated: usize,
    /// Outdated instances kept, not replaced (`strategy: OnDelete`, a Node's `do-not-disrupt`).
    #[serde(skip_serializing_if = "is_zero")]
    pub outdated_kept: usize,
    /// Pools whose rollout passed its `progressDeadline`.
    #[serde(skip_serializing_if = "is_zero")]
    pub degraded: usize,
    /// Pools whose rollout holds at its canaries, waiting for promotion (`spec.rollout.canary`).
    #[serde(skip_serializing_if = "is_zero")]
    pub canary_waiting: usize,
    /// Instances kept, not disrupted, because a disruption window holds back why they would be
    /// (`spec.disruption.windows`).
    #[serde(skip_serializing_if = "is_zero")]
    pub window_held: usize,
}

fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
    *n == T::default()
}

/// What happens to one pool.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PoolPlan {
    pub name: String,
    pub status: PoolStatus,
    /// The spec's template hash (`None` for a pool that is no longer declared).
    pub template_hash: Option<String>,
    pub replicas: u32,
    /// For a [`PoolStatus::Foreign`] pool: the source scope its containers came from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub managed_by: Option<String>,
    /// Set for a paused pool (`spec.paused`): the steps it would take, held back. Its `steps`
    /// are then empty, so that nothing carries them out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused: Option<HeldBack>,
    /// Set while a pool it depends on (`spec.dependsOn`) is not in sync and serving: those
    /// pools, and the steps held back until they are. Its `steps` are then empty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waits_for: Option<DependencyWait>,
    /// Set for a pool suspended by `poolctl suspend`: who, when and why. Its steps are held
    /// back in `paused` as a paused pool's are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suspended: Option<crate::model::Suspension>,
    /// Old and new canonical templates, rendered as YAML, when some instance runs another
    /// template than the spec's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub template_change: Option<TemplateChange>,
    /// The Docker endpoint the spec places the pool on (`context NAME`, `host URL`); absent for
    /// the docker CLI's current one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub docker: Option<String>,
    /// The container whose settings the template copied (`spec.template.copyFrom`), with its
    /// short ID: `dev-worker (3f9a1c2b4d5e)`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub copy_from: Option<String>,
    /// What a drain of this plan does once `drainTimeout` has passed, when the pool's
    /// `spec.drain.timeoutAction` goes on (`Proceed`, `Force`) and the plan retires one of its
    /// Nodes: said beforehand, since pods are then left or deleted whatever their budgets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drain_timeout_action: Option<DrainEscalation>,
    /// Every existing instance and what becomes of it.
    pub instances: Vec<InstanceStatus>,
    /// Set when more instances are unhealthy than `maxUnhealthy` allows: why none is replaced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unhealthy_held: Option<String>,
    /// Outdated instances the plan keeps (`strategy: OnDelete`, or a Node's `do-not-disrupt`).
    #[serde(skip_serializing_if = "is_zero")]
    pub outdated_kept: usize,
    /// Set when the pool's rollout passed its `progressDeadline`: why nothing is created.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub degraded: Option<String>,
    /// The kinds of disruption the pool's windows hold back now (`spec.disruption.windows`),
    /// each with the instances it keeps; with `--ignore-windows`, those it would have kept.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<WindowHold>,
    /// Set while a new template is led by canaries (`spec.rollout.canary`): how many, how many
    /// serve, and whether they are promoted. Until they are, nothing old is retired.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanaryState>,
    /// When to plan again although nothing else happens (seconds since the Unix epoch): the
    /// first instance that is waited for turns unhealthy, one kept expires, or a window that
    /// holds something back opens.
    #[serde(skip)]
    pub next_check: Option<i64>,
    /// The revision of the pool's history this plan rolls out and whose end is not recorded:
    /// the one its first creation begins, or the one under way.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<u64>,
    /// The end of the pool's last revision the world shows, not recorded yet: its number and
    /// result. `apply` and `watch` record it ([`crate::rollout::record_ends`]); `plan` only shows.
    #[serde(skip)]
    pub revision_end: Option<(u64, crate::model::RolloutResult)>,
    pub steps: Vec<Step>,
}

impl PoolPlan {
    /// Every step the pool has: those to carry out, then those a pause holds back.
    pub fn all_steps(&self) -> impl Iterator<Item = &Step> {
        let waiting = self.waits_for.iter().flat_map(|w| &w.steps);
        self.steps.iter().chain(self.paused.iter().flat_map(|p| &p.steps)).chain(waiting)
    }
}

/// What a drain does past its timeout, as a plan shows it beforehand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DrainEscalation {
    /// `Proceed`: the pods left stay and the container stops; `Force`: they are deleted,
    /// whatever their PodDisruptionBudgets, and the container stops once they are gone.
    pub action: crate::spec::DrainTimeoutAction,
    /// The pool's `drainTimeout`.
    pub drain_timeout: crate::spec::Duration,
}

impl DrainEscalation {
    /// What it does, in words: "a drain past its timeout (3s) deletes...".
    pub fn describe(&self) -> String {
        let what = match self.action {
            crate::spec::DrainTimeoutAction::Force => {
                "deletes the pods left, whatever their PodDisruptionBudgets, and the container stops once they \
                 are gone"
            }
            crate::spec::DrainTimeoutAction::Proceed => {
                "leaves the pods left on the Node and the container stops"
            }
            crate::spec::DrainTimeoutAction::Halt => "halts the rollout, the container running",
        };
        format!(
            "a drain past its timeout ({}) {what} (drain.timeoutAction: {})",
            self.drain_timeout, self.action
        )
    }
}

/// A kind of disruption a disruption window holds back now, and the instances it keeps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WindowHold {
    /// `rollout`, `scaleDown`, `remediation`, `replace` or `expiry`.
    pub reason: crate::spec::DisruptionReason,
    /// The window that holds it: `spec.disruption.windows[N]`, an open deny window or the allow
    /// window that opens first.
    pub window: String,
    /// `allow` or `deny`.
    pub kind: crate::spec::WindowKind,
    pub schedule: String,
    pub time_zone: String,
    /// When that kind of disruption is next allowed, in the window's zone (RFC 3339); absent
    /// when no time within a year is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    /// `until` in seconds since the Unix epoch: when `watch` plans again.
    #[serde(skip)]
    pub until_secs: Option<i64>,
    /// The instances it keeps, not disrupted.
    pub instances: Vec<InstanceName>,
    /// `--ignore-windows`: the plan disrupts them all the same.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub ignored: bool,
    /// `blocked by window spec.disruption.windows[0] (deny "0 9 * * MON-FRI" for 8h) until
    /// 2026-12-07T17:00:00+01:00 (Europe/Berlin)`.
    pub message: String,
}

/// What a pool holds back while the pools it depends on are not ready.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DependencyWait {
    /// The pools of its `dependsOn` that are not in sync and serving yet.
    pub pools: Vec<String>,
    /// The steps the plan would take if they were, in order.
    pub steps: Vec<Step>,
}

/// What a paused or suspended pool holds back.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeldBack {
    /// The steps the plan would take if the pool were not paused, in order.
    pub steps: Vec<Step>,
}

/// Whether the pool is declared and known.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PoolStatus {
    /// Declared, and no container exists yet.
    #[default]
    New,
    /// Declared, and has containers.
    Existing,
    /// Has containers from this source but is no longer declared: left alone without `--prune`.
    Undeclared,
    /// Declared, but its containers were created from another source: left alone without
    /// `--adopt`, so that two sources declaring the same pool never fight over it.
    Foreign,
    /// No longer declared, and retired because of `--prune`.
    Pruned,
}

/// A template diff.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TemplateChange {
    /// Empty for a new pool whose template `copyFrom` made: shown whole.
    pub from_hash: String,
    pub to_hash: String,
    /// YAML of the old template (empty when unknown).
    pub old: String,
    pub new: String,
    /// The image under the same name is another one now (`imagePolicy: digest`): `image X is
    /// now sha256:... (was sha256:...)`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_moved: Option<String>,
    /// The changed fields that `docker update` cannot carry out, and so replace the instances
    /// (`env`, `image`, `bootstrap`...); empty when the change is live settings only.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub replaced_by: Vec<String>,
}

/// One existing instance, as observed, and its fate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InstanceStatus {
    pub name: InstanceName,
    pub template_hash: String,
    /// Docker's state (`running`, `exited`, ...) or `missing` for a Node without container.
    pub container: &'static str,
    /// `ready`, `not-ready`, `missing`, or absent for container-only pools.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<&'static str>,
    pub cordoned: bool,
    /// The cordon is poolctl's own (the Node carries the retirement annotation): a retirement
    /// that an earlier apply began. A cordon without it is someone else's and is left alone.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub retiring: bool,
    /// The Docker endpoint the instance lives on, when the spec places its pool on another
    /// one: it is replaced there.
    #[serde(rename = "endpoint", skip_serializing_if = "Option::is_none")]
    pub elsewhere: Option<String>,
    pub fate: Fate,
    /// Marked for replacement although it is current: by `--replace`, or by its Node's label
    /// `poolctl.dev/replace=true`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replace: Option<&'static str>,
    /// Kept although the plan would have retired it (outdated, or one too many): its Node
    /// carries this `do-not-disrupt` annotation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub do_not_disrupt: Option<&'static str>,
    /// Kept, not disrupted, because a disruption window holds back why it would be: `rollout`,
    /// `scaleDown`, `remediation`, `replace` or `expiry` (the pool's `windows` say which window).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_by_window: Option<crate::spec::DisruptionReason>,
    /// Its Node carries `poolctl.dev/exclude-node-draining`: a retirement skips its drain.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub drain_excluded: bool,
    /// The deletion hooks its Node carries (`pre-drain NAME (OWNER)`, `pre-terminate ...`): a
    /// retirement waits for each to be removed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<String>,
    /// Why it does not serve, for how long, and what the plan does about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthNote>,
    /// What proves it poolctl's: its container, listed with poolctl's labels, and its Node's
    /// reference to that container.
    pub proof: Proof,
    /// Why the plan leaves it alone although it looks like the pool's: a Node that is not
    /// poolctl's, or whose container is out of view rather than gone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub left: Option<String>,
    /// Why apply refuses to retire it although the plan does (this poolctl runs on its Node,
    /// [`PlanOptions::own_node`]): the retirement fails before its cordon, the instance left
    /// serving.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<&'static str>,
}

/// What proves an instance poolctl's, in both worlds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Proof {
    /// Its container, as listed with poolctl's labels (`poolctl.dev/pool` and the rest): its ID
    /// and the daemon it lives on. `None` when no such container is in view.
    pub container: Option<crate::model::InstanceRef>,
    /// The reference to its container that poolctl wrote on its Node; `None` when the Node
    /// carries none (or there is no Node).
    pub node: Option<crate::model::InstanceRef>,
}

/// What the plan does with an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Fate {
    Keep,
    Retire,
}

/// One action on one instance.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    /// Steps of the same batch: its creations may run concurrently; retirements follow them.
    pub batch: u32,
    pub instance: InstanceName,
    #[serde(flatten)]
    pub action: Action,
}

/// The name of an instance in a plan, shared by all of its steps: a plan of 70,000 steps does
/// not copy a name 70,000 times. Reads as a `&str`; serializes as a string.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InstanceName(Arc<str>);

impl InstanceName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for InstanceName {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for InstanceName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for InstanceName {
    fn from(name: &str) -> Self {
        Self(name.into())
    }
}

impl From<String> for InstanceName {
    fn from(name: String) -> Self {
        Self(name.into())
    }
}

impl<T: AsRef<str> + ?Sized> PartialEq<T> for InstanceName {
    fn eq(&self, other: &T) -> bool {
        *self.0 == *other.as_ref()
    }
}

impl Serialize for InstanceName {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

/// The actions, in the order an instance meets them.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum Action {
    /// Create and start the container.
    Create {
        image: String,
        template_hash: String,
        /// With `join.k3s`: the server whose node token the new agent is given before it starts.
        #[serde(skip_serializing_if = "Option::is_none")]
        k3s_server: Option<String>,
        /// The first creation of a rollout to a new template (or of one tried again): it
        /// records when the rollout began, for `progressDeadline`.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        starts_rollout: bool,
        /// A rollback's first creation: the template whose rollout stalled.
        #[serde(skip_serializing_if = "Option::is_none")]
        rollback_from: Option<String>,
        /// The first creation of a new revision of the pool's history (a new template, a
        /// rollback, or a rollout tried again): the revision it records, numbered as the plan
        /// decided from the history it saw.
        #[serde(skip_serializing_if = "Option::is_none")]
        revision: Option<u64>,
    },
    /// Run the pool's bootstrap commands in the new container.
    Bootstrap { commands: usize },
    /// With `join.kubeadm`, after the bootstrap commands: make a bootstrap token on the control
    /// plane and run `kubeadm join` in the new container.
    Join { control_plane: String },
    /// Wait until the instance is up (running, healthy, and its Node Ready when it has one).
    AwaitReady { node: bool },
    /// Converge a kept instance's Node labels and taints on the spec's.
    Configure(NodeConfigPreview),
    /// Mark the Node unschedulable.
    Cordon,
    /// Evict the Node's pods, respecting PodDisruptionBudgets.
    Drain(DrainPreview),
    /// Stop the container.
    Stop,
    /// Delete the Node object.
    DeleteNode,
    /// Remove the container.
    Remove,
    /// Change the running container's live settings (`docker update`) to the spec's template,
    /// and record that it runs that template now: same container, no drain.
    UpdateInPlace {
        template_hash: String,
        /// The template fields that change (`memory`, `restart`...).
        fields: Vec<String>,
    },
}

impl Action {
    /// A short verb for progress lines.
    pub fn verb(&self) -> &'static str {
        match self {
            Self::Create { .. } => "create",
            Self::Bootstrap { .. } => "bootstrap",
            Self::Join { .. } => "join",
            Self::AwaitReady { .. } => "await-ready",
            Self::Configure(_) => "configure",
            Self::Cordon => "cordon",
            Self::Drain(_) => "drain",
            Self::Stop => "stop",
            Self::DeleteNode => "delete-node",
            Self::Remove => "remove",
            Self::UpdateInPlace { .. } => "update-in-place",
        }
    }

    /// Whether the action is part of a retirement.
    pub fn is_retirement(&self) -> bool {
        matches!(self, Self::Cordon | Self::Drain(_) | Self::Stop | Self::DeleteNode | Self::Remove)
    }
}

/// What a configure step will make of a Node, as far as the world shows before it starts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NodeConfigPreview {
    /// The labels and taints the spec asks for (the pool label included).
    pub labels: std::collections::BTreeMap<String, String>,
    pub taints: Vec<crate::spec::Taint>,
    /// poolctl's reference to the instance's container, written with the labels when the Node
    /// lacks it or names another.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference: Option<crate::model::InstanceRef>,
    /// What changes: `+label k=v`, `-label k`, `+taint ...`, `-taint ...`, `+reference ...`.
    pub changes: Vec<String>,
}

/// What a drain will do, as far as the world shows before it starts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DrainPreview {
    /// Pods to evict.
    pub evict: Vec<PodRef>,
    /// Pods left alone, with the reason.
    pub skip: Vec<PodRef>,
    /// Pods not evicted that the drain waits for until they complete (`wait-completed`), with
    /// the label or annotation that asked for it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub wait: Vec<PodRef>,
    /// PDBs that currently allow no disruption for a pod to evict: the drain will wait on them.
    pub blocking_pdbs: Vec<String>,
}

/// A pod in a drain preview.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PodRef {
    /// `namespace/name`.
    pub pod: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Why it is skipped, or a warning for an evicted pod (no controller, emptyDir data, more
    /// than one PDB).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// For a pod to evict: the PDBs (`namespace/name`) that cover it. With more than one, the
    /// API server refuses the eviction.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pdbs: Vec<String>,
    /// Its drain group: lower orders are evicted, and gone, first.
    #[serde(skip_serializing_if = "is_zero")]
    pub order: i64,
    /// The `spec.drain.rules` entry that decided what the drain does with it, if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
}
