//! What a plan covers and what it is made from, the planner's own rules: the pools of a plan,
//! the revision of a desired state, and the seed of new instance names. Saved plans record
//! them; the planner and the rollout apply them.

use std::collections::BTreeSet;

use sha2::{Digest, Sha256};

use crate::model::{Desired, Origin, World};

/// The revision of a desired state: its commit for a Git source; for a file or directory, a
/// digest of the pools it declares (names and specs; not the file names, which depend on how
/// `--path` was spelled).
pub fn revision(desired: &Desired) -> String {
    match &desired.origin {
        Origin::Git { commit, .. } => format!("commit:{commit}"),
        Origin::Path { .. } => {
            let pools: Vec<(&str, &crate::spec::Pool)> =
                desired.pools.iter().map(|p| (p.name(), &p.pool)).collect();
            let json = serde_json::to_vec(&pools).unwrap_or_default();
            format!("content:{:x}", Sha256::digest(&json))
        }
    }
}

/// The [`revision`] of a desired state as notifications and metrics name it: a commit's first 12
/// hex digits, or `sha256:` and the first 12 of the pools' digest. `apply` and `watch` name the
/// same revision alike, and a file reformatted names none anew.
pub fn revision_label(desired: &Desired) -> String {
    let revision = revision(desired);
    match revision.split_once(':') {
        Some(("commit", id)) => id.chars().take(12).collect(),
        Some((_, digest)) => format!("sha256:{}", digest.chars().take(12).collect::<String>()),
        None => revision,
    }
}

/// The pools a plan of `desired` covers: the declared ones, and those this source created and
/// no longer declares (the planner's own rule, without planning).
pub fn planned_pools<'a>(desired: &'a Desired, world: &'a World) -> BTreeSet<&'a str> {
    let scope = desired.origin.scope();
    let mut pools: BTreeSet<&str> = desired.pools.iter().map(crate::model::DesiredPool::name).collect();
    pools.extend(
        world
            .containers
            .iter()
            .filter(|c| c.scope.as_deref() == Some(scope.as_str()))
            .map(|c| c.pool.as_str()),
    );
    pools
}

/// The seed of new instance names for a plan of `desired` in `world`: the same revision and the
/// same containers of its pools (by name and ID) give the same names, and any change of either
/// gives others, so that a name given up by a retired instance is not handed straight to its
/// replacement. Containers of other sources do not count: their coming and going must not make
/// a saved plan of this one stale. Linear, and cheap: each container is hashed on its own
/// (`FxHash`) and the hashes summed, so that the order Docker lists them in does not matter, and
/// only the sum goes through SHA-256.
pub fn seed_of(desired: &Desired, world: &World) -> u64 {
    use std::hash::{Hash, Hasher};
    let pools = planned_pools(desired, world);
    let (mut sum, mut count) = (0u64, 0u64);
    for c in world.containers.iter().filter(|c| pools.contains(c.pool.as_str())) {
        let mut h = rustc_hash::FxHasher::default();
        (&c.pool, &c.name, &c.id).hash(&mut h);
        sum = sum.wrapping_add(h.finish());
        count += 1;
    }
    let digest = Sha256::new()
        .chain_update(revision(desired).as_bytes())
        .chain_update([0])
        .chain_update(sum.to_be_bytes())
        .chain_update(count.to_be_bytes())
        .finalize();
    u64::from_be_bytes(digest[..8].try_into().expect("8 bytes"))
}
