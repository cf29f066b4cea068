//! How a run ended: each step's outcome, what was never started and why the run stopped.

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
}
