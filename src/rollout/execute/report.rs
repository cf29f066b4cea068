//! How a run ended: each step's outcome, what was never started and why the run stopped.

use std::io::Write;
use std::time::Duration;

use super::StepError;
use crate::rollout::cancel::StopReason;

/// One step and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepOutcome {
    pub pool: String,
    pub instance: String,
    pub verb: &'static str,
    pub elapsed: Duration,
    pub error: Option<StepError>,
}

impl StepOutcome {
    /// `step drain w-1 of pool w failed: ...`: one line for an Event or a notification.
    pub fn failure_line(&self) -> String {
        let why = self.error.as_ref().map_or_else(String::new, |e| format!(": {e}"));
        format!("step {} {} of pool {} failed{why}", self.verb, self.instance, self.pool)
    }
}

/// What a run did, did not do, and why it stopped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Steps that were attempted, in the order they ended.
    pub attempted: Vec<StepOutcome>,
    /// Steps never started: `(pool, instance, verb)`.
    pub not_started: Vec<(String, String, &'static str)>,
    /// Why the run stopped early without a failure (an interrupt, or a newer spec).
    pub stop_reason: Option<StopReason>,
}

impl Report {
    /// The first failure, if any.
    pub fn failure(&self) -> Option<&StepOutcome> {
        self.attempted.iter().find(|o| o.error.is_some())
    }

    /// Whether every step ran and succeeded.
    pub fn complete(&self) -> bool {
        self.failure().is_none() && self.not_started.is_empty()
    }

    /// Whether the user stopped the run (Ctrl-C, SIGTERM) before it was done.
    pub fn interrupted(&self) -> bool {
        self.stop_reason == Some(StopReason::Signal)
    }

    /// Write the closing summary: what was done, what failed and why, what was left.
    pub fn write_summary(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let done = steps(self.attempted.iter().filter(|o| o.error.is_none()).count());
        if self.complete() {
            return writeln!(out, "Apply complete: {done} done.");
        }
        writeln!(out)?;
        if self.stop_reason == Some(StopReason::Superseded) {
            return writeln!(
                out,
                "Apply superseded by a newer desired state: {done} done, {} not started; re-planning.",
                self.not_started.len()
            );
        }
        if self.interrupted() {
            writeln!(out, "Apply interrupted: {done} done, {} not started.", self.not_started.len())?;
        } else if self.stop_reason == Some(StopReason::LockLost) {
            let left = self.not_started.len();
            writeln!(out, "Apply stopped, the lock was lost: {done} done, {left} not started.")?;
        } else {
            writeln!(out, "Apply halted: {done} done, {} not started.", self.not_started.len())?;
        }
        // Pools run side by side and a failure stops only its own: say how each ended.
        let pools: std::collections::BTreeSet<&str> = self
            .attempted
            .iter()
            .map(|o| o.pool.as_str())
            .chain(self.not_started.iter().map(|(p, ..)| p.as_str()))
            .collect();
        if pools.len() > 1 {
            for pool in pools {
                let state = if self.attempted.iter().any(|o| o.pool == pool && o.error.is_some()) {
                    "failed"
                } else if self.not_started.iter().any(|(p, ..)| p == pool) {
                    "not finished"
                } else {
                    "done"
                };
                writeln!(out, "  pool {pool}: {state}")?;
            }
        }
        // What was done, by instance, in order: the progress lines above have the details.
        let mut done_by_instance: Vec<(&str, Vec<&str>)> = Vec::new();
        for o in self.attempted.iter().filter(|o| o.error.is_none()) {
            match done_by_instance.iter_mut().find(|(name, _)| *name == o.instance) {
                Some((_, verbs)) => verbs.push(o.verb),
                None => done_by_instance.push((&o.instance, vec![o.verb])),
            }
        }
        for (instance, verbs) in done_by_instance {
            writeln!(out, "  done: {instance} ({})", verbs.join(", "))?;
        }
        for o in self.attempted.iter().filter(|o| o.error.is_some()) {
            let e = o.error.as_ref().expect("filtered on errors");
            writeln!(out, "  failed: {} {} ({}): {e}", o.verb, o.instance, o.pool)?;
        }
        for (pool, instance, verb) in &self.not_started {
            writeln!(out, "  not started: {verb} {instance} ({pool})")?;
        }
        writeln!(
            out,
            "Instances not yet retired keep running. Run apply again to continue; the next plan \
             replaces any instance that failed."
        )
    }
}

/// `1 step`, `3 steps`.
pub(crate) fn steps(n: usize) -> String {
    if n == 1 { "1 step".to_owned() } else { format!("{n} steps") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_step_is_one_step() {
        let done = |n| {
            let verb = "stop";
            let attempted = (0..n)
                .map(|i| StepOutcome {
                    pool: "w".into(),
                    instance: format!("w-{i}"),
                    verb,
                    error: None,
                    elapsed: Duration::ZERO,
                })
                .collect();
            let mut out = Vec::new();
            Report { attempted, ..Report::default() }.write_summary(&mut out).unwrap();
            String::from_utf8(out).unwrap()
        };
        assert_eq!(done(1), "Apply complete: 1 step done.\n");
        assert_eq!(done(2), "Apply complete: 2 steps done.\n");
    }
}
