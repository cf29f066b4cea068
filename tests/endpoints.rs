//! Docker endpoints as the docker CLI resolves them, end to end: a context that points at a
//! second socket (a proxy to the local daemon, which counts what it forwards) is followed, one
//! that points at nothing fails naming it, `DOCKER_HOST` over tcp with TLS reaches the daemon
//! through a TLS front with client certificates, and pools of one source on two endpoints are
//! planned and applied in one run, with one list call per endpoint.
//!
//! The contexts are made by the docker CLI itself (`docker context create`) in a private
//! `DOCKER_CONFIG`, so the files poolctl reads are the real thing. The proxies run on the test's
//! runtime while the test waits on the binary: the runtime has threads to spare for them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
};
use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener, UnixStream};
use tokio::task::JoinHandle;

use crate::support::cli::Run;
use crate::support::scenario::Scenario;

/// The local daemon's socket, which the proxies forward to.
fn daemon_socket() -> PathBuf {
    let host = std::env::var("DOCKER_HOST").unwrap_or_default();
    PathBuf::from(host.strip_prefix("unix://").unwrap_or("/var/run/docker.sock"))
}

/// A proxy in front of the local daemon: another address for the same daemon, keeping every
/// byte its clients sent so that a test can count their requests. Stops when dropped.
struct Proxy {
    /// The address to give the docker CLI or poolctl.
    host: String,
    sent: Arc<Mutex<Vec<u8>>>,
    task: JoinHandle<()>,
}

impl Proxy {
    /// A unix socket at `path`.
    fn unix(path: &Path) -> Self {
        let listener = UnixListener::bind(path).expect("bind the proxy socket");
        let sent = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&sent);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(forward(client, Arc::clone(&log)));
            }
        });
        Self { host: format!("unix://{}", path.display()), sent, task }
    }

    /// A TLS front on 127.0.0.1 that requires a client certificate of `pki`'s CA.
    async fn tls(pki: &Pki) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the TLS front");
        let port = listener.local_addr().expect("its address").port();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(pki.server_config()));
        let sent = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&sent);
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, log) = (acceptor.clone(), Arc::clone(&log));
                tokio::spawn(async move {
                    // A refused handshake (no client certificate) just ends the connection.
                    if let Ok(tls) = acceptor.accept(tcp).await {
                        forward(tls, log).await;
                    }
                });
            }
        });
        Self { host: format!("tcp://127.0.0.1:{port}"), sent, task }
    }

    /// How many requests sent through the proxy contain `needle` (`/containers/json` is a list).
    fn requests(&self, needle: &str) -> usize {
        let sent = self.sent.lock().unwrap();
        sent.windows(needle.len()).filter(|w| *w == needle.as_bytes()).count()
    }

    fn lists(&self) -> usize {
        self.requests("/containers/json")
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copy one client connection to the daemon and back, keeping what the client sent.
async fn forward(client: impl AsyncRead + AsyncWrite + Send + Unpin, sent: Arc<Mutex<Vec<u8>>>) {
    let Ok(daemon) = UnixStream::connect(daemon_socket()).await else { return };
    let (mut from_client, mut to_client) = tokio::io::split(client);
    let (mut from_daemon, mut to_daemon) = daemon.into_split();
    let up = async {
        let mut buf = vec![0; 16 * 1024];
        while let Ok(n) = from_client.read(&mut buf).await {
            if n == 0 || to_daemon.write_all(&buf[..n]).await.is_err() {
                break;
            }
            sent.lock().unwrap().extend_from_slice(&buf[..n]);
        }
        let _ = to_daemon.shutdown().await;
    };
    let down = async {
        let _ = tokio::io::copy(&mut from_daemon, &mut to_client).await;
        let _ = to_client.shutdown().await;
    };
    tokio::join!(up, down);
}

/// A private docker CLI configuration directory, and the CLI run against it.
struct DockerConfig {
    dir: PathBuf,
}

impl DockerConfig {
    fn new(s: &Scenario) -> Self {
        let dir = s.path("docker-config");
        std::fs::create_dir_all(&dir).expect("the config dir");
        Self { dir }
    }

    /// `docker context create NAME --docker DOCKER` with this configuration.
    fn create_context(&self, name: &str, docker: &str) {
        let out = Command::new("docker")
            .env("DOCKER_CONFIG", &self.dir)
            .args(["context", "create", name, "--docker", docker])
            .output()
            .expect("run the docker CLI");
        assert!(out.status.success(), "docker context create: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// `docker context use NAME`: the config's `currentContext`.
    fn use_context(&self, name: &str) {
        let out = Command::new("docker")
            .env("DOCKER_CONFIG", &self.dir)
            .args(["context", "use", name])
            .output()
            .expect("run the docker CLI");
        assert!(out.status.success(), "docker context use: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// `poolctl <command> --source <source> args...` with this configuration and none of the
    /// environment's Docker settings.
    fn run(&self, s: &Scenario, command: &str, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut cmd = s.command(command, args);
        cmd.env("DOCKER_CONFIG", &self.dir);
        for var in ["DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_TLS_VERIFY", "DOCKER_TLS", "DOCKER_CERT_PATH"] {
            cmd.env_remove(var);
        }
        cmd.envs(env.iter().copied());
        Run::of(&mut cmd)
    }
}

/// The scenario's pool document, placed on a Docker endpoint (`context: NAME` or `host: URL`).
fn placed(pool: &str, docker: &str) -> String {
    format!("{pool}  docker:\n    {docker}\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_current_context_is_followed_to_its_socket_and_one_pointing_at_nothing_fails_naming_it() {
    let Some(s) = Scenario::with_docker().await else { return };
    let proxy = Proxy::unix(&s.path("proxied.sock"));
    let config = DockerConfig::new(&s);
    config.create_context("proxied", &format!("host={}", proxy.host));
    config.use_context("proxied");
    s.write_pool(&s.pool().replicas(2));

    let applied = config.run(&s, "apply", &["--yes"], &[]).expect_code(0);
    assert!(applied.stdout.contains("Apply complete"), "{}", applied.stdout);
    assert_eq!(s.running().await.len(), 2, "created on the daemon behind the proxy");
    let created = proxy.requests(&format!("/containers/create?name={}-", s.pool_name()));
    assert_eq!(created, 2, "the creations went through the context's socket");
    assert!(!applied.stdout.contains("Docker:"), "a pool on the current endpoint has no Docker line");

    // DOCKER_CONTEXT wins over the config's currentContext; this one points at no socket.
    let nowhere = s.path("nowhere.sock");
    config.create_context("nowhere", &format!("host=unix://{}", nowhere.display()));
    let lists = proxy.lists();
    let failed = config.run(&s, "plan", &[], &[("DOCKER_CONTEXT", "nowhere")]).expect_code(1);
    let want = format!("cannot reach Docker at context nowhere (unix://{})", nowhere.display());
    assert!(failed.stderr.contains(&want), "{}", failed.stderr);
    assert!(failed.stderr.contains("no socket at"), "{}", failed.stderr);
    assert_eq!(proxy.lists(), lists, "no fallback to another endpoint");

    // A pool that names that context fails naming the pool and the context.
    s.write("pool.yaml", &placed(&s.pool().replicas(2).to_string(), "context: nowhere"));
    let failed = config.run(&s, "plan", &[], &[]).expect_code(1);
    assert!(
        failed.stderr.contains(&format!("pool {}: the Docker endpoint does not answer", s.pool_name())),
        "{}",
        failed.stderr
    );
    assert!(failed.stderr.contains(&want), "{}", failed.stderr);

    // A context that does not exist is named as such.
    s.write("pool.yaml", &placed(&s.pool().to_string(), "context: never-made"));
    let failed = config.run(&s, "plan", &[], &[]).expect_code(1);
    assert!(failed.stderr.contains("docker context \"never-made\" does not exist"), "{}", failed.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_host_over_tcp_with_tls_reaches_the_daemon_through_a_tls_front() {
    let Some(s) = Scenario::with_docker().await else { return };
    let pki = Pki::generate();
    let certs = s.path("certs");
    pki.write_client_files(&certs);
    let front = Proxy::tls(&pki).await;
    let config = DockerConfig::new(&s);
    s.write_pool(&s.pool());
    let env = [
        ("DOCKER_HOST", front.host.as_str()),
        ("DOCKER_TLS_VERIFY", "1"),
        ("DOCKER_CERT_PATH", certs.to_str().unwrap()),
    ];

    let applied = config.run(&s, "apply", &["--yes"], &env).expect_code(0);
    assert!(applied.stdout.contains("Apply complete"), "{}", applied.stdout);
    assert_eq!(s.running().await.len(), 1);
    let (lists, creates) =
        (front.lists(), front.requests(&format!("/containers/create?name={}-", s.pool_name())));
    assert!(lists >= 1 && creates == 1, "through the TLS front: {lists} lists, {creates} creations");

    // Without the client certificate the front refuses the handshake, and the error says where.
    std::fs::remove_file(certs.join("key.pem")).unwrap();
    let failed = config.run(&s, "plan", &[], &env).expect_code(1);
    assert!(
        failed.stderr.contains(&format!("cannot reach Docker at context default ({})", front.host)),
        "{}",
        failed.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_of_one_source_on_two_endpoints_are_planned_and_applied_in_one_run() {
    let Some(s) = Scenario::with_docker().await else { return };
    // Two proxies to one daemon: two endpoints, each of which shows every container.
    let (one, two) = (Proxy::unix(&s.path("one.sock")), Proxy::unix(&s.path("two.sock")));
    let config = DockerConfig::new(&s);
    config.create_context("one", &format!("host={}", one.host));
    config.create_context("two", &format!("host={}", two.host));
    let (a, b) = (s.pool_name().to_owned(), format!("{}b", s.pool_name()));
    let pool_a = s.pool().replicas(2).to_string();
    let pool_b = pool_a.replace(&format!("name: {a}\n"), &format!("name: {b}\n"));
    s.write("a.yaml", &placed(&pool_a, "context: one"));
    s.write("b.yaml", &placed(&pool_b, &format!("host: {}", two.host)));

    let plan = config.run(&s, "plan", &[], &[]).expect_code(0);
    assert!(plan.stdout.contains(&format!("Pool {a} (new): 2 replicas")), "{}", plan.stdout);
    assert!(plan.stdout.contains("  Docker: context one\n"), "{}", plan.stdout);
    assert!(plan.stdout.contains(&format!("  Docker: host {}\n", two.host)), "{}", plan.stdout);
    assert_eq!((one.lists(), two.lists()), (1, 1), "one list call per endpoint");

    let applied = config.run(&s, "apply", &["--yes"], &[]).expect_code(0);
    assert!(applied.stdout.contains("Apply complete"), "{}", applied.stdout);
    let created = |proxy: &Proxy, pool: &str| proxy.requests(&format!("/containers/create?name={pool}-"));
    assert_eq!((created(&one, &a), created(&two, &a)), (2, 0), "pool a is created through context one");
    // `a`'s name is a prefix of `b`'s: count b's creations by its own name only.
    assert_eq!((created(&two, &b), created(&one, &b)), (2, 0), "pool b through its host");
    let running = s.running().await;
    assert_eq!(running.len(), 2, "pool a: {running:?}");

    // Both endpoints show all four containers; each is counted once, for its own pool.
    let (before_one, before_two) = (one.lists(), two.lists());
    let again = config.run(&s, "plan", &["--detailed-exitcode"], &[]).expect_code(0);
    assert!(again.stdout.contains("No changes."), "{}", again.stdout);
    assert_eq!((one.lists() - before_one, two.lists() - before_two), (1, 1));
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, made with rcgen.
struct Pki {
    ca_pem: String,
    ca_der: CertificateDer<'static>,
    server: (Vec<u8>, CertificateDer<'static>),
    client: (String, String),
}

impl Pki {
    fn generate() -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.distinguished_name.push(DnType::CommonName, "poolctl test docker CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().expect("a key")).expect("a CA");
        let leaf = |names: Vec<String>, usage| {
            let mut params = CertificateParams::new(names).expect("leaf params");
            params.extended_key_usages = vec![usage];
            let key = KeyPair::generate().expect("a key");
            let cert = params.signed_by(&key, &ca).expect("a signed leaf");
            (cert, key)
        };
        let (server, server_key) =
            leaf(vec!["127.0.0.1".to_owned(), "localhost".to_owned()], ExtendedKeyUsagePurpose::ServerAuth);
        let (client, client_key) = leaf(Vec::new(), ExtendedKeyUsagePurpose::ClientAuth);
        Self {
            ca_pem: ca.pem(),
            ca_der: ca.der().clone(),
            server: (server_key.serialize_der(), server.der().clone()),
            client: (client.pem(), client_key.serialize_pem()),
        }
    }

    /// `ca.pem`, `cert.pem` and `key.pem`, as `DOCKER_CERT_PATH` holds them.
    fn write_client_files(&self, dir: &Path) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("ca.pem"), &self.ca_pem).unwrap();
        std::fs::write(dir.join("cert.pem"), &self.client.0).unwrap();
        std::fs::write(dir.join("key.pem"), &self.client.1).unwrap();
    }

    /// The daemon's TLS settings: its certificate, and client certificates of the CA required,
    /// as `dockerd --tlsverify` has them.
    fn server_config(&self) -> ServerConfig {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca_der.clone()).expect("the CA");
        let verifier = WebPkiClientVerifier::builder(Arc::new(roots)).build().expect("a client verifier");
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.server.0.clone()));
        ServerConfig::builder()
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![self.server.1.clone()], key)
            .expect("the server certificate")
    }
}
