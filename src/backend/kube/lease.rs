//! A pool's lock in the cluster, for pools whose instances are Nodes: a `coordination.k8s.io/v1`
//! Lease named `poolctl-<pool>` in `kube-system` (beside the Leases that elect the leaders of the
//! controller manager and the scheduler), used the way client-go's leader election uses one.
//! `holderIdentity` says who holds it, `acquireTime` since when, and `renewTime` plus
//! `leaseDurationSeconds` until when. The API server's optimistic concurrency makes every
//! change atomic: a second create of the name is refused, and so is a replace or delete against
//! a resourceVersion that is no longer current, so of two actors racing for an expired Lease one
//! wins. A released lock is deleted, so the cluster keeps no Lease of a pool nobody is changing.
//!
//! The Lease also records, as `joining.poolctl.dev/<name>` annotations, the instances created
//! whose Nodes are not labelled yet: a run killed between a kubelet registering a Node and
//! poolctl labelling it leaves a Node that only this record names once its container is gone.
//! A Lease that still records some, or the pool's suspension or reconcile request (see
//! [`super::marks`]), is released by clearing its holder, not deleted. Since the
//! executor adds to the record while the lock is renewed, a renewal or release reads the Lease
//! first and proves the lock is still its own by holder and acquire time (as client-go's leader
//! election does), writing against the resourceVersion it read.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use serde_json::{Map, Value, json};
use tokio::time::Instant;

use super::{API_RETRY_WINDOW, KubeCluster};
use crate::backend::{BackendError, LeaseMarks, LockError, LockRecord, Locks};
use crate::model::{LockHolder, is_instance_name, labels};

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
pub(super) enum Written {
    Done(Box<Lease>),
    /// 409: another actor wrote first (or created it first).
    Conflict,
    /// 404: it is gone.
    Gone,
}

impl KubeCluster {
    pub(super) fn leases(&self) -> Api<Lease> {
        Api::namespaced(self.client.clone(), LEASE_NAMESPACE)
    }

    pub(super) async fn get_lease(&self, pool: &str) -> Result<Option<Lease>, BackendError> {
        let (api, name) = (self.leases(), lease_name(pool));
        let deadline = Instant::now() + API_RETRY_WINDOW;
        self.retrying(&format!("get Lease {LEASE_NAMESPACE}/{name}"), deadline, || api.get_opt(&name)).await
    }

    /// Create the Lease (`lease` has no resourceVersion) or replace it (it has one).
    pub(super) async fn write_lease(
        &self,
        lease: &Lease,
        deadline: Instant,
    ) -> Result<Written, BackendError> {
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

    /// The pool's Lease if it is still the lock `held`, `None` if it is gone; else why not.
    async fn own_lease(&self, pool: &str, held: &LockRecord) -> Result<Option<Lease>, LockError> {
        let lost = |why: &str| LockError::Lost { pool: pool.to_owned(), why: why.to_owned() };
        let Some(lease) = self.get_lease(pool).await? else { return Ok(None) };
        match record_from(&lease) {
            Some(r) if r.holder.is(&held.holder) => Ok(Some(lease)),
            Some(r) => Err(lost(&format!("it is held by {}", r.holder.who))),
            None => Err(lost("it was broken")),
        }
    }

    /// Merge `annotations` into the pool's Lease (a null removes one). A merge patch carries no
    /// resourceVersion, so it never conflicts with the renewals that run beside it. A Lease
    /// that is gone (the lock broken meanwhile) is created without a holder, so that the record
    /// is not lost.
    pub(super) async fn annotate_lease(
        &self,
        pool: &str,
        annotations: Map<String, Value>,
    ) -> Result<(), BackendError> {
        let (api, name) = (self.leases(), lease_name(pool));
        let deadline = Instant::now() + API_RETRY_WINDOW;
        let patch = json!({ "metadata": { "annotations": annotations } });
        let params = PatchParams::default();
        let what = format!("annotate Lease {LEASE_NAMESPACE}/{name}");
        let patched = || async {
            match api.patch(&name, &params, &Patch::Merge(&patch)).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
                Err(e) => Err(e),
            }
        };
        if self.retrying(&what, deadline, patched).await? {
            return Ok(());
        }
        let kept: BTreeMap<String, String> =
            annotations.into_iter().filter_map(|(k, v)| v.as_str().map(|v| (k, v.to_owned()))).collect();
        if kept.is_empty() {
            return Ok(());
        }
        match self.write_lease(&unheld(pool, kept), deadline).await? {
            Written::Done(_) => Ok(()),
            // Created by another actor in between: add to that one.
            Written::Conflict | Written::Gone => self.retrying(&what, deadline, patched).await.map(drop),
        }
    }

    /// The instances the pool's Lease records as joining: only names of the shape poolctl gives
    /// the pool's instances, so that a hand-edited annotation cannot have a plan look up (or
    /// delete) any other Node. The same read notes the pool's suspension and reconcile request
    /// (see [`crate::backend::Cluster::marks`]).
    pub(super) async fn joining_names_and_marks(&self) -> Result<Vec<String>, BackendError> {
        let lease = self.get_lease(&self.pool).await?;
        let marks = lease.as_ref().map(super::marks::marks_of).unwrap_or_default();
        *crate::locked(&self.marks) = marks;
        Ok(lease.as_ref().map(|l| joining_of(l, &self.pool)).unwrap_or_default())
    }
}

/// A Lease of `pool` that nobody holds, with `annotations`: what records on a Lease are kept in
/// when there is no lock (created without taking it).
pub(super) fn unheld(pool: &str, annotations: BTreeMap<String, String>) -> Lease {
    let metadata = ObjectMeta {
        name: Some(lease_name(pool)),
        namespace: Some(LEASE_NAMESPACE.to_owned()),
        annotations: Some(annotations),
        ..ObjectMeta::default()
    };
    Lease { metadata, spec: Some(LeaseSpec::default()) }
}

pub(super) fn joining_key(name: &str) -> String {
    format!("{}{name}", labels::JOINING_PREFIX)
}

/// The names of `pool`'s instances a Lease records as joining.
pub(super) fn joining_of(lease: &Lease, pool: &str) -> Vec<String> {
    let annotations = lease.metadata.annotations.iter().flatten();
    let names = annotations.filter_map(|(k, _)| k.strip_prefix(labels::JOINING_PREFIX));
    names.filter(|n| is_instance_name(pool, n)).map(str::to_owned).collect()
}

impl Locks for KubeCluster {
    /// A free Lease (none, or one without a holder) is taken; a held one only when it is still
    /// exactly `takeover`, replaced against the resourceVersion read with it, so that a renewal
    /// that came in between makes the API server refuse the takeover.
    async fn acquire(
        &self,
        pool: &str,
        who: &str,
        lease: Duration,
        takeover: Option<&LockRecord>,
    ) -> Result<LockRecord, LockError> {
        for _ in 0..ATTEMPTS {
            let current = self.get_lease(pool).await?;
            let now = SystemTime::now();
            let transitions = match &current {
                None => 0,
                Some(l) => match record_from(l) {
                    Some(r) if takeover == Some(&r) => transitions(l) + 1,
                    Some(r) => return Err(LockError::Held { pool: pool.to_owned(), record: Box::new(r) }),
                    None => transitions(l),
                },
            };
            // The instances an earlier run recorded as joining stay recorded.
            let (resource_version, annotations) =
                current.map(|l| (l.metadata.resource_version, l.metadata.annotations)).unwrap_or_default();
            let metadata = ObjectMeta {
                name: Some(lease_name(pool)),
                namespace: Some(LEASE_NAMESPACE.to_owned()),
                resource_version,
                annotations,
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
            Some(r) => Err(LockError::Held { pool: pool.to_owned(), record: Box::new(r) }),
            None => Err(LockError::Conflict(format!("the lock of pool {pool} keeps changing hands"))),
        }
    }

    async fn renew(&self, pool: &str, held: &LockRecord, lease: Duration) -> Result<LockRecord, LockError> {
        let lost = |why: &str| LockError::Lost { pool: pool.to_owned(), why: why.to_owned() };
        // A renewal is worth trying only while the lock still holds.
        let now = SystemTime::now();
        let deadline = Instant::now() + held.holder.expires.duration_since(now).unwrap_or_default();
        for _ in 0..ATTEMPTS {
            let current = self.own_lease(pool, held).await?.ok_or_else(|| lost("its Lease was deleted"))?;
            let now = SystemTime::now();
            let spec = LeaseSpec {
                holder_identity: Some(held.holder.who.clone()),
                lease_duration_seconds: Some(whole_seconds(lease)),
                acquire_time: Some(micro_time(held.holder.since)),
                renew_time: Some(micro_time(now)),
                lease_transitions: current.spec.as_ref().and_then(|s| s.lease_transitions),
                ..LeaseSpec::default()
            };
            match self.write_lease(&Lease { metadata: current.metadata, spec: Some(spec) }, deadline).await? {
                Written::Done(l) => return record_from(&l).ok_or_else(|| lost("its Lease has no holder")),
                // The executor recorded a joining instance meanwhile: read it again.
                Written::Conflict => {}
                Written::Gone => return Err(lost("its Lease was deleted")),
            }
        }
        Err(lost("its Lease keeps changing"))
    }

    async fn release(&self, pool: &str, held: &LockRecord) -> Result<(), LockError> {
        let (api, name) = (self.leases(), lease_name(pool));
        let deadline = Instant::now() + API_RETRY_WINDOW;
        for _ in 0..ATTEMPTS {
            let Some(current) = self.own_lease(pool, held).await? else { return Ok(()) };
            if !joining_of(&current, pool).is_empty()
                || super::marks::marks_of(&current) != LeaseMarks::default()
            {
                // Released the client-go way, keeping the record of joining instances, and the
                // pool's suspension or reconcile request.
                let metadata = current.metadata;
                let spec = LeaseSpec {
                    lease_transitions: current.spec.and_then(|s| s.lease_transitions),
                    ..LeaseSpec::default()
                };
                match self.write_lease(&Lease { metadata, spec: Some(spec) }, deadline).await? {
                    Written::Done(_) | Written::Gone => return Ok(()),
                    Written::Conflict => continue,
                }
            }
            // Only this very Lease: one written since has another resourceVersion.
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    resource_version: current.metadata.resource_version,
                    uid: None,
                }),
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
            if self.retrying(&format!("delete Lease {LEASE_NAMESPACE}/{name}"), deadline, delete).await? {
                return Ok(());
            }
        }
        Err(LockError::Lost { pool: pool.to_owned(), why: "its Lease keeps changing".to_owned() })
    }

    async fn inspect(&self, pool: &str) -> Result<Option<LockRecord>, BackendError> {
        Ok(self.get_lease(pool).await?.as_ref().and_then(record_from))
    }
}

/// The lock a Lease records; `None` when it has no holder (released the client-go way).
pub(super) fn record_from(lease: &Lease) -> Option<LockRecord> {
    let spec = lease.spec.as_ref()?;
    let who = spec.holder_identity.clone().filter(|h| !h.is_empty())?;
    let time = |t: Option<&MicroTime>| t.map_or(SystemTime::UNIX_EPOCH, |t| SystemTime::from(t.0));
    let renewed = time(spec.renew_time.as_ref().or(spec.acquire_time.as_ref()));
    let recorded = spec.lease_duration_seconds.and_then(|s| u64::try_from(s).ok()).map(Duration::from_secs);
    let expires = renewed + recorded.unwrap_or_default();
    let holder = LockHolder { who, since: time(spec.acquire_time.as_ref()), expires };
    let lease_duration = recorded.filter(|d| !d.is_zero());
    Some(LockRecord { holder, version: lease.metadata.resource_version.clone()?, lease: lease_duration })
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
