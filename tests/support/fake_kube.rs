//! A fake Kubernetes API server over real HTTPS, for tests that drive the real kube client.
//!
//! `FakeKube::start` serves `/version` (`v1.34.0` unless a test sets another), Nodes, Pods, the
//! pods/eviction subresource, PodDisruptionBudgets, `DaemonSet` objects (get and list) and Leases
//! on 127.0.0.1 with a random port, on a runtime of its own in a thread of its own, so it keeps
//! answering while a test blocks on a child `poolctl` process. Like a kind cluster, it speaks TLS only, with a certificate for 127.0.0.1 from a CA
//! of its own, and requires a client certificate of that CA: clients reach it through a
//! kubeconfig carrying `certificate-authority-data`, `client-certificate-data` and
//! `client-key-data`, so kube's real rustls path runs in every test. Tests steer it through
//! Rust methods (add nodes, pods, apps, PDBs, inject faults: failing answers, silence, hidden
//! Nodes, broken certificates) and read back the request log and the event log to check what
//! happened in which order; each logged request also gives its RBAC attributes (verb, group,
//! resource), as kube-apiserver's authorizer sees them. It can also take a service account's
//! bearer token instead of a client certificate. A simulated kubelet registers Nodes for the
//! test's pool containers in Docker; a simulated ReplicaSet controller re-creates evicted pods on
//! schedulable Nodes, so PDB budgets refill.
//!
//! Everything in the fixture is crate-internal to the test binary, and each test uses a
//! different part of it, hence the lint allowances.
#![allow(dead_code, unreachable_pub)]

mod authz;
mod events;
mod http;
mod kubelet;
mod lease;
mod select;
mod store;
mod switches;
mod tls;

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

pub use authz::Attributes;
pub use lease::LeaseWrite;
pub use store::{
    App, Budget, Event, EventKind, EvictionRecord, PodSpecBuilder, ReadyPolicy, RequestRecord, Store,
};

pub use switches::Silence;
pub use tls::{Access, ClientCert, ServerCert, Trust};

use http::Shared;
use store::SimOptions;
use switches::Switches;
use tls::Pki;

/// How the simulated kubelet finds its containers and when it turns their Nodes Ready.
#[derive(Debug, Clone)]
pub struct KubeletOptions {
    /// `key=value` label that only this test's containers carry, so parallel tests do not see
    /// each other's containers.
    pub run_label: String,
    pub ready_policy: ReadyPolicy,
    pub poll_interval: Duration,
    /// Also sync at once when Docker reports one of the test's containers started or died, and
    /// when a Node is due to turn Ready, as a real kubelet, which starts with its node, does.
    /// Off by default: a polling kubelet registers a Node up to `poll_interval` late.
    pub prompt: bool,
    /// More Docker daemons (`unix://` addresses) whose containers the kubelet follows too: the
    /// second daemon a pool moves to.
    pub extra_hosts: Vec<String>,
}

impl KubeletOptions {
    pub fn new(run_label: impl Into<String>) -> Self {
        Self {
            run_label: run_label.into(),
            ready_policy: ReadyPolicy::After(Duration::from_millis(300)),
            poll_interval: Duration::from_millis(150),
            prompt: false,
            extra_hosts: Vec::new(),
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
    /// A service account's token: the server also takes clients without a certificate, as an
    /// API server does, and answers 401 to every request that does not carry
    /// `Authorization: Bearer <token>`.
    pub bearer_token: Option<String>,
}

impl Default for FakeKubeOptions {
    fn default() -> Self {
        Self {
            kubelet: None,
            pod_termination_delay: Duration::ZERO,
            reschedule_delay: Duration::from_millis(200),
            bearer_token: None,
        }
    }
}

/// A running fake API server; dropping it stops the server and all background tasks.
pub struct FakeKube {
    addr: SocketAddr,
    pki: Arc<Pki>,
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
        let pki = Arc::new(Pki::generate());
        let tokens = options.bearer_token.is_some();
        let shared = Arc::new(Shared {
            store: Mutex::new(store),
            switches: Switches::default(),
            tls: Mutex::new(pki.server_config(ServerCert::Valid, tokens)),
            bearer_token: options.bearer_token.clone(),
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
        Self { addr, pki, shared, shutdown, thread: Some(thread) }
    }

    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The cluster CA's certificate, PEM: what a Pod finds in its service account's `ca.crt`.
    pub fn ca_pem(&self) -> &str {
        &self.pki.ca_pem
    }

    /// A kube config for this server, trusting its CA and presenting its client certificate.
    /// Note `default_retry`: kube 5 retries 429, 503 and 504 answers by itself (up to 15
    /// times, with backoff up to 1000 s) unless it is false; the config returned here turns it
    /// off so tests see every answer.
    pub fn config(&self) -> kube::Config {
        self.config_with(Access::default())
    }

    /// A kube config for this server with the given trust and client certificate, as
    /// `Config::from_kubeconfig` would make of a kubeconfig carrying them.
    pub fn config_with(&self, access: Access) -> kube::Config {
        let mut config = kube::Config::new(self.url().parse().expect("the server URL is a valid URI"));
        config.default_namespace = "default".into();
        config.default_retry = false;
        let data = self.pki.kubeconfig_data(access);
        let ca =
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, &data.certificate_authority)
                .expect("base64 of the CA");
        config.root_cert = Some(
            rustls_pki_types::pem::PemObject::pem_slice_iter(&ca)
                .map(|c: Result<rustls_pki_types::CertificateDer<'static>, _>| {
                    c.expect("a PEM certificate").to_vec()
                })
                .collect(),
        );
        // `AuthInfo` keeps the key in a secrecy type; going through its serde form avoids a
        // dependency on that crate.
        config.auth_info = serde_json::from_value(serde_json::json!({
            "client-certificate-data": data.client_certificate,
            "client-key-data": data.client_key,
        }))
        .expect("an AuthInfo");
        config
    }

    /// A client for this server, without kube's built-in retries (see `config`).
    pub fn client(&self) -> kube::Client {
        kube::Client::try_from(self.config()).expect("build a kube client")
    }

    /// Writes a kubeconfig (context `fakekube`) as kind writes one: the server's CA, and a
    /// client certificate and key, inline in base64. A poolctl child process is pointed at this
    /// server with KUBECONFIG.
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        self.write_kubeconfig_with(path, Access::default())
    }

    /// Writes a kubeconfig with the given trust and client certificate.
    pub fn write_kubeconfig_with(&self, path: &Path, access: Access) -> std::io::Result<()> {
        let data = self.pki.kubeconfig_data(access);
        let yaml = format!(
            "apiVersion: v1
kind: Config
clusters:
- name: fakekube
  cluster:
    certificate-authority-data: {ca}
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
  user:
    client-certificate-data: {cert}
    client-key-data: {key}
",
            url = self.url(),
            ca = data.certificate_authority,
            cert = data.client_certificate,
            key = data.client_key,
        );
        std::fs::write(path, yaml)
    }

    /// Direct access to the state, for reads and changes not covered by the helpers below.
    pub fn store(&self) -> MutexGuard<'_, Store> {
        self.shared.store.lock().expect("store lock")
    }

    /// Have `/version` answer `git_version` (`v1.30.2`), its `major` and `minor` to match.
    pub fn set_version(&self, git_version: &str) {
        git_version.clone_into(&mut self.store().git_version);
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

    /// Marks the Node's Ready condition Unknown, as the node lifecycle controller does once its
    /// kubelet has gone silent.
    pub fn set_node_unreachable(&self, name: &str) -> Option<Node> {
        self.store().set_node_unreachable(name)
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

    /// A pod's containers end by themselves with `phase` (`Succeeded` or `Failed`). `false` if
    /// there is no such pod.
    pub fn complete_pod(&self, namespace: &str, name: &str, phase: &str) -> bool {
        self.store().complete_pod(namespace, name, phase).is_some()
    }

    /// Ends a terminating pod now, as its kubelet would once its containers exit (see
    /// [`FakeKubeOptions::pod_termination_delay`]). `false` if it is not terminating.
    pub fn finish_termination(&self, namespace: &str, name: &str) -> bool {
        self.store().finish_termination(namespace, name).is_some()
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

    /// Adds the DaemonSet `namespace/name` (pods name it with `PodSpecBuilder::owned_by`).
    pub fn add_daemon_set(&self, namespace: &str, name: &str) {
        self.store().add_daemon_set(namespace, name);
    }

    /// Deletes the DaemonSet and leaves its pods behind, as orphans that still name it.
    pub fn delete_daemon_set(&self, namespace: &str, name: &str) -> bool {
        self.store().delete_daemon_set(namespace, name)
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

    /// Every request, whatever its path, answers `status` for the next `window`, as a server
    /// that is briefly unwell does; `Duration::ZERO` ends a window that is still open.
    pub fn fail_for(&self, status: u16, window: Duration) {
        self.shared.switches.fail_for(status, window);
    }

    /// Makes the server accept connections and then say nothing (see [`Silence`]), or talk
    /// again. Connections already held stay silent until the server is taken down or dropped.
    pub fn set_silence(&self, silence: Silence) {
        self.shared.switches.set_silence(silence);
    }

    /// While `true`, every Node request is answered as if no Node existed: lists are empty,
    /// gets, patches and deletes are 404, watches send nothing (and end once the Nodes are
    /// shown again). The kubelet and the store go on as before.
    pub fn hide_nodes(&self, hidden: bool) {
        self.shared.switches.hide_nodes(hidden);
    }

    /// While `true`, every watch request is refused with 403 Forbidden, as for credentials
    /// allowed to list but not to watch; lists and gets are served as before.
    pub fn refuse_watches(&self, refused: bool) {
        self.shared.switches.refuse_watches(refused);
    }

    /// Presents another certificate to new connections.
    pub fn set_server_cert(&self, cert: ServerCert) {
        let tokens = self.shared.bearer_token.is_some();
        *self.shared.tls.lock().expect("tls lock") = self.pki.server_config(cert, tokens);
    }

    /// How many TCP connections the server has accepted.
    pub fn connections(&self) -> usize {
        self.shared.switches.connections()
    }

    /// The errors of the TLS handshakes that failed, in order (the server's side of it: a
    /// client refusing the server's certificate sends an alert, named here).
    pub fn handshake_failures(&self) -> Vec<String> {
        self.shared.switches.handshake_failures()
    }

    /// The failed handshakes once there are `n`: a client can see its handshake fail before the
    /// server has finished recording its side. Callers bound it with `tokio::time::timeout`.
    pub async fn handshake_failures_once(&self, n: usize) -> Vec<String> {
        self.shared.switches.at_least_handshake_failures(n).await
    }

    pub fn events(&self) -> Vec<Event> {
        self.store().events().to_vec()
    }

    /// Every version of Node `name` the server stored, oldest first (its registration first),
    /// as far back as the server's history goes.
    pub fn node_versions(&self, name: &str) -> Vec<Node> {
        let changes = self.store().history().to_vec();
        changes
            .iter()
            .filter(|c| c.resource == store::Resource::Nodes && c.kind != store::ChangeKind::Deleted)
            .filter(|c| c.object.pointer("/metadata/name").and_then(serde_json::Value::as_str) == Some(name))
            .filter_map(|c| serde_json::from_value(c.object.clone()).ok())
            .collect()
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
            tokio::spawn(kubelet::kubelet_loop(shared.clone(), docker, k));
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
        // Every connection is a task of this set: dropping it at the end of this round closes
        // them all, so taking the API down closes open connections too.
        let mut connections = tokio::task::JoinSet::new();
        let stopping = loop {
            tokio::select! {
                accepted = l.accept() => match accepted {
                    Ok((stream, _)) => {
                        connections.spawn(serve_connection(shared.clone(), stream));
                    }
                    Err(e) => eprintln!("fake API server: accept: {e}"),
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                _ = down.wait_for(|d| *d) => break false,
                _ = shutdown.wait_for(|s| *s) => break true,
            }
        };
        drop(l);
        drop(connections);
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

/// One connection: the TLS handshake (unless the server is silent), then HTTP/1.1 for as long
/// as the client keeps it open.
async fn serve_connection(shared: Arc<Shared>, stream: tokio::net::TcpStream) {
    shared.switches.connection_accepted();
    if shared.switches.silence() == Silence::AfterAccept {
        // Hold the socket open, read nothing: the handshake never starts. Ended when the
        // connection set is dropped.
        let _held = stream;
        std::future::pending::<()>().await;
        return;
    }
    let config = shared.tls.lock().expect("tls lock").clone();
    let tls = match tokio_rustls::TlsAcceptor::from(config).accept(stream).await {
        Ok(tls) => tls,
        Err(e) => {
            shared.switches.handshake_failed(e.to_string());
            return;
        }
    };
    let service = hyper_util::service::TowerToHyperService::new(http::router(shared));
    let conn = hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(tls), service);
    // A client that goes away mid-request is its own business.
    let _ = conn.await;
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
