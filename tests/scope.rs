//! A plan reads its pool from the cluster, not the cluster: every list it sends carries a
//! selector that the pool bounds, whatever else the cluster holds; and `watch` reads those
//! lists from memory while nothing changes (read from the fake API server's request log).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;

use poolctl::backend::Cluster;
use poolctl::backend::kube::KubeCluster;

use crate::support::cli::Stream;
use crate::support::fake_kube::{FakeKube, FakeKubeOptions, PdbBound, PodSpecBuilder, RequestRecord, Store};
use crate::support::rig::{LIMIT, Rig};

/// `%xx` escapes of a query string, decoded (selectors are ASCII).
fn decode(query: &str) -> String {
    let mut out = String::new();
    let mut rest = query;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let byte = rest.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok());
        if let Some(b) = byte {
            out.push(char::from(b));
            rest = &rest[i + 3..];
        } else {
            out.push('%');
            rest = &rest[i + 1..];
        }
    }
    out.push_str(rest);
    out
}

/// A request as `METHOD path?decoded-query`.
fn line(r: &RequestRecord) -> String {
    format!("{} {}", r.method, decode(&r.uri()))
}

/// `nodes` other Nodes (none of the pool's) holding `per_node` pods each, in namespaces
/// `other-<i>` that each carry a PodDisruptionBudget: the rest of a large cluster.
fn the_rest_of_the_cluster(nodes: usize, per_node: usize) -> (Vec<Node>, Vec<PodSpecBuilder>) {
    let mut all_nodes = Vec::new();
    let mut pods = Vec::new();
    for i in 0..nodes {
        let name = format!("other-node-{i:04}");
        all_nodes.push(Store::new_node(&name, true));
        for j in 0..per_node {
            let ns = format!("other-{}", i % 20);
            pods.push(PodSpecBuilder::new(&ns, &format!("app-{i}-{j}"), &name).label("app", "x"));
        }
    }
    (all_nodes, pods)
}

/// The requests from index `from` on, as lines.
fn requests_since(rig: &Rig, from: usize) -> Vec<RequestRecord> {
    rig.fake.requests().into_iter().skip(from).collect()
}

#[tokio::test]
async fn a_plan_lists_the_pools_nodes_by_label_their_pods_by_node_and_budgets_by_namespace() {
    let Some(rig) = Rig::new().await else { return };
    let names = rig.start(&rig.spec().replicas(2)).await;
    for (i, node) in names.iter().enumerate() {
        rig.fake.add_pod(&PodSpecBuilder::new("web", &format!("web-{i}"), node).owner(Some("ReplicaSet")));
    }
    rig.fake.put_pdb("web", "web", "web", PdbBound::MinAvailable(1));
    rig.fake.put_pdb("elsewhere", "theirs", "x", PdbBound::MinAvailable(1));
    let (others, pods) = the_rest_of_the_cluster(5, 3);
    rig.fake.store().load_quietly(others, &pods);
    // One Node lost its pool label (an apply killed before labelling it): found by its
    // container's name.
    let unlabelled = &names[1];
    rig.fake.store().update_node(unlabelled, |n| {
        n.metadata.labels.get_or_insert_with(BTreeMap::new).remove("poolctl.dev/pool");
    });

    let from = rig.fake.requests().len();
    let plan = rig.poolctl("plan", &[]).expect_code(0);
    let requests: Vec<String> = requests_since(&rig, from).iter().map(line).collect();
    let pool = rig.pool();
    let mut expected = vec![
        "GET /api/v1/namespaces/kube-system".to_owned(),
        // The API server's clock, from the `Date` of its answer.
        "GET /version".to_owned(),
        format!("GET /api/v1/nodes?&labelSelector=poolctl.dev/pool={pool}"),
        // The Node without the pool label, by its container's name.
        format!("GET /api/v1/nodes/{unlabelled}"),
        // The pool's record of joining instances, in its Lease (none here: no apply was killed).
        format!("GET /apis/coordination.k8s.io/v1/namespaces/kube-system/leases/poolctl-{pool}"),
        // The plan shows a held lock: it reads the pool's Lease.
        format!("GET /apis/coordination.k8s.io/v1/namespaces/kube-system/leases/poolctl-{pool}"),
    ];
    expected.extend(names.iter().map(|n| format!("GET /api/v1/pods?&fieldSelector=spec.nodeName={n}")));
    expected.push("GET /apis/policy/v1/namespaces/web/poddisruptionbudgets?".to_owned());
    let mut sorted = requests.clone();
    sorted.sort();
    expected.sort();
    assert_eq!(sorted, expected, "in order: {requests:#?}");
    // The unlabelled Node is the pool's all the same: the plan labels it again, nothing else.
    assert!(plan.stdout.contains(&format!("configure   {unlabelled}")), "{}", plan.stdout);
    assert!(
        plan.stdout.contains("Plan: 0 to create, 0 to retire, 1 to configure, 2 unchanged."),
        "{}",
        plan.stdout
    );
}

/// The median of some durations.
fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// Run with `bench/plan_scope.sh`; see BENCHMARKS.md, "Kubernetes lists".
#[tokio::test]
#[ignore = "a benchmark: run with bench/plan_scope.sh"]
async fn bench_plan_in_a_small_and_a_large_cluster() {
    const RUNS: usize = 15;
    let Some(rig) = Rig::new().await else { return };
    let names = rig.start(&rig.spec().replicas(10)).await;
    // Ten pods on each of the pool's Nodes, under a budget.
    for node in &names {
        for j in 0..10 {
            let pod =
                PodSpecBuilder::new("default", &format!("{node}-pod-{j}"), node).owner(Some("ReplicaSet"));
            rig.fake.add_pod(&pod.label("app", "web"));
        }
    }
    rig.fake.put_pdb("default", "web", "web", PdbBound::MinAvailable(1));

    let measure = |label: &str| {
        let mut times = Vec::new();
        let mut shape = None;
        for _ in 0..RUNS {
            let from = rig.fake.requests().len();
            let started = Instant::now();
            rig.poolctl("plan", &[]).expect_code(0);
            times.push(started.elapsed());
            let requests = requests_since(&rig, from);
            let bytes: usize = requests.iter().map(|r| r.response_bytes).sum();
            shape = Some((requests.len(), bytes));
        }
        let (count, bytes) = shape.expect("at least one run");
        let nodes = rig.fake.node_names().len();
        let pods = rig.fake.pods().len();
        println!(
            "{label:<6} cluster: {nodes:>5} Nodes {pods:>7} pods: plan median {:>6.1} ms (min {:.1}), {count} requests, {bytes} bytes",
            median(times.clone()).as_secs_f64() * 1e3,
            times.iter().min().expect("runs").as_secs_f64() * 1e3,
        );
        (median(times), count, bytes)
    };
    let small = measure("small");
    let (others, pods) = the_rest_of_the_cluster(990, 101);
    let namespaces: Vec<String> = (0..20).map(|i| format!("other-{i}")).collect();
    rig.fake.store().load_quietly(others, &pods);
    for ns in &namespaces {
        rig.fake.put_pdb(ns, "x", "x", PdbBound::MaxUnavailable(1));
    }
    let large = measure("large");
    println!(
        "large / small: time {:.3}, requests {} / {}, bytes {} / {} (the list resourceVersions grow by a few digits)",
        large.0.as_secs_f64() / small.0.as_secs_f64(),
        large.1,
        small.1,
        large.2,
        small.2
    );
}

/// Whether a request is a list (of Nodes, pods or budgets), not a watch or a GET by name.
fn is_list(r: &RequestRecord) -> bool {
    let watch = r.query.as_deref().is_some_and(|q| q.contains("watch=true") || q.contains("watch=1"));
    let list =
        r.path == "/api/v1/nodes" || r.path.ends_with("/pods") || r.path.ends_with("/poddisruptionbudgets");
    r.method == "GET" && list && !watch
}

fn lists(fake: &FakeKube) -> usize {
    fake.requests().iter().filter(|r| is_list(r)).count()
}

/// The pool's Node names and the names of their pods, as the cluster observes them.
async fn observe(cluster: &KubeCluster) -> (Vec<String>, Vec<String>) {
    let mut nodes: Vec<String> = cluster.nodes(&[]).await.unwrap().into_iter().map(|n| n.name).collect();
    nodes.sort();
    let (pods, _) = cluster.pods_and_pdbs(&nodes).await.unwrap();
    let mut pods: Vec<String> = pods.into_iter().map(|p| p.name).collect();
    pods.sort();
    (nodes, pods)
}

#[tokio::test]
async fn a_kept_client_lists_once_then_follows_watches_until_it_writes() {
    let fake = FakeKube::start(FakeKubeOptions::default());
    for node in ["p-a", "p-b"] {
        fake.add_node_with_labels(node, true, &[("poolctl.dev/pool", "p")]);
    }
    fake.add_node("other", true);
    fake.add_pod(&PodSpecBuilder::new("default", "web-1", "p-a").owner(Some("ReplicaSet")));
    let cluster = KubeCluster::from_config(fake.config(), "p").unwrap().with_cache().unwrap();

    let first = observe(&cluster).await;
    assert_eq!(first, (vec!["p-a".to_owned(), "p-b".to_owned()], vec!["web-1".to_owned()]));
    // The pool's Nodes, the pods of each, the budgets of their one namespace.
    assert_eq!(lists(&fake), 4, "{:#?}", fake.requests());
    assert_eq!(observe(&cluster).await, first);
    assert_eq!(lists(&fake), 4, "nothing changed: read from memory");

    // A change in the cluster reaches the mirror through its watch, still without a list.
    fake.add_pod(&PodSpecBuilder::new("default", "web-2", "p-b").owner(Some("ReplicaSet")));
    let seen = tokio::time::timeout(LIMIT, async {
        loop {
            let observed = observe(&cluster).await;
            if observed.1.len() == 2 {
                return observed;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the watch brings the new pod");
    assert_eq!(seen.1, ["web-1", "web-2"]);
    assert_eq!(lists(&fake), 4);

    // A write through the client: what it changed is read back from the server, once.
    cluster.cordon("p-a").await.unwrap();
    observe(&cluster).await;
    assert_eq!(lists(&fake), 8);
    observe(&cluster).await;
    assert_eq!(lists(&fake), 8);
}

/// The watches behind the mirrors outlast the client's read timeout (15 s): a cluster where
/// nothing changes sends nothing on them, and that silence is no reason to list again.
#[tokio::test]
async fn a_quiet_cluster_keeps_its_mirrors_past_the_read_timeout() {
    let fake = FakeKube::start(FakeKubeOptions::default());
    fake.add_node_with_labels("p-a", true, &[("poolctl.dev/pool", "p")]);
    let cluster = KubeCluster::from_config(fake.config(), "p").unwrap().with_cache().unwrap();
    let first = observe(&cluster).await;
    let listed = lists(&fake);
    // The behaviour under test is what 16 quiet seconds do, past the client's 15 s read timeout.
    tokio::time::sleep(Duration::from_secs(16)).await;
    assert_eq!(observe(&cluster).await, first);
    assert_eq!(lists(&fake), listed, "a quiet watch was taken for a dead one: {:#?}", fake.requests());
    // And it still follows the cluster.
    fake.add_pod(&PodSpecBuilder::new("default", "web-1", "p-a").owner(Some("ReplicaSet")));
    let seen = tokio::time::timeout(LIMIT, async {
        loop {
            let observed = observe(&cluster).await;
            if !observed.1.is_empty() {
                return observed;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the watch brings the new pod");
    assert_eq!(seen.1, ["web-1"]);
    assert_eq!(lists(&fake), listed + 1, "only the budgets of the pod's namespace, new to the mirrors");
}

#[tokio::test]
async fn a_watch_reconcile_where_nothing_changed_sends_no_list() {
    let Some(rig) = Rig::new().await else { return };
    rig.write(&rig.spec().replicas(2));
    let mut watch = rig.s.spawn("watch", &["--resync", "200ms"]);
    watch.applied();
    // The first resync after the rollout reads back what it changed; the next ones read memory.
    for _ in 0..2 {
        watch.wait_for(Stream::Stderr, "plan (Resync)");
    }
    let from = rig.fake.requests().len();
    for _ in 0..3 {
        watch.wait_for(Stream::Stderr, "plan (Resync)");
    }
    let since: Vec<RequestRecord> = requests_since(&rig, from);
    let listed: Vec<String> = since.iter().filter(|r| is_list(r)).map(line).collect();
    assert!(listed.is_empty(), "{listed:#?}");
    assert!(!since.is_empty(), "the reconciles still read the cluster's identity");
    watch.signal("TERM");
}

/// Minutes of quiet under `watch` against the fake API server: after the first lists, the
/// resyncs read the cluster from the mirrors' watches alone, however long nothing changes (a
/// watch the server ends is opened again from where it was, not listed again). Five minutes
/// by default, past the watches' own window (290 s); see BENCHMARKS.md, "Quiet minutes".
#[tokio::test]
#[ignore = "a benchmark: run with bench/quiet_watch.sh"]
async fn bench_quiet_minutes_under_watch_send_no_list() {
    let quiet: u64 =
        std::env::var("POOLCTL_BENCH_QUIET_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(300);
    let Some(rig) = Rig::new().await else { return };
    rig.write(&rig.spec().replicas(2));
    let mut watch = rig.s.spawn("watch", &["--resync", "60s"]);
    watch.applied();
    // The first resync reads back what the rollout changed; from then on the cluster is quiet.
    watch.wait_for(Stream::Stderr, "plan (Resync)");
    let from = rig.fake.requests().len();
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(quiet)).await;
    let since = requests_since(&rig, from);
    let listed: Vec<String> = since.iter().filter(|r| is_list(r)).map(line).collect();
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for r in &since {
        let watching = r.query.as_deref().is_some_and(|q| q.contains("watch=true") || q.contains("watch=1"));
        *kinds
            .entry(format!("{} {}{}", r.method, r.path, if watching { " (watch)" } else { "" }))
            .or_default() += 1;
    }
    println!(
        "| {} s quiet under `watch --resync 60s`, one Node pool of 2 | value |",
        started.elapsed().as_secs()
    );
    println!("| --- | --- |");
    println!("| list requests | {} |", listed.len());
    println!("| requests in all | {} |", since.len());
    for (kind, n) in &kinds {
        println!("| {kind} | {n} |");
    }
    watch.signal("TERM");
    assert!(listed.is_empty(), "{listed:#?}");
}
