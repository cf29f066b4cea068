//! What a rollout says as it goes: one [`Event`] for each thing, handed to the [`Sink`] the
//! command chose (see `crate::report`). Nothing under `rollout`, `execute` or `lock` writes
//! output itself, so a new kind of output is one more sink, not one more writer threaded
//! through every layer.

use std::time::Duration;

use crate::rollout::execute::StepError;

/// A step of the plan as progress names it: its number in the plan text, and of how many.
#[derive(Debug, Clone, Copy)]
pub struct StepId<'a> {
    pub n: usize,
    pub total: usize,
    pub pool: &'a str,
    pub instance: &'a str,
    pub verb: &'static str,
    /// More than one pool has steps: they run side by side, so each line names its pool.
    pub several_pools: bool,
}

/// How a step ended.
#[derive(Debug, Clone, Copy)]
pub enum StepEnd<'a> {
    Done,
    /// Stopped at the rollout's request while it waited: no failure; the next run goes on.
    Stopped(&'a StepError),
    Failed(&'a StepError),
}

/// Everything a rollout tells its user.
#[derive(Debug, Clone, Copy)]
pub enum Event<'a> {
    /// A line to show as it is: a lock taken or waited for, an image pulled, a record kept.
    Message(&'a str),
    /// A step began.
    Started(StepId<'a>),
    /// A step is under way, for `elapsed` so far, waiting for `waits`. Said every second; each
    /// sink chooses how often it shows it.
    Waiting { step: StepId<'a>, elapsed: Duration, waits: &'a str },
    /// A step ended.
    Ended { step: StepId<'a>, elapsed: Duration, end: StepEnd<'a> },
    /// The rollout looked at the world again between batches; `left` steps to go, as planned.
    AsPlanned { left: usize },
    /// The rollout looked at the world again and the plan changed: `total` steps in all (was
    /// `was`), the `left` ones numbered from `first`, and why.
    Replanned { total: usize, was: usize, left: usize, first: usize, why: &'a str },
    /// The step's drain made `count` evictions that ended as `result` (`evicted`, `refused`,
    /// `failed`).
    Evictions { step: StepId<'a>, result: &'a str, count: u64 },
    /// The retirement of `instance` began (`waiting`, with `what` holds it) or ended waiting for
    /// what another controller holds: `reason` `hooks` (its Node's deletion hooks) or
    /// `volumes` (its volumes to detach). Each begin is followed by one end.
    RetirementWaits { pool: &'a str, instance: &'a str, reason: &'static str, waiting: bool, what: &'a str },
    /// The run took the lock of `pool` (`held`), or gave it up or lost it.
    Lock { pool: &'a str, held: bool },
    /// What a bootstrap command printed, for a sink that shows it (`-v`).
    BootstrapOutput { instance: &'a str, argv: &'a [String], output: &'a str },
    /// What the cluster's users should find where `kubectl get events` and `kubectl describe`
    /// look, as a Kubernetes Event: `reason` (`Cordoned`, `DrainBlocked`, `RolloutStarted`...)
    /// and `note`, about a Node of the pool or about the pool's rollout.
    Kube { about: About<'a>, reason: &'static str, note: &'a str, warning: bool },
}

/// What a [`Event::Kube`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum About<'a> {
    /// Node `node` of `pool`.
    Node { pool: &'a str, node: &'a str },
    /// The rollout of `pool` (told on its Lease).
    Pool(&'a str),
}

impl About<'_> {
    pub fn pool(&self) -> &str {
        match self {
            About::Node { pool, .. } | About::Pool(pool) => pool,
        }
    }
}

/// Where a rollout's events go. Best effort: a sink that cannot show an event must not fail
/// the rollout halfway.
pub trait Sink: Send + Sync {
    fn event(&self, event: &Event<'_>);

    /// A [`Event::Message`].
    fn say(&self, line: &str) {
        tracing::debug!("{line}");
        self.event(&Event::Message(line));
    }
}

/// Both sinks, each event to the first and then to the second.
impl<A: Sink + ?Sized, B: Sink + ?Sized> Sink for (&A, &B) {
    fn event(&self, event: &Event<'_>) {
        self.0.event(event);
        self.1.event(event);
    }
}
