//! The observed world as plain data: the pool containers Docker reports and the Nodes, Pods and
//! PodDisruptionBudgets Kubernetes reports. Observers fill it; the planner only reads it.

use std::collections::BTreeMap;

use serde::Serialize;

/// Everything one reconcile observed.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct World {
    /// Every container that carries a `poolctl.dev/pool` label.
    pub containers: Vec<Container>,
    /// Nodes that carry a `poolctl.dev/pool` label or whose name matches a pool container.
    pub nodes: Vec<Node>,
    /// Pods bound to the nodes above (for drain previews).
    pub pods: Vec<Pod>,
    /// Every PodDisruptionBudget of the cluster (for drain previews).
    pub pdbs: Vec<Pdb>,
}

/// One container of a pool, as Docker reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Container {
    pub id: String,
    /// Container name = hostname = Node name.
    pub name: String,
    pub pool: String,
    pub template_hash: String,
    pub state: ContainerState,
    pub health: Health,
    /// Creation time, in seconds since the Unix epoch.
    pub created: i64,
    /// The canonical template JSON it was created from (label), to diff against the new one.
    pub template: Option<String>,
    /// The source scope that created it (label), see [`crate::model::Origin::scope`].
    pub scope: Option<String>,
    /// The image it runs.
    pub image: String,
    /// The cluster its Node registers with (labels), when it was created as a Node: it is
    /// retired the Kubernetes way even after its pool's `node:` section or file is gone.
    pub cluster: Option<ClusterRef>,
}

/// Where a container's Node lives, as its pool's `node:` section named it at creation time.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct ClusterRef {
    /// The kubeconfig file as written in the spec; `None` for the default one.
    pub kubeconfig: Option<String>,
    /// The kubeconfig context; `None` for the current one.
    pub context: Option<String>,
}

impl Container {
    /// Whether the container counts as serving: running and not unhealthy or still starting.
    pub fn is_up(&self) -> bool {
        self.state == ContainerState::Running && matches!(self.health, Health::None | Health::Healthy)
    }
}

/// Docker's container states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ContainerState {
    Created,
    Running,
    Paused,
    Restarting,
    Removing,
    Exited,
    Dead,
}

impl ContainerState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Running => "running",
            Self::Paused => "paused",
            Self::Restarting => "restarting",
            Self::Removing => "removing",
            Self::Exited => "exited",
            Self::Dead => "dead",
        }
    }
}

/// The result of the image's HEALTHCHECK, if it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    /// The image has no HEALTHCHECK.
    None,
    Starting,
    Healthy,
    Unhealthy,
}

/// A Kubernetes Node that belongs (or belonged) to a pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Node {
    pub name: String,
    /// The `poolctl.dev/pool` label, if set.
    pub pool: Option<String>,
    /// The Ready condition is True.
    pub ready: bool,
    /// `spec.unschedulable`.
    pub unschedulable: bool,
    /// The cordon was made by poolctl (it carries the `poolctl.dev/retiring` annotation).
    pub cordoned_by_poolctl: bool,
}

/// A Pod bound to a pool Node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub node: String,
    pub labels: BTreeMap<String, String>,
    /// The kind of its controlling owner (`ReplicaSet`, `DaemonSet`, ...), if any.
    pub owner_kind: Option<String>,
    /// A static pod's mirror (`kubernetes.io/config.mirror` annotation).
    pub mirror: bool,
    /// Phase Succeeded or Failed.
    pub finished: bool,
    /// Has an emptyDir volume, whose data dies with the pod.
    pub empty_dir: bool,
}

impl Pod {
    /// Why a drain leaves this pod alone, as `kubectl drain` does: DaemonSet pods (the
    /// DaemonSet would recreate them at once), mirror pods (the kubelet owns them) and pods that
    /// already finished. The planner's preview and the drain itself share this one rule.
    pub fn drain_skip_reason(&self) -> Option<&'static str> {
        if self.owner_kind.as_deref() == Some("DaemonSet") {
            Some("DaemonSet")
        } else if self.mirror {
            Some("mirror pod")
        } else if self.finished {
            Some("finished")
        } else {
            None
        }
    }
}

/// A PodDisruptionBudget, reduced to what a drain preview needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pdb {
    pub namespace: String,
    pub name: String,
    /// `spec.selector.matchLabels`; a PDB whose selector uses expressions is matched on these
    /// labels only.
    pub match_labels: BTreeMap<String, String>,
    /// `status.disruptionsAllowed`.
    pub disruptions_allowed: i32,
}

impl Pdb {
    /// Whether the budget covers the pod (same namespace, selector matches).
    pub fn covers(&self, pod: &Pod) -> bool {
        self.namespace == pod.namespace
            && !self.match_labels.is_empty()
            && self.match_labels.iter().all(|(k, v)| pod.labels.get(k) == Some(v))
    }
}
