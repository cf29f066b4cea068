//! Test support shared by the integration tests.

pub mod cli;
pub mod docker;
pub mod fake_kube;
