//! Act only on what poolctl sees and owns (issue 26): a Node that is not poolctl's, or whose
//! container is out of view rather than gone, is left alone; a container without poolctl's
//! labels is never stopped; a Node uncordoned while its retirement waits is drained again
//! before its container stops. Real containers, the fake API server, the poolctl binary.

use std::time::Duration;

use serde_json::Value;

use crate::support::cli::Stream;
use crate::support::fake_kube::PodSpecBuilder;
use crate::support::rig::Rig;

/// The annotations poolctl writes on a Node to tie it to its container.
const CONTAINER_ID: &str = "poolctl.dev/container-id";
const DOCKER_HOST: &str = "poolctl.dev/docker-host";

fn annotate(rig: &Rig, node: &str, annotations: &[(&str, &str)]) {
    rig.fake.store().update_node(node, |n| {
        let a = n.metadata.annotations.get_or_insert_with(Default::default);
        for (k, v) in annotations {
            a.insert((*k).to_owned(), (*v).to_owned());
        }
    });
}

fn pool_instance<'a>(plan: &'a Value, name: &str) -> &'a Value {
    let instances = plan["pools"][0]["instances"].as_array().expect("instances");
    instances.iter().find(|i| i["name"] == name).unwrap_or_else(|| panic!("{name} in {plan:#}"))
}

/// Every Node poolctl made names its container and daemon, which plan -o json shows as the
/// proof, beside the container's own.
#[tokio::test]
async fn each_node_carries_poolctls_reference_to_its_container_and_the_plan_shows_the_proof() {
    let Some(rig) = Rig::new().await else { return };
    rig.start(&rig.spec().replicas(2)).await;
    let host = rig.s.docker().host();
    let run = rig.poolctl("plan", &["-o", "json"]).expect_code(0);
    let plan: Value = serde_json::from_str(&run.stdout).expect("plan JSON");
    for c in rig.s.containers().await {
        let node = rig.fake.node(&c.name).expect("its Node");
        let a = node.metadata.annotations.unwrap_or_default();
        assert_eq!(a.get(CONTAINER_ID), Some(&c.id), "{a:?}");
        assert_eq!(a.get(DOCKER_HOST), Some(&host), "{a:?}");
        let proof = &pool_instance(&plan, &c.name)["proof"];
        assert_eq!(proof["container"]["container_id"], c.id.as_str(), "{proof}");
        assert_eq!(proof["node"]["container_id"], c.id.as_str(), "{proof}");
        assert_eq!(proof["node"]["docker_host"], host.as_str(), "{proof}");
    }
}

/// kind's own `dev-worker`, say, labelled by hand with the pool's label: its container carries
/// none of poolctl's labels, its Node no reference of poolctl's. A rollout of the pool leaves
/// both alone, and the plan says why.
#[tokio::test]
async fn a_node_labelled_by_hand_over_a_container_that_is_not_poolctls_is_left_alone() {
    let Some(rig) = Rig::new().await else { return };
    let v1 = rig.spec().replicas(1);
    rig.start(&v1).await;
    // Its own kubelet registered its Node (the fake's kubelet follows poolctl's containers
    // only, so the Node is added as that kubelet would), and somebody labelled it.
    let stranger = rig.s.docker().start_stranger("stranger").await;
    rig.fake.add_node_with_labels(&stranger, true, &[("poolctl.dev/pool", rig.pool())]);
    rig.write(&v1.clone().env("VERSION", "2"));

    let plan = rig.poolctl("plan", &[]).expect_code(0).stdout;
    let row = plan.lines().find(|l| l.contains(&stranger) && l.contains("left alone")).unwrap_or_default();
    assert!(row.contains("not poolctl's"), "{plan}");
    assert!(!plan.contains(&format!("delete-node {stranger}")), "{plan}");
    let json = rig.poolctl("plan", &["-o", "json"]).expect_code(0).stdout;
    let json: Value = serde_json::from_str(&json).expect("plan JSON");
    let row = pool_instance(&json, &stranger);
    assert_eq!((row["fate"].as_str(), &row["proof"]["node"]), (Some("keep"), &Value::Null), "{row}");

    rig.apply().expect_code(0);
    assert!(rig.s.docker().is_running(&stranger).await, "the container that is not poolctl's runs on");
    let node = rig.fake.node(&stranger).expect("its Node is left");
    assert_ne!(node.spec.and_then(|s| s.unschedulable), Some(true), "and not cordoned");
}

/// Should a plan ever name it, the Docker backend itself refuses to stop or remove a container
/// that does not carry poolctl's pool label, whatever its name.
#[tokio::test]
async fn the_docker_backend_never_stops_or_removes_a_container_that_is_not_poolctls() {
    use poolctl::backend::{BackendError, Containers as _};
    let Some(rig) = Rig::new().await else { return };
    let stranger = rig.s.docker().start_stranger("stranger").await;
    let docker = &rig.s.docker().backend;
    let stop = docker.stop(&stranger, Duration::from_secs(1)).await;
    assert!(matches!(stop, Err(BackendError::NotOurs(ref n)) if n == &stranger), "{stop:?}");
    let remove = docker.remove(&stranger).await;
    assert!(matches!(remove, Err(BackendError::NotOurs(_))), "{remove:?}");
    let may_run = docker.may_run(&stranger).await;
    assert!(matches!(may_run, Err(BackendError::NotOurs(_))), "{may_run:?}");
    assert!(rig.s.docker().is_running(&stranger).await);
}

/// A Ready Node of the pool whose container lives on a daemon this run does not list (the pool
/// moved, the daemon is down) is out of view, not gone: it is shown and left alone. Once its
/// kubelet has been silent past the pool's timeout, it counts as gone and its Node is deleted.
#[tokio::test]
async fn a_ready_node_whose_container_is_out_of_view_is_left_until_its_kubelet_is_silent_past_its_timeout() {
    let Some(rig) = Rig::new().await else { return };
    let v1 = rig.spec().replicas(1).health("2s", "100%");
    rig.start(&v1).await;
    let unseen = format!("{}-unseen", rig.pool());
    rig.fake.add_node_with_labels(&unseen, true, &[("poolctl.dev/pool", rig.pool())]);
    let id = "ab".repeat(32);
    annotate(&rig, &unseen, &[(CONTAINER_ID, &id), (DOCKER_HOST, "tcp://198.51.100.7:2376")]);

    let plan = rig.poolctl("plan", &[]).expect_code(0).stdout;
    let row = plan.lines().find(|l| l.contains(&unseen) && l.contains("left alone")).unwrap_or_default();
    assert!(row.contains("out of view"), "{plan}");
    rig.apply().expect_code(0);
    assert!(rig.fake.node(&unseen).is_some(), "a Node whose container may run is not deleted");

    // Its kubelet fell silent a minute ago (by the API server's clock): past the pool's 2s,
    // the Node counts as gone.
    rig.fake.store().update_node(&unseen, |n| {
        let status = n.status.get_or_insert_with(Default::default);
        let ready = status.conditions.get_or_insert_with(Vec::new).iter_mut().find(|c| c.type_ == "Ready");
        let ready = ready.expect("a Ready condition");
        ready.status = "Unknown".into();
        let a_minute_ago =
            k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(60);
        ready.last_transition_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(a_minute_ago));
    });
    let plan = rig.poolctl("plan", &[]).expect_code(0).stdout;
    assert!(plan.contains(&format!("delete-node {unseen}")), "{plan}");
    rig.apply().expect_code(0);
    assert!(rig.fake.node(&unseen).is_none(), "the silent Node is deleted");
}

/// A Node's container proven gone from a daemon this run lists (its recorded ID is not there)
/// is retired at once, as before: absence from a listed daemon is evidence.
#[tokio::test]
async fn a_node_whose_recorded_container_is_gone_from_a_listed_daemon_is_deleted() {
    let Some(rig) = Rig::new().await else { return };
    rig.start(&rig.spec().replicas(1)).await;
    let gone = format!("{}-gone", rig.pool());
    rig.fake.add_node_with_labels(&gone, true, &[("poolctl.dev/pool", rig.pool())]);
    let host = rig.s.docker().host();
    annotate(&rig, &gone, &[(CONTAINER_ID, &"cd".repeat(32)), (DOCKER_HOST, &host)]);
    let plan = rig.poolctl("plan", &[]).expect_code(0).stdout;
    assert!(plan.contains(&format!("delete-node {gone}")), "{plan}");
    rig.apply().expect_code(0);
    assert!(rig.fake.node(&gone).is_none());
}

/// Somebody uncordons the old Node while its retirement waits for a pre-terminate hook, and a
/// pod lands on it: the container is not stopped with that pod on it. The Node is cordoned and
/// drained again once the hook is gone, and only then does the container stop.
#[tokio::test]
async fn a_node_uncordoned_during_a_pre_terminate_hook_wait_is_drained_again_before_it_stops() {
    let Some(rig) = Rig::new().await else { return };
    let v1 = rig.spec().replicas(1);
    let old = rig.start(&v1).await.remove(0);
    let hook = "pre-terminate.delete.hook.poolctl.dev/backup";
    annotate(&rig, &old, &[(hook, "test")]);
    rig.write(&v1.clone().env("VERSION", "2"));
    let mut apply = crate::support::cli::Process::spawn(rig.s.command("apply", &["--yes"]));
    apply.wait_for(Stream::Stdout, "waiting for its pre-terminate hooks");

    // Uncordoned by hand, and a pod placed on it meanwhile.
    rig.fake
        .store()
        .update_node(&old, |n| n.spec.get_or_insert_with(Default::default).unschedulable = Some(false));
    rig.fake.add_pod(&PodSpecBuilder::new("default", "late", &old).owner(Some("ReplicaSet")));
    rig.fake.store().update_node(&old, |n| {
        n.metadata.annotations.get_or_insert_with(Default::default).remove(hook);
    });
    assert!(apply.wait().success(), "{}", apply.output(Stream::Stdout));
    let said = apply.output(Stream::Stdout);
    assert!(said.contains("uncordoned after its drain"), "{said}");
    // The late pod was evicted before the container stopped.
    let evicted = rig.fake.evictions().iter().any(|e| e.pod == "late" && e.status == 201);
    assert!(evicted, "{:?}", rig.fake.evictions());
    assert!(rig.fake.pod("default", "late").is_none());
    assert!(!rig.containers().await.contains_key(&old));
}

/// poolctl's records lost all the same (an older poolctl kept them as never-started containers,
/// which `docker container prune` deletes; the volumes it keeps now can be removed by hand): a
/// template change with `maxUnavailable: 0` afterwards still keeps three Ready, schedulable pool
/// Nodes at every moment. A lost record never costs serving capacity.
#[tokio::test]
async fn with_its_records_lost_a_rollout_never_has_fewer_than_replicas_ready_nodes() {
    let Some(rig) = Rig::new().await else { return };
    let v1 = rig.spec();
    rig.start(&v1).await;
    let records = docker_names(&["volume", "ls"], rig.s.docker().case_label());
    assert_eq!(records.len(), 6, "three up records, a rollout record, a revision and its end: {records:?}");
    let removed = std::process::Command::new("docker")
        .args(["volume", "rm", "--force"])
        .args(&records)
        .output()
        .expect("docker volume rm");
    assert!(removed.status.success(), "{}", String::from_utf8_lossy(&removed.stderr));

    let from = rig.last_seq();
    rig.write(&v1.clone().env("VERSION", "2"));
    rig.apply().expect_code(0);
    let events = rig.events_after(from);
    assert!(
        events.iter().any(|e| matches!(e.kind, crate::support::fake_kube::EventKind::NodeCordoned { .. }))
    );
    for e in &events {
        let serving = e.ready_schedulable.iter().filter(|n| rig.is_pool_node(n)).count();
        assert!(serving >= 3, "only {serving} pool Nodes serve after {:?}", e.kind);
    }
    assert_eq!(rig.containers().await.len(), 3);
}

/// What `docker` shows of a scope: its containers (`ps -a`) and its volumes, by name.
fn docker_names(what: &[&str], case: (&str, &str)) -> Vec<String> {
    let filter = format!("label={}={}", case.0, case.1);
    let out = std::process::Command::new("docker")
        .args(what)
        .args(["--filter", &filter, "--format", if what[0] == "ps" { "{{.Names}}" } else { "{{.Name}}" }])
        .output()
        .expect("docker runs");
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect();
    names.sort();
    names
}

/// poolctl keeps its records where `docker container prune` and `docker system prune` do not
/// reach (volumes), `docker ps -a` shows a pool's instances and nothing else, and a teardown
/// (`apply --prune` once the pool is gone from the source) leaves nothing of the pool behind.
#[tokio::test]
async fn records_survive_a_prune_docker_ps_shows_only_instances_and_a_teardown_leaves_nothing() {
    let Some(s) = crate::support::scenario::Scenario::with_docker().await else { return };
    s.write_pool(&s.pool().replicas(3));
    s.run("apply", &["--yes"]).expect_code(0);
    let case = s.docker().case_label();
    let instances: Vec<String> = s.containers().await.into_iter().map(|c| c.name).collect();
    assert_eq!(instances.len(), 3);
    assert_eq!(docker_names(&["ps", "-a"], case), instances, "docker ps -a shows the instances only");
    let records = docker_names(&["volume", "ls"], case);
    assert_eq!(records.len(), 6, "three up records, the rollout record, a revision and its end: {records:?}");

    let filter = format!("label={}={}", case.0, case.1);
    let pruned = std::process::Command::new("docker")
        .args(["system", "prune", "--force", "--filter", &filter])
        .output()
        .expect("docker system prune");
    assert!(pruned.status.success(), "{}", String::from_utf8_lossy(&pruned.stderr));
    assert_eq!(docker_names(&["volume", "ls"], case), records, "the records survive a prune");
    let plan = s.run("plan", &["--detailed-exitcode"]);
    assert_eq!(plan.code, 0, "nothing to do after a prune:\n{}", plan.stdout);

    std::fs::remove_file(s.dir().join("pool.yaml")).expect("remove the pool from the source");
    s.run("apply", &["--yes", "--prune", "--allow-empty"]).expect_code(0);
    assert_eq!(docker_names(&["ps", "-a"], case), Vec::<String>::new());
    assert_eq!(docker_names(&["volume", "ls"], case), Vec::<String>::new(), "nothing of the pool is left");
}
