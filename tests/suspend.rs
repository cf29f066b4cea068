//! `poolctl suspend`, `resume` and `reconcile` against two `watch` replicas of one source, real
//! Docker: what one command records in the world, both replicas honour. A node pool's records
//! are on its Lease, in the fake API server.

use std::collections::BTreeMap;

use poolctl::backend::kube::{LEASE_NAMESPACE, lease_name};
use poolctl::model::Container;

use crate::support::cli::{Process, Stream};
use crate::support::fake_kube::Store;
use crate::support::rig::{LIMIT, Rig};
use crate::support::scenario::{PoolYaml, Scenario};

fn spec(s: &Scenario, env: &str) -> PoolYaml {
    s.pool().replicas(2).env("V", env)
}

/// The template hashes of the pool's containers.
fn hashes(containers: &[Container]) -> Vec<String> {
    containers.iter().map(|c| c.template_hash.clone()).collect()
}

/// Two replicas of `watch` with `args`, the first once it applied the pool, the second once it
/// planned it.
async fn two_replicas(args: &[&str]) -> Option<(Scenario, Process, Process)> {
    let s = Scenario::with_docker().await?;
    s.write_pool(&spec(&s, "1"));
    let mut a = s.spawn("watch", args);
    a.applied();
    let mut b = s.spawn("watch", args);
    b.wait_for(Stream::Stderr, "plan (Start)");
    Some((s, a, b))
}

#[tokio::test]
async fn a_suspended_pool_is_left_alone_by_every_replica_until_it_is_resumed() {
    let Some((s, mut a, mut b)) = two_replicas(&["--resync", "1s"]).await else { return };
    let pool = s.pool_name().to_owned();
    let before = s.containers().await;
    assert_eq!(before.len(), 2, "{before:#?}");

    let suspended = s.run("suspend", &[&pool, "--reason", "incident"]).expect_code(0);
    assert!(
        suspended.stdout.contains("suspended by") && suspended.stdout.contains(": incident"),
        "{}",
        suspended.stdout
    );

    // A change of the source: seen by both, and for three resyncs each, nothing is created.
    s.write_pool(&spec(&s, "2"));
    for watch in [&mut a, &mut b] {
        watch.wait_for(Stream::Stderr, "source changed");
        for _ in 0..3 {
            watch.wait_for(Stream::Stderr, "plan (Resync)");
        }
    }
    let names = |cs: &[Container]| cs.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&s.containers().await), names(&before), "a suspended pool is not rolled");
    let status = s.run("status", &[]).expect_code(0);
    assert!(
        status.stdout.contains("suspended by") && status.stdout.contains(": incident"),
        "{}",
        status.stdout
    );
    let plan = s.run("plan", &[]);
    assert!(plan.stdout.contains("suspended by") && plan.stdout.contains(": incident"), "{}", plan.stdout);
    let refused = s.run("apply", &["--yes"]).expect_code(1);
    assert!(
        refused.stderr.contains(": incident") && refused.stderr.contains("poolctl resume"),
        "{}",
        refused.stderr
    );

    // Resumed: one replica rolls it, paced by the first replica's lines (no sleep).
    s.run("resume", &[&pool]).expect_code(0);
    let rolled = hashes(&before);
    loop {
        let now = s.running().await;
        if now.len() == 2 && hashes(&now).iter().all(|h| !rolled.contains(h)) {
            break;
        }
        a.wait_for(Stream::Stderr, "plan (");
    }
    a.assert_alive();
    b.assert_alive();
}

#[tokio::test]
async fn a_reconcile_request_is_acted_on_at_once_whatever_the_resync() {
    let Some((s, mut a, mut b)) = two_replicas(&["--resync", "10m"]).await else { return };
    let pool = s.pool_name().to_owned();
    let requested = s.run("reconcile", &[&pool]).expect_code(0);
    assert!(requested.stdout.contains("requested"), "{}", requested.stdout);
    // A ten-minute resync: only the request can make a replica plan again now.
    for watch in [&mut a, &mut b] {
        watch.wait_for(Stream::Stderr, &format!("reconcile requested: {pool}"));
    }
    let acted = |line: &str| line.contains("plan (Requested)");
    a.wait_until(Stream::Stderr, "plan (Requested)", acted);
    b.wait_until(Stream::Stderr, "plan (Requested)", acted);
    a.assert_alive();
    b.assert_alive();
}

/// The annotations of the pool's Lease, as the fake API server stores it (none when it has no
/// Lease), and its holder.
fn lease_of(rig: &Rig) -> (BTreeMap<String, String>, Option<String>) {
    let Some(lease) = rig.fake.lease(LEASE_NAMESPACE, &lease_name(rig.pool())) else {
        return (BTreeMap::new(), None);
    };
    let holder = lease.spec.and_then(|s| s.holder_identity);
    (lease.metadata.annotations.unwrap_or_default(), holder)
}

#[tokio::test]
async fn a_node_pool_is_suspended_on_its_lease_which_every_run_honours_until_it_is_resumed() {
    let Some(rig) = Rig::new().await else { return };
    let pool = rig.pool().to_owned();
    let v1 = rig.spec().replicas(1);
    let first = rig.start(&v1).await;

    let suspended = rig.poolctl("suspend", &[&pool, "--reason", "incident"]).expect_code(0);
    assert!(suspended.stdout.contains("suspended by"), "{}", suspended.stdout);
    // On the Lease, which no run holds: a record never takes the lock.
    let (annotations, holder) = lease_of(&rig);
    assert_eq!(holder, None, "{annotations:?}");
    assert_eq!(annotations.get("poolctl.dev/suspend-reason").map(String::as_str), Some("incident"));
    assert!(annotations.get("poolctl.dev/suspended-by").is_some_and(|by| !by.is_empty()), "{annotations:?}");
    let at = annotations.get("poolctl.dev/suspended-at").expect("when");
    assert!(
        suspended.stdout.contains(at.as_str()),
        "the time recorded is the time said: {}",
        suspended.stdout
    );
    let again = rig.poolctl("suspend", &[&pool, "--reason", "other"]).expect_code(0);
    assert!(again.stdout.contains("was already") && again.stdout.contains(": incident"), "{}", again.stdout);

    // A change of the source: planned as held, refused by apply, and left alone by a watch.
    rig.write(&v1.clone().env("VERSION", "2"));
    let plan = rig.poolctl("plan", &[]).expect_code(0);
    assert!(plan.stdout.contains("suspended by") && plan.stdout.contains(": incident"), "{}", plan.stdout);
    let status = rig.poolctl("status", &[]).expect_code(0);
    assert!(status.stdout.contains(": incident"), "{}", status.stdout);
    let refused = rig.apply().expect_code(1);
    assert!(refused.stderr.contains(": incident"), "{}", refused.stderr);
    let mut watch = rig.s.spawn("watch", &["--resync", "1s"]);
    watch.wait_for(Stream::Stderr, "plan (Start)");
    for _ in 0..3 {
        watch.wait_for(Stream::Stderr, "plan (Resync)");
    }
    watch.assert_alive();
    watch.kill();
    assert_eq!(
        rig.containers().await.into_keys().collect::<Vec<_>>(),
        first,
        "a suspended pool is not rolled"
    );

    // Told to, apply rolls it; the lock it took and released leaves the suspension standing.
    rig.poolctl("apply", &["--yes", "--ignore-suspend"]).expect_code(0);
    let rolled: Vec<String> = rig.containers().await.into_keys().collect();
    assert!(rolled.iter().all(|c| !first.contains(c)), "{rolled:?}");
    let (annotations, holder) = lease_of(&rig);
    assert_eq!(
        (annotations.get("poolctl.dev/suspend-reason").map(String::as_str), holder),
        (Some("incident"), None)
    );

    let resumed = rig.poolctl("resume", &[&pool]).expect_code(0);
    assert!(
        resumed.stdout.contains("resumed") && resumed.stdout.contains(": incident"),
        "{}",
        resumed.stdout
    );
    let (annotations, _) = lease_of(&rig);
    assert!(!annotations.keys().any(|k| k.starts_with("poolctl.dev/suspend")), "{annotations:?}");
    let plan = rig.poolctl("plan", &[]).expect_code(0);
    assert!(!plan.stdout.contains("suspended by"), "{}", plan.stdout);
}

#[tokio::test]
async fn a_reconcile_request_on_a_node_pools_lease_is_acted_on_at_once_and_cleared() {
    let Some(rig) = Rig::new().await else { return };
    let pool = rig.pool().to_owned();
    rig.start(&rig.spec().replicas(1)).await;
    // Two replicas with a ten-minute resync: only the request can make them plan again now.
    let mut watch = rig.s.spawn("watch", &["--resync", "10m"]);
    watch.wait_for(Stream::Stderr, "plan (Start)");
    let mut other = rig.s.spawn("watch", &["--resync", "10m"]);
    other.wait_for(Stream::Stderr, "plan (Start)");

    let requested = rig.poolctl("reconcile", &[&pool]).expect_code(0);
    assert!(requested.stdout.contains("requested"), "{}", requested.stdout);
    let path =
        format!("/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{}", lease_name(&pool));
    let asked = rig.fake.requests_matching("PATCH", &path);
    let key = "reconcile.poolctl.dev/requestedAt";
    assert!(
        asked.iter().any(|r| r
            .body
            .as_ref()
            .and_then(|b| b.pointer("/metadata/annotations"))
            .is_some_and(|a| a[key].is_string())),
        "the request is written on the Lease: {asked:?}"
    );
    // Each replica follows the Lease: both hear of it at once.
    for replica in [&mut watch, &mut other] {
        replica.wait_for(Stream::Stderr, &format!("reconcile requested: {pool}"));
        replica.wait_until(Stream::Stderr, "plan (Requested)", |line| line.contains("plan (Requested)"));
    }
    // Acted on, it is cleared (by a patch against the Lease's resourceVersion).
    let name = lease_name(&pool);
    let cleared = |store: &Store| {
        !store.leases().all().any(|(ns, l)| {
            ns == LEASE_NAMESPACE
                && l.metadata.name.as_deref() == Some(name.as_str())
                && l.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(key))
        })
    };
    tokio::time::timeout(LIMIT, rig.fake.wait_until(cleared)).await.expect("the request is cleared");
    // Not a Docker record: that is for pools of containers.
    let volumes = std::process::Command::new("docker").args(["volume", "ls", "-q"]).output().expect("docker");
    let volumes = String::from_utf8_lossy(&volumes.stdout);
    assert!(!volumes.lines().any(|v| v == format!("poolctl-reconcile-{pool}")), "{volumes}");
    watch.assert_alive();
    other.assert_alive();
}
