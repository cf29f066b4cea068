//! The observed world as plain data: the pool containers Docker reports and the Nodes, Pods and
//! PodDisruptionBudgets Kubernetes reports. Observers fill it; the planner only reads it.

use std::collections::BTreeMap;

use serde::Serialize;

use super::LabelSelector;
use crate::spec::Taint;

/// Everything one reconcile observed.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct World {
    /// When it was observed, in seconds since the Unix epoch: the "now" the planner measures
    /// how long a condition has held against (tests pass their own clock).
    pub now: i64,
    /// Every container that carries a `poolctl.dev/pool` label.
    pub containers: Vec<Container>,
    /// Nodes that carry a `poolctl.dev/pool` label or whose name matches a pool container.
    pub nodes: Vec<Node>,
    /// Pods bound to the nodes above (for drain previews).
    pub pods: Vec<Pod>,
    /// Every PodDisruptionBudget of the cluster (for drain previews).
    pub pdbs: Vec<Pdb>,
    /// The pools whose lock another run held, unexpired, when this was observed: their
    /// instances that have not finished coming up may be in the making. Elsewhere, nobody
    /// is making them: a run holds a pool's lock for as long as it creates instances.
    pub locked: std::collections::BTreeSet<String>,
    /// The rollout record of each pool that has one: which template its last rollout was to,
    /// and since when (see [`RolloutRecord`]).
    pub rollouts: BTreeMap<String, RolloutRecord>,
    /// The rollout history of each pool that has one, its revisions oldest first (see
    /// [`crate::model::Revision`]): what a rollback goes back to.
    pub history: BTreeMap<String, Vec<crate::model::Revision>>,
    /// The addresses of the Docker daemons this observation listed: a container missing from
    /// `containers` is known to be gone only from these. Any other daemon was not looked at,
    /// and what lives there is out of view, not gone.
    pub listed: std::collections::BTreeSet<String>,
    /// The pools suspended by `poolctl suspend`, by pool: their record in the world, which
    /// every run and every replica reads, so that none of them rolls or remediates the pool.
    pub suspended: BTreeMap<String, Suspension>,
    /// The promotions `poolctl promote` recorded, by pool: each lets the canaries of one
    /// template go on to a whole rollout, in every run and every replica.
    pub promoted: BTreeMap<String, Promotion>,
}

/// A pool's promotion, as `poolctl promote` recorded it in the world: the canaries of one
/// template served well enough, and the rest of the pool may roll to it (Nomad's `promote`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Promotion {
    /// The template it promotes: a later template needs a promotion of its own.
    pub template_hash: String,
    /// Who promoted it: `user@host`, or the Pod poolctl ran in.
    pub by: String,
    /// When, in seconds since the Unix epoch, by the clock of the world that keeps the record.
    pub at: i64,
}

/// A pool's suspension, as `poolctl suspend` recorded it in the world: a stop button that is
/// not a commit (Flux's `flux suspend`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Suspension {
    /// Who suspended it: `user@host`, or the Pod poolctl ran in.
    pub by: String,
    /// When, in seconds since the Unix epoch, by the clock of the world that keeps the record.
    pub at: i64,
    /// Why, as given with `--reason`.
    pub reason: Option<String>,
}

impl Suspension {
    /// `suspended by ann@devbox at 2026-12-06T04:00:00Z: incident`.
    pub fn describe(&self) -> String {
        let at = k8s_openapi::jiff::Timestamp::from_second(self.at)
            .map_or_else(|_| self.at.to_string(), |t| t.to_string());
        match &self.reason {
            Some(reason) => format!("suspended by {} at {at}: {reason}", self.by),
            None => format!("suspended by {} at {at}", self.by),
        }
    }
}

/// What ties a Node to the container that runs its kubelet, written by poolctl on the Node
/// ([`crate::model::labels::CONTAINER_ID`], [`crate::model::labels::DOCKER_HOST`]): the proof
/// that the Node is one of its instances, and where its container is to be looked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InstanceRef {
    pub container_id: String,
    pub docker_host: String,
}

impl InstanceRef {
    /// `0123456789ab on unix:///var/run/docker.sock`: the short ID, as `docker ps` shows it.
    pub fn describe(&self) -> String {
        let id = self.container_id.get(..12).unwrap_or(&self.container_id);
        format!("{id} on {}", self.docker_host)
    }
}

/// When a pool's rollout to a template began: written when its first instance of a new
/// template is created (and again when `apply` tries a stalled rollout anew), read to tell
/// whether the rollout still makes progress (`spec.rollout.progressDeadline`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RolloutRecord {
    pub template_hash: String,
    /// Seconds since the Unix epoch.
    pub since: i64,
    /// Set when this is a rollback (`failureAction: rollback`): the template whose rollout
    /// stalled, which is not tried again until the source changes or an `apply` retries it.
    pub rolled_back_from: Option<String>,
    /// When the pool's rollout last stepped forward other than by an instance coming up (a Node
    /// cordoned or drained, an instance stopped or removed), in seconds since the Unix epoch:
    /// a rollout busy retiring, however slowly a budget lets it, is not stalled.
    pub progressed: Option<i64>,
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
    /// When poolctl made it, in nanoseconds since the Unix epoch by its own clock (label
    /// `poolctl.dev/created-at`; 0 without): orders containers of a pool that Docker says were
    /// made within the same second, for `deletePolicy`.
    #[serde(skip)]
    pub created_precise: i128,
    /// When the world recorded that it finished coming up (its bootstrap, join and Ready wait
    /// done), in seconds since the Unix epoch; `None` while it has not. A container created
    /// before poolctl kept that record counts as having come up when it was created.
    pub came_up: Option<i64>,
    /// Since when it has not been serving, when Docker's own records say (the start of the
    /// current failing streak of its HEALTHCHECK, or of its restart loop): read only for a
    /// container that is restarting or unhealthy.
    pub since: Option<i64>,
    /// Docker's own status text, with the uptime: `Up 5 minutes (healthy)`, `Exited (0) 2
    /// minutes ago` (the list call has no start time; this is what `docker ps` shows).
    pub status: String,
    /// The canonical template JSON it was created from (label), to diff against the new one.
    pub template: Option<String>,
    /// The source scope that created it (label), see [`crate::model::Origin::scope`].
    pub scope: Option<String>,
    /// The image it runs.
    pub image: String,
    /// The cluster its Node registers with (labels), when it was created as a Node: it is
    /// retired the Kubernetes way even after its pool's `node:` section or file is gone.
    pub cluster: Option<ClusterRef>,
    /// The cluster poolctl was connected to when it created the container (labels), checked
    /// against the cluster the kubeconfig resolves to now. `None` for containers created before
    /// poolctl recorded it.
    pub cluster_id: Option<ClusterIdentity>,
    /// The Docker endpoint it lives on, when its pool's spec places the pool on another one
    /// (the pool moved): such an instance is replaced where the spec says, like an outdated one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elsewhere: Option<String>,
    /// The address of the daemon it was listed from.
    pub docker_host: String,
}

/// Which cluster a Node lives in, as resolved when poolctl connected: the kubeconfig context,
/// the API server URL and, where it can be read, the UID of the `kube-system` Namespace, which
/// stays the same when the URL changes (a kind cluster restarted on another port) and differs
/// between two clusters behind the same URL.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct ClusterIdentity {
    pub context: String,
    pub server: String,
    pub uid: Option<String>,
}

impl ClusterIdentity {
    /// Whether both name the same cluster: by UID when both have one, else by server URL.
    pub fn same_cluster(&self, other: &Self) -> bool {
        match (&self.uid, &other.uid) {
            (Some(a), Some(b)) => a == b,
            _ => self.server == other.server,
        }
    }

    /// One string per cluster, where a map needs a key: the UID of its `kube-system`, else its
    /// server URL.
    pub fn key(&self) -> &str {
        self.uid.as_deref().unwrap_or(&self.server)
    }
}

impl std::fmt::Display for ClusterIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let context = if self.context.is_empty() { "(none)" } else { &self.context };
        write!(f, "context {context} at {}", self.server)?;
        if let Some(uid) = &self.uid {
            write!(f, ", kube-system UID {uid}")?;
        }
        Ok(())
    }
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
    /// Whether the container holds processes that a stop must end gracefully: it runs, or is
    /// paused or restarting. A kubelet in it may register its Node.
    pub fn may_run(self) -> bool {
        matches!(self, Self::Running | Self::Paused | Self::Restarting)
    }

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
    /// Its labels and taints, to converge them on the spec's.
    pub config: NodeConfig,
    /// Its status conditions (`Ready`, `MemoryPressure`...), with when each last changed.
    pub conditions: Vec<NodeCondition>,
    /// What its owners' annotations ask of a retirement: deletion hooks to wait for, and
    /// whether to skip its drain.
    pub retirement: RetirementMarks,
    /// poolctl's reference to the container that runs its kubelet, when poolctl wrote one.
    pub reference: Option<InstanceRef>,
}

impl Node {
    /// Whether its kubelet stopped reporting: its `Ready` condition is `Unknown`, as Cluster
    /// API's `IsNodeUnreachable` reads it.
    pub fn is_unreachable(&self) -> bool {
        self.conditions.iter().any(|c| c.kind == "Ready" && c.status == "Unknown")
    }
}

/// What a Node's annotations ask of its retirement, as Cluster API's Machine annotations do.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RetirementMarks {
    /// `pre-drain.delete.hook.poolctl.dev/<name>: <owner>` and
    /// `pre-terminate.delete.hook.poolctl.dev/<name>: <owner>` annotations, as they are.
    pub hooks: Vec<(String, String)>,
    /// `poolctl.dev/exclude-node-draining`: its drain is skipped, the owner's explicit choice.
    pub exclude_draining: bool,
    /// `poolctl.dev/exclude-wait-for-node-volume-detach`: its retirement does not wait for its
    /// volumes to detach.
    pub exclude_volume_detach: bool,
    /// `poolctl.dev/do-not-disrupt: "true"` (or Karpenter's `karpenter.sh/do-not-disrupt`): no
    /// rollout nor scale-down retires it while it serves; the annotation named.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub do_not_disrupt: Option<&'static str>,
    /// `poolctl.dev/skip-remediation` (or Cluster API's `cluster.x-k8s.io/skip-remediation`):
    /// unhealthy, it is reported, not replaced; the annotation named.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skip_remediation: Option<&'static str>,
}

impl RetirementMarks {
    /// The hooks of one kind (`pre-drain` or `pre-terminate`) still set: `name (owner)`.
    pub fn hooks_of(&self, kind: &str) -> Vec<String> {
        let prefix = format!("{kind}.delete.hook.poolctl.dev/");
        self.hooks
            .iter()
            .filter_map(|(k, v)| k.strip_prefix(&prefix).map(|name| format!("{name} ({v})")))
            .collect()
    }
}

/// A Node status condition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeCondition {
    /// `Ready`, `MemoryPressure`...
    pub kind: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// `lastTransitionTime`, in seconds since the Unix epoch.
    pub since: Option<i64>,
}

impl NodeCondition {
    /// The `Ready` condition with `status` since `since`.
    pub fn ready(status: &str, since: i64) -> Self {
        Self { kind: "Ready".to_owned(), status: status.to_owned(), since: Some(since) }
    }
}

/// The labels and taints of a Node that poolctl converges: desired state, like the template.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NodeConfig {
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    /// The label keys and taints (`key:effect`) poolctl set, from its annotation: what it may
    /// remove when the spec no longer asks for them. Others' labels and taints are left alone.
    pub managed: Vec<String>,
}

/// A Pod bound to a pool Node.
// Each flag is an independent fact a drain decides on (see `drain_action`); an enum of their
// combinations would be harder to follow.
#[allow(clippy::struct_excessive_bools)]
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
    /// Its controller is a DaemonSet that no longer exists: nothing recreates the pod, so a
    /// drain evicts it rather than leave it to die with the container.
    pub orphaned: bool,
    /// Karpenter's `karpenter.sh/do-not-disrupt: "true"` annotation: its owner asked that it
    /// not be disrupted, so a drain waits for it to complete rather than evict it.
    pub do_not_disrupt: bool,
}

/// What a drain does with a pod, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainDecision {
    pub action: DrainAction,
    /// Its group: pods are evicted lowest order first, each group gone before the next.
    pub order: i64,
    /// The index of the `spec.drain.rules` entry that decided, if one did.
    pub rule: Option<usize>,
}

/// What a drain does with a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainAction {
    /// Evicted, with a warning when something is lost for good.
    Evict(Option<&'static str>),
    /// Left alone, for this reason.
    Skip(&'static str),
    /// Not evicted: the drain waits until it has completed (phase Succeeded or Failed) or is
    /// gone, for this reason.
    WaitCompleted(&'static str),
}

/// The pod labels that choose a pod's drain behaviour, strongest first: poolctl's own, then
/// Cluster API's (same values), so a cluster labelled for Cluster API needs no change.
const DRAIN_LABEL_ACTIONS: [(&str, &str, DrainAction); 4] = [
    ("poolctl.dev/drain", "skip", DrainAction::Skip("labelled poolctl.dev/drain=skip")),
    (
        "poolctl.dev/drain",
        "wait-completed",
        DrainAction::WaitCompleted("labelled poolctl.dev/drain=wait-completed"),
    ),
    ("cluster.x-k8s.io/drain", "skip", DrainAction::Skip("labelled cluster.x-k8s.io/drain=skip")),
    (
        "cluster.x-k8s.io/drain",
        "wait-completed",
        DrainAction::WaitCompleted("labelled cluster.x-k8s.io/drain=wait-completed"),
    ),
];

impl Pod {
    /// What a drain does with this pod, as `kubectl drain --ignore-daemonsets --force
    /// --delete-emptydir-data` (what Cluster API's drain amounts to) decides it: DaemonSet pods
    /// stay (their DaemonSet would recreate them at once) unless the DaemonSet is gone, mirror
    /// pods stay (the kubelet owns them), and so do pods that already finished. Then the pod's
    /// owners have their say, as with Cluster API's `MachineDrainRule` labels: a `poolctl.dev/drain` (or
    /// Cluster API's `cluster.x-k8s.io/drain`) label `skip` leaves the pod to go down with its node, `wait-completed` (or Karpenter's
    /// `do-not-disrupt` annotation) makes the drain wait for it; other values are ignored, as
    /// Cluster API ignores them. Every other pod is evicted. The planner's preview and the drain
    /// itself share this one rule.
    pub fn drain_action(&self) -> DrainAction {
        self.drain_decision(&[]).action
    }

    /// [`Self::drain_action`] with the pool's `spec.drain.rules`: after the pod's own labels, the
    /// first rule that matches it decides, and puts it in the rule's `order` group.
    pub fn drain_decision(&self, rules: &[crate::spec::DrainRule]) -> DrainDecision {
        let label = DRAIN_LABEL_ACTIONS
            .iter()
            .find(|(key, value, _)| self.labels.get(*key).is_some_and(|v| v == value))
            .map(|(.., action)| *action)
            .or_else(|| {
                self.do_not_disrupt
                    .then_some(DrainAction::WaitCompleted("annotated karpenter.sh/do-not-disrupt"))
            });
        let builtin = self.builtin_skip();
        let rule = (builtin.is_none() && label.is_none())
            .then(|| rules.iter().enumerate().find(|(_, r)| self.matches_rule(r)))
            .flatten();
        let action = match (builtin, label, rule) {
            (Some(action), ..) | (None, Some(action), _) => action,
            (None, None, Some((_, r))) if r.behavior == crate::spec::DrainBehavior::Skip => {
                DrainAction::Skip("behavior: Skip")
            }
            (None, None, Some((_, r))) if r.behavior == crate::spec::DrainBehavior::WaitCompleted => {
                DrainAction::WaitCompleted("behavior: WaitCompleted")
            }
            _ => self.default_action(),
        };
        DrainDecision { action, order: rule.map_or(0, |(_, r)| r.order), rule: rule.map(|(i, _)| i) }
    }

    fn matches_rule(&self, rule: &crate::spec::DrainRule) -> bool {
        let namespace = rule.namespaces.is_empty() || rule.namespaces.contains(&self.namespace);
        // A selector the API server would refuse is refused by validation; should one get here,
        // it selects nothing, as the API server's own reading of such a selector does.
        let labels = rule
            .pods
            .as_ref()
            .is_none_or(|p| LabelSelector::of_pods(p).is_some_and(|s| s.matches(&self.labels)));
        namespace && labels
    }

    fn builtin_skip(&self) -> Option<DrainAction> {
        let daemon = self.owner_kind.as_deref() == Some("DaemonSet");
        if daemon && !self.orphaned {
            Some(DrainAction::Skip("DaemonSet"))
        } else if self.mirror {
            Some(DrainAction::Skip("mirror pod"))
        } else if self.finished {
            Some(DrainAction::Skip("finished"))
        } else {
            None
        }
    }

    fn default_action(&self) -> DrainAction {
        let daemon = self.owner_kind.as_deref() == Some("DaemonSet");
        if self.owner_kind.is_none() {
            DrainAction::Evict(Some("no controller: will be lost"))
        } else if daemon {
            DrainAction::Evict(Some("its DaemonSet is gone: will be lost"))
        } else if self.empty_dir {
            DrainAction::Evict(Some("emptyDir data will be lost"))
        } else {
            DrainAction::Evict(None)
        }
    }
}

/// A PodDisruptionBudget, reduced to what a drain preview needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pdb {
    pub namespace: String,
    pub name: String,
    /// `spec.selector`, read as policy/v1 and the eviction subresource do: `None` (no selector,
    /// or one the API server cannot parse) covers no pod; an empty one covers every pod of the
    /// namespace.
    pub selector: Option<LabelSelector>,
    /// `status.disruptionsAllowed`.
    pub disruptions_allowed: i32,
}

impl Pdb {
    /// Whether the budget covers the pod (same namespace, selector matches). The eviction
    /// subresource refuses to evict a pod that more than one budget covers.
    pub fn covers(&self, pod: &Pod) -> bool {
        self.namespace == pod.namespace && self.selector.as_ref().is_some_and(|s| s.matches(&pod.labels))
    }

    /// `namespace/name`, as the preview and errors name a budget.
    pub fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// What a Node's labels and taints must become.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NodeConfigChange {
    /// Labels to add or give a new value.
    pub set: BTreeMap<String, String>,
    /// Labels poolctl set that the spec no longer asks for.
    pub remove: Vec<String>,
    /// The whole taint list (the API replaces it as a whole): everybody else's, then the spec's.
    pub taints: Vec<Taint>,
    /// The new value of poolctl's annotation of what it manages.
    pub managed: Vec<String>,
}

impl NodeConfigChange {
    /// One line per change, for the plan: `+label k=v`, `-label k`, `+taint k=v:Effect`,
    /// `-taint k:Effect`.
    pub fn describe(&self, before: &NodeConfig) -> Vec<String> {
        let mut out: Vec<String> = self.set.iter().map(|(k, v)| format!("+label {k}={v}")).collect();
        out.extend(self.remove.iter().map(|k| format!("-label {k}")));
        let shown = |t: &Taint| match &t.value {
            Some(v) => format!("{}={v}:{}", t.key, t.effect),
            None => format!("{}:{}", t.key, t.effect),
        };
        out.extend(
            self.taints.iter().filter(|t| !before.taints.contains(t)).map(|t| format!("+taint {}", shown(t))),
        );
        out.extend(
            before.taints.iter().filter(|t| !self.taints.contains(t)).map(|t| format!("-taint {}", shown(t))),
        );
        out
    }
}

impl NodeConfig {
    /// The managed-annotation entry of a label key.
    fn label_entry(key: &str) -> String {
        format!("label:{key}")
    }

    /// The managed-annotation entry of a taint.
    fn taint_entry(taint: &Taint) -> String {
        format!("taint:{}:{}", taint.key, taint.effect)
    }

    /// What this Node must become to carry `labels` (the pool label included) and `taints`,
    /// keeping everybody else's labels and taints; `None` when it already does. What poolctl
    /// set earlier and the spec no longer asks for is removed; the pool label is never listed
    /// as managed, because poolctl always keeps it. The taint the Node registered with to wait
    /// for this ([`super::labels::UNINITIALIZED`]) goes too, once the Node is `ready`: until
    /// then it stays, whatever else changes.
    pub fn change_towards(
        &self,
        labels: &BTreeMap<String, String>,
        taints: &[Taint],
        pool_label: &str,
        ready: bool,
    ) -> Option<NodeConfigChange> {
        let set: BTreeMap<String, String> = labels
            .iter()
            .filter(|(k, v)| self.labels.get(*k) != Some(v))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let remove: Vec<String> = self
            .labels
            .keys()
            .filter(|k| !labels.contains_key(*k) && self.managed.contains(&Self::label_entry(k)))
            .cloned()
            .collect();
        let desired_taint = |t: &Taint| taints.iter().any(|d| d.key == t.key && d.effect == t.effect);
        let uninitialized = |t: &Taint| t.key == super::labels::UNINITIALIZED;
        let mut new_taints: Vec<Taint> = self
            .taints
            .iter()
            .filter(|t| !desired_taint(t) && !self.managed.contains(&Self::taint_entry(t)))
            .filter(|t| !(ready && uninitialized(t)))
            .cloned()
            .collect();
        new_taints.extend(taints.iter().cloned());
        let mut managed: Vec<String> = labels
            .keys()
            .filter(|k| k.as_str() != pool_label)
            .map(|k| Self::label_entry(k))
            .chain(taints.iter().map(Self::taint_entry))
            .collect();
        managed.sort();
        managed.dedup();
        let same_taints =
            new_taints.len() == self.taints.len() && new_taints.iter().all(|t| self.taints.contains(t));
        let mut current_managed = self.managed.clone();
        current_managed.sort();
        if set.is_empty() && remove.is_empty() && same_taints && managed == current_managed {
            return None;
        }
        Some(NodeConfigChange { set, remove, taints: new_taints, managed })
    }

    /// This configuration after `change`.
    #[must_use]
    pub fn changed(&self, change: &NodeConfigChange) -> Self {
        let mut labels = self.labels.clone();
        labels.extend(change.set.clone());
        labels.retain(|k, _| !change.remove.contains(k));
        Self { labels, taints: change.taints.clone(), managed: change.managed.clone() }
    }
}

/// Whether `name` has the shape of the names poolctl gives the instances of `pool`
/// (`<pool>-<10 hex digits of the template hash>-<5 lowercase letters or digits>`): how a Node
/// that registered before poolctl could label it is still found as the pool's once its
/// container is gone.
pub fn is_instance_name(pool: &str, name: &str) -> bool {
    let Some(rest) = name.strip_prefix(pool).and_then(|r| r.strip_prefix('-')) else { return false };
    let bytes = rest.as_bytes();
    bytes.len() == 10 + 1 + 5
        && bytes[..10].iter().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        && bytes[10] == b'-'
        && bytes[11..].iter().all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::build::{pdb, pod};

    fn taint(key: &str, effect: &str) -> Taint {
        Taint { key: key.into(), value: None, effect: effect.into() }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn a_node_converges_on_the_spec_and_keeps_everybody_elses_labels_and_taints() {
        let node = NodeConfig {
            labels: labels(&[("kubernetes.io/hostname", "n"), ("team", "old"), ("gone", "x")]),
            taints: vec![taint("theirs", "NoSchedule"), taint("mine-before", "NoExecute")],
            managed: vec!["label:gone".into(), "label:team".into(), "taint:mine-before:NoExecute".into()],
        };
        let want = labels(&[("poolctl.dev/pool", "k"), ("team", "infra")]);
        let change = node
            .change_towards(&want, &[taint("dedicated", "NoSchedule")], "poolctl.dev/pool", true)
            .unwrap();
        assert_eq!(change.set, labels(&[("poolctl.dev/pool", "k"), ("team", "infra")]));
        assert_eq!(change.remove, ["gone"], "only what poolctl set goes");
        assert_eq!(change.taints, [taint("theirs", "NoSchedule"), taint("dedicated", "NoSchedule")]);
        assert_eq!(change.managed, ["label:team", "taint:dedicated:NoSchedule"]);
        let after = node.changed(&change);
        assert!(after.labels.contains_key("kubernetes.io/hostname"));
        assert_eq!(
            after.change_towards(&want, &[taint("dedicated", "NoSchedule")], "poolctl.dev/pool", true),
            None
        );
        assert_eq!(
            change.describe(&node),
            [
                "+label poolctl.dev/pool=k",
                "+label team=infra",
                "-label gone",
                "+taint dedicated:NoSchedule",
                "-taint mine-before:NoExecute"
            ]
        );
    }

    #[test]
    fn a_taint_whose_value_changed_is_replaced_not_doubled() {
        let mut old = taint("dedicated", "NoSchedule");
        old.value = Some("a".into());
        let node = NodeConfig {
            taints: vec![old],
            managed: vec!["taint:dedicated:NoSchedule".into()],
            ..NodeConfig::default()
        };
        let mut new = taint("dedicated", "NoSchedule");
        new.value = Some("b".into());
        let change = node.change_towards(&BTreeMap::new(), std::slice::from_ref(&new), "p", true).unwrap();
        assert_eq!(change.taints, [new]);
    }

    /// The uninitialized taint goes with the labels once the Node is Ready, in one change, and
    /// stays while it is not.
    #[test]
    fn the_uninitialized_taint_goes_once_the_node_is_ready_and_not_before() {
        let node = NodeConfig {
            labels: labels(&[("kubernetes.io/hostname", "n")]),
            taints: vec![
                taint("dedicated", "NoSchedule"),
                taint(super::super::labels::UNINITIALIZED, "NoSchedule"),
            ],
            managed: Vec::new(),
        };
        let want = labels(&[("poolctl.dev/pool", "k"), ("node-role.kubernetes.io/worker", "")]);
        let wanted_taints = [taint("dedicated", "NoSchedule")];
        let ready = node.change_towards(&want, &wanted_taints, "poolctl.dev/pool", true).unwrap();
        assert_eq!(ready.taints, wanted_taints);
        assert_eq!(ready.set, want, "in the same change as the labels");
        let not_ready = node.change_towards(&want, &wanted_taints, "poolctl.dev/pool", false).unwrap();
        assert!(not_ready.taints.iter().any(|t| t.key == super::super::labels::UNINITIALIZED));
        // Configured, and not Ready yet: nothing to change.
        let configured = NodeConfig { labels: want.clone(), ..node.changed(&not_ready) };
        assert_eq!(configured.change_towards(&want, &wanted_taints, "poolctl.dev/pool", false), None);
    }

    #[test]
    fn instance_names_are_recognised_by_their_shape() {
        assert!(is_instance_name("web", "web-3e94937dc7-i5j43"));
        assert!(!is_instance_name("web", "web-3e94937dc7-i5j4"));
        assert!(!is_instance_name("web", "webx-3e94937dc7-i5j43"));
        assert!(!is_instance_name("web", "web-3E94937DC7-i5j43"));
        assert!(!is_instance_name("web", "web-0123456789-0123456789-abcde"));
        assert!(!is_instance_name("web", "kind-worker"));
    }

    #[test]
    fn clusters_are_the_same_by_uid_else_by_server() {
        let id = |server: &str, uid: Option<&str>| ClusterIdentity {
            context: "kind-a".into(),
            server: server.into(),
            uid: uid.map(str::to_owned),
        };
        assert!(id("https://127.0.0.1:1", Some("u")).same_cluster(&id("https://127.0.0.1:2", Some("u"))));
        assert!(!id("https://127.0.0.1:1", Some("u")).same_cluster(&id("https://127.0.0.1:1", Some("v"))));
        assert!(id("https://a", None).same_cluster(&id("https://a", Some("u"))));
        assert!(!id("https://a", None).same_cluster(&id("https://b", Some("u"))));
    }

    #[test]
    fn the_first_matching_drain_rule_decides_and_a_pods_own_label_beats_every_rule() {
        use crate::spec::{DrainBehavior, DrainRule, PodSelector};
        let rule = |app: &str, namespaces: &[&str], behavior, order| DrainRule {
            pods: Some(PodSelector {
                match_labels: BTreeMap::from([("app".to_owned(), app.to_owned())]),
                ..PodSelector::default()
            }),
            namespaces: namespaces.iter().map(|n| (*n).to_owned()).collect(),
            behavior,
            order,
        };
        let rules = [
            rule("web", &["prod"], DrainBehavior::Skip, 0),
            rule("web", &[], DrainBehavior::WaitCompleted, 4),
            DrainRule { order: 9, ..DrainRule::default() },
        ];
        let decide = |namespace: &str, f: &dyn Fn(&mut Pod)| {
            let mut p = pod("web-1", "n", Some("ReplicaSet"));
            p.namespace = namespace.to_owned();
            f(&mut p);
            let d = p.drain_decision(&rules);
            (d.action, d.order, d.rule)
        };
        assert_eq!(decide("prod", &|_| {}), (DrainAction::Skip("behavior: Skip"), 0, Some(0)));
        assert_eq!(
            decide("dev", &|_| {}),
            (DrainAction::WaitCompleted("behavior: WaitCompleted"), 4, Some(1))
        );
        // A rule without a selector or namespaces matches every pod.
        let api = |p: &mut Pod| {
            p.labels.insert("app".into(), "api".into());
        };
        assert_eq!(decide("dev", &api), (DrainAction::Evict(None), 9, Some(2)));
        let labelled = |p: &mut Pod| {
            p.labels.insert("poolctl.dev/drain".into(), "skip".into());
        };
        assert_eq!(decide("dev", &labelled), (DrainAction::Skip("labelled poolctl.dev/drain=skip"), 0, None));
        let daemon = |p: &mut Pod| p.owner_kind = Some("DaemonSet".into());
        assert_eq!(decide("prod", &daemon), (DrainAction::Skip("DaemonSet"), 0, None));
    }

    #[test]
    fn a_drain_skips_daemonset_mirror_and_finished_pods_and_evicts_an_orphaned_daemonset_pod() {
        let action = |f: &dyn Fn(&mut Pod)| {
            let mut p = pod("p", "n", Some("ReplicaSet"));
            f(&mut p);
            p.drain_action()
        };
        assert_eq!(action(&|_| {}), DrainAction::Evict(None));
        assert_eq!(action(&|p| p.owner_kind = Some("DaemonSet".into())), DrainAction::Skip("DaemonSet"));
        let orphan = |p: &mut Pod| {
            p.owner_kind = Some("DaemonSet".into());
            p.orphaned = true;
        };
        assert_eq!(action(&orphan), DrainAction::Evict(Some("its DaemonSet is gone: will be lost")));
        let finished_orphan = |p: &mut Pod| {
            orphan(p);
            p.finished = true;
        };
        assert_eq!(action(&finished_orphan), DrainAction::Skip("finished"));
        assert_eq!(action(&|p| p.mirror = true), DrainAction::Skip("mirror pod"));
        let label = |key: &'static str, value: &'static str| {
            move |p: &mut Pod| {
                p.labels.insert(key.into(), value.into());
            }
        };
        assert_eq!(
            action(&label("poolctl.dev/drain", "skip")),
            DrainAction::Skip("labelled poolctl.dev/drain=skip")
        );
        assert_eq!(
            action(&label("cluster.x-k8s.io/drain", "wait-completed")),
            DrainAction::WaitCompleted("labelled cluster.x-k8s.io/drain=wait-completed")
        );
        // poolctl's label beats Cluster API's; an unknown value is ignored; a DaemonSet pod is
        // skipped whatever its label says, as it always was.
        let both = |p: &mut Pod| {
            label("poolctl.dev/drain", "wait-completed")(p);
            label("cluster.x-k8s.io/drain", "skip")(p);
        };
        assert_eq!(action(&both), DrainAction::WaitCompleted("labelled poolctl.dev/drain=wait-completed"));
        assert_eq!(action(&label("poolctl.dev/drain", "later")), DrainAction::Evict(None));
        let daemon_skip = |p: &mut Pod| {
            label("poolctl.dev/drain", "wait-completed")(p);
            p.owner_kind = Some("DaemonSet".into());
        };
        assert_eq!(action(&daemon_skip), DrainAction::Skip("DaemonSet"));
        assert_eq!(
            action(&|p| p.do_not_disrupt = true),
            DrainAction::WaitCompleted("annotated karpenter.sh/do-not-disrupt")
        );
        assert_eq!(action(&|p| p.owner_kind = None), DrainAction::Evict(Some("no controller: will be lost")));
        assert_eq!(action(&|p| p.empty_dir = true), DrainAction::Evict(Some("emptyDir data will be lost")));
    }

    #[test]
    fn a_budget_covers_only_pods_of_its_own_namespace() {
        let web = pod("web-1", "n", Some("ReplicaSet"));
        let budget = pdb("web", &[("app", "web")], &[], 0);
        assert!(budget.covers(&web));
        assert!(!budget.covers(&Pod { namespace: "other".into(), ..web.clone() }));
        assert!(!Pdb { selector: None, ..budget }.covers(&web), "no selector covers nothing");
    }
}
