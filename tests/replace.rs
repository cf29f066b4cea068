//! Retiring what the user says, end to end: `apply --replace NAME` and a Node labelled
//! `poolctl.dev/replace=true` replace a current instance surge first, through the whole safe
//! retirement; `deletePolicy` chooses which instances a scale-down retires.

use std::collections::BTreeMap;

use crate::support::cli::Stream;
use crate::support::fake_kube::{EventKind, PdbBound, PodSpecBuilder, ReadyPolicy};
use crate::support::rig::{LIMIT, Rig};
use crate::support::scenario::Scenario;

#[tokio::test]
async fn apply_replace_creates_one_waits_until_it_is_ready_then_retires_exactly_that_one() {
    let Some(rig) = Rig::new().await else { return };
    let names = rig.start(&rig.spec()).await;
    let victim = names[1].clone();
    let seq = rig.last_seq();

    let typo = rig.poolctl("apply", &["--yes", "--replace", "nope"]).expect_code(1);
    assert!(typo.stderr.contains("--replace nope: no instance of that name"), "{}", typo.stderr);
    let plan = rig.poolctl("plan", &["--replace", &victim]).expect_code(0);
    assert!(
        plan.stdout.contains(&format!("{victim}: replaced although current (--replace)")),
        "{}",
        plan.stdout
    );
    rig.poolctl("apply", &["--yes", "--replace", &victim]).expect_code(0);

    let events = rig.events_after(seq);
    let cordoned = events
        .iter()
        .position(|e| matches!(&e.kind, EventKind::NodeCordoned { node } if *node == victim))
        .expect("the replaced Node was cordoned");
    let ready =
        events.iter().position(|e| matches!(&e.kind, EventKind::NodeReady { node } if !names.contains(node)));
    assert!(ready.is_some_and(|r| r < cordoned), "the new Node is Ready first: {events:#?}");
    let cordons = events.iter().filter(|e| matches!(e.kind, EventKind::NodeCordoned { .. })).count();
    assert_eq!(cordons, 1, "exactly one instance retired: {events:#?}");
    let containers = rig.containers().await;
    assert_eq!(containers.len(), 3);
    assert!(!containers.contains_key(&victim));
    assert!(names.iter().filter(|n| **n != victim).all(|n| containers.contains_key(n)), "{containers:?}");
    rig.poolctl("plan", &["--detailed-exitcode"]).expect_code(0);
}

#[tokio::test]
async fn a_node_labelled_for_replacement_is_replaced_by_watch() {
    let Some(rig) = Rig::new().await else { return };
    let names = rig.start(&rig.spec()).await;
    let victim = names[0].clone();
    let mut watch = rig.s.spawn("watch", &["--resync", "300ms"]);
    watch.wait_for(Stream::Stderr, "in sync");
    rig.fake.store().update_node(&victim, |n| {
        n.metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert("poolctl.dev/replace".into(), "true".into());
    });
    let gone = |st: &crate::support::fake_kube::Store| st.node(&victim).is_none();
    tokio::time::timeout(LIMIT, rig.fake.wait_until(gone)).await.expect("the labelled Node is retired");
    watch.wait_for(Stream::Stdout, "Apply complete");
    watch.signal("TERM");
    let containers = rig.containers().await;
    assert_eq!(containers.len(), 3, "{containers:?}");
    assert!(!containers.contains_key(&victim));
}

#[tokio::test]
async fn delete_policy_newest_retires_the_newest_on_a_scale_down() {
    let Some(s) = Scenario::with_docker().await else { return };
    s.write_pool(&s.pool().replicas(3));
    s.run("apply", &["--yes"]).expect_code(0);
    let mut by_age = s.containers().await;
    by_age.sort_by_key(|c| (c.created, c.name.clone()));
    s.write_pool(&s.pool().replicas(2).delete_policy("Newest"));
    s.run("apply", &["--yes"]).expect_code(0);
    let left: Vec<String> = s.containers().await.into_iter().map(|c| c.name).collect();
    assert_eq!(left.len(), 2);
    // Docker keeps creation times in seconds: the one retired is of the newest second.
    let gone: Vec<_> = by_age.iter().filter(|c| !left.contains(&c.name)).collect();
    assert_eq!(gone.len(), 1);
    assert_eq!(gone[0].created, by_age[2].created, "{gone:?} {by_age:?}");
}

#[tokio::test]
async fn a_pre_drain_hook_holds_a_retirement_until_its_owner_removes_it() {
    let Some(rig) = Rig::new().await else { return };
    let names = rig.start(&rig.spec()).await;
    let victim = names[2].clone();
    let hook = "pre-drain.delete.hook.poolctl.dev/backup";
    rig.fake.store().update_node(&victim, |n| {
        n.metadata.annotations.get_or_insert_with(BTreeMap::new).insert(hook.into(), "my-operator".into());
    });
    let plan = rig.poolctl("plan", &["--replace", &victim]).expect_code(0);
    assert!(
        plan.stdout.contains("retirement waits for its hooks: pre-drain backup (my-operator)"),
        "{}",
        plan.stdout
    );

    let mut apply = rig.s.spawn("apply", &["--yes", "--replace", &victim]);
    apply.wait_for(
        Stream::Stdout,
        &format!("{victim}: waiting for its pre-drain hooks: backup (my-operator)"),
    );
    let cordoned = |st: &crate::support::fake_kube::Store| {
        st.node(&victim).and_then(|n| n.spec.as_ref()?.unschedulable).unwrap_or(false)
    };
    tokio::time::timeout(LIMIT, rig.fake.wait_until(cordoned)).await.expect("cordoned while the hook is set");
    apply.assert_alive();
    // `poolctl status` says what the retirement waits for, from the world alone.
    let status = rig.poolctl("status", &[]).expect_code(0).stdout;
    assert!(
        status.contains(&format!(
            "{victim}: its retirement waits for its hooks (pre-drain backup (my-operator))"
        )),
        "{status}"
    );
    // So does `kubectl describe node`, once the Event is sent beside the rollout.
    let told = |st: &crate::support::fake_kube::Store| {
        let waits = st.k8s_events().about("Node", &victim);
        waits.iter().any(|e| e.reason.as_deref() == Some("WaitingForHooks"))
    };
    tokio::time::timeout(LIMIT, rig.fake.wait_until(told)).await.expect("a WaitingForHooks Event");
    let waits = rig.fake.events_about("Node", &victim);
    let waiting = waits.iter().find(|e| e.reason.as_deref() == Some("WaitingForHooks")).expect("an Event");
    assert!(
        waiting.note.as_deref().is_some_and(|n| n.contains("pre-drain hooks: backup (my-operator)")),
        "{waiting:#?}"
    );
    // The owner is done: the retirement goes on by itself.
    rig.fake.store().update_node(&victim, |n| {
        n.metadata.annotations.get_or_insert_with(BTreeMap::new).remove(hook);
    });
    assert!(apply.wait().success(), "{}", apply.output(Stream::Stdout));
    assert!(!rig.containers().await.contains_key(&victim));
}

/// A retirement that waits for its Node's volumes to detach says so in `status`, from the
/// world: the drain is done, and a `VolumeAttachment` still names the Node.
#[tokio::test]
async fn status_names_the_volumes_a_retirement_waits_for() {
    let Some(rig) = Rig::new().await else { return };
    let names = rig.start(&rig.spec()).await;
    let victim = names[2].clone();
    rig.fake.store().volume_attachments = vec![("csi-data".to_owned(), victim.clone())];
    let mut apply = rig.s.spawn("apply", &["--yes", "--replace", &victim]);
    apply.wait_for(Stream::Stdout, &format!("{victim}: waiting for its volumes to detach"));
    let status = rig.poolctl("status", &[]).expect_code(0).stdout;
    assert!(
        status.contains(&format!(
            "{victim}: its retirement waits for its volumes to detach (VolumeAttachment csi-data)"
        )),
        "{status}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&rig.poolctl("status", &["-o", "json"]).expect_code(0).stdout).unwrap();
    let instance = json["pools"][0]["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == victim.as_str())
        .cloned();
    assert!(
        instance.is_some_and(|i| i["waits"].as_str().is_some_and(|w| w.contains("csi-data"))),
        "{json:#}"
    );
    // Detached: the retirement goes on by itself.
    rig.fake.store().volume_attachments.clear();
    assert!(apply.wait().success(), "{}", apply.output(Stream::Stdout));
    assert!(!rig.containers().await.contains_key(&victim));
}

/// Two retirements of one cluster at once: drains go one Node at a time, and status says which
/// Node the other waits for.
#[tokio::test]
async fn status_names_the_drain_turn_a_retirement_waits_for() {
    let Some(rig) = Rig::new().await else { return };
    let spec = rig.spec().replicas(2).max_surge(2).drain_timeout("2m");
    let names = rig.start(&spec).await;
    // A pod on each Node under one budget that allows no disruption: whichever Node drains
    // first, its drain holds the turn until the budget is relaxed.
    for (i, node) in names.iter().enumerate() {
        rig.fake.add_pod(&PodSpecBuilder::new("default", &format!("hold-{i}"), node).label("app", "hold"));
    }
    rig.fake.put_pdb("default", "hold-pdb", "hold", PdbBound::MinAvailable(2));
    let mut apply = rig.s.spawn("apply", &["--yes", "--replace", &names[0], "--replace", &names[1]]);
    let refused = apply.wait_for(Stream::Stderr, "eviction refused");
    let held = usize::from(refused.contains("default/hold-1"));
    let (first, other) = (names[held].clone(), names[1 - held].clone());

    let status = rig.poolctl("status", &[]).expect_code(0).stdout;
    let waits = format!("{other}: its retirement waits for its cluster's drain turn: {first} drains first");
    assert!(status.contains(&waits), "{status}");
    assert!(!status.contains(&format!("{first}: its retirement waits for its cluster's")), "{status}");

    rig.fake.put_pdb("default", "hold-pdb", "hold", PdbBound::MaxUnavailable(2));
    assert!(apply.wait().success(), "{}", apply.output(Stream::Stdout));
    let left = rig.containers().await;
    assert!(!left.contains_key(&first) && !left.contains_key(&other), "{left:?}");
}

#[tokio::test]
async fn a_pre_drain_hook_on_one_pools_node_does_not_hold_up_another_pools_rollout() {
    let Some(rig) = Rig::new().await else { return };
    let (a, b) = (rig.pool().to_owned(), format!("{}-b", rig.pool()));
    let spec_a = rig.spec().replicas(1);
    let spec_b = rig.spec().replicas(1).named(&b);
    rig.write(&spec_a);
    rig.s.write("other.yaml", &spec_b.to_string());
    rig.apply().expect_code(0);
    let of = |pool: &str| -> Vec<String> {
        rig.fake.node_names().into_iter().filter(|n| n.rsplitn(3, '-').nth(2) == Some(pool)).collect()
    };
    let (a_old, b_old) = (of(&a).remove(0), of(&b).remove(0));
    let hook = "pre-drain.delete.hook.poolctl.dev/backup";
    rig.fake.store().update_node(&a_old, |n| {
        n.metadata.annotations.get_or_insert_with(BTreeMap::new).insert(hook.into(), "my-operator".into());
    });
    // Both pools change in one commit; b's new Node turns Ready a little later, so that a's
    // retirement comes to its cluster's drain turn first.
    rig.fake.set_ready_policy(&format!("{b}-"), ReadyPolicy::After(std::time::Duration::from_secs(2)));
    rig.write(&spec_a.env("VERSION", "2"));
    rig.s.write("other.yaml", &spec_b.env("VERSION", "2").to_string());

    let mut apply = rig.s.spawn("apply", &["--yes"]);
    apply
        .wait_for(Stream::Stdout, &format!("{a_old}: waiting for its pre-drain hooks: backup (my-operator)"));
    // While a's Node waits for its hook, b's rollout goes to its end: its old Node drained
    // and deleted.
    let b_done = |st: &crate::support::fake_kube::Store| st.node(&b_old).is_none();
    tokio::time::timeout(LIMIT, rig.fake.wait_until(b_done)).await.expect("b's old Node retired meanwhile");
    apply.assert_alive();
    assert!(rig.fake.node(&a_old).is_some(), "a's Node waits for its hook");

    rig.fake.store().update_node(&a_old, |n| {
        n.metadata.annotations.get_or_insert_with(BTreeMap::new).remove(hook);
    });
    assert!(apply.wait().success(), "{}", apply.output(Stream::Stdout));
    assert!(rig.fake.node(&a_old).is_none());
}

#[tokio::test]
async fn a_newer_commit_while_a_retirement_waits_for_its_hook_supersedes_the_rollout_without_failing_it() {
    let Some(rig) = Rig::new().await else { return };
    let v1 = rig.spec().replicas(1);
    let old = rig.start(&v1).await.remove(0);
    let hook = "pre-drain.delete.hook.poolctl.dev/backup";
    rig.fake.store().update_node(&old, |n| {
        n.metadata.annotations.get_or_insert_with(BTreeMap::new).insert(hook.into(), "my-operator".into());
    });
    rig.write(&v1.clone().env("VERSION", "2"));
    let mut watch = rig.s.spawn("watch", &["--resync", "500ms"]);
    watch.wait_for(Stream::Stdout, &format!("{old}: waiting for its pre-drain hooks: backup (my-operator)"));

    // A newer commit arrives during the wait: the rollout stops there, superseded, not failed.
    rig.write(&v1.clone().env("VERSION", "3"));
    watch.wait_for(Stream::Stdout, "Apply superseded");
    rig.fake.store().update_node(&old, |n| {
        n.metadata.annotations.get_or_insert_with(BTreeMap::new).remove(hook);
    });
    watch.applied();
    watch.signal("TERM");
    let said = format!("{}{}", watch.output(Stream::Stdout), watch.output(Stream::Stderr));
    assert!(!said.contains("FAILED") && !said.contains("failed"), "{said}");
    assert!(said.contains(&format!("drain {old} stopped")), "{said}");
    let v3 = rig.template_hash();
    let instances = rig.containers().await;
    assert!(instances.len() == 1 && instances.values().all(|(up, hash)| *up && *hash == v3), "{instances:?}");
}

/// `poolctl.dev/do-not-disrupt=true` on one Node of three: a template change replaces the
/// other two and reports the third held, in plan and status; once the annotation goes, the
/// next apply replaces it too.
#[tokio::test]
async fn a_node_its_owner_marked_do_not_disrupt_is_held_through_a_template_change() {
    let Some(rig) = Rig::new().await else { return };
    let names = rig.start(&rig.spec()).await;
    let held = names[1].clone();
    let annotate = |value: Option<&str>| {
        rig.fake.store().update_node(&held, |n| {
            let annotations = n.metadata.annotations.get_or_insert_with(BTreeMap::new);
            match value {
                Some(v) => annotations.insert("poolctl.dev/do-not-disrupt".into(), v.into()),
                None => annotations.remove("poolctl.dev/do-not-disrupt"),
            };
        });
    };
    annotate(Some("true"));
    rig.write(&rig.spec().env("VERSION", "2"));
    let said = format!("{held}: held: its Node carries poolctl.dev/do-not-disrupt=true");
    let plan = rig.poolctl("plan", &[]).expect_code(0);
    assert!(plan.stdout.contains(&said), "{}", plan.stdout);
    rig.poolctl("apply", &["--yes"]).expect_code(0);
    let containers = rig.containers().await;
    assert_eq!(containers.len(), 3, "{containers:?}");
    assert!(containers.contains_key(&held), "{containers:?}");
    assert!(names.iter().filter(|n| **n != held).all(|n| !containers.contains_key(n)), "{containers:?}");
    let status = rig.poolctl("status", &[]).stdout;
    assert!(status.contains(&said), "{status}");
    rig.poolctl("plan", &["--detailed-exitcode"]).expect_code(0);

    annotate(None);
    rig.poolctl("apply", &["--yes"]).expect_code(0);
    let containers = rig.containers().await;
    assert_eq!(containers.len(), 3, "{containers:?}");
    assert!(!containers.contains_key(&held), "{containers:?}");
    rig.poolctl("plan", &["--detailed-exitcode"]).expect_code(0);
}

/// `strategy: OnDelete`: a template change plans nothing and says how many instances are
/// outdated; `--replace NAME` then creates exactly one instance, on the new template, and
/// retires NAME once it is Ready.
#[tokio::test]
async fn on_delete_replaces_only_the_instance_named_with_the_new_template() {
    let Some(rig) = Rig::new().await else { return };
    let names = rig.start(&rig.spec().on_delete()).await;
    rig.write(&rig.spec().on_delete().env("VERSION", "2"));
    let new_hash = rig.template_hash();
    let plan = rig.poolctl("plan", &["--detailed-exitcode"]).expect_code(0);
    assert!(plan.stdout.contains("strategy OnDelete: 3 outdated instances keep running"), "{}", plan.stdout);
    rig.poolctl("apply", &["--yes"]).expect_code(0);
    assert_eq!(rig.containers().await.keys().cloned().collect::<Vec<_>>(), names, "nothing replaced");
    let status = rig.poolctl("status", &[]).stdout;
    assert!(status.contains("strategy OnDelete: 3 outdated instances keep running"), "{status}");

    let victim = names[0].clone();
    let seq = rig.last_seq();
    rig.poolctl("apply", &["--yes", "--replace", &victim]).expect_code(0);
    let containers = rig.containers().await;
    assert_eq!(containers.len(), 3, "{containers:?}");
    assert!(!containers.contains_key(&victim), "{containers:?}");
    let created: Vec<_> = containers.iter().filter(|(name, _)| !names.contains(name)).collect();
    assert_eq!(created.len(), 1, "exactly one new instance: {containers:?}");
    assert_eq!(created[0].1.1, new_hash, "on the new template");
    let events = rig.events_after(seq);
    let ready =
        events.iter().position(|e| matches!(&e.kind, EventKind::NodeReady { node } if node == created[0].0));
    let cordoned =
        events.iter().position(|e| matches!(&e.kind, EventKind::NodeCordoned { node } if *node == victim));
    assert!(ready.is_some_and(|r| cordoned.is_some_and(|c| r < c)), "surge first: {events:#?}");
    let plan = rig.poolctl("plan", &[]).expect_code(0);
    assert!(plan.stdout.contains("strategy OnDelete: 2 outdated instances keep running"), "{}", plan.stdout);
}

/// `maxAge`: watch wakes when the first instance expires (no resync in between) and replaces
/// each expired instance surge first, its new Node Ready before the old one is cordoned.
#[tokio::test]
async fn watch_replaces_each_instance_older_than_max_age_surge_first() {
    let Some(rig) = Rig::new().await else { return };
    let names = rig.start(&rig.spec().replicas(2)).await;
    rig.write(&rig.spec().replicas(2).max_age("4s"));
    let seq = rig.last_seq();
    let mut watch = rig.s.spawn("watch", &["--resync", "1h"]);
    let deadline = std::time::Instant::now() + LIMIT;
    loop {
        let containers = rig.containers().await;
        if names.iter().all(|n| !containers.contains_key(n)) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not replaced: {containers:?}");
        let rounds = rig.fake.store().kubelet_rounds();
        let next = rig.fake.wait_until(move |st| st.kubelet_rounds() > rounds);
        tokio::time::timeout(LIMIT, next).await.expect("the kubelet runs");
    }
    watch.signal("TERM");
    let events = rig.events_after(seq);
    for old in &names {
        let cordoned = events
            .iter()
            .position(|e| matches!(&e.kind, EventKind::NodeCordoned { node } if node == old))
            .unwrap_or_else(|| panic!("{old} was cordoned: {events:#?}"));
        let new_ready = events[..cordoned]
            .iter()
            .filter(|e| matches!(&e.kind, EventKind::NodeReady { node } if !names.contains(node)))
            .count();
        assert!(new_ready >= 1, "a new Node was Ready before {old} was cordoned: {events:#?}");
    }
    assert!(
        watch.seen.iter().any(|l| l.contains("older than spec.rollout.maxAge")),
        "the plan says why: {:?}",
        watch.seen
    );
}
