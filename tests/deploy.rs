//! deploy/: the manifests parse and agree with each other, the image tests build offline is the
//! runtime of the Dockerfile users build, and the `ClusterRole` grants exactly what poolctl uses:
//! every request a `watch` makes through a full rollout of a node pool (create, join, cordon,
//! drain with evictions under a PodDisruptionBudget, volume checks, stop, Node deletion, the
//! Lease lock) is allowed by it, as kube-apiserver's RBAC authorizer would decide, and every
//! verb it grants was used by one of those requests. The watch Pods stay off the Nodes of the
//! pools they manage, know the Node they run on, and are disrupted one at a time.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use axum::http::Method;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, PodSpec, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::support::cli::Stream;
use crate::support::docker::docker;
use crate::support::fake_kube::{Attributes, PdbBound, PodSpecBuilder, RequestRecord, Store};
use crate::support::image::poolctl_image;
use crate::support::rig::{LIMIT, Rig};

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

/// The one object of `deploy/<file>`.
fn manifest<T: DeserializeOwned>(file: &str) -> T {
    let path = deploy_dir().join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn cluster_role() -> ClusterRole {
    manifest("02-clusterrole.yaml")
}

/// The (API group, resource, verb) triples a rule grants, after checking that it names them
/// one by one: a wildcard, or a rule for URLs, would grant what no test can list.
fn granted(rule: &PolicyRule) -> Vec<(String, String, String)> {
    assert!(rule.non_resource_urls.is_none(), "a rule for non-resource URLs: {rule:?}");
    let (groups, resources) =
        (rule.api_groups.clone().unwrap_or_default(), rule.resources.clone().unwrap_or_default());
    let mut triples = Vec::new();
    for group in &groups {
        for resource in &resources {
            for verb in &rule.verbs {
                assert!(![group, resource, verb].contains(&&"*".to_owned()), "a wildcard: {rule:?}");
                triples.push((group.clone(), resource.clone(), verb.clone()));
            }
        }
    }
    triples
}

/// Whether `rule` allows the request, by RBAC's rule: its group, resource (with subresource)
/// and verb are listed, and so is its object's name when the rule lists names.
fn allows(rule: &PolicyRule, request: &Attributes) -> bool {
    let listed =
        |list: &Option<Vec<String>>, value: &str| list.as_ref().is_some_and(|l| l.iter().any(|v| v == value));
    let named = match rule.resource_names.as_ref().filter(|names| !names.is_empty()) {
        None => true,
        Some(names) => request.name.as_ref().is_some_and(|name| names.contains(name)),
    };
    listed(&rule.api_groups, &request.group)
        && listed(&rule.resources, &request.resource)
        && rule.verbs.contains(&request.verb)
        && named
}

#[test]
fn requests_are_authorized_by_the_attributes_kube_apiserver_gives_them() {
    let attributes = |method: &str, uri: &str| {
        let (path, query) = uri.split_once('?').map_or((uri, None), |(p, q)| (p, Some(q.to_owned())));
        let record = RequestRecord {
            seq: 0,
            at: std::time::Instant::now(),
            wall: std::time::SystemTime::now(),
            method: method.to_owned(),
            path: path.to_owned(),
            query,
            content_type: None,
            authorization: None,
            body: None,
            status: 200,
            response_bytes: 0,
        };
        record.attributes().map(|a| (a.verb, a.group, a.resource, a.namespace, a.name))
    };
    let some = |verb: &str, group: &str, resource: &str, ns: Option<&str>, name: Option<&str>| {
        Some((
            verb.to_owned(),
            group.to_owned(),
            resource.to_owned(),
            ns.map(str::to_owned),
            name.map(str::to_owned),
        ))
    };
    assert_eq!(attributes("GET", "/api/v1/nodes?labelSelector=a"), some("list", "", "nodes", None, None));
    assert_eq!(
        attributes("GET", "/api/v1/nodes?watch=true&resourceVersion=1"),
        some("watch", "", "nodes", None, None)
    );
    assert_eq!(attributes("GET", "/api/v1/nodes/n"), some("get", "", "nodes", None, Some("n")));
    assert_eq!(attributes("PATCH", "/api/v1/nodes/n"), some("patch", "", "nodes", None, Some("n")));
    assert_eq!(
        attributes("PATCH", "/api/v1/nodes/n/status"),
        some("patch", "", "nodes/status", None, Some("n"))
    );
    assert_eq!(
        attributes("GET", "/api/v1/namespaces/kube-system"),
        some("get", "", "namespaces", Some("kube-system"), Some("kube-system"))
    );
    assert_eq!(
        attributes("POST", "/api/v1/namespaces/default/pods/web-1/eviction"),
        some("create", "", "pods/eviction", Some("default"), Some("web-1"))
    );
    assert_eq!(
        attributes("PUT", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/poolctl-w"),
        some("update", "coordination.k8s.io", "leases", Some("kube-system"), Some("poolctl-w"))
    );
    assert_eq!(
        attributes("POST", "/apis/events.k8s.io/v1/namespaces/default/events"),
        some("create", "events.k8s.io", "events", Some("default"), None)
    );
    assert_eq!(
        attributes("DELETE", "/api/v1/namespaces/default/pods"),
        some("deletecollection", "", "pods", Some("default"), None)
    );
    assert_eq!(attributes("GET", "/version"), None, "a non-resource URL");
}

#[test]
fn the_manifests_parse_and_agree_with_each_other() {
    let namespace: Namespace = manifest("00-namespace.yaml");
    let account: ServiceAccount = manifest("01-serviceaccount.yaml");
    let role = cluster_role();
    let binding: ClusterRoleBinding = manifest("03-clusterrolebinding.yaml");
    let deployment: Deployment = manifest("04-deployment.yaml");
    let service: Service = manifest("05-service.yaml");
    let pdb: PodDisruptionBudget = manifest("06-pdb.yaml");
    let ns = namespace.metadata.name.as_deref().expect("the Namespace is named");
    for (kind, object_ns) in [
        ("ServiceAccount", &account.metadata.namespace),
        ("Deployment", &deployment.metadata.namespace),
        ("Service", &service.metadata.namespace),
        ("PodDisruptionBudget", &pdb.metadata.namespace),
    ] {
        assert_eq!(object_ns.as_deref(), Some(ns), "the {kind} lives in the Namespace");
    }
    // The binding gives the role to the account.
    assert_eq!(
        (binding.role_ref.kind.as_str(), Some(binding.role_ref.name.as_str())),
        ("ClusterRole", role.metadata.name.as_deref())
    );
    let subjects = binding.subjects.expect("the binding has subjects");
    assert_eq!(subjects.len(), 1);
    assert_eq!(subjects[0].kind, "ServiceAccount");
    assert_eq!(Some(subjects[0].name.as_str()), account.metadata.name.as_deref());
    assert_eq!(subjects[0].namespace.as_deref(), Some(ns));

    // The Deployment runs watch, in two replicas, as the account.
    let spec = deployment.spec;
    assert_eq!(spec.replicas, Some(2));
    let template_labels = spec.template.metadata.and_then(|m| m.labels).expect("the Pods are labelled");
    let selector = spec.selector.match_labels.expect("the Deployment selects by labels");
    assert!(selector.iter().all(|(k, v)| template_labels.get(k) == Some(v)), "the selector matches its Pods");
    let pod = spec.template.spec.expect("a Pod spec");
    assert_eq!(pod.service_account_name.as_deref(), account.metadata.name.as_deref());
    assert_eq!(pod.containers.len(), 1);
    let container = &pod.containers[0];
    let args = container.args.clone().expect("watch's arguments");
    assert_eq!(args[0], "watch");
    let flag = |name: &str| args.iter().position(|a| a == name).map(|i| args[i + 1].clone());
    let source = flag("--source").expect("a --source");
    assert!(source.starts_with("https://"), "a Git source: {source}");
    let listen = flag("--listen").expect("a --listen");
    let listen_port: i32 =
        listen.rsplit(':').next().and_then(|p| p.parse().ok()).expect("--listen HOST:PORT");
    assert!(listen.starts_with("0.0.0.0:"), "reachable from the Service: {listen}");

    // The Docker daemon: the socket mounted from the host, or DOCKER_HOST.
    let mounts = container.volume_mounts.clone().unwrap_or_default();
    let socket = mounts.iter().find(|m| m.mount_path == "/var/run/docker.sock");
    let docker_host = container.env.iter().flatten().any(|e| e.name == "DOCKER_HOST");
    let volumes = pod.volumes.clone().unwrap_or_default();
    if let Some(socket) = socket {
        let volume = volumes.iter().find(|v| v.name == socket.name).expect("the socket's volume");
        let host_path = volume.host_path.as_ref().expect("the socket comes from the host");
        assert_eq!(host_path.path, "/var/run/docker.sock");
    } else {
        assert!(docker_host, "the Deployment reaches Docker through a socket or DOCKER_HOST");
    }
    // The Git cache is where the image says, and writable.
    let cache =
        container.env.iter().flatten().find(|e| e.name == "POOLCTL_CACHE_DIR").and_then(|e| e.value.clone());
    let image_cache = runtime_lines("Dockerfile")
        .iter()
        .find_map(|l| l.strip_prefix("ENV POOLCTL_CACHE_DIR=").map(str::to_owned))
        .expect("the image sets POOLCTL_CACHE_DIR");
    let cache = cache.unwrap_or(image_cache);
    assert!(mounts.iter().any(|m| m.mount_path == cache), "a volume for the Git cache at {cache}");

    // The metrics port: named `metrics`, the one --listen binds, and the one the Service sends to.
    let ports = container.ports.clone().unwrap_or_default();
    let metrics = ports.iter().find(|p| p.name.as_deref() == Some("metrics")).expect("a port named metrics");
    assert_eq!(metrics.container_port, listen_port);
    let service_spec = service.spec.expect("a Service spec");
    let service_selector = service_spec.selector.expect("the Service selects Pods");
    assert!(
        service_selector.iter().all(|(k, v)| template_labels.get(k) == Some(v)),
        "the Service selects the Deployment's Pods"
    );
    let service_ports = service_spec.ports.expect("the Service's ports");
    let port = service_ports
        .iter()
        .find(|p| p.name.as_deref() == Some("metrics"))
        .expect("a Service port named metrics");
    assert_eq!(port.port, 9464);
    match &port.target_port {
        Some(IntOrString::String(name)) => assert_eq!(name, "metrics"),
        Some(IntOrString::Int(number)) => assert_eq!(*number, listen_port),
        None => assert_eq!(port.port, listen_port),
    }
    // The probes ask the endpoints of --listen, on its port.
    for probe in [&container.liveness_probe, &container.readiness_probe] {
        let get = probe.as_ref().and_then(|p| p.http_get.as_ref()).expect("an HTTP probe");
        assert_eq!(get.port, IntOrString::String("metrics".to_owned()));
    }
}

#[test]
fn every_manifest_is_checked_and_the_namespace_is_applied_first() {
    // `kubectl apply -f deploy/` reads .yaml, .yml and .json files in file name order.
    let mut files: Vec<String> = std::fs::read_dir(deploy_dir())
        .expect("deploy/ exists")
        .map(|e| e.expect("a deploy/ entry").path())
        .filter(|path| {
            path.extension().and_then(|e| e.to_str()).is_some_and(|e| ["yaml", "yml", "json"].contains(&e))
        })
        .map(|path| path.file_name().expect("a file name").to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "00-namespace.yaml",
            "01-serviceaccount.yaml",
            "02-clusterrole.yaml",
            "03-clusterrolebinding.yaml",
            "04-deployment.yaml",
            "05-service.yaml",
            "06-pdb.yaml"
        ]
    );
}

#[test]
fn the_deployment_runs_watch_with_flags_it_has() {
    let deployment: Deployment = manifest("04-deployment.yaml");
    let pod = deployment.spec.template.spec.expect("a Pod spec");
    let args = pod.containers[0].args.clone().expect("watch's arguments");
    let help =
        Command::new(env!("CARGO_BIN_EXE_poolctl")).args(["watch", "--help"]).output().expect("poolctl runs");
    let help = String::from_utf8_lossy(&help.stdout);
    let has = |flag: &str| help.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')).any(|w| w == flag);
    for flag in args.iter().filter(|a| a.starts_with("--")) {
        let flag = flag.split('=').next().unwrap_or_default();
        assert!(has(flag), "watch has no {flag}:\n{help}");
    }
}

fn watch_pod() -> PodSpec {
    let deployment: Deployment = manifest("04-deployment.yaml");
    deployment.spec.template.spec.expect("a Pod spec")
}

#[test]
fn the_watch_pods_are_never_scheduled_on_a_node_of_the_pools_they_manage() {
    let affinity = watch_pod().affinity.and_then(|a| a.node_affinity).expect("a nodeAffinity");
    // Required: a preference alone lets the scheduler fall back to a pool's Node when the
    // others are full, and the rollout there would evict the replica running it.
    let required = affinity.required_during_scheduling_ignored_during_execution.expect("a required affinity");
    // The terms are ORed: every one of them must keep off the Nodes with poolctl's pool label,
    // the label every Node poolctl configures carries.
    assert!(!required.node_selector_terms.is_empty());
    for term in &required.node_selector_terms {
        let keeps_off = term.match_expressions.iter().flatten().any(|e| {
            e.key == poolctl::model::labels::POOL && e.operator == "DoesNotExist" && e.values.is_none()
        });
        assert!(keeps_off, "a term that admits a pool's Node: {term:?}");
    }
}

#[test]
fn each_watch_replica_is_told_the_node_it_runs_on() {
    let pod = watch_pod();
    let env = pod.containers[0].env.clone().unwrap_or_default();
    let own = env.iter().find(|e| e.name == poolctl::config::OWN_NODE_ENV).expect("the Node name in env");
    assert_eq!(own.value, None, "from the downward API, not a fixed value");
    let field = own.value_from.as_ref().and_then(|v| v.field_ref.as_ref()).expect("a fieldRef");
    assert_eq!(field.field_path, "spec.nodeName");
    assert!(field.api_version.as_deref().is_none_or(|v| v == "v1"), "{field:?}");
}

#[test]
fn the_budget_selects_exactly_the_watch_pods_and_keeps_one_up_without_blocking_drains() {
    let deployment: Deployment = manifest("04-deployment.yaml");
    let pdb: PodDisruptionBudget = manifest("06-pdb.yaml");
    assert_eq!(pdb.metadata.namespace, deployment.metadata.namespace);
    let spec = pdb.spec.expect("a budget spec");
    let deployment = deployment.spec;
    // The Deployment's own selector: no Pod more, none less (its Pods are the only ones in its
    // Namespace, and a selector that matched other Pods there would count them in the budget).
    assert_eq!(spec.selector.as_ref(), Some(&deployment.selector));
    let labels = deployment.template.metadata.and_then(|m| m.labels).expect("the Pods are labelled");
    let selector = spec.selector.and_then(|s| s.match_labels).expect("the budget selects by labels");
    assert!(selector.iter().all(|(k, v)| labels.get(k) == Some(v)), "the budget selects the Pods");

    // What the disruption controller makes of it, with every replica healthy: how many must
    // stay up, hence how many evictions it allows, with the Deployment's replicas and with one.
    let number = |bound: &IntOrString| match bound {
        IntOrString::Int(n) => *n,
        IntOrString::String(s) => panic!("a number, not a percentage, to check: {s}"),
    };
    let desired_healthy = |replicas: i32| match (&spec.min_available, &spec.max_unavailable) {
        (Some(min), None) => number(min),
        (None, Some(max)) => (replicas - number(max)).max(0),
        bounds => panic!("one bound: {bounds:?}"),
    };
    let replicas = deployment.replicas.expect("replicas");
    assert!(replicas > 1, "a replica keeps watching while another moves");
    for replicas in [replicas, 1] {
        let allowed = replicas - desired_healthy(replicas);
        assert!(allowed >= 1, "{replicas} replicas: the budget blocks every drain of their Node");
        if replicas > 1 {
            assert!(desired_healthy(replicas) >= 1, "{replicas} replicas: none is kept up through a drain");
        }
    }
    // A replica that is not Ready does not hold a drain up.
    assert_eq!(spec.unhealthy_pod_eviction_policy.as_deref(), Some("AlwaysAllow"));
}

/// The lines of a Dockerfile's last stage that make what runs: the environment, the port and
/// the entrypoint.
fn runtime_lines(file: &str) -> Vec<String> {
    let text = std::fs::read_to_string(deploy_dir().join(file)).expect("read the Dockerfile");
    let last_stage = text.rsplit_once("\nFROM ").map_or(text.as_str(), |(_, stage)| stage);
    last_stage
        .lines()
        .filter(|l| ["ENV ", "EXPOSE ", "ENTRYPOINT ", "CMD "].iter().any(|k| l.starts_with(k)))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_image_tests_build_runs_as_the_image_users_build() {
    let users = runtime_lines("Dockerfile");
    assert!(users.iter().any(|l| l.starts_with("ENTRYPOINT ")), "{users:?}");
    assert_eq!(runtime_lines("Dockerfile.binary"), users);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_offline_image_runs_the_binary_cargo_built() {
    if docker().await.is_none() {
        return;
    }
    let image = poolctl_image().expect("poolctl's test image builds");
    let out = Command::new("docker").args(["run", "--rm", &image, "--version"]).output().expect("docker run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let host = Command::new(env!("CARGO_BIN_EXE_poolctl")).arg("--version").output().expect("poolctl runs");
    assert_eq!(String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&host.stdout));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cluster_role_allows_every_request_of_a_rollout_and_grants_nothing_unused() {
    let Some(rig) = Rig::new().await else { return };
    // `Force`: a drain past its timeout deletes the pods left, which the role must allow.
    let v1 = rig.spec().replicas(2).drain_timeout_action("Force");
    rig.write(&v1);
    // A replica killed outright left the pool's Lease behind, long expired: the watch takes it
    // over in place, as the other replica of the Deployment does.
    let killed = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": format!("poolctl-{}", rig.pool()), "namespace": "kube-system"},
        "spec": {
            "holderIdentity": "poolctl watch (pid 1 on a replica that was killed)",
            "leaseDurationSeconds": 15,
            "acquireTime": "2020-01-01T00:00:00.000000Z",
            "renewTime": "2020-01-01T00:00:00.000000Z",
        },
    });
    let (code, _) = rig.fake.store().serve_lease(&Method::POST, "kube-system", None, Some(&killed));
    assert_eq!(code, 201);
    let mut watch = rig.s.spawn("watch", &["--resync", "1h"]);
    tokio::task::block_in_place(|| {
        watch.wait_for(Stream::Stderr, "taking over the expired lock");
        watch.applied();
    });
    let old: Vec<String> = rig.nodes().into_keys().collect();
    assert_eq!(old.len(), 2, "{old:?}");

    // What a drain meets: an app under a PodDisruptionBudget, one pod on each Node, a
    // DaemonSet's pods, which stay, and a single pod whose budget never lets it go, deleted
    // once its Node's drain is past its timeout.
    rig.fake.add_app("default", "web", 2);
    rig.fake.put_pdb("default", "web", "web", PdbBound::MinAvailable(1));
    rig.fake.add_app("default", "solo", 1);
    rig.fake.put_pdb("default", "solo", "solo", PdbBound::MinAvailable(1));
    rig.fake.add_daemon_set("kube-system", "proxy");
    for node in &old {
        let proxy =
            PodSpecBuilder::new("kube-system", &format!("proxy-{node}"), node).owned_by("DaemonSet", "proxy");
        rig.fake.add_pod(&proxy);
    }
    let running = |p: &&k8s_openapi::api::core::v1::Pod| {
        p.spec.as_ref().is_some_and(|s| s.node_name.is_some())
            && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
    };
    let placed = |s: &Store| s.pods().filter(running).count() == 5;
    tokio::time::timeout(LIMIT, rig.fake.wait_until(placed)).await.expect("the app runs");

    // A new template: every old instance is retired in turn.
    rig.write(&v1.clone().env("VERSION", "2"));
    tokio::task::block_in_place(|| {
        watch.wait_for(Stream::Stderr, "source changed");
        watch.applied();
    });
    assert!(watch.signal("TERM").success(), "{}", watch.output(Stream::Stderr));
    let now: Vec<String> = rig.nodes().into_keys().collect();
    assert!(old.iter().all(|n| !now.contains(n)), "retired: {old:?}, now {now:?}");
    assert!(!rig.fake.evictions().is_empty(), "the drains evicted");
    // Once, or twice if its replacement landed on the other old Node before that was cordoned.
    let forced =
        rig.fake.requests().into_iter().filter(|r| r.method == "DELETE" && r.path.contains("/pods/solo-"));
    assert!(forced.count() >= 1, "the pod a budget held was deleted past the drain's timeout");

    let rules = cluster_role().rules.expect("the role has rules");
    let requests = rig.fake.requests();
    let mut used = BTreeSet::new();
    for request in &requests {
        // The API server's clock (the `Date` of this answer) and version (the version-skew
        // preflight): every client may read `/version`, through the built-in
        // system:public-info-viewer binding.
        if request.method == "GET" && request.uri() == "/version" {
            continue;
        }
        let attributes = request.attributes().unwrap_or_else(|| {
            panic!("{} {}: a non-resource URL, which the role does not grant", request.method, request.uri())
        });
        assert!(
            rules.iter().any(|rule| allows(rule, &attributes)),
            "{} {} ({attributes:?}) is not allowed by deploy/02-clusterrole.yaml",
            request.method,
            request.uri()
        );
        used.insert((attributes.group, attributes.resource, attributes.verb));
    }
    let unused: Vec<_> = rules.iter().flat_map(granted).filter(|t| !used.contains(t)).collect();
    assert!(unused.is_empty(), "granted but never used: {unused:?}\nused: {used:#?}");
}
