//! poolctl: reconcile pools of Docker containers that serve as Kubernetes nodes, retiring each
//! instance in the safe order (cordon, drain, stop, delete the Node, remove the container).
//!
//! Layers, from pure to I/O: [`spec`] (the pool file), [`world`] (observed state),
//! [`plan`] (the pure planner and its rendering); then the edges: [`source`] (files and Git),
//! [`backend`] (the traits the executor drives), [`docker`] and [`apply`].

pub mod apply;
pub mod backend;
pub mod cli;
pub mod docker;
pub mod kube;
pub mod plan;
pub mod run;
pub mod sim;
pub mod source;
pub mod spec;
pub mod watch;
pub mod world;
