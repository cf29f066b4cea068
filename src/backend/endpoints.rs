//! Several Docker endpoints behind one [`Containers`] and [`Locks`], so that observe, the
//! executor and the locks stay unaware of them: a pool's containers are created, and its lock
//! kept, on the endpoint its spec names; an instance is acted on where it was seen.
//!
//! Listing lists each endpoint once. One daemon behind two addresses (two contexts, a socket
//! and a TCP port) shows its containers through both: a container is one container by its ID,
//! counted once, and belongs to the endpoint of its pool when that endpoint shows it. Seen only
//! through another endpoint, it lives there while the spec places its pool elsewhere: it is
//! marked [`Container::elsewhere`], and the planner replaces it where the spec says.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use futures::future::BoxFuture;

use super::{
    BackendError, Containers, ExecOutput, LockError, LockRecord, Locks, NewContainer, NewFile, Stopped,
};
use crate::model::{Container, InstanceRef, labels};
use crate::spec::Secret;

/// The Docker endpoints of one run, the backend of each, and which pool lives where.
pub struct Endpoints<C> {
    /// The endpoints, each with its name (for messages and the plan); the first is the fallback
    /// for an instance or pool seen nowhere. Only ever grows (see [`Endpoints::look_also`]), so
    /// an index stays valid.
    places: RwLock<Vec<(String, Arc<C>)>>,
    /// The endpoint (index into `places`) of each declared pool.
    pools: BTreeMap<String, usize>,
    seen: Mutex<Seen>,
    /// How to reach a daemon that no pool names but whose address a pool's Node records: the
    /// one a pool moved away from, whose instances are still to be retired there.
    connect: Option<Connector<C>>,
}

/// Connects to a daemon by its address: its name for messages, and its backend.
pub type Connector<C> =
    Arc<dyn Fn(String) -> BoxFuture<'static, Result<(String, C), BackendError>> + Send + Sync>;

/// Where the last list (and the creations since) found things.
#[derive(Default)]
struct Seen {
    /// Instance name -> endpoint.
    instances: HashMap<String, usize>,
    /// Pool name -> an endpoint that shows its containers (for pools no longer declared).
    pools: HashMap<String, usize>,
}

impl<C> Endpoints<C> {
    /// One endpoint for every pool: what a run whose pools name no endpoint uses.
    pub fn single(name: impl Into<String>, backend: C) -> Self {
        Self::new(vec![(name.into(), backend)], BTreeMap::new())
    }

    /// Endpoints (at least one, the first being the fallback), and the index of each declared
    /// pool's.
    pub fn new(places: Vec<(String, C)>, pools: BTreeMap<String, usize>) -> Self {
        assert!(!places.is_empty(), "a run has an endpoint");
        assert!(pools.values().all(|&i| i < places.len()), "every pool's endpoint is one of them");
        let places = places.into_iter().map(|(name, c)| (name, Arc::new(c))).collect();
        Self { places: RwLock::new(places), pools, seen: Mutex::default(), connect: None }
    }

    /// With a way to reach the daemons that pools moved away from (see [`Endpoints::look_also`]).
    #[must_use]
    pub fn with_connector(mut self, connect: Connector<C>) -> Self {
        self.connect = Some(connect);
        self
    }

    /// Every endpoint, with its name.
    pub fn all(&self) -> Vec<(String, Arc<C>)> {
        self.places.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn place(&self, at: usize) -> Arc<C> {
        Arc::clone(&self.places.read().unwrap_or_else(PoisonError::into_inner)[at].1)
    }

    /// The backend of the endpoint `pool` lives on.
    pub fn of_pool_backend(&self, pool: &str) -> Arc<C> {
        self.place(self.of_pool(pool))
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        crate::locked(&self.seen)
    }

    /// Where `pool` lives: its spec's endpoint, else where its containers were seen.
    fn of_pool(&self, pool: &str) -> usize {
        self.pools.get(pool).copied().or_else(|| self.seen().pools.get(pool).copied()).unwrap_or(0)
    }

    /// Where the instance `name` lives: where it was seen or created, else the endpoint of the
    /// pool its name starts with (the longest such declared pool).
    fn of_instance(&self, name: &str) -> usize {
        if let Some(&i) = self.seen().instances.get(name) {
            return i;
        }
        let pool = self
            .pools
            .keys()
            .filter(|p| name.strip_prefix(p.as_str()).is_some_and(|rest| rest.starts_with('-')))
            .max_by_key(|p| p.len());
        pool.map_or(0, |p| self.of_pool(p))
    }

    fn instance(&self, name: &str) -> Arc<C> {
        self.place(self.of_instance(name))
    }
}

impl<C: Containers + Send + Sync> Containers for Endpoints<C> {
    fn hosts(&self) -> Vec<String> {
        self.all().iter().flat_map(|(_, backend)| backend.hosts()).collect()
    }

    /// The first endpoint's: the one most pools live on. Daemons of one run are expected to
    /// agree to the second, as the machines of one cluster are.
    async fn clock(&self) -> Option<i64> {
        self.place(0).clock().await
    }

    /// Connect to each daemon of `hosts` that is not one of these endpoints yet, so that the next
    /// list shows its containers: a pool moved away from it, and its instances there are
    /// retired the safe way, surge first where the spec now places the pool. A daemon that does
    /// not answer stays out of view.
    async fn look_also(&self, hosts: &[String]) -> Vec<(String, BackendError)> {
        let Some(connect) = &self.connect else { return Vec::new() };
        let mut failed = Vec::new();
        for host in hosts {
            if self.hosts().contains(host) {
                continue;
            }
            match connect(host.clone()).await {
                Ok((name, backend)) => {
                    self.places
                        .write()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push((name, Arc::new(backend)));
                }
                Err(e) => failed.push((host.clone(), e)),
            }
        }
        failed
    }

    fn instance_ref(&self, name: &str) -> Option<InstanceRef> {
        self.instance(name).instance_ref(name)
    }

    async fn list(&self) -> Result<Vec<Container>, BackendError> {
        let mut out: Vec<Container> = Vec::new();
        let mut by_id: HashMap<String, usize> = HashMap::new();
        let mut seen = Seen::default();
        for (i, (name, backend)) in self.all().iter().enumerate() {
            for mut c in backend.list().await? {
                let home = self.pools.get(&c.pool).copied();
                if let Some(&at) = by_id.get(&c.id) {
                    // The same container through a second address of its daemon.
                    if home == Some(i) {
                        out[at].elsewhere = None;
                        seen.instances.insert(c.name.clone(), i);
                    }
                    continue;
                }
                // Seen only away from its pool's endpoint: on one the pool moved away from.
                c.elsewhere = home.filter(|&h| h != i).map(|_| name.clone());
                seen.instances.insert(c.name.clone(), i);
                seen.pools.entry(c.pool.clone()).or_insert(i);
                by_id.insert(c.id.clone(), out.len());
                out.push(c);
            }
        }
        *self.seen() = seen;
        Ok(out)
    }

    async fn ensure_image(&self, pool: &str, image: &str) -> Result<bool, BackendError> {
        self.of_pool_backend(pool).ensure_image(pool, image).await
    }

    async fn image_labels(&self, pool: &str, image: &str) -> Result<BTreeMap<String, String>, BackendError> {
        self.of_pool_backend(pool).image_labels(pool, image).await
    }

    async fn network_exists(&self, pool: &str, name: &str) -> Result<bool, BackendError> {
        self.of_pool_backend(pool).network_exists(pool, name).await
    }

    async fn create(&self, spec: &NewContainer) -> Result<(), BackendError> {
        let at = spec.labels.get(labels::POOL).map_or(0, |pool| self.of_pool(pool));
        self.seen().instances.insert(spec.name.clone(), at);
        self.place(at).create(spec).await
    }

    async fn exec(&self, name: &str, argv: &[String], timeout: Duration) -> Result<ExecOutput, BackendError> {
        self.instance(name).exec(name, argv, timeout).await
    }

    async fn read_file(&self, name: &str, path: &str) -> Result<Secret, BackendError> {
        self.instance(name).read_file(name, path).await
    }

    async fn write_file(&self, name: &str, file: &NewFile) -> Result<(), BackendError> {
        self.instance(name).write_file(name, file).await
    }

    async fn may_run(&self, name: &str) -> Result<bool, BackendError> {
        self.instance(name).may_run(name).await
    }

    async fn up_now(&self, name: &str) -> Result<Option<String>, BackendError> {
        self.instance(name).up_now(name).await
    }

    async fn wait_up(&self, name: &str, timeout: Duration) -> Result<(), BackendError> {
        self.instance(name).wait_up(name, timeout).await
    }

    async fn wait_stopped(&self, name: &str) -> Result<Stopped, BackendError> {
        self.instance(name).wait_stopped(name).await
    }

    async fn stop(&self, name: &str, grace: Duration) -> Result<(), BackendError> {
        self.instance(name).stop(name, grace).await
    }

    async fn remove(&self, name: &str) -> Result<(), BackendError> {
        self.instance(name).remove(name).await
    }

    async fn update_in_place(
        &self,
        name: &str,
        update: &crate::backend::LiveUpdate,
        labels: &BTreeMap<String, String>,
    ) -> Result<(), BackendError> {
        self.instance(name).update_in_place(name, update, labels).await
    }

    /// On every endpoint: a pool that moved may have left a record where it was.
    async fn forget_pool(&self, pool: &str) -> Result<(), BackendError> {
        for (_, backend) in self.all() {
            backend.forget_pool(pool).await?;
        }
        Ok(())
    }

    async fn record_up(&self, name: &str, labels: &BTreeMap<String, String>) -> Result<(), BackendError> {
        self.instance(name).record_up(name, labels).await
    }

    async fn record_progress(
        &self,
        pool: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<(), BackendError> {
        self.of_pool_backend(pool).record_progress(pool, labels).await
    }

    /// Every endpoint's: a pool's record lives where its containers are created.
    fn rollouts(&self) -> BTreeMap<String, crate::model::RolloutRecord> {
        self.all().iter().flat_map(|(_, backend)| backend.rollouts()).collect()
    }

    /// Every endpoint's, as [`Containers::rollouts`]: a pool's record lives on its endpoint.
    fn suspensions(&self) -> BTreeMap<String, crate::model::Suspension> {
        self.all().iter().flat_map(|(_, backend)| backend.suspensions()).collect()
    }

    fn requests(&self) -> std::collections::BTreeSet<String> {
        self.all().iter().flat_map(|(_, backend)| backend.requests()).collect()
    }

    async fn suspend(
        &self,
        pool: &str,
        by: &str,
        reason: Option<&str>,
    ) -> Result<crate::model::Suspension, BackendError> {
        self.of_pool_backend(pool).suspend(pool, by, reason).await
    }

    async fn resume(&self, pool: &str) -> Result<(), BackendError> {
        self.of_pool_backend(pool).resume(pool).await
    }

    async fn request_reconcile(&self, pool: &str) -> Result<(), BackendError> {
        self.of_pool_backend(pool).request_reconcile(pool).await
    }

    async fn consume_request(&self, pool: &str) -> Result<(), BackendError> {
        self.of_pool_backend(pool).consume_request(pool).await
    }

    fn promotions(&self) -> BTreeMap<String, crate::model::Promotion> {
        self.all().iter().flat_map(|(_, backend)| backend.promotions()).collect()
    }

    async fn promote(
        &self,
        pool: &str,
        template_hash: &str,
        by: &str,
    ) -> Result<crate::model::Promotion, BackendError> {
        self.of_pool_backend(pool).promote(pool, template_hash, by).await
    }

    async fn tidy_promotion(&self, pool: &str) -> Result<(), BackendError> {
        self.of_pool_backend(pool).tidy_promotion(pool).await
    }

    async fn record_rollout(
        &self,
        pool: &str,
        template_hash: &str,
        rolled_back_from: Option<&str>,
        labels: &BTreeMap<String, String>,
    ) -> Result<(), BackendError> {
        self.of_pool_backend(pool).record_rollout(pool, template_hash, rolled_back_from, labels).await
    }

    /// Each pool's from the endpoint it lives on, where it writes its revisions; a pool that
    /// has none there keeps what another endpoint shows (where it lived before it moved).
    fn history(&self) -> BTreeMap<String, Vec<crate::model::Revision>> {
        let mut history: BTreeMap<String, Vec<crate::model::Revision>> =
            self.all().iter().flat_map(|(_, backend)| backend.history()).collect();
        for (pool, revisions) in &mut history {
            if let Some(own) = self.of_pool_backend(pool).history().remove(pool) {
                *revisions = own;
            }
        }
        history
    }

    async fn record_revision(
        &self,
        pool: &str,
        revision: &crate::model::Revision,
        labels: &BTreeMap<String, String>,
    ) -> Result<(), BackendError> {
        self.of_pool_backend(pool).record_revision(pool, revision, labels).await
    }

    async fn record_revision_end(
        &self,
        pool: &str,
        number: u64,
        result: crate::model::RolloutResult,
        labels: &BTreeMap<String, String>,
    ) -> Result<(), BackendError> {
        self.of_pool_backend(pool).record_revision_end(pool, number, result, labels).await
    }
}

/// A pool's lock lives on the pool's endpoint, beside its containers.
impl<C: Locks + Send + Sync> Locks for Endpoints<C> {
    async fn acquire(
        &self,
        pool: &str,
        who: &str,
        lease: Duration,
        takeover: Option<&LockRecord>,
    ) -> Result<LockRecord, LockError> {
        self.of_pool_backend(pool).acquire(pool, who, lease, takeover).await
    }

    async fn renew(&self, pool: &str, held: &LockRecord, lease: Duration) -> Result<LockRecord, LockError> {
        self.of_pool_backend(pool).renew(pool, held, lease).await
    }

    async fn release(&self, pool: &str, held: &LockRecord) -> Result<(), LockError> {
        self.of_pool_backend(pool).release(pool, held).await
    }

    async fn inspect(&self, pool: &str) -> Result<Option<LockRecord>, BackendError> {
        self.of_pool_backend(pool).inspect(pool).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::World;
    use crate::plan::PlanOptions;
    use crate::testing::build::{container, routed, two_pools, world_of};
    use crate::testing::fake::FakeWorld;

    #[tokio::test]
    async fn one_daemon_behind_two_endpoints_shows_each_container_once() {
        let daemon =
            FakeWorld::new(world_of(vec![container("a-h-1", "a", "h", 1), container("b-h-1", "b", "h", 2)]));
        let endpoints = routed(daemon.clone(), daemon.clone());
        let listed = endpoints.list().await.unwrap();
        let names: Vec<(&str, Option<&str>)> =
            listed.iter().map(|c| (c.name.as_str(), c.elsewhere.as_deref())).collect();
        assert_eq!(names, [("a-h-1", None), ("b-h-1", None)]);
        let world = World { containers: listed, ..World::default() };
        let plan = crate::plan::plan(&two_pools(), &world, PlanOptions::default());
        assert!(!plan.has_changes(), "nothing is counted twice: {plan:#?}");
    }

    #[tokio::test]
    async fn a_pools_lock_is_kept_on_its_endpoint() {
        let (one, two) = (FakeWorld::default(), FakeWorld::default());
        let endpoints = routed(one.clone(), two.clone());
        let lease = Duration::from_secs(60);
        endpoints.acquire("b", "me", lease, None).await.unwrap();
        assert!(one.locks().is_empty());
        assert_eq!(two.locks().into_keys().collect::<Vec<_>>(), ["docker/b"]);
    }
}
