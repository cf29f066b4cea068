//! Observe: from a desired state to the world it is compared with. One Docker list, then, for
//! every pool whose instances are Nodes, a connection to its cluster and one list of its Nodes
//! (plus the pods and PodDisruptionBudgets a drain preview needs, and the one read of the pool's
//! Lease that finds its joining instances, which also says whether it is suspended). Runs over
//! the backend traits, so that tests plug in fakes.

use std::collections::{BTreeMap, BTreeSet};

use crate::backend::{BackendError, Cluster, Connect, Containers};
use crate::model::{ClusterIdentity, ClusterRef, Container, Desired, World};
use crate::spec::IN_CLUSTER;

/// Why the world could not be observed.
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    /// Docker or a cluster did not answer a list.
    #[error("cannot observe the world")]
    List(#[source] BackendError),
    /// A pool's containers name more than one cluster.
    #[error(
        "pool {pool}: its instances are Nodes of more than one cluster ({first} and {second}); retire \
         them one cluster at a time (declare the pool again with a `node:` section naming one)"
    )]
    MixedClusters { pool: String, first: String, second: String },
    /// A pool's cluster could not be reached: retiring its Nodes without it would skip the drain.
    #[error(
        "pool {pool}{}: cannot connect to its Kubernetes cluster ({cluster})",
        if *.declared { "" } else { " (no longer declared, its instances are Nodes)" }
    )]
    Connect { pool: String, declared: bool, cluster: String, source: BackendError },
    /// The kubeconfig now points at another cluster than the one the pool's Nodes live in: a
    /// "Node not found" there must never read as "nothing to drain".
    #[error(
        "pool {pool}: its instances are Nodes of the cluster {recorded}, but its kubeconfig now resolves to \
         {current}; nothing of this pool was changed. {}",
        switch_back(recorded)
    )]
    WrongCluster { pool: String, recorded: Box<ClusterIdentity>, current: Box<ClusterIdentity> },
}

/// How to point a pool back at the cluster its Nodes live in, as its containers recorded it.
fn switch_back(recorded: &ClusterIdentity) -> String {
    if recorded.context == IN_CLUSTER {
        // Reached from a Pod, with its service account: no kubeconfig context names that.
        format!(
            "Run poolctl in a Pod of that cluster (its service account), or set `node.kubeconfig` to a \
             kubeconfig for it ({})",
            recorded.server
        )
    } else {
        format!(
            "Set `node.context: {0}` in the pool file, or switch back (`kubectl config use-context {0}`)",
            recorded.context
        )
    }
}

/// The world as one reconcile sees it, and the clusters it was read from (for the executor).
pub struct Observed<K> {
    pub world: World,
    /// The cluster of each pool whose instances are Nodes, by pool name.
    pub clusters: BTreeMap<String, K>,
}

/// The cluster each pool's Nodes live in, by pool name: a declared pool's `node:` section, or,
/// for a pool whose spec has none (its `node:` section or its file was removed), the cluster its
/// containers were created to join (their labels). Without the latter, their Nodes would never
/// be observed and their retirement could not cordon, drain or delete them. The pools are the
/// ones the planner plans: every declared pool, and the undeclared pools of this source.
pub fn cluster_refs(
    desired: &Desired,
    containers: &[Container],
) -> Result<BTreeMap<String, ClusterRef>, ObserveError> {
    let mut refs = BTreeMap::new();
    let mut labelled: BTreeMap<&str, BTreeSet<&ClusterRef>> = BTreeMap::new();
    let scope = desired.origin.scope();
    for c in containers {
        let declared = desired.pools.iter().find(|p| p.name() == c.pool);
        let spec_node = declared.and_then(|p| p.pool.spec.node.as_ref());
        let planned = declared.is_some() || c.scope.as_deref() == Some(scope.as_str());
        if let (Some(cluster), None, true) = (&c.cluster, spec_node, planned) {
            labelled.entry(&c.pool).or_default().insert(cluster);
        }
    }
    for pool in &desired.pools {
        if let Some(cluster) = pool.cluster() {
            refs.insert(pool.name().to_owned(), cluster);
        }
    }
    for (pool, clusters) in labelled {
        let mut clusters = clusters.into_iter();
        let first = clusters.next().expect("an entry has one cluster at least");
        if let Some(second) = clusters.next() {
            return Err(ObserveError::MixedClusters {
                pool: pool.to_owned(),
                first: describe(first),
                second: describe(second),
            });
        }
        refs.insert(pool.to_owned(), first.clone());
    }
    Ok(refs)
}

fn describe(cluster: &ClusterRef) -> String {
    format!(
        "kubeconfig {}, context {}",
        cluster.kubeconfig.as_deref().unwrap_or("(default)"),
        cluster.context.as_deref().unwrap_or("(current)")
    )
}

/// Connect to the cluster of every pool that [`cluster_refs`] names. A cluster that cannot be
/// reached fails the observation: retiring Nodes without it would skip the drain.
pub async fn connect_clusters<N: Connect>(
    connect: &N,
    desired: &Desired,
    containers: &[Container],
) -> Result<BTreeMap<String, N::Cluster>, ObserveError> {
    let mut clusters = BTreeMap::new();
    for (pool, cluster) in cluster_refs(desired, containers)? {
        let declared = desired.pools.iter().any(|p| p.name() == pool);
        match connect.connect(&cluster, &pool).await {
            Ok(connected) => clusters.insert(pool, connected),
            Err(source) => {
                return Err(ObserveError::Connect { pool, declared, cluster: describe(&cluster), source });
            }
        };
    }
    Ok(clusters)
}

/// Observe the world once, connecting to the clusters the pools name. Docker is listed first,
/// because which clusters to observe also depends on the containers (see [`cluster_refs`]).
pub async fn observe<C: Containers, N: Connect>(
    desired: &Desired,
    containers: &C,
    connect: &N,
) -> Result<Observed<N::Cluster>, ObserveError> {
    let listed = containers.list().await.map_err(ObserveError::List)?;
    let clusters = connect_clusters(connect, desired, &listed).await?;
    check_identity(&listed, &clusters)?;
    let mut world = observe_with(listed, containers, &clusters, world_now(containers).await)
        .await
        .map_err(ObserveError::List)?;
    // The pools' Nodes name the daemons their containers live on. One that no pool names is
    // where a pool moved away from: it is looked at too, so that its instances are retired the
    // safe way rather than taken for gone.
    let unseen: std::collections::BTreeSet<String> = world
        .nodes
        .iter()
        .filter_map(|n| n.reference.as_ref())
        .map(|r| r.docker_host.clone())
        .filter(|h| !world.listed.contains(h))
        .collect();
    if !unseen.is_empty() {
        let unseen: Vec<String> = unseen.into_iter().collect();
        for (host, e) in containers.look_also(&unseen).await {
            tracing::warn!(
                "cannot look at Docker at {host}, where Nodes of the pools say their containers are ({e}); \
                 those Nodes are left alone"
            );
        }
        if containers.hosts().len() > world.listed.len() {
            let listed = containers.list().await.map_err(ObserveError::List)?;
            check_identity(&listed, &clusters)?;
            world =
                observe_with(listed, containers, &clusters, world.now).await.map_err(ObserveError::List)?;
        }
    }
    Ok(Observed { world, clusters })
}

/// The world's "now": the Docker daemon's clock, which its containers' times are by; this
/// process's only when the daemon cannot say. Never this process's when the world has one, so
/// that a poolctl whose clock is off decides as one on time, and two replicas agree.
async fn world_now<C: Containers>(containers: &C) -> i64 {
    if let Some(now) = containers.clock().await {
        return now;
    }
    let local = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    i64::try_from(local).unwrap_or(i64::MAX)
}

/// Shift the times a cluster set on its Nodes (their conditions' `lastTransitionTime`) into the
/// Docker daemon's clock, by how far the API server's is ahead of it (`skew` seconds), so that
/// the planner measures every duration against one "now". The `Date` the skew is read from has
/// whole seconds: a skew of a second or two is that rounding, not a clock.
fn in_clock_of_docker(nodes: &mut [crate::model::Node], skew: i64) {
    if skew.abs() <= 2 {
        return;
    }
    for condition in nodes.iter_mut().flat_map(|n| n.conditions.iter_mut()) {
        condition.since = condition.since.map(|t| t.saturating_sub(skew));
    }
}

/// Refuse to observe a pool whose containers recorded another cluster than the one its
/// kubeconfig resolves to now (containers created before poolctl recorded it pass).
fn check_identity<K: Cluster>(
    containers: &[Container],
    clusters: &BTreeMap<String, K>,
) -> Result<(), ObserveError> {
    for (pool, cluster) in clusters {
        let current = cluster.identity();
        let mut recorded =
            containers.iter().filter(|c| &c.pool == pool).filter_map(|c| c.cluster_id.as_ref());
        if let Some(recorded) = recorded.find(|r| !r.same_cluster(current)) {
            return Err(ObserveError::WrongCluster {
                pool: pool.clone(),
                recorded: Box::new(recorded.clone()),
                current: Box::new(current.clone()),
            });
        }
    }
    Ok(())
}

/// Observe again through clusters already connected: between the batches of a rollout.
pub async fn observe_again<C: Containers, K: Cluster>(
    containers: &C,
    clusters: &BTreeMap<String, K>,
) -> Result<World, BackendError> {
    let listed = containers.list().await?;
    observe_with(listed, containers, clusters, world_now(containers).await).await
}

/// The rest of an observation once Docker's list (`listed`) is in: what else that list read
/// (the rollout records, the daemons it covered) and, per cluster, its Nodes.
async fn observe_with<C: Containers, K: Cluster>(
    listed: Vec<Container>,
    containers: &C,
    clusters: &BTreeMap<String, K>,
    now: i64,
) -> Result<World, BackendError> {
    let mut world = World {
        now,
        containers: listed,
        rollouts: containers.rollouts(),
        history: containers.history(),
        listed: containers.hosts().into_iter().collect(),
        suspended: containers.suspensions(),
        promoted: containers.promotions(),
        ..World::default()
    };
    // Each cluster's clock, asked once per cluster however many pools share it.
    let mut skews: BTreeMap<String, i64> = BTreeMap::new();
    for (pool, cluster) in clusters {
        let names: Vec<String> =
            world.containers.iter().filter(|c| &c.pool == pool).map(|c| c.name.clone()).collect();
        let mut nodes = cluster.nodes(&names).await?;
        // The same read of the pool's Lease says whether it is suspended there. Either record
        // counts: a pool that became a node pool keeps its Docker one until it is resumed.
        if let Some(suspension) = cluster.marks().suspension {
            world.suspended.entry(pool.clone()).or_insert(suspension);
        }
        let server = cluster.identity().server.clone();
        if !skews.contains_key(&server) {
            skews.insert(server.clone(), cluster.clock().await.map_or(0, |api| api.saturating_sub(now)));
        }
        in_clock_of_docker(&mut nodes, skews[&server]);
        let node_names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
        let (pods, pdbs) = cluster.pods_and_pdbs(&node_names).await?;
        world.nodes.extend(nodes);
        world.pods.extend(pods);
        for pdb in pdbs {
            if !world.pdbs.contains(&pdb) {
                world.pdbs.push(pdb);
            }
        }
    }
    Ok(world)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DesiredPool, Origin};
    use crate::spec::NodeSpec;
    use crate::testing::build::{self, PoolArgs, node, pod};
    use crate::testing::fake::FakeWorld;

    fn pool(name: &'static str, node: Option<NodeSpec>) -> DesiredPool {
        let mut pool = PoolArgs { hash: Some("h"), ..PoolArgs::new(name, 1) }.build();
        pool.pool.spec.node = node;
        pool
    }

    fn node_spec(context: &str) -> NodeSpec {
        build::node_spec(Some("/k"), Some(context))
    }

    fn container(name: &str, pool: &str, scope: &str, context: Option<&str>) -> Container {
        Container {
            scope: Some(scope.into()),
            cluster: context.map(|c| ClusterRef { kubeconfig: None, context: Some(c.into()) }),
            ..build::container(name, pool, "old", 1)
        }
    }

    fn cluster(kubeconfig: Option<&str>, context: &str) -> ClusterRef {
        ClusterRef { kubeconfig: kubeconfig.map(str::to_owned), context: Some(context.into()) }
    }

    #[test]
    fn clusters_come_from_the_spec_else_from_the_containers_labels() {
        let origin = Origin::Path { path: "/pools".into() };
        let scope = origin.scope();
        let desired = Desired {
            origin,
            pools: vec![pool("spec", Some(node_spec("from-spec"))), pool("lost", None), pool("plain", None)],
        };
        let containers = [
            // The spec wins over the labels of older instances.
            container("spec-a", "spec", &scope, Some("from-label")),
            // `node:` was deleted from the spec; the labels remember the cluster.
            container("lost-a", "lost", &scope, Some("lost-ctx")),
            container("plain-a", "plain", &scope, None),
            // The file was deleted.
            container("gone-a", "gone", &scope, Some("gone-ctx")),
            // Another source's pool is none of this plan's business.
            container("theirs-a", "theirs", "path:/elsewhere", Some("theirs-ctx")),
        ];
        let refs = cluster_refs(&desired, &containers).unwrap();
        assert_eq!(
            refs,
            BTreeMap::from([
                ("gone".to_owned(), cluster(None, "gone-ctx")),
                ("lost".to_owned(), cluster(None, "lost-ctx")),
                ("spec".to_owned(), cluster(Some("/k"), "from-spec")),
            ])
        );
    }

    #[test]
    fn instances_of_two_clusters_without_a_spec_to_choose_are_refused() {
        let origin = Origin::Path { path: "/pools".into() };
        let scope = origin.scope();
        let desired = Desired { origin, pools: Vec::new() };
        let containers = [
            container("gone-a", "gone", &scope, Some("one")),
            container("gone-b", "gone", &scope, Some("two")),
        ];
        let err = cluster_refs(&desired, &containers).unwrap_err().to_string();
        assert!(err.contains("pool gone: its instances are Nodes of more than one cluster"), "{err}");
    }

    /// A node pool "k" in cluster `ctx`, with two running instances whose Nodes carry pods,
    /// beside a plain pool "p".
    fn node_pool_world() -> (Desired, FakeWorld) {
        let origin = Origin::Path { path: "/pools".into() };
        let scope = origin.scope();
        let desired = Desired { origin, pools: vec![pool("k", Some(node_spec("ctx"))), pool("p", None)] };
        let world = World {
            now: 0,
            containers: vec![
                container("k-a", "k", &scope, Some("ctx")),
                container("k-b", "k", &scope, Some("ctx")),
                container("p-a", "p", &scope, None),
            ],
            nodes: vec![node("k-a", "k"), node("k-b", "k"), node("elsewhere", "other")],
            pods: vec![pod("web-1", "k-a", Some("ReplicaSet")), pod("db-1", "elsewhere", None)],
            pdbs: Vec::new(),
            locked: std::collections::BTreeSet::new(),
            rollouts: BTreeMap::new(),
            history: BTreeMap::new(),
            listed: std::collections::BTreeSet::new(),
            suspended: BTreeMap::new(),
            promoted: BTreeMap::new(),
        };
        (desired, FakeWorld::new(world))
    }

    #[tokio::test]
    async fn an_unlabelled_node_is_the_pools_when_its_lock_records_it_as_joining() {
        let (desired, fake) = node_pool_world();
        for name in ["k-0123456789-abcde", "k-0123456789-fghij"] {
            let mut unlabelled = node(name, "k");
            unlabelled.pool = None;
            unlabelled.config = crate::model::NodeConfig::default();
            fake.sim().world.nodes.push(unlabelled);
        }
        // An apply killed before it labelled the first one's Node; its container is gone since.
        fake.note_joining("k", "k-0123456789-abcde");
        let observed = observe(&desired, &fake, &fake).await.unwrap();
        let mut names: Vec<&str> = observed.world.nodes.iter().map(|n| n.name.as_str()).collect();
        names.sort_unstable();
        // The other is named like an instance but nothing records it: not the pool's to touch.
        assert_eq!(names, ["k-0123456789-abcde", "k-a", "k-b"]);
    }

    #[tokio::test]
    async fn observing_connects_to_each_node_pools_cluster_and_reads_its_nodes_and_pods() {
        let (desired, fake) = node_pool_world();
        let observed = observe(&desired, &fake, &fake).await.unwrap();
        assert_eq!(observed.clusters.keys().collect::<Vec<_>>(), ["k"], "the plain pool has no cluster");
        let nodes: Vec<&str> = observed.world.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(nodes, ["k-a", "k-b"], "another pool's Node is not observed");
        let pods: Vec<&str> = observed.world.pods.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(pods, ["web-1"], "only the pods of the pool's Nodes");
        assert_eq!(observed.world.containers.len(), 3);
        assert!(fake.calls().is_empty(), "observing changes nothing: {:?}", fake.calls());
    }

    #[tokio::test]
    async fn a_node_pool_suspended_on_its_lease_or_in_docker_is_suspended() {
        let (desired, fake) = node_pool_world();
        let on = |by: &str| crate::model::Suspension { by: by.to_owned(), at: 1, reason: None };
        fake.suspend_on_lease("k", on("lease"));
        let observed = observe(&desired, &fake, &fake).await.unwrap();
        assert_eq!(observed.world.suspended.keys().collect::<Vec<_>>(), ["k"], "the plain pool is not");
        assert_eq!(observed.world.suspended["k"].by, "lease");
        // Suspended in Docker too (before it became a node pool): that record stands.
        fake.sim().world.suspended.insert("k".to_owned(), on("docker"));
        let observed = observe(&desired, &fake, &fake).await.unwrap();
        assert_eq!(observed.world.suspended["k"].by, "docker");
    }

    #[tokio::test]
    async fn an_unreachable_cluster_fails_the_observation_naming_the_pool_and_the_cluster() {
        let (desired, fake) = node_pool_world();
        let fake = fake.unreachable(cluster(Some("/k"), "ctx"));
        let Err(err) = observe(&desired, &fake, &fake).await else { panic!("observed without its cluster") };
        assert_eq!(
            err.to_string(),
            "pool k: cannot connect to its Kubernetes cluster (kubeconfig /k, context ctx)"
        );
        let cause = std::error::Error::source(&err).expect("the cause").to_string();
        assert!(cause.contains("connection refused"), "{cause}");
    }

    #[test]
    fn a_pool_reached_from_a_pod_is_pointed_back_at_its_cluster_not_at_a_context() {
        let identity = |context: &str, server: &str| ClusterIdentity {
            context: context.to_owned(),
            server: server.to_owned(),
            uid: Some(format!("uid-{server}")),
        };
        let wrong = |recorded: ClusterIdentity| {
            ObserveError::WrongCluster {
                pool: "k".to_owned(),
                recorded: Box::new(recorded),
                current: Box::new(identity("kind-b", "https://b")),
            }
            .to_string()
        };
        let from_pod = wrong(identity(IN_CLUSTER, "https://10.96.0.1/"));
        assert!(
            from_pod.ends_with(
                "Run poolctl in a Pod of that cluster (its service account), or set `node.kubeconfig` to a \
                 kubeconfig for it (https://10.96.0.1/)"
            ),
            "{from_pod}"
        );
        let from_context = wrong(identity("kind-a", "https://a"));
        assert!(
            from_context.ends_with(
                "Set `node.context: kind-a` in the pool file, or switch back (`kubectl config use-context kind-a`)"
            ),
            "{from_context}"
        );
    }
}
