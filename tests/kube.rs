//! Tests of `KubeCluster`, poolctl's Kubernetes backend, against the fake API server over HTTP.

use std::collections::BTreeMap;
use std::time::Duration;

use poolctl::backend::kube::KubeCluster;
use poolctl::backend::{BackendError, Cluster};
use poolctl::model::InstanceRef;
use poolctl::spec::{DrainSpec, Taint};
use serde_json::Value;

use crate::support::fake_kube::{EventKind, FakeKube, FakeKubeOptions, PdbBound, PodSpecBuilder};
use poolctl::backend::LockGuard;

/// Guards against a hang only; no assertion depends on it.
const LIMIT: Duration = Duration::from_secs(60);

const POOL: &str = "workers";

fn setup() -> (FakeKube, KubeCluster) {
    let fake = FakeKube::start(FakeKubeOptions::default());
    let cluster = KubeCluster::from_config(fake.config(), POOL).expect("a client");
    (fake, cluster)
}

async fn bounded<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, f).await.expect("the call ends")
}

fn taint(key: &str, effect: &str) -> Taint {
    Taint { key: key.into(), value: Some("v".into()), effect: effect.into() }
}

#[tokio::test]
async fn nodes_are_those_of_the_pool_label_or_named() {
    let (fake, cluster) = setup();
    fake.add_node_with_labels("w-1", true, &[("poolctl.dev/pool", POOL)]);
    fake.add_node_with_labels("o-1", true, &[("poolctl.dev/pool", "other")]);
    fake.add_node("w-2", false);
    fake.add_node("stranger", true);

    let nodes = bounded(cluster.nodes(&["w-2".to_owned()])).await.unwrap();
    let mut seen: Vec<(&str, bool, Option<&str>)> =
        nodes.iter().map(|n| (n.name.as_str(), n.ready, n.pool.as_deref())).collect();
    seen.sort_unstable();
    assert_eq!(seen, [("w-1", true, Some(POOL)), ("w-2", false, None)]);
}

#[tokio::test]
async fn pods_and_pdbs_are_those_of_the_given_nodes() {
    let (fake, cluster) = setup();
    fake.add_node("a", true);
    fake.add_node("b", true);
    fake.add_pod(&PodSpecBuilder::new("default", "on-a", "a").label("app", "x").empty_dir());
    fake.add_pod(&PodSpecBuilder::new("default", "on-b", "b"));
    fake.put_pdb("default", "x", "x", PdbBound::MinAvailable(1));

    let (pods, pdbs) = bounded(cluster.pods_and_pdbs(&["a".to_owned()])).await.unwrap();
    assert_eq!(pods.len(), 1);
    assert_eq!((pods[0].name.as_str(), pods[0].owner_kind.as_deref()), ("on-a", Some("ReplicaSet")));
    assert!(pods[0].empty_dir);
    assert_eq!(pdbs.len(), 1);
    assert_eq!((pdbs[0].name.as_str(), pdbs[0].disruptions_allowed), ("x", 0));
}

#[tokio::test]
async fn await_ready_returns_once_the_node_registers_and_turns_ready() {
    let (fake, cluster) = setup();
    let waiting = cluster.await_ready("late", Duration::from_secs(30));
    let kubelet = async {
        // Register and ready the Node only once poolctl is watching: the watch must see it.
        fake.wait_until(|s| {
            s.requests().iter().any(|r| r.query.as_deref().is_some_and(|q| q.contains("watch")))
        })
        .await;
        fake.add_node("late", false);
        fake.set_node_ready("late", true);
    };
    let (ready, ()) = bounded(async { tokio::join!(waiting, kubelet) }).await;
    ready.unwrap();
    let watches = fake
        .requests()
        .iter()
        .filter(|r| r.path == "/api/v1/nodes" && r.query.as_deref().is_some_and(|q| q.contains("watch")))
        .count();
    assert!(watches >= 1, "await_ready watches rather than polls");
}

#[tokio::test]
async fn await_ready_times_out_with_a_clear_error_when_never_ready() {
    let (fake, cluster) = setup();
    fake.add_node("stuck", false);
    let err = bounded(cluster.await_ready("stuck", Duration::from_secs(1))).await.unwrap_err();
    assert!(matches!(err, BackendError::Timeout { .. }), "{err:?}");
    assert_eq!(err.to_string(), "Node stuck did not turn Ready: timed out after 1s");
}

#[tokio::test]
async fn configure_adds_labels_and_taints_and_keeps_existing_taints() {
    let (fake, cluster) = setup();
    fake.add_node("n", true);
    fake.store().update_node("n", |n| {
        n.spec.get_or_insert_with(Default::default).taints = Some(vec![k8s_openapi::api::core::v1::Taint {
            key: "theirs".into(),
            value: None,
            effect: "NoExecute".into(),
            time_added: None,
        }]);
    });
    let labels =
        BTreeMap::from([("poolctl.dev/pool".to_owned(), POOL.to_owned()), ("role".into(), "w".into())]);
    let taints = [taint("ours", "NoSchedule"), taint("theirs", "NoExecute")];
    let reference = InstanceRef { container_id: "f00d".repeat(16), docker_host: "unix:///d.sock".into() };
    bounded(cluster.configure("n", &labels, &taints, Some(&reference))).await.unwrap();

    let node = fake.node("n").unwrap();
    let a = node.metadata.annotations.clone().unwrap();
    assert_eq!(a.get("poolctl.dev/container-id"), Some(&reference.container_id), "{a:?}");
    assert_eq!(a.get("poolctl.dev/docker-host").map(String::as_str), Some("unix:///d.sock"));
    let l = node.metadata.labels.unwrap();
    assert_eq!(l.get("poolctl.dev/pool").map(String::as_str), Some(POOL));
    assert_eq!(l.get("role").map(String::as_str), Some("w"));
    let mut t: Vec<(String, String)> =
        node.spec.unwrap().taints.unwrap().into_iter().map(|t| (t.key, t.effect)).collect();
    t.sort();
    assert_eq!(t, [("ours".into(), "NoSchedule".into()), ("theirs".into(), "NoExecute".into())]);
    // And the pool now finds the Node by its label alone, with poolctl's reference.
    let nodes = bounded(cluster.nodes(&[])).await.unwrap();
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0].reference.as_ref(), Some(&reference));
}

#[tokio::test]
async fn cordon_marks_the_node_unschedulable_with_the_retiring_annotation() {
    let (fake, cluster) = setup();
    fake.add_node_with_labels("n", true, &[("poolctl.dev/pool", POOL)]);
    bounded(cluster.cordon("n")).await.unwrap();
    let node = fake.node("n").unwrap();
    assert_eq!(node.spec.unwrap().unschedulable, Some(true));
    assert!(node.metadata.annotations.unwrap().contains_key("poolctl.dev/retiring"));
    let seen = bounded(cluster.nodes(&[])).await.unwrap();
    assert!(seen[0].unschedulable && seen[0].cordoned_by_poolctl);
}

#[tokio::test]
async fn drain_evicts_what_kubectl_would_with_a_policy_v1_eviction_and_waits_for_them() {
    let (fake, cluster) = setup();
    fake.add_node("n", true);
    fake.add_node("other", true);
    let app = fake.add_pod(&PodSpecBuilder::new("default", "app", "n"));
    fake.add_pod(&PodSpecBuilder::new("kube-system", "bare", "n").owner(None));
    fake.add_daemon_set("kube-system", "proxy");
    fake.add_pod(&PodSpecBuilder::new("kube-system", "ds", "n").owned_by("DaemonSet", "proxy"));
    fake.add_pod(&PodSpecBuilder::new("kube-system", "static", "n").owner(Some("Node")).mirror());
    fake.add_pod(&PodSpecBuilder::new("default", "done", "n").owner(Some("Job")).phase("Succeeded"));
    fake.add_pod(&PodSpecBuilder::new("default", "elsewhere", "other"));

    bounded(cluster.drain(
        "n",
        Duration::from_secs(10),
        &DrainSpec::default(),
        &LockGuard::unguarded(),
        &|_, _| (),
    ))
    .await
    .unwrap();

    let mut evicted: Vec<String> =
        fake.evictions().iter().map(|e| format!("{}/{}", e.namespace, e.pod)).collect();
    evicted.sort();
    assert_eq!(evicted, ["default/app", "kube-system/bare"]);
    let record = fake.evictions().into_iter().find(|e| e.pod == "app").unwrap();
    assert_eq!(record.status, 201);
    assert_eq!(record.body["apiVersion"], "policy/v1");
    assert_eq!(record.body["kind"], "Eviction");
    assert_eq!(record.body["metadata"]["name"], "app");
    assert_eq!(
        record.body.pointer("/deleteOptions/preconditions/uid").and_then(Value::as_str),
        app.metadata.uid.as_deref(),
        "the UID precondition reaches the server"
    );
    assert!(fake.pod("default", "app").is_none() && fake.pod("kube-system", "bare").is_none());
    for kept in
        [("kube-system", "ds"), ("kube-system", "static"), ("default", "done"), ("default", "elsewhere")]
    {
        assert!(fake.pod(kept.0, kept.1).is_some(), "{kept:?} is left alone");
    }
}

#[tokio::test]
async fn drain_waits_for_a_terminating_pod_to_go() {
    let fake = FakeKube::start(FakeKubeOptions {
        pod_termination_delay: Duration::from_millis(500),
        ..FakeKubeOptions::default()
    });
    let cluster = KubeCluster::from_config(fake.config(), POOL).unwrap();
    fake.add_node("n", true);
    fake.add_pod(&PodSpecBuilder::new("default", "slow", "n"));
    bounded(cluster.drain(
        "n",
        Duration::from_secs(10),
        &DrainSpec::default(),
        &LockGuard::unguarded(),
        &|_, _| (),
    ))
    .await
    .unwrap();
    // The drain returned only once the pod was gone, not when the eviction was accepted.
    assert!(fake.pod("default", "slow").is_none());
    let events = fake.events();
    assert!(events.iter().any(|e| matches!(&e.kind, EventKind::PodDeleted { name, .. } if name == "slow")));
}

#[tokio::test]
async fn a_pdb_refusal_is_retried_until_the_drain_timeout_and_named_in_the_error() {
    let (fake, cluster) = setup();
    fake.add_node("n", true);
    fake.add_app("default", "web", 1);
    fake.put_pdb("default", "web-pdb", "web", PdbBound::MinAvailable(1));
    fake.wait_until(|s| s.pods().count() == 1).await;

    let err = bounded(cluster.drain(
        "n",
        Duration::from_secs(2),
        &DrainSpec::default(),
        &LockGuard::unguarded(),
        &|_, _| (),
    ))
    .await
    .unwrap_err();
    let BackendError::Timeout { what, after } = &err else { panic!("expected a timeout, got {err:?}") };
    assert_eq!(*after, Duration::from_secs(2));
    assert!(what.contains("The disruption budget web-pdb needs 1 healthy pods"), "{what}");
    assert!(what.contains("no PodDisruptionBudget was bypassed"), "{what}");
    let refusals = fake.evictions().iter().filter(|e| e.status == 429).count();
    assert!(refusals >= 2, "refusals are retried, saw {refusals}");
    assert!(fake.evictions().iter().all(|e| e.status == 429), "the PDB was never bypassed");
    assert_eq!(fake.pods().len(), 1);
}

#[tokio::test]
async fn a_relaxed_pdb_lets_a_waiting_drain_finish() {
    let (fake, cluster) = setup();
    fake.add_node("n", true);
    fake.add_app("default", "web", 1);
    fake.put_pdb("default", "web-pdb", "web", PdbBound::MinAvailable(1));
    fake.wait_until(|s| s.pods().count() == 1).await;
    let guard = LockGuard::unguarded();
    let no_rules = DrainSpec::default();
    let draining = cluster.drain("n", Duration::from_secs(30), &no_rules, &guard, &|_, _| ());
    let relax = async {
        fake.wait_until(|s| s.evictions().iter().any(|e| e.status == 429)).await;
        fake.put_pdb("default", "web-pdb", "web", PdbBound::MaxUnavailable(1));
    };
    let (drained, ()) = Box::pin(bounded(async { tokio::join!(draining, relax) })).await;
    drained.unwrap();
    assert_eq!(fake.evictions().last().map(|e| e.status), Some(201));
}

#[tokio::test]
async fn a_pod_under_two_pdbs_is_an_error_not_a_wait() {
    let (fake, cluster) = setup();
    fake.add_node("n", true);
    fake.add_pod(&PodSpecBuilder::new("default", "p", "n").label("app", "x"));
    fake.put_pdb("default", "one", "x", PdbBound::MaxUnavailable(1));
    fake.put_pdb("default", "two", "x", PdbBound::MaxUnavailable(1));

    let err = bounded(cluster.drain(
        "n",
        Duration::from_secs(30),
        &DrainSpec::default(),
        &LockGuard::unguarded(),
        &|_, _| (),
    ))
    .await
    .unwrap_err();
    let BackendError::Failed(message) = &err else { panic!("expected a failure, got {err:?}") };
    assert!(message.contains("pod default/p") && message.contains("more than one PodDisruptionBudget"));
    assert_eq!(fake.evictions().len(), 1, "a 500 is not retried");
    assert!(fake.pod("default", "p").is_some());
}

#[tokio::test]
async fn a_2xx_eviction_answer_with_a_failure_status_is_an_error() {
    let (fake, cluster) = setup();
    fake.add_node("n", true);
    fake.add_pod(&PodSpecBuilder::new("default", "trap", "n"));
    fake.set_eviction_trap("default", "trap", 200);

    let err = bounded(cluster.drain(
        "n",
        Duration::from_secs(30),
        &DrainSpec::default(),
        &LockGuard::unguarded(),
        &|_, _| (),
    ))
    .await
    .unwrap_err();
    let BackendError::Failed(message) = &err else { panic!("expected a failure, got {err:?}") };
    assert!(message.contains("pod default/trap: eviction failed"), "{message}");
    assert!(fake.pod("default", "trap").is_some(), "the pod was not evicted");
}

#[tokio::test(flavor = "multi_thread")]
async fn server_errors_and_an_api_outage_are_retried_within_the_window() {
    let (fake, cluster) = setup();
    fake.add_node("n", true);
    fake.fail_next(Some("PATCH"), "/api/v1/nodes/n", 2, 503);
    bounded(cluster.cordon("n")).await.unwrap();
    assert_eq!(fake.node("n").unwrap().spec.unwrap().unschedulable, Some(true));

    // Down while a call starts: it keeps retrying and succeeds once the API is back, whenever
    // that is within the retry window.
    tokio::task::block_in_place(|| fake.set_api_down(true));
    let deleting = cluster.delete_node("n");
    let back = async {
        tokio::time::sleep(Duration::from_millis(700)).await;
        tokio::task::block_in_place(|| fake.set_api_down(false));
    };
    let (deleted, ()) = Box::pin(bounded(async { tokio::join!(deleting, back) })).await;
    deleted.unwrap();
    assert!(fake.node("n").is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_api_that_stays_down_fails_the_drain_within_its_timeout() {
    let (fake, cluster) = setup();
    tokio::task::block_in_place(|| fake.set_api_down(true));
    let err = bounded(cluster.drain(
        "n",
        Duration::from_secs(1),
        &DrainSpec::default(),
        &LockGuard::unguarded(),
        &|_, _| (),
    ))
    .await
    .unwrap_err();
    assert!(matches!(err, BackendError::Unreachable { .. }), "{err:?}");
    assert!(err.to_string().contains(&fake.url().replace("http://", "")), "{err}");
}

#[tokio::test]
async fn deleting_a_node_that_is_gone_succeeds() {
    let (fake, cluster) = setup();
    fake.add_node("n", true);
    bounded(cluster.delete_node("n")).await.unwrap();
    assert!(fake.node("n").is_none());
    bounded(cluster.delete_node("n")).await.unwrap();
}
