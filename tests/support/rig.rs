//! A scenario with a fake Kubernetes cluster whose simulated kubelet turns the scenario's
//! containers into Nodes; its kubeconfig sits beside the source.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use poolctl::model::ContainerState;
use serde_json::Value;

use crate::support::cli::{Process, Run};
use crate::support::docker::DockerEvent;
use crate::support::fake_kube::{Event, FakeKube, FakeKubeOptions, KubeletOptions};
use crate::support::scenario::{PoolYaml, Scenario};

/// Guards against a hang only; no assertion depends on it.
pub const LIMIT: Duration = Duration::from_secs(120);

/// One test's world: its scenario (source, cache, Docker scope) and its fake cluster, whose
/// kubeconfig sits beside the source.
pub struct Rig {
    pub s: Scenario,
    pub fake: FakeKube,
}

impl Rig {
    pub async fn new() -> Option<Self> {
        Self::with(FakeKubeOptions::default()).await
    }

    /// A rig whose fake cluster is set up by `options`, with a kubelet (as `options` sets it up,
    /// or the default one) for this test's containers.
    pub async fn with(options: FakeKubeOptions) -> Option<Self> {
        let s = Scenario::with_docker().await?;
        let (key, value) = s.docker().case_label();
        // Whatever else the caller set for the kubelet, it follows this test's containers.
        let mut kubelet = options.kubelet.clone().unwrap_or_else(|| KubeletOptions::new(String::new()));
        kubelet.run_label = format!("{key}={value}");
        let fake = FakeKube::start(FakeKubeOptions { kubelet: Some(kubelet), ..options });
        fake.write_kubeconfig(&s.path("kubeconfig")).expect("write the kubeconfig");
        Some(Self { s, fake })
    }

    pub fn pool(&self) -> &str {
        self.s.pool_name()
    }

    /// Version 1 of a pool of three Nodes: Ready within 10s, drained within 3s.
    pub fn spec(&self) -> PoolYaml {
        self.s.pool().replicas(3).env("VERSION", "1").node(&self.s.path("kubeconfig")).drain_timeout("3s")
    }

    pub fn write(&self, spec: &PoolYaml) {
        self.s.write_pool(spec);
    }

    pub fn poolctl(&self, command: &str, extra: &[&str]) -> Run {
        self.s.run(command, extra)
    }

    pub fn apply(&self) -> Run {
        self.poolctl("apply", &["--yes"])
    }

    /// `apply --yes`, left running, for a test to kill: its lock outlives it by 2 s only.
    pub fn spawn_apply_to_kill(&self) -> Process {
        let mut command = self.s.command("apply", &["--yes"]);
        command.env("POOLCTL_LOCK_LEASE", "2s");
        Process::spawn(command)
    }

    /// `apply --yes` after a killed one: it waits for the killed run's lock to lapse rather than
    /// break it.
    pub fn apply_after_kill(&self) -> Run {
        self.poolctl("apply", &["--yes", "--lock-timeout", "1m"])
    }

    /// The spec's template hash, as the plan reports it.
    pub fn template_hash(&self) -> String {
        let run = self.poolctl("plan", &["-o", "json"]).expect_code(0);
        let plan: Value = serde_json::from_str(&run.stdout).expect("plan JSON");
        plan["pools"][0]["template_hash"].as_str().expect("a template hash").to_owned()
    }

    /// The pool's containers: name -> (running, template hash).
    pub async fn containers(&self) -> BTreeMap<String, (bool, String)> {
        let containers = self.s.containers().await.into_iter();
        containers.map(|c| (c.name, (c.state == ContainerState::Running, c.template_hash))).collect()
    }

    /// Docker's events for this test's containers between `since` and now, oldest first.
    pub fn docker_events(&self, since: SystemTime) -> Vec<DockerEvent> {
        self.s.docker().events(since)
    }

    /// The pool's Nodes in the fake cluster, by name: (Ready, unschedulable, poolctl's cordon).
    pub fn nodes(&self) -> BTreeMap<String, (bool, bool, bool)> {
        self.fake
            .node_names()
            .into_iter()
            .filter(|n| n.starts_with(&format!("{}-", self.pool())))
            .filter_map(|n| {
                let node = self.fake.node(&n)?;
                let ready = node
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
                let unschedulable = node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false);
                let ours = node
                    .metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key("poolctl.dev/retiring"));
                Some((n, (ready, unschedulable, ours)))
            })
            .collect()
    }

    pub fn is_pool_node(&self, name: &str) -> bool {
        name.starts_with(&format!("{}-", self.pool()))
    }

    /// The fake's events after `seq`.
    pub fn events_after(&self, seq: u64) -> Vec<Event> {
        self.fake.events().into_iter().filter(|e| e.seq > seq).collect()
    }

    pub fn last_seq(&self) -> u64 {
        self.fake.events().last().map_or(0, |e| e.seq)
    }

    /// Apply version 1 of a pool of `replicas` and check that it converged.
    pub async fn start(&self, f: &PoolYaml) -> Vec<String> {
        self.write(f);
        self.apply().expect_code(0);
        let containers = self.containers().await;
        assert_eq!(containers.len(), f.replica_count() as usize);
        let nodes = self.nodes();
        assert_eq!(nodes.keys().collect::<Vec<_>>(), containers.keys().collect::<Vec<_>>());
        assert!(nodes.values().all(|&(ready, unsched, _)| ready && !unsched));
        // poolctl labelled them once they were Ready, so they are found by label from now on.
        for name in nodes.keys() {
            let labels = self.fake.node(name).unwrap().metadata.labels.unwrap_or_default();
            assert_eq!(labels.get("poolctl.dev/pool").map(String::as_str), Some(self.pool()));
        }
        containers.into_keys().collect()
    }
}
