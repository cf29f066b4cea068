//! Tests of the fake Kubernetes API server fixture, through the real kube client.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::{Eviction, PodDisruptionBudget};
use kube::api::{Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::params::WatchParams;
use kube::core::{ObjectMeta, Status, WatchEvent};
use poolctl::backend::Containers;
use serde_json::json;

use crate::support::docker::docker;
use crate::support::fake_kube::{
    EventKind, FakeKube, FakeKubeOptions, KubeletOptions, PdbBound, PodSpecBuilder, ReadyPolicy,
};

/// Guards against a hang only; no assertion depends on it.
const LIMIT: Duration = Duration::from_secs(30);

fn fake() -> FakeKube {
    FakeKube::start(FakeKubeOptions::default())
}

fn eviction(name: &str) -> Eviction {
    Eviction { metadata: ObjectMeta { name: Some(name.into()), ..Default::default() }, delete_options: None }
}

async fn evict(pods: &Api<Pod>, name: &str) -> Result<Status, kube::Error> {
    pods.create_subresource("eviction", name, &PostParams::default(), &eviction(name)).await
}

fn api_error(r: Result<Status, kube::Error>) -> Box<Status> {
    match r {
        Err(kube::Error::Api(s)) => s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

#[tokio::test]
async fn nodes_are_listed_by_label_and_name_patched_and_deleted() {
    let fk = fake();
    fk.add_node_with_labels("a", true, &[("poolctl.dev/pool", "workers")]);
    fk.add_node_with_labels("b", true, &[("poolctl.dev/pool", "workers")]);
    fk.add_node("c", false);
    let nodes: Api<Node> = Api::all(fk.client());

    let pool = nodes.list(&ListParams::default().labels("poolctl.dev/pool=workers")).await.unwrap();
    let names: Vec<_> = pool.items.iter().filter_map(|n| n.metadata.name.clone()).collect();
    assert_eq!(names, ["a", "b"]);
    let by_name = nodes.list(&ListParams::default().fields("metadata.name=c")).await.unwrap();
    assert_eq!(by_name.items.len(), 1);
    assert!(!ready(&by_name.items[0]));

    let cordoned = nodes
        .patch("a", &PatchParams::default(), &Patch::Merge(json!({"spec": {"unschedulable": true}})))
        .await
        .unwrap();
    assert_eq!(cordoned.spec.unwrap().unschedulable, Some(true));
    let taint = json!({"key": "k", "value": "v", "effect": "NoSchedule"});
    let labelled = nodes
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Strategic(json!({
                "metadata": {"labels": {"role": "old"}, "annotations": {"poolctl.dev/retiring": "r1"}},
                "spec": {"taints": [taint]},
            })),
        )
        .await
        .unwrap();
    let labels = labelled.metadata.labels.unwrap();
    assert_eq!(labels["role"], "old");
    assert_eq!(labels["poolctl.dev/pool"], "workers", "a merge keeps the other labels");
    assert_eq!(labelled.spec.as_ref().unwrap().unschedulable, Some(true));
    assert_eq!(labelled.spec.unwrap().taints.unwrap().len(), 1);
    let dropped = nodes
        .patch("a", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"role": null}}})))
        .await
        .unwrap();
    assert!(!dropped.metadata.labels.unwrap().contains_key("role"));

    nodes.delete("b", &DeleteParams::default()).await.unwrap();
    match nodes.get("b").await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 404),
        other => panic!("expected 404, got {other:?}"),
    }
    let kinds: Vec<_> = fk.events().into_iter().map(|e| e.kind).collect();
    assert!(kinds.contains(&EventKind::NodeCordoned { node: "a".into() }));
    assert!(kinds.contains(&EventKind::NodeDeleted { node: "b".into() }));
}

#[tokio::test]
async fn a_watch_from_a_list_version_sees_a_node_turn_ready() {
    let fk = fake();
    fk.add_node("old", true);
    fk.add_node("new", false);
    let nodes: Api<Node> = Api::all(fk.client());
    let list = nodes.list(&ListParams::default().fields("metadata.name=new")).await.unwrap();
    let rv = list.metadata.resource_version.unwrap();
    let wp = WatchParams::default().fields("metadata.name=new").timeout(60);
    let mut stream = nodes.watch(&wp, &rv).await.unwrap().boxed();

    fk.set_node_ready("old", false); // filtered out by the field selector
    fk.set_node_ready("new", true);
    let event = tokio::time::timeout(LIMIT, stream.try_next()).await.unwrap().unwrap().unwrap();
    match event {
        WatchEvent::Modified(n) => {
            assert_eq!(n.metadata.name.as_deref(), Some("new"));
            assert!(ready(&n));
            assert!(n.metadata.resource_version.unwrap().parse::<u64>().unwrap() > rv.parse().unwrap());
        }
        other => panic!("expected MODIFIED, got {other:?}"),
    }

    // Watching from "0" replays the current state first, as the real server does.
    let mut from_zero = nodes.watch(&WatchParams::default().timeout(60), "0").await.unwrap().boxed();
    let first = tokio::time::timeout(LIMIT, from_zero.try_next()).await.unwrap().unwrap().unwrap();
    assert!(matches!(first, WatchEvent::Added(_)));
}

#[tokio::test]
async fn leases_are_patched_against_their_version_and_watched_by_name() {
    let fk = fake();
    let leases: Api<Lease> = Api::namespaced(fk.client(), "kube-system");
    let lease = |name: &str| Lease {
        metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
        spec: Some(LeaseSpec::default()),
    };
    let params = PostParams::default();
    let created = leases.create(&params, &lease("poolctl-a")).await.unwrap();
    leases.create(&params, &lease("poolctl-b")).await.unwrap();
    let list = leases.list(&ListParams::default().fields("metadata.name=poolctl-a")).await.unwrap();
    assert_eq!(list.items.len(), 1, "{list:?}");
    let rv = list.metadata.resource_version.unwrap();
    let wp = WatchParams::default().fields("metadata.name=poolctl-a").timeout(60);
    let mut stream = leases.watch(&wp, &rv).await.unwrap().boxed();

    // Another Lease's change is not this watch's; a patch naming the current version applies.
    let annotate = |version: Option<&str>, value: &str| json!({"metadata": {"resourceVersion": version, "annotations": {"k": value}}});
    let pp = PatchParams::default();
    leases.patch("poolctl-b", &pp, &Patch::Merge(&annotate(None, "b"))).await.unwrap();
    let current = created.metadata.resource_version.as_deref();
    let patched = leases.patch("poolctl-a", &pp, &Patch::Merge(&annotate(current, "1"))).await.unwrap();
    // One naming a version that is no longer current is refused, as on a real server.
    let stale = leases.patch("poolctl-a", &pp, &Patch::Merge(&annotate(current, "2"))).await;
    assert!(matches!(stale, Err(kube::Error::Api(ref s)) if s.code == 409), "{stale:?}");
    let event = tokio::time::timeout(LIMIT, stream.try_next()).await.unwrap().unwrap().unwrap();
    match event {
        WatchEvent::Modified(l) => {
            assert_eq!(l.metadata.name.as_deref(), Some("poolctl-a"));
            assert_eq!(l.metadata.annotations.unwrap()["k"], "1");
            assert_eq!(l.metadata.resource_version, patched.metadata.resource_version);
        }
        other => panic!("expected MODIFIED, got {other:?}"),
    }
    leases.delete("poolctl-a", &DeleteParams::default()).await.unwrap();
    let event = tokio::time::timeout(LIMIT, stream.try_next()).await.unwrap().unwrap().unwrap();
    assert!(matches!(event, WatchEvent::Deleted(_)), "{event:?}");
}

#[tokio::test]
async fn pods_are_listed_by_node() {
    let fk = fake();
    fk.add_node("n1", true);
    fk.add_node("n2", true);
    fk.add_pod(&PodSpecBuilder::new("default", "p1", "n1").label("app", "x"));
    fk.add_pod(&PodSpecBuilder::new("kube-system", "ds", "n1").owner(Some("DaemonSet")));
    fk.add_pod(&PodSpecBuilder::new("default", "p2", "n2"));
    let all: Api<Pod> = Api::all(fk.client());
    let on_n1 = all.list(&ListParams::default().fields("spec.nodeName=n1")).await.unwrap();
    let mut names: Vec<_> = on_n1.items.iter().filter_map(|p| p.metadata.name.clone()).collect();
    names.sort();
    assert_eq!(names, ["ds", "p1"]);
    let default: Api<Pod> = Api::default_namespaced(fk.client());
    let labelled = default.list(&ListParams::default().labels("app=x")).await.unwrap();
    assert_eq!(labelled.items.len(), 1);
    default.delete("p2", &DeleteParams::default()).await.unwrap();
    assert!(fk.pod("default", "p2").is_none());
}

#[tokio::test]
async fn eviction_without_a_pdb_deletes_the_pod_and_a_missing_pod_is_404() {
    let fk = fake();
    fk.add_node("n1", true);
    fk.add_pod(&PodSpecBuilder::new("default", "lonely", "n1").owner(None));
    let pods: Api<Pod> = Api::default_namespaced(fk.client());

    let st = evict(&pods, "lonely").await.unwrap();
    assert_eq!(st.code, 201);
    assert!(fk.pod("default", "lonely").is_none());
    let received = fk.evictions();
    assert_eq!(received[0].body["apiVersion"], "policy/v1");
    assert_eq!(received[0].body["kind"], "Eviction");
    assert_eq!(received[0].status, 201);

    assert_eq!(api_error(evict(&pods, "lonely").await).code, 404);
}

#[tokio::test]
async fn an_eviction_body_without_kind_is_refused_as_kube_evict_sends_it() {
    let fk = fake();
    fk.add_node("n1", true);
    fk.add_pod(&PodSpecBuilder::new("default", "p", "n1"));
    let pods: Api<Pod> = Api::default_namespaced(fk.client());

    let err = match pods.evict("p", &EvictParams::default()).await {
        Err(kube::Error::Api(s)) => s,
        other => panic!("kube's evict body should be refused, got {other:?}"),
    };
    assert_eq!(err.code, 400);
    assert!(fk.pod("default", "p").is_some(), "a refused eviction leaves the pod");
    assert!(fk.evictions()[0].body.get("delete_options").is_some());
}

#[tokio::test]
async fn a_pdb_at_its_minimum_answers_429_until_relaxed() {
    let fk = fake();
    fk.add_node("n1", true);
    fk.add_node("n2", true);
    fk.add_app("default", "web", 2);
    fk.put_pdb("default", "web-pdb", "web", PdbBound::MinAvailable(2));
    let pods: Api<Pod> = Api::default_namespaced(fk.client());
    let victim = fk.pods_with_labels("default", &[("app", "web")])[0].metadata.name.clone().unwrap();

    let pdbs: Api<PodDisruptionBudget> = Api::all(fk.client());
    let listed = pdbs.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items[0].status.as_ref().unwrap().disruptions_allowed, Some(0));

    let refusal = api_error(evict(&pods, &victim).await);
    assert_eq!(refusal.code, 429);
    let cause = &refusal.details.as_ref().unwrap().causes[0];
    assert_eq!(cause.reason, "DisruptionBudget");
    assert_eq!(cause.message, "The disruption budget web-pdb needs 2 healthy pods and has 2 currently");
    assert!(fk.pod("default", &victim).is_some());

    fk.put_pdb("default", "web-pdb", "web", PdbBound::MinAvailable(1));
    assert_eq!(evict(&pods, &victim).await.unwrap().code, 201);
}

#[tokio::test]
async fn a_pod_under_two_pdbs_answers_500_and_a_trap_answers_2xx_with_failure() {
    let fk = fake();
    fk.add_node("n1", true);
    fk.add_app("default", "db", 3);
    fk.put_pdb("default", "one", "db", PdbBound::MaxUnavailable(1));
    fk.put_pdb("default", "two", "db", PdbBound::MaxUnavailable(1));
    let pods: Api<Pod> = Api::default_namespaced(fk.client());
    let names: Vec<String> = fk
        .pods_with_labels("default", &[("app", "db")])
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();

    let err = api_error(evict(&pods, &names[0]).await);
    assert_eq!(err.code, 500);
    assert!(err.message.contains("more than one PodDisruptionBudget"));

    fk.delete_pdb("default", "two");
    fk.set_eviction_trap("default", &names[1], 201);
    let st = evict(&pods, &names[1]).await.unwrap();
    assert_eq!(st.status, Some(kube::core::response::StatusSummary::Failure));
    assert!(fk.pod("default", &names[1]).is_some(), "a trapped eviction evicts nothing");
}

#[tokio::test]
async fn an_evicted_pod_is_recreated_on_a_schedulable_node_and_the_budget_refills() {
    let fk = fake();
    fk.add_node("old", true);
    fk.add_node("new", true);
    fk.add_app("default", "api", 2);
    fk.put_pdb("default", "api-pdb", "api", PdbBound::MaxUnavailable(1));
    let client = fk.client();
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client);
    nodes
        .patch("old", &PatchParams::default(), &Patch::Merge(json!({"spec": {"unschedulable": true}})))
        .await
        .unwrap();
    let on_old = |fk: &FakeKube| -> Vec<Pod> {
        fk.pods_with_labels("default", &[("app", "api")])
            .into_iter()
            .filter(|p| p.spec.as_ref().unwrap().node_name.as_deref() == Some("old"))
            .collect()
    };
    let victim = on_old(&fk).remove(0);
    let victim_name = victim.metadata.name.clone().unwrap();

    assert_eq!(evict(&pods, &victim_name).await.unwrap().code, 201);
    assert_eq!(fk.budget("default", "api-pdb").unwrap().allowed, 0, "one replica is missing");

    tokio::time::timeout(
        LIMIT,
        fk.wait_until(|s| {
            let b = s.budget(s.pdbs().next().unwrap());
            b.current == 2 && b.allowed == 1
        }),
    )
    .await
    .unwrap();
    let all = fk.pods_with_labels("default", &[("app", "api")]);
    assert_eq!(all.len(), 2);
    assert!(all.iter().all(|p| p.spec.as_ref().unwrap().node_name.as_deref() == Some("new")));
    assert!(all.iter().all(|p| p.metadata.uid != victim.metadata.uid));
    let kinds: Vec<_> = fk.events().into_iter().map(|e| e.kind).collect();
    let evicted =
        kinds.iter().position(|k| matches!(k, EventKind::PodEvicted { name, .. } if *name == victim_name));
    let rescheduled =
        kinds.iter().rposition(|k| matches!(k, EventKind::PodScheduled { node, .. } if node == "new"));
    assert!(evicted.unwrap() < rescheduled.unwrap());
    let events = fk.events();
    let after_start = events.iter().skip_while(|e| e.app_healthy.get("default/api") != Some(&2));
    assert!(
        after_start.clone().all(|e| e.app_healthy["default/api"] >= 1),
        "the app always kept a healthy replica"
    );
}

#[tokio::test]
async fn the_request_log_records_every_request_and_faults_are_injected() {
    let fk = fake();
    fk.add_node("n1", true);
    let nodes: Api<Node> = Api::all(fk.client());
    fk.fail_next(Some("GET"), "/api/v1/nodes", 1, 503);

    let err = nodes.get("n1").await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(s) if s.code == 503), "no retry hides the 503");
    nodes.get("n1").await.unwrap();
    nodes
        .patch("n1", &PatchParams::default(), &Patch::Merge(json!({"spec": {"unschedulable": true}})))
        .await
        .unwrap();

    let log = fk.requests();
    let seen: Vec<_> = log.iter().map(|r| (r.method.as_str(), r.uri(), r.status)).collect();
    assert_eq!(
        seen,
        [
            ("GET", "/api/v1/nodes/n1".to_owned(), 503),
            ("GET", "/api/v1/nodes/n1".to_owned(), 200),
            ("PATCH", "/api/v1/nodes/n1?".to_owned(), 200),
        ]
    );
    assert_eq!(log[2].body.as_ref().unwrap()["spec"]["unschedulable"], true);
    assert_eq!(log[2].content_type.as_deref(), Some("application/merge-patch+json"));
    assert!(log[0].at <= log[1].at && log[1].at <= log[2].at);
}

#[tokio::test]
async fn a_written_kubeconfig_reaches_the_server() {
    let fk = fake();
    fk.add_node("n1", true);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    fk.write_kubeconfig(&path).unwrap();
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).unwrap();
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap();
    let nodes: Api<Node> = Api::all(kube::Client::try_from(config).unwrap());
    assert_eq!(nodes.list(&ListParams::default()).await.unwrap().items.len(), 1);
}

#[tokio::test]
async fn the_kubelet_registers_readies_and_reregisters_nodes_for_running_containers() {
    let Some(d) = docker().await else { return };
    let (key, value) = d.case_label();
    let mut kubelet = KubeletOptions::new(format!("{key}={value}"));
    kubelet.ready_policy = ReadyPolicy::After(Duration::from_millis(200));
    let fk = FakeKube::start(FakeKubeOptions { kubelet: Some(kubelet), ..Default::default() });
    let (name, lazy) = (d.name("kubelet"), d.name("kubelet-lazy"));
    fk.set_ready_policy(&lazy, ReadyPolicy::Never);
    d.backend.create(&d.container("kubelet")).await.unwrap();
    d.backend.create(&d.container("kubelet-lazy")).await.unwrap();
    let nodes: Api<Node> = Api::all(fk.client());

    tokio::time::timeout(
        LIMIT,
        fk.wait_until(|s| s.node(&name).is_some_and(ready_ref) && s.node(&lazy).is_some()),
    )
    .await
    .unwrap();
    let first_uid = nodes.get(&name).await.unwrap().metadata.uid;

    // Deleting the Node of a running container: the kubelet registers it again.
    nodes.delete(&name, &DeleteParams::default()).await.unwrap();
    tokio::time::timeout(
        LIMIT,
        fk.wait_until(|s| s.node(&name).is_some_and(|n| n.metadata.uid != first_uid && ready_ref(n))),
    )
    .await
    .unwrap();

    // A stopped container's Node turns NotReady; once removed, its deleted Node stays deleted.
    d.kill(&name).await;
    tokio::time::timeout(LIMIT, fk.wait_until(|s| s.node(&name).is_some_and(|n| !ready_ref(n))))
        .await
        .unwrap();
    d.remove(&name).await;
    nodes.delete(&name, &DeleteParams::default()).await.unwrap();
    let rounds = fk.store().kubelet_rounds();
    tokio::time::timeout(LIMIT, fk.wait_until(|s| s.kubelet_rounds() >= rounds + 3)).await.unwrap();
    assert!(fk.node(&name).is_none());
    assert!(!ready(&nodes.get(&lazy).await.unwrap()), "a never-ready node stays NotReady");
    let kinds: Vec<_> = fk.events().into_iter().map(|e| e.kind).collect();
    let created = kinds.iter().filter(|k| **k == EventKind::NodeCreated { node: name.clone() }).count();
    assert_eq!(created, 2, "registered once, and once again after the first delete");
}

fn ready_ref(n: &Node) -> bool {
    ready(n)
}

#[tokio::test]
async fn with_a_termination_delay_an_evicted_pod_lingers_terminating_then_goes() {
    let fk = FakeKube::start(FakeKubeOptions {
        pod_termination_delay: Duration::from_millis(200),
        ..Default::default()
    });
    fk.add_node("n1", true);
    fk.add_node("n2", true);
    fk.add_app("default", "web", 2);
    let pods: Api<Pod> = Api::default_namespaced(fk.client());
    let victim = fk.pods_with_labels("default", &[("app", "web")])[0].clone();
    let name = victim.metadata.name.clone().unwrap();

    assert_eq!(evict(&pods, &name).await.unwrap().code, 201);
    let terminating = pods.get(&name).await.unwrap();
    assert!(terminating.metadata.deletion_timestamp.is_some());
    assert_eq!(fk.pods_with_labels("default", &[("app", "web")]).len(), 3, "replaced at once");
    tokio::time::timeout(LIMIT, fk.wait_until(|s| s.pod("default", &name).is_none())).await.unwrap();
}

/// A DELETE is no eviction: no budget refuses it. Its UID precondition is checked, and on a pod
/// terminating already a shorter grace period moves its end earlier, as kube-apiserver does.
#[tokio::test]
async fn a_pod_delete_ignores_budgets_checks_its_uid_and_a_shorter_grace_period_ends_it_sooner() {
    let fk = FakeKube::start(FakeKubeOptions {
        pod_termination_delay: Duration::from_secs(60),
        ..Default::default()
    });
    fk.add_node("n1", true);
    fk.add_pod(&PodSpecBuilder::new("default", "held", "n1").label("app", "held").grace_period(30));
    fk.put_pdb("default", "held", "held", PdbBound::MinAvailable(1));
    let pods: Api<Pod> = Api::default_namespaced(fk.client());
    assert_eq!(api_error(evict(&pods, "held").await).code, 429);

    let stale = DeleteParams {
        preconditions: Some(kube::api::Preconditions { uid: Some("stale".into()), resource_version: None }),
        ..DeleteParams::default()
    };
    let refused = pods.delete("held", &stale).await.map(|_| ()).unwrap_err();
    assert!(matches!(&refused, kube::Error::Api(s) if s.code == 409), "{refused:?}");

    let uid = fk.pod("default", "held").and_then(|p| p.metadata.uid).expect("a UID");
    let matching = kube::api::Preconditions { uid: Some(uid), resource_version: None };
    let params = DeleteParams { preconditions: Some(matching), ..DeleteParams::default() };
    pods.delete("held", &params).await.expect("deleted whatever its budget");
    let terminating = fk.pod("default", "held").expect("terminating");
    let first = terminating.metadata.deletion_timestamp.clone().expect("a deletionTimestamp").0;
    assert_eq!(terminating.metadata.deletion_grace_period_seconds, Some(30));

    let shorter = DeleteParams { grace_period_seconds: Some(5), ..DeleteParams::default() };
    pods.delete("held", &shorter).await.expect("deleted again");
    let sooner = fk.pod("default", "held").expect("still terminating");
    let due = sooner.metadata.deletion_timestamp.clone().expect("a deletionTimestamp").0;
    assert_eq!(first.duration_since(due), k8s_openapi::jiff::SignedDuration::from_secs(25));
    assert_eq!(sooner.metadata.deletion_grace_period_seconds, Some(5));
    // A longer one changes nothing.
    pods.delete("held", &DeleteParams { grace_period_seconds: Some(20), ..DeleteParams::default() })
        .await
        .unwrap();
    let same = fk.pod("default", "held").and_then(|p| p.metadata.deletion_timestamp).expect("terminating").0;
    assert_eq!(same, due);
}

#[tokio::test]
async fn a_watch_with_initial_events_ends_them_with_a_bookmark() {
    let fk = fake();
    fk.add_node("n1", true);
    let nodes: Api<Node> = Api::all(fk.client());
    let wp = WatchParams::streaming_lists().timeout(60);
    let mut stream = nodes.watch(&wp, "").await.unwrap().boxed();
    let added = tokio::time::timeout(LIMIT, stream.try_next()).await.unwrap().unwrap().unwrap();
    assert!(matches!(added, WatchEvent::Added(n) if n.metadata.name.as_deref() == Some("n1")));
    let end = tokio::time::timeout(LIMIT, stream.try_next()).await.unwrap().unwrap().unwrap();
    match end {
        WatchEvent::Bookmark(b) => {
            assert_eq!(b.metadata.annotations["k8s.io/initial-events-end"], "true");
        }
        other => panic!("expected a BOOKMARK, got {other:?}"),
    }
}

#[tokio::test]
async fn an_api_taken_down_refuses_connections_and_comes_back_on_the_same_port() {
    let fk = fake();
    fk.add_node("n1", true);
    let nodes: Api<Node> = Api::all(fk.client());
    nodes.get("n1").await.unwrap();

    fk.set_api_down(true);
    let refused = tokio::net::TcpStream::connect(("127.0.0.1", fk.port())).await.unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
    let err = nodes.get("n1").await.unwrap_err();
    assert!(!matches!(err, kube::Error::Api(_)), "no HTTP answer while down: {err:?}");

    fk.set_api_down(false);
    let back = nodes.get("n1").await.unwrap();
    assert_eq!(back.metadata.name.as_deref(), Some("n1"));
    assert!(fk.requests().iter().all(|r| r.status == 200), "nothing reached the server while down");
}

#[tokio::test]
async fn a_label_selector_watch_sees_nodes_join_and_leave_the_selection() {
    let fk = fake();
    fk.add_node("n1", true);
    let nodes: Api<Node> = Api::all(fk.client());
    let rv = nodes.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let wp = WatchParams::default().labels("poolctl.dev/pool=workers").timeout(60);
    let mut stream = nodes.watch(&wp, &rv).await.unwrap().boxed();
    let label = |v: Option<&str>| Patch::Merge(json!({"metadata": {"labels": {"poolctl.dev/pool": v}}}));

    nodes.patch("n1", &PatchParams::default(), &label(Some("workers"))).await.unwrap();
    nodes.patch("n1", &PatchParams::default(), &label(None)).await.unwrap();
    let joined = tokio::time::timeout(LIMIT, stream.try_next()).await.unwrap().unwrap().unwrap();
    assert!(matches!(joined, WatchEvent::Added(_)), "got {joined:?}");
    let left = tokio::time::timeout(LIMIT, stream.try_next()).await.unwrap().unwrap().unwrap();
    assert!(matches!(left, WatchEvent::Deleted(_)), "got {left:?}");
}
