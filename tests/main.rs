//! The single integration-test binary: one module per area, sharing `support`.

// Test support items are shared between the modules of this one binary; `pub` reads better
// there than `pub(crate)`, and nothing here is a public API.
#![allow(unreachable_pub)]

mod cli;
mod docker;
mod e2e;
mod e2e_kube;
mod fake_kube;
mod kube;
mod safety;
mod scope;
mod source;
mod spec;
mod support;
mod watch;
