//! The plain data every stage shares: the desired state and its origin, the observed world,
//! and the names of the labels that tie the two together. No I/O, no behaviour beyond small
//! accessors; everything else depends on this, and this depends only on [`crate::spec`].

mod desired;
pub mod labels;
mod world;

pub use desired::{Desired, DesiredPool, Origin};
pub use world::{
    ClusterIdentity, ClusterRef, Container, ContainerState, Health, Node, NodeConfig, NodeConfigChange, Pdb,
    Pod, World, is_instance_name,
};
