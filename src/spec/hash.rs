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
