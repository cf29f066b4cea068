//! The one integration-test binary: each module is a group of scenarios, `support` the harness.

mod docker;
mod support;
