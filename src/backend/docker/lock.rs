//! A pool's lock in Docker, for pools whose instances are plain containers: a container named
//! `poolctl-lock-<pool>` that is created and never started, with no image (as the builder makes
//! for `FROM scratch`), so it needs nothing pulled and runs nothing. Docker refuses a second
//! container of a name, which makes taking the lock atomic.
//!
//! Its labels say who holds it and since when. Labels cannot change after creation, so the
//! expiry lives in the one field that `docker update` can change on any container: its restart
//! policy's retry count, which holds the expiry in Unix seconds (a container that never starts
//! never restarts). A renewal updates it through the container's ID, so it can only ever extend
//! this holder's own lock, and always writes a later value than the one before, so that every
//! renewal changes what a standby reads. The lease the holder renews for is a label too.
//!
//! A lock is taken over only when the caller names the record it saw unchanged for a lease (see
//! [`crate::rollout::lock`]): the container is inspected again, and removed by its ID only if it is
//! still that record (same ID, same expiry), then the name is taken like a free one. Docker has no
//! conditional remove, so a renewal could in principle land between that inspect and the remove; it
//! would be one its holder cannot count on, since the holder gives a lock up at its renew deadline
//! (4/5 of the lease after the start of its last successful renewal), and this record had already
//! stood unchanged for a whole lease by then.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use bollard::models::{ContainerCreateBody, ContainerInspectResponse, ContainerUpdateBody, HostConfig};
use bollard::models::{RestartPolicy, RestartPolicyNameEnum};
use bollard::query_parameters::{CreateContainerOptions, InspectContainerOptions, RemoveContainerOptions};

use super::{DockerBackend, status_of};
use crate::backend::retry::Backoff;
use crate::backend::{BackendError, LockError, LockRecord, Locks, lock_expiry};
use crate::model::{LockHolder, labels, timestamp};

/// How many times a free or expired lock is tried before giving up: each try loses only to
/// another actor that took it in between, whose lock is then reported. Docker reserves a name a
/// moment before the container can be inspected under it, so a refused create may find
/// nothing yet: those tries back off briefly.
const ATTEMPTS: usize = 10;

/// The name of `pool`'s lock container.
fn lock_name(pool: &str) -> String {
    format!("poolctl-lock-{pool}")
}

impl DockerBackend {
    /// Create the lock container; `Ok(None)` when the name is taken.
    async fn create_lock(
        &self,
        pool: &str,
        who: &str,
        lease: Duration,
    ) -> Result<Option<LockRecord>, LockError> {
        let now = SystemTime::now();
        let expires = lock_expiry(now, lease);
        let holder = LockHolder { who: who.to_owned(), since: now, expires };
        // The pool's label too, so that a clean-up by it (`docker ps -a --filter
        // label=poolctl.dev/pool=X`) finds a lock a killed run left; the list of instances
        // leaves lock containers out.
        let labels = HashMap::from([
            (labels::POOL.to_owned(), pool.to_owned()),
            (labels::LOCK.to_owned(), pool.to_owned()),
            (labels::LOCK_HOLDER.to_owned(), who.to_owned()),
            (labels::LOCK_SINCE.to_owned(), timestamp(now)),
            (labels::LOCK_LEASE.to_owned(), lease_seconds(lease).to_string()),
        ]);
        let body = ContainerCreateBody {
            cmd: Some(vec!["poolctl-lock".to_owned()]),
            labels: Some(labels),
            host_config: Some(HostConfig {
                network_mode: Some("none".to_owned()),
                restart_policy: Some(expiry_policy(expires)),
                ..Default::default()
            }),
            ..Default::default()
        };
        let name = lock_name(pool);
        let options = CreateContainerOptions { name: Some(name.clone()), ..Default::default() };
        self.count();
        match self.docker.create_container(Some(options), body).await {
            Ok(created) => Ok(Some(LockRecord {
                holder,
                version: created.id,
                lease: Some(Duration::from_secs(lease_seconds(lease))),
            })),
            Err(e) if status_of(&e) == Some(409) => Ok(None),
            Err(e) => Err(self.error(&format!("create the lock container {name}"), e).into()),
        }
    }

    async fn remove_lock(&self, pool: &str, version: &str) -> Result<(), BackendError> {
        self.count();
        let options = RemoveContainerOptions { v: true, force: false, link: false };
        match self.docker.remove_container(version, Some(options)).await {
            Ok(()) => Ok(()),
            Err(e) if status_of(&e) == Some(404) => Ok(()),
            Err(e) => Err(self.error(&format!("remove the lock container {}", lock_name(pool)), e)),
        }
    }
}

impl Locks for DockerBackend {
    async fn acquire(
        &self,
        pool: &str,
        who: &str,
        lease: Duration,
        takeover: Option<&LockRecord>,
    ) -> Result<LockRecord, LockError> {
        let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_millis(500));
        for _ in 0..ATTEMPTS {
            if let Some(taken) = self.create_lock(pool, who, lease).await? {
                return Ok(taken);
            }
            match Locks::inspect(self, pool).await? {
                // Being created by another actor, or released in between: try again.
                None => backoff.wait().await,
                // Still the very lock the caller saw lapse: removed by the ID it was seen with.
                Some(current) if takeover == Some(&current) => {
                    self.remove_lock(pool, &current.version).await?;
                }
                Some(current) => {
                    return Err(LockError::Held { pool: pool.to_owned(), record: Box::new(current) });
                }
            }
        }
        match Locks::inspect(self, pool).await? {
            Some(current) => Err(LockError::Held { pool: pool.to_owned(), record: Box::new(current) }),
            None => Err(LockError::Conflict(format!("the lock of pool {pool} keeps changing hands"))),
        }
    }

    async fn renew(&self, pool: &str, held: &LockRecord, lease: Duration) -> Result<LockRecord, LockError> {
        // Later than the last value, even within the same second: a renewal must change the record.
        let expires = lock_expiry(SystemTime::now(), lease).max(held.holder.expires + Duration::from_secs(1));
        let update =
            ContainerUpdateBody { restart_policy: Some(expiry_policy(expires)), ..Default::default() };
        self.count();
        match self.docker.update_container(&held.version, update).await {
            Ok(()) => {
                Ok(LockRecord { holder: LockHolder { expires, ..held.holder.clone() }, ..held.clone() })
            }
            Err(e) if status_of(&e) == Some(404) => Err(LockError::Lost {
                pool: pool.to_owned(),
                why: format!("its container {} was removed", lock_name(pool)),
            }),
            Err(e) => Err(self.error(&format!("renew the lock container {}", lock_name(pool)), e).into()),
        }
    }

    async fn release(&self, pool: &str, held: &LockRecord) -> Result<(), LockError> {
        // By ID: a lock that someone else took since (after this one expired) has another ID
        // and stays; that one is reported.
        match Locks::inspect(self, pool).await? {
            Some(current) if current.version != held.version => Err(LockError::Lost {
                pool: pool.to_owned(),
                why: format!("it is held by {}", current.holder.who),
            }),
            Some(_) => Ok(self.remove_lock(pool, &held.version).await?),
            None => Ok(()),
        }
    }

    async fn inspect(&self, pool: &str) -> Result<Option<LockRecord>, BackendError> {
        let name = lock_name(pool);
        self.count();
        let inspect = match self.docker.inspect_container(&name, None::<InspectContainerOptions>).await {
            Ok(c) => c,
            Err(e) if status_of(&e) == Some(404) => return Ok(None),
            Err(e) => return Err(self.error(&format!("inspect the lock container {name}"), e)),
        };
        record_from(&inspect).map(Some).ok_or_else(|| {
            BackendError::Failed(format!("container {name} is in the way: it is not a poolctl lock"))
        })
    }
}

/// The restart policy that carries an expiry (see the module comment).
fn expiry_policy(expires: SystemTime) -> RestartPolicy {
    let secs = expires.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs();
    RestartPolicy {
        name: Some(RestartPolicyNameEnum::ON_FAILURE),
        maximum_retry_count: Some(i64::try_from(secs).unwrap_or(i64::MAX)),
    }
}

/// The lock an inspected container records; `None` for a container that is not a lock.
fn record_from(inspect: &ContainerInspectResponse) -> Option<LockRecord> {
    let labels = inspect.config.as_ref()?.labels.as_ref()?;
    labels.get(labels::LOCK)?;
    let since = labels
        .get(labels::LOCK_SINCE)
        .and_then(|s| s.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .map_or(SystemTime::UNIX_EPOCH, SystemTime::from);
    let expires = inspect
        .host_config
        .as_ref()
        .and_then(|h| h.restart_policy.as_ref())
        .and_then(|p| p.maximum_retry_count)
        .and_then(|secs| u64::try_from(secs).ok())
        .map_or(SystemTime::UNIX_EPOCH, |secs| SystemTime::UNIX_EPOCH + Duration::from_secs(secs));
    let who = labels.get(labels::LOCK_HOLDER).cloned().unwrap_or_else(|| "an unknown holder".to_owned());
    let lease = labels
        .get(labels::LOCK_LEASE)
        .and_then(|s| s.parse::<u64>().ok())
        .filter(|s| *s > 0)
        .map(Duration::from_secs);
    Some(LockRecord { holder: LockHolder { who, since, expires }, version: inspect.id.clone()?, lease })
}

/// The lease in whole seconds, rounded up, at least one (as a Lease's `leaseDurationSeconds`).
fn lease_seconds(lease: Duration) -> u64 {
    (lease.as_secs() + u64::from(lease.subsec_nanos() > 0)).max(1)
}
