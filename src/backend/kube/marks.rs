//! What a node pool's Lease records beside its lock: the pool's suspension (`poolctl suspend`)
//! and its reconcile request (`poolctl reconcile`), so that every run and every `watch` replica
//! of that cluster honours them at once, wherever it runs.
//!
//! A suspension is the annotations [`labels::SUSPENDED_BY`], [`labels::SUSPENDED_AT`] (the API
//! server's clock, from the `Date` of its answer just before the write) and
//! [`labels::SUSPEND_REASON`]; a request is [`labels::RECONCILE_REQUESTED_AT`], as Flux's
//! `reconcile.fluxcd.io/requestedAt`. A Lease that is missing is created without a holder: a
//! record never takes the lock. The first suspension stands: it is written against the
//! resourceVersion read with "not suspended", so of two racing suspends one is refused and
//! reads the other's. `watch` follows the Lease ([`KubeCluster::follow_requests`]) and hears of
//! a new request at once; the replica that acts on it clears it, only if it is still the
//! request it saw (a newer one asks for one reconcile more). Two replicas that both hear of it
//! both reconcile; only the lock's holder changes anything, so acting twice is harmless.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams, WatchEvent, WatchParams};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, warn};

use super::lease::{LEASE_NAMESPACE, Written, lease_name, unheld};
use super::{API_RETRY_WINDOW, KubeCluster};
use crate::backend::{BackendError, Cluster, ContainerNews, LeaseMarks, retry};
use crate::model::{Suspension, labels};

/// How many times a write that met another actor's is tried again.
const ATTEMPTS: usize = 3;

/// How long the server may keep one watch of the Lease open before it is resumed: within the
/// watch client's read timeout (see [`super::cache::WATCH_READ_TIMEOUT`]).
const WATCH_SECONDS: u32 = 290;

/// The longest wait before following the Lease again after a failure (to connect, too).
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// The suspension and the reconcile request `lease` records.
pub(super) fn marks_of(lease: &Lease) -> LeaseMarks {
    let annotations = lease.metadata.annotations.as_ref();
    let get = |key: &str| annotations.and_then(|a| a.get(key));
    let suspension = get(labels::SUSPENDED_BY).map(|by| Suspension {
        by: if by.is_empty() { "an unknown user".to_owned() } else { by.clone() },
        at: get(labels::SUSPENDED_AT)
            .and_then(|t| t.parse::<Timestamp>().ok())
            .map_or(0, Timestamp::as_second),
        reason: get(labels::SUSPEND_REASON).filter(|r| !r.is_empty()).cloned(),
    });
    let requested = get(labels::RECONCILE_REQUESTED_AT).filter(|r| !r.is_empty()).cloned();
    LeaseMarks { suspension, requested }
}

impl KubeCluster {
    /// Merge-patch `annotations` into the Lease `name`, only if it is still at `version`.
    async fn patch_lease_at(
        &self,
        version: Option<String>,
        annotations: Map<String, Value>,
        deadline: Instant,
    ) -> Result<Written, BackendError> {
        let (api, name) = (self.leases(), lease_name(&self.pool));
        let patch = json!({ "metadata": { "resourceVersion": version, "annotations": annotations } });
        let params = PatchParams::default();
        let patched = || async {
            match api.patch(&name, &params, &Patch::Merge(&patch)).await {
                Ok(l) => Ok(Written::Done(Box::new(l))),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Written::Conflict),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(Written::Gone),
                Err(e) => Err(e),
            }
        };
        self.retrying(&format!("annotate Lease {LEASE_NAMESPACE}/{name}"), deadline, patched).await
    }

    pub(super) async fn suspend_on_lease(
        &self,
        by: &str,
        reason: Option<&str>,
    ) -> Result<Suspension, BackendError> {
        let deadline = Instant::now() + API_RETRY_WINDOW;
        for _ in 0..ATTEMPTS {
            let current = self.get_lease(&self.pool).await?;
            if let Some(standing) = current.as_ref().and_then(|l| marks_of(l).suspension) {
                return Ok(standing);
            }
            // The API server's time, as every replica would read it; this process's only when
            // the server does not say.
            let at = match self.clock().await {
                Some(at) => Timestamp::from_second(at).unwrap_or_else(|_| Timestamp::now()),
                None => Timestamp::now(),
            };
            let mut annotations = BTreeMap::from([
                (labels::SUSPENDED_BY.to_owned(), by.to_owned()),
                (labels::SUSPENDED_AT.to_owned(), at.to_string()),
            ]);
            annotations.extend(reason.map(|r| (labels::SUSPEND_REASON.to_owned(), r.to_owned())));
            let written = match current {
                None => self.write_lease(&unheld(&self.pool, annotations), deadline).await?,
                Some(lease) => {
                    let annotations = annotations.into_iter().map(|(k, v)| (k, Value::String(v))).collect();
                    self.patch_lease_at(lease.metadata.resource_version, annotations, deadline).await?
                }
            };
            if let Written::Done(lease) = written {
                return marks_of(&lease).suspension.ok_or_else(|| {
                    BackendError::Failed(format!(
                        "suspend pool {}: the API server dropped the record",
                        self.pool
                    ))
                });
            }
        }
        Err(BackendError::Failed(format!("suspend pool {}: its Lease keeps changing", self.pool)))
    }

    pub(super) async fn consume_on_lease(&self) -> Result<(), BackendError> {
        let Some(seen) = self.marks().requested else { return Ok(()) };
        let deadline = Instant::now() + API_RETRY_WINDOW;
        for _ in 0..ATTEMPTS {
            let Some(current) = self.get_lease(&self.pool).await? else { return Ok(()) };
            if marks_of(&current).requested.as_ref() != Some(&seen) {
                // Cleared by another replica, or asked again since: that one stays.
                return Ok(());
            }
            let cleared = Map::from_iter([(labels::RECONCILE_REQUESTED_AT.to_owned(), Value::Null)]);
            match self.patch_lease_at(current.metadata.resource_version, cleared, deadline).await? {
                Written::Done(_) | Written::Gone => return Ok(()),
                Written::Conflict => {}
            }
        }
        Err(BackendError::Failed(format!("pool {}: its Lease keeps changing", self.pool)))
    }

    /// Follow the pool's Lease (a list and a watch, by its name) and send to `tx` each reconcile
    /// request that appears on it, once, until `tx` is closed: what makes `watch` act on
    /// `poolctl reconcile` at once. One found already at the start is sent too (asked while no
    /// watch ran). Renewals of the lock change the Lease every few seconds; only a request's
    /// value that was not there before is news. A failed list or watch is tried again with
    /// backoff.
    pub async fn follow_requests(self, tx: mpsc::Sender<ContainerNews>) {
        let mut config = kube::Config::clone(&self.config);
        config.read_timeout = Some(super::cache::WATCH_READ_TIMEOUT);
        let client = match super::client_of(config, &self.server) {
            Ok(client) => client,
            Err(e) => {
                warn!("pool {}: cannot follow its Lease: {e}", self.pool);
                return;
            }
        };
        let api: Api<Lease> = Api::namespaced(client, LEASE_NAMESPACE);
        let mut follower = Follower { pool: self.pool.clone(), seen: None, tx };
        let mut backoff = retry::Backoff::new(Duration::from_secs(1), MAX_BACKOFF);
        while !follower.tx.is_closed() {
            match follower.follow(&api).await {
                Ok(()) => return,
                Err(e) => {
                    let after = backoff.peek().as_secs();
                    warn!("pool {}: following its Lease: {e}; again in {after}s", self.pool);
                    backoff.wait().await;
                }
            }
        }
    }
}

/// What following one pool's Lease keeps: the request it saw last.
struct Follower {
    pool: String,
    seen: Option<String>,
    tx: mpsc::Sender<ContainerNews>,
}

impl Follower {
    /// List the Lease, then watch it from the list's resourceVersion for as long as the server
    /// keeps watches open; `Ok` once `tx` is closed.
    async fn follow(&mut self, api: &Api<Lease>) -> Result<(), String> {
        let fields = format!("metadata.name={}", lease_name(&self.pool));
        let list =
            api.list(&ListParams::default().fields(&fields)).await.map_err(|e| format!("list: {e}"))?;
        if !self.note(list.items.first()).await {
            return Ok(());
        }
        let mut version = list.metadata.resource_version.unwrap_or_default();
        debug!("following Lease {LEASE_NAMESPACE}/{} from {version}", lease_name(&self.pool));
        loop {
            let params = WatchParams::default().fields(&fields).timeout(WATCH_SECONDS);
            let mut events = api.watch(&params, &version).await.map_err(|e| format!("watch: {e}"))?.boxed();
            while let Some(event) = events.try_next().await.map_err(|e| format!("watch: {e}"))? {
                let lease = match event {
                    WatchEvent::Added(l) | WatchEvent::Modified(l) => Some(l),
                    WatchEvent::Deleted(l) => {
                        version = l.metadata.resource_version.clone().unwrap_or(version);
                        None
                    }
                    WatchEvent::Bookmark(b) => {
                        version = b.metadata.resource_version;
                        continue;
                    }
                    // 410 Gone, say: list again.
                    WatchEvent::Error(e) => return Err(format!("watch: {}", e.message)),
                };
                if let Some(l) = &lease {
                    version = l.metadata.resource_version.clone().unwrap_or(version);
                }
                if !self.note(lease.as_ref()).await {
                    return Ok(());
                }
            }
            if self.tx.is_closed() {
                return Ok(());
            }
        }
    }

    /// Take in the Lease as it is now; send its request if it is new. `false` once nobody
    /// listens.
    async fn note(&mut self, lease: Option<&Lease>) -> bool {
        let now = lease.and_then(|l| marks_of(l).requested);
        let fresh = now.is_some() && now != self.seen;
        self.seen.clone_from(&now);
        if !fresh {
            return !self.tx.is_closed();
        }
        let news = ContainerNews {
            what: format!("Lease {LEASE_NAMESPACE}/{}: reconcile requested", lease_name(&self.pool)),
            requested: BTreeSet::from([self.pool.clone()]),
            ..ContainerNews::default()
        };
        self.tx.send(news).await.is_ok()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn lease(annotations: &[(&str, &str)]) -> Lease {
        let annotations = annotations.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Lease { metadata: ObjectMeta { annotations: Some(annotations), ..ObjectMeta::default() }, spec: None }
    }

    #[test]
    fn a_lease_records_a_suspension_by_its_author_and_a_request_by_its_value() {
        let marks = marks_of(&lease(&[
            (labels::SUSPENDED_BY, "ann@box"),
            (labels::SUSPENDED_AT, "2026-12-06T04:00:00Z"),
            (labels::SUSPEND_REASON, "incident"),
            (labels::RECONCILE_REQUESTED_AT, "2026-12-06T04:00:01.5Z"),
            (labels::JOINING_PREFIX, "x"),
        ]));
        let suspension = marks.suspension.expect("suspended");
        assert_eq!(suspension.describe(), "suspended by ann@box at 2026-12-06T04:00:00Z: incident");
        assert_eq!(marks.requested.as_deref(), Some("2026-12-06T04:00:01.5Z"));
        assert_eq!(marks_of(&lease(&[(labels::RECONCILE_REQUESTED_AT, "")])), LeaseMarks::default());
        let unknown = marks_of(&lease(&[(labels::SUSPENDED_BY, "")])).suspension.expect("suspended");
        assert_eq!((unknown.by.as_str(), unknown.at, unknown.reason), ("an unknown user", 0, None));
    }

    #[tokio::test]
    async fn only_a_request_not_seen_before_is_news() {
        let (tx, mut rx) = mpsc::channel(8);
        let mut follower = Follower { pool: "w".to_owned(), seen: None, tx };
        let asked = lease(&[(labels::RECONCILE_REQUESTED_AT, "1")]);
        assert!(follower.note(Some(&asked)).await);
        // A renewal of the lock: the same request.
        assert!(follower.note(Some(&asked)).await);
        assert!(follower.note(None).await);
        assert!(follower.note(Some(&lease(&[(labels::RECONCILE_REQUESTED_AT, "2")]))).await);
        drop(follower);
        let mut pools = Vec::new();
        while let Some(news) = rx.recv().await {
            pools.extend(news.requested);
        }
        assert_eq!(pools, ["w", "w"]);
    }
}
