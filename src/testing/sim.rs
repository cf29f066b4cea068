//! An in-memory world that carries out plan steps the way the real executor would, for tests of
//! the planner's invariants; the fake backend ([`super::fake`]) is this world behind the
//! backend traits.
//!
//! It is deliberately literal: each step changes exactly what its real counterpart changes in
//! Docker or Kubernetes, and nothing else, so that a plan that relies on an effect it never
//! asked for shows up as a failed invariant.

use std::collections::BTreeMap;

use crate::model::{Container, ContainerState, Health, Node, NodeCondition, NodeConfig, World, labels};
use crate::plan::{Action, Plan, Step};
use crate::spec::Taint;

/// A [`World`] that plan steps can be applied to.
#[derive(Debug, Clone, Default)]
pub(crate) struct SimWorld {
    pub(crate) world: World,
    /// The scope label that created containers carry (see `Origin::scope`).
    pub(crate) scope: Option<String>,
    /// Creation time of the next container: later than every container of the initial world, so
    /// that new instances are the newest.
    clock: i64,
    /// The volumes still attached to each Node (see `Cluster::attached_volumes`).
    pub(crate) volumes: std::collections::BTreeMap<String, Vec<String>>,
}

impl SimWorld {
    pub(crate) fn new(world: World) -> Self {
        let clock = world.containers.iter().map(|c| c.created).max().unwrap_or(0) + 1;
        Self { world, scope: None, clock, volumes: std::collections::BTreeMap::new() }
    }

    /// Carry out every step of the plan, in order, with the plan's source as the scope.
    pub(crate) fn apply(&mut self, plan: &Plan) {
        self.scope = Some(plan.origin.scope());
        for (pool, step) in plan.steps() {
            self.apply_step(&pool.name, step);
        }
    }

    /// Carry out one step of pool `pool`.
    ///
    /// # Panics
    /// When the step makes no sense in this world (awaiting an instance that is not up, acting
    /// on a container or Node that does not exist): the plan is wrong.
    pub(crate) fn apply_step(&mut self, pool: &str, step: &Step) {
        let name = step.instance.as_str();
        match &step.action {
            Action::Create { image, template_hash, starts_rollout, rollback_from, revision, .. } => {
                assert!(self.container(name).is_none(), "create {name}: the name is taken");
                if *starts_rollout {
                    // The world's clock, where the test set one.
                    let now = self.world.now.max(self.clock);
                    self.record_rollout(pool, template_hash, rollback_from.as_deref(), now);
                    if let Some(number) = *revision {
                        let revision = crate::model::Revision {
                            number,
                            template_hash: template_hash.clone(),
                            template: None,
                            source: None,
                            commit: None,
                            started: now,
                            rolled_back_from: rollback_from.clone(),
                            end: None,
                        };
                        self.record_revision(pool, revision, now);
                    }
                }
                let scope = self.scope.clone();
                let container = Container {
                    pool: pool.to_owned(),
                    template_hash: template_hash.clone(),
                    scope,
                    image: image.clone(),
                    ..self.new_container(name)
                };
                self.create(container);
            }
            Action::Bootstrap { .. } | Action::Join { .. } => {
                let c = self.container(name).unwrap_or_else(|| panic!("{name}: no container"));
                assert!(c.is_up(), "bootstrap or join {name}: container not up");
            }
            Action::AwaitReady { node } => {
                let c = self.container(name).unwrap_or_else(|| panic!("await {name}: no container"));
                assert!(c.is_up(), "await {name}: container not up");
                // The kubelet in the new container registers its Node, which turns Ready, and
                // the executor labels it, then records that the instance came up.
                if *node {
                    self.register_node(name);
                    self.label_node(name, pool);
                    let reference = self.reference_of(name);
                    if let Some(reference) = reference {
                        self.reference_node(name, reference);
                    }
                }
                self.record_up(name);
            }
            Action::Configure(preview) => {
                assert!(self.configure(name, &preview.labels, &preview.taints), "configure {name}: no Node");
                if let Some(reference) = &preview.reference {
                    self.reference_node(name, reference.clone());
                }
            }
            Action::Cordon => assert!(self.cordon(name), "cordon {name}: no Node"),
            Action::Drain(_) => assert!(self.drain(name), "drain {name}: no Node"),
            Action::Stop => assert!(self.stop(name), "stop {name}: no container"),
            // Like the API call (a 404 is success): the plan deletes a Node that may have
            // registered after it was observed, so a missing one is no error.
            Action::DeleteNode => self.delete_node(name),
            Action::Remove => assert!(self.remove(name), "remove {name}: no container"),
            Action::UpdateInPlace { template_hash, .. } => {
                let c = self.world.containers.iter_mut().find(|c| c.name == name);
                let c = c.unwrap_or_else(|| panic!("update {name}: no container"));
                assert!(c.is_up(), "update {name}: not running");
                c.template_hash.clone_from(template_hash);
            }
        }
    }

    // The effects, each what its real counterpart changes and nothing else. They do not judge
    // (a missing object is reported, not a panic): [`Self::apply_step`] judges a plan, and the
    // fake backend answers as Docker and Kubernetes would.

    /// A running container named `name`, of no pool yet, created now.
    pub(crate) fn new_container(&mut self, name: &str) -> Container {
        let c = Container {
            id: format!("sim-{}", self.clock),
            name: name.to_owned(),
            pool: String::new(),
            template_hash: String::new(),
            state: ContainerState::Running,
            health: Health::None,
            created: self.clock,
            created_precise: 0,
            came_up: None,
            since: None,
            status: "Up 1 second".to_owned(),
            template: None,
            scope: None,
            image: String::new(),
            cluster: None,
            cluster_id: None,
            elsewhere: None,
            docker_host: crate::testing::build::HOST.to_owned(),
        };
        self.clock += 1;
        c
    }

    /// poolctl's reference to the container `name`, as the executor writes it on its Node.
    pub(crate) fn reference_of(&self, name: &str) -> Option<crate::model::InstanceRef> {
        self.container(name).map(|c| crate::model::InstanceRef {
            container_id: c.id.clone(),
            docker_host: c.docker_host.clone(),
        })
    }

    /// Annotate the Node with poolctl's reference to its container.
    pub(crate) fn reference_node(&mut self, name: &str, reference: crate::model::InstanceRef) -> bool {
        self.node_mut(name).map(|n| n.reference = Some(reference)).is_some()
    }

    /// Record that the pool's rollout to `template_hash` begins now.
    pub(crate) fn record_rollout(&mut self, pool: &str, template_hash: &str, from: Option<&str>, since: i64) {
        let rolled_back_from = from.map(str::to_owned);
        let record = crate::model::RolloutRecord {
            template_hash: template_hash.to_owned(),
            since,
            rolled_back_from,
            progressed: None,
        };
        self.world.rollouts.insert(pool.to_owned(), record);
    }

    /// Record that the pool's rollout of `revision` begins at `since`, keeping the last
    /// [`crate::model::REVISION_HISTORY_LIMIT`] revisions, as the Docker backend does.
    pub(crate) fn record_revision(&mut self, pool: &str, mut revision: crate::model::Revision, since: i64) {
        (revision.started, revision.end) = (since, None);
        let history = self.world.history.entry(pool.to_owned()).or_default();
        if history.iter().any(|r| r.number == revision.number) {
            return;
        }
        let number = revision.number;
        history.push(revision);
        history.retain(|r| r.number.saturating_add(crate::model::REVISION_HISTORY_LIMIT) > number);
        history.sort_by_key(|r| r.number);
    }

    /// Record that revision `number` of the pool ended at `at`; the first end recorded stands.
    pub(crate) fn record_revision_end(
        &mut self,
        pool: &str,
        number: u64,
        result: crate::model::RolloutResult,
        at: i64,
    ) {
        let history = self.world.history.entry(pool.to_owned()).or_default();
        if let Some(revision) = history.iter_mut().find(|r| r.number == number && r.end.is_none()) {
            revision.end = Some(crate::model::RevisionEnd { result, at });
        }
    }

    /// Record that the instance came up, as the executor does last.
    pub(crate) fn record_up(&mut self, name: &str) -> bool {
        let now = self.clock;
        self.container_mut(name).map(|c| c.came_up = Some(now)).is_some()
    }

    pub(crate) fn create(&mut self, container: Container) {
        self.world.containers.push(container);
    }

    /// The kubelet registers a Ready Node, without poolctl's label, if the container is up.
    pub(crate) fn register_node(&mut self, name: &str) -> bool {
        if !self.container(name).is_some_and(Container::is_up) {
            return false;
        }
        if self.node_mut(name).is_none() {
            self.world.nodes.push(Node {
                name: name.to_owned(),
                pool: None,
                ready: true,
                unschedulable: false,
                cordoned_by_poolctl: false,
                config: NodeConfig::default(),
                conditions: vec![NodeCondition::ready("True", self.clock)],
                retirement: crate::model::RetirementMarks::default(),
                reference: None,
            });
        }
        true
    }

    /// Label a Node as the pool's, as the executor does once it is Ready.
    pub(crate) fn label_node(&mut self, name: &str, pool: &str) -> bool {
        let labels = BTreeMap::from([(labels::POOL.to_owned(), pool.to_owned())]);
        self.configure(name, &labels, &[])
    }

    /// Converge a Node's labels and taints, as the Kubernetes backend does.
    pub(crate) fn configure(
        &mut self,
        name: &str,
        wanted: &BTreeMap<String, String>,
        taints: &[Taint],
    ) -> bool {
        let Some(node) = self.node_mut(name) else { return false };
        if let Some(change) = node.config.change_towards(wanted, taints, labels::POOL, node.ready) {
            node.config = node.config.changed(&change);
        }
        node.pool = node.config.labels.get(labels::POOL).cloned();
        true
    }

    pub(crate) fn cordon(&mut self, name: &str) -> bool {
        self.node_mut(name)
            .map(|n| {
                n.unschedulable = true;
                n.cordoned_by_poolctl = true;
            })
            .is_some()
    }

    pub(crate) fn drain(&mut self, name: &str) -> bool {
        let exists = self.node_mut(name).is_some();
        self.world.pods.retain(|p| p.node != name);
        exists
    }

    /// The container exits, and its kubelet with it.
    pub(crate) fn stop(&mut self, name: &str) -> bool {
        let Some(c) = self.container_mut(name) else { return false };
        c.state = ContainerState::Exited;
        let now = self.clock;
        if let Some(n) = self.node_mut(name) {
            n.ready = false;
            n.conditions = vec![NodeCondition::ready("Unknown", now)];
        }
        true
    }

    pub(crate) fn delete_node(&mut self, name: &str) {
        self.world.nodes.retain(|n| n.name != name);
    }

    pub(crate) fn remove(&mut self, name: &str) -> bool {
        let before = self.world.containers.len();
        self.world.containers.retain(|c| c.name != name);
        self.world.containers.len() < before
    }

    /// Containers of the pool that exist, in any state.
    pub(crate) fn alive(&self, pool: &str) -> usize {
        self.world.containers.iter().filter(|c| c.pool == pool).count()
    }

    /// Instances of the pool that serve, by the planner's rule ([`crate::plan::is_up`]):
    /// container up and, for a pool of Nodes, its Node Ready and schedulable.
    pub(crate) fn up(&self, pool: &str, with_nodes: bool, nothing_to_run: bool) -> usize {
        let node = |c: &Container| self.world.nodes.iter().find(|n| n.name == c.name);
        self.world
            .containers
            .iter()
            .filter(|c| c.pool == pool)
            .filter(|c| crate::plan::is_up(c, node(c), with_nodes, nothing_to_run))
            .count()
    }

    pub(crate) fn container(&self, name: &str) -> Option<&Container> {
        self.world.containers.iter().find(|c| c.name == name)
    }

    fn container_mut(&mut self, name: &str) -> Option<&mut Container> {
        self.world.containers.iter_mut().find(|c| c.name == name)
    }

    fn node_mut(&mut self, name: &str) -> Option<&mut Node> {
        self.world.nodes.iter_mut().find(|n| n.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::DrainPreview;

    fn step(instance: &str, action: Action) -> Step {
        Step { batch: 1, instance: instance.into(), action }
    }

    #[test]
    fn creating_and_retiring_an_instance_changes_the_counts() {
        let mut sim = SimWorld::new(World::default());
        let create = Action::Create {
            image: "busybox".to_owned(),
            template_hash: "abc".to_owned(),
            k3s_server: None,
            starts_rollout: false,
            rollback_from: None,
            revision: None,
        };
        sim.apply_step("k", &step("k-1", create));
        assert_eq!((sim.alive("k"), sim.up("k", true, false)), (1, 0), "no Node registered yet");
        sim.apply_step("k", &step("k-1", Action::AwaitReady { node: true }));
        assert_eq!(sim.up("k", true, false), 1);

        sim.apply_step("k", &step("k-1", Action::Cordon));
        assert_eq!(sim.up("k", true, false), 0, "a cordoned Node does not serve");
        assert!(sim.world.nodes[0].cordoned_by_poolctl);
        sim.apply_step("k", &step("k-1", Action::Drain(DrainPreview::default())));
        sim.apply_step("k", &step("k-1", Action::Stop));
        assert_eq!(sim.world.containers[0].state, ContainerState::Exited);
        assert!(!sim.world.nodes[0].ready);
        sim.apply_step("k", &step("k-1", Action::DeleteNode));
        sim.apply_step("k", &step("k-1", Action::Remove));
        assert_eq!(sim.alive("k"), 0);
        assert!(sim.world.nodes.is_empty());
    }

    #[test]
    #[should_panic(expected = "no container")]
    fn a_step_on_a_missing_container_is_a_wrong_plan() {
        SimWorld::new(World::default()).apply_step("k", &step("k-1", Action::Stop));
    }
}
