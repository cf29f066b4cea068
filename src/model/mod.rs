//! The plain data every stage shares: the desired state and its origin, the observed world,
//! and the names of the labels that tie the two together. No I/O, no behaviour beyond small
//! accessors; everything else depends on this, and this depends only on [`crate::spec`].

mod desired;
mod history;
pub mod labels;
mod lock;
mod selector;
mod world;

pub use desired::{Desired, DesiredPool, Origin};
pub use history::{REVISION_HISTORY_LIMIT, Revision, RevisionEnd, RolloutResult, ends, rollback_target};
pub use lock::{LockHolder, timestamp};
pub use selector::{LabelSelector, Operator, Requirement};
pub use world::{
    ClusterIdentity, ClusterRef, Container, ContainerState, DrainAction, DrainDecision, Health, InstanceRef,
    Node, NodeCondition, NodeConfig, NodeConfigChange, Pdb, Pod, Promotion, RetirementMarks, RolloutRecord,
    Suspension, World, is_instance_name,
};
