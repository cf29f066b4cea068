//! Rollout tests against the fake world, which records every call: the locks and the plan
//! made again under them, the batches and the looks at the world in between, and what the
//! executor checks against the live world while it carries a plan out.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use super::*;
use crate::backend::Connect;
use crate::model::{ClusterRef, Container, Origin};
use crate::plan::Fate;
use crate::testing::build::{PoolArgs, container, desired, node, pod, routed, two_pools, world_of};
use crate::testing::fake::{FakeCluster, FakeWorld};
use crate::testing::progress;

const LONG: Duration = Duration::from_secs(60);

fn settings() -> LockSettings {
    LockSettings {
        who: "poolctl test (pid 1 on here)".into(),
        lease: LONG,
        timeout: Duration::ZERO,
        observed: std::sync::Arc::default(),
        standby: false,
    }
}

/// The cluster of each pool of `desired` with a `node:` section, connected through the fake.
async fn clusters_of(fake: &FakeWorld, desired: &Desired) -> BTreeMap<String, FakeCluster> {
    let mut clusters = BTreeMap::new();
    for pool in &desired.pools {
        if let Some(node) = &pool.pool.spec.node {
            let cluster = ClusterRef { kubeconfig: node.kubeconfig.clone(), context: node.context.clone() };
            clusters.insert(pool.name().to_owned(), fake.connect(&cluster, pool.name()).await.unwrap());
        }
    }
    clusters
}

/// Run `f` with a rollout of `desired` over the fake world, and return what it returned and the
/// progress it wrote.
async fn with_rollout<T>(
    fake: &FakeWorld,
    desired: &Desired,
    interrupt: &Interrupt,
    f: impl AsyncFnOnce(&Rollout<'_, FakeWorld, FakeCluster>) -> T,
) -> (T, String) {
    let clusters = clusters_of(fake, desired).await;
    let (out, buf) = progress();
    let locks = settings();
    let rollout = Rollout {
        desired,
        containers: fake,
        clusters: &clusters,
        options: PlanOptions::default(),
        locks: &locks,
        interrupt,
        sink: &out,
        scope: BTreeSet::new(),
        skip_preflight: BTreeSet::new(),
        drain_turns: std::sync::Arc::default(),
    };
    let result = f(&rollout).await;
    let text = String::from_utf8(buf.lock().unwrap().clone()).unwrap();
    (result, text)
}

impl<C, K> Rollout<'_, C, K> {
    /// This rollout, locking `scope` first (the pools a plan shown changed).
    fn scoped(&self, scope: BTreeSet<String>) -> Self {
        Rollout {
            scope,
            options: self.options.clone(),
            skip_preflight: self.skip_preflight.clone(),
            drain_turns: std::sync::Arc::clone(&self.drain_turns),
            ..*self
        }
    }
}

/// A container pool `w` that needs two batches (a new template), a node pool `k` that needs
/// creating, and an up-to-date pool `q`.
fn scene() -> (Desired, FakeWorld) {
    let w = PoolArgs { hash: Some("new"), ..PoolArgs::new("w", 2) }.build();
    let k = PoolArgs { nodes: true, hash: Some("kh"), ..PoolArgs::new("k", 1) }.build();
    let q = PoolArgs { hash: Some("qh"), ..PoolArgs::new("q", 1) }.build();
    let world = world_of(vec![
        container("w-a", "w", "old", 1),
        container("w-b", "w", "old", 2),
        container("q-a", "q", "qh", 3),
    ]);
    (desired(vec![w, k, q]), FakeWorld::new(world))
}

#[tokio::test]
async fn a_preview_observed_through_fakes_retires_node_instances_with_a_drain() {
    let (mut desired, fake) = scene();
    let k = &mut desired.pools[1];
    k.template_hash = "new".into();
    fake.sim().world.containers.push(Container {
        cluster: Some(ClusterRef { kubeconfig: None, context: None }),
        ..container("k-a", "k", "kh", 4)
    });
    fake.sim().world.nodes.push(node("k-a", "k"));
    let preview = preview(&desired, &fake, &fake, PlanOptions::default()).await.unwrap();
    assert_eq!(preview.clusters.keys().collect::<Vec<_>>(), ["k"]);
    assert_eq!(preview.world.containers.len(), 4);
    let k = preview.plan.pools.iter().find(|p| p.name == "k").unwrap();
    let verbs: Vec<&str> = k.steps.iter().filter(|s| s.instance == "k-a").map(|s| s.action.verb()).collect();
    assert_eq!(verbs, ["cordon", "drain", "stop", "delete-node", "remove"]);
}

#[tokio::test]
async fn a_rollout_tells_each_retirement_step_to_the_kubernetes_events_sink_in_order() {
    let (mut desired, fake) = scene();
    desired.pools[1].template_hash = "new".into();
    fake.sim().world.containers.push(Container {
        cluster: Some(ClusterRef { kubeconfig: None, context: None }),
        ..container("k-a", "k", "kh", 4)
    });
    fake.sim().world.nodes.push(node("k-a", "k"));
    let shown = preview(&desired, &fake, &fake, PlanOptions::default()).await.unwrap();
    let (locks, interrupt) = (settings(), Interrupt::default());
    let events = crate::report::KubeEvents::default();
    let rollout = Rollout::new(&desired, &fake, &shown, &locks, &interrupt, &events);
    let run = rollout.run(|_, _| Ok::<(), std::convert::Infallible>(()));
    let outcome = events.beside(&shown.clusters, run).await;
    assert!(matches!(outcome, Ok(Outcome::Done(ref r)) if r.complete()), "{outcome:?}");
    // Told once the rollout ended, in the order said; only pool k has a cluster to tell.
    let told = fake.told();
    let k_a = ["k-a Cordoned", "k-a Draining", "k-a Drained", "k-a NodeDeleted"];
    let retirement: Vec<&str> = told.iter().map(String::as_str).filter(|t| t.starts_with("k-a")).collect();
    assert_eq!(retirement, k_a, "{told:?}");
    assert_eq!(told.first().map(String::as_str), Some("lease/k RolloutStarted"), "{told:?}");
    assert_eq!(told.last().map(String::as_str), Some("lease/k RolloutSucceeded"), "{told:?}");
}

#[tokio::test]
async fn the_pools_a_plan_changes_are_locked_where_they_live_and_the_plan_is_made_again_under_the_locks() {
    let (desired, fake) = scene();
    let shown = preview(&desired, &fake, &fake, PlanOptions::default()).await.unwrap().plan;
    let mut checked = None;
    let mut held = Vec::new();
    let (outcome, _) = with_rollout(&fake, &desired, &Interrupt::default(), async |r| {
        r.scoped(shown.changed_pools())
            .run(|plan, _| {
                held = fake.locks().into_keys().collect();
                checked = Some(plan.clone());
                Err::<(), _>("stop here")
            })
            .await
    })
    .await;
    let Ok(Outcome::Refused(refused)) = outcome else { panic!("{outcome:?}") };
    assert_eq!(refused, "stop here", "the check's refusal is returned");
    assert_eq!(checked.as_ref(), Some(&shown), "the world did not change: the same plan, the same names");
    assert_eq!(held, ["docker/w", "lease/k"], "an up-to-date pool is not locked");
    assert!(fake.locks().is_empty(), "released after a refusal: {:?}", fake.locks());
    assert!(!fake.calls().iter().any(|c| c.starts_with("create")), "{:?}", fake.calls());
}

#[tokio::test]
async fn a_rollout_locks_the_pools_the_plan_made_under_the_locks_adds() {
    let (desired, fake) = scene();
    // The plan shown changed w only; by the time the locks are taken, q's instance is gone.
    fake.sim().world.containers.retain(|c| c.pool != "q");
    let (outcome, _) = with_rollout(&fake, &desired, &Interrupt::default(), async |r| {
        r.scoped(BTreeSet::from(["w".to_owned()])).run(|_, _| Ok::<(), ()>(())).await
    })
    .await;
    let Ok(Outcome::Done(report)) = outcome else { panic!("{outcome:?}") };
    assert!(report.complete(), "{report:?}");
    let calls = fake.calls();
    let first_create = calls.iter().position(|c| c.starts_with("create ")).unwrap();
    for lock in ["lock k", "lock q", "lock w"] {
        let at = calls.iter().position(|c| c == lock).unwrap_or_else(|| panic!("no {lock}: {calls:?}"));
        assert!(at < first_create, "{calls:?}");
    }
    assert!(calls.iter().any(|c| c.starts_with("create q-")), "{calls:?}");
    assert!(fake.locks().is_empty(), "{:?}", fake.locks());
}

#[tokio::test]
async fn a_plan_with_nothing_left_under_the_locks_changes_nothing() {
    let (desired, fake) = scene();
    let shown = preview(&desired, &fake, &fake, PlanOptions::default()).await.unwrap().plan;
    // Another run carries the same plan out before this one takes the locks.
    let (done, _) = with_rollout(&fake, &desired, &Interrupt::default(), async |r| {
        r.carry_out(&shown, &LockGuard::unguarded()).await
    })
    .await;
    assert!(done.unwrap().complete());
    let calls = fake.calls().len();
    let (outcome, _) = with_rollout(&fake, &desired, &Interrupt::default(), async |r| {
        r.scoped(shown.changed_pools()).run(|_, _| Ok::<(), ()>(())).await
    })
    .await;
    assert!(matches!(outcome, Ok(Outcome::NothingLeft)), "{outcome:?}");
    let after: Vec<String> = fake.calls()[calls..].to_vec();
    assert!(after.iter().all(|c| c.starts_with("lock ") || c.starts_with("release ")), "{after:?}");
    assert!(fake.locks().is_empty(), "{:?}", fake.locks());
}

#[tokio::test]
async fn a_pool_another_run_holds_fails_the_rollout_naming_the_holder_and_changes_nothing() {
    let (desired, fake) = scene();
    fake.hold_lock("docker", "w", "poolctl apply (pid 9 on there)", SystemTime::now() + LONG);
    let shown = preview(&desired, &fake, &fake, PlanOptions::default()).await.unwrap().plan;
    let (outcome, _) = with_rollout(&fake, &desired, &Interrupt::default(), async |r| {
        r.scoped(shown.changed_pools()).run(|_, _| Ok::<(), ()>(())).await
    })
    .await;
    let Err(RolloutError::Lock(LockFailure::Held { pool, .. })) = outcome else { panic!("{outcome:?}") };
    assert_eq!(pool, "w");
    let left: Vec<String> = fake.locks().into_keys().collect();
    assert_eq!(left, ["docker/w"], "the other run keeps its lock; ours (k) is released");
    assert!(!fake.calls().iter().any(|c| c.starts_with("create")), "{:?}", fake.calls());
}

#[tokio::test]
async fn a_rollout_leaves_alone_a_pool_it_did_not_lock_when_it_looks_at_the_world_again() {
    let (desired, fake) = scene();
    // Pool q loses its instance once the rollout of w started: a later run replaces it.
    let fake = fake.die_after("image busybox:latest", "q-a");
    let plan = preview(&desired, &fake, &fake, PlanOptions::default()).await.unwrap().plan;
    let (report, _) = with_rollout(&fake, &desired, &Interrupt::default(), async |r| {
        r.carry_out(&plan, &LockGuard::unguarded()).await
    })
    .await;
    let report = report.unwrap();
    assert!(report.complete(), "{report:?}");
    let calls = fake.calls();
    assert!(calls.iter().any(|c| c.starts_with("create w-new-")), "{calls:?}");
    assert!(!calls.iter().any(|c| c.starts_with("create q-")), "q was not locked: {calls:?}");
}

#[tokio::test]
async fn the_world_is_observed_again_between_batches() {
    let origin = Origin::Path { path: "/pools".into() };
    let scope = origin.scope();
    let w = PoolArgs { hash: Some("new"), ..PoolArgs::new("w", 2) }.build();
    let desired = Desired { origin, pools: vec![w] };
    let old = |name: &str| Container { scope: Some(scope.clone()), ..container(name, "w", "old", 1) };
    let world = World { containers: vec![old("w-old-1"), old("w-old-2")], ..World::default() };
    let plan = crate::plan::plan(&desired, &world, PlanOptions::default());
    let first_new = plan.pools[0].steps[0].instance.clone();
    // The first new instance dies once the first old one is gone. A plan carried out blindly
    // would go on to stop w-old-2 with one instance up, which the fake refuses.
    let fake = FakeWorld::new(world).die_after("remove w-old-1", &first_new).min_running(2);
    let (report, _) = execute_all(&fake, &desired, &plan).await;
    let report = report.unwrap();
    assert!(report.complete(), "{report:?}");
    let calls = fake.calls();
    assert!(calls.contains(&format!("remove {first_new}")), "the dead instance was replaced: {calls:?}");
    let left = fake.world().containers;
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(
        left.iter().all(|c| c.state == crate::model::ContainerState::Running && c.template_hash == "new"),
        "{left:?}"
    );
}

/// A pool "k" of one Node instance, planned from `world`.
fn node_pool(world: &World) -> (Desired, Plan) {
    let k = PoolArgs { nodes: true, hash: Some("new"), ..PoolArgs::new("k", 1) }.build();
    let desired = Desired { origin: Origin::Path { path: "/pools".into() }, pools: vec![k] };
    let plan = crate::plan::plan(&desired, world, PlanOptions::default());
    (desired, plan)
}

/// A world of one outdated instance `k-old` of pool "k", in `state`, recorded as a Node of the
/// default cluster.
fn old_node_instance(state: crate::model::ContainerState) -> World {
    let old = Container {
        state,
        scope: Some("path:/pools".into()),
        cluster: Some(ClusterRef { kubeconfig: None, context: None }),
        ..container("k-old", "k", "old", 1)
    };
    // Observed long after it was created: its missing Node is past the startup timeout, so the
    // plan replaces it (within the timeout it would wait for it).
    World { now: 100_000, ..world_of(vec![old]) }
}

/// Carries the whole plan out on `fake`, as a rollout does once its locks are held.
async fn execute_all(
    fake: &FakeWorld,
    desired: &Desired,
    plan: &Plan,
) -> (Result<Report, RolloutError>, String) {
    with_rollout(fake, desired, &Interrupt::default(), async |r| {
        r.carry_out(plan, &LockGuard::unguarded()).await
    })
    .await
}

fn position(calls: &[String], call: &str) -> usize {
    calls.iter().position(|c| c == call).unwrap_or_else(|| panic!("no {call}: {calls:?}"))
}

#[tokio::test]
async fn a_node_that_registered_after_the_plan_is_drained_before_its_container_stops() {
    let world = old_node_instance(crate::model::ContainerState::Running);
    // Planned while the old instance's Node was missing: no cordon, no drain.
    let (desired, plan) = node_pool(&world);
    let verbs: Vec<&str> =
        plan.steps().filter(|(_, s)| s.instance == "k-old").map(|(_, s)| s.action.verb()).collect();
    assert_eq!(verbs, ["stop", "delete-node", "remove"]);

    // Its kubelet registers the Node, and a pod is bound to it, before the retirement runs.
    let fake = FakeWorld::new(world);
    fake.sim().world.nodes.push(node("k-old", "k"));
    fake.sim().world.pods.push(pod("web-1", "k-old", Some("ReplicaSet")));
    let (report, text) = execute_all(&fake, &desired, &plan).await;
    assert!(report.unwrap().complete());
    let calls = fake.calls();
    assert!(position(&calls, "cordon k-old") < position(&calls, "drain k-old"));
    assert!(position(&calls, "drain k-old") < position(&calls, "stop k-old"));
    assert!(text.contains("k-old: its Node is there now; cordoning and draining it"), "{text}");
    assert!(fake.world().pods.is_empty(), "the pod was evicted");
}

#[tokio::test]
async fn a_new_instance_abandoned_after_its_node_turned_ready_is_drained_before_it_stops() {
    let (desired, plan) = node_pool(&World::default());
    let new = plan.pools[0].steps[0].instance.clone();
    // The step after the Ready wait fails (the API server answers 500 to the Node's labels).
    let fake = FakeWorld::default().failing(&format!("configure {new}"));
    let (report, _) = execute_all(&fake, &desired, &plan).await;
    assert!(report.unwrap().failure().is_some());
    let calls = fake.calls();
    assert!(position(&calls, &format!("configure {new}")) < position(&calls, &format!("cordon {new}")));
    assert!(
        position(&calls, &format!("drain {new}")) < position(&calls, &format!("stop {new}")),
        "{calls:?}"
    );
}

#[tokio::test]
async fn an_instance_whose_node_cannot_be_looked_up_is_not_stopped() {
    let world = old_node_instance(crate::model::ContainerState::Running);
    let (desired, plan) = node_pool(&world);
    let fake = FakeWorld::new(world).failing("cordon k-old");
    fake.sim().world.nodes.push(node("k-old", "k"));
    let (report, _) = execute_all(&fake, &desired, &plan).await;
    assert_eq!(report.unwrap().failure().map(|f| (f.verb, f.instance.as_str())), Some(("stop", "k-old")));
    assert!(!fake.calls().contains(&"stop k-old".to_owned()), "{:?}", fake.calls());
}

#[tokio::test]
async fn a_container_that_started_after_the_plan_is_drained_and_stopped_before_its_node_is_deleted() {
    let world = old_node_instance(crate::model::ContainerState::Created);
    // Planned while the container was created but not started (an apply killed during create):
    // nothing to stop, no Node.
    let (desired, plan) = node_pool(&world);
    let verbs: Vec<&str> =
        plan.steps().filter(|(_, s)| s.instance == "k-old").map(|(_, s)| s.action.verb()).collect();
    assert_eq!(verbs, ["delete-node", "remove"]);

    // Docker finishes starting it, its kubelet registers the Node, and a pod is bound to it.
    let fake = FakeWorld::new(world);
    fake.sim().world.containers[0].state = crate::model::ContainerState::Running;
    fake.sim().world.nodes.push(node("k-old", "k"));
    fake.sim().world.pods.push(pod("web-1", "k-old", Some("ReplicaSet")));
    let (report, text) = execute_all(&fake, &desired, &plan).await;
    assert!(report.unwrap().complete());
    let calls = fake.calls();
    assert!(position(&calls, "drain k-old") < position(&calls, "stop k-old"), "{calls:?}");
    assert!(position(&calls, "stop k-old") < position(&calls, "delete-node k-old"), "{calls:?}");
    assert!(text.contains("k-old: its container runs now; stopping it before its Node is deleted"), "{text}");
    assert!(fake.world().pods.is_empty(), "the pod was evicted");
}

#[tokio::test]
async fn a_node_instance_is_recorded_as_joining_before_its_container_is_created() {
    let world = old_node_instance(crate::model::ContainerState::Running);
    let (desired, plan) = node_pool(&world);
    let fake = FakeWorld::new(world);
    let (report, _) = execute_all(&fake, &desired, &plan).await;
    assert!(report.unwrap().complete());
    let calls = fake.calls();
    let created: Vec<&str> = calls.iter().filter_map(|c| c.strip_prefix("create ")).collect();
    assert_eq!(created.len(), 1, "{calls:?}");
    let noted = fake.noted();
    assert_eq!(noted.len(), 1, "{noted:?}");
    let (name, calls_before) = &noted[0];
    assert_eq!(name, created[0]);
    assert!(*calls_before <= position(&calls, &format!("create {name}")), "{noted:?} {calls:?}");
    assert!(fake.joining("k").contains(name), "the executor leaves the record to the lock's release");
}

#[tokio::test]
async fn a_node_instance_whose_record_cannot_be_written_is_not_created() {
    let world = World::default();
    let (desired, plan) = node_pool(&world);
    let name = plan.steps().find(|(_, s)| s.action.verb() == "create").unwrap().1.instance.to_string();
    let fake = FakeWorld::new(world).failing(&format!("note-joining {name}"));
    let (report, _) = execute_all(&fake, &desired, &plan).await;
    assert!(!report.unwrap().complete());
    assert!(!fake.calls().iter().any(|c| c.starts_with("create ")), "{:?}", fake.calls());
}

#[tokio::test]
async fn a_pool_moved_to_another_daemon_is_created_there_then_retired_where_it_was() {
    // `b` was on the daemon of `one`, and its spec now places it on `two`.
    let one =
        FakeWorld::new(world_of(vec![container("a-h-1", "a", "h", 1), container("b-h-1", "b", "h", 2)]));
    let two = FakeWorld::new(World::default());
    let endpoints = routed(one.clone(), two.clone());
    let desired = two_pools();
    let options = PlanOptions::default();
    let plan = preview(&desired, &endpoints, &one, options.clone()).await.unwrap().plan;
    let b = plan.pools.iter().find(|p| p.name == "b").unwrap();
    assert_eq!(b.docker.as_deref(), Some("context two"));
    assert_eq!(b.instances[0].elsewhere.as_deref(), Some("context one"));
    assert_eq!(b.instances[0].fate, Fate::Retire);

    let (out, _) = progress();
    let (clusters, locks) = (BTreeMap::<String, FakeCluster>::new(), settings());
    let rollout = Rollout {
        desired: &desired,
        containers: &endpoints,
        clusters: &clusters,
        options: options.clone(),
        locks: &locks,
        interrupt: &Interrupt::default(),
        sink: &out,
        scope: BTreeSet::new(),
        skip_preflight: BTreeSet::new(),
        drain_turns: std::sync::Arc::default(),
    };
    assert!(rollout.carry_out(&plan, &LockGuard::unguarded()).await.unwrap().complete());
    let created: Vec<String> = two.calls().into_iter().filter(|c| c.starts_with("create b-")).collect();
    assert_eq!(created.len(), 1, "the new instance is created on two: {:?}", two.calls());
    assert!(one.calls().contains(&"remove b-h-1".to_owned()), "{:?}", one.calls());
    assert!(!one.calls().iter().any(|c| c.starts_with("create")), "{:?}", one.calls());
    let again = preview(&desired, &endpoints, &one, options).await.unwrap().plan;
    assert!(!again.has_changes(), "{again:#?}");
}

/// The old instance `k-old` of pool "k", its Node there with `marks`, and a pod on it; the plan
/// that replaces it, and its hookTimeout.
fn marked_old_node(
    marks: crate::model::RetirementMarks,
    hook_timeout: Option<u64>,
) -> (Desired, Plan, FakeWorld) {
    let world = old_node_instance(crate::model::ContainerState::Running);
    let fake = FakeWorld::new(world);
    {
        let mut sim = fake.sim();
        sim.world.nodes.push(crate::model::Node { retirement: marks, ..node("k-old", "k") });
        sim.world.pods.push(pod("web-1", "k-old", Some("ReplicaSet")));
    }
    let observed = fake.world();
    let (mut desired, _) = node_pool(&observed);
    desired.pools[0].pool.spec.rollout.hook_timeout = hook_timeout.map(crate::spec::Duration::from_secs);
    let plan = crate::plan::plan(&desired, &World { now: 100_000, ..observed }, PlanOptions::default());
    (desired, plan, fake)
}

fn hook(kind: &str) -> crate::model::RetirementMarks {
    crate::model::RetirementMarks {
        hooks: vec![(format!("{kind}.delete.hook.poolctl.dev/backup"), "my-operator".to_owned())],
        ..crate::model::RetirementMarks::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_pre_drain_hook_holds_the_drain_until_its_owner_removes_it() {
    let (desired, plan, fake) = marked_old_node(hook("pre-drain"), None);
    let k = plan.pools.iter().find(|p| p.name == "k").unwrap();
    let old = k.instances.iter().find(|i| i.name == "k-old").unwrap();
    assert_eq!(old.hooks, ["pre-drain backup (my-operator)"]);
    let owner = async {
        tokio::time::sleep(Duration::from_secs(30)).await;
        let calls = fake.calls();
        assert!(calls.contains(&"cordon k-old".to_owned()), "cordoned while the hook is set: {calls:?}");
        assert!(!calls.iter().any(|c| c == "drain k-old"), "not drained while the hook is set: {calls:?}");
        fake.sim().world.nodes.iter_mut().find(|n| n.name == "k-old").unwrap().retirement =
            crate::model::RetirementMarks::default();
    };
    let ((report, text), ()) = tokio::join!(execute_all(&fake, &desired, &plan), owner);
    assert!(report.unwrap().complete());
    assert!(text.contains("k-old: waiting for its pre-drain hooks: backup (my-operator)"), "{text}");
    let calls = fake.calls();
    assert!(position(&calls, "cordon k-old") < position(&calls, "drain k-old"));
    assert!(position(&calls, "drain k-old") < position(&calls, "stop k-old"));
}

#[tokio::test(start_paused = true)]
async fn a_pre_terminate_hook_past_the_hook_timeout_halts_with_the_container_running() {
    let (desired, plan, fake) = marked_old_node(hook("pre-terminate"), Some(60));
    let (report, _) = execute_all(&fake, &desired, &plan).await;
    let report = report.unwrap();
    let failure = report.failure().expect("halted");
    assert_eq!((failure.verb, failure.instance.as_str()), ("stop", "k-old"));
    let message = failure.error.as_ref().unwrap().to_string();
    assert!(
        message.contains("pre-terminate hooks were still set after hookTimeout (1m): backup (my-operator)"),
        "{message}"
    );
    let calls = fake.calls();
    assert!(calls.contains(&"drain k-old".to_owned()), "drained first: {calls:?}");
    assert!(!calls.contains(&"stop k-old".to_owned()), "the container still serves: {calls:?}");
}

#[tokio::test(start_paused = true)]
async fn the_container_stops_only_once_the_nodes_volumes_are_detached() {
    let (desired, plan, fake) = marked_old_node(crate::model::RetirementMarks::default(), None);
    fake.sim().volumes.insert("k-old".to_owned(), vec!["VolumeAttachment csi-1".to_owned()]);
    let csi = async {
        tokio::time::sleep(Duration::from_secs(30)).await;
        let calls = fake.calls();
        assert!(calls.contains(&"drain k-old".to_owned()), "drained first: {calls:?}");
        assert!(!calls.contains(&"stop k-old".to_owned()), "not stopped while attached: {calls:?}");
        fake.sim().volumes.clear();
    };
    let ((report, text), ()) = tokio::join!(execute_all(&fake, &desired, &plan), csi);
    assert!(report.unwrap().complete());
    assert!(text.contains("k-old: waiting for its volumes to detach: VolumeAttachment csi-1"), "{text}");
    assert!(fake.calls().contains(&"stop k-old".to_owned()));
}

#[tokio::test(start_paused = true)]
async fn volumes_still_attached_after_the_timeout_halt_the_retirement_unless_the_node_is_excluded() {
    let (mut desired, plan, fake) = marked_old_node(crate::model::RetirementMarks::default(), None);
    desired.pools[0].pool.spec.rollout.volume_detach_timeout = Some(crate::spec::Duration::from_secs(60));
    fake.sim().volumes.insert("k-old".to_owned(), vec!["pvc-1".to_owned()]);
    let (report, _) = execute_all(&fake, &desired, &plan).await;
    let report = report.unwrap();
    let failure = report.failure().expect("halted");
    assert_eq!((failure.verb, failure.instance.as_str()), ("stop", "k-old"));
    let message = failure.error.as_ref().unwrap().to_string();
    assert!(
        message.contains("volumes were still attached after volumeDetachTimeout (1m): pvc-1"),
        "{message}"
    );
    assert!(!fake.calls().contains(&"stop k-old".to_owned()), "the container still serves");

    let marks = crate::model::RetirementMarks { exclude_volume_detach: true, ..Default::default() };
    let (desired, plan, fake) = marked_old_node(marks, None);
    fake.sim().volumes.insert("k-old".to_owned(), vec!["pvc-1".to_owned()]);
    let (report, _) = execute_all(&fake, &desired, &plan).await;
    assert!(report.unwrap().complete());
    assert!(fake.calls().contains(&"stop k-old".to_owned()));
}

/// An unreachable Node (Ready=Unknown) can detach nothing: its retirement does not wait for its
/// volumes, as Cluster API's does not.
#[tokio::test(start_paused = true)]
async fn an_unreachable_node_is_not_waited_on_for_its_volumes() {
    let (desired, plan, fake) = marked_old_node(crate::model::RetirementMarks::default(), None);
    fake.sim().volumes.insert("k-old".to_owned(), vec!["pvc-1".to_owned()]);
    let node = fake.sim().world.nodes.iter().position(|n| n.name == "k-old").unwrap();
    fake.sim().world.nodes[node].conditions = vec![crate::model::NodeCondition::ready("Unknown", 0)];
    let started = tokio::time::Instant::now();
    let (report, text) = execute_all(&fake, &desired, &plan).await;
    assert!(report.unwrap().complete());
    assert!(
        text.contains("k-old: unreachable (Ready=Unknown): not waiting for its volumes to detach"),
        "{text}"
    );
    assert!(fake.calls().contains(&"stop k-old".to_owned()));
    assert!(started.elapsed() < Duration::from_secs(60), "no wait: {:?}", started.elapsed());
}

#[tokio::test]
async fn a_node_excluded_from_draining_is_not_drained_and_the_plan_says_so() {
    let marks = crate::model::RetirementMarks { exclude_draining: true, ..Default::default() };
    let (desired, plan, fake) = marked_old_node(marks, None);
    let k = plan.pools.iter().find(|p| p.name == "k").unwrap();
    assert!(!k.steps.iter().any(|s| s.instance == "k-old" && s.action.verb() == "drain"), "{:?}", k.steps);
    let mut text = Vec::new();
    crate::plan::render_text(&plan, &mut text).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(
        text.contains("k-old: not drained: its Node carries poolctl.dev/exclude-node-draining"),
        "{text}"
    );
    let (report, _) = execute_all(&fake, &desired, &plan).await;
    assert!(report.unwrap().complete());
    let calls = fake.calls();
    assert!(!calls.iter().any(|c| c == "drain k-old"), "{calls:?}");
    assert!(calls.contains(&"stop k-old".to_owned()), "{calls:?}");
}

/// Two pools `a` and `b` of two instances each on the old template, both to be replaced; with
/// `nodes`, their instances are Nodes of the one default cluster.
fn two_outdated_pools(nodes: bool) -> (Desired, World) {
    let pools = ["a", "b"].map(|p| PoolArgs { nodes, hash: Some("new"), ..PoolArgs::new(p, 2) }.build());
    let desired = Desired { origin: Origin::Path { path: "/pools".into() }, pools: pools.into() };
    let mut containers = Vec::new();
    let mut node_list = Vec::new();
    for (i, name) in ["a-1", "a-2", "b-1", "b-2"].into_iter().enumerate() {
        let pool = &name[..1];
        let cluster = nodes.then_some(ClusterRef { kubeconfig: None, context: None });
        containers.push(Container {
            scope: Some("path:/pools".into()),
            cluster,
            ..container(name, pool, "old", i64::try_from(i).unwrap() + 1)
        });
        if nodes {
            node_list.push(node(name, pool));
        }
    }
    let mut world = world_of(containers);
    world.nodes = node_list;
    (desired, world)
}

/// The calls that start (`+verb name`) in `timeline` between `from` and `to` (exclusive).
fn started_between<'t>(timeline: &'t [String], from: &str, to: &str) -> Vec<&'t str> {
    let (from, to) = (position(timeline, from), position(timeline, to));
    timeline[from + 1..to].iter().filter(|e| e.starts_with('+')).map(String::as_str).collect()
}

#[tokio::test]
async fn the_pools_of_a_rollout_are_carried_out_side_by_side() {
    let (desired, world) = two_outdated_pools(false);
    let plan = crate::plan::plan(&desired, &world, PlanOptions::default());
    let fake = FakeWorld::new(world);
    let (report, text) = execute_all(&fake, &desired, &plan).await;
    assert!(report.unwrap().complete());
    // Their lines interleave, so each names its pool.
    for pool in ["a", "b"] {
        assert!(text.lines().any(|l| l.contains(&format!("] {pool}: create {pool}-"))), "{text}");
        assert!(text.lines().any(|l| l.contains(&format!("] {pool}: remove {pool}-"))), "{text}");
    }
    // One surge instance per pool at a time: two creations at once means the pools overlap.
    assert_eq!(fake.max_in_flight_of("create"), 2, "{:?}", fake.timeline());
    assert!(
        fake.world().containers.iter().all(|c| c.template_hash == "new"),
        "{:?}",
        fake.world().containers
    );
}

#[tokio::test]
async fn drains_in_one_cluster_never_overlap_across_pools() {
    let (desired, world) = two_outdated_pools(true);
    let plan = crate::plan::plan(&desired, &world, PlanOptions::default());
    let fake = FakeWorld::new(world);
    let (report, _) = execute_all(&fake, &desired, &plan).await;
    assert!(report.unwrap().complete());
    let timeline = fake.timeline();
    // The pools did overlap (their creations), so the drains' order is the turn's doing.
    assert_eq!(fake.max_in_flight_of("create"), 2, "{timeline:?}");
    for name in ["a-1", "a-2", "b-1", "b-2"] {
        let during = started_between(&timeline, &format!("+cordon {name}"), &format!("-drain {name}"));
        let others: Vec<_> = during
            .iter()
            .filter(|c| (c.starts_with("+cordon") || c.starts_with("+drain")) && !c.ends_with(name))
            .collect();
        assert!(others.is_empty(), "{name}'s cordon and drain overlap {others:?}: {timeline:?}");
    }
}

#[tokio::test]
async fn a_failed_pool_stops_alone_and_the_others_finish() {
    let (desired, world) = two_outdated_pools(false);
    let plan = crate::plan::plan(&desired, &world, PlanOptions::default());
    let fake = FakeWorld::new(world).failing("stop a-1");
    let (report, _) = execute_all(&fake, &desired, &plan).await;
    let report = report.unwrap();
    assert_eq!(
        report.failure().map(|f| (f.pool.as_str(), f.verb, f.instance.as_str())),
        Some(("a", "stop", "a-1"))
    );
    let after = fake.world();
    let of = |pool: &str| {
        after
            .containers
            .iter()
            .filter(|c| c.pool == pool)
            .map(|c| (c.name.clone(), c.template_hash.clone()))
            .collect::<Vec<_>>()
    };
    // b was replaced to the end, a stopped at its failed step with its old instances running.
    assert!(of("b").iter().all(|(_, hash)| hash == "new") && of("b").len() == 2, "{:?}", of("b"));
    assert!(
        after.containers.iter().any(|c| c.name == "a-1" && c.state == crate::model::ContainerState::Running)
    );
    assert!(after.containers.iter().any(|c| c.name == "a-2" && c.template_hash == "old"), "{:?}", of("a"));
    assert!(report.not_started.iter().all(|(pool, ..)| pool == "a"), "{:?}", report.not_started);
    assert!(!report.not_started.is_empty());
    let mut summary = Vec::new();
    crate::report::write_summary(&report, &mut summary).unwrap();
    let summary = String::from_utf8(summary).unwrap();
    assert!(summary.contains("  pool a: failed\n  pool b: done\n"), "{summary}");
}

/// Carry `plan` out under the locks of its pools, taken and then not renewed for longer than
/// their renew deadline (48s of the 60s lease): the rollout no longer knows it holds them.
async fn execute_under_stale_locks(fake: &FakeWorld, desired: &Desired, plan: &Plan) -> (Report, String) {
    let (report, text) = with_rollout(fake, desired, &Interrupt::default(), async |r| {
        let mut locks = PoolLocks::new(r.containers, r.clusters, r.locks, r.sink);
        locks.acquire(&plan.changed_pools(), r.interrupt).await.unwrap();
        let guard = locks.guard();
        tokio::time::advance(r.locks.renew_deadline()).await;
        let report = r.carry_out(plan, &guard).await;
        locks.release().await;
        report
    })
    .await;
    (report.unwrap(), text)
}

#[tokio::test(start_paused = true)]
async fn no_eviction_is_made_once_the_lock_was_not_renewed_within_its_deadline() {
    let world = old_node_instance(crate::model::ContainerState::Running);
    let (desired, plan) = node_pool(&world);
    let fake = FakeWorld::new(world);
    fake.sim().world.nodes.push(node("k-old", "k"));
    fake.sim().world.pods.push(pod("web-1", "k-old", Some("ReplicaSet")));
    let (report, _) = execute_under_stale_locks(&fake, &desired, &plan).await;
    let failed = report.failure().expect("the retirement fails").failure_line();
    assert!(
        failed.contains("step stop k-old of pool k failed") && failed.contains("not known to be held"),
        "{failed}"
    );
    // The drain was asked and evicted nothing; nothing irreversible came after it.
    let calls = fake.calls();
    assert!(calls.contains(&"drain k-old".to_owned()), "{calls:?}");
    assert_eq!(fake.world().pods.len(), 1, "the pod was not evicted");
    for call in ["stop k-old", "delete-node k-old", "remove k-old"] {
        assert!(!calls.contains(&call.to_owned()), "{call}: {calls:?}");
    }
    assert_eq!(fake.world().nodes.len(), 2, "{:?}", fake.world().nodes);
}

#[tokio::test(start_paused = true)]
async fn no_container_is_stopped_or_removed_once_the_lock_was_not_renewed_within_its_deadline() {
    let (desired, fake) = scene();
    let plan = preview(&desired, &fake, &fake, PlanOptions::default()).await.unwrap().plan;
    let (report, _) = execute_under_stale_locks(&fake, &desired, &plan).await;
    let failed = report.failure().expect("the retirements fail").failure_line();
    assert!(failed.contains("the lock of pool w is not known to be held"), "{failed}");
    let calls = fake.calls();
    // New instances may still come up (nothing is lost by that); no old one goes.
    assert!(calls.iter().any(|c| c.starts_with("create w-new-")), "{calls:?}");
    assert!(!calls.iter().any(|c| c.starts_with("stop ") || c.starts_with("remove ")), "{calls:?}");
    let names: Vec<String> = fake.world().containers.into_iter().map(|c| c.name).collect();
    assert!(names.contains(&"w-a".to_owned()) && names.contains(&"w-b".to_owned()), "{names:?}");
}

/// A rollback decided between two batches (issue 27, item 4): the first batch of the rollout to
/// `b` creates an instance of it and retires one of `a`; meanwhile that new instance dies and the
/// rollout's clock runs out, so the plan made again rolls back to `a`, the last template rolled
/// out completely. The next batch's instance is built from `a`'s template, rebuilt from the
/// history, not from the plan the rollout began with.
#[tokio::test]
async fn a_rollback_decided_between_batches_builds_the_next_batch_from_the_template_it_goes_back_to() {
    use crate::model::{ContainerState, Revision, RevisionEnd, RolloutResult};
    let args = |image| PoolArgs { image, ..PoolArgs::new("w", 2) };
    let a = args("busybox:1").build();
    let mut b = args("busybox:2").build();
    b.pool.spec.rollout.failure_action = crate::spec::FailureAction::Rollback;
    let old = |name: &str, created| container(name, "w", &a.template_hash, created);
    let mut world = world_of(vec![old("w-a-1", 1), old("w-a-2", 2)]);
    let first = Revision {
        number: 1,
        template_hash: a.template_hash.clone(),
        template: Some(crate::spec::canonical_template(&a.pool.spec)),
        source: None,
        commit: None,
        started: 1,
        rolled_back_from: None,
        end: Some(RevisionEnd { result: RolloutResult::Complete, at: 2 }),
    };
    world.history.insert("w".to_owned(), vec![first]);
    let fake = FakeWorld::new(world);
    let desired = desired(vec![b.clone()]);
    let plan = preview(&desired, &fake, &fake, PlanOptions::default()).await.unwrap().plan;
    let batches: BTreeSet<u32> = plan.pools[0].steps.iter().map(|s| s.batch).collect();
    assert_eq!(batches.len(), 2, "{:?}", plan.pools[0].steps);

    fake.hold("remove w-a-1");
    let meanwhile = async {
        fake.until(|calls| calls.iter().any(|c| c == "+remove w-a-1")).await;
        {
            let mut sim = fake.sim();
            let new = sim.world.containers.iter_mut().find(|c| c.template_hash == b.template_hash).unwrap();
            (new.state, new.came_up) = (ContainerState::Exited, None);
        }
        // An hour passes: the rollout's last step forward is older than its deadline.
        fake.pass(3600);
        fake.release("remove w-a-1");
    };
    let ((report, text), ()) = tokio::join!(execute_all(&fake, &desired, &plan), meanwhile);
    let report = report.unwrap();
    assert!(report.failure().is_none(), "{text}");

    let world = fake.world();
    let made: Vec<&Container> =
        world.containers.iter().filter(|c| c.name != "w-a-2" && c.template_hash == a.template_hash).collect();
    assert_eq!(made.len(), 1, "{:?}", world.containers);
    assert_eq!(made[0].image, "busybox:1", "built from the template it goes back to");
    assert!(!world.containers.iter().any(|c| c.template_hash == b.template_hash), "{:?}", world.containers);
    let history: Vec<(u64, &str, Option<&str>)> = world.history["w"]
        .iter()
        .map(|r| (r.number, r.template_hash.as_str(), r.rolled_back_from.as_deref()))
        .collect();
    assert_eq!(
        history,
        [
            (1, a.template_hash.as_str(), None),
            (2, b.template_hash.as_str(), None),
            (3, a.template_hash.as_str(), Some(b.template_hash.as_str()))
        ]
    );
    // The rollback ended `b`'s revision, and, once the pool served from `a` again, completed its own.
    let ends: Vec<Option<RolloutResult>> =
        world.history["w"].iter().map(|r| r.end.map(|e| e.result)).collect();
    assert_eq!(
        ends,
        [Some(RolloutResult::Complete), Some(RolloutResult::RolledBack), Some(RolloutResult::Complete)]
    );
}

/// A rollback is a decision: the plan shown before a rollout (which `apply` may not carry out,
/// answered no) does not record it; the rollout that carries it out does, before its first
/// batch retires the failed attempt that was the only sign of the stall.
#[tokio::test]
async fn a_rollback_is_recorded_by_the_rollout_that_carries_it_out_not_by_the_preview() {
    use crate::model::{ContainerState, Revision, RevisionEnd, RolloutRecord, RolloutResult};
    let args = |image| PoolArgs { image, surge: 0, unavailable: 1, ..PoolArgs::new("w", 1) };
    let a = args("busybox:1").build();
    let mut b = args("busybox:2").build();
    b.pool.spec.rollout.failure_action = crate::spec::FailureAction::Rollback;
    let revision = |number, dp: &crate::model::DesiredPool, end| Revision {
        number,
        template_hash: dp.template_hash.clone(),
        template: Some(crate::spec::canonical_template(&dp.pool.spec)),
        source: None,
        commit: None,
        started: 1,
        rolled_back_from: None,
        end,
    };
    let mut failed = container("w-b-1", "w", &b.template_hash, 3);
    (failed.state, failed.came_up) = (ContainerState::Exited, None);
    let mut world = world_of(vec![failed]);
    let complete = Some(RevisionEnd { result: RolloutResult::Complete, at: 2 });
    world.history.insert("w".to_owned(), vec![revision(1, &a, complete), revision(2, &b, None)]);
    // Its rollout began long ago, by the world's clock, and nothing of it came up.
    let record = RolloutRecord {
        template_hash: b.template_hash.clone(),
        since: 3,
        rolled_back_from: None,
        progressed: None,
    };
    world.rollouts.insert("w".to_owned(), record);
    let fake = FakeWorld::new(world);
    let desired = desired(vec![b.clone()]);

    let plan = preview(&desired, &fake, &fake, PlanOptions::default()).await.unwrap().plan;
    assert_eq!(plan.pools[0].revision_end, Some((2, RolloutResult::RolledBack)));
    record_ends(&plan, &desired, &fake).await;
    assert_eq!(fake.world().history["w"][1].end, None, "not by the preview");

    let (report, text) = execute_all(&fake, &desired, &plan).await;
    assert!(report.unwrap().complete(), "{text}");
    let world = fake.world();
    let calls = fake.calls();
    let ended = position(&calls, &format!("record-revision-end w 2 {}", RolloutResult::RolledBack));
    assert!(ended < position(&calls, "remove w-b-1"), "recorded before the attempt goes: {calls:?}");
    assert_eq!(world.containers.len(), 1);
    assert_eq!(
        (world.containers[0].template_hash.as_str(), world.containers[0].image.as_str()),
        (a.template_hash.as_str(), "busybox:1")
    );
    let ends: Vec<Option<RolloutResult>> =
        world.history["w"].iter().map(|r| r.end.map(|e| e.result)).collect();
    assert_eq!(
        ends,
        [Some(RolloutResult::Complete), Some(RolloutResult::RolledBack), Some(RolloutResult::Complete)]
    );
}

#[test]
fn a_rollout_locks_the_pools_another_run_is_changing_unless_it_stands_by() {
    // A run bootstraps a new instance of w (it holds w's lock); q needs a new instance.
    let w = PoolArgs { bootstrap: 1, ..PoolArgs::new("w", 2) }.build();
    let q = PoolArgs { hash: Some("qh"), ..PoolArgs::new("q", 1) }.build();
    let mut starting = container("w-new", "w", &w.template_hash, 90);
    starting.came_up = None;
    let world = World {
        now: 100,
        containers: vec![container("w-o1", "w", "old", 1), container("w-o2", "w", "old", 2), starting],
        locked: ["w".to_owned()].into(),
        ..World::default()
    };
    let desired = desired(vec![w, q]);
    let plan = crate::plan::plan(&desired, &world, PlanOptions::default());
    let preview = Preview {
        world,
        clusters: BTreeMap::<String, FakeCluster>::new(),
        plan,
        options: PlanOptions::default(),
    };
    assert_eq!(preview.busy_pools(), BTreeSet::from(["w".to_owned()]), "{:#?}", preview.plan);
    let (out, _) = progress();
    let fake = FakeWorld::new(World::default());
    let interrupt = Interrupt::default();
    let scope = |locks: &LockSettings| Rollout::new(&desired, &fake, &preview, locks, &interrupt, &out).scope;
    let apply = settings();
    assert_eq!(scope(&apply), BTreeSet::from(["q".to_owned(), "w".to_owned()]), "apply waits for w");
    let watch = LockSettings { standby: true, ..settings() };
    assert_eq!(scope(&watch), BTreeSet::from(["q".to_owned()]), "watch leaves w to its holder");
}

/// A deny window that opens an hour from now (by this process's clock, the fake daemon's), on a
/// schedule of that very second, for two hours.
fn deny_from_an_hour_on() -> crate::spec::DisruptionWindow {
    let at = (jiff::Timestamp::now() + jiff::SignedDuration::from_hours(1)).to_zoned(jiff::tz::TimeZone::UTC);
    crate::spec::DisruptionWindow {
        kind: crate::spec::WindowKind::Deny,
        schedule: format!("{} {} {} {} {} *", at.second(), at.minute(), at.hour(), at.day(), at.month()),
        duration: crate::spec::Duration::from_secs(2 * 3600),
        time_zone: None,
        reasons: Vec::new(),
    }
}

#[tokio::test]
async fn a_window_that_opens_mid_rollout_stops_it_at_the_next_batch_with_the_old_instances_serving() {
    let mut w = PoolArgs { hash: Some("new"), ..PoolArgs::new("w", 3) }.build();
    w.pool.spec.disruption.windows = vec![deny_from_an_hour_on()];
    let desired = desired(vec![w]);
    let world = World {
        now: jiff::Timestamp::now().as_second(),
        ..world_of(vec![
            container("w-1", "w", "old", 1),
            container("w-2", "w", "old", 2),
            container("w-3", "w", "old", 3),
        ])
    };
    let plan = crate::plan::plan(&desired, &world, PlanOptions::default());
    assert_eq!(
        plan.steps().filter(|(_, s)| s.action.verb() == "remove").count(),
        3,
        "the window is not open yet"
    );
    // The deny window opens while the first batch runs.
    let fake = FakeWorld::new(world).pass_after("remove w-1", 3600 + 60);
    let (report, _) = execute_all(&fake, &desired, &plan).await;
    let report = report.unwrap();
    assert!(report.failure().is_none() && report.stop_reason.is_none());
    let mut left: Vec<(String, String)> =
        fake.world().containers.iter().map(|c| (c.name.clone(), c.template_hash.clone())).collect();
    left.sort();
    assert_eq!(left.len(), 3, "{left:?}");
    assert_eq!(left[0..2], [("w-2".to_owned(), "old".to_owned()), ("w-3".to_owned(), "old".to_owned())]);
    assert_eq!(left[2].1, "new", "the instance the first batch made serves on: {left:?}");
    assert!(!fake.calls().iter().any(|c| c.ends_with("w-2") || c.ends_with("w-3")), "{:?}", fake.calls());
}
