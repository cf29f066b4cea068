//! The pure planner: `plan(desired, world) -> Plan`, with no I/O.

use crate::source::Desired;
use crate::world::World;

use super::{Plan, Summary};

/// Choices the user makes on the command line that change the plan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlanOptions {
    /// Retire pools of this source that the source no longer declares.
    pub prune: bool,
}

/// Compute the plan that takes `world` to `desired`.
pub fn plan(desired: &Desired, world: &World, options: PlanOptions) -> Plan {
    let _ = (world, options);
    Plan { origin: desired.origin.clone(), pools: Vec::new(), summary: Summary::default() }
}
