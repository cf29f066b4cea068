//! The fake backend: the simulated world ([`SimWorld`]) behind the backend traits, so that
//! observe, the executor and a whole reconcile run without Docker or Kubernetes. Every call that
//! changes the world is recorded as `verb name`, changes the world as its real counterpart
//! would, and can be made to fail.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use super::sim::SimWorld;
use crate::backend::{
    BackendError, Cluster, Connect, Containers, ExecOutput, LockError, LockRecord, Locks, NewContainer,
    NewFile, ServerVersion, Stopped, lock_expiry,
};
use crate::model::{
    ClusterIdentity, ClusterRef, Container, ContainerState, InstanceRef, LockHolder, Node, Pdb, Pod, World,
    labels,
};
use crate::rollout::cancel::Interrupt;
use crate::spec::{Secret, Taint};

/// Docker and every cluster at once, in memory. Clones share the world.
#[derive(Clone, Default)]
pub(crate) struct FakeWorld(Arc<Inner>);

#[derive(Default)]
struct Inner {
    sim: Mutex<SimWorld>,
    calls: Mutex<Vec<String>>,
    faults: Mutex<Faults>,
    /// Calls in flight now and at most, to see that creations overlap.
    in_flight: Mutex<(usize, usize)>,
    /// Woken whenever a call may have changed the world.
    changed: tokio::sync::Notify,
    /// Every lock held, by `docker/<pool>` or `lease/<pool>`, and the last version handed out.
    locks: Mutex<(BTreeMap<String, LockRecord>, u64)>,
    /// `+verb name` when a call starts and `-verb name` when it ends, to see which overlap.
    timeline: Mutex<Vec<String>>,
    /// The joining instances each node pool's lock records.
    joining: Mutex<BTreeMap<String, BTreeSet<String>>>,
    /// Every name noted as joining, with how many calls had been made by then.
    noted: Mutex<Vec<(String, usize)>>,
    /// Every Kubernetes Event told, as `<Node or Lease> <reason>`.
    told: Mutex<Vec<String>>,
    /// The suspension each node pool's Lease records ([`Cluster::marks`]).
    lease_suspensions: Mutex<BTreeMap<String, crate::model::Suspension>>,
    /// Seconds the daemon's clock ([`Containers::clock`]) is ahead of this process's: time that
    /// passes for the world at once, as far as every record's age goes.
    ahead: std::sync::atomic::AtomicI64,
    /// The labels of each image, by the name the template gives it; none unless a test says.
    image_labels: Mutex<BTreeMap<String, BTreeMap<String, String>>>,
    /// What every cluster's API server answers to `/version` ([`FakeWorld::server_version`]);
    /// `None`: [`DEFAULT_SERVER_VERSION`].
    server_version: Mutex<Option<ServerVersion>>,
}

/// The fake API servers' `gitVersion` unless a test sets another.
const DEFAULT_SERVER_VERSION: &str = "v1.34.0";

/// A `/version` answer for `git_version` (`v1.30.2`), as a real API server gives it.
fn version_info(git_version: &str) -> ServerVersion {
    let numbers = git_version.trim_start_matches('v');
    let mut parts = numbers.split(['.', '-', '+']);
    let major = parts.next().unwrap_or_default().to_owned();
    let minor = parts.next().unwrap_or_default().to_owned();
    ServerVersion { git_version: git_version.to_owned(), major, minor }
}

/// What the fake does besides answering.
#[derive(Default)]
struct Faults {
    /// Calls that fail, as `verb name`.
    fail: BTreeSet<String>,
    /// Calls that fail for a while, from the first one on (an API server answering 503).
    fail_for: BTreeMap<String, Outage>,
    /// Calls that are made but never answered (a server that accepts and says nothing).
    silent: BTreeSet<String>,
    /// Calls that are answered this long after they are made (a slow server), on tokio's clock.
    slow: BTreeMap<String, Duration>,
    /// The exit code of every exec.
    exit_code: i64,
    /// What every exec prints (`join failed` unless a test says).
    exec_output: Option<String>,
    /// After this call, trigger the interrupt.
    interrupt_after: Option<(String, Arc<Interrupt>)>,
    /// After this call, this container exits (an instance dying after it came up).
    die_after: Option<(String, String)>,
    /// After this call, the daemon's clock jumps this many seconds ahead (a disruption window
    /// opening in the middle of a rollout).
    pass_after: Option<(String, i64)>,
    /// A stop that would leave fewer running containers than this fails.
    min_running: Option<usize>,
    /// Clusters that refuse connections.
    unreachable: BTreeSet<ClusterRef>,
    /// What a kubeconfig and context resolve to, where a test says (a switched context);
    /// otherwise one cluster per reference.
    resolves_to: BTreeMap<ClusterRef, ClusterIdentity>,
    /// Nodes whose Ready wait lasts its whole timeout (a kubelet that never gets there).
    never_ready: BTreeSet<String>,
    /// Calls that, once made, wait until the test lets them go ([`FakeWorld::release`]).
    held: BTreeMap<String, Arc<tokio::sync::Semaphore>>,
}

/// A while during which a call fails.
#[derive(Clone, Copy)]
enum Outage {
    /// Starts with the next such call, and lasts this long.
    Armed(Duration),
    /// Started; lasts until then (on tokio's clock, so that a test may pause it).
    Until(tokio::time::Instant),
}

impl Faults {
    /// Whether the call `what`, made now, fails.
    fn fails(&mut self, what: &str) -> bool {
        if self.fail.contains(what) {
            return true;
        }
        let Some(outage) = self.fail_for.get_mut(what) else { return false };
        let now = tokio::time::Instant::now();
        match *outage {
            Outage::Armed(lasting) => {
                *outage = Outage::Until(now + lasting);
                true
            }
            Outage::Until(until) => now < until,
        }
    }
}

impl FakeWorld {
    pub(crate) fn new(world: World) -> Self {
        let fake = Self::default();
        *fake.0.sim.lock().unwrap() = SimWorld::new(world);
        fake
    }

    /// Make the call `verb name` fail.
    pub(crate) fn failing(self, call: &str) -> Self {
        self.faults().fail.insert(call.to_owned());
        self
    }

    /// Make the call `verb name` fail for `lasting`, from the next time it is made on.
    pub(crate) fn failing_for(&self, call: &str, lasting: Duration) {
        self.faults().fail_for.insert(call.to_owned(), Outage::Armed(lasting));
    }

    /// Make the call `verb name` wait, once made, until [`FakeWorld::release`] lets it go.
    pub(crate) fn hold(&self, call: &str) {
        self.faults().held.insert(call.to_owned(), Arc::new(tokio::sync::Semaphore::new(0)));
    }

    /// Let a held call go on.
    pub(crate) fn release(&self, call: &str) {
        if let Some(held) = self.faults().held.get(call) {
            held.add_permits(1);
        }
    }

    /// Wait until the timeline of calls satisfies `done`, letting the other tasks run; panics
    /// after many turns of them without it, rather than hanging a test.
    pub(crate) async fn until(&self, done: impl Fn(&[String]) -> bool) {
        for _ in 0..100_000 {
            if done(&self.timeline()) {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("the calls never got there: {:?}", self.timeline());
    }

    /// Make the call `verb name` never answer (it is recorded when made).
    pub(crate) fn silent(&self, call: &str) {
        self.faults().silent.insert(call.to_owned());
    }

    /// Make the call `verb name` answer only `after` it is made (it is recorded when made, and
    /// takes effect when it answers), as a slow but working server does.
    pub(crate) fn slow(&self, call: &str, after: Duration) {
        self.faults().slow.insert(call.to_owned(), after);
    }

    pub(crate) fn exit_code(self, code: i64) -> Self {
        self.faults().exit_code = code;
        self
    }

    pub(crate) fn exec_output(self, output: &str) -> Self {
        self.faults().exec_output = Some(output.to_owned());
        self
    }

    pub(crate) fn interrupt_after(self, call: &str, interrupt: Arc<Interrupt>) -> Self {
        self.faults().interrupt_after = Some((call.to_owned(), interrupt));
        self
    }

    pub(crate) fn die_after(self, call: &str, container: &str) -> Self {
        self.faults().die_after = Some((call.to_owned(), container.to_owned()));
        self
    }

    pub(crate) fn pass_after(self, call: &str, secs: i64) -> Self {
        self.faults().pass_after = Some((call.to_owned(), secs));
        self
    }

    pub(crate) fn min_running(self, n: usize) -> Self {
        self.faults().min_running = Some(n);
        self
    }

    pub(crate) fn never_ready(self, node: &str) -> Self {
        self.faults().never_ready.insert(node.to_owned());
        self
    }

    pub(crate) fn unreachable(self, cluster: ClusterRef) -> Self {
        self.faults().unreachable.insert(cluster);
        self
    }

    /// Give `image` the label `key=value`.
    pub(crate) fn image_label(self, image: &str, key: &str, value: &str) -> Self {
        let mut images = self.0.image_labels.lock().unwrap();
        images.entry(image.to_owned()).or_default().insert(key.to_owned(), value.to_owned());
        drop(images);
        self
    }

    /// Have every cluster's API server answer `/version` with `git_version` (`v1.30.2`). The
    /// read fails when the call `version` is made to fail.
    pub(crate) fn server_version(self, git_version: &str) -> Self {
        *self.0.server_version.lock().unwrap() = Some(version_info(git_version));
        self
    }

    /// Have `cluster` resolve to the cluster `id` (as a `kubectl config use-context` would).
    pub(crate) fn resolve(self, cluster: ClusterRef, id: ClusterIdentity) -> Self {
        self.faults().resolves_to.insert(cluster, id);
        self
    }

    /// The identity a reference resolves to: the one a test set, or one named after it.
    pub(crate) fn identity_of(&self, cluster: &ClusterRef) -> ClusterIdentity {
        self.faults().resolves_to.get(cluster).cloned().unwrap_or_else(|| {
            let context = cluster.context.clone().unwrap_or_else(|| "current".to_owned());
            ClusterIdentity {
                server: format!("https://{context}.fake"),
                uid: Some(format!("uid-{context}")),
                context,
            }
        })
    }

    /// The calls that changed (or tried to change) the world, in order.
    pub(crate) fn calls(&self) -> Vec<String> {
        self.0.calls.lock().unwrap().clone()
    }

    /// The most calls that were in flight at once.
    pub(crate) fn max_in_flight(&self) -> usize {
        self.0.in_flight.lock().unwrap().1
    }

    /// Every call's start (`+verb name`) and end (`-verb name`), in order.
    pub(crate) fn timeline(&self) -> Vec<String> {
        self.0.timeline.lock().unwrap().clone()
    }

    /// The most calls of `verb` that were in flight at once.
    pub(crate) fn max_in_flight_of(&self, verb: &str) -> usize {
        let (mut now, mut max) = (0usize, 0);
        for event in self.timeline() {
            let (sign, call) = event.split_at(1);
            if call.split(' ').next() == Some(verb) {
                if sign == "+" {
                    now += 1;
                    max = max.max(now);
                } else {
                    now -= 1;
                }
            }
        }
        max
    }

    pub(crate) fn world(&self) -> World {
        self.sim().world.clone()
    }

    /// Let `secs` pass for the world at once: every record written so far (and, since the
    /// fake writes them by this process's clock, every one written after) looks that much
    /// older to a plan.
    pub(crate) fn pass(&self, secs: i64) {
        self.0.ahead.fetch_add(secs, std::sync::atomic::Ordering::SeqCst);
    }

    pub(crate) fn sim(&self) -> MutexGuard<'_, SimWorld> {
        self.0.sim.lock().unwrap()
    }

    fn faults(&self) -> MutexGuard<'_, Faults> {
        self.0.faults.lock().unwrap()
    }

    /// Record a call, let concurrent calls overlap, then fail it if asked to; `effect` changes
    /// the world only for a call that succeeds.
    async fn call<T>(
        &self,
        what: String,
        effect: impl FnOnce(&mut SimWorld) -> Result<T, BackendError>,
    ) -> Result<T, BackendError> {
        {
            let mut f = self.0.in_flight.lock().unwrap();
            f.0 += 1;
            f.1 = f.1.max(f.0);
        }
        self.0.timeline.lock().unwrap().push(format!("+{what}"));
        let held = self.faults().held.get(&what).cloned();
        if let Some(held) = held {
            held.acquire().await.expect("never closed").forget();
        }
        tokio::task::yield_now().await;
        tokio::task::yield_now().await;
        self.0.in_flight.lock().unwrap().0 -= 1;
        self.0.timeline.lock().unwrap().push(format!("-{what}"));
        self.0.calls.lock().unwrap().push(what.clone());
        if self.faults().silent.contains(&what) {
            std::future::pending::<()>().await;
        }
        let slow = self.faults().slow.get(&what).copied();
        if let Some(after) = slow {
            tokio::time::sleep(after).await;
        }
        let mut faults = self.faults();
        let result = if faults.fails(&what) {
            Err(BackendError::Failed(format!("{what} refused")))
        } else {
            effect(&mut self.sim())
        };
        if let Some((after, interrupt)) = &faults.interrupt_after
            && *after == what
        {
            interrupt.trigger();
        }
        if let Some((after, name)) = &faults.die_after
            && *after == what
        {
            self.sim().stop(name);
        }
        if let Some((after, secs)) = &faults.pass_after
            && *after == what
        {
            self.pass(*secs);
        }
        self.0.changed.notify_waiters();
        result
    }

    /// Suspend `pool` on its Lease, as `poolctl suspend` does a node pool.
    pub(crate) fn suspend_on_lease(&self, pool: &str, suspension: crate::model::Suspension) {
        self.0.lease_suspensions.lock().unwrap().insert(pool.to_owned(), suspension);
    }

    /// The joining instances `pool`'s lock records now.
    pub(crate) fn joining(&self, pool: &str) -> BTreeSet<String> {
        self.0.joining.lock().unwrap().get(pool).cloned().unwrap_or_default()
    }

    /// Record `name` as joining in `pool`'s lock, as an earlier run would have.
    pub(crate) fn note_joining(&self, pool: &str, name: &str) {
        self.0.joining.lock().unwrap().entry(pool.to_owned()).or_default().insert(name.to_owned());
    }

    /// Every Kubernetes Event told, in order, as `<Node name or lease/pool> <reason>`.
    pub(crate) fn told(&self) -> Vec<String> {
        self.0.told.lock().unwrap().clone()
    }

    /// Every name noted as joining, with how many calls (see [`FakeWorld::calls`]) had been
    /// made by then.
    pub(crate) fn noted(&self) -> Vec<(String, usize)> {
        self.0.noted.lock().unwrap().clone()
    }

    /// Put a lock in place as another actor would: `place` is `docker` or `lease`; `expires`
    /// by that actor's clock, which may be far from this one's. The record names no lease, so
    /// a standby goes by its own.
    pub(crate) fn hold_lock(&self, place: &str, pool: &str, who: &str, expires: SystemTime) {
        let mut locks = self.0.locks.lock().unwrap();
        locks.1 += 1;
        let holder = LockHolder { who: who.to_owned(), since: SystemTime::UNIX_EPOCH, expires };
        let record = LockRecord { holder, version: format!("v{}", locks.1), lease: None };
        locks.0.insert(format!("{place}/{pool}"), record);
    }

    /// Renew a lock as its holder (another actor) would: a new version and a new expiry (by that
    /// actor's clock, `expires`).
    pub(crate) fn renew_lock(&self, place: &str, pool: &str, expires: SystemTime) {
        let mut guard = self.0.locks.lock().unwrap();
        let (locks, version) = &mut *guard;
        *version += 1;
        let record = locks.get_mut(&format!("{place}/{pool}")).expect("a lock to renew");
        record.holder.expires = expires;
        record.version = format!("v{version}");
    }

    /// The locks held now, by `docker/<pool>` or `lease/<pool>`.
    pub(crate) fn locks(&self) -> BTreeMap<String, LockRecord> {
        self.0.locks.lock().unwrap().0.clone()
    }

    /// Remove a lock as `poolctl unlock` would, whoever holds it.
    pub(crate) fn break_lock(&self, place: &str, pool: &str) {
        self.0.locks.lock().unwrap().0.remove(&format!("{place}/{pool}"));
    }

    /// The lock semantics both backends share, over the in-memory table; the calls are
    /// recorded as `lock P`, `renew P`, `release P` (they can be made to fail like any other).
    async fn lock_call(
        &self,
        verb: &str,
        key: &str,
        pool: &str,
        op: LockOp<'_>,
    ) -> Result<Option<LockRecord>, LockError> {
        let result = self.call(format!("{verb} {pool}"), |_| Ok(())).await;
        result?;
        let mut guard = self.0.locks.lock().unwrap();
        let (locks, version) = &mut *guard;
        let now = SystemTime::now();
        let current = locks.get(key).cloned();
        match op {
            // As the backends do: a held lock is taken over only if it is still the very record
            // the caller saw lapse; the fake never judges expiry by any clock.
            LockOp::Acquire { who, lease, takeover } => match current {
                Some(c) if takeover != Some(&c) => {
                    Err(LockError::Held { pool: pool.to_owned(), record: Box::new(c) })
                }
                _ => {
                    *version += 1;
                    let holder =
                        LockHolder { who: who.to_owned(), since: now, expires: lock_expiry(now, lease) };
                    let record = LockRecord { holder, version: format!("v{version}"), lease: Some(lease) };
                    locks.insert(key.to_owned(), record.clone());
                    Ok(Some(record))
                }
            },
            LockOp::Renew { held, lease } => match current {
                Some(c) if c.version == held.version => {
                    *version += 1;
                    let holder = LockHolder { expires: lock_expiry(now, lease), ..c.holder };
                    let record = LockRecord { holder, version: format!("v{version}"), lease: c.lease };
                    locks.insert(key.to_owned(), record.clone());
                    Ok(Some(record))
                }
                _ => Err(LockError::Lost { pool: pool.to_owned(), why: "it was broken".into() }),
            },
            LockOp::Release { held } => match current {
                Some(c) if c.version != held.version => Err(LockError::Lost {
                    pool: pool.to_owned(),
                    why: format!("it is held by {}", c.holder.who),
                }),
                _ => {
                    locks.remove(key);
                    Ok(None)
                }
            },
        }
    }

    fn running(sim: &SimWorld) -> usize {
        sim.world.containers.iter().filter(|c| c.state == ContainerState::Running).count()
    }
}

impl Containers for FakeWorld {
    async fn list(&self) -> Result<Vec<Container>, BackendError> {
        Ok(self.sim().world.containers.clone())
    }

    fn hosts(&self) -> Vec<String> {
        vec![crate::testing::build::HOST.to_owned()]
    }

    fn instance_ref(&self, name: &str) -> Option<InstanceRef> {
        self.sim().reference_of(name)
    }

    async fn forget_pool(&self, pool: &str) -> Result<(), BackendError> {
        self.call(format!("forget {pool}"), |sim| {
            sim.world.rollouts.remove(pool);
            sim.world.history.remove(pool);
            Ok(())
        })
        .await
    }

    async fn ensure_image(&self, _pool: &str, image: &str) -> Result<bool, BackendError> {
        self.call(format!("image {image}"), |_| Ok(false)).await
    }

    /// A read: not recorded among the calls.
    async fn image_labels(&self, _pool: &str, image: &str) -> Result<BTreeMap<String, String>, BackendError> {
        if self.faults().fail.contains(&format!("image-labels {image}")) {
            return Err(BackendError::Failed(format!("image-labels {image} refused")));
        }
        Ok(self.0.image_labels.lock().unwrap().get(image).cloned().unwrap_or_default())
    }

    async fn network_exists(&self, _pool: &str, name: &str) -> Result<bool, BackendError> {
        Ok(name != "missing")
    }

    async fn create(&self, spec: &NewContainer) -> Result<(), BackendError> {
        self.call(format!("create {}", spec.name), |sim| {
            if sim.container(&spec.name).is_some() {
                return Err(BackendError::Failed(format!("the name {} is taken", spec.name)));
            }
            let label = |key: &str| spec.labels.get(key).cloned();
            let cluster = label(labels::CONTEXT).map(|context| ClusterRef {
                kubeconfig: label(labels::KUBECONFIG).filter(|k| !k.is_empty()),
                context: Some(context).filter(|c| !c.is_empty()),
            });
            let cluster_id = label(labels::CLUSTER_SERVER).map(|server| ClusterIdentity {
                context: label(labels::CLUSTER_CONTEXT).unwrap_or_default(),
                server,
                uid: label(labels::CLUSTER_UID).filter(|u| !u.is_empty()),
            });
            let container = Container {
                cluster_id,
                pool: label(labels::POOL).unwrap_or_default(),
                template_hash: label(labels::TEMPLATE_HASH).unwrap_or_default(),
                template: label(labels::TEMPLATE),
                scope: label(labels::SCOPE),
                image: spec.image.clone(),
                cluster,
                ..sim.new_container(&spec.name)
            };
            sim.create(container);
            Ok(())
        })
        .await
    }

    async fn exec(&self, name: &str, _: &[String], _: Duration) -> Result<ExecOutput, BackendError> {
        let (exit_code, output) = {
            let faults = self.faults();
            (faults.exit_code, faults.exec_output.clone().unwrap_or_else(|| "join failed\n".into()))
        };
        self.call(format!("exec {name}"), |_| Ok(ExecOutput { exit_code, output })).await
    }

    async fn read_file(&self, name: &str, path: &str) -> Result<Secret, BackendError> {
        self.call(format!("read-file {name} {path}"), |sim| match sim.container(name) {
            Some(_) => Ok(Secret::new(format!("token-of-{name}"))),
            None => Err(BackendError::NotFound(format!("container {name}"))),
        })
        .await
    }

    async fn write_file(&self, name: &str, file: &NewFile) -> Result<(), BackendError> {
        self.call(format!("write-file {name} {}", file.path), |_| Ok(())).await
    }

    async fn may_run(&self, name: &str) -> Result<bool, BackendError> {
        Ok(self.sim().container(name).is_some_and(|c| c.state.may_run()))
    }

    async fn clock(&self) -> Option<i64> {
        let ahead = self.0.ahead.load(std::sync::atomic::Ordering::SeqCst);
        Some(wall_clock().saturating_add(ahead))
    }

    /// A look, not a call of its own in [`FakeWorld::calls`]: the window's looks are many.
    async fn up_now(&self, name: &str) -> Result<Option<String>, BackendError> {
        Ok(match self.sim().container(name) {
            Some(c) if c.is_up() => None,
            Some(c) => Some(c.state.as_str().to_owned()),
            None => Some("no longer exists".to_owned()),
        })
    }

    async fn wait_up(&self, name: &str, _: Duration) -> Result<(), BackendError> {
        self.call(format!("wait-up {name}"), |sim| match sim.container(name) {
            Some(c) if c.is_up() => Ok(()),
            Some(c) => Err(BackendError::Failed(format!("container {name} is {}", c.state.as_str()))),
            None => Err(BackendError::NotFound(format!("container {name}"))),
        })
        .await
    }

    async fn wait_stopped(&self, name: &str) -> Result<Stopped, BackendError> {
        loop {
            // Registered before the look, so that a change between the two is not missed.
            let changed = self.0.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            match self.sim().container(name) {
                None => return Ok(Stopped::Removed),
                Some(c) if c.state != ContainerState::Running => return Ok(Stopped::Exited(0)),
                Some(_) => {}
            }
            changed.await;
        }
    }

    async fn stop(&self, name: &str, _: Duration) -> Result<(), BackendError> {
        let min = self.faults().min_running;
        self.call(format!("stop {name}"), |sim| {
            let running = Self::running(sim);
            let is_running = sim.container(name).is_some_and(|c| c.state == ContainerState::Running);
            if let Some(min) = min.filter(|&min| is_running && running <= min) {
                return Err(BackendError::Failed(format!(
                    "stopping {name} would leave fewer than {min} running"
                )));
            }
            sim.stop(name);
            Ok(())
        })
        .await
    }

    async fn remove(&self, name: &str) -> Result<(), BackendError> {
        self.call(format!("remove {name}"), |sim| {
            sim.remove(name);
            Ok(())
        })
        .await
    }

    async fn update_in_place(
        &self,
        name: &str,
        update: &crate::backend::LiveUpdate,
        _: &BTreeMap<String, String>,
    ) -> Result<(), BackendError> {
        self.call(format!("update {name}"), |sim| {
            let c = sim.world.containers.iter_mut().find(|c| c.name == name);
            let c = c.ok_or_else(|| BackendError::NotFound(format!("container {name}")))?;
            c.template_hash.clone_from(&update.template_hash);
            c.template = Some(update.template.clone());
            Ok(())
        })
        .await
    }

    fn rollouts(&self) -> BTreeMap<String, crate::model::RolloutRecord> {
        self.sim().world.rollouts.clone()
    }

    /// Bookkeeping beside a retirement step, not a call of its own in [`FakeWorld::calls`]:
    /// the order tests read is the steps'.
    async fn record_progress(&self, pool: &str, _: &BTreeMap<String, String>) -> Result<(), BackendError> {
        let now = wall_clock();
        if let Some(record) = self.sim().world.rollouts.get_mut(pool) {
            record.progressed = Some(now);
        }
        Ok(())
    }

    async fn record_rollout(
        &self,
        pool: &str,
        template_hash: &str,
        rolled_back_from: Option<&str>,
        _: &BTreeMap<String, String>,
    ) -> Result<(), BackendError> {
        let now = wall_clock();
        self.call(format!("record-rollout {pool}"), |sim| {
            sim.record_rollout(pool, template_hash, rolled_back_from, now);
            Ok(())
        })
        .await
    }

    fn history(&self) -> BTreeMap<String, Vec<crate::model::Revision>> {
        self.sim().world.history.clone()
    }

    fn suspensions(&self) -> BTreeMap<String, crate::model::Suspension> {
        self.sim().world.suspended.clone()
    }

    async fn record_revision(
        &self,
        pool: &str,
        revision: &crate::model::Revision,
        _: &BTreeMap<String, String>,
    ) -> Result<(), BackendError> {
        let now = wall_clock();
        self.call(format!("record-revision {pool} {}", revision.number), |sim| {
            sim.record_revision(pool, revision.clone(), now);
            Ok(())
        })
        .await
    }

    async fn record_revision_end(
        &self,
        pool: &str,
        number: u64,
        result: crate::model::RolloutResult,
        _: &BTreeMap<String, String>,
    ) -> Result<(), BackendError> {
        let now = wall_clock();
        self.call(format!("record-revision-end {pool} {number} {result}"), |sim| {
            sim.record_revision_end(pool, number, result, now);
            Ok(())
        })
        .await
    }

    async fn record_up(&self, name: &str, _: &BTreeMap<String, String>) -> Result<(), BackendError> {
        self.call(format!("record-up {name}"), |sim| {
            if sim.record_up(name) {
                Ok(())
            } else {
                Err(BackendError::NotFound(format!("container {name}")))
            }
        })
        .await
    }
}

/// One operation on the fake's lock table.
enum LockOp<'a> {
    Acquire { who: &'a str, lease: Duration, takeover: Option<&'a LockRecord> },
    Renew { held: &'a LockRecord, lease: Duration },
    Release { held: &'a LockRecord },
}

/// The fake's locks, at `place` (`docker` or `lease`).
async fn fake_lock(
    world: &FakeWorld,
    place: &str,
    verb: &str,
    pool: &str,
    op: LockOp<'_>,
) -> Result<Option<LockRecord>, LockError> {
    world.lock_call(verb, &format!("{place}/{pool}"), pool, op).await
}

fn some(record: Result<Option<LockRecord>, LockError>) -> Result<LockRecord, LockError> {
    record.map(|r| r.expect("acquire and renew return the lock"))
}

/// Locks in Docker (container-only pools).
impl Locks for FakeWorld {
    async fn acquire(
        &self,
        pool: &str,
        who: &str,
        lease: Duration,
        takeover: Option<&LockRecord>,
    ) -> Result<LockRecord, LockError> {
        some(fake_lock(self, "docker", "lock", pool, LockOp::Acquire { who, lease, takeover }).await)
    }
    async fn renew(&self, pool: &str, held: &LockRecord, lease: Duration) -> Result<LockRecord, LockError> {
        some(fake_lock(self, "docker", "renew", pool, LockOp::Renew { held, lease }).await)
    }
    async fn release(&self, pool: &str, held: &LockRecord) -> Result<(), LockError> {
        fake_lock(self, "docker", "release", pool, LockOp::Release { held }).await.map(drop)
    }
    async fn inspect(&self, pool: &str) -> Result<Option<LockRecord>, BackendError> {
        Ok(self.0.locks.lock().unwrap().0.get(&format!("docker/{pool}")).cloned())
    }
}

/// Locks as Leases in the pool's cluster (pools of Nodes).
impl Locks for FakeCluster {
    async fn acquire(
        &self,
        pool: &str,
        who: &str,
        lease: Duration,
        takeover: Option<&LockRecord>,
    ) -> Result<LockRecord, LockError> {
        some(fake_lock(&self.world, "lease", "lock", pool, LockOp::Acquire { who, lease, takeover }).await)
    }
    async fn renew(&self, pool: &str, held: &LockRecord, lease: Duration) -> Result<LockRecord, LockError> {
        some(fake_lock(&self.world, "lease", "renew", pool, LockOp::Renew { held, lease }).await)
    }
    async fn release(&self, pool: &str, held: &LockRecord) -> Result<(), LockError> {
        fake_lock(&self.world, "lease", "release", pool, LockOp::Release { held }).await.map(drop)
    }
    async fn inspect(&self, pool: &str) -> Result<Option<LockRecord>, BackendError> {
        Ok(self.world.0.locks.lock().unwrap().0.get(&format!("lease/{pool}")).cloned())
    }
}

impl Connect for FakeWorld {
    type Cluster = FakeCluster;

    async fn connect(&self, cluster: &ClusterRef, pool: &str) -> Result<FakeCluster, BackendError> {
        if self.faults().unreachable.contains(cluster) {
            return Err(BackendError::Unreachable {
                what: "the Kubernetes API server",
                at: format!("{cluster:?}"),
                reason: "connection refused".into(),
            });
        }
        Ok(FakeCluster { world: self.clone(), pool: pool.to_owned(), identity: self.identity_of(cluster) })
    }
}

/// One pool's view of the fake world's Kubernetes.
#[derive(Clone)]
pub(crate) struct FakeCluster {
    world: FakeWorld,
    pool: String,
    identity: ClusterIdentity,
}

impl Cluster for FakeCluster {
    async fn tell(&self, node: Option<&str>, reason: &'static str, _: String, _: bool) {
        let about = node.map_or_else(|| format!("lease/{}", self.pool), str::to_owned);
        self.world.0.told.lock().unwrap().push(format!("{about} {reason}"));
    }

    fn marks(&self) -> crate::backend::LeaseMarks {
        let suspension = self.world.0.lease_suspensions.lock().unwrap().get(&self.pool).cloned();
        crate::backend::LeaseMarks { suspension, requested: None }
    }

    async fn nodes(&self, names: &[String]) -> Result<Vec<Node>, BackendError> {
        let joining = self.world.joining(&self.pool);
        let sim = self.world.sim();
        Ok(sim
            .world
            .nodes
            .iter()
            .filter(|n| {
                n.pool.as_deref() == Some(&self.pool) || names.contains(&n.name) || joining.contains(&n.name)
            })
            .cloned()
            .collect())
    }

    async fn note_joining(&self, name: &str) -> Result<(), BackendError> {
        if self.world.faults().fail.contains(&format!("note-joining {name}")) {
            return Err(BackendError::Failed(format!("note-joining {name} refused")));
        }
        let calls = self.world.calls().len();
        self.world.0.noted.lock().unwrap().push((name.to_owned(), calls));
        self.world.note_joining(&self.pool, name);
        Ok(())
    }

    async fn joining(&self, held: &LockRecord) -> Result<Option<Vec<String>>, BackendError> {
        let key = format!("lease/{}", self.pool);
        let ours = self.world.0.locks.lock().unwrap().0.get(&key).is_some_and(|r| r.holder.is(&held.holder));
        Ok(ours.then(|| self.world.joining(&self.pool).into_iter().collect()))
    }

    async fn forget_joining(&self, names: &[String]) -> Result<(), BackendError> {
        let mut joining = self.world.0.joining.lock().unwrap();
        let recorded = joining.entry(self.pool.clone()).or_default();
        recorded.retain(|n| !names.contains(n));
        Ok(())
    }

    async fn pods_and_pdbs(&self, nodes: &[String]) -> Result<(Vec<Pod>, Vec<Pdb>), BackendError> {
        let sim = self.world.sim();
        let pods: Vec<Pod> = sim.world.pods.iter().filter(|p| nodes.contains(&p.node)).cloned().collect();
        // As the API server is asked: the budgets of those pods' namespaces only.
        let pdbs: Vec<Pdb> = sim
            .world
            .pdbs
            .iter()
            .filter(|b| pods.iter().any(|p| p.namespace == b.namespace))
            .cloned()
            .collect();
        Ok((pods, pdbs))
    }

    async fn node(&self, name: &str) -> Result<Option<Node>, BackendError> {
        Ok(self.world.sim().world.nodes.iter().find(|n| n.name == name).cloned())
    }

    fn identity(&self) -> &ClusterIdentity {
        &self.identity
    }

    /// A read: not recorded among the calls; fails when `version` is made to.
    async fn server_version(&self) -> Result<ServerVersion, BackendError> {
        if self.world.faults().fail.contains("version") {
            return Err(BackendError::Unreachable {
                what: "the Kubernetes API server",
                at: self.identity.server.clone(),
                reason: "read the version: no answer within 10s".into(),
            });
        }
        let set = self.world.0.server_version.lock().unwrap().clone();
        Ok(set.unwrap_or_else(|| version_info(DEFAULT_SERVER_VERSION)))
    }

    async fn await_ready(&self, node: &str, timeout: Duration) -> Result<(), BackendError> {
        let timed_out =
            || BackendError::Timeout { what: format!("Node {node} did not turn Ready"), after: timeout };
        if self.world.faults().never_ready.contains(node) {
            self.world.call(format!("node-ready {node}"), |_| Ok(())).await?;
            tokio::time::sleep(timeout).await;
            return Err(timed_out());
        }
        self.world
            .call(format!("node-ready {node}"), |sim| {
                if sim.register_node(node) { Ok(()) } else { Err(timed_out()) }
            })
            .await
    }

    async fn configure(
        &self,
        node: &str,
        node_labels: &BTreeMap<String, String>,
        taints: &[Taint],
        reference: Option<&InstanceRef>,
    ) -> Result<(), BackendError> {
        self.world
            .call(format!("configure {node}"), |sim| {
                if sim.configure(node, node_labels, taints) {
                    if let Some(reference) = reference {
                        sim.reference_node(node, reference.clone());
                    }
                    Ok(())
                } else {
                    Err(BackendError::NotFound(format!("Node {node}")))
                }
            })
            .await
    }

    async fn cordon(&self, node: &str) -> Result<(), BackendError> {
        self.world
            .call(format!("cordon {node}"), |sim| {
                if sim.cordon(node) { Ok(()) } else { Err(BackendError::NotFound(format!("Node {node}"))) }
            })
            .await
    }

    /// The drain's evictions happen only while `guard` says the lock is held.
    async fn drain(
        &self,
        node: &str,
        _: Duration,
        _: &crate::spec::DrainSpec,
        guard: &crate::backend::LockGuard,
        _: crate::backend::DrainNews<'_>,
    ) -> Result<crate::backend::DrainEnd, BackendError> {
        self.world
            .call(format!("drain {node}"), |sim| {
                guard.check(&self.pool)?;
                sim.drain(node);
                Ok(crate::backend::DrainEnd::Complete)
            })
            .await
    }

    async fn attached_volumes(&self, node: &str) -> Result<Vec<String>, BackendError> {
        Ok(self.world.sim().volumes.get(node).cloned().unwrap_or_default())
    }

    async fn delete_node(&self, node: &str) -> Result<(), BackendError> {
        self.world
            .call(format!("delete-node {node}"), |sim| {
                sim.delete_node(node);
                Ok(())
            })
            .await
    }
}

/// Observing the fake stamps the world with the real clock: so are its records.
fn wall_clock() -> i64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    i64::try_from(now).unwrap_or(i64::MAX)
}
