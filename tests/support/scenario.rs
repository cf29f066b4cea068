//! The scenario harness every integration test builds on: a temporary directory holding the
//! source (a plain directory, or a Git repository) and, beside it, poolctl's Git cache; a
//! Docker scope of its own when the test needs Docker ([`TestDocker`], whose drop removes every
//! container the test made); a pool YAML writer; and runners for the `poolctl` binary.
//!
//! ```text
//! root/            a temp dir, removed on drop
//!   source/        the source (`--source` by default), maybe a Git repository
//!   cache/         POOLCTL_CACHE_DIR
//!   ...            anything else the test keeps outside the source (`path`)
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use poolctl::model::Container;

use super::cli::{self, Process, Run};
use super::docker::{IMAGE, TestDocker, docker};
use super::git::GitRepo;

/// One test's world. See the module header.
pub struct Scenario {
    root: tempfile::TempDir,
    /// `root/source`.
    dir: PathBuf,
    /// What `run`, `command` and `spawn` pass before the command's own arguments.
    source: Vec<String>,
    git: Option<GitRepo>,
    docker: Option<TestDocker>,
}

impl Scenario {
    /// A scenario without Docker: for offline commands and library tests.
    pub fn new() -> Self {
        let root = tempfile::tempdir().expect("a temp dir");
        let dir = root.path().join("source");
        std::fs::create_dir(&dir).expect("the source dir");
        let source = vec!["--source".to_owned(), dir.display().to_string()];
        Self { root, dir, source, git: None, docker: None }
    }

    /// A scenario with a Docker scope and a pool name of its own. `None` (after a loud banner)
    /// when no daemon answers outside CI: the test returns early.
    pub async fn with_docker() -> Option<Self> {
        let docker = docker().await?;
        Some(Self { docker: Some(docker), ..Self::new() })
    }

    /// Makes the source directory a Git repository (`main` checked out, nothing committed).
    pub fn init_git(&mut self) -> &GitRepo {
        self.git.insert(GitRepo::init(&self.dir))
    }

    /// The source's Git repository ([`Scenario::init_git`] first).
    pub fn git(&self) -> &GitRepo {
        self.git.as_ref().expect("init_git first")
    }

    /// Commits the whole source directory; returns the full commit id.
    pub fn commit(&self, message: &str) -> String {
        self.git().commit(message)
    }

    /// The source directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// poolctl's Git cache directory.
    pub fn cache(&self) -> PathBuf {
        self.root.path().join("cache")
    }

    /// `relative` inside the scenario's temp dir, outside the source.
    pub fn path(&self, relative: &str) -> PathBuf {
        self.root.path().join(relative)
    }

    /// Writes `text` to `relative` inside the source, creating parent directories.
    pub fn write(&self, relative: &str, text: &str) {
        write_file(&self.dir, relative, text);
    }

    /// Writes `pool` to `pool.yaml` at the root of the source.
    pub fn write_pool(&self, pool: &PoolYaml) {
        self.write("pool.yaml", &pool.to_string());
    }

    /// Has `run`, `command` and `spawn` pass `args` (`--source ... --ref ...`) instead of
    /// `--source <source dir>`.
    pub fn set_source(&mut self, args: &[&str]) {
        self.source = args.iter().map(|a| (*a).to_owned()).collect();
    }

    /// `poolctl args...` with this scenario's cache, not run yet.
    pub fn poolctl(&self, args: &[&str]) -> Command {
        let mut cmd = cli::poolctl(&self.cache());
        cmd.args(args);
        cmd
    }

    /// `poolctl args...` with this scenario's cache (and no source added), run to completion.
    pub fn run_bare(&self, args: &[&str]) -> Run {
        Run::of(&mut self.poolctl(args))
    }

    /// `poolctl <command> <source args> args...`, not run yet.
    pub fn command(&self, command: &str, args: &[&str]) -> Command {
        let mut cmd = self.poolctl(&[command]);
        cmd.args(&self.source).args(args);
        cmd
    }

    /// `poolctl <command> <source args> args...`, run to completion.
    pub fn run(&self, command: &str, args: &[&str]) -> Run {
        Run::of(&mut self.command(command, args))
    }

    /// `poolctl <command> <source args> args...`, left running.
    pub fn spawn(&self, command: &str, args: &[&str]) -> Process {
        Process::spawn(self.command(command, args))
    }

    /// The Docker scope ([`Scenario::with_docker`] only).
    pub fn docker(&self) -> &TestDocker {
        self.docker.as_ref().expect("a scenario with Docker")
    }

    /// This scenario's pool name.
    pub fn pool_name(&self) -> &str {
        &self.docker().pool
    }

    /// A pool document for this scenario's pool, labelled so that the guard removes what
    /// poolctl creates from it: one replica of the test image.
    pub fn pool(&self) -> PoolYaml {
        let docker = self.docker();
        let labels = docker.labels().iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        PoolYaml { labels, ..PoolYaml::new(&docker.pool) }
    }

    /// This scenario's pool containers, sorted by name.
    pub async fn containers(&self) -> Vec<Container> {
        self.docker().containers().await
    }

    /// The running ones of [`Scenario::containers`].
    pub async fn running(&self) -> Vec<Container> {
        self.docker().running().await
    }
}

/// Writes `text` to `root/relative`, creating parent directories.
pub fn write_file(root: &Path, relative: &str, text: &str) {
    let path = root.join(relative);
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("create the parent directories");
    std::fs::write(&path, text).expect("write the file");
}

/// A pool document: defaults that suit the test image, and a setter for each part a test
/// varies. `Display` writes it as YAML, `metadata` on lines 3-4 and `replicas` on line 6.
#[derive(Debug, Clone)]
pub struct PoolYaml {
    name: String,
    replicas: u32,
    image: String,
    env: BTreeMap<String, String>,
    /// `env` values read from an environment variable of poolctl's (`valueFrom: {env: NAME}`),
    /// by key.
    env_from: BTreeMap<String, String>,
    volumes: Vec<String>,
    labels: BTreeMap<String, String>,
    bootstrap: Vec<(Vec<String>, Option<String>)>,
    /// `node.kubeconfig` as written, `None` for a pool without `node:`; an empty one is left out
    /// (the default: in a Pod, the Pod's service account).
    node: Option<String>,
    node_labels: BTreeMap<String, String>,
    /// `(key, value, effect)`.
    node_taints: Vec<(String, String, String)>,
    ready_timeout: String,
    drain_timeout: String,
    max_surge: u32,
    max_unavailable: u32,
    stop_grace_period: String,
    /// `spec.health` lines, as written under `health:`.
    health: Vec<String>,
    /// `spec.rollout.progressDeadline`, when set.
    progress_deadline: Option<String>,
    /// `spec.rollout.maxAge`, when set.
    max_age: Option<String>,
    /// `spec.rollout.failureAction: rollback`.
    rollback: bool,
    /// `spec.rollout.strategy: OnDelete`.
    on_delete: bool,
    /// `spec.rollout.deletePolicy`, when set.
    delete_policy: Option<String>,
    /// `spec.template.network`, when set.
    network: Option<String>,
    /// `spec.docker.host`, when set.
    docker_host: Option<String>,
    /// `spec.rollout.monitor`: `0s` unless a test sets it, so that the many rollouts of the
    /// suite do not each watch every new instance for the default 5s; the watch itself is
    /// tested on its own (tests/monitor.rs).
    monitor: Option<String>,
    /// `spec.template.command`, when set.
    command: Vec<String>,
    /// `spec.drain.timeoutAction`, when set.
    drain_timeout_action: Option<String>,
    /// `spec.disruption.windows`, each as a YAML flow mapping.
    windows: Vec<String>,
    /// `spec.dependsOn`.
    depends_on: Vec<String>,
    /// More `spec.template` settings, as `key: value` lines (`memory: 64m`).
    settings: Vec<String>,
    /// `spec.rollout.inPlace`, when set.
    in_place: Option<String>,
    /// `spec.rollout.canary` and `spec.rollout.autoPromote`, when set.
    canary: Option<String>,
    auto_promote: Option<String>,
}

impl PoolYaml {
    /// Pool `name`: one replica of the test image, maxSurge 1, maxUnavailable 0, a 2s stop grace
    /// period and a 5s drain timeout.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            replicas: 1,
            image: IMAGE.to_owned(),
            env: BTreeMap::new(),
            env_from: BTreeMap::new(),
            volumes: Vec::new(),
            labels: BTreeMap::new(),
            bootstrap: Vec::new(),
            node: None,
            node_labels: BTreeMap::new(),
            node_taints: Vec::new(),
            ready_timeout: "10s".to_owned(),
            drain_timeout: "5s".to_owned(),
            max_surge: 1,
            max_unavailable: 0,
            stop_grace_period: "2s".to_owned(),
            health: Vec::new(),
            progress_deadline: None,
            max_age: None,
            rollback: false,
            on_delete: false,
            delete_policy: None,
            network: None,
            docker_host: None,
            monitor: Some("0s".to_owned()),
            command: Vec::new(),
            drain_timeout_action: None,
            windows: Vec::new(),
            depends_on: Vec::new(),
            settings: Vec::new(),
            in_place: None,
            canary: None,
            auto_promote: None,
        }
    }

    /// `spec.dependsOn`: the pools this one waits for.
    #[must_use]
    pub fn depends_on(mut self, pools: &[&str]) -> Self {
        self.depends_on = pools.iter().map(|p| (*p).to_owned()).collect();
        self
    }

    /// One more `spec.template` setting, as `docker run` would take it: `("memory", "64m")`.
    #[must_use]
    pub fn setting(mut self, key: &str, value: &str) -> Self {
        self.settings.push(format!("{key}: {}", quote(value)));
        self
    }

    /// `spec.rollout.inPlace` (`IfPossible`, `Never`).
    #[must_use]
    pub fn in_place(mut self, in_place: &str) -> Self {
        self.in_place = Some(in_place.to_owned());
        self
    }

    /// `spec.drain.timeoutAction` (`Halt`, `Proceed`, `Force`).
    #[must_use]
    pub fn drain_timeout_action(mut self, action: &str) -> Self {
        self.drain_timeout_action = Some(action.to_owned());
        self
    }

    /// One more `spec.disruption.windows` entry, written as a YAML flow mapping:
    /// `{kind: deny, schedule: "0 9 * * *", duration: 8h}`.
    #[must_use]
    pub fn window(mut self, window: &str) -> Self {
        self.windows.push(window.to_owned());
        self
    }

    /// `spec.rollout.monitor`; `None` leaves it out (the default, 5s).
    #[must_use]
    pub fn monitor(mut self, monitor: Option<&str>) -> Self {
        self.monitor = monitor.map(str::to_owned);
        self
    }

    /// `spec.template.command`.
    #[must_use]
    pub fn command(mut self, command: &[&str]) -> Self {
        self.command = command.iter().map(|a| (*a).to_owned()).collect();
        self
    }

    /// `spec.template.network`.
    #[must_use]
    pub fn network(mut self, network: &str) -> Self {
        self.network = Some(network.to_owned());
        self
    }

    /// `spec.docker.host`: the pool lives on that daemon.
    #[must_use]
    pub fn docker_host(mut self, host: &str) -> Self {
        self.docker_host = Some(host.to_owned());
        self
    }

    /// The same pool document under another pool name.
    #[must_use]
    pub fn named(mut self, name: &str) -> Self {
        name.clone_into(&mut self.name);
        self
    }

    /// `spec.rollout.deletePolicy`.
    #[must_use]
    pub fn delete_policy(mut self, policy: &str) -> Self {
        self.delete_policy = Some(policy.to_owned());
        self
    }

    /// `spec.rollout.strategy: OnDelete`.
    #[must_use]
    pub fn on_delete(mut self) -> Self {
        self.on_delete = true;
        self
    }

    /// `spec.rollout.failureAction: rollback`.
    #[must_use]
    pub fn rollback(mut self) -> Self {
        self.rollback = true;
        self
    }

    /// `spec.rollout.canary` (`1`, `25%`).
    #[must_use]
    pub fn canary(mut self, canary: &str) -> Self {
        self.canary = Some(canary.to_owned());
        self
    }

    /// `spec.rollout.autoPromote`.
    #[must_use]
    pub fn auto_promote(mut self, wait: &str) -> Self {
        self.auto_promote = Some(wait.to_owned());
        self
    }

    /// `spec.rollout.maxAge`.
    #[must_use]
    pub fn max_age(mut self, age: &str) -> Self {
        self.max_age = Some(age.to_owned());
        self
    }

    /// `spec.rollout.progressDeadline`.
    #[must_use]
    pub fn progress_deadline(mut self, deadline: &str) -> Self {
        self.progress_deadline = Some(deadline.to_owned());
        self
    }

    /// `spec.health`: Ready `Unknown` or `False` make an instance unhealthy after `timeout`,
    /// and at most `max_unhealthy` of the pool are replaced at once.
    #[must_use]
    pub fn health(mut self, timeout: &str, max_unhealthy: &str) -> Self {
        self.health = vec![
            "unhealthyConditions:".to_owned(),
            format!("  - {{type: Ready, status: Unknown, timeout: {timeout}}}"),
            format!("  - {{type: Ready, status: \"False\", timeout: {timeout}}}"),
            format!("maxUnhealthy: {}", quote(max_unhealthy)),
        ];
        self
    }

    #[must_use]
    pub fn replicas(mut self, replicas: u32) -> Self {
        self.replicas = replicas;
        self
    }

    pub fn replica_count(&self) -> u32 {
        self.replicas
    }

    #[must_use]
    pub fn image(mut self, image: &str) -> Self {
        image.clone_into(&mut self.image);
        self
    }

    #[must_use]
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.insert(key.to_owned(), value.to_owned());
        self
    }

    /// An env value that poolctl reads from its own environment variable `var` (`valueFrom`).
    #[must_use]
    pub fn env_from(mut self, key: &str, var: &str) -> Self {
        self.env_from.insert(key.to_owned(), var.to_owned());
        self
    }

    /// Adds a `src:dst[:options]` volume to the template.
    #[must_use]
    pub fn volume(mut self, volume: &str) -> Self {
        self.volumes.push(volume.to_owned());
        self
    }

    /// Adds a bootstrap command, with its timeout if given.
    #[must_use]
    pub fn bootstrap(mut self, exec: &[&str], timeout: Option<&str>) -> Self {
        self.bootstrap.push((exec.iter().map(|a| (*a).to_owned()).collect(), timeout.map(str::to_owned)));
        self
    }

    /// Makes each instance a Node of the cluster `kubeconfig` names.
    #[must_use]
    pub fn node(mut self, kubeconfig: &Path) -> Self {
        self.node = Some(kubeconfig.display().to_string());
        self
    }

    /// Makes each instance a Node of the cluster poolctl finds without a `node.kubeconfig`: in a
    /// Pod, the Pod's own.
    #[must_use]
    pub fn node_default(mut self) -> Self {
        self.node = Some(String::new());
        self
    }

    /// Adds a label to `node.labels` (with [`PoolYaml::node`]).
    #[must_use]
    pub fn node_label(mut self, key: &str, value: &str) -> Self {
        self.node_labels.insert(key.to_owned(), value.to_owned());
        self
    }

    /// Sets `node.taints` to this one taint (with [`PoolYaml::node`]).
    #[must_use]
    pub fn node_taint(mut self, key: &str, value: &str, effect: &str) -> Self {
        self.node_taints = vec![(key.to_owned(), value.to_owned(), effect.to_owned())];
        self
    }

    /// How long a new Node may take to turn Ready (with [`PoolYaml::node`]; default 10s).
    #[must_use]
    pub fn ready_timeout(mut self, timeout: &str) -> Self {
        timeout.clone_into(&mut self.ready_timeout);
        self
    }

    #[must_use]
    pub fn drain_timeout(mut self, timeout: &str) -> Self {
        timeout.clone_into(&mut self.drain_timeout);
        self
    }

    #[must_use]
    pub fn max_surge(mut self, max_surge: u32) -> Self {
        self.max_surge = max_surge;
        self
    }

    #[must_use]
    pub fn max_unavailable(mut self, max_unavailable: u32) -> Self {
        self.max_unavailable = max_unavailable;
        self
    }

    #[must_use]
    pub fn stop_grace_period(mut self, period: &str) -> Self {
        period.clone_into(&mut self.stop_grace_period);
        self
    }
}

/// A YAML scalar: JSON's quoted string is one.
fn quote(text: &str) -> String {
    serde_json::to_string(text).expect("a string serialises")
}

impl PoolYaml {
    /// The `spec.rollout` section.
    fn write_rollout(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "  rollout:\n    maxSurge: {}\n    maxUnavailable: {}\n    stopGracePeriod: {}\n    drainTimeout: {}",
            self.max_surge, self.max_unavailable, self.stop_grace_period, self.drain_timeout
        )?;
        if let Some(monitor) = &self.monitor {
            writeln!(f, "    monitor: {monitor}")?;
        }
        if let Some(age) = &self.max_age {
            writeln!(f, "    maxAge: {age}")?;
        }
        if let Some(deadline) = &self.progress_deadline {
            writeln!(f, "    progressDeadline: {deadline}")?;
        }
        if self.on_delete {
            writeln!(f, "    strategy: OnDelete")?;
        }
        if self.rollback {
            writeln!(f, "    failureAction: rollback")?;
        }
        if let Some(policy) = &self.delete_policy {
            writeln!(f, "    deletePolicy: {policy}")?;
        }
        if let Some(in_place) = &self.in_place {
            writeln!(f, "    inPlace: {in_place}")?;
        }
        if let Some(canary) = &self.canary {
            writeln!(f, "    canary: {canary}")?;
        }
        if let Some(wait) = &self.auto_promote {
            writeln!(f, "    autoPromote: {wait}")?;
        }
        Ok(())
    }
}

impl fmt::Display for PoolYaml {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "apiVersion: poolctl.dev/v1alpha1\nkind: Pool\nmetadata:\n  name: {}", self.name)?;
        writeln!(f, "spec:\n  replicas: {}\n  template:\n    image: {}", self.replicas, self.image)?;
        if !self.command.is_empty() {
            let command: Vec<String> = self.command.iter().map(|a| quote(a)).collect();
            writeln!(f, "    command: [{}]", command.join(", "))?;
        }
        for (section, map) in [("env", &self.env), ("labels", &self.labels)] {
            let from = if section == "env" { &self.env_from } else { &BTreeMap::new() };
            if !map.is_empty() || !from.is_empty() {
                writeln!(f, "    {section}:")?;
                for (key, value) in map {
                    writeln!(f, "      {key}: {}", quote(value))?;
                }
                for (key, var) in from {
                    writeln!(f, "      {key}: {{valueFrom: {{env: {}}}}}", quote(var))?;
                }
            }
        }
        if !self.volumes.is_empty() {
            let volumes: Vec<String> = self.volumes.iter().map(|v| quote(v)).collect();
            writeln!(f, "    volumes: [{}]", volumes.join(", "))?;
        }
        if let Some(network) = &self.network {
            writeln!(f, "    network: {network}")?;
        }
        for setting in &self.settings {
            writeln!(f, "    {setting}")?;
        }
        if let Some(host) = &self.docker_host {
            writeln!(f, "  docker:\n    host: {}", quote(host))?;
        }
        if !self.bootstrap.is_empty() {
            writeln!(f, "  bootstrap:")?;
            for (exec, timeout) in &self.bootstrap {
                let exec: Vec<String> = exec.iter().map(|a| quote(a)).collect();
                writeln!(f, "    - exec: [{}]", exec.join(", "))?;
                if let Some(timeout) = timeout {
                    writeln!(f, "      timeout: {timeout}")?;
                }
            }
        }
        if let Some(kubeconfig) = &self.node {
            let ready_timeout = &self.ready_timeout;
            writeln!(f, "  node:")?;
            if !kubeconfig.is_empty() {
                writeln!(f, "    kubeconfig: {kubeconfig}")?;
            }
            writeln!(f, "    readyTimeout: {ready_timeout}")?;
            if !self.node_labels.is_empty() {
                writeln!(f, "    labels:")?;
                for (key, value) in &self.node_labels {
                    writeln!(f, "      {key}: {}", quote(value))?;
                }
            }
            for (i, (key, value, effect)) in self.node_taints.iter().enumerate() {
                let head = if i == 0 { "    taints:\n" } else { "" };
                writeln!(f, "{head}      - {{key: {key}, value: {}, effect: {effect}}}", quote(value))?;
            }
        }
        if !self.health.is_empty() {
            writeln!(f, "  health:")?;
            for line in &self.health {
                writeln!(f, "    {line}")?;
            }
        }
        if let Some(action) = &self.drain_timeout_action {
            writeln!(f, "  drain:\n    timeoutAction: {action}")?;
        }
        self.write_rollout(f)?;
        if !self.windows.is_empty() {
            writeln!(f, "  disruption:\n    windows:")?;
            for window in &self.windows {
                writeln!(f, "      - {window}")?;
            }
        }
        if !self.depends_on.is_empty() {
            writeln!(f, "  dependsOn: [{}]", self.depends_on.join(", "))?;
        }
        Ok(())
    }
}
