//! A fake Kubernetes API server over real HTTP, for tests that drive the real kube client.
//!
//! `FakeKube::start` serves Nodes, Pods, the pods/eviction subresource and
//! PodDisruptionBudgets on 127.0.0.1 with a random port, on a runtime of its own in a thread
//! of its own, so it keeps answering while a test blocks on a child `poolctl` process. Tests
//! steer it through Rust methods (add nodes, pods, apps, PDBs, inject faults) and read back
//! the request log and the event log to check what happened in which order. A simulated
//! kubelet registers Nodes for the test's pool containers in Docker; a simulated ReplicaSet
//! controller re-creates evicted pods on schedulable Nodes, so PDB budgets refill.
//!
//! Everything in the fixture is crate-internal to the test binary, and each test uses a
//! different part of it, hence the lint allowances.
#![allow(dead_code, unreachable_pub)]

mod http;
mod kubelet;
mod select;
mod store;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::sync::watch;

pub use store::{
    App, Budget, Event, EventKind, EvictionRecord, PodSpecBuilder, ReadyPolicy, RequestRecord, Store,
};

use http::Shared;
use store::SimOptions;

/// How the simulated kubelet finds its containers and when it turns their Nodes Ready.
#[derive(Debug, Clone)]
pub struct KubeletOptions {
    /// `key=value` label that only this test's containers carry, so parallel tests do not see
    /// each other's containers.
    pub run_label: String,
    pub ready_policy: ReadyPolicy,
    pub poll_interval: Duration,
}

impl KubeletOptions {
    pub fn new(run_label: impl Into<String>) -> Self {
        Self {
            run_label: run_label.into(),
            ready_policy: ReadyPolicy::After(Duration::from_millis(300)),
            poll_interval: Duration::from_millis(150),
        }
    }
}

/// What `FakeKube::start` sets up.
#[derive(Debug, Clone)]
pub struct FakeKubeOptions {
    /// `None`: no kubelet (and no Docker needed); Nodes come only from `add_node`.
    pub kubelet: Option<KubeletOptions>,
    /// How long a deleted or evicted pod stays terminating (with a deletionTimestamp).
    pub pod_termination_delay: Duration,
    /// How long an app's replacement pod stays Pending before it runs on a schedulable Node.
    pub reschedule_delay: Duration,
}

impl Default for FakeKubeOptions {
    fn default() -> Self {
        Self {
            kubelet: None,
            pod_termination_delay: Duration::ZERO,
            reschedule_delay: Duration::from_millis(200),
        }
    }
}

/// A running fake API server; dropping it stops the server and all background tasks.
pub struct FakeKube {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: watch::Sender<bool>,
    thread: Option<JoinHandle<()>>,
}

impl FakeKube {
    /// Starts the server; panics with the reason if it (or the kubelet's Docker) cannot start.
    pub fn start(options: FakeKubeOptions) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the fake API server");
        listener.set_nonblocking(true).expect("make the listener non-blocking");
        let addr = listener.local_addr().expect("the listener has an address");
        let (shutdown, shutdown_rx) = watch::channel(false);
        let store = Store::new(SimOptions {
            termination_delay: options.pod_termination_delay,
            reschedule_delay: options.reschedule_delay,
            ready_policy: options
                .kubelet
                .as_ref()
                .map_or(ReadyPolicy::After(Duration::ZERO), |k| k.ready_policy),
        });
        let shared = Arc::new(Shared {
            store: Mutex::new(store),
            shutdown: shutdown_rx,
            down: watch::channel(false).0,
            listening: (Mutex::new(true), std::sync::Condvar::new()),
        });
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("fake-kube-{}", addr.port()))
            .spawn(move || serve(thread_shared, listener, options, ready_tx))
            .expect("spawn the fake API server thread");
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("the fake API server did not start: {e}"),
            Err(std::sync::mpsc::RecvError) => panic!("the fake API server thread died while starting"),
        }
        Self { addr, shared, shutdown, thread: Some(thread) }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// A kube config for this server. Note `default_retry`: kube 5 retries 429, 503 and 504
    /// answers by itself (up to 15 times, with backoff up to 1000 s) unless it is false; the
    /// config returned here turns it off so tests see every answer.
    pub fn config(&self) -> kube::Config {
        let mut config = kube::Config::new(self.url().parse().expect("the server URL is a valid URI"));
        config.default_namespace = "default".into();
        config.default_retry = false;
        config
    }

    /// A client for this server, without kube's built-in retries (see `config`).
    pub fn client(&self) -> kube::Client {
        kube::Client::try_from(self.config()).expect("build a kube client")
    }

    /// Writes a kubeconfig (context `fakekube`, no auth) so that a poolctl child process can
    /// be pointed at this server with KUBECONFIG.
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        let yaml = format!(
            "apiVersion: v1
kind: Config
clusters:
- name: fakekube
  cluster:
    server: {url}
contexts:
- name: fakekube
  context:
    cluster: fakekube
    user: fakekube
    namespace: default
current-context: fakekube
users:
- name: fakekube
  user: {{}}
",
            url = self.url()
        );
        std::fs::write(path, yaml)
    }

    /// Direct access to the state, for reads and changes not covered by the helpers below.
    pub fn store(&self) -> MutexGuard<'_, Store> {
        self.shared.store.lock().expect("store lock")
    }

    // ------------------------------------------------------------ nodes

    /// Adds a Node (as a kubelet would register it), Ready or not.
    pub fn add_node(&self, name: &str, ready: bool) -> Node {
        self.store().create_node(Store::new_node(name, ready))
    }

    pub fn add_node_with_labels(&self, name: &str, ready: bool, labels: &[(&str, &str)]) -> Node {
        let mut node = Store::new_node(name, ready);
        let l = node.metadata.labels.get_or_insert_with(BTreeMap::new);
        for (k, v) in labels {
            l.insert((*k).into(), (*v).into());
        }
        self.store().create_node(node)
    }

    pub fn set_node_ready(&self, name: &str, ready: bool) -> Option<Node> {
        self.store().set_node_ready(name, ready)
    }

    pub fn node(&self, name: &str) -> Option<Node> {
        self.store().node(name).cloned()
    }

    pub fn node_names(&self) -> Vec<String> {
        self.store().nodes().filter_map(|n| n.metadata.name.clone()).collect()
    }

    /// Sets when the kubelet turns Nodes whose name starts with `prefix` Ready.
    pub fn set_ready_policy(&self, prefix: &str, policy: ReadyPolicy) {
        self.store().set_ready_policy(prefix, policy);
    }

    pub fn set_default_ready_policy(&self, policy: ReadyPolicy) {
        self.store().set_default_ready_policy(policy);
    }

    // ------------------------------------------------------------ pods, apps, PDBs

    pub fn add_pod(&self, pod: &PodSpecBuilder) -> Pod {
        let mut store = self.store();
        let pod = store.build_pod(pod);
        store.create_pod(pod)
    }

    pub fn pod(&self, namespace: &str, name: &str) -> Option<Pod> {
        self.store().pod(namespace, name).cloned()
    }

    pub fn pods(&self) -> Vec<Pod> {
        self.store().pods().cloned().collect()
    }

    /// Pods of the namespace whose labels include all of `labels`.
    pub fn pods_with_labels(&self, namespace: &str, labels: &[(&str, &str)]) -> Vec<Pod> {
        self.store()
            .pods()
            .filter(|p| p.metadata.namespace.as_deref() == Some(namespace))
            .filter(|p| {
                labels.iter().all(|(k, v)| {
                    p.metadata.labels.as_ref().and_then(|l| l.get(*k)).map(String::as_str) == Some(*v)
                })
            })
            .cloned()
            .collect()
    }

    /// Adds a deployment-like app of `replicas` pods labelled `app=<name>`, placed on
    /// schedulable Nodes; evicted or deleted pods come back under a new name and UID.
    pub fn add_app(&self, namespace: &str, name: &str, replicas: usize) -> App {
        let app = App {
            namespace: namespace.into(),
            name: name.into(),
            replicas,
            labels: BTreeMap::from([("app".to_owned(), name.to_owned())]),
        };
        self.store().add_app(&app);
        app
    }

    /// Adds or replaces the PDB `namespace/name` selecting `app=<app>` with an int bound.
    pub fn put_pdb(&self, namespace: &str, name: &str, app: &str, bound: PdbBound) {
        let (min_available, max_unavailable) = match bound {
            PdbBound::MinAvailable(n) => (Some(IntOrString::Int(n)), None),
            PdbBound::MaxUnavailable(n) => (None, Some(IntOrString::Int(n))),
        };
        self.put_pdb_object(PodDisruptionBudget {
            metadata: ObjectMeta {
                namespace: Some(namespace.into()),
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(PodDisruptionBudgetSpec {
                min_available,
                max_unavailable,
                selector: Some(LabelSelector {
                    match_labels: Some(BTreeMap::from([("app".to_owned(), app.to_owned())])),
                    match_expressions: None,
                }),
                unhealthy_pod_eviction_policy: None,
            }),
            status: None,
        });
    }

    pub fn put_pdb_object(&self, pdb: PodDisruptionBudget) {
        self.store().put_pdb(pdb);
    }

    pub fn delete_pdb(&self, namespace: &str, name: &str) -> bool {
        self.store().delete_pdb(namespace, name)
    }

    /// The PDB arithmetic for `namespace/name` right now.
    pub fn budget(&self, namespace: &str, name: &str) -> Option<Budget> {
        let store = self.store();
        let pdb = store
            .pdbs()
            .find(|p| {
                p.metadata.namespace.as_deref() == Some(namespace) && p.metadata.name.as_deref() == Some(name)
            })?
            .clone();
        Some(store.budget(&pdb))
    }

    /// Makes every eviction of this pod answer `code` (e.g. 200 or 201) with a Status whose
    /// `status` is `Failure`: the trap that a client must not take for success.
    pub fn set_eviction_trap(&self, namespace: &str, pod: &str, code: u16) {
        self.store().set_eviction_trap(namespace, pod, code);
    }

    // ------------------------------------------------------------ faults and logs

    /// The next `count` requests whose path starts with `path_prefix` (and, if given, whose
    /// method matches) answer `status` with a Status body, without touching the state.
    pub fn fail_next(&self, method: Option<&str>, path_prefix: &str, count: usize, status: u16) {
        self.store().add_fault(method, path_prefix, count, status);
    }

    /// Every request answers `status` for `duration` from now, as a server that is briefly
    /// unwell does; `Duration::ZERO` ends a window that is still open.
    pub fn fail_for(&self, status: u16, duration: Duration) {
        self.store().set_fail_window(std::time::Instant::now() + duration, status);
    }

    pub fn requests(&self) -> Vec<RequestRecord> {
        self.store().requests().to_vec()
    }

    /// Requests with this method whose path starts with `path_prefix`.
    pub fn requests_matching(&self, method: &str, path_prefix: &str) -> Vec<RequestRecord> {
        self.store()
            .requests()
            .iter()
            .filter(|r| r.method == method && r.path.starts_with(path_prefix))
            .cloned()
            .collect()
    }

    /// Takes the API down (`true`: new connections are refused, open ones are closed) or
    /// brings it back on the same port. The simulated cluster keeps running meanwhile.
    /// Returns once the listener is closed, or open again.
    pub fn set_api_down(&self, down: bool) {
        self.shared.down.send_replace(down);
        self.shared.wait_listening(!down);
    }

    pub fn events(&self) -> Vec<Event> {
        self.store().events().to_vec()
    }

    pub fn evictions(&self) -> Vec<EvictionRecord> {
        self.store().evictions().to_vec()
    }

    /// Waits until `pred` holds on the state, re-checking on every change (no polling).
    /// Callers bound it with `tokio::time::timeout`.
    pub async fn wait_until(&self, mut pred: impl FnMut(&Store) -> bool) {
        let mut version = self.store().version_rx();
        loop {
            {
                let store = self.store();
                if pred(&store) {
                    return;
                }
                version.borrow_and_update();
            }
            if version.changed().await.is_err() {
                return;
            }
        }
    }
}

/// The int bound of a PodDisruptionBudget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PdbBound {
    MinAvailable(i32),
    MaxUnavailable(i32),
}

impl Drop for FakeKube {
    fn drop(&mut self) {
        self.shutdown.send_replace(true);
        if let Some(t) = self.thread.take() {
            // Do not turn a failing test's panic into an abort by panicking again here.
            let _ = t.join();
        }
    }
}

fn serve(
    shared: Arc<Shared>,
    listener: std::net::TcpListener,
    options: FakeKubeOptions,
    ready: std::sync::mpsc::Sender<Result<(), String>>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            let _ = ready.send(Err(format!("tokio runtime: {e}")));
            return;
        }
    };
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                let _ = ready.send(Err(format!("listener: {e}")));
                return;
            }
        };
        if let Some(k) = options.kubelet.clone() {
            let docker = match kubelet::connect_docker().await {
                Ok(d) => d,
                Err(e) => {
                    let _ = ready.send(Err(format!("kubelet cannot reach Docker: {e}")));
                    return;
                }
            };
            tokio::spawn(kubelet::kubelet_loop(shared.clone(), docker, k.run_label, k.poll_interval));
        }
        tokio::spawn(kubelet::controller_loop(shared.clone()));
        let _ = ready.send(Ok(()));
        serve_until_shutdown(shared, listener).await;
    });
    // Dropping the runtime here cancels whatever is left: kubelet, controller, connections.
}

/// Serves HTTP; while the API is taken down, the listener is closed (connections are refused)
/// and open connections are closed, then the same port is bound again.
async fn serve_until_shutdown(shared: Arc<Shared>, listener: tokio::net::TcpListener) {
    let addr = listener.local_addr().expect("the listener has an address");
    let mut listener = Some(listener);
    let mut shutdown = shared.shutdown.clone();
    let mut down = shared.down.subscribe();
    loop {
        let l = match listener.take() {
            Some(l) => l,
            None => match rebind(addr) {
                Ok(l) => {
                    shared.set_listening(true);
                    l
                }
                Err(e) => {
                    eprintln!("fake API server: cannot bind {addr} again: {e}");
                    return;
                }
            },
        };
        let (mut stop_on_down, mut stop_on_shutdown) = (down.clone(), shutdown.clone());
        let app = http::router(shared.clone());
        let server = tokio::spawn(async move {
            let serve = axum::serve(l, app).with_graceful_shutdown(async move {
                tokio::select! {
                    _ = stop_on_down.wait_for(|d| *d) => {}
                    _ = stop_on_shutdown.wait_for(|s| *s) => {}
                }
            });
            if let Err(e) = serve.await {
                eprintln!("fake API server: {e}");
            }
        });
        let stopping = tokio::select! {
            _ = down.wait_for(|d| *d) => false,
            _ = shutdown.wait_for(|s| *s) => true,
        };
        // A client that keeps a connection busy must not hold things up for long.
        let _ = tokio::time::timeout(Duration::from_secs(1), server).await;
        if stopping {
            return;
        }
        shared.set_listening(false);
        tokio::select! {
            _ = down.wait_for(|d| !*d) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

fn rebind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    // Connections closed a moment ago sit in TIME_WAIT on this port.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

/// Writes one kubeconfig with a context per fake cluster (each context, cluster and user named
/// as given) and `current` as its current context: what `kubectl config use-context` switches.
pub fn write_kubeconfig_contexts(
    path: &Path,
    clusters: &[(&str, &FakeKube)],
    current: &str,
) -> std::io::Result<()> {
    use kube::config::Kubeconfig;
    let mut merged = Kubeconfig {
        api_version: Some("v1".to_owned()),
        kind: Some("Config".to_owned()),
        current_context: Some(current.to_owned()),
        ..Kubeconfig::default()
    };
    for (name, fake) in clusters {
        let single = path.with_extension(format!("{name}.single"));
        fake.write_kubeconfig(&single)?;
        let mut kc = Kubeconfig::read_from(&single).map_err(std::io::Error::other)?;
        std::fs::remove_file(&single)?;
        for c in &mut kc.clusters {
            (*name).clone_into(&mut c.name);
        }
        for u in &mut kc.auth_infos {
            (*name).clone_into(&mut u.name);
        }
        for ctx in &mut kc.contexts {
            (*name).clone_into(&mut ctx.name);
            if let Some(c) = ctx.context.as_mut() {
                (*name).clone_into(&mut c.cluster);
                c.user = Some((*name).to_owned());
            }
        }
        merged.clusters.extend(kc.clusters);
        merged.auth_infos.extend(kc.auth_infos);
        merged.contexts.extend(kc.contexts);
    }
    std::fs::write(path, serde_yaml::to_string(&merged).map_err(std::io::Error::other)?)
}
