//! Kubernetes through kube-rs: observing a pool's Nodes, and the Node half of an instance's
//! life (await Ready, label and taint, cordon, PDB-respecting drain, delete).
//!
//! Matching rule: an instance's Node is the Node named like its container (the container's
//! hostname, which a kubelet registers by default). Once Ready, poolctl labels the Node with
//! `poolctl.dev/pool=<pool>`, so a Node is the pool's when it carries that label or is named
//! after one of its containers; a labelled Node without a container is an orphan, and deleted.
//!
//! kube's client retries 429 and 503 answers by itself by default; that is turned off here,
//! because a 429 to an eviction is a PodDisruptionBudget speaking, which poolctl must report
//! and bound by the drain timeout. Transient failures are retried by [`retrying`] instead,
//! within each step's own deadline.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use futures::StreamExt;
use futures::future::join_all;
use k8s_openapi::api::core::v1::{Node as K8sNode, Pod as K8sPod, Taint as K8sTaint};
use k8s_openapi::api::policy::v1::{Eviction, PodDisruptionBudget};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::json;
use tokio::time::{Instant, sleep, timeout_at};

use crate::backend::{BackendError, Cluster};
use crate::plan::labels;
use crate::spec::Taint;
use crate::world::{Node, Pdb, Pod};

/// How long a single API call that has no step deadline of its own keeps being retried.
const API_RETRY_WINDOW: Duration = Duration::from_secs(30);

/// One pool's view of its cluster.
#[derive(Clone)]
pub struct KubeCluster {
    client: Client,
    pool: String,
    /// The API server URL, for error messages.
    server: String,
}

impl KubeCluster {
    /// Connect as the pool's `node:` section says: its kubeconfig (else `$KUBECONFIG`, else
    /// `~/.kube/config`) and context (else the current one).
    pub async fn connect(
        kubeconfig: Option<&str>,
        context: Option<&str>,
        pool: &str,
    ) -> Result<Self, BackendError> {
        let options =
            KubeConfigOptions { context: context.map(str::to_owned), ..KubeConfigOptions::default() };
        let config = match kubeconfig {
            Some(path) => {
                let path = expand_home(path);
                let kc = Kubeconfig::read_from(&path)
                    .map_err(|e| BackendError::Failed(format!("cannot read kubeconfig {path}: {e}")))?;
                Config::from_custom_kubeconfig(kc, &options).await
            }
            None => Config::from_kubeconfig(&options).await,
        }
        .map_err(|e| BackendError::Failed(format!("cannot load the kubeconfig: {e}")))?;
        Self::from_config(config, pool)
    }

    /// Build from a ready kube `Config` (tests point it at a fake API server).
    pub fn from_config(mut config: Config, pool: &str) -> Result<Self, BackendError> {
        config.default_retry = false;
        let server = config.cluster_url.to_string();
        let client = Client::try_from(config).map_err(|e| {
            BackendError::Failed(format!("cannot build a Kubernetes client for {server}: {e}"))
        })?;
        Ok(Self { client, pool: pool.to_owned(), server })
    }

    fn nodes_api(&self) -> Api<K8sNode> {
        Api::all(self.client.clone())
    }

    fn unreachable(&self, e: &kube::Error) -> BackendError {
        BackendError::Unreachable {
            what: "the Kubernetes API server",
            at: self.server.clone(),
            reason: e.to_string(),
        }
    }

    fn error(&self, what: &str, e: &kube::Error) -> BackendError {
        if is_transient(e) {
            self.unreachable(e)
        } else {
            BackendError::Failed(format!("{what}: {}", api_message(e)))
        }
    }

    /// Run `op` until it succeeds, fails for good, or `deadline` passes; transient failures
    /// (connection refused, 5xx, timeouts) are retried with backoff.
    async fn retrying<T, F, Fut>(&self, what: &str, deadline: Instant, mut op: F) -> Result<T, BackendError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        let mut backoff = Backoff::new();
        loop {
            match op().await {
                Ok(v) => return Ok(v),
                Err(e) if is_transient(&e) && Instant::now() + backoff.peek() < deadline => {
                    tracing::warn!("{what}: {e}; retrying");
                    backoff.wait().await;
                }
                Err(e) => return Err(self.error(what, &e)),
            }
        }
    }

    async fn patch_node(&self, node: &str, what: &str, patch: serde_json::Value) -> Result<(), BackendError> {
        let api = self.nodes_api();
        let deadline = Instant::now() + API_RETRY_WINDOW;
        let (params, patch) = (PatchParams::default(), Patch::Merge(&patch));
        self.retrying(what, deadline, || api.patch(node, &params, &patch)).await.map(drop)
    }
}

impl Cluster for KubeCluster {
    async fn nodes(&self, names: &[String]) -> Result<Vec<Node>, BackendError> {
        let deadline = Instant::now() + API_RETRY_WINDOW;
        let api = self.nodes_api();
        let params = ListParams::default();
        let list = self.retrying("list nodes", deadline, || api.list(&params)).await?;
        Ok(list
            .items
            .iter()
            .map(node_from)
            .filter(|n| n.pool.as_deref() == Some(&self.pool) || names.contains(&n.name))
            .collect())
    }

    async fn pods_and_pdbs(&self, nodes: &[String]) -> Result<(Vec<Pod>, Vec<Pdb>), BackendError> {
        if nodes.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let deadline = Instant::now() + API_RETRY_WINDOW;
        let pods_api: Api<K8sPod> = Api::all(self.client.clone());
        let params = ListParams::default();
        let pods = self.retrying("list pods", deadline, || pods_api.list(&params)).await?;
        let pdb_api: Api<PodDisruptionBudget> = Api::all(self.client.clone());
        let pdbs = self.retrying("list PodDisruptionBudgets", deadline, || pdb_api.list(&params)).await?;
        let pods = pods.items.iter().filter_map(pod_from).filter(|p| nodes.contains(&p.node)).collect();
        Ok((pods, pdbs.items.iter().map(pdb_from).collect()))
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
            let list = self
                .retrying("list node", deadline, || api.list(&list_params))
                .await
                .map_err(|e| if Instant::now() >= deadline { timed_out() } else { e })?;
            if list.items.iter().any(|n| node_from(n).ready) {
                return Ok(());
            }
            let version = list.metadata.resource_version.unwrap_or_default();
            let remaining = deadline.saturating_duration_since(Instant::now()).as_secs().clamp(1, 290);
            let params =
                WatchParams::default().fields(&fields).timeout(u32::try_from(remaining).unwrap_or(290));
            // Ok(true): Ready. Ok(false): the watch ended; list again. Err: a refusal that
            // another try will not change (forbidden, say), which must not pass for a Node that
            // is merely slow.
            let watched = timeout_at(deadline, async {
                let mut stream = match api.watch(&params, &version).await {
                    Ok(stream) => stream.boxed(),
                    Err(e) if is_transient(&e) => return Ok(false),
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
                        Err(e) if is_transient(&e) => return Ok(false),
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

    async fn configure(
        &self,
        node: &str,
        node_labels: &BTreeMap<String, String>,
        taints: &[Taint],
    ) -> Result<(), BackendError> {
        let mut patch = json!({ "metadata": { "labels": node_labels } });
        if !taints.is_empty() {
            // A merge patch replaces the whole list, so keep the taints the Node already has.
            let api = self.nodes_api();
            let deadline = Instant::now() + API_RETRY_WINDOW;
            let current = self.retrying("get node", deadline, || api.get(node)).await?;
            let mut all: Vec<K8sTaint> = current.spec.and_then(|s| s.taints).unwrap_or_default();
            for t in taints {
                if !all.iter().any(|x| x.key == t.key && x.effect == t.effect) {
                    all.push(K8sTaint {
                        key: t.key.clone(),
                        value: t.value.clone(),
                        effect: t.effect.clone(),
                        time_added: None,
                    });
                }
            }
            patch["spec"] = json!({ "taints": all });
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

    async fn drain(&self, node: &str, timeout: Duration) -> Result<(), BackendError> {
        let deadline = Instant::now() + timeout;
        let pods_api: Api<K8sPod> = Api::all(self.client.clone());
        let params = ListParams::default().fields(&format!("spec.nodeName={node}"));
        let list = self.retrying("list pods", deadline, || pods_api.list(&params)).await?;
        // On a Node whose kubelet is gone (an apply killed after the Stop step), an evicted pod
        // stays Terminating until the Node object is deleted: nobody is left to confirm that
        // its containers ended. Like `kubectl drain --skip-wait-for-delete-timeout`, count such
        // a pod as gone once its deletion has been accepted.
        let nodes_api = self.nodes_api();
        let node_ready = match self.retrying("get node", deadline, || nodes_api.get_opt(node)).await? {
            Some(n) => node_from(&n).ready,
            None => false,
        };
        let targets: Vec<&K8sPod> = list
            .items
            .iter()
            .filter(|p| pod_from(p).is_some_and(|p| p.drain_skip_reason().is_none()))
            .collect();
        tracing::info!(node, pods = targets.len(), "draining");
        let results = join_all(targets.iter().map(|p| self.evict_and_wait(p, deadline, node_ready))).await;
        let failures: Vec<String> = results.into_iter().filter_map(Result::err).collect();
        if failures.is_empty() {
            return Ok(());
        }
        let detail = failures.join("; ");
        if Instant::now() >= deadline {
            Err(BackendError::Timeout {
                what: format!("drain of {node} (no PodDisruptionBudget was bypassed): {detail}"),
                after: timeout,
            })
        } else {
            Err(BackendError::Failed(format!("drain of {node}: {detail}")))
        }
    }

    async fn delete_node(&self, node: &str) -> Result<(), BackendError> {
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
}

impl KubeCluster {
    /// Evict one pod through the policy/v1 Eviction subresource, retrying PDB refusals (429)
    /// until `deadline`, then wait until the pod is gone or replaced by a new UID (or, when
    /// `kubelet_alive` is false, merely terminating). Errors are
    /// returned as a line naming the pod and, for refusals, the budget's own message.
    async fn evict_and_wait(
        &self,
        pod: &K8sPod,
        deadline: Instant,
        kubelet_alive: bool,
    ) -> Result<(), String> {
        let ns = pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
        let name = pod.metadata.name.clone().unwrap_or_default();
        let uid = pod.metadata.uid.clone();
        let id = format!("pod {ns}/{name}");
        let api: Api<K8sPod> = Api::namespaced(self.client.clone(), &ns);
        // kube's `Api::evict` sends its options in a shape the server ignores, so post a
        // complete policy/v1 Eviction, with a UID precondition so a replacement pod of the
        // same name is never evicted by mistake.
        let eviction = Eviction {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(ns.clone()),
                ..ObjectMeta::default()
            },
            delete_options: uid.as_ref().map(|uid| {
                k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions {
                    preconditions: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Preconditions {
                        uid: Some(uid.clone()),
                        resource_version: None,
                    }),
                    ..Default::default()
                }
            }),
        };
        let body = json!({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": eviction.metadata,
            "deleteOptions": eviction.delete_options,
        });
        let mut backoff = Backoff::capped(Duration::from_secs(2));
        let mut last_refusal = None;
        loop {
            if Instant::now() >= deadline {
                return Err(last_refusal.map_or_else(
                    || format!("{id}: not evicted in time"),
                    |m| format!("{id} not evicted: {m}"),
                ));
            }
            let answer: Result<serde_json::Value, kube::Error> =
                api.create_subresource("eviction", &name, &PostParams::default(), &body).await;
            match answer {
                // A 2xx can still carry a Failure status (a pod under several budgets, on
                // some API server versions): that is not an eviction.
                Ok(v) if v.get("status").and_then(|s| s.as_str()) == Some("Failure") => {
                    return Err(format!(
                        "{id}: eviction failed: {}",
                        v.get("message").and_then(|m| m.as_str()).unwrap_or("no message")
                    ));
                }
                Ok(_) => break,
                // 404: gone already. 409: the UID precondition failed, so the pod of that name
                // is a replacement and the one we meant to evict is gone.
                Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => return Ok(()),
                Err(kube::Error::Api(status)) if status.code == 429 => {
                    let message = refusal_message(&status);
                    tracing::warn!("{id}: eviction refused, will retry: {message}");
                    last_refusal = Some(message);
                    backoff.wait_until(deadline).await;
                }
                Err(kube::Error::Api(status)) if status.code == 500 || (400..500).contains(&status.code) => {
                    return Err(format!("{id}: eviction failed: {}", status.message));
                }
                Err(e) => {
                    tracing::warn!("{id}: eviction request failed, will retry: {e}");
                    last_refusal = Some(e.to_string());
                    backoff.wait_until(deadline).await;
                }
            }
        }
        tracing::info!("{id}: evicted");
        // Wait until the pod is gone, or its name is taken by a new pod (a new UID).
        let mut backoff = Backoff::capped(Duration::from_secs(1));
        loop {
            match api.get_opt(&name).await {
                Ok(None) => return Ok(()),
                Ok(Some(p)) if p.metadata.uid != uid => return Ok(()),
                Ok(Some(p)) if !kubelet_alive && p.metadata.deletion_timestamp.is_some() => return Ok(()),
                Ok(Some(_)) | Err(_) if Instant::now() < deadline => backoff.wait_until(deadline).await,
                Ok(Some(_)) | Err(_) => return Err(format!("{id}: evicted but still present")),
            }
        }
    }
}

/// Exponential backoff, doubling from `next` up to `max`.
struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    /// For API calls that failed: from 200ms up to 5s.
    fn new() -> Self {
        Self { next: Duration::from_millis(200), max: Duration::from_secs(5) }
    }
    /// For waits on the cluster (a budget refilling, a pod going), where every second of
    /// oversleep is a second added to the rollout: from 100ms up to `max`.
    fn capped(max: Duration) -> Self {
        Self { next: Duration::from_millis(100), max }
    }
    fn peek(&self) -> Duration {
        self.next
    }
    async fn wait(&mut self) {
        sleep(self.next).await;
        self.next = (self.next * 2).min(self.max);
    }
    async fn wait_until(&mut self, deadline: Instant) {
        let until = (Instant::now() + self.next).min(deadline);
        tokio::time::sleep_until(until).await;
        self.next = (self.next * 2).min(self.max);
    }
}

/// Worth retrying: no answer, or a 5xx other than 500 (which the eviction API uses for a
/// definite refusal), or a 429 outside evictions.
fn is_transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || (s.code > 500 && s.code < 600),
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({} {})", s.message, s.code, s.reason),
        other => other.to_string(),
    }
}

/// The PodDisruptionBudget's words from a 429, e.g. "The disruption budget web needs 2
/// healthy pods and has 2 currently".
fn refusal_message(status: &kube::core::Status) -> String {
    let causes: Vec<&str> = status
        .details
        .iter()
        .flat_map(|d| d.causes.iter())
        .filter(|c| c.reason == "DisruptionBudget")
        .map(|c| c.message.as_str())
        .collect();
    if causes.is_empty() {
        status.message.clone()
    } else {
        format!("{} ({})", status.message, causes.join("; "))
    }
}

fn expand_home(path: &str) -> String {
    match (path.strip_prefix("~/"), std::env::var("HOME")) {
        (Some(rest), Ok(home)) => format!("{home}/{rest}"),
        _ => path.to_owned(),
    }
}

fn node_from(n: &K8sNode) -> Node {
    let ready = n
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    Node {
        name: n.metadata.name.clone().unwrap_or_default(),
        pool: n.metadata.labels.as_ref().and_then(|l| l.get(labels::POOL).cloned()),
        ready,
        unschedulable: n.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false),
        cordoned_by_poolctl: n
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(labels::RETIRING)),
    }
}

fn pod_from(p: &K8sPod) -> Option<Pod> {
    let spec = p.spec.as_ref()?;
    let owner_kind = p
        .metadata
        .owner_references
        .as_ref()
        .and_then(|os| os.iter().find(|o| o.controller == Some(true)).map(|o| o.kind.clone()));
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("");
    Some(Pod {
        namespace: p.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
        name: p.metadata.name.clone().unwrap_or_default(),
        uid: p.metadata.uid.clone().unwrap_or_default(),
        node: spec.node_name.clone().unwrap_or_default(),
        labels: p.metadata.labels.clone().unwrap_or_default(),
        owner_kind,
        mirror: p
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror")),
        finished: matches!(phase, "Succeeded" | "Failed"),
        empty_dir: spec.volumes.iter().flatten().any(|v| v.empty_dir.is_some()),
    })
}

fn pdb_from(p: &PodDisruptionBudget) -> Pdb {
    Pdb {
        namespace: p.metadata.namespace.clone().unwrap_or_default(),
        name: p.metadata.name.clone().unwrap_or_default(),
        match_labels: p
            .spec
            .as_ref()
            .and_then(|s| s.selector.as_ref())
            .and_then(|s| s.match_labels.clone())
            .unwrap_or_default(),
        disruptions_allowed: p.status.as_ref().and_then(|s| s.disruptions_allowed).unwrap_or(0),
    }
}
