//! One actor per pool: a rollout (an apply, a watch reconcile) takes the lock of every pool its
//! plan changes before it changes anything, keeps the locks renewed while it runs, and gives
//! them up when it ends, whether it completed, failed or was interrupted.
//!
//! A pool of Nodes is locked by a Lease in its cluster, any other pool by a lock container in
//! Docker (see [`crate::backend::Locks`]). Locks are taken in pool-name order, so two runs that
//! want the same pools wait on each other in one order and never crosswise. A lock lapses
//! [`DEFAULT_LEASE`] after its last renewal, so a run killed outright blocks the next one
//! briefly; a run that finds its lock broken (`poolctl unlock`) or taken over, or that cannot
//! renew it by its renew deadline, stops at the next step boundary.
//!
//! Renewal follows client-go's leader election: a failed or unanswered renewal is tried again
//! every retry period until one succeeds, and the lock counts as lost only when the backend says
//! it is no longer ours, or when the renew deadline passed, which comes before the lease runs
//! out, so that the run stops before another actor could take the lock over. A blip of the API
//! server or of Docker therefore costs nothing (the numbers are at `LockSettings::renew_deadline`).
//!
//! A renewal attempt may take until the renew deadline to answer (client-go cancels at
//! `RenewDeadline`, not at `RetryPeriod`): a slow API server that answers in 4s keeps the lock.
//!
//! Expiry is judged the way client-go's leader election judges it (`observedRecord` and
//! `observedTime`), never by comparing this machine's wall clock with the expiry the holder wrote
//! by its own: a standby remembers, per pool, the lock record it last read and when, by its own
//! monotonic clock, it first read that very record ([`Observations`]). It takes the lock over
//! only once that record has stayed unchanged for the record's lease (the run's own, for a lock
//! that does not say), and then only that record: the backend refuses if it changed meanwhile.
//! A holder renews every third of its lease, changing the record each time, so a live holder is
//! never taken over, however far apart the two machines' clocks are. The cost: a lock whose
//! holder was killed is taken over a full lease after this run first saw it, not at once, so
//! `apply` needs a `--lock-timeout` at least that long to take one over. `poolctl unlock` stays
//! the user's explicit override: it removes the lock as it finds it, without any wait.
//!
//! What the run does under its locks is guarded too: before every irreversible call (an
//! eviction, a container stop or removal, a Node deletion) the executor and the drain ask the
//! [`LockGuard`] whether the lock of the pool was renewed within its renew deadline, counted
//! from the start of its last successful renewal on the monotonic clock. If not, the call is not
//! made and the step fails: the lock is not known to be held, and another actor may take it
//! over soon.
//!
//! This is a plain guard: acquire, renew while work runs, release. Which pools to lock, and
//! planning again once they are held, is the rollout's business ([`crate::rollout`]).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use tokio::time::{Instant, sleep_until, timeout_at};

use crate::backend::retry::Backoff;
use crate::backend::{BackendError, Cluster, Containers, LockError, LockGuard, LockRecord, Locks};
use crate::model::LockHolder;
use crate::rollout::cancel::{Interrupt, StopReason};
use crate::rollout::event::{Event, Sink};

/// How long a lock outlives its holder's last renewal, unless [`LEASE_ENV`] says otherwise.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(15);

/// The environment variable that sets the lease (a duration such as `15s`): short in tests, so
/// that a killed holder's lock lapses quickly.
pub const LEASE_ENV: &str = "POOLCTL_LOCK_LEASE";

/// Why the locks could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockFailure {
    /// Another actor holds a lock (still, after waiting `waited`). This run saw its record
    /// unchanged for `seen`, and takes it over only once it has for `lease`.
    #[error(
        "pool {pool} is locked by {}{}{}",
        holder.describe(SystemTime::now()),
        waited_for(*waited),
        not_seen_lapse(holder, *seen, *lease)
    )]
    Held { pool: String, holder: Box<LockHolder>, waited: Duration, seen: Duration, lease: Duration },
    /// The backend could not take it.
    #[error("cannot take the lock of pool {pool}")]
    Backend {
        pool: String,
        #[source]
        source: LockError,
    },
    /// Ctrl-C or SIGTERM while waiting.
    #[error("interrupted while waiting for the lock of pool {pool}; nothing was changed")]
    Interrupted { pool: String },
    /// [`LEASE_ENV`] does not hold a usable duration.
    #[error("{LEASE_ENV}={value}: {why}")]
    BadLease { value: String, why: String },
}

fn waited_for(waited: Duration) -> String {
    if waited.is_zero() { String::new() } else { format!(", still after waiting {}", show(waited)) }
}

/// For a lock that looks lapsed by its holder's own figure: why it was not taken over all the
/// same.
fn not_seen_lapse(holder: &LockHolder, seen: Duration, lease: Duration) -> String {
    if !holder.expired(SystemTime::now()) {
        return String::new();
    }
    format!(
        "; it looks expired by its holder's clock, but a run takes a lock over only once it has \
         seen it unchanged for its lease ({}) by its own clock, and this run saw it so for {}",
        show(lease),
        show(Duration::from_secs(seen.as_secs()))
    )
}

/// How this run takes locks, and what it saw of the locks others hold.
///
/// Whoever owns the settings owns the observations: an `apply` for its one rollout, `watch` for
/// its whole life (one value, made when it starts, for every reconcile), so that a standby
/// replica keeps counting how long it has seen a record unchanged from one reconcile to the
/// next. A clone shares the observations.
#[derive(Debug, Clone)]
pub struct LockSettings {
    /// The holder identity written into the locks (see [`holder_identity`]).
    pub who: String,
    /// How long a lock holds after each renewal.
    pub lease: Duration,
    /// How long to wait for a lock another actor holds (`--lock-timeout`); zero fails at once.
    pub timeout: Duration,
    /// The lock records this process saw others hold, and since when.
    pub observed: Arc<Observations>,
    /// This run stands by while another holds a pool (`watch`: the holder acts, and this run
    /// looks again later), rather than waiting for its lock (`apply`).
    pub standby: bool,
}

impl LockSettings {
    /// For `poolctl <command>`, with the lease from [`LEASE_ENV`] or [`DEFAULT_LEASE`].
    pub fn new(command: &str, timeout: Duration) -> Result<Self, LockFailure> {
        let lease = match std::env::var(LEASE_ENV) {
            Ok(value) if !value.trim().is_empty() => {
                let bad = |why: String| LockFailure::BadLease { value: value.clone(), why };
                let lease: Duration =
                    value.trim().parse::<crate::spec::Duration>().map_err(|e| bad(e.to_string()))?.get();
                if lease < Duration::from_secs(1) {
                    return Err(bad("a lease is at least 1s (locks keep time in seconds)".into()));
                }
                lease
            }
            _ => DEFAULT_LEASE,
        };
        Ok(Self { who: holder_identity(command), lease, timeout, observed: Arc::default(), standby: false })
    }

    /// A lock is renewed three times per lease, so that one failed renewal does not lose it.
    fn renew_every(&self) -> Duration {
        self.lease / 3
    }

    /// How long after the start of its last successful renewal a lock is given up if no renewal
    /// succeeded since, and irreversible calls are refused: 4/5 of the lease (12s of 15s).
    /// client-go's leader gives up `RenewDeadline` (10s) after the start of a renew round, which
    /// begins `RetryPeriod` (2s) after its last success: 12s after it, 3s before its
    /// `LeaseDuration` (15s) runs out. A standby takes the lock over only after it saw the record
    /// of that renewal unchanged for a whole lease, by its own monotonic clock, from a moment
    /// after this run started that renewal: those 3s are the margin for the two monotonic
    /// clocks' rates and for the time a read takes, so that this run has given the lock up
    /// before another could take it over. The renewal due lease/3 after the last leaves lease·7/15
    /// (7s) for retries, which a blip of several seconds does not use up.
    pub fn renew_deadline(&self) -> Duration {
        self.lease * 4 / 5
    }

    /// How often a renewal that failed is tried again: client-go's `RetryPeriod` of 2s, or
    /// lease/7 for a short lease, so that a few tries fit in before the renew deadline (for
    /// 15s: at 5s, 7s, 9s and 11s after the last success, against a deadline at 12s). Never
    /// under [`MIN_RENEW_RETRY`]. A try that is slow to answer is not cut short at this period:
    /// it may run until the renew deadline, as client-go's does.
    fn renew_retry(&self) -> Duration {
        (self.lease / 7).min(MAX_RENEW_RETRY).max(MIN_RENEW_RETRY)
    }
}

/// The retry period of a renewal at most: client-go's default `RetryPeriod`.
const MAX_RENEW_RETRY: Duration = Duration::from_secs(2);

/// The retry period of a renewal at least, for the very short leases of tests: a try must have
/// time to be answered (a lease from [`LEASE_ENV`] is at least 1s, whose retry is 142ms).
const MIN_RENEW_RETRY: Duration = Duration::from_millis(20);

/// Who this process is, for the locks it takes: `poolctl apply (pid 4242 on devbox)`. The
/// host and PID say where to look for the holder of a lock that seems stuck.
pub fn holder_identity(command: &str) -> String {
    let host = ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|path| {
            std::fs::read_to_string(path).ok().map(|h| h.trim().to_owned()).filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "an unknown host".to_owned());
    format!("poolctl {command} (pid {} on {host})", std::process::id())
}

/// What this process saw of the locks other actors hold, by pool: the record it last read, and
/// when it first read that very record, by its own monotonic clock (client-go's
/// `observedRecord` and `observedTime`). A record that changes in any way (another holder, a
/// renewal, a new resourceVersion or container) starts the count again.
#[derive(Debug, Default)]
pub struct Observations(Mutex<BTreeMap<String, Seen>>);

#[derive(Debug)]
struct Seen {
    record: LockRecord,
    since: Instant,
}

impl Observations {
    /// Note that `pool`'s lock reads `record` now, and say for how long this process has seen
    /// that very record.
    pub fn see(&self, pool: &str, record: &LockRecord) -> Duration {
        let now = Instant::now();
        let mut seen = self.table();
        match seen.get(pool) {
            Some(s) if s.record == *record => now.saturating_duration_since(s.since),
            _ => {
                seen.insert(pool.to_owned(), Seen { record: record.clone(), since: now });
                Duration::ZERO
            }
        }
    }

    /// The record of `pool`'s lock that this process has seen unchanged for its lease (`lease`
    /// for a record that names none): the one it may take over.
    pub fn lapsed(&self, pool: &str, lease: Duration) -> Option<LockRecord> {
        let seen = self.table();
        let s = seen.get(pool)?;
        (s.since.elapsed() >= s.record.lease.unwrap_or(lease)).then(|| s.record.clone())
    }

    fn table(&self) -> MutexGuard<'_, BTreeMap<String, Seen>> {
        crate::locked(&self.0)
    }
}

/// Where `pool`'s lock lives: in its cluster when its instances are Nodes, else in Docker.
fn place<'a, C: Locks, K: Locks>(
    containers: &'a C,
    clusters: &'a BTreeMap<String, K>,
    pool: &str,
) -> Place<'a, C, K> {
    match clusters.get(pool) {
        Some(cluster) => Place::Cluster(cluster),
        None => Place::Docker(containers),
    }
}

enum Place<'a, C, K> {
    Docker(&'a C),
    Cluster(&'a K),
}

impl<C: Locks, K: Locks> Place<'_, C, K> {
    async fn acquire(
        &self,
        pool: &str,
        who: &str,
        lease: Duration,
        takeover: Option<&LockRecord>,
    ) -> Result<LockRecord, LockError> {
        match self {
            Self::Docker(d) => d.acquire(pool, who, lease, takeover).await,
            Self::Cluster(k) => k.acquire(pool, who, lease, takeover).await,
        }
    }
    async fn renew(&self, pool: &str, held: &LockRecord, lease: Duration) -> Result<LockRecord, LockError> {
        match self {
            Self::Docker(d) => d.renew(pool, held, lease).await,
            Self::Cluster(k) => k.renew(pool, held, lease).await,
        }
    }
    async fn release(&self, pool: &str, held: &LockRecord) -> Result<(), LockError> {
        match self {
            Self::Docker(d) => d.release(pool, held).await,
            Self::Cluster(k) => k.release(pool, held).await,
        }
    }
    async fn inspect(&self, pool: &str) -> Result<Option<LockRecord>, BackendError> {
        match self {
            Self::Docker(d) => d.inspect(pool).await,
            Self::Cluster(k) => k.inspect(pool).await,
        }
    }
}

/// The locks of `pools` as they are now, without taking any (for `plan`), and the pools whose
/// lock could not be read, with why.
pub async fn inspect_locks<'p, C: Locks, K: Locks>(
    containers: &C,
    clusters: &BTreeMap<String, K>,
    pools: impl IntoIterator<Item = &'p str>,
) -> (BTreeMap<String, LockHolder>, Vec<(String, BackendError)>) {
    let (mut held, mut unreadable) = (BTreeMap::new(), Vec::new());
    for pool in pools {
        match place(containers, clusters, pool).inspect(pool).await {
            Ok(record) => held.extend(record.map(|r| (pool.to_owned(), r.holder))),
            Err(e) => unreadable.push((pool.to_owned(), e)),
        }
    }
    (held, unreadable)
}

/// The lock of one pool, read from where it lives, and its removal (`poolctl unlock`).
pub async fn inspect_lock<C: Locks, K: Locks>(
    containers: &C,
    clusters: &BTreeMap<String, K>,
    pool: &str,
) -> Result<Option<LockRecord>, BackendError> {
    place(containers, clusters, pool).inspect(pool).await
}

/// Break `pool`'s lock, if it is still `seen` (a lock that changed hands since is left alone).
/// This is `poolctl unlock`, the user's explicit override: it does not wait to see the lock
/// lapse, since the user says its holder is gone.
pub async fn break_lock<C: Locks, K: Locks>(
    containers: &C,
    clusters: &BTreeMap<String, K>,
    pool: &str,
    seen: &LockRecord,
) -> Result<(), LockError> {
    place(containers, clusters, pool).release(pool, seen).await
}

/// The locks one run holds.
pub struct PoolLocks<'a, C, K> {
    containers: &'a C,
    clusters: &'a BTreeMap<String, K>,
    settings: &'a LockSettings,
    /// Where what the locks say goes (waiting for one, one lost).
    sink: &'a dyn Sink,
    held: Vec<HeldLock>,
    /// What the executor asks before an irreversible call.
    guard: LockGuard,
}

/// One lock taken by this run.
struct HeldLock {
    pool: String,
    record: LockRecord,
    /// When the call that took or last renewed it started. The backend counts the lease from
    /// when it wrote, which is later, so the lock holds at least a lease from then: the renew
    /// deadline is counted from here, by this process's own monotonic clock, as client-go does.
    renewed: Instant,
    /// Lost since (broken, taken over, or not renewed by its deadline): no longer renewed nor
    /// released, and no longer counted as held.
    lost: bool,
}

impl<'a, C: Containers + Locks, K: Cluster + Locks> PoolLocks<'a, C, K> {
    /// No locks yet.
    pub fn new(
        containers: &'a C,
        clusters: &'a BTreeMap<String, K>,
        settings: &'a LockSettings,
        sink: &'a dyn Sink,
    ) -> Self {
        Self { containers, clusters, settings, sink, held: Vec::new(), guard: LockGuard::guarding() }
    }

    /// The handle that says whether each lock is known to be held (see [`LockGuard`]).
    pub fn guard(&self) -> LockGuard {
        self.guard.clone()
    }

    /// The pools whose locks are held.
    pub fn pools(&self) -> BTreeSet<&str> {
        self.held.iter().filter(|h| !h.lost).map(|h| h.pool.as_str()).collect()
    }

    /// Take the locks of `pools` that are not held yet, in name order, each waiting up to the
    /// `--lock-timeout` (one deadline for them all) while another actor holds it. On failure,
    /// the locks taken so far stay held; [`PoolLocks::release`] gives them up.
    pub async fn acquire(
        &mut self,
        pools: &BTreeSet<String>,
        interrupt: &Interrupt,
    ) -> Result<(), LockFailure> {
        let deadline = Instant::now() + self.settings.timeout;
        // A lock lost earlier is taken afresh, if asked for again.
        self.held.retain(|h| !h.lost);
        let missing: Vec<String> =
            pools.iter().filter(|p| !self.pools().contains(p.as_str())).cloned().collect();
        for pool in missing {
            let (record, renewed) = self.acquire_one(&pool, deadline, interrupt).await?;
            self.sink.event(&Event::Lock { pool: &pool, held: true });
            self.guard.renewed(&pool, renewed, self.settings.renew_deadline());
            self.held.push(HeldLock { pool, record, renewed, lost: false });
        }
        Ok(())
    }

    /// Take one lock; with it, when the call that took it started.
    ///
    /// A lock another actor holds is read again and again while the `--lock-timeout` lasts, each
    /// read noted in the observations; once this process has seen the same record for its lease
    /// (see the module comment), it asks the backend to take over that record.
    async fn acquire_one(
        &self,
        pool: &str,
        deadline: Instant,
        interrupt: &Interrupt,
    ) -> Result<(LockRecord, Instant), LockFailure> {
        let place = place(self.containers, self.clusters, pool);
        let (who, lease, observed) = (&self.settings.who, self.settings.lease, &self.settings.observed);
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let mut waiting = false;
        loop {
            let takeover = observed.lapsed(pool, lease);
            if let Some(lapsed) = &takeover {
                tracing::info!(
                    "taking over the expired lock of pool {pool}: {}; this run saw it unchanged for its \
                     lease ({}) by its own clock",
                    lapsed.holder.describe(SystemTime::now()),
                    show(lapsed.lease.unwrap_or(lease))
                );
            }
            let started = Instant::now();
            let record = match place.acquire(pool, who, lease, takeover.as_ref()).await {
                Ok(record) => {
                    // Taken: nothing to count any more.
                    observed.table().remove(pool);
                    if waiting {
                        self.sink.say(&format!("took the lock of pool {pool}"));
                    }
                    return Ok((record, started));
                }
                Err(LockError::Held { record, .. }) => *record,
                Err(source) => return Err(LockFailure::Backend { pool: pool.to_owned(), source }),
            };
            let seen = observed.see(pool, &record);
            let needed = record.lease.unwrap_or(lease);
            if seen >= needed && takeover.as_ref() != Some(&record) {
                // Lapsed by this run's own observation: take it over now.
                continue;
            }
            if interrupt.is_set() {
                return Err(LockFailure::Interrupted { pool: pool.to_owned() });
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(LockFailure::Held {
                    pool: pool.to_owned(),
                    holder: Box::new(record.holder),
                    waited: self.settings.timeout,
                    seen,
                    lease: needed,
                });
            }
            if !waiting {
                let left = deadline - now;
                let left =
                    crate::spec::Duration::from_secs(left.as_secs() + u64::from(left.subsec_nanos() > 0));
                self.sink.say(&format!(
                    "waiting up to {left} for the lock of pool {pool}, held by {}",
                    record.holder.describe(SystemTime::now())
                ));
                waiting = true;
            }
            // Read again after the backoff, or when the record would have stood for its lease.
            let lapses = now + needed.saturating_sub(seen);
            backoff.wait_until(if lapses > now { lapses.min(deadline) } else { deadline }).await;
        }
    }

    /// Run `work` while keeping the locks renewed. A lock that is lost (broken, taken over, or
    /// not renewed by its renew deadline) stops the run at the next step boundary through
    /// `interrupt`.
    pub async fn hold_while<T>(&mut self, interrupt: &Interrupt, work: impl Future<Output = T>) -> T {
        let mut work = pin!(work);
        if self.held.is_empty() {
            return work.await;
        }
        let mut renew = pin!(self.keep_renewed(interrupt));
        let mut renewing = true;
        loop {
            tokio::select! {
                out = &mut work => return out,
                () = &mut renew, if renewing => renewing = false,
            }
        }
    }

    /// Keep every held lock renewed until all are lost. Each lock is renewed on its own, so
    /// that a backend that is slow to answer for one pool (its cluster's API server) delays
    /// no other pool's renewal.
    async fn keep_renewed(&mut self, interrupt: &Interrupt) {
        let (containers, clusters, settings, sink) =
            (self.containers, self.clusters, self.settings, self.sink);
        let guard = &self.guard;
        let renewing = self.held.iter_mut().filter(|h| !h.lost).map(|held| {
            let place = place(containers, clusters, &held.pool);
            async move {
                let why = renew_until_lost(&place, held, settings, guard).await;
                guard.lost(&held.pool);
                held.lost = true;
                sink.event(&Event::Lock { pool: &held.pool, held: false });
                interrupt.stop(StopReason::LockLost);
                sink.say(&format!(
                    "lost the lock of pool {}: {why}; stopping at the next step boundary",
                    held.pool
                ));
            }
        });
        futures::future::join_all(renewing).await;
    }

    /// The locks held now (not lost), with their records: what the holder may still tidy
    /// under them before [`PoolLocks::release`].
    pub fn held(&self) -> impl Iterator<Item = (&str, &LockRecord)> {
        self.held.iter().filter(|h| !h.lost).map(|h| (h.pool.as_str(), &h.record))
    }

    /// Give every lock up. Best effort: a lock that cannot be removed lapses on its own.
    pub async fn release(self) {
        for HeldLock { pool, record, .. } in self.held.iter().filter(|h| !h.lost) {
            self.guard.lost(pool);
            self.sink.event(&Event::Lock { pool, held: false });
            match place(self.containers, self.clusters, pool).release(pool, record).await {
                Ok(()) => {}
                Err(LockError::Lost { why, .. }) => {
                    tracing::warn!("the lock of pool {pool} was no longer this run's ({why}); left as it is");
                }
                Err(e) => tracing::warn!(
                    "cannot release the lock of pool {pool} ({e}); it lapses at {}",
                    crate::model::timestamp(record.holder.expires)
                ),
            }
        }
    }
}

/// Renew `held` every [`LockSettings::renew_every`] until it is lost, and say why it was;
/// `guard` learns of every successful renewal.
///
/// A renewal that fails for a reason the backend does not call [`LockError::Lost`] (an API
/// server answering 503, Docker refusing a connection) is tried again every
/// [`LockSettings::renew_retry`] until one succeeds. A try that is slow to answer may take until
/// the renew deadline. The lock is lost when the backend says it is no longer this run's, or
/// when no try succeeded by the renew deadline, which falls before the lease runs out (see
/// [`LockSettings::renew_deadline`]).
async fn renew_until_lost<C: Locks, K: Locks>(
    place: &Place<'_, C, K>,
    held: &mut HeldLock,
    settings: &LockSettings,
    guard: &LockGuard,
) -> String {
    let (lease, retry) = (settings.lease, settings.renew_retry());
    loop {
        sleep_until(held.renewed + settings.renew_every()).await;
        // A round that starts late (the work began long after the lock was taken) still makes
        // one try: a renewal proves the lock is still this run's, or the backend says it is not.
        let give_up = (held.renewed + settings.renew_deadline()).max(Instant::now() + retry);
        loop {
            let started = Instant::now();
            let next = started + retry;
            let failed = match timeout_at(give_up, place.renew(&held.pool, &held.record, lease)).await {
                Ok(Ok(renewed)) => {
                    held.record = renewed;
                    held.renewed = started;
                    guard.renewed(&held.pool, started, settings.renew_deadline());
                    break;
                }
                Ok(Err(LockError::Lost { why, .. })) => return why,
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("no answer within {}", show(give_up.saturating_duration_since(started))),
            };
            if next >= give_up || Instant::now() >= give_up {
                return format!(
                    "it could not be renewed within {} of its last renewal, and lapses {} after it \
                     ({failed})",
                    show(settings.renew_deadline()),
                    show(lease)
                );
            }
            match next.saturating_duration_since(Instant::now()) {
                wait if wait.is_zero() => {
                    tracing::warn!("cannot renew the lock of pool {} ({failed}); trying again", held.pool);
                }
                wait => tracing::warn!(
                    "cannot renew the lock of pool {} ({failed}); trying again in {}",
                    held.pool,
                    show(wait)
                ),
            }
            sleep_until(next).await;
        }
    }
}

/// A duration as a user reads it (`12s`, `1s500ms`).
fn show(d: Duration) -> crate::spec::Duration {
    crate::spec::Duration::from(d)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::backend::Connect;
    use crate::model::ClusterRef;
    use crate::testing::build::{container, node};
    use crate::testing::fake::{FakeCluster, FakeWorld};
    use crate::testing::progress;

    fn text(buf: &Arc<Mutex<Vec<u8>>>) -> String {
        String::from_utf8(buf.lock().unwrap().clone()).unwrap()
    }

    fn settings(lease: Duration, timeout: Duration) -> LockSettings {
        LockSettings {
            who: "poolctl test (pid 1 on here)".into(),
            lease,
            timeout,
            observed: Arc::default(),
            standby: false,
        }
    }

    /// A world with a container pool `w` and a node pool `k`, whose locks a rollout takes.
    fn scene() -> FakeWorld {
        FakeWorld::new(crate::testing::build::world_of(vec![
            container("w-a", "w", "old", 1),
            container("w-b", "w", "old", 2),
        ]))
    }

    /// The pools a rollout of the scene changes: `k` keeps its lock in its cluster.
    fn pools() -> BTreeSet<String> {
        BTreeSet::from(["k".to_owned(), "w".to_owned()])
    }

    async fn clusters(fake: &FakeWorld) -> BTreeMap<String, FakeCluster> {
        let k = fake.connect(&ClusterRef { kubeconfig: None, context: None }, "k").await.unwrap();
        BTreeMap::from([("k".to_owned(), k)])
    }

    const LONG: Duration = Duration::from_secs(60);

    #[tokio::test]
    async fn each_lock_is_taken_where_its_pool_lives_and_released() {
        let fake = scene();
        let clusters = clusters(&fake).await;
        let (out, _) = progress();
        let settings = settings(LONG, Duration::ZERO);
        let mut locks = PoolLocks::new(&fake, &clusters, &settings, &out);
        locks.acquire(&pools(), &Interrupt::default()).await.unwrap();
        assert_eq!(locks.pools(), BTreeSet::from(["k", "w"]));
        let held: Vec<String> = fake.locks().into_keys().collect();
        assert_eq!(held, ["docker/w", "lease/k"], "a pool of Nodes is locked by a Lease");
        assert_eq!(fake.locks()["docker/w"].holder.who, "poolctl test (pid 1 on here)");
        // Asking again for pools already held takes nothing twice.
        locks.acquire(&pools(), &Interrupt::default()).await.unwrap();
        assert_eq!(fake.calls().iter().filter(|c| c.starts_with("lock ")).count(), 2, "{:?}", fake.calls());
        locks.release().await;
        assert!(fake.locks().is_empty(), "{:?}", fake.locks());
    }

    /// Take the scene's locks, run `meanwhile`, then release them.
    async fn lock_then_release(fake: &FakeWorld, meanwhile: impl FnOnce()) {
        let clusters = clusters(fake).await;
        let (out, _) = progress();
        let settings = settings(LONG, Duration::ZERO);
        let mut locks = PoolLocks::new(fake, &clusters, &settings, &out);
        locks.acquire(&pools(), &Interrupt::default()).await.unwrap();
        meanwhile();
        crate::rollout::tidy_and_release(locks, fake, &clusters).await;
    }

    #[tokio::test]
    async fn a_release_forgets_the_joining_instances_that_need_no_finding_by_name() {
        let fake = scene();
        let mut unlabelled = node("k-unlabelled", "k");
        unlabelled.pool = None;
        {
            let mut sim = fake.sim();
            sim.world.nodes.extend([node("k-labelled", "k"), unlabelled]);
            sim.world.containers.push(container("k-starting", "k", "kh", 4));
        }
        for name in ["k-labelled", "k-unlabelled", "k-gone", "k-starting"] {
            fake.note_joining("k", name);
        }
        lock_then_release(&fake, || {}).await;
        // A labelled Node is found by its label, a name with neither Node nor container names
        // nothing; a Node without the label, and a container whose Node may still register, are
        // kept for the next plan.
        let left: Vec<String> = fake.joining("k").into_iter().collect();
        assert_eq!(left, ["k-starting", "k-unlabelled"]);
        assert!(fake.locks().is_empty(), "{:?}", fake.locks());
    }

    #[tokio::test]
    async fn a_release_leaves_the_record_alone_once_another_run_holds_the_lock() {
        let fake = scene();
        // Broken, then taken by another run, which records an instance it is about to create.
        lock_then_release(&fake, || {
            fake.break_lock("lease", "k");
            fake.hold_lock("lease", "k", "poolctl apply (pid 9 on there)", SystemTime::now() + LONG);
            fake.note_joining("k", "k-theirs");
        })
        .await;
        assert_eq!(fake.joining("k").into_iter().collect::<Vec<_>>(), ["k-theirs"]);
        assert_eq!(fake.locks()["lease/k"].holder.who, "poolctl apply (pid 9 on there)");
    }

    #[tokio::test]
    async fn a_pool_another_run_holds_fails_at_once_naming_the_holder() {
        let fake = scene();
        fake.hold_lock("docker", "w", "poolctl apply (pid 9 on there)", SystemTime::now() + LONG);
        let clusters = clusters(&fake).await;
        let (out, _) = progress();
        let settings = settings(LONG, Duration::ZERO);
        let mut locks = PoolLocks::new(&fake, &clusters, &settings, &out);
        let err = locks.acquire(&pools(), &Interrupt::default()).await.unwrap_err();
        let message = err.to_string();
        assert!(
            message.starts_with("pool w is locked by poolctl apply (pid 9 on there) since "),
            "{message}"
        );
        assert!(message.contains("unless renewed"), "{message}");
        // `k` sorts before `w`: its lock was taken first, and is given up.
        assert_eq!(locks.pools(), BTreeSet::from(["k"]));
        locks.release().await;
        let left: Vec<String> = fake.locks().into_keys().collect();
        assert_eq!(left, ["docker/w"], "the other run keeps its lock; ours is released");
    }

    /// Another machine's lock on pool `w`, whose clock is an hour off: by its own figure it
    /// lapsed long ago.
    fn skewed_lock(fake: &FakeWorld) {
        let an_hour_ago = SystemTime::now() - Duration::from_secs(3600);
        fake.hold_lock("docker", "w", "poolctl watch (pid 9 on there)", an_hour_ago);
    }

    fn record(version: &str, lease: Option<Duration>) -> LockRecord {
        let holder = LockHolder {
            who: "poolctl watch (pid 9 on there)".into(),
            since: SystemTime::UNIX_EPOCH,
            expires: SystemTime::UNIX_EPOCH,
        };
        LockRecord { holder, version: version.into(), lease }
    }

    #[tokio::test(start_paused = true)]
    async fn a_record_lapses_once_seen_unchanged_for_its_lease_and_a_change_starts_the_count_again() {
        let observed = Observations::default();
        let first = record("v1", Some(Duration::from_secs(10)));
        assert_eq!(observed.see("w", &first), Duration::ZERO);
        tokio::time::advance(Duration::from_secs(9)).await;
        assert_eq!(observed.see("w", &first), Duration::from_secs(9));
        // The record's own lease counts, not the run's (a minute here).
        assert_eq!(observed.lapsed("w", LONG), None);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(observed.lapsed("w", LONG), Some(first.clone()));
        assert_eq!(observed.lapsed("k", LONG), None, "another pool's lock was never seen");
        // Renewed: a new version; seen for no time at all.
        let renewed = record("v2", Some(Duration::from_secs(10)));
        assert_eq!(observed.see("w", &renewed), Duration::ZERO);
        assert_eq!(observed.lapsed("w", LONG), None);
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(observed.lapsed("w", LONG), Some(renewed));
        // A record that names no lease goes by the run's.
        let silent = record("v3", None);
        observed.see("w", &silent);
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(observed.lapsed("w", LONG), None);
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(observed.lapsed("w", LONG), Some(silent));
    }

    #[tokio::test(start_paused = true)]
    async fn a_lock_expired_by_its_holder_s_clock_is_not_taken_over_before_this_run_saw_it_for_a_lease() {
        let fake = scene();
        skewed_lock(&fake);
        let clusters = clusters(&fake).await;
        let (out, _) = progress();
        let settings = settings(DEFAULT_LEASE, Duration::ZERO);
        let mut locks = PoolLocks::new(&fake, &clusters, &settings, &out);
        let err = locks.acquire(&pools(), &Interrupt::default()).await.unwrap_err();
        let message = err.to_string();
        assert!(message.contains("(by its holder's clock, expired 1h"), "{message}");
        assert!(
            message.ends_with(
                "; it looks expired by its holder's clock, but a run takes a lock over only once it has \
                 seen it unchanged for its lease (15s) by its own clock, and this run saw it so for 0s"
            ),
            "{message}"
        );
        assert_eq!(fake.locks()["docker/w"].holder.who, "poolctl watch (pid 9 on there)");
        locks.release().await;
    }

    #[tokio::test(start_paused = true)]
    async fn with_a_lock_timeout_a_lock_left_unchanged_for_a_lease_is_taken_over() {
        let fake = scene();
        skewed_lock(&fake);
        let left = fake.locks()["docker/w"].clone();
        let clusters = clusters(&fake).await;
        let (out, buf) = progress();
        let settings = settings(DEFAULT_LEASE, LONG);
        let mut locks = PoolLocks::new(&fake, &clusters, &settings, &out);
        let start = Instant::now();
        locks.acquire(&pools(), &Interrupt::default()).await.unwrap();
        let waited = start.elapsed();
        assert!((DEFAULT_LEASE..DEFAULT_LEASE + Duration::from_secs(1)).contains(&waited), "{waited:?}");
        assert_eq!(fake.locks()["docker/w"].holder.who, "poolctl test (pid 1 on here)");
        assert_ne!(fake.locks()["docker/w"].version, left.version);
        assert!(text(&buf).contains("took the lock of pool w"), "{}", text(&buf));
        locks.release().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_holder_that_keeps_renewing_is_never_taken_over_however_its_clock_reads() {
        let fake = scene();
        skewed_lock(&fake);
        let clusters = clusters(&fake).await;
        let (out, _) = progress();
        let settings = settings(DEFAULT_LEASE, Duration::from_secs(40));
        let mut locks = PoolLocks::new(&fake, &clusters, &settings, &out);
        let start = Instant::now();
        // The holder renews at 10s and 20s (its clock still an hour behind), then is gone.
        let holder = async {
            for _ in 0..2 {
                tokio::time::sleep(Duration::from_secs(10)).await;
                fake.renew_lock("docker", "w", SystemTime::now() - Duration::from_secs(3600));
            }
        };
        let (wanted, interrupt) = (pools(), Interrupt::default());
        let (taken, ()) = tokio::join!(locks.acquire(&wanted, &interrupt), holder);
        taken.unwrap();
        // Seen unchanged from its last renewal at 20s on, for a lease: taken at 35s, not before.
        let elapsed = start.elapsed();
        assert!((Duration::from_secs(35)..Duration::from_secs(37)).contains(&elapsed), "{elapsed:?}");
        assert_eq!(fake.locks()["docker/w"].holder.who, "poolctl test (pid 1 on here)");
        locks.release().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_standby_keeps_what_it_saw_from_one_rollout_to_the_next() {
        let fake = scene();
        skewed_lock(&fake);
        let clusters = clusters(&fake).await;
        let (out, _) = progress();
        // As watch: no waiting, one settings value for every reconcile.
        let settings = settings(DEFAULT_LEASE, Duration::ZERO);
        let wanted = BTreeSet::from(["w".to_owned()]);
        let mut first = PoolLocks::new(&fake, &clusters, &settings, &out);
        let Err(LockFailure::Held { seen, lease, .. }) = first.acquire(&wanted, &Interrupt::default()).await
        else {
            panic!("held")
        };
        assert_eq!((seen, lease), (Duration::ZERO, DEFAULT_LEASE));
        first.release().await;
        tokio::time::advance(Duration::from_secs(14)).await;
        let mut second = PoolLocks::new(&fake, &clusters, &settings, &out);
        let Err(LockFailure::Held { seen, .. }) = second.acquire(&wanted, &Interrupt::default()).await else {
            panic!("still held at 14s")
        };
        assert_eq!(seen, Duration::from_secs(14));
        second.release().await;
        tokio::time::advance(Duration::from_secs(1)).await;
        let mut third = PoolLocks::new(&fake, &clusters, &settings, &out);
        third.acquire(&wanted, &Interrupt::default()).await.unwrap();
        assert_eq!(fake.locks()["docker/w"].holder.who, "poolctl test (pid 1 on here)");
        third.release().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_lock_not_renewed_within_its_renew_deadline_is_not_known_to_be_held() {
        let fake = scene();
        let clusters = clusters(&fake).await;
        let (out, _) = progress();
        let settings = settings(DEFAULT_LEASE, Duration::ZERO);
        let mut locks = locked_for_15s(&fake, &clusters, &settings, &out).await;
        let guard = locks.guard();
        assert!(guard.check("w").is_ok() && guard.check("k").is_ok());
        let err = guard.check("q").unwrap_err().to_string();
        assert!(
            err.contains("the lock of pool q is not known to be held: this run does not hold it"),
            "{err}"
        );
        // Nothing renews it (no work is held): 12s after it was taken, it is not known to be held.
        tokio::time::advance(Duration::from_millis(11_999)).await;
        assert!(guard.check("w").is_ok());
        tokio::time::advance(Duration::from_millis(1)).await;
        let err = guard.check("w").unwrap_err().to_string();
        assert_eq!(
            err,
            "the lock of pool w is not known to be held: it was not renewed within 12s of its last \
             renewal; nothing irreversible is done without it"
        );
        // A renewal makes it known again, for another renew deadline from its start.
        let interrupt = Interrupt::default();
        let renewed = async {
            while count(&fake, "renew w") < 1 {
                tokio::task::yield_now().await;
            }
        };
        locks.hold_while(&interrupt, renewed).await;
        assert!(guard.check("w").is_ok());
        locks.release().await;
        assert!(guard.check("w").is_err(), "a released lock is not held");
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_answered_after_4s_keeps_the_lock() {
        let fake = scene();
        let clusters = clusters(&fake).await;
        let (out, buf) = progress();
        let settings = settings(DEFAULT_LEASE, Duration::ZERO);
        let mut locks = locked_for_15s(&fake, &clusters, &settings, &out).await;
        let guard = locks.guard();
        let start = Instant::now();
        // k's API server answers every renewal, 4s late: past the 2s retry period, within the
        // renew deadline.
        fake.slow("renew k", Duration::from_secs(4));
        let interrupt = Interrupt::default();
        let work = async {
            while count(&fake, "renew k") < 3 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            // The third, made at 15s (each round 5s after the start of the last), answers at 19s.
            tokio::time::sleep(Duration::from_millis(4500)).await;
        };
        tokio::time::timeout(LONG, locks.hold_while(&interrupt, work)).await.expect("the work ends");
        assert!(start.elapsed() >= Duration::from_secs(19));
        assert!(!interrupt.is_set(), "a slow server loses nothing: {:?}", interrupt.reason());
        assert_eq!(text(&buf), "", "nothing was lost");
        assert_eq!(count(&fake, "renew k"), 3, "one try per round, none cut short: {:?}", fake.calls());
        assert!(guard.check("k").is_ok(), "renewed at 15s, known to be held until 27s");
        locks.release().await;
        assert!(fake.locks().is_empty(), "{:?}", fake.locks());
    }

    #[tokio::test]
    async fn with_a_lock_timeout_a_run_waits_until_the_holder_lets_go() {
        let fake = scene();
        fake.hold_lock("docker", "w", "poolctl apply (pid 9 on there)", SystemTime::now() + LONG);
        let clusters = clusters(&fake).await;
        let (out, buf) = progress();
        let settings = settings(LONG, LONG);
        let mut locks = PoolLocks::new(&fake, &clusters, &settings, &out);
        let interrupt = Interrupt::default();
        let holder_lets_go = async {
            // Once the waiting run was refused, the holder ends.
            while !fake.calls().contains(&"lock w".to_owned()) {
                tokio::task::yield_now().await;
            }
            fake.break_lock("docker", "w");
        };
        let wanted = pools();
        let (taken, ()) = tokio::join!(locks.acquire(&wanted, &interrupt), holder_lets_go);
        taken.unwrap();
        let said = text(&buf);
        assert!(
            said.contains("waiting up to 1m for the lock of pool w, held by poolctl apply (pid 9"),
            "{said}"
        );
        assert!(said.contains("took the lock of pool w"), "{said}");
    }

    #[tokio::test]
    async fn an_interrupt_stops_the_wait_for_a_lock() {
        let fake = scene();
        fake.hold_lock("docker", "w", "poolctl apply (pid 9 on there)", SystemTime::now() + LONG);
        let clusters = clusters(&fake).await;
        let (out, _) = progress();
        let settings = settings(LONG, LONG);
        let mut locks = PoolLocks::new(&fake, &clusters, &settings, &out);
        let interrupt = Interrupt::default();
        interrupt.trigger();
        let err = locks.acquire(&pools(), &interrupt).await.unwrap_err();
        assert!(matches!(&err, LockFailure::Interrupted { pool } if pool == "w"), "{err:?}");
        locks.release().await;
    }

    #[tokio::test]
    async fn locks_are_renewed_while_the_work_runs_and_a_broken_one_stops_it_at_the_next_step_boundary() {
        let fake = scene();
        let clusters = clusters(&fake).await;
        let (out, buf) = progress();
        let settings = settings(Duration::from_millis(60), Duration::ZERO);
        let mut locks = PoolLocks::new(&fake, &clusters, &settings, &out);
        let interrupt = Interrupt::default();
        locks.acquire(&pools(), &interrupt).await.unwrap();
        let renewals = || fake.calls().iter().filter(|c| *c == "renew w").count();
        let work = async {
            while renewals() < 2 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            assert!(!interrupt.is_set(), "renewed locks stop nothing");
            fake.break_lock("docker", "w");
            while !interrupt.is_set() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(LONG, locks.hold_while(&interrupt, work)).await.expect("the work ends");
        assert_eq!(interrupt.reason(), Some(StopReason::LockLost));
        let said = text(&buf);
        assert!(
            said.contains("lost the lock of pool w: it was broken; stopping at the next step boundary"),
            "{said}"
        );
        locks.release().await;
        assert!(fake.locks().is_empty(), "the lock of k is released, w's was broken: {:?}", fake.locks());
    }

    /// The scene's locks, taken with the default lease of 15s. The tests that use it pause
    /// tokio's clock: their seconds pass at once, and at exactly the times the renewal sets, so
    /// that they wait on what happened and never on how fast the machine is.
    async fn locked_for_15s<'a>(
        fake: &'a FakeWorld,
        clusters: &'a BTreeMap<String, FakeCluster>,
        settings: &'a LockSettings,
        out: &'a crate::report::Progress,
    ) -> PoolLocks<'a, FakeWorld, FakeCluster> {
        let mut locks = PoolLocks::new(fake, clusters, settings, out);
        locks.acquire(&pools(), &Interrupt::default()).await.unwrap();
        locks
    }

    fn count(fake: &FakeWorld, call: &str) -> usize {
        fake.calls().iter().filter(|c| *c == call).count()
    }

    #[test]
    fn a_15s_lease_is_renewed_every_5s_retried_every_2s_and_given_up_after_12s() {
        let settings = settings(DEFAULT_LEASE, Duration::ZERO);
        assert_eq!(settings.renew_every(), Duration::from_secs(5));
        assert_eq!(settings.renew_retry(), Duration::from_secs(2));
        assert_eq!(settings.renew_deadline(), Duration::from_secs(12));
        // The shortest lease LEASE_ENV allows still has a few tries before its deadline.
        let short = self::settings(Duration::from_secs(1), Duration::ZERO);
        assert_eq!(short.renew_retry().as_millis(), 142);
        assert!(short.renew_every() + short.renew_retry() * 3 < short.renew_deadline());
        assert!(short.renew_deadline() < short.lease);
    }

    #[tokio::test(start_paused = true)]
    async fn renewals_refused_for_4s_lose_no_lock() {
        let fake = scene();
        let clusters = clusters(&fake).await;
        let (out, buf) = progress();
        let settings = settings(DEFAULT_LEASE, Duration::ZERO);
        let mut locks = locked_for_15s(&fake, &clusters, &settings, &out).await;
        let start = Instant::now();
        // The API server answers 503 for 4s from the first renewal on, at 5s: the renewal is
        // refused then, and again at 7s; at 9s it succeeds, 3s before the renew deadline.
        fake.failing_for("renew k", Duration::from_secs(4));
        let interrupt = Interrupt::default();
        let work = async {
            // The renewal after that one comes 5s later, at 14s, as usual.
            while count(&fake, "renew k") < 4 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(LONG, locks.hold_while(&interrupt, work)).await.expect("the work ends");
        let elapsed = start.elapsed();
        assert!(
            (Duration::from_secs(14)..Duration::from_secs(15)).contains(&elapsed),
            "renewed at 9s, so next at 14s: {elapsed:?}"
        );
        assert!(!interrupt.is_set(), "a blip stops nothing: {:?}", interrupt.reason());
        assert_eq!(locks.pools(), BTreeSet::from(["k", "w"]));
        assert_eq!(text(&buf), "", "nothing was lost");
        assert!(count(&fake, "renew w") >= 2, "the other pool was renewed meanwhile: {:?}", fake.calls());
        locks.release().await;
        assert!(fake.locks().is_empty(), "both locks are released: {:?}", fake.locks());
    }

    #[tokio::test(start_paused = true)]
    async fn renewals_refused_past_the_renew_deadline_lose_the_lock_before_it_lapses() {
        let fake = scene();
        let clusters = clusters(&fake).await;
        let (out, buf) = progress();
        let settings = settings(DEFAULT_LEASE, Duration::ZERO);
        let mut locks = locked_for_15s(&fake, &clusters, &settings, &out).await;
        let start = Instant::now();
        fake.failing_for("renew k", Duration::from_secs(60));
        let interrupt = Interrupt::default();
        let work = async {
            while !interrupt.is_set() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(LONG, locks.hold_while(&interrupt, work)).await.expect("the work ends");
        // Tried at 5s, 7s, 9s and 11s; no try is left before the deadline at 12s, which is
        // before the lock lapses at 15s, when another run could take it.
        let elapsed = start.elapsed();
        assert!(elapsed < settings.renew_deadline(), "given up at {elapsed:?}");
        assert_eq!(count(&fake, "renew k"), 4, "{:?}", fake.calls());
        assert_eq!(interrupt.reason(), Some(StopReason::LockLost));
        let said = text(&buf);
        assert_eq!(
            said,
            "lost the lock of pool k: it could not be renewed within 12s of its last renewal, and \
             lapses 15s after it (renew k refused); stopping at the next step boundary\n"
        );
        assert_eq!(locks.pools(), BTreeSet::from(["w"]), "the other pool's lock is still held");
        locks.release().await;
        let left: Vec<String> = fake.locks().into_keys().collect();
        assert_eq!(left, ["lease/k"], "a lost lock is left to lapse; w's is released");
    }

    #[tokio::test(start_paused = true)]
    async fn a_broken_lock_is_lost_at_its_next_renewal_without_a_retry() {
        let fake = scene();
        let clusters = clusters(&fake).await;
        let (out, buf) = progress();
        let settings = settings(DEFAULT_LEASE, Duration::ZERO);
        let mut locks = locked_for_15s(&fake, &clusters, &settings, &out).await;
        let start = Instant::now();
        fake.break_lock("docker", "w");
        let interrupt = Interrupt::default();
        let work = async {
            while !interrupt.is_set() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(LONG, locks.hold_while(&interrupt, work)).await.expect("the work ends");
        assert!(start.elapsed() < Duration::from_secs(6), "lost at the first renewal, at 5s");
        assert_eq!(count(&fake, "renew w"), 1, "{:?}", fake.calls());
        assert_eq!(interrupt.reason(), Some(StopReason::LockLost));
        assert_eq!(
            text(&buf),
            "lost the lock of pool w: it was broken; stopping at the next step boundary\n"
        );
        assert_eq!(locks.pools(), BTreeSet::from(["k"]));
        locks.release().await;
        assert!(fake.locks().is_empty(), "{:?}", fake.locks());
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_that_never_answers_delays_no_other_pool() {
        let fake = scene();
        let clusters = clusters(&fake).await;
        let (out, buf) = progress();
        let settings = settings(DEFAULT_LEASE, Duration::ZERO);
        let mut locks = locked_for_15s(&fake, &clusters, &settings, &out).await;
        // k's API server accepts the renewals and never answers.
        fake.silent("renew k");
        let interrupt = Interrupt::default();
        let work = async {
            while !interrupt.is_set() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(LONG, locks.hold_while(&interrupt, work)).await.expect("the work ends");
        // Tried at 5s, and given the time until the renew deadline at 12s to answer; w was
        // renewed at 5s and 10s all the same.
        assert_eq!(count(&fake, "renew k"), 1, "{:?}", fake.calls());
        assert_eq!(count(&fake, "renew w"), 2, "{:?}", fake.calls());
        assert_eq!(
            text(&buf),
            "lost the lock of pool k: it could not be renewed within 12s of its last renewal, and \
             lapses 15s after it (no answer within 7s); stopping at the next step boundary\n"
        );
        assert_eq!(locks.pools(), BTreeSet::from(["w"]));
        locks.release().await;
        assert!(!fake.locks().contains_key("docker/w"), "{:?}", fake.locks());
    }
}
