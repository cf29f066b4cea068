//! Bounded, honest API calls: poolctl's Kubernetes backend and binary against a fake API server
//! that misbehaves over real TLS. A certificate problem fails at once, with one line naming the
//! server and the cause, and is not retried; a server that accepts and never answers fails the
//! step within its deadline, naming the server; a window of 500s shorter than the step's
//! deadline is ridden out; a 403 is not retried.

use std::time::Duration;

use poolctl::backend::kube::KubeCluster;
use poolctl::backend::{BackendError, Cluster};

use crate::support::cli;
use crate::support::docker::docker;
use crate::support::fake_kube::{
    Access, ClientCert, FakeKube, FakeKubeOptions, PodSpecBuilder, ServerCert, Silence, Trust,
};
use poolctl::backend::LockGuard;
use poolctl::spec::DrainSpec;

/// Guards against a hang only; no assertion depends on it.
const LIMIT: Duration = Duration::from_secs(60);

const POOL: &str = "workers";

async fn bounded<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, f).await.expect("the call ends")
}

fn setup() -> (FakeKube, KubeCluster) {
    let fake = FakeKube::start(FakeKubeOptions::default());
    let cluster = KubeCluster::from_config(fake.config(), POOL).expect("a client");
    (fake, cluster)
}

/// Runs `poolctl plan` on a one-replica pool whose Nodes live in `fake`, reached through a
/// kubeconfig written with `access`.
fn plan(fake: &FakeKube, access: Access) -> cli::Run {
    let dir = tempfile::tempdir().expect("a temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    fake.write_kubeconfig_with(&kubeconfig, access).expect("write the kubeconfig");
    let pool = dir.path().join("pool.yaml");
    let yaml = format!(
        "apiVersion: poolctl.dev/v1alpha1
kind: Pool
metadata:
  name: tls-{port}
spec:
  replicas: 1
  template:
    image: poolctl-test-busybox:latest
  node:
    kubeconfig: {kubeconfig}
",
        port = fake.port(),
        kubeconfig = kubeconfig.display(),
    );
    std::fs::write(&pool, yaml).expect("write the pool file");
    let source = pool.display().to_string();
    cli::Run::of(cli::poolctl(&dir.path().join("cache")).args(["plan", "--source", &source]))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kubeconfig_with_the_clusters_ca_and_client_certificate_reaches_it_over_tls() {
    if docker().await.is_none() {
        return;
    }
    let fake = FakeKube::start(FakeKubeOptions::default());
    let run = tokio::task::block_in_place(|| plan(&fake, Access::default())).expect_code(0);
    assert!(run.stdout.contains("1 to create"), "{}", run.stdout);
    assert!(fake.requests().iter().any(|r| r.path == "/api/v1/nodes" && r.status == 200));
    assert_eq!(fake.handshake_failures(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_certificate_problem_fails_the_plan_at_once_with_one_line_naming_the_cause() {
    if docker().await.is_none() {
        return;
    }
    let other_ca = Access { trust: Trust::OtherCa, ..Access::default() };
    let stranger = Access { client: ClientCert::UnknownCa, ..Access::default() };
    let cases = [
        (
            ServerCert::Valid,
            other_ca,
            "the server's certificate is not signed by the kubeconfig's certificate authority",
            "UnknownIssuer",
        ),
        (
            ServerCert::Expired,
            Access::default(),
            "the server's certificate has expired",
            "certificate expired",
        ),
        (
            ServerCert::WrongName,
            Access::default(),
            "the server's certificate is not valid for the server address in the kubeconfig",
            "certificate not valid for name \"127.0.0.1\"",
        ),
        (
            ServerCert::Valid,
            stranger,
            "the server refused the client certificate (client-certificate-data)",
            "received fatal alert",
        ),
    ];
    for (cert, access, words, rustls_says) in cases {
        let fake = FakeKube::start(FakeKubeOptions::default());
        fake.set_server_cert(cert);
        let run = tokio::task::block_in_place(|| plan(&fake, access)).expect_code(1);
        let case = format!("{cert:?} {access:?}");
        // One line: no retry warnings before it (a retry logs one), no repeated cause.
        let lines: Vec<&str> = run.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{case}: {}", run.stderr);
        let line = lines[0];
        assert!(line.starts_with("error: "), "{case}: {line}");
        assert!(
            line.contains(&format!("cannot connect to the Kubernetes API server at {}", fake.url())),
            "{case}: {line}"
        );
        assert!(line.contains(words), "{case}: {line}");
        assert!(line.contains(rustls_says), "{case}: {line}");
        assert!(!line.contains("client error (Connect)"), "{case}: {line}");
        // Not retried: one connection, its handshake failed, no request got through.
        assert_eq!(fake.connections(), 1, "{case}");
        assert_eq!(bounded(fake.handshake_failures_once(1)).await.len(), 1, "{case}");
        assert!(fake.requests().is_empty(), "{case}: {:?}", fake.requests());
        assert!(run.stdout.is_empty(), "{case}: {}", run.stdout);
    }
}

#[tokio::test]
async fn a_certificate_problem_is_a_rejection_not_a_transient_failure() {
    let fake = FakeKube::start(FakeKubeOptions::default());
    fake.set_server_cert(ServerCert::Expired);
    let cluster = KubeCluster::from_config(fake.config(), POOL).expect("a client");
    let err = bounded(cluster.cordon("n")).await.unwrap_err();
    let BackendError::Rejected { at, reason, .. } = &err else { panic!("expected a rejection, got {err:?}") };
    assert_eq!(at, &format!("{}/", fake.url()));
    assert!(reason.starts_with("TLS: the server's certificate has expired"), "{reason}");
    assert_eq!(fake.connections(), 1);
}

#[tokio::test]
async fn a_server_that_accepts_and_never_answers_fails_the_step_within_its_deadline_naming_the_server() {
    let (fake, cluster) = setup();
    fake.add_node("n", true);
    fake.add_pod(&PodSpecBuilder::new("default", "p", "n"));

    // TLS done, the request read, no answer.
    fake.set_silence(Silence::AfterRequest);
    let err = bounded(cluster.drain(
        "n",
        Duration::from_secs(1),
        &DrainSpec::default(),
        &LockGuard::unguarded(),
        &|_, _| (),
    ))
    .await
    .unwrap_err();
    let BackendError::Unreachable { at, reason, .. } = &err else {
        panic!("expected no answer, got {err:?}")
    };
    assert_eq!(at, &format!("{}/", fake.url()));
    assert_eq!(reason, "list pods: no answer within 1s");
    assert_eq!(
        err.to_string(),
        format!("cannot reach the Kubernetes API server at {}/: list pods: no answer within 1s", fake.url())
    );
    assert!(
        fake.requests().iter().any(|r| r.path == "/api/v1/pods" && r.status == 0),
        "the request was read"
    );
    assert!(fake.pod("default", "p").is_some());

    // Accepted, but not even the TLS handshake is answered.
    let (fake, cluster) = setup();
    fake.add_node("n", false);
    fake.set_silence(Silence::AfterAccept);
    let err = bounded(cluster.await_ready("n", Duration::from_secs(1))).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("cannot reach the Kubernetes API server at {}/: list node: no answer within 1s", fake.url())
    );
    assert!(fake.connections() >= 1);
    assert!(fake.requests().is_empty());
}

#[tokio::test]
async fn a_window_of_500s_shorter_than_the_steps_deadline_is_ridden_out() {
    let (fake, cluster) = setup();
    fake.add_node("n", true);
    fake.fail_for(500, Duration::from_millis(800));
    bounded(cluster.cordon("n")).await.unwrap();
    assert_eq!(fake.node("n").unwrap().spec.unwrap().unschedulable, Some(true));
    let patches: Vec<u16> =
        fake.requests_matching("PATCH", "/api/v1/nodes/n").iter().map(|r| r.status).collect();
    assert!(patches.len() >= 2 && patches[..patches.len() - 1].iter().all(|s| *s == 500), "{patches:?}");
    assert_eq!(patches.last(), Some(&200));

    // The drain too, evictions included: a 500 that is not the two-budgets refusal is the
    // server's trouble, not an answer.
    fake.add_pod(&PodSpecBuilder::new("default", "p", "n"));
    fake.fail_next(Some("POST"), "/api/v1/namespaces/default/pods/p/eviction", 2, 500);
    bounded(cluster.drain(
        "n",
        Duration::from_secs(20),
        &DrainSpec::default(),
        &LockGuard::unguarded(),
        &|_, _| (),
    ))
    .await
    .unwrap();
    assert!(fake.pod("default", "p").is_none());
    let evictions: Vec<u16> = fake
        .requests_matching("POST", "/api/v1/namespaces/default/pods/p/eviction")
        .iter()
        .map(|r| r.status)
        .collect();
    assert_eq!(evictions, [500, 500, 201]);
}

#[tokio::test]
async fn a_403_or_a_401_is_not_retried() {
    let (fake, cluster) = setup();
    fake.add_node("n", true);
    // One refusal queued: a retry would succeed, so success would mean it was retried.
    fake.fail_next(Some("PATCH"), "/api/v1/nodes/n", 1, 403);
    let err = bounded(cluster.cordon("n")).await.unwrap_err();
    assert!(matches!(err, BackendError::Failed(_)), "{err:?}");
    assert!(err.to_string().starts_with("cordon node: injected fault (403 "), "{err}");
    assert_eq!(fake.requests_matching("PATCH", "/api/v1/nodes/n").len(), 1);

    fake.fail_next(Some("GET"), "/api/v1/nodes", 1, 401);
    let err = bounded(cluster.nodes(&[])).await.unwrap_err();
    let BackendError::Rejected { reason, .. } = &err else { panic!("expected a rejection, got {err:?}") };
    assert!(reason.starts_with("the server refused the kubeconfig's credentials"), "{reason}");
    assert_eq!(fake.requests_matching("GET", "/api/v1/nodes").len(), 1);
}
