//! Canaries (`spec.rollout.canary`), as Nomad's `update` block has them: a new template first
//! reaches a few instances, made beside the old ones, and the rollout holds there, retiring
//! nothing old, until the canaries are promoted, by `poolctl promote` (a record in the world,
//! tied to the template it promotes, so that every run and every `watch` replica reads it) or
//! by `autoPromote` once every canary has been up that long by the world's clock. A canary that
//! turns unhealthy under `failureAction: rollback` rolls the pool back, which retires only the
//! canaries: the old instances run the template it goes back to.

use serde::Serialize;

use crate::model::{Container, DesiredPool, RolloutResult, World};

/// What the plan says of a pool's canaries: how many, of how many replicas, and whether the
/// rest of the rollout may follow them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CanaryState {
    /// The canaries the spec asks for (`spec.rollout.canary`, resolved against `replicas`).
    pub count: u32,
    /// The pool's `replicas`.
    pub of: u32,
    /// The instances of the new template that serve now.
    pub up: u32,
    /// Whether the rest of the pool may roll to the new template.
    pub promoted: bool,
    /// Who promoted them (`poolctl promote`), or `autoPromote`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub promoted_by: Option<String>,
    /// When `autoPromote` promotes them (RFC 3339, UTC), once every canary is up.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_promote_at: Option<String>,
    /// `auto_promote_at` in seconds since the Unix epoch: when `watch` plans again.
    #[serde(skip)]
    pub auto_promote_secs: Option<i64>,
    /// `canary 1 of 3: waiting for promotion (poolctl promote web)`.
    pub message: String,
}

impl CanaryState {
    /// Whether the rollout holds at its canaries: nothing old is retired, nothing more made.
    pub fn holds(&self) -> bool {
        !self.promoted
    }

    /// Whether every canary serves and the rollout waits for their promotion alone.
    pub fn waits_for_promotion(&self) -> bool {
        self.holds() && self.up >= self.count
    }
}

/// The number of canaries that lead `dp`'s rollout, if canaries lead it: the spec asks for
/// some, some instance runs another template (`outdated`: a new pool, a scale-up or the
/// replacement of a dead instance has nothing to compare with), and the spec's template is a
/// new one, not one the pool goes back to: not a rollback (`rolling_back`), nor the template
/// the pool last rolled out completely (a source reverted while canaries wait: the canaries,
/// outdated now, are retired as any outdated instance is). Where the history does not say, a
/// pool with more instances of the spec's template (`current`) than canaries is taken to run
/// it already.
pub(super) fn count(
    dp: &DesiredPool,
    world: &World,
    rolling_back: bool,
    (outdated, current): (bool, usize),
) -> Option<usize> {
    let spec = &dp.pool.spec;
    let n = usize::try_from(spec.rollout.canaries(spec.replicas)).unwrap_or(0);
    let history = world.history.get(dp.name()).map_or(&[][..], Vec::as_slice);
    let complete = |r: &&crate::model::Revision| r.end.is_some_and(|e| e.result == RolloutResult::Complete);
    let back = match history.iter().rev().find(complete) {
        Some(last) => last.template_hash == dp.template_hash,
        None => current > n,
    };
    (n > 0 && outdated && !rolling_back && !back).then_some(n)
}

/// Judge the canaries of `dp` at `now`: `count` of them asked for, `up` the times each
/// instance of the new template that serves came up (its up record, by the daemon's clock),
/// any order.
pub(super) fn judge(dp: &DesiredPool, world: &World, count: usize, mut up: Vec<i64>) -> CanaryState {
    let spec = &dp.pool.spec;
    up.sort_unstable();
    // Every canary has been up for `autoPromote` once the last of the first `count` to come
    // up has.
    let auto_at = spec.rollout.auto_promote.and_then(|wait| {
        let last = *up.get(count.checked_sub(1)?)?;
        Some(last.saturating_add(i64::try_from(wait.get().as_secs()).unwrap_or(i64::MAX)))
    });
    // A promotion of another template (an earlier rollout's) promotes nothing now.
    let by_hand = world.promoted.get(dp.name()).filter(|p| p.template_hash == dp.template_hash);
    let auto = auto_at.filter(|at| *at <= world.now);
    let promoted_by = by_hand
        .map(|p| format!("{} at {}", p.by, time(p.at)))
        .or_else(|| auto.map(|at| format!("autoPromote at {}", time(at))));
    let (of, n) = (spec.replicas, count);
    let message = match (&promoted_by, up.len() >= count) {
        (Some(by), _) => format!("canary {n} of {of}: promoted by {by}; the rest rolls"),
        (None, false) => format!(
            "canary {n} of {of}: {} up; then waiting for promotion (`poolctl promote {}`{})",
            up.len(),
            dp.name(),
            spec.rollout
                .auto_promote
                .map(|d| format!(", or autoPromote {d} after they are up"))
                .unwrap_or_default()
        ),
        (None, true) => format!(
            "canary {n} of {of}: waiting for promotion (`poolctl promote {}`{})",
            dp.name(),
            auto_at.map(|at| format!(", or autoPromote at {}", time(at))).unwrap_or_default()
        ),
    };
    CanaryState {
        count: u32::try_from(count).unwrap_or(u32::MAX),
        of: u32::try_from(of).unwrap_or(u32::MAX),
        up: u32::try_from(up.len()).unwrap_or(u32::MAX),
        promoted: promoted_by.is_some(),
        promoted_by,
        auto_promote_at: auto_at.map(time),
        auto_promote_secs: auto_at,
        message,
    }
}

/// Why `dp`'s canary rollout failed, if it did and `failureAction: rollback` makes it roll back:
/// one of its canaries came up, served, and turned unhealthy (by the pool's health rules, at
/// the world's time) before the canaries were promoted. A canary that never comes up is the
/// progress deadline's to judge, as any new instance is.
pub(super) fn failed(dp: &DesiredPool, world: &World) -> Option<String> {
    let spec = &dp.pool.spec;
    if spec.rollout.failure_action != crate::spec::FailureAction::Rollback {
        return None;
    }
    let mine = || world.containers.iter().filter(|c| c.pool == dp.name());
    let outdated = mine().any(|c| c.template_hash != dp.template_hash);
    let new: Vec<&Container> =
        mine().filter(|c| c.template_hash == dp.template_hash && c.elsewhere.is_none()).collect();
    let count = count(dp, world, false, (outdated, new.len()))?;
    let node = |c: &Container| world.nodes.iter().find(|n| n.name == c.name);
    let locked = world.locked.contains(dp.name());
    let judged: Vec<(&Container, super::health::Assessment)> = new
        .iter()
        .filter(|c| c.came_up.is_some())
        .map(|c| (*c, super::health::assess(spec, c, node(c), world.now, locked)))
        .collect();
    let up = judged.iter().filter(|(_, a)| a.standing == super::health::Standing::Up);
    if judge(dp, world, count, up.map(|(c, _)| came_up(c)).collect()).promoted {
        return None;
    }
    let (c, sick) = judged.iter().find(|(_, a)| a.standing == super::health::Standing::Unhealthy)?;
    let why = sick.note.as_ref().map_or_else(|| "unhealthy".to_owned(), |n| n.reason.clone());
    Some(format!(
        "Degraded: canary {} of template {} turned unhealthy ({why}) before promotion",
        c.name, dp.template_hash
    ))
}

/// When an instance that serves came up, as far as the world says: its up record, or, for one
/// that serves without it (a lost record), its creation.
pub(super) fn came_up(c: &Container) -> i64 {
    c.came_up.unwrap_or(c.created)
}

/// Seconds since the Unix epoch as RFC 3339, UTC.
fn time(secs: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(secs).map_or_else(|_| secs.to_string(), |t| t.to_string())
}
