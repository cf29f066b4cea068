//! Tests of the planner: DESIGN invariants 1-6 as properties over generated specs and worlds,
//! executed step by step in the simulated world; scenarios by example; snapshots of the output.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use crate::model::{Container, ContainerState, Desired, Health, Origin, Pdb, Pod, World};
use crate::plan::{
    Action, Fate, Plan, PlanOptions, PoolPlan, PoolStatus, Step, plan, render_json, render_text,
};
use crate::testing::build::{
    PoolArgs, container, count, desired, labelled, listed, node, other_origin, pdb, pod, world_of,
};
use crate::testing::sim::SimWorld;

// ---------------------------------------------------------------------------------------------
// Reading plans

fn pool_plan<'a>(plan: &'a Plan, name: &str) -> &'a PoolPlan {
    plan.pools.iter().find(|p| p.name == name).unwrap_or_else(|| panic!("no pool {name} in the plan"))
}

/// `(verb, instance)` of every step, to compare against an expected sequence.
fn verbs(pool: &PoolPlan) -> Vec<(&'static str, &str)> {
    pool.steps.iter().map(|s| (s.action.verb(), s.instance.as_str())).collect()
}

fn retired(pool: &PoolPlan) -> Vec<&str> {
    pool.instances.iter().filter(|i| i.fate == Fate::Retire).map(|i| i.name.as_str()).collect()
}

fn text(plan: &Plan) -> String {
    let mut out = Vec::new();
    render_text(plan, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

// ---------------------------------------------------------------------------------------------
// Invariants, checked on any plan

/// Where an action sits in a retirement (DESIGN invariant 2).
fn retirement_rank(action: &Action) -> Option<u8> {
    Some(match action {
        Action::Cordon => 0,
        Action::Drain(_) => 1,
        Action::Stop => 2,
        Action::DeleteNode => 3,
        Action::Remove => 4,
        _ => return None,
    })
}

/// Invariant 1: within each batch every Create precedes every retirement step.
fn check_creation_first(steps: &[Step]) {
    for (i, later) in steps.iter().enumerate() {
        if matches!(later.action, Action::Create { .. }) {
            let earlier = steps[..i].iter().find(|s| s.batch == later.batch && s.action.is_retirement());
            assert!(earlier.is_none(), "batch {}: {earlier:?} before create {}", later.batch, later.instance);
        }
    }
}

/// Invariant 2: `Cordon` < `Drain` < `Stop` < `DeleteNode` < `Remove`, each at most once, per instance.
fn check_retirement_order(steps: &[Step]) {
    let mut last: BTreeMap<&str, u8> = BTreeMap::new();
    for step in steps {
        if let Some(rank) = retirement_rank(&step.action) {
            if let Some(&before) = last.get(step.instance.as_str()) {
                assert!(before < rank, "{}: {} out of order", step.instance, step.action.verb());
            }
            last.insert(&step.instance, rank);
        }
    }
}

/// Whether the plan waits for the instance (starting or unavailable within its timeout, or
/// unhealthy and held by `maxUnhealthy`) rather than count it as serving or replace it.
fn waited_for(pool: &PoolPlan, name: &str) -> bool {
    pool.instances
        .iter()
        .find(|i| i.name == name)
        .and_then(|i| i.health.as_ref())
        .is_some_and(|h| matches!(h.action, "waiting" | "held" | "resume"))
}

/// Invariant 6: instances leave in retirement order (not-up before up, then outdated before
/// current, then oldest first), and the ones kept are the newest current up instances, or
/// current instances that are waited for. Health: an instance is never retired for its health
/// within its timeout, nor at all while more of the pool are unhealthy than `maxUnhealthy`; an
/// outdated instance that is waited for is not retired yet either.
fn check_which_go(pool: &PoolPlan, world: &World, hash: &str, (with_nodes, idle): (bool, bool)) {
    let key = |name: &str| {
        let c = world.containers.iter().find(|c| c.name == name);
        let n = world.nodes.iter().find(|n| n.name == name);
        // Up as the world shows it, and not judged otherwise by the plan (starting, waited for,
        // unhealthy): what the planner counts as serving.
        let judged = pool.instances.iter().any(|i| i.name == name && i.health.is_some());
        let up = c.is_some_and(|c| crate::plan::is_up(c, n, with_nodes, idle)) && !judged;
        let current = c.is_some_and(|c| c.template_hash == hash);
        (up, current, c.map_or(i64::MIN, |c| c.created), name.to_owned())
    };
    let held = pool.unhealthy_held.is_some();
    for instance in &pool.instances {
        let note = instance.health.as_ref();
        if note.is_some_and(|h| h.action == "replace" && h.state == "unhealthy") {
            // maxUnhealthy protects instances that served, of the current template, only.
            let c = world.containers.iter().find(|c| c.name == instance.name.as_str());
            let served_current = c.is_some_and(|c| c.template_hash == hash && c.came_up.is_some());
            assert!(
                !held || !served_current,
                "{} is replaced although maxUnhealthy holds the pool",
                instance.name
            );
            assert_eq!(instance.fate, Fate::Retire, "{} is unhealthy and kept", instance.name);
        }
        if let Some(h) = note.filter(|h| h.state != "unhealthy") {
            assert!(h.seconds.zip(h.timeout).is_none_or(|(s, t)| s < t), "{}: {h:?}", instance.name);
            match h.action {
                "waiting" => {}
                // Finished by an `await-ready` step of this plan, and kept.
                "resume" => {
                    assert_eq!(instance.fate, Fate::Keep, "{}", instance.name);
                    let resumed = pool.steps.iter().any(|s| {
                        s.instance == instance.name && matches!(s.action, Action::AwaitReady { .. })
                    });
                    assert!(resumed, "{} is resumed without an await-ready", instance.name);
                }
                // A starting instance that is outdated, or one more than `replicas`: it never
                // served.
                "replace" => assert!(
                    h.state == "starting" && instance.fate == Fate::Retire,
                    "{}: {h:?}",
                    instance.name
                ),
                other => panic!("{}: action {other}", instance.name),
            }
        }
        // Waited for and retired: only a current instance of more than `replicas`, and never
        // one that `maxUnhealthy` holds.
        if waited_for(pool, &instance.name) && instance.fate == Fate::Retire {
            assert!(key(&instance.name).1, "outdated {} retired while it is waited for", instance.name);
            assert_ne!(note.map(|h| h.action), Some("held"), "{} is held and retired", instance.name);
        }
    }
    let mut order: Vec<&str> = Vec::new();
    for step in pool.steps.iter().filter(|s| s.action.is_retirement()) {
        if !order.contains(&step.instance.as_str()) {
            order.push(&step.instance);
        }
    }
    for pair in order.windows(2) {
        assert!(key(pair[0]) <= key(pair[1]), "{} retired before {}", pair[0], pair[1]);
    }
    for kept in pool.instances.iter().filter(|i| i.fate == Fate::Keep && !waited_for(pool, &i.name)) {
        let k = key(&kept.name);
        assert!(k.0 && k.1, "kept {} is not a current up instance", kept.name);
        for gone in pool.instances.iter().filter(|i| i.fate == Fate::Retire) {
            let g = key(&gone.name);
            if g.0 && g.1 {
                assert!((g.2, &g.3) < (k.2, &k.3), "retired {} is newer than kept {}", gone.name, kept.name);
            }
        }
    }
}

/// Invariant 3, step by step in the simulated world; returns the world afterwards.
fn execute_checking_capacity(plan: &Plan, world: &World, spec: &PoolArgs) -> World {
    let (r, s, u) = (count(spec.replicas), count(spec.surge), count(spec.unavailable));
    let mut sim = SimWorld::new(world.clone());
    sim.scope = Some(plan.origin.scope());
    let max_alive = (r + s).max(sim.alive(spec.name));
    let idle = spec.bootstrap == 0;
    let healthy = sim.up(spec.name, spec.nodes, idle) >= r;
    for (pool, step) in plan.steps() {
        sim.apply_step(&pool.name, step);
        let (alive, up) = (sim.alive(spec.name), sim.up(spec.name, spec.nodes, idle));
        assert!(
            alive <= max_alive,
            "after {} {}: {alive} containers > {max_alive}",
            step.action.verb(),
            step.instance
        );
        if healthy {
            assert!(up + u >= r, "after {} {}: {up} up < {r} - {u}", step.action.verb(), step.instance);
        }
    }
    sim.world
}

// ---------------------------------------------------------------------------------------------
// Generated inputs

#[derive(Debug, Clone)]
struct GenInstance {
    current: bool,
    old_hash: usize,
    state: (ContainerState, Health),
    node: GenNode,
    created: i64,
    /// Its coming up was recorded.
    came_up: bool,
    /// Whatever is wrong with it began long ago (past every timeout), or a moment ago.
    long_ago: bool,
}

/// The observation's clock in generated worlds: "a moment ago" is a few seconds before it,
/// "long ago" a day.
const NOW: i64 = 100_000;

#[derive(Debug, Clone, Copy)]
enum GenNode {
    Ready,
    NotReady,
    Missing,
    Cordoned,
}

#[derive(Debug, Clone)]
struct Case {
    replicas: i64,
    surge: i64,
    unavailable: i64,
    nodes: bool,
    bootstrap: usize,
    instances: Vec<GenInstance>,
    orphans: usize,
    undeclared: usize,
    foreign: usize,
    prune: bool,
    /// The containers were created as Nodes (cluster labels), whatever the spec says now.
    labelled: bool,
}

fn gen_instance() -> impl Strategy<Value = GenInstance> {
    let state = prop_oneof![
        4 => Just((ContainerState::Running, Health::None)),
        1 => Just((ContainerState::Running, Health::Unhealthy)),
        1 => Just((ContainerState::Running, Health::Starting)),
        1 => Just((ContainerState::Exited, Health::None)),
        1 => Just((ContainerState::Created, Health::None)),
    ];
    let node = prop_oneof![
        4 => Just(GenNode::Ready),
        1 => Just(GenNode::NotReady),
        1 => Just(GenNode::Missing),
        1 => Just(GenNode::Cordoned),
    ];
    let came_up = prop_oneof![4 => Just(true), 1 => Just(false)];
    (any::<bool>(), 0..3usize, state, node, 0..20i64, came_up, any::<bool>()).prop_map(
        |(current, old_hash, state, node, created, came_up, long_ago)| GenInstance {
            current,
            old_hash,
            state,
            node,
            created,
            came_up,
            long_ago,
        },
    )
}

fn gen_case() -> impl Strategy<Value = Case> {
    (
        (0..8i64, 0..3i64, 0..3i64).prop_filter("maxSurge + maxUnavailable > 0", |(_, s, u)| s + u > 0),
        any::<bool>(),
        0..3usize,
        prop::collection::vec(gen_instance(), 0..10),
        (0..3usize, 0..3usize, 0..3usize, any::<bool>(), any::<bool>()),
    )
        .prop_map(
            |(
                (replicas, surge, unavailable),
                nodes,
                bootstrap,
                instances,
                (orphans, undeclared, foreign, prune, labelled),
            )| {
                Case {
                    replicas,
                    surge,
                    unavailable,
                    nodes,
                    bootstrap,
                    instances,
                    orphans,
                    undeclared,
                    foreign,
                    prune,
                    labelled,
                }
            },
        )
}

impl Case {
    /// The same case, but every instance serving and at least `replicas` of them: the start the
    /// capacity invariant speaks of.
    fn healthy(mut self) -> Self {
        for g in &mut self.instances {
            (g.state, g.node, g.came_up) = ((ContainerState::Running, Health::None), GenNode::Ready, true);
        }
        self.replicas = self.replicas.min(i64::try_from(self.instances.len()).expect("a few instances"));
        self
    }

    fn spec(&self) -> PoolArgs {
        PoolArgs {
            replicas: self.replicas,
            surge: self.surge,
            unavailable: self.unavailable,
            nodes: self.nodes,
            bootstrap: self.bootstrap,
            ..PoolArgs::new("workers", 0)
        }
    }

    fn world(&self, hash: &str) -> World {
        let mut world = World { now: NOW, listed: listed(), ..World::default() };
        for (i, g) in self.instances.iter().enumerate() {
            let h = if g.current { hash.to_owned() } else { format!("old{}", g.old_hash) };
            let name = format!("workers-{}-i{i}", &h[..4]);
            // Created a day ago, or a moment ago; the order among instances is `created`'s.
            let created = if g.long_ago { g.created } else { NOW - 30 + g.created };
            let trouble_since = if g.long_ago { 0 } else { NOW - 5 };
            let mut c = container(&name, "workers", &h, created);
            if self.labelled {
                c = labelled(c);
            }
            (c.state, c.health) = g.state;
            c.came_up = g.came_up.then_some(created);
            c.since = Some(trouble_since);
            world.containers.push(c);
            let mut n = node(&name, "workers");
            match g.node {
                GenNode::Ready => {}
                GenNode::NotReady => {
                    n.ready = false;
                    n.conditions = vec![crate::model::NodeCondition::ready("Unknown", trouble_since)];
                }
                GenNode::Cordoned => n.unschedulable = true,
                GenNode::Missing => continue,
            }
            world.pods.push(pod(&format!("app-{i}"), &name, Some("ReplicaSet")));
            world.nodes.push(n);
        }
        for i in 0..self.orphans {
            world.nodes.push(node(&format!("workers-orphan-{i}"), "workers"));
        }
        for i in 0..self.undeclared {
            let name = format!("gone-x-{i}");
            let c = container(&name, "gone", "cafe", 1);
            world.containers.push(if self.labelled { labelled(c) } else { c });
            // Every other Node registered; the rest are still to come (or never will).
            if self.labelled && i % 2 == 0 {
                world.nodes.push(node(&name, "gone"));
                world.pods.push(pod(&format!("gone-{i}"), &name, Some("ReplicaSet")));
            }
        }
        for i in 0..self.foreign {
            let mut c = container(&format!("theirs-x-{i}"), "theirs", "beef", 1);
            c.scope = Some(other_origin().scope());
            world.containers.push(c);
        }
        world
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn plans_keep_the_design_invariants(case in gen_case()) {
        let spec = case.spec();
        let dp = spec.build();
        let hash = dp.template_hash.clone();
        let desired = desired(vec![dp]);
        let world = case.world(&hash);
        let options = PlanOptions { prune: case.prune, ..PlanOptions::default() };
        let plan = plan(&desired, &world, options.clone());

        for pool in &plan.pools {
            check_creation_first(&pool.steps);
            check_retirement_order(&pool.steps);
        }
        check_which_go(pool_plan(&plan, "workers"), &world, &hash, (case.nodes, case.bootstrap == 0));
        prop_assert!(plan.pools.iter().all(|p| p.name != "theirs"), "another source's pool was planned");
        if let Some(gone) = plan.pools.iter().find(|p| p.name == "gone") {
            prop_assert_eq!(gone.status, if case.prune { PoolStatus::Pruned } else { PoolStatus::Undeclared });
            prop_assert_eq!(gone.steps.is_empty(), !case.prune);
            // Instances created as Nodes never lose their Node steps with their pool's spec.
            if case.prune && case.labelled {
                for i in 0..case.undeclared {
                    let name = format!("gone-x-{i}");
                    let has = |verb: &str| gone.steps.iter().any(|s| s.instance == name && s.action.verb() == verb);
                    prop_assert!(has("delete-node"), "{name}: no delete-node");
                    prop_assert_eq!(has("drain"), i % 2 == 0, "{}: drain only when its Node is observed", name);
                }
            }
        }

        // Invariants 3 and 4: execute, checking capacity after every step, then plan again:
        // nothing is left to do, and the pool has its replicas, unless instances that are waited
        // for hold the rollout up.
        let after = execute_checking_capacity(&plan, &world, &spec);
        let mut again = crate::plan::plan(&desired, &after, options.clone());
        // maxUnhealthy counted outdated instances that are gone now: the hold may lift, and
        // what it held up (the held instances, the rollout they blocked) takes one more plan.
        let held = pool_plan(&plan, "workers").instances.iter().any(|i| i.health.as_ref().is_some_and(|h| h.action == "held"));
        if held && again.has_changes() {
            let after = execute_checking_capacity(&again, &after, &spec);
            again = crate::plan::plan(&desired, &after, options.clone());
        }
        prop_assert!(!again.has_changes(), "not converged: {:#?}", again.steps().collect::<Vec<_>>());
        let workers = pool_plan(&again, "workers");
        let waiting = workers.instances.iter().filter(|i| waited_for(workers, &i.name)).count();
        if waiting == 0 {
            prop_assert_eq!(workers.instances.len(), count(case.replicas));
        }

        // Planning is a function: the same inputs give the same plan.
        prop_assert_eq!(crate::plan::plan(&desired, &world, options), plan);
    }

    #[test]
    fn an_open_deny_window_over_every_reason_retires_no_instance_a_container_serves_or_did(case in gen_case()) {
        let spec = case.spec();
        let mut dp = spec.build();
        dp.pool.spec.disruption.windows = vec![crate::spec::DisruptionWindow {
            kind: crate::spec::WindowKind::Deny,
            schedule: "* * * * *".to_owned(),
            duration: crate::spec::Duration::from_secs(3600),
            time_zone: None,
            reasons: Vec::new(),
        }];
        let world = case.world(&dp.template_hash);
        let plan = plan(&desired(vec![dp]), &world, PlanOptions { prune: case.prune, ..PlanOptions::default() });
        let workers = pool_plan(&plan, "workers");
        check_creation_first(&workers.steps);
        check_retirement_order(&workers.steps);
        // Only an orphan Node's cleanup disrupts nothing a window governs.
        for i in workers.instances.iter().filter(|i| i.fate == Fate::Retire) {
            prop_assert_eq!(i.container, "missing", "{} retired under a deny window", i.name);
        }
        execute_checking_capacity(&plan, &world, &spec);
    }

    #[test]
    fn a_healthy_pool_keeps_its_capacity(case in gen_case().prop_map(Case::healthy)) {
        let spec = case.spec();
        let dp = spec.build();
        let world = case.world(&dp.template_hash);
        prop_assert!(SimWorld::new(world.clone()).up("workers", case.nodes, case.bootstrap == 0) >= count(case.replicas));
        let plan = plan(&desired(vec![dp]), &world, PlanOptions { prune: case.prune, ..PlanOptions::default() });
        execute_checking_capacity(&plan, &world, &spec);
    }

    #[test]
    fn a_converged_world_plans_no_steps(replicas in 0..8usize, nodes: bool, created in prop::collection::vec(0..50i64, 8)) {
        let spec = PoolArgs { nodes, ..PoolArgs::new("workers", i64::try_from(replicas).unwrap()) };
        let dp = spec.build();
        let mut world = World::default();
        for (i, at) in created.iter().take(replicas).enumerate() {
            let name = format!("workers-{i}");
            world.containers.push(container(&name, "workers", &dp.template_hash, *at));
            if nodes {
                world.nodes.push(node(&name, "workers"));
            }
        }
        let plan = plan(&desired(vec![dp]), &world, PlanOptions { prune: true, ..PlanOptions::default() });
        prop_assert!(!plan.has_changes());
        prop_assert_eq!(plan.summary.unchanged, replicas);
        prop_assert!(text(&plan).ends_with("No changes. The world matches the source.\n"));
    }
}

// ---------------------------------------------------------------------------------------------
// Scenarios

#[test]
fn a_new_pool_is_created_in_one_surge_batch() {
    let dp = PoolArgs { bootstrap: 2, ..PoolArgs::new("web", 2) }.build();
    let plan = plan(&desired(vec![dp]), &World::default(), PlanOptions::default());
    let web = pool_plan(&plan, "web");
    assert_eq!(web.status, PoolStatus::New);
    let v: Vec<&str> = verbs(web).iter().map(|(verb, _)| *verb).collect();
    assert_eq!(v, ["create", "create", "bootstrap", "bootstrap", "await-ready", "await-ready"]);
    assert!(web.steps.iter().all(|s| s.batch == 1));
    assert!(web.steps[0].instance.starts_with(&format!("web-{}-", web.template_hash.as_deref().unwrap())));
    assert_ne!(web.steps[0].instance, web.steps[1].instance);
    assert_eq!(plan.summary.create, 2);
}

/// A template resolved from `copyFrom` is planned as a written one: the plan names the source,
/// and a copied setting that changed (the source node recreated) is a template change, in the
/// diff like any other.
#[test]
fn copied_settings_are_planned_and_shown_like_written_ones() {
    let mut dp = PoolArgs::new("web", 1).build();
    dp.pool.spec.template.copy_from = Some(crate::spec::CopyFrom { container: "dev-worker".to_owned() });
    let before = crate::spec::canonical_template(&dp.pool.spec);
    let old_hash = crate::spec::template_hash(&dp.pool.spec);
    let copied = crate::spec::Template {
        env: BTreeMap::from([("HTTP_PROXY".to_owned(), crate::spec::EnvValue::plain("http://proxy:3128"))]),
        ..crate::spec::Template::default()
    };
    dp.pool.spec.template = crate::spec::merge(&dp.pool.spec.template, &copied);
    dp.template_hash = crate::spec::template_hash(&dp.pool.spec);
    dp.copied_from = Some(crate::spec::CopiedFrom {
        container: "dev-worker".to_owned(),
        id: "3f9a1c2b4d5e6f7a8b9c".to_owned(),
    });
    assert_ne!(dp.template_hash, old_hash, "the hash covers what was copied");
    let old = crate::model::Container { template: Some(before), ..container("web-a", "web", &old_hash, 1) };
    let world = World { containers: vec![old], ..World::default() };
    let plan = plan(&desired(vec![dp]), &world, PlanOptions::default());
    assert_eq!(pool_plan(&plan, "web").copy_from.as_deref(), Some("dev-worker (3f9a1c2b4d5e)"));
    let text = text(&plan);
    assert!(text.contains("\n  copyFrom dev-worker (3f9a1c2b4d5e)\n"), "{text}");
    assert!(text.contains("HTTP_PROXY"), "the diff shows the copied setting: {text}");
    assert_eq!(plan.summary.create, 1);
}

#[test]
fn scale_up_adds_instances_and_keeps_the_others() {
    let dp = PoolArgs::new("web", 3).build();
    let h = dp.template_hash.clone();
    let world = World { containers: vec![container("web-a", "web", &h, 1)], ..World::default() };
    let plan = plan(&desired(vec![dp]), &world, PlanOptions::default());
    let web = pool_plan(&plan, "web");
    assert_eq!(web.status, PoolStatus::Existing);
    assert!(retired(web).is_empty());
    assert_eq!(plan.summary.create, 2);
    assert_eq!(plan.summary.unchanged, 1);
}

#[test]
fn scale_down_retires_the_oldest_first() {
    let dp = PoolArgs::new("web", 1).build();
    let h = dp.template_hash.clone();
    let world = world_of(vec![
        container("web-b", "web", &h, 20),
        container("web-a", "web", &h, 30),
        container("web-c", "web", &h, 10),
    ]);
    let plan = plan(&desired(vec![dp]), &world, PlanOptions::default());
    let web = pool_plan(&plan, "web");
    assert_eq!(verbs(web), [("stop", "web-c"), ("remove", "web-c"), ("stop", "web-b"), ("remove", "web-b")]);
    assert_eq!(retired(web), ["web-b", "web-c"]);
}

/// A suspended pool (`poolctl suspend`, recorded in the world) is neither rolled out nor
/// remediated: its steps are held back and shown with who suspended it, while the pool beside
/// it rolls; `apply --ignore-suspend` rolls it all the same.
#[test]
fn a_suspended_pool_holds_its_rollout_and_remediation_back_and_says_who_and_why() {
    let web = PoolArgs::new("web", 2).build();
    let api = PoolArgs::new("api", 1).build();
    let mut world = world_of(vec![
        container("web-old-1", "web", "0ld", 1),
        // Exited: remediation would replace it.
        Container { state: ContainerState::Exited, ..container("web-old-2", "web", "0ld", 2) },
        container("api-old-1", "api", "0ld", 1),
    ]);
    let suspension = crate::model::Suspension {
        by: "ann@box".to_owned(),
        at: 1_700_000_000,
        reason: Some("incident".into()),
    };
    world.suspended.insert("web".to_owned(), suspension.clone());
    let source = desired(vec![web, api]);
    let planned = plan(&source, &world, PlanOptions::default());
    let held = pool_plan(&planned, "web");
    assert!(held.steps.is_empty(), "{:?}", verbs(held));
    assert!(held.paused.as_ref().is_some_and(|h| !h.steps.is_empty()));
    assert_eq!(held.suspended.as_ref(), Some(&suspension));
    assert!(!pool_plan(&planned, "api").steps.is_empty(), "the other pool rolls");
    let shown = text(&planned);
    assert!(shown.contains("Pool web: 2 replicas"), "{shown}");
    assert!(shown.contains("suspended by ann@box at 2023-11-14T22:13:20Z: incident"), "{shown}");
    let json = serde_json::to_value(held).unwrap();
    assert_eq!(json["suspended"]["by"], "ann@box", "{json}");

    let ignored = plan(&source, &world, PlanOptions { ignore_suspend: true, ..PlanOptions::default() });
    let rolled = pool_plan(&ignored, "web");
    assert!(!rolled.steps.is_empty() && rolled.suspended.is_none());
}

#[test]
fn replacement_creates_one_then_retires_one_per_batch() {
    let dp = PoolArgs::new("web", 2).build();
    let world = World {
        containers: vec![container("web-old-1", "web", "0ld", 1), container("web-old-2", "web", "0ld", 2)],
        ..World::default()
    };
    let plan = plan(&desired(vec![dp]), &world, PlanOptions::default());
    let web = pool_plan(&plan, "web");
    let by_batch: Vec<(u32, &str)> = web.steps.iter().map(|s| (s.batch, s.action.verb())).collect();
    assert_eq!(
        by_batch,
        [
            (1, "create"),
            (1, "await-ready"),
            (1, "stop"),
            (1, "remove"),
            (2, "create"),
            (2, "await-ready"),
            (2, "stop"),
            (2, "remove")
        ]
    );
    assert_eq!(web.steps[2].instance, "web-old-1", "the oldest goes first");
    let change = web.template_change.as_ref().unwrap();
    assert_eq!(change.from_hash, "0ld");
    assert_eq!(change.old, "", "the old containers carry no template label");
    assert!(change.new.contains("image: busybox:latest"), "{}", change.new);
}

#[test]
fn max_unavailable_lets_old_instances_go_before_new_ones_exist() {
    let dp = PoolArgs { surge: 0, unavailable: 1, ..PoolArgs::new("web", 2) }.build();
    let world = World {
        containers: vec![container("web-old-1", "web", "0ld", 1), container("web-old-2", "web", "0ld", 2)],
        ..World::default()
    };
    let plan = plan(&desired(vec![dp]), &world, PlanOptions::default());
    let v: Vec<&str> = verbs(pool_plan(&plan, "web")).iter().map(|(verb, _)| *verb).collect();
    assert_eq!(v, ["stop", "remove", "create", "await-ready", "stop", "remove", "create", "await-ready"]);
}

#[test]
fn replicas_zero_retires_everything() {
    let dp = PoolArgs::new("web", 0).build();
    let h = dp.template_hash.clone();
    let world = World {
        containers: vec![container("web-a", "web", &h, 1), container("web-b", "web", "0ld", 2)],
        ..World::default()
    };
    let plan = plan(&desired(vec![dp]), &world, PlanOptions::default());
    let web = pool_plan(&plan, "web");
    assert_eq!(retired(web), ["web-a", "web-b"]);
    assert_eq!(plan.summary.create, 0);
    assert!(text(&plan).contains("Plan: 0 to create, 2 to retire, 0 unchanged."));
}

#[test]
fn an_exited_container_is_replaced_without_a_stop() {
    let dp = PoolArgs::new("web", 2).build();
    let h = dp.template_hash.clone();
    let mut dead = container("web-dead", "web", &h, 5);
    dead.state = ContainerState::Exited;
    let world = World { containers: vec![container("web-ok", "web", &h, 1), dead], ..World::default() };
    let plan = plan(&desired(vec![dp]), &world, PlanOptions::default());
    let web = pool_plan(&plan, "web");
    let v: Vec<&str> = verbs(web).iter().map(|(verb, _)| *verb).collect();
    assert_eq!(v, ["create", "await-ready", "remove"]);
    assert_eq!(web.steps[2].instance, "web-dead");
    assert_eq!(retired(web), ["web-dead"]);
}

#[test]
fn a_dead_instance_goes_first_to_make_room_for_the_surge() {
    // Three containers already fill replicas + maxSurge; the dead one costs no availability, so
    // it is retired before any up instance, and that lets the rollout start.
    let dp = PoolArgs::new("web", 2).build();
    let h = dp.template_hash.clone();
    let mut dead = container("web-dead", "web", &h, 5);
    dead.state = ContainerState::Exited;
    let world = World {
        containers: vec![
            container("web-old-1", "web", "0ld", 1),
            container("web-old-2", "web", "0ld", 2),
            dead,
        ],
        ..World::default()
    };
    let plan = plan(&desired(vec![dp]), &world, PlanOptions::default());
    let web = pool_plan(&plan, "web");
    assert_eq!(verbs(web)[0], ("remove", "web-dead"));
    assert_eq!(web.steps[0].batch, 1);
    assert_eq!(verbs(web)[1].0, "create");
    assert_eq!(retired(web), ["web-dead", "web-old-1", "web-old-2"]);
}

#[test]
fn an_undeclared_pool_is_kept_unless_pruned() {
    let world = World { containers: vec![container("gone-a", "gone", "cafe", 1)], ..World::default() };
    let empty = desired(Vec::new());

    let kept = plan(&empty, &world, PlanOptions { prune: false, ..PlanOptions::default() });
    let gone = pool_plan(&kept, "gone");
    assert_eq!(gone.status, PoolStatus::Undeclared);
    assert!(gone.steps.is_empty());
    assert!(text(&kept).contains("not removed: pass --prune to retire it"), "{}", text(&kept));
    // Nothing to do, and yet the world differs from the source: the summary says so.
    assert_eq!((kept.summary.undeclared, kept.summary.foreign), (1, 0));
    assert!(!kept.has_changes() && !kept.in_sync());
    assert!(
        text(&kept).ends_with(
            "No changes planned, but the world differs from the source; left alone: 1 pool no longer \
             declared (--prune retires it).\n"
        ),
        "{}",
        text(&kept)
    );

    let pruned = plan(&empty, &world, PlanOptions { prune: true, ..PlanOptions::default() });
    let gone = pool_plan(&pruned, "gone");
    assert_eq!(gone.status, PoolStatus::Pruned);
    assert!(text(&pruned).contains("Pool gone: no longer declared by the source; --prune retires it"));
    assert_eq!(verbs(gone), [("stop", "gone-a"), ("remove", "gone-a")]);
}

#[test]
fn a_pool_dropped_from_the_source_after_an_apply_is_undeclared() {
    let web = PoolArgs::new("web", 1).build();
    let first = plan(&desired(vec![web]), &World::default(), PlanOptions::default());
    let mut sim = SimWorld::new(World::default());
    sim.apply(&first);
    let after = plan(&desired(Vec::new()), &sim.world, PlanOptions::default());
    assert_eq!(pool_plan(&after, "web").status, PoolStatus::Undeclared);
}

#[test]
fn another_sources_pool_is_ignored() {
    let mut c = container("theirs-a", "theirs", "beef", 1);
    c.scope = Some(other_origin().scope());
    let world = World { containers: vec![c], ..World::default() };
    let plan = plan(&desired(Vec::new()), &world, PlanOptions { prune: true, ..PlanOptions::default() });
    assert!(plan.pools.is_empty());
    assert!(!plan.has_changes());
}

#[test]
fn an_orphan_node_is_deleted() {
    let dp = PoolArgs { nodes: true, ..PoolArgs::new("k", 1) }.build();
    let h = dp.template_hash.clone();
    let world = World {
        containers: vec![container("k-a", "k", &h, 1)],
        nodes: vec![node("k-a", "k"), node("k-orphan", "k")],
        listed: listed(),
        ..World::default()
    };
    let plan = plan(&desired(vec![dp]), &world, PlanOptions::default());
    let k = pool_plan(&plan, "k");
    assert_eq!(verbs(k), [("delete-node", "k-orphan")]);
    let orphan = k.instances.iter().find(|i| i.name == "k-orphan").unwrap();
    assert_eq!((orphan.container, orphan.fate), ("missing", Fate::Retire));
    assert_eq!(plan.summary.retire, 1);
}

/// Absence is not evidence, and ownership is proven: of the pool's Nodes whose containers are
/// not in view, only those whose container is provably gone, or whose kubelet has been silent
/// past the pool's timeout, are deleted; the rest are shown with why they are left alone.
#[test]
fn a_node_whose_container_is_out_of_view_or_not_poolctls_is_left_alone() {
    let dp = PoolArgs { nodes: true, ..PoolArgs::new("k", 1) }.build();
    let h = dp.template_hash.clone();
    let elsewhere = |name: &str| {
        let mut n = node(name, "k");
        n.reference.as_mut().unwrap().docker_host = "tcp://old-daemon:2376".into();
        n
    };
    // Labelled by hand over somebody else's container: no reference of poolctl's.
    let mut by_hand = node("dev-worker", "k");
    by_hand.reference = None;
    // Its daemon was not listed, but its kubelet has been silent for 6 minutes (timeout 5m).
    let mut silent = elsewhere("k-silent");
    silent.ready = false;
    silent.conditions = vec![crate::model::NodeCondition::ready("Unknown", 1000 - 360)];
    // Its daemon was not listed and it is Ready: its container may well run.
    let unseen = elsewhere("k-unseen");
    // Its daemon was not listed, NotReady for a minute only.
    let mut recent = elsewhere("k-recent");
    recent.ready = false;
    recent.conditions = vec![crate::model::NodeCondition::ready("False", 1000 - 60)];
    let world = World {
        now: 1000,
        containers: vec![container("k-a", "k", &h, 1)],
        nodes: vec![node("k-a", "k"), by_hand, silent, unseen, recent],
        listed: listed(),
        ..World::default()
    };
    let plan = plan(&desired(vec![dp]), &world, PlanOptions::default());
    let k = pool_plan(&plan, "k");
    assert_eq!(verbs(k), [("delete-node", "k-silent")]);
    let left = |name: &str| {
        let i = k.instances.iter().find(|i| i.name.as_str() == name).unwrap();
        assert_eq!(i.fate, Fate::Keep, "{name}");
        i.left.clone().unwrap_or_else(|| panic!("{name} is left alone with a reason"))
    };
    assert!(left("dev-worker").starts_with("not poolctl's"), "{}", left("dev-worker"));
    assert!(left("k-unseen").contains("out of view"), "{}", left("k-unseen"));
    assert!(left("k-recent").contains("out of view"), "{}", left("k-recent"));
    // Nothing left alone counts as serving: the pool still has its one current instance.
    assert_eq!(plan.summary.create, 0);
    let mut text = Vec::new();
    crate::plan::render_text(&plan, &mut text).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(text.contains("not poolctl's"), "{text}");
}

/// Each instance shows what proves it poolctl's: its container's ID and daemon as listed, and
/// its Node's reference; a Node without one gets it written with its labels.
#[test]
fn the_plan_shows_each_instances_proof_and_writes_a_missing_node_reference() {
    let dp = PoolArgs { nodes: true, ..PoolArgs::new("k", 1) }.build();
    let h = dp.template_hash.clone();
    let mut old = node("k-a", "k");
    old.reference = None;
    let world =
        World { containers: vec![container("k-a", "k", &h, 1)], nodes: vec![old], ..world_of(vec![]) };
    let desired = desired(vec![dp]);
    let plan = plan(&desired, &world, PlanOptions::default());
    let k = pool_plan(&plan, "k");
    let proof = &k.instances[0].proof;
    assert_eq!(proof.container.as_ref().map(|r| r.container_id.as_str()), Some("id-k-a"));
    assert_eq!(proof.node, None);
    assert_eq!(verbs(k), [("configure", "k-a")]);
    let Action::Configure(preview) = &k.steps[0].action else { unreachable!() };
    assert_eq!(preview.reference, proof.container);
    assert_eq!(preview.changes, [format!("+reference container id-k-a on {}", crate::testing::build::HOST)]);
    // Applied, the plan is empty: the reference converged like a label.
    let mut sim = SimWorld::new(world);
    sim.apply_step("k", &k.steps[0]);
    let again = crate::plan::plan(&desired, &sim.world, PlanOptions::default());
    assert!(pool_plan(&again, "k").steps.is_empty(), "{:?}", pool_plan(&again, "k").steps);
}

/// `docker container prune` deletes the up records (never-started containers). Instances that
/// look up all the same (their Node Ready, or nothing left to run in them) still count as
/// serving: a template change with `maxUnavailable: 0` retires one per new instance up, not all
/// at once.
#[test]
fn lost_up_records_never_let_a_rollout_spend_serving_capacity() {
    for nodes in [true, false] {
        let dp = PoolArgs { nodes, unavailable: 0, surge: 1, ..PoolArgs::new("w", 3) }.build();
        let pruned = |name: &str| crate::model::Container { came_up: None, ..container(name, "w", "0ld", 1) };
        let names = ["w-a", "w-b", "w-c"];
        let world = World {
            now: NOON,
            containers: names.iter().map(|n| pruned(n)).collect(),
            nodes: if nodes { names.iter().map(|n| node(n, "w")).collect() } else { Vec::new() },
            ..world_of(vec![])
        };
        let plan = plan(&desired(vec![dp]), &world, PlanOptions::default());
        let w = pool_plan(&plan, "w");
        let first: Vec<&str> = w
            .steps
            .iter()
            .filter(|s| s.batch == 1 && s.action.verb() == "stop")
            .map(|s| s.instance.as_str())
            .collect();
        assert_eq!(first, ["w-a"], "nodes: {nodes}: one old instance per new one up");
        assert!(w.instances.iter().all(|i| i.health.is_none()), "nodes: {nodes}: {:?}", w.instances);
    }
}

#[test]
fn a_node_instance_retires_in_the_safe_order() {
    let dp = PoolArgs { nodes: true, ..PoolArgs::new("k", 1) }.build();
    let world = World {
        containers: vec![container("k-old", "k", "0ld", 1)],
        nodes: vec![node("k-old", "k")],
        ..World::default()
    };
    let plan = plan(&desired(vec![dp]), &world, PlanOptions::default());
    let v: Vec<&str> = verbs(pool_plan(&plan, "k")).iter().map(|(verb, _)| *verb).collect();
    assert_eq!(v, ["create", "await-ready", "cordon", "drain", "stop", "delete-node", "remove"]);
    assert_eq!(pool_plan(&plan, "k").steps[1].action, Action::AwaitReady { node: true });
}

#[test]
fn a_cordoned_node_without_its_container_running_is_finished_off() {
    // What an apply killed mid-retirement leaves behind: cordoned Node, stopped container.
    let dp = PoolArgs { nodes: true, ..PoolArgs::new("k", 0) }.build();
    let mut c = container("k-old", "k", "0ld", 1);
    c.state = ContainerState::Exited;
    let mut n = node("k-old", "k");
    (n.ready, n.unschedulable, n.cordoned_by_poolctl) = (false, true, true);
    let world = World { containers: vec![c], nodes: vec![n], ..World::default() };
    let plan = plan(&desired(vec![dp]), &world, PlanOptions::default());
    let v: Vec<&str> = verbs(pool_plan(&plan, "k")).iter().map(|(verb, _)| *verb).collect();
    assert_eq!(v, ["drain", "delete-node", "remove"]);
}

#[test]
fn a_node_cordoned_by_someone_else_is_kept_and_left_cordoned() {
    // An operator cordoned a current instance by hand: it still counts as serving, and poolctl
    // neither replaces it for that nor undoes the cordon.
    let dp = PoolArgs { nodes: true, ..PoolArgs::new("k", 2) }.build();
    let h = dp.template_hash.clone();
    let mut theirs = node("k-a", "k");
    theirs.unschedulable = true;
    let world = World {
        containers: vec![container("k-a", "k", &h, 1), container("k-b", "k", &h, 2)],
        nodes: vec![theirs, node("k-b", "k")],
        ..World::default()
    };
    let plan = plan(&desired(vec![dp]), &world, PlanOptions::default());
    let k = pool_plan(&plan, "k");
    assert!(k.steps.is_empty(), "{:?}", verbs(k));
    let a = k.instances.iter().find(|i| i.name == "k-a").unwrap();
    assert_eq!((a.node, a.cordoned, a.retiring, a.fate), (Some("ready"), true, false, Fate::Keep));
    assert!(text(&plan).contains("up to date"));
}

#[test]
fn an_outdated_instance_under_a_foreign_cordon_is_retired_without_cordoning_again() {
    let dp = PoolArgs { nodes: true, ..PoolArgs::new("k", 1) }.build();
    let mut theirs = node("k-old", "k");
    theirs.unschedulable = true;
    let world = World {
        containers: vec![container("k-old", "k", "0ld", 1)],
        nodes: vec![theirs],
        ..World::default()
    };
    let plan = plan(&desired(vec![dp]), &world, PlanOptions::default());
    let v: Vec<&str> = verbs(pool_plan(&plan, "k")).iter().map(|(verb, _)| *verb).collect();
    assert_eq!(v, ["create", "await-ready", "drain", "stop", "delete-node", "remove"]);
    assert!(text(&plan).contains("  ready, cordoned (not by poolctl: left as is)"), "{}", text(&plan));
}

#[test]
fn a_current_instance_that_poolctl_cordoned_is_further_along_its_retirement() {
    // An apply that was scaling down was killed after the cordon: the next plan does not count
    // the instance as serving (it is on its way out) and finishes it, without a new cordon.
    let dp = PoolArgs { nodes: true, ..PoolArgs::new("k", 1) }.build();
    let h = dp.template_hash.clone();
    let mut ours = node("k-a", "k");
    (ours.unschedulable, ours.cordoned_by_poolctl) = (true, true);
    let world = World {
        containers: vec![container("k-a", "k", &h, 1), container("k-b", "k", &h, 2)],
        nodes: vec![ours, node("k-b", "k")],
        ..World::default()
    };
    let plan = plan(&desired(vec![dp]), &world, PlanOptions::default());
    let k = pool_plan(&plan, "k");
    assert_eq!(verbs(k), [("drain", "k-a"), ("stop", "k-a"), ("delete-node", "k-a"), ("remove", "k-a")]);
    let a = k.instances.iter().find(|i| i.name == "k-a").unwrap();
    assert!(a.cordoned && a.retiring);
    assert!(text(&plan).contains("  ready, cordoned by poolctl (retiring)"), "{}", text(&plan));
}

#[test]
fn a_container_whose_node_never_appeared_is_a_failed_instance() {
    let mut dp = PoolArgs { nodes: true, ..PoolArgs::new("k", 1) }.build();
    // One of one: above maxUnhealthy's default 40% (rounded down: 0), which would hold it.
    dp.pool.spec.health.max_unhealthy = crate::spec::IntOrPercent::Count(1);
    let h = dp.template_hash.clone();
    // Its Node is still missing 10m after the container came up: nodeStartupTimeout is over.
    let world = World { now: 1 + 600, containers: vec![container("k-a", "k", &h, 1)], ..World::default() };
    let plan = plan(&desired(vec![dp]), &world, PlanOptions::default());
    let k = pool_plan(&plan, "k");
    let a = k.instances.iter().find(|i| i.name == "k-a").unwrap();
    assert_eq!((a.node, a.fate), (Some("missing"), Fate::Retire));
    assert_eq!(
        a.health.as_ref().map(|h| (h.state, h.reason.as_str(), h.action)),
        Some(("unhealthy", "no Node", "replace"))
    );
    // Replaced: there is no Node to cordon or drain, but its kubelet may still register one
    // after this observation, so the Node is deleted all the same (a missing one is no error).
    let v: Vec<&str> = verbs(k).iter().map(|(verb, _)| *verb).collect();
    assert_eq!(v, ["create", "await-ready", "stop", "delete-node", "remove"]);
    assert!(text(&plan).lines().any(|l| l.contains("k-a") && l.contains("  missing  ")), "{}", text(&plan));
}

#[test]
fn a_pruned_pool_of_nodes_is_cordoned_drained_and_deleted() {
    // The pool's file is gone, and with it the `node:` section: the containers' cluster labels
    // say they are Nodes.
    let world = World {
        containers: vec![
            labelled(container("gone-a", "gone", "cafe", 1)),
            labelled(container("gone-b", "gone", "cafe", 2)),
        ],
        nodes: vec![node("gone-a", "gone")],
        pods: vec![pod("web-1", "gone-a", Some("ReplicaSet"))],
        ..World::default()
    };
    let plan = plan(&desired(Vec::new()), &world, PlanOptions { prune: true, ..PlanOptions::default() });
    let gone = pool_plan(&plan, "gone");
    assert_eq!(gone.status, PoolStatus::Pruned);
    assert_eq!(
        verbs(gone),
        [
            // Its Node was not observed: nothing to cordon or drain, but it may register yet.
            // Not serving, it goes first.
            ("stop", "gone-b"),
            ("delete-node", "gone-b"),
            ("remove", "gone-b"),
            ("cordon", "gone-a"),
            ("drain", "gone-a"),
            ("stop", "gone-a"),
            ("delete-node", "gone-a"),
            ("remove", "gone-a"),
        ]
    );
    let Action::Drain(preview) = &gone.steps[4].action else { panic!("not a drain: {:?}", gone.steps[4]) };
    assert_eq!(preview.evict[0].pod, "default/web-1");
    let b = gone.instances.iter().find(|i| i.name == "gone-b").unwrap();
    assert_eq!(b.node, Some("missing"));

    // Without --prune, the same pool is shown with its Nodes and left alone.
    let kept = crate::plan::plan(
        &desired(Vec::new()),
        &world,
        PlanOptions { prune: false, ..PlanOptions::default() },
    );
    let gone = pool_plan(&kept, "gone");
    assert!(gone.steps.is_empty());
    assert_eq!(gone.instances[0].node, Some("ready"));
}

#[test]
fn a_pool_that_lost_its_node_section_still_retires_its_nodes_safely() {
    // The user deleted `node:` and changed the template in one edit: the new instances are
    // plain containers, the old ones are still Nodes with pods on them.
    let dp = PoolArgs::new("k", 1).build();
    let world = World {
        containers: vec![labelled(container("k-old", "k", "0ld", 1))],
        nodes: vec![node("k-old", "k"), node("k-orphan", "k")],
        pods: vec![pod("web-1", "k-old", Some("ReplicaSet"))],
        listed: listed(),
        ..World::default()
    };
    let plan = plan(&desired(vec![dp]), &world, PlanOptions::default());
    let k = pool_plan(&plan, "k");
    let v: Vec<&str> = verbs(k).iter().map(|(verb, _)| *verb).collect();
    // The orphan Node (no container) serves nothing and goes first.
    assert_eq!(
        v,
        ["create", "await-ready", "delete-node", "cordon", "drain", "stop", "delete-node", "remove"]
    );
    assert_eq!(k.steps[1].action, Action::AwaitReady { node: false }, "creation follows the spec");
    assert_eq!(k.steps[2].instance, "k-orphan");
    assert!(k.steps[3..].iter().all(|s| s.instance == "k-old"));

    // Once the old instances are gone, the new ones are plain containers again.
    let mut sim = SimWorld::new(world);
    sim.apply(&plan);
    let again =
        crate::plan::plan(&desired(vec![PoolArgs::new("k", 1).build()]), &sim.world, PlanOptions::default());
    assert!(!again.has_changes());
    assert_eq!(pool_plan(&again, "k").instances[0].node, None);
}

#[test]
fn a_container_without_cluster_labels_in_a_plain_pool_is_only_stopped_and_removed() {
    let dp = PoolArgs::new("w", 0).build();
    let world = World { containers: vec![container("w-a", "w", "0ld", 1)], ..World::default() };
    let plan = plan(&desired(vec![dp]), &world, PlanOptions::default());
    assert_eq!(verbs(pool_plan(&plan, "w")), [("stop", "w-a"), ("remove", "w-a")]);
}

/// A pool of Nodes in the middle of a template change, with pods of every kind on the old Node,
/// and budgets that select them by labels and by expressions.
fn drain_world() -> (Desired, World) {
    let dp = PoolArgs { nodes: true, image: "kindest/node:v1.31.0", ..PoolArgs::new("workers", 1) }.build();
    let mut old = container("workers-1a2b3c4d5e-k2x9p", "workers", "1a2b3c4d5e", 1);
    let mut old_spec = dp.pool.spec.clone();
    old_spec.template.image = "kindest/node:v1.30.0".to_owned();
    old.template = Some(crate::spec::canonical_template(&old_spec));
    let node_name = old.name.clone();
    let mut mirror = pod("etcd-static", &node_name, Some("Node"));
    mirror.mirror = true;
    let mut done = pod("job-done", &node_name, Some("Job"));
    done.finished = true;
    let mut cache = pod("cache-0", &node_name, Some("StatefulSet"));
    cache.empty_dir = true;
    let mut orphan = pod("logs-x2", &node_name, Some("DaemonSet"));
    orphan.orphaned = true;
    let mut shared = pod("queue-0", &node_name, Some("StatefulSet"));
    shared.labels.insert("tier".to_owned(), "shared".to_owned());
    let world = World {
        now: 0,
        containers: vec![old],
        nodes: vec![node(&node_name, "workers")],
        pods: vec![
            pod("web-7d9f", &node_name, Some("ReplicaSet")),
            pod("api-5c1b", &node_name, Some("ReplicaSet")),
            pod("proxy-x1", &node_name, Some("DaemonSet")),
            pod("solo", &node_name, None),
            pod("web-elsewhere", "another-node", Some("ReplicaSet")),
            mirror,
            done,
            cache,
            orphan,
            shared,
        ],
        pdbs: vec![
            pdb("web", &[("app", "web")], &[], 0),
            pdb("cache", &[("app", "cache")], &[], 1),
            // Selected by expressions only: blocks the api pod.
            pdb("api", &[], &[("app", "In", &["api", "api-canary"]), ("track", "NotIn", &["canary"])], 0),
            // Both select queue-0: the API server refuses to evict it.
            pdb("queue", &[("app", "queue")], &[], 1),
            pdb("shared", &[], &[("tier", "Exists", &[])], 1),
        ],
        ..World::default()
    };
    (desired(vec![dp]), world)
}

fn the_drain(plan: &Plan) -> &crate::plan::DrainPreview {
    pool_plan(plan, "workers")
        .steps
        .iter()
        .find_map(|s| match &s.action {
            Action::Drain(preview) => Some(preview),
            _ => None,
        })
        .expect("a drain step")
}

fn show(pods: &[crate::plan::PodRef]) -> Vec<String> {
    pods.iter().map(|p| format!("{} {:?} {:?} {:?}", p.pod, p.owner, p.note, p.pdbs)).collect()
}

#[test]
fn the_drain_preview_lists_evictions_skips_and_blocking_pdbs() {
    let (desired, world) = drain_world();
    let plan = plan(&desired, &world, PlanOptions::default());
    let drain = the_drain(&plan);
    assert_eq!(
        show(&drain.evict),
        [
            r#"default/api-5c1b Some("ReplicaSet") None ["default/api"]"#,
            r#"default/cache-0 Some("StatefulSet") Some("emptyDir data will be lost") ["default/cache"]"#,
            r#"default/logs-x2 Some("DaemonSet") Some("its DaemonSet is gone: will be lost") []"#,
            r#"default/queue-0 Some("StatefulSet") Some("under PDBs default/queue and default/shared: the API server refuses to evict it") ["default/queue", "default/shared"]"#,
            r#"default/solo None Some("no controller: will be lost") []"#,
            r#"default/web-7d9f Some("ReplicaSet") None ["default/web"]"#,
        ]
    );
    assert_eq!(
        show(&drain.skip),
        [
            r#"default/etcd-static Some("Node") Some("mirror pod") []"#,
            r#"default/job-done Some("Job") Some("finished") []"#,
            r#"default/proxy-x1 Some("DaemonSet") Some("DaemonSet") []"#,
        ]
    );
    assert_eq!(drain.blocking_pdbs, ["default/api", "default/web"]);
}

/// `timeoutAction: Proceed` or `Force` is said on the pool, in text and JSON, before anything
/// is drained; `Halt` (today's behaviour) and a plan that drains nothing say nothing.
#[test]
fn a_drain_timeout_action_that_goes_on_is_shown_on_the_pool_beforehand() {
    use crate::spec::DrainTimeoutAction::{Force, Halt, Proceed};
    let shown = |action, world: &World| {
        let (mut desired, _) = drain_world();
        desired.pools[0].pool.spec.drain.timeout_action = action;
        let plan = plan(&desired, world, PlanOptions::default());
        let mut json = Vec::new();
        render_json(&plan, &mut json).unwrap();
        let json: serde_json::Value = serde_json::from_slice(&json).unwrap();
        (text(&plan), json["pools"][0]["drain_timeout_action"].clone())
    };
    let (_, world) = drain_world();
    let (force, json) = shown(Force, &world);
    assert!(
        force.contains(
            "  a drain past its timeout (5m) deletes the pods left, whatever their PodDisruptionBudgets, and the \
             container stops once they are gone (drain.timeoutAction: Force)\n  Steps:"
        ),
        "{force}"
    );
    assert_eq!(json, serde_json::json!({"action": "Force", "drain_timeout": "5m"}));
    let (proceed, json) = shown(Proceed, &world);
    assert!(
        proceed.contains(
            "a drain past its timeout (5m) leaves the pods left on the Node and the container stops \
             (drain.timeoutAction: Proceed)"
        ),
        "{proceed}"
    );
    assert_eq!(json["action"], "Proceed");
    let (halt, json) = shown(Halt, &world);
    assert!(!halt.contains("past its timeout"), "{halt}");
    assert!(json.is_null(), "{json}");
    // Nothing retired, nothing drained: nothing to say.
    let converged = World { containers: Vec::new(), nodes: Vec::new(), ..world };
    let (nothing, json) = shown(Force, &converged);
    assert!(!nothing.contains("past its timeout"), "{nothing}");
    assert!(json.is_null(), "{json}");
}

#[test]
fn the_drain_preview_shows_what_the_pods_owners_asked_for_and_why() {
    let (desired, mut world) = drain_world();
    let node_name = world.nodes[0].name.clone();
    world.pods.retain(|p| p.name == "web-7d9f");
    let mut logs = pod("logs-0", &node_name, Some("StatefulSet"));
    logs.labels.insert("poolctl.dev/drain".to_owned(), "skip".to_owned());
    let mut job = pod("job-1", &node_name, Some("Job"));
    job.labels.insert("cluster.x-k8s.io/drain".to_owned(), "wait-completed".to_owned());
    // A budget that allows nothing for a pod the drain does not evict holds nothing up.
    job.labels.insert("app".to_owned(), "web".to_owned());
    let mut batch = pod("batch", &node_name, Some("Job"));
    batch.do_not_disrupt = true;
    world.pods.extend([logs, job, batch]);
    world.pdbs.retain(|b| b.name == "web");
    world.pods[0].labels.insert("app".to_owned(), "other".to_owned());
    let plan = plan(&desired, &world, PlanOptions::default());
    let drain = the_drain(&plan);
    assert_eq!(show(&drain.evict), [r#"default/web-7d9f Some("ReplicaSet") None []"#]);
    assert_eq!(
        show(&drain.wait),
        [
            r#"default/batch Some("Job") Some("annotated karpenter.sh/do-not-disrupt") []"#,
            r#"default/job-1 Some("Job") Some("labelled cluster.x-k8s.io/drain=wait-completed") []"#,
        ]
    );
    assert_eq!(
        show(&drain.skip),
        [r#"default/logs-0 Some("StatefulSet") Some("labelled poolctl.dev/drain=skip") []"#]
    );
    assert!(drain.blocking_pdbs.is_empty(), "{:?}", drain.blocking_pdbs);
    let shown = text(&plan);
    assert!(
        shown.contains("wait  default/job-1  (Job; labelled cluster.x-k8s.io/drain=wait-completed)"),
        "{shown}"
    );
    assert!(
        shown.contains("skip  default/logs-0  (StatefulSet; labelled poolctl.dev/drain=skip)"),
        "{shown}"
    );
    let json = serde_json::to_value(drain).unwrap();
    assert_eq!(json["wait"][1]["note"], "labelled cluster.x-k8s.io/drain=wait-completed");
}

#[test]
fn the_drain_preview_shows_each_pods_group_and_the_rule_that_decided_in_drain_order() {
    let (mut desired, mut world) = drain_world();
    world.pods.retain(|p| matches!(p.name.as_str(), "web-7d9f" | "api-5c1b" | "cache-0"));
    let rule = |app: &str, behavior, order| crate::spec::DrainRule {
        pods: Some(crate::spec::PodSelector {
            match_labels: std::collections::BTreeMap::from([("app".to_owned(), app.to_owned())]),
            ..Default::default()
        }),
        behavior,
        order,
        ..Default::default()
    };
    desired.pools[0].pool.spec.drain.rules = vec![
        rule("api", crate::spec::DrainBehavior::Drain, 2),
        rule("cache", crate::spec::DrainBehavior::Skip, 0),
    ];
    let plan = plan(&desired, &world, PlanOptions::default());
    let drain = the_drain(&plan);
    let order: Vec<(&str, i64, Option<&str>)> =
        drain.evict.iter().map(|p| (p.pod.as_str(), p.order, p.rule.as_deref())).collect();
    assert_eq!(order, [("default/web-7d9f", 0, None), ("default/api-5c1b", 2, Some("spec.drain.rules[0]"))]);
    assert_eq!(drain.skip[0].rule.as_deref(), Some("spec.drain.rules[1]"));
    let shown = text(&plan);
    assert!(shown.contains("evict default/api-5c1b  (ReplicaSet; spec.drain.rules[0]; group 2)"), "{shown}");
    assert!(
        shown.contains("skip  default/cache-0  (StatefulSet; behavior: Skip; spec.drain.rules[1])"),
        "{shown}"
    );
    let json = serde_json::to_value(drain).unwrap();
    assert_eq!(json["evict"][1]["order"], 2);
    assert_eq!(json["evict"][1]["rule"], "spec.drain.rules[0]");
    assert!(json["evict"][0].get("order").is_none(), "group 0 is the default: {json}");
}

#[test]
fn a_budget_under_which_a_pod_shares_another_does_not_count_as_blocking_for_it() {
    // The server refuses a pod under two budgets before it looks at either: the drain fails on
    // it rather than wait, so neither budget is reported as one the drain waits on.
    let (desired, mut world) = drain_world();
    for budget in &mut world.pdbs {
        budget.disruptions_allowed = i32::from(!matches!(budget.name.as_str(), "queue" | "shared"));
    }
    let plan = plan(&desired, &world, PlanOptions::default());
    assert!(the_drain(&plan).blocking_pdbs.is_empty(), "{:?}", the_drain(&plan).blocking_pdbs);
}

#[test]
fn a_pdb_with_an_empty_selector_covers_every_pod_of_its_namespace_and_one_without_none() {
    let (desired, mut world) = drain_world();
    world.pods.retain(|p| matches!(p.name.as_str(), "web-7d9f" | "solo"));
    world.pods.push(Pod { namespace: "other".to_owned(), ..pod("elsewhere", &world.nodes[0].name, None) });
    let everything =
        Pdb { selector: Some(crate::model::LabelSelector::default()), ..pdb("all", &[], &[], 0) };
    let nothing = Pdb { selector: None, ..pdb("none", &[], &[], 0) };
    world.pdbs = vec![everything, nothing];
    let plan = plan(&desired, &world, PlanOptions::default());
    let drain = the_drain(&plan);
    assert_eq!(
        show(&drain.evict),
        [
            r#"default/solo None Some("no controller: will be lost") ["default/all"]"#,
            r#"default/web-7d9f Some("ReplicaSet") None ["default/all"]"#,
            r#"other/elsewhere None Some("no controller: will be lost") []"#,
        ],
        "a pod without labels is covered too"
    );
    assert_eq!(drain.blocking_pdbs, ["default/all"]);
}

#[test]
fn new_names_avoid_every_name_in_use() {
    let dp = PoolArgs::new("web", 1).build();
    let first = plan(&desired(vec![dp.clone()]), &World::default(), PlanOptions::default());
    let taken = first.pools[0].steps[0].instance.clone();
    let world = World { nodes: vec![node(&taken, "other")], ..World::default() };
    let second = plan(&desired(vec![dp]), &world, PlanOptions::default());
    let name = &second.pools[0].steps[0].instance;
    assert_ne!(name, &taken);
    let suffix = name.rsplit('-').next().unwrap();
    assert_eq!(suffix.len(), 5);
    assert!(suffix.chars().all(|c| c.is_ascii_digit() || c.is_ascii_lowercase()), "{name}");
}

// ---------------------------------------------------------------------------------------------
// Health: a clock, a memory, limits

const NOON: i64 = 1_700_000_000;

/// A node pool `k` of `replicas`, current and up, each Node `Ready` with status `ready` since
/// `since` seconds before [`NOON`]; `conditions` replaces the default unhealthy conditions.
fn node_pool_at(replicas: usize, ready: &[(&str, i64)], timeout: Option<u64>) -> (Desired, World) {
    let mut dp = PoolArgs { nodes: true, ..PoolArgs::new("k", i64::try_from(replicas).unwrap()) }.build();
    if let Some(t) = timeout {
        for rule in &mut dp.pool.spec.health.unhealthy_conditions {
            rule.timeout = crate::spec::Duration::from_secs(t);
        }
    }
    let mut world = World { now: NOON, ..World::default() };
    for (i, (status, ago)) in ready.iter().enumerate() {
        let name = format!("k-{i}");
        world.containers.push(container(
            &name,
            "k",
            &dp.template_hash,
            NOON - 86_400 + i64::try_from(i).unwrap(),
        ));
        let mut n = node(&name, "k");
        n.ready = *status == "True";
        n.conditions = vec![crate::model::NodeCondition::ready(status, NOON - ago)];
        world.nodes.push(n);
    }
    (desired(vec![dp]), world)
}

#[test]
fn a_laptop_sleep_of_25s_replaces_nothing_and_says_so() {
    let (desired, world) = node_pool_at(3, &[("Unknown", 25), ("Unknown", 25), ("Unknown", 25)], None);
    let plan = plan(&desired, &world, PlanOptions::default());
    assert!(!plan.has_changes(), "{:#?}", plan.steps().collect::<Vec<_>>());
    assert!(!plan.in_sync(), "instances that do not serve are a difference");
    assert_eq!(plan.summary.unavailable, 3);
    let text = text(&plan);
    assert!(text.contains("k-0: unavailable: NotReady (Ready=Unknown) for 25s of 5m: waiting"), "{text}");
    assert!(text.contains("Instances: 3 waited for (not serving, within their timeout)."), "{text}");
    // Watch plans again when the first of them would turn unhealthy.
    assert_eq!(plan.next_check(), Some(NOON - 25 + 300));
}

#[test]
fn a_node_past_its_timeout_is_replaced_surge_first() {
    let (desired, world) = node_pool_at(3, &[("True", 600), ("Unknown", 20), ("True", 600)], Some(5));
    let plan = plan(&desired, &world, PlanOptions::default());
    let k = pool_plan(&plan, "k");
    let v: Vec<&str> = verbs(k).iter().map(|(verb, _)| *verb).collect();
    assert_eq!(v, ["create", "await-ready", "cordon", "drain", "stop", "delete-node", "remove"]);
    assert!(verbs(k)[2..].iter().all(|(_, i)| *i == "k-1"), "{:?}", verbs(k));
    assert_eq!(plan.summary.unhealthy, 1);
    let text = text(&plan);
    assert!(text.contains("k-1: unhealthy: Ready=Unknown for 20s (timeout 5s): replace"), "{text}");
}

#[test]
fn more_unhealthy_than_max_unhealthy_replaces_none_and_says_why() {
    let (desired, world) = node_pool_at(3, &[("Unknown", 60), ("False", 60), ("Unknown", 60)], Some(5));
    let plan = plan(&desired, &world, PlanOptions::default());
    assert!(!plan.has_changes(), "{:#?}", plan.steps().collect::<Vec<_>>());
    assert_eq!(plan.summary.unremediated, 3);
    assert!(!plan.in_sync());
    let k = pool_plan(&plan, "k");
    assert!(k.instances.iter().all(|i| i.fate == Fate::Keep));
    let text = text(&plan);
    assert!(
        text.contains(
            "3 of 3 instances unhealthy, above maxUnhealthy 40%: replacing none; the cluster, not the \
             instances, looks at fault"
        ),
        "{text}"
    );
    assert!(text.contains("k-1: unhealthy: Ready=False for 1m (timeout 5s): held"), "{text}");
    // 40% of 3 rounds down to 1, as Cluster API's: two of three are held, one is replaced.
    let (desired, world) = node_pool_at(3, &[("Unknown", 60), ("True", 60), ("Unknown", 60)], Some(5));
    assert_eq!(plan_of(&desired, &world).summary.unremediated, 2);
    let (desired, world) = node_pool_at(3, &[("Unknown", 60), ("True", 60), ("True", 60)], Some(5));
    assert_eq!(plan_of(&desired, &world).summary.unhealthy, 1);
}

#[test]
fn outdated_instances_that_turned_unhealthy_count_towards_max_unhealthy_and_still_go() {
    // A rollout under way in a sick cluster: k-0 and k-1 (outdated) and k-2 (current) all lost
    // their Nodes. Counted alone, k-2 (1 of 3) would be replaced; counted with the outdated two
    // (3 of 3, as Cluster API counts every Machine it targets), it is held.
    let (desired, mut world) = node_pool_at(3, &[("Unknown", 60), ("Unknown", 60), ("Unknown", 60)], Some(5));
    for c in world.containers.iter_mut().take(2) {
        c.template_hash = "old".into();
    }
    let plan = plan_of(&desired, &world);
    let k = pool_plan(&plan, "k");
    let fate = |name: &str| k.instances.iter().find(|i| i.name == *name).unwrap().fate;
    assert_eq!(fate("k-2"), Fate::Keep, "{:#?}", k.instances);
    assert_eq!(
        (fate("k-0"), fate("k-1")),
        (Fate::Retire, Fate::Retire),
        "outdated instances go whatever the count"
    );
    let shown = text(&plan);
    assert!(shown.contains("3 of 3 instances unhealthy, above maxUnhealthy 40%"), "{shown}");
    assert!(shown.contains("k-2: unhealthy: Ready=Unknown for 1m (timeout 5s): held"), "{shown}");

    // With only outdated instances unhealthy, nothing is held and nothing is said of it.
    world.nodes[2].ready = true;
    world.nodes[2].conditions = vec![crate::model::NodeCondition::ready("True", NOON - 60)];
    let plan = plan_of(&desired, &world);
    assert!(!text(&plan).contains("maxUnhealthy"), "{}", text(&plan));
}

fn plan_of(desired: &Desired, world: &World) -> Plan {
    plan(desired, world, PlanOptions::default())
}

#[test]
fn an_exited_container_is_replaced_at_once_a_restarting_one_after_its_timeout() {
    let dp = PoolArgs::new("w", 2).build();
    let h = dp.template_hash.clone();
    let mut exited = container("w-a", "w", &h, 1);
    exited.state = ContainerState::Exited;
    exited.status = "Exited (1) 2 seconds ago".into();
    let mut restarting = container("w-b", "w", &h, 2);
    restarting.state = ContainerState::Restarting;
    restarting.since = Some(NOON - 30);
    let world = World { now: NOON, containers: vec![exited, restarting], ..World::default() };
    let plan = plan(&desired(vec![dp]), &world, PlanOptions::default());
    let w = pool_plan(&plan, "w");
    assert_eq!(retired(w), ["w-a"], "the exited one goes; the one restarting for 30s of 1m waits");
    let text = text(&plan);
    assert!(text.contains("w-a: unhealthy: exited (1): replace"), "{text}");
    assert!(text.contains("w-b: unavailable: restarting for 30s of 1m: waiting"), "{text}");
}

#[test]
fn a_starting_instance_never_counts_as_serving_and_an_abandoned_or_stale_one_is_replaced() {
    // A run bootstraps a new instance (it holds the pool's lock): two old instances serve, the
    // new one has no up record yet.
    let dp = PoolArgs { bootstrap: 1, ..PoolArgs::new("w", 2) }.build();
    let h = dp.template_hash.clone();
    let mut new = container("w-new", "w", &h, NOON - 10);
    new.came_up = None;
    let world = World {
        now: NOON,
        containers: vec![container("w-o1", "w", "old", 1), container("w-o2", "w", "old", 2), new],
        locked: ["w".to_owned()].into(),
        ..World::default()
    };
    let desired = desired(vec![dp]);
    let retiring = |plan: &Plan| -> Vec<String> {
        let w = pool_plan(plan, "w");
        w.steps.iter().filter(|s| s.action.is_retirement()).map(|s| s.instance.to_string()).collect()
    };
    let plan = plan_of(&desired, &world);
    assert!(retiring(&plan).is_empty(), "no serving instance goes while one is starting: {plan:#?}");
    let text = text(&plan);
    assert!(text.contains("w-new: starting: coming up for 10s of "), "{text}");

    // The run was killed (its lock lapsed): nobody will finish the instance, which is replaced
    // at once, before any old one goes.
    let abandoned = World { locked: BTreeSet::new(), ..world.clone() };
    let plan = plan_of(&desired, &abandoned);
    assert_eq!(retiring(&plan).first().map(String::as_str), Some("w-new"), "{plan:#?}");
    assert!(text_of(&plan).contains("w-new: unhealthy: coming up, abandoned: replace"), "{}", text_of(&plan));

    // Created, not started yet: the run that holds the lock is about to start it (a second
    // apply looking at that moment must not call it unhealthy); once that run is gone, nobody
    // will.
    let mut created = world.clone();
    created.containers[2].state = ContainerState::Created;
    let plan = plan_of(&desired, &created);
    assert!(retiring(&plan).is_empty(), "{plan:#?}");
    assert!(
        text_of(&plan).contains("w-new: starting: created, not started yet for 10s of "),
        "{}",
        text_of(&plan)
    );
    let plan = plan_of(&desired, &World { locked: BTreeSet::new(), ..created });
    assert_eq!(retiring(&plan).first().map(String::as_str), Some("w-new"), "{plan:#?}");
    assert!(
        text_of(&plan).contains("w-new: unhealthy: created, never started: replace"),
        "{}",
        text_of(&plan)
    );

    // Still locked, past its bootstrap's timeout and containerTimeout: replaced all the same.
    let stale = World { now: NOON + 3600, ..world };
    assert_eq!(retiring(&plan_of(&desired, &stale)).first().map(String::as_str), Some("w-new"));
}

fn text_of(plan: &Plan) -> String {
    text(plan)
}

#[test]
fn an_outdated_instance_that_is_waited_for_holds_the_rollout_up() {
    // A rollout from `old` while the old instance's Node is NotReady for 25s: it is not retired
    // (nor counted as serving), so nothing is retired in its place.
    let (desired, mut world) = node_pool_at(1, &[("Unknown", 25)], None);
    world.containers[0].template_hash = "old".into();
    let plan = plan(&desired, &world, PlanOptions::default());
    let k = pool_plan(&plan, "k");
    let v: Vec<&str> = verbs(k).iter().map(|(verb, _)| *verb).collect();
    assert_eq!(v, ["create", "await-ready"], "the surge is made, the old one waits");
    assert!(retired(k).is_empty());
}

#[test]
fn a_rollout_that_makes_no_progress_stops_creating_and_says_degraded() {
    // A rollout to `new` began 11m ago; its last attempt exited without coming up; two old
    // instances serve.
    let dp = PoolArgs { hash: Some("new"), ..PoolArgs::new("w", 2) }.build();
    let mut failed = container("w-new-1", "w", "new", NOON - 60);
    (failed.came_up, failed.state, failed.status) =
        (None, ContainerState::Exited, "Exited (1) 1 minute ago".to_owned());
    let record = crate::model::RolloutRecord {
        template_hash: "new".into(),
        since: NOON - 660,
        rolled_back_from: None,
        progressed: None,
    };
    let world = World {
        now: NOON,
        containers: vec![container("w-old-1", "w", "old", 1), container("w-old-2", "w", "old", 2), failed],
        rollouts: [("w".to_owned(), record)].into(),
        ..World::default()
    };
    let desired = desired(vec![dp]);
    let plan = plan_of(&desired, &world);
    let w = pool_plan(&plan, "w");
    assert!(w.steps.iter().all(|s| !matches!(s.action, Action::Create { .. })), "{:?}", verbs(w));
    assert!(w.steps.iter().all(|s| s.instance != "w-old-1" && s.instance != "w-old-2"), "the old ones serve");
    let why = w.degraded.as_deref().expect("degraded");
    assert!(why.contains("no instance of template new came up within progressDeadline 10m"), "{why}");
    assert!(why.contains("last failure: w-new-1: Exited (1)"), "{why}");
    assert_eq!(plan.summary.degraded, 1);
    assert!(!plan.in_sync());
    assert!(
        text_of(&plan).contains("Pool w: 2 replicas, template new (was old), degraded"),
        "{}",
        text_of(&plan)
    );

    // Nor, with maxUnavailable 1, does it retire an old instance it will never replace.
    let mut retiring = desired.clone();
    retiring.pools[0].pool.spec.rollout.max_unavailable = crate::spec::IntOrPercent::Count(1);
    let w = pool_plan(&plan_of(&retiring, &world), "w").clone();
    assert!(w.steps.iter().all(|s| s.instance != "w-old-1" && s.instance != "w-old-2"), "{:?}", verbs(&w));
    assert!(w.degraded.is_some());

    // An explicit apply tries again: it creates, and its first creation starts the clock anew.
    let retry = PlanOptions { retry_stalled: true, ..PlanOptions::default() };
    let again = crate::plan::plan(&desired, &world, retry);
    let first = again.steps().find(|(_, s)| matches!(s.action, Action::Create { .. })).expect("a creation");
    assert!(matches!(first.1.action, Action::Create { starts_rollout: true, .. }), "{:?}", first.1);
    assert!(pool_plan(&again, "w").degraded.is_none());

    // A retirement step within the deadline is progress too (a drain a budget held for
    // longer than the deadline, say)...
    let mut retiring_slowly = world.clone();
    retiring_slowly.rollouts.get_mut("w").unwrap().progressed = Some(NOON - 30);
    assert!(pool_plan(&plan_of(&desired, &retiring_slowly), "w").degraded.is_none());
    // ...and a rollout another run is carrying out (it holds the lock) is that run's to judge.
    let mut busy = world.clone();
    busy.locked.insert("w".to_owned());
    assert!(pool_plan(&plan_of(&desired, &busy), "w").degraded.is_none());

    // Within the deadline of the last instance that came up, the rollout goes on.
    let mut progressing = world.clone();
    progressing.containers.push(crate::model::Container {
        came_up: Some(NOON - 30),
        ..container("w-new-2", "w", "new", NOON - 90)
    });
    assert!(pool_plan(&plan_of(&desired, &progressing), "w").degraded.is_none());
    // Every kind of rollout has the deadline: replacing a dead instance of a finished rollout
    // too. Its clock starts when the replacement is first made (its first creation writes the
    // record anew), so within the deadline it goes on...
    let mut finished = world;
    finished.containers.retain(|c| c.template_hash == "new");
    finished.containers.push(crate::model::Container {
        came_up: Some(NOON - 900),
        ..container("w-new-3", "w", "new", NOON - 900)
    });
    let mut replacing = finished.clone();
    replacing.rollouts.get_mut("w").unwrap().since = NOON - 60;
    let plan = plan_of(&desired, &replacing);
    assert!(pool_plan(&plan, "w").degraded.is_none());
    assert!(plan.steps().any(|(_, s)| matches!(s.action, Action::Create { .. })));
    // ...and past it, with its attempt never up, the pool is Degraded and nothing more is made.
    let plan = plan_of(&desired, &finished);
    assert!(pool_plan(&plan, "w").degraded.is_some());
    assert!(!plan.steps().any(|(_, s)| matches!(s.action, Action::Create { .. })));
    // A converged pool that scales up starts a rollout of its own: its first creation writes
    // the record, and the deadline counts from there.
    let converged = World {
        now: NOON,
        containers: vec![container("w-new-3", "w", "new", NOON - 900)],
        rollouts: replacing.rollouts.clone(),
        ..World::default()
    };
    let plan = plan_of(&desired, &converged);
    let first = plan.steps().find(|(_, s)| matches!(s.action, Action::Create { .. })).expect("a scale-up");
    assert!(matches!(first.1.action, Action::Create { starts_rollout: true, .. }), "{:?}", first.1);
}

#[test]
fn a_stalled_rollout_with_failure_action_rollback_goes_back_to_the_previous_template() {
    let old = PoolArgs { image: "busybox:1", ..PoolArgs::new("w", 2) }.build();
    let mut new = PoolArgs { image: "busybox:2", ..PoolArgs::new("w", 2) }.build();
    new.pool.spec.rollout.failure_action = crate::spec::FailureAction::Rollback;
    let (old_hash, new_hash) = (old.template_hash.clone(), new.template_hash.clone());
    let labelled = |name: &str, hash: &str, spec: &crate::spec::PoolSpec, created| crate::model::Container {
        template: Some(crate::spec::canonical_template(spec)),
        ..container(name, "w", hash, created)
    };
    // Half-new: one old instance left, one new one that came up, and a new attempt that failed;
    // no new instance came up for 11m.
    let mut failed = labelled("w-new-2", &new_hash, &new.pool.spec, NOON - 60);
    (failed.came_up, failed.state, failed.status) =
        (None, ContainerState::Exited, "Exited (1) 1 minute ago".to_owned());
    let mut up = labelled("w-new-1", &new_hash, &new.pool.spec, NOON - 900);
    up.came_up = Some(NOON - 880);
    let record = crate::model::RolloutRecord {
        template_hash: new_hash.clone(),
        since: NOON - 960,
        rolled_back_from: None,
        progressed: None,
    };
    let world = World {
        now: NOON,
        containers: vec![labelled("w-old-2", &old_hash, &old.pool.spec, 2), up, failed],
        rollouts: [("w".to_owned(), record)].into(),
        ..World::default()
    };
    let desired = desired(vec![new]);
    let plan = plan_of(&desired, &world);
    let w = pool_plan(&plan, "w");
    let why = w.degraded.as_deref().expect("degraded");
    assert!(why.contains(&format!("rolling back to template {old_hash} (failureAction: rollback)")), "{why}");
    assert_eq!(w.template_hash.as_deref(), Some(old_hash.as_str()));
    let creates: Vec<&Action> =
        w.steps.iter().map(|s| &s.action).filter(|a| matches!(a, Action::Create { .. })).collect();
    assert_eq!(creates.len(), 1, "{:?}", verbs(w));
    let Action::Create { template_hash, image, starts_rollout, rollback_from, .. } = creates[0] else {
        unreachable!()
    };
    assert_eq!((template_hash, image.as_str()), (&old_hash, "busybox:1"));
    assert!(*starts_rollout);
    assert_eq!(rollback_from.as_deref(), Some(new_hash.as_str()));
    let mut retired = retired(w);
    retired.sort_unstable();
    assert_eq!(retired, ["w-new-1", "w-new-2"], "the new template's instances go");
    // The executor creates from the previous template.
    let effective = plan.desired_for(&desired);
    assert_eq!(effective.pools[0].pool.spec.template.image, "busybox:1");

    // Once rolled back, the pool stays there until the source changes or apply retries.
    let rolled = World {
        containers: vec![
            labelled("w-old-2", &old_hash, &old.pool.spec, 2),
            labelled("w-old-3", &old_hash, &old.pool.spec, NOON),
        ],
        rollouts: [(
            "w".to_owned(),
            crate::model::RolloutRecord {
                template_hash: old_hash.clone(),
                since: NOON,
                rolled_back_from: Some(new_hash.clone()),
                progressed: None,
            },
        )]
        .into(),
        ..world
    };
    let plan = plan_of(&desired, &rolled);
    assert!(!plan.has_changes(), "{:?}", verbs(pool_plan(&plan, "w")));
    assert!(pool_plan(&plan, "w").degraded.as_deref().is_some_and(|d| d.contains("was rolled back")));
    let retry =
        crate::plan::plan(&desired, &rolled, PlanOptions { retry_stalled: true, ..PlanOptions::default() });
    assert!(retry.steps().any(
        |(_, s)| matches!(&s.action, Action::Create { template_hash, .. } if *template_hash == new_hash)
    ));
}

#[test]
fn the_first_creation_of_a_new_template_starts_its_rollout_record() {
    let dp = PoolArgs { hash: Some("new"), ..PoolArgs::new("w", 2) }.build();
    let world =
        World { now: NOON, containers: vec![container("w-old-1", "w", "old", 1)], ..World::default() };
    let plan = plan_of(&desired(vec![dp]), &world);
    let starts: Vec<bool> = plan
        .steps()
        .filter_map(|(_, s)| match s.action {
            Action::Create { starts_rollout, .. } => Some(starts_rollout),
            _ => None,
        })
        .collect();
    assert_eq!(starts, [true, false], "only the first");
}

// ---------------------------------------------------------------------------------------------
// Replacing on demand, and which instances a scale-down retires

#[test]
fn replace_names_a_current_instance_that_is_replaced_surge_first() {
    let (desired, world) = node_pool_at(3, &[("True", 600), ("True", 600), ("True", 600)], None);
    let options = PlanOptions { replace: ["k-1".to_owned()].into(), ..PlanOptions::default() };
    let plan = crate::plan::plan(&desired, &world, options);
    let k = pool_plan(&plan, "k");
    let v: Vec<&str> = verbs(k).iter().map(|(verb, _)| *verb).collect();
    assert_eq!(v, ["create", "await-ready", "cordon", "drain", "stop", "delete-node", "remove"]);
    assert!(verbs(k)[2..].iter().all(|(_, i)| *i == "k-1"), "exactly k-1 goes: {:?}", verbs(k));
    assert_eq!(retired(k), ["k-1"]);
    assert!(text_of(&plan).contains("k-1: replaced although current (--replace)"), "{}", text_of(&plan));

    // A Node labelled poolctl.dev/replace=true, by hand or by another tool, does the same.
    let mut labelled = world.clone();
    labelled.nodes[2].config.labels.insert("poolctl.dev/replace".into(), "true".into());
    let plan = plan_of(&desired, &labelled);
    assert_eq!(retired(pool_plan(&plan, "k")), ["k-2"]);
    assert!(text_of(&plan).contains("k-2: replaced although current (label poolctl.dev/replace=true)"));
}

#[test]
fn rollout_after_replaces_the_instances_created_before_it_once_it_has_come() {
    let world = World {
        now: NOON,
        containers: vec![container("w-a", "w", "h", NOON - 100), container("w-b", "w", "h", NOON - 10)],
        ..World::default()
    };
    let with = |after: &str| {
        let mut dp = PoolArgs { hash: Some("h"), ..PoolArgs::new("w", 2) }.build();
        dp.pool.spec.rollout.after = Some(after.to_owned());
        plan_of(&desired(vec![dp]), &world)
    };
    let at = |secs: i64| {
        crate::model::timestamp(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs.unsigned_abs()))
    };
    let plan = with(&at(NOON - 50));
    assert_eq!(retired(pool_plan(&plan, "w")), ["w-a"], "only the one created before");
    assert!(text_of(&plan).contains("w-a: replaced although current (created before spec.rollout.after)"));
    let v: Vec<&str> = verbs(pool_plan(&plan, "w")).iter().map(|(verb, _)| *verb).collect();
    assert_eq!(v, ["create", "await-ready", "stop", "remove"], "surge first");
    assert!(!with(&at(NOON + 60)).has_changes(), "a time still to come replaces nothing yet");
}

#[test]
fn the_delete_policy_chooses_which_instances_a_scale_down_retires() {
    let world = world_of(vec![
        container("w-a", "w", "h", 1),
        container("w-b", "w", "h", 2),
        container("w-c", "w", "h", 3),
        container("w-d", "w", "h", 4),
    ]);
    let with = |policy: crate::spec::DeletePolicy| {
        let mut dp = PoolArgs { hash: Some("h"), ..PoolArgs::new("w", 2) }.build();
        dp.pool.spec.rollout.delete_policy = policy;
        let plan = plan_of(&desired(vec![dp]), &world);
        let mut gone: Vec<String> = retired(pool_plan(&plan, "w")).into_iter().map(str::to_owned).collect();
        gone.sort_unstable();
        gone
    };
    assert_eq!(with(crate::spec::DeletePolicy::Oldest), ["w-a", "w-b"]);
    assert_eq!(with(crate::spec::DeletePolicy::Newest), ["w-c", "w-d"]);
    let random = with(crate::spec::DeletePolicy::Random);
    assert_eq!(random.len(), 2);
    assert_eq!(with(crate::spec::DeletePolicy::Random), random, "the same plan made again retires the same");

    // Made within the same second (a batch side by side): the nanoseconds decide, not the name.
    let at = |name: &str, nanos: i128| crate::model::Container {
        created_precise: 5_000_000_000 + nanos,
        ..container(name, "w", "h", 5)
    };
    let world = world_of(vec![at("w-a", 900), at("w-b", 100), at("w-c", 500)]);
    let mut dp = PoolArgs { hash: Some("h"), ..PoolArgs::new("w", 1) }.build();
    dp.pool.spec.rollout.delete_policy = crate::spec::DeletePolicy::Oldest;
    let plan = plan_of(&desired(vec![dp]), &world);
    let mut gone = retired(pool_plan(&plan, "w"));
    gone.sort_unstable();
    assert_eq!(gone, ["w-b", "w-c"], "the newest, w-a, is kept");
}

// ---------------------------------------------------------------------------------------------
// Updates in place

/// `n` running instances of pool `w`, created from `old`'s template (their label keeps it).
fn created_from(old: &crate::model::DesiredPool, n: usize) -> World {
    let canonical = crate::spec::canonical_template(&old.pool.spec);
    world_of(
        (0..n)
            .map(|i| crate::model::Container {
                template: Some(canonical.clone()),
                ..container(&format!("w-{i}"), "w", &old.template_hash, i64::try_from(i).unwrap() + 1)
            })
            .collect(),
    )
}

/// Pool `w` of `replicas` with `maxUnavailable`, changed by `change` from its built template.
fn changed(
    replicas: i64,
    unavailable: i64,
    change: impl Fn(&mut crate::spec::PoolSpec),
) -> crate::model::DesiredPool {
    let mut dp = PoolArgs { unavailable, ..PoolArgs::new("w", replicas) }.build();
    change(&mut dp.pool.spec);
    dp.template_hash = crate::spec::template_hash(&dp.pool.spec);
    dp
}

fn more_memory_and_a_restart_policy(spec: &mut crate::spec::PoolSpec) {
    spec.template.memory = Some("128m".to_owned());
    spec.template.restart = Some("always".to_owned());
}

#[test]
fn a_change_of_live_settings_alone_updates_in_place_in_batches_of_max_unavailable() {
    let world = created_from(&PoolArgs::new("w", 3).build(), 3);
    let new = changed(3, 2, more_memory_and_a_restart_policy);
    let desired = desired(vec![new.clone()]);
    let plan = plan(&desired, &world, PlanOptions::default());
    let w = pool_plan(&plan, "w");
    let by_batch: Vec<(u32, &str, &str)> =
        w.steps.iter().map(|s| (s.batch, s.action.verb(), s.instance.as_str())).collect();
    assert_eq!(
        by_batch,
        [(1, "update-in-place", "w-0"), (1, "update-in-place", "w-1"), (2, "update-in-place", "w-2")],
        "no create, no retirement: the same containers, maxUnavailable to a batch"
    );
    let Action::UpdateInPlace { fields, template_hash } = &w.steps[0].action else { unreachable!() };
    assert_eq!(
        (fields.as_slice(), template_hash),
        (&["memory".to_owned(), "restart".to_owned()][..], &new.template_hash)
    );
    assert!(retired(w).is_empty());
    assert_eq!((plan.summary.update_in_place, plan.summary.unchanged, plan.summary.create), (3, 0, 0));
    assert!(w.template_change.as_ref().is_some_and(|c| c.replaced_by.is_empty()));
    let shown = text(&plan);
    assert!(shown.contains("update-in-place w-0  (memory, restart; same container)"), "{shown}");
    assert!(shown.contains("3 to update in place"), "{shown}");

    // `maxUnavailable: 0` still updates, one at a time; applied, the plan is empty.
    let plan = plan_of_one(&changed(3, 0, more_memory_and_a_restart_policy), &world);
    let batches: Vec<u32> = pool_plan(&plan, "w").steps.iter().map(|s| s.batch).collect();
    assert_eq!(batches, [1, 2, 3]);
    let after = execute_checking_capacity(&plan, &world, &PoolArgs::new("w", 3));
    let again = plan_of_one(&changed(3, 0, more_memory_and_a_restart_policy), &after);
    assert!(!again.has_changes(), "{:?}", again.pools[0].steps);
}

fn plan_of_one(dp: &crate::model::DesiredPool, world: &World) -> Plan {
    plan(&desired(vec![dp.clone()]), world, PlanOptions::default())
}

#[test]
fn any_other_change_replaces_and_the_plan_names_the_fields_that_force_it() {
    let world = created_from(&PoolArgs::new("w", 2).build(), 2);
    let new = changed(2, 0, |spec| {
        more_memory_and_a_restart_policy(spec);
        spec.template.env.insert("NEW".to_owned(), crate::spec::EnvValue::plain("1"));
    });
    let plan = plan_of_one(&new, &world);
    let w = pool_plan(&plan, "w");
    assert!(w.steps.iter().all(|s| !matches!(s.action, Action::UpdateInPlace { .. })));
    assert_eq!(retired(w), ["w-0", "w-1"]);
    assert_eq!(w.template_change.as_ref().unwrap().replaced_by, ["env"]);
    let shown = text(&plan);
    assert!(shown.contains("replaced: env changed (docker update cannot change it)"), "{shown}");

    // Docker cannot take a limit away from a running container either.
    let limited = changed(2, 0, more_memory_and_a_restart_policy);
    let plan = plan_of_one(&PoolArgs::new("w", 2).build(), &created_from(&limited, 2));
    assert_eq!(retired(pool_plan(&plan, "w")), ["w-0", "w-1"]);
    assert_eq!(pool_plan(&plan, "w").template_change.as_ref().unwrap().replaced_by, ["memory"]);
}

#[test]
fn in_place_never_an_unknown_template_or_a_stopped_container_replaces() {
    let old = PoolArgs::new("w", 2).build();
    let never = changed(2, 0, |spec| {
        more_memory_and_a_restart_policy(spec);
        spec.rollout.in_place = crate::spec::InPlace::Never;
    });
    let plan = plan_of_one(&never, &created_from(&old, 2));
    assert_eq!(retired(pool_plan(&plan, "w")), ["w-0", "w-1"]);
    assert_eq!(plan.summary.update_in_place, 0);

    let new = changed(2, 0, more_memory_and_a_restart_policy);
    let mut world = created_from(&old, 2);
    // What w-0 runs is not known (no template label); w-1 does not run.
    world.containers[0].template = None;
    world.containers[1].state = ContainerState::Exited;
    let plan = plan_of_one(&new, &world);
    let w = pool_plan(&plan, "w");
    assert!(w.steps.iter().all(|s| !matches!(s.action, Action::UpdateInPlace { .. })), "{:?}", verbs(w));
    let mut gone = retired(w);
    gone.sort_unstable();
    assert_eq!(gone, ["w-0", "w-1"]);
}

// ---------------------------------------------------------------------------------------------
// Snapshots of the output

/// The plan's text and JSON, as the snapshots `<name>_text` and `<name>_json`.
fn snapshot(name: &str, plan: &Plan) {
    insta::assert_snapshot!(format!("{name}_text"), text(plan));
    insta::assert_json_snapshot!(format!("{name}_json"), plan);
}

#[test]
fn snapshot_of_a_node_pool_rollout() {
    let (desired, world) = drain_world();
    snapshot("node_rollout", &plan(&desired, &world, PlanOptions::default()));
}

#[test]
fn snapshot_of_a_scale_down_with_an_undeclared_pool() {
    let dp = PoolArgs::new("web", 1).build();
    let h = dp.template_hash.clone();
    let world = world_of(vec![
        container("web-a", "web", &h, 1),
        container("web-b", "web", &h, 2),
        container("gone-a", "gone", "cafe", 1),
    ]);
    snapshot("scale_down", &plan(&desired(vec![dp]), &world, PlanOptions::default()));
}

#[test]
fn snapshot_of_no_changes_from_git() {
    let dp = PoolArgs::new("web", 1).build();
    let h = dp.template_hash.clone();
    let origin = Origin::Git {
        url: "https://example.com/infra.git".to_owned(),
        reference: "main".to_owned(),
        commit: "0123456789abcdef0123456789abcdef01234567".to_owned(),
        path: "pools".to_owned(),
    };
    let mut web = container("web-a", "web", &h, 1);
    web.scope = Some(origin.scope());
    let world = World { containers: vec![web], ..World::default() };
    let plan = plan(&Desired { origin, pools: vec![dp] }, &world, PlanOptions::default());
    insta::assert_snapshot!("no_changes_text", text(&plan));
}

#[test]
fn a_pool_another_source_created_is_left_alone_unless_adopted() {
    let dp = PoolArgs::new("web", 2).build();
    let mut theirs = container("web-a", "web", "0ther0ther", 1);
    theirs.scope = Some("git:https://example.com/other.git//pools".to_owned());
    let world = World { containers: vec![theirs], ..World::default() };

    let left = plan(&desired(vec![dp.clone()]), &world, PlanOptions::default());
    let pool = pool_plan(&left, "web");
    assert_eq!(pool.status, PoolStatus::Foreign);
    assert_eq!(pool.managed_by.as_deref(), Some("git:https://example.com/other.git//pools"));
    assert!(pool.steps.is_empty(), "{:?}", pool.steps);
    assert!(!left.has_changes());
    let shown = text(&left);
    assert!(
        shown.contains("created from another source (git:https://example.com/other.git//pools)"),
        "{shown}"
    );
    assert!(shown.contains("--adopt"), "{shown}");
    assert_eq!((left.summary.undeclared, left.summary.foreign), (0, 1));
    assert!(!left.in_sync());
    assert!(shown.ends_with("left alone: 1 pool of another source (--adopt takes it over).\n"), "{shown}");

    let adopted = plan(&desired(vec![dp]), &world, PlanOptions { adopt: true, ..PlanOptions::default() });
    let pool = pool_plan(&adopted, "web");
    assert_eq!(pool.status, PoolStatus::Existing);
    assert_eq!(adopted.summary.create, 2);
    assert_eq!(adopted.summary.retire, 1, "the outdated foreign instance is replaced once adopted");
}

#[test]
fn json_output_is_the_plan_serialized_with_its_format_version() {
    let (desired, world) = drain_world();
    let plan = plan(&desired, &world, PlanOptions::default());
    let mut out = Vec::new();
    render_json(&plan, &mut out).unwrap();
    let mut value: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(value.as_object_mut().unwrap().remove("format_version"), Some(serde_json::json!(1)));
    assert_eq!(value, serde_json::to_value(&plan).unwrap());
}

// ---------------------------------------------------------------------------------------------
// Node labels and taints as desired state

/// A node pool "k" of one current instance whose Node is `node`; the spec asks for a label and
/// a taint.
fn configured_pool(node: crate::model::Node) -> (Desired, World) {
    let mut dp = PoolArgs { nodes: true, ..PoolArgs::new("k", 1) }.build();
    let spec = dp.pool.spec.node.as_mut().unwrap();
    spec.labels.insert("team".to_owned(), "infra".to_owned());
    spec.taints.push(crate::spec::Taint {
        key: "dedicated".to_owned(),
        value: Some("batch".to_owned()),
        effect: "NoSchedule".to_owned(),
    });
    let c = container(&node.name, "k", &dp.template_hash, 1);
    (desired(vec![dp]), World { containers: vec![c], nodes: vec![node], ..World::default() })
}

#[test]
fn a_node_missing_its_labels_and_taints_is_configured_not_replaced() {
    // A Node that registered before an apply was killed: no pool label, nothing of the spec.
    let mut unlabelled = node("k-0123456789-abcde", "k");
    unlabelled.pool = None;
    unlabelled.config = crate::model::NodeConfig::default();
    let (desired, world) = configured_pool(unlabelled);
    let plan = plan(&desired, &world, PlanOptions::default());
    let k = pool_plan(&plan, "k");
    assert_eq!(verbs(k), [("configure", "k-0123456789-abcde")]);
    let Action::Configure(preview) = &k.steps[0].action else { unreachable!() };
    assert_eq!(
        preview.changes,
        ["+label poolctl.dev/pool=k", "+label team=infra", "+taint dedicated=batch:NoSchedule"]
    );
    assert!(
        text(&plan).contains("Plan: 0 to create, 0 to retire, 1 to configure, 1 unchanged."),
        "{}",
        text(&plan)
    );

    // Carried out, the world matches the spec and the next plan is empty.
    let mut sim = SimWorld::new(world);
    sim.apply(&plan);
    assert!(!crate::plan::plan(&desired, &sim.world, PlanOptions::default()).has_changes());

    // A changed taint in the spec is applied to the existing Node, again without a replacement.
    let mut changed = desired.clone();
    changed.pools[0].pool.spec.node.as_mut().unwrap().taints[0].value = Some("web".to_owned());
    let again = crate::plan::plan(&changed, &sim.world, PlanOptions::default());
    let k = pool_plan(&again, "k");
    assert_eq!(verbs(k), [("configure", "k-0123456789-abcde")]);
    let Action::Configure(preview) = &k.steps[0].action else { unreachable!() };
    assert_eq!(preview.changes, ["+taint dedicated=web:NoSchedule", "-taint dedicated=batch:NoSchedule"]);
}

#[test]
fn an_unlabelled_node_named_like_an_instance_whose_container_is_gone_is_an_orphan() {
    let dp = PoolArgs { nodes: true, ..PoolArgs::new("k", 0) }.build();
    // Found through the lock's record of joining instances: no label, no reference yet.
    let mut orphan = node("k-0123456789-abcde", "k");
    (orphan.pool, orphan.reference) = (None, None);
    let mut stranger = node("kind-worker", "k");
    stranger.pool = None;
    let world = World { nodes: vec![orphan, stranger], listed: listed(), ..World::default() };
    let plan = plan(&desired(vec![dp]), &world, PlanOptions::default());
    assert_eq!(verbs(pool_plan(&plan, "k")), [("delete-node", "k-0123456789-abcde")]);
}

#[test]
fn a_long_plan_sums_up_its_steps_and_instances_unless_asked_for_all() {
    // 100 outdated instances, replaced with a surge of 100%: hundreds of steps.
    let old: Vec<_> = (0..100).map(|i| container(&format!("w-{i:03}"), "w", "old", i)).collect();
    let world = world_of(old);
    let d = desired(vec![PoolArgs { surge: 100, ..PoolArgs::new("w", 100) }.build()]);
    let plan = plan(&d, &world, PlanOptions::default());
    let steps = plan.steps().count();
    assert!(steps > 300, "{steps}");
    let render = |full| {
        let mut out = Vec::new();
        let held = crate::plan::HeldLocks { locks: &BTreeMap::new(), now: std::time::SystemTime::UNIX_EPOCH };
        crate::plan::render_text_styled(&plan, held, crate::style::Style::PLAIN, full, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    };
    let short = render(false);
    assert!(short.lines().count() < 50, "{short}");
    let numbered: Vec<&str> =
        short.lines().filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit())).collect();
    assert_eq!(numbered.len(), 13, "12 steps and the line that sums up the rest: {short}");
    let rest = numbered[12].trim();
    assert!(rest.starts_with(&format!("13-{steps}. {} more steps like these: ", steps - 12)), "{rest}");
    let counted: usize = rest
        .split(": ")
        .nth(1)
        .unwrap()
        .split(", ")
        .map(|c| c.split(' ').next().unwrap().parse::<usize>().unwrap())
        .sum();
    assert_eq!(counted, steps - 12, "{rest}");
    assert!(short.contains("    ... and 88 more instances: 88 retired (plan -v lists them all)"), "{short}");
    // The summary line still counts everything.
    assert!(short.contains("Plan: 100 to create, 100 to retire, 0 unchanged."), "{short}");

    let full = render(true);
    let numbered = full.lines().filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit())).count();
    assert_eq!(numbered, steps, "every step, numbered");
    assert!(!full.contains("more steps like these") && !full.contains("more instances"));
}

/// What the plan says of the instance whose Node this poolctl runs on.
const REFUSED: &str = "this poolctl runs on its Node (POOLCTL_NODE_NAME): apply refuses its retirement; \
                       move poolctl off the pool's Nodes (deploy/ keeps it off them)";

#[test]
fn the_plan_shows_that_the_node_poolctl_runs_on_will_not_be_retired() {
    let dp = PoolArgs { nodes: true, ..PoolArgs::new("k", 2) }.build();
    let h = dp.template_hash.clone();
    let world = World {
        containers: vec![container("k-old", "k", "0ld", 1), container("k-cur", "k", &h, 2)],
        nodes: vec![node("k-old", "k"), node("k-cur", "k")],
        ..World::default()
    };
    let d = desired(vec![dp]);
    let note = format!("    k-old: not retired: {REFUSED}\n");
    let unmarked = plan(&d, &world, PlanOptions::default());
    assert!(pool_plan(&unmarked, "k").instances.iter().all(|i| i.refused.is_none()));
    assert!(!text(&unmarked).contains("this poolctl runs on"), "{}", text(&unmarked));

    let on = |own: &str| {
        plan(&d, &world, PlanOptions { own_node: Some(own.to_owned()), ..PlanOptions::default() })
    };
    // On the Node the plan retires: a note on that instance, in text and JSON. The steps stay
    // what they are: the plan is a preview, and the executor refuses them.
    let retired = on("k-old");
    assert_eq!(
        retired.pools,
        unmarked
            .pools
            .iter()
            .cloned()
            .map(|mut p| {
                p.instances.iter_mut().filter(|i| i.name == "k-old").for_each(|i| i.refused = Some(REFUSED));
                p
            })
            .collect::<Vec<_>>()
    );
    assert!(text(&retired).contains(&note), "{}", text(&retired));
    let mut json = Vec::new();
    render_json(&retired, &mut json).unwrap();
    let json: serde_json::Value = serde_json::from_slice(&json).unwrap();
    let marked: Vec<&serde_json::Value> = json["pools"][0]["instances"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["refused"] == REFUSED)
        .map(|i| &i["name"])
        .collect();
    assert_eq!(marked, ["k-old"]);
    // On a Node the plan keeps, or on none of the pool's: nothing to say.
    for own in ["k-cur", "control-plane"] {
        let kept = on(own);
        assert_eq!(kept, unmarked, "own Node {own}");
    }
}

// ---------------------------------------------------------------------------------------------
// The history: revisions, their ends, and what a rollback goes back to

/// A revision of pool `w`'s history: template `spec` (its hash and JSON), begun at `started`.
fn revision_of(
    number: u64,
    spec: &crate::model::DesiredPool,
    started: i64,
    end: Option<crate::model::RolloutResult>,
) -> crate::model::Revision {
    crate::model::Revision {
        number,
        template_hash: spec.template_hash.clone(),
        template: Some(crate::spec::canonical_template(&spec.pool.spec)),
        source: None,
        commit: None,
        started,
        rolled_back_from: None,
        end: end.map(|result| crate::model::RevisionEnd { result, at: started + 30 }),
    }
}

/// The creations of a pool's plan, as `(template hash, image, revision, rollback_from)`.
fn creations(pool: &PoolPlan) -> Vec<(String, String, Option<u64>, Option<String>)> {
    pool.steps
        .iter()
        .filter_map(|s| match &s.action {
            Action::Create { template_hash, image, revision, rollback_from, .. } => {
                Some((template_hash.clone(), image.clone(), *revision, rollback_from.clone()))
            }
            _ => None,
        })
        .collect()
}

/// One replica, `maxSurge: 0`, `maxUnavailable: 1`, `failureAction: rollback`: template `a`
/// (busybox:1) was rolled out completely (revision 1); the rollout of `b` (busybox:2, revision
/// 2) retired the only `a` instance first, and its one attempt never came up, 11m ago.
fn single_replica_stalled() -> (Desired, World, crate::model::DesiredPool, crate::model::DesiredPool) {
    let args = |image| PoolArgs { image, surge: 0, unavailable: 1, ..PoolArgs::new("w", 1) };
    let a = args("busybox:1").build();
    let mut b = args("busybox:2").build();
    b.pool.spec.rollout.failure_action = crate::spec::FailureAction::Rollback;
    let mut failed = container("w-b-1", "w", &b.template_hash, NOON - 660);
    (failed.came_up, failed.state, failed.status) =
        (None, ContainerState::Exited, "Exited (3) 10 minutes ago".to_owned());
    let record = crate::model::RolloutRecord {
        template_hash: b.template_hash.clone(),
        since: NOON - 660,
        rolled_back_from: None,
        progressed: None,
    };
    let world = World {
        now: NOON,
        containers: vec![failed],
        rollouts: [("w".to_owned(), record)].into(),
        history: [(
            "w".to_owned(),
            vec![
                revision_of(1, &a, NOON - 3600, Some(crate::model::RolloutResult::Complete)),
                revision_of(2, &b, NOON - 660, None),
            ],
        )]
        .into(),
        ..World::default()
    };
    (desired(vec![b.clone()]), world, a, b)
}

#[test]
fn a_rollback_goes_back_to_the_last_complete_revision_when_no_instance_of_it_survives() {
    use crate::model::RolloutResult;
    let (desired, world, a, b) = single_replica_stalled();
    let plan = plan_of(&desired, &world);
    let w = pool_plan(&plan, "w");
    let why = w.degraded.as_deref().expect("degraded");
    assert!(
        why.contains(&format!("rolling back to template {} (failureAction: rollback)", a.template_hash)),
        "{why}"
    );
    // Revision 3 goes back to `a`, rebuilt from the history: no instance of it is left.
    assert_eq!(
        creations(w),
        [(a.template_hash.clone(), "busybox:1".to_owned(), Some(3), Some(b.template_hash.clone()))]
    );
    assert_eq!(retired(w), ["w-b-1"]);
    assert_eq!(plan.desired_for(&desired).pools[0].pool.spec.template.image, "busybox:1");
    // And `b`'s revision ends rolled back; the rollback is the revision under way.
    assert_eq!((w.revision, w.revision_end), (Some(3), Some((2, RolloutResult::RolledBack))));

    // Its first batch retires the failed attempt, the only sign that the rollout stalled; the
    // history remembers the rollback, and the plan made after that batch still goes back.
    let mut retired_first = world.clone();
    retired_first.containers.clear();
    retired_first.history.get_mut("w").unwrap()[1].end =
        Some(crate::model::RevisionEnd { result: RolloutResult::RolledBack, at: NOON });
    let plan = plan_of(&desired, &retired_first);
    let w = pool_plan(&plan, "w");
    assert!(
        w.degraded.as_deref().is_some_and(|d| d.contains("(revision 2) was rolled back")),
        "{:?}",
        w.degraded
    );
    assert_eq!(
        creations(w),
        [(a.template_hash.clone(), "busybox:1".to_owned(), Some(3), Some(b.template_hash.clone()))]
    );

    // Without the history, the instances' labels are all there is, and none runs `a`.
    let forgotten = World { history: BTreeMap::new(), ..world.clone() };
    let plan = plan_of(&desired, &forgotten);
    let why = pool_plan(&plan, "w").degraded.clone().expect("degraded");
    assert!(why.contains("cannot roll back: no instance runs an earlier template"), "{why}");
    assert!(creations(pool_plan(&plan, "w")).is_empty());
}

#[test]
fn the_rollback_target_is_the_latest_complete_revision_not_the_most_common_template() {
    // Revisions: `a` complete, `c` complete, `b` stalled. Two `a` instances survive (the most
    // common template, and the smaller hash on a tie), one `c`: the history says `c`.
    let args = |image, replicas| PoolArgs { image, ..PoolArgs::new("w", replicas) };
    let (a, c) = (args("busybox:1", 3).build(), args("busybox:3", 3).build());
    let mut b = args("busybox:2", 3).build();
    b.pool.spec.rollout.failure_action = crate::spec::FailureAction::Rollback;
    let old = |name: &str, dp: &crate::model::DesiredPool, created| crate::model::Container {
        template: Some(crate::spec::canonical_template(&dp.pool.spec)),
        ..container(name, "w", &dp.template_hash, created)
    };
    let world = World {
        now: NOON,
        containers: vec![old("w-a-1", &a, 1), old("w-a-2", &a, 2), old("w-c-1", &c, 3)],
        rollouts: [(
            "w".to_owned(),
            crate::model::RolloutRecord {
                template_hash: b.template_hash.clone(),
                since: NOON - 900,
                rolled_back_from: None,
                progressed: None,
            },
        )]
        .into(),
        history: [(
            "w".to_owned(),
            vec![
                revision_of(1, &a, NOON - 9000, Some(crate::model::RolloutResult::Complete)),
                revision_of(2, &c, NOON - 5000, Some(crate::model::RolloutResult::Complete)),
                revision_of(3, &b, NOON - 900, None),
            ],
        )]
        .into(),
        ..World::default()
    };
    let desired = desired(vec![b]);
    let plan = plan_of(&desired, &world);
    let w = pool_plan(&plan, "w");
    assert_eq!(w.template_hash.as_deref(), Some(c.template_hash.as_str()), "{:?}", w.degraded);
    assert!(creations(w).iter().all(|(hash, image, ..)| *hash == c.template_hash && image == "busybox:3"));
    assert_eq!(creations(w)[0].2, Some(4));
}

#[test]
fn revisions_are_numbered_from_the_history_and_end_complete_once_the_pool_converged() {
    use crate::model::RolloutResult::{Complete, Degraded};
    let a = PoolArgs { image: "busybox:1", ..PoolArgs::new("w", 2) }.build();
    let b = PoolArgs { image: "busybox:2", ..PoolArgs::new("w", 2) }.build();
    let revisions = |list: Vec<crate::model::Revision>| -> BTreeMap<String, Vec<crate::model::Revision>> {
        [("w".to_owned(), list)].into()
    };
    let up = |name: &str, dp: &crate::model::DesiredPool| crate::model::Container {
        came_up: Some(NOON - 100),
        ..container(name, "w", &dp.template_hash, NOON - 200)
    };

    // A new pool begins revision 1 with its first creation, and only that one.
    let plan = plan_of(&desired(vec![a.clone()]), &World { now: NOON, ..World::default() });
    let w = pool_plan(&plan, "w");
    assert_eq!(creations(w).iter().map(|c| c.2).collect::<Vec<_>>(), [Some(1), None]);
    assert_eq!((w.revision, w.revision_end), (Some(1), None));

    // Converged on it: revision 1 is complete, which `apply` and `watch` record.
    let converged = World {
        now: NOON,
        containers: vec![up("w-a-1", &a), up("w-a-2", &a)],
        history: revisions(vec![revision_of(1, &a, NOON - 300, None)]),
        ..World::default()
    };
    let plan = plan_of(&desired(vec![a.clone()]), &converged);
    assert!(!plan.has_changes());
    assert_eq!(pool_plan(&plan, "w").revision_end, Some((1, Complete)));
    // Once recorded, nothing more: the plan of a converged pool changes nothing.
    let mut recorded = converged.clone();
    recorded.history.get_mut("w").unwrap()[0].end =
        Some(crate::model::RevisionEnd { result: Complete, at: NOON });
    let plan = plan_of(&desired(vec![a.clone()]), &recorded);
    assert_eq!((pool_plan(&plan, "w").revision, pool_plan(&plan, "w").revision_end), (None, None));
    // Half-way, nothing ends yet.
    let mut half = recorded.clone();
    half.containers[1] = up("w-b-1", &b);
    half.history.get_mut("w").unwrap().push(revision_of(2, &b, NOON - 300, None));
    let plan = plan_of(&desired(vec![b.clone()]), &half);
    assert_eq!((pool_plan(&plan, "w").revision, pool_plan(&plan, "w").revision_end), (Some(2), None));

    // A new template is revision 2; a scale-up of the same template is no new revision.
    let plan = plan_of(&desired(vec![b.clone()]), &recorded);
    assert_eq!(creations(pool_plan(&plan, "w"))[0].2, Some(2));
    let mut three = a.clone();
    three.pool.spec.replicas = 3;
    let plan = plan_of(&desired(vec![three]), &recorded);
    let w = pool_plan(&plan, "w");
    assert!(
        matches!(w.steps[0].action, Action::Create { starts_rollout: true, revision: None, .. }),
        "{w:?}"
    );

    // A stalled rollout that pauses ends Degraded; `apply` trying it again is a new revision.
    let mut stalled = recorded.clone();
    let mut failed = container("w-b-1", "w", &b.template_hash, NOON - 900);
    (failed.came_up, failed.state) = (None, ContainerState::Exited);
    stalled.containers.push(failed);
    stalled.history.get_mut("w").unwrap().push(revision_of(2, &b, NOON - 900, None));
    stalled.rollouts.insert(
        "w".to_owned(),
        crate::model::RolloutRecord {
            template_hash: b.template_hash.clone(),
            since: NOON - 900,
            rolled_back_from: None,
            progressed: None,
        },
    );
    let plan = plan_of(&desired(vec![b.clone()]), &stalled);
    assert_eq!(pool_plan(&plan, "w").revision_end, Some((2, Degraded)));
    assert!(creations(pool_plan(&plan, "w")).is_empty());
    let retry = PlanOptions { retry_stalled: true, ..PlanOptions::default() };
    let plan = crate::plan::plan(&desired(vec![b.clone()]), &stalled, retry);
    let w = pool_plan(&plan, "w");
    assert_eq!(w.revision_end, Some((2, Degraded)));
    assert_eq!(creations(w)[0].2, Some(3));
}

#[test]
fn apply_rollback_goes_back_by_hand_and_stays_there_until_apply_tries_again() {
    use crate::model::RolloutResult::Complete;
    // `b` rolled out completely after `a`; nothing stalled.
    let a = PoolArgs { image: "busybox:1", ..PoolArgs::new("w", 2) }.build();
    let b = PoolArgs { image: "busybox:2", ..PoolArgs::new("w", 2) }.build();
    let up = |name: &str, dp: &crate::model::DesiredPool| crate::model::Container {
        came_up: Some(NOON - 100),
        ..container(name, "w", &dp.template_hash, NOON - 200)
    };
    let world = World {
        now: NOON,
        containers: vec![up("w-b-1", &b), up("w-b-2", &b)],
        rollouts: [(
            "w".to_owned(),
            crate::model::RolloutRecord {
                template_hash: b.template_hash.clone(),
                since: NOON - 300,
                rolled_back_from: None,
                progressed: None,
            },
        )]
        .into(),
        history: [(
            "w".to_owned(),
            vec![
                revision_of(1, &a, NOON - 3600, Some(Complete)),
                revision_of(2, &b, NOON - 300, Some(Complete)),
            ],
        )]
        .into(),
        ..World::default()
    };
    let desired = desired(vec![b.clone()]);
    assert!(!plan_of(&desired, &world).has_changes());
    let by_hand =
        PlanOptions { rollback: ["w".to_owned()].into(), retry_stalled: true, ..PlanOptions::default() };
    let plan = crate::plan::plan(&desired, &world, by_hand.clone());
    let w = pool_plan(&plan, "w");
    assert!(w.degraded.as_deref().is_some_and(|d| d.contains("(apply --rollback)")), "{:?}", w.degraded);
    assert_eq!(
        creations(w)[0],
        (a.template_hash.clone(), "busybox:1".to_owned(), Some(3), Some(b.template_hash.clone()))
    );
    assert_eq!(w.revision_end, None, "revision 2 completed: that stands");

    // Rolled back: with `failureAction: pause` too, the pool stays on `a`, converged, and its
    // rollback revision completes.
    let rolled = World {
        containers: vec![up("w-a-3", &a), up("w-a-4", &a)],
        rollouts: [(
            "w".to_owned(),
            crate::model::RolloutRecord {
                template_hash: a.template_hash.clone(),
                since: NOON - 60,
                rolled_back_from: Some(b.template_hash.clone()),
                progressed: None,
            },
        )]
        .into(),
        history: [(
            "w".to_owned(),
            vec![
                revision_of(1, &a, NOON - 3600, Some(Complete)),
                revision_of(2, &b, NOON - 300, Some(Complete)),
                crate::model::Revision {
                    rolled_back_from: Some(b.template_hash.clone()),
                    ..revision_of(3, &a, NOON - 60, None)
                },
            ],
        )]
        .into(),
        ..world.clone()
    };
    let plan = plan_of(&desired, &rolled);
    let w = pool_plan(&plan, "w");
    assert!(!plan.has_changes(), "{:?}", verbs(w));
    assert_eq!(w.revision_end, Some((3, Complete)));
    assert!(w.degraded.as_deref().is_some_and(|d| d.contains("was rolled back to")), "{:?}", w.degraded);
    // The history alone says so too, should the rollout record be lost.
    let unrecorded = World { rollouts: BTreeMap::new(), ..rolled.clone() };
    assert!(!plan_of(&desired, &unrecorded).has_changes());
    // A plain apply tries the source's template again: revision 4.
    let retry = PlanOptions { retry_stalled: true, ..PlanOptions::default() };
    let plan = crate::plan::plan(&desired, &rolled, retry);
    assert_eq!(creations(pool_plan(&plan, "w"))[0].0, b.template_hash);
    assert_eq!(creations(pool_plan(&plan, "w"))[0].2, Some(4));

    // Nothing complete to go back to: said, and the command refuses it.
    let fresh = World { history: BTreeMap::new(), ..world };
    let why = crate::plan::rollback_target(&desired.pools[0], &fresh).unwrap_err();
    assert_eq!(why, "no instance runs an earlier template");
    let plan = crate::plan::plan(&desired, &fresh, by_hand);
    assert!(plan.rollbacks.is_empty() && creations(pool_plan(&plan, "w")).is_empty());
}

#[test]
fn a_retry_of_a_rollout_under_way_keeps_its_clock() {
    let old = PoolArgs { image: "busybox:1", ..PoolArgs::new("w", 2) }.build();
    let new = PoolArgs { image: "busybox:2", ..PoolArgs::new("w", 2) }.build();
    let (old_hash, new_hash) = (old.template_hash.clone(), new.template_hash.clone());
    // One new instance came up and one old one is left; the last attempt failed and was
    // stopped, or already removed: either way the rollout is under way, not starting.
    let mut failed = container("w-new-2", "w", &new_hash, NOON - 5);
    (failed.came_up, failed.state, failed.status) =
        (None, ContainerState::Exited, "Exited (0) 5 seconds ago".to_owned());
    let mut up = container("w-new-1", "w", &new_hash, NOON - 15);
    up.came_up = Some(NOON - 14);
    let record = crate::model::RolloutRecord {
        template_hash: new_hash.clone(),
        since: NOON - 20,
        rolled_back_from: None,
        progressed: None,
    };
    let world = World {
        now: NOON,
        containers: vec![container("w-old-2", "w", &old_hash, 2), up.clone(), failed],
        rollouts: [("w".to_owned(), record)].into(),
        ..World::default()
    };
    let desired = desired(vec![new]);
    let revision = |end: Option<i64>| crate::model::Revision {
        number: 3,
        template_hash: new_hash.clone(),
        template: None,
        source: None,
        commit: None,
        started: NOON - 20,
        rolled_back_from: None,
        end: end.map(|at| crate::model::RevisionEnd { result: crate::model::RolloutResult::Complete, at }),
    };
    let first_create = |world: &World| {
        let plan = plan_of(&desired, world);
        let starts = plan.steps().find_map(|(_, s)| match s.action {
            Action::Create { starts_rollout, .. } => Some(starts_rollout),
            _ => None,
        });
        starts.unwrap_or_else(|| panic!("a creation: {:?}", verbs(pool_plan(&plan, "w"))))
    };
    let mut removed = world.clone();
    removed.containers.retain(|c| c.name != "w-new-2");
    let mut with_history = removed.clone();
    with_history.history.insert("w".to_owned(), vec![revision(None)]);
    for world in [&world, &removed, &with_history] {
        assert!(!first_create(world), "{:?}", world.containers);
    }
    // A pool of new instances only whose attempt was removed: the open revision says the
    // rollout is under way.
    let mut fresh = with_history.clone();
    fresh.containers.retain(|c| c.template_hash == new_hash);
    assert!(!first_create(&fresh));
    // The pool converged (its revision Complete after the record) and scales up: a new clock.
    let mut converged = fresh.clone();
    converged.containers = vec![up.clone(), crate::model::Container { name: "w-new-3".into(), ..up }];
    converged.history.insert("w".to_owned(), vec![revision(Some(NOON - 10))]);
    let mut scaled = desired.clone();
    scaled.pools[0].pool.spec.replicas = 3;
    let plan = plan_of(&scaled, &converged);
    assert!(plan.steps().any(|(_, s)| matches!(s.action, Action::Create { starts_rollout: true, .. })));
}

#[test]
fn a_node_its_owner_marked_do_not_disrupt_is_kept_through_a_rollout_and_a_scale_down() {
    let dp = PoolArgs { nodes: true, ..PoolArgs::new("k", 3) }.build();
    let mut world = World { now: NOON, ..World::default() };
    for i in 1..=3 {
        let name = format!("k-{i}");
        world.containers.push(container(&name, "k", "0ld", i));
        world.nodes.push(node(&name, "k"));
    }
    world.nodes[1].retirement.do_not_disrupt = Some("poolctl.dev/do-not-disrupt");
    let desired = desired(vec![dp]);
    let plan = plan_of(&desired, &world);
    let k = pool_plan(&plan, "k");
    assert_eq!(k.steps.iter().filter(|s| matches!(s.action, Action::Create { .. })).count(), 2);
    let mut gone = retired(k);
    gone.sort_unstable();
    assert_eq!(gone, ["k-1", "k-3"], "the other two are replaced");
    let held = k.instances.iter().find(|i| i.name == "k-2").unwrap();
    assert_eq!((held.fate, held.do_not_disrupt), (Fate::Keep, Some("poolctl.dev/do-not-disrupt")));
    assert!(
        text_of(&plan).contains("k-2: held: its Node carries poolctl.dev/do-not-disrupt=true"),
        "{}",
        text_of(&plan)
    );
    // Karpenter's annotation holds it as well; `--replace` overrides either.
    let mut karpenter = world.clone();
    karpenter.nodes[1].retirement.do_not_disrupt = Some("karpenter.sh/do-not-disrupt");
    assert!(!retired(pool_plan(&plan_of(&desired, &karpenter), "k")).contains(&"k-2"));
    let options = PlanOptions { replace: ["k-2".to_owned()].into(), ..PlanOptions::default() };
    assert!(retired(pool_plan(&crate::plan::plan(&desired, &world, options), "k")).contains(&"k-2"));
    // Without the annotation, the next plan replaces it.
    let mut lifted = world.clone();
    lifted.nodes[1].retirement.do_not_disrupt = None;
    assert_eq!(retired(pool_plan(&plan_of(&desired, &lifted), "k")).len(), 3);

    // A scale-down keeps it too, though it is the oldest.
    let mut current = world.clone();
    let hash = desired.pools[0].template_hash.clone();
    for c in &mut current.containers {
        c.template_hash.clone_from(&hash);
    }
    current.nodes[1].retirement.do_not_disrupt = None;
    current.nodes[0].retirement.do_not_disrupt = Some("poolctl.dev/do-not-disrupt");
    let mut fewer = desired.clone();
    fewer.pools[0].pool.spec.replicas = 1;
    let plan = plan_of(&fewer, &current);
    let mut gone = retired(pool_plan(&plan, "k"));
    gone.sort_unstable();
    assert_eq!(gone, ["k-2", "k-3"]);
    // An unhealthy instance on such a Node is replaced all the same: it does not serve.
    let mut sick = current.clone();
    sick.nodes[0].ready = false;
    sick.nodes[0].conditions = vec![crate::model::NodeCondition::ready("False", NOON - 3600)];
    assert!(retired(pool_plan(&plan_of(&desired, &sick), "k")).contains(&"k-1"));
}

#[test]
fn an_unhealthy_instance_whose_node_skips_remediation_is_reported_not_replaced() {
    let (desired, mut world) = node_pool_at(3, &[("True", 600), ("False", 3600), ("True", 600)], None);
    let replaced = plan_of(&desired, &world);
    assert!(retired(pool_plan(&replaced, "k")).contains(&"k-1"), "without the annotation it is replaced");
    for annotation in ["poolctl.dev/skip-remediation", "cluster.x-k8s.io/skip-remediation"] {
        world.nodes[1].retirement.skip_remediation = Some(annotation);
        let plan = plan_of(&desired, &world);
        let k = pool_plan(&plan, "k");
        assert!(k.steps.is_empty(), "{:?}", verbs(k));
        let note = k.instances[1].health.as_ref().expect("a health note");
        assert_eq!(note.action, format!("held ({annotation})"));
        assert_eq!(plan.summary.unremediated, 1);
        let text = text_of(&plan);
        assert!(
            text.contains(&format!("k-1: unhealthy: Ready=False for 1h (timeout 5m): held ({annotation})")),
            "{text}"
        );
    }
}

#[test]
fn a_rollout_that_leaves_only_a_held_instance_is_not_stalled() {
    let dp = PoolArgs { nodes: true, ..PoolArgs::new("k", 2) }.build();
    let hash = dp.template_hash.clone();
    let mut new = container("k-new", "k", &hash, NOON - 3600);
    new.came_up = Some(NOON - 3590);
    let mut world = World {
        now: NOON,
        containers: vec![container("k-old", "k", "0ld", 1), new],
        nodes: vec![node("k-old", "k"), node("k-new", "k")],
        rollouts: [(
            "k".to_owned(),
            crate::model::RolloutRecord {
                template_hash: hash,
                since: NOON - 3600,
                rolled_back_from: None,
                progressed: None,
            },
        )]
        .into(),
        ..World::default()
    };
    world.nodes[0].retirement.do_not_disrupt = Some("poolctl.dev/do-not-disrupt");
    let desired = desired(vec![dp]);
    let plan = plan_of(&desired, &world);
    let k = pool_plan(&plan, "k");
    assert!(k.degraded.is_none(), "{:?}", k.degraded);
    assert!(k.steps.is_empty(), "{:?}", verbs(k));
    // The annotation gone, an hour after the last step, the rollout goes on: its clock is the
    // owner's, not the deadline's.
    world.nodes[0].retirement.do_not_disrupt = None;
    let plan = plan_of(&desired, &world);
    assert!(retired(pool_plan(&plan, "k")).contains(&"k-old"));
}

#[test]
fn on_delete_replaces_no_outdated_instance_until_it_is_marked_dead_or_surplus() {
    let mut dp = PoolArgs { nodes: true, ..PoolArgs::new("k", 3) }.build();
    dp.pool.spec.rollout.strategy = crate::spec::Strategy::OnDelete;
    let hash = dp.template_hash.clone();
    let mut world = World { now: NOON, ..World::default() };
    for i in 1..=3 {
        let name = format!("k-{i}");
        world.containers.push(container(&name, "k", "0ld", i));
        world.nodes.push(node(&name, "k"));
    }
    let desired = desired(vec![dp]);
    let plan = plan_of(&desired, &world);
    let k = pool_plan(&plan, "k");
    assert!(k.steps.is_empty(), "a new template alone replaces nothing: {:?}", verbs(k));
    assert_eq!(k.outdated_kept, 3);
    assert!(
        text_of(&plan).contains("strategy OnDelete: 3 outdated instances keep running"),
        "{}",
        text_of(&plan)
    );
    assert!(!plan.has_changes());

    // `--replace k-2`: exactly one new instance, of the new template, before k-2 goes.
    let options = PlanOptions { replace: ["k-2".to_owned()].into(), ..PlanOptions::default() };
    let plan = crate::plan::plan(&desired, &world, options);
    let k = pool_plan(&plan, "k");
    let v: Vec<&str> = verbs(k).iter().map(|(verb, _)| *verb).collect();
    assert_eq!(v, ["create", "await-ready", "cordon", "drain", "stop", "delete-node", "remove"]);
    assert!(matches!(&k.steps[0].action, Action::Create { template_hash, .. } if *template_hash == hash));
    assert_eq!(retired(k), ["k-2"]);

    // A dead instance is replaced with the new template; a scale-up adds new ones.
    let mut dead = world.clone();
    dead.containers[0].state = ContainerState::Exited;
    dead.nodes.remove(0);
    let k_plan = plan_of(&desired, &dead);
    assert_eq!(retired(pool_plan(&k_plan, "k")), ["k-1"]);
    let mut more = desired.clone();
    more.pools[0].pool.spec.replicas = 4;
    let plan = plan_of(&more, &world);
    assert!(retired(pool_plan(&plan, "k")).is_empty());
    assert_eq!(plan.steps().filter(|(_, s)| matches!(s.action, Action::Create { .. })).count(), 1);
    // A scale-down retires the outdated first.
    let mut mixed = world.clone();
    mixed.containers[0].template_hash.clone_from(&hash);
    let mut fewer = desired.clone();
    fewer.pools[0].pool.spec.replicas = 1;
    let plan = plan_of(&fewer, &mixed);
    let mut gone = retired(pool_plan(&plan, "k"));
    gone.sort_unstable();
    assert_eq!(gone, ["k-2", "k-3"]);
}

#[test]
fn an_instance_older_than_max_age_is_replaced_surge_first_and_the_next_expiry_is_the_next_check() {
    let mut dp = PoolArgs::new("w", 2).build();
    dp.pool.spec.rollout.max_age = Some(crate::spec::Duration::from_secs(600));
    let hash = dp.template_hash.clone();
    let world = World {
        now: NOON,
        containers: vec![container("w-1", "w", &hash, NOON - 900), container("w-2", "w", &hash, NOON - 300)],
        ..World::default()
    };
    let desired = desired(vec![dp]);
    let plan = plan_of(&desired, &world);
    let w = pool_plan(&plan, "w");
    let v: Vec<&str> = verbs(w).iter().map(|(verb, _)| *verb).collect();
    assert_eq!(v, ["create", "await-ready", "stop", "remove"], "surge first");
    assert_eq!(retired(w), ["w-1"]);
    assert!(text_of(&plan).contains("w-1: replaced although current (older than spec.rollout.maxAge)"));
    // w-2 expires at NOON + 300: the watch looks again then (a second later, to be past it).
    assert_eq!(plan.next_check(), Some(NOON + 301));
}

// ---------------------------------------------------------------------------------------------
// Canaries

/// Pool `w` of 3 replicas on template `busybox:2` with `canary`, and a world at [`NOON`] with
/// three instances of the old template (`busybox:1`, their template labelled, so that a
/// rollback can rebuild it) and the rollout record of the new one.
fn canaried(canary: crate::spec::IntOrPercent) -> (crate::model::DesiredPool, World) {
    let old = PoolArgs { image: "busybox:1", ..PoolArgs::new("w", 3) }.build();
    let mut new = PoolArgs { image: "busybox:2", ..PoolArgs::new("w", 3) }.build();
    new.pool.spec.rollout.canary = Some(canary);
    let template = Some(crate::spec::canonical_template(&old.pool.spec));
    let containers = (1..=3)
        .map(|i| Container {
            template: template.clone(),
            ..container(&format!("w-old-{i}"), "w", &old.template_hash, NOON - 3600 + i)
        })
        .collect();
    let record = crate::model::RolloutRecord {
        template_hash: new.template_hash.clone(),
        since: NOON - 120,
        rolled_back_from: None,
        progressed: None,
    };
    let world = World { now: NOON, rollouts: [("w".to_owned(), record)].into(), ..world_of(containers) };
    (new, world)
}

/// The world with a canary of `dp`'s template, `w-canary`, that came up `up_for` seconds ago.
fn with_canary(dp: &crate::model::DesiredPool, world: &World, up_for: i64) -> World {
    let mut world = world.clone();
    let mut canary = container("w-canary", "w", &dp.template_hash, NOON - up_for - 10);
    canary.came_up = Some(NOON - up_for);
    world.containers.push(canary);
    world
}

fn creates(pool: &PoolPlan) -> usize {
    pool.steps.iter().filter(|s| matches!(s.action, Action::Create { .. })).count()
}

/// `canary: 1` on 3 instances: a new template makes exactly one new instance and retires
/// nothing; once it is up the pool holds, saying so in text and JSON, and is not in sync.
#[test]
fn a_canary_of_one_is_made_beside_the_old_instances_and_the_pool_then_waits_for_promotion() {
    let (dp, world) = canaried(crate::spec::IntOrPercent::Count(1));
    let desired = desired(vec![dp.clone()]);
    let plan = plan_of(&desired, &world);
    let w = pool_plan(&plan, "w");
    let v: Vec<&str> = verbs(w).iter().map(|(verb, _)| *verb).collect();
    assert_eq!(v, ["create", "await-ready"], "one canary, nothing retired");
    assert!(retired(w).is_empty());
    let canary = w.canary.as_ref().expect("a canary state");
    assert_eq!((canary.count, canary.of, canary.up, canary.promoted), (1, 3, 0, false));
    assert_eq!(w.outdated_kept, 0, "kept for the canary, not as OnDelete keeps");

    let up = with_canary(&dp, &world, 30);
    let plan = plan_of(&desired, &up);
    let w = pool_plan(&plan, "w");
    assert!(w.steps.is_empty(), "no disruptive step while waiting: {:?}", verbs(w));
    assert!(!plan.in_sync(), "a pool of two templates is not in sync");
    assert_eq!(plan.summary.canary_waiting, 1);
    assert_eq!(plan.next_check(), None, "only a promotion lets it go on");
    let shown = text_of(&plan);
    assert!(shown.contains("canary 1 of 3: waiting for promotion (`poolctl promote w`)"), "{shown}");
    assert!(shown.contains(", canaries waiting for promotion"), "{shown}");
    let json = serde_json::to_value(w).unwrap();
    assert_eq!(json["canary"]["count"], 1, "{json}");
    assert_eq!(json["canary"]["of"], 3, "{json}");
    assert_eq!(json["canary"]["promoted"], false, "{json}");
}

/// Canaries that serve and wait for their promotion are a condition the cluster's users hear of
/// (a Normal `CanaryWaiting` Event on the pool's Lease, a notification), not while they are
/// still being made.
#[test]
fn canaries_waiting_for_promotion_are_told_as_a_normal_event_once_they_serve() {
    struct Heard(std::sync::Mutex<Vec<(&'static str, bool, String)>>);
    impl crate::rollout::event::Sink for Heard {
        fn event(&self, event: &crate::rollout::event::Event<'_>) {
            if let crate::rollout::event::Event::Kube { reason, note, warning, .. } = *event {
                self.0.lock().unwrap().push((reason, warning, note.to_owned()));
            }
        }
    }
    let (dp, world) = canaried(crate::spec::IntOrPercent::Count(1));
    let desired = desired(vec![dp.clone()]);
    let making = plan_of(&desired, &world);
    assert!(crate::rollout::conditions(&making).is_empty(), "the canary is still to be made");

    let waiting = plan_of(&desired, &with_canary(&dp, &world, 30));
    let heard = Heard(std::sync::Mutex::default());
    crate::rollout::tell_conditions(&waiting, |_| true, &heard);
    let heard = heard.0.into_inner().unwrap();
    assert_eq!(heard.len(), 1, "{heard:?}");
    let (reason, warning, note) = &heard[0];
    assert_eq!((*reason, *warning), ("CanaryWaiting", false), "a Normal Event");
    assert!(note.contains("canary 1 of 3: waiting for promotion"), "{note}");
    assert_eq!(crate::report::Notice::result_of(reason), "canary_waiting");
}

/// A percentage is of `replicas`, rounded up, and the canaries are made together, beside the
/// old instances, whatever `maxSurge` says.
#[test]
fn canaries_as_a_percentage_round_up_and_are_made_at_once() {
    let (mut dp, mut world) = canaried(crate::spec::IntOrPercent::Percent(25));
    dp.pool.spec.replicas = 10;
    let old = world.containers[0].clone();
    world.containers =
        (1..=10).map(|i| container(&format!("w-old-{i}"), "w", &old.template_hash, i)).collect();
    let plan = plan_of(&desired(vec![dp]), &world);
    let w = pool_plan(&plan, "w");
    assert_eq!(creates(w), 3, "25% of 10 is 3: {:?}", verbs(w));
    assert!(w.steps.iter().all(|s| s.batch == 1), "{:?}", w.steps);
    assert!(retired(w).is_empty());
}

/// A promotion recorded for the spec's template lets the rest roll, as a rollout without
/// canaries would; one recorded for another template promotes nothing.
#[test]
fn a_promotion_of_the_template_rolls_the_rest_and_one_of_another_template_does_not() {
    let (dp, world) = canaried(crate::spec::IntOrPercent::Count(1));
    let desired = desired(vec![dp.clone()]);
    let mut stale = with_canary(&dp, &world, 30);
    let promotion = |hash: &str| crate::model::Promotion {
        template_hash: hash.to_owned(),
        by: "ann@box".into(),
        at: NOON - 5,
    };
    stale.promoted.insert("w".to_owned(), promotion("0ther"));
    let plan = plan_of(&desired, &stale);
    assert!(pool_plan(&plan, "w").steps.is_empty(), "another template's promotion holds nothing up");

    let mut promoted = stale.clone();
    promoted.promoted.insert("w".to_owned(), promotion(&dp.template_hash));
    let plan = plan_of(&desired, &promoted);
    let w = pool_plan(&plan, "w");
    assert_eq!(creates(w), 2, "the rest of the replicas: {:?}", verbs(w));
    let mut gone = retired(w);
    gone.sort_unstable();
    assert_eq!(gone, ["w-old-1", "w-old-2", "w-old-3"]);
    let canary = w.canary.as_ref().expect("still said");
    assert!(canary.promoted && canary.message.contains("promoted by ann@box"), "{canary:?}");
    assert_eq!(plan.summary.canary_waiting, 0);
}

/// `autoPromote`: the pool holds until every canary has been up that long by the world's
/// clock, the plan says when and the watch is woken then; past it the rest rolls by itself.
#[test]
fn auto_promote_lets_the_rest_roll_once_the_canaries_served_that_long_and_wakes_watch_then() {
    let (mut dp, world) = canaried(crate::spec::IntOrPercent::Count(1));
    dp.pool.spec.rollout.auto_promote = Some(crate::spec::Duration::from_secs(5));
    let desired = desired(vec![dp.clone()]);
    let plan = plan_of(&desired, &with_canary(&dp, &world, 3));
    let w = pool_plan(&plan, "w");
    assert!(w.steps.is_empty(), "{:?}", verbs(w));
    assert_eq!(plan.next_check(), Some(NOON + 2));
    let canary = w.canary.as_ref().unwrap();
    assert_eq!(canary.auto_promote_at.as_deref(), Some("2023-11-14T22:13:22Z"));
    assert!(canary.message.contains("or autoPromote at 2023-11-14T22:13:22Z"), "{}", canary.message);

    let plan = plan_of(&desired, &with_canary(&dp, &world, 5));
    let w = pool_plan(&plan, "w");
    assert_eq!(creates(w), 2, "{:?}", verbs(w));
    assert_eq!(retired(w).len(), 3);
    assert!(
        w.canary.as_ref().unwrap().promoted_by.as_deref().is_some_and(|by| by.starts_with("autoPromote"))
    );
}

/// Nothing old is touched while canaries wait, an old instance that died included: it is said
/// held, not replaced (promote, or roll back, to have it replaced).
#[test]
fn a_dead_old_instance_is_held_not_replaced_while_canaries_wait() {
    let (dp, world) = canaried(crate::spec::IntOrPercent::Count(1));
    let mut world = with_canary(&dp, &world, 30);
    world.containers[0].state = ContainerState::Exited;
    world.containers[0].status = "Exited (137) 1 second ago".to_owned();
    let plan = plan_of(&desired(vec![dp]), &world);
    let w = pool_plan(&plan, "w");
    assert!(w.steps.is_empty(), "{:?}", verbs(w));
    let dead = w.instances.iter().find(|i| i.name == "w-old-1").unwrap();
    assert_eq!(dead.fate, Fate::Keep);
    assert_eq!(dead.health.as_ref().map(|h| h.action), Some("held (canaries wait for promotion)"));
    assert_eq!(plan.summary.unremediated, 1);
}

/// A source reverted while the canaries wait: the old instances run the spec's template again,
/// and the canaries, outdated now, are retired; nothing is made. So with canaries of the whole
/// pool, where only the history tells which template the pool last ran.
#[test]
fn a_source_reverted_while_canaries_wait_retires_the_canaries() {
    let (dp, world) = canaried(crate::spec::IntOrPercent::Count(1));
    let waiting = with_canary(&dp, &world, 30);
    let old = PoolArgs { image: "busybox:1", ..PoolArgs::new("w", 3) }.build();
    let mut reverted = old.clone();
    reverted.pool.spec.rollout.canary = dp.pool.spec.rollout.canary;
    let plan = plan_of(&desired(vec![reverted.clone()]), &waiting);
    let w = pool_plan(&plan, "w");
    assert_eq!(retired(w), ["w-canary"], "{:?}", verbs(w));
    assert_eq!(creates(w), 0);
    assert!(w.canary.is_none());

    // Canaries of all 3: as many of each template. The history says which one the pool ran.
    reverted.pool.spec.rollout.canary = Some(crate::spec::IntOrPercent::Percent(100));
    let mut both = waiting.clone();
    for i in 2..=3 {
        let mut c = container(&format!("w-canary-{i}"), "w", &dp.template_hash, NOON - 40);
        c.came_up = Some(NOON - 30);
        both.containers.push(c);
    }
    let revision = |number, hash: &str, end| crate::model::Revision {
        number,
        template_hash: hash.to_owned(),
        template: None,
        source: None,
        commit: None,
        started: NOON - 3600,
        rolled_back_from: None,
        end,
    };
    let complete =
        crate::model::RevisionEnd { result: crate::model::RolloutResult::Complete, at: NOON - 3500 };
    both.history.insert(
        "w".to_owned(),
        vec![revision(1, &old.template_hash, Some(complete)), revision(2, &dp.template_hash, None)],
    );
    let plan = plan_of(&desired(vec![reverted]), &both);
    let w = pool_plan(&plan, "w");
    let mut gone = retired(w);
    gone.sort_unstable();
    assert_eq!(gone, ["w-canary", "w-canary-2", "w-canary-3"], "{:?}", verbs(w));
    assert_eq!(creates(w), 0);
}

/// Old instances past `maxAge` while canaries hold are kept as they are, and say nothing of
/// when to look again: a time already past would wake the watch at once, again and again.
#[test]
fn expired_old_instances_canaries_hold_do_not_wake_the_watch_again_and_again() {
    let (mut dp, world) = canaried(crate::spec::IntOrPercent::Count(1));
    dp.pool.spec.rollout.max_age = Some(crate::spec::Duration::from_secs(600));
    let desired = desired(vec![dp.clone()]);
    let plan = plan_of(&desired, &with_canary(&dp, &world, 30));
    let w = pool_plan(&plan, "w");
    assert!(w.steps.is_empty(), "nothing old is touched: {:?}", verbs(w));
    // The canary expires in 600s from its creation (NOON - 40): that is the next look.
    assert_eq!(plan.next_check(), Some(NOON - 40 + 600 + 1));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Canaries on generated pools: the first plan only creates, `min(canary, replicas)` of the
    /// new template; carried out, the next plan holds with no step at all; once promoted, the
    /// pool converges on the new template, within `replicas + max(maxSurge, canaries)`
    /// instances and `maxUnavailable` at every step.
    #[test]
    fn canaries_hold_then_a_promotion_converges(
        replicas in 1i64..6,
        surge in 0i64..3,
        unavailable in 0i64..3,
        canary in 1i64..8,
        nodes in any::<bool>(),
    ) {
        prop_assume!(surge + unavailable > 0);
        let args = PoolArgs { surge, unavailable, nodes, ..PoolArgs::new("w", replicas) };
        let mut dp = args.build();
        dp.pool.spec.rollout.canary = Some(crate::spec::IntOrPercent::Count(canary));
        let hash = dp.template_hash.clone();
        let names: Vec<String> = (1..=replicas).map(|i| format!("w-old-{i}")).collect();
        let mut world = world_of(names.iter().zip(1..).map(|(n, i)| container(n, "w", "0ld", i)).collect());
        if nodes {
            world.nodes = names.iter().map(|n| node(n, "w")).collect();
        }
        world.now = NOON;
        let desired = desired(vec![dp]);
        let first = plan_of(&desired, &world);
        let made = first.steps().filter(|(_, s)| matches!(s.action, Action::Create { .. })).count();
        prop_assert_eq!(made, count(canary.min(replicas)));
        prop_assert!(first.steps().all(|(_, s)| !s.action.is_retirement()));
        let mut sim = SimWorld::new(world);
        sim.apply(&first);
        let held = plan_of(&desired, &sim.world);
        prop_assert!(!held.has_changes(), "{:?}", verbs(pool_plan(&held, "w")));
        prop_assert_eq!(held.summary.canary_waiting, 1);

        let promotion =
            crate::model::Promotion { template_hash: hash.clone(), by: "ann".into(), at: NOON };
        let mut world = sim.world;
        world.promoted.insert("w".to_owned(), promotion);
        for _ in 0..20 {
            let next = plan_of(&desired, &world);
            if !next.has_changes() {
                break;
            }
            let promoted = world.promoted.clone();
            world = execute_checking_capacity(&next, &world, &args);
            world.promoted = promoted;
        }
        let mine: Vec<&Container> = world.containers.iter().filter(|c| c.pool == "w").collect();
        prop_assert_eq!(mine.len(), count(replicas));
        prop_assert!(mine.iter().all(|c| c.template_hash == hash), "{:?}", mine);
    }
}

/// A canary that served and turned unhealthy: under `failureAction: rollback` the pool goes/// A canary that served and turned unhealthy: under `failureAction: rollback` the pool goes
/// back to its old template, which retires the canary alone and creates nothing; under the
/// default `pause` it is replaced, as any dead instance is, and nothing old is touched either.
#[test]
fn an_unhealthy_canary_is_retired_by_a_rollback_and_nothing_old_is_touched() {
    let (mut dp, world) = canaried(crate::spec::IntOrPercent::Count(1));
    let mut sick = with_canary(&dp, &world, 30);
    let canary = sick.containers.last_mut().unwrap();
    (canary.state, canary.status) = (ContainerState::Exited, "Exited (1) 5 seconds ago".to_owned());

    let plan = plan_of(&desired(vec![dp.clone()]), &sick);
    let w = pool_plan(&plan, "w");
    assert_eq!(retired(w), ["w-canary"], "replaced: {:?}", verbs(w));
    assert_eq!(creates(w), 1);
    assert!(w.degraded.is_none());

    dp.pool.spec.rollout.failure_action = crate::spec::FailureAction::Rollback;
    let plan = plan_of(&desired(vec![dp.clone()]), &sick);
    let w = pool_plan(&plan, "w");
    let why = w.degraded.as_deref().expect("degraded");
    assert!(
        why.contains("canary w-canary of template") && why.contains("turned unhealthy (exited (1))"),
        "{why}"
    );
    assert!(why.contains("rolling back to template"), "{why}");
    assert_eq!(retired(w), ["w-canary"], "{:?}", verbs(w));
    assert_eq!(creates(w), 0, "the old instances run the template it goes back to");
    assert!(w.canary.is_none(), "a rollback is not led by canaries");
}

// ---------------------------------------------------------------------------------------------
// Disruption windows

/// 2026-12-07T10:00:00Z, a Monday: 11:00 in Europe/Berlin.
fn monday_ten() -> i64 {
    "2026-12-07T10:00:00Z".parse::<jiff::Timestamp>().unwrap().as_second()
}

fn window(
    kind: crate::spec::WindowKind,
    schedule: &str,
    hours: u64,
    zone: Option<&str>,
    reasons: &[crate::spec::DisruptionReason],
) -> crate::spec::DisruptionWindow {
    crate::spec::DisruptionWindow {
        kind,
        schedule: schedule.to_owned(),
        duration: crate::spec::Duration::from_secs(hours * 3600),
        time_zone: zone.map(str::to_owned),
        reasons: reasons.to_vec(),
    }
}

/// Pool `w` of `replicas` with `windows`, and a world at `now` with its instances `w-1`..`w-n`
/// of `hashes` (`new` is the spec's template), up.
fn windowed(
    replicas: i64,
    windows: Vec<crate::spec::DisruptionWindow>,
    hashes: &[&str],
    now: i64,
) -> (Desired, World) {
    let mut dp = PoolArgs::new("w", replicas).build();
    dp.pool.spec.disruption.windows = windows;
    let hash = dp.template_hash.clone();
    let containers = hashes
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let h = if *h == "new" { hash.as_str() } else { h };
            container(&format!("w-{}", i + 1), "w", h, now - 3600 + i64::try_from(i).unwrap())
        })
        .collect();
    (desired(vec![dp]), World { now, ..world_of(containers) })
}

fn held_by_window(pool: &PoolPlan) -> Vec<(&str, crate::spec::DisruptionReason)> {
    pool.instances.iter().filter_map(|i| Some((i.name.as_str(), i.held_by_window?))).collect()
}

#[test]
fn a_deny_window_open_now_holds_a_rollout_back_whole_names_its_end_and_wakes_watch_then() {
    use crate::spec::{DisruptionReason::Rollout, WindowKind::Deny};
    let working_hours = window(Deny, "0 9 * * MON-FRI", 8, Some("Europe/Berlin"), &[]);
    let (desired, world) = windowed(3, vec![working_hours], &["0ld", "0ld", "0ld"], monday_ten());
    let plan = plan_of(&desired, &world);
    let w = pool_plan(&plan, "w");
    assert!(w.steps.is_empty(), "no disruptive step, and no surge either: {:?}", verbs(w));
    assert_eq!(held_by_window(w), [("w-1", Rollout), ("w-2", Rollout), ("w-3", Rollout)]);
    // Opened at 09:00 in Berlin (08:00Z), closes at 17:00 there: 16:00Z.
    let hold = &w.windows[0];
    assert_eq!(hold.until.as_deref(), Some("2026-12-07T17:00:00+01:00"));
    assert_eq!(plan.next_check(), Some(monday_ten() + 6 * 3600));
    let said = "rollout blocked by window spec.disruption.windows[0] (deny \"0 9 * * MON-FRI\" for 8h) until \
                2026-12-07T17:00:00+01:00 (Europe/Berlin): keeps w-1, w-2, w-3";
    let text = text_of(&plan);
    assert!(text.contains(said), "{text}");
    assert!(text.contains("held by disruption windows"), "{text}");
    assert_eq!(plan.summary.window_held, 3);
    assert!(!plan.has_changes() && !plan.in_sync());
    let mut json = Vec::new();
    render_json(&plan, &mut json).unwrap();
    let json: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(json["pools"][0]["windows"][0]["until"], "2026-12-07T17:00:00+01:00");
    assert_eq!(json["pools"][0]["windows"][0]["reason"], "rollout");
    assert!(json["pools"][0]["windows"][0]["message"].as_str().unwrap().starts_with("blocked by window"));
    assert_eq!(json["pools"][0]["instances"][0]["held_by_window"], "rollout");

    // `--ignore-windows` rolls it all the same, and says what it overrides.
    let options = PlanOptions { ignore_windows: true, ..PlanOptions::default() };
    let ignored = crate::plan::plan(&desired, &world, options);
    let w = pool_plan(&ignored, "w");
    assert_eq!(retired(w), ["w-1", "w-2", "w-3"]);
    assert!(w.windows[0].ignored && held_by_window(w).is_empty());
    assert!(text_of(&ignored).contains("--ignore-windows: rollout goes ahead although blocked by window"));
    assert_eq!(ignored.next_check(), None);

    // Past 17:00 in Berlin the window is closed: the rollout goes on.
    let (desired, evening) = windowed(
        3,
        desired.pools[0].pool.spec.disruption.windows.clone(),
        &["0ld"; 3],
        monday_ten() + 6 * 3600,
    );
    let w = pool_plan(&plan_of(&desired, &evening), "w").clone();
    assert_eq!(retired(&w), ["w-1", "w-2", "w-3"]);
    assert!(w.windows.is_empty());
}

#[test]
fn with_an_allow_window_disruption_waits_for_it_to_open_deny_wins_and_a_scale_up_is_not_held() {
    use crate::spec::DisruptionReason::{Rollout, ScaleDown};
    use crate::spec::WindowKind::{Allow, Deny};
    let nights = window(Allow, "0 22 * * *", 8, None, &[]);
    let (desired, world) = windowed(4, vec![nights.clone()], &["0ld", "0ld", "0ld"], monday_ten());
    let plan = plan_of(&desired, &world);
    let w = pool_plan(&plan, "w");
    // The scale-up disrupts nothing: one new instance; nothing retired.
    let v: Vec<&str> = verbs(w).iter().map(|(verb, _)| *verb).collect();
    assert_eq!(v, ["create", "await-ready"]);
    assert_eq!(held_by_window(w).len(), 3);
    assert_eq!(w.windows[0].until.as_deref(), Some("2026-12-07T22:00:00+00:00"));
    assert!(
        w.windows[0].message.contains("(allow \"0 22 * * *\" for 8h) until 2026-12-07T22:00:00+00:00 (UTC)")
    );
    assert_eq!(plan.next_check(), Some(monday_ten() + 12 * 3600));

    // At 23:00 it is open; a deny window open then for rollouts wins over it, until it closes.
    let late = monday_ten() + 13 * 3600;
    let (desired, world) = windowed(3, vec![nights.clone()], &["0ld"; 3], late);
    assert_eq!(retired(pool_plan(&plan_of(&desired, &world), "w")), ["w-1", "w-2", "w-3"]);
    let freeze = window(Deny, "0 20 * * *", 4, None, &[Rollout]);
    let (desired, world) = windowed(3, vec![nights, freeze], &["0ld"; 3], late);
    let plan = plan_of(&desired, &world);
    let w = pool_plan(&plan, "w");
    assert!(w.steps.is_empty(), "{:?}", verbs(w));
    assert_eq!(w.windows[0].window, "spec.disruption.windows[1]");
    // Midnight: the deny window closes, the allow window is still open.
    assert_eq!(w.windows[0].until.as_deref(), Some("2026-12-08T00:00:00+00:00"));

    // A window for scale-downs only leaves a rollout alone, and holds a scale-down.
    let (desired, world) =
        windowed(2, vec![window(Deny, "0 9 * * *", 8, None, &[ScaleDown])], &["new"; 3], monday_ten());
    let w = pool_plan(&plan_of(&desired, &world), "w").clone();
    assert!(w.steps.is_empty(), "{:?}", verbs(&w));
    assert_eq!(held_by_window(&w), [("w-1", ScaleDown)]);
    let (desired, world) =
        windowed(3, vec![window(Deny, "0 9 * * *", 8, None, &[ScaleDown])], &["0ld"; 3], monday_ten());
    assert_eq!(retired(pool_plan(&plan_of(&desired, &world), "w")), ["w-1", "w-2", "w-3"]);
}

#[test]
fn a_window_that_closes_mid_rollout_keeps_the_new_and_the_old_instances_serving() {
    use crate::spec::WindowKind::Deny;
    // The first batch made w-4 of the new template; then the window opened.
    let deny = window(Deny, "0 10 * * *", 2, None, &[]);
    let (desired, world) = windowed(3, vec![deny], &["0ld", "0ld", "0ld", "new"], monday_ten());
    let plan = plan_of(&desired, &world);
    let w = pool_plan(&plan, "w");
    assert!(w.steps.is_empty(), "{:?}", verbs(w));
    assert!(w.instances.iter().all(|i| i.fate == Fate::Keep));
    assert_eq!(held_by_window(w).len(), 3, "the old ones are held, the new one kept");
    assert_eq!(plan.next_check(), Some(monday_ten() + 2 * 3600));
}

#[test]
fn a_window_over_remediation_holds_the_replacement_of_a_dead_instance_one_over_rollouts_does_not() {
    use crate::spec::DisruptionReason::{Remediation, Rollout};
    use crate::spec::WindowKind::Deny;
    let (desired, mut world) =
        windowed(3, vec![window(Deny, "0 9 * * *", 8, None, &[Remediation])], &["new"; 3], monday_ten());
    world.containers[1].state = ContainerState::Exited;
    let plan = plan_of(&desired, &world);
    let w = pool_plan(&plan, "w");
    assert!(w.steps.is_empty(), "not replaced, nothing created: {:?}", verbs(w));
    assert_eq!(held_by_window(w), [("w-2", Remediation)]);
    let note = w.instances[1].health.as_ref().unwrap();
    assert_eq!(note.action, "held (disruption window)");

    let (desired, _) =
        windowed(3, vec![window(Deny, "0 9 * * *", 8, None, &[Rollout])], &["new"; 3], monday_ten());
    let plan = plan_of(&desired, &world);
    let w = pool_plan(&plan, "w");
    let v: Vec<&str> = verbs(w).iter().map(|(verb, _)| *verb).collect();
    assert_eq!(v, ["create", "await-ready", "remove"]);
    assert!(w.windows.is_empty());
}

#[test]
fn an_expired_instance_a_window_holds_wakes_watch_when_the_window_ends_not_at_once() {
    use crate::spec::{DisruptionReason::Expiry, WindowKind::Deny};
    let (mut desired, world) =
        windowed(1, vec![window(Deny, "0 9 * * *", 8, None, &[Expiry])], &["new"], monday_ten());
    desired.pools[0].pool.spec.rollout.max_age = Some(crate::spec::Duration::from_secs(600));
    let plan = plan_of(&desired, &world);
    let w = pool_plan(&plan, "w");
    assert!(w.steps.is_empty(), "{:?}", verbs(w));
    assert_eq!(held_by_window(w), [("w-1", Expiry)]);
    // It expired long ago: what wakes the watch is the window's end, at 17:00.
    assert_eq!(plan.next_check(), Some(monday_ten() + 7 * 3600));
}

#[test]
fn a_pool_that_depends_on_another_waits_until_it_is_in_sync_and_serving() {
    let system = PoolArgs::new("system", 1).build();
    let mut apps = PoolArgs::new("apps", 1).build();
    apps.pool.spec.depends_on = vec!["system".to_owned()];
    let desired = desired(vec![system.clone(), apps]);
    let empty = World { now: NOON, ..World::default() };

    // Both new: system goes, apps waits for it, and the plan says so.
    let both = plan_of(&desired, &empty);
    assert!(!pool_plan(&both, "system").steps.is_empty());
    let waiting = pool_plan(&both, "apps");
    assert!(waiting.steps.is_empty(), "{:?}", waiting.steps);
    let wait = waiting.waits_for.as_ref().expect("apps waits");
    assert_eq!((wait.pools.as_slice(), wait.steps.is_empty()), (&["system".to_owned()][..], false));
    assert_eq!((both.summary.create, both.summary.waiting_for_pools), (1, wait.steps.len()));
    assert!(
        text_of(&both).contains("Steps held back until pool system is in sync and serving"),
        "{}",
        text_of(&both)
    );

    // A plan of apps alone (a watch reconciles each pool on its own) judges system all the same.
    let only_apps = PlanOptions { pools: BTreeSet::from(["apps".to_owned()]), ..PlanOptions::default() };
    let alone = plan(&desired, &empty, only_apps.clone());
    assert!(pool_plan(&alone, "apps").waits_for.is_some());

    // system in sync and serving: apps goes.
    let hash = system.template_hash.clone();
    let up = World {
        now: NOON,
        containers: vec![container("system-1", "system", &hash, NOON - 60)],
        ..World::default()
    };
    for plan in [plan_of(&desired, &up), plan(&desired, &up, only_apps)] {
        let apps = pool_plan(&plan, "apps");
        assert!(apps.waits_for.is_none() && !apps.steps.is_empty(), "{apps:?}");
    }
}
