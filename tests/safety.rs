//! The one rule, end to end: no container of a node pool stops while its Node may still hold
//! pods that were not drained, whatever poolctl saw when it planned.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Node;

use crate::support::cli::Stream;
use crate::support::fake_kube::{
    EventKind, FakeKube, FakeKubeOptions, KubeletOptions, PdbBound, ReadyPolicy, write_kubeconfig_contexts,
};
use crate::support::rig::{LIMIT, Rig};
use crate::support::scenario::Scenario;

fn is_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Pods of `fake` bound to a Node whose name starts with `prefix`.
fn pods_on(fake: &FakeKube, prefix: &str) -> usize {
    fake.pods()
        .iter()
        .filter(|p| {
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| n.starts_with(prefix))
        })
        .count()
}

#[tokio::test]
async fn a_switched_current_context_is_refused_and_switching_back_finishes_with_full_drains() {
    let Some(s) = Scenario::with_docker().await else { return };
    let (key, value) = s.docker().case_label();
    // Cluster a runs this test's kubelet; cluster b is another cluster the user also has.
    let a = FakeKube::start(FakeKubeOptions {
        kubelet: Some(KubeletOptions::new(format!("{key}={value}"))),
        ..FakeKubeOptions::default()
    });
    let b = FakeKube::start(FakeKubeOptions::default());
    let kubeconfig = s.path("kubeconfig");
    write_kubeconfig_contexts(&kubeconfig, &[("kind-a", &a), ("kind-b", &b)], "kind-a").unwrap();

    // `node:` names no context: the current one.
    let v1 = s.pool().replicas(2).env("VERSION", "1").node(&kubeconfig).drain_timeout("5s");
    s.write_pool(&v1);
    s.run("apply", &["--yes"]).expect_code(0);
    let prefix = format!("{}-", s.pool_name());
    a.add_app("default", "web", 2);
    tokio::time::timeout(
        LIMIT,
        a.wait_until(|st| {
            st.pods()
                .filter(|p| {
                    p.spec
                        .as_ref()
                        .and_then(|s| s.node_name.as_deref())
                        .is_some_and(|n| n.starts_with(&prefix))
                })
                .count()
                == 2
        }),
    )
    .await
    .expect("the app runs on the pool's Nodes");
    let before = s.running().await;
    assert_eq!(before.len(), 2);

    // `kubectl config use-context kind-b`, then a change of the pool.
    write_kubeconfig_contexts(&kubeconfig, &[("kind-a", &a), ("kind-b", &b)], "kind-b").unwrap();
    let v2 = v1.clone().env("VERSION", "2");
    s.write_pool(&v2);
    let refused = s.run("apply", &["--yes"]).expect_code(1);
    assert!(
        refused.stderr.contains("its instances are Nodes of the cluster context kind-a at"),
        "{}",
        refused.stderr
    );
    assert!(refused.stderr.contains("now resolves to context kind-b at"), "{}", refused.stderr);
    assert!(refused.stderr.contains("Set `node.context: kind-a`"), "{}", refused.stderr);
    let plan = s.run("plan", &[]).expect_code(1);
    assert!(plan.stderr.contains("nothing of this pool was changed"), "{}", plan.stderr);
    // Nothing moved: the same containers run, the Nodes of cluster a keep their pods, and
    // cluster b was not touched.
    let ids = |cs: &[poolctl::model::Container]| cs.iter().map(|c| c.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&s.running().await), ids(&before));
    assert_eq!(pods_on(&a, &prefix), 2);
    assert!(a.events().iter().all(|e| !matches!(
        e.kind,
        crate::support::fake_kube::EventKind::NodeCordoned { .. }
            | crate::support::fake_kube::EventKind::PodEvicted { .. }
    )));
    assert!(b.requests().iter().all(|r| r.method == "GET"), "cluster b was only read");

    // Switching back lets the rollout finish, each old Node drained before its container stops.
    write_kubeconfig_contexts(&kubeconfig, &[("kind-a", &a), ("kind-b", &b)], "kind-a").unwrap();
    s.run("apply", &["--yes"]).expect_code(0);
    let after = s.running().await;
    assert_eq!(after.len(), 2);
    assert!(after.iter().all(|c| !ids(&before).contains(&c.id)));
    let evictions = a.evictions().iter().filter(|e| e.status == 201).count();
    assert_eq!(evictions, 2, "both pods were evicted, none killed with their Node");
}

/// The taints of a Node of the fake, as `key=value:effect`.
fn taints(fake: &FakeKube, node: &str) -> Vec<String> {
    let n = fake.node(node).expect("the Node exists");
    let taints = n.spec.and_then(|s| s.taints).unwrap_or_default();
    taints.iter().map(|t| format!("{}={}:{}", t.key, t.value.clone().unwrap_or_default(), t.effect)).collect()
}

fn label(fake: &FakeKube, node: &str, key: &str) -> Option<String> {
    fake.node(node)?.metadata.labels?.get(key).cloned()
}

/// Apply the pool written, and SIGKILL apply while it waits for the new Node, which registered
/// but does not turn Ready: the Node's name, and the prefix of the pool's instance names.
async fn kill_apply_in_the_ready_wait(rig: &Rig) -> (String, String) {
    let prefix = format!("{}-", rig.pool());
    rig.fake.set_ready_policy(&prefix, ReadyPolicy::Never);
    let mut apply = rig.spawn_apply_to_kill();
    apply.wait_for(Stream::Stdout, "await-ready");
    let registered = |st: &crate::support::fake_kube::Store| {
        st.nodes().any(|n| n.metadata.name.as_deref().is_some_and(|n| n.starts_with(&prefix)))
    };
    tokio::time::timeout(LIMIT, rig.fake.wait_until(registered))
        .await
        .expect("the kubelet registers the Node");
    apply.kill();
    let name = rig.fake.node_names().into_iter().find(|n| n.starts_with(&prefix)).unwrap();
    (name, prefix)
}

#[tokio::test]
async fn a_node_left_unlabelled_by_a_killed_apply_is_configured_and_a_changed_taint_converges() {
    let Some(rig) = Rig::new().await else { return };
    let v1 =
        rig.spec().replicas(1).node_label("team", "infra").node_taint("dedicated", "batch", "NoSchedule");
    rig.write(&v1);
    let (name, prefix) = kill_apply_in_the_ready_wait(&rig).await;
    assert_eq!(label(&rig.fake, &name, "poolctl.dev/pool"), None, "killed before it labelled the Node");

    // The Node turns Ready later; the next apply finishes the instance, labelling and tainting
    // its Node, replacing nothing.
    rig.fake.set_ready_policy(&prefix, ReadyPolicy::After(Duration::ZERO));
    tokio::time::timeout(LIMIT, rig.fake.wait_until(|st| st.node(&name).is_some_and(is_ready)))
        .await
        .expect("Ready");
    let before = rig.containers().await;
    let run = rig.apply_after_kill().expect_code(0);
    // It never finished coming up: the plan finishes it (its Ready wait configures the Node and
    // records it up) rather than count it as serving or replace it.
    assert!(run.stdout.contains(&format!("await-ready {name}")), "{}", run.stdout);
    assert!(run.stdout.contains("coming up for "), "{}", run.stdout);
    assert_eq!(label(&rig.fake, &name, "poolctl.dev/pool").as_deref(), Some(rig.pool()));
    assert_eq!(label(&rig.fake, &name, "team").as_deref(), Some("infra"));
    assert_eq!(taints(&rig.fake, &name), ["dedicated=batch:NoSchedule"]);
    assert_eq!(rig.containers().await, before);
    rig.poolctl("plan", &["--detailed-exitcode"]).expect_code(0);

    // A changed taint in the spec reaches the existing Node, again without a replacement.
    rig.write(&v1.clone().node_taint("dedicated", "web", "NoSchedule"));
    rig.apply().expect_code(0);
    assert_eq!(taints(&rig.fake, &name), ["dedicated=web:NoSchedule"]);
    assert_eq!(rig.containers().await, before);
}

/// A Node that never got the pool label, whose container is gone too, is named only by the
/// record of joining instances the killed apply left in the pool's Lease: the plan finds it
/// there (without listing the cluster's other Nodes) and deletes it; the next apply, done,
/// leaves no record and no Lease.
#[tokio::test]
async fn an_unlabelled_node_whose_container_was_removed_is_deleted_as_an_orphan() {
    let Some(rig) = Rig::new().await else { return };
    rig.write(&rig.spec().replicas(1));
    let (name, prefix) = kill_apply_in_the_ready_wait(&rig).await;
    let lease = format!("poolctl-{}", rig.pool());
    let recorded = rig.fake.lease("kube-system", &lease).expect("the killed apply's Lease");
    let annotations = recorded.metadata.annotations.unwrap_or_default();
    assert!(annotations.contains_key(&format!("joining.poolctl.dev/{name}")), "{annotations:?}");
    // Someone removes the container by hand: the Node, never labelled, is an orphan.
    rig.s.docker().remove(&name).await;
    rig.fake.set_ready_policy(&prefix, ReadyPolicy::After(Duration::ZERO));
    let plan = rig.poolctl("plan", &[]).expect_code(0);
    assert!(plan.stdout.contains(&format!("delete-node {name}")), "{}", plan.stdout);
    rig.apply_after_kill().expect_code(0);
    assert!(rig.fake.node(&name).is_none(), "the orphan Node is deleted");
    assert!(rig.fake.lease("kube-system", &lease).is_none(), "nothing left to record: the Lease is deleted");
}

#[tokio::test]
async fn nodes_hidden_while_planning_are_cordoned_and_drained_before_their_containers_stop() {
    let Some(rig) = Rig::new().await else { return };
    let v1 = rig.spec().replicas(2);
    let old = rig.start(&v1).await;
    rig.fake.add_app("default", "web", 2);
    let on_old = |st: &crate::support::fake_kube::Store| {
        st.pods()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some_and(|n| old.contains(n)))
            .count()
            == 2
    };
    tokio::time::timeout(LIMIT, rig.fake.wait_until(on_old)).await.expect("the app runs on the old Nodes");

    // The API server shows no Node while poolctl plans (after a restart, say): the plan has
    // no cordon and no drain for the old instances. The Nodes are back before they are retired.
    rig.write(&v1.clone().env("VERSION", "2"));
    rig.fake.hide_nodes(true);
    let since = SystemTime::now();
    let mut apply = rig.s.spawn("apply", &["--yes"]);
    let plan_text = apply.wait_for(Stream::Stdout, "[1/");
    rig.fake.hide_nodes(false);
    assert!(
        !apply.output(Stream::Stdout).lines().any(|l| l.contains(" cordon ") || l.contains(" drain ")),
        "planned without the Nodes: {plan_text}"
    );
    let status = apply.wait();
    assert!(status.success(), "{}", apply.output(Stream::Stdout));

    let events = rig.fake.events();
    let docker = rig.s.docker().events(since);
    for node in &old {
        let stopped = docker
            .iter()
            .filter(|e| &e.name == node && matches!(e.action.as_str(), "kill" | "die" | "stop"))
            .map(|e| e.at)
            .min()
            .expect("the old container stopped");
        let cordoned = events
            .iter()
            .find(|e| matches!(&e.kind, EventKind::NodeCordoned { node: n } if n == node))
            .map(|e| e.wall)
            .expect("the Node was cordoned");
        let evictions: Vec<SystemTime> = events
            .iter()
            .filter(|e| matches!(&e.kind, EventKind::PodEvicted { node: Some(n), .. } if n == node))
            .map(|e| e.wall)
            .collect();
        assert!(cordoned < stopped, "{node}: cordoned before its container stopped");
        assert!(!evictions.is_empty() && evictions.iter().all(|t| *t < stopped), "{node}: drained first");
    }
}

#[tokio::test]
async fn long_steps_say_what_they_wait_for_the_node_and_the_budget() {
    let Some(rig) = Rig::new().await else { return };
    let v1 = rig.spec().replicas(1).drain_timeout("8s");
    rig.start(&v1).await;
    rig.fake.add_app("default", "web", 1);
    rig.fake.put_pdb("default", "web-pdb", "web", PdbBound::MinAvailable(1));
    let placed = |st: &crate::support::fake_kube::Store| {
        st.pods().any(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
    };
    tokio::time::timeout(LIMIT, rig.fake.wait_until(placed)).await.expect("the app runs");

    // The new Node is slow to turn Ready, and the budget holds the old one's drain: in a pipe,
    // apply says so on plain lines while it waits.
    let v2 = v1.clone().env("VERSION", "2");
    rig.write(&v2);
    rig.fake.set_ready_policy(&format!("{}-", rig.pool()), ReadyPolicy::After(Duration::from_secs(7)));
    let run = rig.apply().expect_code(1);
    assert!(run.stdout.contains("waiting for the Node to turn Ready"), "{}", run.stdout);
    let drain =
        run.stdout.lines().find(|l| l.contains("waiting for 1 pod left to evict")).unwrap_or_default();
    assert!(drain.contains("disruption budget web-pdb"), "{}", run.stdout);
}
