//! Test support shared by the integration tests: [`scenario::Scenario`] is where a test starts
//! (source directory or Git repository, cache, pool YAML, the binary, Docker and its cleanup).

pub mod cli;
pub mod docker;
pub mod fake_kube;
pub mod git;
pub mod image;
pub mod rig;
pub mod scenario;
