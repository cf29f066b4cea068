//! A rollout's progress, as a Deployment's `progressDeadlineSeconds` reads it, from the world
//! alone: the pool's rollout record (when its rollout to a template began) and its instances'
//! up records. A stalled rollout creates nothing more (`failureAction: pause`), or goes back to
//! the last template that was fully rolled out (`failureAction: rollback`, or `apply --rollback`
//! by hand), rebuilt from the pool's history (see [`crate::model::Revision`]); for a pool whose
//! history has none, from its instances' labels.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use super::PlanOptions;
use crate::model::{Container, ContainerState, Desired, DesiredPool, Revision, RolloutResult, World};
use crate::spec::{BootstrapStep, FailureAction, Join, Template};

/// What the rollout records make of the declared pools.
#[derive(Debug, Default)]
pub(super) struct Deadlines {
    /// The pools whose rollout stalled (or was rolled back), and why, as the plan says it.
    pub stalled: BTreeMap<String, String>,
    /// The pools that go back to an earlier template, as that template.
    pub rollbacks: Vec<DesiredPool>,
    /// The pools whose first creation begins a rollout (a new template, a rollback, or a
    /// stalled rollout `apply` tries again): it writes the record.
    pub starts: BTreeSet<String>,
    /// The pools whose stalled rollout `apply` tries again: a new revision of their history.
    pub retried: BTreeSet<String>,
    /// The pools whose rollout of the spec's template ended without completing: that template's
    /// hash, and how (`Degraded`, `RolledBack`).
    pub ended: BTreeMap<String, (String, RolloutResult)>,
}

/// Why a rollout does not go on.
enum Stall {
    /// It made no progress within its `progressDeadline`.
    Deadline(String),
    /// It was rolled back (by `failureAction: rollback` or `apply --rollback`), and stays so
    /// until the source changes or `apply` tries it again.
    RolledBack(String),
    /// `apply --rollback` gives it up now.
    ByHand,
}

impl Deadlines {
    /// Judge every declared pool of `desired` in `world`.
    pub(super) fn of(desired: &Desired, world: &World, options: &PlanOptions) -> Self {
        let mut progress = Self::default();
        for dp in &desired.pools {
            let name = dp.name().to_owned();
            let record = world.rollouts.get(dp.name());
            let by_hand = options.rollback.contains(dp.name());
            let stalled = if by_hand { Some(Stall::ByHand) } else { stall(dp, world) };
            let stall = match stalled {
                None => {
                    if starts(dp, world) {
                        progress.starts.insert(name);
                    }
                    continue;
                }
                Some(stall) if options.retry_stalled && !matches!(stall, Stall::ByHand) => {
                    if let Stall::Deadline(_) = stall {
                        progress.end(dp, RolloutResult::Degraded);
                    }
                    progress.starts.insert(name.clone());
                    progress.retried.insert(name);
                    continue;
                }
                Some(Stall::Deadline(why))
                    if dp.pool.spec.rollout.failure_action != FailureAction::Rollback =>
                {
                    progress.stalled.insert(name, why);
                    progress.end(dp, RolloutResult::Degraded);
                    continue;
                }
                Some(stall) => stall,
            };
            // Rolled back, or to be: the pool goes to (or stays on) the last template rolled
            // out completely.
            let target_hash = match rollback_target(dp, world) {
                Ok(previous) => {
                    let hash = previous.template_hash.clone();
                    let why = match stall {
                        Stall::Deadline(why) => {
                            format!("{why}; rolling back to template {hash} (failureAction: rollback)")
                        }
                        Stall::RolledBack(why) => why,
                        Stall::ByHand => format!("rolling back to template {hash} (apply --rollback)"),
                    };
                    progress.stalled.insert(name.clone(), why);
                    progress.end(dp, RolloutResult::RolledBack);
                    progress.rollbacks.push(previous);
                    hash
                }
                Err(cannot) => {
                    let why = match stall {
                        Stall::Deadline(why) => {
                            // It stalled, and stays where it stands.
                            progress.end(dp, RolloutResult::Degraded);
                            why
                        }
                        Stall::RolledBack(why) => why,
                        Stall::ByHand => "apply --rollback".to_owned(),
                    };
                    progress.stalled.insert(name, format!("{why}; cannot roll back: {cannot}"));
                    continue;
                }
            };
            if record.is_none_or(|r| r.template_hash != target_hash) {
                progress.starts.insert(name);
            }
        }
        progress
    }

    /// Record that `dp`'s rollout of the spec's template ended with `result`.
    fn end(&mut self, dp: &DesiredPool, result: RolloutResult) {
        self.ended.insert(dp.name().to_owned(), (dp.template_hash.clone(), result));
    }

    /// Whether the pool creates nothing: stalled, and not rolled back.
    pub(super) fn paused(&self, pool: &str) -> bool {
        self.stalled.contains_key(pool) && !self.rollbacks.iter().any(|r| r.name() == pool)
    }

    /// For a pool rolled back: the spec's template, which it gives up.
    pub(super) fn rolled_back_from(&self, pool: &str) -> Option<&str> {
        self.ended
            .get(pool)
            .filter(|(_, result)| *result == RolloutResult::RolledBack)
            .map(|(hash, _)| hash.as_str())
    }
}

/// Whether the pool's next creation starts its rollout's clock anew: a new template, or the
/// first attempt since the pool last converged (a scale-up, the replacement of a dead instance).
/// A retry of a rollout under way keeps its clock, though its failed attempt may already be gone:
/// else a template that never comes up would be retried for ever, never past its deadline.
fn starts(dp: &DesiredPool, world: &World) -> bool {
    let Some(record) = world.rollouts.get(dp.name()).filter(|r| r.template_hash == dp.template_hash) else {
        return true;
    };
    let last = world.history.get(dp.name()).and_then(|h| h.last());
    // The history says when the pool last converged on the template: the record written before
    // then dated a rollout that is over.
    if let Some(revision) = last.filter(|r| r.template_hash == dp.template_hash) {
        return revision.end.is_some_and(|e| e.result == RolloutResult::Complete && e.at >= record.since);
    }
    // No history to tell (it was lost, or poolctl kept none then): the pool is converged when
    // every instance runs the template and none is being made.
    let current = |c: &Container| c.template_hash == dp.template_hash && c.elsewhere.is_none();
    let mut mine = world.containers.iter().filter(|c| c.pool == dp.name());
    mine.all(|c| current(c) || undisrupted(c, world)) && attempts(dp, world).is_empty()
}

/// Whether the instance serves on a Node whose owner asked that it not be disrupted.
fn undisrupted(c: &Container, world: &World) -> bool {
    world.nodes.iter().any(|n| n.name == c.name && n.ready && n.retirement.do_not_disrupt.is_some())
}

/// The pool's instances of its current template that are being made and have not come up: no
/// record that they did, and nothing else showing them up (a Ready Node).
fn attempts<'w>(dp: &DesiredPool, world: &'w World) -> Vec<&'w Container> {
    let ready = |c: &Container| world.nodes.iter().any(|n| n.name == c.name && n.ready);
    world
        .containers
        .iter()
        .filter(|c| c.pool == dp.name() && c.template_hash == dp.template_hash && c.elsewhere.is_none())
        .filter(|c| c.came_up.is_none() && !ready(c))
        .collect()
}

/// Why the pool's rollout to its template stalled, if it did: its record says it began to the
/// current template, it is still under way (an instance runs another template, or an instance
/// of this one is being made and has not come up: a new pool, a scale-up, a replacement), and
/// no instance of that template came up within `progressDeadline` of the record or of the last
/// one that did or the last retirement step (see [`crate::model::RolloutRecord::progressed`]);
/// or the record says the pool was rolled back from that template. Every kind of
/// rollout has the deadline; a converged pool has nothing under way, and never stalls.
fn stall(dp: &DesiredPool, world: &World) -> Option<Stall> {
    let hash = &dp.template_hash;
    // The history remembers a rollback from the moment it is decided: before its first instance
    // is made, the rollback retires the failed attempts (first of all with `maxSurge: 0`), and
    // they were the only sign that the rollout stalled.
    // So does the rollback's own revision, should the rollout record be lost.
    let last = world.history.get(dp.name()).and_then(|h| h.last());
    let rolled_back = |r: &&Revision| r.end.is_some_and(|e| e.result == RolloutResult::RolledBack);
    if let Some(last) = last.filter(|r| &r.template_hash == hash).filter(rolled_back) {
        return Some(Stall::RolledBack(format!(
            "Degraded: the rollout to template {hash} (revision {}) was rolled back",
            last.number
        )));
    }
    if let Some(last) = last.filter(|r| r.rolled_back_from.as_ref() == Some(hash)) {
        return Some(Stall::RolledBack(format!(
            "Degraded: the rollout to template {hash} was rolled back to {} (revision {})",
            last.template_hash, last.number
        )));
    }
    let record = world.rollouts.get(dp.name())?;
    if record.rolled_back_from.as_ref() == Some(hash) {
        return Some(Stall::RolledBack(format!(
            "Degraded: the rollout to template {hash} was rolled back to {}",
            record.template_hash
        )));
    }
    if &record.template_hash != hash {
        return None;
    }
    // A canary that served and turned unhealthy fails the rollout at once under
    // `failureAction: rollback`: the rollback retires the canaries and nothing old.
    if let Some(why) = super::canary::failed(dp, world) {
        return Some(Stall::Deadline(why));
    }
    // Another run holds the pool's lock: it is under way (a drain a budget holds, say), and
    // the holder judges its own progress between its batches.
    if world.locked.contains(dp.name()) {
        return None;
    }
    let mine: Vec<&Container> = world.containers.iter().filter(|c| c.pool == dp.name()).collect();
    let current = |c: &&&Container| &c.template_hash == hash && c.elsewhere.is_none();
    // An outdated instance its Node's owner holds (`do-not-disrupt`) is not the rollout's to
    // finish: it waits for the owner, not for the deadline.
    let idle = attempts(dp, world).is_empty();
    if mine.iter().all(|c| current(&c) || undisrupted(c, world)) && idle {
        return None;
    }
    // Progress is any step forward: an instance of the template up, or a retirement step done.
    // Time a budget or a hook holds a drain is not a stall: the step ends, and counts, when
    // the drain does.
    let last_up = mine.iter().filter(current).filter_map(|c| c.came_up).max();
    // Instances of the template came up, and none is being made nor failed to be: the rollout
    // is not failing, only not worked on (its next step waited for a run, or for an owner who
    // held an instance); the outcome of its next attempt judges it.
    if last_up.is_some() && idle {
        return None;
    }
    let progress = [Some(record.since), last_up, record.progressed].into_iter().flatten().max();
    let progress = progress.unwrap_or(record.since);
    let deadline = dp.pool.spec.rollout.progress_deadline;
    let limit = i64::try_from(deadline.get().as_secs()).unwrap_or(i64::MAX);
    if world.now.saturating_sub(progress) <= limit {
        return None;
    }
    let failing = mine
        .iter()
        .filter(current)
        .filter(|c| c.came_up.is_none())
        .max_by_key(|c| c.created)
        .map(|c| format!("; last failure: {}: {}", c.name, failure(c)))
        .unwrap_or_default();
    let since = u64::try_from(progress).unwrap_or(0);
    let since = crate::model::timestamp(std::time::UNIX_EPOCH + std::time::Duration::from_secs(since));
    Some(Stall::Deadline(format!(
        "Degraded: no instance of template {hash} came up within progressDeadline {deadline} (since {since}){failing}; \
         creating none, the old instances keep serving; the next source change or `poolctl apply` tries again"
    )))
}

/// What became of an attempt that never came up.
fn failure(c: &Container) -> String {
    match c.state {
        ContainerState::Running => "never finished coming up".to_owned(),
        _ if c.status.is_empty() => c.state.as_str().to_owned(),
        _ => c.status.clone(),
    }
}

/// The template a rollback of `dp` goes back to: the last one its history says was rolled out
/// completely, other than the spec's; for a pool whose history has none (a pool from before
/// poolctl kept it, or whose history was removed), the most common template among its
/// instances that do not run the spec's, rebuilt from their labels. A template with sensitive
/// values cannot be rebuilt: no record keeps them.
pub fn rollback_target(dp: &DesiredPool, world: &World) -> Result<DesiredPool, String> {
    let history = world.history.get(dp.name()).map_or(&[][..], Vec::as_slice);
    let Some(revision) = crate::model::rollback_target(history, &dp.template_hash) else {
        return previous(dp, world).map_err(|e| {
            if history.is_empty() {
                e
            } else {
                format!("no revision of another template was rolled out completely, and {e}")
            }
        });
    };
    let (hash, number) = (&revision.template_hash, revision.number);
    let json = revision
        .template
        .as_deref()
        .ok_or_else(|| format!("revision {number} (template {hash}) does not record its template"))?;
    rebuild(dp, hash, json).map_err(|e| format!("revision {number}: {e}"))
}

/// The template the pool ran before, rebuilt from its instances' labels: the most common
/// template among the instances that do not run the spec's.
fn previous(dp: &DesiredPool, world: &World) -> Result<DesiredPool, String> {
    let mut outdated: BTreeMap<&str, (usize, Option<&str>)> = BTreeMap::new();
    for c in world.containers.iter().filter(|c| c.pool == dp.name() && c.template_hash != dp.template_hash) {
        let entry = outdated.entry(&c.template_hash).or_default();
        entry.0 += 1;
        entry.1 = entry.1.or(c.template.as_deref());
    }
    let (hash, (_, json)) = outdated
        .into_iter()
        .max_by(|a, b| a.1.0.cmp(&b.1.0).then_with(|| b.0.cmp(a.0)))
        .ok_or("no instance runs an earlier template")?;
    let json = json.ok_or_else(|| format!("the instances of template {hash} do not record it"))?;
    rebuild(dp, hash, json)
}

/// `dp` with the template (and bootstrap and join) of `json`, the canonical template JSON of
/// template `hash` as a record keeps it.
fn rebuild(dp: &DesiredPool, hash: &str, json: &str) -> Result<DesiredPool, String> {
    #[derive(Deserialize)]
    struct Hashed {
        template: Template,
        #[serde(default)]
        bootstrap: Vec<BootstrapStep>,
        #[serde(default)]
        join: Option<Join>,
    }
    let hashed: Hashed = serde_json::from_str(json)
        .map_err(|e| format!("the record of template {hash} does not read: {e}"))?;
    if hashed.template.env.values().any(|v| v.canonical().starts_with("(sensitive")) {
        return Err(format!("template {hash} has sensitive values, which no record keeps"));
    }
    let mut pool = dp.pool.clone();
    (pool.spec.template, pool.spec.bootstrap, pool.spec.join) =
        (hashed.template, hashed.bootstrap, hashed.join);
    Ok(DesiredPool { pool, file: dp.file.clone(), template_hash: hash.to_owned(), copied_from: None })
}
