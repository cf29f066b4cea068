//! The template hash: a short, stable digest of everything that needs a new container.

use std::fmt::Write as _;

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::{BootstrapStep, Template};

/// Hex digits of the template hash kept in labels and instance names.
pub const HASH_LEN: usize = 10;

/// Everything whose change requires replacing an instance, and nothing else: replicas and
/// rollout settings are deliberately left out, like a Deployment's pod-template-hash.
#[derive(Serialize)]
struct Hashed<'a> {
    template: &'a Template,
    bootstrap: &'a [BootstrapStep],
}

/// The canonical JSON the hash is taken over. Maps are `BTreeMap`s, so the order in which the
/// YAML wrote them cannot change it.
pub fn canonical_template(template: &Template, bootstrap: &[BootstrapStep]) -> String {
    serde_json::to_string(&Hashed { template, bootstrap }).expect("a template serializes")
}

/// The template hash of a pool spec: the first [`HASH_LEN`] hex digits of the SHA-256 of its
/// canonical JSON.
pub fn template_hash(template: &Template, bootstrap: &[BootstrapStep]) -> String {
    let digest = Sha256::digest(canonical_template(template, bootstrap).as_bytes());
    let mut hex = String::with_capacity(HASH_LEN);
    for byte in digest.iter().take(HASH_LEN / 2) {
        let _ = write!(hex, "{byte:02x}");
    }
    hex
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(yaml: &str) -> Template {
        serde_saphyr::from_str(yaml).expect("a template")
    }

    /// The hashes of templates that use only the fields poolctl had before the container
    /// settings (securityOpt, restart, ports...) were added, as that version computed them:
    /// adding fields must not replace every running instance of every pool.
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
        assert_eq!(template_hash(&full, &bootstrap), "1c8216cc7f");
        assert_eq!(template_hash(&template("image: busybox"), &[]), "1cce39ab66");
        // Written out, unset settings are absent (false, empty and none alike).
        let explicit_defaults = template("image: busybox\ntty: false\nsecurityOpt: []\nsysctls: {}\n");
        assert_eq!(
            canonical_template(&explicit_defaults, &[]),
            r#"{"template":{"image":"busybox"},"bootstrap":[]}"#
        );
    }

    #[test]
    fn each_new_setting_changes_the_hash() {
        let base = template_hash(&template("image: busybox"), &[]);
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
        ] {
            let changed = template_hash(&template(&format!("image: busybox\n{setting}\n")), &[]);
            assert_ne!(changed, base, "{setting} left the hash as it was");
        }
    }
}
