//! The connections of a run in one value: the Docker endpoints its pools live on and the clients
//! of their clusters, for the one-shot commands and `watch` alike, so that no command names a
//! concrete backend.
//!
//! A one-shot command connects to each cluster when it observes ([`Connections::once`]); `watch`
//! keeps every client, with its watch-backed lists, from one reconcile to the next
//! ([`Connections::kept`]) until a failure makes it [`Connections::forget`] them. Docker
//! endpoints are kept for as long as the pools name the same ones.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;

use super::docker::{
    CopyError, DRIFT_EVENTS, DockerBackend, DockerEnv, EndpointsError, connect_endpoints, container_events,
    resolve_copies, resolve_copies_leniently, resolve_endpoints,
};
use super::endpoints::Endpoints;
use super::kube::{FOLLOW_MAX_BACKOFF, KeptConnect, KubeCluster, KubeConnect};
use super::{BackendError, Connect};
use crate::model::{ClusterRef, Desired};

/// Every Docker endpoint of a run's pools, as one [`super::Containers`] and [`super::Locks`].
pub type DockerEndpoints = Endpoints<DockerBackend>;

/// Which Docker events to follow ([`Connections::follow_events`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Events {
    /// A container stopped serving (died, stopped, went away): what `watch` corrects.
    Drift,
    /// Any change `status -w` shows.
    Changes,
}

/// The Docker events that change what `status` shows.
const CHANGES: &[&str] = &["create", "start", "die", "stop", "destroy", "health_status", "pause", "unpause"];

/// Why the Docker endpoints of a desired state could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(transparent)]
    Endpoints(#[from] EndpointsError),
    #[error(transparent)]
    Copy(#[from] CopyError),
}

/// The Docker endpoints and cluster clients of a run.
pub struct Connections {
    /// The endpoints as resolved (the key), and their connections.
    docker: Mutex<Option<(String, Arc<DockerEndpoints>)>>,
    clusters: Clusters,
}

/// How clusters are connected: afresh each time, or kept.
pub enum Clusters {
    Once(KubeConnect),
    Kept(KeptConnect),
}

impl Connect for Clusters {
    type Cluster = KubeCluster;

    async fn connect(&self, cluster: &ClusterRef, pool: &str) -> Result<KubeCluster, BackendError> {
        match self {
            Self::Once(connect) => connect.connect(cluster, pool).await,
            Self::Kept(connect) => connect.connect(cluster, pool).await,
        }
    }
}

impl Connections {
    /// For a command that runs once.
    pub fn once() -> Self {
        Self { docker: Mutex::default(), clusters: Clusters::Once(KubeConnect) }
    }

    /// For `watch`: cluster clients and their watch-backed lists are kept between reconciles.
    pub fn kept() -> Self {
        Self { docker: Mutex::default(), clusters: Clusters::Kept(KeptConnect::default()) }
    }

    /// The Docker endpoints the pools of `desired` live on, connected (each answered once); the
    /// ones connected before when the pools name the same endpoints.
    pub async fn docker(&self, desired: &Desired) -> Result<Arc<DockerEndpoints>, EndpointsError> {
        let env = DockerEnv::from_process();
        let key = format!("{:?}", resolve_endpoints(desired, &env)?);
        let kept = crate::locked(&self.docker).clone();
        if let Some((kept_key, docker)) = kept
            && kept_key == key
        {
            return Ok(docker);
        }
        let docker = Arc::new(connect_endpoints(desired, &env).await?);
        *crate::locked(&self.docker) = Some((key, Arc::clone(&docker)));
        Ok(docker)
    }

    /// Connect to the Docker endpoints of `desired`'s pools, and copy into each template the
    /// settings of the container its `copyFrom` names: what every command that plans does first.
    pub async fn connect_docker(
        &self,
        desired: Desired,
    ) -> Result<(Desired, Arc<DockerEndpoints>), ConnectError> {
        let docker = self.docker(&desired).await?;
        let desired = resolve_copies(desired, &docker).await?;
        Ok((desired, docker))
    }

    /// [`Connections::connect_docker`] for what only shows the world (`status`): a pool whose
    /// settings cannot be read is left as its file writes it, and why is returned with it.
    pub async fn connect_docker_leniently(
        &self,
        desired: Desired,
    ) -> Result<(Desired, Arc<DockerEndpoints>, Vec<CopyError>), EndpointsError> {
        let docker = self.docker(&desired).await?;
        let (desired, unread) = resolve_copies_leniently(desired, &docker).await;
        Ok((desired, docker, unread))
    }

    /// How the pools' clusters are connected.
    pub fn clusters(&self) -> &Clusters {
        &self.clusters
    }

    /// Drop every kept connection: the next use connects afresh (after a failure, say).
    pub fn forget(&self) {
        *crate::locked(&self.docker) = None;
        if let Clusters::Kept(kept) = &self.clusters {
            kept.forget();
        }
    }

    /// Follow Docker's `events` for the containers of `desired`'s source (their scope label) on
    /// every endpoint its pools live on, sending a one-line description of each to `tx`: one
    /// task to spawn per endpoint, with the endpoint's address. Each re-subscribes with backoff
    /// whenever its daemon goes away, and ends once `tx` is closed.
    pub fn follow_events(
        desired: &Desired,
        events: Events,
        tx: &mpsc::Sender<super::ContainerNews>,
    ) -> Result<Vec<(String, impl Future<Output = ()> + Send + 'static)>, EndpointsError> {
        let (endpoints, _) = resolve_endpoints(desired, &DockerEnv::from_process())?;
        let actions = match events {
            Events::Drift => DRIFT_EVENTS,
            Events::Changes => CHANGES,
        };
        let scope = desired.origin.scope();
        // What happens from now on is followed, however long a subscription takes to reach its
        // daemon (by the daemon's clock: a remote one running behind ours would hold back what
        // happens in between, as an unsubscribed stream did).
        let since = std::time::SystemTime::now();
        Ok(endpoints
            .into_iter()
            .map(|e| (e.host.clone(), container_events(e, scope.clone(), actions, tx.clone(), since)))
            .collect())
    }
}

/// Follow the Lease of each node pool of `desired` that `covers` accepts, sending each new
/// reconcile request on it to `tx` (see [`KubeCluster::follow_requests`]): one task to spawn per
/// pool, keyed by the pool and its cluster. Each connects on its own (again, with backoff, until
/// it can) and follows until `tx` is closed.
pub fn follow_requests(
    desired: &Desired,
    covers: impl Fn(&str) -> bool,
    tx: &mpsc::Sender<super::ContainerNews>,
) -> Vec<(String, impl Future<Output = ()> + Send + 'static)> {
    let node_pools = desired.pools.iter().filter(|p| covers(p.name()));
    let node_pools = node_pools.filter_map(|p| Some((p.name().to_owned(), p.cluster()?)));
    node_pools
        .map(|(pool, cluster)| {
            let key = format!("{pool} {cluster:?}");
            let tx = tx.clone();
            let task = async move {
                let mut backoff = super::retry::Backoff::new(Duration::from_secs(1), FOLLOW_MAX_BACKOFF);
                while !tx.is_closed() {
                    match KubeConnect.connect(&cluster, &pool).await {
                        Ok(connected) => return connected.follow_requests(tx).await,
                        Err(e) => {
                            let after = backoff.peek().as_secs();
                            tracing::warn!("pool {pool}: cannot follow its Lease ({e}); again in {after}s");
                            backoff.wait().await;
                        }
                    }
                }
            };
            (key, task)
        })
        .collect()
}

/// A connected cluster, as [`Connections::clusters`] connects it.
pub type ClusterClient = <Clusters as Connect>::Cluster;
