//! Where what a run says goes: the sinks a command chooses for a rollout's
//! [`Event`](crate::rollout::event::Event)s. Nothing else writes a rollout's output.

mod metrics;
mod progress;
mod summary;

pub use metrics::Metrics;
pub use progress::{Progress, ProgressFormat, ProgressUi};
pub use summary::{end_event, write_summary};
