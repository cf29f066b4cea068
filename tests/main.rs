//! The single integration-test binary: one module per area, sharing `support`.

mod fake_kube;
mod support;
