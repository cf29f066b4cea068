//! In-cluster credentials, for real: poolctl in its own image (built offline from the test
//! binary, see tests/support/image.rs), in a container laid out as the kubelet lays out a Pod:
//! the service account's token, CA and namespace mounted at
//! `/var/run/secrets/kubernetes.io/serviceaccount`, and `KUBERNETES_SERVICE_HOST` and
//! `KUBERNETES_SERVICE_PORT` naming the API server, here the fake one over TLS (its certificate
//! valid for 127.0.0.1, reached through the host's network), which takes only that token. The
//! Docker socket is mounted, as deploy/04-deployment.yaml mounts it, and the Pod's Node named in
//! `POOLCTL_NODE_NAME`, as its downward API names it.

use std::path::Path;
use std::process::Command;

use poolctl::model::ClusterIdentity;

use crate::support::cli::{Process, Run, Stream};
use crate::support::fake_kube::FakeKubeOptions;
use crate::support::image::poolctl_image;
use crate::support::rig::Rig;

/// Where the kubelet mounts a Pod's service account.
const SERVICE_ACCOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// What the container is given of a Pod.
struct Pod<'a> {
    /// The service account directory to mount (token, ca.crt, namespace).
    service_account: &'a Path,
    /// Whether `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT` are set.
    service_env: bool,
    /// The Node the Pod runs on (`POOLCTL_NODE_NAME`), if it is told.
    node_name: Option<&'a str>,
}

/// A fake cluster that takes only `token`, and a service account directory holding it as the
/// kubelet writes one: the token, the cluster's CA and the Pod's namespace.
async fn rig_with_token(token: &str) -> Option<Rig> {
    let options = FakeKubeOptions { bearer_token: Some(token.to_owned()), ..FakeKubeOptions::default() };
    let rig = Rig::with(options).await?;
    let dir = rig.s.path("serviceaccount");
    std::fs::create_dir(&dir).expect("the service account dir");
    std::fs::write(dir.join("token"), token).expect("write the token");
    std::fs::write(dir.join("ca.crt"), rig.fake.ca_pem()).expect("write the CA");
    std::fs::write(dir.join("namespace"), "poolctl-system").expect("write the namespace");
    Some(rig)
}

/// Where the test's pool files are in the container: a path of its own, as the source's path is
/// its scope, so that tests side by side never see each other's pools as undeclared ones.
fn source(rig: &Rig) -> String {
    format!("/sources/{}", rig.pool())
}

/// `poolctl args...` in poolctl's image, in the container `pod` describes, with the source
/// mounted at [`source`] and the test's labels (so that the cleanup guard finds it), run to
/// completion.
fn in_pod(rig: &Rig, pod: &Pod<'_>, args: &[&str]) -> Run {
    let mut cmd = pod_command(rig, pod, args);
    tokio::task::block_in_place(|| Run::of(&mut cmd))
}

/// The `docker run` of [`in_pod`], not started. The docker CLI passes the signals it gets on
/// to poolctl.
fn pod_command(rig: &Rig, pod: &Pod<'_>, args: &[&str]) -> Command {
    let image = poolctl_image().expect("poolctl's test image builds");
    let mut cmd = Command::new("docker");
    cmd.args(["run", "--rm", "--network", "host", "--sig-proxy=true"]);
    for (key, value) in rig.s.docker().labels() {
        cmd.args(["--label", &format!("{key}={value}")]);
    }
    match std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty()) {
        None => cmd.args(["-v", "/var/run/docker.sock:/var/run/docker.sock"]),
        Some(host) => match host.strip_prefix("unix://") {
            Some(socket) => cmd.args(["-v", &format!("{socket}:/var/run/docker.sock")]),
            None => cmd.args(["-e", &format!("DOCKER_HOST={host}")]),
        },
    };
    cmd.args(["-v", &format!("{}:{}:ro", rig.s.dir().display(), source(rig))]);
    cmd.args(["-v", &format!("{}:{SERVICE_ACCOUNT}:ro", pod.service_account.display())]);
    if pod.service_env {
        cmd.args(["-e", "KUBERNETES_SERVICE_HOST=127.0.0.1"]);
        cmd.args(["-e", &format!("KUBERNETES_SERVICE_PORT={}", rig.fake.port())]);
    }
    if let Some(node) = pod.node_name {
        cmd.args(["-e", &format!("{}={node}", poolctl::config::OWN_NODE_ENV)]);
    }
    cmd.arg(image).args(args);
    cmd
}

/// Every request `fake` logged carried `token`, and none was refused.
fn all_with_token(rig: &Rig, token: &str) {
    let requests = rig.fake.requests();
    assert!(requests.iter().any(|r| r.path == "/api/v1/namespaces/kube-system"), "{requests:#?}");
    let bearer = format!("Bearer {token}");
    for r in &requests {
        assert_eq!(r.authorization.as_deref(), Some(bearer.as_str()), "{} {}", r.method, r.uri());
        assert_ne!(r.status, 401, "{} {}", r.method, r.uri());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn in_a_pod_a_pool_without_a_kubeconfig_reaches_its_cluster_with_the_service_accounts_token() {
    let token = format!("sa-token-{}", std::process::id());
    let Some(rig) = rig_with_token(&token).await else { return };
    rig.write(&rig.s.pool().replicas(1).node_default());
    let pod = Pod { service_account: &rig.s.path("serviceaccount"), service_env: true, node_name: None };

    let run = in_pod(&rig, &pod, &["apply", "--yes", "--source", &source(&rig)]).expect_code(0);
    assert!(run.stdout.contains("Apply complete"), "{}", run.stdout);

    // Every request carried the token read from the file, and none was refused.
    all_with_token(&rig, &token);
    // The instance joined as a Node of that cluster, labelled once Ready.
    let nodes = rig.nodes();
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    assert!(nodes.values().all(|&(ready, unschedulable, _)| ready && !unschedulable), "{nodes:?}");
    // Its container records the connection as the Pod's: context in-cluster, the server of the
    // environment, and the cluster's UID.
    let containers = rig.s.containers().await;
    assert_eq!(containers.len(), 1);
    let uid = rig.fake.store().cluster_uid.clone();
    let expected = ClusterIdentity {
        context: "in-cluster".into(),
        server: format!("{}/", rig.fake.url()),
        uid: Some(uid),
    };
    assert_eq!(containers[0].cluster_id.as_ref(), Some(&expected));
    assert_eq!(containers[0].cluster.as_ref().and_then(|c| c.kubeconfig.as_deref()), None);
}

#[tokio::test(flavor = "multi_thread")]
async fn watch_in_a_pod_reconciles_again_and_again_with_the_service_account() {
    let token = format!("sa-token-{}", std::process::id());
    let Some(rig) = rig_with_token(&token).await else { return };
    rig.write(&rig.s.pool().replicas(1).node_default());
    let pod = Pod { service_account: &rig.s.path("serviceaccount"), service_env: true, node_name: None };

    // As deploy/04-deployment.yaml runs it; a second reconcile comes from a change of the source.
    let cmd = pod_command(&rig, &pod, &["watch", "--source", &source(&rig), "--resync", "1h"]);
    let mut watch = Process::spawn(cmd);
    tokio::task::block_in_place(|| {
        watch.applied();
        rig.write(&rig.s.pool().replicas(2).node_default());
        watch.wait_for(Stream::Stderr, "source changed");
        watch.applied();
    });
    assert!(watch.signal("TERM").success(), "{}", watch.output(Stream::Stderr));

    all_with_token(&rig, &token);
    let nodes = rig.nodes();
    assert_eq!(nodes.len(), 2, "{nodes:?}");
    assert!(nodes.values().all(|&(ready, unschedulable, _)| ready && !unschedulable), "{nodes:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn in_a_pod_on_a_node_of_its_pool_poolctl_shows_and_refuses_its_retirement() {
    let token = format!("sa-token-{}", std::process::id());
    let Some(rig) = rig_with_token(&token).await else { return };
    let v1 = rig.s.pool().replicas(1).node_default();
    rig.write(&v1);
    let pod = Pod { service_account: &rig.s.path("serviceaccount"), service_env: true, node_name: None };
    in_pod(&rig, &pod, &["apply", "--yes", "--source", &source(&rig)]).expect_code(0);
    let nodes = rig.nodes();
    let own = nodes.keys().next().expect("the pool's Node").clone();

    // The Pod landed on the pool's Node (what deploy/'s affinity prevents), and a new template
    // would retire that Node: plan says so, and apply refuses before the cordon.
    rig.write(&v1.clone().env("VERSION", "2"));
    let on_it = Pod { node_name: Some(&own), ..pod };
    let plan = in_pod(&rig, &on_it, &["plan", "--source", &source(&rig)]).expect_code(0);
    let note = format!("{own}: not retired: this poolctl runs on its Node (POOLCTL_NODE_NAME)");
    assert!(plan.stdout.contains(&note), "{}", plan.stdout);
    let run = in_pod(&rig, &on_it, &["apply", "--yes", "--source", &source(&rig)]).expect_code(1);
    let refused = format!(
        "refusing to retire Node {own}: this poolctl runs on it (POOLCTL_NODE_NAME); move poolctl off the \
         pool's Nodes (deploy/ keeps it off them)"
    );
    assert!(run.stdout.contains(&refused) || run.stderr.contains(&refused), "{}\n{}", run.stdout, run.stderr);
    // The old instance keeps serving: its Node Ready and schedulable, never cordoned.
    assert_eq!(
        rig.nodes().get(&own).map(|&(ready, unschedulable, _)| (ready, unschedulable)),
        Some((true, false))
    );
    let cordons = rig.fake.requests().into_iter().filter(|r| r.method == "PATCH" && r.path.ends_with(&own));
    let cordons: Vec<String> = cordons
        .filter_map(|r| r.body.map(|b| b.to_string()))
        .filter(|b| b.contains("unschedulable"))
        .collect();
    assert!(cordons.is_empty(), "{cordons:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn in_cluster_outside_a_pod_is_an_error_that_names_what_is_missing() {
    let token = format!("sa-token-{}", std::process::id());
    let Some(rig) = rig_with_token(&token).await else { return };
    let spec = rig.s.pool().replicas(1).to_string();
    rig.s.write("pool.yaml", &spec.replace("  rollout:", "  node:\n    kubeconfig: in-cluster\n  rollout:"));
    // The token is mounted, but no service names the API server: not a Pod.
    let pod = Pod { service_account: &rig.s.path("serviceaccount"), service_env: false, node_name: None };

    let run = in_pod(&rig, &pod, &["plan", "--source", &source(&rig)]).expect_code(1);
    assert!(
        run.stderr.contains(
            "cannot use the Pod's service account (node.kubeconfig: in-cluster): poolctl does not run in a \
             Pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set"
        ),
        "{}",
        run.stderr
    );
    assert!(rig.fake.requests().is_empty(), "{:#?}", rig.fake.requests());
}
