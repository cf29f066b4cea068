//! The pure planner: `plan(desired, world) -> Plan`, with no I/O.
//!
//! Each pool is planned on its own, like a Deployment's rolling update: instances are split into
//! the ones to keep (up to `replicas` current, up instances, newest first) and the ones to retire;
//! then batches alternate "create what the surge allows" with "retire what the availability
//! budget allows", until the pool has `replicas` current instances and nothing else.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use rustc_hash::{FxHashMap, FxHashSet};
use sha2::{Digest, Sha256};

use crate::model::{Container, DrainAction, InstanceRef, Node, Pdb, Pod, World, is_instance_name, labels};
use crate::model::{Desired, DesiredPool, Revision, RolloutResult};
use crate::spec::{
    DeletePolicy, DisruptionReason, HASH_LEN, InPlace, Strategy, TemplateDiff, canonical_template,
    diff_templates,
};

use super::canary::{self, CanaryState};
use super::deadline::Deadlines;
use super::health::{Assessment, Standing, assess, silent_for};
use super::window::Windows;
use super::{
    Action, DrainEscalation, DrainPreview, Fate, InstanceName, InstanceStatus, NodeConfigPreview, Plan,
    PodRef, PoolPlan, PoolStatus, Proof, Step, Summary, TemplateChange, WindowHold,
};

/// Choices the user makes on the command line that change the plan.
// Each switch stands alone, as its command-line flag does: no two make a state together.
#[allow(clippy::struct_excessive_bools)]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanOptions {
    /// Retire pools of this source that the source no longer declares.
    pub prune: bool,
    /// Take over declared pools whose containers another source created.
    pub adopt: bool,
    /// Try again a rollout that passed its `progressDeadline` (an explicit `apply` does; `plan`
    /// and `watch` do not): its clock starts anew.
    pub retry_stalled: bool,
    /// Pools to roll back by hand (`apply --rollback POOL`), as `failureAction: rollback` does
    /// when a rollout stalls: to the last template that was rolled out completely, recorded as
    /// rolled back from the spec's, so that it is not tried again until the source changes or
    /// an `apply` tries it.
    pub rollback: BTreeSet<String>,
    /// Instances to replace although they are current (`--replace NAME`), as Terraform's
    /// `-replace`: surge first, through the whole safe retirement.
    pub replace: BTreeSet<String>,
    /// Plan only these declared pools of the source (`--pool NAME`, as Terraform's `-target`);
    /// every pool when empty. The others are neither planned nor taken for undeclared ones.
    pub pools: BTreeSet<String>,
    /// The Node this poolctl runs on (`POOLCTL_NODE_NAME`, which deploy/ sets; `None` outside a
    /// cluster): given, never read here, so that planning stays pure. A retirement of it is
    /// shown as refused; the executor refuses it.
    pub own_node: Option<String>,
    /// Disrupt instances whatever the pool's disruption windows say (`apply --ignore-windows`):
    /// the plan still names what each window would have held back, as overridden.
    pub ignore_windows: bool,
    /// Roll the pools that `poolctl suspend` suspended all the same (`apply --ignore-suspend`).
    pub ignore_suspend: bool,
}

impl PlanOptions {
    /// Whether the plan covers `pool`.
    pub fn covers(&self, pool: &str) -> bool {
        self.pools.is_empty() || self.pools.contains(pool)
    }
}

/// Where the seed of new instance names comes from.
#[derive(Debug, Clone, Copy)]
pub(super) enum Seed<'a> {
    /// Derived from the source revision and the observed pools ([`super::saved::seed`]), when
    /// the first name is needed: a plan that names nobody never pays for it.
    Derive(&'a Desired),
    /// Given: the first plan's, when a rollout plans again between its batches.
    Known(u64),
}

/// Compute the plan that takes `world` to `desired`; `seed` varies the random part of new
/// instance names ([`super::seed`] when the plan is made afresh, the first plan's when a rollout
/// plans again between its batches, so that the steps left keep the names it showed).
pub(super) fn plan(desired: &Desired, world: &World, options: &PlanOptions, seed: Seed<'_>) -> Plan {
    let progress = Deadlines::of(desired, world, options);
    let world = &Indexed::new(world);
    let mut names = Names::new(world.world, seed);
    let scope = desired.origin.scope();
    let mut pools: Vec<PoolPlan> = desired
        .pools
        .iter()
        .filter(|dp| options.covers(dp.name()))
        .map(|dp| {
            // A rollback plans towards the template the pool ran before.
            let dp = progress.rollbacks.iter().find(|r| r.name() == dp.name()).unwrap_or(dp);
            let target = Target::declared(dp, world.world);
            // Another source's containers of the same pool name are not ours to replace; this
            // source spelled another way (a directory, or its pool file) is not another source.
            let owner = world.world.containers.iter().find_map(|c| {
                c.scope.as_deref().filter(|s| c.pool == dp.name() && !desired.origin.spells(s))
            });
            match owner {
                Some(owner) if !options.adopt => PoolPlan {
                    status: PoolStatus::Foreign,
                    managed_by: Some(owner.to_owned()),
                    ..keep_pool(&target, world)
                },
                _ => plan_pool(&target, world, &mut names, &progress, options),
            }
        })
        .collect();

    // Pools this source created earlier but no longer declares. Pools of other scopes belong to
    // another source and are left alone entirely.
    let declared: FxHashSet<&str> = desired.pools.iter().map(DesiredPool::name).collect();
    let undeclared: BTreeSet<&str> = world
        .world
        .containers
        .iter()
        .filter(|c| c.scope.as_deref() == Some(scope.as_str()) && !declared.contains(c.pool.as_str()))
        .filter(|c| options.covers(&c.pool))
        .map(|c| c.pool.as_str())
        .collect();
    for name in undeclared {
        let target = Target::undeclared(name, world.world, options.prune);
        pools.push(if options.prune {
            plan_pool(&target, world, &mut names, &progress, options)
        } else {
            keep_pool(&target, world)
        });
    }

    let mut summary = Summary::default();
    for pool in &pools {
        let updated: FxHashSet<&str> = pool
            .steps
            .iter()
            .filter(|s| matches!(s.action, Action::UpdateInPlace { .. }))
            .map(|s| s.instance.as_str())
            .collect();
        for step in &pool.steps {
            match step.action {
                Action::Create { .. } => summary.create += 1,
                Action::Configure(_) => summary.configure += 1,
                Action::UpdateInPlace { .. } => summary.update_in_place += 1,
                _ => {}
            }
        }
        for instance in &pool.instances {
            match instance.fate {
                // An instance updated in place is kept, but not unchanged.
                Fate::Keep if !updated.contains(instance.name.as_str()) => summary.unchanged += 1,
                Fate::Keep => {}
                Fate::Retire => summary.retire += 1,
            }
            match instance.health.as_ref().map(|h| h.action) {
                Some("waiting") => summary.unavailable += 1,
                Some("replace") if instance.fate == Fate::Retire => summary.unhealthy += 1,
                Some(action) if action.starts_with("held") => summary.unremediated += 1,
                _ => {}
            }
        }
        summary.outdated_kept += pool.outdated_kept;
        summary.undeclared += usize::from(pool.status == PoolStatus::Undeclared);
        summary.degraded += usize::from(pool.degraded.is_some());
        summary.foreign += usize::from(pool.status == PoolStatus::Foreign);
        summary.window_held += pool.instances.iter().filter(|i| i.held_by_window.is_some()).count();
        summary.canary_waiting += usize::from(pool.canary.as_ref().is_some_and(CanaryState::holds));
    }
    Plan {
        origin: desired.origin.clone(),
        pools,
        summary,
        seed: names.seed,
        rollbacks: progress.rollbacks,
        now: world.world.now,
    }
}

/// Whether an instance is serving: its container is up and, for a pool whose instances are
/// Nodes, its Node exists, is Ready and is not being retired by poolctl. A cordon that someone
/// else made is theirs: it neither marks the instance for replacement nor is undone. The
/// simulated world counts with the same rule, so that the capacity invariant is checked against
/// the planner's own notion of "up".
///
/// Its coming up must be recorded, unless the world shows it up another way that a prune cannot
/// take away: its Node is Ready (which its kubelet turns only once bootstrap and join are done),
/// or, for a pool with nothing to run in a new container (`nothing_to_run`: no bootstrap, no
/// join), its container is up. A lost record never makes a serving instance count as not up.
pub fn is_up(container: &Container, node: Option<&Node>, with_nodes: bool, nothing_to_run: bool) -> bool {
    container.is_up()
        && (container.came_up.is_some() || with_nodes || nothing_to_run)
        && (!with_nodes || node.is_some_and(|n| n.ready && !n.cordoned_by_poolctl))
}

/// The world with lookups by name, so that planning stays linear in its size.
struct Indexed<'a> {
    world: &'a World,
    /// Each Node's index in `world.nodes`, by name.
    index: FxHashMap<&'a str, usize>,
    /// The pods of the world's Nodes grouped by Node, each group in the order a drain preview
    /// lists them: one vector, not one per Node.
    pods: Vec<&'a Pod>,
    /// Where each Node's group is in `pods`, by the Node's index.
    groups: Vec<std::ops::Range<usize>>,
    /// The PodDisruptionBudgets by namespace (a budget selects pods of its own namespace only),
    /// each with its `namespace/name`, made once rather than for every pod it covers.
    budgets: FxHashMap<&'a str, Vec<(&'a Pdb, String)>>,
}

impl<'a> Indexed<'a> {
    fn new(world: &'a World) -> Self {
        let index: FxHashMap<&str, usize> =
            world.nodes.iter().enumerate().map(|(i, n)| (n.name.as_str(), i)).collect();
        // A counting sort by Node: count each Node's pods, give each a range, place them.
        let of_pod: Vec<Option<usize>> =
            world.pods.iter().map(|p| index.get(p.node.as_str()).copied()).collect();
        let mut counts = vec![0usize; world.nodes.len()];
        for &i in of_pod.iter().flatten() {
            counts[i] += 1;
        }
        let mut start = 0;
        let groups: Vec<std::ops::Range<usize>> = counts
            .iter()
            .map(|&n| {
                start += n;
                start - n..start
            })
            .collect();
        let mut next: Vec<usize> = groups.iter().map(|g| g.start).collect();
        let mut placed: Vec<Option<&Pod>> = vec![None; start];
        for (pod, &i) in world.pods.iter().zip(&of_pod) {
            if let Some(i) = i {
                placed[next[i]] = Some(pod);
                next[i] += 1;
            }
        }
        let mut pods: Vec<&Pod> = placed.into_iter().flatten().collect();
        for group in &groups {
            pods[group.clone()].sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        }
        let mut budgets: FxHashMap<&str, Vec<(&Pdb, String)>> = FxHashMap::default();
        for pdb in &world.pdbs {
            budgets.entry(pdb.namespace.as_str()).or_default().push((pdb, pdb.id()));
        }
        Self { world, index, pods, groups, budgets }
    }

    /// The budgets that cover `pod`, with their ids, in the world's order.
    fn budgets_covering(&self, pod: &Pod) -> Vec<&(&'a Pdb, String)> {
        let budgets = self.budgets.get(pod.namespace.as_str()).map_or(&[][..], Vec::as_slice);
        budgets.iter().filter(|(pdb, _)| pdb.covers(pod)).collect()
    }

    fn node(&self, name: &str) -> Option<&'a Node> {
        self.index.get(name).map(|&i| &self.world.nodes[i])
    }

    /// The pods bound to the Node `name`, in drain-preview order.
    fn pods_on(&self, name: &str) -> &[&'a Pod] {
        self.index.get(name).map_or(&[], |&i| &self.pods[self.groups[i].clone()])
    }
}

/// The outdated instances of `dp` that an update in place brings to its template: running,
/// come up, where the spec places the pool, and created from a template (its label) that
/// differs from the spec's in live fields only. An instance without that label (or whose
/// label does not read) is replaced: what it runs is not known. `strategy: OnDelete` updates
/// nothing by itself, as it replaces nothing.
fn updatable_in_place(dp: &DesiredPool, world: &World) -> FxHashSet<String> {
    let rollout = &dp.pool.spec.rollout;
    if rollout.in_place == InPlace::Never || rollout.strategy == Strategy::OnDelete {
        return FxHashSet::default();
    }
    let canonical = std::cell::OnceCell::new();
    world
        .containers
        .iter()
        .filter(|c| c.pool == dp.name() && c.template_hash != dp.template_hash && c.elsewhere.is_none())
        .filter(|c| c.state == crate::model::ContainerState::Running && c.came_up.is_some())
        .filter(|c| {
            let new = canonical.get_or_init(|| canonical_template(&dp.pool.spec));
            c.template.as_deref().is_some_and(|old| matches!(diff_templates(old, new), TemplateDiff::Live(_)))
        })
        .map(|c| c.name.clone())
        .collect()
}

/// The `update-in-place` steps of the instances `target` updates in place and keeps, by name,
/// `maxUnavailable` (at least one) to a batch: the rollout observes and plans again after each
/// batch, so a failed update halts it with the rest as they were.
fn updates_in_place(
    target: &Target<'_>,
    all: &[Instance<'_>],
    kept: &FxHashSet<&str>,
    steps: &mut Vec<Step>,
) {
    let Some(dp) = target.pool else { return };
    let new = canonical_template(&dp.pool.spec);
    let mut updated: Vec<&Instance<'_>> =
        all.iter().filter(|i| kept.contains(i.name) && target.in_place.contains(i.name)).collect();
    if updated.is_empty() {
        return;
    }
    updated.sort_by_key(|i| i.name);
    let per_batch = target.max_unavailable.max(1);
    for (n, instance) in updated.into_iter().enumerate() {
        let old = instance.container.and_then(|c| c.template.as_deref()).unwrap_or_default();
        let TemplateDiff::Live(fields) = diff_templates(old, &new) else { continue };
        let batch = u32::try_from(n / per_batch + 1).unwrap_or(u32::MAX);
        let action = Action::UpdateInPlace { template_hash: dp.template_hash.clone(), fields };
        steps.push(Step { batch, instance: instance.shared.clone(), action });
    }
    // Each batch's updates go after what else it does, whose steps are in batch order already.
    steps.sort_by_key(|s| s.batch);
}

/// What a pool should become, reduced to what planning needs.
#[derive(Clone)]
struct Target<'a> {
    name: &'a str,
    status: PoolStatus,
    /// `None` for an undeclared pool: every instance is outdated.
    hash: Option<&'a str>,
    pool: Option<&'a DesiredPool>,
    replicas: usize,
    max_surge: usize,
    max_unavailable: usize,
    /// Instances are also Kubernetes Nodes: new ones are awaited as Nodes, and an instance
    /// serves only while its Node is Ready (the capacity accounting).
    with_nodes: bool,
    /// Some instance is a Node, by the spec or by its container's cluster labels: Nodes are
    /// observed and joined to containers, and orphan Nodes of the pool are cleaned up.
    any_nodes: bool,
    /// The outdated instances whose template differs from the spec's in live fields only
    /// (`spec.rollout.inPlace`): they count as current, and are updated where they run.
    in_place: FxHashSet<String>,
}

impl<'a> Target<'a> {
    fn declared(dp: &'a DesiredPool, world: &World) -> Self {
        let spec = &dp.pool.spec;
        let exists = world.containers.iter().any(|c| c.pool == dp.name());
        let labelled = world.containers.iter().any(|c| c.pool == dp.name() && c.cluster.is_some());
        Self {
            name: dp.name(),
            status: if exists { PoolStatus::Existing } else { PoolStatus::New },
            hash: Some(&dp.template_hash),
            pool: Some(dp),
            replicas: to_count(spec.replicas),
            max_surge: to_count(spec.rollout.surge(spec.replicas)),
            max_unavailable: to_count(spec.rollout.unavailable(spec.replicas)),
            with_nodes: spec.node.is_some(),
            any_nodes: spec.node.is_some() || labelled,
            in_place: updatable_in_place(dp, world),
        }
    }

    /// A pool the source no longer declares, retired as if it had zero replicas. Its spec is
    /// gone, so whether its instances are Nodes is read from the world: if a container says it
    /// was created as a Node (its cluster labels) or any Node belongs to the pool, every
    /// instance is retired the Kubernetes way, never by just removing the container.
    fn undeclared(name: &'a str, world: &World, pruned: bool) -> Self {
        let containers: FxHashSet<&str> =
            world.containers.iter().filter(|c| c.pool == name).map(|c| c.name.as_str()).collect();
        let with_nodes = world.containers.iter().any(|c| c.pool == name && c.cluster.is_some())
            || world
                .nodes
                .iter()
                .any(|n| n.pool.as_deref() == Some(name) || containers.contains(n.name.as_str()));
        Self {
            name,
            status: if pruned { PoolStatus::Pruned } else { PoolStatus::Undeclared },
            hash: None,
            pool: None,
            replicas: 0,
            max_surge: 1,
            max_unavailable: 0,
            with_nodes,
            any_nodes: with_nodes,
            in_place: FxHashSet::default(),
        }
    }

    /// Whether the instance runs the spec's template where the spec places the pool: one left
    /// on a Docker endpoint the pool moved away from is replaced like an outdated one.
    fn is_current(&self, instance: &Instance<'_>) -> bool {
        instance.container.is_some_and(|c| {
            (Some(c.template_hash.as_str()) == self.hash || self.in_place.contains(&c.name))
                && c.elsewhere.is_none()
        })
    }

    /// The Docker endpoint the spec names for the pool; `None` for the current one.
    fn docker(&self) -> Option<String> {
        self.pool.and_then(|dp| dp.pool.spec.docker.as_ref()).map(crate::spec::DockerSpec::describe)
    }

    /// Whether the instance is a Node, and so is retired with cordon, drain and Node deletion:
    /// the spec says the pool's instances are Nodes, or the container was created as one, or
    /// its Node was observed. Whichever holds, dropping only the container would leave the
    /// Node's pods to die undrained.
    fn is_node(&self, instance: &Instance<'_>) -> bool {
        self.with_nodes || instance.node.is_some() || instance.container.is_some_and(|c| c.cluster.is_some())
    }
}

fn to_count(n: i64) -> usize {
    usize::try_from(n).unwrap_or(0)
}

/// One instance as observed: a container, its Node, or (an orphan) a Node alone.
struct Instance<'a> {
    name: &'a str,
    /// The same name, for the plan's steps and statuses to share.
    shared: InstanceName,
    container: Option<&'a Container>,
    node: Option<&'a Node>,
    /// Serving now.
    up: bool,
    /// What the pool's health settings make of it.
    health: Assessment,
    /// Why it is left alone, for a Node whose container is not in view: not poolctl's, or its
    /// container out of view rather than gone. Such an instance is neither kept nor retired.
    left: Option<String>,
}

impl Instance<'_> {
    /// When its container was made: Docker's second, then poolctl's nanosecond within it.
    fn created(&self) -> (i128, i128) {
        self.container.map_or((i128::from(i64::MIN), 0), |c| (i128::from(c.created), c.created_precise))
    }
}

/// The pool's instances: its containers, joined by name with their Nodes when the pool has
/// Nodes, plus the orphan Nodes (the pool's label, no container). Sorted by name.
fn instances<'a>(target: &Target<'_>, world: &Indexed<'a>) -> Vec<Instance<'a>> {
    let containers = world.world.containers.iter().filter(|c| c.pool == target.name);
    let mut out: Vec<Instance<'a>> = containers
        .map(|c| {
            let node = target.any_nodes.then(|| world.node(&c.name)).flatten();
            let health = match target.pool {
                Some(dp) => {
                    let locked = world.world.locked.contains(target.name);
                    assess(&dp.pool.spec, c, node, world.world.now, locked)
                }
                // A pool no longer declared is retired whole: its instances are not judged.
                None => Assessment::plain(is_up(c, node, target.with_nodes, false)),
            };
            let up = health.standing == Standing::Up;
            Instance {
                name: &c.name,
                shared: c.name.as_str().into(),
                container: Some(c),
                node,
                up,
                health,
                left: None,
            }
        })
        .collect();
    if target.any_nodes {
        let joined: FxHashSet<&'a str> = out.iter().map(|i| i.name).collect();
        // A Node that registered before poolctl labelled it (an apply killed during the Ready
        // wait) is still known by its name.
        let ours = |n: &Node| {
            n.pool.as_deref() == Some(target.name)
                || (n.pool.is_none() && is_instance_name(target.name, &n.name))
        };
        let orphans = world.world.nodes.iter().filter(|n| ours(n) && !joined.contains(n.name.as_str()));
        out.extend(orphans.map(|n| Instance {
            name: &n.name,
            shared: n.name.as_str().into(),
            container: None,
            node: Some(n),
            up: false,
            health: Assessment::plain(false),
            left: why_left(target, n, world.world),
        }));
    }
    out.sort_by(|a, b| a.name.cmp(b.name));
    out
}

/// Why a Node of the pool whose container is not in view is left alone, if it is. Absence is
/// not evidence: it is retired only when its container is provably gone (the daemon its
/// reference names was listed and shows no such container, or poolctl recorded it joining and
/// the pool's daemon shows none) or its kubelet has been silent past the pool's timeout. And
/// ownership is proven: a Node that carries the pool label but no reference of poolctl's (a
/// label set by hand, over somebody else's container) is never poolctl's to delete.
fn why_left(target: &Target<'_>, node: &Node, world: &World) -> Option<String> {
    let Some(reference) = &node.reference else {
        if node.pool.is_none() {
            // Found only through the pool's lock, which recorded it joining: poolctl made it,
            // on a daemon this run lists (the pool's own, always listed).
            return world
                .listed
                .is_empty()
                .then(|| "no Docker daemon was listed: its container may be out of view".to_owned());
        }
        return Some(format!(
            "not poolctl's: its Node carries {}={} but no {} of poolctl's (a label set by hand?)",
            labels::POOL,
            target.name,
            labels::CONTAINER_ID
        ));
    };
    if world.listed.contains(&reference.docker_host) {
        return world
            .containers
            .iter()
            .any(|c| c.id == reference.container_id)
            .then(|| format!("its container {} is there under another name or pool", reference.describe()));
    }
    let default_health = crate::spec::HealthSpec::default();
    let health = target.pool.map_or(&default_health, |dp| &dp.pool.spec.health);
    if silent_for(health, node, world.now).is_some() {
        return None;
    }
    Some(format!(
        "its container {} is out of view: that daemon was not listed; left alone while its kubelet answers",
        reference.describe()
    ))
}

fn plan_pool(
    target: &Target<'_>,
    world: &Indexed<'_>,
    names: &mut Names<'_>,
    progress: &Deadlines,
    options: &PlanOptions,
) -> PoolPlan {
    let replace = &options.replace;
    let mut all = instances(target, world);
    // An outdated instance whose coming up is not recorded, but that looks up (its Node Ready,
    // or its container up with nothing left to run), may serve: its record may just be lost (a
    // `docker container prune`), so it counts as up and goes within the availability budget,
    // never for free. Absence of a record is not evidence that it never served.
    for instance in all.iter_mut().filter(|i| i.health.resumable && !target.is_current(i)) {
        instance.health.count_as_up();
        instance.up = true;
    }
    // `--replace NAME`, a Node labelled poolctl.dev/replace=true, or `spec.rollout.after` come
    // and gone past the instance's creation: replaced although current.
    let (born_before, max_age) = replaced_before(target, world.world.now);
    let marked = |i: &Instance<'_>| marked_by(i, replace, born_before).is_some();
    let held = hold_if_too_many_unhealthy(target, &mut all, &marked);
    skip_remediation(target, &mut all, replace);
    // Which of more instances than needed go first: the delete policy's order, the last kept.
    let policy = target.pool.map(|dp| dp.pool.spec.rollout.delete_policy).unwrap_or_default();
    let order = |i: &Instance<'_>| match policy {
        DeletePolicy::Oldest => i.created(),
        DeletePolicy::Newest => (-i.created().0, -i.created().1),
        DeletePolicy::Random => {
            use std::hash::{Hash, Hasher};
            let mut h = rustc_hash::FxHasher::default();
            i.name.hash(&mut h);
            (i128::from(h.finish()), 0)
        }
    };

    // Keep the newest current instances that serve, then the newest that are waited for
    // (starting or unavailable within their timeouts): a waited-for instance takes a replica's
    // place, so it is not replaced, but it does not count as serving.
    let waited = |i: &Instance<'_>| i.health.standing == Standing::Waiting;
    // `strategy: OnDelete`: an outdated instance is kept as a current one is, and replaced only
    // when marked, dead or unhealthy; a scale-down retires the outdated ones first.
    let on_delete = target.pool.is_some_and(|dp| dp.pool.spec.rollout.strategy == Strategy::OnDelete);
    let mut candidates: Vec<&Instance<'_>> = all
        .iter()
        .filter(|i| (i.up || waited(i)) && (target.is_current(i) || on_delete) && !marked(i))
        .collect();
    // Of those waited for, one that looks up (resumable: only its record is missing) may serve.
    candidates.sort_by_key(|i| {
        std::cmp::Reverse((target.is_current(i), i.up, i.health.resumable, order(i), i.name))
    });
    let (mut kept, disrupt_held) = keep(target.replicas, &all, &candidates, replace);
    let canary = canaries(target, &all, world.world, progress);
    let canary_hold = hold_at_canaries(target, &mut all, canary.as_ref(), &mut kept);

    // DESIGN invariant 6. Instances that do not serve lead because retiring them costs no
    // availability: they clear room for the surge even when no up instance may go yet (an
    // exited current container next to a full set of outdated ones would otherwise block the
    // rollout). An outdated instance that is waited for is not retired yet: the rollout waits
    // for it to serve again, or to turn unhealthy; nor is one that `maxUnhealthy` holds.
    let retired = |i: &Instance<'_>| match (waited(i), i.health.held) {
        (false, _) => true,
        // One of more instances than `replicas`: a scale-down, not a judgement of its health.
        (true, false) => target.is_current(i),
        // Held by `maxUnhealthy`: the fault is taken to be the cluster's; it is left alone.
        (true, true) => false,
    };
    let reason = |i: &Instance<'_>| disruption_reason(target, i, marked_by(i, replace, born_before));
    let (now, ignore) = (world.world.now, options.ignore_windows);
    let (windows, window_held) = hold_in_windows(target, &mut all, &mut kept, &retired, &reason, now, ignore);
    let mut retirees: Vec<&Instance<'_>> =
        all.iter().filter(|i| !kept.contains(i.name) && i.left.is_none() && retired(i)).collect();
    retirees.sort_by_key(|i| (i.up && !marked(i), target.is_current(i), order(i), i.name));
    // A stalled rollout creates nothing, so it retires nothing that would have been replaced
    // either: what serves keeps serving. Nor its failed attempts, which are what says it
    // stalled until the source changes (gone, a new pool would look new again and be made
    // anew for ever). What else costs nothing, what a scale-down drops, and a teardown
    // (`replicas: 0`), still go.
    if progress.paused(target.name) && target.replicas > 0 {
        let attempt =
            |i: &Instance<'_>| target.is_current(i) && i.container.is_some_and(|c| c.came_up.is_none());
        retirees.retain(|i| if i.up { target.is_current(i) && !marked(i) } else { !attempt(i) });
    }
    let leaving: FxHashSet<&str> = retirees.iter().map(|i| i.name).collect();

    let mut steps = configure(target, &all, &kept);
    let resumed = resume(target, &all, &kept, &mut steps);
    let history = world.world.history.get(target.name).map_or(&[][..], Vec::as_slice);
    let creations = Creations::of(target, history, progress);
    let (rolled, kept_count) = match canary_hold {
        Some(n) => canary_rollout(target, &all, &kept, n),
        None => (target.clone(), kept.len()),
    };
    rollout(&rolled, &all, (kept_count, resumed), retirees, world, names, &creations, &mut steps);
    updates_in_place(target, &all, &kept, &mut steps);
    let (revision, revision_end) = revision_of(target, &all, &steps, history, progress);
    PoolPlan {
        name: target.name.to_owned(),
        status: target.status,
        template_hash: target.hash.map(str::to_owned),
        replicas: u32::try_from(target.replicas).unwrap_or(u32::MAX),
        template_change: target.pool.and_then(|dp| template_change(dp, world.world)),
        docker: target.docker(),
        copy_from: target.pool.and_then(|dp| dp.copied_from.as_ref()).map(ToString::to_string),
        drain_timeout_action: drain_escalation(target, &steps),
        instances: all
            .iter()
            .map(|i| {
                let held = (disrupt_held.contains(i.name), window_held.get(i.name).copied());
                held_status(
                    status(target, i, !leaving.contains(i.name)),
                    i,
                    held,
                    marked_by(i, replace, born_before),
                )
            })
            .collect(),
        unhealthy_held: held,
        outdated_kept: outdated_kept(target, &all, &kept, canary_hold.is_some()),
        degraded: progress.stalled.get(target.name).cloned(),
        next_check: look_again(&all, (&kept, &window_held), &windows, (max_age, world.world.now))
            .into_iter()
            .chain(canary.as_ref().filter(|(_, c)| c.holds()).and_then(|(_, c)| c.auto_promote_secs))
            .min(),
        canary: canary.map(|(_, c)| c),
        windows,
        revision,
        revision_end,
        steps,
        ..PoolPlan::default()
    }
}

/// The canaries that lead the pool's rollout, if canaries lead it ([`canary::count`]): how many,
/// and what the plan says of them.
fn canaries(
    target: &Target<'_>,
    all: &[Instance<'_>],
    world: &World,
    progress: &Deadlines,
) -> Option<(usize, CanaryState)> {
    let dp = target.pool?;
    let rolling_back = progress.rollbacks.iter().any(|r| r.name() == dp.name());
    let mine = || all.iter().filter(|i| i.container.is_some() && i.left.is_none());
    let (outdated, current) =
        (mine().any(|i| !target.is_current(i)), mine().filter(|i| target.is_current(i)).count());
    let n = canary::count(dp, world, rolling_back, (outdated, current))?;
    let up = all.iter().filter(|i| i.up && target.is_current(i)).filter_map(|i| i.container);
    Some((n, canary::judge(dp, world, n, up.map(canary::came_up).collect())))
}

/// The outdated instances the plan keeps; none while canaries hold (`canaries`): what they keep
/// is said as such, not as kept outdated instances.
fn outdated_kept(target: &Target<'_>, all: &[Instance<'_>], kept: &FxHashSet<&str>, canaries: bool) -> usize {
    all.iter().filter(|i| !canaries && !target.is_current(i) && kept.contains(i.name)).count()
}

/// Canaries lead a new template: until they are promoted, every old instance is kept as it is
/// (added to `kept`), and only the canaries are made. How many canaries the pool holds at, if
/// it holds.
fn hold_at_canaries<'a>(
    target: &Target<'_>,
    all: &mut [Instance<'a>],
    canary: Option<&(usize, CanaryState)>,
    kept: &mut FxHashSet<&'a str>,
) -> Option<usize> {
    let n = canary.filter(|(_, c)| c.holds()).map(|(n, _)| *n)?;
    let old = |i: &&mut Instance<'_>| i.container.is_some() && i.left.is_none() && !target.is_current(i);
    for instance in all.iter_mut().filter(old) {
        // An old instance that does not serve is not replaced either: said as held.
        if instance.health.standing == Standing::Unhealthy {
            instance.health.hold_for_canaries();
        }
        kept.insert(instance.name);
    }
    Some(n)
}

/// The rollout of a pool that holds at `n` canaries: the canaries not made yet are created,
/// beside every old instance (on top of `maxSurge`, as Nomad's canaries are: the pool runs
/// `replicas` + `n` until they are promoted), and nothing old is retired (the caller keeps it).
/// Returns the target with that room, and the count of instances kept to plan with.
fn canary_rollout<'a>(
    target: &Target<'a>,
    all: &[Instance<'_>],
    kept: &FxHashSet<&str>,
    n: usize,
) -> (Target<'a>, usize) {
    let made = all.iter().filter(|i| kept.contains(i.name) && target.is_current(i)).count();
    let to_create = n.saturating_sub(made);
    let alive = all.iter().filter(|i| i.container.is_some()).count();
    let room = (alive + to_create).saturating_sub(target.replicas);
    let surged = Target { max_surge: target.max_surge.max(room), ..target.clone() };
    (surged, target.replicas.saturating_sub(to_create))
}

/// What a drain of the pool does past its timeout, when its `timeoutAction` goes on and `steps`
/// retire a Node instance: a stop drains whatever Node the container has by then, so a stop
/// counts as a drain does.
fn drain_escalation(target: &Target<'_>, steps: &[Step]) -> Option<DrainEscalation> {
    let spec = &target.pool?.pool.spec;
    let action = spec.drain.timeout_action;
    let drains = steps.iter().any(|s| matches!(s.action, Action::Drain(_) | Action::Stop));
    (!action.is_halt() && target.with_nodes && drains)
        .then_some(DrainEscalation { action, drain_timeout: spec.rollout.drain_timeout })
}

/// The number of the revision a rollout of template `hash` begins, if it begins one: the pool's
/// first, a template other than its last revision's, or the last one's template again after it
/// ended without completing (`apply` trying a stalled rollout again). A scale-up or the
/// replacement of a dead instance goes on within the last revision.
fn new_revision(history: &[Revision], hash: &str, progress: &Deadlines, pool: &str) -> Option<u64> {
    let Some(last) = history.last() else { return Some(1) };
    let again =
        progress.retried.contains(pool) || last.end.is_some_and(|e| e.result != RolloutResult::Complete);
    (last.template_hash != hash || again).then(|| last.number.saturating_add(1))
}

/// The revision the pool's plan rolls out, while its end is not recorded (the one its first
/// creation begins, or the last one, under way, of its target template), and the end to record
/// of its last revision, if the plan finds one: `Complete` once every replica runs its template
/// and serves with nothing left to do, or how its stalled rollout ended.
fn revision_of(
    target: &Target<'_>,
    all: &[Instance<'_>],
    steps: &[Step],
    history: &[Revision],
    progress: &Deadlines,
) -> (Option<u64>, Option<(u64, RolloutResult)>) {
    let begun = steps.iter().find_map(|s| match s.action {
        Action::Create { revision, .. } => revision,
        _ => None,
    });
    let open = history.last().filter(|r| r.end.is_none());
    let converged = target.pool.is_some()
        && steps.is_empty()
        && all.len() == target.replicas
        && all.iter().all(|i| target.is_current(i) && i.up && i.left.is_none());
    let end = open.and_then(|r| match progress.ended.get(target.name) {
        Some((hash, result)) if *hash == r.template_hash => Some((r.number, *result)),
        _ if converged && Some(r.template_hash.as_str()) == target.hash => {
            Some((r.number, RolloutResult::Complete))
        }
        _ => None,
    });
    let under_way = open.filter(|r| Some(r.template_hash.as_str()) == target.hash && end.is_none());
    (begun.or(under_way.map(|r| r.number)), end)
}

/// The creation times before which an instance is replaced although it is current:
/// `spec.rollout.after`, once come, and `maxAge` ago; with `maxAge` in seconds.
fn replaced_before(target: &Target<'_>, now: i64) -> ((Option<i64>, Option<i64>), Option<i64>) {
    let rollout = target.pool.map(|dp| &dp.pool.spec.rollout);
    let after = rollout.and_then(crate::spec::RolloutSpec::after_secs).filter(|t| *t <= now);
    let max_age =
        rollout.and_then(|r| r.max_age).map(|age| i64::try_from(age.get().as_secs()).unwrap_or(i64::MAX));
    ((after, max_age.map(|age| now.saturating_sub(age))), max_age)
}

/// When the plan should be made again (seconds since the Unix epoch): when the first instance
/// waited for turns unhealthy, or the first instance kept expires (`maxAge`), a second past it.
/// One kept although it expired already (canaries hold the old instances as they are) is no
/// reason to look again: it would wake the watch at once, again and again.
fn next_check(
    all: &[Instance<'_>],
    kept: &dyn Fn(&str) -> bool,
    (max_age, now): (Option<i64>, i64),
) -> Option<i64> {
    let waited =
        all.iter().filter(|i| i.health.standing == Standing::Waiting).filter_map(|i| i.health.deadline);
    let expiry = max_age.and_then(|age| {
        let kept = all.iter().filter(|i| kept(i.name)).filter_map(|i| i.container);
        kept.map(|c| c.created.saturating_add(age).saturating_add(1)).filter(|at| *at > now).min()
    });
    waited.chain(expiry).min()
}

/// Why the instance is replaced although it may be current, if it is: `--replace`, its Node's
/// label `poolctl.dev/replace=true`, `spec.rollout.after` (a time come, `after`, later than its
/// creation), or `spec.rollout.maxAge` (it was made before `expired`, that long ago).
fn marked_by(
    i: &Instance<'_>,
    replace: &BTreeSet<String>,
    (after, expired): (Option<i64>, Option<i64>),
) -> Option<(&'static str, DisruptionReason)> {
    if replace.contains(i.name) {
        Some(("--replace", DisruptionReason::Replace))
    } else if i.node.is_some_and(|n| n.config.labels.get(labels::REPLACE).is_some_and(|v| v == "true")) {
        Some(("label poolctl.dev/replace=true", DisruptionReason::Replace))
    } else if after.is_some_and(|t| i.container.is_some_and(|c| c.created < t)) {
        Some(("created before spec.rollout.after", DisruptionReason::Rollout))
    } else if expired.is_some_and(|t| i.container.is_some_and(|c| c.created <= t)) {
        Some(("older than spec.rollout.maxAge", DisruptionReason::Expiry))
    } else {
        None
    }
}

/// Why retiring the instance would disrupt it, as disruption windows name it: one reason, the
/// first that applies of: it does not serve (`remediation`), it is marked for replacement
/// (`replace`), it runs an outdated template or was made before `spec.rollout.after`
/// (`rollout`), it expired (`expiry`), the pool has more than it needs (`scaleDown`). `None`
/// for what disrupts nothing a window governs: an orphan Node's cleanup, and the end of a
/// retirement an earlier run began (its Node cordoned by poolctl, it serves no more).
fn disruption_reason(
    target: &Target<'_>,
    i: &Instance<'_>,
    marked: Option<(&'static str, DisruptionReason)>,
) -> Option<DisruptionReason> {
    i.container?;
    match i.health.standing {
        Standing::Down => None,
        Standing::Unhealthy => Some(DisruptionReason::Remediation),
        // Retired only as one more than `replicas` (see `plan_pool`).
        Standing::Waiting => Some(DisruptionReason::ScaleDown),
        Standing::Up => Some(match marked {
            Some((_, reason)) => reason,
            None if !target.is_current(i) => DisruptionReason::Rollout,
            None => DisruptionReason::ScaleDown,
        }),
    }
}

/// Hold back what the pool's disruption windows hold at `now`: of the instances the plan would
/// retire (not `kept`, `retired`), each whose `reason` a window holds back now is kept, in a
/// replica's place (so that nothing is created for it either), with that reason. Returns what
/// the plan says of each reason held, with the instances it keeps, and those. With `ignore`
/// (`--ignore-windows`) none is held, and what would have been is said as overridden.
fn hold_in_windows<'a>(
    target: &Target<'_>,
    all: &mut [Instance<'a>],
    kept: &mut FxHashSet<&'a str>,
    retired: &dyn Fn(&Instance<'_>) -> bool,
    reason: &dyn Fn(&Instance<'_>) -> Option<DisruptionReason>,
    now: i64,
    ignore: bool,
) -> (Vec<WindowHold>, FxHashMap<&'a str, DisruptionReason>) {
    let Some(dp) = target.pool else { return Default::default() };
    let windows = Windows::of(&dp.pool.spec.disruption);
    if windows.is_empty() {
        return Default::default();
    }
    let mut judged: BTreeMap<DisruptionReason, Option<WindowHold>> = BTreeMap::new();
    let mut kept_back = FxHashMap::default();
    let leaves = |i: &&mut Instance<'_>| !kept.contains(i.name) && i.left.is_none() && retired(i);
    for instance in all.iter_mut().filter(leaves) {
        let Some(why) = reason(instance) else { continue };
        let hold = judged.entry(why).or_insert_with(|| {
            windows.held(why, now).map(|h| WindowHold {
                reason: why,
                window: format!("spec.disruption.windows[{}]", h.index),
                kind: h.kind,
                schedule: h.schedule.clone(),
                time_zone: h.zone.clone(),
                until: h.until_local.clone(),
                until_secs: h.until,
                instances: Vec::new(),
                ignored: ignore,
                message: h.describe(),
            })
        });
        if let Some(hold) = hold {
            hold.instances.push(instance.shared.clone());
            if !ignore {
                kept_back.insert(instance.name, why);
                if why == DisruptionReason::Remediation {
                    instance.health.hold_for_window();
                }
            }
        }
    }
    kept.extend(kept_back.keys());
    (judged.into_values().flatten().collect(), kept_back)
}

/// An instance's status with why it is kept although the plan would disrupt it, if it is (its
/// Node's `do-not-disrupt`, `held.0`; a disruption window, `held.1`), or else why it is
/// replaced although current (`marked`).
fn held_status(
    mut status: InstanceStatus,
    i: &Instance<'_>,
    held: (bool, Option<DisruptionReason>),
    marked: Option<(&'static str, DisruptionReason)>,
) -> InstanceStatus {
    match held {
        (true, _) => status.do_not_disrupt = i.node.and_then(|n| n.retirement.do_not_disrupt),
        (false, Some(reason)) => status.held_by_window = Some(reason),
        (false, None) if status.health.is_none() => status.replace = marked.map(|(by, _)| by),
        (false, None) => {}
    }
    status
}

/// When to plan again ([`next_check`]), or when the first window that holds something back
/// opens, whichever comes first. The instances the windows hold (`held`) do not count as kept
/// here: one held although it expired must not wake the watch at once, again and again.
fn look_again(
    all: &[Instance<'_>],
    (kept, held): (&FxHashSet<&str>, &FxHashMap<&str, DisruptionReason>),
    windows: &[WindowHold],
    expiry: (Option<i64>, i64),
) -> Option<i64> {
    let opens = windows.iter().filter(|w| !w.ignored).filter_map(|w| w.until_secs).min();
    next_check(all, &|i| kept.contains(i) && !held.contains_key(i), expiry).into_iter().chain(opens).min()
}

/// What the pool's rollout progress says of the plan's creations.
#[derive(Debug, Clone)]
struct Creations {
    /// The rollout stalled (`failureAction: pause`): nothing is created.
    paused: bool,
    /// The first creation begins a rollout: it writes the record.
    starts: bool,
    /// For a rollback: the template it gives up, which its record names.
    rollback_from: Option<String>,
    /// The revision of the pool's history the first creation begins, if it begins one.
    revision: Option<u64>,
}

impl Creations {
    fn of(target: &Target<'_>, history: &[Revision], progress: &Deadlines) -> Self {
        let starts = progress.starts.contains(target.name);
        Self {
            paused: progress.paused(target.name),
            starts,
            rollback_from: progress.rolled_back_from(target.name).map(str::to_owned),
            revision: target
                .hash
                .filter(|_| starts)
                .and_then(|hash| new_revision(history, hash, progress, target.name)),
        }
    }
}

/// `maxUnhealthy`, as Cluster API's `MachineHealthCheck` applies it: when more of the pool's
/// instances are unhealthy than it allows, none is replaced (each is held, and waited for like
/// an unavailable one), since the fault is more likely the cluster's than every instance's.
/// Every instance that served and turned unhealthy counts, whatever its template: an outdated
/// one the rollout retires says as much about the cluster as a current one (Cluster API counts
/// every Machine it targets, those being deleted too). Only instances that served, of the
/// current template, are held: an instance that never came up (a failed rollout), an outdated
/// one, one marked for replacement (`--replace`), a pool being torn down (`replicas: 0`) and a
/// container-only pool (no cluster to blame) go whatever the count. Returns what the plan says
/// about it, with the way out.
fn hold_if_too_many_unhealthy(
    target: &Target<'_>,
    all: &mut [Instance<'_>],
    marked: &impl Fn(&Instance<'_>) -> bool,
) -> Option<String> {
    let dp = target.pool?;
    let spec = &dp.pool.spec;
    if spec.node.is_none() || spec.replicas == 0 {
        return None;
    }
    let health = &spec.health;
    // Served once, turned unhealthy, not marked for replacement: what the count is made of.
    let counted = |i: &Instance<'_>| {
        i.health.standing == Standing::Unhealthy
            && i.container.is_some_and(|c| c.came_up.is_some())
            && !marked(i)
    };
    let protected = |i: &Instance<'_>| counted(i) && target.is_current(i);
    let unhealthy = all.iter().filter(|i| counted(i)).count();
    let allowed = to_count(health.max_unhealthy(spec.replicas));
    let held: Vec<String> = all.iter().filter(|i| protected(i)).map(|i| i.name.to_owned()).collect();
    if unhealthy <= allowed || held.is_empty() {
        return None;
    }
    for instance in all.iter_mut().filter(|i| protected(i)) {
        instance.health.hold();
    }
    Some(format!(
        "{unhealthy} of {} unhealthy, above maxUnhealthy {}: replacing none; the cluster, not the \
         instances, looks at fault. To replace them anyway: `poolctl apply --replace {}`, or raise \
         spec.health.maxUnhealthy",
        crate::style::count(all.iter().filter(|i| i.container.is_some()).count(), "instance"),
        health.max_unhealthy,
        held.join(" --replace ")
    ))
}

/// The Node owner's `skip-remediation`: an unhealthy instance of the current template is
/// reported, not replaced (an outdated one still goes with the rollout; `--replace` overrides).
fn skip_remediation(target: &Target<'_>, all: &mut [Instance<'_>], replace: &BTreeSet<String>) {
    for instance in all.iter_mut().filter(|i| i.health.standing == Standing::Unhealthy) {
        let skip = instance.node.and_then(|n| n.retirement.skip_remediation);
        if let Some(annotation) =
            skip.filter(|_| target.is_current(instance) && !replace.contains(instance.name))
        {
            instance.health.skip_remediation(annotation);
        }
    }
}

/// The instances kept: the first `replicas` of `candidates`, in order, and before them every
/// one that serves on a Node whose owner set `do-not-disrupt`, whatever its template, in a
/// replica's place, until the annotation goes (only `--replace` overrides it). With them, those
/// kept by the annotation alone, which the plan names held.
fn keep<'a>(
    replicas: usize,
    all: &[Instance<'a>],
    candidates: &[&Instance<'a>],
    replace: &BTreeSet<String>,
) -> (FxHashSet<&'a str>, FxHashSet<&'a str>) {
    let undisrupted = |i: &Instance<'_>| {
        i.up && !replace.contains(i.name) && i.node.is_some_and(|n| n.retirement.do_not_disrupt.is_some())
    };
    let first: FxHashSet<&str> = candidates.iter().take(replicas).map(|i| i.name).collect();
    let mut kept: FxHashSet<&str> = all.iter().filter(|i| undisrupted(i)).map(|i| i.name).collect();
    let held = kept.iter().copied().filter(|name| !first.contains(name)).collect();
    let room = replicas.saturating_sub(kept.len());
    kept.extend(candidates.iter().filter(|i| !undisrupted(i)).take(room).map(|i| i.name));
    (kept, held)
}

/// The first batch's configure steps: the kept instances whose Node's labels or taints differ
/// from the spec's. Labels and taints are desired state like the template, so a killed apply, a
/// hand edit or a changed spec converges without replacing anything.
fn configure(target: &Target<'_>, all: &[Instance<'_>], kept: &FxHashSet<&str>) -> Vec<Step> {
    let Some((dp, node_spec)) = target.pool.and_then(|dp| Some((dp, dp.pool.spec.node.as_ref()?))) else {
        return Vec::new();
    };
    let mut wanted = node_spec.labels.clone();
    wanted.insert(labels::POOL.to_owned(), dp.name().to_owned());
    all.iter()
        // A resumed instance's `await-ready` configures its Node.
        .filter(|i| kept.contains(i.name) && !i.health.resumable)
        .filter_map(|i| {
            let node = i.node?;
            // A Node still coming up is configured, its uninitialized taint removed with its
            // labels, once it is Ready, not piecemeal before.
            let uninitialized = node.config.taints.iter().any(|t| t.key == labels::UNINITIALIZED);
            if uninitialized && !node.ready {
                return None;
            }
            let change = node.config.change_towards(&wanted, &node_spec.taints, labels::POOL, node.ready);
            // The Node's proof that it is this container's, written with its labels.
            let reference = i.container.map(container_ref).filter(|r| node.reference.as_ref() != Some(r));
            if change.is_none() && reference.is_none() {
                return None;
            }
            let mut changes = change.map(|c| c.describe(&node.config)).unwrap_or_default();
            changes.extend(reference.iter().map(|r| format!("+reference container {}", r.describe())));
            let preview = NodeConfigPreview {
                labels: wanted.clone(),
                taints: node_spec.taints.clone(),
                reference,
                changes,
            };
            Some(Step { batch: 1, instance: i.shared.clone(), action: Action::Configure(preview) })
        })
        .collect()
}

/// A starting instance whose coming up was cut short after its bootstrap and join is finished
/// in the first batch, before any retirement: its `await-ready` records it up. How many.
fn resume(target: &Target<'_>, all: &[Instance<'_>], kept: &FxHashSet<&str>, steps: &mut Vec<Step>) -> usize {
    let resumable: Vec<&Instance<'_>> =
        all.iter().filter(|i| kept.contains(i.name) && i.health.resumable).collect();
    for instance in &resumable {
        let action = Action::AwaitReady { node: target.with_nodes };
        steps.push(Step { batch: 1, instance: instance.shared.clone(), action });
    }
    resumable.len()
}

/// A pool that is shown, never touched: undeclared without `--prune`, or another source's
/// without `--adopt`.
fn keep_pool(target: &Target<'_>, world: &Indexed<'_>) -> PoolPlan {
    let all = instances(target, world);
    let containers = all.iter().filter(|i| i.container.is_some()).count();
    PoolPlan {
        name: target.name.to_owned(),
        status: target.status,
        replicas: u32::try_from(containers).unwrap_or(u32::MAX),
        docker: target.docker(),
        instances: all.iter().map(|i| status(target, i, true)).collect(),
        ..PoolPlan::default()
    }
}

/// The batches of a rolling update. Each batch creates what `maxSurge` allows, then retires, in
/// retirement order, what `maxUnavailable` allows, stopping at the first instance that may not
/// go yet (so that the order of retirement is the retirement order).
#[allow(clippy::too_many_arguments)] // the pool, its instances, and where the steps go
fn rollout(
    target: &Target<'_>,
    all: &[Instance<'_>],
    (kept, resumed): (usize, usize),
    retirees: Vec<&Instance<'_>>,
    world: &Indexed<'_>,
    names: &mut Names<'_>,
    creations: &Creations,
    steps: &mut Vec<Step>,
) {
    let (replicas, surge, unavailable) = (target.replicas, target.max_surge, target.max_unavailable);
    // A stalled rollout creates nothing: the old instances keep serving.
    let mut to_create = if creations.paused { 0 } else { replicas.saturating_sub(kept) };
    let mut starts_rollout = creations.starts;
    // Sized once: the steps of a large pool are megabytes, and every doubling copied them.
    let per_new = 2 + usize::from(target.pool.is_some_and(|dp| !dp.pool.spec.bootstrap.is_empty()));
    let per_retiree = |i: &&Instance<'_>| if target.is_node(i) { 5 } else { 2 };
    steps.reserve(to_create * per_new + retirees.iter().map(per_retiree).sum::<usize>());
    let mut pending: VecDeque<&Instance<'_>> = retirees.into();
    let mut alive = all.iter().filter(|i| i.container.is_some()).count();
    let mut ready = all.iter().filter(|i| i.up).count();

    for batch in 1.. {
        if to_create == 0 && pending.is_empty() {
            break;
        }
        let before = steps.len();
        let mut push = |instance: &InstanceName, action: Action| {
            steps.push(Step { batch, instance: instance.clone(), action });
        };

        let n = to_create.min((replicas + surge).saturating_sub(alive));
        if let Some(dp) = target.pool.filter(|_| n > 0) {
            let new: Vec<InstanceName> = (0..n).map(|_| names.next(dp.name(), &dp.template_hash)).collect();
            let spec = &dp.pool.spec;
            let join = spec.join.as_ref();
            for name in &new {
                let action = Action::Create {
                    image: spec.template.image_ref().to_owned(),
                    template_hash: dp.template_hash.clone(),
                    k3s_server: join.and_then(|j| j.k3s.as_ref()).map(|k3s| k3s.server.clone()),
                    rollback_from: creations.rollback_from.clone().filter(|_| starts_rollout),
                    revision: creations.revision.filter(|_| starts_rollout),
                    starts_rollout: std::mem::take(&mut starts_rollout),
                };
                push(name, action);
            }
            let bootstrap = spec.bootstrap.len();
            for name in new.iter().filter(|_| bootstrap > 0) {
                push(name, Action::Bootstrap { commands: bootstrap });
            }
            // After the bootstrap commands, which may wait for the node's services to come up.
            if let Some(kubeadm) = join.and_then(|j| j.kubeadm.as_ref()) {
                for name in &new {
                    push(name, Action::Join { control_plane: kubeadm.control_plane.clone() });
                }
            }
            for name in &new {
                push(name, Action::AwaitReady { node: target.with_nodes });
            }
            (to_create, alive, ready) = (to_create - n, alive + n, ready + n);
        }
        // The instances finished in the first batch serve before its retirements start.
        if batch == 1 {
            ready += resumed;
        }

        while let Some(instance) = pending.front() {
            if instance.up {
                // Only while at least `replicas - maxUnavailable` stay up without it.
                if ready + unavailable <= replicas {
                    break;
                }
                ready -= 1;
            }
            if instance.container.is_some() {
                alive -= 1;
            }
            let rules = target.pool.map_or(&[][..], |dp| dp.pool.spec.drain.rules.as_slice());
            retirement(instance, target.is_node(instance), world, rules, &mut |action| {
                push(&instance.shared, action);
            });
            pending.pop_front();
        }

        // Validation guarantees maxSurge + maxUnavailable > 0, which makes every batch progress;
        // this guard only keeps a bad input from looping forever.
        if steps.len() == before {
            break;
        }
    }
}

/// The retirement of one instance, in DESIGN order:
/// `Cordon` < `Drain` < `Stop` < `DeleteNode` < `Remove`, leaving out what is already done. The
/// Node is deleted only once the container is stopped (a running kubelet re-registers it), and
/// the container goes last so that an interrupted retirement can be found again from its labels.
/// A Node instance always gets its `DeleteNode`, even when no Node was observed: its kubelet
/// may register one after the observation, and deleting a missing Node succeeds.
fn retirement(
    instance: &Instance<'_>,
    is_node: bool,
    world: &Indexed<'_>,
    rules: &[crate::spec::DrainRule],
    push: &mut impl FnMut(Action),
) {
    // An orphan Node's kubelet is gone with its container: its pods cannot be evicted, only
    // cleaned up once the Node object is deleted.
    if instance.container.is_none() {
        push(Action::DeleteNode);
        return;
    }
    let node = instance.node.filter(|_| is_node);
    // A paused or restarting container still holds a process that must be stopped gracefully.
    let running = instance.container.is_some_and(|c| c.state.may_run());
    if node.is_some_and(|n| !n.unschedulable) {
        push(Action::Cordon);
    }
    // A Node its owner excluded from draining keeps its pods: the plan shows it.
    if let Some(node) = node.filter(|n| !n.retirement.exclude_draining) {
        push(Action::Drain(drain_preview(&node.name, world, rules)));
    }
    if running {
        push(Action::Stop);
    }
    if is_node {
        push(Action::DeleteNode);
    }
    push(Action::Remove);
}

/// What the drain will do to the node's pods ([`Pod::drain_action`]), and which PDBs would make
/// it wait. A pod under more than one PDB is still listed for eviction, with a warning: the API
/// server refuses to evict it (500), so the drain will fail on it until all but one budget go.
fn drain_preview(node: &str, world: &Indexed<'_>, rules: &[crate::spec::DrainRule]) -> DrainPreview {
    let mut preview = DrainPreview::default();
    let mut blocking: BTreeSet<&str> = BTreeSet::new();
    for &pod in world.pods_on(node) {
        let decision = pod.drain_decision(rules);
        let pod_ref = |note: Option<String>, pdbs: Vec<String>| PodRef {
            pod: [pod.namespace.as_str(), "/", pod.name.as_str()].concat(),
            owner: pod.owner_kind.clone(),
            note,
            pdbs,
            order: decision.order,
            rule: decision.rule.map(|i| format!("spec.drain.rules[{i}]")),
        };
        let rule_warning = match decision.action {
            DrainAction::Skip(reason) => {
                preview.skip.push(pod_ref(Some(reason.to_owned()), Vec::new()));
                continue;
            }
            DrainAction::WaitCompleted(reason) => {
                preview.wait.push(pod_ref(Some(reason.to_owned()), Vec::new()));
                continue;
            }
            DrainAction::Evict(warning) => warning,
        };
        let covering = world.budgets_covering(pod);
        let ids: Vec<String> = covering.iter().map(|(_, id)| id.clone()).collect();
        let warning = if let [first @ .., last] = ids.as_slice()
            && !first.is_empty()
        {
            Some(format!("under PDBs {} and {last}: the API server refuses to evict it", first.join(", ")))
        } else {
            // A single budget that allows no disruption makes the drain wait.
            let refusing = covering.iter().filter(|(pdb, _)| pdb.disruptions_allowed <= 0);
            blocking.extend(refusing.map(|(_, id)| id.as_str()));
            rule_warning.map(str::to_owned)
        };
        preview.evict.push(pod_ref(warning, ids));
    }
    preview.blocking_pdbs = blocking.into_iter().map(str::to_owned).collect();
    // In the order the drain goes: group by group.
    preview.evict.sort_by_key(|p| p.order);
    preview.wait.sort_by_key(|p| p.order);
    preview
}

/// poolctl's reference to a container, as its Node is annotated with it.
fn container_ref(c: &Container) -> InstanceRef {
    InstanceRef { container_id: c.id.clone(), docker_host: c.docker_host.clone() }
}

fn status(target: &Target<'_>, instance: &Instance<'_>, keep: bool) -> InstanceStatus {
    let node = target.is_node(instance).then_some(match instance.node {
        None => "missing",
        Some(n) if n.ready => "ready",
        Some(_) => "not-ready",
    });
    InstanceStatus {
        name: instance.shared.clone(),
        template_hash: instance.container.map(|c| c.template_hash.clone()).unwrap_or_default(),
        container: instance.container.map_or("missing", |c| c.state.as_str()),
        node,
        cordoned: instance.node.is_some_and(|n| n.unschedulable),
        retiring: instance.node.is_some_and(|n| n.unschedulable && n.cordoned_by_poolctl),
        elsewhere: instance.container.and_then(|c| c.elsewhere.clone()),
        fate: if keep { Fate::Keep } else { Fate::Retire },
        replace: None,
        do_not_disrupt: None,
        held_by_window: None,
        drain_excluded: instance.node.is_some_and(|n| n.retirement.exclude_draining),
        hooks: instance.node.map_or_else(Vec::new, |n| {
            ["pre-drain", "pre-terminate"]
                .into_iter()
                .flat_map(|kind| n.retirement.hooks_of(kind).into_iter().map(move |h| format!("{kind} {h}")))
                .collect()
        }),
        health: instance.health.note.clone().map(|mut note| {
            // A starting instance of more than `replicas` is not finished but retired.
            if note.action == "resume" && !keep {
                note.action = "replace";
            }
            note
        }),
        proof: Proof {
            container: instance.container.map(container_ref),
            node: instance.node.and_then(|n| n.reference.clone()),
        },
        left: instance.left.clone(),
        refused: None, // by `super::mark_own_node`, which knows the options
    }
}

/// The diff between the most common outdated template and the spec's, if any instance is
/// outdated.
fn template_change(dp: &DesiredPool, world: &World) -> Option<TemplateChange> {
    let mut outdated: BTreeMap<&str, Vec<&Container>> = BTreeMap::new();
    for c in world.containers.iter().filter(|c| c.pool == dp.name() && c.template_hash != dp.template_hash) {
        outdated.entry(&c.template_hash).or_default().push(c);
    }
    let spec = &dp.pool.spec;
    // A new pool's template is shown whole when copyFrom made it: what was copied is no less
    // worth reviewing than what a change would bring.
    if outdated.is_empty()
        && dp.copied_from.is_some()
        && !world.containers.iter().any(|c| c.pool == dp.name())
    {
        let new = json_to_yaml(&canonical_template(spec)).unwrap_or_default();
        return Some(TemplateChange { to_hash: dp.template_hash.clone(), new, ..TemplateChange::default() });
    }
    // Most common first; on a tie, the smallest hash, so that the plan is deterministic.
    let (from_hash, containers) =
        outdated.into_iter().max_by(|a, b| a.1.len().cmp(&b.1.len()).then_with(|| b.0.cmp(a.0)))?;
    let old_json = containers.iter().find_map(|c| c.template.as_deref());
    // Read as JSON, not as a template: an earlier poolctl's template may not read as this one's.
    let old: Option<serde_json::Value> = old_json.and_then(|j| serde_json::from_str(j).ok());
    let image_moved =
        old.map(|o| o["template"].clone()).filter(|o| o["image"] == spec.template.image.as_str());
    let image_moved = image_moved.and_then(|o| {
        let (was, now) = (o["imageId"].as_str()?.to_owned(), spec.template.image_id.as_deref()?);
        (was != now).then(|| format!("image {} is now {now} (was {was})", spec.template.image))
    });
    let new = canonical_template(spec);
    let replaced_by = match diff_templates(old_json.unwrap_or_default(), &new) {
        TemplateDiff::Replace(fields) => fields,
        TemplateDiff::Live(_) => Vec::new(),
    };
    Some(TemplateChange {
        from_hash: from_hash.to_owned(),
        to_hash: dp.template_hash.clone(),
        old: old_json.and_then(json_to_yaml).unwrap_or_default(),
        new: json_to_yaml(&new).unwrap_or_default(),
        image_moved,
        replaced_by,
    })
}

/// Both sides of the diff go through the same conversion, so only real changes show.
fn json_to_yaml(json: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(json).ok()?;
    serde_yaml::to_string(&value).ok()
}

/// Hands out new instance names, `<pool>-<hash prefix>-<suffix>`, that no container or Node of
/// the world and no earlier name of this plan uses. The suffix is derived from a counter, not
/// drawn at random, so that the planner stays a pure function.
struct Names<'w> {
    world: &'w World,
    /// Known once the first name is handed out, or given.
    seed: Option<u64>,
    /// What an unknown seed is derived from.
    derive_from: Option<&'w Desired>,
    /// The world's names that start like the names handed out for each `<pool>-<hash>-`
    /// prefix, borrowed: no other name can be taken by one of them, and copying or hashing
    /// every name of the world cost as much as the rest of a plan.
    taken: FxHashMap<String, FxHashSet<&'w str>>,
    /// The names this plan handed out.
    issued: FxHashSet<InstanceName>,
    /// Where each pool's counter resumes, so that handing out n names costs O(n).
    counters: FxHashMap<String, u64>,
    /// The pool, hash and prefix of the last name handed out: a rollout asks for one name per
    /// batch, of the same pool and hash, thousands of times.
    last: Option<(String, String, String)>,
    /// Where the text a suffix is hashed from is written, reused from one name to the next.
    scratch: String,
}

impl<'w> Names<'w> {
    const SUFFIX_LEN: u32 = 5;

    fn new(world: &'w World, seed: Seed<'w>) -> Self {
        let (seed, derive_from) = match seed {
            Seed::Derive(desired) => (None, Some(desired)),
            Seed::Known(seed) => (Some(seed), None),
        };
        Self {
            world,
            seed,
            derive_from,
            taken: FxHashMap::default(),
            issued: FxHashSet::default(),
            counters: FxHashMap::default(),
            last: None,
            scratch: String::new(),
        }
    }

    fn next(&mut self, pool: &str, hash: &str) -> InstanceName {
        let same = self.last.as_ref().is_some_and(|(p, h, _)| p == pool && h == hash);
        if !same {
            let prefix = format!("{pool}-{}-", &hash[..hash.len().min(HASH_LEN)]);
            if !self.taken.contains_key(&prefix) {
                let containers = self.world.containers.iter().map(|c| c.name.as_str());
                let nodes = self.world.nodes.iter().map(|n| n.name.as_str());
                let taken = containers.chain(nodes).filter(|n| n.starts_with(&prefix)).collect();
                self.taken.insert(prefix.clone(), taken);
            }
            self.counters.entry(pool.to_owned()).or_insert(0);
            self.last = Some((pool.to_owned(), hash.to_owned(), prefix));
        }
        let (world, derive_from) = (self.world, self.derive_from);
        let seed = *self
            .seed
            .get_or_insert_with(|| derive_from.map_or(0, |desired| super::scope::seed_of(desired, world)));
        let prefix = self.last.as_ref().map_or("", |(_, _, prefix)| prefix.as_str());
        let taken = &self.taken[prefix];
        let counter = self.counters.get_mut(pool).expect("set above");
        loop {
            let mut name = String::with_capacity(prefix.len() + Self::SUFFIX_LEN as usize);
            name.push_str(prefix);
            Self::suffix(&mut self.scratch, pool, hash, seed, *counter, &mut name);
            *counter += 1;
            let name = InstanceName::from(name);
            if !taken.contains(name.as_str()) && self.issued.insert(name.clone()) {
                return name;
            }
        }
    }

    /// Append the suffix of the `counter`th name to `out`: base 36 of the first 8 bytes of
    /// SHA-256 over `<pool>/<hash>/<seed>/<counter>`, written into `scratch` first.
    fn suffix(scratch: &mut String, pool: &str, hash: &str, seed: u64, counter: u64, out: &mut String) {
        use std::fmt::Write as _;
        scratch.clear();
        // Writing to a String cannot fail.
        let _ = write!(scratch, "{pool}/{hash}/{seed}/{counter}");
        let digest = Sha256::digest(scratch.as_bytes());
        let mut n = u64::from_be_bytes(digest[..8].try_into().expect("8 bytes"));
        for _ in 0..Self::SUFFIX_LEN {
            out.push(char::from_digit((n % 36) as u32, 36).expect("a base-36 digit"));
            n /= 36;
        }
    }
}
