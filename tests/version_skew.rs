//! The version-skew preflight, end to end: the binary against the fake API server at v1.30 and
//! node images whose tags carry their kubelet's version, as kind's do (`kindest/node:v1.32.0`).
//! The images are the plain test image under such tags, built locally and removed with the test.

use crate::support::rig::Rig;

#[tokio::test]
async fn a_kubelet_newer_than_the_api_server_is_refused_before_anything_changes() {
    let Some(rig) = Rig::new().await else { return };
    rig.fake.set_version("v1.30.2");
    let docker = rig.s.docker();
    let (newer, older) = (docker.node_image("v1.32.0"), docker.node_image("v1.29.7"));
    let spec = rig.spec().replicas(1);

    // Nothing is created for a kubelet newer than the API server; both versions are named.
    rig.write(&spec.clone().image(&newer));
    let refused = rig.apply().expect_code(1);
    let why = format!(
        "pool {}: the template's kubelet v1.32.0 (from the image tag {newer}) is newer than the API server \
         v1.30.2; Kubernetes supports a kubelet as new as the API server and up to three minor versions older. \
         Use an image of v1.30 or older, or pass --skip-preflight version-skew",
        rig.pool()
    );
    assert!(refused.stderr.contains(&why), "{}", refused.stderr);
    assert!(rig.containers().await.is_empty(), "nothing was created");
    assert!(rig.nodes().is_empty());

    // A kubelet one minor older passes, and its Node joins.
    rig.write(&spec.clone().image(&older));
    rig.apply().expect_code(0);
    let before = rig.containers().await;
    assert_eq!(before.len(), 1);
    assert!(before.values().all(|(running, _)| *running), "{before:?}");

    // Rolling it to the newer kubelet is refused too: nothing is created, nothing retired.
    let from = rig.last_seq();
    rig.write(&spec.clone().image(&newer));
    let refused = rig.apply().expect_code(1);
    assert!(refused.stderr.contains(&why), "{}", refused.stderr);
    assert_eq!(rig.containers().await, before, "the containers are unchanged");
    let nodes = rig.nodes();
    assert!(nodes.values().all(|&(ready, unschedulable, _)| ready && !unschedulable), "{nodes:?}");
    assert!(rig.events_after(from).iter().all(|e| crate::e2e_kube::node_event(e).is_none()));

    // Unless the check is skipped.
    rig.poolctl("apply", &["--yes", "--skip-preflight", "version-skew"]).expect_code(0);
    let after = rig.containers().await;
    assert_eq!(after.len(), 1);
    assert!(after.keys().all(|name| !before.contains_key(name)), "replaced: {after:?}");
}
