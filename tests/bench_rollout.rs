//! The rollout benchmark (`bench/rollout.sh`; BENCHMARKS.md, "Kubernetes rollout overhead").
//!
//! The real `poolctl` binary replaces a pool of 3 Nodes against real Docker and the fake API
//! server. In turns with it, each on a fresh world, a floor carries out the very same rollout:
//! the same containers (made by poolctl's own `new_container` and create body), the same steps
//! in the same order under the same safety rules, as bare bollard and kube-rs calls made one
//! after another from the test, every wait a watch, with nothing else: no process start, no
//! observation, no plan, no lock, no output. A tool that keeps those rules cannot be faster,
//! so poolctl's wall time over the floor's is what poolctl adds. The older measure, the wall
//! time over the waits read from Docker's events and the fake's event log, is printed beside it:
//! those windows leave out part of Docker's own work, so no tool could reach 1.0 on it.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use bollard::Docker;
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{CreateContainerOptions, RemoveContainerOptions, StopContainerOptions};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use poolctl::backend::docker::create_body;
use poolctl::backend::kube::KubeCluster;
use poolctl::model::labels;
use poolctl::rollout::execute::new_container;
use poolctl::source::{self, SourceSpec};

use crate::support::docker::DockerEvent;
use crate::support::fake_kube::{Event, EventKind, FakeKubeOptions, KubeletOptions, PdbBound, Store};
use crate::support::rig::{LIMIT, Rig};

/// How many turns each of poolctl and the floor get, unless `POOLCTL_BENCH_TURNS` says.
const TURNS: usize = 3;

/// What the issue asks of poolctl's wall time over the floor's.
const TARGET: f64 = 1.05;

/// Prints poolctl's wall time for a 3-instance rollout against the floor's, and each one's
/// wall time against the waits in the event logs. `POOLCTL_BENCH_BIN` runs another poolctl
/// binary (a release build, say; relative to the crate root) instead of the test build.
#[tokio::test]
#[ignore = "a benchmark: run with bench/rollout.sh"]
async fn bench_rollout_overhead() {
    let (bin, which) = match std::env::var_os("POOLCTL_BENCH_BIN") {
        Some(path) => {
            let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
            assert!(path.is_file(), "POOLCTL_BENCH_BIN: no file at {}", path.display());
            let which = format!("{} (POOLCTL_BENCH_BIN)", path.display());
            (path, which)
        }
        None => (PathBuf::from(env!("CARGO_BIN_EXE_poolctl")), "the test build (debug profile)".to_owned()),
    };
    let turns = std::env::var("POOLCTL_BENCH_TURNS")
        .ok()
        .map_or(TURNS, |t| t.parse().ok().filter(|&n| n > 0).expect("POOLCTL_BENCH_TURNS: a number above 0"));
    let kubelet = match std::env::var("POOLCTL_BENCH_KUBELET").as_deref() {
        Ok("poll") => Kubelet::Polling,
        Ok("prompt") | Err(_) => Kubelet::Prompt,
        Ok(other) => panic!("POOLCTL_BENCH_KUBELET: poll or prompt, not {other:?}"),
    };
    println!(
        "rollout of 3 instances (maxSurge 1, maxUnavailable 0, one app pod per Node, PDB minAvailable 2,"
    );
    println!("evicted pods terminate in 300 ms), poolctl and the floor in turns, each on a fresh world");
    println!("poolctl binary: {which}");
    println!("fake kubelet: {}", kubelet.describe());
    println!("load average before: {}", load_average());
    println!("turn  who         wall   start   ready   drain    stop   waits wall/waits  teardown  removal");
    let mut poolctl = Vec::new();
    let mut floor = Vec::new();
    let trace = std::env::var_os("POOLCTL_BENCH_TRACE").is_some();
    for turn in 1..=turns {
        for who in [Who::Poolctl, Who::Floor] {
            let Some(measured) = run_turn(who, &bin, kubelet, trace && turn == 1).await else { return };
            println!("{:<5} {}", turn, measured.row(who));
            match who {
                Who::Poolctl => poolctl.push(measured),
                Who::Floor => floor.push(measured),
            }
        }
    }
    println!("load average after: {}", load_average());
    let wall = |ms: &[Measured]| median(ms.iter().map(|m| m.wall).collect());
    let pairs = median(poolctl.iter().zip(&floor).map(|(p, f)| p.wall / f.wall).collect());
    let by_waits = |ms: &[Measured]| median(ms.iter().map(|m| m.wall / m.windows.waits()).collect());
    let ratio = wall(&poolctl) / wall(&floor);
    println!("medians over {turns} turns of each:");
    println!("  poolctl wall time:                   {:6.2}s", wall(&poolctl));
    println!("  floor wall time:                     {:6.2}s", wall(&floor));
    println!(
        "  poolctl / floor:                     {ratio:6.3}  (median of the turns' pairs: {pairs:.3}); target <= {TARGET}: {}",
        if ratio <= TARGET { "met" } else { "MISSED" }
    );
    println!(
        "  wall / event-window waits:   poolctl {:6.3}, floor {:.3}  (Docker's own work outside the windows)",
        by_waits(&poolctl),
        by_waits(&floor)
    );
}

/// How the fake kubelet notices containers: it registers a Node, and turns it Ready 300 ms
/// later, at its first look after each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kubelet {
    /// It also looks as soon as Docker reports a container started or died, and when a Node is
    /// due: the registration waits no more than a Docker list call, whoever started the container.
    Prompt,
    /// It looks every 150 ms only (the tests' default, and this benchmark's before the floor):
    /// a Node registers up to 150 ms after its container starts, by where the start falls in the
    /// kubelet's period, so a rollout a few ms later can wait over 100 ms longer per Node.
    Polling,
}

impl Kubelet {
    fn prompt(self) -> bool {
        self == Self::Prompt
    }

    fn describe(self) -> &'static str {
        match self {
            Self::Prompt => {
                "prompt (looks when Docker reports a start or a death; POOLCTL_BENCH_KUBELET=poll to poll)"
            }
            Self::Polling => "polling Docker every 150 ms (POOLCTL_BENCH_KUBELET=poll)",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    Poolctl,
    Floor,
}

/// One turn's wall time and event windows, in seconds.
struct Measured {
    wall: f64,
    windows: Windows,
}

impl Measured {
    fn row(&self, who: Who) -> String {
        let w = &self.windows;
        format!(
            "{:<8} {:>6.2}s {:>6.2}s {:>6.2}s {:>6.2}s {:>6.2}s {:>6.2}s {:>10.3} {:>8.2}s {:>7.2}s",
            format!("{who:?}").to_lowercase(),
            self.wall,
            w.start,
            w.ready,
            w.drain,
            w.stop,
            w.waits(),
            self.wall / w.waits(),
            w.teardown,
            w.removal
        )
    }
}

/// One rollout by `who` on a fresh world, checked for what it must have done. With `trace`,
/// prints its timeline first.
async fn run_turn(who: Who, bin: &Path, kubelet: Kubelet, trace: bool) -> Option<Measured> {
    let (rig, old) = fresh(kubelet).await?;
    let from = rig.last_seq();
    let since = SystemTime::now();
    let wall = match who {
        Who::Poolctl => by_poolctl(&rig, bin),
        Who::Floor => tokio::time::timeout(LIMIT, by_floor(&rig, &old)).await.expect("the floor finishes"),
    };
    let events = rig.events_after(from);
    let docker_events = rig.docker_events(since);
    let new = converged(&rig, &old, &events).await;
    let windows = Windows::of(&events, &docker_events, &old, &new);
    if trace {
        print_timeline(&rig, since, &events, &docker_events);
    }
    Some(Measured { wall: wall.as_secs_f64(), windows })
    // The rig goes here: its Docker scope removes every container of the turn.
}

/// A fresh world: version 1 of the pool applied by poolctl, the app under its budget running
/// on the three Nodes, and version 2 written. Returns the old instances, in name order.
async fn fresh(kubelet: Kubelet) -> Option<(Rig, Vec<String>)> {
    let rig = Rig::with(FakeKubeOptions {
        // Pods take a moment to terminate, as real ones do, so that the drain has to wait.
        pod_termination_delay: Duration::from_millis(300),
        kubelet: Some(KubeletOptions { prompt: kubelet.prompt(), ..KubeletOptions::new(String::new()) }),
        ..FakeKubeOptions::default()
    })
    .await?;
    let v1 = rig.spec().drain_timeout("30s");
    let old = rig.start(&v1).await;
    rig.fake.add_app("default", "web", 3);
    rig.fake.put_pdb("default", "web", "web", PdbBound::MinAvailable(2));
    let running = |s: &Store| {
        let on_node = |p: &&Pod| p.spec.as_ref().is_some_and(|s| s.node_name.is_some());
        let up = |p: &&Pod| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        s.pods().filter(on_node).filter(up).count() == 3
    };
    tokio::time::timeout(LIMIT, rig.fake.wait_until(running)).await.expect("the app runs");
    rig.write(&v1.env("VERSION", "2"));
    Some((rig, old))
}

/// `poolctl apply --yes` with `bin`: the wall time from its start to its exit.
fn by_poolctl(rig: &Rig, bin: &Path) -> Duration {
    let mut apply = Command::new(bin);
    apply.env("POOLCTL_CACHE_DIR", rig.s.cache()).env_remove("RUST_LOG").stdin(Stdio::null());
    apply.arg("apply").arg("--source").arg(rig.s.dir()).arg("--yes");
    let started = Instant::now();
    let out = apply.output().expect("poolctl runs");
    let wall = started.elapsed();
    assert!(
        out.status.success(),
        "poolctl apply failed\n--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    wall
}

/// The floor's rollout: the wall time from its first call to the end of its last. What it
/// needs is made before the clock starts: the container bodies, from the same source and with
/// poolctl's own functions, and clients already connected (a tool that keeps them open, as
/// `poolctl watch` does, pays no connection either).
async fn by_floor(rig: &Rig, old: &[String]) -> Duration {
    let dir = rig.s.dir().display().to_string();
    let spec = SourceSpec::new(&dir, None, None).expect("the source").with_cache_dir(rig.s.cache());
    let desired = source::load(&spec).expect("the source loads");
    let pool = &desired.pools[0];
    let kubeconfig = rig.s.path("kubeconfig").display().to_string();
    let cluster = KubeCluster::connect(Some(&kubeconfig), None, rig.pool()).await.expect("connect");
    let new: Vec<(String, ContainerCreateBody)> = (0..old.len())
        .map(|i| {
            // Named as poolctl names them, with a suffix of our own.
            let name = format!("{}-{}-floor{i}", rig.pool(), &pool.template_hash[..10]);
            let container = new_container(pool, &desired.origin, &name, Some(cluster.identity()));
            (name, create_body(&container).expect("a create body"))
        })
        .collect();
    let grace = pool.pool.spec.rollout.stop_grace_period.get();
    let floor = Floor {
        docker: rig.s.docker().backend.client().clone(),
        client: rig.fake.client(),
        pool: rig.pool().to_owned(),
        grace: i32::try_from(grace.as_secs()).expect("a grace period in range"),
    };
    floor.docker.ping().await.expect("Docker answers");
    floor.nodes().list(&ListParams::default().limit(1)).await.expect("the API server answers");

    let started = Instant::now();
    for (old, (name, body)) in old.iter().zip(new) {
        floor.replace(old, &name, body).await;
    }
    started.elapsed()
}

/// The minimal client: one instance at a time, each call awaited before the next.
struct Floor {
    docker: Docker,
    client: kube::Client,
    pool: String,
    /// The pool's stopGracePeriod, in seconds, as poolctl passes it to Docker.
    grace: i32,
}

impl Floor {
    fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    /// Surge one new instance, then retire `old` in the safe order.
    async fn replace(&self, old: &str, new: &str, body: ContainerCreateBody) {
        let create = CreateContainerOptions { name: Some(new.to_owned()), ..Default::default() };
        self.docker.create_container(Some(create), body).await.expect("create");
        self.docker.start_container(new, None).await.expect("start");
        // From resourceVersion 0 the watch starts with the Node as it is, if it registered.
        let fields = format!("metadata.name={new}");
        until(&self.nodes(), &fields, "0".to_owned(), BTreeMap::new(), |nodes| {
            nodes.values().any(node_ready)
        })
        .await;
        // The Node as poolctl leaves it once Ready: its pool label, and no other label managed.
        let label = json!({ "metadata": { "labels": { labels::POOL: self.pool }, "annotations": { labels::MANAGED: "" } } });
        self.patch(new, &label).await;

        let cordon = json!({
            "metadata": { "annotations": { labels::RETIRING: "cordoned by poolctl to retire this instance" } },
            "spec": { "unschedulable": true }
        });
        self.patch(old, &cordon).await;
        self.drain(old).await;
        let stop = StopContainerOptions { t: Some(self.grace), ..Default::default() };
        self.docker.stop_container(old, Some(stop)).await.expect("stop");
        self.nodes().delete(old, &DeleteParams::default()).await.expect("delete the Node");
        let remove = RemoveContainerOptions { v: true, force: false, link: false };
        self.docker.remove_container(old, Some(remove)).await.expect("remove");
    }

    async fn patch(&self, node: &str, patch: &Value) {
        self.nodes()
            .patch(node, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .expect("patch the Node");
    }

    /// Evict the Node's pods as `kubectl drain` does, then wait until they are gone, following
    /// them from the list that named them.
    async fn drain(&self, node: &str) {
        let pods: Api<Pod> = Api::all(self.client.clone());
        let fields = format!("spec.nodeName={node}");
        let list = pods.list(&ListParams::default().fields(&fields)).await.expect("list the Node's pods");
        let version = list.metadata.resource_version.clone().unwrap_or_default();
        let evicted: Vec<(String, Option<String>)> =
            list.items.iter().filter(|p| evictable(p)).map(|p| (key(p), p.uid())).collect();
        for pod in list.items.iter().filter(|p| evictable(p)) {
            self.evict(pod, &version).await;
        }
        let seen = list.items.into_iter().map(|p| (key(&p), p)).collect();
        // Gone: deleted, or the name taken by another pod.
        until(&pods, &fields, version, seen, |now| {
            evicted.iter().all(|(k, uid)| now.get(k).is_none_or(|p| p.uid() != *uid))
        })
        .await;
    }

    /// Evict one pod through the policy/v1 Eviction subresource (with its UID as a
    /// precondition, as poolctl does). A PodDisruptionBudget's refusal (429) is asked again
    /// after the next change to a pod of its namespace, the only thing that can change the
    /// budget's answer, followed by a watch from `version` (before the first try), so that
    /// none is missed.
    async fn evict(&self, pod: &Pod, version: &str) {
        let (name, namespace) = (pod.name_any(), pod.namespace().unwrap_or_default());
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        let body = json!({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": { "name": name, "namespace": namespace },
            "deleteOptions": { "preconditions": { "uid": pod.uid() } }
        });
        let mut version = version.to_owned();
        let mut changes = None;
        loop {
            match api.create_subresource::<_, Value>("eviction", &name, &PostParams::default(), &body).await {
                Ok(status) => {
                    assert_ne!(status["status"], "Failure", "eviction of {name}: {status}");
                    return;
                }
                // Gone already, or the name is another pod's now.
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => return,
                Err(kube::Error::Api(s)) if s.code == 429 => {}
                Err(e) => panic!("eviction of {name}: {e}"),
            }
            if changes.is_none() {
                let watch = api.watch(&WatchParams::default(), &version).await.expect("watch pods");
                changes = Some(watch.boxed());
            }
            match changes.as_mut().expect("opened above").try_next().await.expect("a pod event") {
                Some(WatchEvent::Added(p) | WatchEvent::Modified(p) | WatchEvent::Deleted(p)) => {
                    version = p.resource_version().unwrap_or(version);
                }
                Some(WatchEvent::Bookmark(_)) => {}
                Some(WatchEvent::Error(e)) => panic!("watch pods: {e:?}"),
                // The server ended the watch: watch again from the last change seen.
                None => changes = None,
            }
        }
    }
}

/// Follows the objects that `fields` selects from `seen` as of `version` until `done` holds:
/// a watch, resumed from the last version seen when the server ends it.
async fn until<K>(
    api: &Api<K>,
    fields: &str,
    mut version: String,
    mut seen: BTreeMap<String, K>,
    done: impl Fn(&BTreeMap<String, K>) -> bool,
) where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let params = WatchParams::default().fields(fields);
    while !done(&seen) {
        let mut events = api.watch(&params, &version).await.expect("watch").boxed();
        while let Some(event) = events.try_next().await.expect("a watch event") {
            match event {
                WatchEvent::Added(o) | WatchEvent::Modified(o) => {
                    version = o.resource_version().unwrap_or(version);
                    seen.insert(key(&o), o);
                }
                WatchEvent::Deleted(o) => {
                    version = o.resource_version().unwrap_or(version);
                    seen.remove(&key(&o));
                }
                WatchEvent::Bookmark(_) => {}
                WatchEvent::Error(e) => panic!("watch {fields}: {e:?}"),
            }
            if done(&seen) {
                return;
            }
        }
    }
}

fn key<K: kube::Resource>(o: &K) -> String {
    format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any())
}

fn node_ready(node: &Node) -> bool {
    let conditions = node.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// What `kubectl drain` evicts: not a DaemonSet's pod, a mirror pod or a finished one.
fn evictable(pod: &Pod) -> bool {
    let daemon = pod.owner_references().iter().any(|o| o.controller == Some(true) && o.kind == "DaemonSet");
    let mirror = pod.annotations().contains_key("kubernetes.io/config.mirror");
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    !daemon && !mirror && !matches!(phase, Some("Succeeded" | "Failed"))
}

/// Checks that the rollout did what both poolctl and the floor must: three new instances, each
/// a labelled, Ready, schedulable Node; never fewer than 3 serving; no budget bypassed. Returns
/// the new instances.
async fn converged(rig: &Rig, old: &[String], events: &[Event]) -> Vec<String> {
    for e in events {
        let serving = e.ready_schedulable.iter().filter(|n| rig.is_pool_node(n)).count();
        assert!(serving >= 3, "only {serving} pool Nodes serve after {:?}", e.kind);
    }
    assert!(rig.fake.evictions().iter().all(|e| e.status == 201 || e.status == 429));
    let containers = rig.containers().await;
    assert_eq!(containers.len(), 3);
    assert!(containers.keys().all(|n| !old.contains(n)) && containers.values().all(|(up, _)| *up));
    let nodes = rig.nodes();
    assert_eq!(nodes.keys().collect::<Vec<_>>(), containers.keys().collect::<Vec<_>>());
    assert!(nodes.values().all(|&(ready, unschedulable, _)| ready && !unschedulable));
    for name in nodes.keys() {
        let labels = rig.fake.node(name).unwrap().metadata.labels.unwrap_or_default();
        assert_eq!(labels.get(labels::POOL).map(String::as_str), Some(rig.pool()));
    }
    containers.into_keys().collect()
}

/// The waits of a rollout as the event logs show them, summed over the instances, in seconds;
/// and two stretches of Docker's own work between the steps, which the waits leave out.
#[derive(Debug, Default)]
struct Windows {
    /// Docker `create` to `start` of each new container.
    start: f64,
    /// Container `start` to the Node's Ready condition (the fake kubelet's registration).
    ready: f64,
    /// The first eviction on an old Node to the last of its pods gone.
    drain: f64,
    /// Docker `kill` (SIGTERM) to `die`.
    stop: f64,
    /// `die` to the end of the stop call: Docker 20.10 reports `die` before it releases the
    /// container's network and mounts (from Docker 23 after it, moby#41698).
    teardown: f64,
    /// The Node deleted to the container's `destroy`: Docker's remove call.
    removal: f64,
}

impl Windows {
    fn of(events: &[Event], docker: &[DockerEvent], old: &[String], new: &[String]) -> Self {
        let mut w = Self::default();
        for name in new {
            let created = docker_when(docker, "create", name);
            let running = docker_when(docker, "start", name);
            w.start += secs(created, running);
            w.ready += secs(running, fake_when(events, name, |k| matches!(k, EventKind::NodeReady { .. })));
        }
        for name in old {
            let first = fake_when(events, name, |k| matches!(k, EventKind::PodEvicted { .. }));
            let gone = events
                .iter()
                .filter(|e| matches!(&e.kind, EventKind::PodDeleted { node: Some(n), .. } if n == name))
                .map(|e| e.wall)
                .max()
                .expect("its pods went");
            w.drain += secs(first, gone);
            let died = docker_when(docker, "die", name);
            w.stop += secs(docker_when(docker, "kill", name), died);
            w.teardown += secs(died, docker_when(docker, "stop", name));
            let deleted = fake_when(events, name, |k| matches!(k, EventKind::NodeDeleted { .. }));
            w.removal += secs(deleted, docker_when(docker, "destroy", name));
        }
        w
    }

    fn waits(&self) -> f64 {
        self.start + self.ready + self.drain + self.stop
    }
}

/// When Docker first reported `action` of container `name`.
fn docker_when(events: &[DockerEvent], action: &str, name: &str) -> SystemTime {
    let at = events.iter().filter(|e| e.name == name && e.action == action).map(|e| e.at).min();
    at.unwrap_or_else(|| panic!("no Docker {action} event for {name}"))
}

/// When the fake first logged an event of `kind` about Node `name`.
fn fake_when(events: &[Event], name: &str, kind: impl Fn(&EventKind) -> bool) -> SystemTime {
    let about = |k: &EventKind| match k {
        EventKind::NodeReady { node } | EventKind::NodeDeleted { node } => node == name,
        EventKind::PodEvicted { node, .. } => node.as_deref() == Some(name),
        _ => false,
    };
    let at = events.iter().find(|e| kind(&e.kind) && about(&e.kind)).map(|e| e.wall);
    at.unwrap_or_else(|| panic!("no such event for {name}"))
}

/// A turn's Docker events, API requests and the fake's Node and pod events in the order they
/// happened, in seconds from `since`: where the time between the waits goes.
fn print_timeline(rig: &Rig, since: SystemTime, events: &[Event], docker: &[DockerEvent]) {
    let mut lines: Vec<(SystemTime, String)> =
        docker.iter().map(|e| (e.at, format!("docker {} {}", e.action, e.name))).collect();
    lines.extend(rig.fake.requests().into_iter().filter(|r| r.wall >= since).map(|r| {
        let query = r.query.map(|q| format!("?{q}")).unwrap_or_default();
        (r.wall, format!("api    {} {}{query}", r.method, r.path))
    }));
    lines.extend(events.iter().map(|e| (e.wall, format!("fake   {:?}", e.kind))));
    lines.sort_by_key(|(at, _)| *at);
    for (at, line) in lines {
        println!("  {:7.3}s {line:.160}", secs(since, at));
    }
}

/// Seconds from `a` to `b` (zero if `b` is earlier).
fn secs(a: SystemTime, b: SystemTime) -> f64 {
    b.duration_since(a).unwrap_or_default().as_secs_f64()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 { values[n / 2] } else { f64::midpoint(values[n / 2 - 1], values[n / 2]) }
}

fn load_average() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}
