//! The template hash: a short, stable digest of everything that needs a new container.

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::{BootstrapStep, EnvValue, Join, PoolSpec, Template};

/// Hex digits of the template hash kept in labels and instance names.
pub const HASH_LEN: usize = 10;

/// Everything whose change requires replacing an instance, and nothing else: replicas and
/// rollout settings are deliberately left out, like a Deployment's pod-template-hash.
#[derive(Serialize)]
struct Hashed<'a> {
    template: &'a Template,
    bootstrap: &'a [BootstrapStep],
    // Left out while unset, so that pools without a join kept their hash.
    #[serde(skip_serializing_if = "Option::is_none")]
    join: Option<&'a Join>,
}

/// The canonical JSON the hash is taken over, and that the `poolctl.dev/template` label keeps
/// so that a later plan can show what changed. Maps are `BTreeMap`s, so the order in which the
/// YAML wrote them cannot change it. A sensitive env value is there only as a digest (see
/// [`EnvValue::canonical`]): a new value changes the hash, and no label or plan shows it.
pub fn canonical_template(spec: &PoolSpec) -> String {
    let mut template = std::borrow::Cow::Borrowed(&spec.template);
    if spec.template.env.values().any(|v| matches!(v, EnvValue::Secret(_))) {
        for value in template.to_mut().env.values_mut() {
            *value = EnvValue::Plain(value.canonical());
        }
    }
    let hashed = Hashed { template: &template, bootstrap: &spec.bootstrap, join: spec.join.as_ref() };
    serde_json::to_string(&hashed).expect("a template serializes")
}

/// The template hash of a pool spec: the first [`HASH_LEN`] hex digits of the SHA-256 of its
/// canonical JSON.
pub fn template_hash(spec: &PoolSpec) -> String {
    hex_prefix(&Sha256::digest(canonical_template(spec).as_bytes()), HASH_LEN)
}

/// The template fields that `docker update` changes on a running container, as the canonical
/// JSON names them: a change confined to them needs no new container
/// (`spec.rollout.inPlace`). The rest of bollard's `ContainerUpdateBody` (CPU shares, swap,
/// block I/O weights...) has no field in the template.
const LIVE_FIELDS: [&str; 4] = ["memory", "cpus", "pidsLimit", "restart"];

/// Of these, the ones a `docker update` can set but not unset (Docker reads 0 as "leave as
/// it is"): removing one needs a new container.
const SET_ONLY: [&str; 3] = ["memory", "cpus", "pidsLimit"];

/// How a container's template differs from the spec's, both as canonical JSON
/// ([`canonical_template`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateDiff {
    /// Only these live fields changed, each to a value `docker update` can set.
    Live(Vec<String>),
    /// These fields changed and need a new container (`template.env`, `bootstrap`, or
    /// `template` when the old one cannot be read).
    Replace(Vec<String>),
}

/// The hashes of the two parts of a canonical template: everything but the live fields, and
/// the live fields alone. Two templates of the same first hash differ in live fields only.
/// `None` for text that is not a canonical template.
pub fn split_hashes(canonical: &str) -> Option<(String, String)> {
    let mut whole: serde_json::Value = serde_json::from_str(canonical).ok()?;
    let template = whole.get_mut("template")?.as_object_mut()?;
    let live: serde_json::Map<String, serde_json::Value> =
        LIVE_FIELDS.iter().filter_map(|f| Some(((*f).to_owned(), template.remove(*f)?))).collect();
    let digest = |text: String| hex_prefix(&Sha256::digest(text.as_bytes()), HASH_LEN);
    Some((digest(whole.to_string()), digest(serde_json::Value::Object(live).to_string())))
}

/// What tells `old` from `new` (canonical templates): the fields that changed, and whether
/// `docker update` can carry the change out. A template that does not read is all changed.
pub fn diff_templates(old: &str, new: &str) -> TemplateDiff {
    let parse = |text: &str| serde_json::from_str::<serde_json::Value>(text).ok();
    let (Some(old), Some(new)) = (parse(old), parse(new)) else {
        return TemplateDiff::Replace(vec!["template".to_owned()]);
    };
    let empty = serde_json::Map::new();
    let fields =
        |v: &serde_json::Value, key: &str| v.get(key).and_then(|t| t.as_object()).unwrap_or(&empty).clone();
    let (old_t, new_t) = (fields(&old, "template"), fields(&new, "template"));
    let keys: std::collections::BTreeSet<&String> = old_t.keys().chain(new_t.keys()).collect();
    let changed: Vec<String> = keys.into_iter().filter(|k| old_t.get(*k) != new_t.get(*k)).cloned().collect();
    let mut forced: Vec<String> = changed
        .iter()
        .filter(|f| {
            let field = f.as_str();
            !LIVE_FIELDS.contains(&field) || (SET_ONLY.contains(&field) && !new_t.contains_key(field))
        })
        .cloned()
        .collect();
    forced
        .extend(["bootstrap", "join"].into_iter().filter(|k| old.get(*k) != new.get(*k)).map(str::to_owned));
    if forced.is_empty() { TemplateDiff::Live(changed) } else { TemplateDiff::Replace(forced) }
}

/// The first `len` (even) hex digits of a digest.
pub(super) fn hex_prefix(digest: &[u8], len: usize) -> String {
    hex::encode(&digest[..len / 2])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{RolloutSpec, Secret, SecretEnv, ValueFrom};

    fn template(yaml: &str) -> Template {
        serde_saphyr::from_str(yaml).expect("a template")
    }

    fn spec(template: Template, bootstrap: Vec<BootstrapStep>, join: Option<Join>) -> PoolSpec {
        PoolSpec {
            replicas: 1,
            template,
            bootstrap,
            join,
            node: None,
            docker: None,
            rollout: RolloutSpec::default(),
            health: crate::spec::HealthSpec::default(),
            drain: crate::spec::DrainSpec::default(),
            disruption: crate::spec::DisruptionSpec::default(),
            paused: false,
            depends_on: Vec::new(),
        }
    }

    fn hash_of(yaml: &str) -> String {
        template_hash(&spec(template(yaml), Vec::new(), None))
    }

    /// The hashes of templates that use only the fields poolctl had before the container
    /// settings (securityOpt, restart, ports...), `valueFrom` and `join` were added, as that
    /// version computed them: adding fields must not replace every running instance of every
    /// pool.
    #[test]
    fn templates_without_the_newer_fields_keep_their_hash() {
        let full = template(
            r#"
image: kindest/node:v1.31.0
command: ["sh", "-c", "true"]
entrypoint: ["/sbin/init"]
env: {B: "2", A: "1"}
labels: {team: infra}
network: kind
privileged: true
volumes: ["/lib/modules:/lib/modules:ro"]
tmpfs: ["/tmp", "/run"]
"#,
        );
        let bootstrap: Vec<BootstrapStep> =
            serde_saphyr::from_str("- exec: [kubeadm, join]\n  timeout: 3m\n").expect("steps");
        assert_eq!(template_hash(&spec(full, bootstrap, None)), "1c8216cc7f");
        assert_eq!(hash_of("image: busybox"), "1cce39ab66");
        // Written out, unset settings are absent (false, empty and none alike).
        let explicit_defaults = template("image: busybox\ntty: false\nsecurityOpt: []\nsysctls: {}\n");
        assert_eq!(
            canonical_template(&spec(explicit_defaults, Vec::new(), None)),
            r#"{"template":{"image":"busybox"},"bootstrap":[]}"#
        );
    }

    #[test]
    fn each_new_setting_changes_the_hash() {
        let base = hash_of("image: busybox");
        for setting in [
            "securityOpt: [seccomp=unconfined]",
            "cgroupns: private",
            "userns: host",
            "tty: true",
            "init: false",
            "restart: on-failure:1",
            "devices: [/dev/fuse]",
            "capAdd: [SYS_ADMIN]",
            "capDrop: [NET_RAW]",
            "sysctls: {net.ipv4.ip_forward: '1'}",
            "ports: ['80']",
            "extraHosts: ['h:1.2.3.4']",
            "dns: [1.1.1.1]",
            "user: '1000'",
            "workdir: /srv",
            "stopSignal: SIGRTMIN+3",
            "cpus: '2'",
            "memory: 1g",
            "extraNetworks: [other]",
            "files: [{path: /x, content: y}]",
            "copyFrom: {container: c}",
        ] {
            let changed = hash_of(&format!("image: busybox\n{setting}\n"));
            assert_ne!(changed, base, "{setting} left the hash as it was");
        }
    }

    fn canonical_of(yaml: &str) -> String {
        canonical_template(&spec(template(yaml), Vec::new(), None))
    }

    #[test]
    fn the_live_fields_hash_apart_from_the_rest() {
        let old = canonical_of("image: busybox\nmemory: 64m\nenv: {A: '1'}\n");
        let live = canonical_of("image: busybox\nmemory: 128m\nrestart: always\nenv: {A: '1'}\n");
        let env = canonical_of("image: busybox\nmemory: 64m\nenv: {A: '2'}\n");
        let (old_fixed, old_live) = split_hashes(&old).expect("canonical");
        let (live_fixed, live_live) = split_hashes(&live).expect("canonical");
        let (env_fixed, env_live) = split_hashes(&env).expect("canonical");
        assert_eq!(old_fixed, live_fixed);
        assert_ne!(old_live, live_live);
        assert_ne!(old_fixed, env_fixed);
        assert_eq!(old_live, env_live);
        assert_eq!(split_hashes("not json"), None);
    }

    #[test]
    fn a_change_of_live_fields_alone_is_live_and_any_other_names_what_forces_a_replacement() {
        let old = canonical_of("image: busybox\nmemory: 64m\ncpus: '1'\n");
        let diff = |yaml: &str| diff_templates(&old, &canonical_of(yaml));
        assert_eq!(
            diff("image: busybox\nmemory: 128m\ncpus: '1'\nrestart: always\npidsLimit: 50\n"),
            TemplateDiff::Live(vec!["memory".into(), "pidsLimit".into(), "restart".into()])
        );
        assert_eq!(
            diff("image: busybox\nmemory: 128m\ncpus: '1'\nenv: {A: '1'}\n"),
            TemplateDiff::Replace(vec!["env".into()])
        );
        // Docker cannot take a memory limit away from a running container.
        assert_eq!(diff("image: busybox\ncpus: '1'\n"), TemplateDiff::Replace(vec!["memory".into()]));
        let with_bootstrap = canonical_template(&spec(
            template("image: busybox\nmemory: 64m\ncpus: '1'\n"),
            serde_saphyr::from_str("- exec: [true]\n").expect("steps"),
            None,
        ));
        assert_eq!(diff_templates(&old, &with_bootstrap), TemplateDiff::Replace(vec!["bootstrap".into()]));
        assert_eq!(diff_templates("{", &old), TemplateDiff::Replace(vec!["template".into()]));
    }

    #[test]
    fn a_join_changes_the_hash() {
        let base = hash_of("image: busybox");
        let join = |yaml: &str| serde_saphyr::from_str::<Join>(yaml).expect("a join");
        let kubeadm = spec(template("image: busybox"), Vec::new(), Some(join("kubeadm: {controlPlane: cp}")));
        let k3s = spec(template("image: busybox"), Vec::new(), Some(join("k3s: {server: s}")));
        let hashes = [base, template_hash(&kubeadm), template_hash(&k3s)];
        assert!(hashes[0] != hashes[1] && hashes[1] != hashes[2] && hashes[0] != hashes[2], "{hashes:?}");
    }

    /// Like Terraform's sensitive values: the hash follows the value, the canonical form (kept
    /// in a label, shown in plan diffs) holds a digest, never the value.
    #[test]
    fn a_secret_is_hashed_by_digest_and_a_new_value_changes_the_hash() {
        let with_secret = |value: &str| {
            let mut t = template("image: busybox\nenv: {A: '1'}\n");
            let value_from = ValueFrom { file: Some("/t".to_owned()), env: None };
            let secret = SecretEnv { value_from, value: Some(Secret::new(value)) };
            t.env.insert("TOKEN".to_owned(), EnvValue::Secret(secret));
            spec(t, Vec::new(), None)
        };
        let one = with_secret("s3cret-one");
        let canonical = canonical_template(&one);
        assert!(!canonical.contains("s3cret-one"), "{canonical}");
        let digest = Secret::new("s3cret-one").digest();
        assert!(canonical.contains(&format!(r#""TOKEN":"(sensitive {digest})""#)), "{canonical}");
        assert_eq!(template_hash(&one), template_hash(&with_secret("s3cret-one")));
        assert_ne!(template_hash(&one), template_hash(&with_secret("s3cret-two")));
        // A plain value stays as written.
        assert!(canonical.contains(r#""A":"1""#), "{canonical}");
    }
}
