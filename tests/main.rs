//! The single integration-test binary: one module per area, sharing `support`.

// Test support items are shared between the modules of this one binary; `pub` reads better
// there than `pub(crate)`, and nothing here is a public API.
#![allow(unreachable_pub)]

mod bench_rollout;
mod canary;
mod cli;
mod container_stop;
mod deploy;
mod docker;
mod docker_bounds;
mod docs;
mod drain;
mod drain_timeout;
mod drain_unreachable;
mod drain_watch;
mod e2e;
mod e2e_kube;
mod endpoints;
mod fake_kube;
mod fake_kube_faults;
mod faults;
mod health;
mod history;
mod in_cluster;
mod join;
mod joining;
mod kube;
mod kube_tls;
mod kubeconfig;
mod kubelet_prompt;
mod lock;
mod migrate;
mod monitor;
mod ownership;
mod registration;
mod replace;
mod safety;
mod scope;
mod secrets;
mod service;
mod source;
mod spec;
mod support;
mod suspend;
mod template;
mod ux;
mod version_skew;
mod watch;
mod windows;
