//! `poolctl suspend`, `resume` and `reconcile` against two `watch` replicas of one source, real
//! Docker: what one command records in the world, both replicas honour.

use poolctl::model::Container;

use crate::support::cli::{Process, Stream};
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
