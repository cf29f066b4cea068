//! Kubernetes through kube-rs: observing a pool's Nodes, and the Node half of an instance's
//! life (await Ready, label and taint, cordon, PDB-respecting drain, delete).
//!
//! Matching rule: an instance's Node is the Node named like its container (the container's
//! hostname, which a kubelet registers by default). Once Ready, poolctl labels the Node with
//! `poolctl.dev/pool=<pool>`, so a Node is the pool's when it carries that label, is named after
//! one of its containers, or is recorded as joining in the pool's Lease ([`lease`]); a Node of
//! the pool without a container is an orphan, and deleted.
//! Observing reads only the pool, never the whole cluster ([`scope`]).
//!
//! kube's client retries 429 and 503 answers by itself by default; that is turned off here,
//! because a 429 to an eviction is a PodDisruptionBudget speaking, which poolctl must report
//! and bound by the drain timeout. Transient failures are retried by [`retrying`] instead,
//! within each step's own deadline; what is transient is decided in [`errors`].
//!
//! Every call is bounded twice: by the step's deadline, and by connect and read timeouts on
//! the connection (kube sets no read timeout: a server that accepts and never answers would
//! hold a call for ever), so that a dead connection is given up and retried while the step
//! still has time.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node as K8sNode};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::{Map, Value, json};
use tokio::time::{Instant, sleep, timeout_at};

use crate::backend::retry::Backoff;

/// How long the API server may take to tell its time; past it, this process's clock stands in.
const CLOCK_TIMEOUT: Duration = Duration::from_secs(5);
use crate::backend::{BackendError, Cluster, Connect, DrainEnd, LockRecord, ServerVersion};
use crate::model::{ClusterIdentity, ClusterRef, InstanceRef, Node, Pdb, Pod, labels};
use crate::spec::{IN_CLUSTER, Taint};

mod cache;
mod convert;
mod drain;
mod errors;
mod escalate;
mod events;
mod gone;
mod incluster;
mod kept;
mod kubeconfig;
mod lease;
mod marks;
mod scope;

pub(crate) use errors::cause_chain;
pub use kept::KeptConnect;
pub use lease::{LEASE_NAMESPACE, lease_name};
pub(crate) use marks::MAX_BACKOFF as FOLLOW_MAX_BACKOFF;

use convert::{node_from, taint_to};
use errors::{Class, classify, reason};

/// How long a single API call that has no step deadline of its own keeps being retried.
const API_RETRY_WINDOW: Duration = Duration::from_secs(30);

/// How long reading the API server's version is retried, for the version-skew preflight: an
/// API server answers `/version` at once, and one that cannot within this would fail the
/// rollout's first Ready wait anyway.
const VERSION_TIMEOUT: Duration = Duration::from_secs(10);

/// TCP connect plus TLS handshake: an API server on a local network answers in milliseconds.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest silence while a request is sent or its answer read. Shorter than
/// [`API_RETRY_WINDOW`], so that a connection that went dead is retried within the window.
const READ_TIMEOUT: Duration = Duration::from_secs(15);

/// A watch asks the server to end it after this long, well within [`READ_TIMEOUT`]: a Node
/// that does not change sends nothing, and that silence must not pass for a dead server.
const WATCH_WINDOW: u32 = 10;

/// How many times in a row a new connection that "was not ready" is asked again at once, before
/// it counts as a transient failure: on a loaded machine the second try can meet the same race.
const MAX_POOL_RACES: u32 = 3;

/// A kube client for `config` (of the API server at `server`).
fn client_of(config: Config, server: &str) -> Result<Client, BackendError> {
    Client::try_from(config).map_err(|e| {
        BackendError::Failed(format!(
            "cannot build a Kubernetes client for {server}: {}",
            errors::cause_chain(&e)
        ))
    })
}

/// Set poolctl's timeouts on a kube `Config`.
fn bound(config: &mut Config) {
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    config.read_timeout = Some(READ_TIMEOUT);
    config.write_timeout = Some(READ_TIMEOUT);
    // Count the read timeout from when a request goes out, not from when its pooled
    // connection went idle.
    config.reset_reader_on_write = true;
}

/// One pool's view of its cluster.
#[derive(Clone)]
pub struct KubeCluster {
    client: Client,
    pool: String,
    /// The API server URL, for error messages.
    server: String,
    /// Which cluster this is, as recorded on the containers poolctl creates.
    identity: ClusterIdentity,
    /// The watch-backed lists of `watch`; `None` for a one-shot plan or apply.
    cache: Option<std::sync::Arc<cache::Cache>>,
    /// What it tells the cluster through Events.
    teller: events::Teller,
    /// The configuration it was built from, bounded: the cache builds its watch client from it.
    config: std::sync::Arc<Config>,
    /// What the pool's Lease said of its suspension and reconcile request at the last read of
    /// its Nodes (see [`Cluster::marks`]); shared by the clones of a kept client.
    marks: std::sync::Arc<std::sync::Mutex<crate::backend::LeaseMarks>>,
}

impl KubeCluster {
    /// Connect as the pool's `node:` section says: its kubeconfig (else `$KUBECONFIG`, else,
    /// in a Pod, the Pod's service account, else `~/.kube/config`) and context (else the current
    /// one); `in-cluster` names the Pod's service account ([`incluster`]).
    pub async fn connect(
        kubeconfig: Option<&str>,
        context: Option<&str>,
        pool: &str,
    ) -> Result<Self, BackendError> {
        let cluster =
            ClusterRef { kubeconfig: kubeconfig.map(str::to_owned), context: context.map(str::to_owned) };
        let around = incluster::Surroundings::of_process();
        if incluster::chosen(&cluster, around) {
            return Self::from_config(incluster::config(around)?, pool)?.identified(IN_CLUSTER).await;
        }
        let mut kc = kubeconfig::load(kubeconfig)?;
        // The context the connection uses, named: "the current one" is what changes under a
        // `kubectl config use-context`, and the name is what the user recognises.
        let resolved = context.map(str::to_owned).or_else(|| kc.current_context.clone()).unwrap_or_default();
        kubeconfig::resolve_credentials(&mut kc, &resolved)?;
        Self::from_kubeconfig(kc, context, pool).await?.identified(&resolved).await
    }

    /// Build from a kubeconfig already read, without talking to the cluster yet.
    async fn from_kubeconfig(
        kc: Kubeconfig,
        context: Option<&str>,
        pool: &str,
    ) -> Result<Self, BackendError> {
        let options =
            KubeConfigOptions { context: context.map(str::to_owned), ..KubeConfigOptions::default() };
        let config = Config::from_custom_kubeconfig(kc, &options)
            .await
            .map_err(|e| BackendError::Failed(format!("cannot load the kubeconfig: {e}")))?;
        Self::from_config(config, pool)
    }

    /// Learn which cluster this is: `context` as resolved, the server URL, and the UID of the
    /// `kube-system` Namespace, which a cluster keeps for its whole life. A cluster that does
    /// not let poolctl read that Namespace is known by its URL alone.
    pub async fn identified(mut self, context: &str) -> Result<Self, BackendError> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let deadline = Instant::now() + API_RETRY_WINDOW;
        let read = || async {
            match api.get_opt("kube-system").await {
                Err(kube::Error::Api(s)) if s.code == 403 => Ok(None),
                other => other,
            }
        };
        // The first contact: a cluster that refuses connections (stopped) is told at once.
        let what = "read the kube-system Namespace";
        let namespace = self.retrying_if(what, deadline, errors::retry_first_contact, read).await?;
        self.identity.context = context.to_owned();
        self.identity.uid = namespace.and_then(|n| n.metadata.uid);
        Ok(self)
    }

    /// Which cluster this is.
    pub fn identity(&self) -> &ClusterIdentity {
        &self.identity
    }

    /// Build from a ready kube `Config` (tests point it at a fake API server).
    pub fn from_config(mut config: Config, pool: &str) -> Result<Self, BackendError> {
        config.default_retry = false;
        bound(&mut config);
        let server = config.cluster_url.to_string();
        let client = client_of(config.clone(), &server)?;
        let identity = ClusterIdentity { context: String::new(), server: server.clone(), uid: None };
        let teller = events::Teller::new(client.clone());
        let config = std::sync::Arc::new(config);
        let marks = std::sync::Arc::default();
        Ok(Self { client, pool: pool.to_owned(), server, identity, cache: None, teller, config, marks })
    }

    /// Keep the pool's lists in memory from now on, followed by watches, so that observing a
    /// pool where nothing changed sends no list (see [`cache`]). The watches go through a client
    /// of their own whose read timeout outlasts the watch: a quiet cluster sends nothing for
    /// as long as the server keeps a watch open, and that silence is no failure.
    pub fn with_cache(mut self) -> Result<Self, BackendError> {
        let mut config = Config::clone(&self.config);
        config.read_timeout = Some(cache::WATCH_READ_TIMEOUT);
        let watcher = client_of(config, &self.server)?;
        self.cache = Some(std::sync::Arc::new(cache::Cache::new(watcher)));
        Ok(self)
    }

    /// A write through this client: lists made before it are not trusted any more.
    fn wrote(&self) {
        if let Some(cache) = &self.cache {
            cache.wrote();
        }
    }

    fn nodes_api(&self) -> Api<K8sNode> {
        Api::all(self.client.clone())
    }

    fn unreachable(&self, reason: String) -> BackendError {
        BackendError::Unreachable { what: "the Kubernetes API server", at: self.server.clone(), reason }
    }

    fn error(&self, what: &str, e: &kube::Error) -> BackendError {
        match classify(e) {
            Class::Transient => self.unreachable(format!("{what}: {}", reason(e))),
            Class::Rejected => BackendError::Rejected {
                what: "the Kubernetes API server",
                at: self.server.clone(),
                reason: reason(e),
            },
            Class::Final => BackendError::Failed(format!("{what}: {}", reason(e))),
        }
    }

    /// The error for a call that had no answer by its step's deadline.
    fn no_answer(&self, what: &str, waited: Duration, last: Option<&str>) -> BackendError {
        // In whole seconds, rounded: an attempt cut at a 30s deadline waited 29.99s of it.
        let secs = u64::try_from((waited.as_millis() + 500) / 1000).unwrap_or(u64::MAX).max(1);
        let waited = crate::spec::Duration::from(Duration::from_secs(secs));
        self.unreachable(match last {
            Some(last) => format!("{what}: no answer within {waited} (before that: {last})"),
            None => format!("{what}: no answer within {waited}"),
        })
    }

    /// Run `op` until it succeeds, fails for good, or `deadline` passes; transient failures
    /// (no answer, connection refused or reset, timeouts, 5xx, 429) are retried with backoff.
    /// An attempt still waiting at the deadline is given up.
    async fn retrying<T, F, Fut>(&self, what: &str, deadline: Instant, op: F) -> Result<T, BackendError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        self.retrying_if(what, deadline, |e| classify(e) == Class::Transient, op).await
    }

    /// [`Self::retrying`], with `worth` deciding which failures are retried.
    async fn retrying_if<T, F, Fut>(
        &self,
        what: &str,
        deadline: Instant,
        worth: fn(&kube::Error) -> bool,
        mut op: F,
    ) -> Result<T, BackendError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        let start = Instant::now();
        let mut backoff = Backoff::api();
        let mut last = None;
        // How many times a connection that was not ready was asked again at once.
        let mut pool_races = 0;
        loop {
            let e = match timeout_at(deadline, op()).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) => e,
                Err(_) => return Err(self.no_answer(what, start.elapsed(), last.as_deref())),
            };
            // hyper hands out a new connection before its TLS handshake is known to have
            // succeeded; when the server refuses it (a client certificate it does not trust,
            // told only after the handshake in TLS 1.3), the request fails as "canceled: connection
            // was not ready" without the cause. Asking once more at once gets the cause, or the
            // answer, without a warning for what is no outage.
            if pool_races < MAX_POOL_RACES
                && classify(&e) == Class::Transient
                && reason(&e).contains("connection was not ready")
            {
                pool_races += 1;
                tracing::debug!("{what} at {}: {}; asking again at once", self.server, reason(&e));
                continue;
            }
            if worth(&e) && Instant::now() + backoff.peek() < deadline {
                let why = reason(&e);
                tracing::warn!("{what} at {}: {why}; retrying", self.server);
                last = Some(why);
                backoff.wait().await;
            } else {
                return Err(self.error(what, &e));
            }
        }
    }

    async fn patch_node(&self, node: &str, what: &str, patch: serde_json::Value) -> Result<(), BackendError> {
        self.wrote();
        let api = self.nodes_api();
        let deadline = Instant::now() + API_RETRY_WINDOW;
        let (params, patch) = (PatchParams::default(), Patch::Merge(&patch));
        self.retrying(what, deadline, || api.patch(node, &params, &patch)).await.map(drop)
    }
}

/// Connects with kube-rs, through kubeconfig files, as kubectl would.
#[derive(Debug, Clone, Copy, Default)]
pub struct KubeConnect;

impl Connect for KubeConnect {
    type Cluster = KubeCluster;
    async fn connect(&self, cluster: &ClusterRef, pool: &str) -> Result<KubeCluster, BackendError> {
        KubeCluster::connect(cluster.kubeconfig.as_deref(), cluster.context.as_deref(), pool).await
    }
}

impl Cluster for KubeCluster {
    async fn nodes(&self, names: &[String]) -> Result<Vec<Node>, BackendError> {
        self.pool_nodes(names).await
    }

    async fn note_joining(&self, name: &str) -> Result<(), BackendError> {
        let now = crate::model::timestamp(std::time::SystemTime::now());
        self.annotate_lease(&self.pool, Map::from_iter([(lease::joining_key(name), Value::String(now))]))
            .await
    }

    /// One read of the Lease for both the lock and the names.
    async fn joining(&self, held: &LockRecord) -> Result<Option<Vec<String>>, BackendError> {
        let lease = self.get_lease(&self.pool).await?;
        let ours = lease.as_ref().and_then(lease::record_from).is_some_and(|r| r.holder.is(&held.holder));
        Ok(lease.filter(|_| ours).map(|l| lease::joining_of(&l, &self.pool)))
    }

    async fn forget_joining(&self, names: &[String]) -> Result<(), BackendError> {
        if names.is_empty() {
            return Ok(());
        }
        let annotations = names.iter().map(|n| (lease::joining_key(n), Value::Null)).collect();
        self.annotate_lease(&self.pool, annotations).await
    }

    fn marks(&self) -> crate::backend::LeaseMarks {
        crate::locked(&self.marks).clone()
    }

    async fn suspension(&self) -> Result<Option<crate::model::Suspension>, BackendError> {
        Ok(self.get_lease(&self.pool).await?.and_then(|l| marks::marks_of(&l).suspension))
    }

    async fn suspend(
        &self,
        by: &str,
        reason: Option<&str>,
    ) -> Result<crate::model::Suspension, BackendError> {
        self.suspend_on_lease(by, reason).await
    }

    async fn resume(&self) -> Result<(), BackendError> {
        let keys = [labels::SUSPENDED_BY, labels::SUSPENDED_AT, labels::SUSPEND_REASON];
        self.annotate_lease(&self.pool, keys.iter().map(|k| ((*k).to_owned(), Value::Null)).collect()).await
    }

    /// A request is told from the next by its value: this process's time, to the nanosecond.
    async fn request_reconcile(&self) -> Result<(), BackendError> {
        let at = Value::String(k8s_openapi::jiff::Timestamp::now().to_string());
        self.annotate_lease(&self.pool, Map::from_iter([(labels::RECONCILE_REQUESTED_AT.to_owned(), at)]))
            .await
    }

    async fn consume_request(&self) -> Result<(), BackendError> {
        self.consume_on_lease().await
    }

    async fn pods_and_pdbs(&self, nodes: &[String]) -> Result<(Vec<Pod>, Vec<Pdb>), BackendError> {
        self.pods_of(nodes).await
    }

    async fn await_ready(&self, node: &str, timeout: Duration) -> Result<(), BackendError> {
        let deadline = Instant::now() + timeout;
        let api = self.nodes_api();
        let fields = format!("metadata.name={node}");
        let list_params = ListParams::default().fields(&fields);
        let timed_out =
            || BackendError::Timeout { what: format!("Node {node} did not turn Ready"), after: timeout };
        // List, then watch from the list's resourceVersion; when the watch ends or breaks,
        // list again, so no transition can slip between the two.
        loop {
            // A watch that ended just at the deadline: the Node is late, the server is fine.
            if Instant::now() >= deadline {
                return Err(timed_out());
            }
            // A server that does not answer is named as such, not taken for a slow Node.
            let list = self.retrying("list node", deadline, || api.list(&list_params)).await?;
            if list.items.iter().any(|n| node_from(n).ready) {
                return Ok(());
            }
            let state = if list.items.is_empty() { "has not registered yet" } else { "is NotReady" };
            crate::backend::waiting::note(node, format!("the Node to turn Ready: it {state}"));
            let version = list.metadata.resource_version.unwrap_or_default();
            let remaining = deadline.saturating_duration_since(Instant::now()).as_secs();
            let window = u32::try_from(remaining).unwrap_or(WATCH_WINDOW).clamp(1, WATCH_WINDOW);
            let params = WatchParams::default().fields(&fields).timeout(window);
            // Ok(true): Ready. Ok(false): the watch ended; list again. Err: a refusal that
            // another try will not change (forbidden, say), which must not pass for a Node that
            // is merely slow.
            let watched = timeout_at(deadline, async {
                let mut stream = match api.watch(&params, &version).await {
                    Ok(stream) => stream.boxed(),
                    Err(e) if classify(&e) == Class::Transient => return Ok(false),
                    Err(e) => return Err(self.error(&format!("watch node {node}"), &e)),
                };
                while let Some(event) = stream.next().await {
                    match event {
                        Ok(WatchEvent::Added(n) | WatchEvent::Modified(n)) if node_from(&n).ready => {
                            return Ok(true);
                        }
                        // The server ended the watch (410 Gone, say): list again.
                        Ok(WatchEvent::Error(_)) => return Ok(false),
                        Ok(_) => {}
                        Err(e) if classify(&e) == Class::Transient => return Ok(false),
                        Err(e) => return Err(self.error(&format!("watch node {node}"), &e)),
                    }
                }
                Ok(false)
            })
            .await;
            match watched {
                Ok(Ok(true)) => return Ok(()),
                Ok(Ok(false)) => sleep(Duration::from_millis(200)).await,
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err(timed_out()),
            }
        }
    }

    async fn node(&self, name: &str) -> Result<Option<Node>, BackendError> {
        let api = self.nodes_api();
        let deadline = Instant::now() + API_RETRY_WINDOW;
        Ok(self.retrying("get node", deadline, || api.get_opt(name)).await?.as_ref().map(node_from))
    }

    fn identity(&self) -> &ClusterIdentity {
        &self.identity
    }

    async fn clock(&self) -> Option<i64> {
        // `/version`, which every client may read (system:public-info-viewer); only its `Date`.
        let request = hyper::Request::get("/version").body(kube::client::Body::from(Vec::new())).ok()?;
        let answer = tokio::time::timeout(CLOCK_TIMEOUT, self.client.send(request)).await.ok()?.ok()?;
        let date = answer.headers().get(hyper::header::DATE)?.to_str().ok()?;
        let at = k8s_openapi::jiff::fmt::rfc2822::parse(date).ok()?;
        Some(at.timestamp().as_second())
    }

    async fn server_version(&self) -> Result<ServerVersion, BackendError> {
        // `/version`, which every client may read (system:public-info-viewer).
        let deadline = Instant::now() + VERSION_TIMEOUT;
        let info = self.retrying("read the version", deadline, || self.client.apiserver_version()).await?;
        Ok(ServerVersion { git_version: info.git_version, major: info.major, minor: info.minor })
    }

    async fn configure(
        &self,
        node: &str,
        node_labels: &BTreeMap<String, String>,
        taints: &[Taint],
        reference: Option<&InstanceRef>,
    ) -> Result<(), BackendError> {
        let current = self.node(node).await?.ok_or_else(|| BackendError::NotFound(format!("Node {node}")))?;
        let change = current.config.change_towards(node_labels, taints, labels::POOL, current.ready);
        let new_reference = reference.filter(|r| current.reference.as_ref() != Some(*r));
        if change.is_none() && new_reference.is_none() {
            return Ok(());
        }
        let mut patch = json!({ "metadata": { "annotations": {} } });
        if let Some(change) = &change {
            let mut set: serde_json::Map<String, serde_json::Value> =
                change.set.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
            // A null in a merge patch removes the key.
            set.extend(change.remove.iter().map(|k| (k.clone(), serde_json::Value::Null)));
            patch["metadata"]["labels"] = serde_json::Value::Object(set);
            patch["metadata"]["annotations"][labels::MANAGED] = json!(change.managed.join(","));
            if change.taints != current.config.taints {
                // A merge patch replaces the whole list: it carries everybody else's taints too.
                patch["spec"] = json!({ "taints": change.taints.iter().map(taint_to).collect::<Vec<_>>() });
            }
        }
        // In the same update as the labels: a Node that carries the pool label by poolctl's
        // hand carries its proof too.
        if let Some(reference) = new_reference {
            patch["metadata"]["annotations"][labels::CONTAINER_ID] = json!(reference.container_id);
            patch["metadata"]["annotations"][labels::DOCKER_HOST] = json!(reference.docker_host);
        }
        self.patch_node(node, "label node", patch).await
    }

    async fn cordon(&self, node: &str) -> Result<(), BackendError> {
        let patch = json!({
            "metadata": { "annotations": { labels::RETIRING: "cordoned by poolctl to retire this instance" } },
            "spec": { "unschedulable": true }
        });
        self.patch_node(node, "cordon node", patch).await
    }

    async fn drain(
        &self,
        node: &str,
        timeout: Duration,
        drain: &crate::spec::DrainSpec,
        guard: &crate::backend::LockGuard,
        news: crate::backend::DrainNews<'_>,
    ) -> Result<DrainEnd, BackendError> {
        self.wrote();
        self.drain_node(node, timeout, drain, guard, news).await
    }

    async fn attached_volumes(&self, node: &str) -> Result<Vec<String>, BackendError> {
        use k8s_openapi::api::storage::v1::VolumeAttachment;
        let deadline = Instant::now() + API_RETRY_WINDOW;
        let nodes = self.nodes_api();
        let found = self.retrying("get node", deadline, || nodes.get_opt(node)).await?;
        let mut held: Vec<String> = found
            .and_then(|n| n.status)
            .and_then(|s| s.volumes_attached)
            .unwrap_or_default()
            .into_iter()
            .map(|v| v.name)
            .collect();
        // VolumeAttachments have no field selector for their node: list them all, as Cluster
        // API does. A 403 is not retried: it would only turn into a hang of the retirement.
        let api: Api<VolumeAttachment> = Api::all(self.client.clone());
        let params = ListParams::default();
        let list = || async {
            match api.list(&params).await {
                Err(kube::Error::Api(s)) if s.code == 403 => Ok(None),
                other => other.map(Some),
            }
        };
        let Some(list) = self.retrying("list VolumeAttachments", deadline, list).await? else {
            return Err(BackendError::Failed(format!(
                "cannot tell whether the volumes of {node} are detached: {} refuses to list \
                 VolumeAttachments (storage.k8s.io/v1) to these credentials; grant list on \
                 volumeattachments, or annotate the Node {} to skip the wait",
                self.server,
                crate::model::labels::EXCLUDE_VOLUME_DETACH
            )));
        };
        held.extend(
            list.items
                .into_iter()
                .filter(|a| a.spec.node_name == node)
                .map(|a| format!("VolumeAttachment {}", a.metadata.name.unwrap_or_default())),
        );
        Ok(held)
    }

    async fn delete_node(&self, node: &str) -> Result<(), BackendError> {
        self.wrote();
        let api = self.nodes_api();
        let deadline = Instant::now() + API_RETRY_WINDOW;
        let params = DeleteParams::default();
        let delete = || async {
            match api.delete(node, &params).await {
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                other => other.map(drop),
            }
        };
        self.retrying("delete node", deadline, delete).await
    }

    async fn tell(&self, node: Option<&str>, reason: &'static str, text: String, warning: bool) {
        self.publish(node, reason, text, warning).await;
    }
}
