//! Cancellation: the flag that stops a rollout at its next step boundary, and why it stopped.
//!
//! Set by a signal handler (`apply`), by `watch` when a newer desired state supersedes a
//! rollout, and by the locks when one is lost; read by the executor between steps and by the
//! locks while they wait. [`Signals`] is what those handlers listen to.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::time::Instant;

/// The exit status when a second interrupt stops poolctl at once, as shells report SIGINT.
pub const EXIT_INTERRUPTED: i32 = 130;

/// Why a run stops at the next step boundary. None counts as a failure: nothing is
/// half-done, because the executor only stops between steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum StopReason {
    /// A newer desired state arrived (`watch`): the caller re-plans towards it at once.
    Superseded = 1,
    /// The user asked to stop (Ctrl-C, SIGTERM). Outranks [`StopReason::Superseded`].
    Signal = 2,
    /// The run lost the lock of a pool it changes (see [`crate::rollout::lock`]): another actor may be
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

/// Signals closer together than this are one: `timeout -s INT`, and any supervisor that signals
/// a process and its group, delivers two within microseconds, and the second must not read as
/// "exit at once". A person pressing Ctrl-C twice on purpose is slower than this.
pub const SIGNAL_BURST: Duration = Duration::from_millis(500);

/// The environment variable that sets the burst window instead (a duration such as `1h`): long
/// in tests, so that a signal sent once the first was seen is provably within it.
pub const SIGNAL_BURST_ENV: &str = "POOLCTL_SIGNAL_BURST";

/// Tells a new signal from another one of the same burst (see [`SIGNAL_BURST`]).
#[derive(Debug)]
pub struct Burst {
    window: Duration,
    /// When the last signal taken as new arrived.
    last: Option<Instant>,
}

impl Default for Burst {
    fn default() -> Self {
        Self { window: SIGNAL_BURST, last: None }
    }
}

impl Burst {
    /// The window from [`SIGNAL_BURST_ENV`], else [`SIGNAL_BURST`].
    fn from_env() -> Self {
        let window = std::env::var(SIGNAL_BURST_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<crate::spec::Duration>().ok())
            .map_or(SIGNAL_BURST, crate::spec::Duration::get);
        Self { window, last: None }
    }

    /// Whether a signal arriving now is a new one, rather than part of the last one's burst.
    pub fn is_new(&mut self) -> bool {
        let now = Instant::now();
        if self.last.is_some_and(|last| now.duration_since(last) < self.window) {
            return false;
        }
        self.last = Some(now);
        true
    }
}

/// SIGINT (Ctrl-C) and SIGTERM, one per burst.
pub struct Signals {
    int: Signal,
    term: Signal,
    burst: Burst,
}

impl Signals {
    /// Listen from now on: the signals stop ending the process by themselves.
    pub fn listen() -> std::io::Result<Self> {
        Ok(Self {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            burst: Burst::from_env(),
        })
    }

    /// The next signal that is not part of the last one's burst. Cancel-safe.
    pub async fn recv(&mut self) {
        loop {
            let got = tokio::select! {
                got = self.int.recv() => got,
                got = self.term.recv() => got,
            };
            if got.is_none() {
                // The runtime is shutting down: no signal will come.
                std::future::pending::<()>().await;
            }
            if self.burst.is_new() {
                return;
            }
            let window = crate::spec::Duration::from(self.burst.window);
            tracing::info!("signal: within {window} of the last one, taken as the same one");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn signals_within_the_burst_window_are_one() {
        let mut burst = Burst::default();
        assert!(burst.is_new(), "the first signal");
        assert!(!burst.is_new(), "a second one at the same instant (a process group's)");
        tokio::time::advance(Duration::from_millis(499)).await;
        assert!(!burst.is_new(), "still within the window of the first");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(burst.is_new(), "a signal past the window is a new one");
        assert!(!burst.is_new());
        tokio::time::advance(Duration::from_secs(3)).await;
        assert!(burst.is_new(), "a second Ctrl-C pressed on purpose");
    }
}
