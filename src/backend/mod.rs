//! The backends: the small traits that observe and the executor drive, in the project's own
//! types, so that the same code runs against Docker + Kubernetes and against in-memory fakes;
//! their two implementations ([`docker`] with bollard, [`kube`] with kube-rs); [`endpoints`],
//! which routes each pool to its Docker endpoint; [`Connections`], the one value that holds a
//! run's connections; and the one [`retry`] policy both use.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, SystemTime};

use crate::model::{
    ClusterIdentity, ClusterRef, Container, InstanceRef, LockHolder, Node, Pdb, Pod, Revision, RolloutRecord,
    RolloutResult,
};
use crate::spec::{CgroupnsMode, Secret, Taint, TemplateFile, UsernsMode};

pub use connections::{
    ClusterClient, Clusters, ConnectError, Connections, DockerEndpoints, Events, follow_requests,
};
/// What the commands need of the concrete backends, named here so that they depend on this
/// facade only: `copyFrom` resolved on a pool's Docker endpoint, and an error's causes worded
/// once, as the backends' errors word them.
pub use docker::{ContainerNews, CopyError, resolve_copies};
pub use guard::LockGuard;
pub(crate) use kube::cause_chain;

mod connections;
pub mod docker;
pub mod endpoints;
mod guard;
pub mod kube;
pub mod retry;
pub mod waiting;

/// Why a backend call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// The daemon or API server could not be reached, or did not answer: worth another try.
    #[error("cannot reach {what} at {at}: {reason}")]
    Unreachable { what: &'static str, at: String, reason: String },
    /// The connection or the credentials were refused (a TLS certificate, a client
    /// certificate, a token): no retry can change that.
    #[error("cannot connect to {what} at {at}: {reason}")]
    Rejected { what: &'static str, at: String, reason: String },
    /// The object does not exist.
    #[error("{0} not found")]
    NotFound(String),
    /// The operation did not finish in time.
    #[error("{what}: timed out after {}", crate::spec::Duration::from(*after))]
    Timeout { what: String, after: Duration },
    /// Anything else, with the backend's own words.
    #[error("{0}")]
    Failed(String),
    /// A container to stop or remove does not carry poolctl's labels: whatever Node names it,
    /// it is not poolctl's, and is left alone.
    #[error(
        "container {0} is not poolctl's (it carries no {pool} label): poolctl stops and removes only the \
         containers it created",
        pool = crate::model::labels::POOL
    )]
    NotOurs(String),
}

/// A container to create, fully resolved from a pool template. The settings keep the text of
/// `docker run`'s flags, read with [`crate::spec::docker`] (which validation used too).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewContainer {
    pub name: String,
    pub image: String,
    pub command: Option<Vec<String>>,
    pub entrypoint: Option<Vec<String>>,
    pub env: BTreeMap<String, String>,
    /// Sensitive environment values (`valueFrom`), apart from `env` so that nothing that shows
    /// a container's settings shows them.
    pub secret_env: BTreeMap<String, Secret>,
    /// Files written into the container once it is created, before it starts (a join token).
    pub files: Vec<NewFile>,
    /// The template's `files`, written after the secret ones, before the start.
    pub template_files: Vec<TemplateFile>,
    /// The template's labels plus poolctl's own.
    pub labels: BTreeMap<String, String>,
    pub network: Option<String>,
    /// Networks the container is connected to after its creation, before its start.
    pub extra_networks: Vec<String>,
    pub privileged: bool,
    /// `src:dst[:options]` mounts and bare paths (anonymous volumes).
    pub volumes: Vec<String>,
    /// `PATH[:OPTIONS]`.
    pub tmpfs: Vec<String>,
    pub security_opt: Vec<String>,
    pub cgroupns: Option<CgroupnsMode>,
    pub userns: Option<UsernsMode>,
    pub tty: bool,
    pub init: Option<bool>,
    pub restart: Option<String>,
    pub devices: Vec<String>,
    pub cap_add: Vec<String>,
    pub cap_drop: Vec<String>,
    pub sysctls: BTreeMap<String, String>,
    pub ports: Vec<String>,
    pub extra_hosts: Vec<String>,
    pub dns: Vec<String>,
    pub user: Option<String>,
    pub workdir: Option<String>,
    pub stop_signal: Option<String>,
    pub cpus: Option<String>,
    pub memory: Option<String>,
    pub shm_size: Option<String>,
    pub pids_limit: Option<i64>,
    /// By name: `SOFT` or `SOFT:HARD` (see [`crate::spec::docker::parse_ulimit`]).
    pub ulimits: BTreeMap<String, String>,
}

/// A file to write into a container: readable by root alone (mode 0600, in a directory of mode
/// 0700 that is created if missing, whose parent must exist).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewFile {
    /// An absolute path.
    pub path: String,
    pub content: Secret,
}

/// The live settings of a running container to change (`docker update`), as the template
/// writes them, and the template the container runs once they are: what its update record
/// says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveUpdate {
    pub memory: Option<String>,
    pub cpus: Option<String>,
    pub pids_limit: Option<i64>,
    /// `None` is Docker's default, `no`.
    pub restart: Option<String>,
    pub template_hash: String,
    /// The canonical template JSON (see [`crate::spec::canonical_template`]).
    pub template: String,
}

/// What an exec inside a container ended with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    pub exit_code: i64,
    /// Stdout and stderr, interleaved, truncated to a few KiB: the end of a longer output,
    /// after [`CUT`].
    pub output: String,
}

/// What starts an [`ExecOutput::output`] whose beginning was cut off.
pub const CUT: &str = "[...]";

/// The API server's version, as its `/version` answers (`major`, `minor` and `gitVersion` of
/// Kubernetes' `version.Info`), unparsed: what the version-skew preflight compares a new
/// kubelet with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerVersion {
    /// E.g. `v1.30.2`, `v1.30.2+k3s1`, `v1.30.2-eks-1234567`.
    pub git_version: String,
    /// E.g. `1`.
    pub major: String,
    /// E.g. `30` (`30+` on some distributions).
    pub minor: String,
}

/// How a drain ended that did not fail. Only the drain itself says it: nothing observed later
/// (a Node without pods, say) stands for it, so a run that did not see its drain end drains
/// again before a stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrainEnd {
    /// Every pod it evicts or waits for is gone.
    Complete,
    /// `drainTimeout` passed and, as `timeoutAction: Proceed` says, these pods (`namespace/name`)
    /// were left on the Node.
    Abandoned(Vec<String>),
    /// `drainTimeout` passed and, as `timeoutAction: Force` says, these pods were deleted,
    /// whatever their PodDisruptionBudgets; they are gone.
    Forced(Vec<String>),
}

/// What a drain tells the cluster's users as it goes, each as a Warning Event on its Node: an
/// eviction a budget refuses (`DrainBlocked`), the pods left or deleted past `drainTimeout`
/// (`DrainAbandoned`, `DrainForced`). The rollout hands it on to its sinks.
pub type DrainNews<'a> = &'a (dyn Fn(&'static str, String) + Sync);

/// How a container stopped running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// It exited, or was killed, with this code.
    Exited(i64),
    /// It no longer exists.
    Removed,
}

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Exited(code) => write!(f, "exited with code {code}"),
            Self::Removed => f.write_str("was removed"),
        }
    }
}

/// Docker, as the executor sees it.
pub trait Containers: Sync {
    /// Every pool container (one list call).
    fn list(&self) -> impl Future<Output = Result<Vec<Container>, BackendError>> + Send;
    /// The addresses of the daemons a [`Containers::list`] covers: what is not in the list is
    /// gone from these, and from no others.
    fn hosts(&self) -> Vec<String>;
    /// poolctl's reference to the container of instance `name` (its ID and daemon), as the last
    /// list or this run's creation saw it: what its Node is annotated with.
    fn instance_ref(&self, name: &str) -> Option<InstanceRef>;
    /// The daemon's own clock, in seconds since the Unix epoch (`SystemTime` of its `/info`):
    /// what the times it reports are compared with. `None` when it cannot say, and for a
    /// backend that has no clock of its own (this process's then stands in).
    fn clock(&self) -> impl Future<Output = Option<i64>> + Send;
    /// Look also at these daemons from now on (the ones the pools' Nodes record and no pool
    /// names: where a pool moved away from), so that [`Containers::list`] covers them. Returns
    /// the ones that could not be reached, with why. A backend of one daemon cannot.
    fn look_also(&self, hosts: &[String]) -> impl Future<Output = Vec<(String, BackendError)>> + Send {
        let failed = hosts
            .iter()
            .filter(|h| !self.hosts().contains(h))
            .map(|h| (h.clone(), BackendError::Failed("no other Docker endpoint can be reached".into())))
            .collect();
        async move { failed }
    }
    /// Make sure the image is present where `pool`'s containers are created, pulling it if not.
    /// Returns whether it pulled.
    fn ensure_image(
        &self,
        pool: &str,
        image: &str,
    ) -> impl Future<Output = Result<bool, BackendError>> + Send;
    /// The labels of the image (present where `pool`'s containers are created, see
    /// [`Containers::ensure_image`]): one inspect.
    fn image_labels(
        &self,
        pool: &str,
        image: &str,
    ) -> impl Future<Output = Result<BTreeMap<String, String>, BackendError>> + Send;
    /// Whether the named network exists where `pool`'s containers are created.
    fn network_exists(
        &self,
        pool: &str,
        name: &str,
    ) -> impl Future<Output = Result<bool, BackendError>> + Send;
    /// Create a container, write its files, and start it.
    fn create(&self, spec: &NewContainer) -> impl Future<Output = Result<(), BackendError>> + Send;
    /// Run a command in a running container and wait for it, up to `timeout`.
    fn exec(
        &self,
        name: &str,
        argv: &[String],
        timeout: Duration,
    ) -> impl Future<Output = Result<ExecOutput, BackendError>> + Send;
    /// Read a file out of a container (running or not), following symbolic links.
    fn read_file(&self, name: &str, path: &str) -> impl Future<Output = Result<Secret, BackendError>> + Send;
    /// Write a file into a container (running or not), as [`NewFile`] says.
    fn write_file(&self, name: &str, file: &NewFile)
    -> impl Future<Output = Result<(), BackendError>> + Send;
    /// Whether the container runs (or is paused or restarting) at this moment, as Docker
    /// reports it: one inspect. A missing container does not run.
    fn may_run(&self, name: &str) -> impl Future<Output = Result<bool, BackendError>> + Send;
    /// Whether the container is up at this moment (running and, if its image has a
    /// HEALTHCHECK, healthy): `None` if it is, why not otherwise. One inspect.
    fn up_now(&self, name: &str) -> impl Future<Output = Result<Option<String>, BackendError>> + Send;
    /// Wait until the container runs and, if its image has a HEALTHCHECK, is healthy.
    fn wait_up(&self, name: &str, timeout: Duration)
    -> impl Future<Output = Result<(), BackendError>> + Send;
    /// Resolve once the container no longer runs (it exited, was killed or removed), saying
    /// how; stay pending while it runs. The executor races this against waits that only a
    /// running container can end, so that they fail as soon as it is gone.
    fn wait_stopped(&self, name: &str) -> impl Future<Output = Result<Stopped, BackendError>> + Send;
    /// Stop the container, giving it `grace` between SIGTERM and SIGKILL. Stopping a stopped
    /// container succeeds. A container that does not carry poolctl's pool label is never
    /// stopped: [`BackendError::NotOurs`].
    fn stop(&self, name: &str, grace: Duration) -> impl Future<Output = Result<(), BackendError>> + Send;
    /// Remove the container. Removing a missing container succeeds; one that does not carry
    /// poolctl's pool label is never removed ([`BackendError::NotOurs`]).
    fn remove(&self, name: &str) -> impl Future<Output = Result<(), BackendError>> + Send;
    /// Record, as the last step of its coming up, that the instance `name` came up (its
    /// bootstrap, join and Ready wait are done): until then it is starting, never serving. The
    /// record carries `labels` and dies with the container.
    fn record_up(
        &self,
        name: &str,
        labels: &BTreeMap<String, String>,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;
    /// Change the live settings of the running container `name` as `update` says (`docker
    /// update`), then record, with `labels`, that this very container runs `update`'s template
    /// now: the next list shows it with that template. Done again, it changes nothing: a run
    /// killed between the two, or a record lost, costs one more update, never an instance. A
    /// container that does not carry poolctl's pool label is never updated
    /// ([`BackendError::NotOurs`]).
    fn update_in_place(
        &self,
        name: &str,
        update: &LiveUpdate,
        labels: &BTreeMap<String, String>,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;
    /// Remove what poolctl keeps about `pool` beside its instances (its rollout record and its
    /// history): the pool is torn down, and leaves nothing behind.
    fn forget_pool(&self, pool: &str) -> impl Future<Output = Result<(), BackendError>> + Send;
    /// Record that `pool`'s rollout stepped forward now (a Node cordoned or drained, an instance
    /// stopped or removed), with `labels`: see [`crate::model::RolloutRecord::progressed`].
    fn record_progress(
        &self,
        pool: &str,
        labels: &BTreeMap<String, String>,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;
    /// The rollout records, by pool, that the last [`Containers::list`] showed: they come back
    /// in the same call (see [`crate::model::RolloutRecord`]).
    fn rollouts(&self) -> BTreeMap<String, RolloutRecord>;
    /// Record that `pool`'s rollout to `template_hash` begins now (a rollback from the template
    /// `rolled_back_from`, if set), with `labels`.
    fn record_rollout(
        &self,
        pool: &str,
        template_hash: &str,
        rolled_back_from: Option<&str>,
        labels: &BTreeMap<String, String>,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;
    /// The rollout history, by pool, that the last [`Containers::list`] showed, each pool's
    /// revisions oldest first: its records come back in the same call (see
    /// [`crate::model::Revision`]).
    fn history(&self) -> BTreeMap<String, Vec<Revision>>;
    /// The suspended pools, by pool, that the last [`Containers::list`] showed: their records
    /// come back in the same call (see [`crate::model::Suspension`]).
    fn suspensions(&self) -> BTreeMap<String, crate::model::Suspension>;
    /// The pools with a reconcile request that the last [`Containers::list`] showed.
    fn requests(&self) -> std::collections::BTreeSet<String> {
        std::collections::BTreeSet::new()
    }
    /// Record in the world that `by` suspends `pool` for `reason`, and return the suspension
    /// that stands (an earlier one stays as it was).
    fn suspend(
        &self,
        pool: &str,
        by: &str,
        reason: Option<&str>,
    ) -> impl Future<Output = Result<crate::model::Suspension, BackendError>> + Send {
        let _ = (by, reason);
        std::future::ready(Err(no_records(pool)))
    }
    /// Remove `pool`'s suspension, if it has one.
    fn resume(&self, pool: &str) -> impl Future<Output = Result<(), BackendError>> + Send {
        std::future::ready(Err(no_records(pool)))
    }
    /// Record in the world a request to reconcile `pool` now (what `watch` acts on at once).
    fn request_reconcile(&self, pool: &str) -> impl Future<Output = Result<(), BackendError>> + Send {
        std::future::ready(Err(no_records(pool)))
    }
    /// Remove `pool`'s reconcile request, once acted on.
    fn consume_request(&self, pool: &str) -> impl Future<Output = Result<(), BackendError>> + Send {
        std::future::ready(Err(no_records(pool)))
    }
    /// The promotions, by pool, that the last [`Containers::list`] showed: their records come
    /// back in the same call (see [`crate::model::Promotion`]).
    fn promotions(&self) -> BTreeMap<String, crate::model::Promotion> {
        BTreeMap::new()
    }
    /// Record in the world that `by` promotes the canaries of `pool`'s template
    /// `template_hash`, and return the promotion that stands.
    fn promote(
        &self,
        pool: &str,
        template_hash: &str,
        by: &str,
    ) -> impl Future<Output = Result<crate::model::Promotion, BackendError>> + Send {
        let _ = (template_hash, by);
        std::future::ready(Err(no_records(pool)))
    }
    /// Remove `pool`'s promotion, if it has one: its rollout is over.
    fn tidy_promotion(&self, pool: &str) -> impl Future<Output = Result<(), BackendError>> + Send {
        std::future::ready(Err(no_records(pool)))
    }
    /// Record that `pool`'s rollout of `revision` (its number, template and origin; its start
    /// and end are ignored) begins now, with `labels`; the pool's revisions older than
    /// [`crate::model::REVISION_HISTORY_LIMIT`] before it go. A revision record is written once
    /// and never changed.
    fn record_revision(
        &self,
        pool: &str,
        revision: &Revision,
        labels: &BTreeMap<String, String>,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;
    /// Record that `pool`'s revision `number` ended now with `result`, with `labels`. The first
    /// end recorded stands: recording another changes nothing.
    fn record_revision_end(
        &self,
        pool: &str,
        number: u64,
        result: RolloutResult,
        labels: &BTreeMap<String, String>,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;
}

/// What a backend that keeps no records in the world answers a write of one.
fn no_records(pool: &str) -> BackendError {
    BackendError::Failed(format!("pool {pool}: this backend keeps no records"))
}

/// What a node pool's Lease records beside its lock: its suspension and its reconcile request
/// (see [`Cluster::marks`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseMarks {
    pub suspension: Option<crate::model::Suspension>,
    /// The reconcile request's value (when it was asked for), as written.
    pub requested: Option<String>,
}

/// Kubernetes, as the executor sees it: one cluster, as named by a pool's `node:` section.
pub trait Cluster: Sync {
    /// Nodes that carry the `poolctl.dev/pool` label, or whose names are given (the pool's
    /// containers) or recorded with [`Cluster::note_joining`]: never a list of the whole cluster.
    fn nodes(&self, names: &[String]) -> impl Future<Output = Result<Vec<Node>, BackendError>> + Send;
    /// Record, in the pool's lock, that an instance named `name` is about to be created: until
    /// its Node carries the pool label, this record is what finds that Node once its container
    /// is gone (a run killed before labelling it, the container then removed by hand), without
    /// listing the cluster's other Nodes.
    fn note_joining(&self, name: &str) -> impl Future<Output = Result<(), BackendError>> + Send;
    /// The names recorded with [`Cluster::note_joining`] and not forgotten since, while the
    /// pool's lock is still `held`; `None` once another actor holds it (or nobody does), whose
    /// record is then not this run's to tidy.
    fn joining(
        &self,
        held: &LockRecord,
    ) -> impl Future<Output = Result<Option<Vec<String>>, BackendError>> + Send;
    /// Drop these names from the record.
    fn forget_joining(&self, names: &[String]) -> impl Future<Output = Result<(), BackendError>> + Send;
    /// What the pool's Lease recorded of its suspension and reconcile request when
    /// [`Cluster::nodes`] last read it: the same read, so that observing a node pool costs no
    /// request more for them.
    fn marks(&self) -> LeaseMarks;
    /// The pool's suspension as its Lease records it now: one read.
    fn suspension(
        &self,
    ) -> impl Future<Output = Result<Option<crate::model::Suspension>, BackendError>> + Send {
        async { Ok(None) }
    }
    /// Record on the pool's Lease that `by` suspends the pool for `reason` (creating the Lease,
    /// without a holder, if there is none), and return the suspension that stands (an earlier
    /// one stays as it was).
    fn suspend(
        &self,
        by: &str,
        reason: Option<&str>,
    ) -> impl Future<Output = Result<crate::model::Suspension, BackendError>> + Send {
        let _ = (by, reason);
        async { Err(BackendError::Failed("this cluster keeps no records".into())) }
    }
    /// Remove the suspension from the pool's Lease, if it has one.
    fn resume(&self) -> impl Future<Output = Result<(), BackendError>> + Send {
        async { Ok(()) }
    }
    /// Record on the pool's Lease a request to reconcile it now (what `watch` follows).
    fn request_reconcile(&self) -> impl Future<Output = Result<(), BackendError>> + Send {
        async { Err(BackendError::Failed("this cluster keeps no records".into())) }
    }
    /// Remove from the pool's Lease the reconcile request [`Cluster::marks`] saw, once acted
    /// on; a newer one stays, and asks for one reconcile more.
    fn consume_request(&self) -> impl Future<Output = Result<(), BackendError>> + Send {
        async { Ok(()) }
    }
    /// Pods bound to the given nodes, and the PodDisruptionBudgets of their namespaces (for
    /// drain previews).
    fn pods_and_pdbs(
        &self,
        nodes: &[String],
    ) -> impl Future<Output = Result<(Vec<Pod>, Vec<Pdb>), BackendError>> + Send;
    /// Wait until the Node exists and its Ready condition is True.
    fn await_ready(
        &self,
        node: &str,
        timeout: Duration,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;
    /// The Node of that name, as it is now.
    fn node(&self, name: &str) -> impl Future<Output = Result<Option<Node>, BackendError>> + Send;
    /// Which cluster this is (resolved when connecting).
    fn identity(&self) -> &ClusterIdentity;
    /// The API server's clock, in seconds since the Unix epoch (the `Date` of its answer): what
    /// the times it sets (a Node condition's `lastTransitionTime`) are compared with. `None`
    /// when it cannot say.
    fn clock(&self) -> impl Future<Output = Option<i64>> + Send {
        async { None }
    }
    /// The API server's version (its `/version`, which every client may read), within a
    /// deadline of its own.
    fn server_version(&self) -> impl Future<Output = Result<ServerVersion, BackendError>> + Send;
    /// Converge the Node's labels (the pool label included) and taints on these, as
    /// [`crate::model::NodeConfig::change_towards`] says, reading the Node as it is now, and
    /// write poolctl's `reference` to its container in the same update, when given.
    fn configure(
        &self,
        node: &str,
        labels: &BTreeMap<String, String>,
        taints: &[Taint],
        reference: Option<&InstanceRef>,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;
    /// Mark the Node unschedulable, with poolctl's retirement annotation.
    fn cordon(&self, node: &str) -> impl Future<Output = Result<(), BackendError>> + Send;
    /// Evict every pod that `kubectl drain` would, respecting PodDisruptionBudgets, and wait
    /// until they are gone, within `timeout`; the pods' labels and the pool's drain `rules` say
    /// which to leave, which to wait for, and in which order
    /// ([`crate::model::Pod::drain_decision`]). Past `timeout`, its `timeoutAction` says whether
    /// the drain fails (`Halt`), leaves the pods ([`DrainEnd::Abandoned`]) or deletes them and
    /// waits until they are gone ([`DrainEnd::Forced`]). Every eviction and deletion is made only
    /// if `guard` says the pool's lock is known to be held. It tells `news` of refused evictions
    /// and of its timeout action.
    fn drain(
        &self,
        node: &str,
        timeout: Duration,
        drain: &crate::spec::DrainSpec,
        guard: &LockGuard,
        news: DrainNews<'_>,
    ) -> impl Future<Output = Result<DrainEnd, BackendError>> + Send;
    /// What still holds volumes on the Node: its `status.volumesAttached` and the
    /// `storage.k8s.io/v1` `VolumeAttachments` that name it. Empty once every volume is detached.
    fn attached_volumes(&self, node: &str) -> impl Future<Output = Result<Vec<String>, BackendError>> + Send;
    /// Delete the Node object. Deleting a missing Node succeeds.
    fn delete_node(&self, node: &str) -> impl Future<Output = Result<(), BackendError>> + Send;
    /// Tell the cluster's users, as a Kubernetes Event, of Node `node` or, without one, of the
    /// pool's rollout (on its Lease). What `crate::report::KubeEvents` hands on; best effort: it
    /// never fails.
    fn tell(
        &self,
        node: Option<&str>,
        reason: &'static str,
        note: String,
        warning: bool,
    ) -> impl Future<Output = ()> + Send;
}

/// Connecting to the cluster a pool's Nodes live in, as a pool's `node:` section (or its
/// containers' labels) name it.
pub trait Connect: Sync {
    type Cluster: Cluster + Locks + Send + Sync;
    /// Connect to `cluster` on behalf of `pool` (the pool's label selects its Nodes).
    fn connect(
        &self,
        cluster: &ClusterRef,
        pool: &str,
    ) -> impl Future<Output = Result<Self::Cluster, BackendError>> + Send;
}

/// A pool's lock as a backend stores it: its holder, and the version that proves that a later
/// renew or release acts on this very lock and not on one taken since (a Docker container ID, a
/// Lease's resourceVersion).
///
/// Two reads of a lock that compare equal saw the same record: every renewal changes it (a
/// Lease's renewTime and resourceVersion, a lock container's expiry). That is what a standby
/// watches to judge that a holder stopped renewing (see [`crate::rollout::lock`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockRecord {
    pub holder: LockHolder,
    pub version: String,
    /// How long the lock holds after each renewal, as its holder recorded it (a Lease's
    /// `leaseDurationSeconds`, a lock container's label); `None` for a lock that does not say.
    pub lease: Option<Duration>,
}

/// Why a lock could not be taken, renewed or released.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LockError {
    /// Another actor holds the lock, as `record` (which this actor was not asked to take over).
    #[error("pool {pool} is locked by {}", record.holder.describe(SystemTime::now()))]
    Held { pool: String, record: Box<LockRecord> },
    /// The lock is no longer the one this actor took: broken by `poolctl unlock`, or taken over
    /// by another actor after it expired.
    #[error("lost the lock on pool {pool}: {why}")]
    Lost { pool: String, why: String },
    /// Something of the pool's own name is in the way (a container that is not a lock).
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// One lock per pool, so that one actor at a time (an apply, a watch reconcile) changes it.
/// Taking a lock is atomic in the backend itself (Docker refuses a second container of a name;
/// the API server a second Lease of a name, and a write against a stale resourceVersion); a lock
/// lapses unless its holder renews it, so that one left by a killed run blocks others briefly.
///
/// The backends never judge whether a lock expired: that takes comparing this machine's clock
/// with the holder's. The caller judges it by what it observed ([`crate::rollout::lock`]) and
/// names the very record it saw stay unchanged for a lease; only that record is taken over.
pub trait Locks: Sync {
    /// Take `pool`'s lock as `who` for `lease`: a free one, or the lock that is still exactly
    /// `takeover` (the record the caller saw lapse). Any other lock is [`LockError::Held`],
    /// with the record as it is now.
    fn acquire(
        &self,
        pool: &str,
        who: &str,
        lease: Duration,
        takeover: Option<&LockRecord>,
    ) -> impl Future<Output = Result<LockRecord, LockError>> + Send;
    /// Extend a lock taken with [`Locks::acquire`] by `lease` from now; [`LockError::Lost`] when
    /// it is no longer that lock.
    fn renew(
        &self,
        pool: &str,
        held: &LockRecord,
        lease: Duration,
    ) -> impl Future<Output = Result<LockRecord, LockError>> + Send;
    /// Remove the lock, if it is still `held` (a lock that is gone is fine); [`LockError::Lost`]
    /// when another actor holds it now, which is then left alone.
    fn release(&self, pool: &str, held: &LockRecord) -> impl Future<Output = Result<(), LockError>> + Send;
    /// The lock as it is now, expired or not; `None` when nobody holds it.
    fn inspect(&self, pool: &str) -> impl Future<Output = Result<Option<LockRecord>, BackendError>> + Send;
}

/// When a lock taken or renewed at `now` for `lease` lapses: rounded up to a whole second,
/// since Docker and Kubernetes both keep lock times in seconds.
pub fn lock_expiry(now: SystemTime, lease: Duration) -> SystemTime {
    let at = now + lease;
    let since_epoch = at.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let secs = since_epoch.as_secs() + u64::from(since_epoch.subsec_nanos() > 0);
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}
