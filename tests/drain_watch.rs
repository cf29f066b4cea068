//! How a drain learns that the pods it evicted are gone: from a watch of the Node's pods,
//! started from the drain's own list, not by asking after each pod in turn; and when that watch
//! is cut off, by looking again.

use std::time::Duration;

use poolctl::backend::Cluster;
use poolctl::backend::kube::KubeCluster;

use crate::support::fake_kube::{FakeKube, FakeKubeOptions, PodSpecBuilder, RequestRecord};
use poolctl::backend::LockGuard;
use poolctl::spec::DrainSpec;

/// Guards against a hang only; no assertion depends on it.
const LIMIT: Duration = Duration::from_secs(60);

/// A Node `n` with one pod, `default/slow`, whose kubelet never confirms its end on its own:
/// the test ends it with [`FakeKube::finish_termination`].
fn setup() -> (FakeKube, KubeCluster) {
    let fake = FakeKube::start(FakeKubeOptions {
        pod_termination_delay: Duration::from_secs(3600),
        ..FakeKubeOptions::default()
    });
    let cluster = KubeCluster::from_config(fake.config(), "workers").expect("a client");
    fake.add_node("n", true);
    fake.add_pod(&PodSpecBuilder::new("default", "slow", "n"));
    (fake, cluster)
}

fn is_watch(r: &RequestRecord) -> bool {
    r.query.as_deref().is_some_and(|q| q.contains("watch=true"))
}

/// The requests for the pods of Node `n` (lists and watches).
fn pod_requests(fake: &FakeKube) -> Vec<RequestRecord> {
    let on_n = |r: &RequestRecord| r.query.as_deref().is_some_and(|q| q.contains("spec.nodeName%3Dn"));
    fake.requests_matching("GET", "/api/v1/pods").into_iter().filter(on_n).collect()
}

/// Evicted and being watched: the drain waits on its watch now.
async fn evicted_and_watched(fake: &FakeKube) {
    let watched = |s: &crate::support::fake_kube::Store| {
        let terminating = s.pod("default", "slow").is_some_and(|p| p.metadata.deletion_timestamp.is_some());
        terminating && s.requests().iter().any(|r| r.path == "/api/v1/pods" && is_watch(r))
    };
    fake.wait_until(watched).await;
}

#[tokio::test]
async fn a_drain_ends_when_its_watch_reports_the_pod_gone_without_asking_after_the_pod() {
    let (fake, cluster) = setup();
    let guard = LockGuard::unguarded();
    let no_rules = DrainSpec::default();
    let draining = cluster.drain("n", LIMIT, &no_rules, &guard, &|_, _| ());
    let end_it = async {
        evicted_and_watched(&fake).await;
        assert!(fake.finish_termination("default", "slow"));
    };
    let (drained, ()) = tokio::time::timeout(LIMIT, async { tokio::join!(draining, end_it) })
        .await
        .expect("the drain ends once the pod is gone");
    drained.unwrap();

    assert!(fake.pod("default", "slow").is_none());
    assert!(
        fake.requests_matching("GET", "/api/v1/namespaces/default/pods/slow").is_empty(),
        "the drain never asked after the pod itself"
    );
    // One list before the eviction, then the watch from it: nothing else could have told the
    // drain that the pod went.
    let (watches, lists): (Vec<_>, Vec<_>) = pod_requests(&fake).into_iter().partition(is_watch);
    assert_eq!(lists.len(), 1, "{lists:?}");
    assert_eq!(watches.len(), 1, "{watches:?}");
    let resumed_from = watches[0].query.as_deref().unwrap_or_default();
    assert!(resumed_from.contains("resourceVersion="), "the watch resumes from the list: {resumed_from}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_watch_cut_off_mid_drain_is_followed_by_a_new_look_and_the_drain_still_ends() {
    let (fake, cluster) = setup();
    let guard = LockGuard::unguarded();
    let no_rules = DrainSpec::default();
    let draining = cluster.drain("n", LIMIT, &no_rules, &guard, &|_, _| ());
    let outage = async {
        evicted_and_watched(&fake).await;
        // Closes the open watch; nothing answers until the server is back.
        tokio::task::block_in_place(|| {
            fake.set_api_down(true);
            fake.set_api_down(false);
        });
        let back = fake.requests().len();
        // The pod goes after the outage: only a request made since can tell the drain.
        assert!(fake.finish_termination("default", "slow"));
        back
    };
    let (drained, back) = tokio::time::timeout(LIMIT, async { tokio::join!(draining, outage) })
        .await
        .expect("the drain ends once the pod is gone");
    drained.unwrap();

    let after: Vec<RequestRecord> = fake.requests().split_off(back);
    assert!(
        after.iter().any(|r| r.path == "/api/v1/pods"),
        "the drain looked at the Node's pods again: {:?}",
        after.iter().map(|r| &r.path).collect::<Vec<_>>()
    );
    assert!(fake.requests_matching("GET", "/api/v1/namespaces/default/pods/slow").is_empty());
}

#[tokio::test]
async fn credentials_that_may_not_watch_pods_make_the_drain_list_them_again_instead() {
    let (fake, cluster) = setup();
    fake.refuse_watches(true);
    let guard = LockGuard::unguarded();
    let no_rules = DrainSpec::default();
    let draining = cluster.drain("n", LIMIT, &no_rules, &guard, &|_, _| ());
    let end_it = async {
        let refused = |s: &crate::support::fake_kube::Store| {
            let terminating =
                s.pod("default", "slow").is_some_and(|p| p.metadata.deletion_timestamp.is_some());
            let refused =
                s.requests().iter().any(|r| r.path == "/api/v1/pods" && is_watch(r) && r.status == 403);
            terminating && refused
        };
        fake.wait_until(refused).await;
        let asked = pod_requests(&fake).len();
        assert!(fake.finish_termination("default", "slow"));
        asked
    };
    let (drained, asked) = tokio::time::timeout(LIMIT, async { tokio::join!(draining, end_it) })
        .await
        .expect("the drain ends once the pod is gone");
    drained.unwrap();

    // The pod went after the refusal: a list made since told the drain, not a GET of the pod.
    let (watches, lists): (Vec<_>, Vec<_>) = pod_requests(&fake).into_iter().partition(is_watch);
    assert_eq!(watches.len(), 1, "a refused watch is not asked for again: {watches:?}");
    assert!(lists.len() + watches.len() > asked, "listed again after the pod went");
    assert!(fake.requests_matching("GET", "/api/v1/namespaces/default/pods/slow").is_empty());
}
