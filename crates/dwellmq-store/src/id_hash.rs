//! A hasher for the writer's per-batch maps, keyed by broker-assigned ids (queue ids,
//! sequence numbers): no peer chooses them, so the DoS resistance of the standard SipHash buys
//! nothing there, while its cost shows on a commit of thousands of ops.

use std::hash::{BuildHasherDefault, Hasher};

/// Multiply-rotate mixing of whole words (as in rustc's FxHasher).
#[derive(Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(SEED);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn write_isize(&mut self, n: isize) {
        self.write_u64(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A `HashMap` with [`IdHasher`].
pub(crate) type IdHashMap<K, V> = std::collections::HashMap<K, V, BuildHasherDefault<IdHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, Hash};

    fn hash(value: impl Hash) -> u64 {
        BuildHasherDefault::<IdHasher>::default().hash_one(value)
    }

    #[test]
    fn neighbouring_ids_spread_and_equal_ids_agree() {
        assert_eq!(hash((7u64, 1u64)), hash((7u64, 1u64)));
        let hashes: std::collections::HashSet<u64> =
            (0..10_000u64).map(|seq| hash((1u64, seq))).collect();
        assert_eq!(hashes.len(), 10_000);
        // The high bits (what hashbrown groups by) differ too.
        let tops: std::collections::HashSet<u64> =
            (0..256u64).map(|seq| hash((1u64, seq)) >> 57).collect();
        assert!(tops.len() > 64, "{} distinct top-7-bit values", tops.len());
    }
}
