//! The drain against the fake API server over HTTP: which pods it evicts, which budgets hold it
//! up, and that the drain preview (the world observe reads, judged by the shared rules) names
//! the same pods and budgets.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use poolctl::backend::kube::KubeCluster;
use poolctl::backend::{BackendError, Cluster};
use poolctl::model::{DrainAction, Pdb, Pod};
use poolctl::spec::DrainBehavior::{Drain, Skip};
use poolctl::spec::DrainSpec;

use crate::support::fake_kube::{FakeKube, FakeKubeOptions, PodSpecBuilder, RequestRecord};
use poolctl::backend::LockGuard;

/// Guards against a hang only; no assertion depends on it.
const LIMIT: Duration = Duration::from_secs(60);

fn setup() -> (FakeKube, KubeCluster) {
    let fake = FakeKube::start(FakeKubeOptions::default());
    let cluster = KubeCluster::from_config(fake.config(), "workers").expect("a client");
    fake.add_node("n", true);
    (fake, cluster)
}

async fn bounded<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, f).await.expect("the call ends")
}

fn expression(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
    LabelSelectorRequirement {
        key: key.into(),
        operator: operator.into(),
        values: (!values.is_empty()).then(|| values.iter().map(|v| (*v).to_owned()).collect()),
    }
}

/// A budget that allows no disruption of what `selector` selects (`None`: no selector at all).
fn strict_pdb(namespace: &str, name: &str, selector: Option<LabelSelector>) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: ObjectMeta {
            namespace: Some(namespace.into()),
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(0)),
            selector,
            ..Default::default()
        }),
        status: None,
    }
}

fn by_labels(labels: &[(&str, &str)]) -> LabelSelector {
    let labels = labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    LabelSelector { match_labels: Some(labels), match_expressions: None }
}

fn by_expressions(expressions: Vec<LabelSelectorRequirement>) -> LabelSelector {
    LabelSelector { match_labels: None, match_expressions: Some(expressions) }
}

/// What the preview makes of the node's pods: `namespace/name` of those it evicts, and for
/// each, the budgets that cover it.
async fn preview(cluster: &KubeCluster) -> BTreeMap<String, Vec<String>> {
    let (pods, pdbs) = bounded(cluster.pods_and_pdbs(&["n".to_owned()])).await.expect("observed");
    let covering = |pod: &Pod| pdbs.iter().filter(|b| b.covers(pod)).map(Pdb::id).collect();
    pods.iter()
        .filter(|p| matches!(p.drain_action(), DrainAction::Evict(_)))
        .map(|p| (format!("{}/{}", p.namespace, p.name), covering(p)))
        .collect()
}

fn evicted(fake: &FakeKube) -> Vec<String> {
    let mut names: Vec<String> = fake
        .evictions()
        .iter()
        .filter(|e| e.status == 201)
        .map(|e| format!("{}/{}", e.namespace, e.pod))
        .collect();
    names.sort();
    names.dedup();
    names
}

#[tokio::test]
async fn a_pdb_that_selects_by_expressions_holds_the_drain_up() {
    let (fake, cluster) = setup();
    fake.add_pod(&PodSpecBuilder::new("default", "web-1", "n").label("app", "web").label("track", "stable"));
    fake.add_pod(
        &PodSpecBuilder::new("default", "canary-1", "n").label("app", "web").label("track", "canary"),
    );
    let selector = by_expressions(vec![
        expression("app", "In", &["web", "api"]),
        expression("track", "NotIn", &["canary"]),
    ]);
    fake.put_pdb_object(strict_pdb("default", "web", Some(selector)));

    let shown = preview(&cluster).await;
    assert_eq!(shown["default/web-1"], ["default/web"], "the preview sees the budget");
    assert!(shown["default/canary-1"].is_empty(), "NotIn leaves the canary out");

    let err = bounded(cluster.drain(
        "n",
        Duration::from_secs(2),
        &DrainSpec::default(),
        &LockGuard::unguarded(),
        &|_, _| (),
    ))
    .await
    .unwrap_err();
    let BackendError::Timeout { what, .. } = &err else { panic!("expected a timeout, got {err:?}") };
    assert!(what.contains("pod default/web-1") && what.contains("The disruption budget web"), "{what}");
    assert!(fake.pod("default", "web-1").is_some(), "no budget is bypassed");
    assert_eq!(evicted(&fake), ["default/canary-1"]);
}

#[tokio::test]
async fn a_pod_under_two_pdbs_fails_the_drain_at_once_naming_both() {
    let (fake, cluster) = setup();
    fake.add_pod(
        &PodSpecBuilder::new("default", "queue-0", "n").label("app", "queue").label("tier", "shared"),
    );
    fake.add_pod(&PodSpecBuilder::new("default", "free", "n").label("app", "free"));
    // Both budgets would allow the eviction on their own; together they make it impossible.
    let mut queue = strict_pdb("default", "queue", Some(by_labels(&[("app", "queue")])));
    let mut shared =
        strict_pdb("default", "shared", Some(by_expressions(vec![expression("tier", "Exists", &[])])));
    for budget in [&mut queue, &mut shared] {
        budget.spec.as_mut().unwrap().max_unavailable = Some(IntOrString::Int(1));
    }
    fake.put_pdb_object(queue);
    fake.put_pdb_object(shared);

    let shown = preview(&cluster).await;
    assert_eq!(shown["default/queue-0"], ["default/queue", "default/shared"]);

    // The drain timeout is longer than the hang guard: only a drain that fails without waiting
    // for it gets an answer here.
    let err =
        bounded(cluster.drain("n", 2 * LIMIT, &DrainSpec::default(), &LockGuard::unguarded(), &|_, _| ()))
            .await
            .unwrap_err();
    let BackendError::Failed(message) = &err else { panic!("expected a failure, got {err:?}") };
    assert!(
        message.contains("pod default/queue-0: not evicted: 2 PodDisruptionBudgets cover it (default/queue, default/shared)"),
        "{message}"
    );
    assert!(message.contains("narrow or delete all but one"), "{message}");
    assert!(fake.pod("default", "queue-0").is_some());
    assert_eq!(evicted(&fake), ["default/free"], "the other pods are drained all the same");
    let refused: Vec<u16> =
        fake.evictions().iter().filter(|e| e.pod == "queue-0").map(|e| e.status).collect();
    assert_eq!(refused, [500], "a refusal for good is not retried");
}

#[tokio::test]
async fn an_orphaned_daemonset_pod_is_evicted_and_a_managed_one_is_left() {
    let (fake, cluster) = setup();
    fake.add_daemon_set("kube-system", "proxy");
    fake.add_daemon_set("kube-system", "logs");
    fake.add_pod(&PodSpecBuilder::new("kube-system", "proxy-n", "n").owned_by("DaemonSet", "proxy"));
    fake.add_pod(&PodSpecBuilder::new("kube-system", "logs-n", "n").owned_by("DaemonSet", "logs"));
    assert!(fake.delete_daemon_set("kube-system", "logs"));

    let (pods, _) = bounded(cluster.pods_and_pdbs(&["n".to_owned()])).await.unwrap();
    let orphaned: Vec<(&str, bool)> = pods.iter().map(|p| (p.name.as_str(), p.orphaned)).collect();
    assert_eq!(orphaned, [("logs-n", true), ("proxy-n", false)]);
    assert_eq!(preview(&cluster).await.into_keys().collect::<Vec<_>>(), ["kube-system/logs-n"]);

    bounded(cluster.drain(
        "n",
        Duration::from_secs(10),
        &DrainSpec::default(),
        &LockGuard::unguarded(),
        &|_, _| (),
    ))
    .await
    .unwrap();
    assert_eq!(evicted(&fake), ["kube-system/logs-n"]);
    assert!(fake.pod("kube-system", "proxy-n").is_some(), "its DaemonSet would recreate it at once");
}

#[tokio::test]
async fn an_empty_selector_covers_every_pod_of_its_namespace_and_no_selector_covers_none() {
    let (fake, cluster) = setup();
    fake.add_pod(&PodSpecBuilder::new("team", "unlabelled", "n"));
    fake.add_pod(&PodSpecBuilder::new("free", "anything", "n").label("app", "x"));
    fake.put_pdb_object(strict_pdb("team", "everything", Some(LabelSelector::default())));
    fake.put_pdb_object(strict_pdb("free", "nothing", None));

    let shown = preview(&cluster).await;
    assert_eq!(shown["team/unlabelled"], ["team/everything"]);
    assert!(shown["free/anything"].is_empty());

    let err = bounded(cluster.drain(
        "n",
        Duration::from_secs(2),
        &DrainSpec::default(),
        &LockGuard::unguarded(),
        &|_, _| (),
    ))
    .await
    .unwrap_err();
    let BackendError::Timeout { what, .. } = &err else { panic!("expected a timeout, got {err:?}") };
    assert!(what.contains("pod team/unlabelled") && what.contains("everything"), "{what}");
    assert_eq!(evicted(&fake), ["free/anything"]);
}

#[tokio::test]
async fn a_pod_labelled_skip_stays_and_the_drain_waits_until_wait_completed_pods_finish() {
    let (fake, cluster) = setup();
    fake.add_pod(&PodSpecBuilder::new("default", "web-1", "n").label("app", "web"));
    fake.add_pod(&PodSpecBuilder::new("default", "logs", "n").label("poolctl.dev/drain", "skip"));
    fake.add_pod(
        &PodSpecBuilder::new("default", "job-1", "n")
            .owned_by("Job", "job")
            .label("cluster.x-k8s.io/drain", "wait-completed"),
    );
    fake.add_pod(
        &PodSpecBuilder::new("default", "batch", "n").annotation("karpenter.sh/do-not-disrupt", "true"),
    );

    let (pods, _) = bounded(cluster.pods_and_pdbs(&["n".to_owned()])).await.expect("observed");
    let actions: BTreeMap<&str, DrainAction> =
        pods.iter().map(|p| (p.name.as_str(), p.drain_action())).collect();
    assert_eq!(actions["web-1"], DrainAction::Evict(None));
    assert_eq!(actions["logs"], DrainAction::Skip("labelled poolctl.dev/drain=skip"));
    assert_eq!(
        actions["job-1"],
        DrainAction::WaitCompleted("labelled cluster.x-k8s.io/drain=wait-completed")
    );
    assert_eq!(actions["batch"], DrainAction::WaitCompleted("annotated karpenter.sh/do-not-disrupt"));

    // While they run, the drain waits for them (and says which), and evicts neither.
    let err = bounded(cluster.drain(
        "n",
        Duration::from_secs(2),
        &DrainSpec::default(),
        &LockGuard::unguarded(),
        &|_, _| (),
    ))
    .await
    .unwrap_err();
    let BackendError::Timeout { what, .. } = &err else { panic!("expected a timeout, got {err:?}") };
    assert!(
        what.contains("pod default/job-1 (labelled cluster.x-k8s.io/drain=wait-completed): not evicted (wait-completed), and still running"),
        "{what}"
    );
    assert!(what.contains("pod default/batch (annotated karpenter.sh/do-not-disrupt)"), "{what}");
    assert_eq!(evicted(&fake), ["default/web-1"]);

    // Once they finish by themselves, the drain's watch sees it and the drain ends.
    let watches = |s: &crate::support::fake_kube::Store| {
        let watch = |r: &&RequestRecord| {
            r.path == "/api/v1/pods" && r.query.as_deref().is_some_and(|q| q.contains("watch=true"))
        };
        s.requests().iter().filter(watch).count()
    };
    let before = watches(&fake.store());
    let guard = LockGuard::unguarded();
    let no_rules = DrainSpec::default();
    let draining = cluster.drain("n", LIMIT, &no_rules, &guard, &|_, _| ());
    let finish = async {
        fake.wait_until(|s| watches(s) > before).await;
        assert!(fake.complete_pod("default", "job-1", "Succeeded"));
        assert!(fake.complete_pod("default", "batch", "Failed"));
    };
    let (drained, ()) = Box::pin(bounded(async { tokio::join!(draining, finish) })).await;
    drained.unwrap();
    assert_eq!(evicted(&fake), ["default/web-1"], "nothing else was evicted");
    for left in ["logs", "job-1", "batch"] {
        assert!(fake.pod("default", left).is_some(), "{left} was left in place");
    }
}

#[tokio::test]
async fn drain_rules_evict_group_by_group_each_gone_before_the_next_starts() {
    const TERMINATION: Duration = Duration::from_millis(300);
    let fake =
        FakeKube::start(FakeKubeOptions { pod_termination_delay: TERMINATION, ..FakeKubeOptions::default() });
    let cluster = KubeCluster::from_config(fake.config(), "workers").expect("a client");
    fake.add_node("n", true);
    fake.add_pod(&PodSpecBuilder::new("default", "web-1", "n").label("app", "web"));
    fake.add_pod(&PodSpecBuilder::new("ingress", "ingress-1", "n").label("app", "ingress"));
    fake.add_pod(&PodSpecBuilder::new("default", "logs-1", "n").label("app", "logs"));
    fake.add_pod(&PodSpecBuilder::new("default", "cache-1", "n").label("app", "cache"));
    let rule = |app: &str, namespaces: &[&str], behavior, order| poolctl::spec::DrainRule {
        pods: Some(poolctl::spec::PodSelector {
            match_labels: BTreeMap::from([("app".to_owned(), app.to_owned())]),
            ..Default::default()
        }),
        namespaces: namespaces.iter().map(|n| (*n).to_owned()).collect(),
        behavior,
        order,
    };
    let rules = DrainSpec {
        rules: vec![
            rule("ingress", &["ingress"], Drain, 1),
            rule("logs", &[], Drain, 2),
            // The first matching rule wins: the second never applies to the cache.
            rule("cache", &["default"], Skip, 0),
            rule("cache", &[], Drain, 3),
        ],
        ..DrainSpec::default()
    };

    // While a budget holds the first group, no later group starts.
    fake.put_pdb_object(strict_pdb("default", "web", Some(by_labels(&[("app", "web")]))));
    let err =
        bounded(cluster.drain("n", Duration::from_secs(2), &rules, &LockGuard::unguarded(), &|_, _| ()))
            .await
            .unwrap_err();
    assert!(matches!(err, BackendError::Timeout { .. }), "{err:?}");
    assert!(evicted(&fake).is_empty(), "{:?}", evicted(&fake));

    assert!(fake.delete_pdb("default", "web"));
    bounded(cluster.drain("n", LIMIT, &rules, &LockGuard::unguarded(), &|_, _| ())).await.unwrap();
    let done: Vec<_> = fake.evictions().into_iter().filter(|e| e.status == 201).collect();
    let order: Vec<&str> = done.iter().map(|e| e.pod.as_str()).collect();
    assert_eq!(order, ["web-1", "ingress-1", "logs-1"], "group by group; the cache is skipped");
    for pair in done.windows(2) {
        // Each eviction waited for the group before it to be gone, which takes the pod's
        // termination.
        assert!(pair[1].at.duration_since(pair[0].at) >= TERMINATION, "{} came too soon", pair[1].pod);
    }
    assert!(fake.pod("default", "cache-1").is_some());
}

#[tokio::test]
async fn attached_volumes_are_the_nodes_own_and_its_volume_attachments_and_a_403_says_what_to_do() {
    let (fake, cluster) = setup();
    fake.add_node("other", true);
    assert!(bounded(cluster.attached_volumes("n")).await.unwrap().is_empty());
    fake.store().update_node("n", |node| {
        let status = node.status.get_or_insert_with(Default::default);
        status.volumes_attached = Some(vec![k8s_openapi::api::core::v1::AttachedVolume {
            name: "kubernetes.io/csi/fake^vol-1".into(),
            device_path: String::new(),
        }]);
    });
    fake.store().volume_attachments =
        vec![("csi-n".to_owned(), "n".to_owned()), ("csi-other".to_owned(), "other".to_owned())];
    let held = bounded(cluster.attached_volumes("n")).await.unwrap();
    assert_eq!(held, ["kubernetes.io/csi/fake^vol-1", "VolumeAttachment csi-n"]);

    fake.store().volume_attachments_forbidden = true;
    let err = bounded(cluster.attached_volumes("n")).await.unwrap_err().to_string();
    assert!(err.contains("refuses to list VolumeAttachments"), "{err}");
    assert!(err.contains("poolctl.dev/exclude-wait-for-node-volume-detach"), "{err}");
    let list = fake.requests_matching("GET", "/apis/storage.k8s.io/v1/volumeattachments");
    assert_eq!(list.len(), 3, "a refusal is not asked again: {list:?}");
}

#[tokio::test]
async fn no_pod_is_evicted_while_the_pool_s_lock_is_not_known_to_be_held() {
    let (fake, cluster) = setup();
    fake.add_pod(&PodSpecBuilder::new("default", "web-1", "n").owned_by("ReplicaSet", "web"));
    // A run's guard without the pool's lock (lost, or not renewed within its deadline).
    let err = bounded(cluster.drain(
        "n",
        Duration::from_secs(2),
        &DrainSpec::default(),
        &LockGuard::guarding(),
        &|_, _| (),
    ))
    .await
    .unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("pod default/web-1: not evicted: the lock of pool workers is not known to be held"),
        "{message}"
    );
    assert!(fake.evictions().is_empty(), "{:?}", fake.evictions());
    assert!(fake.pod("default", "web-1").is_some());
}

/// `spec.drain.podGracePeriod` goes into each Eviction as `gracePeriodSeconds`, as
/// `kubectl drain --grace-period` sends it; without it, no grace period is sent (the pod's own).
#[tokio::test]
async fn a_pod_grace_period_is_in_every_eviction_and_absent_without_one() {
    let (fake, cluster) = setup();
    fake.add_pod(&PodSpecBuilder::new("default", "web-1", "n"));
    let drain = DrainSpec { pod_grace_period: Some("5s".parse().unwrap()), ..DrainSpec::default() };
    bounded(cluster.drain("n", LIMIT, &drain, &LockGuard::unguarded(), &|_, _| ())).await.unwrap();
    let grace =
        |e: &crate::support::fake_kube::EvictionRecord| e.body["deleteOptions"]["gracePeriodSeconds"].clone();
    let sent: Vec<serde_json::Value> = fake.evictions().iter().map(grace).collect();
    assert_eq!(sent, [serde_json::json!(5)]);

    fake.add_pod(&PodSpecBuilder::new("default", "web-2", "n"));
    bounded(cluster.drain("n", LIMIT, &DrainSpec::default(), &LockGuard::unguarded(), &|_, _| ()))
        .await
        .unwrap();
    let last = fake.evictions().last().map(grace);
    assert_eq!(last, Some(serde_json::Value::Null), "the pod's own grace period");
}

/// Past its timeout, `Force` deletes the pod its budget holds (a DELETE with the pool's grace
/// period and the pod's UID, not an eviction) and waits until it is gone; `Proceed` leaves it.
/// Neither goes on for a drain the pool's lock stopped: no pod is deleted then.
#[tokio::test]
async fn past_its_timeout_a_drain_deletes_or_leaves_the_pods_left_but_never_without_the_lock() {
    use poolctl::backend::DrainEnd;
    use poolctl::spec::DrainTimeoutAction::{Force, Proceed};
    let (fake, cluster) = setup();
    fake.put_pdb_object(strict_pdb("default", "web", Some(by_labels(&[("app", "web")]))));
    fake.add_pod(&PodSpecBuilder::new("default", "web-1", "n").label("app", "web"));
    let deletes = || fake.requests().into_iter().filter(|r| r.method == "DELETE").collect::<Vec<_>>();

    // Without the lock, neither action acts: the drain fails at once, as without one.
    for action in [Force, Proceed] {
        let drain = DrainSpec { timeout_action: action, ..DrainSpec::default() };
        let err =
            bounded(cluster.drain("n", Duration::from_secs(2), &drain, &LockGuard::guarding(), &|_, _| ()))
                .await
                .unwrap_err();
        assert!(err.to_string().contains("lock of pool workers is not known to be held"), "{err}");
    }
    assert!(deletes().is_empty(), "{:?}", deletes());

    let proceed = DrainSpec { timeout_action: Proceed, ..DrainSpec::default() };
    let end =
        bounded(cluster.drain("n", Duration::from_secs(2), &proceed, &LockGuard::unguarded(), &|_, _| ()))
            .await;
    assert_eq!(end.unwrap(), DrainEnd::Abandoned(vec!["default/web-1".to_owned()]));
    assert!(fake.pod("default", "web-1").is_some() && deletes().is_empty());

    let uid = fake.pod("default", "web-1").and_then(|p| p.metadata.uid).expect("a UID");
    let force = DrainSpec {
        timeout_action: Force,
        pod_grace_period: Some("5s".parse().unwrap()),
        ..DrainSpec::default()
    };
    let end =
        bounded(cluster.drain("n", Duration::from_secs(2), &force, &LockGuard::unguarded(), &|_, _| ()))
            .await;
    assert_eq!(end.unwrap(), DrainEnd::Forced(vec!["default/web-1".to_owned()]));
    assert!(fake.pod("default", "web-1").is_none());
    let sent: Vec<_> = deletes().into_iter().map(|r| (r.path, r.body.unwrap_or_default())).collect();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].0, "/api/v1/namespaces/default/pods/web-1");
    assert_eq!(sent[0].1["gracePeriodSeconds"], 5);
    assert_eq!(sent[0].1["preconditions"]["uid"], uid.as_str());
    assert!(fake.evictions().iter().all(|e| e.status == 429), "{:?}", fake.evictions());
}
