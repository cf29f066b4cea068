//! The watcher's decisions, as a state machine that owns every timer and every pending
//! decision: where it is, what happened and when -> what to do. No I/O and no clock of its own:
//! the loop turns what it hears into [`Event`]s stamped with the time it heard them, sleeps
//! until [`Machine::next_wake`] and carries the [`Decision`]s out, so every decision and every
//! timer is tested here, on tokio's paused clock.

use std::time::Duration;

use tokio::time::Instant;

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

/// What one look at the source found; `P` is why a look found nothing good, handed back in
/// the decision that reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SourceNews<P> {
    /// The same revision as last time.
    Unchanged,
    /// A new revision with a valid desired state, by the [`fingerprint`] of what it asks for:
    /// the machine tells a changed world from a reformatted file.
    Loaded(u64),
    /// The new revision's pool files are invalid: the last good state is kept.
    Invalid(P),
    /// The source could not be read or fetched at all.
    Unreachable(P),
}

/// What the loop tells the state machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Event<P> {
    /// The time came for [`Machine::next_wake`]: every timer due fires.
    Time,
    /// The source may have changed (a file or ref on this machine did).
    Look,
    /// A look at the source ended, with what it found (nothing if the look itself failed).
    Checked(Option<SourceNews<P>>),
    /// Docker reported that a container of the pools stopped serving.
    Drift,
    /// The running reconcile ended; the instant the first instance its plan waited for turns
    /// unhealthy, if any.
    Finished(Ended, Option<Instant>),
    /// SIGINT or SIGTERM.
    Signal,
}

/// What the loop should do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Decision<P> {
    /// Look at the source (fetch, read, parse).
    Check,
    /// Start a reconcile.
    Reconcile(Trigger),
    /// Ask the running reconcile to stop at its next step boundary; a reconcile towards the
    /// newest state follows when it has.
    Supersede,
    /// A new revision asks for the same world as the last good one: nothing to do.
    Same,
    /// The new revision is invalid: report why, keep the last good state, and go on.
    KeepLastGood(P),
    /// A reconcile failed: the next one starts after this long (a timer of the machine's).
    RetryAfter(Duration),
    /// Another run holds a lock: look again after this long, without counting a failure (a
    /// standby replica is not failing).
    StandBy(Duration),
    /// The source could not be read (why): look again after this long.
    LookAgainAfter(Duration, P),
    /// Ask the running reconcile to stop at its next step boundary, then exit.
    StopRun,
    /// Print the pool state and exit 0.
    Exit,
    /// A second signal: exit at once.
    ExitNow,
    /// The source could not be read, or was invalid, before any good state was read: there is
    /// nothing to keep running for. Exit 1 with the reason, as plan would.
    Fail(P),
}

/// The longest wait between retries of a failed reconcile.
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// How often the machine looks by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Periods {
    /// How often a remote source is fetched; `None` for a source this machine is told of
    /// (a directory, with notify).
    pub fetch: Option<Duration>,
    /// How often the world is observed again.
    pub resync: Duration,
    /// The longest wait between reads of an unreadable source.
    pub source_cap: Duration,
}

/// Everything the decisions depend on: a handful of values and instants, never a history.
// Each flag is an independent fact that the transitions read; an enum of their combinations
// would be harder to follow.
#[allow(clippy::struct_excessive_bools)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Machine {
    periods: Periods,
    /// The [`fingerprint`] of the last good desired state.
    spec: Option<u64>,
    /// A good desired state was read: there is something to reconcile towards.
    has_desired: bool,
    /// The source was read and found good at least once; until then, a source that cannot be
    /// read or is invalid ends the watch.
    source_read: bool,
    /// A look at the source is under way.
    checking: bool,
    /// The source may have changed during that look: look again once it ends.
    recheck: bool,
    /// A reconcile is in flight.
    running: bool,
    /// What to reconcile for once the running one ends (triggers coalesce).
    pending: Option<Trigger>,
    /// Consecutive failed reconciles, for the backoff.
    failures: u32,
    /// Waiting out a backoff: drift and resync are absorbed, the retry re-observes anyway.
    backing_off: bool,
    /// A signal arrived: no new reconcile starts.
    stopping: bool,
    /// Consecutive failed reads of the source, for its own backoff.
    source_failures: u32,
    /// The timers: the next fetch of a remote source, the next resync, the look at an
    /// unreadable source, the retry after a failure (or a standby's look at a held lock), and
    /// the moment an instance waited for turns unhealthy.
    fetch_at: Option<Instant>,
    resync_at: Instant,
    look_again_at: Option<Instant>,
    retry_at: Option<Instant>,
    deadline_at: Option<Instant>,
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

impl Machine {
    /// A watch that starts at `now`; its first decision is to look at the source
    /// (`on(Event::Look, now)`).
    pub(super) fn new(periods: Periods, now: Instant) -> Self {
        Self {
            periods,
            spec: None,
            has_desired: false,
            source_read: false,
            checking: false,
            recheck: false,
            running: false,
            pending: None,
            failures: 0,
            backing_off: false,
            stopping: false,
            source_failures: 0,
            fetch_at: periods.fetch.map(|every| now + every),
            resync_at: now + periods.resync,
            look_again_at: None,
            retry_at: None,
            deadline_at: None,
        }
    }

    /// When the loop must wake up for the next timer, whatever else happens.
    pub(super) fn next_wake(&self) -> Instant {
        [self.fetch_at, self.look_again_at, self.retry_at, self.deadline_at]
            .into_iter()
            .flatten()
            .fold(self.resync_at, Instant::min)
    }

    /// A reconcile is in flight.
    pub(super) fn running(&self) -> bool {
        self.running
    }

    /// The machine's one step: what `event`, heard at `now`, means.
    pub(super) fn on<P>(&mut self, event: Event<P>, now: Instant) -> Vec<Decision<P>> {
        let mut out = Vec::new();
        match event {
            Event::Time => self.fire(now, &mut out),
            Event::Look => self.look(&mut out),
            Event::Checked(news) => {
                self.checking = false;
                if let Some(news) = news {
                    self.source(news, now, &mut out);
                }
                if std::mem::take(&mut self.recheck) {
                    self.look(&mut out);
                }
            }
            Event::Drift => self.trigger(Trigger::Drift, &mut out),
            Event::Finished(ended, deadline) => self.finished(ended, deadline, now, &mut out),
            Event::Signal if self.stopping => out.push(Decision::ExitNow),
            Event::Signal => {
                self.stopping = true;
                out.push(if self.running { Decision::StopRun } else { Decision::Exit });
            }
        }
        out
    }

    /// Fire every timer due at `now`; the periodic ones are set again from `now` (a late tick
    /// delays the next rather than bunching them).
    fn fire<P>(&mut self, now: Instant, out: &mut Vec<Decision<P>>) {
        let due = |at: &mut Option<Instant>| at.take_if(|at| *at <= now).is_some();
        let mut look = due(&mut self.look_again_at);
        if due(&mut self.fetch_at) {
            look = true;
            self.fetch_at = self.periods.fetch.map(|every| now + every);
        }
        if look {
            self.look(out);
        }
        if self.resync_at <= now {
            self.resync_at = now + self.periods.resync;
            self.trigger(Trigger::Resync, out);
        }
        if due(&mut self.retry_at) {
            self.trigger(Trigger::Retry, out);
        }
        if due(&mut self.deadline_at) {
            self.trigger(Trigger::Deadline, out);
        }
    }

    /// Look at the source, unless a look is under way: then look again once it ends.
    fn look<P>(&mut self, out: &mut Vec<Decision<P>>) {
        if self.checking {
            self.recheck = true;
        } else {
            self.checking = true;
            out.push(Decision::Check);
        }
    }

    fn source<P>(&mut self, news: SourceNews<P>, now: Instant, out: &mut Vec<Decision<P>>) {
        match news {
            SourceNews::Invalid(why) | SourceNews::Unreachable(why) if !self.source_read => {
                out.push(Decision::Fail(why));
            }
            SourceNews::Unreachable(why) => {
                self.source_failures += 1;
                let after = backoff(self.source_failures, self.periods.source_cap);
                self.look_again_at = Some(now + after);
                out.push(Decision::LookAgainAfter(after, why));
            }
            SourceNews::Unchanged => self.source_failures = 0,
            SourceNews::Invalid(why) => {
                self.source_failures = 0;
                out.push(Decision::KeepLastGood(why));
            }
            SourceNews::Loaded(spec) => {
                self.source_failures = 0;
                self.source_read = true;
                match self.spec.replace(spec) {
                    None => self.trigger(Trigger::Start, out),
                    Some(last) if last == spec => out.push(Decision::Same),
                    Some(_) => self.trigger(Trigger::SourceChanged, out),
                }
            }
        }
    }

    fn trigger<P>(&mut self, trigger: Trigger, out: &mut Vec<Decision<P>>) {
        if self.stopping {
            return;
        }
        // Nothing good was ever read: there is no desired state to reconcile towards.
        if !self.has_desired && trigger != Trigger::Start {
            return;
        }
        if self.running {
            // A newer spec outranks whatever was queued; drift and resyncs coalesce into one.
            if trigger == Trigger::SourceChanged || self.pending.is_none() {
                self.pending = Some(trigger);
            }
            if trigger == Trigger::SourceChanged {
                out.push(Decision::Supersede);
            }
            return;
        }
        // The retry re-observes anyway.
        if self.backing_off && matches!(trigger, Trigger::Drift | Trigger::Resync | Trigger::Deadline) {
            return;
        }
        self.has_desired = true;
        self.backing_off = false;
        self.start(trigger, out);
    }

    /// Start a reconcile: it does what a pending retry would have done.
    fn start<P>(&mut self, trigger: Trigger, out: &mut Vec<Decision<P>>) {
        self.running = true;
        self.retry_at = None;
        out.push(Decision::Reconcile(trigger));
    }

    fn finished<P>(
        &mut self,
        ended: Ended,
        deadline: Option<Instant>,
        now: Instant,
        out: &mut Vec<Decision<P>>,
    ) {
        self.running = false;
        self.deadline_at = deadline;
        if self.stopping {
            out.push(Decision::Exit);
            return;
        }
        match (ended, self.pending.take()) {
            (Ended::Failed, Some(Trigger::SourceChanged)) => {
                // A new spec may be exactly the fix: try it at once.
                self.failures += 1;
                self.start(Trigger::SourceChanged, out);
            }
            (Ended::Failed, _) => {
                self.failures += 1;
                self.backing_off = true;
                let after = backoff(self.failures, MAX_BACKOFF);
                self.retry_at = Some(now + after);
                out.push(Decision::RetryAfter(after));
            }
            // Whatever was pending, the holder of the lock acts on it; look again when its
            // lock would lapse.
            (Ended::Locked(after), _) => {
                self.failures = 0;
                self.backing_off = true;
                self.retry_at = Some(now + after);
                out.push(Decision::StandBy(after));
            }
            (_, Some(trigger)) => {
                self.failures = 0;
                self.start(trigger, out);
            }
            (_, None) => self.failures = 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::time::advance;

    use super::*;
    use Decision::*;

    type News = SourceNews<&'static str>;

    const RESYNC: Duration = Duration::from_secs(300);

    fn periods() -> Periods {
        Periods { fetch: None, resync: RESYNC, source_cap: MAX_BACKOFF }
    }

    /// One step now, by tokio's (paused) clock.
    fn on(m: &mut Machine, event: Event<&'static str>) -> Vec<Decision<&'static str>> {
        m.on(event, Instant::now())
    }

    fn read(m: &mut Machine, news: News) -> Vec<Decision<&'static str>> {
        on(m, Event::Checked(Some(news)))
    }

    /// A watch that read its first good source and runs its first reconcile.
    fn reconciling() -> Machine {
        let mut m = Machine::new(periods(), Instant::now());
        assert_eq!(on(&mut m, Event::Look), [Check]);
        assert_eq!(read(&mut m, News::Loaded(1)), [Reconcile(Trigger::Start)]);
        m
    }

    fn finished(m: &mut Machine, ended: Ended) -> Vec<Decision<&'static str>> {
        on(m, Event::Finished(ended, None))
    }

    #[tokio::test(start_paused = true)]
    async fn start_reconciles_once_at_a_time_and_coalesces_drift() {
        let mut m = reconciling();
        assert_eq!(on(&mut m, Event::Drift), []);
        advance(RESYNC).await;
        assert_eq!(on(&mut m, Event::Time), [], "the resync is queued behind the drift");
        assert_eq!(m.pending, Some(Trigger::Drift));
        assert_eq!(finished(&mut m, Ended::Converged), [Reconcile(Trigger::Drift)], "one more look for all");
        assert_eq!(finished(&mut m, Ended::Converged), []);
        assert!(!m.running() && m.pending.is_none() && m.failures == 0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_resync_timer_reconciles_and_is_set_again_from_when_it_fired() {
        let mut m = reconciling();
        assert_eq!(finished(&mut m, Ended::Converged), []);
        assert_eq!(m.next_wake(), Instant::now() + RESYNC);
        advance(RESYNC + Duration::from_secs(5)).await;
        assert_eq!(on(&mut m, Event::Time), [Reconcile(Trigger::Resync)]);
        assert_eq!(m.next_wake(), Instant::now() + RESYNC, "a late tick delays the next one");
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_spec_during_a_rollout_supersedes_it_and_is_planned_next() {
        let mut m = reconciling();
        assert_eq!(on(&mut m, Event::Drift), []);
        assert_eq!(on(&mut m, Event::Look), [Check]);
        assert_eq!(read(&mut m, News::Loaded(2)), [Supersede]);
        assert_eq!(on(&mut m, Event::Drift), []);
        assert_eq!(m.pending, Some(Trigger::SourceChanged), "the newer spec is not downgraded to a drift");
        assert_eq!(finished(&mut m, Ended::Superseded), [Reconcile(Trigger::SourceChanged)]);
        assert!(m.running());
    }

    #[tokio::test(start_paused = true)]
    async fn a_standby_replica_looks_again_when_the_lock_would_lapse_without_backing_off() {
        let mut m = reconciling();
        assert_eq!(finished(&mut m, Ended::Failed), [RetryAfter(Duration::from_secs(1))]);
        advance(Duration::from_secs(1)).await;
        assert_eq!(on(&mut m, Event::Time), [Reconcile(Trigger::Retry)]);
        on(&mut m, Event::Look);
        assert_eq!(read(&mut m, News::Loaded(2)), [Supersede]);
        let standby = Duration::from_secs(7);
        assert_eq!(finished(&mut m, Ended::Locked(standby)), [StandBy(standby)], "the holder acts on it");
        assert_eq!(m.failures, 0, "standing by is not failing");
        assert_eq!(m.next_wake(), Instant::now() + standby);
        assert_eq!(on(&mut m, Event::Drift), [], "the look at the lapse re-observes anyway");
        advance(Duration::from_millis(6999)).await;
        assert_eq!(on(&mut m, Event::Time), [], "not before the lapse");
        advance(Duration::from_millis(1)).await;
        assert_eq!(on(&mut m, Event::Time), [Reconcile(Trigger::Retry)]);
    }

    #[tokio::test(start_paused = true)]
    async fn failures_back_off_exponentially_and_a_new_spec_skips_the_wait() {
        let mut m = reconciling();
        assert_eq!(finished(&mut m, Ended::Failed), [RetryAfter(Duration::from_secs(1))]);
        assert_eq!(on(&mut m, Event::Drift), [], "the retry re-observes anyway");
        advance(Duration::from_secs(1)).await;
        assert_eq!(on(&mut m, Event::Time), [Reconcile(Trigger::Retry)]);
        assert_eq!(finished(&mut m, Ended::Failed), [RetryAfter(Duration::from_secs(2))]);
        on(&mut m, Event::Look);
        assert_eq!(read(&mut m, News::Loaded(2)), [Reconcile(Trigger::SourceChanged)]);
        assert_eq!(m.next_wake(), m.resync_at, "the reconcile did what the retry would have");
        assert_eq!(finished(&mut m, Ended::Converged), []);
        assert_eq!(m.failures, 0);

        // A new spec queued behind a failing run is tried at once, not after a backoff.
        let mut m = reconciling();
        on(&mut m, Event::Look);
        assert_eq!(read(&mut m, News::Loaded(2)), [Supersede]);
        assert_eq!(finished(&mut m, Ended::Failed), [Reconcile(Trigger::SourceChanged)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_signal_stops_the_run_at_a_boundary_then_exits_and_a_second_exits_at_once() {
        let mut m = Machine::new(periods(), Instant::now());
        assert_eq!(on(&mut m, Event::Signal), [Exit], "idle: nothing to wait for");
        assert_eq!(on(&mut m, Event::Signal), [ExitNow]);

        let mut m = reconciling();
        assert_eq!(on(&mut m, Event::Signal), [StopRun]);
        on(&mut m, Event::Look);
        assert_eq!(read(&mut m, News::Loaded(2)), [], "nothing new starts once stopping");
        advance(RESYNC).await;
        assert_eq!(on(&mut m, Event::Time), []);
        assert_eq!(finished(&mut m, Ended::Stopped), [Exit]);
        assert_eq!(on(&mut m, Event::Signal), [ExitNow]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_source_that_is_bad_at_start_fails_and_once_good_is_kept_through_failures() {
        for bad in [News::Invalid("bad"), News::Unreachable("bad")] {
            let mut m = Machine::new(periods(), Instant::now());
            on(&mut m, Event::Look);
            assert_eq!(read(&mut m, bad), [Fail("bad")], "{bad:?} before any good state");
        }
        let mut m = reconciling();
        assert!(m.source_read);
        on(&mut m, Event::Look);
        assert_eq!(
            read(&mut m, News::Invalid("typo")),
            [KeepLastGood("typo")],
            "the last good state is kept"
        );
        on(&mut m, Event::Look);
        assert_eq!(read(&mut m, News::Unreachable("down")), [LookAgainAfter(Duration::from_secs(1), "down")]);
        assert_eq!(finished(&mut m, Ended::Converged), []);
        advance(Duration::from_secs(1)).await;
        assert_eq!(on(&mut m, Event::Time), [Check], "the look again is a timer of the machine");
        assert_eq!(
            read(&mut m, News::Invalid("typo")),
            [KeepLastGood("typo")],
            "still kept after a reconcile"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_good_source_starts_and_a_changed_one_supersedes() {
        let mut m = Machine::new(periods(), Instant::now());
        advance(RESYNC).await;
        assert_eq!(on(&mut m, Event::Time), [], "no desired state yet: nothing to reconcile towards");
        assert_eq!(on(&mut m, Event::Look), [Check]);
        assert_eq!(read(&mut m, News::Loaded(1)), [Reconcile(Trigger::Start)]);
        on(&mut m, Event::Look);
        assert_eq!(read(&mut m, News::Unchanged), []);
        on(&mut m, Event::Look);
        assert_eq!(read(&mut m, News::Loaded(1)), [Same], "a new revision that asks for the same pools");
        assert!(m.pending.is_none(), "nothing queued for it");
        on(&mut m, Event::Look);
        assert_eq!(read(&mut m, News::Loaded(2)), [Supersede]);
        assert_eq!(m.spec, Some(2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_look_asked_for_during_a_look_happens_once_after_it() {
        let mut m = Machine::new(periods(), Instant::now());
        assert_eq!(on(&mut m, Event::Look), [Check]);
        assert_eq!(on(&mut m, Event::Look), []);
        assert_eq!(on(&mut m, Event::Look), []);
        assert_eq!(read(&mut m, News::Loaded(1)), [Reconcile(Trigger::Start), Check]);
        assert_eq!(on(&mut m, Event::Checked(None)), [], "a look that failed itself ends the look");
        assert_eq!(on(&mut m, Event::Look), [Check]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_remote_source_is_fetched_on_its_interval() {
        let every = Duration::from_secs(30);
        let mut m = Machine::new(Periods { fetch: Some(every), ..periods() }, Instant::now());
        assert_eq!(m.next_wake(), Instant::now() + every);
        advance(every).await;
        assert_eq!(on(&mut m, Event::Time), [Check]);
        assert_eq!(m.next_wake(), Instant::now() + every);
        advance(every).await;
        assert_eq!(on(&mut m, Event::Time), [], "a look is still under way: once more after it");
        assert_eq!(on(&mut m, Event::Checked(Some(News::Unchanged))), [Check]);
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

    #[tokio::test(start_paused = true)]
    async fn a_health_deadline_plans_again_like_a_resync_but_not_during_a_backoff() {
        let mut m = reconciling();
        let ten = Duration::from_secs(10);
        assert_eq!(on(&mut m, Event::Finished(Ended::Converged, Some(Instant::now() + ten))), []);
        assert_eq!(m.next_wake(), Instant::now() + ten);
        advance(ten).await;
        assert_eq!(on(&mut m, Event::Time), [Reconcile(Trigger::Deadline)]);
        let soon = Instant::now() + Duration::from_millis(500);
        assert_eq!(
            on(&mut m, Event::Finished(Ended::Failed, Some(soon))),
            [RetryAfter(Duration::from_secs(1))]
        );
        advance(Duration::from_millis(500)).await;
        assert_eq!(on(&mut m, Event::Time), [], "the retry after a failure looks anyway");
        advance(Duration::from_millis(500)).await;
        assert_eq!(on(&mut m, Event::Time), [Reconcile(Trigger::Retry)]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unreadable_source_is_read_again_with_backoff_up_to_the_interval() {
        let mut m = Machine::new(Periods { source_cap: Duration::from_secs(3), ..periods() }, Instant::now());
        on(&mut m, Event::Look);
        read(&mut m, News::Loaded(1));
        for secs in [1, 2, 3, 3] {
            on(&mut m, Event::Look);
            let after = Duration::from_secs(secs);
            assert_eq!(
                read(&mut m, News::Unreachable("down")),
                [LookAgainAfter(after, "down")],
                "capped at 3"
            );
        }
        on(&mut m, Event::Look);
        read(&mut m, News::Unchanged);
        assert_eq!(m.source_failures, 0, "a good read resets the backoff");
        on(&mut m, Event::Look);
        assert_eq!(read(&mut m, News::Unreachable("down")), [LookAgainAfter(Duration::from_secs(1), "down")]);
    }
}
