//! `wait_stopped` against the real daemon: it stays pending while the container runs and tells
//! an exit from a removal, so that await-ready can stop waiting for a Node whose container is
//! gone.

use std::time::Duration;

use bollard::query_parameters::RemoveContainerOptions;
use poolctl::backend::{Containers, Stopped};

use crate::support::docker::{TestDocker, docker};

/// Only keeps a broken test from hanging; nothing is timed.
const LIMIT: Duration = Duration::from_secs(60);

/// A container that runs until `/tmp/exit` exists, then exits with code 7.
async fn start(d: &TestDocker, suffix: &str) -> String {
    let mut spec = d.container(suffix);
    let script = "while [ ! -e /tmp/exit ]; do sleep 0.1; done; exit 7";
    spec.command = Some(["sh", "-c", script].map(String::from).to_vec());
    d.backend.create(&spec).await.expect("create");
    spec.name
}

/// Waits for `name` to stop while `act` runs in it, and checks that the wait was still pending
/// when `act` finished (the container ran all along).
async fn wait_across(d: &TestDocker, name: &str, act: impl Future<Output = ()>) -> Stopped {
    let wait = d.backend.wait_stopped(name);
    tokio::pin!(wait);
    let argv = ["true".to_owned()];
    let exec = d.backend.exec(name, &argv, LIMIT);
    tokio::select! {
        biased;
        early = &mut wait => panic!("the wait ended while {name} ran: {early:?}"),
        out = exec => assert_eq!(out.expect("exec").exit_code, 0),
    }
    act.await;
    tokio::time::timeout(LIMIT, wait).await.expect("the wait ends").expect("the wait")
}

#[tokio::test]
async fn an_exit_ends_the_wait_with_its_code() {
    let Some(d) = docker().await else { return };
    let name = start(&d, "exits").await;
    let exit = async {
        d.backend.exec(&name, &["touch".to_owned(), "/tmp/exit".to_owned()], LIMIT).await.expect("exec");
    };
    assert_eq!(wait_across(&d, &name, exit).await, Stopped::Exited(7));
}

#[tokio::test]
async fn a_removal_ends_the_wait_and_says_so() {
    let Some(d) = docker().await else { return };
    let name = start(&d, "removed").await;
    let remove = async {
        let force = RemoveContainerOptions { force: true, ..Default::default() };
        d.backend.client().remove_container(&name, Some(force)).await.expect("docker rm -f");
    };
    assert_eq!(wait_across(&d, &name, remove).await, Stopped::Removed);
    assert_eq!(d.backend.wait_stopped(&name).await, Ok(Stopped::Removed), "already gone");
}
