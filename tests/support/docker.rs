//! Docker for integration tests: the daemon (required in CI, skipped loudly elsewhere), the tiny
//! busybox test images built once per test process, and a per-test scope whose containers are
//! removed when the test ends, even when it fails: the suite's one cleanup guard.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bollard::query_parameters::RemoveContainerOptions;
use poolctl::backend::docker::{DockerBackend, DockerEnv, Timeouts, endpoint};
use poolctl::backend::{Containers, NewContainer};
use poolctl::model::labels;
use poolctl::model::{Container, ContainerState};

/// The plain test image: `sh`, `sleep` and friends, and a default command that runs until
/// SIGTERM and then exits at once, so stopping takes no grace period.
pub(crate) const IMAGE: &str = "poolctl-test-busybox:latest";

/// The test image with a HEALTHCHECK (every second, three retries) that passes once
/// `/tmp/ready` exists; its default command creates that file.
pub(crate) const HEALTHY_IMAGE: &str = "poolctl-test-busybox:healthy";

/// The label that marks every container of this test process.
pub(crate) const RUN_LABEL: &str = "poolctl-test.run";
/// The label that marks the containers of one [`TestDocker`] scope.
pub(crate) const CASE_LABEL: &str = "poolctl-test.case";

/// Where the static busybox comes from (Debian's busybox-static).
const BUSYBOX: &str = "/bin/busybox";

/// A shell loop that exits 0 on SIGTERM; `sleep & wait` keeps the shell able to run the trap.
const IDLE: &str = "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done";

/// Identifies this test process among concurrent runs on the same daemon.
pub(crate) fn run_id() -> &'static str {
    static RUN: OnceLock<String> = OnceLock::new();
    RUN.get_or_init(|| {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        format!("{}-{:x}", std::process::id(), nanos % (1 << 40))
    })
}

/// The second Docker daemon (`scripts/test-dockerd start`, which `.ci/run` runs), its address
/// from `POOLCTL_TEST_DOCKER2`, with the test image loaded (no registry can be reached). `None`
/// outside CI when it is not set; in CI its absence is a failure.
pub(crate) fn second_docker() -> Option<String> {
    static LOADED: OnceLock<Result<String, String>> = OnceLock::new();
    let Ok(host) = std::env::var("POOLCTL_TEST_DOCKER2") else {
        assert!(!in_ci(), "CI is set but POOLCTL_TEST_DOCKER2 is not (.ci/run starts scripts/test-dockerd)");
        eprintln!(
            "skipped: no second Docker daemon (export POOLCTL_TEST_DOCKER2=$(scripts/test-dockerd start))"
        );
        return None;
    };
    let loaded = LOADED.get_or_init(|| {
        images()?;
        let script = format!("docker save {IMAGE} | docker -H {host} load");
        let status = Command::new("sh").args(["-c", &script]).status().map_err(|e| e.to_string())?;
        if status.success() { Ok(host.clone()) } else { Err(format!("`{script}` failed: {status}")) }
    });
    Some(loaded.clone().unwrap_or_else(|e| panic!("cannot load the test image into {host}: {e}")))
}

/// Whether we run in CI, where a missing daemon is a failure rather than a reason to skip.
pub(crate) fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// Connects to the daemon and makes sure the test images exist. Returns `None` (after a loud
/// banner) when no daemon answers outside CI; panics when none answers in CI.
pub(crate) async fn docker() -> Option<TestDocker> {
    let current = endpoint::current(&DockerEnv::from_process());
    let connected = match current {
        Ok(current) => DockerBackend::connect(&current, Timeouts::default()).await.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    let backend = match connected {
        Ok(backend) => backend,
        Err(e) if in_ci() => panic!("CI is set but no Docker daemon answers: {e}"),
        Err(e) => {
            skip_banner(&e);
            return None;
        }
    };
    if let Err(e) = images() {
        panic!("cannot build the test images: {e}");
    }
    Some(TestDocker::new(backend))
}

/// Says, once per process, that Docker tests are being skipped. Written to the real stderr,
/// because the test harness swallows `eprintln!` of passing tests.
fn skip_banner(error: &str) {
    static SAID: OnceLock<()> = OnceLock::new();
    SAID.get_or_init(|| {
        let banner = format!(
            "\n==============================================================\n\
             SKIPPING the Docker tests: {error}\n\
             Start a Docker daemon (or set DOCKER_HOST) to run them; in CI (CI=true) this fails.\n\
             ==============================================================\n\n"
        );
        let _ = std::io::stderr().write_all(banner.as_bytes());
    });
}

/// Builds the test images once per process. The build is blocking (the docker CLI) but short,
/// and runs at most once; every later call only reads the result.
pub(crate) fn images() -> Result<(), String> {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    BUILT.get_or_init(build_images).clone()
}

fn build_images() -> Result<(), String> {
    let banner = Command::new(BUSYBOX).output().map_err(|e| {
        format!(
            "{BUSYBOX} cannot run ({e}); install Debian's busybox-static (apt-get install busybox-static)"
        )
    })?;
    if !String::from_utf8_lossy(&banner.stdout).starts_with("BusyBox")
        && !String::from_utf8_lossy(&banner.stderr).starts_with("BusyBox")
    {
        return Err(format!("{BUSYBOX} is not busybox; install Debian's busybox-static"));
    }
    let ctx = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    std::fs::copy(BUSYBOX, ctx.path().join("busybox")).map_err(|e| format!("copy {BUSYBOX}: {e}"))?;
    let plain = format!(
        "FROM scratch\n\
         COPY busybox /bin/busybox\n\
         RUN [\"/bin/busybox\", \"sh\", \"-c\", \"/bin/busybox --install -s /bin && mkdir -m 1777 /tmp\"]\n\
         CMD [\"sh\", \"-c\", \"{IDLE}\"]\n"
    );
    // Built FROM the plain image, which the daemon has locally by then: no registry is involved.
    let healthy = format!(
        "FROM {IMAGE}\n\
         HEALTHCHECK --interval=1s --timeout=1s --retries=3 CMD [\"test\", \"-f\", \"/tmp/ready\"]\n\
         CMD [\"sh\", \"-c\", \"touch /tmp/ready; {IDLE}\"]\n"
    );
    for (tag, dockerfile) in [(IMAGE, plain), (HEALTHY_IMAGE, healthy)] {
        let file = ctx.path().join(format!("Dockerfile.{}", tag.rsplit(':').next().unwrap_or("x")));
        std::fs::write(&file, dockerfile).map_err(|e| format!("write {}: {e}", file.display()))?;
        let out = Command::new("docker")
            .args(["build", "-q", "-t", tag, "-f"])
            .arg(&file)
            .arg(ctx.path())
            .output()
            .map_err(|e| format!("cannot run the docker CLI: {e}"))?;
        if !out.status.success() {
            return Err(format!("docker build {tag} failed:\n{}", String::from_utf8_lossy(&out.stderr)));
        }
    }
    Ok(())
}

/// One test's view of Docker: a connected backend and a pool name of its own. Dropping it
/// removes every container it labelled.
pub(crate) struct TestDocker {
    pub(crate) backend: DockerBackend,
    /// A pool name no other test (or concurrent test process) uses.
    pub(crate) pool: String,
    pub(crate) case: String,
    /// The scope's events, followed from its start (see [`TestDocker::events`]).
    followed: Option<(std::process::Child, Arc<Mutex<Vec<DockerEvent>>>)>,
    /// The images this scope built ([`TestDocker::node_image`]), removed with its containers.
    images: Mutex<Vec<String>>,
}

/// One line of `docker events --format '{{json .}}'`, as a [`DockerEvent`].
fn parse_event(line: &str) -> Option<DockerEvent> {
    let e = serde_json::from_str::<serde_json::Value>(line).ok()?;
    Some(DockerEvent {
        action: e["Action"].as_str().unwrap_or_default().to_owned(),
        name: e["Actor"]["Attributes"]["name"].as_str().unwrap_or_default().to_owned(),
        at: UNIX_EPOCH + Duration::from_nanos(e["timeNano"].as_u64().unwrap_or_default()),
    })
}

impl TestDocker {
    fn new(backend: DockerBackend) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let case = format!("{}-{}", run_id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let followed = follow_events(&case);
        Self { backend, pool: format!("pt{case}"), case, followed, images: Mutex::default() }
    }

    /// The `key=value` label that only this scope's containers carry (it also drives the drop
    /// guard): give it to pool templates and to the fake kubelet.
    pub(crate) fn case_label(&self) -> (&'static str, &str) {
        (CASE_LABEL, &self.case)
    }

    /// The plain test image under a name of this scope's whose tag is `tag`, as a Kubernetes
    /// node image's tag carries its kubelet's version (`kindest/node:v1.32.0`): built `FROM` the
    /// plain image (no registry), labelled with the test run's and the scope's labels (a leftover
    /// is pruned by them), and removed when the scope ends.
    pub(crate) fn node_image(&self, tag: &str) -> String {
        let name = format!("poolctl-test-node-{}:{tag}", self.case);
        let ctx = tempfile::tempdir().expect("a temp dir");
        std::fs::write(ctx.path().join("Dockerfile"), format!("FROM {IMAGE}\n"))
            .expect("write the Dockerfile");
        self.images.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(name.clone());
        let run = format!("{RUN_LABEL}={}", run_id());
        let case = format!("{CASE_LABEL}={}", self.case);
        let dir = ctx.path().to_str().expect("a UTF-8 temp dir");
        docker_cli(&["build", "-q", "--label", &run, "--label", &case, "-t", &name, dir]);
        name
    }

    /// A container name in this test's pool.
    pub(crate) fn name(&self, suffix: &str) -> String {
        format!("{}-{suffix}", self.pool)
    }

    /// The address of the daemon, as poolctl records it on a Node.
    pub(crate) fn host(&self) -> String {
        use poolctl::backend::Containers as _;
        self.backend.hosts().remove(0)
    }

    /// A running container named like one of this test's pool that is not poolctl's: none of
    /// its labels but the drop guard's (as kind's own nodes carry none).
    pub(crate) async fn start_stranger(&self, suffix: &str) -> String {
        use poolctl::backend::Containers as _;
        let mut spec = self.container(suffix);
        spec.labels.retain(|k, _| !k.starts_with("poolctl.dev/"));
        self.backend.create(&spec).await.expect("create a container that is not poolctl's");
        spec.name
    }

    /// Whether the container runs now, whatever its labels.
    pub(crate) async fn is_running(&self, name: &str) -> bool {
        let inspect = self.backend.client().inspect_container(name, None).await.expect("docker inspect");
        inspect.state.and_then(|s| s.running).unwrap_or(false)
    }

    /// A container of this test's pool running the plain image's default command, labelled so
    /// that the drop guard finds it.
    pub(crate) fn container(&self, suffix: &str) -> NewContainer {
        NewContainer {
            name: self.name(suffix),
            image: IMAGE.to_owned(),
            labels: BTreeMap::from([
                (labels::POOL.to_owned(), self.pool.clone()),
                (labels::TEMPLATE_HASH.to_owned(), "test-hash".to_owned()),
                (RUN_LABEL.to_owned(), run_id().to_owned()),
                (CASE_LABEL.to_owned(), self.case.clone()),
            ]),
            ..NewContainer::default()
        }
    }
}

/// Follow the daemon's events for the containers labelled with `case`, from now on, into a list:
/// a later query replays only the daemon's last 256 events, and a busy test run (the execs of
/// health checks count) pushes a test's own out of that window.
fn follow_events(case: &str) -> Option<(std::process::Child, Arc<Mutex<Vec<DockerEvent>>>)> {
    use std::io::BufRead as _;
    let filter = format!("label={CASE_LABEL}={case}");
    let mut child = Command::new("docker")
        .args(["events", "--filter", &filter, "--filter", "type=container", "--format", "{{json .}}"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    let stdout = child.stdout.take()?;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let into = Arc::clone(&seen);
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(event) = parse_event(&line) {
                into.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(event);
            }
        }
    });
    Some((child, seen))
}

/// One Docker event of a test's containers: what happened to which container, when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DockerEvent {
    pub(crate) action: String,
    pub(crate) name: String,
    pub(crate) at: SystemTime,
}

impl TestDocker {
    /// The labels that every container of this scope carries: the test run's and the scope's.
    pub(crate) fn labels(&self) -> [(&'static str, &str); 2] {
        [(RUN_LABEL, run_id()), (CASE_LABEL, &self.case)]
    }

    /// This test's pool containers, sorted by name.
    pub(crate) async fn containers(&self) -> Vec<Container> {
        let mut mine: Vec<Container> =
            self.backend.list().await.expect("list").into_iter().filter(|c| c.pool == self.pool).collect();
        mine.sort_by(|a, b| a.name.cmp(&b.name));
        mine
    }

    /// The containers of `pool`, another pool of this test's, sorted by name.
    pub(crate) async fn containers_of(&self, pool: &str) -> Vec<Container> {
        let mut theirs: Vec<Container> =
            self.backend.list().await.expect("list").into_iter().filter(|c| c.pool == pool).collect();
        theirs.sort_by(|a, b| a.name.cmp(&b.name));
        theirs
    }

    /// This test's running pool containers, sorted by name.
    pub(crate) async fn running(&self) -> Vec<Container> {
        self.containers().await.into_iter().filter(|c| c.state == ContainerState::Running).collect()
    }

    /// `docker kill <container>`: stops it at once, behind poolctl's back.
    pub(crate) async fn kill(&self, container: &str) {
        self.backend.client().kill_container(container, None).await.expect("docker kill");
    }

    /// `docker rm -f <container>`: removes it behind poolctl's back.
    pub(crate) async fn remove(&self, container: &str) {
        let options = RemoveContainerOptions { force: true, ..Default::default() };
        self.backend.client().remove_container(container, Some(options)).await.expect("docker rm -f");
    }

    /// The daemon's events for this scope's containers from `since` until a second from now,
    /// oldest first: those followed since the scope began, and a bounded query (`--until`) that
    /// returns once it has replayed the latest, so that the last moments are in too.
    pub(crate) fn events(&self, since: SystemTime) -> Vec<DockerEvent> {
        let unix = |t: SystemTime| {
            let d = t.duration_since(UNIX_EPOCH).expect("after the epoch");
            format!("{}.{:09}", d.as_secs(), d.subsec_nanos())
        };
        let until = SystemTime::now() + Duration::from_secs(1);
        let filter = format!("label={CASE_LABEL}={}", self.case);
        let out = docker_cli(&[
            "events",
            "--since",
            &unix(since),
            "--until",
            &unix(until),
            "--filter",
            &filter,
            "--filter",
            "type=container",
            "--format",
            "{{json .}}",
        ]);
        let mut events: Vec<DockerEvent> = out.lines().filter_map(parse_event).collect();
        if let Some((_, seen)) = &self.followed {
            let seen = seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            for event in seen.iter().filter(|e| e.at >= since) {
                if !events.contains(event) {
                    events.push(event.clone());
                }
            }
        }
        // The instances' events: a record carries the test's labels so that the cleanup
        // finds it, and is created and never started.
        events.retain(|e| !is_record(&e.name));
        events.sort_by_key(|e| e.at);
        events
    }
}

/// Whether a container is one of poolctl's records rather than an instance: an up record
/// (`poolctl-up-<instance>`), a pool's rollout record (`poolctl-rollout-<pool>`) or its lock
/// (`poolctl-lock-<pool>`).
pub(crate) fn is_record(name: &str) -> bool {
    ["poolctl-up-", "poolctl-rollout-", "poolctl-lock-"].iter().any(|p| name.starts_with(p))
}

/// `docker args...`, which must succeed; returns its stdout.
#[track_caller]
fn docker_cli(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().expect("run the docker CLI");
    assert!(out.status.success(), "docker {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl Drop for TestDocker {
    /// Removes this test's containers, then its images, with the docker CLI: Drop cannot await,
    /// and blocking on a child process (unlike `block_on`) is safe inside the test's runtime.
    fn drop(&mut self) {
        if let Some((child, _)) = &mut self.followed {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.remove_containers_and_records();
        // Once no container of the scope uses them.
        let images =
            std::mem::take(&mut *self.images.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        if !images.is_empty()
            && !Command::new("docker")
                .args(["rmi", "-f"])
                .args(&images)
                .output()
                .is_ok_and(|o| o.status.success())
        {
            eprintln!("test cleanup: `docker rmi -f` failed; images {images:?} may remain");
        }
    }
}

impl TestDocker {
    /// The scope's containers and poolctl's records of its pools.
    fn remove_containers_and_records(&self) {
        let filter = format!("label={CASE_LABEL}={}", self.case);
        let Ok(out) = Command::new("docker").args(["ps", "-aq", "--filter", &filter]).output() else {
            eprintln!("test cleanup: cannot run `docker ps`; containers labelled {filter} may remain");
            return;
        };
        let mut ids: Vec<String> =
            String::from_utf8_lossy(&out.stdout).split_whitespace().map(String::from).collect();
        // A lock container carries its pool's label, not the test's: one that a killed run left
        // is this test's when its pool is (`pt<case>`, or `pt<case>-...` for a second pool).
        let pool = format!("pt{}", self.case);
        let locks = Command::new("docker")
            .args(["ps", "-a", "--filter", "label=poolctl.dev/lock", "--format"])
            .arg("{{.ID}} {{.Label \"poolctl.dev/pool\"}}")
            .output();
        if let Ok(locks) = locks {
            let text = String::from_utf8_lossy(&locks.stdout).into_owned();
            ids.extend(text.lines().filter_map(|line| {
                let (id, of) = line.split_once(' ')?;
                (of == pool || of.strip_prefix(&pool).is_some_and(|rest| rest.starts_with('-')))
                    .then(|| id.to_owned())
            }));
        }
        if !ids.is_empty() {
            let removed = Command::new("docker").args(["rm", "-f", "-v"]).args(&ids).output();
            if !removed.is_ok_and(|o| o.status.success()) {
                eprintln!("test cleanup: `docker rm -f` failed; containers labelled {filter} may remain");
            }
        }
        // poolctl's records are volumes labelled with the pool (and the template's labels).
        let records = Command::new("docker")
            .args(["volume", "ls", "--filter", "label=poolctl.dev/pool", "--format"])
            .arg("{{.Name}} {{.Label \"poolctl.dev/pool\"}}")
            .output();
        let Ok(records) = records else { return };
        let text = String::from_utf8_lossy(&records.stdout).into_owned();
        let mut names: Vec<String> = text
            .lines()
            .filter_map(|line| {
                let (name, of) = line.split_once(' ')?;
                (of == pool || of.strip_prefix(&pool).is_some_and(|rest| rest.starts_with('-')))
                    .then(|| name.to_owned())
            })
            .collect();
        // And whatever carries this scope's label (a second pool of the test, `pt<case>b`).
        let labelled = Command::new("docker").args(["volume", "ls", "-q", "--filter", &filter]).output();
        let labelled = labelled.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
        for name in labelled.lines() {
            if !names.iter().any(|n| n == name) {
                names.push(name.to_owned());
            }
        }
        if !names.is_empty() {
            let _ = Command::new("docker").args(["volume", "rm", "-f"]).args(&names).output();
        }
    }
}
