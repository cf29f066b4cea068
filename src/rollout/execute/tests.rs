//! Executor tests against the fake world, which records every call.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::*;
use crate::backend::Connect;
use crate::model::{ClusterRef, Container, World};
use crate::plan::{DrainPreview, PlanOptions, PoolStatus, Summary};
use crate::rollout::cancel::StopReason;
use crate::spec::BootstrapStep;
use crate::testing::build::{PoolArgs, container, node, node_spec, pod};
use crate::testing::fake::{FakeCluster, FakeWorld};

fn desired(bootstrap: usize, network: Option<&'static str>) -> Desired {
    let mut pool = PoolArgs { image: "img:1", network, hash: Some("new"), ..PoolArgs::new("w", 2) }.build();
    pool.pool.spec.bootstrap = (0..bootstrap)
        .map(|_| BootstrapStep { exec: vec!["true".into()], timeout: crate::spec::Duration::from_secs(1) })
        .collect();
    Desired { origin: Origin::Path { path: "/pools".into() }, pools: vec![pool] }
}

fn step(batch: u32, instance: &str, action: Action) -> Step {
    Step { batch, instance: instance.into(), action }
}

/// Two new instances, then two old ones retired, in one batch, plus a second batch.
fn rolling_plan() -> Plan {
    let create = || Action::Create {
        image: "img:1".into(),
        template_hash: "new".into(),
        k3s_server: None,
        starts_rollout: false,
        rollback_from: None,
        revision: None,
    };
    let ready = || Action::AwaitReady { node: false };
    let steps = vec![
        step(0, "n1", create()),
        step(0, "n2", create()),
        step(0, "n1", ready()),
        step(0, "n2", ready()),
        step(0, "o1", Action::Stop),
        step(0, "o1", Action::Remove),
        step(0, "o2", Action::Stop),
        step(0, "o2", Action::Remove),
        step(1, "n3", create()),
        step(1, "n3", ready()),
        step(1, "o3", Action::Stop),
        step(1, "o3", Action::Remove),
    ];
    Plan {
        origin: Origin::Path { path: "/pools".into() },
        pools: vec![PoolPlan {
            managed_by: None,
            paused: None,
            waits_for: None,
            suspended: None,
            name: "w".into(),
            status: PoolStatus::Existing,
            template_hash: Some("new".into()),
            replicas: 3,
            template_change: None,
            docker: None,
            copy_from: None,
            drain_timeout_action: None,
            instances: Vec::new(),
            unhealthy_held: None,
            outdated_kept: 0,
            degraded: None,
            windows: Vec::new(),
            next_check: None,
            revision: None,
            revision_end: None,
            canary: None,
            steps,
        }],
        summary: Summary::default(),
        seed: None,
        rollbacks: Vec::new(),
        now: 0,
    }
}

/// Run `f` with an executor over the fake world (connected to the cluster of each pool with a
/// `node:` section), and return what it returned and the progress it wrote.
async fn with_executor<T>(
    fake: &FakeWorld,
    desired: &Desired,
    interrupt: &Interrupt,
    f: impl AsyncFnOnce(&Executor<'_, FakeWorld, FakeCluster>) -> T,
) -> (T, String) {
    let mut clusters: BTreeMap<String, FakeCluster> = BTreeMap::new();
    for pool in &desired.pools {
        if let Some(node) = &pool.pool.spec.node {
            let cluster = ClusterRef { kubeconfig: node.kubeconfig.clone(), context: node.context.clone() };
            clusters.insert(pool.name().to_owned(), fake.connect(&cluster, pool.name()).await.unwrap());
        }
    }
    let (progress, buffer) = crate::testing::progress();
    let executor = Executor::new(desired, fake, &clusters, &progress, interrupt);
    let result = f(&executor).await;
    let text = String::from_utf8(buffer.lock().unwrap().clone()).unwrap();
    (result, text)
}

async fn run(fake: &FakeWorld, desired: &Desired, plan: &Plan, interrupt: &Interrupt) -> (Report, String) {
    with_executor(fake, desired, interrupt, async |e| e.run_batch(plan).await).await
}

#[tokio::test]
async fn runs_every_step_in_plan_order_with_progress() {
    let fake = FakeWorld::default();
    let (report, text) = run(&fake, &desired(0, None), &rolling_plan(), &Interrupt::default()).await;
    assert!(report.complete(), "{report:?}");
    let calls = fake.calls();
    let pos =
        |c: &str| calls.iter().position(|x| x == c).unwrap_or_else(|| panic!("{c} not called: {calls:?}"));
    // Every retirement of a batch comes after every creation of that batch.
    for created in ["wait-up n1", "wait-up n2"] {
        assert!(pos(created) < pos("stop o1"));
    }
    assert!(pos("stop o1") < pos("remove o1"));
    assert!(pos("remove o2") < pos("create n3"));
    assert!(pos("wait-up n3") < pos("stop o3"));
    // Each new instance's coming up is recorded last, once it is up.
    for n in ["n1", "n2", "n3"] {
        assert!(pos(&format!("wait-up {n}")) < pos(&format!("record-up {n}")), "{calls:?}");
    }
    assert!(pos("record-up n1") < pos("stop o1"));
    assert_eq!(calls.len(), 15);
    assert!(text.contains("[1/12] create n1 ..."), "{text}");
    assert!(text.contains("[12/12] remove o3 done ("), "{text}");
}

#[tokio::test]
async fn retiring_an_outdated_instance_is_progress_and_removing_a_failed_attempt_is_not() {
    let record = |progressed| crate::model::RolloutRecord {
        template_hash: "new".into(),
        since: 1,
        rolled_back_from: None,
        progressed,
    };
    let progressed = |fake: &FakeWorld| fake.sim().world.rollouts["w"].progressed;
    let instance = crate::testing::build::instance_status;
    let fake = FakeWorld::default();
    fake.sim().world.rollouts.insert("w".into(), record(None));
    fake.sim().world.containers.push(container("f1", "w", "new", 1));
    let mut plan = rolling_plan();
    plan.pools[0].steps = vec![step(0, "f1", Action::Remove)];
    plan.pools[0].instances = vec![instance("f1", "new")];
    let (report, _) = run(&fake, &desired(0, None), &plan, &Interrupt::default()).await;
    assert!(report.complete());
    assert_eq!(progressed(&fake), None, "an attempt of the new template removed is no step towards it");

    plan.pools[0].steps = vec![step(0, "o1", Action::Stop), step(0, "o1", Action::Remove)];
    plan.pools[0].instances = vec![instance("o1", "old")];
    let (report, _) = run(&fake, &desired(0, None), &plan, &Interrupt::default()).await;
    assert!(report.complete());
    assert!(progressed(&fake).is_some(), "an outdated instance retired is");
}

#[tokio::test]
async fn creations_of_a_batch_overlap() {
    let fake = FakeWorld::default();
    let (report, _) = run(&fake, &desired(0, None), &rolling_plan(), &Interrupt::default()).await;
    assert!(report.complete());
    assert_eq!(fake.max_in_flight(), 2, "the two creations of batch 0 should run at once");
}

#[tokio::test]
async fn a_failed_creation_halts_before_any_retirement() {
    let fake = FakeWorld::default().failing("wait-up n2");
    let (report, text) = run(&fake, &desired(0, None), &rolling_plan(), &Interrupt::default()).await;
    assert!(!report.complete());
    let failure = report.failure().expect("a failure");
    assert_eq!((failure.verb, failure.instance.as_str()), ("await-ready", "n2"));
    let calls = fake.calls();
    // No old instance was touched; the new one that never came up was stopped, and only it.
    let stops: Vec<&String> =
        calls.iter().filter(|c| c.starts_with("stop") || c.starts_with("remove")).collect();
    assert_eq!(stops, ["stop n2"], "{calls:?}");
    assert!(text.contains("stopped n2: it never served; the next plan replaces it"), "{text}");
    // The other creation of the batch still finished; everything after was never started.
    assert!(calls.contains(&"wait-up n1".to_owned()));
    assert_eq!(report.not_started.len(), 8);
    assert!(text.contains("await-ready n2 FAILED"), "{text}");
    let mut summary = Vec::new();
    crate::report::write_summary(&report, &mut summary).unwrap();
    let summary = String::from_utf8(summary).unwrap();
    assert!(summary.contains("Apply halted: 3 steps done, 8 not started."), "{summary}");
    assert!(summary.contains("failed: await-ready n2 (w): wait-up n2 refused"), "{summary}");
    assert!(summary.contains("not started: stop o1 (w)"), "{summary}");
    assert!(summary.contains("done: n1 (create, await-ready)"), "{summary}");
    assert!(summary.contains("done: n2 (create)"), "{summary}");
}

#[tokio::test]
async fn a_failed_bootstrap_halts_with_its_exit_code_and_output() {
    let fake = FakeWorld::default().exit_code(3);
    let mut plan = rolling_plan();
    plan.pools[0].steps.insert(2, step(0, "n1", Action::Bootstrap { commands: 1 }));
    let (report, _) = run(&fake, &desired(1, None), &plan, &Interrupt::default()).await;
    let failure = report.failure().expect("a failure");
    assert_eq!(failure.verb, "bootstrap");
    let message = failure.error.as_ref().unwrap().to_string();
    assert_eq!(message, "bootstrap command [\"true\"] exited with code 3, its output:\n      join failed");
    // The container whose bootstrap failed is stopped, so the next plan replaces it instead of
    // keeping an instance that was never bootstrapped; the old ones are untouched.
    let stops: Vec<String> = fake.calls().into_iter().filter(|c| c.starts_with("stop")).collect();
    assert_eq!(stops, ["stop n1"]);
}

#[tokio::test]
async fn a_failed_bootstrap_shows_no_secret_the_run_knows() {
    // The bootstrap echoes the pool's `valueFrom` value and the k3s token its container was
    // handed, the first cut short where the output was cut to its end.
    let output =
        format!("{}ret-from-file\nvalue s3cret-from-file, token token-of-srv\n", crate::backend::CUT);
    let server = container("srv", "other", "x", 1);
    let fake = FakeWorld::new(World { containers: vec![server], ..World::default() })
        .exit_code(3)
        .exec_output(&output);
    let mut desired = desired(1, None);
    let spec = &mut desired.pools[0].pool.spec;
    let secret = crate::spec::SecretEnv {
        value_from: crate::spec::ValueFrom { file: Some("/run/token".into()), ..Default::default() },
        value: Some(Secret::new("s3cret-from-file")),
    };
    spec.template.env.insert("TOKEN".into(), EnvValue::Secret(secret));
    let k3s = crate::spec::K3sJoin { server: "srv".into(), url: None };
    spec.join = Some(crate::spec::Join { kubeadm: None, k3s: Some(k3s) });
    let mut plan = rolling_plan();
    plan.pools[0].steps.insert(2, step(0, "n1", Action::Bootstrap { commands: 1 }));
    let (report, progress) = run(&fake, &desired, &plan, &Interrupt::default()).await;
    let message = report.failure().expect("a failure").error.as_ref().unwrap().to_string();
    assert!(message.contains("value (sensitive), token (sensitive)"), "{message}");
    let mut summary = Vec::new();
    crate::report::write_summary(&report, &mut summary).unwrap();
    let said = [message, progress, String::from_utf8(summary).unwrap()].concat();
    for secret in ["s3cret-from-file", "ret-from-file", "token-of-srv"] {
        assert!(!said.contains(secret), "{secret} shows:\n{said}");
    }
}

/// Whether no call starts after `call` ended: what "halts before the next step" means once
/// steps run side by side (the ones already under way finish).
fn nothing_starts_after(fake: &FakeWorld, call: &str) -> bool {
    let timeline = fake.timeline();
    let end = position(&timeline, &format!("-{call}"));
    timeline[end..].iter().all(|e| e.starts_with('-'))
}

#[tokio::test]
async fn a_failed_retirement_step_stops_the_rest() {
    let fake = FakeWorld::default().failing("stop o1");
    let (report, _) = run(&fake, &desired(0, None), &rolling_plan(), &Interrupt::default()).await;
    assert_eq!(report.failure().unwrap().instance, "o1");
    let calls = fake.calls();
    assert!(!calls.contains(&"remove o1".to_owned()), "a container that did not stop is not removed");
    // o2's stop ran beside o1's; once o1's failed, nothing more started.
    assert!(nothing_starts_after(&fake, "stop o1"), "{:?}", fake.timeline());
    assert!(!calls.contains(&"remove o2".to_owned()), "{calls:?}");
    assert!(!calls.iter().any(|c| c.ends_with('3')), "{calls:?}");
}

#[tokio::test]
async fn an_interrupt_stops_at_the_next_step_boundary() {
    let interrupt = Arc::new(Interrupt::default());
    let fake = FakeWorld::default().interrupt_after("stop o1", Arc::clone(&interrupt));
    let (report, _) = run(&fake, &desired(0, None), &rolling_plan(), &interrupt).await;
    assert!(report.interrupted());
    assert!(report.failure().is_none());
    // The stop of o2, under way beside o1's, finishes; nothing starts after the interrupt.
    assert!(nothing_starts_after(&fake, "stop o1"), "{:?}", fake.timeline());
    let mut not_started: Vec<String> =
        report.not_started.iter().map(|(_, i, v)| format!("{v} {i}")).collect();
    not_started.sort();
    assert_eq!(
        not_started,
        ["await-ready n3", "create n3", "remove o1", "remove o2", "remove o3", "stop o3"],
        "{:?}",
        fake.timeline()
    );
}

/// A pool of `replicas` instances `w-old-<i>` on an old template, replaced with
/// `maxSurge = replicas`: one batch creates them all and retires them all.
fn surge_all(replicas: i64, nodes: bool) -> (Desired, World, Plan) {
    let w = PoolArgs { hash: Some("new"), nodes, surge: replicas, ..PoolArgs::new("w", replicas) }.build();
    let desired = Desired { origin: Origin::Path { path: "/pools".into() }, pools: vec![w] };
    let mut world = World::default();
    for i in 1..=replicas {
        let name = format!("w-old-{i}");
        world.containers.push(Container {
            scope: Some("path:/pools".into()),
            cluster: nodes.then_some(ClusterRef { kubeconfig: None, context: None }),
            ..container(&name, "w", "old", i)
        });
        if nodes {
            world.nodes.push(node(&name, "w"));
            world.pods.push(pod(&format!("web-{i}"), &name, Some("ReplicaSet")));
        }
    }
    let plan = crate::plan::plan(&desired, &world, PlanOptions::default());
    assert_eq!(plan.pools[0].steps.iter().map(|s| s.batch).max(), Some(1), "one batch");
    (desired, world, plan)
}

#[tokio::test]
async fn the_retirements_of_a_batch_overlap_and_never_leave_fewer_than_replicas_running() {
    let (desired, world, plan) = surge_all(4, false);
    // A stop that would leave fewer than 4 running containers is refused by the fake.
    let fake = FakeWorld::new(world).min_running(4);
    let (report, text) = run(&fake, &desired, &plan, &Interrupt::default()).await;
    assert!(report.complete(), "{report:?}");
    assert_eq!(fake.max_in_flight_of("stop"), 4, "the four stops ran at once: {:?}", fake.timeline());
    assert_eq!(fake.max_in_flight_of("remove"), 4, "{:?}", fake.timeline());
    let timeline = fake.timeline();
    // Every creation of the batch was up before the first retirement started.
    let first_stop = timeline.iter().position(|e| e.starts_with("+stop")).unwrap();
    let last_up = timeline.iter().rposition(|e| e.starts_with("-wait-up")).unwrap();
    assert!(last_up < first_stop, "{timeline:?}");
    // Each instance's own steps keep their order.
    for i in 1..=4 {
        assert!(
            position(&timeline, &format!("-stop w-old-{i}"))
                < position(&timeline, &format!("+remove w-old-{i}"))
        );
    }
    // Progress keeps the plan's step numbers.
    let stop = plan.pools[0].steps.iter().position(|s| s.instance == "w-old-3" && s.action == Action::Stop);
    let n = stop.unwrap() + 1;
    assert!(text.contains(&format!("[{n}/{}] stop w-old-3 done (", plan.pools[0].steps.len())), "{text}");
    let left = fake.world().containers;
    assert_eq!(left.len(), 4);
    assert!(left.iter().all(|c| c.template_hash == "new"), "{left:?}");
}

#[tokio::test]
async fn drains_run_one_node_at_a_time_and_the_rest_of_a_retirement_overlaps_the_next_drain() {
    let (desired, world, plan) = surge_all(3, true);
    let fake = FakeWorld::new(world);
    let execute = async |e: &Executor<'_, _, _>| e.run_batch(&plan).await;
    let (report, _) = with_executor(&fake, &desired, &Interrupt::default(), execute).await;
    assert!(report.complete(), "{report:?}");
    let timeline = fake.timeline();
    assert_eq!(fake.max_in_flight_of("drain"), 1, "{timeline:?}");
    assert_eq!(fake.max_in_flight_of("cordon"), 1, "{timeline:?}");
    let at = |e: &str| position(&timeline, e);
    for (a, b) in [("w-old-1", "w-old-2"), ("w-old-2", "w-old-3")] {
        // The next Node is cordoned only once the previous drain is over, in plan order...
        assert!(at(&format!("-drain {a}")) < at(&format!("+cordon {b}")), "{timeline:?}");
        // ...and the drained instance's stop, Node deletion and removal overlap that.
        assert!(at(&format!("+cordon {b}")) < at(&format!("-remove {a}")), "{timeline:?}");
    }
    for i in 1..=3 {
        let name = format!("w-old-{i}");
        assert!(at(&format!("-drain {name}")) < at(&format!("+stop {name}")));
        assert!(at(&format!("-stop {name}")) < at(&format!("+delete-node {name}")));
        assert!(at(&format!("-delete-node {name}")) < at(&format!("+remove {name}")));
    }
    assert!(fake.world().pods.is_empty(), "every pod was evicted");
}

fn created(plan: &Plan) -> String {
    let create = plan.steps().find(|(_, s)| matches!(s.action, Action::Create { .. }));
    create.expect("a create").1.instance.to_string()
}

#[tokio::test]
async fn the_up_record_is_written_while_the_old_node_drains_and_its_stop_waits_for_it() {
    let (desired, world, plan) = surge_all(1, true);
    let new = created(&plan);
    let record = format!("record-up {new}");
    let fake = FakeWorld::new(world);
    fake.hold(&record);
    let execute = async |e: &Executor<'_, _, _>| {
        let release = async {
            // The old Node is cordoned and drained while the new one's record is being written...
            fake.until(|t| t.iter().any(|c| c == "-drain w-old-1")).await;
            let timeline = fake.timeline();
            assert!(!timeline.iter().any(|c| c.starts_with(&format!("-{record}"))), "{timeline:?}");
            // ...and its container is not stopped until the record is written.
            for _ in 0..100 {
                tokio::task::yield_now().await;
            }
            assert!(!fake.timeline().iter().any(|c| c.starts_with("+stop")), "{:?}", fake.timeline());
            fake.release(&record);
        };
        futures::future::join(e.run_batch(&plan), release).await.0
    };
    let (report, _) = with_executor(&fake, &desired, &Interrupt::default(), execute).await;
    assert!(report.complete(), "{report:?}");
    let timeline = fake.timeline();
    let at = |e: &str| position(&timeline, e);
    assert!(at(&format!("+{record}")) < at("+cordon w-old-1"), "{timeline:?}");
    assert!(at(&format!("-{record}")) < at("+stop w-old-1"), "{timeline:?}");
    assert!(fake.world().containers.iter().all(|c| c.name == new), "{:?}", fake.world().containers);
}

#[tokio::test]
async fn a_failed_up_record_stops_nothing_and_leaves_the_new_instance_serving() {
    let (desired, world, plan) = surge_all(1, true);
    let new = created(&plan);
    let fake = FakeWorld::new(world).failing(&format!("record-up {new}"));
    let (report, text) = run(&fake, &desired, &plan, &Interrupt::default()).await;
    let failure = report.failure().expect("a failure");
    assert_eq!((failure.verb, failure.instance.as_str()), ("await-ready", new.as_str()));
    let calls = fake.calls();
    // Neither the old instance (its drain may have begun) nor the new one, which is up.
    assert!(!calls.iter().any(|c| c.starts_with("stop") || c.starts_with("remove")), "{calls:?}");
    assert!(
        text.contains(&format!("{new} is up but not recorded as up; the next apply records it")),
        "{text}"
    );
    let running: Vec<String> = fake
        .world()
        .containers
        .iter()
        .filter(|c| c.state == crate::model::ContainerState::Running)
        .map(|c| c.name.clone())
        .collect();
    assert_eq!(running.len(), 2, "{running:?}");
}

#[tokio::test]
async fn a_newer_desired_state_stops_at_the_next_boundary_without_a_failure() {
    static INTERRUPT: std::sync::OnceLock<Interrupt> = std::sync::OnceLock::new();
    let interrupt = INTERRUPT.get_or_init(Interrupt::default);
    interrupt.stop(StopReason::Superseded);
    let fake = FakeWorld::default();
    let (report, text) = run(&fake, &desired(0, None), &rolling_plan(), interrupt).await;
    assert_eq!(report.stop_reason, Some(StopReason::Superseded));
    assert!(report.failure().is_none());
    assert!(fake.calls().is_empty(), "{:?}", fake.calls());
    let mut summary = Vec::new();
    crate::report::write_summary(&report, &mut summary).unwrap();
    assert!(String::from_utf8(summary).unwrap().contains("superseded"), "{text}");
    // A signal outranks a supersede, and a supersede never hides a signal.
    interrupt.trigger();
    interrupt.stop(StopReason::Superseded);
    assert_eq!(interrupt.reason(), Some(StopReason::Signal));
}

#[tokio::test]
async fn node_steps_without_a_cluster_fail_clearly() {
    let fake = FakeWorld::default();
    let mut plan = rolling_plan();
    plan.pools[0].steps =
        vec![step(0, "o1", Action::Cordon), step(0, "o1", Action::Drain(DrainPreview::default()))];
    let (report, _) = run(&fake, &desired(0, None), &plan, &Interrupt::default()).await;
    assert_eq!(
        report.failure().unwrap().error.as_ref().unwrap().to_string(),
        "pool w: this step acts on a Kubernetes Node, but no cluster is configured for the pool"
    );
    assert_eq!(report.not_started, vec![("w".to_owned(), "o1".to_owned(), "drain")]);
}

#[tokio::test]
async fn preflight_checks_images_and_networks_before_anything_changes() {
    let fake = FakeWorld::default();
    let desired = desired(0, Some("missing"));
    let preflight = async |e: &Executor<'_, _, _>| e.preflight(&rolling_plan()).await;
    let (result, _) = with_executor(&fake, &desired, &Interrupt::default(), preflight).await;
    let err = result.unwrap_err();
    assert_eq!(
        err.to_string(),
        "network missing does not exist (create it first, e.g. `docker network create missing`)"
    );
    assert_eq!(fake.calls(), vec!["image img:1"], "the image is checked once, and nothing is created");
    // An extra network is checked as the first one is.
    let mut desired = self::desired(0, Some("kind"));
    desired.pools[0].pool.spec.template.extra_networks = vec!["missing".to_owned()];
    let (result, _) = with_executor(&fake, &desired, &Interrupt::default(), preflight).await;
    assert!(result.unwrap_err().to_string().starts_with("network missing does not exist"));
}

#[test]
fn new_containers_carry_the_pool_labels() {
    let d = desired(0, Some("kind"));
    let c = new_container(&d.pools[0], &d.origin, "w-new-abcde", None);
    assert_eq!(c.labels[labels::POOL], "w");
    assert_eq!(c.labels[labels::TEMPLATE_HASH], "new");
    assert_eq!(c.labels[labels::SCOPE], "path:/pools");
    assert!(c.labels[labels::TEMPLATE].contains("\"image\":\"img:1\""));
    assert_eq!(c.network.as_deref(), Some("kind"));
    assert!(!c.labels.contains_key(labels::COMMIT));
    assert!(!c.labels.contains_key(labels::KUBECONFIG), "not a Node");
}

#[test]
fn new_nodes_record_their_cluster() {
    let mut d = desired(0, None);
    d.pools[0].pool.spec.node = Some(node_spec(None, Some("kind-a")));
    let c = new_container(&d.pools[0], &d.origin, "w-new-abcde", None);
    assert_eq!(c.labels[labels::KUBECONFIG], "", "the default kubeconfig");
    assert_eq!(c.labels[labels::CONTEXT], "kind-a");
}

#[tokio::test]
async fn an_interrupt_inside_a_creation_chain_stops_the_unfinished_containers() {
    let interrupt = Arc::new(Interrupt::default());
    let fake = FakeWorld::default().interrupt_after("create n1", Arc::clone(&interrupt));
    let (report, _) = run(&fake, &desired(0, None), &rolling_plan(), &interrupt).await;
    assert!(report.interrupted(), "{report:?}");
    assert!(report.failure().is_none());
    let calls = fake.calls();
    // Both creations were under way; neither reached await-ready, so both containers are
    // stopped, and no old instance is touched.
    let mut stops: Vec<&String> = calls.iter().filter(|c| c.starts_with("stop")).collect();
    stops.sort();
    assert_eq!(stops, ["stop n1", "stop n2"], "{calls:?}");
    assert!(!calls.iter().any(|c| c.starts_with("wait-up") || c.contains(" o")), "{calls:?}");
}

#[tokio::test]
async fn await_ready_fails_at_once_when_the_container_stops_while_its_node_is_awaited() {
    let mut desired = desired(0, None);
    let long = crate::spec::Duration::from_secs(3600);
    desired.pools[0].pool.spec.node =
        Some(crate::spec::NodeSpec { ready_timeout: long, ..node_spec(None, None) });
    // The kubelet never gets the Node Ready, and the container exits once the wait has begun.
    let fake = FakeWorld::default().never_ready("n1").die_after("node-ready n1", "n1");
    let mut plan = rolling_plan();
    plan.pools[0].steps = vec![
        step(
            0,
            "n1",
            Action::Create {
                image: "img:1".into(),
                template_hash: "new".into(),
                k3s_server: None,
                starts_rollout: false,
                rollback_from: None,
                revision: None,
            },
        ),
        step(0, "n1", Action::AwaitReady { node: true }),
        step(0, "o1", Action::Stop),
    ];
    let batch = async |e: &Executor<'_, _, _>| e.run_batch(&plan).await;
    // Only a hang guard: the Node wait alone would last the hour of readyTimeout.
    let guarded = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        with_executor(&fake, &desired, &Interrupt::default(), batch).await
    });
    let (report, text) = guarded.await.expect("the step ends without waiting out readyTimeout");
    let failure = report.failure().expect("a failure");
    assert_eq!((failure.verb, failure.instance.as_str()), ("await-ready", "n1"));
    assert_eq!(
        failure.error,
        Some(StepError::ContainerStopped { name: "n1".into(), how: crate::backend::Stopped::Exited(0) })
    );
    assert!(text.contains("container n1 exited with code 0 while its Node was awaited"), "{text}");
    let calls = fake.calls();
    assert!(!calls.iter().any(|c| c == "configure n1" || c == "stop o1"), "{calls:?}");
}

fn position(calls: &[String], call: &str) -> usize {
    calls.iter().position(|c| c == call).unwrap_or_else(|| panic!("no {call}: {calls:?}"))
}

/// One new container-only instance of pool `w`, whose `minReadySeconds` is `seconds`.
fn one_new_with_min_ready(seconds: u32) -> (Desired, Plan) {
    let mut desired = desired(0, None);
    desired.pools[0].pool.spec.rollout.min_ready_seconds =
        crate::spec::Duration::from_secs(u64::from(seconds));
    let mut plan = rolling_plan();
    plan.pools[0].steps = vec![
        step(
            0,
            "n1",
            Action::Create {
                image: "img:1".into(),
                template_hash: "new".into(),
                k3s_server: None,
                starts_rollout: false,
                rollback_from: None,
                revision: None,
            },
        ),
        step(0, "n1", Action::AwaitReady { node: false }),
    ];
    (desired, plan)
}

#[tokio::test(start_paused = true)]
async fn a_new_instance_counts_as_up_only_after_min_ready_seconds() {
    let (desired, plan) = one_new_with_min_ready(30);
    let fake = FakeWorld::default();
    let (report, text) = run(&fake, &desired, &plan, &Interrupt::default()).await;
    assert!(report.complete(), "{report:?}");
    assert!(
        text.contains("n1: up; waiting 30s (minReadySeconds) and 0s (monitor) before it counts as up"),
        "{text}"
    );
    let calls = fake.calls();
    assert!(position(&calls, "wait-up n1") < position(&calls, "record-up n1"), "{calls:?}");
}

#[tokio::test(start_paused = true)]
async fn a_container_that_stops_within_min_ready_seconds_never_counts_as_up() {
    let (desired, plan) = one_new_with_min_ready(30);
    let fake = FakeWorld::default().die_after("wait-up n1", "n1");
    let (report, _) = run(&fake, &desired, &plan, &Interrupt::default()).await;
    let failure = report.failure().expect("a failure");
    assert_eq!((failure.verb, failure.instance.as_str()), ("await-ready", "n1"));
    assert!(!fake.calls().contains(&"record-up n1".to_owned()), "{:?}", fake.calls());
}

/// Carry out `plan` with an executor that runs on the Node `own`, as a watch replica deploy/
/// told its Node (`POOLCTL_NODE_NAME`): the report and the progress text.
async fn run_on_node(fake: &FakeWorld, desired: &Desired, plan: &Plan, own: &str) -> (Report, String) {
    let interrupt = Interrupt::default();
    let execute = async |e: &Executor<'_, FakeWorld, FakeCluster>| {
        let on_node = Executor::new(e.desired, fake, e.clusters, e.sink, &interrupt);
        on_node.on_node(Some(own.to_owned())).run_batch(plan).await
    };
    with_executor(fake, desired, &interrupt, execute).await
}

/// What is left of the instance `name` in `fake`'s world: its Node's `unschedulable`, its
/// container's state, and the pods still bound to the Node.
fn left_of(fake: &FakeWorld, name: &str) -> (Option<bool>, Option<crate::model::ContainerState>, usize) {
    let world = fake.world();
    let node = world.nodes.iter().find(|n| n.name == name).map(|n| n.unschedulable);
    let container = world.containers.iter().find(|c| c.name == name).map(|c| c.state);
    (node, container, world.pods.iter().filter(|p| p.node == name).count())
}

#[tokio::test]
async fn the_node_poolctl_runs_on_is_never_retired_and_keeps_serving() {
    let (desired, world, plan) = surge_all(2, true);
    let fake = FakeWorld::new(world);
    let (report, text) = run_on_node(&fake, &desired, &plan, "w-old-1").await;

    let refused = "refusing to retire Node w-old-1: this poolctl runs on it (POOLCTL_NODE_NAME); move \
                   poolctl off the pool's Nodes (deploy/ keeps it off them)";
    let failure = report.failure().expect("the retirement fails");
    assert_eq!((failure.instance.as_str(), failure.verb), ("w-old-1", "cordon"), "{report:?}");
    assert_eq!(failure.error.as_ref().map(ToString::to_string).as_deref(), Some(refused));
    assert!(text.contains(refused), "{text}");
    // Refused before its cordon: nothing was asked of its Node or its container, and none
    // of the pool's retirements went on (the refused cordon held the drain turn first, and no
    // step starts once one failed), as after any failed step.
    let calls = fake.calls();
    let retiring = ["cordon ", "drain ", "stop ", "delete-node ", "remove "];
    assert!(!calls.iter().any(|c| retiring.iter().any(|r| c.starts_with(r))), "{calls:?}");
    // The old instance keeps serving: its Node schedulable, its container running, its pod on it.
    assert_eq!(left_of(&fake, "w-old-1"), (Some(false), Some(crate::model::ContainerState::Running), 1));
    assert_eq!(left_of(&fake, "w-old-2"), (Some(false), Some(crate::model::ContainerState::Running), 1));
    let not_started: Vec<String> = report.not_started.iter().map(|(_, i, v)| format!("{v} {i}")).collect();
    assert!(not_started.contains(&"drain w-old-1".to_owned()), "{not_started:?}");
    assert!(not_started.contains(&"cordon w-old-2".to_owned()), "{not_started:?}");
}

#[tokio::test]
async fn a_resumed_retirement_of_the_node_poolctl_runs_on_is_refused_at_its_first_step() {
    // An earlier run (before deploy/ kept poolctl off the pool) cordoned it: the plan resumes
    // at the drain, and the drain is refused just the same.
    let (desired, mut world, _) = surge_all(1, true);
    let node = world.nodes.iter_mut().find(|n| n.name == "w-old-1").unwrap();
    (node.unschedulable, node.cordoned_by_poolctl) = (true, true);
    let plan = crate::plan::plan(&desired, &world, PlanOptions::default());
    let first = plan.pools[0].steps.iter().find(|s| s.instance == "w-old-1").map(|s| s.action.verb());
    assert_eq!(first, Some("drain"), "{plan:?}");
    let fake = FakeWorld::new(world);
    let (report, _) = run_on_node(&fake, &desired, &plan, "w-old-1").await;
    let failure = report.failure().expect("the retirement fails");
    assert_eq!((failure.instance.as_str(), failure.verb), ("w-old-1", "drain"));
    assert!(matches!(failure.error, Some(StepError::OwnNode(ref n)) if n == "w-old-1"));
    assert_eq!(left_of(&fake, "w-old-1"), (Some(true), Some(crate::model::ContainerState::Running), 1));
}

/// A Node that is not Ready at some look within `monitor` starts the window again: a flap is
/// not staying up, and nothing old is cordoned before the new Node has stayed Ready for it.
#[tokio::test(start_paused = true)]
async fn a_node_that_flaps_within_the_monitor_window_starts_it_again() {
    let (mut desired, world, plan) = surge_all(1, true);
    desired.pools[0].pool.spec.rollout.monitor = crate::spec::Duration::from_secs(5);
    let fake = FakeWorld::new(world);
    let new = plan.pools[0].steps[0].instance.to_string();
    let started = tokio::time::Instant::now();
    let flap = async {
        // The new Node registers (Ready) at once; 2s later it goes NotReady for a second.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        fake.sim().world.nodes.iter_mut().find(|n| n.name == new).expect("registered").ready = false;
        tokio::time::sleep(Duration::from_secs(1)).await;
        fake.sim().world.nodes.iter_mut().find(|n| n.name == new).expect("registered").ready = true;
    };
    let interrupt = Interrupt::default();
    let ((report, text), ()) = tokio::join!(run(&fake, &desired, &plan, &interrupt), flap);
    assert!(report.complete(), "{report:?}");
    assert!(
        text.contains(&format!("{new}: its Node is not Ready; watching it stay up for 5s again")),
        "{text}"
    );
    let calls = fake.calls();
    assert!(position(&calls, &format!("record-up {new}")) < position(&calls, "cordon w-old-1"), "{calls:?}");
    // Up only once 5s had passed since the flap ended: at least 3s + 5s after the start.
    assert!(started.elapsed() >= Duration::from_secs(8), "{:?}", started.elapsed());
}

/// A pool `w` of Nodes (of the current context) made from `image`, and a plan that creates
/// two of them and retires two old ones.
fn node_pool_of(image: &'static str) -> (Desired, Plan) {
    let pool = PoolArgs { image, nodes: true, hash: Some("new"), ..PoolArgs::new("w", 2) }.build();
    let desired = Desired { origin: Origin::Path { path: "/pools".into() }, pools: vec![pool] };
    let mut plan = rolling_plan();
    for step in &mut plan.pools[0].steps {
        if let Action::Create { image: created, .. } = &mut step.action {
            image.clone_into(created);
        }
    }
    (desired, plan)
}

/// The preflight of `image`'s pool against `fake`, as its error says (`None`: it passed),
/// after which nothing was created.
async fn skew_preflight(fake: &FakeWorld, image: &'static str) -> Option<String> {
    let (desired, plan) = node_pool_of(image);
    let preflight = async |e: &Executor<'_, _, _>| e.preflight(&plan).await;
    let (result, _) = with_executor(fake, &desired, &Interrupt::default(), preflight).await;
    assert!(
        fake.calls().iter().all(|c| c.starts_with("image ")),
        "only images were looked at: {:?}",
        fake.calls()
    );
    assert!(fake.world().containers.is_empty());
    result.err().map(|e| e.to_string())
}

#[tokio::test]
async fn a_kubelet_newer_than_the_api_server_is_refused_naming_both_versions() {
    let fake = FakeWorld::default().server_version("v1.30.2");
    assert_eq!(
        skew_preflight(&fake, "kindest/node:v1.32.0").await.unwrap(),
        "pool w: the template's kubelet v1.32.0 (from the image tag kindest/node:v1.32.0) is newer than the API \
         server v1.30.2; Kubernetes supports a kubelet as new as the API server and up to three minor versions \
         older. Use an image of v1.30 or older, or pass --skip-preflight version-skew"
    );
    assert_eq!(
        fake.calls(),
        vec!["image kindest/node:v1.32.0"],
        "the image is there before its label is read"
    );
}

#[tokio::test]
async fn a_kubelet_as_new_as_the_api_server_or_up_to_three_minors_older_passes() {
    let fake = FakeWorld::default().server_version("v1.30.2");
    for image in
        ["kindest/node:v1.30.0", "rancher/k3s:v1.30.9-k3s1", "kindest/node:v1.29.4", "kindest/node:v1.27.3"]
    {
        assert_eq!(skew_preflight(&fake, image).await, None, "{image}");
    }
    assert_eq!(
        skew_preflight(&fake, "rancher/k3s:v1.26.15-k3s1").await.unwrap(),
        "pool w: the template's kubelet v1.26.15-k3s1 (from the image tag rancher/k3s:v1.26.15-k3s1) is older than \
         the API server v1.30.2 supports; Kubernetes supports a kubelet as new as the API server and up to three \
         minor versions older (two, for a kubelet older than v1.25). Use an image of v1.27 or newer, or pass \
         --skip-preflight version-skew"
    );
}

#[tokio::test]
async fn an_image_that_names_no_kubelet_version_passes_without_asking_the_api_server() {
    // The API server would not answer: it is not asked.
    let fake = FakeWorld::default().server_version("v1.30.2").failing("version");
    assert_eq!(skew_preflight(&fake, "busybox:latest").await, None);
    // Asked for a kubelet whose version is known, its silence refuses the rollout.
    let err = skew_preflight(&fake, "kindest/node:v1.29.0").await.unwrap();
    assert_eq!(
        err,
        "pool w: cannot read the API server's version to check the template's kubelet v1.29.0 (from the image tag \
         kindest/node:v1.29.0) against it; pass --skip-preflight version-skew to create it unchecked"
    );
}

#[tokio::test]
async fn the_images_kubelet_version_label_comes_before_its_tag() {
    let label = crate::model::labels::KUBELET_VERSION;
    let fake = FakeWorld::default()
        .server_version("v1.30.2")
        .image_label("my/node:latest", label, "1.32.0")
        .image_label("my/node:v1.32.0", label, "v1.30.1");
    let err = skew_preflight(&fake, "my/node:latest").await.unwrap();
    assert!(
        err.starts_with(
            "pool w: the template's kubelet v1.32.0 (from the label poolctl.dev/kubelet-version of image \
             my/node:latest) is newer than the API server v1.30.2;"
        ),
        "{err}"
    );
    assert_eq!(skew_preflight(&fake, "my/node:v1.32.0").await, None, "the label says v1.30.1");
    let fake = fake.failing("image-labels my/node:latest");
    let err = skew_preflight(&fake, "my/node:latest").await.unwrap();
    assert_eq!(err, "cannot read the labels of image my/node:latest");
}

#[tokio::test]
async fn skipping_the_version_skew_check_or_a_pool_without_a_cluster_passes() {
    let fake = FakeWorld::default().server_version("v1.30.2");
    let (desired, plan) = node_pool_of("kindest/node:v1.32.0");
    let cluster = fake.connect(&ClusterRef { kubeconfig: None, context: None }, "w").await.unwrap();
    let clusters = BTreeMap::from([("w".to_owned(), cluster)]);
    let (progress, _) = crate::testing::progress();
    let interrupt = Interrupt::default();
    let executor = Executor::new(&desired, &fake, &clusters, &progress, &interrupt);
    assert!(executor.preflight(&plan).await.is_err(), "checked unless skipped");
    let skipped = std::collections::BTreeSet::from([PreflightCheck::VersionSkew]);
    let executor = Executor::new(&desired, &fake, &clusters, &progress, &interrupt).skipping(skipped);
    assert_eq!(executor.preflight(&plan).await, Ok(()));
    // A pool of containers only has no API server to compare with.
    let none = BTreeMap::<String, FakeCluster>::new();
    let executor = Executor::new(&desired, &fake, &none, &progress, &interrupt);
    assert_eq!(executor.preflight(&plan).await, Ok(()));
}

/// Updates in place, one batch after another: each changes the very container and the template
/// it is read with; a failed one halts the rollout before the next batch.
#[tokio::test]
async fn updates_in_place_change_the_containers_and_a_failed_one_halts() {
    let update = || Action::UpdateInPlace { template_hash: "new".into(), fields: vec!["memory".into()] };
    let mut plan = rolling_plan();
    plan.pools[0].steps = vec![step(0, "o1", update()), step(1, "o2", update())];
    let world = || {
        let fake = FakeWorld::default();
        fake.sim().world.containers.extend([container("o1", "w", "old", 1), container("o2", "w", "old", 2)]);
        fake
    };
    let fake = world();
    let (report, _) = run(&fake, &desired(0, None), &plan, &Interrupt::default()).await;
    assert!(report.complete());
    {
        let sim = fake.sim();
        let hashes: Vec<(&str, &str)> =
            sim.world.containers.iter().map(|c| (c.id.as_str(), c.template_hash.as_str())).collect();
        assert_eq!(hashes, [("id-o1", "new"), ("id-o2", "new")], "the same containers, of the new template");
        assert!(sim.world.containers[0].template.as_deref().is_some_and(|t| t.contains("img:1")));
    }

    let fake = world().failing("update o1");
    let (report, _) = run(&fake, &desired(0, None), &plan, &Interrupt::default()).await;
    assert_eq!(report.failure().map(|f| f.verb), Some("update-in-place"));
    assert!(!fake.calls().iter().any(|c| c == "update o2"), "{:?}", fake.calls());
}
