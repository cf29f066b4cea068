//! The one rule, end to end: no container of a node pool stops while its Node may still hold
//! pods that were not drained, whatever poolctl saw when it planned.

use std::time::Duration;

use crate::support::fake_kube::{FakeKube, FakeKubeOptions, KubeletOptions, write_kubeconfig_contexts};
use crate::support::scenario::Scenario;

/// Guards against a hang only; no assertion depends on it.
const LIMIT: Duration = Duration::from_secs(60);

/// Pods of `fake` bound to a Node whose name starts with `prefix`.
fn pods_on(fake: &FakeKube, prefix: &str) -> usize {
    fake.pods()
        .iter()
        .filter(|p| {
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| n.starts_with(prefix))
        })
        .count()
}

#[tokio::test]
async fn a_switched_current_context_is_refused_and_switching_back_finishes_with_full_drains() {
    let Some(s) = Scenario::with_docker().await else { return };
    let (key, value) = s.docker().case_label();
    // Cluster a runs this test's kubelet; cluster b is another cluster the user also has.
    let a = FakeKube::start(FakeKubeOptions {
        kubelet: Some(KubeletOptions::new(format!("{key}={value}"))),
        ..FakeKubeOptions::default()
    });
    let b = FakeKube::start(FakeKubeOptions::default());
    let kubeconfig = s.path("kubeconfig");
    write_kubeconfig_contexts(&kubeconfig, &[("kind-a", &a), ("kind-b", &b)], "kind-a").unwrap();

    // `node:` names no context: the current one.
    let v1 = s.pool().replicas(2).env("VERSION", "1").node(&kubeconfig).drain_timeout("5s");
    s.write_pool(&v1);
    s.run("apply", &["--yes"]).expect_code(0);
    let prefix = format!("{}-", s.pool_name());
    a.add_app("default", "web", 2);
    tokio::time::timeout(
        LIMIT,
        a.wait_until(|st| {
            st.pods()
                .filter(|p| {
                    p.spec
                        .as_ref()
                        .and_then(|s| s.node_name.as_deref())
                        .is_some_and(|n| n.starts_with(&prefix))
                })
                .count()
                == 2
        }),
    )
    .await
    .expect("the app runs on the pool's Nodes");
    let before = s.running().await;
    assert_eq!(before.len(), 2);

    // `kubectl config use-context kind-b`, then a change of the pool.
    write_kubeconfig_contexts(&kubeconfig, &[("kind-a", &a), ("kind-b", &b)], "kind-b").unwrap();
    let v2 = v1.clone().env("VERSION", "2");
    s.write_pool(&v2);
    let refused = s.run("apply", &["--yes"]).expect_code(1);
    assert!(
        refused.stderr.contains("its instances are Nodes of the cluster context kind-a at"),
        "{}",
        refused.stderr
    );
    assert!(refused.stderr.contains("now resolves to context kind-b at"), "{}", refused.stderr);
    assert!(refused.stderr.contains("Set `node.context: kind-a`"), "{}", refused.stderr);
    let plan = s.run("plan", &[]).expect_code(1);
    assert!(plan.stderr.contains("nothing of this pool was changed"), "{}", plan.stderr);
    // Nothing moved: the same containers run, the Nodes of cluster a keep their pods, and
    // cluster b was not touched.
    let ids = |cs: &[poolctl::model::Container]| cs.iter().map(|c| c.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&s.running().await), ids(&before));
    assert_eq!(pods_on(&a, &prefix), 2);
    assert!(a.events().iter().all(|e| !matches!(
        e.kind,
        crate::support::fake_kube::EventKind::NodeCordoned { .. }
            | crate::support::fake_kube::EventKind::PodEvicted { .. }
    )));
    assert!(b.requests().iter().all(|r| r.method == "GET"), "cluster b was only read");

    // Switching back lets the rollout finish, each old Node drained before its container stops.
    write_kubeconfig_contexts(&kubeconfig, &[("kind-a", &a), ("kind-b", &b)], "kind-a").unwrap();
    s.run("apply", &["--yes"]).expect_code(0);
    let after = s.running().await;
    assert_eq!(after.len(), 2);
    assert!(after.iter().all(|c| !ids(&before).contains(&c.id)));
    let evictions = a.evictions().iter().filter(|e| e.status == 201).count();
    assert_eq!(evictions, 2, "both pods were evicted, none killed with their Node");
}
