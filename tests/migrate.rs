//! Moving a pool of Nodes to another Docker daemon is a migration (issue 26, item 3): the daemon
//! its Nodes record stays observed until its instances are retired in the full order, surge first
//! on the new daemon. Runs against a second, real daemon (`scripts/test-dockerd`).

use std::process::Command;
use std::time::SystemTime;

use crate::e2e_kube::{docker_when, when};
use crate::support::docker::second_docker;
use crate::support::fake_kube::{FakeKubeOptions, KubeletOptions, Store};
use crate::support::rig::{LIMIT, Rig};

/// This test's containers on the second daemon, by name: running or not.
fn containers_on(host: &str, case: (&str, &str)) -> Vec<(String, bool)> {
    let filter = format!("label={}={}", case.0, case.1);
    let out = Command::new("docker")
        .args(["-H", host, "ps", "-a", "--filter", &filter, "--format", "{{.Names}} {{.State}}"])
        .output()
        .expect("docker ps on the second daemon");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut listed: Vec<(String, bool)> = text
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(name, _)| !name.starts_with("poolctl-"))
        .map(|(name, state)| (name.to_owned(), state == "running"))
        .collect();
    listed.sort();
    listed
}

/// Removes this test's containers from the second daemon, however the test ends.
struct SecondCleanup {
    host: String,
    filter: String,
}

impl Drop for SecondCleanup {
    fn drop(&mut self) {
        let ids =
            Command::new("docker").args(["-H", &self.host, "ps", "-aq", "--filter", &self.filter]).output();
        if let Ok(ids) = ids {
            let ids: Vec<String> =
                String::from_utf8_lossy(&ids.stdout).split_whitespace().map(String::from).collect();
            if !ids.is_empty() {
                let _ = Command::new("docker").args(["-H", &self.host, "rm", "-f", "-v"]).args(&ids).output();
            }
        }
    }
}

#[tokio::test]
async fn moving_a_pool_of_nodes_to_a_second_daemon_retires_each_old_instance_in_the_safe_order() {
    let Some(second) = second_docker() else { return };
    let kubelet = KubeletOptions { extra_hosts: vec![second.clone()], ..KubeletOptions::new(String::new()) };
    let options = FakeKubeOptions { kubelet: Some(kubelet), ..FakeKubeOptions::default() };
    let Some(rig) = Rig::with(options).await else { return };
    let case = rig.s.docker().case_label();
    let _cleanup = SecondCleanup { host: second.clone(), filter: format!("label={}={}", case.0, case.1) };
    // The second daemon has no bridge: both versions run without a network.
    let v1 = rig.spec().replicas(2).network("none");
    let old = rig.start(&v1).await;
    rig.fake.add_app("default", "web", 2);
    let placed = |st: &Store| {
        st.pods().filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()).count() == 2
    };
    tokio::time::timeout(LIMIT, rig.fake.wait_until(placed)).await.expect("the app runs");

    rig.write(&v1.clone().docker_host(&second));
    let plan = rig.poolctl("plan", &[]).expect_code(0).stdout;
    for name in &old {
        let row = plan.lines().find(|l| l.contains(name.as_str())).unwrap_or_default();
        assert!(row.contains("the pool moved") && row.contains("retire"), "{plan}");
        assert!(plan.contains(&format!("cordon      {name}")), "{plan}");
    }

    let (from, since) = (rig.last_seq(), SystemTime::now());
    let run = rig.apply().expect_code(0);
    let events = rig.events_after(from);
    let docker_events = rig.docker_events(since);

    // The new instances run on the second daemon, and nothing of the pool is left on the first.
    let moved = containers_on(&second, case);
    assert_eq!(moved.len(), 2, "{moved:?}\n{}", run.stdout);
    assert!(moved.iter().all(|(name, running)| *running && !old.contains(name)), "{moved:?}");
    assert!(rig.containers().await.is_empty(), "left on the first daemon: {:?}", rig.containers().await);
    // Each old Node was cordoned, then drained, before its container stopped, and deleted only
    // once it had.
    for name in &old {
        let cordoned = when(&events, "cordon", name, false).unwrap_or_else(|| panic!("{name} cordoned"));
        let evicted = when(&events, "evict", name, false).unwrap_or_else(|| panic!("{name} drained"));
        let stopped =
            docker_when(&docker_events, &["die", "kill", "stop"], name).expect("its container stopped");
        let deleted = when(&events, "delete", name, false).unwrap_or_else(|| panic!("{name} deleted"));
        assert!(cordoned <= evicted && evicted < stopped && stopped <= deleted, "{name}: {events:#?}");
    }
    assert_eq!(rig.nodes().len(), 2, "{:?}", rig.nodes());
    assert!(rig.nodes().values().all(|&(ready, unschedulable, _)| ready && !unschedulable));
}
