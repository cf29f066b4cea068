//! The fake cluster's state and the rules that change it.
//!
//! Everything sits behind one mutex, so an eviction's PDB check and the pod deletion it causes
//! are atomic, as they are in the real API server. Every change bumps one global
//! resourceVersion, is appended to the watch history and broadcast to open watches, and (for
//! Nodes and Pods) is written to the event log that tests read to check ordering.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec};
use k8s_openapi::api::core::v1::{
    EmptyDirVolumeSource, Node, NodeCondition, NodeSpec, NodeStatus, Pod, PodCondition, PodSpec, PodStatus,
    PodTemplateSpec, Volume,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, ListMeta, ObjectMeta, OwnerReference, Status, StatusCause, StatusDetails, Time,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;
use tokio::sync::{broadcast, watch};

use super::select::LabelQuery;

/// The resource types that the fake server stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resource {
    Nodes,
    Pods,
    PodDisruptionBudgets,
    DaemonSets,
    Leases,
}

/// The watch event type of a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

impl ChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One entry of the watch history: the object as it was after the change (or before a delete).
#[derive(Debug, Clone)]
pub struct Change {
    pub rv: u64,
    pub resource: Resource,
    pub kind: ChangeKind,
    pub namespace: Option<String>,
    pub object: Value,
    /// The object before a MODIFIED change, so that a watch with a selector can tell an
    /// object that starts (ADDED) or stops (DELETED) matching, as the real server does.
    pub previous: Option<Value>,
}

/// A state change worth asserting on, in the order it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    NodeCreated {
        node: String,
    },
    NodeReady {
        node: String,
    },
    NodeNotReady {
        node: String,
    },
    NodeCordoned {
        node: String,
    },
    NodeUncordoned {
        node: String,
    },
    NodeDeleted {
        node: String,
    },
    PodCreated {
        namespace: String,
        name: String,
        uid: String,
        node: Option<String>,
    },
    PodScheduled {
        namespace: String,
        name: String,
        uid: String,
        node: String,
    },
    PodEvicted {
        namespace: String,
        name: String,
        uid: String,
        node: Option<String>,
    },
    PodDeleted {
        namespace: String,
        name: String,
        uid: String,
        node: Option<String>,
    },
    /// A pod's Ready condition changed because its Node's did.
    PodReadyChanged {
        namespace: String,
        name: String,
        uid: String,
        ready: bool,
    },
}

/// An entry of the event log.
#[derive(Debug, Clone)]
pub struct Event {
    pub seq: u64,
    pub at: Instant,
    pub wall: SystemTime,
    pub kind: EventKind,
    /// Nodes that are Ready and not cordoned right after this event, so that a test can check
    /// a capacity invariant "at every moment" by scanning the log.
    pub ready_schedulable: BTreeSet<String>,
    /// Healthy (Running, Ready, not terminating) pods of each app (`namespace/name`) right
    /// after this event: "never zero available replicas" is a scan of this field.
    pub app_healthy: BTreeMap<String, usize>,
}

/// One HTTP request as the server saw it.
#[derive(Debug, Clone)]
pub struct RequestRecord {
    pub seq: u64,
    pub at: Instant,
    pub wall: SystemTime,
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    pub content_type: Option<String>,
    /// The `Authorization` header, as sent.
    pub authorization: Option<String>,
    pub body: Option<Value>,
    pub status: u16,
    /// The length of the response body (0 for a watch, whose body is a stream).
    pub response_bytes: usize,
}

impl RequestRecord {
    /// Path and query, as sent.
    pub fn uri(&self) -> String {
        match &self.query {
            Some(q) => format!("{}?{q}", self.path),
            None => self.path.clone(),
        }
    }
}

/// An eviction request as received, with the answer given.
#[derive(Debug, Clone)]
pub struct EvictionRecord {
    pub at: Instant,
    pub namespace: String,
    pub pod: String,
    pub body: Value,
    pub status: u16,
}

/// Whether (and when) the simulated kubelet turns a registered Node Ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadyPolicy {
    After(Duration),
    Never,
    /// The first `n` Nodes of the prefix turn Ready at once, every later one never: a template
    /// whose first instances come up and whose next ones fail, whatever the timing.
    First(usize),
}

/// A request fault queued by a test.
#[derive(Debug, Clone)]
struct Fault {
    method: Option<String>,
    path_prefix: String,
    remaining: usize,
    status: u16,
}

/// A deployment-like app, driven by the simulated ReplicaSet controller.
#[derive(Debug, Clone)]
pub struct App {
    pub namespace: String,
    pub name: String,
    pub replicas: usize,
    pub labels: BTreeMap<String, String>,
}

/// Describes a pod that a test adds directly.
#[derive(Debug, Clone)]
pub struct PodSpecBuilder {
    pub namespace: String,
    pub name: String,
    pub node: Option<String>,
    pub labels: BTreeMap<String, String>,
    /// Owner kind (`ReplicaSet`, `DaemonSet`, `StatefulSet`, `Job`...); `None` for a bare pod.
    pub owner_kind: Option<String>,
    /// The owner's name; `<pod>-owner` when not given.
    pub owner_name: Option<String>,
    /// Adds the `kubernetes.io/config.mirror` annotation (a static pod's mirror).
    pub mirror: bool,
    pub phase: String,
    pub empty_dir: bool,
    /// `spec.terminationGracePeriodSeconds`; the API server's default, 30, when not given.
    pub grace_period: Option<i64>,
    /// Created terminating already, its deletion due this long ago (see
    /// [`PodSpecBuilder::terminating_past_due`]).
    pub past_due: Option<Duration>,
    pub annotations: BTreeMap<String, String>,
}

impl PodSpecBuilder {
    pub fn new(namespace: &str, name: &str, node: &str) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            node: Some(node.into()),
            labels: BTreeMap::new(),
            owner_kind: Some("ReplicaSet".into()),
            owner_name: None,
            mirror: false,
            phase: "Running".into(),
            empty_dir: false,
            grace_period: None,
            past_due: None,
            annotations: BTreeMap::new(),
        }
    }
    pub fn annotation(mut self, k: &str, v: &str) -> Self {
        self.annotations.insert(k.into(), v.into());
        self
    }
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.labels.insert(k.into(), v.into());
        self
    }
    pub fn owner(mut self, kind: Option<&str>) -> Self {
        self.owner_kind = kind.map(Into::into);
        self
    }
    /// Controlled by the object `kind`/`name` of the pod's namespace (a DaemonSet, say).
    pub fn owned_by(mut self, kind: &str, name: &str) -> Self {
        self.owner_kind = Some(kind.into());
        self.owner_name = Some(name.into());
        self
    }
    pub fn mirror(mut self) -> Self {
        self.mirror = true;
        self
    }
    pub fn phase(mut self, phase: &str) -> Self {
        self.phase = phase.into();
        self
    }
    pub fn empty_dir(mut self) -> Self {
        self.empty_dir = true;
        self
    }
    /// `spec.terminationGracePeriodSeconds`: how far in the future a delete or an eviction sets
    /// its deletionTimestamp.
    pub fn grace_period(mut self, seconds: i64) -> Self {
        self.grace_period = Some(seconds);
        self
    }
    /// A pod whose deletion the API server accepted before the test began and whose kubelet
    /// has not confirmed its end: its deletionTimestamp (when it was due to be gone) is `by`
    /// in the past. No termination timer runs for it; only `finish_termination` ends it.
    pub fn terminating_past_due(mut self, by: Duration) -> Self {
        self.past_due = Some(by);
        self
    }
}

/// What the API server defaults `spec.terminationGracePeriodSeconds` to.
const DEFAULT_GRACE_PERIOD: i64 = 30;

#[derive(Debug, Clone)]
enum Timer {
    /// A terminating pod (deletionTimestamp set) goes away.
    FinishTermination { key: (String, String), uid: String },
}

#[derive(Debug, Clone)]
struct KubeletNode {
    registered_at: Instant,
    running: bool,
}

/// What a kubelet registers its Node with, from its flags (`--register-with-taints`,
/// `--node-labels`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Registration {
    pub taints: Vec<k8s_openapi::api::core::v1::Taint>,
    pub labels: BTreeMap<String, String>,
}

impl Registration {
    /// The flags of `args` (a `KUBELET_EXTRA_ARGS` value), as kubelet reads them: comma
    /// separated `key=value:Effect` taints and `key=value` labels.
    pub fn from_args(args: &str) -> Self {
        let mut registration = Self::default();
        for arg in args.split_whitespace() {
            if let Some(taints) = arg.strip_prefix("--register-with-taints=") {
                for taint in taints.split(',').filter(|t| !t.is_empty()) {
                    let (key_value, effect) = taint.rsplit_once(':').unwrap_or((taint, ""));
                    let (key, value) =
                        key_value.split_once('=').map_or((key_value, None), |(k, v)| (k, Some(v)));
                    registration.taints.push(k8s_openapi::api::core::v1::Taint {
                        key: key.to_owned(),
                        value: value.map(str::to_owned),
                        effect: effect.to_owned(),
                        time_added: None,
                    });
                }
            } else if let Some(labels) = arg.strip_prefix("--node-labels=") {
                for label in labels.split(',').filter(|l| !l.is_empty()) {
                    let (key, value) = label.split_once('=').unwrap_or((label, ""));
                    registration.labels.insert(key.to_owned(), value.to_owned());
                }
            }
        }
        registration
    }
}

pub type PodKey = (String, String);

/// The knobs that shape the simulation.
#[derive(Debug, Clone)]
pub struct SimOptions {
    pub termination_delay: Duration,
    pub reschedule_delay: Duration,
    pub ready_policy: ReadyPolicy,
}

pub struct Store {
    /// The UID of this cluster's kube-system Namespace: what poolctl knows the cluster by.
    pub cluster_uid: String,
    /// The `gitVersion` `/version` answers (`v1.34.0` unless a test sets another).
    pub git_version: String,
    rv: u64,
    seq: u64,
    opts: SimOptions,
    nodes: BTreeMap<String, Node>,
    pods: BTreeMap<PodKey, Pod>,
    /// The pods bound to each Node, so that a list by `spec.nodeName` costs what the Node
    /// holds and not what the cluster holds, as with a real API server's watch cache.
    pods_by_node: BTreeMap<String, BTreeSet<PodKey>>,
    pdbs: BTreeMap<PodKey, PodDisruptionBudget>,
    daemon_sets: BTreeMap<PodKey, DaemonSet>,
    history: Vec<Arc<Change>>,
    apps: BTreeMap<PodKey, App>,
    timers: Vec<(Instant, Timer)>,
    /// Replacement pods waiting to be scheduled: key, earliest time.
    unscheduled: Vec<(PodKey, Instant)>,
    events: Vec<Event>,
    requests: Vec<RequestRecord>,
    evictions: Vec<EvictionRecord>,
    faults: Vec<Fault>,
    traps: BTreeMap<PodKey, u16>,
    kubelet: BTreeMap<String, KubeletNode>,
    /// What each container's kubelet registers its Node with, as its flags say.
    registrations: HashMap<String, Registration>,
    prefix_policies: Vec<(String, ReadyPolicy)>,
    /// For each prefix with [`ReadyPolicy::First`]: the Nodes it let turn Ready.
    granted: BTreeMap<String, BTreeSet<String>>,
    /// When each Node was last deleted, so that the kubelet does not register it again from a
    /// Docker list made before the deletion.
    deleted_nodes: HashMap<String, Instant>,
    kubelet_rounds: u64,
    last_published: HashMap<(Resource, String, String), Value>,
    tx: broadcast::Sender<Arc<Change>>,
    version: watch::Sender<u64>,
    /// Leases: no part of the simulated cluster's events, but watched as the other kinds.
    pub(super) leases: super::lease::Leases,
    /// `storage.k8s.io/v1` `VolumeAttachments`: name and the Node they attach to.
    pub volume_attachments: Vec<(String, String)>,
    /// While `true`, listing `VolumeAttachments` is 403 Forbidden, as for credentials without
    /// that right.
    pub volume_attachments_forbidden: bool,
    /// `events.k8s.io/v1` Events.
    pub(super) k8s_events: super::events::Events,
}

fn now_time() -> Time {
    Time(Timestamp::now())
}

pub fn status(code: u16, reason: &str, message: impl Into<String>) -> Status {
    Status {
        code: Some(code.into()),
        message: Some(message.into()),
        metadata: ListMeta::default(),
        reason: Some(reason.into()),
        status: Some(if code < 300 { "Success" } else { "Failure" }.into()),
        details: None,
    }
}

pub fn not_found(kind: &str, name: &str) -> Status {
    let mut s = status(404, "NotFound", format!("{kind} \"{name}\" not found"));
    s.details =
        Some(StatusDetails { name: Some(name.into()), kind: Some(kind.into()), ..Default::default() });
    s
}

fn condition_true(conds: Option<&Vec<impl HasCondition>>, type_: &str) -> bool {
    conds.into_iter().flatten().any(|c| c.type_() == type_ && c.status() == "True")
}

trait HasCondition {
    fn type_(&self) -> &str;
    fn status(&self) -> &str;
}
impl HasCondition for NodeCondition {
    fn type_(&self) -> &str {
        &self.type_
    }
    fn status(&self) -> &str {
        &self.status
    }
}
impl HasCondition for PodCondition {
    fn type_(&self) -> &str {
        &self.type_
    }
    fn status(&self) -> &str {
        &self.status
    }
}

pub fn node_ready(n: &Node) -> bool {
    condition_true(n.status.as_ref().and_then(|s| s.conditions.as_ref()), "Ready")
}

pub fn node_cordoned(n: &Node) -> bool {
    n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
}

fn node_schedulable(n: &Node) -> bool {
    node_ready(n)
        && !node_cordoned(n)
        && !n
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten()
            .any(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
}

/// Healthy as the PDB controller counts it: running, Ready and not terminating.
pub fn pod_healthy(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        && condition_true(p.status.as_ref().and_then(|s| s.conditions.as_ref()), "Ready")
}

fn pod_node(p: &Pod) -> Option<String> {
    p.spec.as_ref().and_then(|s| s.node_name.clone())
}

fn pod_key(p: &Pod) -> PodKey {
    (p.metadata.namespace.clone().unwrap_or_default(), p.metadata.name.clone().unwrap_or_default())
}

fn set_node_ready_condition(n: &mut Node, ready: bool) {
    let status = n.status.get_or_insert_with(NodeStatus::default);
    let conds = status.conditions.get_or_insert_with(Vec::new);
    let wanted = if ready { "True" } else { "False" };
    // lastTransitionTime moves only when the status does, as the API server keeps it: it is
    // the clock poolctl's health checks read.
    let since = conds
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == wanted)
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or_else(now_time);
    conds.retain(|c| c.type_ != "Ready");
    conds.push(NodeCondition {
        type_: "Ready".into(),
        status: wanted.into(),
        reason: Some(if ready { "KubeletReady" } else { "KubeletNotReady" }.into()),
        message: Some(
            if ready { "kubelet is posting ready status" } else { "container runtime is down" }.into(),
        ),
        last_heartbeat_time: Some(now_time()),
        last_transition_time: Some(since),
    });
}

/// What the node lifecycle controller writes when a kubelet has posted no status for its grace
/// period: Ready turns Unknown, and the last heartbeat stays the kubelet's last one.
fn set_node_unreachable_condition(n: &mut Node) {
    let status = n.status.get_or_insert_with(NodeStatus::default);
    let conds = status.conditions.get_or_insert_with(Vec::new);
    let last_heartbeat =
        conds.iter().find(|c| c.type_ == "Ready").and_then(|c| c.last_heartbeat_time.clone());
    conds.retain(|c| c.type_ != "Ready");
    conds.push(NodeCondition {
        type_: "Ready".into(),
        status: "Unknown".into(),
        reason: Some("NodeStatusUnknown".into()),
        message: Some("Kubelet stopped posting node status.".into()),
        last_heartbeat_time: last_heartbeat,
        last_transition_time: Some(now_time()),
    });
}

fn node_unreachable(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "Unknown")
}

fn set_pod_ready_condition(p: &mut Pod, ready: bool) {
    let status = p.status.get_or_insert_with(PodStatus::default);
    let conds = status.conditions.get_or_insert_with(Vec::new);
    conds.retain(|c| c.type_ != "Ready");
    conds.push(PodCondition {
        type_: "Ready".into(),
        status: if ready { "True" } else { "False" }.into(),
        last_transition_time: Some(now_time()),
        ..Default::default()
    });
}

/// The desired number of healthy pods for an int or percentage bound, rounding up like the
/// disruption controller does.
fn scaled(v: &IntOrString, expected: i32) -> i32 {
    match v {
        IntOrString::Int(i) => *i,
        IntOrString::String(s) => {
            let pct: i32 = s.trim_end_matches('%').parse().unwrap_or(0);
            (pct * expected + 99) / 100
        }
    }
}

/// The PDB arithmetic of one budget at this moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub expected: i32,
    pub desired: i32,
    pub current: i32,
    pub allowed: i32,
}

impl Store {
    pub fn new(opts: SimOptions) -> Self {
        // Unique per fake cluster, so that two fakes are two clusters.
        static CLUSTERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let (tx, _) = broadcast::channel(4096);
        let (version, _) = watch::channel(0);
        let n = CLUSTERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self {
            cluster_uid: format!("fake-cluster-{}-{n}", std::process::id()),
            git_version: "v1.34.0".to_owned(),
            rv: 1,
            seq: 0,
            opts,
            nodes: BTreeMap::new(),
            pods: BTreeMap::new(),
            pods_by_node: BTreeMap::new(),
            pdbs: BTreeMap::new(),
            daemon_sets: BTreeMap::new(),
            history: Vec::new(),
            apps: BTreeMap::new(),
            timers: Vec::new(),
            unscheduled: Vec::new(),
            events: Vec::new(),
            requests: Vec::new(),
            evictions: Vec::new(),
            faults: Vec::new(),
            traps: BTreeMap::new(),
            kubelet: BTreeMap::new(),
            registrations: HashMap::new(),
            prefix_policies: Vec::new(),
            granted: BTreeMap::new(),
            deleted_nodes: HashMap::new(),
            kubelet_rounds: 0,
            last_published: HashMap::new(),
            tx,
            version,
            leases: super::lease::Leases::default(),
            volume_attachments: Vec::new(),
            volume_attachments_forbidden: false,
            k8s_events: super::events::Events::default(),
        }
    }

    /// Wake `wait_until` callers after a change outside the watched resources (an Event).
    pub fn wake(&self) {
        self.version.send_modify(|_| {});
    }

    pub fn version_rx(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Change>> {
        self.tx.subscribe()
    }

    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    /// History entries after `rv` for a resource, or `None` when `rv` is older than what is kept.
    /// Every change the server recorded, oldest first.
    pub fn history(&self) -> &[Arc<Change>] {
        &self.history
    }

    pub fn history_since(&self, rv: u64, resource: Resource) -> Option<Vec<Arc<Change>>> {
        if let Some(first) = self.history.first()
            && rv + 1 < first.rv
        {
            return None;
        }
        Some(self.history.iter().filter(|c| c.rv > rv && c.resource == resource).cloned().collect())
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn next_uid(&mut self) -> String {
        let n = self.next_seq();
        format!("00000000-0000-4000-8000-{n:012x}")
    }

    fn bump(&mut self) -> String {
        self.rv += 1;
        self.rv.to_string()
    }

    /// Publish a change made at resourceVersion `rv`, the next one (a Lease's write).
    pub(super) fn publish_at(
        &mut self,
        rv: u64,
        resource: Resource,
        kind: ChangeKind,
        ns: Option<String>,
        object: Value,
    ) {
        self.rv = rv;
        self.publish(resource, kind, ns, object);
    }

    fn publish(&mut self, resource: Resource, kind: ChangeKind, ns: Option<String>, object: Value) {
        let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        let key = (resource, ns.clone().unwrap_or_default(), name.to_owned());
        let previous = match kind {
            ChangeKind::Deleted => self.last_published.remove(&key),
            _ => self.last_published.insert(key, object.clone()),
        };
        let change = Arc::new(Change {
            rv: self.rv,
            resource,
            kind,
            namespace: ns,
            object,
            previous: previous.filter(|_| kind == ChangeKind::Modified),
        });
        self.history.push(change.clone());
        // No receiver is fine: nobody is watching.
        let _ = self.tx.send(change);
        self.version.send_replace(self.rv);
    }

    fn emit(&mut self, kind: EventKind) {
        let seq = self.next_seq();
        let ready_schedulable = self
            .nodes
            .values()
            .filter(|n| node_ready(n) && !node_cordoned(n))
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        let app_healthy = self
            .apps
            .values()
            .map(|a| {
                let healthy = self
                    .pods
                    .values()
                    .filter(|p| p.metadata.namespace.as_deref() == Some(a.namespace.as_str()))
                    .filter(|p| p.metadata.labels.as_ref() == Some(&a.labels) && pod_healthy(p))
                    .count();
                (format!("{}/{}", a.namespace, a.name), healthy)
            })
            .collect();
        self.events.push(Event {
            app_healthy,
            seq,
            at: Instant::now(),
            wall: SystemTime::now(),
            kind,
            ready_schedulable,
        });
    }

    // ---------------------------------------------------------------- nodes

    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.nodes.values()
    }

    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.get(name)
    }

    pub fn create_node(&mut self, mut node: Node) -> Node {
        let name = node.metadata.name.clone().unwrap_or_default();
        node.metadata.uid = Some(self.next_uid());
        node.metadata.creation_timestamp = Some(now_time());
        node.metadata.resource_version = Some(self.bump());
        let value = serde_json::to_value(&node).expect("a Node serializes");
        self.nodes.insert(name.clone(), node.clone());
        self.publish(Resource::Nodes, ChangeKind::Added, None, value);
        self.emit(EventKind::NodeCreated { node: name.clone() });
        if node_ready(&node) {
            self.emit(EventKind::NodeReady { node: name.clone() });
        }
        if node_cordoned(&node) {
            self.emit(EventKind::NodeCordoned { node: name });
        }
        node
    }

    /// A bare Node as a kubelet registers it.
    pub fn new_node(name: &str, ready: bool) -> Node {
        let mut node = Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(BTreeMap::from([
                    ("kubernetes.io/hostname".to_owned(), name.to_owned()),
                    ("kubernetes.io/os".to_owned(), "linux".to_owned()),
                ])),
                ..Default::default()
            },
            spec: Some(NodeSpec::default()),
            status: Some(NodeStatus::default()),
        };
        set_node_ready_condition(&mut node, ready);
        node
    }

    /// Stores `new` in place of the Node of the same name and records what changed.
    pub fn replace_node(&mut self, mut new: Node) -> Option<Node> {
        let name = new.metadata.name.clone().unwrap_or_default();
        let old = self.nodes.get(&name)?.clone();
        new.metadata.uid.clone_from(&old.metadata.uid);
        new.metadata.creation_timestamp.clone_from(&old.metadata.creation_timestamp);
        new.metadata.resource_version = Some(self.bump());
        let value = serde_json::to_value(&new).expect("a Node serializes");
        self.nodes.insert(name.clone(), new.clone());
        self.publish(Resource::Nodes, ChangeKind::Modified, None, value);
        let (was_ready, is_ready) = (node_ready(&old), node_ready(&new));
        if was_ready != is_ready {
            self.emit(if is_ready {
                EventKind::NodeReady { node: name.clone() }
            } else {
                EventKind::NodeNotReady { node: name.clone() }
            });
            self.set_pods_ready_on(&name, is_ready);
        }
        let (was_c, is_c) = (node_cordoned(&old), node_cordoned(&new));
        if was_c != is_c {
            self.emit(if is_c {
                EventKind::NodeCordoned { node: name }
            } else {
                EventKind::NodeUncordoned { node: name }
            });
        }
        Some(new)
    }

    pub fn update_node(&mut self, name: &str, f: impl FnOnce(&mut Node)) -> Option<Node> {
        let mut node = self.nodes.get(name)?.clone();
        f(&mut node);
        self.replace_node(node)
    }

    pub fn set_node_ready(&mut self, name: &str, ready: bool) -> Option<Node> {
        if self.nodes.get(name).is_some_and(|n| node_ready(n) == ready) {
            return self.nodes.get(name).cloned();
        }
        self.update_node(name, |n| set_node_ready_condition(n, ready))
    }

    /// The Node's kubelet went silent (stopped, or cut off): the node lifecycle controller marks
    /// its Ready condition Unknown. A real one waits out its grace period (40 s) first.
    pub fn set_node_unreachable(&mut self, name: &str) -> Option<Node> {
        if self.nodes.get(name).is_some_and(node_unreachable) {
            return self.nodes.get(name).cloned();
        }
        self.update_node(name, set_node_unreachable_condition)
    }

    /// Deletes a Node; like the pod garbage collector, also deletes the pods bound to it.
    pub fn delete_node(&mut self, name: &str) -> Option<Node> {
        let mut node = self.nodes.remove(name)?;
        self.deleted_nodes.insert(name.to_owned(), Instant::now());
        node.metadata.resource_version = Some(self.bump());
        let value = serde_json::to_value(&node).expect("a Node serializes");
        self.publish(Resource::Nodes, ChangeKind::Deleted, None, value);
        self.emit(EventKind::NodeDeleted { node: name.into() });
        let orphans: Vec<PodKey> = self
            .pods
            .iter()
            .filter(|(_, p)| pod_node(p).as_deref() == Some(name))
            .map(|(k, _)| k.clone())
            .collect();
        for key in orphans {
            self.delete_pod_now(&key);
        }
        Some(node)
    }

    /// The node lifecycle controller marks pods on a `NotReady` node not Ready (and back).
    fn set_pods_ready_on(&mut self, node: &str, ready: bool) {
        let keys: Vec<PodKey> = self
            .pods
            .iter()
            .filter(|(_, p)| pod_node(p).as_deref() == Some(node))
            .filter(|(_, p)| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            if let Some(pod) = self.update_pod(&key, |p| set_pod_ready_condition(p, ready)) {
                self.emit(EventKind::PodReadyChanged {
                    namespace: key.0,
                    name: key.1,
                    uid: pod.metadata.uid.unwrap_or_default(),
                    ready,
                });
            }
        }
    }

    // ---------------------------------------------------------------- pods

    pub fn pods(&self) -> impl Iterator<Item = &Pod> {
        self.pods.values()
    }

    pub fn pod(&self, ns: &str, name: &str) -> Option<&Pod> {
        self.pods.get(&(ns.to_owned(), name.to_owned()))
    }

    pub fn create_pod(&mut self, mut pod: Pod) -> Pod {
        let key = pod_key(&pod);
        pod.metadata.uid = Some(self.next_uid());
        pod.metadata.creation_timestamp = Some(now_time());
        pod.metadata.resource_version = Some(self.bump());
        let value = serde_json::to_value(&pod).expect("a Pod serializes");
        self.put_pod(key.clone(), pod.clone());
        self.publish(Resource::Pods, ChangeKind::Added, Some(key.0.clone()), value);
        self.emit(EventKind::PodCreated {
            namespace: key.0,
            name: key.1,
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            node: pod_node(&pod),
        });
        pod
    }

    pub fn build_pod(&mut self, b: &PodSpecBuilder) -> Pod {
        let mut annotations = b.annotations.clone();
        if b.mirror {
            annotations.insert("kubernetes.io/config.mirror".to_owned(), "mirror".to_owned());
        }
        let owner = b.owner_kind.as_ref().map(|kind| OwnerReference {
            api_version: if kind == "Job" { "batch/v1" } else { "apps/v1" }.into(),
            kind: kind.clone(),
            name: b.owner_name.clone().unwrap_or_else(|| format!("{}-owner", b.name)),
            uid: format!("owner-{}", b.name),
            controller: Some(true),
            block_owner_deletion: Some(true),
        });
        let volumes = b.empty_dir.then(|| {
            vec![Volume {
                name: "scratch".into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Default::default()
            }]
        });
        let mut pod = Pod {
            metadata: ObjectMeta {
                namespace: Some(b.namespace.clone()),
                name: Some(b.name.clone()),
                labels: Some(b.labels.clone()),
                annotations: (!annotations.is_empty()).then_some(annotations),
                owner_references: owner.map(|o| vec![o]),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: b.node.clone(),
                volumes,
                termination_grace_period_seconds: Some(b.grace_period.unwrap_or(DEFAULT_GRACE_PERIOD)),
                ..Default::default()
            }),
            status: Some(PodStatus { phase: Some(b.phase.clone()), ..Default::default() }),
        };
        if let Some(by) = b.past_due {
            let due =
                Timestamp::now() - k8s_openapi::jiff::SignedDuration::try_from(by).expect("a short delay");
            pod.metadata.deletion_timestamp = Some(Time(due));
            pod.metadata.deletion_grace_period_seconds = Some(b.grace_period.unwrap_or(DEFAULT_GRACE_PERIOD));
        }
        let node_is_ready = b.node.as_ref().and_then(|n| self.nodes.get(n)).is_some_and(node_ready);
        set_pod_ready_condition(&mut pod, b.phase == "Running" && node_is_ready);
        pod
    }

    pub fn update_pod(&mut self, key: &PodKey, f: impl FnOnce(&mut Pod)) -> Option<Pod> {
        let mut pod = self.pods.get(key)?.clone();
        f(&mut pod);
        pod.metadata.resource_version = Some(self.bump());
        let value = serde_json::to_value(&pod).expect("a Pod serializes");
        self.put_pod(key.clone(), pod.clone());
        self.publish(Resource::Pods, ChangeKind::Modified, Some(key.0.clone()), value);
        Some(pod)
    }

    /// Insert or replace a pod, keeping the index by Node.
    fn put_pod(&mut self, key: PodKey, pod: Pod) {
        if let Some(old) = self.pods.insert(key.clone(), pod) {
            self.unindex_pod(&key, &old);
        }
        if let Some(node) = self.pods[&key].spec.as_ref().and_then(|s| s.node_name.clone()) {
            self.pods_by_node.entry(node).or_default().insert(key);
        }
    }

    fn unindex_pod(&mut self, key: &PodKey, pod: &Pod) {
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) else { return };
        if let Some(keys) = self.pods_by_node.get_mut(node) {
            keys.remove(key);
            if keys.is_empty() {
                self.pods_by_node.remove(node);
            }
        }
    }

    /// The pods bound to `node`.
    pub fn pods_on<'a>(&'a self, node: &str) -> impl Iterator<Item = &'a Pod> + 'a {
        self.pods_by_node.get(node).into_iter().flatten().filter_map(|k| self.pods.get(k))
    }

    /// Adds Nodes and pods as they would be found in a large cluster that was there before the
    /// test: no events, no history, no watch notifications (a benchmark fills a cluster of
    /// 100,000 pods this way in a moment).
    pub fn load_quietly(&mut self, nodes: Vec<Node>, pods: &[PodSpecBuilder]) {
        for mut node in nodes {
            node.metadata.uid = Some(self.next_uid());
            node.metadata.resource_version = Some(self.bump());
            let name = node.metadata.name.clone().unwrap_or_default();
            self.nodes.insert(name, node);
        }
        for builder in pods {
            let mut pod = self.build_pod(builder);
            pod.metadata.uid = Some(self.next_uid());
            pod.metadata.resource_version = Some(self.bump());
            self.put_pod(pod_key(&pod), pod);
        }
        self.version.send_replace(self.rv);
    }

    /// The kubelet confirms now that a terminating pod's containers ended: it goes, whatever
    /// its termination delay said. `None` if it is not there or not terminating.
    /// The pod's containers ended by themselves: its phase becomes `phase` (`Succeeded` or
    /// `Failed`), as its kubelet reports it.
    pub fn complete_pod(&mut self, ns: &str, name: &str, phase: &str) -> Option<Pod> {
        let key = (ns.to_owned(), name.to_owned());
        self.update_pod(&key, |p| {
            p.status.get_or_insert_with(PodStatus::default).phase = Some(phase.to_owned());
            set_pod_ready_condition(p, false);
        })
    }

    pub fn finish_termination(&mut self, ns: &str, name: &str) -> Option<Pod> {
        let key = (ns.to_owned(), name.to_owned());
        self.pods.get(&key)?.metadata.deletion_timestamp.as_ref()?;
        self.delete_pod_now(&key)
    }

    fn delete_pod_now(&mut self, key: &PodKey) -> Option<Pod> {
        let mut pod = self.pods.remove(key)?;
        self.unindex_pod(key, &pod);
        pod.metadata.resource_version = Some(self.bump());
        let value = serde_json::to_value(&pod).expect("a Pod serializes");
        self.publish(Resource::Pods, ChangeKind::Deleted, Some(key.0.clone()), value);
        self.emit(EventKind::PodDeleted {
            namespace: key.0.clone(),
            name: key.1.clone(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            node: pod_node(&pod),
        });
        if pod.metadata.deletion_timestamp.is_none() {
            self.replace_app_pod(&pod);
        }
        Some(pod)
    }

    /// Deletes a pod the way the API does for a graceful delete: with a termination delay it
    /// first gets a deletionTimestamp, which is when its grace period (`grace`, from the
    /// request's delete options, else the pod's own) runs out, and a zero grace period deletes
    /// it at once. Its controller replaces it as soon as it is terminating. A pod terminating
    /// already keeps its deletionTimestamp, unless the request asks for a shorter grace period:
    /// then, as the real server does (`BeforeDelete`), its end moves that much earlier.
    pub fn delete_pod(&mut self, key: &PodKey, grace: Option<i64>) -> Option<Pod> {
        let existing = self.pods.get(key)?;
        let asked = grace;
        let grace = grace
            .or_else(|| existing.spec.as_ref().and_then(|s| s.termination_grace_period_seconds))
            .unwrap_or(DEFAULT_GRACE_PERIOD)
            .max(0);
        if self.opts.termination_delay.is_zero() || grace == 0 {
            return self.delete_pod_now(key);
        }
        if let Some(Time(due)) = existing.metadata.deletion_timestamp {
            let had = existing.metadata.deletion_grace_period_seconds.unwrap_or(grace);
            let Some(shorter) = asked.filter(|g| *g < had) else { return Some(existing.clone()) };
            let earlier = due - k8s_openapi::jiff::SignedDuration::from_secs(had - shorter);
            return self.update_pod(key, |p| {
                p.metadata.deletion_timestamp = Some(Time(earlier));
                p.metadata.deletion_grace_period_seconds = Some(shorter);
            });
        }
        let due = Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_secs(grace);
        let pod = self.update_pod(key, |p| {
            p.metadata.deletion_timestamp = Some(Time(due));
            p.metadata.deletion_grace_period_seconds = Some(grace);
        })?;
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let due = Instant::now() + self.opts.termination_delay;
        self.timers.push((due, Timer::FinishTermination { key: key.clone(), uid }));
        self.replace_app_pod(&pod);
        Some(pod)
    }

    // ---------------------------------------------------------------- apps (ReplicaSet sim)

    fn app_of(&self, pod: &Pod) -> Option<PodKey> {
        let owner = pod.metadata.owner_references.as_ref()?.first()?;
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let app = owner.name.strip_suffix("-rs")?;
        let key = (ns, app.to_owned());
        self.apps.contains_key(&key).then_some(key)
    }

    fn new_app_pod(&mut self, app: &App) -> Pod {
        let n = self.next_seq();
        let name = format!("{}-{n:05x}", app.name);
        let mut pod = Pod {
            metadata: ObjectMeta {
                namespace: Some(app.namespace.clone()),
                name: Some(name),
                labels: Some(app.labels.clone()),
                owner_references: Some(vec![OwnerReference {
                    api_version: "apps/v1".into(),
                    kind: "ReplicaSet".into(),
                    name: format!("{}-rs", app.name),
                    uid: format!("rs-{}-{}", app.namespace, app.name),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }]),
                ..Default::default()
            },
            spec: Some(PodSpec {
                termination_grace_period_seconds: Some(DEFAULT_GRACE_PERIOD),
                ..Default::default()
            }),
            status: Some(PodStatus { phase: Some("Pending".into()), ..Default::default() }),
        };
        set_pod_ready_condition(&mut pod, false);
        self.create_pod(pod)
    }

    fn replace_app_pod(&mut self, gone: &Pod) {
        let Some(key) = self.app_of(gone) else { return };
        let app = self.apps[&key].clone();
        let pod = self.new_app_pod(&app);
        let due = Instant::now() + self.opts.reschedule_delay;
        self.unscheduled.push((pod_key(&pod), due));
    }

    /// Adds an app and places its replicas on schedulable nodes right away.
    pub fn add_app(&mut self, app: &App) {
        self.apps.insert((app.namespace.clone(), app.name.clone()), app.clone());
        for _ in 0..app.replicas {
            let pod = self.new_app_pod(app);
            self.unscheduled.push((pod_key(&pod), Instant::now()));
        }
        self.tick(Instant::now());
    }

    pub fn app(&self, ns: &str, name: &str) -> Option<&App> {
        self.apps.get(&(ns.to_owned(), name.to_owned()))
    }

    fn pick_node(&self, app_labels: &BTreeMap<String, String>) -> Option<String> {
        // Spread like the default scheduler's topology spreading: fewest pods of the app first.
        self.nodes
            .values()
            .filter(|n| node_schedulable(n))
            .filter_map(|n| n.metadata.name.clone())
            .min_by_key(|name| {
                self.pods
                    .values()
                    .filter(|p| pod_node(p).as_deref() == Some(name.as_str()))
                    .filter(|p| p.metadata.labels.as_ref() == Some(app_labels))
                    .count()
            })
    }

    /// Runs due timers and schedules pending pods; returns when it next needs to run.
    pub fn tick(&mut self, now: Instant) -> Option<Instant> {
        let (due, later): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.timers).into_iter().partition(|(t, _)| *t <= now);
        self.timers = later;
        for (_, timer) in due {
            match timer {
                Timer::FinishTermination { key, uid } => {
                    if self.pods.get(&key).and_then(|p| p.metadata.uid.as_deref()) == Some(&uid) {
                        self.delete_pod_now(&key);
                    }
                }
            }
        }
        let pending = std::mem::take(&mut self.unscheduled);
        for (key, due) in pending {
            let Some(pod) = self.pods.get(&key) else {
                continue;
            };
            let labels = pod.metadata.labels.clone().unwrap_or_default();
            let node = if due <= now { self.pick_node(&labels) } else { None };
            let Some(node) = node else {
                self.unscheduled.push((key, due));
                continue;
            };
            let pod = self.update_pod(&key, |p| {
                p.spec.get_or_insert_with(PodSpec::default).node_name = Some(node.clone());
                p.status.get_or_insert_with(PodStatus::default).phase = Some("Running".into());
                set_pod_ready_condition(p, true);
            });
            if let Some(pod) = pod {
                self.emit(EventKind::PodScheduled {
                    namespace: key.0,
                    name: key.1,
                    uid: pod.metadata.uid.unwrap_or_default(),
                    node,
                });
            }
        }
        // Pods whose delay passed but found no node wait for the next state change instead.
        let timers = self.timers.iter().map(|(t, _)| *t);
        let waits = self.unscheduled.iter().map(|(_, t)| *t).filter(|t| *t > now);
        timers.chain(waits).min()
    }

    // ---------------------------------------------------------------- PDBs and eviction

    pub fn pdbs(&self) -> impl Iterator<Item = &PodDisruptionBudget> {
        self.pdbs.values()
    }

    /// Adds or replaces a PDB (keyed by namespace and name).
    pub fn put_pdb(&mut self, mut pdb: PodDisruptionBudget) {
        let key = (
            pdb.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
            pdb.metadata.name.clone().unwrap_or_default(),
        );
        pdb.metadata.namespace = Some(key.0.clone());
        let kind = if let Some(old) = self.pdbs.get(&key) {
            pdb.metadata.uid.clone_from(&old.metadata.uid);
            pdb.metadata.generation = Some(old.metadata.generation.unwrap_or(1) + 1);
            ChangeKind::Modified
        } else {
            pdb.metadata.uid = Some(self.next_uid());
            pdb.metadata.generation = Some(1);
            pdb.metadata.creation_timestamp = Some(now_time());
            ChangeKind::Added
        };
        pdb.metadata.resource_version = Some(self.bump());
        self.pdbs.insert(key.clone(), pdb);
        let value = self.pdb_value(&key);
        self.publish(Resource::PodDisruptionBudgets, kind, Some(key.0), value);
    }

    pub fn delete_pdb(&mut self, ns: &str, name: &str) -> bool {
        let key = (ns.to_owned(), name.to_owned());
        let value = self.pdb_value(&key);
        if self.pdbs.remove(&key).is_none() {
            return false;
        }
        self.bump();
        self.publish(Resource::PodDisruptionBudgets, ChangeKind::Deleted, Some(key.0), value);
        true
    }

    fn pdb_selects(pdb: &PodDisruptionBudget, labels: &BTreeMap<String, String>) -> bool {
        // policy/v1: an empty selector selects every pod of the namespace, an absent or invalid
        // one none (the eviction subresource skips a budget whose selector does not parse).
        pdb.spec
            .as_ref()
            .and_then(|s| s.selector.as_ref())
            .and_then(LabelQuery::from_selector)
            .is_some_and(|q| q.matches_labels(labels))
    }

    pub fn budget(&self, pdb: &PodDisruptionBudget) -> Budget {
        let ns = pdb.metadata.namespace.clone().unwrap_or_default();
        // The pods are keyed by (namespace, name): the namespace's pods are one range, so a
        // budget costs what its namespace holds (a real one is kept up to date by a controller).
        let matching: Vec<&Pod> = self
            .pods
            .range((ns.clone(), String::new())..)
            .take_while(|((pod_ns, _), _)| *pod_ns == ns)
            .map(|(_, p)| p)
            .filter(|p| Self::pdb_selects(pdb, p.metadata.labels.as_ref().unwrap_or(&BTreeMap::new())))
            .collect();
        let app_replicas: usize = self
            .apps
            .values()
            .filter(|a| a.namespace == ns && Self::pdb_selects(pdb, &a.labels))
            .map(|a| a.replicas)
            .sum();
        let unowned = matching.iter().filter(|p| self.app_of(p).is_none()).count();
        let expected = i32::try_from(app_replicas + unowned).unwrap_or(i32::MAX);
        let current = i32::try_from(matching.iter().filter(|p| pod_healthy(p)).count()).unwrap_or(i32::MAX);
        let spec = pdb.spec.clone().unwrap_or_default();
        let desired = match (&spec.min_available, &spec.max_unavailable) {
            (Some(min), _) => scaled(min, expected),
            (None, Some(max)) => (expected - scaled(max, expected)).max(0),
            (None, None) => expected,
        };
        Budget { expected, desired, current, allowed: (current - desired).max(0) }
    }

    /// The PDB in JSON with its status computed for this moment.
    pub fn pdb_value(&self, key: &PodKey) -> Value {
        let Some(pdb) = self.pdbs.get(key) else {
            return Value::Null;
        };
        let b = self.budget(pdb);
        let mut pdb = pdb.clone();
        pdb.status = Some(PodDisruptionBudgetStatus {
            current_healthy: Some(b.current),
            desired_healthy: Some(b.desired),
            disruptions_allowed: Some(b.allowed),
            expected_pods: Some(b.expected),
            observed_generation: pdb.metadata.generation,
            ..Default::default()
        });
        serde_json::to_value(&pdb).expect("a PDB serializes")
    }

    pub fn pdb_keys(&self) -> Vec<PodKey> {
        self.pdbs.keys().cloned().collect()
    }

    // ---------------------------------------------------------------- DaemonSets

    pub fn daemon_sets(&self) -> impl Iterator<Item = &DaemonSet> {
        self.daemon_sets.values()
    }

    pub fn daemon_set(&self, ns: &str, name: &str) -> Option<&DaemonSet> {
        self.daemon_sets.get(&(ns.to_owned(), name.to_owned()))
    }

    /// Adds a DaemonSet selecting `app=<name>`. The fake runs no DaemonSet controller: pods that
    /// claim it as their controller are added by the test.
    pub fn add_daemon_set(&mut self, ns: &str, name: &str) -> DaemonSet {
        let selector = LabelSelector {
            match_labels: Some(BTreeMap::from([("app".to_owned(), name.to_owned())])),
            ..Default::default()
        };
        let ds = DaemonSet {
            metadata: ObjectMeta {
                namespace: Some(ns.to_owned()),
                name: Some(name.to_owned()),
                uid: Some(self.next_uid()),
                creation_timestamp: Some(now_time()),
                resource_version: Some(self.bump()),
                ..Default::default()
            },
            spec: DaemonSetSpec { selector, template: PodTemplateSpec::default(), ..Default::default() },
            status: None,
        };
        self.daemon_sets.insert((ns.to_owned(), name.to_owned()), ds.clone());
        let value = serde_json::to_value(&ds).expect("a DaemonSet serializes");
        self.publish(Resource::DaemonSets, ChangeKind::Added, Some(ns.to_owned()), value);
        ds
    }

    /// Deletes a DaemonSet and leaves its pods, still naming it as their controller: what a drain
    /// meets while the garbage collector has not caught up (or never will).
    pub fn delete_daemon_set(&mut self, ns: &str, name: &str) -> bool {
        let Some(ds) = self.daemon_sets.remove(&(ns.to_owned(), name.to_owned())) else {
            return false;
        };
        self.bump();
        let value = serde_json::to_value(&ds).expect("a DaemonSet serializes");
        self.publish(Resource::DaemonSets, ChangeKind::Deleted, Some(ns.to_owned()), value);
        true
    }

    pub fn set_eviction_trap(&mut self, ns: &str, name: &str, code: u16) {
        self.traps.insert((ns.to_owned(), name.to_owned()), code);
    }

    /// The eviction subresource: validates the body, consults PDBs, deletes the pod.
    pub fn evict(&mut self, ns: &str, name: &str, body: Option<&Value>) -> (u16, Status) {
        let (code, st) = self.evict_inner(ns, name, body);
        self.evictions.push(EvictionRecord {
            at: Instant::now(),
            namespace: ns.into(),
            pod: name.into(),
            body: body.cloned().unwrap_or(Value::Null),
            status: code,
        });
        // A refused eviction changes no state; wake `wait_until` callers all the same.
        self.version.send_modify(|_| {});
        (code, st)
    }

    fn evict_inner(&mut self, ns: &str, name: &str, body: Option<&Value>) -> (u16, Status) {
        let body = body.cloned().unwrap_or(Value::Null);
        let api_version = body.get("apiVersion").and_then(Value::as_str);
        let kind = body.get("kind").and_then(Value::as_str);
        if api_version != Some("policy/v1") || kind != Some("Eviction") {
            // What the real server says when a body does not decode as an Eviction.
            return (
                400,
                status(
                    400,
                    "BadRequest",
                    format!(
                        "Object 'Kind' is missing or wrong in eviction body: apiVersion={api_version:?} kind={kind:?}"
                    ),
                ),
            );
        }
        if let Some(body_name) = body.pointer("/metadata/name").and_then(Value::as_str)
            && body_name != name
        {
            return (400, status(400, "BadRequest", "name in URL does not match name in Eviction object"));
        }
        let key = (ns.to_owned(), name.to_owned());
        let Some(pod) = self.pods.get(&key).cloned() else {
            return (404, not_found("pods", name));
        };
        if let Some(uid) = body.pointer("/deleteOptions/preconditions/uid").and_then(Value::as_str)
            && pod.metadata.uid.as_deref() != Some(uid)
        {
            return (
                409,
                status(
                    409,
                    "Conflict",
                    format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        pod.metadata.uid.as_deref().unwrap_or("")
                    ),
                ),
            );
        }
        if let Some(&code) = self.traps.get(&key) {
            // A success code with a Failure body: what a client that only checks the HTTP
            // status takes for an eviction.
            let mut st = status(
                code,
                "InternalError",
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            );
            st.status = Some("Failure".into());
            return (code, st);
        }
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let covering: Vec<PodDisruptionBudget> = self
            .pdbs
            .values()
            .filter(|p| p.metadata.namespace.as_deref() == Some(ns))
            .filter(|p| Self::pdb_selects(p, &labels))
            .cloned()
            .collect();
        let finished = matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed" | "Pending")
        );
        let grace = body.pointer("/deleteOptions/gracePeriodSeconds").and_then(Value::as_i64);
        if pod.metadata.deletion_timestamp.is_some() || finished || covering.is_empty() {
            return self.evicted(&key, grace);
        }
        if covering.len() > 1 {
            return (
                500,
                status(
                    500,
                    "InternalError",
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                ),
            );
        }
        let pdb = &covering[0];
        let b = self.budget(pdb);
        // An unhealthy pod may go when the budget is met (the IfHealthyBudget policy).
        let allowed = if pod_healthy(&pod) { b.allowed > 0 } else { b.current >= b.desired };
        if !allowed {
            let pdb_name = pdb.metadata.name.clone().unwrap_or_default();
            let mut st = status(
                429,
                "TooManyRequests",
                "Cannot evict pod as it would violate the pod's disruption budget.",
            );
            st.details = Some(StatusDetails {
                causes: Some(vec![StatusCause {
                    reason: Some("DisruptionBudget".into()),
                    message: Some(format!(
                        "The disruption budget {pdb_name} needs {} healthy pods and has {} currently",
                        b.desired, b.current
                    )),
                    field: None,
                }]),
                ..Default::default()
            });
            return (429, st);
        }
        self.evicted(&key, grace)
    }

    fn evicted(&mut self, key: &PodKey, grace: Option<i64>) -> (u16, Status) {
        if let Some(pod) = self.pods.get(key).cloned() {
            self.emit(EventKind::PodEvicted {
                namespace: key.0.clone(),
                name: key.1.clone(),
                uid: pod.metadata.uid.clone().unwrap_or_default(),
                node: pod_node(&pod),
            });
            self.delete_pod(key, grace);
        }
        // The real server answers an accepted eviction with a bare Success Status.
        let st = Status { code: Some(201), status: Some("Success".into()), ..Default::default() };
        (201, st)
    }

    // ---------------------------------------------------------------- kubelet

    pub fn set_ready_policy(&mut self, prefix: &str, policy: ReadyPolicy) {
        self.prefix_policies.retain(|(p, _)| p != prefix);
        self.prefix_policies.push((prefix.into(), policy));
    }

    pub fn set_default_ready_policy(&mut self, policy: ReadyPolicy) {
        self.opts.ready_policy = policy;
    }

    fn ready_policy(&self, name: &str) -> ReadyPolicy {
        self.prefix_policy(name).map_or(self.opts.ready_policy, |(_, pol)| pol)
    }

    /// The policy of the longest prefix of `name` that has one, so a test can carve out
    /// exceptions.
    fn prefix_policy(&self, name: &str) -> Option<(String, ReadyPolicy)> {
        self.prefix_policies
            .iter()
            .filter(|(p, _)| name.starts_with(p.as_str()))
            .max_by_key(|(p, _)| p.len())
            .cloned()
    }

    /// Whether a [`ReadyPolicy::First`] lets the Node `name` turn Ready; the first ask of each
    /// of the first `n` Nodes takes a place.
    fn grant(&mut self, name: &str) -> bool {
        let Some((prefix, ReadyPolicy::First(n))) = self.prefix_policy(name) else { return false };
        let granted = self.granted.entry(prefix).or_default();
        if granted.contains(name) {
            return true;
        }
        granted.len() < n && granted.insert(name.to_owned())
    }

    /// One kubelet round: `running` are the names of the pool containers that run now.
    /// Whether the kubelet of container `name` has had its flags read.
    pub fn knows_registration(&self, name: &str) -> bool {
        self.registrations.contains_key(name)
    }

    /// What the kubelet of container `name` registers its Node with from now on.
    pub fn set_registration(&mut self, name: &str, registration: Registration) {
        self.registrations.insert(name.to_owned(), registration);
    }

    pub fn kubelet_sync(&mut self, running: &BTreeSet<String>, listed_at: Instant, now: Instant) {
        for name in running {
            let restarted = self.kubelet.get(name).is_none_or(|k| !k.running);
            if restarted {
                self.kubelet.insert(name.clone(), KubeletNode { registered_at: now, running: true });
            }
            // Docker's list is a moment old: a Node deleted since is registered again only once
            // a later list still shows its container running (a real kubelet, inside the
            // container, cannot register anything after the container stopped).
            let deleted_since = self.deleted_nodes.get(name).is_some_and(|at| *at >= listed_at);
            if !self.nodes.contains_key(name) && !deleted_since {
                // A running kubelet registers its Node again after it was deleted, with its flags.
                let mut node = Self::new_node(name, false);
                if let Some(registration) = self.registrations.get(name) {
                    node.metadata
                        .labels
                        .get_or_insert_with(BTreeMap::new)
                        .extend(registration.labels.clone());
                    let taints = registration.taints.clone();
                    node.spec.get_or_insert_with(NodeSpec::default).taints =
                        (!taints.is_empty()).then_some(taints);
                }
                self.create_node(node);
                if let Some(k) = self.kubelet.get_mut(name) {
                    k.registered_at = now;
                }
            }
            let registered_at = self.kubelet[name].registered_at;
            let ready = match self.ready_policy(name) {
                ReadyPolicy::After(d) => now >= registered_at + d,
                ReadyPolicy::Never => false,
                ReadyPolicy::First(_) => self.grant(name),
            };
            // Only the transition to Ready is the kubelet's to make here; a test may have set
            // other conditions, and heartbeats would only add noise to watches.
            if ready {
                self.set_node_ready(name, true);
            }
        }
        let stopped: Vec<String> = self
            .kubelet
            .iter()
            .filter(|(name, k)| k.running && !running.contains(*name))
            .map(|(name, _)| name.clone())
            .collect();
        for name in stopped {
            if let Some(k) = self.kubelet.get_mut(&name) {
                k.running = false;
            }
            // A stopped kubelet posts nothing more, NotReady included: its Node turns Unknown,
            // as the node lifecycle controller marks it.
            self.set_node_unreachable(&name);
        }
        self.kubelet_rounds += 1;
        // Wake waiters even when nothing changed, so a test can wait for "a few rounds later"
        // to check that something did not happen.
        self.version.send_modify(|_| {});
    }

    /// When the next registered Node of a running container is due to turn Ready, if one is:
    /// the moment a prompt kubelet (see `KubeletOptions::prompt`) syncs again.
    pub fn kubelet_next_ready(&self) -> Option<Instant> {
        self.kubelet
            .iter()
            .filter(|(name, k)| k.running && self.nodes.get(*name).is_some_and(|n| !node_ready(n)))
            .filter_map(|(name, k)| match self.ready_policy(name) {
                ReadyPolicy::After(d) => Some(k.registered_at + d),
                ReadyPolicy::Never | ReadyPolicy::First(_) => None,
            })
            .min()
    }

    /// How many kubelet rounds have run.
    pub fn kubelet_rounds(&self) -> u64 {
        self.kubelet_rounds
    }

    // ---------------------------------------------------------------- logs and faults

    pub fn record_request(&mut self, mut r: RequestRecord) {
        r.seq = self.next_seq();
        self.requests.push(r);
        // Wake `wait_until` callers, so that a test can wait for a request (say, the first
        // eviction or watch) as it waits for a state change.
        self.version.send_modify(|_| {});
    }

    pub fn requests(&self) -> &[RequestRecord] {
        &self.requests
    }

    pub fn events(&self) -> &[Event] {
        &self.events
    }

    pub fn evictions(&self) -> &[EvictionRecord] {
        &self.evictions
    }

    pub fn add_fault(&mut self, method: Option<&str>, path_prefix: &str, count: usize, status: u16) {
        self.faults.push(Fault {
            method: method.map(str::to_uppercase),
            path_prefix: path_prefix.into(),
            remaining: count,
            status,
        });
    }

    /// Consumes one matching fault, if any, and returns the status to answer with.
    pub fn take_fault(&mut self, method: &str, path: &str) -> Option<u16> {
        let f = self.faults.iter_mut().find(|f| {
            f.remaining > 0
                && f.method.as_deref().is_none_or(|m| m == method)
                && path.starts_with(&f.path_prefix)
        })?;
        f.remaining -= 1;
        let st = f.status;
        self.faults.retain(|f| f.remaining > 0);
        Some(st)
    }
}
