//! The backends: the small traits that observe and the executor drive, in the project's own
//! types, so that the same code runs against Docker + Kubernetes and against in-memory fakes;
//! their two implementations ([`docker`] with bollard, [`kube`] with kube-rs); and the one
//! [`retry`] policy both use.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use crate::model::{ClusterIdentity, ClusterRef, Container, Node, Pdb, Pod};
use crate::spec::Taint;

pub mod docker;
pub mod kube;
pub mod retry;

/// Why a backend call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// The daemon or API server could not be reached.
    #[error("cannot reach {what} at {at}: {reason}")]
    Unreachable { what: &'static str, at: String, reason: String },
    /// The object does not exist.
    #[error("{0} not found")]
    NotFound(String),
    /// The operation did not finish in time.
    #[error("{what}: timed out after {}", crate::spec::Duration::from(*after))]
    Timeout { what: String, after: Duration },
    /// Anything else, with the backend's own words.
    #[error("{0}")]
    Failed(String),
}

/// A container to create, fully resolved from a pool template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewContainer {
    pub name: String,
    pub image: String,
    pub command: Option<Vec<String>>,
    pub entrypoint: Option<Vec<String>>,
    pub env: BTreeMap<String, String>,
    /// The template's labels plus poolctl's own.
    pub labels: BTreeMap<String, String>,
    pub network: Option<String>,
    pub privileged: bool,
    pub volumes: Vec<String>,
    pub tmpfs: Vec<String>,
}

/// What an exec inside a container ended with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    pub exit_code: i64,
    /// Stdout and stderr, interleaved, truncated to a few KiB.
    pub output: String,
}

/// Docker, as the executor sees it.
pub trait Containers: Sync {
    /// Every pool container (one list call).
    fn list(&self) -> impl Future<Output = Result<Vec<Container>, BackendError>> + Send;
    /// Make sure the image is present locally, pulling it if not. Returns whether it pulled.
    fn ensure_image(&self, image: &str) -> impl Future<Output = Result<bool, BackendError>> + Send;
    /// Whether the named network exists.
    fn network_exists(&self, name: &str) -> impl Future<Output = Result<bool, BackendError>> + Send;
    /// Create and start a container.
    fn create(&self, spec: &NewContainer) -> impl Future<Output = Result<(), BackendError>> + Send;
    /// Run a command in a running container and wait for it, up to `timeout`.
    fn exec(
        &self,
        name: &str,
        argv: &[String],
        timeout: Duration,
    ) -> impl Future<Output = Result<ExecOutput, BackendError>> + Send;
    /// Wait until the container runs and, if its image has a HEALTHCHECK, is healthy.
    fn wait_up(&self, name: &str, timeout: Duration)
    -> impl Future<Output = Result<(), BackendError>> + Send;
    /// Stop the container, giving it `grace` between SIGTERM and SIGKILL. Stopping a stopped
    /// container succeeds.
    fn stop(&self, name: &str, grace: Duration) -> impl Future<Output = Result<(), BackendError>> + Send;
    /// Remove the container. Removing a missing container succeeds.
    fn remove(&self, name: &str) -> impl Future<Output = Result<(), BackendError>> + Send;
}

/// Kubernetes, as the executor sees it: one cluster, as named by a pool's `node:` section.
pub trait Cluster: Sync {
    /// Nodes that carry the `poolctl.dev/pool` label, or whose names are given (the pool's
    /// containers): never a list of the whole cluster.
    fn nodes(&self, names: &[String]) -> impl Future<Output = Result<Vec<Node>, BackendError>> + Send;
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
    /// Converge the Node's labels (the pool label included) and taints on these, as
    /// [`crate::model::NodeConfig::change_towards`] says, reading the Node as it is now.
    fn configure(
        &self,
        node: &str,
        labels: &BTreeMap<String, String>,
        taints: &[Taint],
    ) -> impl Future<Output = Result<(), BackendError>> + Send;
    /// Mark the Node unschedulable, with poolctl's retirement annotation.
    fn cordon(&self, node: &str) -> impl Future<Output = Result<(), BackendError>> + Send;
    /// Evict every pod that `kubectl drain` would, respecting PodDisruptionBudgets, and wait
    /// until they are gone, within `timeout`.
    fn drain(&self, node: &str, timeout: Duration) -> impl Future<Output = Result<(), BackendError>> + Send;
    /// Delete the Node object. Deleting a missing Node succeeds.
    fn delete_node(&self, node: &str) -> impl Future<Output = Result<(), BackendError>> + Send;
}

/// Connecting to the cluster a pool's Nodes live in, as a pool's `node:` section (or its
/// containers' labels) name it.
pub trait Connect: Sync {
    type Cluster: Cluster + Send + Sync;
    /// Connect to `cluster` on behalf of `pool` (the pool's label selects its Nodes).
    fn connect(
        &self,
        cluster: &ClusterRef,
        pool: &str,
    ) -> impl Future<Output = Result<Self::Cluster, BackendError>> + Send;
}
