//! `poolctl watch` end to end: the real binary left running against a temporary Git repository
//! or directory and the real Docker daemon, driven by commits, edits, `docker rm` and SIGTERM,
//! and judged by what it prints and what Docker then holds.

use std::process::Command;

use poolctl::model::{Container, ContainerState};

use crate::support::cli::{Process, Stream};
use crate::support::scenario::{PoolYaml, Scenario};

/// A pool of `replicas` whose template carries `V: <env>`.
fn spec(s: &Scenario, replicas: u32, env: &str) -> PoolYaml {
    s.pool().replicas(replicas).env("V", env)
}

/// A scenario with Docker, its source a directory holding one pool of `replicas`.
async fn with_pool(replicas: u32) -> Option<Scenario> {
    let s = Scenario::with_docker().await?;
    s.write_pool(&spec(&s, replicas, "1"));
    Some(s)
}

/// `poolctl watch args...` started on [`with_pool`], once it has applied the pool: the
/// scenario, the watch, and the pool's containers, converged.
async fn watching(replicas: u32, args: &[&str]) -> Option<(Scenario, Process, Vec<Container>)> {
    let s = with_pool(replicas).await?;
    let mut watch = s.spawn("watch", args);
    watch.applied();
    let containers = s.containers().await;
    converged(&containers, replicas as usize);
    Some((s, watch, containers))
}

/// A scenario with Docker, its source a Git repository with one commit of one pool of
/// `replicas`, given as `source` with `--ref main`.
async fn with_repo(replicas: u32, source: impl Fn(&Scenario) -> String) -> Option<Scenario> {
    let mut s = Scenario::with_docker().await?;
    s.init_git();
    s.write_pool(&spec(&s, replicas, "1"));
    s.commit("first");
    let source = source(&s);
    s.set_source(&["--source", &source, "--ref", "main"]);
    Some(s)
}

/// Writes the pool file and commits it; returns the short commit id the plan header shows.
fn commit(s: &Scenario, text: &str, message: &str) -> String {
    s.write("pool.yaml", text);
    s.commit(message)[..7].to_owned()
}

/// The one template hash every container of the pool runs, once all `replicas` of them run.
#[track_caller]
fn converged(containers: &[Container], replicas: usize) -> String {
    assert_eq!(containers.len(), replicas, "{containers:#?}");
    assert!(containers.iter().all(|c| c.state == ContainerState::Running), "{containers:#?}");
    let hash = containers[0].template_hash.clone();
    assert!(containers.iter().all(|c| c.template_hash == hash), "{containers:#?}");
    hash
}

#[tokio::test]
async fn commits_are_rolled_out_and_a_bad_commit_is_reported_and_skipped() {
    let Some(s) = with_repo(2, |s| s.dir().display().to_string()).await else { return };
    // Hour-long intervals: the commits are seen through the watched refs, nothing else.
    let mut watch = s.spawn("watch", &["--interval", "1h", "--resync", "1h"]);
    watch.applied();
    let first = converged(&s.containers().await, 2);

    // A commit that changes the template is rolled out without further input.
    let bump = commit(&s, &spec(&s, 2, "2").to_string(), "bump env");
    watch.wait_for(Stream::Stdout, &format!("({bump})"));
    watch.applied();
    let second = converged(&s.containers().await, 2);
    assert_ne!(first, second);

    // A bad commit: its errors name file and line, the world stays, watch keeps running.
    let before = s.containers().await;
    let bad = spec(&s, 2, "3").to_string().replace("replicas:", "replicaz:");
    let typo = commit(&s, &bad, "typo");
    let error = watch.wait_for(Stream::Stderr, "unknown field `replicaz`");
    assert!(error.contains("pool.yaml:6:"), "{error}");
    // The commit to fix or revert is named.
    let said = watch.output(Stream::Stderr);
    assert!(said.contains(&format!("(commit {typo}) has errors")), "{said}");
    watch.assert_alive();
    let after = s.containers().await;
    let ids = |cs: &[Container]| cs.iter().map(|c| c.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&before), ids(&after));

    // The next good commit is applied.
    let fix = commit(&s, &spec(&s, 2, "3").to_string(), "fix typo");
    watch.wait_for(Stream::Stdout, &format!("({fix})"));
    watch.applied();
    let third = converged(&s.containers().await, 2);
    assert!(third != second && third != first);
}

#[tokio::test]
async fn a_container_removed_by_hand_is_replaced_on_the_docker_event() {
    // An hour-long resync: only the Docker event can bring the replacement in time.
    let Some((s, mut watch, before)) = watching(2, &["--resync", "1h"]).await else { return };

    s.docker().remove(&before[0].id).await;
    watch.wait_for(Stream::Stderr, "drift seen");
    watch.applied();
    let after = s.containers().await;
    converged(&after, 2);
    assert!(after.iter().all(|c| c.id != before[0].id), "{after:#?}");
    assert!(after.iter().any(|c| c.id == before[1].id), "the other instance is kept: {after:#?}");
}

/// The containers a rollout stops and removes die by its own hand: Docker's events about them
/// start no `drift` reconcile (and count none in the metrics), while one removed by hand does
/// (the test above).
#[tokio::test]
async fn a_rollout_s_own_stops_and_removals_are_not_drift() {
    let Some((s, mut watch, _)) = watching(2, &["--resync", "2s"]).await else { return };
    s.write_pool(&spec(&s, 2, "2"));
    watch.wait_for(Stream::Stderr, "source changed");
    watch.applied();
    converged(&s.containers().await, 2);
    // Whatever the rollout queued runs before the next resync.
    watch.wait_for(Stream::Stderr, "plan (Resync)");
    assert!(watch.signal("TERM").success());
    let said = watch.output(Stream::Stderr);
    assert!(!said.contains("plan (Drift)"), "the rollout's own stops were taken for drift:\n{said}");
    assert!(!said.contains("drift seen"), "{said}");
}

#[tokio::test]
async fn directory_edits_are_picked_up_and_equal_specs_change_nothing() {
    let Some((s, mut watch, before)) = watching(1, &[]).await else { return };
    let first = converged(&before, 1);

    // A comment changes the bytes, not the spec.
    s.write("pool.yaml", &format!("# workers\n{}", spec(&s, 1, "1")));
    watch.wait_for(Stream::Stderr, "the pools are the same");

    s.write_pool(&spec(&s, 1, "2"));
    watch.wait_for(Stream::Stderr, "source changed");
    watch.applied();
    assert_ne!(converged(&s.containers().await, 1), first);
}

#[tokio::test]
async fn sigterm_exits_0_with_the_pool_intact_and_its_state_printed() {
    let Some((s, mut watch, before)) = watching(1, &[]).await else { return };

    let status = watch.signal("TERM");
    assert_eq!(status.code(), Some(0), "{}", watch.seen.join("\n"));
    let summary = format!("{}: 1 of 1 replicas up, 1 instance, 1 on template", s.pool_name());
    assert!(watch.seen.iter().any(|l| l.contains(&summary)), "{}", watch.seen.join("\n"));
    let after = s.containers().await;
    assert_eq!(
        after.iter().map(|c| &c.id).collect::<Vec<_>>(),
        before.iter().map(|c| &c.id).collect::<Vec<_>>()
    );
    converged(&after, 1);
}

#[tokio::test]
async fn a_newer_spec_during_a_rollout_stops_it_at_a_step_boundary_and_is_rolled_out_next() {
    let Some((s, mut watch, first)) = watching(1, &[]).await else { return };

    // The second spec's bootstrap holds its rollout until the test lets it go.
    let gate = ["sh", "-c", "until [ -f /tmp/go ]; do sleep 0.1; done"];
    s.write_pool(&spec(&s, 1, "2").bootstrap(&gate, Some("60s")));
    let line = watch.wait_for(Stream::Stdout, "] bootstrap ");
    let held = line.split_whitespace().nth(2).expect("instance name").to_owned();

    s.write_pool(&spec(&s, 1, "3"));
    watch.wait_for(Stream::Stderr, "a newer desired state arrived");
    let go = Command::new("docker").args(["exec", &held, "touch", "/tmp/go"]).output().expect("docker exec");
    assert!(go.status.success(), "{}", String::from_utf8_lossy(&go.stderr));
    // The bootstrap ends, and nothing after it runs: the old instance was never touched.
    watch.wait_for(Stream::Stdout, "Apply superseded");
    let mid = s.containers().await;
    assert!(mid.iter().any(|c| c.id == first[0].id && c.state == ContainerState::Running), "{mid:#?}");

    // Re-planned towards the newest spec: the intermediate instance is just outdated.
    watch.applied();
    let last = s.containers().await;
    let hash = converged(&last, 1);
    assert_ne!(hash, first[0].template_hash);
    assert!(last.iter().all(|c| c.name != held && c.id != first[0].id), "{last:#?}");
}

/// Each pool is reconciled on its own: a rollout of one pool held for as long as the test likes
/// (its bootstrap waits for a file) holds up neither the repair of another pool's container nor
/// that pool's own rollout in the same watch.
#[tokio::test]
async fn a_held_rollout_of_one_pool_holds_up_neither_drift_repair_nor_another_pools_rollout() {
    let Some(s) = with_pool(1).await else { return };
    let b = format!("{}-b", s.pool_name());
    let other = |env: &str| s.pool().named(&b).replicas(1).env("V", env).to_string();
    s.write("other.yaml", &other("1"));
    // An hour-long resync: only the Docker event can bring the replacement in time.
    let mut watch = s.spawn("watch", &["--resync", "1h"]);
    watch.applied();
    let first = s.containers().await;
    let b_first = s.docker().containers_of(&b).await;
    converged(&b_first, 1);

    // The pool's next rollout is held in its bootstrap until the test lets it go (the gate's
    // timeout outlasts every wait below).
    let gate = ["sh", "-c", "until [ -f /tmp/go ]; do sleep 0.1; done"];
    s.write_pool(&spec(&s, 1, "2").bootstrap(&gate, Some("10m")));
    let line = watch.wait_for(Stream::Stdout, "] bootstrap ");
    let held = line.split_whitespace().nth(2).expect("instance name").to_owned();

    // b's container removed by hand is replaced meanwhile...
    s.docker().remove(&b_first[0].id).await;
    watch.applied();
    let b_repaired = s.docker().containers_of(&b).await;
    assert_eq!(converged(&b_repaired, 1), b_first[0].template_hash);
    assert_ne!(b_repaired[0].id, b_first[0].id);
    // ...and b's own new spec rolled out.
    s.write("other.yaml", &other("2"));
    watch.applied();
    let b_rolled = s.docker().containers_of(&b).await;
    assert_ne!(converged(&b_rolled, 1), b_first[0].template_hash);
    let mid = s.containers().await;
    assert!(mid.iter().any(|c| c.id == first[0].id && c.state == ContainerState::Running), "{mid:#?}");
    assert!(mid.iter().any(|c| c.name == held), "the held rollout is still under way: {mid:#?}");

    let go = Command::new("docker").args(["exec", &held, "touch", "/tmp/go"]).output().expect("docker exec");
    assert!(go.status.success(), "{}", String::from_utf8_lossy(&go.stderr));
    watch.applied();
    let last = s.containers().await;
    assert_ne!(converged(&last, 1), first[0].template_hash);
}

#[tokio::test]
async fn an_unreachable_daemon_is_reported_and_retried_until_it_answers() {
    let Some(s) = with_pool(1).await else { return };
    let host =
        std::env::var("DOCKER_HOST").unwrap_or_else(|_| poolctl::backend::docker::DEFAULT_HOST.to_owned());
    let Some(socket) = host.strip_prefix("unix://") else { return }; // the trick below needs a socket
    // The daemon "comes back" when this path starts leading to its socket.
    let link = s.path("docker.sock");
    let mut cmd = s.command("watch", &[]);
    cmd.env("DOCKER_HOST", format!("unix://{}", link.display()));
    let mut watch = Process::spawn(cmd);
    watch.wait_for(Stream::Stderr, "cannot reach Docker");
    watch.wait_for(Stream::Stderr, "backing off");
    assert!(s.containers().await.is_empty());

    std::os::unix::fs::symlink(socket, &link).unwrap();
    watch.applied();
    converged(&s.containers().await, 1);
}

#[tokio::test]
async fn a_source_that_cannot_be_fetched_keeps_the_last_good_state_and_is_retried() {
    let Some(s) = with_repo(1, |s| s.git().url()).await else { return };
    let mut watch = s.spawn("watch", &["--interval", "1s", "--resync", "1h"]);
    watch.applied();
    let before = s.containers().await;
    converged(&before, 1);

    // The remote goes away: reported, retried, the world untouched.
    let (repo, away) = (s.dir(), s.path("away"));
    std::fs::rename(repo, &away).unwrap();
    watch.wait_for(Stream::Stderr, "cannot read the source");
    watch.wait_for(Stream::Stderr, "keeping the last good state");
    watch.assert_alive();
    assert_eq!(s.containers().await.iter().map(|c| &c.id).collect::<Vec<_>>(), [&before[0].id]);

    // It comes back with a new commit, which is applied.
    std::fs::rename(&away, repo).unwrap();
    let next = commit(&s, &spec(&s, 1, "2").to_string(), "bump");
    watch.wait_for(Stream::Stdout, &format!("({next})"));
    watch.applied();
    assert_ne!(converged(&s.containers().await, 1), before[0].template_hash);
}

#[tokio::test]
async fn a_single_file_source_saved_by_rename_is_followed_across_saves() {
    let Some(mut s) = with_pool(1).await else { return };
    let file = s.dir().join("pool.yaml");
    s.set_source(&["--source", file.to_str().unwrap()]);
    let mut watch = s.spawn("watch", &[]);
    watch.applied();
    let mut seen = vec![converged(&s.containers().await, 1)];

    // Editors save by writing a new file and renaming it over the old one; a watch on the
    // first file's inode would miss the second save.
    for version in ["2", "3"] {
        s.write(".pool.yaml.swp", &spec(&s, 1, version).to_string());
        std::fs::rename(s.dir().join(".pool.yaml.swp"), &file).unwrap();
        watch.wait_for(Stream::Stderr, "source changed");
        watch.applied();
        let now = converged(&s.containers().await, 1);
        assert!(!seen.contains(&now), "version {version} was rolled out");
        seen.push(now);
    }
}

#[tokio::test]
async fn pausing_a_pool_stops_its_rollout_at_a_step_boundary_and_unpausing_finishes_it() {
    let Some((s, mut watch, first)) = watching(1, &[]).await else { return };

    // The second spec's bootstrap holds its rollout until the test lets it go.
    let gate = ["sh", "-c", "until [ -f /tmp/go ]; do sleep 0.1; done"];
    let v2 = spec(&s, 1, "2").bootstrap(&gate, Some("60s"));
    s.write_pool(&v2);
    let line = watch.wait_for(Stream::Stdout, "] bootstrap ");
    let held = line.split_whitespace().nth(2).expect("instance name").to_owned();

    // `spec.paused: true`, reviewed like everything else: the rollout stops at the next step
    // boundary, and nothing more happens to the pool.
    s.write("pool.yaml", &format!("{v2}  paused: true\n"));
    watch.wait_for(Stream::Stderr, "a newer desired state arrived");
    let go = Command::new("docker").args(["exec", &held, "touch", "/tmp/go"]).output().expect("docker exec");
    assert!(go.status.success(), "{}", String::from_utf8_lossy(&go.stderr));
    watch.wait_for(Stream::Stdout, "Apply superseded");
    watch.wait_for(Stream::Stdout, "held back");
    let paused = s.containers().await;
    assert!(paused.iter().any(|c| c.id == first[0].id && c.state == ContainerState::Running), "{paused:#?}");
    assert!(paused.iter().any(|c| c.name == held), "the new instance is left as it is: {paused:#?}");
    assert_eq!(paused.len(), 2, "nothing retired while paused: {paused:#?}");

    // Unpaused (and without the gate, which would hold the next new instance too): the rollout
    // finishes.
    s.write_pool(&spec(&s, 1, "2"));
    watch.applied();
    let last = s.containers().await;
    converged(&last, 1);
    assert!(last.iter().all(|c| c.id != first[0].id), "{last:#?}");
}
