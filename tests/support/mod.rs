//! Test support shared by the integration tests: [`scenario::Scenario`] is where a test starts.

// Parts of the harness wait for the test files that are still to be ported to it.
#[allow(dead_code)]
pub mod cli;
#[allow(dead_code)]
pub mod docker;
pub mod fake_kube;
#[allow(dead_code)]
pub mod git;
#[allow(dead_code)]
pub mod scenario;
