//! `spec.join`: how a new instance gets the credential it joins its cluster with, without the
//! credential ever being in the pool file, a label, `docker inspect`, the plan or the logs.
//!
//! - kubeadm (kind): for each new instance, a bootstrap token is made on the control plane
//!   (`kubeadm token create --print-join-command`), and `kubeadm join` runs in the new
//!   container with a `JoinConfiguration` file that pins the CA hash and names the Node after
//!   the container, as kind joins its workers. The file is written through Docker's archive API
//!   (so the token is in no command line), removed after the join, and the token deleted.
//! - k3s (k3d): the server's node token is read out of its container, and written into the new
//!   agent's container after it is created and before it starts; the agent gets its path as
//!   `K3S_TOKEN_FILE`, which k3s reads as it would `K3S_TOKEN`. Docker has no other way to give
//!   a process a value at start that `docker inspect` does not show.

use std::fmt::Write as _;
use std::time::Duration;

use super::redact;
use crate::backend::{BackendError, Containers, NewFile};
use crate::spec::{JOIN_DIR, K3sJoin, KubeadmJoin, Secret};

/// Where k3s keeps the token that agents join with, in the server's container.
pub const K3S_NODE_TOKEN: &str = "/var/lib/rancher/k3s/server/node-token";

/// The agent's copy of it.
pub fn k3s_token_file() -> String {
    format!("{JOIN_DIR}/k3s-token")
}

/// The kubeadm join configuration, while the join runs.
pub fn kubeadm_config_file() -> String {
    format!("{JOIN_DIR}/kubeadm-join.yaml")
}

/// How long the quick commands of a join (version, token create and delete) may take.
const QUICK: Duration = Duration::from_secs(60);

/// How much longer than the join's own timeout a bootstrap token lives: the token is deleted
/// right after the join, and expires by itself should poolctl be killed first.
const TOKEN_MARGIN: Duration = Duration::from_secs(120);

/// Why a join failed. No variant holds a credential: command output is redacted first.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JoinError {
    /// A call to Docker failed.
    #[error("{doing}: {error}")]
    Backend { doing: String, error: BackendError },
    /// A command of the join exited non-zero.
    #[error("`{command}` in {container} exited with code {code}: {output}")]
    Command { command: String, container: String, code: i64, output: String },
    /// A command answered something poolctl cannot use.
    #[error("{0}")]
    Unexpected(String),
}

/// The UID of the `kube-system` Namespace of the cluster a join goes to, asked of its control
/// plane (kind's image has kubectl and the admin kubeconfig) or its k3s server (`k3s kubectl`).
pub async fn cluster_uid<C: Containers>(
    containers: &C,
    join: &crate::spec::Join,
) -> Result<String, JoinError> {
    let get = ["get", "namespace", "kube-system", "-o", "jsonpath={.metadata.uid}"];
    let (container, argv): (&str, Vec<&str>) = if let Some(kubeadm) = &join.kubeadm {
        let kubectl = ["kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf"];
        (&kubeadm.control_plane, [&kubectl[..], &get].concat())
    } else if let Some(k3s) = &join.k3s {
        (&k3s.server, [&["k3s", "kubectl"][..], &get].concat())
    } else {
        return Err(JoinError::Unexpected("no join method".into()));
    };
    let uid = run(containers, container, &argv, QUICK, &[]).await?;
    let uid = uid.trim();
    if uid.is_empty() || uid.len() > 64 || !uid.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        return Err(JoinError::Unexpected(format!("`{}` in {container} printed no UID", argv.join(" "))));
    }
    Ok(uid.to_owned())
}

/// `K3S_URL` and `K3S_TOKEN_FILE` for a new agent: nothing secret.
pub fn k3s_env(join: &K3sJoin) -> [(String, String); 2] {
    [("K3S_URL".to_owned(), join.server_url()), ("K3S_TOKEN_FILE".to_owned(), k3s_token_file())]
}

/// The file that carries the server's node token into a new agent.
pub async fn k3s_token_for_agent<C: Containers>(
    containers: &C,
    join: &K3sJoin,
) -> Result<NewFile, JoinError> {
    let doing = || format!("read the node token of k3s server {}", join.server);
    let token = containers
        .read_file(&join.server, K3S_NODE_TOKEN)
        .await
        .map_err(|error| JoinError::Backend { doing: doing(), error })?;
    let trimmed = token.expose().trim();
    if trimmed.is_empty() {
        return Err(JoinError::Unexpected(format!("{}: {K3S_NODE_TOKEN} is empty", doing())));
    }
    Ok(NewFile { path: k3s_token_file(), content: Secret::new(trimmed) })
}

/// Join the new container `node` to the kubeadm cluster of `join.control_plane`. Whatever
/// happens, the configuration file is removed and the token deleted afterwards (a failure to
/// do so is passed to `warn`: the token expires by itself). What a failed command printed is
/// shown with the token and every one of `known` (the secrets the run knows) redacted.
pub async fn kubeadm<C: Containers>(
    containers: &C,
    join: &KubeadmJoin,
    node: &str,
    known: &[&Secret],
    warn: impl Fn(String),
) -> Result<(), JoinError> {
    let control_plane = join.control_plane.as_str();
    let version = run(containers, node, &["kubeadm", "version", "-o", "short"], QUICK, known).await?;
    let api = config_api_version(version.trim())?;
    let ttl = format!("{}s", (join.timeout.get() + TOKEN_MARGIN).as_secs());
    let description = format!("poolctl: join of {node}");
    let create = ["kubeadm", "token", "create", "--ttl", &ttl, "--description", &description];
    let printed =
        run(containers, control_plane, &[&create[..], &["--print-join-command"]].concat(), QUICK, &[])
            .await?;
    let command = JoinCommand::parse(&printed)
        .map_err(|why| JoinError::Unexpected(format!("`kubeadm token create` on {control_plane}: {why}")))?;
    let secrets: Vec<&Secret> = known.iter().copied().chain([&command.token]).collect();
    let config = NewFile { path: kubeadm_config_file(), content: command.configuration(api, node) };

    let joined = async {
        containers.write_file(node, &config).await.map_err(|error| JoinError::Backend {
            doing: format!("write the join configuration into {node}"),
            error,
        })?;
        let argv = ["kubeadm", "join", "--config", &config.path];
        run(containers, node, &argv, join.timeout.get(), &secrets).await
    }
    .await;

    if let Err(e) = run(containers, node, &["rm", "-f", &config.path], QUICK, &secrets).await {
        warn(format!("{node}: could not remove {} ({e}); the token in it is deleted", config.path));
    }
    let delete = ["kubeadm", "token", "delete", command.token_id()];
    if let Err(e) = run(containers, control_plane, &delete, QUICK, &secrets).await {
        warn(format!("{node}: could not delete its bootstrap token ({e}); it expires within {ttl}"));
    }
    joined.map(drop)
}

/// Run `argv` in `container`; its output when it exits 0, else an error whose output has
/// `secrets` and anything shaped like a bootstrap token redacted.
async fn run<C: Containers>(
    containers: &C,
    container: &str,
    argv: &[&str],
    timeout: Duration,
    secrets: &[&Secret],
) -> Result<String, JoinError> {
    let command = argv.join(" ");
    let argv: Vec<String> = argv.iter().map(|a| (*a).to_owned()).collect();
    let out = containers
        .exec(container, &argv, timeout)
        .await
        .map_err(|error| JoinError::Backend { doing: format!("run `{command}` in {container}"), error })?;
    if out.exit_code == 0 {
        return Ok(out.output);
    }
    Err(JoinError::Command {
        command,
        container: container.to_owned(),
        code: out.exit_code,
        output: redact::output(secrets, &out.output).trim().to_owned(),
    })
}

/// The `JoinConfiguration` apiVersion that `kubeadm version -o short` (`v1.31.2`) reads:
/// v1beta4 from Kubernetes 1.31, v1beta3 from 1.22 until then.
fn config_api_version(version: &str) -> Result<&'static str, JoinError> {
    let unexpected = || JoinError::Unexpected(format!("`kubeadm version -o short` printed {version:?}"));
    let mut parts = version.trim_start_matches('v').split('.');
    let major: u32 = parts.next().and_then(|p| p.parse().ok()).ok_or_else(unexpected)?;
    let minor: u32 = parts
        .next()
        .and_then(|p| p.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|p| p.parse().ok())
        .ok_or_else(unexpected)?;
    match (major, minor) {
        (1, 31..) | (2.., _) => Ok("kubeadm.k8s.io/v1beta4"),
        (1, 22..) => Ok("kubeadm.k8s.io/v1beta3"),
        _ => Err(JoinError::Unexpected(format!(
            "kubeadm {version} is older than 1.22, whose join configuration poolctl does not write"
        ))),
    }
}

/// What `kubeadm token create --print-join-command` prints, read.
#[derive(Debug, PartialEq, Eq)]
struct JoinCommand {
    endpoint: String,
    token: Secret,
    ca_hashes: Vec<String>,
}

impl JoinCommand {
    /// Reads the `kubeadm join ENDPOINT --token T --discovery-token-ca-cert-hash sha256:H`
    /// line. The reasons it gives never quote the output, which holds the token.
    fn parse(printed: &str) -> Result<Self, String> {
        let line = printed
            .lines()
            .find_map(|l| l.split_once("kubeadm join ").map(|(_, rest)| rest))
            .ok_or("it printed no `kubeadm join` command")?;
        let args: Vec<&str> = line.split_whitespace().filter(|a| *a != "\\").collect();
        let endpoint =
            args.first().filter(|a| !a.starts_with('-')).ok_or("the join command names no endpoint")?;
        let mut token = None;
        let mut ca_hashes = Vec::new();
        let mut rest = args[1..].iter();
        while let Some(arg) = rest.next() {
            let (flag, inline) = arg.split_once('=').map_or((*arg, None), |(f, v)| (f, Some(v)));
            let mut value = || inline.or_else(|| rest.next().copied());
            match flag {
                "--token" => token = value(),
                "--discovery-token-ca-cert-hash" => ca_hashes.extend(value()),
                _ => {}
            }
        }
        let token = token.filter(|t| is_bootstrap_token(t)).ok_or("the join command has no valid --token")?;
        if ca_hashes.is_empty() {
            return Err("the join command pins no CA (no --discovery-token-ca-cert-hash): poolctl joins \
                        only with the cluster's CA pinned"
                .to_owned());
        }
        if let Some(bad) = ca_hashes.iter().find(|h| !is_ca_hash(h)) {
            return Err(format!("{bad:?} is not a sha256:<64 hex digits> CA hash"));
        }
        Ok(Self {
            endpoint: (*endpoint).to_owned(),
            token: Secret::new(token),
            ca_hashes: ca_hashes.into_iter().map(str::to_owned).collect(),
        })
    }

    /// The token's public half, which names it (`kubeadm token delete <id>`).
    fn token_id(&self) -> &str {
        self.token.expose().split('.').next().unwrap_or_default()
    }

    /// The `JoinConfiguration` for `node`: this endpoint and token, the CA pinned, the Node
    /// named after the container, and kubeadm's preflight checks skipped as kind skips them (in
    /// a container they fail on what kind nodes do on purpose).
    fn configuration(&self, api_version: &str, node: &str) -> Secret {
        // A JSON string is a YAML scalar that no value can break out of.
        let q = |s: &str| serde_json::to_string(s).expect("a string serializes");
        let hashes = self.ca_hashes.iter().fold(String::new(), |mut out, h| {
            let _ = writeln!(out, "      - {}", q(h));
            out
        });
        Secret::new(format!(
            "apiVersion: {api_version}\nkind: JoinConfiguration\ndiscovery:\n  bootstrapToken:\n    \
             apiServerEndpoint: {}\n    token: {}\n    caCertHashes:\n{hashes}nodeRegistration:\n  \
             name: {}\nskipPhases:\n  - preflight\n",
            q(&self.endpoint),
            q(self.token.expose()),
            q(node),
        ))
    }
}

/// `[a-z0-9]{6}.[a-z0-9]{16}`, kubeadm's bootstrap token format.
fn is_bootstrap_token(text: &str) -> bool {
    is_bootstrap_token_bytes(text.as_bytes())
}

pub(super) fn is_bootstrap_token_bytes(bytes: &[u8]) -> bool {
    let token_char = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    bytes.len() == 23
        && bytes[6] == b'.'
        && bytes[..6].iter().all(token_char)
        && bytes[7..].iter().all(token_char)
}

fn is_ca_hash(text: &str) -> bool {
    text.strip_prefix("sha256:")
        .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn the_printed_join_command_is_read() {
        let printed = format!(
            "W0101 warning on stderr\nkubeadm join dev-control-plane:6443 --token abcdef.0123456789abcdef \
             --discovery-token-ca-cert-hash {HASH} \n"
        );
        let command = JoinCommand::parse(&printed).unwrap();
        assert_eq!(command.endpoint, "dev-control-plane:6443");
        assert_eq!(command.token.expose(), "abcdef.0123456789abcdef");
        assert_eq!(command.ca_hashes, [HASH]);
        assert_eq!(command.token_id(), "abcdef");
        let inline = format!(
            "kubeadm join 10.0.0.1:6443 --token=abcdef.0123456789abcdef --discovery-token-ca-cert-hash={HASH}"
        );
        assert_eq!(
            JoinCommand::parse(&inline).unwrap(),
            JoinCommand { endpoint: "10.0.0.1:6443".into(), ..command }
        );
    }

    #[test]
    fn a_join_command_without_a_pinned_ca_is_refused_without_quoting_it() {
        let cases = [
            ("kubeadm join cp:6443 --token abcdef.0123456789abcdef", "pins no CA"),
            (
                "kubeadm join cp:6443 --token abcdef.0123456789abcdef --discovery-token-unsafe-skip-ca-verification",
                "pins no CA",
            ),
            (
                "kubeadm join cp:6443 --token abcdef.0123456789abcdef --discovery-token-ca-cert-hash md5:x",
                "md5:x",
            ),
            ("kubeadm join cp:6443 --token nope", "no valid --token"),
            ("kubeadm join --token abcdef.0123456789abcdef", "no endpoint"),
            ("error: unable to create token abcdef.0123456789abcdef", "no `kubeadm join`"),
        ];
        for (printed, why) in cases {
            let error = JoinCommand::parse(printed).unwrap_err();
            assert!(error.contains(why), "{printed}: {error}");
            assert!(!error.contains("0123456789abcdef"), "{error}");
        }
    }

    #[test]
    fn the_configuration_pins_the_ca_and_names_the_node() {
        let command = JoinCommand {
            endpoint: "cp:6443".into(),
            token: Secret::new("abcdef.0123456789abcdef"),
            ca_hashes: vec![HASH.into()],
        };
        let config = command.configuration("kubeadm.k8s.io/v1beta4", "workers-1a2b3c4d5e-x1y2z");
        let yaml: serde_json::Value = serde_saphyr::from_str(config.expose()).unwrap();
        assert_eq!(yaml["apiVersion"], "kubeadm.k8s.io/v1beta4");
        assert_eq!(yaml["kind"], "JoinConfiguration");
        let token = &yaml["discovery"]["bootstrapToken"];
        assert_eq!(token["apiServerEndpoint"], "cp:6443");
        assert_eq!(token["token"], "abcdef.0123456789abcdef");
        assert_eq!(token["caCertHashes"], serde_json::json!([HASH]));
        assert_eq!(token.get("unsafeSkipCAVerification"), None);
        assert_eq!(yaml["nodeRegistration"]["name"], "workers-1a2b3c4d5e-x1y2z");
        assert_eq!(yaml["skipPhases"], serde_json::json!(["preflight"]));
    }

    #[test]
    fn the_configuration_version_follows_kubeadm() {
        assert_eq!(config_api_version("v1.31.0").unwrap(), "kubeadm.k8s.io/v1beta4");
        assert_eq!(config_api_version("v1.33.1-rc.0").unwrap(), "kubeadm.k8s.io/v1beta4");
        assert_eq!(config_api_version("v1.30.4").unwrap(), "kubeadm.k8s.io/v1beta3");
        assert!(config_api_version("v1.21.0").is_err());
        assert!(config_api_version("command not found").is_err());
    }
}
