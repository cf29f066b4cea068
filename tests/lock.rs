//! One actor per pool: two applies at once, an apply that waits for the lock, a holder killed
//! outright, `poolctl unlock`, and `plan` beside a held lock, for a container-only pool (a lock
//! container in Docker) and a pool of Nodes (a Lease in the fake API server).
//!
//! The rollout under test is held open by its own bootstrap, which waits for a gate file the
//! test creates on the host: whatever a second run does happens while the first one provably
//! holds the lock, with no sleep and no timing assumption.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::support::cli::{Process, Run, Stream, poolctl};
use crate::support::docker::{CASE_LABEL, IMAGE, RUN_LABEL, TestDocker, docker, run_id};
use crate::support::fake_kube::{FakeKube, FakeKubeOptions, KubeletOptions, LeaseWrite};

/// Guards against a hang only; no assertion depends on it.
const LIMIT: Duration = Duration::from_secs(120);

/// The lease the runs of these tests take: a killed holder's lock lapses this long after its
/// last renewal.
const LEASE: &str = "2s";

/// One test's pool, source directory, gate and (for a pool of Nodes) fake cluster.
struct Scene {
    docker: TestDocker,
    kube: Option<FakeKube>,
    dir: tempfile::TempDir,
    cache: tempfile::TempDir,
    gate: tempfile::TempDir,
}

impl Scene {
    async fn new(nodes: bool) -> Option<Self> {
        let docker = docker().await?;
        let kube = nodes.then(|| {
            let (key, value) = docker.case_label();
            FakeKube::start(FakeKubeOptions {
                kubelet: Some(KubeletOptions::new(format!("{key}={value}"))),
                ..FakeKubeOptions::default()
            })
        });
        let dir = tempfile::tempdir().unwrap();
        if let Some(kube) = &kube {
            kube.write_kubeconfig(&dir.path().join("kubeconfig")).unwrap();
        }
        std::fs::create_dir(dir.path().join("pools")).unwrap();
        let (cache, gate) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        Some(Self { docker, kube, dir, cache, gate })
    }

    fn pool(&self) -> &str {
        &self.docker.pool
    }

    fn source(&self) -> String {
        self.dir.path().join("pools").display().to_string()
    }

    /// Version `version` of a 3-replica pool with maxSurge 1; `gated`: each new instance's
    /// bootstrap waits until the test opens the gate.
    fn write(&self, version: u32, gated: bool) {
        let gate = if gated {
            format!(
                "    volumes: [\"{}:/gate:ro\"]\n  bootstrap:\n    - exec: [\"sh\", \"-c\", \"until test -f \
                 /gate/open; do sleep 0.1; done\"]\n      timeout: 2m\n",
                self.gate.path().display()
            )
        } else {
            String::new()
        };
        let node = match &self.kube {
            Some(_) => format!(
                "  node:\n    kubeconfig: {}\n    readyTimeout: 30s\n",
                self.dir.path().join("kubeconfig").display()
            ),
            None => String::new(),
        };
        let yaml = format!(
            "apiVersion: poolctl.dev/v1alpha1\nkind: Pool\nmetadata:\n  name: {pool}\nspec:\n  replicas: 3\n  \
             template:\n    image: {IMAGE}\n    env: {{VERSION: \"{version}\"}}\n    labels: {{{RUN_LABEL}: \
             \"{run}\", {CASE_LABEL}: \"{case}\"}}\n{gate}{node}  rollout:\n    maxSurge: 1\n    \
             maxUnavailable: 0\n    stopGracePeriod: 2s\n    drainTimeout: 10s\n",
            pool = self.pool(),
            run = run_id(),
            case = self.docker.case,
        );
        std::fs::write(self.dir.path().join("pools/pool.yaml"), yaml).unwrap();
    }

    fn open_gate(&self) {
        std::fs::write(self.gate.path().join("open"), "").unwrap();
    }

    /// `poolctl <command> <args> --source <dir>`, with the short test lease.
    fn command(&self, command: &str, args: &[&str]) -> Command {
        let mut cmd = poolctl(self.cache.path());
        cmd.arg(command).args(args).args(["--source", &self.source()]).env("POOLCTL_LOCK_LEASE", LEASE);
        cmd
    }

    fn run(&self, command: &str, args: &[&str]) -> Run {
        Run::from_output(&self.command(command, args).output().unwrap())
    }

    fn spawn(&self, command: &str, args: &[&str]) -> Running {
        Running::spawn(self.command(command, args))
    }

    /// Apply version 1 and check the pool converged.
    fn start(&self) {
        self.write(1, false);
        self.run("apply", &["--yes"]).expect_code(0);
        assert_eq!(self.running(), 3);
    }

    /// The pool's containers: (name, running, template hash).
    fn containers(&self) -> Vec<(String, bool, String)> {
        let filter = format!("label=poolctl.dev/pool={}", self.pool());
        let out = Command::new("docker")
            .args(["ps", "-a", "--filter", &filter, "--format"])
            .arg("{{.Names}}\t{{.State}}\t{{.Label \"poolctl.dev/template-hash\"}}")
            .output()
            .unwrap();
        // The pool's instances, not its records (`poolctl-up-<instance>`, `poolctl-rollout-<pool>`).
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let mut parts = l.split('\t');
                Some((parts.next()?.to_owned(), parts.next()? == "running", parts.next()?.to_owned()))
            })
            .filter(|(name, _, _)| !crate::support::docker::is_record(name))
            .collect()
    }

    fn running(&self) -> usize {
        self.containers().iter().filter(|c| c.1).count()
    }

    /// The pool's lock as the world shows it: the lock container's ID and holder for a
    /// container-only pool, the Lease's resourceVersion and holder for a pool of Nodes.
    fn lock(&self) -> Option<(String, String)> {
        if let Some(kube) = &self.kube {
            let lease = kube.lease("kube-system", &format!("poolctl-{}", self.pool()))?;
            let holder = lease.spec?.holder_identity?;
            return Some((lease.metadata.resource_version?, holder));
        }
        let out = Command::new("docker")
            .args(["inspect", "-f", "{{.Id}}\t{{index .Config.Labels \"poolctl.dev/lock-holder\"}}"])
            .arg(format!("poolctl-lock-{}", self.pool()))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let (id, holder) = text.split_once('\t')?;
        Some((id.to_owned(), holder.to_owned()))
    }

    /// The most pool containers that existed at once since `since` (Docker's event log,
    /// replayed from `at_start` containers).
    fn most_containers_since(&self, since: SystemTime, at_start: i64) -> i64 {
        let until = SystemTime::now() + Duration::from_secs(1);
        let out = Command::new("docker")
            .args(["events", "--since", &unix(since), "--until", &unix(until)])
            .args(["--filter", "type=container", "--filter"])
            .arg(format!("label=poolctl.dev/pool={}", self.pool()))
            .args(["--format", "{{json .}}"])
            .output()
            .unwrap();
        let mut events: Vec<(u64, String)> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            // Instances only: an up record is created and never started.
            .filter(|e| {
                !crate::support::docker::is_record(
                    e["Actor"]["Attributes"]["name"].as_str().unwrap_or_default(),
                )
            })
            .map(|e| {
                (
                    e["timeNano"].as_u64().unwrap_or_default(),
                    e["Action"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        events.sort();
        let (mut now, mut most) = (at_start, at_start);
        for (_, action) in &events {
            match action.as_str() {
                "create" => now += 1,
                "destroy" => now -= 1,
                _ => {}
            }
            most = most.max(now);
        }
        most
    }
}

impl Drop for Scene {
    /// A killed run's lock container carries none of the test's labels: remove it by name.
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rm", "-f", &format!("poolctl-lock-{}", self.pool())]).output();
    }
}

fn unix(t: SystemTime) -> String {
    format!("{:.6}", t.duration_since(UNIX_EPOCH).unwrap().as_secs_f64())
}

/// A poolctl process whose stdout is read line by line as it comes.
struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
    stdout: String,
    stderr: std::thread::JoinHandle<String>,
}

impl Running {
    fn spawn(mut cmd: Command) -> Self {
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("poolctl starts");
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut err = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = err.read_to_string(&mut text);
            text
        });
        Self { child, lines, stdout: String::new(), stderr }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Read stdout until a line satisfies `pred`, and return it.
    fn wait_for(&mut self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + LIMIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(line) = self.lines.recv_timeout(left) else {
                panic!("no {what} on stdout (it ended, or took too long):\n{}", self.stdout)
            };
            self.stdout.push_str(&line);
            self.stdout.push('\n');
            if pred(&line) {
                return line;
            }
        }
    }

    /// Once it is in the gated bootstrap, it holds the lock.
    fn wait_until_gated(&mut self) {
        self.wait_for("bootstrap under way", |l| l.contains("] bootstrap ") && l.ends_with("..."));
    }

    /// Whether it exited (without waiting).
    fn exited(&mut self) -> bool {
        self.child.try_wait().unwrap().is_some()
    }

    /// Wait for it to end, and what it printed.
    fn finish(mut self) -> Run {
        let deadline = Instant::now() + LIMIT;
        while let Ok(line) = self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            self.stdout.push_str(&line);
            self.stdout.push('\n');
        }
        let status = self.child.wait().unwrap();
        let stderr = self.stderr.join().unwrap();
        Run { code: status.code().unwrap_or(-1), stdout: self.stdout, stderr }
    }

    fn kill(mut self) {
        self.child.kill().unwrap(); // SIGKILL: no chance to release anything
        self.child.wait().unwrap();
    }
}

/// Which of two runs exits first.
fn first_to_exit(a: &mut Running, b: &mut Running) -> bool {
    let deadline = Instant::now() + LIMIT;
    loop {
        if a.exited() {
            return true;
        }
        if b.exited() {
            return false;
        }
        assert!(Instant::now() < deadline, "neither run ended");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Two applies started together: one takes the lock and rolls out; the other fails at once,
/// naming it, while it holds the lock; never more than replicas + maxSurge containers.
async fn two_applies_at_once(nodes: bool) {
    let Some(s) = Scene::new(nodes).await else { return };
    s.start();
    s.write(2, true);
    let since = SystemTime::now();
    let mut a = s.spawn("apply", &["--yes"]);
    let mut b = s.spawn("apply", &["--yes"]);
    let (loser, mut winner) = if first_to_exit(&mut a, &mut b) { (a, b) } else { (b, a) };
    assert!(!winner.exited(), "the winner waits at its gate");
    let winner_pid = winner.pid();
    let lost = loser.finish().expect_code(1);
    let holder = format!("is locked by poolctl apply (pid {winner_pid} on ");
    assert!(lost.stderr.contains(&holder) && lost.stderr.contains(" since "), "{}", lost.stderr);
    assert!(lost.stderr.contains("--lock-timeout"), "{}", lost.stderr);
    assert!(!lost.stdout.contains("] create "), "the loser changed nothing: {}", lost.stdout);

    winner.wait_until_gated();
    s.open_gate();
    let won = winner.finish().expect_code(0);
    assert!(won.stdout.contains("Apply complete"), "{}", won.stdout);
    assert!(s.lock().is_none(), "released at the end");
    assert!(s.most_containers_since(since, 3) <= 4, "more than replicas + maxSurge containers at once");
    let containers = s.containers();
    assert_eq!(containers.len(), 3, "{containers:?}");
    assert!(containers.iter().all(|c| c.1 && c.2 == containers[0].2), "{containers:?}");
}

#[tokio::test]
async fn two_applies_at_once_on_a_pool_one_rolls_out_the_other_fails_at_once_naming_it() {
    two_applies_at_once(false).await;
}

#[tokio::test]
async fn two_applies_at_once_on_a_pool_of_nodes_meet_at_its_lease() {
    two_applies_at_once(true).await;
}

/// With `--lock-timeout`, the second apply waits for the first, then finds nothing to do.
async fn a_second_apply_waits(nodes: bool) {
    let Some(s) = Scene::new(nodes).await else { return };
    s.start();
    s.write(2, true);
    let since = SystemTime::now();
    let mut first = s.spawn("apply", &["--yes"]);
    first.wait_until_gated();
    let held = s.lock().expect("the first run holds the lock");
    assert!(held.1.contains(&format!("(pid {} on ", first.pid())), "{held:?}");

    let mut second = s.spawn("apply", &["--yes", "--lock-timeout", "2m"]);
    let waiting = second.wait_for("waiting for the lock", |l| l.starts_with("waiting up to "));
    assert!(waiting.contains(&format!("held by poolctl apply (pid {} on ", first.pid())), "{waiting}");
    s.open_gate();
    first.finish().expect_code(0);
    let second = second.finish().expect_code(0);
    assert!(second.stdout.contains("No changes left"), "{}", second.stdout);
    assert!(!second.stdout.contains("] create "), "{}", second.stdout);
    assert!(s.lock().is_none(), "both released");
    assert!(s.most_containers_since(since, 3) <= 4, "more than replicas + maxSurge containers at once");
}

#[tokio::test]
async fn with_a_lock_timeout_a_second_apply_waits_then_finds_nothing_to_do() {
    a_second_apply_waits(false).await;
}

#[tokio::test]
async fn with_a_lock_timeout_a_second_apply_on_a_pool_of_nodes_waits_then_finds_nothing_to_do() {
    a_second_apply_waits(true).await;
}

/// A holder killed outright leaves its lock; it lapses, and the next apply takes it over.
async fn a_killed_holder(nodes: bool) {
    let Some(s) = Scene::new(nodes).await else { return };
    s.start();
    s.write(2, true);
    let mut holder = s.spawn("apply", &["--yes"]);
    holder.wait_until_gated();
    let pid = holder.pid();
    holder.kill();
    let left = s.lock().expect("a killed run leaves its lock");
    assert!(left.1.contains(&format!("(pid {pid} on ")), "{left:?}");

    s.open_gate();
    let next = s.run("apply", &["--yes", "--lock-timeout", "1m"]).expect_code(0);
    let took_over =
        format!("taking over the expired lock of pool {}: poolctl apply (pid {pid} on ", s.pool());
    assert!(next.stderr.contains(&took_over), "{}", next.stderr);
    assert!(next.stdout.contains("Apply complete"), "{}", next.stdout);
    assert!(s.lock().is_none(), "released at the end");
    if let Some(kube) = &s.kube {
        // Taken over in place: the killed run's Lease was replaced against its resourceVersion.
        let lease = format!("poolctl-{}", s.pool());
        let writes: Vec<LeaseWrite> = kube.lease_writes().into_iter().filter(|w| w.name == lease).collect();
        let killed = format!("(pid {pid} on ");
        let last =
            writes.iter().rposition(|w| w.holder.as_ref().is_some_and(|h| h.contains(&killed))).unwrap();
        let (takeover, end) = (&writes[last + 1], writes.last().unwrap());
        assert_eq!(takeover.verb, "replace", "{writes:?}");
        assert!(takeover.holder.as_ref().is_some_and(|h| !h.contains(&killed)), "{writes:?}");
        assert_eq!((end.verb, end.namespace.as_str()), ("delete", "kube-system"), "{writes:?}");
    }
    let containers = s.containers();
    assert_eq!(containers.iter().filter(|c| c.1).count(), 3, "{containers:?}");
}

#[tokio::test]
async fn a_killed_holder_s_lock_lapses_and_the_next_apply_takes_it_over() {
    a_killed_holder(false).await;
}

#[tokio::test]
async fn a_killed_holder_s_lease_lapses_and_the_next_apply_takes_it_over() {
    a_killed_holder(true).await;
}

#[tokio::test]
async fn plan_shows_a_lock_a_killed_run_left_without_taking_it_and_unlock_breaks_it() {
    let Some(s) = Scene::new(false).await else { return };
    s.start();
    s.write(2, true);
    // The default lease: the lock stays for the rest of the test unless broken.
    let mut holder = Running::spawn({
        let mut cmd = s.command("apply", &["--yes"]);
        cmd.env_remove("POOLCTL_LOCK_LEASE");
        cmd
    });
    holder.wait_until_gated();
    let pid = holder.pid();
    holder.kill();
    let held = s.lock().expect("a killed run leaves its lock");
    // The usual clean-up by the pool's label finds it; nothing counts it as an instance.
    let lock_name = format!("poolctl-lock-{}", s.pool());
    let filter = format!("label=poolctl.dev/pool={}", s.pool());
    let listed = Command::new("docker").args(["ps", "-aq", "--filter", &filter]).output().unwrap();
    assert!(String::from_utf8_lossy(&listed.stdout).contains(&held.0[..12]), "{lock_name} by its label");
    let status: Value =
        serde_json::from_str(&s.run("status", &["-o", "json"]).expect_code(0).stdout).unwrap();
    let instances: Vec<&str> = status["pools"][0]["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert_eq!(instances.len(), s.containers().len(), "{instances:?}");
    assert!(!instances.contains(&lock_name.as_str()), "{instances:?}");

    let plan = s.run("plan", &[]).expect_code(0);
    let line = format!("  Locked by poolctl apply (pid {pid} on ");
    assert!(plan.stdout.contains(&line) && plan.stdout.contains("unless renewed)"), "{}", plan.stdout);
    let json = s.run("plan", &["-o", "json"]).expect_code(0);
    let v: Value = serde_json::from_str(&json.stdout).unwrap();
    let lock = &v["pools"][0]["lock"];
    assert!(lock["holder"].as_str().unwrap().contains(&format!("(pid {pid} on ")), "{lock}");
    assert!(lock["since"].as_str().unwrap().ends_with('Z'), "{lock}");
    assert_eq!(s.lock(), Some(held.clone()), "plan took nothing");

    let refused = s.run("apply", &["--yes"]).expect_code(1);
    assert!(
        refused.stderr.contains(&format!("is locked by poolctl apply (pid {pid} on ")),
        "{}",
        refused.stderr
    );
    assert!(refused.stderr.contains(&format!("poolctl unlock {}", s.pool())), "{}", refused.stderr);

    let unconfirmed = s.run("unlock", &[s.pool()]).expect_code(1);
    assert!(unconfirmed.stderr.contains("pass --yes"), "{}", unconfirmed.stderr);
    assert_eq!(s.lock(), Some(held), "nothing broken without a confirmation");
    let unlocked = s.run("unlock", &[s.pool(), "--yes"]).expect_code(0);
    assert!(
        unlocked.stdout.contains(&format!("is locked by poolctl apply (pid {pid} on ")),
        "{}",
        unlocked.stdout
    );
    assert!(unlocked.stdout.contains("Its holder may still be running"), "{}", unlocked.stdout);
    assert!(unlocked.stdout.contains(&format!("Lock of pool {} broken.", s.pool())), "{}", unlocked.stdout);
    assert_eq!(s.lock(), None);
    let again = s.run("unlock", &[s.pool(), "--yes"]).expect_code(0);
    assert!(again.stdout.contains(&format!("Pool {} is not locked.", s.pool())), "{}", again.stdout);

    s.open_gate();
    s.run("apply", &["--yes"]).expect_code(0);
    let plan = s.run("plan", &["--detailed-exitcode"]).expect_code(0);
    assert!(!plan.stdout.contains("Locked by"), "{}", plan.stdout);
}

/// A second apply while the first one bootstraps a brand-new pool: the pool is locked although
/// none of its instances has come up yet; the second run names the lock, or waits for it.
async fn a_second_apply_on_a_new_pool(nodes: bool) {
    let Some(s) = Scene::new(nodes).await else { return };
    s.write(1, true);
    // One replica: once it is created, no step is left for a second run to plan.
    let file = s.dir.path().join("pools/pool.yaml");
    std::fs::write(&file, std::fs::read_to_string(&file).unwrap().replace("replicas: 3", "replicas: 1"))
        .unwrap();
    let mut first = s.spawn("apply", &["--yes"]);
    first.wait_until_gated();
    let refused = s.run("apply", &["--yes"]).expect_code(1);
    assert!(
        refused.stderr.contains(&format!("is locked by poolctl apply (pid {} on ", first.pid())),
        "{}\n{}",
        refused.stdout,
        refused.stderr
    );
    assert!(!refused.stdout.contains("The world matches the source"), "{}", refused.stdout);
    let mut second = s.spawn("apply", &["--yes", "--lock-timeout", "2m"]);
    second.wait_for("waiting for the lock", |l| l.starts_with("waiting up to "));
    s.open_gate();
    first.finish().expect_code(0);
    let second = second.finish().expect_code(0);
    assert!(!second.stdout.contains("] create "), "{}", second.stdout);
    assert_eq!(s.running(), 1);
}

#[tokio::test]
async fn a_second_apply_while_the_first_bootstraps_a_new_pool_names_its_lock_or_waits() {
    a_second_apply_on_a_new_pool(false).await;
}

#[tokio::test]
async fn a_second_apply_while_the_first_bootstraps_a_new_pool_of_nodes_names_its_lease_or_waits() {
    a_second_apply_on_a_new_pool(true).await;
}

/// Where libfaketime is installed (`apt-get install faketime`), if it is.
pub(crate) fn libfaketime() -> Option<String> {
    let out = Command::new("dpkg").args(["-L", "libfaketime"]).output().ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.ends_with("/libfaketime.so.1"))
        .map(str::to_owned)
        .filter(|path| std::path::Path::new(path).exists())
}

/// Two `poolctl watch` replicas on one pool of Nodes, one of them with its wall clock 40s ahead
/// (libfaketime; the monotonic clock is left alone). The replica on time holds the Lease and
/// rolls a new template out; by the fast one's clock that Lease lapsed long ago, but it sees the
/// Lease renewed again and again, so it stands by: it never writes the Lease while the other
/// holds it, and creates, stops and removes nothing.
#[tokio::test]
async fn two_watch_replicas_whose_clocks_differ_by_40s_never_act_at_once() {
    let Some(faketime) = libfaketime() else {
        // .ci/run installs it: CI never skips this test.
        assert!(!crate::support::docker::in_ci(), "CI is set but libfaketime is not installed");
        eprintln!("skipped: libfaketime is not installed (apt-get install faketime)");
        return;
    };
    let Some(s) = Scene::new(true).await else { return };
    s.start();
    s.write(2, true);
    let watch = |ahead: bool| {
        let mut cmd = s.command("watch", &["--resync", "1h"]);
        if ahead {
            cmd.env("FAKETIME", "+40s").env("FAKETIME_DONT_FAKE_MONOTONIC", "1").env("LD_PRELOAD", &faketime);
        }
        Process::spawn(cmd)
    };
    let mut holder = watch(false);
    holder.wait_until(Stream::Stdout, "bootstrap under way", |l| {
        l.contains("] bootstrap ") && l.ends_with("...")
    });
    let mut standby = watch(true);
    let (holder_pid, standby_pid) =
        (format!("(pid {} on ", holder.pid()), format!("(pid {} on ", standby.pid()));
    // It looks again when it would have seen the same record for a lease; each time, the holder
    // renewed it meanwhile.
    let first = standby.wait_for(Stream::Stderr, "standing by while the holder carries the changes out");
    assert!(first.contains(&holder_pid), "{first}");
    // The skew is real: by the standby's clock, the live Lease lapsed over half a minute ago.
    assert!(first.contains("(by its holder's clock, expired 3"), "{first}");
    for _ in 0..2 {
        standby.wait_for(Stream::Stderr, "standing by while the holder carries the changes out");
    }
    s.open_gate();
    holder.applied();
    standby.wait_for(Stream::Stderr, "in sync");
    assert!(holder.signal("TERM").success(), "{}", holder.output(Stream::Stderr));
    assert!(standby.signal("TERM").success(), "{}", standby.output(Stream::Stderr));

    let kube = s.kube.as_ref().expect("a pool of Nodes");
    let lease = format!("poolctl-{}", s.pool());
    let writes: Vec<LeaseWrite> = kube.lease_writes().into_iter().filter(|w| w.name == lease).collect();
    let by = |w: &LeaseWrite, pid: &str| w.holder.as_ref().is_some_and(|h| h.contains(pid));
    let last_of_holder = writes.iter().rposition(|w| by(w, &holder_pid)).expect("the holder wrote the Lease");
    // The standby may take the lock once it was released (and find nothing left to do), never
    // while the other replica held it.
    if let Some(first_of_standby) = writes.iter().position(|w| by(w, &standby_pid)) {
        assert!(first_of_standby > last_of_holder, "{writes:#?}");
    }
    let (acted, stood_by) = (holder.output(Stream::Stdout), standby.output(Stream::Stdout));
    assert!(acted.contains("] create "), "{acted}");
    for verb in ["] create ", "] stop ", "] remove ", "] drain ", "] delete-node "] {
        assert!(!stood_by.contains(verb), "the standby acted: {stood_by}");
    }
    assert!(s.lock().is_none(), "released");
    let containers = s.containers();
    assert_eq!(containers.len(), 3, "{containers:?}");
    assert!(containers.iter().all(|c| c.1 && c.2 == containers[0].2), "{containers:?}");
}
