//! A pool's lock in the cluster, for pools whose instances are Nodes: a `coordination.k8s.io/v1`
//! Lease named `poolctl-<pool>` in `kube-system` (beside the Leases that elect the leaders of the
//! controller manager and the scheduler), used the way client-go's leader election uses one.
//! `holderIdentity` says who holds it, `acquireTime` since when, and `renewTime` plus
//! `leaseDurationSeconds` until when. The API server's optimistic concurrency makes every
//! change atomic: a second create of the name is refused, and so is a replace or delete against
//! a resourceVersion that is no longer current, so of two actors racing for an expired Lease one
//! wins. A released lock is deleted, so the cluster keeps no Lease of a pool nobody is changing.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use tokio::time::Instant;

use super::{API_RETRY_WINDOW, KubeCluster};
use crate::backend::{BackendError, LockError, LockRecord, Locks};
use crate::model::LockHolder;

/// The namespace of poolctl's Leases.
pub const LEASE_NAMESPACE: &str = "kube-system";

/// How many times a free or expired Lease is tried: each try loses only to another actor that
/// took it in between, whose lock is then reported.
const ATTEMPTS: usize = 3;

/// The name of `pool`'s Lease.
pub fn lease_name(pool: &str) -> String {
    format!("poolctl-{pool}")
}

/// What a write against the Lease came to.
enum Written {
    Done(Box<Lease>),
    /// 409: another actor wrote first (or created it first).
    Conflict,
    /// 404: it is gone.
    Gone,
}

impl KubeCluster {
    fn leases(&self) -> Api<Lease> {
        Api::namespaced(self.client.clone(), LEASE_NAMESPACE)
    }

    async fn get_lease(&self, pool: &str) -> Result<Option<Lease>, BackendError> {
        let (api, name) = (self.leases(), lease_name(pool));
        let deadline = Instant::now() + API_RETRY_WINDOW;
        self.retrying(&format!("get Lease {LEASE_NAMESPACE}/{name}"), deadline, || api.get_opt(&name)).await
    }

    /// Create the Lease (`lease` has no resourceVersion) or replace it (it has one).
    async fn write_lease(&self, lease: &Lease, deadline: Instant) -> Result<Written, BackendError> {
        let (api, params) = (self.leases(), PostParams::default());
        let name = lease.metadata.name.clone().unwrap_or_default();
        let replace = lease.metadata.resource_version.is_some();
        let write = || async {
            let written = if replace {
                api.replace(&name, &params, lease).await
            } else {
                api.create(&params, lease).await
            };
            match written {
                Ok(l) => Ok(Written::Done(Box::new(l))),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Written::Conflict),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(Written::Gone),
                Err(e) => Err(e),
            }
        };
        self.retrying(&format!("write Lease {LEASE_NAMESPACE}/{name}"), deadline, write).await
    }
}

impl Locks for KubeCluster {
    async fn acquire(&self, pool: &str, who: &str, lease: Duration) -> Result<LockRecord, LockError> {
        for _ in 0..ATTEMPTS {
            let now = SystemTime::now();
            let current = self.get_lease(pool).await?;
            let transitions = match &current {
                None => 0,
                Some(l) => match record_from(l) {
                    Some(r) if !r.holder.expired(now) => {
                        return Err(LockError::Held { pool: pool.to_owned(), holder: r.holder });
                    }
                    Some(r) => {
                        tracing::info!(
                            "taking over the expired lock of pool {pool}: {}",
                            r.holder.describe(now)
                        );
                        transitions(l) + 1
                    }
                    None => transitions(l),
                },
            };
            let metadata = ObjectMeta {
                name: Some(lease_name(pool)),
                namespace: Some(LEASE_NAMESPACE.to_owned()),
                resource_version: current.and_then(|l| l.metadata.resource_version),
                ..ObjectMeta::default()
            };
            let spec = LeaseSpec {
                holder_identity: Some(who.to_owned()),
                lease_duration_seconds: Some(whole_seconds(lease)),
                acquire_time: Some(micro_time(now)),
                renew_time: Some(micro_time(now)),
                lease_transitions: Some(transitions),
                ..LeaseSpec::default()
            };
            let deadline = Instant::now() + API_RETRY_WINDOW;
            if let Written::Done(l) =
                self.write_lease(&Lease { metadata, spec: Some(spec) }, deadline).await?
            {
                return record_from(&l).ok_or_else(|| {
                    LockError::Conflict(format!(
                        "the API server returned Lease {} without a holder",
                        lease_name(pool)
                    ))
                });
            }
        }
        match self.get_lease(pool).await?.as_ref().and_then(record_from) {
            Some(r) => Err(LockError::Held { pool: pool.to_owned(), holder: r.holder }),
            None => Err(LockError::Conflict(format!("the lock of pool {pool} keeps changing hands"))),
        }
    }

    async fn renew(&self, pool: &str, held: &LockRecord, lease: Duration) -> Result<LockRecord, LockError> {
        let now = SystemTime::now();
        let metadata = ObjectMeta {
            name: Some(lease_name(pool)),
            namespace: Some(LEASE_NAMESPACE.to_owned()),
            resource_version: Some(held.version.clone()),
            ..ObjectMeta::default()
        };
        let spec = LeaseSpec {
            holder_identity: Some(held.holder.who.clone()),
            lease_duration_seconds: Some(whole_seconds(lease)),
            acquire_time: Some(micro_time(held.holder.since)),
            renew_time: Some(micro_time(now)),
            ..LeaseSpec::default()
        };
        let lost = |why: &str| LockError::Lost { pool: pool.to_owned(), why: why.to_owned() };
        // A renewal is worth trying only while the lock still holds.
        let deadline = Instant::now() + held.holder.expires.duration_since(now).unwrap_or_default();
        match self.write_lease(&Lease { metadata, spec: Some(spec) }, deadline).await? {
            Written::Done(l) => record_from(&l).ok_or_else(|| lost("its Lease has no holder")),
            Written::Conflict => Err(lost("its Lease was changed by another actor")),
            Written::Gone => Err(lost("its Lease was deleted")),
        }
    }

    async fn release(&self, pool: &str, held: &LockRecord) -> Result<(), LockError> {
        let (api, name) = (self.leases(), lease_name(pool));
        // Only this very Lease: one that another actor took since has another resourceVersion.
        let params = DeleteParams {
            preconditions: Some(Preconditions { resource_version: Some(held.version.clone()), uid: None }),
            ..DeleteParams::default()
        };
        let delete = || async {
            match api.delete(&name, &params).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
        };
        let deadline = Instant::now() + API_RETRY_WINDOW;
        if self.retrying(&format!("delete Lease {LEASE_NAMESPACE}/{name}"), deadline, delete).await? {
            return Ok(());
        }
        let now = self.get_lease(pool).await?.as_ref().and_then(record_from);
        let why =
            now.map_or_else(|| "its Lease changed".to_owned(), |r| format!("it is held by {}", r.holder.who));
        Err(LockError::Lost { pool: pool.to_owned(), why })
    }

    async fn inspect(&self, pool: &str) -> Result<Option<LockRecord>, BackendError> {
        Ok(self.get_lease(pool).await?.as_ref().and_then(record_from))
    }
}

/// The lock a Lease records; `None` when it has no holder (released the client-go way).
fn record_from(lease: &Lease) -> Option<LockRecord> {
    let spec = lease.spec.as_ref()?;
    let who = spec.holder_identity.clone().filter(|h| !h.is_empty())?;
    let time = |t: Option<&MicroTime>| t.map_or(SystemTime::UNIX_EPOCH, |t| SystemTime::from(t.0));
    let renewed = time(spec.renew_time.as_ref().or(spec.acquire_time.as_ref()));
    let duration =
        Duration::from_secs(spec.lease_duration_seconds.and_then(|s| u64::try_from(s).ok()).unwrap_or(0));
    let holder = LockHolder { who, since: time(spec.acquire_time.as_ref()), expires: renewed + duration };
    Some(LockRecord { holder, version: lease.metadata.resource_version.clone()? })
}

fn transitions(lease: &Lease) -> i32 {
    lease.spec.as_ref().and_then(|s| s.lease_transitions).unwrap_or(0)
}

/// `leaseDurationSeconds` for a lease: whole seconds, rounded up, at least one.
fn whole_seconds(lease: Duration) -> i32 {
    let secs = lease.as_secs() + u64::from(lease.subsec_nanos() > 0);
    i32::try_from(secs.max(1)).unwrap_or(i32::MAX)
}

fn micro_time(t: SystemTime) -> MicroTime {
    MicroTime(Timestamp::try_from(t).unwrap_or(Timestamp::UNIX_EPOCH))
}
