//! The watch-backed lists of `watch`: each list an observation makes (the pool's Nodes, the
//! pods of each of its Nodes, the budgets of each namespace) is made once, then mirrored in
//! memory by a watch from the list's resourceVersion, so that a reconcile where nothing
//! changed reads memory and sends no list. A small reflector of our own rather than
//! kube-runtime's: it needs no extra crate feature, and it knows when to distrust itself.
//!
//! A mirror is trusted only while its watch runs and no write went through the client since its
//! list: the executor's own changes (a cordon, a drain, a deleted Node) are always read back
//! from the server, never from a watch that may not have delivered them yet. A watch that the
//! server ends is resumed from the last resourceVersion seen; one that fails (410 Gone, a
//! dropped connection) is abandoned, and the next read lists again.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node as K8sNode, Pod as K8sPod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::KubeCluster;
use crate::backend::BackendError;

/// How long the server may keep one watch open before it is resumed.
const WATCH_SECONDS: u32 = 290;

/// The longest silence of a watch before its connection is taken for dead: longer than the
/// server keeps it open, so that a quiet cluster's watch lives as long as the server keeps it.
pub(super) const WATCH_READ_TIMEOUT: Duration = Duration::from_secs(WATCH_SECONDS as u64 + 30);

/// The mirrors of one pool's cluster client.
pub(super) struct Cache {
    /// The client the watches go through (see [`WATCH_READ_TIMEOUT`]).
    watcher: kube::Client,
    /// Writes through the client so far: a mirror listed before the last one is stale.
    writes: AtomicU64,
    pub(super) nodes: Mirrors<K8sNode>,
    /// By Node name.
    pub(super) pods: Mirrors<K8sPod>,
    /// By namespace.
    pub(super) pdbs: Mirrors<PodDisruptionBudget>,
}

impl Cache {
    pub(super) fn new(watcher: kube::Client) -> Self {
        Self {
            watcher,
            writes: AtomicU64::default(),
            nodes: Mirrors::default(),
            pods: Mirrors::default(),
            pdbs: Mirrors::default(),
        }
    }

    pub(super) fn wrote(&self) {
        self.writes.fetch_add(1, Ordering::SeqCst);
    }
}

/// Mirrors of one kind of list, by what scopes them.
pub(super) struct Mirrors<K>(Mutex<HashMap<String, Mirror<K>>>);

impl<K> Default for Mirrors<K> {
    fn default() -> Self {
        Self(Mutex::default())
    }
}

impl<K> Mirrors<K> {
    /// Stop mirroring the scopes not in `keep` (Nodes that left the pool, say).
    fn retain(&self, keep: &dyn Fn(&str) -> bool) {
        crate::locked(&self.0).retain(|k, _| keep(k));
    }
}

/// One list, kept up to date by a watch.
struct Mirror<K> {
    state: Arc<Mutex<CacheState<K>>>,
    /// The cache's write count when the list was made.
    listed_at: u64,
    watch: JoinHandle<()>,
}

impl<K> Drop for Mirror<K> {
    fn drop(&mut self) {
        self.watch.abort();
    }
}

struct CacheState<K> {
    items: BTreeMap<String, K>,
    /// The watch still runs: the items are as current as its events.
    live: bool,
}

fn key_of<K: Resource>(object: &K) -> String {
    let meta = object.meta();
    format!("{}/{}", meta.namespace.as_deref().unwrap_or(""), meta.name.as_deref().unwrap_or(""))
}

/// What the cache can list and watch: Nodes, pods, budgets.
pub(super) trait Listed:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
}

impl<K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static> Listed for K {}

/// A list by `(labels, fields)` selectors; an empty one is left out of the request.
fn list_params((labels, fields): (&str, &str)) -> ListParams {
    let params = ListParams::default();
    let params = if labels.is_empty() { params } else { params.labels(labels) };
    if fields.is_empty() { params } else { params.fields(fields) }
}

impl KubeCluster {
    /// Stop mirroring the scopes of `mirrors` that `keep` refuses.
    pub(super) fn forget_scopes<K>(&self, mirrors: fn(&Cache) -> &Mirrors<K>, keep: &dyn Fn(&str) -> bool) {
        if let Some(cache) = &self.cache {
            mirrors(cache).retain(keep);
        }
    }

    /// The objects of `api` that `selectors` (labels, fields) select. With a cache: from its
    /// mirror of `scope` in `mirrors` when that can be trusted, else listed and mirrored from
    /// then on; without one, listed.
    pub(super) async fn list_scoped<K: Listed>(
        &self,
        mirrors: fn(&Cache) -> &Mirrors<K>,
        scope: &str,
        api: fn(kube::Client, &str) -> Api<K>,
        selectors: (&str, &str),
        what: &str,
        deadline: Instant,
    ) -> Result<Vec<K>, BackendError> {
        let listing = api(self.client.clone(), scope);
        let Some(cache) = &self.cache else {
            let params = list_params(selectors);
            return Ok(self.retrying(what, deadline, || listing.list(&params)).await?.items);
        };
        let mirrors = mirrors(cache);
        let writes = cache.writes.load(Ordering::SeqCst);
        {
            let mirrors = crate::locked(&mirrors.0);
            if let Some(mirror) = mirrors.get(scope).filter(|m| m.listed_at == writes) {
                let state = crate::locked(&mirror.state);
                if state.live {
                    return Ok(state.items.values().cloned().collect());
                }
            }
        }
        let params = list_params(selectors);
        let list = self.retrying(what, deadline, || listing.list(&params)).await?;
        let version = list.metadata.resource_version.clone().unwrap_or_default();
        let items = list.items.iter().map(|o| (key_of(o), o.clone())).collect();
        let state = Arc::new(Mutex::new(CacheState { items, live: true }));
        let mut watch_params = WatchParams::default().timeout(WATCH_SECONDS);
        watch_params.label_selector.clone_from(&params.label_selector);
        watch_params.field_selector.clone_from(&params.field_selector);
        let watching = api(cache.watcher.clone(), scope);
        let watch = tokio::spawn(follow(watching, watch_params, version, Arc::clone(&state)));
        let mirror = Mirror { state, listed_at: writes, watch };
        crate::locked(&mirrors.0).insert(scope.to_owned(), mirror);
        Ok(list.items)
    }
}

/// Apply the watch's events to `state` until the watch fails; resume it when the server ends it.
async fn follow<K: Listed>(
    api: Api<K>,
    params: WatchParams,
    mut version: String,
    state: Arc<Mutex<CacheState<K>>>,
) {
    loop {
        let started = Instant::now();
        let mut events = 0usize;
        let mut stream = match api.watch(&params, &version).await {
            Ok(stream) => stream.boxed(),
            Err(e) => {
                tracing::debug!("watch for the cache failed: {e}; the next read lists again");
                break;
            }
        };
        while let Some(event) = stream.next().await {
            events += 1;
            let mut state = crate::locked(&state);
            match event {
                Ok(WatchEvent::Added(o) | WatchEvent::Modified(o)) => {
                    version = o.resource_version().unwrap_or_else(|| version.clone());
                    state.items.insert(key_of(&o), o);
                }
                Ok(WatchEvent::Deleted(o)) => {
                    version = o.resource_version().unwrap_or_else(|| version.clone());
                    state.items.remove(&key_of(&o));
                }
                Ok(WatchEvent::Bookmark(b)) => version = b.metadata.resource_version,
                Ok(WatchEvent::Error(e)) => {
                    tracing::debug!("watch for the cache ended: {e}; the next read lists again");
                    state.live = false;
                    return;
                }
                Err(e) => {
                    tracing::debug!("watch for the cache broke: {e}; the next read lists again");
                    state.live = false;
                    return;
                }
            }
        }
        // A watch the server closes at once, again and again, would spin: give up instead.
        if events == 0 && started.elapsed() < Duration::from_secs(1) {
            break;
        }
    }
    crate::locked(&state).live = false;
}
