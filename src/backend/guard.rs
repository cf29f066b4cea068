//! The handle a backend asks before every irreversible call (an eviction, a container stop, a
//! Node deletion): whether the lock of the pool it acts for is known to be held. The rollout's
//! locks keep it up to date; a backend only reads it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::BackendError;

/// Whether the locks a rollout acts under are known to be held, for whoever is about to make an
/// irreversible call (the executor, the drain): a cheap handle that the rollout's locks
/// (`PoolLocks`) keep up to date as they take, renew and lose locks. A lock is known to be held
/// until its renew deadline after the start of its last successful renewal, on the monotonic clock.
#[derive(Debug, Clone)]
pub struct LockGuard(Option<Arc<Mutex<BTreeMap<String, Fresh>>>>);

/// Until when a held lock is known to be held, and the renew deadline that says so.
#[derive(Debug, Clone, Copy)]
struct Fresh {
    until: Instant,
    deadline: Duration,
}

impl LockGuard {
    /// A guard that allows everything: for what runs without locks (the executor's own tests,
    /// a drain called directly).
    pub fn unguarded() -> Self {
        Self(None)
    }

    /// A guard for a run's locks, none held yet: it allows nothing until the rollout's locks
    /// (`PoolLocks`) take one.
    pub fn guarding() -> Self {
        Self(Some(Arc::default()))
    }

    /// `Ok` when `pool`'s lock is known to be held right now; else the error that fails the
    /// step, which must then make no irreversible call.
    pub fn check(&self, pool: &str) -> Result<(), BackendError> {
        let Some(locks) = &self.0 else { return Ok(()) };
        let fresh = crate::locked(locks).get(pool).copied();
        let why = match fresh {
            Some(f) if Instant::now() < f.until => return Ok(()),
            Some(f) => format!(
                "it was not renewed within {} of its last renewal",
                crate::spec::Duration::from(f.deadline)
            ),
            None => "this run does not hold it (lost, or given up)".to_owned(),
        };
        Err(BackendError::Failed(format!(
            "the lock of pool {pool} is not known to be held: {why}; nothing irreversible is done without it"
        )))
    }

    pub(crate) fn renewed(&self, pool: &str, started: Instant, deadline: Duration) {
        if let Some(locks) = &self.0 {
            let fresh = Fresh { until: started + deadline, deadline };
            crate::locked(locks).insert(pool.to_owned(), fresh);
        }
    }

    pub(crate) fn lost(&self, pool: &str) {
        if let Some(locks) = &self.0 {
            crate::locked(locks).remove(pool);
        }
    }
}
