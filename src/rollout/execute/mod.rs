//! The executor: carries one batch of a [`Plan`] out against the backends, step by step, with
//! visible progress, and stops at the first failure with the old instances still serving.
//!
//! The executor never decides *what* to do; the planner did. It neither observes nor plans: the
//! rollout ([`crate::rollout`]) does, between the batches it hands over. It decides only *how*:
//! within a batch, the creations run concurrently, then the retirements run concurrently (each
//! instance's own steps in plan order), with drains one Node at a time; a failure or an
//! interrupt halts before the next step, so that nothing more is retired.
//!
//! Retiring a batch's instances at once keeps DESIGN invariant 3 (capacity): the planner puts
//! an instance in a batch only while the instances that stay up without it, after every
//! earlier retirement of the batch, still number `replicas - maxUnavailable`. So whatever
//! subset of a batch's retirements is under way at a moment, at least as many instances are
//! up as after the whole batch, and the batch's creations have all finished before the first
//! retirement starts, so nothing exceeds `replicas + maxSurge` either.

pub mod join;
mod numbering;
mod ready;
mod redact;
pub(crate) mod report;
mod skew;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::join_all;

use crate::backend::LockGuard;
use crate::backend::{BackendError, Cluster, Containers, DrainEnd, NewContainer, Stopped};
use crate::locked;
use crate::model::{ClusterIdentity, Desired, DesiredPool, InstanceRef, Origin, Revision, labels};
use crate::plan::{Action, Plan, PoolPlan, PoolStatus, Step};
use crate::rollout::cancel::Interrupt;
use crate::rollout::event::{Event, Sink};
use crate::spec::{EnvValue, Secret, SecretEnv};

pub(crate) use numbering::indent;
pub use report::{Report, StepOutcome};
pub use skew::PreflightCheck;

/// How long a container-only instance may take to run and turn healthy. Pools with a `node:`
/// section use their `readyTimeout` instead; bootstrap commands have their own timeouts.
const CONTAINER_UP_TIMEOUT: Duration = Duration::from_secs(300);

/// What may hold a Node's retirement, waited for by `Executor::wait_while_held`.
#[derive(Debug, Clone, Copy)]
enum Hold<'a> {
    /// Its deletion hooks of one kind (`pre-drain`, `pre-terminate`): another controller (a
    /// backup, a storage operator) set them and removes each when it is done, as with Cluster
    /// API's lifecycle hooks. Bounded by `hookTimeout` when it is set.
    Hooks(&'a str),
    /// Its attached volumes, after the drain (as Cluster API waits before it deletes a
    /// Machine's infrastructure), so that no volume is cut off mid-write by the container's
    /// stop. Skipped for a Node annotated `poolctl.dev/exclude-wait-for-node-volume-detach`;
    /// bounded by `volumeDetachTimeout` when it is set.
    Volumes,
}

/// Why a step failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StepError {
    /// The backend refused or failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// A bootstrap command exited non-zero; its output follows, indented.
    #[error(
        "bootstrap command {argv:?} exited with code {code}{}",
        if output.is_empty() { String::new() } else { format!(", its output:\n{}", numbering::indent(output, "      ")) }
    )]
    Bootstrap { argv: Vec<String>, code: i64, output: String },
    /// The plan names a pool the source does not declare (a bug, or a stale plan).
    #[error("pool {0} is not declared by the source")]
    UnknownPool(String),
    /// The step needs a Kubernetes cluster but the pool has none configured.
    #[error("pool {0}: this step acts on a Kubernetes Node, but no cluster is configured for the pool")]
    NoCluster(String),
    /// Joining the cluster (`spec.join`) failed.
    #[error(transparent)]
    Join(#[from] join::JoinError),
    /// The pool's sensitive values were not read with the source (a bug: only `validate`
    /// loads a source without them).
    #[error("pool {pool}: the value of env {key} was not read")]
    UnreadSecret { pool: String, key: String },
    /// The plan asks for a join the pool does not declare (a stale plan).
    #[error("pool {0} declares no kubeadm join")]
    NoJoin(String),
    /// A Node's deletion hooks were still set after `hookTimeout`.
    #[error(
        "{name}: its {kind} hooks were still set after hookTimeout ({}): {hooks}",
        crate::spec::Duration::from(*after)
    )]
    Hooks { name: String, kind: String, hooks: String, after: Duration },
    /// A Node's volumes were still attached after `volumeDetachTimeout`.
    #[error(
        "{name}: its volumes were still attached after volumeDetachTimeout ({}): {volumes}",
        crate::spec::Duration::from(*after)
    )]
    VolumeDetach { name: String, volumes: String, after: Duration },
    /// The Node was uncordoned again each time it was drained, before its container could stop.
    #[error(
        "{name}: its Node was uncordoned after each of {times} drains; the container keeps running (who \
         uncordons it?)"
    )]
    Uncordoned { name: String, times: usize },
    /// Interrupted while a Node's deletion hooks were set or its volumes attached.
    #[error("{name}: interrupted while waiting for {hooks}")]
    HooksInterrupted { name: String, hooks: String },
    /// The Node was not Ready once `minReadySeconds` and `monitor` had passed since it turned
    /// Ready.
    #[error(
        "the Node of {name} did not stay Ready for {} (minReadySeconds and monitor): the new template did not stay \
         up; nothing old was retired",
        crate::spec::Duration::from(*window)
    )]
    NotReadyForLong { name: String, window: Duration },
    /// The new container stopped within `minReadySeconds` and `monitor` of coming up.
    #[error(
        "container {name} {how} within {} of coming up (minReadySeconds and monitor): the new template did not \
         stay up; nothing old was retired",
        crate::spec::Duration::from(*window)
    )]
    DidNotStayUp { name: String, how: Stopped, window: Duration },
    /// The new container was no longer healthy at the end of `minReadySeconds` and `monitor`.
    #[error(
        "{what} at the end of {} (minReadySeconds and monitor): the new template did not stay up; nothing old \
         was retired",
        crate::spec::Duration::from(*window)
    )]
    Unhealthy { name: String, what: String, window: Duration },
    /// The container stopped running while the step waited on it.
    #[error("container {name} {how} while its Node was awaited")]
    ContainerStopped { name: String, how: Stopped },
    /// The instance's Node is the one this poolctl runs on: its retirement would take poolctl
    /// down with it halfway (the seed's self-hosted failure).
    #[error(
        "refusing to retire Node {0}: this poolctl runs on it (POOLCTL_NODE_NAME); move poolctl off the \
         pool's Nodes (deploy/ keeps it off them)"
    )]
    OwnNode(String),
}

/// Why the run could not start: nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PreflightError {
    #[error("image {image} is not available")]
    Image { image: String, source: BackendError },
    #[error("network {0} does not exist (create it first, e.g. `docker network create {0}`)")]
    NoNetwork(String),
    #[error("cannot check network {network}")]
    Network { network: String, source: BackendError },
    #[error("pool {pool} joins through container {container}, which is not running")]
    JoinContainer { pool: String, container: String, source: BackendError },
    /// The container a new instance joins through serves another cluster than the one poolctl
    /// observes for the pool: new Nodes would register where poolctl never looks.
    #[error(
        "pool {pool} joins through {container}, which serves another cluster (kube-system UID {theirs}) than the \
         one poolctl observes for the pool ({ours}); nothing was created"
    )]
    JoinOtherCluster { pool: String, container: String, theirs: String, ours: String },
    /// Which cluster the join container serves could not be told.
    #[error(
        "pool {pool} joins through {container}, and which cluster it serves cannot be told; poolctl joins new \
         instances only to the cluster it observes, so nothing was created"
    )]
    JoinClusterUnknown {
        pool: String,
        container: String,
        #[source]
        source: join::JoinError,
    },
    /// The labels of a pool's image could not be read (they may say its kubelet's version).
    #[error("cannot read the labels of image {image}")]
    ImageLabels { image: String, source: BackendError },
    /// The new template's kubelet is newer than the API server it would register with
    /// ([`skew`]).
    #[error(
        "pool {pool}: the template's kubelet {kubelet} ({from}) is newer than the API server {server}; Kubernetes \
         supports a kubelet as new as the API server and up to three minor versions older. Use an image of \
         {newest} or older, or pass --skip-preflight version-skew"
    )]
    KubeletNewer { pool: String, kubelet: String, from: String, server: String, newest: String },
    /// The new template's kubelet is older than its API server supports ([`skew`]).
    #[error(
        "pool {pool}: the template's kubelet {kubelet} ({from}) is older than the API server {server} supports; \
         Kubernetes supports a kubelet as new as the API server and up to three minor versions older (two, for \
         a kubelet older than v1.25). Use an image of {oldest} or newer, or pass --skip-preflight version-skew"
    )]
    KubeletTooOld { pool: String, kubelet: String, from: String, server: String, oldest: String },
    /// The API server's version could not be read, to compare the new kubelet's with.
    #[error(
        "pool {pool}: cannot read the API server's version to check the template's kubelet {kubelet} ({from}) \
         against it; pass --skip-preflight version-skew to create it unchecked"
    )]
    ServerVersionUnknown { pool: String, kubelet: String, from: String, source: BackendError },
}

/// How long a new container that stayed up through its window may take to show it is still up
/// (its HEALTHCHECK answering healthy).
const STILL_UP: Duration = Duration::from_secs(5);

/// How long preflight waits for a join's control plane or server to be up: it should be up
/// already, and a restarting one gets a moment.
const JOIN_PREFLIGHT: Duration = Duration::from_secs(10);

/// Everything a run needs besides the plan.
pub struct Executor<'a, C, K> {
    desired: &'a Desired,
    /// The declared pools as the plan being carried out builds them, by name: `desired`'s, with
    /// a pool rolled back at the template it goes back to. Set from each plan the executor is
    /// handed ([`Executor::preflight`], [`Executor::run_batch`]): a rollback decided between
    /// two batches builds the next one from the right template.
    pools: Mutex<HashMap<String, Arc<DesiredPool>>>,
    containers: &'a C,
    /// The cluster of each pool whose instances are Nodes, by pool name.
    clusters: &'a BTreeMap<String, K>,
    /// Where what the run says goes.
    sink: &'a dyn Sink,
    interrupt: &'a Interrupt,
    /// The Nodes this run drained, so that a Stop does not drain them again: each entered when
    /// its drain ended, every pod gone or the pool's `timeoutAction` (`Proceed`, `Force`)
    /// carried out, and by nothing else. It lives as long as the run: a run killed between a
    /// drain and the stop leaves nothing that says "drained", so the next run drains again
    /// before it stops the container (no Node without pods is taken for a drain that ended).
    drained: Mutex<HashSet<String>>,
    /// The number each step carries, as the plan text shows it.
    numbering: Mutex<numbering::Numbering>,
    /// Held from a Node's cordon to the end of its drain, one per cluster, whichever pools share
    /// it: drains run one Node at a time per cluster, since concurrent drains are how
    /// PodDisruptionBudgets get violated (cluster-api#3300). tokio's mutex is fair, so Nodes take
    /// their turns in the order they asked.
    drain_turns: Arc<DrainTurns>,
    /// The drain turns held, by the Node that holds its cluster's: a Node whose pre-drain hooks
    /// hold its drain gives its turn up while it waits, so that the wait holds only that Node.
    turns_held: Mutex<HashMap<String, tokio::sync::OwnedMutexGuard<()>>>,
    /// The creation chains of the batch each pool is carrying out (see [`CreationChains`]).
    creations: Mutex<HashMap<String, Arc<CreationChains>>>,
    /// Asked before every irreversible call ([`Executor::with_lock_guard`]; none by default).
    lock_guard: LockGuard,
    /// The Node this poolctl runs on ([`Executor::on_node`]), which it never retires.
    own_node: Option<String>,
    /// The k3s node tokens this run handed new agents: their bootstrap may print them.
    handed_out: Mutex<Vec<Secret>>,
    /// The preflight checks not to make (`--skip-preflight`; none by default).
    skipped: BTreeSet<PreflightCheck>,
}

/// The drain turn of each cluster, by its identity: one value for an executor, or shared by the
/// rollouts that run at once in one process (each pool of a `watch` has its own), so that a
/// cluster's drains stay one at a time whichever rollout makes them.
#[derive(Debug, Default)]
pub struct DrainTurns(Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>);

/// Tells the end of a retirement's wait when dropped: however the wait ends (nothing holds any
/// more, its limit, an interrupt, an error), each begin told has its end.
struct Unheld<'s> {
    sink: &'s dyn Sink,
    pool: &'s str,
    instance: &'s str,
    reason: &'static str,
}

impl Drop for Unheld<'_> {
    fn drop(&mut self) {
        let (pool, instance, reason) = (self.pool, self.instance, self.reason);
        self.sink.event(&Event::RetirementWaits { pool, instance, reason, waiting: false, what: "" });
    }
}

/// How the retirements of a batch wait for its creations. A cordon or a drain starts once every
/// new instance of the batch is up (its container up, its Node Ready and configured,
/// `minReadySeconds` past) or its chain ended; every later step (the stop first) waits until
/// every creation chain ended, each new instance's up record written. The record only makes
/// durable what is true when the drain starts, so writing it while the old Node drains costs
/// the rollout nothing, and no container stops before it is written.
struct CreationChains {
    chains: usize,
    /// The chains (by instance) whose instance is up, or that ended.
    up: tokio::sync::watch::Sender<HashSet<String>>,
    /// The chains that ended.
    ended: tokio::sync::watch::Sender<HashSet<String>>,
}

impl CreationChains {
    fn new(chains: usize) -> Self {
        Self {
            chains,
            up: tokio::sync::watch::Sender::new(HashSet::new()),
            ended: tokio::sync::watch::Sender::new(HashSet::new()),
        }
    }

    fn came_up(&self, instance: &str) {
        self.up.send_modify(|up| {
            up.insert(instance.to_owned());
        });
    }

    fn is_up(&self, instance: &str) -> bool {
        self.up.borrow().contains(instance)
    }

    fn ended(&self, instance: &str) {
        self.came_up(instance);
        self.ended.send_modify(|ended| {
            ended.insert(instance.to_owned());
        });
    }

    async fn all_up(&self) {
        // The sender lives in `self`, so the wait can only end by the condition.
        let _ = self.up.subscribe().wait_for(|up| up.len() >= self.chains).await;
    }

    async fn all_ended(&self) {
        let _ = self.ended.subscribe().wait_for(|ended| ended.len() >= self.chains).await;
    }
}

impl<'a, C, K> Executor<'a, C, K> {
    /// Give the drain turn `node` holds, if it holds one, to the next Node.
    fn give_turn(&self, node: &str) {
        locked(&self.turns_held).remove(node);
    }

    pub fn new(
        desired: &'a Desired,
        containers: &'a C,
        clusters: &'a BTreeMap<String, K>,
        sink: &'a dyn Sink,
        interrupt: &'a Interrupt,
    ) -> Self {
        Self {
            desired,
            pools: Mutex::new(pools_of(desired)),
            containers,
            clusters,
            sink,
            interrupt,
            drained: Mutex::default(),
            numbering: Mutex::default(),
            drain_turns: Arc::default(),
            turns_held: Mutex::default(),
            creations: Mutex::default(),
            lock_guard: LockGuard::unguarded(),
            own_node: None,
            handed_out: Mutex::default(),
            skipped: BTreeSet::new(),
        }
    }

    /// Take the drain turns from `turns`, which other rollouts of this process share.
    #[must_use]
    pub fn sharing_drain_turns(mut self, turns: Arc<DrainTurns>) -> Self {
        self.drain_turns = turns;
        self
    }

    /// Make no eviction, container stop or removal, nor Node deletion unless `guard` says the
    /// pool's lock is known to be held; such a step fails instead (see [`crate::rollout::lock`]).
    #[must_use]
    pub fn with_lock_guard(mut self, guard: LockGuard) -> Self {
        self.lock_guard = guard;
        self
    }

    /// Run on the Node `own` (`POOLCTL_NODE_NAME`): every retirement step of that instance
    /// fails before it acts, whatever the plan says, so that the old instance keeps serving.
    #[must_use]
    pub fn on_node(mut self, own: Option<String>) -> Self {
        self.own_node = own;
        self
    }

    /// Make none of the preflight checks `skipped` (`--skip-preflight`).
    #[must_use]
    pub fn skipping(mut self, skipped: BTreeSet<PreflightCheck>) -> Self {
        self.skipped = skipped;
        self
    }
}

/// Add `item` to `items` unless it is there: preflight checks each once, in plan order.
fn push_new<T: PartialEq>(items: &mut Vec<T>, item: T) {
    if !items.contains(&item) {
        items.push(item);
    }
}

/// The pools of `desired`, by name, shared.
fn pools_of(desired: &Desired) -> HashMap<String, Arc<DesiredPool>> {
    desired.pools.iter().map(|p| (p.name().to_owned(), Arc::new(p.clone()))).collect()
}

/// The container a new instance of `pool` runs, with poolctl's labels; `cluster` is the
/// cluster its Node will join, recorded so that a later plan can tell a switched kubeconfig
/// context from the cluster the instance belongs to.
pub fn new_container(
    pool: &DesiredPool,
    origin: &Origin,
    name: &str,
    cluster: Option<&ClusterIdentity>,
) -> NewContainer {
    let spec = &pool.pool.spec;
    let t = &spec.template;
    let mut all_labels = t.labels.clone();
    all_labels.insert(labels::POOL.into(), pool.name().into());
    all_labels.insert(labels::TEMPLATE_HASH.into(), pool.template_hash.clone());
    // Sensitive values are there as digests only.
    all_labels.insert(labels::TEMPLATE.into(), crate::spec::canonical_template(spec));
    all_labels.insert(labels::SCOPE.into(), origin.scope());
    all_labels.insert(labels::CREATED_AT.into(), k8s_openapi::jiff::Timestamp::now().to_string());
    // Its coming up is recorded (see `Containers::record_up`): until then it is starting.
    all_labels.insert(labels::RECORDS_UP.into(), "1".into());
    all_labels.insert(labels::SOURCE.into(), format!("{origin} file {}", pool.file));
    if let Some(commit) = origin.commit() {
        all_labels.insert(labels::COMMIT.into(), commit.into());
    }
    if let Some(node) = &spec.node {
        all_labels.insert(labels::KUBECONFIG.into(), node.kubeconfig.clone().unwrap_or_default());
        all_labels.insert(labels::CONTEXT.into(), node.context.clone().unwrap_or_default());
    }
    if let Some(id) = cluster {
        all_labels.insert(labels::CLUSTER_CONTEXT.into(), id.context.clone());
        all_labels.insert(labels::CLUSTER_SERVER.into(), id.server.clone());
        all_labels.insert(labels::CLUSTER_UID.into(), id.uid.clone().unwrap_or_default());
    }
    let mut env = BTreeMap::new();
    let mut secret_env = BTreeMap::new();
    for (key, value) in &t.env {
        match value {
            EnvValue::Plain(value) => {
                env.insert(key.clone(), value.clone());
            }
            // An unread one is refused by the executor before it gets here.
            EnvValue::Secret(SecretEnv { value: Some(secret), .. }) => {
                secret_env.insert(key.clone(), secret.clone());
            }
            EnvValue::Secret(SecretEnv { value: None, .. }) => {}
        }
    }
    let mut template_files = t.files.clone();
    if let Some(k3s) = spec.join.as_ref().and_then(|j| j.k3s.as_ref()) {
        env.extend(join::k3s_env(k3s));
    }
    // The new Node registers configured; a kubeadm join says so in its configuration.
    if let Some(node) = &spec.node {
        let registration = join::Registration::of(node);
        match spec.join.as_ref() {
            Some(j) if j.k3s.is_some() => template_files.push(registration.k3s_config()),
            Some(_) => {}
            None => {
                // After the template's own flags, if it has any (copied from an instance of
                // poolctl's, they may hold these already).
                let args = registration.kubelet_args();
                let all = match env.get(join::KUBELET_EXTRA_ARGS) {
                    Some(own) if own.contains(&args) => own.clone(),
                    Some(own) => format!("{own} {args}"),
                    None => args,
                };
                env.insert(join::KUBELET_EXTRA_ARGS.to_owned(), all);
            }
        }
    }
    NewContainer {
        name: name.into(),
        image: t.image_ref().to_owned(),
        command: t.command.clone(),
        entrypoint: t.entrypoint.clone(),
        env,
        secret_env,
        // The executor adds a join's token, which it reads only when it creates the container.
        files: Vec::new(),
        template_files,
        labels: all_labels,
        network: t.network.clone(),
        extra_networks: t.extra_networks.clone(),
        privileged: t.privileged,
        volumes: t.volumes.clone(),
        tmpfs: t.tmpfs.clone(),
        security_opt: t.security_opt.clone(),
        cgroupns: t.cgroupns,
        userns: t.userns,
        tty: t.tty,
        init: t.init,
        restart: t.restart.clone(),
        devices: t.devices.clone(),
        cap_add: t.cap_add.clone(),
        cap_drop: t.cap_drop.clone(),
        sysctls: t.sysctls.clone(),
        ports: t.ports.clone(),
        extra_hosts: t.extra_hosts.clone(),
        dns: t.dns.clone(),
        user: t.user.clone(),
        workdir: t.workdir.clone(),
        stop_signal: t.stop_signal.clone(),
        cpus: t.cpus.clone(),
        memory: t.memory.clone(),
        shm_size: t.shm_size.clone(),
        pids_limit: t.pids_limit,
        ulimits: t.ulimits.clone(),
    }
}

impl<C: Containers, K: Cluster> Executor<'_, C, K> {
    /// Check, before anything changes, that every image a Create needs is there (pulling the
    /// missing ones) and every network exists, where each pool's containers are created, that
    /// every container a join goes through runs, and that the kubelet of each pool's new Nodes
    /// is one its API server supports ([`skew`]).
    pub async fn preflight(&self, plan: &Plan) -> Result<(), PreflightError> {
        self.carry(plan);
        let declared = locked(&self.pools).clone();
        let mut images: Vec<(&str, &str)> = Vec::new();
        let mut networks: Vec<(&str, &str)> = Vec::new();
        let mut joins: Vec<(&str, &str)> = Vec::new();
        for (pool, step) in plan.steps() {
            if let Action::Create { image, .. } = &step.action {
                push_new(&mut images, (pool.name.as_str(), image.as_str()));
                let spec = declared.get(&pool.name).map(|p| &p.pool.spec);
                let template = spec.map(|s| &s.template);
                let all = template.into_iter().flat_map(|t| t.network.iter().chain(&t.extra_networks));
                for n in all.map(|n| (pool.name.as_str(), n.as_str())) {
                    push_new(&mut networks, n);
                }
                let through = spec.and_then(|s| s.join.as_ref()).and_then(join::through);
                if let Some(container) = through.filter(|c| !joins.iter().any(|(_, j)| j == c)) {
                    joins.push((&pool.name, container));
                }
            }
        }
        for (pool, container) in joins {
            self.containers.wait_up(container, JOIN_PREFLIGHT).await.map_err(|source| {
                PreflightError::JoinContainer { pool: pool.into(), container: container.into(), source }
            })?;
            self.check_join_cluster(pool, container).await?;
        }
        for &(pool, image) in &images {
            let pulled = self
                .containers
                .ensure_image(pool, image)
                .await
                .map_err(|source| PreflightError::Image { image: image.into(), source })?;
            if pulled {
                self.sink.say(&format!("pulled image {image}"));
            }
        }
        for (pool, network) in networks {
            match self.containers.network_exists(pool, network).await {
                Ok(true) => {}
                Ok(false) => return Err(PreflightError::NoNetwork(network.into())),
                Err(source) => return Err(PreflightError::Network { network: network.into(), source }),
            }
        }
        let mut creating: Vec<&str> = Vec::new();
        for &(pool, _) in &images {
            push_new(&mut creating, pool);
        }
        for pool in creating {
            self.check_version_skew(pool).await?;
        }
        Ok(())
    }

    /// The cluster a pool's new instances join (through `container`, its control plane or k3s
    /// server) must be the one poolctl observes for the pool, compared by the UID of their
    /// `kube-system` Namespaces: otherwise the new Nodes would register where poolctl never
    /// looks, and the old ones be retired for replacements that serve elsewhere. Where the
    /// observed cluster's UID could not be read, there is nothing to compare with.
    async fn check_join_cluster(&self, pool: &str, container: &str) -> Result<(), PreflightError> {
        let Some(ours) = self.clusters.get(pool).and_then(|c| c.identity().uid.clone()) else {
            return Ok(());
        };
        let declared = self.pool(pool).ok();
        let Some(spec) = declared.as_deref().and_then(|p| p.pool.spec.join.as_ref()) else { return Ok(()) };
        let theirs = join::cluster_uid(self.containers, spec).await.map_err(|source| {
            PreflightError::JoinClusterUnknown { pool: pool.into(), container: container.into(), source }
        })?;
        if theirs == ours {
            return Ok(());
        }
        Err(PreflightError::JoinOtherCluster { pool: pool.into(), container: container.into(), theirs, ours })
    }

    /// Carry one batch out: each pool's part side by side with the others', as pools are
    /// independent (what must stay serial, a cluster's drains, waits for its turn). A pool stops
    /// at its first failed step (no step of it starts once one has failed; steps already under
    /// way finish) and the other pools go on; an interrupt stops them all.
    pub async fn run_batch(&self, plan: &Plan) -> Report {
        self.carry(plan);
        let total = plan.steps().count();
        let offsets = plan.pools.iter().scan(0, |offset, pool| {
            let at = *offset;
            *offset += pool.steps.len();
            Some(at)
        });
        let runs =
            plan.pools.iter().zip(offsets).map(|(pool, offset)| self.run_pool_batch(pool, offset, total));
        let mut report = Report::default();
        let mut failed = false;
        for part in join_all(runs).await {
            failed |= part.failure().is_some();
            report.attempted.extend(part.attempted);
            report.not_started.extend(part.not_started);
        }
        if !failed && !report.not_started.is_empty() {
            report.stop_reason = self.interrupt.reason();
        }
        report
    }

    /// Carry one pool's part of a batch out; `offset` is the number of steps of the pools
    /// before it.
    async fn run_pool_batch(&self, pool: &PoolPlan, offset: usize, total: usize) -> Report {
        let mut report = Report::default();
        let failed = AtomicBool::new(false);
        let not_started = |s: &Step| (pool.name.clone(), s.instance.to_string(), s.action.verb());
        for group in batches(pool, offset) {
            if failed.load(Ordering::SeqCst) || self.interrupt.is_set() {
                report.not_started.extend(group.all().map(|(_, s)| not_started(s)));
                continue;
            }
            // The creation chains of a batch run side by side; each chain is sequential. The
            // retirements follow them as `CreationChains` says.
            let creations = Arc::new(CreationChains::new(group.creations.len()));
            locked(&self.creations).insert(pool.name.clone(), Arc::clone(&creations));
            let made = join_all(group.creations.iter().map(|chain| {
                let (creations, failed) = (&creations, &failed);
                async move {
                    let (outcomes, skipped) = self.run_chain(pool, chain, total).await;
                    if outcomes.iter().any(|o| o.error.is_some()) {
                        failed.store(true, Ordering::SeqCst);
                    }
                    creations.ended(chain[0].1.instance.as_str());
                    (outcomes, skipped)
                }
            }));
            let retired = async {
                creations.all_up().await;
                let chains = group
                    .retirements
                    .iter()
                    .map(|chain| self.retire(pool, chain, total, &failed, &creations));
                join_all(chains).await
            };
            let (made, retired) = futures::future::join(made, retired).await;
            for (outcomes, skipped) in made.into_iter().chain(retired) {
                report.attempted.extend(outcomes);
                report.not_started.extend(skipped.into_iter().map(not_started));
            }
        }
        // A pool torn down (`--prune`) leaves nothing behind: its rollout record goes once its
        // instances are retired. A record that cannot be removed is harmless, and said.
        let done = report.failure().is_none() && report.not_started.is_empty();
        if done
            && pool.status == PoolStatus::Pruned
            && let Err(e) = self.containers.forget_pool(&pool.name).await
        {
            self.sink.say(&format!("pool {}: its rollout record stays ({e})", pool.name));
        }
        report
    }

    /// Run one retired instance's steps in order, beside the other retirements of its batch.
    /// Before each step: its cordon and drain wait for the drain turn (one Node at a time), the
    /// steps after them for the batch's creations to end, and nothing starts once any step of
    /// the batch failed or the interrupt is set. The stop, Node deletion and removal of a
    /// drained instance overlap the next Node's drain.
    async fn retire<'s>(
        &self,
        pool: &PoolPlan,
        chain: &[Numbered<'s>],
        total: usize,
        failed: &AtomicBool,
        creations: &CreationChains,
    ) -> (Vec<StepOutcome>, Vec<&'s Step>) {
        let mut outcomes = Vec::new();
        let Some(&(_, first)) = chain.first() else { return (outcomes, Vec::new()) };
        // However the chain ends, its Node's turn goes to the next.
        let _gives_back = GiveTurnBack { executor: self, node: first.instance.as_str() };
        for (i, &(n, step)) in chain.iter().enumerate() {
            if matches!(step.action, Action::Cordon | Action::Drain(_)) {
                self.take_turn(&pool.name, step.instance.as_str()).await;
            } else {
                self.give_turn(step.instance.as_str());
                creations.all_ended().await;
            }
            if failed.load(Ordering::SeqCst) || self.interrupt.is_set() {
                return (outcomes, chain[i..].iter().map(|&(_, s)| s).collect());
            }
            let outcome = self.run_step(pool, step, n, total).await;
            if matches!(outcome.error, Some(StepError::HooksInterrupted { .. })) {
                // Stopped while it waited, as asked (a signal, a newer desired state): not a
                // failure, and not done; the next run takes it up where it is.
                return (outcomes, chain[i..].iter().map(|&(_, s)| s).collect());
            }
            let ok = outcome.error.is_none();
            outcomes.push(outcome);
            if !ok {
                failed.store(true, Ordering::SeqCst);
                return (outcomes, chain[i + 1..].iter().map(|&(_, s)| s).collect());
            }
        }
        (outcomes, Vec::new())
    }

    /// Run one new instance's steps in order; stop the chain at its first failure or at an
    /// interrupt. A new container whose chain did not finish never served: it is stopped, so
    /// that the next plan sees it as down and replaces it, rather than keeping a container
    /// whose bootstrap never ran or failed. It stays for its logs until then.
    async fn run_chain<'s>(
        &self,
        pool: &PoolPlan,
        chain: &[Numbered<'s>],
        total: usize,
    ) -> (Vec<StepOutcome>, Vec<&'s Step>) {
        let mut outcomes = Vec::new();
        let mut created = None;
        for (i, &(n, step)) in chain.iter().enumerate() {
            let cut_short = self.interrupt.is_set();
            if !cut_short {
                let outcome = self.run_step(pool, step, n, total).await;
                let ok = outcome.error.is_none();
                outcomes.push(outcome);
                if ok {
                    if matches!(step.action, Action::Create { .. }) {
                        created = Some(step.instance.as_str());
                    }
                    continue;
                }
            }
            if let Some(name) = created {
                if self.creations_of(&pool.name).is_some_and(|c| c.is_up(name)) {
                    // Only its up record failed: it serves, and an old Node may be draining
                    // into it. The next plan finds it up without a record and finishes it.
                    self.sink.say(&format!("{name} is up but not recorded as up; the next apply records it"));
                } else {
                    self.abandon(&pool.name, name).await;
                }
            }
            let rest = if cut_short { &chain[i..] } else { &chain[i + 1..] };
            return (outcomes, rest.iter().map(|&(_, s)| s).collect());
        }
        (outcomes, Vec::new())
    }

    /// Stop a new container whose creation chain did not finish. Best effort: if this fails
    /// too, the container keeps running un-bootstrapped, which the message says.
    async fn abandon(&self, pool: &str, name: &str) {
        // Its Node may have turned Ready and taken pods before the chain failed.
        if let Err(e) = self.drain_before_stop(pool, name).await {
            self.sink.say(&format!(
                "left {name} running: its Node could not be drained first ({e}); run apply again"
            ));
            return;
        }
        let grace = self.rollout_of(pool).stop_grace_period.get();
        let stopped = match self.lock_guard.check(pool) {
            Ok(()) => self.containers.stop(name, grace).await,
            Err(e) => Err(e),
        };
        match stopped {
            Ok(()) => self.sink.say(&format!("stopped {name}: it never served; the next plan replaces it")),
            Err(e) => self.sink.say(&format!(
                "could not stop {name} ({e}): it never finished starting; remove it, or run apply again"
            )),
        }
    }

    async fn run_step(&self, pool: &PoolPlan, step: &Step, n: usize, total: usize) -> StepOutcome {
        let number = self.number_of(&pool.name, step, n, total);
        let (result, elapsed) =
            self.step_with_progress(pool, step, number, self.perform(&pool.name, step)).await;
        if result.is_ok() && step.action.is_retirement() && !retires_current(pool, step) {
            self.record_progress(&pool.name).await;
        }
        StepOutcome {
            pool: pool.name.clone(),
            instance: step.instance.to_string(),
            verb: step.action.verb(),
            elapsed,
            error: result.err(),
        }
    }

    /// Record that the rollout of `pool_name` stepped forward: time a budget, a hook or the
    /// drain turn held a retirement up does not count as a stall (`progressDeadline`). Only a
    /// declared pool's: a pruned one has no rollout. A record that cannot be written is said and
    /// costs nothing but an earlier judgment.
    async fn record_progress(&self, pool_name: &str) {
        let Ok(pool) = self.pool(pool_name) else { return };
        if let Err(e) = self.containers.record_progress(pool_name, &record_labels(&pool)).await {
            self.sink.say(&format!("could not record the progress of pool {pool_name}: {e}"));
        }
    }

    /// Create (and start) a new instance's container, recording what must be known first.
    async fn create(&self, pool_name: &str, step: &Step) -> Result<(), StepError> {
        let name = step.instance.as_str();
        let pool = self.pool(pool_name)?;
        let spec = &pool.pool.spec;
        if let Some((key, _)) = spec.template.env.iter().find(|(_, v)| v.is_unread()) {
            return Err(StepError::UnreadSecret { pool: pool_name.into(), key: key.clone() });
        }
        let cluster = self.clusters.get(pool_name);
        let origin = &self.desired.origin;
        let mut container = new_container(&pool, origin, name, cluster.map(Cluster::identity));
        if let Some(k3s) = spec.join.as_ref().and_then(|j| j.k3s.as_ref()) {
            let token = join::k3s_token_for_agent(self.containers, k3s).await?;
            locked(&self.handed_out).push(token.content.clone());
            container.files.push(token);
        }
        // The rollout's start is recorded beside the first create, not before it: the
        // record only dates the rollout (its progress deadline), and a create that
        // happens without it is found by the next plan as any unfinished instance is.
        let record = async {
            if let Action::Create { starts_rollout: true, template_hash, rollback_from, revision, .. } =
                &step.action
            {
                let (labels, from) = (record_labels(&pool), rollback_from.as_deref());
                self.containers.record_rollout(pool_name, template_hash, from, &labels).await?;
                // The history keeps the template itself, so that a rollback can rebuild it
                // when no instance of it is left.
                if let Some(number) = *revision {
                    let revision = Revision {
                        number,
                        template_hash: template_hash.clone(),
                        template: Some(crate::spec::canonical_template(&pool.pool.spec)),
                        source: Some(format!("{origin} file {}", pool.file)),
                        commit: origin.commit().map(str::to_owned),
                        started: 0,
                        rolled_back_from: rollback_from.clone(),
                        end: None,
                    };
                    self.containers.record_revision(pool_name, &revision, &labels).await?;
                }
            }
            Ok::<(), BackendError>(())
        };
        let create = async {
            // Recorded before the container exists: its kubelet may register the Node
            // at any moment after, and until poolctl labels it, this record is what
            // names it once the container is gone.
            if let Some(cluster) = cluster {
                cluster.note_joining(name).await?;
            }
            self.containers.create(&container).await
        };
        tokio::try_join!(record, create)?;
        Ok(())
    }

    async fn perform(&self, pool_name: &str, step: &Step) -> Result<(), StepError> {
        let name = step.instance.as_str();
        // Checked here, at every retirement step, not in the plan: the plan is a preview, and
        // a retirement resumed past its cordon starts at a later step.
        if step.action.is_retirement() && self.own_node.as_deref() == Some(name) {
            return Err(StepError::OwnNode(name.to_owned()));
        }
        match &step.action {
            Action::Create { .. } => self.create(pool_name, step).await?,
            Action::Join { .. } => {
                let pool = self.pool(pool_name)?;
                let kubeadm = pool.pool.spec.join.as_ref().and_then(|j| j.kubeadm.as_ref());
                let kubeadm = kubeadm.ok_or_else(|| StepError::NoJoin(pool_name.into()))?;
                let secrets = self.secrets();
                let known: Vec<&Secret> = secrets.iter().collect();
                // A pool without `node:` is no cluster's: nothing configures its Nodes later.
                let registration =
                    pool.pool.spec.node.as_ref().map(join::Registration::of).unwrap_or_default();
                let warn = |warning: String| self.sink.say(&warning);
                join::kubeadm(self.containers, kubeadm, (name, &registration), &known, warn).await?;
            }
            Action::Bootstrap { .. } => {
                for cmd in &self.pool(pool_name)?.pool.spec.bootstrap {
                    let out = self.containers.exec(name, &cmd.exec, cmd.timeout.get()).await?;
                    // Redacted here, once: every sink, error and notice is made from this.
                    let secrets = self.secrets();
                    let output = redact::output(&secrets.iter().collect::<Vec<_>>(), &out.output);
                    if out.exit_code == 0 {
                        let (instance, argv) = (name, &cmd.exec);
                        self.sink.event(&Event::BootstrapOutput { instance, argv, output: &output });
                    } else {
                        return Err(StepError::Bootstrap {
                            argv: cmd.exec.clone(),
                            code: out.exit_code,
                            output: output.trim().to_owned(),
                        });
                    }
                }
            }
            Action::AwaitReady { node } => {
                let pool = self.pool(pool_name)?;
                // One deadline for the whole step: the container coming up and its Node turning
                // Ready share the pool's readyTimeout.
                let timeout =
                    pool.pool.spec.node.as_ref().map_or(CONTAINER_UP_TIMEOUT, |n| n.ready_timeout.get());
                let deadline = Instant::now() + timeout;
                self.containers.wait_up(name, timeout).await?;
                if *node {
                    let spec =
                        pool.pool.spec.node.as_ref().ok_or_else(|| StepError::NoCluster(pool_name.into()))?;
                    let cluster = self.cluster(pool_name)?;
                    let remaining = deadline.saturating_duration_since(Instant::now());
                    let ready = cluster.await_ready(name, remaining);
                    self.while_running(name, ready).await.map_err(|e| match e {
                        // Say the timeout the user set, not what was left of it.
                        StepError::Backend(BackendError::Timeout { what, .. }) => {
                            StepError::Backend(BackendError::Timeout { what, after: timeout })
                        }
                        other => other,
                    })?;
                    let reference = self.containers.instance_ref(name);
                    configure_node(cluster, pool_name, spec, name, reference.as_ref()).await?;
                }
                self.stay_up(&pool, name, *node).await?;
                if let Some(creations) = self.creations_of(pool_name) {
                    creations.came_up(name);
                }
                // Last: from now on the instance counts as serving whenever it is up.
                self.containers.record_up(name, &record_labels(&pool)).await?;
            }
            Action::Configure(preview) => {
                let pool = self.pool(pool_name)?;
                let spec =
                    pool.pool.spec.node.as_ref().ok_or_else(|| StepError::NoCluster(pool_name.into()))?;
                let reference = self.containers.instance_ref(name).or_else(|| preview.reference.clone());
                configure_node(self.cluster(pool_name)?, pool_name, spec, name, reference.as_ref()).await?;
            }
            Action::Cordon => {
                self.cluster(pool_name)?.cordon(name).await?;
                let said = "cordoned by poolctl to retire this instance";
                self.tell_node(pool_name, name, "Cordoned", said, false);
            }
            Action::Drain(_) => {
                // Another controller's hook may hold this Node for long: meanwhile its cluster's
                // drain turn goes to other Nodes, this pool's or another's, and is taken again
                // for this drain.
                let waited = std::sync::atomic::AtomicBool::new(false);
                let aside = || {
                    waited.store(true, Ordering::Relaxed);
                    self.give_turn(name);
                };
                self.wait_while_held(pool_name, name, Hold::Hooks("pre-drain"), &aside).await?;
                if waited.load(Ordering::Relaxed) {
                    self.take_turn(pool_name, name).await;
                }
                self.drain_unless_excluded(pool_name, name).await?;
            }
            Action::Stop => self.stop_after_drain(pool_name, name).await?,
            Action::DeleteNode => self.delete_node(pool_name, name).await?,
            Action::Remove => {
                self.lock_guard.check(pool_name)?;
                self.containers.remove(name).await?;
            }
            Action::UpdateInPlace { .. } => self.update_in_place(pool_name, name).await?,
        }
        Ok(())
    }

    /// Bring the running instance `name` to its pool's template by `docker update`: the plan
    /// found that only live settings differ.
    async fn update_in_place(&self, pool_name: &str, name: &str) -> Result<(), StepError> {
        let pool = self.pool(pool_name)?;
        self.lock_guard.check(pool_name)?;
        self.containers.update_in_place(name, &live_update(&pool), &record_labels(&pool)).await?;
        Ok(())
    }

    /// `minReadySeconds` and `monitor`: the new instance must stay up that long before it
    /// counts as up and anything old is retired, as a Deployment's pods must stay Ready and
    /// Docker Swarm watches an updated task: its container running throughout, and at the end
    /// still up (healthy, where its image has a HEALTHCHECK) with its Node Ready. A template
    /// that crashes a second after it starts fails here, every old instance still serving.
    async fn stay_up(&self, pool: &DesiredPool, name: &str, node: bool) -> Result<(), StepError> {
        let rollout = &pool.pool.spec.rollout;
        let min_ready = rollout.min_ready_seconds;
        let window = min_ready.get() + rollout.monitor.get();
        if window.is_zero() {
            return Ok(());
        }
        let shown = crate::spec::Duration::from(window);
        if min_ready.get().is_zero() {
            self.sink.say(&format!(
                "{name}: up; watching it stay up for {shown} (monitor) before it counts as up"
            ));
        } else {
            self.sink.say(&format!(
                "{name}: up; waiting {min_ready} (minReadySeconds) and {} (monitor) before it counts as up",
                rollout.monitor
            ));
        }
        // The container and the Node are looked at once a second: a container not up (its
        // HEALTHCHECK failing) or a Node not Ready at some look starts the window again (a flap
        // is not staying up), for as long as `readyTimeout` allows (a container-only pool: none).
        let cluster = if node { Some(self.cluster(pool.name())?) } else { None };
        let patience = pool.pool.spec.node.as_ref().map_or(Duration::ZERO, |n| n.ready_timeout.get());
        let watched = async {
            let started = tokio::time::Instant::now();
            let (mut since, mut was_up) = (started, true);
            loop {
                let left = window.saturating_sub(since.elapsed());
                if left.is_zero() {
                    return Ok::<Option<Flap>, BackendError>(None);
                }
                tokio::time::sleep(left.min(Duration::from_secs(1))).await;
                let flap = match self.containers.up_now(name).await? {
                    Some(why) => Some(Flap::Container(why)),
                    None => match cluster {
                        Some(cluster) if !cluster.node(name).await?.is_some_and(|n| n.ready) => {
                            Some(Flap::Node)
                        }
                        _ => None,
                    },
                };
                let Some(flap) = flap else {
                    was_up = true;
                    continue;
                };
                if started.elapsed() >= window + patience {
                    return Ok(Some(flap));
                }
                // Said once a flap, not at every look while it lasts.
                if was_up {
                    let what = match &flap {
                        Flap::Container(why) => format!("its container is not up ({why})"),
                        Flap::Node => "its Node is not Ready".to_owned(),
                    };
                    self.sink.say(&format!("{name}: {what}; watching it stay up for {shown} again"));
                }
                (since, was_up) = (tokio::time::Instant::now(), false);
            }
        };
        let gave_up = self.while_running(name, watched).await.map_err(|e| match e {
            StepError::ContainerStopped { name, how } => StepError::DidNotStayUp { name, how, window },
            other => other,
        })?;
        match gave_up {
            None => {}
            Some(Flap::Node) => return Err(StepError::NotReadyForLong { name: name.to_owned(), window }),
            Some(Flap::Container(why)) => {
                let what = format!("container {name} is not up ({why})");
                return Err(StepError::Unhealthy { name: name.to_owned(), what, window });
            }
        }
        // Still up at the end: a HEALTHCHECK that failed within the window fails the step.
        self.containers.wait_up(name, STILL_UP).await.map_err(|e| match e {
            BackendError::Timeout { what, .. } => {
                StepError::Unhealthy { name: name.to_owned(), what, window }
            }
            other => StepError::Backend(other),
        })?;
        if node {
            let ready = self.cluster(pool.name())?.node(name).await?.is_some_and(|n| n.ready);
            if !ready {
                return Err(StepError::NotReadyForLong { name: name.to_owned(), window });
            }
        }
        Ok(())
    }

    /// Delete the Node of `name`, once its container does not run: a running kubelet registers
    /// it again, and pods may be bound to it. The plan may have seen the container created but
    /// not started (an apply killed during create, whose start Docker finished afterwards); then
    /// it is stopped now, the safe way.
    async fn delete_node(&self, pool: &str, name: &str) -> Result<(), StepError> {
        if self.containers.may_run(name).await? {
            self.sink.say(&format!("{name}: its container runs now; stopping it before its Node is deleted"));
            self.stop_after_drain(pool, name).await?;
        }
        self.lock_guard.check(pool)?;
        self.cluster(pool)?.delete_node(name).await?;
        let said = "deleted by poolctl: its container was stopped after the drain";
        self.tell_node(pool, name, "NodeDeleted", said, false);
        Ok(())
    }

    /// Drain the Node, and record that this run did: only a drain that ended (every pod gone,
    /// or its `timeoutAction` carried out) lets the container stop.
    async fn drain(&self, pool: &str, node: &str) -> Result<(), StepError> {
        let timeout = self.rollout_of(pool).drain_timeout.get();
        let drain = self.pool(pool).map(|p| p.pool.spec.drain.clone()).unwrap_or_default();
        let cluster = self.cluster(pool)?;
        let said = "draining: evicting its pods, PodDisruptionBudgets respected, to retire this instance";
        self.tell_node(pool, node, "Draining", said, false);
        let news = |reason, note: String| self.tell_node(pool, node, reason, &note, true);
        let failed = |e: &BackendError| {
            self.tell_node(pool, node, "DrainFailed", &format!("the drain did not finish: {e}"), true);
        };
        let end = cluster.drain(node, timeout, &drain, &self.lock_guard, &news).await.inspect_err(failed)?;
        let after = crate::spec::Duration::from(timeout);
        match &end {
            DrainEnd::Complete => {
                self.tell_node(pool, node, "Drained", "every pod the drain evicts is gone", false);
            }
            // Its DrainAbandoned Event says what it left.
            DrainEnd::Abandoned(pods) => self.sink.say(&format!(
                "{node}: drainTimeout ({after}) passed; {} left on the Node, its container stops all the same \
                 (timeoutAction: Proceed): {}",
                crate::style::count(pods.len(), "pod"),
                pods.join(", ")
            )),
            DrainEnd::Forced(pods) => {
                let said = format!(
                    "every pod is gone; {} deleted past drainTimeout (timeoutAction: Force)",
                    pods.len()
                );
                self.tell_node(pool, node, "Drained", &said, false);
                self.sink.say(&format!(
                    "{node}: drainTimeout ({after}) passed; {} deleted whatever their PodDisruptionBudgets, and \
                     gone (timeoutAction: Force): {}",
                    crate::style::count(pods.len(), "pod"),
                    pods.join(", ")
                ));
            }
        }
        locked(&self.drained).insert(node.to_owned());
        Ok(())
    }

    /// Stop a container after draining whatever Node it has now. The waits between the drain
    /// and the stop (volumes, pre-terminate hooks) can last long, and somebody may uncordon the
    /// Node meanwhile, letting new pods in: the Node is looked at once more right before the
    /// stop, and one found schedulable again is cordoned and drained again, a few times at
    /// most, before the retirement halts with the container running.
    async fn stop_after_drain(&self, pool: &str, name: &str) -> Result<(), StepError> {
        const ROUNDS: usize = 3;
        for round in 1..=ROUNDS {
            self.drain_before_stop(pool, name).await?;
            self.wait_while_held(pool, name, Hold::Volumes, &|| ()).await?;
            self.wait_while_held(pool, name, Hold::Hooks("pre-terminate"), &|| ()).await?;
            if !self.uncordoned(pool, name).await? {
                let grace = self.rollout_of(pool).stop_grace_period.get();
                self.lock_guard.check(pool)?;
                return Ok(self.containers.stop(name, grace).await?);
            }
            if round == ROUNDS {
                break;
            }
            self.sink.say(&format!(
                "{name}: its Node was uncordoned after its drain; cordoning and draining it again before the \
                 container stops"
            ));
            locked(&self.drained).remove(name);
        }
        Err(StepError::Uncordoned { name: name.to_owned(), times: ROUNDS })
    }

    /// Whether the instance's Node exists now and is schedulable: drained before, then
    /// uncordoned by somebody, so that pods may have been placed on it since.
    async fn uncordoned(&self, pool: &str, name: &str) -> Result<bool, StepError> {
        let Some(cluster) = self.clusters.get(pool) else { return Ok(false) };
        Ok(cluster.node(name).await?.is_some_and(|n| !n.unschedulable))
    }

    /// Before the container of a node-pool instance stops: whatever Node it has *now* is
    /// cordoned and drained, whatever the plan saw. The plan is a preview: a kubelet may have
    /// registered its Node since (after an API server restart, a `kubectl delete node`, a slow
    /// start), and pods may be bound to it. A Node that does not exist holds no pods; a cluster
    /// that does not answer stops the step, so the container keeps running.
    async fn drain_before_stop(&self, pool: &str, name: &str) -> Result<(), StepError> {
        let Some(cluster) = self.clusters.get(pool) else { return Ok(()) };
        if locked(&self.drained).contains(name) {
            return Ok(());
        }
        let Some(node) = cluster.node(name).await? else { return Ok(()) };
        // The caller never holds the turn here: a retirement gives it up after its drain.
        let _turn = self.drain_turn(pool).lock_owned().await;
        self.sink.say(&format!(
            "{name}: its Node is there now; cordoning and draining it before the container stops"
        ));
        if !node.unschedulable {
            cluster.cordon(name).await?;
        }
        self.wait_while_held(pool, name, Hold::Hooks("pre-drain"), &|| ()).await?;
        self.drain_unless_excluded(pool, name).await
    }

    /// Drain the Node, unless it carries `poolctl.dev/exclude-node-draining` now: its owner's
    /// explicit choice to let its pods go down with it.
    async fn drain_unless_excluded(&self, pool: &str, name: &str) -> Result<(), StepError> {
        let excluded = match self.clusters.get(pool) {
            Some(cluster) => cluster.node(name).await?.is_some_and(|n| n.retirement.exclude_draining),
            None => false,
        };
        if !excluded {
            return self.drain(pool, name).await;
        }
        self.sink.say(&format!(
            "{name}: not drained: its Node carries {}, its owner's choice",
            labels::EXCLUDE_DRAINING
        ));
        locked(&self.drained).insert(name.to_owned());
        Ok(())
    }

    /// Wait, looking once a second, while `hold` holds the Node's retirement (a pool of no
    /// cluster has no Node to hold), saying what holds it whenever that changes, and calling
    /// `aside` before each wait. Past the hold's limit, when it is set, the step fails. An
    /// interrupt stops the wait, the retirement not carried further.
    async fn wait_while_held(
        &self,
        pool: &str,
        name: &str,
        hold: Hold<'_>,
        aside: &(dyn Fn() + Sync),
    ) -> Result<(), StepError> {
        let Some(cluster) = self.clusters.get(pool) else { return Ok(()) };
        let rollout = self.rollout_of(pool);
        let (what, node_reason, reason) = match hold {
            Hold::Hooks(kind) => (format!("its {kind} hooks"), "WaitingForHooks", "hooks"),
            Hold::Volumes => ("its volumes to detach".to_owned(), "WaitingForVolumes", "volumes"),
        };
        let limit = match hold {
            Hold::Hooks(_) => rollout.hook_timeout,
            Hold::Volumes => rollout.volume_detach_timeout,
        };
        // tokio's clock, which the waits below advance (and a test can pause).
        let started = tokio::time::Instant::now();
        let mut said = String::new();
        // Told once the wait begins, and its end however the wait ends.
        let mut wait_told: Option<Unheld<'_>> = None;
        loop {
            let node = cluster.node(name).await?;
            let now = match (hold, node) {
                (Hold::Hooks(kind), Some(node)) => node.retirement.hooks_of(kind),
                // An unreachable Node (Ready=Unknown: its kubelet silent) can detach nothing: as
                // Cluster API does, its retirement does not wait for that.
                (Hold::Volumes, Some(node)) if node.is_unreachable() => {
                    self.sink.say(&format!(
                        "{name}: unreachable (Ready=Unknown): not waiting for its volumes to detach"
                    ));
                    Vec::new()
                }
                (Hold::Volumes, Some(node)) if !node.retirement.exclude_volume_detach => {
                    cluster.attached_volumes(name).await?
                }
                _ => Vec::new(),
            };
            if now.is_empty() {
                return Ok(());
            }
            let now = now.join(", ");
            if now != said {
                let told = format!("its retirement waits for {what}: {now}");
                if wait_told.is_none() {
                    self.sink.event(&Event::RetirementWaits {
                        pool,
                        instance: name,
                        reason,
                        waiting: true,
                        what: &told,
                    });
                    wait_told = Some(Unheld { sink: self.sink, pool, instance: name, reason });
                }
                self.tell_node(pool, name, node_reason, &told, false);
                self.sink.say(&format!("{name}: waiting for {what}: {now}"));
                said = now;
            }
            if let Some(after) = limit.map(crate::spec::Duration::get).filter(|l| started.elapsed() >= *l) {
                let name = name.to_owned();
                return Err(match hold {
                    Hold::Hooks(kind) => StepError::Hooks { name, kind: kind.to_owned(), hooks: said, after },
                    Hold::Volumes => StepError::VolumeDetach { name, volumes: said, after },
                });
            }
            aside();
            if self.interrupt.is_set() {
                return Err(StepError::HooksInterrupted {
                    name: name.to_owned(),
                    hooks: format!("{what}: {said}"),
                });
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// Every secret value this run knows, to redact from what a command printed: the `valueFrom`
    /// env values of every pool, as declared and as carried out (a rollback builds a pool from
    /// another template), and the join tokens it handed out.
    fn secrets(&self) -> Vec<Secret> {
        let pools = locked(&self.pools);
        let carried = pools.values().map(|p| &**p);
        let env = carried.chain(&self.desired.pools).flat_map(|p| p.pool.spec.template.env.values());
        let valued = env.filter_map(|value| match value {
            EnvValue::Secret(SecretEnv { value: Some(secret), .. }) => Some(secret.clone()),
            _ => None,
        });
        valued.chain(locked(&self.handed_out).iter().cloned()).collect()
    }

    fn pool(&self, name: &str) -> Result<Arc<DesiredPool>, StepError> {
        locked(&self.pools).get(name).cloned().ok_or_else(|| StepError::UnknownPool(name.into()))
    }

    /// Build from here on as `plan` says: the declared pools, with those it rolls back at the
    /// template they go back to.
    fn carry(&self, plan: &Plan) {
        *locked(&self.pools) = pools_of(&plan.desired_for(self.desired));
    }

    /// The rollout settings of a pool; a pruned pool is no longer declared and retires with
    /// the defaults.
    fn rollout_of(&self, pool: &str) -> crate::spec::RolloutSpec {
        self.pool(pool).map(|p| p.pool.spec.rollout.clone()).unwrap_or_default()
    }

    /// The creation chains of the batch `pool` is carrying out.
    fn creations_of(&self, pool: &str) -> Option<Arc<CreationChains>> {
        locked(&self.creations).get(pool).cloned()
    }

    /// The drain turn of the cluster `pool`'s Nodes live in: the same for every pool of that
    /// cluster, told by its identity (the UID of its `kube-system`, else its server).
    fn drain_turn(&self, pool: &str) -> Arc<tokio::sync::Mutex<()>> {
        let key = self.clusters.get(pool).map(|c| c.identity().key().to_owned());
        let mut turns = locked(&self.drain_turns.0);
        Arc::clone(turns.entry(key.unwrap_or_default()).or_default())
    }

    /// Take the drain turn of `pool`'s cluster for the Node `node`, unless it holds it.
    async fn take_turn(&self, pool: &str, node: &str) {
        if locked(&self.turns_held).contains_key(node) {
            return;
        }
        let turn = self.drain_turn(pool).lock_owned().await;
        locked(&self.turns_held).insert(node.to_owned(), turn);
    }

    fn cluster(&self, pool: &str) -> Result<&K, StepError> {
        self.clusters.get(pool).ok_or_else(|| StepError::NoCluster(pool.into()))
    }
}

/// What was not up at a look within the window a new instance must stay up.
enum Flap {
    /// The container: why, as Docker says (its HEALTHCHECK failing, restarting).
    Container(String),
    /// The Node: not Ready.
    Node,
}

/// Gives the drain turn a retired instance's Node holds back when its chain ends, however.
struct GiveTurnBack<'e, 'a, C, K> {
    executor: &'e Executor<'a, C, K>,
    node: &'e str,
}

impl<C, K> Drop for GiveTurnBack<'_, '_, C, K> {
    fn drop(&mut self) {
        self.executor.give_turn(self.node);
    }
}

/// Whether `step` retires an instance of the template the pool rolls out to (an attempt that
/// never came up, a surplus): a step, but not one towards that template, so it is no progress.
/// Otherwise, it retires an outdated instance: the rollout stepped forward.
fn retires_current(pool: &PoolPlan, step: &Step) -> bool {
    pool.instances
        .iter()
        .any(|i| i.name == step.instance && Some(&i.template_hash) == pool.template_hash.as_ref())
}

/// The live settings of `pool`'s template, and the template an instance runs once they are
/// applied to it.
fn live_update(pool: &DesiredPool) -> crate::backend::LiveUpdate {
    let template = &pool.pool.spec.template;
    crate::backend::LiveUpdate {
        memory: template.memory.clone(),
        cpus: template.cpus.clone(),
        pids_limit: template.pids_limit,
        restart: template.restart.clone(),
        template_hash: pool.template_hash.clone(),
        template: crate::spec::canonical_template(&pool.pool.spec),
    }
}

/// The labels of a pool's records (an instance's up record, the pool's rollout and revision
/// records): its pool's, and the template's own, so that whatever finds (or removes) the pool's
/// containers by one of those finds the record too.
pub(crate) fn record_labels(pool: &DesiredPool) -> BTreeMap<String, String> {
    let mut labels = pool.pool.spec.template.labels.clone();
    labels.insert(labels::POOL.into(), pool.name().into());
    labels
}

/// Converge a Node's labels and taints on the pool's `node:` section (the pool label included),
/// and write poolctl's reference to its container (what proves the Node poolctl's) in the same
/// update.
async fn configure_node<K: Cluster>(
    cluster: &K,
    pool: &str,
    spec: &crate::spec::NodeSpec,
    name: &str,
    reference: Option<&InstanceRef>,
) -> Result<(), BackendError> {
    let mut wanted = spec.labels.clone();
    wanted.insert(labels::POOL.into(), pool.into());
    cluster.configure(name, &wanted, &spec.taints, reference).await
}

/// A step and its 1-based number in the whole plan, as the plan text shows it.
type Numbered<'a> = (usize, &'a Step);

/// One batch of a pool's plan: the chains of new instances (create, bootstrap, await-ready),
/// then the chains of retired instances (cordon, drain, stop, delete-node, remove), each chain
/// one instance's steps in plan order.
struct Batch<'a> {
    creations: Vec<Vec<Numbered<'a>>>,
    retirements: Vec<Vec<Numbered<'a>>>,
}

impl<'a> Batch<'a> {
    fn all(&self) -> impl Iterator<Item = Numbered<'a>> + '_ {
        self.creations.iter().chain(&self.retirements).flatten().copied()
    }
}

/// Split a pool's steps into batches; `offset` is the number of steps of the pools before it.
fn batches(pool: &PoolPlan, offset: usize) -> Vec<Batch<'_>> {
    let mut out: Vec<Batch<'_>> = Vec::new();
    let mut current = None;
    for (i, step) in pool.steps.iter().enumerate() {
        let numbered = (offset + i + 1, step);
        if current != Some(step.batch) {
            out.push(Batch { creations: Vec::new(), retirements: Vec::new() });
            current = Some(step.batch);
        }
        let batch = out.last_mut().expect("pushed above");
        let chains = if step.action.is_retirement() { &mut batch.retirements } else { &mut batch.creations };
        if let Some(chain) = chains.iter_mut().find(|c| c[0].1.instance == step.instance) {
            chain.push(numbered);
        } else {
            chains.push(vec![numbered]);
        }
    }
    out
}

#[cfg(test)]
mod tests;
