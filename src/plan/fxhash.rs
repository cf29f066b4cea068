//! A fast hasher for the planner's own maps, keyed by instance and Node names.
//!
//! std's `SipHash` resists collision floods from untrusted keys, at several times the cost per
//! byte; the planner's keys are names from the local Docker daemon and the pool's cluster,
//! whose writers can already do far worse than slow a plan down, and a fifth of the time of a
//! 10,000-instance node-pool plan went to `SipHash`. This is the multiply-rotate hash of
//! rustc's `FxHasher` (rustc-hash), eight bytes at a time: a dozen lines, not worth a crate.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// rustc-hash's multiplier: odd, with its bits spread, so that a multiply mixes every byte.
const K: u64 = 0xf135_7aea_2e62_a9c5;

#[derive(Debug, Default, Clone, Copy)]
pub(super) struct FxHasher(u64);

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(26) ^ word).wrapping_mul(K);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.add(u64::from_le_bytes(chunk.try_into().expect("a chunk of 8")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(last));
        }
        // The zero padding of the last word would make `abc` and `abc\0` one word: the length
        // tells them apart.
        self.add(bytes.len() as u64);
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

pub(super) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;
pub(super) type FastSet<K> = HashSet<K, BuildHasherDefault<FxHasher>>;

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;

    use super::*;

    fn hash(s: &str) -> u64 {
        BuildHasherDefault::<FxHasher>::default().hash_one(s)
    }

    #[test]
    fn names_that_differ_in_any_byte_hash_apart() {
        let base = "workers-0123456789-abcde";
        let mut seen = FastSet::default();
        assert!(seen.insert(hash(base)));
        for i in 0..base.len() {
            let mut bytes = base.as_bytes().to_vec();
            bytes[i] ^= 1;
            assert!(seen.insert(hash(std::str::from_utf8(&bytes).unwrap())), "byte {i}");
        }
        // A name is not itself padded with zeros.
        assert_ne!(hash("abc"), hash("abc\0"));
        assert_eq!(hash(base), hash(base), "deterministic");
    }
}
