//! Health with a clock, end to end: real containers, the fake API server's Node conditions with
//! their lastTransitionTime, and the binary. A blip of every Node replaces nothing; a Node past
//! its timeout is replaced, its replacement Ready before it is cordoned; too many unhealthy at
//! once replace none; an apply killed in a failing bootstrap leaves nothing counted that never
//! finished coming up.

use std::time::SystemTime;

use serde_json::Value;

use crate::support::cli::Stream;
use crate::support::fake_kube::{EventKind, ReadyPolicy};
use crate::support::rig::{LIMIT, Rig};
use crate::support::scenario::Scenario;

/// Hold every Node of `names` at `Ready=Unknown` (its kubelet silent), as a laptop's sleep does.
fn hold_unknown(rig: &Rig, names: &[String]) {
    for name in names {
        rig.fake.set_ready_policy(name, ReadyPolicy::Never);
        rig.fake.set_node_unreachable(name);
    }
}

/// The plan as JSON, `--detailed-exitcode` given: its exit code and document.
fn plan_json(rig: &Rig) -> (i32, Value) {
    let run = rig.poolctl("plan", &["--detailed-exitcode", "-o", "json"]);
    assert!(matches!(run.code, 0 | 2), "{}\n{}", run.stdout, run.stderr);
    (run.code, serde_json::from_str(&run.stdout).expect("plan JSON"))
}

fn health_of<'v>(plan: &'v Value, instance: &str) -> &'v Value {
    let instances = plan["pools"][0]["instances"].as_array().expect("instances");
    &instances.iter().find(|i| i["name"] == instance).expect("the instance")["health"]
}

#[tokio::test]
async fn a_blip_of_every_node_with_watch_running_replaces_nothing() {
    let Some(rig) = Rig::new().await else { return };
    let names = rig.start(&rig.spec()).await;
    let since = SystemTime::now();
    let mut watch = rig.s.spawn("watch", &["--resync", "200ms"]);
    watch.wait_for(Stream::Stderr, "in sync");

    hold_unknown(&rig, &names);
    // The plan waits for all three, saying what and for how long, and exits 2: the world is
    // not as the source says, but there is nothing to do yet.
    let (code, plan) = plan_json(&rig);
    assert_eq!(code, 2);
    assert_eq!(plan["summary"]["unavailable"], 3, "{plan:#}");
    let health = health_of(&plan, &names[0]);
    assert_eq!((health["state"].as_str(), health["action"].as_str()), (Some("unavailable"), Some("waiting")));
    assert_eq!(health["reason"], "Ready=Unknown");
    assert_eq!(health["timeout"], 300);
    // Watch looks at the world again and again meanwhile: three more reconciles.
    for _ in 0..3 {
        watch.wait_until(Stream::Stderr, "a resync that waits", |l| {
            l.contains("plan (Resync): nothing to do yet") && l.contains("3 waited for")
        });
    }
    let text = rig.poolctl("plan", &[]).expect_code(0).stdout;
    assert!(text.contains("unavailable: NotReady (Ready=Unknown) for "), "{text}");
    assert!(text.contains(" of 5m: waiting"), "{text}");

    // The Nodes come back; nothing was created, stopped or removed, and the pool is in sync.
    for name in &names {
        rig.fake.set_ready_policy(name, ReadyPolicy::After(std::time::Duration::ZERO));
        rig.fake.set_node_ready(name, true);
    }
    assert_eq!(plan_json(&rig).0, 0, "in sync again");
    watch.signal("TERM");
    let docker = rig.docker_events(since);
    assert!(
        !docker.iter().any(|e| matches!(e.action.as_str(), "create" | "kill" | "stop" | "destroy")),
        "{docker:?}"
    );
    assert!(rig.fake.events().iter().all(|e| !matches!(e.kind, EventKind::NodeCordoned { .. })));
}

#[tokio::test]
async fn a_node_past_its_timeout_is_replaced_its_replacement_ready_before_it_is_cordoned() {
    let Some(rig) = Rig::new().await else { return };
    let spec = rig.spec().health("5s", "40%");
    let names = rig.start(&spec).await;
    let held = names[1].clone();
    let seq = rig.last_seq();
    let mut watch = rig.s.spawn("watch", &["--resync", "500ms"]);
    watch.wait_for(Stream::Stderr, "in sync");
    hold_unknown(&rig, std::slice::from_ref(&held));
    // A volume stays attached to it: its silent kubelet can never detach it, so (as Cluster API
    // does) its retirement does not wait for that.
    rig.fake.store().volume_attachments = vec![("csi-held".to_owned(), held.clone())];

    // Watch sees it unavailable, then unhealthy once 5s have passed since the Node's
    // lastTransitionTime, and replaces it.
    let gone = |st: &crate::support::fake_kube::Store| st.node(&held).is_none();
    tokio::time::timeout(LIMIT, rig.fake.wait_until(gone)).await.expect("the held Node is retired");
    // The container goes last, after its Node: the retirement is done once it is removed.
    let removed = async {
        while rig.containers().await.contains_key(&held) {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(LIMIT, removed).await.expect("the held container is removed");
    watch.signal("TERM");
    let said = watch.output(Stream::Stdout);
    assert!(
        said.contains(&format!("{held}: unreachable (Ready=Unknown): not waiting for its volumes")),
        "{said}"
    );
    let events = rig.events_after(seq);
    let cordoned = events
        .iter()
        .position(|e| matches!(&e.kind, EventKind::NodeCordoned { node } if *node == held))
        .expect("the held Node was cordoned");
    let replacement_ready =
        events.iter().position(|e| matches!(&e.kind, EventKind::NodeReady { node } if !names.contains(node)));
    assert!(replacement_ready.is_some_and(|r| r < cordoned), "{events:#?}");
    let containers = rig.containers().await;
    assert_eq!(containers.len(), 3, "{containers:?}");
    assert!(!containers.contains_key(&held));
    for name in names.iter().filter(|n| **n != held) {
        assert!(containers.contains_key(name), "{name} was kept");
    }
}

#[tokio::test]
async fn three_of_three_past_their_timeout_replace_none_and_the_plan_says_why() {
    let Some(rig) = Rig::new().await else { return };
    let names = rig.start(&rig.spec().health("1s", "40%")).await;
    hold_unknown(&rig, &names);
    // Once every Node's Unknown is older than its timeout: all three unhealthy, and held.
    let deadline = std::time::Instant::now() + LIMIT;
    let (code, plan) = loop {
        let (code, plan) = plan_json(&rig);
        if plan["summary"]["unremediated"] == 3 {
            break (code, plan);
        }
        // Each plan reads the Nodes' lastTransitionTime against the clock: until 1s has passed
        // since, they are waited for. The three turned Unknown one after the other, maybe on
        // either side of a second: some may be past their timeout before the others.
        let counted =
            ["unavailable", "unremediated", "unhealthy"].map(|k| plan["summary"][k].as_u64().unwrap_or(0));
        assert_eq!(counted.iter().sum::<u64>(), 3, "every instance waited for or unhealthy: {plan:#}");
        assert!(std::time::Instant::now() < deadline, "never past the timeout: {plan:#}");
    };
    assert_eq!(code, 2);
    assert!(plan["pools"][0]["steps"].as_array().is_none_or(Vec::is_empty), "{plan:#}");
    let why = plan["pools"][0]["unhealthy_held"].as_str().expect("why none is replaced");
    assert!(why.starts_with("3 of 3 instances unhealthy, above maxUnhealthy 40%: replacing none"), "{why}");
    let text = rig.apply().expect_code(0).stdout;
    assert!(text.contains("the cluster, not the instances, looks at fault"), "{text}");
    assert_eq!(rig.containers().await.len(), 3, "nothing was replaced");
    // `kubectl get events` says so too, on the pool's Lease, as a Warning.
    let told = rig.fake.events_about("Lease", &format!("poolctl-{}", rig.pool()));
    let held = told.iter().find(|e| e.reason.as_deref() == Some("RemediationHeld")).expect("an Event");
    assert_eq!(held.type_.as_deref(), Some("Warning"), "{held:#?}");
    assert!(held.note.as_deref().is_some_and(|n| n.contains("above maxUnhealthy 40%")), "{held:#?}");
}

#[tokio::test]
async fn an_apply_killed_in_a_failing_bootstrap_leaves_no_half_made_instance_counted() {
    let Some(s) = Scenario::with_docker().await else { return };
    s.write_pool(&s.pool().replicas(2).env("V", "1"));
    s.run("apply", &["--yes"]).expect_code(0);
    let old: Vec<String> = s.running().await.into_iter().map(|c| c.name).collect();

    // Version 2's bootstrap waits for a gate, then fails.
    let gate = tempfile::tempdir().unwrap();
    let script = "until test -f /gate/open; do sleep 0.1; done; exit 1";
    let v2 = s
        .pool()
        .replicas(2)
        .env("V", "2")
        .volume(&format!("{}:/gate:ro", gate.path().display()))
        .bootstrap(&["sh", "-c", script], Some("1m"));
    s.write_pool(&v2);
    let mut killed = s.command("apply", &["--yes"]);
    // Its lock outlives it by 5s: long enough for the status below to see it held.
    killed.env("POOLCTL_LOCK_LEASE", "5s");
    let mut apply = crate::support::cli::Process::spawn(killed);
    apply.wait_until(Stream::Stdout, "a bootstrap under way", |l| {
        l.contains("] bootstrap ") && l.ends_with("...")
    });
    apply.kill();
    std::fs::write(gate.path().join("open"), "").unwrap();

    // The half-made instance runs, without its up record: not counted as up.
    let status: Value =
        serde_json::from_str(&s.run("status", &["-o", "json"]).expect_code(0).stdout).unwrap();
    let pool = &status["pools"][0];
    assert_eq!(pool["up"], 2, "{pool:#}");
    let new: Vec<&Value> =
        pool["instances"].as_array().unwrap().iter().filter(|i| i["current"] == true).collect();
    assert_eq!(new.len(), 1, "{pool:#}");
    assert_eq!(new[0]["up"], false, "{pool:#}");
    assert_eq!(new[0]["health"]["state"], "starting", "{pool:#}");

    // Run again (waiting out the killed run's lock): the abandoned instance is replaced, the
    // new bootstrap fails, and no old instance is retired for it.
    let again = s.run("apply", &["--yes", "--lock-timeout", "1m"]);
    assert_eq!(again.code, 1, "the bootstrap fails: {}\n{}", again.stdout, again.stderr);
    assert!(again.stdout.contains("coming up, abandoned"), "{}", again.stdout);
    let running: Vec<String> = s.running().await.into_iter().map(|c| c.name).collect();
    for name in &old {
        assert!(running.contains(name), "{name} was retired: {running:?}");
    }
    let status: Value =
        serde_json::from_str(&s.run("status", &["-o", "json"]).expect_code(0).stdout).unwrap();
    let instances = status["pools"][0]["instances"].as_array().unwrap().clone();
    let counted: Vec<&Value> = instances.iter().filter(|i| i["up"] == true).collect();
    assert_eq!(counted.len(), 2, "{instances:#?}");
    assert!(counted.iter().all(|i| old.iter().any(|o| i["name"] == o.as_str())), "{instances:#?}");
}

/// Run `watch` (a resync every 500ms, its metrics served) until it says the pool is Degraded
/// and three more looks have gone by, then stop it: the containers Docker created from the
/// moment it was Degraded, and the metrics it served then.
async fn watch_past_degraded(rig: &Rig) -> (Vec<crate::support::docker::DockerEvent>, String) {
    let (url, notices) = crate::service::receiver().await;
    let mut watch = rig.s.spawn("watch", &["--resync", "500ms", "--listen", "127.0.0.1:0", "--notify", &url]);
    let line = watch.wait_for(Stream::Stderr, "serving /metrics, /healthz and /readyz on http://");
    let addr = line.rsplit("http://").next().expect("an address").trim().to_owned();
    watch.wait_for(Stream::Stderr, "Degraded: no instance of template");
    let since = SystemTime::now();
    for _ in 0..3 {
        watch.wait_until(Stream::Stderr, "another look", |l| {
            l.contains("plan (Resync)") || l.contains("backing off")
        });
    }
    let (_, metrics) = crate::service::get(&addr, "/metrics").await;
    // The receiver heard it once, with why, however many looks found it so.
    let degraded = || {
        let notices = notices.lock().unwrap();
        notices.iter().filter(|n| n["result"] == "degraded").cloned().collect::<Vec<Value>>()
    };
    let heard = async {
        while degraded().is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(LIMIT, heard).await.expect("a notification says the pool is Degraded");
    watch.signal("TERM");
    let degraded = degraded();
    assert_eq!(degraded.len(), 1, "{degraded:#?}");
    assert!(degraded[0]["error"].as_str().is_some_and(|e| e.contains("progressDeadline")), "{degraded:#?}");
    let created = rig.docker_events(since).into_iter().filter(|e| e.action == "create").collect();
    (created, metrics)
}

#[tokio::test]
async fn a_template_that_never_comes_up_stops_being_retried_and_the_pool_is_degraded() {
    let Some(rig) = Rig::new().await else { return };
    let old = rig.start(&rig.spec().replicas(2)).await;
    // Version 2's Nodes never turn Ready; its Ready wait gives up after 2s, its rollout after 3s.
    rig.fake.set_default_ready_policy(ReadyPolicy::Never);
    let v2 = rig.spec().replicas(2).env("VERSION", "2").ready_timeout("2s").progress_deadline("3s");
    rig.write(&v2);
    // Once degraded, watch creates nothing more for this revision, and the old ones serve.
    let (created, metrics) = watch_past_degraded(&rig).await;
    assert!(created.is_empty(), "{created:?}");
    // The metrics say so: the gauge, and reconciles that end degraded, never in sync, so that
    // the last-success timestamp the documented alert watches is not refreshed.
    let pool = rig.pool();
    assert!(metrics.lines().any(|l| l == format!("poolctl_pool_degraded{{pool=\"{pool}\"}} 1")), "{metrics}");
    assert!(metrics.lines().any(|l| l.contains("result=\"degraded\"")), "{metrics}");
    assert!(
        !metrics
            .lines()
            .any(|l| l.starts_with("poolctl_reconcile_total") && l.contains("result=\"in_sync\"")),
        "{metrics}"
    );
    let running = rig.containers().await;
    for name in &old {
        assert!(running.get(name).is_some_and(|(up, _)| *up), "{name} serves: {running:?}");
    }
    let status: Value =
        serde_json::from_str(&rig.poolctl("status", &["-o", "json"]).expect_code(0).stdout).unwrap();
    let pool = &status["pools"][0];
    assert!(pool["degraded"].as_str().is_some_and(|d| d.contains("progressDeadline 3s")), "{pool:#}");
    assert_eq!(pool["in_sync"], false);
    let plan = rig.poolctl("plan", &["--detailed-exitcode"]).expect_code(2);
    assert!(plan.stdout.contains(", degraded"), "{}", plan.stdout);
}

#[tokio::test]
async fn a_stalled_rollout_with_rollback_ends_on_the_previous_template() {
    let Some(rig) = Rig::new().await else { return };
    let old = rig.start(&rig.spec().replicas(2)).await;
    let v1 = rig.template_hash();
    // Version 2's first instance comes up; the next never turns Ready. The deadline leaves a
    // loaded machine time to make and start the first one.
    let v2 =
        rig.spec().replicas(2).env("VERSION", "2").ready_timeout("3s").progress_deadline("8s").rollback();
    rig.write(&v2);
    let v2_hash = rig.template_hash();
    let prefix = format!("{}-{v2_hash}-", rig.pool());
    rig.fake.set_ready_policy(&prefix, ReadyPolicy::First(1));
    let mut watch = rig.s.spawn("watch", &["--resync", "500ms"]);
    watch.wait_for(Stream::Stderr, &format!("rolling back to template {v1}"));

    // Watch brings the pool back: two running instances of version 1, none of version 2.
    let deadline = std::time::Instant::now() + LIMIT;
    loop {
        let containers = rig.containers().await;
        if containers.len() == 2 && containers.values().all(|(running, hash)| *running && *hash == v1) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not rolled back: {containers:?}");
        let rounds = rig.fake.store().kubelet_rounds();
        let next = rig.fake.wait_until(move |st| st.kubelet_rounds() > rounds);
        tokio::time::timeout(LIMIT, next).await.expect("the kubelet runs");
    }
    watch.signal("TERM");
    // One old instance was retired for the first new one: its replacement was created from
    // version 1's template, rebuilt from the old instances' labels.
    let containers = rig.containers().await;
    assert!(containers.keys().any(|name| !old.contains(name)), "{containers:?} {old:?}");
    let plan = rig.poolctl("plan", &[]).expect_code(0);
    assert!(plan.stdout.contains("was rolled back to"), "{}", plan.stdout);
}

/// The Node `name`'s `Ready` condition set to `status` since `ago` seconds, by the API server's
/// clock.
fn ready_since(rig: &Rig, name: &str, status: &str, ago: i64) {
    rig.fake.set_ready_policy(name, ReadyPolicy::Never);
    rig.fake.store().update_node(name, |n| {
        let status_now = n.status.get_or_insert_with(Default::default);
        let conditions = status_now.conditions.get_or_insert_with(Vec::new);
        let ready = conditions.iter_mut().find(|c| c.type_ == "Ready").expect("a Ready condition");
        status.clone_into(&mut ready.status);
        let since = k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(ago);
        ready.last_transition_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(since));
    });
}

/// `plan -o json` by a poolctl whose wall clock is `offset` off (libfaketime, e.g. `+10m`).
fn plan_skewed(rig: &Rig, faketime: &str, offset: &str) -> Value {
    let mut command = rig.s.command("plan", &["-o", "json"]);
    command.env("FAKETIME", offset).env("FAKETIME_DONT_FAKE_MONOTONIC", "1").env("LD_PRELOAD", faketime);
    let run = crate::support::cli::Run::of(&mut command).expect_code(0);
    serde_json::from_str(&run.stdout).expect("plan JSON")
}

/// The world keeps the time (issue 27, item 3): how long a Node has been `NotReady` is measured
/// by the world's clocks (the Docker daemon's and the API server's), never by poolctl's own. A
/// poolctl 10 minutes ahead replaces nothing for a 25 s `NotReady`; one 10 minutes behind still
/// replaces a Node `NotReady` past its timeout.
#[tokio::test]
async fn a_poolctl_whose_clock_is_off_by_ten_minutes_decides_as_one_on_time() {
    let Some(faketime) = crate::lock::libfaketime() else {
        assert!(!crate::support::docker::in_ci(), "CI is set but libfaketime is not installed");
        return;
    };
    let Some(rig) = Rig::new().await else { return };
    let names = rig.start(&rig.spec()).await;
    let (blip, dead) = (&names[0], &names[1]);

    ready_since(&rig, blip, "False", 25);
    let ahead = plan_skewed(&rig, &faketime, "+10m");
    assert_eq!(health_of(&ahead, blip)["action"], "waiting", "{ahead:#}");
    assert_eq!(ahead["summary"]["create"], 0, "nothing replaced: {ahead:#}");

    // Past the default 5m timeout, by the world's clock.
    ready_since(&rig, blip, "True", 0);
    ready_since(&rig, dead, "False", 400);
    let behind = plan_skewed(&rig, &faketime, "-10m");
    assert_eq!(health_of(&behind, dead)["state"], "unhealthy", "{behind:#}");
    assert_eq!(behind["summary"]["create"], 1, "the dead one is replaced: {behind:#}");
}

/// Every rollout has a deadline (issue 27, item 1), a new pool's too: its Nodes never turn
/// Ready, and once `progressDeadline` has passed since its first creation, watch makes nothing
/// more and the pool is Degraded (status, metric) until the source changes.
#[tokio::test]
async fn a_new_pool_that_never_comes_up_is_degraded_and_stops_being_made() {
    let Some(rig) = Rig::new().await else { return };
    rig.fake.set_default_ready_policy(ReadyPolicy::Never);
    rig.write(&rig.spec().replicas(2).ready_timeout("2s").progress_deadline("3s"));
    let (created, metrics) = watch_past_degraded(&rig).await;
    assert!(created.is_empty(), "nothing more is made once Degraded: {created:?}");
    let pool = rig.pool();
    assert!(metrics.lines().any(|l| l == format!("poolctl_pool_degraded{{pool=\"{pool}\"}} 1")), "{metrics}");
    let status: Value =
        serde_json::from_str(&rig.poolctl("status", &["-o", "json"]).expect_code(0).stdout).unwrap();
    assert!(
        status["pools"][0]["degraded"].as_str().is_some_and(|d| d.contains("progressDeadline 3s")),
        "{status:#}"
    );
    // And `kubectl get events` says so, on the pool's Lease, as a Warning.
    let lease = format!("poolctl-{pool}");
    let degraded = |s: &crate::support::fake_kube::Store| {
        s.k8s_events().about("Lease", &lease).iter().any(|e| e.reason.as_deref() == Some("RolloutDegraded"))
    };
    tokio::time::timeout(LIMIT, rig.fake.wait_until(degraded)).await.expect("a RolloutDegraded Event");
    let told = rig.fake.events_about("Lease", &lease);
    let degraded = told.iter().find(|e| e.reason.as_deref() == Some("RolloutDegraded")).expect("an Event");
    assert_eq!(degraded.type_.as_deref(), Some("Warning"), "{degraded:#?}");
    assert!(degraded.note.as_deref().is_some_and(|n| n.contains("progressDeadline 3s")), "{degraded:#?}");
}
