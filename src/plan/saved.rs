//! Saved plans, as `terraform plan -out` makes them: what `plan --out FILE` writes (the same
//! document `plan -o json` prints) and `apply FILE` carries out, exactly, or refuses when it is
//! stale.
//!
//! A plan is made from a source revision and an observed world. Its file records both: the
//! revision (a commit, or a digest of the pool files), and what was observed of each of the
//! plan's pools (container ids and states, Node states), an empty pool included: a plan made
//! when a pool had no instance is stale once instances exist (Terraform misses this case,
//! terraform#24078). The planner derives the random part of new instance names from the same
//! two, so that planning the same revision in the same world names the same instances.
//!
//! A saved plan is stale exactly when the source revision differs, or when the plan made again
//! under the locks has other steps (instance names included); the recorded observation then
//! says what changed in the world ([`world_changes`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::scope::{planned_pools, revision, seed_of};
use super::{Plan, PlanOptions};
use crate::model::{Desired, Origin, World, is_instance_name};

/// What a plan was made from, beside the plan itself in its file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// The source revision: `commit:<id>` for Git, `content:<sha256>` of the pools otherwise.
    pub revision: String,
    /// The choices the plan was made with, and the seed of its instance names.
    pub options: SavedOptions,
    /// What was observed of each of the plan's pools, by pool name.
    pub observed: BTreeMap<String, ObservedPool>,
}

/// [`PlanOptions`] as the file keeps them, with the seed the plan's instance names came from,
/// as hex text, which every JSON reader keeps exactly (a 64-bit number is not safe in
/// JavaScript). The seed is there for people and scripts: it is derived again when the plan is
/// made again, and a plan whose steps (names included) come out otherwise is stale.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedOptions {
    pub prune: bool,
    pub adopt: bool,
    pub seed: String,
    /// `--replace`: the instances replaced although they are current.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replace: Vec<String>,
    /// `--pool`: the only pools the plan covers (all when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<String>,
    /// `--ignore-windows`: disruption windows overridden.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignore_windows: bool,
}

impl SavedOptions {
    pub fn new(options: PlanOptions, seed: u64) -> Self {
        let replace = options.replace.into_iter().collect();
        let pools = options.pools.into_iter().collect();
        let (prune, adopt, ignore_windows) = (options.prune, options.adopt, options.ignore_windows);
        Self { prune, adopt, seed: format!("{seed:016x}"), replace, pools, ignore_windows }
    }

    /// The choices the plan was made with.
    pub fn options(&self) -> PlanOptions {
        let replace = self.replace.iter().cloned().collect();
        let pools = self.pools.iter().cloned().collect();
        // Not the Node the saving poolctl ran on: the one carrying the plan out gives its own.
        PlanOptions {
            prune: self.prune,
            adopt: self.adopt,
            retry_stalled: false,
            rollback: std::collections::BTreeSet::new(),
            replace,
            pools,
            own_node: None,
            ignore_windows: self.ignore_windows,
            // A saved plan of a pool suspended since no longer matches the world: refused.
            ignore_suspend: false,
        }
    }
}

/// One pool as observed: what makes its plan what it is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedPool {
    /// By name.
    pub containers: BTreeMap<String, ObservedContainer>,
    /// By name.
    pub nodes: BTreeMap<String, ObservedNode>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedContainer {
    pub id: String,
    pub state: String,
    pub health: String,
    pub template_hash: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedNode {
    pub ready: bool,
    pub cordoned: bool,
}

/// What `world` shows of each pool a plan of `desired` covers: its containers, and the Nodes
/// that are its instances (by the pool label, a container's name, or an instance's name shape).
pub fn observe_pools(desired: &Desired, world: &World) -> BTreeMap<String, ObservedPool> {
    planned_pools(desired, world)
        .into_iter()
        .map(|pool| {
            let mut seen = ObservedPool::default();
            for c in world.containers.iter().filter(|c| c.pool == pool) {
                let container = ObservedContainer {
                    id: c.id.clone(),
                    state: c.state.as_str().to_owned(),
                    health: format!("{:?}", c.health).to_lowercase(),
                    template_hash: c.template_hash.clone(),
                };
                seen.containers.insert(c.name.clone(), container);
            }
            let ours = |n: &crate::model::Node| {
                n.pool.as_deref() == Some(pool)
                    || seen.containers.contains_key(&n.name)
                    || (n.pool.is_none() && is_instance_name(pool, &n.name))
            };
            for n in world.nodes.iter().filter(|n| ours(n)) {
                seen.nodes.insert(n.name.clone(), ObservedNode { ready: n.ready, cordoned: n.unschedulable });
            }
            (pool.to_owned(), seen)
        })
        .collect()
}

/// What a plan of `desired` in `world` with `options` is made from: the revision, the observed
/// pools, and the seed of new instance names the planner derives from the two.
pub fn provenance(desired: &Desired, world: &World, options: PlanOptions) -> Provenance {
    let seed = seed_of(desired, world);
    Provenance {
        revision: revision(desired),
        options: SavedOptions::new(options, seed),
        observed: observe_pools(desired, world),
    }
}

/// What differs between the world a plan was made in and the world now, one line per change,
/// empty when nothing that makes the plan differs.
pub fn world_changes(
    then: &BTreeMap<String, ObservedPool>,
    now: &BTreeMap<String, ObservedPool>,
) -> Vec<String> {
    let empty = ObservedPool::default();
    let mut out = Vec::new();
    let pools: std::collections::BTreeSet<&String> = then.keys().chain(now.keys()).collect();
    for pool in pools {
        let (a, b) = (then.get(pool).unwrap_or(&empty), now.get(pool).unwrap_or(&empty));
        if a.containers.is_empty() && !b.containers.is_empty() {
            let names: Vec<&str> = b.containers.keys().map(String::as_str).collect();
            out.push(format!(
                "pool {pool} had no container when the plan was made; now it has {}: {}",
                names.len(),
                names.join(", ")
            ));
            continue;
        }
        if !a.containers.is_empty() && b.containers.is_empty() {
            out.push(format!(
                "pool {pool} had {} when the plan was made; now it has none",
                crate::style::count(a.containers.len(), "container")
            ));
            continue;
        }
        for (name, x) in &a.containers {
            match b.containers.get(name) {
                None => out.push(format!("container {name} is gone")),
                Some(y) if y.id != x.id => out.push(format!(
                    "container {name} was replaced (id {} then, {} now)",
                    short(&x.id),
                    short(&y.id)
                )),
                Some(y) if y.state != x.state => {
                    out.push(format!("container {name}: {} then, {} now", x.state, y.state));
                }
                Some(y) if y.health != x.health => {
                    out.push(format!("container {name}: health {} then, {} now", x.health, y.health));
                }
                Some(y) if y.template_hash != x.template_hash => {
                    out.push(format!(
                        "container {name}: template {} then, {} now",
                        x.template_hash, y.template_hash
                    ));
                }
                Some(_) => {}
            }
        }
        for name in b.containers.keys().filter(|n| !a.containers.contains_key(*n)) {
            out.push(format!("container {name} was created since"));
        }
        let node = |n: &ObservedNode| {
            let ready = if n.ready { "Ready" } else { "NotReady" };
            if n.cordoned { format!("{ready}, cordoned") } else { ready.to_owned() }
        };
        for (name, x) in &a.nodes {
            match b.nodes.get(name) {
                None => out.push(format!("Node {name} is gone")),
                Some(y) if y != x => out.push(format!("Node {name}: {} then, {} now", node(x), node(y))),
                Some(_) => {}
            }
        }
        for (name, y) in b.nodes.iter().filter(|(n, _)| !a.nodes.contains_key(*n)) {
            out.push(format!("Node {name} registered since ({})", node(y)));
        }
    }
    out
}

fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

/// A saved plan as `apply FILE` reads it: the provenance, and the steps it must find again.
/// Everything else the file holds (previews, instances, summary) is for people and scripts.
#[derive(Debug, Clone, Deserialize)]
pub struct SavedPlan {
    pub format_version: u32,
    pub origin: Origin,
    #[serde(flatten)]
    pub provenance: Provenance,
    pub pools: Vec<SavedPool>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct SavedPool {
    pub name: String,
    #[serde(default)]
    pub steps: Vec<SavedStep>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct SavedStep {
    pub instance: String,
    pub action: String,
}

impl SavedPlan {
    /// What the plan does: `(pool, instance, action)` per step, in order.
    pub fn skeleton(&self) -> Vec<(&str, &str, &str)> {
        self.pools
            .iter()
            .flat_map(|p| {
                p.steps.iter().map(move |s| (p.name.as_str(), s.instance.as_str(), s.action.as_str()))
            })
            .collect()
    }
}

/// What a plan does: `(pool, instance, action)` per step, in order; what a saved plan and the
/// plan made again under the locks must agree on.
pub fn skeleton(plan: &Plan) -> Vec<(&str, &str, &str)> {
    plan.steps().map(|(p, s)| (p.name.as_str(), s.instance.as_str(), s.action.verb())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Container, ContainerState};
    use crate::testing::build::{PoolArgs, container, desired, node};

    fn world() -> World {
        World {
            containers: vec![container("w-a", "w", "old", 1), container("k-a", "k", "old", 1)],
            nodes: vec![node("k-a", "k")],
            ..World::default()
        }
    }

    fn observed(world: &World) -> BTreeMap<String, ObservedPool> {
        let d = desired(vec![
            PoolArgs::new("w", 1).build(),
            PoolArgs { nodes: true, ..PoolArgs::new("k", 1) }.build(),
        ]);
        observe_pools(&d, world)
    }

    fn pools() -> Desired {
        desired(vec![
            PoolArgs::new("w", 1).build(),
            PoolArgs { nodes: true, ..PoolArgs::new("k", 1) }.build(),
        ])
    }

    #[test]
    fn an_unchanged_world_shows_no_change_and_gives_the_same_seed() {
        let w = world();
        let a = observed(&w);
        let b = observed(&w);
        assert!(world_changes(&a, &b).is_empty());
        let mut reordered = world();
        reordered.containers.reverse();
        assert_eq!(seed_of(&pools(), &w), seed_of(&pools(), &reordered), "Docker's order does not count");
        let mut other_revision = pools();
        other_revision.pools[0].pool.spec.replicas = 3;
        assert_ne!(seed_of(&pools(), &w), seed_of(&other_revision, &w), "another revision, other names");
        let mut theirs = world();
        theirs
            .containers
            .push(Container { scope: Some("path:/elsewhere".into()), ..container("x-1", "x", "h", 1) });
        assert_eq!(seed_of(&pools(), &w), seed_of(&pools(), &theirs), "another source's pool does not count");
    }

    #[test]
    fn each_change_of_the_world_is_named() {
        let before = world();
        let mut after = world();
        after.containers[0].state = ContainerState::Exited;
        after.containers[1].id = "id-other".into();
        after.nodes[0].ready = false;
        after.containers.push(container("w-b", "w", "old", 2));
        let then = observed(&before);
        let now = observed(&after);
        assert_eq!(
            world_changes(&then, &now),
            [
                "container k-a was replaced (id id-k-a then, id-other now)",
                "Node k-a: Ready then, NotReady now",
                "container w-a: running then, exited now",
                "container w-b was created since",
            ]
        );
        assert_ne!(seed_of(&pools(), &before), seed_of(&pools(), &after));
    }

    #[test]
    fn a_plan_made_on_an_empty_pool_is_stale_once_the_pool_has_instances() {
        let empty = World::default();
        let then = observed(&empty);
        assert!(then.values().all(|p| p.containers.is_empty()), "{then:?}");
        let w = world();
        let now = observed(&w);
        let changes = world_changes(&then, &now);
        assert!(
            changes.contains(&"pool w had no container when the plan was made; now it has 1: w-a".to_owned())
        );
    }

    #[test]
    fn options_survive_the_file() {
        let options = PlanOptions { prune: true, adopt: false, ..PlanOptions::default() };
        let json = serde_json::to_value(SavedOptions::new(options.clone(), u64::MAX - 7)).unwrap();
        assert_eq!(json["seed"], "fffffffffffffff8", "16 hex digits, exact in any JSON reader");
        let saved: SavedOptions = serde_json::from_value(json).unwrap();
        assert_eq!(saved.options(), options);
        let replace = PlanOptions { replace: ["w-1".to_owned()].into(), ..options.clone() };
        let saved = SavedOptions::new(replace.clone(), 7);
        assert_eq!(saved.options(), replace, "--replace is carried out again from the file");
    }

    #[test]
    fn the_planner_derives_the_seed_the_provenance_records() {
        let d = desired(vec![PoolArgs { hash: Some("new"), ..PoolArgs::new("w", 1) }.build()]);
        let w = world();
        let plan = crate::plan::plan(&d, &w, PlanOptions::default());
        let recorded = provenance(&d, &w, PlanOptions::default()).options.seed;
        assert_eq!(plan.seed.map(|s| format!("{s:016x}")), Some(recorded));
        // A plan made again in the same world names the same instances.
        assert_eq!(crate::plan::plan(&d, &w, PlanOptions::default()), plan);
        let mut other = world();
        other.containers[0].id = "id-other".into();
        let names = |p: &Plan| skeleton(p).iter().map(|s| s.1.to_owned()).collect::<Vec<_>>();
        assert_ne!(names(&crate::plan::plan(&d, &other, PlanOptions::default())), names(&plan));
    }
}
