//! The drain of a Node whose kubelet no longer answers (its Ready condition Unknown): every pod
//! is evicted all the same, and no PodDisruptionBudget is bypassed, but a pod that nobody is left
//! to confirm ended is not waited for once its deletion is a few seconds overdue, and the drain
//! says so. On a Node whose kubelet answers, such a pod is waited for as ever.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use poolctl::backend::kube::KubeCluster;
use poolctl::backend::{BackendError, Cluster};

use crate::support::fake_kube::{FakeKube, FakeKubeOptions, PdbBound, PodSpecBuilder, Store};
use poolctl::backend::LockGuard;
use poolctl::spec::DrainSpec;

/// Guards against a hang only; no assertion depends on it.
const LIMIT: Duration = Duration::from_secs(60);

/// A Node `n`, Ready for now, whose simulated kubelet never confirms a pod's end by itself.
fn setup() -> (FakeKube, KubeCluster) {
    let fake = FakeKube::start(FakeKubeOptions {
        pod_termination_delay: Duration::from_secs(3600),
        ..FakeKubeOptions::default()
    });
    let cluster = KubeCluster::from_config(fake.config(), "workers").expect("a client");
    fake.add_node("n", true);
    (fake, cluster)
}

/// `default/stuck`, with a grace period of a second, so that its deletion is soon overdue.
fn stuck() -> PodSpecBuilder {
    PodSpecBuilder::new("default", "stuck", "n").grace_period(1)
}

/// The same pod, its deletion accepted a minute ago and never confirmed.
fn stuck_for_a_minute() -> PodSpecBuilder {
    stuck().terminating_past_due(Duration::from_secs(60))
}

async fn bounded<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, f).await.expect("the call ends")
}

/// What poolctl logs on this thread (a `#[tokio::test]` runs the drain on it) while the guard
/// lives.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    fn capture() -> (Self, tracing::subscriber::DefaultGuard) {
        let logs = Self::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(logs.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .finish();
        (logs.clone(), tracing::subscriber::set_default(subscriber))
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// The lines that say a pod was left terminating.
    fn left(&self) -> Vec<String> {
        self.text().lines().filter(|l| l.contains("left terminating")).map(str::to_owned).collect()
    }
}

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Self;
    fn make_writer(&'a self) -> Self {
        self.clone()
    }
}

fn eviction_answers(fake: &FakeKube, pod: &str) -> Vec<u16> {
    fake.evictions().iter().filter(|e| e.pod == pod).map(|e| e.status).collect()
}

/// Evicted, and the drain watches the Node's pods: it waits on its watch now.
fn evicted_and_watched(s: &Store) -> bool {
    let evicted = s.evictions().iter().any(|e| e.pod == "stuck" && e.status == 201);
    let watched = s
        .requests()
        .iter()
        .any(|r| r.path == "/api/v1/pods" && r.query.as_deref().is_some_and(|q| q.contains("watch=true")));
    evicted && watched
}

#[tokio::test]
async fn on_an_unreachable_node_an_evicted_pod_is_left_terminating_once_overdue() {
    let (fake, cluster) = setup();
    fake.add_pod(&stuck());
    fake.set_node_unreachable("n");
    let (logs, _guard) = Logs::capture();

    // The drain timeout is longer than the hang guard: only a drain that stops waiting for the
    // pod gets an answer here.
    bounded(cluster.drain("n", 2 * LIMIT, &DrainSpec::default(), &LockGuard::unguarded(), &|_, _| ()))
        .await
        .expect("drained");

    assert_eq!(eviction_answers(&fake, "stuck"), [201], "evicted all the same");
    let pod = fake.pod("default", "stuck").expect("still there: nobody confirmed its end");
    assert!(pod.metadata.deletion_timestamp.is_some());
    assert_eq!(pod.metadata.deletion_grace_period_seconds, Some(1));
    let left = logs.left();
    assert_eq!(left.len(), 1, "{}", logs.text());
    assert!(
        left[0].contains("pod default/stuck left terminating on unreachable Node n (Ready=Unknown since")
    );
    assert!(left[0].contains("no kubelet can confirm that it ended"), "{}", left[0]);
}

#[tokio::test]
async fn on_a_node_whose_kubelet_answers_an_overdue_pod_is_waited_for_until_it_is_gone() {
    let (fake, cluster) = setup();
    fake.add_pod(&stuck_for_a_minute());
    let (logs, _guard) = Logs::capture();

    let guard = LockGuard::unguarded();
    let no_rules = DrainSpec::default();
    let draining = cluster.drain("n", LIMIT, &no_rules, &guard, &|_, _| ());
    let end_it = async {
        fake.wait_until(evicted_and_watched).await;
        assert!(fake.finish_termination("default", "stuck"), "still terminating when its kubelet ends it");
    };
    let (drained, ()) = Box::pin(bounded(async { tokio::join!(draining, end_it) })).await;
    drained.unwrap();

    assert!(fake.pod("default", "stuck").is_none());
    assert!(logs.left().is_empty(), "{}", logs.text());
}

#[tokio::test]
async fn a_not_ready_node_still_has_a_kubelet_and_its_pods_are_waited_for_until_the_timeout() {
    let (fake, cluster) = setup();
    // NotReady is the kubelet speaking: it can still end the pod and say so.
    fake.set_node_ready("n", false);
    fake.add_pod(&stuck_for_a_minute());
    let (logs, _guard) = Logs::capture();

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
    assert!(what.contains("pod default/stuck: evicted but still present"), "{what}");
    assert_eq!(eviction_answers(&fake, "stuck"), [201]);
    assert!(logs.left().is_empty(), "{}", logs.text());
}

#[tokio::test]
async fn a_node_that_becomes_unreachable_during_the_drain_is_read_again_and_its_overdue_pods_left() {
    let (fake, cluster) = setup();
    fake.add_pod(&stuck_for_a_minute());
    let (logs, _guard) = Logs::capture();

    let guard = LockGuard::unguarded();
    let no_rules = DrainSpec::default();
    let draining = cluster.drain("n", 2 * LIMIT, &no_rules, &guard, &|_, _| ());
    let silence = async {
        fake.wait_until(evicted_and_watched).await;
        fake.set_node_unreachable("n");
    };
    let (drained, ()) = Box::pin(bounded(async { tokio::join!(draining, silence) })).await;
    drained.expect("drained");

    assert!(fake.pod("default", "stuck").is_some_and(|p| p.metadata.deletion_timestamp.is_some()));
    let reads = fake.requests_matching("GET", "/api/v1/nodes/n").len();
    assert!(reads >= 2, "the Node was read when the drain began and again while it waited: {reads}");
    let left = logs.left();
    assert_eq!(left.len(), 1, "{}", logs.text());
    assert!(left[0].contains("pod default/stuck left terminating on unreachable Node n"), "{}", left[0]);
}

#[tokio::test]
async fn an_unreachable_node_bypasses_no_pod_disruption_budget() {
    let (fake, cluster) = setup();
    fake.add_pod(&stuck().label("app", "web"));
    fake.put_pdb("default", "web", "web", PdbBound::MaxUnavailable(0));
    fake.set_node_unreachable("n");
    let (logs, _guard) = Logs::capture();

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
    assert!(what.contains("no PodDisruptionBudget was bypassed"), "{what}");
    assert!(
        what.contains("pod default/stuck not evicted") && what.contains("The disruption budget web"),
        "{what}"
    );
    let answers = eviction_answers(&fake, "stuck");
    assert!(answers.len() >= 2 && answers.iter().all(|s| *s == 429), "refusals are retried: {answers:?}");
    let pod = fake.pod("default", "stuck").expect("not evicted");
    assert!(pod.metadata.deletion_timestamp.is_none());
    assert!(logs.left().is_empty(), "{}", logs.text());
}
