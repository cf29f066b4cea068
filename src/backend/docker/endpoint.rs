//! Where the docker CLI points: the endpoint of its current context, or of the context or host
//! a pool names, with the TLS material to reach it, resolved as docker/cli resolves them.
//!
//! The current context is, in this order (docker/cli `resolveContextName`): the `default`
//! context when `DOCKER_HOST` is set, else `DOCKER_CONTEXT`, else `currentContext` in
//! `$DOCKER_CONFIG/config.json` (default `~/.docker`), else `default`. The `default` context is
//! `DOCKER_HOST` (or the local socket), with TLS when `DOCKER_TLS_VERIFY` (verify) or
//! `DOCKER_TLS` is set, from `ca.pem`, `cert.pem`, `key.pem` in `DOCKER_CERT_PATH` (default the
//! config directory). Another context is `contexts/meta/<sha256 of its name>/meta.json`, its
//! TLS files in `contexts/tls/<sha256>/docker/`. Reading these is plain file I/O, no daemon.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::DEFAULT_HOST;
use crate::spec::{DockerSpec, docker_host_problem};

/// The name of the docker CLI's implicit context.
pub const DEFAULT_CONTEXT: &str = "default";

/// Why an endpoint cannot be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    /// The context does not exist in the docker CLI's store.
    #[error("docker context {name:?} does not exist (no {})", meta.display())]
    NoContext { name: String, meta: PathBuf },
    /// The context's files cannot be read or make no sense.
    #[error("docker context {name:?}: {why}")]
    BadContext { name: String, why: String },
    /// The docker CLI's config file cannot be read.
    #[error("cannot read the docker CLI config {}: {why}", path.display())]
    BadConfig { path: PathBuf, why: String },
    /// An address poolctl cannot reach (`ssh://`, an unknown scheme).
    #[error("{what}: {why}")]
    Unsupported { what: String, why: String },
}

/// The environment the docker CLI reads, captured once, so that resolving is a function of it
/// (and tests need not change the process's environment).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DockerEnv {
    pub docker_host: Option<String>,
    pub docker_context: Option<String>,
    /// `DOCKER_CONFIG`, else `~/.docker`.
    pub config_dir: PathBuf,
    pub tls_verify: bool,
    pub tls: bool,
    pub cert_path: Option<PathBuf>,
}

impl DockerEnv {
    /// The process's environment. Empty values count as unset, as the docker CLI counts them.
    pub fn from_process() -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let config_dir = var("DOCKER_CONFIG")
            .map_or_else(|| crate::home::home_dir().unwrap_or_default().join(".docker"), PathBuf::from);
        Self {
            docker_host: var("DOCKER_HOST"),
            docker_context: var("DOCKER_CONTEXT"),
            config_dir,
            tls_verify: var("DOCKER_TLS_VERIFY").is_some(),
            tls: var("DOCKER_TLS").is_some(),
            cert_path: var("DOCKER_CERT_PATH").map(PathBuf::from),
        }
    }
}

/// A resolved Docker endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// How messages name it: `context remote (tcp://10.0.0.2:2376)`.
    pub name: String,
    /// The daemon address.
    pub host: String,
    /// TLS client settings, for `tcp://` with TLS.
    pub tls: Option<TlsFiles>,
}

impl Endpoint {
    /// A daemon address as it is (`unix://`, `tcp://` or `http://`), without TLS.
    pub fn at(host: &str) -> Self {
        Self { name: host.to_owned(), host: host.to_owned(), tls: None }
    }
}

/// Where the TLS material of an endpoint is. A file that does not exist is left out, as the
/// docker CLI leaves it out (the system's roots verify the daemon without `ca.pem`; no client
/// certificate is offered without `cert.pem` and `key.pem`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub ca: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

impl TlsFiles {
    fn in_dir(dir: &Path) -> Self {
        let file = |name: &str| Some(dir.join(name)).filter(|p| p.is_file());
        Self { ca: file("ca.pem"), cert: file("cert.pem"), key: file("key.pem") }
    }
}

/// The endpoint a pool's `docker:` section names, or the current one when it names none.
pub fn resolve(spec: Option<&DockerSpec>, env: &DockerEnv) -> Result<Endpoint, EndpointError> {
    match spec {
        Some(DockerSpec { context: Some(name), .. }) => context(name, env),
        Some(DockerSpec { host: Some(host), .. }) => host_endpoint(&format!("host {host}"), host, env),
        // Validation refuses a `docker:` that names neither.
        None | Some(DockerSpec { context: None, host: None }) => current(env),
    }
}

/// The docker CLI's current endpoint.
pub fn current(env: &DockerEnv) -> Result<Endpoint, EndpointError> {
    if env.docker_host.is_some() {
        return context(DEFAULT_CONTEXT, env);
    }
    if let Some(name) = &env.docker_context {
        return context(name, env);
    }
    let name = current_context(&env.config_dir)?;
    context(name.as_deref().unwrap_or(DEFAULT_CONTEXT), env)
}

/// `currentContext` of the config file, if it names one; a missing file names none.
fn current_context(config_dir: &Path) -> Result<Option<String>, EndpointError> {
    #[derive(Deserialize)]
    struct CliConfigFile {
        #[serde(rename = "currentContext", default)]
        current_context: Option<String>,
    }
    let path = config_dir.join("config.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(EndpointError::BadConfig { path, why: e.to_string() }),
    };
    let config: CliConfigFile =
        serde_json::from_str(&text).map_err(|e| EndpointError::BadConfig { path, why: e.to_string() })?;
    Ok(config.current_context.filter(|c| !c.is_empty()))
}

/// The endpoint of a context: `default`, or one of the store.
fn context(name: &str, env: &DockerEnv) -> Result<Endpoint, EndpointError> {
    #[derive(Deserialize)]
    struct Meta {
        #[serde(rename = "Endpoints", default)]
        endpoints: std::collections::HashMap<String, EndpointMeta>,
    }
    #[derive(Deserialize)]
    struct EndpointMeta {
        #[serde(rename = "Host", default)]
        host: String,
        #[serde(rename = "SkipTLSVerify", default)]
        skip_tls_verify: bool,
    }
    if name == DEFAULT_CONTEXT {
        let host = env.docker_host.clone().unwrap_or_else(|| DEFAULT_HOST.to_owned());
        return host_endpoint(&format!("context {DEFAULT_CONTEXT}"), &host, env);
    }
    let bad = |why: String| EndpointError::BadContext { name: name.to_owned(), why };
    let digest = format!("{:x}", Sha256::digest(name.as_bytes()));
    let contexts = env.config_dir.join("contexts");
    let meta_path = contexts.join("meta").join(&digest).join("meta.json");
    let text = match std::fs::read_to_string(&meta_path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(EndpointError::NoContext { name: name.to_owned(), meta: meta_path });
        }
        Err(e) => return Err(bad(format!("cannot read {}: {e}", meta_path.display()))),
    };
    let meta: Meta = serde_json::from_str(&text).map_err(|e| bad(format!("{}: {e}", meta_path.display())))?;
    let docker = meta.endpoints.get("docker").ok_or_else(|| bad("it has no docker endpoint".to_owned()))?;
    if docker.host.is_empty() {
        return Err(bad("its docker endpoint names no host".to_owned()));
    }
    let what = format!("context {name} ({})", docker.host);
    if let Some(why) = docker_host_problem(&docker.host) {
        return Err(EndpointError::Unsupported { what, why });
    }
    // As the docker CLI: TLS when the context has TLS material (or skips verification).
    let tls_dir = contexts.join("tls").join(&digest).join("docker");
    let tls = if !is_tcp(&docker.host) {
        None
    } else if docker.skip_tls_verify {
        return Err(unverified(&what));
    } else {
        tls_dir.is_dir().then(|| TlsFiles::in_dir(&tls_dir))
    };
    Ok(Endpoint { name: what, host: docker.host.clone(), tls })
}

/// An address given by `DOCKER_HOST` or a pool's `host:`, with TLS as the environment says.
fn host_endpoint(what: &str, host: &str, env: &DockerEnv) -> Result<Endpoint, EndpointError> {
    let name = if what.ends_with(host) { what.to_owned() } else { format!("{what} ({host})") };
    if let Some(why) = docker_host_problem(host) {
        return Err(EndpointError::Unsupported { what: name, why });
    }
    let tls = if is_tcp(host) && (env.tls_verify || env.tls) {
        if !env.tls_verify {
            return Err(unverified(&name));
        }
        let dir = env.cert_path.clone().unwrap_or_else(|| env.config_dir.clone());
        Some(TlsFiles::in_dir(&dir))
    } else {
        None
    };
    Ok(Endpoint { name, host: host.to_owned(), tls })
}

fn is_tcp(host: &str) -> bool {
    host.starts_with("tcp://") || host.starts_with("https://")
}

/// TLS without verifying the daemon: the docker CLI allows it; poolctl does not send its
/// containers' settings to a daemon it has not authenticated.
fn unverified(what: &str) -> EndpointError {
    EndpointError::Unsupported {
        what: what.to_owned(),
        why: "TLS without verification (DOCKER_TLS without DOCKER_TLS_VERIFY, or a context with \
              SkipTLSVerify) is refused: give the daemon's CA (ca.pem) and set DOCKER_TLS_VERIFY=1"
            .to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A docker CLI config directory with contexts, as `docker context create` writes them.
    struct Store(tempfile::TempDir);

    impl Store {
        fn new() -> Self {
            Self(tempfile::tempdir().unwrap())
        }

        fn env(&self) -> DockerEnv {
            DockerEnv { config_dir: self.0.path().to_owned(), ..DockerEnv::default() }
        }

        fn context(&self, name: &str, host: &str, tls: &[&str]) -> &Self {
            let digest = format!("{:x}", Sha256::digest(name.as_bytes()));
            let meta = self.0.path().join("contexts/meta").join(&digest);
            std::fs::create_dir_all(&meta).unwrap();
            let json = serde_json::json!({
                "Name": name, "Metadata": {},
                "Endpoints": {"docker": {"Host": host, "SkipTLSVerify": false}}
            });
            std::fs::write(meta.join("meta.json"), json.to_string()).unwrap();
            if !tls.is_empty() {
                let dir = self.0.path().join("contexts/tls").join(&digest).join("docker");
                std::fs::create_dir_all(&dir).unwrap();
                for file in tls {
                    std::fs::write(dir.join(file), "pem").unwrap();
                }
            }
            self
        }

        fn current(&self, name: &str) -> &Self {
            let json = serde_json::json!({"auths": {}, "currentContext": name});
            std::fs::write(self.0.path().join("config.json"), json.to_string()).unwrap();
            self
        }
    }

    fn host_of(r: Result<Endpoint, EndpointError>) -> String {
        r.unwrap().host
    }

    #[test]
    fn the_current_context_follows_the_docker_clis_order() {
        let store = Store::new();
        store.context("cfg", "unix:///cfg.sock", &[]).context("envctx", "unix:///env.sock", &[]);
        let mut env = store.env();
        assert_eq!(host_of(current(&env)), DEFAULT_HOST, "no config file: the default context");
        store.current("cfg");
        assert_eq!(host_of(current(&env)), "unix:///cfg.sock", "the config's currentContext");
        env.docker_context = Some("envctx".into());
        assert_eq!(host_of(current(&env)), "unix:///env.sock", "DOCKER_CONTEXT beats the config");
        env.docker_host = Some("unix:///host.sock".into());
        assert_eq!(host_of(current(&env)), "unix:///host.sock", "DOCKER_HOST beats both");
        env.docker_host = None;
        env.docker_context = Some(DEFAULT_CONTEXT.into());
        assert_eq!(host_of(current(&env)), DEFAULT_HOST, "`default` turns contexts off");
    }

    #[test]
    fn a_context_brings_its_tls_material_and_a_missing_one_is_named() {
        let store = Store::new();
        store.context("remote", "tcp://10.0.0.2:2376", &["ca.pem", "cert.pem", "key.pem"]);
        store.context("ca-only", "tcp://10.0.0.3:2376", &["ca.pem"]);
        let env = store.env();
        let remote = resolve(Some(&DockerSpec { context: Some("remote".into()), host: None }), &env).unwrap();
        assert_eq!(remote.name, "context remote (tcp://10.0.0.2:2376)");
        let tls = remote.tls.expect("TLS material");
        assert!(tls.ca.unwrap().ends_with("docker/ca.pem"));
        assert!(tls.cert.is_some() && tls.key.is_some());
        let ca_only = context("ca-only", &env).unwrap().tls.unwrap();
        assert!(ca_only.ca.is_some() && ca_only.cert.is_none() && ca_only.key.is_none());

        let err = context("nowhere", &env).unwrap_err().to_string();
        assert!(err.starts_with("docker context \"nowhere\" does not exist (no "), "{err}");
    }

    #[test]
    fn docker_host_over_tcp_uses_tls_as_the_environment_says() {
        let store = Store::new();
        let certs = tempfile::tempdir().unwrap();
        std::fs::write(certs.path().join("ca.pem"), "pem").unwrap();
        let env = DockerEnv {
            docker_host: Some("tcp://127.0.0.1:2376".into()),
            tls_verify: true,
            cert_path: Some(certs.path().to_owned()),
            ..store.env()
        };
        let endpoint = current(&env).unwrap();
        assert_eq!(endpoint.name, "context default (tcp://127.0.0.1:2376)");
        assert_eq!(endpoint.tls.unwrap().ca.unwrap(), certs.path().join("ca.pem"));
        let plain = DockerEnv { tls_verify: false, ..env.clone() };
        assert_eq!(current(&plain).unwrap().tls, None, "tcp:// without DOCKER_TLS_VERIFY is plain HTTP");
        let unverified = DockerEnv { tls_verify: false, tls: true, ..env };
        let err = current(&unverified).unwrap_err().to_string();
        assert!(err.contains("TLS without verification"), "{err}");
    }

    #[test]
    fn ssh_endpoints_are_refused_with_a_way_out() {
        let store = Store::new();
        store.context("over-ssh", "ssh://me@far", &[]);
        let err = context("over-ssh", &store.env()).unwrap_err().to_string();
        assert!(err.starts_with("context over-ssh (ssh://me@far): "), "{err}");
        assert!(err.contains("ssh -L"), "{err}");
    }
}
