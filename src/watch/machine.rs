//! The watcher's decisions, as a state machine that owns every timer and every pending
//! decision: where it is, what happened and when -> what to do. No I/O and no clock of its own:
//! the loop turns what it hears into [`Event`]s stamped with the time it heard them, sleeps
//! until [`Machine::next_wake`] and carries the [`Decision`]s out, so every decision and every
//! timer is tested here, on tokio's paused clock.

use std::collections::{BTreeMap, BTreeSet};
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
    /// A new desired state, found by a look that a receiver asked for (a push): a
    /// [`Trigger::SourceChanged`] in every respect but the metrics' label.
    Receiver,
    /// Docker reported that a container of the pool died, stopped or went away.
    Drift,
    /// The periodic re-observation of the world.
    Resync,
    /// `poolctl reconcile` asked for it (a request record in the world).
    Requested,
    /// An instance that the last plan waited for turns unhealthy now, if it still does not
    /// serve: plan again at that moment rather than at the next resync.
    Deadline,
    /// A failed reconcile's backoff ran out.
    Retry,
    /// A pool this one depends on (`spec.dependsOn`) ended a reconcile in sync: what it held
    /// back may go now.
    Dependency,
}

impl Trigger {
    /// A new desired state: it outranks whatever else is queued, and stops the rollout
    /// towards the old one.
    pub(super) fn new_spec(self) -> bool {
        matches!(self, Self::SourceChanged | Self::Receiver)
    }

    /// As metrics label it.
    pub(super) fn label(self) -> &'static str {
        match self {
            Self::Start => "start",
            Self::SourceChanged => "source_changed",
            Self::Receiver => "receiver",
            Self::Drift => "drift",
            Self::Resync => "resync",
            Self::Requested => "requested",
            Self::Deadline => "deadline",
            Self::Retry => "retry",
            Self::Dependency => "dependency",
        }
    }
}

/// Whether a request (`poolctl reconcile`) takes the place of what waits: a drift, a resync, a
/// deadline or a retry, each of which it covers, so that the request is said and consumed.
fn outranks(trigger: Trigger, pending: Option<Trigger>) -> bool {
    trigger == Trigger::Requested
        && matches!(pending, Some(Trigger::Drift | Trigger::Resync | Trigger::Deadline | Trigger::Retry))
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

/// Which pools a reconcile covers. Each pool has a lane of its own, so that a long rollout of
/// one pool (a drain a budget holds, a hook) never holds up drift repair or a rollout of
/// another. The first reconcile covers the whole source at once: it also finds the pools this
/// source created that it no longer declares.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Lane {
    /// Every pool of the source, declared or not; no pool's own lane runs beside it.
    All,
    /// One pool, by name: declared, or declared until the last revision.
    Pool(String),
}

impl std::fmt::Display for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::All => f.write_str("every pool"),
            Self::Pool(name) => write!(f, "pool {name}"),
        }
    }
}

/// What one look at the source found; `P` is why a look found nothing good, handed back in
/// the decision that reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum SourceNews<P> {
    /// The same revision as last time.
    Unchanged,
    /// A new revision with a valid desired state, by the [`fingerprints`] of what each of its
    /// pools asks for: the machine tells a changed pool from a reformatted file.
    Loaded(BTreeMap<String, u64>),
    /// The new revision's pool files are invalid: the last good state is kept.
    Invalid(P),
    /// The source could not be read or fetched at all.
    Unreachable(P),
}

/// What the loop tells the state machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Event<P> {
    /// The time came for [`Machine::next_wake`]: every timer due fires.
    Time,
    /// The source may have changed (a file or ref on this machine did).
    Look,
    /// A receiver heard of a push: look at the source now; what that look finds new is the
    /// receiver's doing.
    Pushed,
    /// A look at the source ended, with what it found (nothing if the look itself failed).
    Checked(Option<SourceNews<P>>),
    /// Docker reported that containers of these pools stopped serving (of every pool, when
    /// it could not tell which).
    Drift(Option<BTreeSet<String>>),
    /// `poolctl reconcile` asked to reconcile these pools now; Docker's drift news of the same
    /// burst came along, if any (as [`Event::Drift`] carries it).
    // The inner `Option` is the drift's own: every pool, when Docker could not tell which.
    #[allow(clippy::option_option)]
    Requested { pools: BTreeSet<String>, drift: Option<Option<BTreeSet<String>>> },
    /// A lane's reconcile ended; the instant the first instance its plan waited for turns
    /// unhealthy, if any.
    Finished(Lane, Ended, Option<Instant>),
    /// A resync's survey of every pool ended, with what it found (nothing if it failed).
    Surveyed(Option<Findings>),
    /// SIGINT or SIGTERM.
    Signal,
}

/// What one plan of every pool, made for a resync and carried out by nobody, found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Findings {
    /// The pools whose plan changes something: their lanes reconcile them.
    pub changed: BTreeSet<String>,
    /// When the first instance each pool's plan waits for turns unhealthy.
    pub deadlines: BTreeMap<String, Instant>,
}

/// What the loop should do now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Decision<P> {
    /// Look at the source (fetch, read, parse).
    Check,
    /// Start a reconcile of a lane.
    Reconcile(Lane, Trigger),
    /// Observe the world and plan every pool once, changing nothing, and report the pools
    /// whose plan changes something ([`Event::Surveyed`]): a resync of many idle pools costs one
    /// look, not one per pool.
    Survey,
    /// Ask a lane's running reconcile to stop at its next step boundary; a reconcile towards
    /// the newest state follows when it has.
    Supersede(Lane),
    /// A new revision asks for the same world as the last good one: nothing to do.
    Same,
    /// The new revision is invalid: report why, keep the last good state, and go on.
    KeepLastGood(P),
    /// A lane's reconcile failed: its next one starts after this long (a timer of the
    /// machine's).
    RetryAfter(Lane, Duration),
    /// Another run holds a lock of the lane: look again after this long, without counting a
    /// failure (a standby replica is not failing).
    StandBy(Lane, Duration),
    /// The source could not be read (why): look again after this long.
    LookAgainAfter(Duration, P),
    /// Ask every running reconcile to stop at its next step boundary, then exit.
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

/// How often the machine looks by itself, and how much it runs at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Periods {
    /// How often a remote source is fetched; `None` for a source this machine is told of
    /// (a directory, with notify).
    pub fetch: Option<Duration>,
    /// How often the world is observed again.
    pub resync: Duration,
    /// The longest wait between reads of an unreadable source.
    pub source_cap: Duration,
    /// How many pools' reconciles run at once (`--max-concurrent-pools`); `None`: no bound.
    pub max_running: Option<usize>,
}

/// One lane's reconciles: whether one runs, what it is to do next, and its timers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct LaneState {
    /// A reconcile of the lane is in flight.
    running: bool,
    /// What to reconcile for once it can start: when the running one ends, or once a slot is
    /// free (triggers coalesce).
    pending: Option<Trigger>,
    /// Consecutive failed reconciles, for the backoff.
    failures: u32,
    /// Waiting out a backoff: drift and resync are absorbed, the retry re-observes anyway.
    backing_off: bool,
    /// The retry after a failure (or a standby's look at a held lock), and the moment an
    /// instance the last plan waited for turns unhealthy.
    retry_at: Option<Instant>,
    deadline_at: Option<Instant>,
}

impl LaneState {
    fn idle(&self) -> bool {
        !self.running && self.pending.is_none() && self.retry_at.is_none() && self.deadline_at.is_none()
    }
}

/// Everything the decisions depend on: a handful of values and instants per lane, never a
/// history.
// Each flag is an independent fact that the transitions read; an enum of their combinations
// would be harder to follow.
#[allow(clippy::struct_excessive_bools)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Machine {
    periods: Periods,
    /// The [`fingerprints`] of the last good desired state's pools.
    spec: Option<BTreeMap<String, u64>>,
    /// The source was read and found good at least once; until then, a source that cannot be
    /// read or is invalid ends the watch.
    source_read: bool,
    /// A look at the source is under way.
    checking: bool,
    /// The source may have changed during that look: look again once it ends.
    recheck: bool,
    /// A receiver asked for the look under way (or the one after it).
    pushed: bool,
    /// A signal arrived: no new reconcile starts.
    stopping: bool,
    /// A survey is under way.
    surveying: bool,
    /// Consecutive failed reads of the source, for its own backoff.
    source_failures: u32,
    /// The timers of the source and of the whole watch: the next fetch of a remote source, the
    /// next resync, the look at an unreadable source.
    fetch_at: Option<Instant>,
    resync_at: Instant,
    look_again_at: Option<Instant>,
    /// The pools that depend on each pool (`spec.dependsOn`), as the last good desired state
    /// says.
    dependents: BTreeMap<String, BTreeSet<String>>,
    /// The lanes: [`Lane::All`] until the first reconcile of the whole source ended well, then
    /// one per declared pool (and one per pool just undeclared, until it is reconciled).
    lanes: BTreeMap<Lane, LaneState>,
}

/// What each pool of a desired state asks for, as one number per pool: its template hash and
/// spec, not file bytes (a comment or a reformatting changes nothing) nor the commit.
pub(super) fn fingerprints(desired: &Desired) -> BTreeMap<String, u64> {
    use sha2::{Digest, Sha256};
    desired
        .pools
        .iter()
        .map(|p| {
            let digest = Sha256::digest(serde_json::to_vec(&(&p.template_hash, &p.pool)).unwrap_or_default());
            (p.name().to_owned(), u64::from_be_bytes(digest[..8].try_into().expect("8 bytes")))
        })
        .collect()
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
            source_read: false,
            checking: false,
            recheck: false,
            pushed: false,
            stopping: false,
            surveying: false,
            source_failures: 0,
            fetch_at: periods.fetch.map(|every| now + every),
            resync_at: now + periods.resync,
            look_again_at: None,
            dependents: BTreeMap::new(),
            lanes: BTreeMap::new(),
        }
    }

    /// When the loop must wake up for the next timer, whatever else happens.
    pub(super) fn next_wake(&self) -> Instant {
        let lanes = self.lanes.values().flat_map(|l| [l.retry_at, l.deadline_at]);
        [self.fetch_at, self.look_again_at]
            .into_iter()
            .chain(lanes)
            .flatten()
            .fold(self.resync_at, Instant::min)
    }

    /// The pools that depend on each pool (`spec.dependsOn`) in the newest good desired
    /// state: when one ends a reconcile well, its dependents are reconciled.
    pub(super) fn depend(&mut self, dependents: BTreeMap<String, BTreeSet<String>>) {
        self.dependents = dependents;
    }

    /// A reconcile is in flight.
    pub(super) fn running(&self) -> bool {
        self.lanes.values().any(|l| l.running)
    }

    /// The machine's one step: what `event`, heard at `now`, means.
    pub(super) fn on<P>(&mut self, event: Event<P>, now: Instant) -> Vec<Decision<P>> {
        let mut out = Vec::new();
        match event {
            Event::Time => self.fire(now, &mut out),
            Event::Look => self.look(&mut out),
            Event::Pushed => {
                self.pushed = true;
                self.look(&mut out);
            }
            Event::Checked(news) => {
                self.checking = false;
                if let Some(news) = news {
                    self.source(news, now, &mut out);
                }
                if std::mem::take(&mut self.recheck) {
                    self.look(&mut out);
                } else {
                    self.pushed = false;
                }
            }
            Event::Drift(pools) => self.drift(pools.as_ref(), &mut out),
            Event::Requested { pools, drift } => {
                for lane in self.routes(Some(&pools)) {
                    self.trigger(&lane, Trigger::Requested, &mut out);
                }
                if let Some(drift) = drift {
                    self.drift(drift.as_ref(), &mut out);
                }
            }
            Event::Finished(lane, ended, deadline) => self.finished(&lane, ended, deadline, now, &mut out),
            Event::Surveyed(survey) => self.surveyed(survey, &mut out),
            Event::Signal if self.stopping => out.push(Decision::ExitNow),
            Event::Signal => {
                self.stopping = true;
                out.push(if self.running() { Decision::StopRun } else { Decision::Exit });
            }
        }
        self.dispatch(&mut out);
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
            self.resync(out);
        }
        let lanes: Vec<Lane> = self.lanes.keys().cloned().collect();
        for lane in lanes {
            let state = self.lanes.get_mut(&lane).expect("listed");
            let (retry, deadline) = (due(&mut state.retry_at), due(&mut state.deadline_at));
            if retry {
                self.trigger(&lane, Trigger::Retry, out);
            }
            if deadline {
                self.trigger(&lane, Trigger::Deadline, out);
            }
        }
    }

    /// Look at every pool again: while the whole source is reconciled as one, through it;
    /// else with one survey, whose findings each pool's lane acts on.
    fn resync<P>(&mut self, out: &mut Vec<Decision<P>>) {
        if self.lanes.contains_key(&Lane::All) {
            self.trigger(&Lane::All, Trigger::Resync, out);
        } else if !self.surveying && !self.stopping && self.spec.is_some() {
            self.surveying = true;
            out.push(Decision::Survey);
        }
    }

    /// What a survey found: each pool whose plan changes something is reconciled in its lane
    /// (a pool undeclared that the survey would prune, in a lane of its own); each lane left
    /// idle watches for the instant its plan's first waited-for instance turns unhealthy. A
    /// failed survey leaves it to every lane.
    fn surveyed<P>(&mut self, survey: Option<Findings>, out: &mut Vec<Decision<P>>) {
        self.surveying = false;
        let Some(survey) = survey else {
            for lane in self.routes(None) {
                self.trigger(&lane, Trigger::Resync, out);
            }
            return;
        };
        if self.lanes.contains_key(&Lane::All) {
            return;
        }
        for (pool, at) in &survey.deadlines {
            if let Some(state) = self.lanes.get_mut(&Lane::Pool(pool.clone()))
                && !state.running
            {
                state.deadline_at = Some(state.deadline_at.map_or(*at, |was| was.min(*at)));
            }
        }
        for pool in survey.changed {
            let lane = Lane::Pool(pool);
            self.lanes.entry(lane.clone()).or_default();
            self.trigger(&lane, Trigger::Resync, out);
        }
    }

    /// The lanes news of `pools` (of every pool, when `None`) concerns: while the whole source
    /// is reconciled as one, that one.
    fn routes(&self, pools: Option<&BTreeSet<String>>) -> Vec<Lane> {
        if self.lanes.contains_key(&Lane::All) {
            return vec![Lane::All];
        }
        self.lanes
            .keys()
            .filter(|lane| match (lane, pools) {
                (Lane::Pool(name), Some(pools)) => pools.contains(name),
                (Lane::Pool(_), None) => true,
                (Lane::All, _) => false,
            })
            .cloned()
            .collect()
    }

    fn drift<P>(&mut self, pools: Option<&BTreeSet<String>>, out: &mut Vec<Decision<P>>) {
        for lane in self.routes(pools) {
            self.trigger(&lane, Trigger::Drift, out);
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
                self.loaded(&spec, out);
            }
        }
    }

    /// A new good desired state: the pools it changes, adds or drops are reconciled, each in
    /// its lane; the others go on undisturbed.
    fn loaded<P>(&mut self, spec: &BTreeMap<String, u64>, out: &mut Vec<Decision<P>>) {
        let Some(last) = self.spec.replace(spec.clone()) else {
            self.lanes.insert(Lane::All, LaneState::default());
            self.trigger(&Lane::All, Trigger::Start, out);
            return;
        };
        let changed: BTreeSet<String> = spec
            .iter()
            .filter(|(pool, print)| last.get(*pool) != Some(print))
            .map(|(pool, _)| pool.clone())
            .chain(last.keys().filter(|pool| !spec.contains_key(*pool)).cloned())
            .collect();
        if changed.is_empty() {
            out.push(Decision::Same);
            return;
        }
        if !self.lanes.contains_key(&Lane::All) {
            for pool in &changed {
                self.lanes.entry(Lane::Pool(pool.clone())).or_default();
            }
        }
        let trigger = if self.pushed { Trigger::Receiver } else { Trigger::SourceChanged };
        for lane in self.routes(Some(&changed)) {
            self.trigger(&lane, trigger, out);
        }
    }

    fn trigger<P>(&mut self, lane: &Lane, trigger: Trigger, out: &mut Vec<Decision<P>>) {
        if self.stopping {
            return;
        }
        let Some(state) = self.lanes.get_mut(lane) else { return };
        if state.running && trigger.new_spec() {
            out.push(Decision::Supersede(lane.clone()));
        } else if !state.running {
            // The retry re-observes anyway.
            if state.backing_off && matches!(trigger, Trigger::Drift | Trigger::Resync | Trigger::Deadline) {
                return;
            }
            (state.backing_off, state.retry_at) = (false, None);
        }
        // A newer spec outranks whatever was queued; drift and resyncs coalesce into one, and a
        // request outranks them (the reconcile after it takes the request). A lane not running
        // is started by `dispatch` as soon as it may.
        if trigger.new_spec() || state.pending.is_none() || outranks(trigger, state.pending) {
            state.pending = Some(trigger);
        }
    }

    /// Whether `lane` may start now: the whole source runs alone, and at most `max_running`
    /// pools at once.
    fn may_start(&self, lane: &Lane) -> bool {
        let running = self.lanes.values().filter(|l| l.running).count();
        match lane {
            Lane::All => running == 0,
            Lane::Pool(_) => {
                !self.lanes.contains_key(&Lane::All)
                    && self.periods.max_running.is_none_or(|max| running < max)
            }
        }
    }

    /// Start every lane that waits and may start, in the lanes' order.
    fn dispatch<P>(&mut self, out: &mut Vec<Decision<P>>) {
        if self.stopping {
            return;
        }
        let waiting: Vec<Lane> = self
            .lanes
            .iter()
            .filter(|(_, l)| !l.running && l.pending.is_some())
            .map(|(lane, _)| lane.clone())
            .collect();
        for lane in waiting {
            if !self.may_start(&lane) {
                continue;
            }
            let state = self.lanes.get_mut(&lane).expect("listed");
            let trigger = state.pending.take().expect("waiting");
            // It does what a pending retry would have done.
            (state.running, state.retry_at) = (true, None);
            out.push(Decision::Reconcile(lane, trigger));
        }
    }

    fn finished<P>(
        &mut self,
        lane: &Lane,
        ended: Ended,
        deadline: Option<Instant>,
        now: Instant,
        out: &mut Vec<Decision<P>>,
    ) {
        let Some(state) = self.lanes.get_mut(lane) else { return };
        state.running = false;
        state.deadline_at = deadline;
        if self.stopping {
            if !self.running() {
                out.push(Decision::Exit);
            }
            return;
        }
        match (ended, state.pending.take()) {
            (Ended::Failed, Some(trigger)) if trigger.new_spec() => {
                // A new spec may be exactly the fix: try it at once.
                state.failures += 1;
                state.pending = Some(trigger);
            }
            (Ended::Failed, _) => {
                state.failures += 1;
                state.backing_off = true;
                let after = backoff(state.failures, MAX_BACKOFF);
                state.retry_at = Some(now + after);
                out.push(Decision::RetryAfter(lane.clone(), after));
            }
            // Whatever was pending, the holder of the lock acts on it; look again when its
            // lock would lapse.
            (Ended::Locked(after), _) => {
                state.failures = 0;
                state.backing_off = true;
                state.retry_at = Some(now + after);
                out.push(Decision::StandBy(lane.clone(), after));
            }
            (_, pending) => {
                state.failures = 0;
                state.pending = pending;
            }
        }
        if ended == Ended::Converged
            && let Lane::Pool(pool) = lane
        {
            let dependents: Vec<String> = self.dependents.get(pool).into_iter().flatten().cloned().collect();
            for dependent in dependents {
                self.trigger(&Lane::Pool(dependent), Trigger::Dependency, out);
            }
        }
        self.settle(lane);
    }

    /// Once the whole source ended well, every declared pool goes its own way; a lane of a
    /// pool no longer declared ends with its reconcile.
    fn settle(&mut self, lane: &Lane) {
        let Some(state) = self.lanes.get(lane) else { return };
        let done = !state.running && state.pending.is_none() && !state.backing_off;
        match lane {
            Lane::All if done => {
                let deadline = state.deadline_at;
                self.lanes.remove(&Lane::All);
                for pool in self.spec.iter().flat_map(BTreeMap::keys) {
                    // Each pool watches for the instant the whole plan waited for.
                    let lane = LaneState { deadline_at: deadline, ..LaneState::default() };
                    self.lanes.insert(Lane::Pool(pool.clone()), lane);
                }
            }
            Lane::Pool(pool)
                if state.idle() && !self.spec.as_ref().is_some_and(|spec| spec.contains_key(pool)) =>
            {
                self.lanes.remove(lane);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::time::advance;

    use super::*;
    use Decision::*;

    type News = SourceNews<&'static str>;

    /// A desired state of one pool `w`, by its fingerprint.
    fn w(print: u64) -> News {
        News::Loaded(BTreeMap::from([("w".to_owned(), print)]))
    }

    fn pool(name: &str) -> Lane {
        Lane::Pool(name.to_owned())
    }

    const RESYNC: Duration = Duration::from_secs(300);

    fn periods() -> Periods {
        Periods { fetch: None, resync: RESYNC, source_cap: MAX_BACKOFF, max_running: None }
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
        assert_eq!(read(&mut m, w(1)), [Reconcile(Lane::All, Trigger::Start)]);
        m
    }

    /// The one lane running.
    fn running(m: &Machine) -> Lane {
        let running: Vec<&Lane> = m.lanes.iter().filter(|(_, l)| l.running).map(|(lane, _)| lane).collect();
        assert_eq!(running.len(), 1, "{m:?}");
        running[0].clone()
    }

    fn finished(m: &mut Machine, ended: Ended) -> Vec<Decision<&'static str>> {
        let lane = running(m);
        on(m, Event::Finished(lane, ended, None))
    }

    fn lane<'m>(m: &'m Machine, lane: &Lane) -> &'m LaneState {
        m.lanes.get(lane).unwrap_or_else(|| panic!("no {lane}: {m:?}"))
    }

    #[tokio::test(start_paused = true)]
    async fn start_reconciles_the_whole_source_once_at_a_time_and_coalesces_drift() {
        let mut m = reconciling();
        assert_eq!(on(&mut m, Event::Drift(None)), []);
        advance(RESYNC).await;
        assert_eq!(on(&mut m, Event::Time), [], "the resync is queued behind the drift");
        assert_eq!(lane(&m, &Lane::All).pending, Some(Trigger::Drift));
        assert_eq!(
            finished(&mut m, Ended::Converged),
            [Reconcile(Lane::All, Trigger::Drift)],
            "one more look for all"
        );
        assert_eq!(finished(&mut m, Ended::Converged), []);
        assert!(!m.running());
        assert_eq!(m.lanes.keys().collect::<Vec<_>>(), [&pool("w")], "then each pool goes its own way");
        assert_eq!(lane(&m, &pool("w")), &LaneState::default());
    }

    /// What a look a receiver asked for finds new is reconciled as any new spec, by the
    /// receiver's trigger; a look of its own afterwards is the source's again.
    #[tokio::test(start_paused = true)]
    async fn a_push_looks_at_once_and_what_it_finds_is_the_receiver_s_doing() {
        let mut m = reconciling();
        assert_eq!(finished(&mut m, Ended::Converged), []);
        assert_eq!(on(&mut m, Event::Pushed), [Check]);
        assert_eq!(on(&mut m, Event::Pushed), [], "one look at a time");
        assert_eq!(read(&mut m, News::Unchanged), [Check], "the second push is looked at too");
        assert_eq!(read(&mut m, w(2)), [Reconcile(pool("w"), Trigger::Receiver)]);
        on(&mut m, Event::Look);
        assert_eq!(read(&mut m, w(3)), [Supersede(pool("w"))], "a new spec outranks the pushed one");
        assert_eq!(lane(&m, &pool("w")).pending, Some(Trigger::SourceChanged));
        assert_eq!(finished(&mut m, Ended::Superseded), [Reconcile(pool("w"), Trigger::SourceChanged)]);
        assert_eq!(Trigger::Receiver.label(), "receiver");
    }

    /// `poolctl reconcile w`: the pool's lane reconciles at once, said as `Requested` (whose
    /// reconcile consumes the request), also in place of a drift queued behind a running one.
    #[tokio::test(start_paused = true)]
    async fn a_request_reconciles_its_pool_at_once_and_takes_the_place_of_queued_drift() {
        let mut m = reconciling();
        assert_eq!(finished(&mut m, Ended::Converged), []);
        let w = || BTreeSet::from(["w".to_owned()]);
        let requested = on(&mut m, Event::Requested { pools: w(), drift: None });
        assert_eq!(requested, [Reconcile(pool("w"), Trigger::Requested)], "no resync waited for");
        assert_eq!(on(&mut m, Event::Drift(Some(w()))), []);
        assert_eq!(lane(&m, &pool("w")).pending, Some(Trigger::Drift));
        assert_eq!(on(&mut m, Event::Requested { pools: w(), drift: None }), []);
        assert_eq!(lane(&m, &pool("w")).pending, Some(Trigger::Requested), "the request outranks drift");
        assert_eq!(finished(&mut m, Ended::Converged), [Reconcile(pool("w"), Trigger::Requested)]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_resync_timer_reconciles_and_is_set_again_from_when_it_fired() {
        let mut m = reconciling();
        assert_eq!(finished(&mut m, Ended::Converged), []);
        assert_eq!(m.next_wake(), Instant::now() + RESYNC);
        advance(RESYNC + Duration::from_secs(5)).await;
        assert_eq!(on(&mut m, Event::Time), [Survey], "one look at every pool");
        assert_eq!(m.next_wake(), Instant::now() + RESYNC, "a late tick delays the next one");
        advance(RESYNC).await;
        assert_eq!(on(&mut m, Event::Time), [], "one survey at a time");
        assert_eq!(surveyed(&mut m, &[]), [], "nothing to change: no pool reconciles");
        advance(RESYNC).await;
        assert_eq!(on(&mut m, Event::Time), [Survey]);
        assert_eq!(surveyed(&mut m, &["w"]), [Reconcile(pool("w"), Trigger::Resync)]);
    }

    fn surveyed(m: &mut Machine, changed: &[&str]) -> Vec<Decision<&'static str>> {
        let changed = changed.iter().map(|p| (*p).to_owned()).collect();
        on(m, Event::Surveyed(Some(Findings { changed, ..Findings::default() })))
    }

    #[tokio::test(start_paused = true)]
    async fn a_survey_sets_each_idle_pools_deadline_and_a_failed_one_leaves_it_to_every_pool() {
        let mut m = reconciling();
        let two = News::Loaded(BTreeMap::from([("a".to_owned(), 1), ("b".to_owned(), 1)]));
        on(&mut m, Event::Look);
        read(&mut m, two);
        finished(&mut m, Ended::Superseded);
        assert_eq!(finished(&mut m, Ended::Converged), []);
        advance(RESYNC).await;
        assert_eq!(on(&mut m, Event::Time), [Survey]);
        let ten = Instant::now() + Duration::from_secs(10);
        let survey = Findings { deadlines: BTreeMap::from([("b".to_owned(), ten)]), ..Findings::default() };
        assert_eq!(on(&mut m, Event::Surveyed(Some(survey))), []);
        assert_eq!(m.next_wake(), ten);
        advance(Duration::from_secs(10)).await;
        assert_eq!(on(&mut m, Event::Time), [Reconcile(pool("b"), Trigger::Deadline)]);
        on(&mut m, Event::Finished(pool("b"), Ended::Converged, None));

        advance(RESYNC).await;
        assert_eq!(on(&mut m, Event::Time), [Survey]);
        assert_eq!(
            on(&mut m, Event::Surveyed(None)),
            [Reconcile(pool("a"), Trigger::Resync), Reconcile(pool("b"), Trigger::Resync)]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_spec_during_a_rollout_supersedes_it_and_is_planned_next() {
        let mut m = reconciling();
        assert_eq!(on(&mut m, Event::Drift(None)), []);
        assert_eq!(on(&mut m, Event::Look), [Check]);
        assert_eq!(read(&mut m, w(2)), [Supersede(Lane::All)]);
        assert_eq!(on(&mut m, Event::Drift(None)), []);
        assert_eq!(
            lane(&m, &Lane::All).pending,
            Some(Trigger::SourceChanged),
            "the newer spec is not downgraded to a drift"
        );
        assert_eq!(finished(&mut m, Ended::Superseded), [Reconcile(Lane::All, Trigger::SourceChanged)]);
        assert!(m.running());

        // The same, once the pools go their own ways.
        assert_eq!(finished(&mut m, Ended::Converged), []);
        assert_eq!(on(&mut m, Event::Drift(None)), [Reconcile(pool("w"), Trigger::Drift)]);
        on(&mut m, Event::Look);
        assert_eq!(read(&mut m, w(3)), [Supersede(pool("w"))]);
        assert_eq!(finished(&mut m, Ended::Superseded), [Reconcile(pool("w"), Trigger::SourceChanged)]);
    }

    #[tokio::test(start_paused = true)]
    async fn each_pool_is_reconciled_in_its_own_lane_beside_a_long_rollout() {
        let mut m = reconciling();
        let two = |a: u64, b: u64| News::Loaded(BTreeMap::from([("a".to_owned(), a), ("b".to_owned(), b)]));
        on(&mut m, Event::Look);
        assert_eq!(read(&mut m, two(1, 1)), [Supersede(Lane::All)], "the first reconcile covers all");
        assert_eq!(finished(&mut m, Ended::Superseded), [Reconcile(Lane::All, Trigger::SourceChanged)]);
        assert_eq!(finished(&mut m, Ended::Converged), []);

        // a rolls out, for long; b's drift and b's new spec go on beside it.
        on(&mut m, Event::Look);
        assert_eq!(read(&mut m, two(2, 1)), [Reconcile(pool("a"), Trigger::SourceChanged)]);
        let b = BTreeSet::from(["b".to_owned()]);
        assert_eq!(on(&mut m, Event::Drift(Some(b.clone()))), [Reconcile(pool("b"), Trigger::Drift)]);
        assert_eq!(on(&mut m, Event::Finished(pool("b"), Ended::Converged, None)), []);
        on(&mut m, Event::Look);
        assert_eq!(read(&mut m, two(2, 2)), [Reconcile(pool("b"), Trigger::SourceChanged)], "a goes on");
        assert_eq!(on(&mut m, Event::Drift(Some(b))), [], "coalesced into b's pending");
        assert_eq!(lane(&m, &pool("b")).pending, Some(Trigger::Drift));
        assert_eq!(
            on(&mut m, Event::Drift(Some(BTreeSet::from(["gone".to_owned()])))),
            [],
            "a pool of no lane"
        );

        // A pool the source drops is reconciled once more (as undeclared), then its lane ends.
        on(&mut m, Event::Look);
        let only_b = News::Loaded(BTreeMap::from([("b".to_owned(), 2)]));
        assert_eq!(read(&mut m, only_b), [Supersede(pool("a"))]);
        assert_eq!(
            on(&mut m, Event::Finished(pool("a"), Ended::Superseded, None)),
            [Reconcile(pool("a"), Trigger::SourceChanged)]
        );
        assert_eq!(on(&mut m, Event::Finished(pool("a"), Ended::Converged, None)), []);
        assert!(!m.lanes.contains_key(&pool("a")), "{m:?}");
        assert!(lane(&m, &pool("b")).running);
    }

    #[tokio::test(start_paused = true)]
    async fn a_pool_that_ends_in_sync_has_the_pools_that_depend_on_it_reconciled() {
        let mut m = reconciling();
        let two = News::Loaded(BTreeMap::from([("apps".to_owned(), 1), ("system".to_owned(), 1)]));
        m.depend(BTreeMap::from([("system".to_owned(), BTreeSet::from(["apps".to_owned()]))]));
        on(&mut m, Event::Look);
        read(&mut m, two);
        finished(&mut m, Ended::Superseded);
        assert_eq!(finished(&mut m, Ended::Converged), []);
        let system = BTreeSet::from(["system".to_owned()]);
        assert_eq!(on(&mut m, Event::Drift(Some(system))), [Reconcile(pool("system"), Trigger::Drift)]);
        assert_eq!(
            on(&mut m, Event::Finished(pool("system"), Ended::Converged, None)),
            [Reconcile(pool("apps"), Trigger::Dependency)]
        );
        assert_eq!(
            on(&mut m, Event::Finished(pool("apps"), Ended::Converged, None)),
            [],
            "no one depends on apps"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn at_most_max_running_pools_reconcile_at_once_and_the_others_wait_their_turn() {
        let mut m = Machine::new(Periods { max_running: Some(2), ..periods() }, Instant::now());
        on(&mut m, Event::Look);
        let three = News::Loaded(BTreeMap::from([("a".into(), 1), ("b".into(), 1), ("c".into(), 1)]));
        assert_eq!(read(&mut m, three), [Reconcile(Lane::All, Trigger::Start)], "the whole source, alone");
        assert_eq!(finished(&mut m, Ended::Converged), []);
        advance(RESYNC).await;
        assert_eq!(on(&mut m, Event::Time), [Survey]);
        assert_eq!(
            surveyed(&mut m, &["a", "b", "c"]),
            [Reconcile(pool("a"), Trigger::Resync), Reconcile(pool("b"), Trigger::Resync)]
        );
        assert_eq!(lane(&m, &pool("c")).pending, Some(Trigger::Resync), "c waits for a slot");
        assert_eq!(
            on(&mut m, Event::Finished(pool("b"), Ended::Converged, None)),
            [Reconcile(pool("c"), Trigger::Resync)]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_standby_replica_looks_again_when_the_lock_would_lapse_without_backing_off() {
        let mut m = reconciling();
        assert_eq!(finished(&mut m, Ended::Failed), [RetryAfter(Lane::All, Duration::from_secs(1))]);
        advance(Duration::from_secs(1)).await;
        assert_eq!(on(&mut m, Event::Time), [Reconcile(Lane::All, Trigger::Retry)]);
        on(&mut m, Event::Look);
        assert_eq!(read(&mut m, w(2)), [Supersede(Lane::All)]);
        let standby = Duration::from_secs(7);
        assert_eq!(
            finished(&mut m, Ended::Locked(standby)),
            [StandBy(Lane::All, standby)],
            "the holder acts on it"
        );
        assert_eq!(lane(&m, &Lane::All).failures, 0, "standing by is not failing");
        assert_eq!(m.next_wake(), Instant::now() + standby);
        assert_eq!(on(&mut m, Event::Drift(None)), [], "the look at the lapse re-observes anyway");
        advance(Duration::from_millis(6999)).await;
        assert_eq!(on(&mut m, Event::Time), [], "not before the lapse");
        advance(Duration::from_millis(1)).await;
        assert_eq!(on(&mut m, Event::Time), [Reconcile(Lane::All, Trigger::Retry)]);
    }

    #[tokio::test(start_paused = true)]
    async fn failures_back_off_exponentially_and_a_new_spec_skips_the_wait() {
        let mut m = reconciling();
        assert_eq!(finished(&mut m, Ended::Failed), [RetryAfter(Lane::All, Duration::from_secs(1))]);
        assert_eq!(on(&mut m, Event::Drift(None)), [], "the retry re-observes anyway");
        advance(Duration::from_secs(1)).await;
        assert_eq!(on(&mut m, Event::Time), [Reconcile(Lane::All, Trigger::Retry)]);
        assert_eq!(finished(&mut m, Ended::Failed), [RetryAfter(Lane::All, Duration::from_secs(2))]);
        on(&mut m, Event::Look);
        assert_eq!(read(&mut m, w(2)), [Reconcile(Lane::All, Trigger::SourceChanged)]);
        assert_eq!(m.next_wake(), m.resync_at, "the reconcile did what the retry would have");
        assert_eq!(finished(&mut m, Ended::Converged), []);
        assert_eq!(lane(&m, &pool("w")).failures, 0);

        // A new spec queued behind a failing run is tried at once, not after a backoff.
        let mut m = reconciling();
        on(&mut m, Event::Look);
        assert_eq!(read(&mut m, w(2)), [Supersede(Lane::All)]);
        assert_eq!(finished(&mut m, Ended::Failed), [Reconcile(Lane::All, Trigger::SourceChanged)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_signal_stops_the_run_at_a_boundary_then_exits_and_a_second_exits_at_once() {
        let mut m = Machine::new(periods(), Instant::now());
        assert_eq!(on(&mut m, Event::Signal), [Exit], "idle: nothing to wait for");
        assert_eq!(on(&mut m, Event::Signal), [ExitNow]);

        let mut m = reconciling();
        assert_eq!(on(&mut m, Event::Signal), [StopRun]);
        on(&mut m, Event::Look);
        assert_eq!(read(&mut m, w(2)), [], "nothing new starts once stopping");
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
            assert_eq!(read(&mut m, bad.clone()), [Fail("bad")], "{bad:?} before any good state");
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
        assert_eq!(read(&mut m, w(1)), [Reconcile(Lane::All, Trigger::Start)]);
        on(&mut m, Event::Look);
        assert_eq!(read(&mut m, News::Unchanged), []);
        on(&mut m, Event::Look);
        assert_eq!(read(&mut m, w(1)), [Same], "a new revision that asks for the same pools");
        assert_eq!(lane(&m, &Lane::All).pending, None, "nothing queued for it");
        on(&mut m, Event::Look);
        assert_eq!(read(&mut m, w(2)), [Supersede(Lane::All)]);
        assert_eq!(m.spec, Some(BTreeMap::from([("w".to_owned(), 2)])));
    }

    #[tokio::test(start_paused = true)]
    async fn a_look_asked_for_during_a_look_happens_once_after_it() {
        let mut m = Machine::new(periods(), Instant::now());
        assert_eq!(on(&mut m, Event::Look), [Check]);
        assert_eq!(on(&mut m, Event::Look), []);
        assert_eq!(on(&mut m, Event::Look), []);
        assert_eq!(read(&mut m, w(1)), [Check, Reconcile(Lane::All, Trigger::Start)]);
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
        assert_eq!(fingerprints(&a), fingerprints(&moved), "a file renamed asks for the same world");
        let scaled = desired(vec![PoolArgs::new("w", 2).build()]);
        assert_ne!(fingerprints(&a), fingerprints(&scaled));
    }

    #[tokio::test(start_paused = true)]
    async fn a_health_deadline_plans_again_like_a_resync_but_not_during_a_backoff() {
        let mut m = reconciling();
        let ten = Duration::from_secs(10);
        assert_eq!(on(&mut m, Event::Finished(Lane::All, Ended::Converged, Some(Instant::now() + ten))), []);
        assert_eq!(m.next_wake(), Instant::now() + ten);
        advance(ten).await;
        assert_eq!(on(&mut m, Event::Time), [Reconcile(pool("w"), Trigger::Deadline)]);
        let soon = Instant::now() + Duration::from_millis(500);
        assert_eq!(
            on(&mut m, Event::Finished(pool("w"), Ended::Failed, Some(soon))),
            [RetryAfter(pool("w"), Duration::from_secs(1))]
        );
        advance(Duration::from_millis(500)).await;
        assert_eq!(on(&mut m, Event::Time), [], "the retry after a failure looks anyway");
        advance(Duration::from_millis(500)).await;
        assert_eq!(on(&mut m, Event::Time), [Reconcile(pool("w"), Trigger::Retry)]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unreadable_source_is_read_again_with_backoff_up_to_the_interval() {
        let mut m = Machine::new(Periods { source_cap: Duration::from_secs(3), ..periods() }, Instant::now());
        on(&mut m, Event::Look);
        read(&mut m, w(1));
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
