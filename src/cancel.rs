//! Cancellation: the flag that stops a rollout at its next step boundary, and why it stopped.
//!
//! Set by a signal handler (`apply`), by `watch` when a newer desired state supersedes a
//! rollout, and by the locks when one is lost; read by the executor between steps and by the
//! locks while they wait.

use std::sync::atomic::{AtomicU8, Ordering};

/// Why a run stops at the next step boundary. None counts as a failure: nothing is
/// half-done, because the executor only stops between steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum StopReason {
    /// A newer desired state arrived (`watch`): the caller re-plans towards it at once.
    Superseded = 1,
    /// The user asked to stop (Ctrl-C, SIGTERM). Outranks [`StopReason::Superseded`].
    Signal = 2,
    /// The run lost the lock of a pool it changes (see [`crate::lock`]): another actor may be
    /// changing it now. Outranks the others.
    LockLost = 3,
}

/// A flag an interrupt handler sets; the executor checks it between steps.
#[derive(Debug, Default)]
pub struct Interrupt(AtomicU8);

impl Interrupt {
    /// Stop because the user asked to.
    pub fn trigger(&self) {
        self.stop(StopReason::Signal);
    }
    /// Stop for `reason`; a signal is never downgraded to a supersede.
    pub fn stop(&self, reason: StopReason) {
        self.0.fetch_max(reason as u8, Ordering::SeqCst);
    }
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::SeqCst) != 0
    }
    /// Why the run should stop, if it should.
    pub fn reason(&self) -> Option<StopReason> {
        match self.0.load(Ordering::SeqCst) {
            0 => None,
            1 => Some(StopReason::Superseded),
            2 => Some(StopReason::Signal),
            _ => Some(StopReason::LockLost),
        }
    }
}
