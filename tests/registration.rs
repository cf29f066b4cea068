//! A new Node registers configured (issue 30, item 1): with the pool's taints and
//! `poolctl.dev/uninitialized:NoSchedule`, and the pool's labels a kubelet may set itself, so
//! that no pod lands on it before poolctl has configured it; poolctl removes the uninitialized
//! taint, in the update that sets the other labels, once the Node is Ready. The fake kubelet
//! registers with the flags poolctl hands a pool that joins by itself (`KUBELET_EXTRA_ARGS`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;

use crate::support::rig::Rig;

const UNINITIALIZED: &str = "poolctl.dev/uninitialized";

/// `key[=value]:Effect` of each taint.
fn taints(node: &Node) -> Vec<String> {
    let taints = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
    taints
        .iter()
        .map(|t| match &t.value {
            Some(v) => format!("{}={v}:{}", t.key, t.effect),
            None => format!("{}:{}", t.key, t.effect),
        })
        .collect()
}

fn labels(node: &Node) -> BTreeMap<String, String> {
    node.metadata.labels.clone().unwrap_or_default()
}

#[tokio::test]
async fn a_new_node_registers_tainted_and_labelled_and_is_initialized_once_up() {
    let Some(rig) = Rig::new().await else { return };
    let v1 = rig
        .spec()
        .replicas(1)
        .node_taint("dedicated", "ci", "NoSchedule")
        .node_label("team", "ci")
        .node_label("node-role.kubernetes.io/ci", "");
    let first = rig.start(&v1).await;
    rig.write(&v1.clone().replicas(2));
    rig.apply().expect_code(0);
    let new: Vec<String> = rig.nodes().into_keys().filter(|n| !first.contains(n)).collect();
    assert_eq!(new.len(), 1, "{new:?}");

    let versions = rig.fake.node_versions(&new[0]);
    let registered = versions.first().expect("the Node registered");
    assert_eq!(taints(registered), ["dedicated=ci:NoSchedule", "poolctl.dev/uninitialized:NoSchedule"]);
    let at_registration = labels(registered);
    assert_eq!(at_registration.get("team").map(String::as_str), Some("ci"), "{at_registration:?}");
    assert!(!at_registration.contains_key("node-role.kubernetes.io/ci"), "a kubelet may not set a role");

    // Up: configured in one update, the uninitialized taint gone with it.
    let now = rig.fake.node(&new[0]).expect("the new Node");
    assert_eq!(taints(&now), ["dedicated=ci:NoSchedule"]);
    let labelled = labels(&now);
    assert_eq!(labelled.get("node-role.kubernetes.io/ci").map(String::as_str), Some(""));
    assert_eq!(labelled.get("poolctl.dev/pool").map(String::as_str), Some(rig.pool()));
    let initialized = versions.iter().position(|v| !taints(v).iter().any(|t| t.starts_with(UNINITIALIZED)));
    let initialized = initialized.map(|i| &versions[i]).expect("the uninitialized taint went");
    assert!(labels(initialized).contains_key("node-role.kubernetes.io/ci"), "with the labels, in one update");
    assert!(labels(initialized).contains_key("poolctl.dev/pool"));
    // Until then, the Node carried it at every version.
    for version in versions.iter().take_while(|v| !std::ptr::eq(*v, initialized)) {
        assert!(taints(version).iter().any(|t| t.starts_with(UNINITIALIZED)), "{version:?}");
    }
}
