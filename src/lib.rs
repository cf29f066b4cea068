//! poolctl: reconcile pools of Docker containers that serve as Kubernetes nodes, retiring each
//! instance in the safe order (cordon, drain, stop, delete the Node, remove the container).
//!
//! The pipeline, each stage in one place, dependencies pointing one way, with no cycle between
//! these modules (spec <- model <- {source, backend, plan} <- rollout <- report <- watch <- commands;
//! cli <- config <- commands):
//! - [`spec`]: the pool file: types, parsing with locations, validation, the template hash.
//! - [`model`]: the plain data every stage shares: desired state, the observed world, labels.
//! - [`source`]: reading desired state from a file, a directory or a Git commit.
//! - [`backend`]: the traits observe and the executor drive, Docker and Kubernetes behind them,
//!   the one value that holds a run's connections, and the lock guard a backend asks before
//!   every irreversible call.
//! - [`plan`]: the pure planner, `plan(desired, world) -> Plan`, and its rendering.
//! - [`rollout`]: one rollout: lock, plan under the locks, run batch after batch, release; with
//!   what it needs of its own: observing the world, the locks, cancellation, the executor, and
//!   the events it says everything with.
//! - [`report`]: the sinks of those events: progress lines, JSON, metrics; the webhook
//!   notifications and the HTTP endpoints of `watch`; stdout.
//! - [`watch`]: continuous reconciliation: a state machine that owns every timer, the loop
//!   that feeds it, and one reconcile at a time over the rollout.
//! - [`cli`]: the clap types; [`config`]: the command line made one checked value.
//! - [`commands`]: plan, apply, status, validate, watch, unlock, over the stages above.
//! - [`status`]: what `poolctl status` shows, built from a world and its plan.
//! - [`style`]: colour on a terminal (`--color`, `NO_COLOR`).

pub mod backend;
pub mod cli;
pub mod commands;
pub mod config;
pub mod home;
pub mod metrics;
pub mod model;
pub mod plan;
pub mod report;
pub mod rollout;
pub mod source;
pub mod spec;
pub mod status;
pub mod style;
pub mod watch;

#[cfg(test)]
mod testing;

/// The value behind `mutex`, also once a panic elsewhere poisoned it: every value poolctl keeps
/// behind a mutex is whole between statements (no update is left halfway), so a panic in one
/// task must not take the others down with it.
pub(crate) fn locked<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
