//! The pool file: the serde model of a `Pool` document, its validation and its template hash.
//!
//! These types do no I/O. They are the single source of truth for the YAML format, the JSON
//! Schema (`poolctl schema`) and the template hash, so the three cannot drift apart.

mod copy;
mod decode;
pub mod docker;
mod duration;
mod hash;
mod load;
mod locate;
mod names;
mod scale;
mod secret;
mod tree;
mod validate;
mod window;

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use copy::{CopiedFrom, copies_label, env_of, merge};
pub use duration::Duration;
pub use hash::{HASH_LEN, TemplateDiff, canonical_template, diff_templates, split_hashes, template_hash};
pub use load::{Document, MAX_FILE_BYTES, SpecError, SpecErrors, load_documents, load_files};
pub use locate::escape_controls;
pub use scale::{IntOrPercent, Rounding};
pub use secret::{
    EnvValue, SENSITIVE, Secret, SecretEnv, ValueFrom, read_secrets, redact_all, resolve_kubeconfigs,
};
pub use tree::{MAX_ALIAS_EXPANSION, MAX_ALIASES, MAX_DEPTH, MAX_NODES, SpanMap};
pub use validate::{
    JOIN_DIR, K3S_JOIN_ENV, MAX_DURATION, MAX_ITEMS, MAX_POOL_NAME_LEN, MAX_REPLICAS, validate_pools,
};
#[cfg(test)]
pub(crate) use window::problems as window_problems;
pub use window::{
    DisruptionReason, DisruptionSpec, DisruptionWindow, MAX_WINDOW, WindowError, WindowKind, schedule, zone,
};

/// The apiVersion of every document poolctl reads.
pub const API_VERSION: &str = "poolctl.dev/v1alpha1";
/// The kind of a pool document.
pub const KIND_POOL: &str = "Pool";
/// `node.kubeconfig: in-cluster`: the credentials of the Pod poolctl runs in (its service
/// account), as a controller's.
pub const IN_CLUSTER: &str = "in-cluster";

/// One `Pool` document: a named set of identical containers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(
    title = "Pool",
    description = "A poolctl pool: N identical containers, optionally registered as Kubernetes Nodes."
)]
pub struct Pool {
    /// Always `poolctl.dev/v1alpha1`.
    #[schemars(extend("const" = "poolctl.dev/v1alpha1"))]
    pub api_version: String,
    /// Always `Pool`.
    #[schemars(extend("const" = "Pool"))]
    pub kind: String,
    pub metadata: Metadata,
    pub spec: PoolSpec,
}

/// Identifies the pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Metadata {
    /// The pool's name: a DNS-1123 label of at most 46 characters, so that instance names
    /// (`<pool>-<hash>-<suffix>`) stay valid hostnames.
    #[schemars(length(min = 1, max = 46), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub name: String,
}

/// What the pool should look like.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PoolSpec {
    /// How many instances the pool keeps (at most 1000).
    #[schemars(range(min = 0, max = 1000))]
    pub replicas: i64,
    /// The container every instance runs. Changing it replaces every instance.
    pub template: Template,
    /// Commands run, in order, inside each new container once it has started (for example
    /// `kubeadm join`). Changing them replaces every instance.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bootstrap: Vec<BootstrapStep>,
    /// How each new instance joins a cluster, with a credential that poolctl fetches for it and
    /// that never sits in the pool file. Changing it replaces every instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join: Option<Join>,
    /// How each instance appears in Kubernetes. Without it the pool is container-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<NodeSpec>,
    /// The Docker daemon the pool's containers live on. Default: the docker CLI's current
    /// endpoint (`DOCKER_HOST`, else `DOCKER_CONTEXT`, else the config's `currentContext`).
    /// Not covered by the template hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docker: Option<DockerSpec>,
    /// How instances are replaced.
    #[serde(default)]
    pub rollout: RolloutSpec,
    /// When an instance that does not serve is replaced, and when it is waited for (as Cluster
    /// API's `MachineHealthCheck`). Not covered by the template hash.
    #[serde(default)]
    pub health: HealthSpec,
    /// What the drain of a retiring instance's Node does with its pods, beyond the pod labels
    /// `poolctl.dev/drain` and `cluster.x-k8s.io/drain` (as Cluster API's `MachineDrainRule`).
    /// Not covered by the template hash.
    #[serde(default, skip_serializing_if = "is_default")]
    pub drain: DrainSpec,
    /// When the pool's instances may be disrupted (`windows`). Default: at any time.
    #[serde(default, skip_serializing_if = "is_default")]
    pub disruption: DisruptionSpec,
    /// Leave the pool as it is: it is still observed and its plan shown, marked paused, but
    /// apply and watch change nothing in it, and a rollout in flight stops at the next step
    /// boundary (as a Deployment's `paused`, Flux's `suspend`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// Pools of the same source this pool waits for: its steps (creations included) wait until
    /// each of them is in sync and serving, every instance up, as Flux's `dependsOn` and Argo
    /// CD's sync waves order a change that touches them all (a `system` pool before `apps`).
    /// Not covered by the template hash.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
}

/// Drain rules, as Cluster API's `MachineDrainRule`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DrainSpec {
    /// The first rule that matches a pod decides what the drain does with it; a pod's own
    /// `poolctl.dev/drain` (or `cluster.x-k8s.io/drain`) label beats every rule. Pods are
    /// evicted in groups by `order`, lowest first, each group gone before the next starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<DrainRule>,
    /// The grace period each evicted pod gets (`gracePeriodSeconds` of the Eviction), as
    /// `kubectl drain --grace-period`: shorter than a pod's own `terminationGracePeriodSeconds`,
    /// it ends sooner. Default: the pod's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_grace_period: Option<Duration>,
    /// What a drain does with the pods still on the Node once `spec.rollout.drainTimeout` has
    /// passed: `Halt` (the default: the retirement stops, the container keeps running),
    /// `Proceed` (the pods are left where they are and the container is stopped, as Cluster
    /// API's `nodeDrainTimeout`) or `Force` (the pods are deleted, not evicted, whatever their
    /// PodDisruptionBudgets, and the container is stopped once they are gone, as Karpenter's
    /// `terminationGracePeriod`). The plan says beforehand what a drain past its timeout does.
    #[serde(default, skip_serializing_if = "is_default")]
    pub timeout_action: DrainTimeoutAction,
}

/// What a drain does once its timeout has passed with pods left (`spec.drain.timeoutAction`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum DrainTimeoutAction {
    /// The drain fails: the container keeps running and the rollout halts.
    #[default]
    Halt,
    /// The pods left stay on the Node and the container is stopped.
    Proceed,
    /// The pods left are deleted, whatever their PodDisruptionBudgets, and the container is
    /// stopped once they are gone.
    Force,
}

impl DrainTimeoutAction {
    #[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
    pub fn is_halt(&self) -> bool {
        *self == Self::Halt
    }
}

impl std::fmt::Display for DrainTimeoutAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Halt => "Halt",
            Self::Proceed => "Proceed",
            Self::Force => "Force",
        })
    }
}

/// One drain rule.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DrainRule {
    /// The pods it applies to, by label (`matchLabels`, `matchExpressions`). Default: every
    /// pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<PodSelector>,
    /// The namespaces it applies to. Default: every namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// `Drain` (evict), `Skip` (never evicted: the pod goes down with its node) or
    /// `WaitCompleted` (not evicted: the drain waits until it has completed or is gone).
    #[serde(default)]
    pub behavior: DrainBehavior,
    /// Its pods' group: lower orders are evicted, and gone, first. At least 0; default 0.
    #[serde(default)]
    pub order: i64,
}

/// What a drain does with a pod.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum DrainBehavior {
    #[default]
    Drain,
    Skip,
    WaitCompleted,
}

/// A label selector, as `metav1.LabelSelector` spells it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodSelector {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<SelectorRequirement>,
}

/// One `matchExpressions` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SelectorRequirement {
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// The container template. Everything here is covered by the template hash.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Template {
    /// The image, e.g. `kindest/node:v1.31.0`. Pulled before the rollout if missing. Required
    /// unless `copyFrom` names a container, whose image is then the default.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(min = 1))]
    pub image: String,
    /// `digest`: the image's ID on the pool's Docker endpoint is part of the template, so that
    /// an image re-tagged or re-pulled under the same name (`kind load` of a new build) rolls
    /// the pool, and new containers are made from that very ID. `tag` (default): the name alone.
    #[serde(default, skip_serializing_if = "is_default")]
    pub image_policy: ImagePolicy,
    /// The image's ID as a plan read it (`imagePolicy: digest`): poolctl's to set, never written
    /// in a pool file (validation refuses it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(skip)]
    pub image_id: Option<String>,
    /// The container's command (Docker's CMD), as a list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Overrides the image's entrypoint, as a list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<Vec<String>>,
    /// Environment variables: a value, or `{valueFrom: {file: PATH}}` / `{valueFrom: {env:
    /// NAME}}` for a value that must not sit in the pool file (shown as `(sensitive)`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, EnvValue>,
    /// Extra container labels (the `poolctl.dev/` prefix is reserved).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// The Docker network to attach to (it must exist). Default: Docker's default bridge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// Run the container privileged (kind and k3d nodes need this).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub privileged: bool,
    /// Volumes, as `docker run -v` takes them: `src:dst[:options]` (a bind mount, or a named
    /// volume that outlives the container), or a bare container path such as `/var` (an
    /// anonymous volume, removed with the container).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<String>,
    /// tmpfs mounts, as `docker run --tmpfs` takes them: `PATH[:OPTIONS]`, e.g. `/run` or
    /// `/run:size=64m,mode=755`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tmpfs: Vec<String>,
    // Every field below is left out of the canonical form while unset, so that adding it did
    // not change the template hash of any existing pool (a test pins one).
    /// `--security-opt` values: `seccomp=unconfined|builtin`, `apparmor=PROFILE`,
    /// `label=...`, `no-new-privileges`, `systempaths=unconfined`, `writable-cgroups=BOOL`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_opt: Vec<String>,
    /// The cgroup namespace (`--cgroupns`). Default: the daemon's (private on cgroup v2, host on v1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroupns: Option<CgroupnsMode>,
    /// The user namespace (`--userns`): `host` opts out of the daemon's user-namespace
    /// remapping, which privileged containers need where it is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub userns: Option<UsernsMode>,
    /// Allocate a pseudo-TTY (`--tty`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tty: bool,
    /// Run an init process (docker-init) as PID 1 (`--init`). Default: the daemon's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init: Option<bool>,
    /// The restart policy (`--restart`): `no`, `on-failure[:N]`, `unless-stopped` or `always`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(no|always|unless-stopped|on-failure(:[0-9]+)?)$"))]
    pub restart: Option<String>,
    /// Host devices (`--device`): `HOST[:CONTAINER][:PERMISSIONS]`, e.g. `/dev/fuse`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<String>,
    /// Capabilities to add (`--cap-add`), e.g. `SYS_ADMIN`, or `ALL`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cap_add: Vec<String>,
    /// Capabilities to drop (`--cap-drop`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cap_drop: Vec<String>,
    /// Namespaced kernel parameters (`--sysctl`): `net.*`, `fs.mqueue.*`, kernel IPC settings.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sysctls: BTreeMap<String, String>,
    /// Published ports (`-p`): `[IP:][HOST_PORT:]CONTAINER_PORT[/tcp|udp|sctp]`, ports or ranges.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<String>,
    /// Extra `/etc/hosts` entries (`--add-host`): `NAME:IP` or `NAME:host-gateway`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_hosts: Vec<String>,
    /// DNS servers (`--dns`), as IP addresses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns: Vec<String>,
    /// The user the command runs as (`--user`): `NAME|UID[:GROUP|GID]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The working directory of the command (`--workdir`), an absolute path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// The signal that stops the container (`--stop-signal`), e.g. `SIGRTMIN+3` for systemd.
    /// Default: the image's (STOPSIGNAL), else SIGTERM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_signal: Option<String>,
    /// A CPU limit (`--cpus`), e.g. `2` or `0.5`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("type" = ["string", "number", "null"]))]
    pub cpus: Option<String>,
    /// A memory limit (`--memory`), e.g. `512m` or `2g` (units b, k, m, g, t; at least 6m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("type" = ["string", "integer", "null"]))]
    pub memory: Option<String>,
    /// The size of `/dev/shm` (`--shm-size`), e.g. `256m` (units b, k, m, g, t). Default:
    /// Docker's 64m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("type" = ["string", "integer", "null"]))]
    pub shm_size: Option<String>,
    /// The most processes the container may run at once (`--pids-limit`), at least 1. Default:
    /// no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub pids_limit: Option<i64>,
    /// Resource limits (`--ulimit`), by name: `SOFT` (the hard limit the same) or `SOFT:HARD`,
    /// `-1` for unlimited, e.g. `nofile: "1024:2048"`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ulimits: BTreeMap<String, String>,
    /// More networks (that exist) to connect each new container to, after `network` and before
    /// it starts, as `docker network connect` does.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_networks: Vec<String>,
    /// Files written into each new container after it is created and before it starts, such
    /// as the entrypoint scripts k3d writes into its nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<TemplateFile>,
    /// Take the Docker settings of a running container on the pool's Docker endpoint (a kind
    /// worker, a k3d agent), with what this template says explicitly on top. Read when a plan
    /// is made, so the template hash and the plan's diff cover what was copied; not read by
    /// `poolctl validate`, which stays offline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy_from: Option<CopyFrom>,
}

/// A file of `spec.template.files`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TemplateFile {
    /// Where it goes in the container: an absolute path. Missing parent directories are made.
    pub path: String,
    /// Its text.
    pub content: String,
    /// Its permission bits, in octal as `chmod` takes them (default `0644`; `0755` for a
    /// script). A string, since YAML reads a bare `0755` as a decimal number.
    #[serde(default = "TemplateFile::default_mode")]
    #[schemars(regex(pattern = r"^0?[0-7]{3}$"))]
    pub mode: String,
}

impl TemplateFile {
    fn default_mode() -> String {
        "0644".to_owned()
    }

    /// The permission bits, if `mode` is octal (validation refuses any other).
    pub fn mode_bits(&self) -> Option<u32> {
        let digits = self.mode.strip_prefix('0').filter(|d| d.len() == 3).unwrap_or(&self.mode);
        (digits.len() == 3).then(|| u32::from_str_radix(digits, 8).ok()).flatten()
    }
}

/// `spec.template.copyFrom`: the container whose settings new instances take.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CopyFrom {
    /// Its name (or ID) on the pool's Docker endpoint, e.g. `dev-worker` or `k3d-dev-agent-0`. It
    /// must be running when a plan is made.
    #[schemars(length(min = 1))]
    pub container: String,
}

/// A cgroup namespace mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CgroupnsMode {
    /// The container gets its own cgroup namespace (what kind's nodes need).
    Private,
    /// The container shares the host's cgroup namespace.
    Host,
}

/// A user namespace mode: Docker knows only `host`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum UsernsMode {
    /// The host's user namespace, even when the daemon remaps users.
    Host,
}

/// One bootstrap command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BootstrapStep {
    /// The argv to run inside the container; it must exit 0.
    pub exec: Vec<String>,
    /// How long it may take (default 2m).
    #[serde(default = "BootstrapStep::default_timeout")]
    pub timeout: Duration,
}

impl BootstrapStep {
    fn default_timeout() -> Duration {
        Duration::from_secs(120)
    }
}

/// How a new instance joins a cluster: exactly one of the two methods.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("minProperties" = 1, "maxProperties" = 1))]
pub struct Join {
    /// Join a kubeadm cluster (kind): a short-lived bootstrap token is made on the control
    /// plane for each new instance, and `kubeadm join` runs in it with the CA pinned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeadm: Option<KubeadmJoin>,
    /// Join a k3s cluster (k3d) as an agent: the server's node token is handed to the new
    /// container in a file before it starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k3s: Option<K3sJoin>,
}

/// `join.kubeadm`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeadmJoin {
    /// The control-plane container (on the same Docker host), e.g. `dev-control-plane`.
    #[schemars(length(min = 1))]
    pub control_plane: String,
    /// How long `kubeadm join` may take (default 3m); the bootstrap token expires soon after.
    #[serde(default = "KubeadmJoin::default_timeout")]
    pub timeout: Duration,
}

impl KubeadmJoin {
    fn default_timeout() -> Duration {
        Duration::from_secs(180)
    }
}

/// `join.k3s`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct K3sJoin {
    /// The server container (on the same Docker host), e.g. `k3d-dev-server-0`.
    #[schemars(length(min = 1))]
    pub server: String,
    /// The URL agents reach the server at (`K3S_URL`). Default: `https://<server>:6443`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

impl K3sJoin {
    /// `K3S_URL` for the new agent.
    pub fn server_url(&self) -> String {
        self.url.clone().unwrap_or_else(|| format!("https://{}:6443", self.server))
    }
}

/// How instances appear as Kubernetes Nodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeSpec {
    /// The kubeconfig file, or `in-cluster` for the service account of the Pod poolctl runs in.
    /// Default: `$KUBECONFIG`; else, in a Pod, its service account; else `~/.kube/config`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<String>,
    /// The kubeconfig context. Default: the current one. Not with `kubeconfig: in-cluster`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// How long a new instance's Node may take to register and turn Ready (default 5m).
    #[serde(default = "NodeSpec::default_ready_timeout")]
    pub ready_timeout: Duration,
    /// Labels of the Node (`poolctl.dev/pool` is always added). A new Node registers with
    /// those a kubelet may set itself (outside the `kubernetes.io` and `k8s.io` namespaces, and
    /// a few well-known ones); poolctl sets the rest once it is Ready.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Taints of the Node. A new Node registers with them, and with
    /// `poolctl.dev/uninitialized:NoSchedule`, which poolctl removes with the labels it sets
    /// once the Node is Ready: no pod lands on a Node poolctl has not configured.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
}

impl NodeSpec {
    fn default_ready_timeout() -> Duration {
        Duration::from_secs(300)
    }
}

/// Where a pool's containers live: a docker CLI context, or a daemon address. Exactly one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DockerSpec {
    /// A context of the docker CLI (`docker context ls`), read from `$DOCKER_CONFIG/contexts`
    /// (default `~/.docker/contexts`), with its TLS material. `default` is the endpoint of
    /// `DOCKER_HOST` (or the local socket).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub context: Option<String>,
    /// A daemon address: `unix:///path/to/docker.sock`, or `tcp://HOST:PORT` (TLS as
    /// `DOCKER_TLS_VERIFY` and `DOCKER_CERT_PATH` say, as `docker -H` does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(unix|tcp|http|https)://."))]
    pub host: Option<String>,
}

impl DockerSpec {
    /// How the plan names the endpoint: `context NAME` or `host URL`.
    pub fn describe(&self) -> String {
        match (&self.context, &self.host) {
            (Some(context), _) => format!("context {context}"),
            (None, Some(host)) => format!("host {host}"),
            (None, None) => "the current docker endpoint".to_owned(),
        }
    }
}

/// Why a Docker daemon address cannot be used, if it cannot: the schemes bollard speaks here.
/// `ssh://` is refused rather than half-supported (see the README).
pub fn docker_host_problem(host: &str) -> Option<String> {
    let Some((scheme, rest)) = host.split_once("://") else {
        return Some(format!("{host:?} is not an address: expected unix:///PATH or tcp://HOST:PORT"));
    };
    match scheme {
        "unix" | "tcp" | "http" | "https" if !rest.is_empty() => None,
        "unix" | "tcp" | "http" | "https" => Some(format!("{host:?} names no socket or host")),
        "ssh" => Some(format!(
            "{host:?}: ssh:// endpoints are not supported; forward the remote socket (ssh -L \
             /tmp/remote.sock:/var/run/docker.sock HOST) and use unix:///tmp/remote.sock, or serve the \
             daemon over tcp:// with TLS"
        )),
        other => Some(format!("{host:?}: unknown scheme {other}:// (expected unix:// or tcp://)")),
    }
}

/// A Node taint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Taint {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    #[schemars(extend("enum" = ["NoSchedule", "PreferNoSchedule", "NoExecute"]))]
    pub effect: String,
}

/// Rollout settings. None of them changes the template hash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
#[schemars(rename = "Rollout")]
pub struct RolloutSpec {
    /// When a new template replaces the instances: `RollingUpdate` (default) replaces every
    /// outdated one, surge first; `OnDelete` replaces none by itself, as a `StatefulSet`'s or a
    /// Cluster API `MachineSet`'s `OnDelete`: an instance marked for replacement (`--replace`, the
    /// `poolctl.dev/replace` label), a dead one and a scale-up get the new template.
    #[serde(default, skip_serializing_if = "is_default")]
    pub strategy: Strategy,
    /// How many instances may exist above `replicas` during a rollout: a count (default 1, at
    /// most 1000) or a percentage of replicas, rounded up (`25%`).
    pub max_surge: IntOrPercent,
    /// How many instances may be unavailable below `replicas` during a rollout: a count
    /// (default 0, at most 1000) or a percentage of replicas up to 100%, rounded down (`25%`).
    pub max_unavailable: IntOrPercent,
    /// How long a container gets between SIGTERM and SIGKILL when stopped (default 30s).
    pub stop_grace_period: Duration,
    /// How long draining one Node may take before the rollout halts (default 5m).
    pub drain_timeout: Duration,
    /// How long a rollout to a new template may go without a new instance coming up (they
    /// crash, never turn Ready, fail their bootstrap) before it stops creating more: the old
    /// instances keep serving and the pool is `Degraded` until the source changes or an
    /// explicit `poolctl apply` tries again (default 10m), as a Deployment's
    /// `progressDeadlineSeconds`.
    pub progress_deadline: Duration,
    /// What a rollout past its `progressDeadline` does: `pause` (default) creates nothing more
    /// and leaves the pool half-new; `rollback` brings the pool back to the last template that
    /// its instances ran before (read from their labels; not for a template with sensitive
    /// values, which no label keeps), as Docker Swarm's `failure_action`.
    #[serde(default)]
    pub failure_action: FailureAction,
    /// Which instances go first when the pool has more than it needs (a scale-down):
    /// `Oldest` (default), `Newest` or `Random`, as a `MachineSet`'s. Instances that do not serve
    /// and instances marked for replacement still go first.
    #[serde(default)]
    pub delete_policy: DeletePolicy,
    /// Replace every instance created before this time (RFC 3339, e.g.
    /// `2026-12-04T10:00:00Z`), once it has come, as Cluster API's `rolloutAfter`: the GitOps way
    /// to roll the whole pool without changing its template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// Replace every instance older than this (by the Docker daemon's clock), surge first, as
    /// Karpenter's `expireAfter`: a node that lives too long drifts from a fresh one. Unset by
    /// default: instances live until their template changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age: Option<Duration>,
    /// How long a new instance must have been up (its container running and healthy, its Node
    /// Ready) before it counts as up and the rollout goes on (default 0), as a Deployment's
    /// `minReadySeconds`; a whole number of seconds as there, or a duration (`1m`).
    #[serde(default, deserialize_with = "duration::seconds_or_duration", skip_serializing_if = "is_default")]
    #[schemars(schema_with = "duration::seconds_or_duration_schema")]
    pub min_ready_seconds: Duration,
    /// How long a new instance is watched once it came up (after `minReadySeconds`) before it
    /// counts as up and anything old is retired: its container must keep running, and at the
    /// end still run (and be healthy, where its image has a HEALTHCHECK) with its Node Ready
    /// (default `5s`, as Docker Swarm's `monitor`). A new template that crashes within it fails
    /// the rollout with every old instance still serving. `0s` turns the watch off.
    pub monitor: Duration,
    /// How long a retirement may wait for a Node's deletion hooks (its
    /// `pre-drain.delete.hook.poolctl.dev/*` and `pre-terminate.delete.hook.poolctl.dev/*`
    /// annotations, which another controller removes when it is done) before it halts with the
    /// old instance still serving. Default: no limit, as Cluster API's hooks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_timeout: Option<Duration>,
    /// How long a retirement waits, after the drain, for the Node's volumes to detach (its
    /// `status.volumesAttached` empty and no `VolumeAttachment` naming it) before it halts with
    /// the old instance still serving. Default: no limit, as Cluster API's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_detach_timeout: Option<Duration>,
    /// Whether a template change confined to what Docker changes on a running container
    /// (`memory`, `cpus`, `pidsLimit`, `restart`) updates the instances in place (`docker
    /// update`: same containers, no drain, in batches of `maxUnavailable`, at least 1):
    /// `IfPossible` (default), or `Never`, which replaces them as any other change does.
    #[serde(default, skip_serializing_if = "is_default")]
    pub in_place: InPlace,
    /// How many instances of a new template come first and wait for promotion before the rest
    /// roll, as Nomad's `canary`: a count or a percentage of `replicas`, rounded up (at least 1
    /// when not 0), at most `replicas`. The canaries are made beside the old instances, none of
    /// which is retired until `poolctl promote` (or `autoPromote`) lets the rollout go on.
    /// Unset (or 0): no canaries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<IntOrPercent>,
    /// Promote the canaries by themselves once every one of them has been up this long, by the
    /// Docker daemon's clock, as Nomad's `auto_promote`. Unset: only `poolctl promote` does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_promote: Option<Duration>,
}

/// Whether `value` is its type's default, which serialization leaves out.
fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// Which instances a scale-down retires first (`spec.rollout.deletePolicy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum DeletePolicy {
    #[default]
    Oldest,
    Newest,
    /// In an order fixed by the instances' names, so that a plan made again retires the same.
    Random,
}

/// What of the image is the template's (`spec.template.imagePolicy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ImagePolicy {
    #[default]
    Tag,
    Digest,
}

impl Template {
    /// What a new container is made from: the image's ID when the plan read it, else its name.
    pub fn image_ref(&self) -> &str {
        self.image_id.as_deref().unwrap_or(&self.image)
    }
}

/// When a new template replaces the instances (`spec.rollout.strategy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Strategy {
    #[default]
    RollingUpdate,
    OnDelete,
}

/// Whether a change of only the live settings updates instances in place
/// (`spec.rollout.inPlace`), as Cluster API's in-place updates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum InPlace {
    /// Update in place when every changed field is one `docker update` changes live.
    #[default]
    IfPossible,
    /// Replace the instances whatever changed.
    Never,
}

/// What a stalled rollout does (`spec.rollout.failureAction`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FailureAction {
    /// Create nothing more; the pool stays as it is, `Degraded`.
    #[default]
    Pause,
    /// Bring the pool back to its previous template.
    Rollback,
}

impl RolloutSpec {
    /// `after` in seconds since the Unix epoch, if set and well-formed (validation refuses
    /// a malformed one).
    pub fn after_secs(&self) -> Option<i64> {
        let at: k8s_openapi::jiff::Timestamp = self.after.as_deref()?.parse().ok()?;
        Some(at.as_second())
    }

    /// `maxSurge` as a number of instances for a pool of `replicas`.
    pub fn surge(&self, replicas: i64) -> i64 {
        self.max_surge.resolve(replicas, Rounding::Up)
    }

    /// `maxUnavailable` as a number of instances for a pool of `replicas`.
    pub fn unavailable(&self, replicas: i64) -> i64 {
        self.max_unavailable.resolve(replicas, Rounding::Down)
    }

    /// `canary` as a number of instances for a pool of `replicas`: a percentage rounded up,
    /// and at least 1 when it is not 0; never more than `replicas`. 0 when unset.
    pub fn canaries(&self, replicas: i64) -> i64 {
        let Some(canary) = self.canary.filter(|c| !c.is_zero()) else { return 0 };
        canary.resolve(replicas, Rounding::Up).clamp(1, replicas.max(1)).min(replicas.max(0))
    }
}

impl Default for RolloutSpec {
    fn default() -> Self {
        Self {
            strategy: Strategy::default(),
            max_surge: IntOrPercent::Count(1),
            max_unavailable: IntOrPercent::Count(0),
            stop_grace_period: Duration::from_secs(30),
            drain_timeout: Duration::from_secs(300),
            progress_deadline: Duration::from_secs(600),
            failure_action: FailureAction::default(),
            delete_policy: DeletePolicy::default(),
            after: None,
            max_age: None,
            min_ready_seconds: Duration::from_secs(0),
            monitor: Duration::from_secs(5),
            hook_timeout: None,
            volume_detach_timeout: None,
            in_place: InPlace::IfPossible,
            canary: None,
            auto_promote: None,
        }
    }
}

/// When an instance that does not serve is replaced. An instance that is not up but within its
/// timeout is *unavailable*: a rollout waits for it, nothing replaces it. Past its timeout it is
/// *unhealthy* and replaced, surge first, unless more than `maxUnhealthy` of the pool are: then
/// the fault is the cluster's and none is. Every duration is read from the world's own clocks
/// (a Node condition's `lastTransitionTime`, Docker's start, finish and health-check times).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct HealthSpec {
    /// Node conditions that make an instance unhealthy once they have held for their timeout
    /// (default `Ready` `Unknown` and `Ready` `False`, 5m each).
    pub unhealthy_conditions: Vec<UnhealthyCondition>,
    /// How long a new instance may take to come up (its Node to register and turn Ready, its
    /// bootstrap and join to finish) before it is unhealthy (default 10m). An apply still fails
    /// after the Node's `readyTimeout`; this is what a later run does with such an instance.
    pub node_startup_timeout: Duration,
    /// How long a container may be restarting, or report `unhealthy` from its HEALTHCHECK,
    /// before it is unhealthy (default 1m). A container that exited or is dead is unhealthy at
    /// once.
    pub container_timeout: Duration,
    /// When more instances than this are unhealthy at once, none of those that served is
    /// replaced: a count, or a percentage of `replicas` rounded down, as Cluster API's (default
    /// `40%`). Never held: a container-only pool, a teardown, outdated instances, instances
    /// that never came up, and `--replace`.
    pub max_unhealthy: IntOrPercent,
}

/// A Node condition that makes an instance unhealthy once it has held for `timeout`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UnhealthyCondition {
    /// The condition type, e.g. `Ready`.
    #[serde(rename = "type")]
    #[schemars(length(min = 1))]
    pub kind: String,
    /// `True`, `False` or `Unknown`.
    #[schemars(extend("enum" = ["True", "False", "Unknown"]))]
    pub status: String,
    pub timeout: Duration,
}

impl HealthSpec {
    /// `maxUnhealthy` as a count: a percentage rounds down, as Cluster API's `maxUnhealthy`
    /// does (40% of 3 is 1).
    pub fn max_unhealthy(&self, replicas: i64) -> i64 {
        self.max_unhealthy.resolve(replicas, Rounding::Down)
    }
}

impl Default for HealthSpec {
    fn default() -> Self {
        let ready = |status: &str| UnhealthyCondition {
            kind: "Ready".to_owned(),
            status: status.to_owned(),
            timeout: Duration::from_secs(300),
        };
        Self {
            unhealthy_conditions: vec![ready("Unknown"), ready("False")],
            node_startup_timeout: Duration::from_secs(600),
            container_timeout: Duration::from_secs(60),
            max_unhealthy: IntOrPercent::Percent(40),
        }
    }
}

/// The JSON Schema of a pool document, as `poolctl schema` prints it.
pub fn json_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(Pool)).expect("a schema serializes")
}
