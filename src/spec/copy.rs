//! `spec.template.copyFrom`: a running container's settings as a template, merged under what
//! the pool's template says explicitly. Pure: the Docker edge reads the container and turns it
//! into a [`Template`]; this module decides what of it a new instance may take.

use std::collections::BTreeMap;

use super::{EnvValue, Template, TemplateFile};

/// Environment variables that name one node, not the cluster: never copied. kind gives its
/// control plane alone `KUBECONFIG=/etc/kubernetes/admin.conf`, which a worker does not have.
const IDENTITY_ENV: [&str; 4] = ["HOSTNAME", "NODE_NAME", "K3S_NODE_NAME", "KUBECONFIG"];

/// Labels that describe one node, not its kind: never copied. k3d's static IP is the source's
/// own address; `k3d.server.*` says where a server serves the API.
const IDENTITY_LABELS: [&str; 1] = ["k3d.node.staticIP"];
const IDENTITY_LABEL_PREFIXES: [&str; 1] = ["k3d.server."];

/// Roles that one node (or a few special ones) of a cluster holds: a copy of the control plane
/// is a worker, not a second control plane, to kind and k3d (`kind get nodes`, `k3d node list`).
const ROLES_OF_ONE: [(&str, &str); 5] = [
    ("io.x-k8s.kind.role", "control-plane"),
    ("io.x-k8s.kind.role", "external-load-balancer"),
    ("k3d.role", "server"),
    ("k3d.role", "loadbalancer"),
    ("k3d.role", "registry"),
];

/// Words in a variable's or label's name that mark a credential (k3d passes the cluster token
/// as `K3S_TOKEN` and labels its nodes `k3d.cluster.token`): a copy would put it in the plan
/// and in every instance's template label. Such values are declared with `valueFrom`, or come
/// from `join`.
const CREDENTIAL_WORDS: [&str; 4] = ["TOKEN", "PASSWORD", "SECRET", "PASSWD"];

/// Which container the settings were copied from, for the plan.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CopiedFrom {
    /// The name the template gave.
    pub container: String,
    /// Its full ID at the time of the copy.
    pub id: String,
}

impl std::fmt::Display for CopiedFrom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.container, self.id.get(..12).unwrap_or(&self.id))
    }
}

fn is_credential(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    CREDENTIAL_WORDS.iter().any(|w| upper.contains(w))
}

/// Whether an environment variable of the source may be copied.
fn copies_env(key: &str) -> bool {
    !IDENTITY_ENV.contains(&key) && !is_credential(key)
}

/// Whether a label of the source may be copied. `own_names` are the source's name, hostname
/// and ID: a label whose value is one of them names that one node.
pub fn copies_label(key: &str, value: &str, own_names: &[&str]) -> bool {
    !key.starts_with(super::validate::RESERVED_PREFIX)
        && !IDENTITY_LABELS.contains(&key)
        && !IDENTITY_LABEL_PREFIXES.iter().any(|p| key.starts_with(p))
        && !ROLES_OF_ONE.contains(&(key, value))
        && !is_credential(key)
        && !own_names.iter().any(|n| !n.is_empty() && *n == value)
}

/// The template new instances get: `explicit` (the pool file's) over `copied` (the source
/// container's). A setting the template gives wins; a list whose entries are keyed (volumes
/// and tmpfs by container path, devices by container path, security options by name, files by
/// path) keeps the copied entries the template does not replace; maps merge key by key. A
/// `false` cannot be told from an unset flag, so `privileged` and `tty` stay as copied when the
/// template leaves them false.
pub fn merge(explicit: &Template, copied: &Template) -> Template {
    let or = |e: &Option<String>, c: &Option<String>| e.clone().or_else(|| c.clone());
    Template {
        image: if explicit.image.is_empty() { copied.image.clone() } else { explicit.image.clone() },
        image_policy: explicit.image_policy,
        image_id: None,
        command: explicit.command.clone().or_else(|| copied.command.clone()),
        entrypoint: explicit.entrypoint.clone().or_else(|| copied.entrypoint.clone()),
        env: merged_map(&copied.env, &explicit.env),
        labels: merged_map(&copied.labels, &explicit.labels),
        network: or(&explicit.network, &copied.network),
        privileged: explicit.privileged || copied.privileged,
        volumes: keyed(&copied.volumes, &explicit.volumes, volume_path),
        tmpfs: keyed(&copied.tmpfs, &explicit.tmpfs, |t| t.split(':').next().unwrap_or(t)),
        security_opt: keyed(&copied.security_opt, &explicit.security_opt, security_opt_key),
        cgroupns: explicit.cgroupns.or(copied.cgroupns),
        userns: explicit.userns.or(copied.userns),
        tty: explicit.tty || copied.tty,
        init: explicit.init.or(copied.init),
        restart: or(&explicit.restart, &copied.restart),
        devices: keyed(&copied.devices, &explicit.devices, device_path),
        cap_add: keyed(&copied.cap_add, &explicit.cap_add, |c| c),
        cap_drop: keyed(&copied.cap_drop, &explicit.cap_drop, |c| c),
        sysctls: merged_map(&copied.sysctls, &explicit.sysctls),
        ports: keyed(&copied.ports, &explicit.ports, |p| p),
        extra_hosts: keyed(&copied.extra_hosts, &explicit.extra_hosts, |h| h),
        dns: keyed(&copied.dns, &explicit.dns, |d| d),
        user: or(&explicit.user, &copied.user),
        workdir: or(&explicit.workdir, &copied.workdir),
        stop_signal: or(&explicit.stop_signal, &copied.stop_signal),
        cpus: or(&explicit.cpus, &copied.cpus),
        memory: or(&explicit.memory, &copied.memory),
        shm_size: or(&explicit.shm_size, &copied.shm_size),
        pids_limit: explicit.pids_limit.or(copied.pids_limit),
        ulimits: merged_map(&copied.ulimits, &explicit.ulimits),
        extra_networks: keyed(&copied.extra_networks, &explicit.extra_networks, |n| n),
        files: keyed_files(&copied.files, &explicit.files),
        copy_from: explicit.copy_from.clone(),
    }
}

fn merged_map<V: Clone>(copied: &BTreeMap<String, V>, explicit: &BTreeMap<String, V>) -> BTreeMap<String, V> {
    copied.iter().chain(explicit).map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// The copied entries whose key the template does not give, then the template's own.
fn keyed(copied: &[String], explicit: &[String], key: impl Fn(&str) -> &str) -> Vec<String> {
    let taken: Vec<&str> = explicit.iter().map(|e| key(e)).collect();
    let mut merged: Vec<String> = copied.iter().filter(|c| !taken.contains(&key(c))).cloned().collect();
    merged.extend(explicit.iter().cloned());
    merged
}

fn keyed_files(copied: &[TemplateFile], explicit: &[TemplateFile]) -> Vec<TemplateFile> {
    let mut merged: Vec<TemplateFile> =
        copied.iter().filter(|c| !explicit.iter().any(|e| e.path == c.path)).cloned().collect();
    merged.extend(explicit.iter().cloned());
    merged
}

/// The container path of a `volumes` entry.
fn volume_path(volume: &str) -> &str {
    let mut parts = volume.split(':');
    let first = parts.next().unwrap_or(volume);
    parts.next().unwrap_or(first)
}

/// The container path of a `devices` entry.
fn device_path(device: &str) -> &str {
    super::docker::parse_device(device).map_or(device, |d| d.container)
}

/// What a security option sets (`seccomp`, `apparmor`...): `label=` options each stand alone.
fn security_opt_key(option: &str) -> &str {
    match option.split_once('=') {
        Some(("label", _)) | None => option,
        Some((key, _)) => key,
    }
}

/// The copied environment, as template values.
pub fn env_of(vars: impl IntoIterator<Item = (String, String)>) -> BTreeMap<String, EnvValue> {
    vars.into_iter().filter(|(k, _)| copies_env(k)).map(|(k, v)| (k, EnvValue::plain(v))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(yaml: &str) -> Template {
        serde_saphyr::from_str(yaml).expect("a template")
    }

    #[test]
    fn what_the_template_says_wins_and_the_rest_is_copied() {
        let copied = template(
            r"
image: kindest/node:v1.31.0
entrypoint: [/usr/local/bin/entrypoint, /sbin/init]
env: {HTTP_PROXY: 'http://proxy:3128', NO_PROXY: 'localhost'}
labels: {io.x-k8s.kind.cluster: dev, io.x-k8s.kind.role: worker}
network: kind
privileged: true
tty: true
volumes: [/var, '/lib/modules:/lib/modules:ro']
tmpfs: [/tmp, /run]
securityOpt: [seccomp=unconfined, apparmor=unconfined]
restart: on-failure:1
init: false
cgroupns: private
stopSignal: SIGRTMIN+3
devices: [/dev/fuse]
capAdd: [SYS_ADMIN]
sysctls: {net.ipv4.ip_forward: '1'}
files: [{path: /bin/e.sh, content: old, mode: '0755'}]
",
        );
        let explicit = template(
            r"
env: {NO_PROXY: 'localhost,.svc'}
labels: {team: batch}
volumes: ['/srv/modules:/lib/modules:ro']
tmpfs: ['/run:size=64m']
securityOpt: [seccomp=builtin]
restart: always
sysctls: {net.core.somaxconn: '1024'}
files: [{path: /bin/e.sh, content: new, mode: '0700'}]
copyFrom: {container: dev-worker}
",
        );
        let merged = merge(&explicit, &copied);
        assert_eq!(merged.image, "kindest/node:v1.31.0", "the image is copied unless given");
        assert_eq!(merged.entrypoint, copied.entrypoint);
        assert_eq!(merged.env["NO_PROXY"], EnvValue::plain("localhost,.svc"));
        assert_eq!(merged.env["HTTP_PROXY"], EnvValue::plain("http://proxy:3128"));
        assert_eq!(merged.labels.len(), 3);
        assert_eq!(merged.network.as_deref(), Some("kind"));
        assert!(merged.privileged && merged.tty);
        assert_eq!(merged.volumes, ["/var", "/srv/modules:/lib/modules:ro"]);
        assert_eq!(merged.tmpfs, ["/tmp", "/run:size=64m"]);
        assert_eq!(merged.security_opt, ["apparmor=unconfined", "seccomp=builtin"]);
        assert_eq!(merged.restart.as_deref(), Some("always"));
        assert_eq!((merged.init, merged.stop_signal.as_deref()), (Some(false), Some("SIGRTMIN+3")));
        assert_eq!(merged.devices, ["/dev/fuse"]);
        assert_eq!(merged.cap_add, ["SYS_ADMIN"]);
        assert_eq!(merged.sysctls.len(), 2);
        assert_eq!(merged.files.len(), 1);
        assert_eq!((merged.files[0].content.as_str(), merged.files[0].mode.as_str()), ("new", "0700"));
        assert_eq!(merged.copy_from, explicit.copy_from);
        // The image given wins, and merging nothing over a template changes nothing.
        let with_image = Template { image: "mine:1".to_owned(), ..explicit.clone() };
        assert_eq!(merge(&with_image, &copied).image, "mine:1");
        assert_eq!(merge(&copied, &Template::default()), copied);
    }

    #[test]
    fn identity_and_credentials_are_not_copied() {
        let env = env_of([
            ("HOSTNAME".to_owned(), "dev-worker".to_owned()),
            ("K3S_TOKEN".to_owned(), "s3cret".to_owned()),
            ("K3S_NODE_NAME".to_owned(), "k3d-dev-agent-0".to_owned()),
            ("KUBECONFIG".to_owned(), "/etc/kubernetes/admin.conf".to_owned()),
            ("HTTP_PROXY".to_owned(), "http://proxy:3128".to_owned()),
        ]);
        assert_eq!(env.keys().collect::<Vec<_>>(), ["HTTP_PROXY"]);
        let own = ["k3d-dev-agent-0", "k3d-dev-agent-0", "3f9a1c"];
        assert!(copies_label("io.x-k8s.kind.cluster", "dev", &own));
        assert!(copies_label("k3d.role", "agent", &own));
        assert!(!copies_label("k3d.cluster.token", "s3cret", &own));
        assert!(!copies_label("k3d.node.staticIP", "172.18.0.5", &own));
        assert!(!copies_label("poolctl.dev/pool", "w", &own));
        assert!(!copies_label("com.example.node", "k3d-dev-agent-0", &own), "names the one node");
        assert!(copies_label("io.x-k8s.kind.role", "worker", &own));
        assert!(!copies_label("io.x-k8s.kind.role", "control-plane", &own), "a role of one");
        assert!(!copies_label("k3d.role", "server", &own));
        assert!(!copies_label("k3d.server.api.port", "6443", &own));
    }

    #[test]
    fn the_plan_names_the_source_with_a_short_id() {
        let from =
            CopiedFrom { container: "dev-worker".to_owned(), id: "3f9a1c2b4d5e6f708192a3b4".to_owned() };
        assert_eq!(from.to_string(), "dev-worker (3f9a1c2b4d5e)");
    }
}
