//! Progress that follows the plan: each step numbered as the plan text numbers it, across
//! batches, also when the rollout re-plans between them (then saying why the count changed);
//! long steps saying what they wait for; as plain lines, a live line on a terminal, or one JSON
//! object per event (`apply -o json`).

use std::collections::HashMap;
use std::future::Future;
use std::io::Write;
use std::time::{Duration, Instant};

use serde_json::json;

use super::{Executor, StepError};
use crate::backend::waiting;
use crate::plan::{Action, Plan, PoolPlan, Step};
use crate::style::Style;

/// How progress is shown.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ProgressFormat {
    /// Lines of text: `[5/12] drain workers-... done (3.2s)`.
    #[default]
    Text,
    /// One JSON object per line and event (`start`, `waiting`, `done`, `failed`, `message`,
    /// `replanned`), for scripts and CI.
    Json,
}

/// How the user wants progress.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProgressUi {
    pub format: ProgressFormat,
    /// Stdout is a terminal: a live line shows the steps under way, redrawn every second.
    pub live: bool,
    pub style: Style,
    /// `-v`: a successful bootstrap's output too, indented under its step.
    pub verbose: bool,
}

/// How often a long step says what it waits for: every second on a live line; in plain lines
/// every 5 s, when what it waits for changed or half a minute passed.
const LIVE_TICK: Duration = Duration::from_secs(1);
const PLAIN_TICK: Duration = Duration::from_secs(5);
const PLAIN_REPEAT: Duration = Duration::from_secs(30);

/// A step under way, as the live line shows it.
#[derive(Debug)]
struct Running {
    label: String,
    instance: String,
    waits: String,
    started: Instant,
}

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
    /// The steps under way, by number: what the live line shows (label, instance, what it
    /// waits for unless its backend says better, since when).
    running: std::collections::BTreeMap<usize, Running>,
}

impl Numbering {
    /// The plan text's numbers: pool by pool, in order, after `done` steps already carried out.
    fn of(plan: &Plan, done: usize) -> Self {
        let numbers: HashMap<Key, usize> =
            plan.steps().enumerate().map(|(i, (pool, step))| (key(&pool.name, step), done + i + 1)).collect();
        let several_pools = plan.pools.iter().filter(|p| !p.steps.is_empty()).count() > 1;
        Self {
            total: done + numbers.len(),
            numbers,
            several_pools,
            running: std::collections::BTreeMap::new(),
        }
    }
}

impl<C, K> Executor<'_, C, K> {
    /// Number the steps of the plan about to be carried out, as its text numbers them.
    pub fn number_plan(&self, plan: &Plan) {
        *self.numbering() = Numbering::of(plan, 0);
    }

    /// After a look at the world: number the steps left of the new plan `rest` (`done` steps
    /// carried out), keeping the numbers the plan showed when what is left is what was planned,
    /// and saying why the count changed when it is not.
    pub fn renumber(&self, was: &Plan, rest: &Plan, done: usize) {
        let skeleton = |p: &Plan| p.steps().map(|(pool, s)| key(&pool.name, s)).collect::<Vec<_>>();
        let (before, after) = (skeleton(was), skeleton(rest));
        if before == after {
            self.say(&format!("-- looked at the world again: {} steps to go, as planned", after.len()));
            return;
        }
        let old_total = self.numbering().total;
        *self.numbering() = Numbering::of(rest, done);
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
        if self.ui.format == ProgressFormat::Json {
            self.emit(&json!({"event": "replanned", "total": new_total, "was": old_total, "why": why}));
            return;
        }
        self.say(&format!(
            "-- looked at the world again, and the plan changed: {new_total} steps in all (was {old_total}): \
             {why}; the {} left are numbered {}-{new_total}",
            after.len(),
            done + 1
        ));
    }

    fn numbering(&self) -> std::sync::MutexGuard<'_, Numbering> {
        self.numbering.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The number of a step and of how many, as the plan shows them; `n` and `total` (numbered
    /// within the batch) for a step the numbering does not know.
    pub(super) fn number_of(&self, pool: &str, step: &Step, n: usize, total: usize) -> (usize, usize) {
        let numbering = self.numbering();
        match numbering.numbers.get(&key(pool, step)) {
            Some(&number) => (number, numbering.total),
            None => (n, total),
        }
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
                self.say(&format!(
                    "-- creating {} instances of pool {} side by side: {}",
                    new.len(),
                    pool.name,
                    new.join(", ")
                ));
            }
        }
    }

    /// Run `work`, the step `[n/total] verb instance`, saying what it waits for while it runs.
    pub(super) async fn step_with_progress<T>(
        &self,
        pool: &PoolPlan,
        step: &Step,
        (n, total): (usize, usize),
        work: impl Future<Output = Result<T, StepError>>,
    ) -> (Result<T, StepError>, Duration) {
        let verb = step.action.verb();
        let label = if self.numbering().several_pools {
            format!("[{n}/{total}] {}: {verb} {}", pool.name, step.instance)
        } else {
            format!("[{n}/{total}] {verb} {}", step.instance)
        };
        let started = Instant::now();
        match self.ui.format {
            ProgressFormat::Json => self.emit(&json!({"event": "start", "step": n, "total": total,
                "pool": pool.name, "instance": step.instance, "action": verb})),
            ProgressFormat::Text if self.ui.live => {
                let waits = generic_wait(&step.action);
                let running =
                    Running { label: label.clone(), instance: step.instance.to_string(), waits, started };
                self.numbering().running.insert(n, running);
                self.redraw_live();
            }
            ProgressFormat::Text => self.say(&format!("{label} ...")),
        }
        let mut work = std::pin::pin!(work);
        let tick = if self.ui.live { LIVE_TICK } else { PLAIN_TICK };
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + tick, tick);
        let (mut last_said, mut said_at) = (None::<String>, started);
        let result = loop {
            tokio::select! {
                result = &mut work => break result,
                _ = ticks.tick() => {
                    if self.ui.live {
                        self.redraw_live();
                        continue;
                    }
                    let waits = waiting::of(&step.instance).unwrap_or_else(|| generic_wait(&step.action));
                    if last_said.as_deref() != Some(waits.as_str()) || said_at.elapsed() >= PLAIN_REPEAT {
                        let secs = started.elapsed().as_secs();
                        match self.ui.format {
                            ProgressFormat::Json => self.emit(&json!({"event": "waiting", "step": n, "total": total,
                                "pool": pool.name, "instance": step.instance, "action": verb,
                                "seconds": secs, "for": waits})),
                            ProgressFormat::Text => self.say(&format!("{label}: {secs}s, waiting for {waits}")),
                        }
                        (last_said, said_at) = (Some(waits), Instant::now());
                    }
                }
            }
        };
        waiting::clear(&step.instance);
        let elapsed = started.elapsed();
        if self.ui.live {
            self.numbering().running.remove(&n);
        }
        let secs = elapsed.as_secs_f64();
        match (&result, self.ui.format) {
            (Ok(_), ProgressFormat::Json) => self.emit(&json!({"event": "done", "step": n, "total": total,
                "pool": pool.name, "instance": step.instance, "action": verb, "seconds": secs})),
            // Stopped at the rollout's request while it waited: no failure; the next run goes on.
            (Err(e @ StepError::HooksInterrupted { .. }), ProgressFormat::Json) => {
                self.emit(&json!({"event": "stopped", "step": n, "total": total,
                "pool": pool.name, "instance": step.instance, "action": verb, "seconds": secs,
                "reason": e.to_string()}));
            }
            (Err(e @ StepError::HooksInterrupted { .. }), ProgressFormat::Text) => {
                self.say(&format!("{label} stopped ({secs:.1}s): {e}; the next run goes on from here"));
            }
            (Err(e), ProgressFormat::Json) => {
                self.emit(&json!({"event": "failed", "step": n, "total": total,
                "pool": pool.name, "instance": step.instance, "action": verb, "seconds": secs,
                "error": e.to_string()}));
            }
            (Ok(_), ProgressFormat::Text) => {
                self.say(&format!("{label} {} ({secs:.1}s)", self.ui.style.green("done")));
            }
            (Err(e), ProgressFormat::Text) => {
                self.say(&format!("{label} {} ({secs:.1}s): {e}", self.ui.style.red("FAILED")));
            }
        }
        (result, elapsed)
    }

    /// A bootstrap command's output, indented under its step: with `-v`, or when it failed
    /// (then the error shows it).
    pub(super) fn bootstrap_output(&self, instance: &str, argv: &[String], output: &str) {
        if !self.ui.verbose || output.trim().is_empty() || self.ui.format == ProgressFormat::Json {
            return;
        }
        self.say(&format!("      {instance}: {argv:?}:\n{}", indent(output.trim_end(), "        ")));
    }

    /// Write one line of progress, under the live line if there is one.
    pub(super) fn say(&self, line: &str) {
        tracing::debug!("{line}");
        if self.ui.format == ProgressFormat::Json {
            self.emit(&json!({"event": "message", "message": line}));
            return;
        }
        let mut out = self.progress.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Progress is best effort: a closed stdout must not fail the rollout halfway.
        if self.ui.live {
            let _ = write!(out, "\r\x1b[K");
        }
        let _ = writeln!(out, "{line}");
        if self.ui.live {
            let _ = write!(out, "{}", self.live_line());
        }
        let _ = out.flush();
    }

    /// The steps under way, with how long they have run and what they wait for.
    fn live_line(&self) -> String {
        let numbering = self.numbering();
        let parts: Vec<String> = numbering
            .running
            .values()
            .map(|r| {
                let waits = waiting::of(&r.instance).unwrap_or_else(|| r.waits.clone());
                format!("{} {}s, waiting for {waits}", r.label, r.started.elapsed().as_secs())
            })
            .collect();
        let width = terminal_size::terminal_size().map(|(w, _)| usize::from(w.0));
        self.ui.style.dim(&fit(parts.join(" | "), width))
    }

    fn redraw_live(&self) {
        let line = self.live_line();
        let mut out = self.progress.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let _ = write!(out, "\r\x1b[K{line}");
        let _ = out.flush();
    }

    fn emit(&self, event: &serde_json::Value) {
        let mut out = self.progress.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let _ = writeln!(out, "{event}");
        let _ = out.flush();
    }
}

/// `line` cut to fit one row of a terminal `width` columns wide, marked `…` where it was cut:
/// a longer line wraps, and the `\r` that redraws it reaches back to its last row only, leaving
/// stale rows above. Unknown width: as it is.
fn fit(line: String, width: Option<usize>) -> String {
    let Some(room) = width.and_then(|w| w.checked_sub(1)).filter(|r| *r > 1) else { return line };
    if line.chars().count() <= room {
        return line;
    }
    let mut cut: String = line.chars().take(room - 1).collect();
    cut.push('…');
    cut
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
pub(super) fn indent(text: &str, prefix: &str) -> String {
    text.lines().map(|l| format!("{prefix}{l}")).collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::execute::Interrupt;
    use crate::model::World;
    use crate::plan::PlanOptions;
    use crate::testing::SharedBuf;
    use crate::testing::build::{PoolArgs, container, desired, world_of};
    use crate::testing::fake::{FakeCluster, FakeWorld};

    /// Runs `f` with an executor whose progress lands in the returned text.
    fn said(f: impl FnOnce(&Executor<'_, FakeWorld, FakeCluster>)) -> String {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let out: Mutex<Box<dyn Write + Send>> = Mutex::new(Box::new(SharedBuf(buf.clone())));
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

    #[test]
    fn the_live_line_fits_one_row_of_the_terminal() {
        let line = "[3/12] drain workers-1a2b3c4d5e-k2x9p 12s, waiting for 1 pod left to evict".to_owned();
        assert_eq!(fit(line.clone(), None), line, "no terminal width: as it is");
        assert_eq!(fit(line.clone(), Some(200)), line);
        let cut = fit(line, Some(30));
        assert_eq!(cut.chars().count(), 29, "{cut}");
        assert!(cut.starts_with("[3/12] drain workers") && cut.ends_with('…'), "{cut}");
        assert_eq!(fit("abc".to_owned(), Some(1)), "abc", "no room to cut in");
    }
}
