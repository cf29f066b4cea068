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
//!
//! Whatever the join, the new Node registers configured ([`Registration`]): with the pool's
//! taints and `poolctl.dev/uninitialized:NoSchedule`, and the pool's labels a kubelet may set
//! itself, so that no pod lands on it before poolctl has configured it. kubeadm gets them in
//! its `JoinConfiguration` (`nodeRegistration.taints`, `kubeletExtraArgs`), k3s in a drop-in
//! configuration file (`node-taint`, `node-label`), and a pool that joins by itself (no
//! `join:`) as kubelet flags in `KUBELET_EXTRA_ARGS`.

use std::fmt::Write as _;
use std::time::Duration;

use std::collections::BTreeMap;

use super::redact;
use crate::backend::{BackendError, Containers, NewFile};
use crate::model::labels;
use crate::spec::{JOIN_DIR, K3sJoin, KubeadmJoin, NodeSpec, Secret, Taint, TemplateFile};

/// Where a k3s agent reads the part of its configuration poolctl writes: a drop-in, which k3s
/// merges into `/etc/rancher/k3s/config.yaml`, whatever the image has there.
pub const K3S_CONFIG_FILE: &str = "/etc/rancher/k3s/config.yaml.d/50-poolctl.yaml";

/// The environment variable that carries the kubelet flags of a pool that joins by itself.
pub const KUBELET_EXTRA_ARGS: &str = "KUBELET_EXTRA_ARGS";

/// What a new Node of a pool registers with: the pool's taints and
/// [`labels::UNINITIALIZED`], and the pool's labels that a kubelet may set itself
/// ([`labels::kubelet_may_set`]); poolctl sets the others, and removes the uninitialized taint,
/// in one update once the Node is Ready.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Registration {
    pub taints: Vec<Taint>,
    pub labels: BTreeMap<String, String>,
}

impl Registration {
    pub fn of(node: &NodeSpec) -> Self {
        let mut taints: Vec<Taint> =
            node.taints.iter().filter(|t| t.key != labels::UNINITIALIZED).cloned().collect();
        taints.push(Taint {
            key: labels::UNINITIALIZED.to_owned(),
            value: None,
            effect: "NoSchedule".to_owned(),
        });
        let labels = node
            .labels
            .iter()
            .filter(|(k, _)| labels::kubelet_may_set(k))
            .map(|(k, v)| (k.clone(), v.clone()));
        Self { taints, labels: labels.collect() }
    }

    /// `key=value:Effect` (or `key:Effect`), as kubelet and k3s take a taint.
    fn taint_flags(&self) -> Vec<String> {
        let flag = |t: &Taint| match &t.value {
            Some(v) => format!("{}={v}:{}", t.key, t.effect),
            None => format!("{}:{}", t.key, t.effect),
        };
        self.taints.iter().map(flag).collect()
    }

    /// `key=value`, as kubelet and k3s take a label.
    fn label_flags(&self) -> Vec<String> {
        self.labels.iter().map(|(k, v)| format!("{k}={v}")).collect()
    }

    /// kubelet's flags: `--register-with-taints=... --node-labels=...`. Validation keeps
    /// keys, values and effects free of spaces and commas.
    pub fn kubelet_args(&self) -> String {
        let mut args = vec![format!("--register-with-taints={}", self.taint_flags().join(","))];
        if !self.labels.is_empty() {
            args.push(format!("--node-labels={}", self.label_flags().join(",")));
        }
        args.join(" ")
    }

    /// A k3s configuration drop-in: `node-taint+` and `node-label+` add to whatever the image's
    /// own configuration sets.
    pub fn k3s_config(&self) -> TemplateFile {
        let q = |s: &str| serde_json::to_string(s).expect("a string serializes");
        let mut content = String::from("# Written by poolctl: how this Node registers.\n");
        let lists = [("node-taint+", self.taint_flags()), ("node-label+", self.label_flags())];
        for (key, items) in lists.iter().filter(|(_, items)| !items.is_empty()) {
            let _ = writeln!(content, "{key}:");
            for item in items {
                let _ = writeln!(content, "  - {}", q(item));
            }
        }
        TemplateFile { path: K3S_CONFIG_FILE.to_owned(), content, mode: "0644".to_owned() }
    }

    /// The `nodeRegistration` entries of a kubeadm `JoinConfiguration` besides the name, in
    /// YAML at two spaces: `taints`, and the labels as `kubeletExtraArgs` (a map until
    /// v1beta3, a list of name and value from v1beta4).
    fn kubeadm_yaml(&self, api_version: &str) -> String {
        let q = |s: &str| serde_json::to_string(s).expect("a string serializes");
        let mut out = String::new();
        if !self.taints.is_empty() {
            out.push_str("  taints:\n");
        }
        for t in &self.taints {
            let value = t.value.as_deref().map(|v| format!(", value: {}", q(v))).unwrap_or_default();
            let _ = writeln!(out, "    - {{key: {}{value}, effect: {}}}", q(&t.key), q(&t.effect));
        }
        if !self.labels.is_empty() {
            let labels = q(&self.label_flags().join(","));
            if api_version == "kubeadm.k8s.io/v1beta3" {
                let _ = writeln!(out, "  kubeletExtraArgs:\n    node-labels: {labels}");
            } else {
                let _ = writeln!(out, "  kubeletExtraArgs:\n    - {{name: node-labels, value: {labels}}}");
            }
        }
        out
    }
}

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
    let container = through(join).ok_or_else(|| JoinError::Unexpected("no join method".into()))?;
    let kubectl: &[&str] = if join.kubeadm.is_some() {
        &["kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf"]
    } else {
        &["k3s", "kubectl"]
    };
    let argv = [kubectl, &["get", "namespace", "kube-system", "-o", "jsonpath={.metadata.uid}"]].concat();
    let uid = run(containers, container, &argv, QUICK, &[]).await?;
    let uid = uid.trim();
    if uid.is_empty() || uid.len() > 64 || !uid.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        return Err(JoinError::Unexpected(format!("`{}` in {container} printed no UID", argv.join(" "))));
    }
    Ok(uid.to_owned())
}

/// The container a join goes through: its kubeadm control plane, else its k3s server.
pub fn through(join: &crate::spec::Join) -> Option<&str> {
    join.kubeadm.as_ref().map(|k| k.control_plane.as_str()).or(join.k3s.as_ref().map(|k| k.server.as_str()))
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
    (node, registration): (&str, &Registration),
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
    let config =
        NewFile { path: kubeadm_config_file(), content: command.configuration(api, node, registration) };

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
        let token = token
            .filter(|t| is_bootstrap_token(t.as_bytes()))
            .ok_or("the join command has no valid --token")?;
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
    /// named after the container and registered as `registration` says, and kubeadm's preflight
    /// checks skipped as kind skips them (in a container they fail on what kind nodes do on
    /// purpose).
    fn configuration(&self, api_version: &str, node: &str, registration: &Registration) -> Secret {
        // A JSON string is a YAML scalar that no value can break out of.
        let q = |s: &str| serde_json::to_string(s).expect("a string serializes");
        let hashes = self.ca_hashes.iter().fold(String::new(), |mut out, h| {
            let _ = writeln!(out, "      - {}", q(h));
            out
        });
        Secret::new(format!(
            "apiVersion: {api_version}\nkind: JoinConfiguration\ndiscovery:\n  bootstrapToken:\n    \
             apiServerEndpoint: {}\n    token: {}\n    caCertHashes:\n{hashes}nodeRegistration:\n  \
             name: {}\n{}skipPhases:\n  - preflight\n",
            q(&self.endpoint),
            q(self.token.expose()),
            q(node),
            registration.kubeadm_yaml(api_version),
        ))
    }
}

/// `[a-z0-9]{6}.[a-z0-9]{16}`, kubeadm's bootstrap token format.
pub(super) fn is_bootstrap_token(bytes: &[u8]) -> bool {
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
        let config = command.configuration(
            "kubeadm.k8s.io/v1beta4",
            "workers-1a2b3c4d5e-x1y2z",
            &Registration::default(),
        );
        let yaml: serde_json::Value = serde_saphyr::from_str(config.expose()).unwrap();
        assert_eq!(yaml["apiVersion"], "kubeadm.k8s.io/v1beta4");
        assert_eq!(yaml["kind"], "JoinConfiguration");
        let token = &yaml["discovery"]["bootstrapToken"];
        assert_eq!(token["apiServerEndpoint"], "cp:6443");
        assert_eq!(token["token"], "abcdef.0123456789abcdef");
        assert_eq!(token["caCertHashes"], serde_json::json!([HASH]));
        assert_eq!(token.get("unsafeSkipCAVerification"), None);
        assert_eq!(yaml["nodeRegistration"]["name"], "workers-1a2b3c4d5e-x1y2z");
        // A pool without `node:`: nothing to register with, and nothing written for it.
        assert_eq!(yaml["nodeRegistration"].as_object().map(serde_json::Map::len), Some(1), "{yaml}");
        assert_eq!(yaml["skipPhases"], serde_json::json!(["preflight"]));
    }

    fn registration() -> Registration {
        let node = NodeSpec {
            labels: BTreeMap::from([
                ("team".to_owned(), "ci".to_owned()),
                ("node-role.kubernetes.io/worker".to_owned(), String::new()),
            ]),
            taints: vec![Taint {
                key: "dedicated".into(),
                value: Some("ci".into()),
                effect: "NoSchedule".into(),
            }],
            ..serde_saphyr::from_str("{}").unwrap()
        };
        Registration::of(&node)
    }

    #[test]
    fn a_new_node_registers_with_the_pools_taints_the_uninitialized_one_and_the_labels_a_kubelet_may_set() {
        let r = registration();
        assert_eq!(r.taint_flags(), ["dedicated=ci:NoSchedule", "poolctl.dev/uninitialized:NoSchedule"]);
        assert_eq!(r.label_flags(), ["team=ci"], "the role is poolctl's to set, once Ready");
        assert_eq!(
            r.kubelet_args(),
            "--register-with-taints=dedicated=ci:NoSchedule,poolctl.dev/uninitialized:NoSchedule --node-labels=team=ci"
        );
        // Without labels, and without taints of its own, it still waits to be configured.
        let bare = Registration::of(&serde_saphyr::from_str("{}").unwrap());
        assert_eq!(bare.kubelet_args(), "--register-with-taints=poolctl.dev/uninitialized:NoSchedule");
    }

    #[test]
    fn the_kubeadm_join_configuration_registers_the_node_configured() {
        let command = JoinCommand {
            endpoint: "cp:6443".into(),
            token: Secret::new("abcdef.0123456789abcdef"),
            ca_hashes: vec![HASH.into()],
        };
        for (api, labels) in [
            ("kubeadm.k8s.io/v1beta4", serde_json::json!([{"name": "node-labels", "value": "team=ci"}])),
            ("kubeadm.k8s.io/v1beta3", serde_json::json!({"node-labels": "team=ci"})),
        ] {
            let config = command.configuration(api, "w-1", &registration());
            let yaml: serde_json::Value = serde_saphyr::from_str(config.expose()).unwrap();
            let registered = &yaml["nodeRegistration"];
            assert_eq!(registered["name"], "w-1");
            assert_eq!(
                registered["taints"],
                serde_json::json!([
                    {"key": "dedicated", "value": "ci", "effect": "NoSchedule"},
                    {"key": "poolctl.dev/uninitialized", "effect": "NoSchedule"},
                ])
            );
            assert_eq!(registered["kubeletExtraArgs"], labels, "{api}");
            assert_eq!(yaml["skipPhases"], serde_json::json!(["preflight"]));
        }
    }

    #[test]
    fn the_k3s_agent_gets_its_taints_and_labels_in_a_configuration_drop_in() {
        let file = registration().k3s_config();
        assert_eq!(file.path, K3S_CONFIG_FILE);
        let yaml: serde_json::Value = serde_saphyr::from_str(&file.content).unwrap();
        assert_eq!(
            yaml["node-taint+"],
            serde_json::json!(["dedicated=ci:NoSchedule", "poolctl.dev/uninitialized:NoSchedule"])
        );
        assert_eq!(yaml["node-label+"], serde_json::json!(["team=ci"]));
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
