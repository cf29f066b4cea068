//! Test support shared by the integration tests.

pub mod cli;
pub mod fake_kube;
