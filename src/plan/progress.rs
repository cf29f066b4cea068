//! A rollout's progress, as a Deployment's `progressDeadlineSeconds` reads it, from the world
//! alone: the pool's rollout record (when its rollout to a template began) and its instances'
//! up records. A stalled rollout creates nothing more (`failureAction: pause`), or goes back to
//! the template the pool ran before (`failureAction: rollback`), rebuilt from its instances'
//! labels.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use super::PlanOptions;
use crate::model::{Container, ContainerState, Desired, DesiredPool, World};
use crate::spec::{BootstrapStep, FailureAction, Join, Template};

/// What the rollout records make of the declared pools.
#[derive(Debug, Default)]
pub(super) struct Progress {
    /// The pools whose rollout stalled (or was rolled back), and why, as the plan says it.
    pub stalled: BTreeMap<String, String>,
    /// The pools that go back to their previous template, as that template.
    pub rollbacks: Vec<DesiredPool>,
    /// The pools whose first creation begins a rollout (a new template, a rollback, or a
    /// stalled rollout `apply` tries again): it writes the record.
    pub starts: BTreeSet<String>,
}

impl Progress {
    /// Judge every declared pool of `desired` in `world`.
    pub(super) fn of(desired: &Desired, world: &World, options: &PlanOptions) -> Self {
        let mut progress = Self::default();
        for dp in &desired.pools {
            let record = world.rollouts.get(dp.name());
            let stalled = stall(dp, world);
            let target_hash = match stalled {
                Some(_) if options.retry_stalled => {
                    progress.starts.insert(dp.name().to_owned());
                    continue;
                }
                None => {
                    // A new template, or the first attempt since the pool last converged (a new
                    // pool, a scale-up, a replacement of a dead instance): the clock starts.
                    if record.is_none_or(|r| r.template_hash != dp.template_hash)
                        || attempts(dp, world).is_empty()
                    {
                        progress.starts.insert(dp.name().to_owned());
                    }
                    continue;
                }
                Some(why) if dp.pool.spec.rollout.failure_action == FailureAction::Rollback => {
                    match previous(dp, world) {
                        Ok(previous) => {
                            let hash = previous.template_hash.clone();
                            let why =
                                format!("{why}; rolling back to template {hash} (failureAction: rollback)");
                            progress.stalled.insert(dp.name().to_owned(), why);
                            progress.rollbacks.push(previous);
                            hash
                        }
                        Err(cannot) => {
                            let why = format!("{why}; cannot roll back: {cannot}");
                            progress.stalled.insert(dp.name().to_owned(), why);
                            continue;
                        }
                    }
                }
                Some(why) => {
                    progress.stalled.insert(dp.name().to_owned(), why);
                    continue;
                }
            };
            if record.is_none_or(|r| r.template_hash != target_hash) {
                progress.starts.insert(dp.name().to_owned());
            }
        }
        progress
    }

    /// Whether the pool creates nothing: stalled, and not rolled back.
    pub(super) fn paused(&self, pool: &str) -> bool {
        self.stalled.contains_key(pool) && !self.rollbacks.iter().any(|r| r.name() == pool)
    }
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
fn stall(dp: &DesiredPool, world: &World) -> Option<String> {
    let record = world.rollouts.get(dp.name())?;
    let hash = &dp.template_hash;
    if record.rolled_back_from.as_ref() == Some(hash) {
        return Some(format!(
            "Degraded: the rollout to template {hash} stalled and was rolled back to {}",
            record.template_hash
        ));
    }
    if &record.template_hash != hash {
        return None;
    }
    // Another run holds the pool's lock: it is under way (a drain a budget holds, say), and
    // the holder judges its own progress between its batches.
    if world.locked.contains(dp.name()) {
        return None;
    }
    let mine: Vec<&Container> = world.containers.iter().filter(|c| c.pool == dp.name()).collect();
    let current = |c: &&&Container| &c.template_hash == hash && c.elsewhere.is_none();
    if mine.iter().all(|c| current(&c)) && attempts(dp, world).is_empty() {
        return None;
    }
    // Progress is any step forward: an instance of the template up, or a retirement step done.
    // Time a budget or a hook holds a drain is not a stall: the step ends, and counts, when
    // the drain does.
    let last_up = mine.iter().filter(current).filter_map(|c| c.came_up).max();
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
    Some(format!(
        "Degraded: no instance of template {hash} came up within progressDeadline {deadline} (since {since}){failing}; \
         creating none, the old instances keep serving; the next source change or `poolctl apply` tries again"
    ))
}

/// What became of an attempt that never came up.
fn failure(c: &Container) -> String {
    match c.state {
        ContainerState::Running => "never finished coming up".to_owned(),
        _ if c.status.is_empty() => c.state.as_str().to_owned(),
        _ => c.status.clone(),
    }
}

/// The template the pool ran before, rebuilt from its instances' labels: the most common
/// template among the instances that do not run the spec's. A template with sensitive values
/// cannot be: no label keeps them.
fn previous(dp: &DesiredPool, world: &World) -> Result<DesiredPool, String> {
    #[derive(Deserialize)]
    struct Hashed {
        template: Template,
        #[serde(default)]
        bootstrap: Vec<BootstrapStep>,
        #[serde(default)]
        join: Option<Join>,
    }
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
    let hashed: Hashed = serde_json::from_str(json)
        .map_err(|e| format!("the record of template {hash} does not read: {e}"))?;
    if hashed.template.env.values().any(|v| v.canonical().starts_with("(sensitive")) {
        return Err(format!("template {hash} has sensitive values, which no label keeps"));
    }
    let mut pool = dp.pool.clone();
    (pool.spec.template, pool.spec.bootstrap, pool.spec.join) =
        (hashed.template, hashed.bootstrap, hashed.join);
    Ok(DesiredPool { pool, file: dp.file.clone(), template_hash: hash.to_owned(), copied_from: None })
}
