//! Test support shared by the unit tests of every stage: builders for specs and worlds
//! ([`build`]), the simulated world that carries plan steps out ([`sim`]), and that world
//! behind the backend traits ([`fake`]).

pub(crate) mod build;
pub(crate) mod fake;
pub(crate) mod sim;
