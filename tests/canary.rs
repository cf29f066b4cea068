//! Canaries end to end (`spec.rollout.canary`, `autoPromote`, `poolctl promote`), for a
//! container-only pool against the real Docker daemon: a new template reaches one new instance
//! beside the three old ones and holds there under `watch`, resync after resync; `poolctl
//! promote` lets the rest roll; `autoPromote` lets it roll by itself, once the canary has served
//! that long by the daemon's clock.

use poolctl::model::Container;

use crate::support::cli::Stream;
use crate::support::rig::LIMIT;
use crate::support::scenario::{PoolYaml, Scenario};

/// This scenario's pool of three with one canary, saying `v`.
fn spec(s: &Scenario, v: &str) -> PoolYaml {
    s.pool().replicas(3).env("V", v).canary("1")
}

fn hashes(containers: &[Container]) -> Vec<&str> {
    containers.iter().map(|c| c.template_hash.as_str()).collect()
}

/// The Docker volumes (poolctl's records) called `name`.
fn volumes_named(name: &str) -> String {
    let filter = format!("name=^{name}$");
    let out = std::process::Command::new("docker").args(["volume", "ls", "-q", "--filter", &filter]).output();
    String::from_utf8_lossy(&out.expect("the docker CLI runs").stdout).trim().to_owned()
}

/// The containers of `hash`, oldest first.
fn of(containers: &[Container], hash: &str) -> Vec<Container> {
    let mut of: Vec<Container> = containers.iter().filter(|c| c.template_hash == hash).cloned().collect();
    of.sort_by_key(|c| (c.created, c.created_precise));
    of
}

// Multi-threaded: the receiver answers while the test blocks on the watch's lines.
#[tokio::test(flavor = "multi_thread")]
async fn a_canary_holds_the_rollout_under_watch_until_poolctl_promote() {
    let Some(s) = Scenario::with_docker().await else { return };
    s.write_pool(&spec(&s, "1"));
    s.run("apply", &["--yes"]).expect_code(0);
    let before = s.containers().await;
    assert_eq!(before.len(), 3, "a new pool is not led by canaries: {before:#?}");
    let old = before[0].template_hash.clone();
    s.write_pool(&spec(&s, "2"));

    // The plan makes exactly one new instance and retires nothing.
    let json = s.run("plan", &["-o", "json"]).expect_code(0);
    let json: serde_json::Value = serde_json::from_str(&json.stdout).expect("a JSON plan");
    let pool = &json["pools"][0];
    let actions: Vec<&str> =
        pool["steps"].as_array().expect("steps").iter().filter_map(|s| s["action"].as_str()).collect();
    assert_eq!(actions, ["create", "await-ready"], "{pool:#}");
    assert_eq!((pool["canary"]["count"].as_u64(), pool["canary"]["of"].as_u64()), (Some(1), Some(3)));
    assert_eq!(pool["canary"]["promoted"], false, "{pool:#}");
    let new = pool["template_hash"].as_str().expect("a template hash").to_owned();

    let (url, docs) = crate::service::receiver().await;
    let mut watch = s.spawn("watch", &["--resync", "1s", "--notify", &url]);
    watch.applied();
    for _ in 0..3 {
        watch.wait_for(Stream::Stderr, "plan (Resync)");
    }
    // The hold is told once it begins (the receiver refuses its first request: retried).
    let waiting = || {
        let docs = docs.lock().unwrap();
        docs.iter().filter(|d| d["result"] == "canary_waiting").cloned().collect::<Vec<_>>()
    };
    let told = async {
        while waiting().is_empty() {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(LIMIT, told).await.expect("a canary_waiting notification");
    let held = s.containers().await;
    assert_eq!(held.len(), 4, "one canary beside three old: {held:#?}");
    assert_eq!(of(&held, &old).len(), 3, "nothing old retired: {held:#?}");
    assert_eq!(of(&held, &new).len(), 1, "{held:#?}");
    let plan = s.run("plan", &["--detailed-exitcode"]).expect_code(2);
    assert!(plan.stdout.contains("canary 1 of 3: waiting for promotion"), "{}", plan.stdout);
    let status = s.run("status", &[]).expect_code(0);
    assert!(status.stdout.contains("canaries waiting for promotion"), "{}", status.stdout);

    let pool_name = s.pool_name().to_owned();
    let promoted = s.run("promote", &[&pool_name]).expect_code(0);
    assert!(promoted.stdout.contains(&format!("canaries of template {new} promoted")), "{}", promoted.stdout);
    // Paced by the watch's own lines, no sleep: the rest rolls.
    loop {
        let now = s.running().await;
        if now.len() == 3 && hashes(&now).iter().all(|h| *h == new) {
            break;
        }
        watch.wait_for(Stream::Stderr, "plan (");
    }
    let after = s.containers().await;
    assert_eq!(of(&after, &new).len(), 3, "old gone: {after:#?}");
    assert_eq!(of(&after, &new)[0].id, of(&held, &new)[0].id, "the canary stays");
    // The promotion record is tidied once the rollout completes (paced by the resyncs).
    let record = poolctl::backend::docker::promotion_record_name(&pool_name);
    while !volumes_named(&record).is_empty() {
        watch.wait_for(Stream::Stderr, "plan (");
    }
    watch.assert_alive();
    watch.signal("TERM");
    let waited = waiting();
    assert_eq!(waited.len(), 1, "once, not at every resync: {waited:#?}");
    let why = waited[0]["error"].as_str().unwrap_or_default();
    assert!(why.contains("canary 1 of 3: waiting for promotion"), "{waited:#?}");
    // Nothing is left to promote: the promotion was for the rollout that completed.
    let again = s.run("promote", &[&pool_name]).expect_code(1);
    assert!(again.stderr.contains("no canaries to promote"), "{}", again.stderr);
}

/// `promote --all` promotes every pool whose canaries wait and leaves the others alone; with
/// none waiting it is an error, as a promotion is never recorded ahead of its canaries.
#[tokio::test]
async fn promote_all_promotes_every_pool_whose_canaries_wait_and_only_those() {
    let Some(s) = Scenario::with_docker().await else { return };
    let plain = format!("{}-plain", s.pool_name());
    let plain_v = |v: &str| s.pool().named(&plain).replicas(1).env("V", v);
    s.write_pool(&spec(&s, "1"));
    s.write("plain.yaml", &plain_v("1").to_string());
    s.run("apply", &["--yes"]).expect_code(0);
    s.write_pool(&spec(&s, "2"));
    s.write("plain.yaml", &plain_v("2").to_string());
    s.run("apply", &["--yes"]).expect_code(0);
    let held = s.containers().await;
    assert_eq!(held.len(), 4, "one canary beside three old: {held:#?}");
    let newest = held.iter().max_by_key(|c| (c.created, c.created_precise)).expect("the canary");
    let new = newest.template_hash.clone();

    let promoted = s.run("promote", &["--all"]).expect_code(0);
    let name = s.pool_name();
    assert!(promoted.stdout.contains(&format!("Pool {name}: canaries of template")), "{}", promoted.stdout);
    assert!(
        !promoted.stdout.contains(&plain),
        "the pool without canaries is left alone: {}",
        promoted.stdout
    );
    s.run("apply", &["--yes"]).expect_code(0);
    let after = s.containers().await;
    assert_eq!(hashes(&after), [new.as_str(); 3], "the rest rolled to the canary's template: {after:#?}");
    let again = s.run("promote", &["--all"]).expect_code(1);
    assert!(again.stderr.contains("has canaries to promote"), "{}", again.stderr);
}

#[tokio::test]
async fn auto_promote_rolls_the_rest_by_itself_once_the_canary_has_served_that_long() {
    let Some(s) = Scenario::with_docker().await else { return };
    s.write_pool(&spec(&s, "1").auto_promote("5s"));
    s.run("apply", &["--yes"]).expect_code(0);
    let old = s.containers().await[0].template_hash.clone();
    // Hour-long intervals: only the canary's promotion time can wake the watch to go on.
    let mut watch = s.spawn("watch", &["--interval", "1h", "--resync", "1h"]);
    watch.wait_for(Stream::Stdout, "No changes. The world matches the source.");
    s.write_pool(&spec(&s, "2").auto_promote("5s"));
    let said = watch.wait_for(Stream::Stdout, "canary 1 of 3");
    assert!(said.contains("autoPromote"), "{said}");
    // Woken by the promotion time alone (no resync for an hour), it rolls the rest.
    watch.wait_for(Stream::Stdout, "promoted by autoPromote");
    watch.applied();
    let now = s.running().await;
    let new = now[0].template_hash.clone();
    assert!(now.len() == 3 && now.iter().all(|c| c.template_hash == new && new != old), "{now:#?}");
    watch.assert_alive();
    watch.signal("TERM");
    let rolled = of(&s.containers().await, &new);
    let canary = &rolled[0];
    let up = canary.came_up.unwrap_or(canary.created);
    for rest in &rolled[1..] {
        assert!(
            rest.created >= up + 5,
            "{} made at {}, the canary up at {up}:\n{}",
            rest.name,
            rest.created,
            watch.output(Stream::Stdout)
        );
    }
}

#[tokio::test]
async fn a_canary_that_dies_with_failure_action_rollback_is_retired_and_nothing_old_is_touched() {
    let Some(s) = Scenario::with_docker().await else { return };
    s.write_pool(&spec(&s, "1").rollback());
    s.run("apply", &["--yes"]).expect_code(0);
    let before = s.containers().await;
    let ids = |cs: &[Container]| {
        let mut ids: Vec<String> = cs.iter().map(|c| c.id.clone()).collect();
        ids.sort_unstable();
        ids
    };
    let mut watch = s.spawn("watch", &["--resync", "1s"]);
    watch.wait_for(Stream::Stderr, "plan (Start)");
    // A template whose instances come up and die two seconds later.
    s.write_pool(&spec(&s, "2").rollback().command(&["sh", "-c", "sleep 2; exit 1"]));
    let said = watch.wait_for(Stream::Stderr, "before promotion");
    assert!(said.contains("rolling back to template"), "{said}");
    // Paced by the resyncs: the canary goes, and the old instances are the ones there were.
    while ids(&s.containers().await) != ids(&before) {
        watch.wait_for(Stream::Stderr, "plan (");
    }
    // It stays rolled back: no canary is made again while the source says the same.
    for _ in 0..2 {
        watch.wait_for(Stream::Stderr, "plan (Resync)");
    }
    assert_eq!(ids(&s.containers().await), ids(&before));
    watch.assert_alive();
    watch.signal("TERM");
}
