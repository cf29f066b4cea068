//! poolctl: reconcile pools of Docker containers that serve as Kubernetes nodes, retiring each
//! instance in the safe order (cordon, drain, stop, delete the Node, remove the container).
//!
//! The pipeline, each stage in one place, dependencies pointing one way
//! (spec <- model <- {source, backend, plan} <- observe, {cancel <- lock, execute} <- rollout
//! <- commands; cli <- config <- commands):
//! - [`spec`]: the pool file: types, parsing with locations, validation, the template hash.
//! - [`model`]: the plain data every stage shares: desired state, the observed world, labels.
//! - [`source`]: reading desired state from a file, a directory or a Git commit.
//! - [`backend`]: the traits observe and the executor drive, Docker and Kubernetes behind them,
//!   and the one value that holds a run's connections.
//! - [`plan`]: the pure planner, `plan(desired, world) -> Plan`, and its rendering.
//! - [`observe`]: from a desired state to the world, over the backend traits.
//! - [`cancel`]: the flag that stops a rollout at its next step boundary.
//! - [`lock`]: one actor per pool: a guard that takes, renews and gives up the locks.
//! - [`execute`]: carries one batch of a plan out, step by step.
//! - [`rollout`]: one rollout: lock, plan under the locks, run batch after batch, release.
//! - [`cli`]: the clap types; [`config`]: the command line made one checked value.
//! - [`commands`]: plan, apply, status, validate, watch, unlock, over the stages above.
//! - [`status`]: what `poolctl status` shows, built from a world and its plan.
//! - [`style`]: colour on a terminal (`--color`, `NO_COLOR`).

pub mod backend;
pub mod cancel;
pub mod cli;
pub mod commands;
pub mod config;
pub mod execute;
pub mod home;
pub mod lock;
pub mod metrics;
pub mod model;
pub mod observe;
pub mod plan;
pub mod report;
pub mod rollout;
pub mod source;
pub mod spec;
pub mod status;
pub mod style;

#[cfg(test)]
mod testing;
