//! Progress that follows the plan: each step numbered as the plan text numbers it, across
//! batches, also when the rollout re-plans between them (then saying why the count changed), and
//! long steps saying what they wait for, as [`Event`]s for the rollout's sink.

use std::collections::HashMap;
use std::future::Future;
use std::time::{Duration, Instant};

use super::{Executor, StepError, locked};
use crate::backend::waiting;
use crate::plan::{Action, Plan, PoolPlan, Step};
use crate::rollout::event::{About, Event, StepEnd, StepId};

/// How often a step under way says what it waits for.
const TICK: Duration = Duration::from_secs(1);

/// A step's identity across plans: pool, instance, action.
type Key = (String, String, &'static str);

fn key(pool: &str, step: &Step) -> Key {
    (pool.to_owned(), step.instance.to_string(), step.action.verb())
}

/// Which number each step of the rollout carries, and of how many.
#[derive(Debug, Default)]
pub(super) struct Numbering {
    numbers: HashMap<Key, usize>,
    total: usize,
    /// More than one pool has steps: they run side by side, so each line names its pool.
    several_pools: bool,
}

impl Numbering {
    /// The plan text's numbers: pool by pool, in order, after `done` steps already carried out.
    fn of(plan: &Plan, done: usize) -> Self {
        let numbers: HashMap<Key, usize> =
            plan.steps().enumerate().map(|(i, (pool, step))| (key(&pool.name, step), done + i + 1)).collect();
        let several_pools = plan.pools.iter().filter(|p| !p.steps.is_empty()).count() > 1;
        Self { total: done + numbers.len(), numbers, several_pools }
    }
}

impl<C, K> Executor<'_, C, K> {
    /// Number the steps of the plan about to be carried out, as its text numbers them.
    pub fn number_plan(&self, plan: &Plan) {
        *locked(&self.numbering) = Numbering::of(plan, 0);
    }

    /// After a look at the world: number the steps left of the new plan `rest` (`done` steps
    /// carried out), keeping the numbers the plan showed when what is left is what was planned,
    /// and saying why the count changed when it is not.
    pub fn renumber(&self, was: &Plan, rest: &Plan, done: usize) {
        let skeleton = |p: &Plan| p.steps().map(|(pool, s)| key(&pool.name, s)).collect::<Vec<_>>();
        let (before, after) = (skeleton(was), skeleton(rest));
        if before == after {
            self.sink.event(&Event::AsPlanned { left: after.len() });
            return;
        }
        let old_total = locked(&self.numbering).total;
        *locked(&self.numbering) = Numbering::of(rest, done);
        let new_total = done + after.len();
        let added: Vec<String> = after.iter().filter(|k| !before.contains(k)).map(describe).collect();
        let dropped: Vec<String> = before.iter().filter(|k| !after.contains(k)).map(describe).collect();
        let mut why = Vec::new();
        if !added.is_empty() {
            why.push(format!("now also {}", shorten(&added)));
        }
        if !dropped.is_empty() {
            why.push(format!("no longer {}", shorten(&dropped)));
        }
        if why.is_empty() {
            why.push("the same steps in another order".to_owned());
        }
        let why = why.join("; ");
        let (left, first) = (after.len(), done + 1);
        self.sink.event(&Event::Replanned { total: new_total, was: old_total, left, first, why: &why });
    }

    /// The number of a step and of how many, as the plan shows them; `n` and `total` (numbered
    /// within the batch) for a step the numbering does not know.
    pub(super) fn number_of(&self, pool: &str, step: &Step, n: usize, total: usize) -> (usize, usize) {
        let numbering = locked(&self.numbering);
        numbering.numbers.get(&key(pool, step)).map_or((n, total), |&number| (number, numbering.total))
    }

    /// Say that a batch creates several instances side by side: their steps run interleaved.
    pub fn announce_batch(&self, batch: &Plan) {
        for pool in &batch.pools {
            let new: Vec<&str> = pool
                .steps
                .iter()
                .filter(|s| matches!(s.action, Action::Create { .. }))
                .map(|s| s.instance.as_str())
                .collect();
            if new.len() > 1 {
                self.sink.say(&format!(
                    "-- creating {} instances of pool {} side by side: {}",
                    new.len(),
                    pool.name,
                    new.join(", ")
                ));
            }
        }
    }

    /// Run `work`, the step numbered `n` of `total`, saying what it waits for while it runs.
    pub(super) async fn step_with_progress<T>(
        &self,
        pool: &PoolPlan,
        step: &Step,
        (n, total): (usize, usize),
        work: impl Future<Output = Result<T, StepError>>,
    ) -> (Result<T, StepError>, Duration) {
        let instance = step.instance.to_string();
        let id = StepId {
            n,
            total,
            pool: &pool.name,
            instance: &instance,
            verb: step.action.verb(),
            several_pools: locked(&self.numbering).several_pools,
        };
        let started = Instant::now();
        self.sink.event(&Event::Started(id));
        let mut work = std::pin::pin!(work);
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + TICK, TICK);
        let result = loop {
            tokio::select! {
                result = &mut work => break result,
                _ = ticks.tick() => {
                    let waits = waiting::of(&step.instance).unwrap_or_else(|| generic_wait(&step.action));
                    self.sink.event(&Event::Waiting { step: id, elapsed: started.elapsed(), waits: &waits });
                }
            }
        };
        waiting::clear(&step.instance);
        for (result, count) in waiting::take_evictions(&step.instance) {
            self.sink.event(&Event::Evictions { step: id, result, count });
        }
        let elapsed = started.elapsed();
        let end = match &result {
            Ok(_) => StepEnd::Done,
            Err(e @ StepError::HooksInterrupted { .. }) => StepEnd::Stopped(e),
            Err(e) => StepEnd::Failed(e),
        };
        self.sink.event(&Event::Ended { step: id, elapsed, end });
        (result, elapsed)
    }

    /// Tell the cluster's users of Node `node` of `pool`: a Kubernetes Event, where a sink sends
    /// them.
    pub(super) fn tell_node(&self, pool: &str, node: &str, reason: &'static str, text: &str, warning: bool) {
        self.sink.event(&Event::Kube { about: About::Node { pool, node }, reason, note: text, warning });
    }
}

/// What a step waits for when its backend noted nothing more precise.
fn generic_wait(action: &Action) -> String {
    match action {
        Action::Create { .. } => "the container to be created and started".to_owned(),
        Action::Bootstrap { .. } => "the bootstrap commands to finish".to_owned(),
        Action::AwaitReady { node: true } => "the container to run and its Node to turn Ready".to_owned(),
        Action::AwaitReady { node: false } => "the container to run (and be healthy)".to_owned(),
        Action::Drain(_) => "the Node's pods to be evicted".to_owned(),
        Action::Stop => "the container to stop".to_owned(),
        _ => "the API to answer".to_owned(),
    }
}

fn describe((pool, instance, verb): &Key) -> String {
    format!("{verb} {instance} ({pool})")
}

/// The first few of `items`, and how many more.
fn shorten(items: &[String]) -> String {
    const SHOWN: usize = 3;
    match items.len() {
        n if n <= SHOWN => items.join(", "),
        n => format!("{}, and {} more", items[..SHOWN].join(", "), n - SHOWN),
    }
}

/// Every line of `text` after `prefix`.
pub(crate) fn indent(text: &str, prefix: &str) -> String {
    text.lines().map(|l| format!("{prefix}{l}")).collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::model::World;
    use crate::plan::PlanOptions;
    use crate::report::{Progress, ProgressUi};
    use crate::rollout::execute::Interrupt;
    use crate::testing::SharedBuf;
    use crate::testing::build::{PoolArgs, container, desired, world_of};
    use crate::testing::fake::{FakeCluster, FakeWorld};

    /// Runs `f` with an executor whose progress lands in the returned text.
    fn said(f: impl FnOnce(&Executor<'_, FakeWorld, FakeCluster>)) -> String {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let out = Progress::new(Box::new(SharedBuf(buf.clone())), ProgressUi::default());
        let (fake, clusters, interrupt) = (FakeWorld::default(), BTreeMap::new(), Interrupt::default());
        let d = desired(Vec::new());
        f(&Executor::new(&d, &fake, &clusters, &out, &interrupt));
        String::from_utf8(buf.lock().unwrap().clone()).unwrap()
    }

    /// Two pools rolling over in two batches each.
    fn two_pools(world: &World) -> Plan {
        let d = desired(vec![PoolArgs::new("a", 2).build(), PoolArgs::new("b", 2).build()]);
        crate::plan::plan(&d, world, PlanOptions::default())
    }

    fn old() -> World {
        let mut w = world_of(vec![container("a-1", "a", "old", 1), container("a-2", "a", "old", 2)]);
        w.containers.extend([container("b-1", "b", "old", 1), container("b-2", "b", "old", 2)]);
        w
    }

    #[test]
    fn steps_keep_the_plan_texts_numbers_in_every_batch_and_pool() {
        let plan = two_pools(&old());
        let (first, rest) = plan.split_first_batch();
        said(|e| {
            e.number_plan(&plan);
            // Pool b's first step is step 9 of the text, though it runs fifth.
            let b = &first.pools[1];
            assert_eq!(e.number_of("b", &b.steps[0], 5, 8), (9, 16));
            let a = &rest.pools[0];
            assert_eq!(e.number_of("a", &a.steps[0], 1, 8), (5, 16));
        });
    }

    #[test]
    fn a_plan_that_changed_between_batches_says_why_and_numbers_what_is_left_after_what_was_done() {
        let plan = two_pools(&old());
        let (_, rest) = plan.split_first_batch();
        // Pool b's other old instance died meanwhile: its retirement needs no stop now.
        let mut changed = rest.clone();
        changed.pools[1].steps.retain(|s| !(s.instance == "b-2" && s.action == Action::Stop));
        let text = said(|e| {
            e.number_plan(&plan);
            e.renumber(&rest, &changed, 8);
            assert_eq!(e.number_of("b", &changed.pools[1].steps[0], 1, 1), (13, 15), "after pool a's 4");
        });
        assert_eq!(
            text.trim(),
            "-- looked at the world again, and the plan changed: 15 steps in all (was 16): no longer stop b-2 \
             (b); the 7 left are numbered 9-15"
        );
        let same = said(|e| e.renumber(&rest, &rest, 8));
        assert_eq!(same.trim(), "-- looked at the world again: 8 steps to go, as planned");
    }
}
