//! The single integration-test binary: one module per area, sharing `support`.

mod cli;
mod docker;
mod fake_kube;
mod source;
mod spec;
mod support;
