//! The fake kubelet's prompt mode, which the rollout benchmark uses: with polling made too
//! slow to matter, a Node still registers, turns Ready and turns not Ready, each woken by
//! Docker's report of a start or a death, or by the Node's due time, never by the poll.

use std::time::Duration;

use poolctl::backend::Containers;

use crate::support::docker::docker;
use crate::support::fake_kube::{EventKind, FakeKube, FakeKubeOptions, KubeletOptions, Store};

/// Guards against a hang only; no assertion depends on it.
const LIMIT: Duration = Duration::from_secs(30);

fn ready(s: &Store, name: &str) -> Option<bool> {
    let node = s.node(name)?;
    let conditions = node.status.as_ref().and_then(|s| s.conditions.as_ref());
    Some(conditions.is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")))
}

#[tokio::test]
async fn a_prompt_kubelet_follows_docker_without_waiting_for_its_poll() {
    let Some(d) = docker().await else { return };
    let (key, value) = d.case_label();
    // Polls far apart: only the first look, at start, comes from the poll within this test.
    let kubelet = KubeletOptions {
        prompt: true,
        poll_interval: Duration::from_secs(3600),
        ..KubeletOptions::new(format!("{key}={value}"))
    };
    let fk = FakeKube::start(FakeKubeOptions { kubelet: Some(kubelet), ..Default::default() });
    tokio::time::timeout(LIMIT, fk.wait_until(|s| s.kubelet_rounds() >= 1)).await.expect("first look");
    let name = d.name("prompt");

    d.backend.create(&d.container("prompt")).await.expect("create");
    tokio::time::timeout(LIMIT, fk.wait_until(|s| ready(s, &name) == Some(true)))
        .await
        .expect("the Node registers and turns Ready");
    d.kill(&name).await;
    tokio::time::timeout(LIMIT, fk.wait_until(|s| ready(s, &name) == Some(false)))
        .await
        .expect("the Node turns NotReady");

    let kinds: Vec<EventKind> = fk.events().into_iter().map(|e| e.kind).collect();
    let node = name.clone();
    assert!(kinds.contains(&EventKind::NodeCreated { node: node.clone() }), "{kinds:?}");
    assert!(kinds.contains(&EventKind::NodeReady { node }), "{kinds:?}");
}
