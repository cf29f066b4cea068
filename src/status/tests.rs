use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use super::*;
use crate::model::ContainerState;
use crate::plan::PlanOptions;
use crate::style::Style;
use crate::testing::build::{PoolArgs, container, desired, node};

/// A node pool half way through a rollout (one current instance, one outdated one whose Node
/// poolctl cordoned, one exited), locked by an apply, beside a converged container-only pool.
fn rolling() -> (Plan, World, BTreeMap<String, LockHolder>) {
    let k = PoolArgs { nodes: true, hash: Some("c1d39c0340"), ..PoolArgs::new("k", 2) }.build();
    let web = PoolArgs { hash: Some("3e94937dc7"), ..PoolArgs::new("web", 1) }.build();
    let mut old = node("k-1a2b3c4d5e-aaaaa", "k");
    (old.unschedulable, old.cordoned_by_poolctl) = (true, true);
    let mut exited = container("k-1a2b3c4d5e-ccccc", "k", "1a2b3c4d5e", 3);
    (exited.state, exited.status) = (ContainerState::Exited, "Exited (137) 2 minutes ago".to_owned());
    let mut up = container("k-c1d39c0340-bbbbb", "k", "c1d39c0340", 2);
    up.status = "Up 5 minutes".to_owned();
    let world = World {
        containers: vec![
            container("k-1a2b3c4d5e-aaaaa", "k", "1a2b3c4d5e", 1),
            up,
            exited,
            container("web-3e94937dc7-ddddd", "web", "3e94937dc7", 1),
        ],
        nodes: vec![old, node("k-c1d39c0340-bbbbb", "k")],
        ..World::default()
    };
    let plan = crate::plan::plan(&desired(vec![k, web]), &world, PlanOptions::default());
    let since = SystemTime::UNIX_EPOCH + Duration::from_secs(1_750_000_000);
    let holder = LockHolder {
        who: "poolctl apply (pid 7 on box)".into(),
        since,
        expires: since + Duration::from_secs(15),
    };
    (plan, world, BTreeMap::from([("k".to_owned(), holder)]))
}

fn text(status: &Status, style: Style) -> String {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_750_000_005);
    let mut out = Vec::new();
    render_text(status, now, style, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn snapshot_of_a_pool_mid_rollout_beside_one_in_sync() {
    let (plan, world, locks) = rolling();
    let status = status(&plan, &world, &locks);
    insta::assert_snapshot!("status_text", text(&status, Style::PLAIN));
    insta::assert_json_snapshot!("status_json", status);
}

#[test]
fn the_summary_counts_serving_instances_and_pending_steps() {
    let (plan, world, locks) = rolling();
    let status = status(&plan, &world, &locks);
    let k = &status.pools[0];
    // The cordoned old instance is on its way out and the exited one serves nothing.
    assert_eq!((k.up, k.replicas, k.in_sync), (1, 2, false));
    assert_eq!(k.pending_steps, plan.pools[0].steps.len());
    assert!(k.lock.is_some());
    let web = &status.pools[1];
    assert_eq!((web.up, web.in_sync, web.nodes), (1, true, false));
}

#[test]
fn colour_never_shifts_a_column() {
    let (plan, world, locks) = rolling();
    let status = status(&plan, &world, &locks);
    let painted = text(&status, Style { color: true });
    assert!(painted.contains("\x1b[33m1a2b3c4d5e (outdated)\x1b[0m"), "{painted}");
    let stripped = painted.replace("\x1b[0m", "").replace("\x1b[1m", "").replace("\x1b[2m", "");
    let stripped = ["\x1b[31m", "\x1b[32m", "\x1b[33m"].iter().fold(stripped, |s, code| s.replace(code, ""));
    assert_eq!(stripped, text(&status, Style::PLAIN));
}

#[test]
fn the_facts_of_a_status_leave_out_what_time_alone_changes() {
    let (plan, mut world, mut locks) = rolling();
    let before = status(&plan, &world, &locks);
    world.containers[1].status = "Up 7 minutes".to_owned();
    world.containers[2].status = "Exited (137) 3 minutes ago".to_owned();
    for lock in locks.values_mut() {
        lock.expires += Duration::from_secs(5);
    }
    let later = status(&plan, &world, &locks);
    assert_ne!(before, later);
    assert_eq!(before.facts(), later.facts(), "only times changed");
    let view = |s: &Status| s.pools[0].instances.iter().map(|i| i.docker_status.clone()).collect::<Vec<_>>();
    assert!(view(&later.facts()).contains(&"Exited (137)".to_owned()), "{:?}", view(&later.facts()));

    world.containers[1].status = "Up 7 minutes (unhealthy)".to_owned();
    assert_ne!(status(&plan, &world, &locks).facts(), before.facts(), "a health check is a fact");
    world.containers[2].status = "Exited (1) 3 minutes ago".to_owned();
    assert_ne!(status(&plan, &world, &locks).facts(), before.facts(), "so is an exit code");
}
