//! End-to-end: the poolctl binary against real Docker and the fake Kubernetes API server, whose
//! simulated kubelet turns the pool's containers into Nodes. The order of what happened is read
//! back from the fake's event and request logs and from Docker's own event stream.

use std::collections::BTreeSet;
use std::time::SystemTime;

use crate::support::cli::Stream;
use crate::support::docker::DockerEvent;
use crate::support::fake_kube::{Event, EventKind, PdbBound, ReadyPolicy};
use crate::support::rig::Rig;

use crate::support::rig::LIMIT;

pub(crate) fn node_event(e: &Event) -> Option<(&'static str, &str)> {
    match &e.kind {
        EventKind::NodeReady { node } => Some(("ready", node)),
        EventKind::NodeCordoned { node } => Some(("cordon", node)),
        EventKind::NodeDeleted { node } => Some(("delete", node)),
        EventKind::PodEvicted { node: Some(node), .. } => Some(("evict", node)),
        _ => None,
    }
}

/// When the fake first (or last) saw `what` happen to `node`.
pub(crate) fn when(events: &[Event], what: &str, node: &str, last: bool) -> Option<SystemTime> {
    let mut hits = events.iter().filter(|e| node_event(e) == Some((what, node))).map(|e| e.wall);
    if last { hits.next_back() } else { hits.next() }
}

pub(crate) fn docker_when(events: &[DockerEvent], actions: &[&str], name: &str) -> Option<SystemTime> {
    events.iter().filter(|e| e.name == name && actions.contains(&e.action.as_str())).map(|e| e.at).min()
}

#[tokio::test]
async fn a_rolling_update_keeps_three_ready_nodes_and_retires_each_in_order() {
    let Some(rig) = Rig::new().await else { return };
    let v1 = rig.spec();
    let old = rig.start(&v1).await;
    // One app pod per Node, so that every retirement evicts something.
    rig.fake.add_app("default", "web", 3);
    let placed = |s: &crate::support::fake_kube::Store| {
        s.pods().filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()).count() == 3
    };
    tokio::time::timeout(LIMIT, rig.fake.wait_until(placed)).await.expect("the app runs");

    let from = rig.last_seq();
    let since = SystemTime::now();
    rig.write(&v1.clone().env("VERSION", "2"));
    let run = rig.apply().expect_code(0);
    assert!(run.stdout.contains("Apply complete"), "{}", run.stdout);
    let events = rig.events_after(from);
    let docker_events = rig.docker_events(since);

    // At every moment at least 3 pool Nodes are Ready and schedulable.
    for e in &events {
        let serving = e.ready_schedulable.iter().filter(|n| rig.is_pool_node(n)).count();
        assert!(serving >= 3, "only {serving} pool Nodes serve after {:?}", e.kind);
    }
    // The k-th cordon comes after at least k new Nodes turned Ready.
    let old_set: BTreeSet<&str> = old.iter().map(String::as_str).collect();
    let mut new_ready = 0;
    let mut cordons = 0;
    for e in &events {
        match node_event(e) {
            Some(("ready", n)) if !old_set.contains(n) => new_ready += 1,
            Some(("cordon", n)) if old_set.contains(n) => {
                cordons += 1;
                assert!(new_ready >= cordons, "cordon of {n} before its surge Node was Ready");
            }
            _ => {}
        }
    }
    assert_eq!(cordons, 3);
    // Per old instance: cordon < evictions < container stop < Node delete < container remove.
    for name in &old {
        let cordon = when(&events, "cordon", name, false).expect("cordoned");
        let first_eviction = when(&events, "evict", name, false).expect("its pod was evicted");
        let last_eviction = when(&events, "evict", name, true).expect("evicted");
        let stop = docker_when(&docker_events, &["kill", "die", "stop"], name).expect("stopped");
        let delete = when(&events, "delete", name, false).expect("Node deleted");
        let remove = docker_when(&docker_events, &["destroy"], name).expect("removed");
        assert!(cordon < first_eviction, "{name}: cordon < eviction");
        assert!(last_eviction < stop, "{name}: evictions < stop");
        assert!(stop < delete, "{name}: stop < Node delete");
        assert!(delete < remove, "{name}: Node delete < remove");
    }
    // Converged: three new instances, each a labelled, Ready, schedulable Node; no old Node
    // came back (the kubelet re-registers a deleted Node whose container still runs).
    let containers = rig.containers().await;
    assert_eq!(containers.len(), 3);
    assert!(containers.keys().all(|n| !old_set.contains(n.as_str())));
    assert!(containers.values().all(|(running, _)| *running));
    let nodes = rig.nodes();
    assert_eq!(nodes.keys().collect::<Vec<_>>(), containers.keys().collect::<Vec<_>>());
    assert!(nodes.values().all(|&(ready, unsched, _)| ready && !unsched));
    let run = rig.poolctl("plan", &["--detailed-exitcode"]);
    assert_eq!(run.code, 0, "nothing left to do:\n{}", run.stdout);
}

#[tokio::test]
async fn a_pdb_at_its_minimum_halts_the_drain_until_relaxed_and_orphans_are_deleted() {
    let Some(rig) = Rig::new().await else { return };
    let v1 = rig.spec().replicas(1);
    let old = rig.start(&v1).await.remove(0);
    rig.fake.add_app("default", "web", 1);
    rig.fake.put_pdb("default", "web-pdb", "web", PdbBound::MinAvailable(1));
    let orphan = format!("{}-orphan", rig.pool());
    rig.fake.add_node_with_labels(&orphan, true, &[("poolctl.dev/pool", rig.pool())]);
    // poolctl's reference to a container that is gone from the daemon it names.
    rig.fake.store().update_node(&orphan, |n| {
        let a = n.metadata.annotations.get_or_insert_with(Default::default);
        a.insert("poolctl.dev/container-id".into(), "0".repeat(64));
        a.insert("poolctl.dev/docker-host".into(), rig.s.docker().host());
    });
    rig.write(&v1.clone().env("VERSION", "2"));

    // The plan shows the pods to evict and the budget that will make the drain wait.
    let plan = rig.poolctl("plan", &[]).expect_code(0).stdout;
    let web = rig.fake.pods_with_labels("default", &[("app", "web")]).remove(0);
    let web = web.metadata.name.unwrap();
    assert!(plan.contains(&format!("evict default/{web}  (ReplicaSet)")), "{plan}");
    assert!(plan.contains("drain will wait: PDB default/web-pdb allows 0 disruptions"), "{plan}");
    let orphan_row = plan.lines().find(|l| l.contains(&orphan)).expect("the orphan is listed");
    assert!(orphan_row.contains("missing") && orphan_row.contains("retire"), "{orphan_row}");
    assert!(plan.contains(&format!("delete-node {orphan}")), "{plan}");

    let run = rig.apply().expect_code(1);
    let said = format!("{}{}", run.stdout, run.stderr);
    assert!(said.contains("The disruption budget web-pdb needs 1 healthy pods"), "{said}");
    assert!(said.contains(&format!("failed: drain {old}")), "{said}");
    // Halted: the orphan is gone, the old container still runs, its Node stays cordoned by us.
    assert!(rig.fake.node(&orphan).is_none());
    assert_eq!(rig.containers().await.get(&old).map(|c| c.0), Some(true));
    assert_eq!(rig.nodes().get(&old), Some(&(true, true, true)));
    assert_eq!(rig.fake.pods_with_labels("default", &[("app", "web")]).len(), 1);
    assert!(rig.fake.evictions().iter().all(|e| e.status == 429), "no PDB was bypassed");

    // Relaxed, the next apply finishes the retirement without cordoning again.
    rig.fake.put_pdb("default", "web-pdb", "web", PdbBound::MaxUnavailable(1));
    let from = rig.last_seq();
    let run = rig.apply().expect_code(0);
    assert!(!run.stdout.contains(&format!("cordon      {old}")), "{}", run.stdout);
    assert!(rig.events_after(from).iter().all(|e| node_event(e).is_none_or(|(w, _)| w != "cordon")));
    let containers = rig.containers().await;
    assert_eq!(containers.len(), 1);
    assert!(!containers.contains_key(&old) && rig.fake.node(&old).is_none());
}

#[tokio::test]
async fn a_drain_a_budget_holds_past_the_progress_deadline_is_progress_not_a_stall() {
    let Some(rig) = Rig::new().await else { return };
    // A deadline far shorter than the time the budget holds the first drain up, and a rollback
    // that would tear the new instances down if that time counted as a stall.
    let v1 = rig.spec().replicas(2).drain_timeout("1m").progress_deadline("3s").rollback();
    rig.start(&v1).await;
    rig.fake.add_app("default", "web", 2);
    let placed = |s: &crate::support::fake_kube::Store| {
        s.pods().filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()).count() == 2
    };
    tokio::time::timeout(LIMIT, rig.fake.wait_until(placed)).await.expect("the app runs");
    rig.fake.put_pdb("default", "web-pdb", "web", PdbBound::MinAvailable(2));
    rig.write(&v1.clone().env("VERSION", "2"));

    // Watch carries it out: an explicit apply would try a stalled rollout again anyway.
    let mut watch = rig.s.spawn("watch", &["--resync", "500ms"]);
    let refused = |s: &crate::support::fake_kube::Store| s.evictions().iter().any(|e| e.status == 429);
    tokio::time::timeout(LIMIT, rig.fake.wait_until(refused)).await.expect("the budget holds the drain");
    // The scenario: the budget holds the drain for twice the deadline.
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    // Meanwhile another look does not call the busy rollout stalled: its run holds the lock.
    let plan = rig.poolctl("plan", &[]).stdout;
    assert!(!plan.contains("degraded") && !plan.contains("Degraded"), "{plan}");
    // And `status` says what it waits for.
    let status = rig.poolctl("status", &[]).stdout;
    assert!(
        status.contains("its retirement waits for PDB default/web-pdb, which allows 0 disruptions"),
        "{status}"
    );
    rig.fake.put_pdb("default", "web-pdb", "web", PdbBound::MaxUnavailable(1));

    watch.wait_for(Stream::Stderr, "in sync");
    watch.signal("TERM");
    let said = format!("{}{}", watch.output(Stream::Stdout), watch.output(Stream::Stderr));
    assert!(said.contains("Apply complete"), "{said}");
    assert!(!said.contains("rolling back") && !said.contains("Degraded"), "{said}");
    // On the new template, every instance; never told Degraded.
    let v2 = rig.template_hash();
    let run = rig.poolctl("plan", &["--detailed-exitcode"]);
    assert_eq!(run.code, 0, "converged:\n{}", run.stdout);
    let instances = rig.s.docker().containers().await;
    assert_eq!(instances.len(), 2);
    assert!(instances.iter().all(|c| c.template_hash == v2), "{instances:?}");
    let told = rig.fake.events_about("Lease", &format!("poolctl-{}", rig.pool()));
    assert!(told.iter().all(|e| e.reason.as_deref() != Some("RolloutDegraded")), "{told:#?}");
}

#[tokio::test]
async fn a_management_deployment_is_rescheduled_before_its_node_goes() {
    let Some(rig) = Rig::new().await else { return };
    let v1 = rig.spec().replicas(1);
    let old = rig.start(&v1).await.remove(0);
    // The seed's scenario: the cluster's own management components, two replicas and a budget
    // of one, all on the one Node that is about to be replaced.
    rig.fake.add_app("capi-system", "manager", 2);
    rig.fake.put_pdb("capi-system", "manager", "manager", PdbBound::MinAvailable(1));
    let healthy = |s: &crate::support::fake_kube::Store| {
        s.events().last().is_some_and(|e| e.app_healthy.get("capi-system/manager") == Some(&2))
    };
    tokio::time::timeout(LIMIT, rig.fake.wait_until(healthy)).await.expect("the app runs");
    let from = rig.last_seq();
    rig.write(&v1.clone().env("VERSION", "2"));
    rig.apply().expect_code(0);

    let events = rig.events_after(from);
    for e in &events {
        let n = e.app_healthy.get("capi-system/manager").copied().unwrap_or(0);
        assert!(n >= 1, "no manager replica available after {:?}", e.kind);
    }
    let deleted = events.iter().find(|e| node_event(e) == Some(("delete", &old))).expect("old Node deleted");
    let new = rig.containers().await.into_keys().next().expect("the new instance");
    // Like `kubectl drain`, the drain waits for the evicted pods to go, not for their
    // replacements to start: the budget is what guarantees that one replica was running on the
    // new Node before the second one could be evicted, well before the old Node went away.
    let before: Vec<&Event> = events.iter().filter(|e| e.seq < deleted.seq).collect();
    let moved = before
        .iter()
        .filter(|e| matches!(&e.kind, EventKind::PodScheduled { node, .. } if *node == new))
        .count();
    assert!(moved >= 1, "a replica runs on {new} before {old} goes away");
    let evicted_from_old = before
        .iter()
        .filter(|e| matches!(&e.kind, EventKind::PodEvicted { node: Some(n), .. } if *n == old))
        .count();
    assert_eq!(evicted_from_old, 2, "both replicas left {old} before its Node was deleted");
    let both = |s: &crate::support::fake_kube::Store| {
        s.pods()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(new.as_str()))
            .count()
            == 2
    };
    tokio::time::timeout(LIMIT, rig.fake.wait_until(both)).await.expect("both replicas run on the new Node");
    assert_eq!(rig.fake.evictions().iter().filter(|e| e.status == 201).count(), 2);
}

#[tokio::test]
async fn a_new_node_that_never_turns_ready_halts_the_rollout_with_nothing_retired() {
    let Some(rig) = Rig::new().await else { return };
    let v1 = rig.spec().replicas(2).ready_timeout("2s");
    let old = rig.start(&v1).await;
    let v2 = v1.clone().env("VERSION", "2");
    rig.write(&v2);
    let hash = rig.template_hash();
    rig.fake.set_ready_policy(&format!("{}-{}", rig.pool(), &hash[..10]), ReadyPolicy::Never);
    let from = rig.last_seq();

    let run = rig.apply().expect_code(1);
    assert!(run.stdout.contains("did not turn Ready: timed out after 2s"), "{}", run.stdout);
    assert!(run.stdout.contains("not started: cordon"), "{}", run.stdout);
    let events = rig.events_after(from);
    // Nothing happened to the old Nodes; the new one, whose Node registered but never turned
    // Ready, was cordoned before its container was stopped.
    let on_old = events.iter().filter_map(node_event).filter(|(_, n)| old.iter().any(|o| o == n));
    assert!(on_old.clone().all(|(what, _)| what == "ready"), "{:?}", on_old.collect::<Vec<_>>());
    let new_cordons =
        events.iter().filter_map(node_event).filter(|(w, n)| *w == "cordon" && n.contains(&hash[..10]));
    assert_eq!(new_cordons.count(), 1, "the abandoned Node is cordoned");
    let containers = rig.containers().await;
    for name in &old {
        assert_eq!(containers.get(name).map(|c| c.0), Some(true), "{name} still runs");
        assert_eq!(rig.nodes().get(name), Some(&(true, false, false)), "{name} still serves");
    }
}

#[tokio::test]
async fn killing_apply_during_a_drain_and_rerunning_it_converges_with_nothing_lost() {
    let Some(rig) = Rig::new().await else { return };
    let v1 = rig.spec().replicas(1).drain_timeout("60s");
    let old = rig.start(&v1).await.remove(0);
    rig.fake.add_app("default", "web", 1);
    // The budget holds the drain open, so that the kill lands in the middle of it.
    rig.fake.put_pdb("default", "web-pdb", "web", PdbBound::MinAvailable(1));
    rig.write(&v1.clone().env("VERSION", "2"));

    let mut apply = rig.spawn_apply_to_kill();
    let evicting = rig.fake.wait_until(|s| !s.evictions().is_empty());
    let seen = tokio::time::timeout(LIMIT, evicting).await;
    apply.kill(); // kill(2) with SIGKILL: no chance to clean up
    seen.expect("the drain started");

    // Half-retired: cordoned by poolctl, container running, and a new instance serving.
    assert_eq!(rig.nodes().get(&old), Some(&(true, true, true)));
    assert_eq!(rig.containers().await.len(), 2);
    let plan = rig.poolctl("plan", &[]).expect_code(0).stdout;
    let row = plan.lines().find(|l| l.contains(&old)).expect("the old instance is listed");
    assert!(row.contains("  ready, cordoned by poolctl (retiring)  ") && row.contains("retire"), "{row}");

    rig.fake.put_pdb("default", "web-pdb", "web", PdbBound::MaxUnavailable(1));
    rig.apply_after_kill().expect_code(0);
    let containers = rig.containers().await;
    assert_eq!(containers.len(), 1, "no orphan container: {containers:?}");
    assert!(!containers.contains_key(&old));
    let nodes = rig.nodes();
    assert_eq!(nodes.keys().collect::<Vec<_>>(), containers.keys().collect::<Vec<_>>(), "no orphan Node");
    // Nothing lost: the app still has its replica, now on the new Node.
    let new = containers.keys().next().unwrap().clone();
    let placed = |s: &crate::support::fake_kube::Store| {
        let web: Vec<_> = s.pods().filter(|p| p.metadata.namespace.as_deref() == Some("default")).collect();
        web.len() == 1 && web[0].spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(new.as_str())
    };
    tokio::time::timeout(LIMIT, rig.fake.wait_until(placed)).await.expect("the replica runs on the new Node");
}

#[tokio::test]
async fn pruning_a_pool_of_nodes_cordons_drains_and_deletes_them() {
    let Some(rig) = Rig::new().await else { return };
    let old = rig.start(&rig.spec().replicas(1)).await.remove(0);
    rig.fake.add_app("default", "web", 1);
    let placed = |s: &crate::support::fake_kube::Store| {
        s.pods().any(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
    };
    tokio::time::timeout(LIMIT, rig.fake.wait_until(placed)).await.expect("the app runs");
    // The pool file goes, and with it the `node:` section: only the container's labels still
    // say that it is a Node, and of which cluster.
    std::fs::remove_file(rig.s.dir().join("pool.yaml")).expect("remove the pool file");

    // The source is empty on purpose here.
    let plan = rig.poolctl("plan", &["--prune", "--allow-empty"]).expect_code(0).stdout;
    for verb in ["cordon", "drain", "stop", "delete-node", "remove"] {
        assert!(plan.contains(&format!("{verb:<11} {old}")), "{verb} {old}:\n{plan}");
    }
    let web = rig.fake.pods_with_labels("default", &[("app", "web")]).remove(0).metadata.name.unwrap();
    assert!(plan.contains(&format!("evict default/{web}")), "{plan}");

    let from = rig.last_seq();
    let since = SystemTime::now();
    let run = rig.poolctl("apply", &["--yes", "--prune", "--allow-empty"]).expect_code(0);
    assert!(run.stdout.contains("Apply complete"), "{}", run.stdout);
    let events = rig.events_after(from);
    let docker_events = rig.docker_events(since);
    let cordon = when(&events, "cordon", &old, false).expect("cordoned");
    let eviction = when(&events, "evict", &old, true).expect("its pod was evicted");
    let stop = docker_when(&docker_events, &["kill", "die", "stop"], &old).expect("stopped");
    let delete = when(&events, "delete", &old, false).expect("Node deleted");
    let remove = docker_when(&docker_events, &["destroy"], &old).expect("removed");
    assert!(cordon < eviction, "cordon < eviction");
    assert!(eviction < stop, "eviction < stop");
    assert!(stop < delete, "stop < Node delete");
    assert!(delete < remove, "Node delete < remove");
    assert!(rig.containers().await.is_empty());
    assert!(rig.nodes().is_empty(), "no Node left: {:?}", rig.nodes());
}
