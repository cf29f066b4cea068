//! Builders for the inputs of every stage's tests: pools, desired states, containers, Nodes and
//! pods, with defaults that tests override field by field.

use std::collections::BTreeMap;

use crate::model::{
    ClusterRef, Container, ContainerState, Desired, DesiredPool, Health, InstanceRef, LabelSelector, Node,
    NodeCondition, NodeConfig, Origin, Pdb, Pod, World, labels,
};
use crate::spec::{
    BootstrapStep, Duration, EnvValue, Metadata, NodeSpec, Pool, PoolSpec, RolloutSpec, Template,
    template_hash,
};

/// The address of the tests' one Docker daemon, which every observation lists.
pub(crate) const HOST: &str = "unix:///fake/docker.sock";

/// What an observation of the tests' one daemon listed.
pub(crate) fn listed() -> std::collections::BTreeSet<String> {
    std::collections::BTreeSet::from([HOST.to_owned()])
}

pub(crate) fn origin() -> Origin {
    Origin::Path { path: "pools/".to_owned() }
}

pub(crate) fn other_origin() -> Origin {
    Origin::Path { path: "elsewhere/".to_owned() }
}

/// A count of the spec's `i64` fields as a `usize`; the generators only make non-negative ones.
pub(crate) fn count(n: i64) -> usize {
    usize::try_from(n).expect("generated counts are non-negative")
}

pub(crate) struct PoolArgs {
    pub(crate) name: &'static str,
    pub(crate) image: &'static str,
    pub(crate) replicas: i64,
    pub(crate) surge: i64,
    pub(crate) unavailable: i64,
    pub(crate) nodes: bool,
    pub(crate) bootstrap: usize,
    pub(crate) network: Option<&'static str>,
    /// A fixed template hash instead of the computed one, for tests that name it.
    pub(crate) hash: Option<&'static str>,
}

impl PoolArgs {
    pub(crate) fn new(name: &'static str, replicas: i64) -> Self {
        Self {
            name,
            image: "busybox:latest",
            replicas,
            surge: 1,
            unavailable: 0,
            nodes: false,
            bootstrap: 0,
            network: None,
            hash: None,
        }
    }

    pub(crate) fn build(&self) -> DesiredPool {
        let template = Template {
            image: self.image.to_owned(),
            command: Some(vec!["sleep".to_owned(), "infinity".to_owned()]),
            entrypoint: None,
            env: BTreeMap::from([("ROLE".to_owned(), EnvValue::plain("worker"))]),
            labels: BTreeMap::new(),
            network: self.network.map(str::to_owned),
            ..Template::default()
        };
        let bootstrap: Vec<BootstrapStep> = (0..self.bootstrap)
            .map(|i| BootstrapStep {
                exec: vec!["true".to_owned(), i.to_string()],
                timeout: Duration::from_secs(120),
            })
            .collect();
        let node = self.nodes.then(|| NodeSpec {
            kubeconfig: None,
            context: None,
            ready_timeout: Duration::from_secs(300),
            labels: BTreeMap::new(),
            taints: Vec::new(),
        });
        let rollout = RolloutSpec {
            max_surge: self.surge.into(),
            max_unavailable: self.unavailable.into(),
            // Unwatched, unless a test of the watch sets it: most tests count steps and calls.
            monitor: Duration::from_secs(0),
            ..RolloutSpec::default()
        };
        let spec = PoolSpec {
            replicas: self.replicas,
            template,
            bootstrap,
            join: None,
            node,
            docker: None,
            rollout,
            health: crate::spec::HealthSpec::default(),
            drain: crate::spec::DrainSpec::default(),
            disruption: crate::spec::DisruptionSpec::default(),
            paused: false,
            depends_on: Vec::new(),
        };
        let hash = self.hash.map_or_else(|| template_hash(&spec), str::to_owned);
        DesiredPool {
            pool: Pool {
                api_version: crate::spec::API_VERSION.to_owned(),
                kind: crate::spec::KIND_POOL.to_owned(),
                metadata: Metadata { name: self.name.to_owned() },
                spec,
            },
            file: format!("{}.yaml", self.name),
            template_hash: hash,
            copied_from: None,
        }
    }
}

pub(crate) fn desired(pools: Vec<DesiredPool>) -> Desired {
    Desired { origin: origin(), pools }
}

/// A running, healthy container of `pool` created by this test's source.
pub(crate) fn container(name: &str, pool: &str, hash: &str, created: i64) -> Container {
    Container {
        id: format!("id-{name}"),
        name: name.to_owned(),
        pool: pool.to_owned(),
        template_hash: hash.to_owned(),
        state: ContainerState::Running,
        health: Health::None,
        created,
        created_precise: 0,
        came_up: Some(created),
        since: None,
        status: "Up 1 second".to_owned(),
        template: None,
        scope: Some(origin().scope()),
        image: "busybox:old".to_owned(),
        cluster: None,
        cluster_id: None,
        elsewhere: None,
        docker_host: HOST.to_owned(),
    }
}

/// An instance of a plan, to be retired, of template `hash`, with nothing else to say.
pub(crate) fn instance_status(name: &str, hash: &str) -> crate::plan::InstanceStatus {
    crate::plan::InstanceStatus {
        name: name.into(),
        template_hash: hash.to_owned(),
        container: "running",
        node: None,
        cordoned: false,
        retiring: false,
        elsewhere: None,
        fate: crate::plan::Fate::Retire,
        replace: None,
        do_not_disrupt: None,
        held_by_window: None,
        drain_excluded: false,
        hooks: Vec::new(),
        health: None,
        proof: crate::plan::Proof { container: None, node: None },
        left: None,
        refused: None,
    }
}

/// The container, created as a Node: it carries the cluster labels.
pub(crate) fn labelled(mut c: Container) -> Container {
    c.cluster =
        Some(ClusterRef { kubeconfig: Some("~/.kube/old".to_owned()), context: Some("kind-a".to_owned()) });
    c
}

pub(crate) fn node(name: &str, pool: &str) -> Node {
    Node {
        name: name.to_owned(),
        pool: Some(pool.to_owned()),
        ready: true,
        unschedulable: false,
        cordoned_by_poolctl: false,
        config: NodeConfig {
            labels: BTreeMap::from([(labels::POOL.to_owned(), pool.to_owned())]),
            ..NodeConfig::default()
        },
        conditions: vec![NodeCondition::ready("True", 0)],
        retirement: crate::model::RetirementMarks::default(),
        // poolctl's reference to the container [`container`] makes of the same name.
        reference: Some(InstanceRef { container_id: format!("id-{name}"), docker_host: HOST.to_owned() }),
    }
}

pub(crate) fn pod(name: &str, node: &str, owner: Option<&str>) -> Pod {
    Pod {
        namespace: "default".to_owned(),
        name: name.to_owned(),
        uid: format!("uid-{name}"),
        node: node.to_owned(),
        labels: BTreeMap::from([("app".to_owned(), name.split('-').next().unwrap_or(name).to_owned())]),
        owner_kind: owner.map(str::to_owned),
        mirror: false,
        finished: false,
        empty_dir: false,
        orphaned: false,
        do_not_disrupt: false,
    }
}

/// A PDB of the `default` namespace whose selector has these `matchLabels` and
/// `matchExpressions` (`key`, operator, values).
pub(crate) fn pdb(
    name: &str,
    match_labels: &[(&str, &str)],
    expressions: &[(&str, &str, &[&str])],
    disruptions_allowed: i32,
) -> Pdb {
    let labels: BTreeMap<String, String> =
        match_labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    let values: Vec<Vec<String>> =
        expressions.iter().map(|(_, _, vs)| vs.iter().map(|v| (*v).to_owned()).collect()).collect();
    let expressions = expressions.iter().zip(&values).map(|((k, op, _), vs)| (*k, *op, vs.as_slice()));
    Pdb {
        namespace: "default".to_owned(),
        name: name.to_owned(),
        selector: Some(LabelSelector::from_parts(&labels, expressions).expect("a valid selector")),
        disruptions_allowed,
    }
}

/// A pool's `node:` section naming a kubeconfig and context.
pub(crate) fn node_spec(kubeconfig: Option<&str>, context: Option<&str>) -> NodeSpec {
    NodeSpec {
        kubeconfig: kubeconfig.map(str::to_owned),
        context: context.map(str::to_owned),
        ready_timeout: Duration::from_secs(1),
        labels: BTreeMap::new(),
        taints: Vec::new(),
    }
}

/// A world of these containers and nothing else.
pub(crate) fn world_of(containers: Vec<Container>) -> World {
    World { containers, listed: listed(), ..World::default() }
}

/// Pool `a` on Docker context `one` and pool `b` on context `two`, both with the current
/// template.
pub(crate) fn two_pools() -> Desired {
    let mut a = PoolArgs { hash: Some("h"), ..PoolArgs::new("a", 1) }.build();
    let mut b = PoolArgs { hash: Some("h"), ..PoolArgs::new("b", 1) }.build();
    a.pool.spec.docker = Some(crate::spec::DockerSpec { context: Some("one".into()), host: None });
    b.pool.spec.docker = Some(crate::spec::DockerSpec { context: Some("two".into()), host: None });
    desired(vec![a, b])
}

/// Two fake daemons as the endpoints of [`two_pools`]: `a` on the first, `b` on the second.
pub(crate) fn routed(
    one: crate::testing::fake::FakeWorld,
    two: crate::testing::fake::FakeWorld,
) -> crate::backend::endpoints::Endpoints<crate::testing::fake::FakeWorld> {
    let pools = BTreeMap::from([("a".to_owned(), 0), ("b".to_owned(), 1)]);
    crate::backend::endpoints::Endpoints::new(
        vec![("context one".into(), one), ("context two".into(), two)],
        pools,
    )
}
