//! Shared test support for the integration-test binary.

pub mod fake_kube;
