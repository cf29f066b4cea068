//! `poolctl watch` end to end: the real binary left running against a temporary Git repository
//! or directory and the real Docker daemon, driven by commits, edits, `docker rm` and SIGTERM,
//! and judged by what it prints and what Docker then holds.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use poolctl::backend::Containers;
use poolctl::model::{Container, ContainerState};

use crate::support::cli::poolctl;
use crate::support::docker::{CASE_LABEL, RUN_LABEL, TestDocker, docker};

/// Bounds that only keep a broken test from hanging; nothing waits for them to pass.
const PATIENCE: Duration = Duration::from_secs(90);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stream {
    Stdout,
    Stderr,
}

/// A running `poolctl watch`, its output read line by line; killed when dropped.
struct Watch {
    child: Child,
    lines: Receiver<(Stream, String)>,
    /// Everything read so far, for failure messages.
    seen: Vec<String>,
}

impl Watch {
    fn start(cache: &Path, args: &[&str]) -> Self {
        Self::spawn(poolctl(cache), args)
    }

    /// `cmd watch args...`, for a command with its own environment.
    fn spawn(mut cmd: Command, args: &[&str]) -> Self {
        let mut child = cmd
            .arg("watch")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("poolctl watch starts");
        let (tx, lines) = channel();
        for (stream, pipe) in [
            (Stream::Stdout, Box::new(child.stdout.take().expect("piped")) as Box<dyn std::io::Read + Send>),
            (Stream::Stderr, Box::new(child.stderr.take().expect("piped"))),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    if tx.send((stream, line)).is_err() {
                        return;
                    }
                }
            });
        }
        Self { child, lines, seen: Vec::new() }
    }

    /// Read on until a line of `stream` contains `text`; return it.
    #[track_caller]
    fn wait_for(&mut self, stream: Stream, text: &str) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok((s, line)) => {
                    self.seen.push(format!("{s:?}: {line}"));
                    if s == stream && line.contains(text) {
                        return line;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    panic!(
                        "no {stream:?} line with {text:?} within {PATIENCE:?}; output:\n{}",
                        self.seen.join("\n")
                    )
                }
                Err(RecvTimeoutError::Disconnected) => panic!(
                    "poolctl watch ended ({:?}) before printing {text:?}; output:\n{}",
                    self.child.try_wait(),
                    self.seen.join("\n")
                ),
            }
        }
    }

    /// The next applied plan: wait until a rollout reports completion.
    #[track_caller]
    fn applied(&mut self) {
        self.wait_for(Stream::Stdout, "Apply complete");
    }

    #[track_caller]
    fn assert_alive(&mut self) {
        assert!(
            self.child.try_wait().expect("try_wait").is_none(),
            "watch exited:\n{}",
            self.seen.join("\n")
        );
    }

    /// Send SIGTERM and wait for the exit.
    fn terminate(&mut self) -> ExitStatus {
        let killed = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        assert!(killed.is_ok_and(|s| s.success()), "kill -TERM failed");
        // Drain the output, so that the child never blocks on a full pipe while exiting.
        while let Ok((s, line)) = self.lines.recv_timeout(PATIENCE) {
            self.seen.push(format!("{s:?}: {line}"));
        }
        self.child.wait().expect("wait")
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A pool document for this test's pool, labelled so that the test's guard removes what watch
/// creates.
fn pool_yaml(d: &TestDocker, replicas: u32, env: &str) -> String {
    pool_yaml_with(d, replicas, env, "")
}

/// [`pool_yaml`] with `extra` appended under `spec:` (indented by 2).
fn pool_yaml_with(d: &TestDocker, replicas: u32, env: &str, extra: &str) -> String {
    let labels = d.container("x").labels;
    format!(
        "apiVersion: poolctl.dev/v1alpha1\nkind: Pool\nmetadata:\n  name: {pool}\nspec:\n  replicas: {replicas}\n  \
         template:\n    image: {image}\n    env: {{V: \"{env}\"}}\n    labels:\n      {RUN_LABEL}: \"{run}\"\n      \
         {CASE_LABEL}: \"{case}\"\n  rollout:\n    stopGracePeriod: 2s\n    drainTimeout: 5s\n{extra}",
        pool = d.pool,
        image = crate::support::docker::IMAGE,
        run = labels[RUN_LABEL],
        case = labels[CASE_LABEL],
    )
}

/// The test pool's containers, sorted by name.
async fn pool(d: &TestDocker) -> Vec<Container> {
    let mut mine: Vec<Container> =
        d.backend.list().await.expect("list").into_iter().filter(|c| c.pool == d.pool).collect();
    mine.sort_by(|a, b| a.name.cmp(&b.name));
    mine
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

fn git(repo: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args([
            "-c",
            "user.name=poolctl test",
            "-c",
            "user.email=test@poolctl.dev",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Write the pool file and commit it; return the short commit id the plan header shows.
fn commit(repo: &Path, text: &str, message: &str) -> String {
    std::fs::write(repo.join("pool.yaml"), text).expect("write pool.yaml");
    git(repo, &["add", "pool.yaml"]);
    git(repo, &["commit", "-q", "-m", message]);
    git(repo, &["rev-parse", "--short=7", "HEAD"])
}

#[tokio::test]
async fn commits_are_rolled_out_and_a_bad_commit_is_reported_and_skipped() {
    let Some(d) = docker().await else { return };
    let repo = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    git(repo.path(), &["init", "-q", "-b", "main"]);
    commit(repo.path(), &pool_yaml(&d, 2, "1"), "two workers");
    let source = repo.path().to_str().unwrap();
    // Hour-long intervals: the commits are seen through the watched refs, nothing else.
    let mut watch = Watch::start(
        cache.path(),
        &["--source", source, "--ref", "main", "--interval", "1h", "--resync", "1h"],
    );
    watch.applied();
    let first = converged(&pool(&d).await, 2);

    // A commit that changes the template is rolled out without further input.
    let bump = commit(repo.path(), &pool_yaml(&d, 2, "2"), "bump env");
    watch.wait_for(Stream::Stdout, &format!("({bump})"));
    watch.applied();
    let second = converged(&pool(&d).await, 2);
    assert_ne!(first, second);

    // A bad commit: its errors name file and line, the world stays, watch keeps running.
    let before = pool(&d).await;
    let bad = pool_yaml(&d, 2, "3").replace("replicas:", "replicaz:");
    commit(repo.path(), &bad, "typo");
    let error = watch.wait_for(Stream::Stderr, "unknown field `replicaz`");
    assert!(error.contains("pool.yaml:6:"), "{error}");
    watch.assert_alive();
    let after = pool(&d).await;
    let ids = |cs: &[Container]| cs.iter().map(|c| c.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&before), ids(&after));

    // The next good commit is applied.
    let fix = commit(repo.path(), &pool_yaml(&d, 2, "3"), "fix typo");
    watch.wait_for(Stream::Stdout, &format!("({fix})"));
    watch.applied();
    let third = converged(&pool(&d).await, 2);
    assert!(third != second && third != first);
}

#[tokio::test]
async fn a_container_removed_by_hand_is_replaced_on_the_docker_event() {
    let Some(d) = docker().await else { return };
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("pool.yaml"), pool_yaml(&d, 2, "1")).unwrap();
    // An hour-long resync: only the Docker event can bring the replacement in time.
    let mut watch = Watch::start(cache.path(), &["--source", dir.path().to_str().unwrap(), "--resync", "1h"]);
    watch.applied();
    let before = pool(&d).await;
    converged(&before, 2);

    let removed = Command::new("docker").args(["rm", "-f", &before[0].id]).output().expect("docker rm");
    assert!(removed.status.success());
    watch.wait_for(Stream::Stderr, "drift seen");
    watch.applied();
    let after = pool(&d).await;
    converged(&after, 2);
    assert!(after.iter().all(|c| c.id != before[0].id), "{after:#?}");
    assert!(after.iter().any(|c| c.id == before[1].id), "the other instance is kept: {after:#?}");
}

#[tokio::test]
async fn directory_edits_are_picked_up_and_equal_specs_change_nothing() {
    let Some(d) = docker().await else { return };
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let file = dir.path().join("pool.yaml");
    std::fs::write(&file, pool_yaml(&d, 1, "1")).unwrap();
    let mut watch = Watch::start(cache.path(), &["--source", dir.path().to_str().unwrap()]);
    watch.applied();
    let first = converged(&pool(&d).await, 1);

    // A comment changes the bytes, not the spec.
    std::fs::write(&file, format!("# workers\n{}", pool_yaml(&d, 1, "1"))).unwrap();
    watch.wait_for(Stream::Stderr, "the pools are the same");

    std::fs::write(&file, pool_yaml(&d, 1, "2")).unwrap();
    watch.wait_for(Stream::Stderr, "source changed");
    watch.applied();
    assert_ne!(converged(&pool(&d).await, 1), first);
}

#[tokio::test]
async fn sigterm_exits_0_with_the_pool_intact_and_its_state_printed() {
    let Some(d) = docker().await else { return };
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("pool.yaml"), pool_yaml(&d, 1, "1")).unwrap();
    let mut watch = Watch::start(cache.path(), &["--source", dir.path().to_str().unwrap()]);
    watch.applied();
    let before = pool(&d).await;
    converged(&before, 1);

    let status = watch.terminate();
    assert_eq!(status.code(), Some(0), "{}", watch.seen.join("\n"));
    let summary = format!("{}: 1 of 1 replicas up, 1 instances, 1 on template", d.pool);
    assert!(watch.seen.iter().any(|l| l.contains(&summary)), "{}", watch.seen.join("\n"));
    let after = pool(&d).await;
    assert_eq!(
        after.iter().map(|c| &c.id).collect::<Vec<_>>(),
        before.iter().map(|c| &c.id).collect::<Vec<_>>()
    );
    converged(&after, 1);
}

#[tokio::test]
async fn a_newer_spec_during_a_rollout_stops_it_at_a_step_boundary_and_is_rolled_out_next() {
    let Some(d) = docker().await else { return };
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let file = dir.path().join("pool.yaml");
    std::fs::write(&file, pool_yaml(&d, 1, "1")).unwrap();
    let mut watch = Watch::start(cache.path(), &["--source", dir.path().to_str().unwrap()]);
    watch.applied();
    let first = pool(&d).await;
    converged(&first, 1);

    // The second spec's bootstrap holds its rollout until the test lets it go.
    let bootstrap = "  bootstrap:\n    - exec: [sh, -c, 'until [ -f /tmp/go ]; do sleep 0.1; done']\n      timeout: 60s\n";
    std::fs::write(&file, pool_yaml_with(&d, 1, "2", bootstrap)).unwrap();
    let line = watch.wait_for(Stream::Stdout, "] bootstrap ");
    let held = line.split_whitespace().nth(2).expect("instance name").to_owned();

    std::fs::write(&file, pool_yaml(&d, 1, "3")).unwrap();
    watch.wait_for(Stream::Stderr, "a newer desired state arrived");
    let go = Command::new("docker").args(["exec", &held, "touch", "/tmp/go"]).output().expect("docker exec");
    assert!(go.status.success(), "{}", String::from_utf8_lossy(&go.stderr));
    // The bootstrap ends, and nothing after it runs: the old instance was never touched.
    watch.wait_for(Stream::Stdout, "Apply superseded");
    let mid = pool(&d).await;
    assert!(mid.iter().any(|c| c.id == first[0].id && c.state == ContainerState::Running), "{mid:#?}");

    // Re-planned towards the newest spec: the intermediate instance is just outdated.
    watch.applied();
    let last = pool(&d).await;
    let hash = converged(&last, 1);
    assert_ne!(hash, first[0].template_hash);
    assert!(last.iter().all(|c| c.name != held && c.id != first[0].id), "{last:#?}");
}

#[tokio::test]
async fn an_unreachable_daemon_is_reported_and_retried_until_it_answers() {
    let Some(d) = docker().await else { return };
    let host =
        std::env::var("DOCKER_HOST").unwrap_or_else(|_| poolctl::backend::docker::DEFAULT_HOST.to_owned());
    let Some(socket) = host.strip_prefix("unix://") else { return }; // the trick below needs a socket
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("pool.yaml"), pool_yaml(&d, 1, "1")).unwrap();
    // The daemon "comes back" when this path starts leading to its socket.
    let link = cache.path().join("docker.sock");
    let mut cmd = poolctl(cache.path());
    cmd.env("DOCKER_HOST", format!("unix://{}", link.display()));
    let mut watch = Watch::spawn(cmd, &["--source", dir.path().to_str().unwrap()]);
    watch.wait_for(Stream::Stderr, "cannot reach Docker");
    watch.wait_for(Stream::Stderr, "backing off");
    assert!(pool(&d).await.is_empty());

    std::os::unix::fs::symlink(socket, &link).unwrap();
    watch.applied();
    converged(&pool(&d).await, 1);
}

#[tokio::test]
async fn a_source_that_cannot_be_fetched_keeps_the_last_good_state_and_is_retried() {
    let Some(d) = docker().await else { return };
    let parent = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let repo = parent.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    commit(&repo, &pool_yaml(&d, 1, "1"), "one worker");
    let url = format!("file://{}", repo.display());
    let mut watch = Watch::start(
        cache.path(),
        &["--source", &url, "--ref", "main", "--interval", "1s", "--resync", "1h"],
    );
    watch.applied();
    let before = pool(&d).await;
    converged(&before, 1);

    // The remote goes away: reported, retried, the world untouched.
    let away = parent.path().join("away");
    std::fs::rename(&repo, &away).unwrap();
    watch.wait_for(Stream::Stderr, "cannot read the source");
    watch.wait_for(Stream::Stderr, "keeping the last good state");
    watch.assert_alive();
    assert_eq!(pool(&d).await.iter().map(|c| &c.id).collect::<Vec<_>>(), [&before[0].id]);

    // It comes back with a new commit, which is applied.
    std::fs::rename(&away, &repo).unwrap();
    let next = commit(&repo, &pool_yaml(&d, 1, "2"), "bump");
    watch.wait_for(Stream::Stdout, &format!("({next})"));
    watch.applied();
    assert_ne!(converged(&pool(&d).await, 1), before[0].template_hash);
}

#[tokio::test]
async fn a_single_file_source_saved_by_rename_is_followed_across_saves() {
    let Some(d) = docker().await else { return };
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let file = dir.path().join("pool.yaml");
    std::fs::write(&file, pool_yaml(&d, 1, "1")).unwrap();
    let mut watch = Watch::start(cache.path(), &["--source", file.to_str().unwrap()]);
    watch.applied();
    let mut seen = vec![converged(&pool(&d).await, 1)];

    // Editors save by writing a new file and renaming it over the old one; a watch on the
    // first file's inode would miss the second save.
    for version in ["2", "3"] {
        let tmp = dir.path().join(".pool.yaml.swp");
        std::fs::write(&tmp, pool_yaml(&d, 1, version)).unwrap();
        std::fs::rename(&tmp, &file).unwrap();
        watch.wait_for(Stream::Stderr, "source changed");
        watch.applied();
        let now = converged(&pool(&d).await, 1);
        assert!(!seen.contains(&now), "version {version} was rolled out");
        seen.push(now);
    }
}
