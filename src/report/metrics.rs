//! The metrics sink: what a rollout says, counted in the Prometheus metrics `watch --listen`
//! serves (see [`crate::metrics`]).

use crate::rollout::event::{Event, Sink};

/// Records each step's duration, its drain's evictions, and each lock held or given up.
pub struct Metrics;

impl Sink for Metrics {
    fn event(&self, event: &Event<'_>) {
        match *event {
            Event::Ended { step, elapsed, .. } => crate::metrics::record(|m| m.step_took(step.verb, elapsed)),
            Event::Lock { pool, held } => crate::metrics::record(|m| m.lock_held(pool, held)),
            Event::Evictions { result, count, .. } => crate::metrics::record(|m| m.evictions(result, count)),
            Event::RetirementWaits { pool, reason, waiting, .. } => {
                crate::metrics::record(|m| m.retirement_waits(pool, reason, waiting));
            }
            _ => {}
        }
    }
}
