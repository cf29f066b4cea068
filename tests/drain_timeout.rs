//! `spec.drain.timeoutAction` end to end, with real containers and the fake API server: a pod
//! whose budget (`minAvailable: 1` of a single replica) never allows its eviction, and a drain
//! timeout of 3s. `Halt` (the default) keeps the old container running; `Force` deletes the pod
//! at the timeout and stops the container once it is gone; `Proceed` stops the container with
//! the pod left on its Node. A run killed between an abandoned drain and the stop drains again.

use std::time::{Duration, Instant, SystemTime};

use crate::support::cli::Stream;
use crate::support::fake_kube::{EventKind, PdbBound, RequestRecord, Store};
use crate::support::rig::{LIMIT, Rig};

/// The pool's one old Node runs the one pod of app `solo`, under a budget that never allows its
/// eviction; the source then holds a new template, with `action` as `timeoutAction` if given.
/// The old Node and the pod's name.
async fn blocked_by_a_budget(rig: &Rig, action: Option<&str>) -> (String, String) {
    let v1 = rig.spec().replicas(1);
    let old = rig.start(&v1).await.remove(0);
    rig.fake.add_app("default", "solo", 1);
    rig.fake.put_pdb("default", "solo", "solo", PdbBound::MinAvailable(1));
    // Running, not Pending: a pending pod is evicted whatever its budget says.
    let running = |st: &Store| {
        st.pods_on(&old).any(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
    };
    tokio::time::timeout(LIMIT, rig.fake.wait_until(running)).await.expect("the app runs on the old Node");
    let pods = rig.fake.pods_with_labels("default", &[("app", "solo")]);
    let pod = pods[0].metadata.name.clone().expect("a named pod");
    let mut v2 = v1.env("VERSION", "2");
    if let Some(action) = action {
        v2 = v2.drain_timeout_action(action);
    }
    rig.write(&v2);
    (old, pod)
}

fn pod_path(pod: &str) -> String {
    format!("/api/v1/namespaces/default/pods/{pod}")
}

fn evictions_of(rig: &Rig, pod: &str) -> Vec<RequestRecord> {
    rig.fake.requests_matching("POST", &format!("{}/eviction", pod_path(pod)))
}

fn deletes_of(rig: &Rig, pod: &str) -> Vec<RequestRecord> {
    rig.fake.requests().into_iter().filter(|r| r.method == "DELETE" && r.path == pod_path(pod)).collect()
}

/// When Docker first said the container was stopping.
fn stopped(rig: &Rig, name: &str, since: SystemTime) -> SystemTime {
    rig.docker_events(since)
        .iter()
        .filter(|e| e.name == name && matches!(e.action.as_str(), "kill" | "die" | "stop"))
        .map(|e| e.at)
        .min()
        .unwrap_or_else(|| panic!("{name} did not stop"))
}

/// The Warning Event of `reason` on Node `node`: its note.
fn warning(rig: &Rig, node: &str, reason: &str) -> Option<String> {
    let told = rig.fake.events_about("Node", node);
    let event = told.iter().find(|e| e.reason.as_deref() == Some(reason))?;
    assert_eq!(event.type_.as_deref(), Some("Warning"), "{event:?}");
    Some(event.note.clone().unwrap_or_default())
}

#[tokio::test]
async fn halt_keeps_the_old_container_running_while_a_budget_holds_its_pod() {
    let Some(rig) = Rig::new().await else { return };
    let (old, pod) = blocked_by_a_budget(&rig, None).await;
    let run = rig.apply().expect_code(1);
    let said = format!("{}{}", run.stdout, run.stderr);
    assert!(said.contains("no PodDisruptionBudget was bypassed"), "{said}");
    assert!(!run.stdout.contains("past its timeout"), "{}", run.stdout);
    assert!(rig.fake.pod("default", &pod).is_some());
    assert_eq!(rig.containers().await.get(&old).map(|c| c.0), Some(true), "the old container runs");
    assert!(deletes_of(&rig, &pod).is_empty());
    assert!(warning(&rig, &old, "DrainFailed").is_some());
    assert!(warning(&rig, &old, "DrainForced").is_none() && warning(&rig, &old, "DrainAbandoned").is_none());
}

#[tokio::test]
async fn force_deletes_the_pod_at_the_timeout_and_only_then_stops_the_container() {
    let Some(rig) = Rig::new().await else { return };
    let (old, pod) = blocked_by_a_budget(&rig, Some("Force")).await;
    let since = SystemTime::now();
    let run = rig.apply().expect_code(0);
    assert!(
        run.stdout.contains(
            "a drain past its timeout (3s) deletes the pods left, whatever their PodDisruptionBudgets"
        ),
        "{}",
        run.stdout
    );

    // Evicted first, and refused by its budget every time; then deleted, once, with the UID
    // of the pod that was left.
    let evictions = evictions_of(&rig, &pod);
    assert!(!evictions.is_empty() && evictions.iter().all(|e| e.status == 429), "{evictions:?}");
    let deletes = deletes_of(&rig, &pod);
    assert_eq!(deletes.iter().map(|d| d.status).collect::<Vec<_>>(), [200], "{deletes:?}");
    let delete = &deletes[0];
    assert!(evictions.iter().all(|e| e.seq < delete.seq), "deleted after the last eviction was refused");
    let uid = rig.fake.events().iter().find_map(|e| match &e.kind {
        EventKind::PodCreated { name, uid, .. } if *name == pod => Some(uid.clone()),
        _ => None,
    });
    let sent = delete.body.as_ref().and_then(|b| b.pointer("/preconditions/uid")).and_then(|u| u.as_str());
    assert_eq!(sent.map(str::to_owned), uid, "{:?}", delete.body);
    // Not before the timeout: the Node was cordoned before its drain began.
    let events = rig.fake.events();
    let cordoned = events
        .iter()
        .find(|e| matches!(&e.kind, EventKind::NodeCordoned { node } if *node == old))
        .map(|e| e.at)
        .expect("the old Node was cordoned");
    assert!(delete.at.duration_since(cordoned) >= Duration::from_secs(3), "deleted before drainTimeout");

    // Gone before the container stopped.
    let gone = events
        .iter()
        .find(|e| matches!(&e.kind, EventKind::PodDeleted { name, .. } if *name == pod))
        .map(|e| e.wall)
        .expect("the pod is gone");
    let stop = stopped(&rig, &old, since);
    assert!(delete.wall < stop && gone < stop, "the container stopped before its pod was gone");
    assert!(!rig.containers().await.contains_key(&old));

    let note = warning(&rig, &old, "DrainForced").expect("a DrainForced Event on the Node");
    assert!(note.contains(&format!("default/{pod} (PodDisruptionBudget default/solo)")), "{note}");
    assert!(run.stdout.contains("deleted whatever their PodDisruptionBudgets"), "{}", run.stdout);
}

#[tokio::test]
async fn proceed_stops_the_container_leaving_the_pod_on_its_node() {
    let Some(rig) = Rig::new().await else { return };
    let (old, pod) = blocked_by_a_budget(&rig, Some("Proceed")).await;
    let since = SystemTime::now();
    let run = rig.apply().expect_code(0);
    assert!(
        run.stdout.contains("a drain past its timeout (3s) leaves the pods left on the Node"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("1 pod left on the Node, its container stops all the same"),
        "{}",
        run.stdout
    );
    let evictions = evictions_of(&rig, &pod);
    assert!(!evictions.is_empty() && evictions.iter().all(|e| e.status == 429), "{evictions:?}");
    assert!(deletes_of(&rig, &pod).is_empty(), "poolctl deleted no pod");

    // The pod was still there when the container stopped: it went with its Node, whose
    // deletion comes after the stop (the API server's garbage collector, here the fake's).
    let events = rig.fake.events();
    let seq = |matches: &dyn Fn(&EventKind) -> bool| {
        events.iter().find(|e| matches(&e.kind)).map(|e| (e.seq, e.wall))
    };
    let (node_gone, node_gone_at) = seq(&|k| matches!(k, EventKind::NodeDeleted { node } if *node == old))
        .expect("the old Node is deleted");
    let (pod_gone, _) = seq(&|k| matches!(k, EventKind::PodDeleted { name, .. } if *name == pod))
        .expect("the pod went with it");
    assert!(pod_gone > node_gone, "the pod went before its Node");
    assert!(stopped(&rig, &old, since) < node_gone_at);

    let note = warning(&rig, &old, "DrainAbandoned").expect("a DrainAbandoned Event on the Node");
    assert!(note.contains(&format!("default/{pod} (PodDisruptionBudget default/solo)")), "{note}");
}

/// A run killed between its drain's `Proceed` and the stop (a pre-terminate hook holds the
/// retirement there) leaves nothing that says the Node was drained: the next run drains it
/// again, to its timeout, before the container stops.
#[tokio::test]
async fn a_run_killed_after_its_drain_was_abandoned_drains_again_before_the_stop() {
    let Some(rig) = Rig::new().await else { return };
    let (old, pod) = blocked_by_a_budget(&rig, Some("Proceed")).await;
    let hook = "pre-terminate.delete.hook.poolctl.dev/backup";
    rig.fake.store().update_node(&old, |n| {
        n.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(hook.to_owned(), "test".to_owned());
    });
    let since = SystemTime::now();
    let mut apply = rig.spawn_apply_to_kill();
    apply.wait_for(Stream::Stdout, "waiting for its pre-terminate hooks");
    assert!(warning(&rig, &old, "DrainAbandoned").is_some(), "{}", apply.output(Stream::Stdout));
    apply.kill();
    let killed = Instant::now();
    assert_eq!(rig.containers().await.get(&old).map(|c| c.0), Some(true), "the old container runs");

    rig.fake.store().update_node(&old, |n| {
        n.metadata.annotations.get_or_insert_with(Default::default).remove(hook);
    });
    let run = rig.apply_after_kill().expect_code(0);
    let again: Vec<RequestRecord> = evictions_of(&rig, &pod).into_iter().filter(|e| e.at > killed).collect();
    assert!(!again.is_empty(), "the next run did not drain again: {}", run.stdout);
    let last = again.iter().map(|e| e.wall).max().unwrap_or(SystemTime::UNIX_EPOCH);
    assert!(last < stopped(&rig, &old, since), "the container stopped before the drain ran again");
    assert!(run.stdout.contains("its container stops all the same"), "{}", run.stdout);
}
