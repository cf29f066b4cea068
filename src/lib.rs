//! poolctl: reconcile pools of Docker containers that serve as Kubernetes nodes, retiring each
//! instance in the safe order (cordon, drain, stop, delete the Node, remove the container).
//!
//! The pipeline, each stage in one place, dependencies pointing one way
//! (spec <- model <- {source, backend, plan} <- observe <- execute <- lock <- commands):
//! - [`spec`]: the pool file: types, parsing with locations, validation, the template hash.
//! - [`model`]: the plain data every stage shares: desired state, the observed world, labels.
//! - [`source`]: reading desired state from a file, a directory or a Git commit.
//! - [`backend`]: the traits observe and the executor drive, Docker and Kubernetes behind them.
//! - [`plan`]: the pure planner, `plan(desired, world) -> Plan`, and its rendering.
//! - [`observe`]: from a desired state to the world, over the backend traits.
//! - [`execute`]: carries a plan out batch by batch, looking at the world again in between.
//! - [`lock`]: one actor per pool: the locks a rollout takes, renews and gives up.
//! - [`commands`]: plan, apply, validate, schema and watch, over the stages above.
//! - [`status`]: what `poolctl status` shows, built from a world and its plan.
//! - [`style`]: colour on a terminal (`--color`, `NO_COLOR`).
//! - [`cli`]: the clap types.

pub mod backend;
pub mod cli;
pub mod commands;
pub mod execute;
pub mod home;
pub mod lock;
pub mod model;
pub mod observe;
pub mod plan;
pub mod source;
pub mod spec;
pub mod status;
pub mod style;

#[cfg(test)]
mod testing;
