//! The watcher's decisions, as a pure state machine: where it is and what happened ->
//! where it is now and what to do. No I/O, no clock: the loop turns what it hears into
//! [`Event`]s and carries out the [`Decision`]s, so every decision is tested here.

use std::time::Duration;

use crate::backend::retry;
use crate::model::Desired;

/// Why a reconcile starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Trigger {
    /// The first good desired state was read.
    Start,
    /// A new desired state differs from the last one (hash-wise).
    SourceChanged,
    /// Docker reported that a container of the pool died, stopped or went away.
    Drift,
    /// The periodic re-observation of the world.
    Resync,
    /// An instance that the last plan waited for turns unhealthy now, if it still does not
    /// serve: plan again at that moment rather than at the next resync.
    Deadline,
    /// A failed reconcile's backoff ran out.
    Retry,
}

impl Trigger {
    /// As metrics label it.
    pub(super) fn label(self) -> &'static str {
        match self {
            Self::Start => "start",
            Self::SourceChanged => "source_changed",
            Self::Drift => "drift",
            Self::Resync => "resync",
            Self::Deadline => "deadline",
            Self::Retry => "retry",
        }
    }
}

/// How a reconcile ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ended {
    /// The plan was carried out (or was empty, or `--dry-run` printed it).
    Converged,
    /// A newer desired state stopped it at a step boundary.
    Superseded,
    /// A signal stopped it at a step boundary.
    Stopped,
    /// Observing, a preflight or a step failed; the world is as far as it got.
    Failed,
    /// Another run (the other replica, an apply) holds a pool's lock: nothing was changed, and
    /// the pool is looked at again after this long (when that lock would expire).
    Locked(Duration),
}

/// What one look at the source found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SourceNews {
    /// The same revision as last time.
    Unchanged,
    /// A new revision with a valid desired state, by the [`fingerprint`] of what it asks for:
    /// the machine tells a changed world from a reformatted file.
    Loaded(u64),
    /// The new revision's pool files are invalid: the last good state is kept.
    Invalid,
    /// The source could not be read or fetched at all.
    Unreachable,
}

/// What the loop tells the state machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Event {
    Trigger(Trigger),
    Source(SourceNews),
    Finished(Ended),
    /// SIGINT or SIGTERM.
    Signal,
}

/// What the loop should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Decision {
    /// Start a reconcile.
    Reconcile(Trigger),
    /// Ask the running reconcile to stop at its next step boundary; a reconcile towards the
    /// newest state follows when it has.
    Supersede,
    /// Nothing now (the event was absorbed or queued).
    Wait,
    /// A new revision asks for the same world as the last good one: nothing to do.
    Same,
    /// The new revision is invalid: report it, keep the last good state, and go on.
    KeepLastGood,
    /// Schedule a [`Trigger::Retry`] after this long.
    RetryAfter(Duration),
    /// Another run holds a lock: schedule a [`Trigger::Retry`] after this long, without
    /// counting a failure (a standby replica is not failing).
    StandBy(Duration),
    /// Look at the source again after this long (it could not be read).
    LookAgainAfter(Duration),
    /// Ask the running reconcile to stop at its next step boundary, then exit.
    StopRun,
    /// Print the pool state and exit 0.
    Exit,
    /// A second signal: exit at once.
    ExitNow,
    /// The source could not be read, or was invalid, before any good state was read: there is
    /// nothing to keep running for. Exit 1 with the reason, as plan would.
    Fail,
}

/// The longest wait between retries of a failed reconcile.
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Everything the decisions depend on: a handful of values, never a history.
// Each flag is an independent fact that the transitions read; an enum of their combinations
// would be harder to follow.
#[allow(clippy::struct_excessive_bools)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct WatchState {
    /// The [`fingerprint`] of the last good desired state.
    pub spec: Option<u64>,
    /// A good desired state was read: there is something to reconcile towards.
    pub has_desired: bool,
    /// The source was read and found good at least once; until then, a source that cannot be
    /// read or is invalid ends the watch.
    pub source_read: bool,
    /// A reconcile is in flight.
    pub running: bool,
    /// What to reconcile for once the running one ends (triggers coalesce).
    pub pending: Option<Trigger>,
    /// Consecutive failed reconciles, for the backoff.
    pub failures: u32,
    /// Waiting out a backoff: drift and resync are absorbed, the retry re-observes anyway.
    pub backing_off: bool,
    /// A signal arrived: no new reconcile starts.
    pub stopping: bool,
    /// Consecutive failed reads of the source, for its own backoff.
    pub source_failures: u32,
    /// The longest wait between reads of an unreadable source (the fetch interval).
    pub source_cap: Duration,
}

impl Default for WatchState {
    fn default() -> Self {
        Self {
            spec: None,
            has_desired: false,
            source_read: false,
            running: false,
            pending: None,
            failures: 0,
            backing_off: false,
            stopping: false,
            source_failures: 0,
            source_cap: MAX_BACKOFF,
        }
    }
}

/// What a desired state asks for, as one number: its pools and their template hashes, not file
/// bytes (a comment or a reformatting changes nothing) nor the commit.
pub(super) fn fingerprint(desired: &Desired) -> u64 {
    use sha2::{Digest, Sha256};
    let pools: Vec<_> = desired.pools.iter().map(|p| (&p.template_hash, &p.pool)).collect();
    let digest = Sha256::digest(serde_json::to_vec(&pools).unwrap_or_default());
    u64::from_be_bytes(digest[..8].try_into().expect("8 bytes"))
}

/// Exponential backoff after `failures` consecutive failures: 1s, 2s, 4s... up to `cap`.
fn backoff(failures: u32, cap: Duration) -> Duration {
    retry::delay(failures, Duration::from_secs(1), cap)
}

/// The watcher's one step function.
pub(super) fn next_action(mut state: WatchState, event: Event) -> (WatchState, Decision) {
    let decision = match event {
        Event::Signal if state.stopping => Decision::ExitNow,
        Event::Signal => {
            state.stopping = true;
            if state.running { Decision::StopRun } else { Decision::Exit }
        }
        Event::Source(SourceNews::Invalid | SourceNews::Unreachable) if !state.source_read => Decision::Fail,
        Event::Source(news) => {
            if news == SourceNews::Unreachable {
                state.source_failures += 1;
                return (state, Decision::LookAgainAfter(backoff(state.source_failures, state.source_cap)));
            }
            state.source_failures = 0;
            match news {
                SourceNews::Loaded(spec) => {
                    state.source_read = true;
                    let last = state.spec.replace(spec);
                    let trigger = match last {
                        None => Trigger::Start,
                        Some(last) if last == spec => return (state, Decision::Same),
                        Some(_) => Trigger::SourceChanged,
                    };
                    return next_action(state, Event::Trigger(trigger));
                }
                SourceNews::Invalid => Decision::KeepLastGood,
                SourceNews::Unchanged | SourceNews::Unreachable => Decision::Wait,
            }
        }
        Event::Trigger(_) if state.stopping => Decision::Wait,
        // Nothing good was ever read: there is no desired state to reconcile towards.
        Event::Trigger(trigger) if !state.has_desired && trigger != Trigger::Start => Decision::Wait,
        Event::Trigger(trigger) if state.running => {
            // A newer spec outranks whatever was queued; drift and resyncs coalesce into one.
            if trigger == Trigger::SourceChanged || state.pending.is_none() {
                state.pending = Some(trigger);
            }
            if trigger == Trigger::SourceChanged { Decision::Supersede } else { Decision::Wait }
        }
        Event::Trigger(Trigger::Drift | Trigger::Resync | Trigger::Deadline) if state.backing_off => {
            Decision::Wait
        }
        Event::Trigger(trigger) => {
            state.has_desired = true;
            state.running = true;
            state.backing_off = false;
            Decision::Reconcile(trigger)
        }
        Event::Finished(_) if state.stopping => {
            state.running = false;
            Decision::Exit
        }
        Event::Finished(ended) => {
            state.running = false;
            let pending = state.pending.take();
            match (ended, pending) {
                (Ended::Failed, Some(Trigger::SourceChanged)) => {
                    // A new spec may be exactly the fix: try it at once.
                    state.failures += 1;
                    state.running = true;
                    Decision::Reconcile(Trigger::SourceChanged)
                }
                (Ended::Failed, _) => {
                    state.failures += 1;
                    state.backing_off = true;
                    Decision::RetryAfter(backoff(state.failures, MAX_BACKOFF))
                }
                // Whatever was pending, the holder of the lock acts on it; look again when
                // its lock would lapse.
                (Ended::Locked(after), _) => {
                    state.failures = 0;
                    state.backing_off = true;
                    Decision::StandBy(after)
                }
                (_, Some(trigger)) => {
                    state.failures = 0;
                    state.running = true;
                    Decision::Reconcile(trigger)
                }
                (_, None) => {
                    state.failures = 0;
                    Decision::Wait
                }
            }
        }
    };
    (state, decision)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(state: WatchState, event: Event) -> (WatchState, Decision) {
        next_action(state, event)
    }

    #[test]
    fn start_reconciles_once_at_a_time_and_coalesces_drift() {
        let (s, a) = step(WatchState::default(), Event::Trigger(Trigger::Start));
        assert_eq!(a, Decision::Reconcile(Trigger::Start));
        let (s, a) = step(s, Event::Trigger(Trigger::Drift));
        assert_eq!(a, Decision::Wait);
        let (s, a) = step(s, Event::Trigger(Trigger::Resync));
        assert_eq!(a, Decision::Wait);
        assert_eq!(s.pending, Some(Trigger::Drift));
        let (s, a) = step(s, Event::Finished(Ended::Converged));
        assert_eq!(a, Decision::Reconcile(Trigger::Drift), "one more look for everything that came in");
        let (s, a) = step(s, Event::Finished(Ended::Converged));
        assert_eq!(a, Decision::Wait);
        assert_eq!(s, WatchState { has_desired: true, ..WatchState::default() });
    }

    #[test]
    fn a_new_spec_during_a_rollout_supersedes_it_and_is_planned_next() {
        let (s, _) = step(WatchState::default(), Event::Trigger(Trigger::Start));
        let (s, a) = step(s, Event::Trigger(Trigger::Drift));
        assert_eq!(a, Decision::Wait);
        let (s, a) = step(s, Event::Trigger(Trigger::SourceChanged));
        assert_eq!(a, Decision::Supersede);
        let (s, a) = step(s, Event::Trigger(Trigger::Drift));
        assert_eq!(a, Decision::Wait);
        assert_eq!(s.pending, Some(Trigger::SourceChanged), "the newer spec is not downgraded to a drift");
        let (s, a) = step(s, Event::Finished(Ended::Superseded));
        assert_eq!(a, Decision::Reconcile(Trigger::SourceChanged));
        assert!(s.running);
    }

    #[test]
    fn a_standby_replica_looks_again_when_the_lock_would_lapse_without_backing_off() {
        let (s, _) = step(WatchState::default(), Event::Trigger(Trigger::Start));
        let (s, a) = step(s, Event::Finished(Ended::Failed));
        assert_eq!(a, Decision::RetryAfter(Duration::from_secs(1)));
        let (s, _) = step(s, Event::Trigger(Trigger::Retry));
        let (s, _) = step(s, Event::Trigger(Trigger::SourceChanged));
        let (s, a) = step(s, Event::Finished(Ended::Locked(Duration::from_secs(7))));
        assert_eq!(a, Decision::StandBy(Duration::from_secs(7)), "the holder acts on the new spec");
        assert_eq!(s.failures, 0, "standing by is not failing");
        let (s, a) = step(s, Event::Trigger(Trigger::Drift));
        assert_eq!(a, Decision::Wait, "the look at the lapse re-observes anyway");
        let (_, a) = step(s, Event::Trigger(Trigger::Retry));
        assert_eq!(a, Decision::Reconcile(Trigger::Retry));
    }

    #[test]
    fn failures_back_off_exponentially_and_a_new_spec_skips_the_wait() {
        let (s, _) = step(WatchState::default(), Event::Trigger(Trigger::Start));
        let (s, a) = step(s, Event::Finished(Ended::Failed));
        assert_eq!(a, Decision::RetryAfter(Duration::from_secs(1)));
        let (s, a) = step(s, Event::Trigger(Trigger::Resync));
        assert_eq!(a, Decision::Wait, "the retry re-observes anyway");
        let (s, a) = step(s, Event::Trigger(Trigger::Retry));
        assert_eq!(a, Decision::Reconcile(Trigger::Retry));
        let (s, a) = step(s, Event::Finished(Ended::Failed));
        assert_eq!(a, Decision::RetryAfter(Duration::from_secs(2)));
        let (s, a) = step(s, Event::Trigger(Trigger::SourceChanged));
        assert_eq!(a, Decision::Reconcile(Trigger::SourceChanged));
        let (s, a) = step(s, Event::Finished(Ended::Converged));
        assert_eq!(a, Decision::Wait);
        assert_eq!(s.failures, 0);

        // A new spec queued behind a failing run is tried at once, not after a backoff.
        let (s, _) = step(WatchState::default(), Event::Trigger(Trigger::Start));
        let (s, _) = step(s, Event::Trigger(Trigger::SourceChanged));
        let (_, a) = step(s, Event::Finished(Ended::Failed));
        assert_eq!(a, Decision::Reconcile(Trigger::SourceChanged));
    }

    #[test]
    fn a_signal_stops_the_run_at_a_boundary_then_exits_and_a_second_exits_at_once() {
        let (s, a) = step(WatchState::default(), Event::Signal);
        assert_eq!(a, Decision::Exit, "idle: nothing to wait for");
        assert_eq!(step(s, Event::Signal).1, Decision::ExitNow);

        let (s, _) = step(WatchState::default(), Event::Trigger(Trigger::Start));
        let (s, a) = step(s, Event::Signal);
        assert_eq!(a, Decision::StopRun);
        let (s, a) = step(s, Event::Trigger(Trigger::SourceChanged));
        assert_eq!(a, Decision::Wait, "nothing new starts once stopping");
        assert_eq!(step(s, Event::Finished(Ended::Stopped)).1, Decision::Exit);
        assert_eq!(step(s, Event::Signal).1, Decision::ExitNow);
    }

    #[test]
    fn a_source_that_is_bad_at_start_fails_and_once_good_is_kept_through_failures() {
        for bad in [SourceNews::Invalid, SourceNews::Unreachable] {
            let (_, a) = step(WatchState::default(), Event::Source(bad));
            assert_eq!(a, Decision::Fail, "{bad:?} before any good state: nothing to keep running for");
        }
        let (s, a) = step(WatchState::default(), Event::Source(SourceNews::Loaded(1)));
        assert_eq!(a, Decision::Reconcile(Trigger::Start));
        assert!(s.source_read);
        let (s, a) = step(s, Event::Source(SourceNews::Invalid));
        assert_eq!(a, Decision::KeepLastGood, "the last good state is kept");
        let (s, a) = step(s, Event::Source(SourceNews::Unreachable));
        assert_eq!(a, Decision::LookAgainAfter(Duration::from_secs(1)));
        let (s, a) = step(s, Event::Finished(Ended::Converged));
        assert_eq!(a, Decision::Wait);
        let (_, a) = step(s, Event::Source(SourceNews::Invalid));
        assert_eq!(a, Decision::KeepLastGood, "still kept after a reconcile");
    }

    #[test]
    fn the_first_good_source_starts_and_a_changed_one_supersedes() {
        let (s, a) = step(WatchState::default(), Event::Trigger(Trigger::Resync));
        assert_eq!(a, Decision::Wait, "no desired state yet: nothing to reconcile towards");
        let (s, a) = step(s, Event::Source(SourceNews::Loaded(1)));
        assert_eq!(a, Decision::Reconcile(Trigger::Start));
        let (s, a) = step(s, Event::Source(SourceNews::Unchanged));
        assert_eq!(a, Decision::Wait);
        let (s, a) = step(s, Event::Source(SourceNews::Loaded(1)));
        assert_eq!(a, Decision::Same, "a new revision that asks for the same pools");
        assert!(s.pending.is_none(), "nothing queued for it");
        let (s, a) = step(s, Event::Source(SourceNews::Loaded(2)));
        assert_eq!(a, Decision::Supersede);
        assert_eq!(s.spec, Some(2));
    }

    #[test]
    fn a_fingerprint_sees_the_pools_not_the_files() {
        use crate::testing::build::{PoolArgs, desired};
        let a = desired(vec![PoolArgs::new("w", 1).build()]);
        let mut moved = a.clone();
        moved.pools[0].file = "elsewhere.yaml".into();
        assert_eq!(fingerprint(&a), fingerprint(&moved), "a file renamed asks for the same world");
        let scaled = desired(vec![PoolArgs::new("w", 2).build()]);
        assert_ne!(fingerprint(&a), fingerprint(&scaled));
    }

    #[test]
    fn a_health_deadline_plans_again_like_a_resync() {
        let (s, _) = step(WatchState::default(), Event::Trigger(Trigger::Start));
        let (s, _) = step(s, Event::Finished(Ended::Converged));
        let (s, a) = step(s, Event::Trigger(Trigger::Deadline));
        assert_eq!(a, Decision::Reconcile(Trigger::Deadline));
        let (s, _) = step(s, Event::Finished(Ended::Failed));
        let (_, a) = step(s, Event::Trigger(Trigger::Deadline));
        assert_eq!(a, Decision::Wait, "the retry after a failure looks anyway");
    }

    #[test]
    fn an_unreadable_source_is_read_again_with_backoff_up_to_the_interval() {
        let s = WatchState { source_cap: Duration::from_secs(3), source_read: true, ..WatchState::default() };
        let (s, a) = step(s, Event::Source(SourceNews::Unreachable));
        assert_eq!(a, Decision::LookAgainAfter(Duration::from_secs(1)));
        let (s, a) = step(s, Event::Source(SourceNews::Unreachable));
        assert_eq!(a, Decision::LookAgainAfter(Duration::from_secs(2)));
        let (s, a) = step(s, Event::Source(SourceNews::Unreachable));
        assert_eq!(a, Decision::LookAgainAfter(Duration::from_secs(3)), "capped");
        let (s, _) = step(s, Event::Source(SourceNews::Unchanged));
        assert_eq!(s.source_failures, 0, "a good read resets the backoff");
        let (_, a) = step(s, Event::Source(SourceNews::Unreachable));
        assert_eq!(a, Decision::LookAgainAfter(Duration::from_secs(1)));
    }
}
