//! The world keeps the history (issue 27, item 4): each rollout of a pool is a revision recorded
//! beside its instances, with its template, commit, start, end and result; `poolctl history`
//! shows it, and a rollback goes back to the last template that was fully rolled out, from that
//! history, also when no instance of it survives. Real containers, the fake API server's
//! simulated kubelet, the poolctl binary.

use serde_json::Value;

use crate::support::cli::Stream;
use crate::support::fake_kube::ReadyPolicy;
use crate::support::rig::Rig;
use crate::support::scenario::Scenario;

/// `poolctl history POOL -o json`'s revisions: `(revision, template hash, result, rolled back
/// from)`.
fn revisions(run: &crate::support::cli::Run) -> Vec<(u64, String, String, Option<String>)> {
    let history: Value = serde_json::from_str(&run.stdout).expect("history JSON");
    history["revisions"]
        .as_array()
        .expect("revisions")
        .iter()
        .map(|r| {
            (
                r["revision"].as_u64().expect("a number"),
                r["template_hash"].as_str().expect("a template").to_owned(),
                r["result"].as_str().expect("a result").to_owned(),
                r["rolled_back_from"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

/// `replicas: 1`, `maxSurge: 0`, `maxUnavailable: 1`: the rollout of a template whose Node
/// never turns Ready retires the only old instance first, so no instance of the old template
/// is left to rebuild it from. Past `progressDeadline`, `failureAction: rollback` brings the
/// pool back to it from the history, and `poolctl history` lists both templates' revisions
/// with their results.
#[tokio::test]
async fn a_single_replica_pool_is_rolled_back_from_its_history_when_no_old_instance_survives() {
    let Some(rig) = Rig::new().await else { return };
    let pool = rig.pool().to_owned();
    let v1 = rig
        .spec()
        .replicas(1)
        .max_surge(0)
        .max_unavailable(1)
        .ready_timeout("2s")
        .progress_deadline("3s")
        .rollback();
    let old = rig.start(&v1).await;
    let v1_hash = rig.template_hash();
    let history = rig.poolctl("history", &[&pool, "-o", "json"]).expect_code(0);
    assert_eq!(
        revisions(&history),
        [(1, v1_hash.clone(), "Complete".to_owned(), None)],
        "{}",
        history.stdout
    );

    let v2 = v1.clone().env("VERSION", "2");
    rig.write(&v2);
    let v2_hash = rig.template_hash();
    rig.fake.set_ready_policy(&format!("{pool}-{v2_hash}-"), ReadyPolicy::Never);
    let mut watch = rig.s.spawn("watch", &["--resync", "500ms"]);
    watch.wait_for(Stream::Stderr, &format!("rolling back to template {v1_hash}"));
    // The rollback's revision completes once its instance serves.
    watch.wait_for(Stream::Stderr, "revision 3 Complete");
    watch.signal("TERM");

    let containers = rig.containers().await;
    assert_eq!(containers.len(), 1, "{containers:?}");
    let (name, (running, hash)) = containers.iter().next().expect("one instance");
    assert!(*running && *hash == v1_hash, "back on the previous template: {containers:?}");
    assert!(!old.contains(name), "a new instance of it, rebuilt from the history: {containers:?}");
    let nodes = rig.nodes();
    assert_eq!(nodes.get(name).map(|n| n.0), Some(true), "its Node is Ready: {nodes:?}");

    let history = rig.poolctl("history", &[&pool, "-o", "json"]).expect_code(0);
    assert_eq!(
        revisions(&history),
        [
            (1, v1_hash.clone(), "Complete".to_owned(), None),
            (2, v2_hash.clone(), "RolledBack".to_owned(), None),
            (3, v1_hash.clone(), "Complete".to_owned(), Some(v2_hash.clone())),
        ],
        "{}",
        history.stdout
    );
    let text = rig.poolctl("history", &[&pool]).expect_code(0).stdout;
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines.iter().any(|l| l.starts_with("2 ") && l.contains(&v2_hash) && l.ends_with("RolledBack")),
        "{text}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("3 ") && l.ends_with(&format!("Complete (rollback from {v2_hash})"))),
        "{text}"
    );
    // The pool stays there: the plan says it was rolled back, and changes nothing.
    let plan = rig.poolctl("plan", &[]).expect_code(0);
    assert!(plan.stdout.contains("was rolled back to"), "{}", plan.stdout);
}

/// `apply --rollback POOL` by hand: a pool whose second template rolled out completely goes
/// back to the first, recorded as a rollback from the source's template; with nothing to go
/// back to, it is refused, saying why, and nothing changes.
#[tokio::test]
async fn apply_rollback_goes_back_to_the_last_complete_template_by_hand() {
    let Some(s) = Scenario::with_docker().await else { return };
    let pool = s.pool_name().to_owned();
    let v1 = s.pool().replicas(2);
    s.write_pool(&v1);
    s.run("apply", &["--yes"]).expect_code(0);
    let refused = s.run("apply", &["--yes", "--rollback", &pool]).expect_code(1);
    assert!(
        refused.stderr.contains(&format!("cannot roll back pool {pool}: no revision of another template")),
        "{}",
        refused.stderr
    );
    let v1_hash = s.containers().await[0].template_hash.clone();

    s.write_pool(&v1.clone().env("VERSION", "2"));
    s.run("apply", &["--yes"]).expect_code(0);
    let v2_hash = s.containers().await[0].template_hash.clone();
    assert_ne!(v1_hash, v2_hash);

    s.run("apply", &["--yes", "--rollback", &pool]).expect_code(0);
    let running = s.running().await;
    assert_eq!(running.len(), 2);
    assert!(running.iter().all(|c| c.template_hash == v1_hash), "{running:?}");
    let history = s.run("history", &[&pool, "-o", "json"]).expect_code(0);
    assert_eq!(
        revisions(&history),
        [
            (1, v1_hash.clone(), "Complete".to_owned(), None),
            (2, v2_hash.clone(), "Complete".to_owned(), None),
            (3, v1_hash.clone(), "Complete".to_owned(), Some(v2_hash.clone())),
        ],
        "{}",
        history.stdout
    );
    // It stays there: another apply --rollback has nothing to do, and a plan changes nothing.
    s.run("apply", &["--yes", "--rollback", &pool]).expect_code(0);
    assert_eq!(s.run("plan", &["--detailed-exitcode"]).code, 2, "rolled back: the source differs");
    assert!(s.running().await.iter().all(|c| c.template_hash == v1_hash));
    // A plain apply tries the source's template again, as a new revision.
    s.run("apply", &["--yes"]).expect_code(0);
    assert!(s.running().await.iter().all(|c| c.template_hash == v2_hash));
    let history = s.run("history", &[&pool, "-o", "json"]).expect_code(0);
    let last = revisions(&history).pop().expect("revisions");
    assert_eq!(last, (4, v2_hash, "Complete".to_owned(), None), "{}", history.stdout);
}
