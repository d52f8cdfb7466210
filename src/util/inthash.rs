//! Hash maps keyed by block and inode numbers, with a multiply-and-rotate
//! hash instead of std's SipHash.
//!
//! The buffer cache, the journal's sets and the inode cache hash a number
//! on every metadata access; SipHash was a tenth of the instructions of an
//! fs_mark file. Its keying protects maps whose keys an attacker chooses
//! (names: the directory name cache keeps SipHash); these keys are block
//! and inode numbers bounded by the filesystem's size.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// A map keyed by a block or inode number.
pub type IntMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;
/// A set of block or inode numbers.
pub type IntSet<K> = HashSet<K, BuildHasherDefault<IntHasher>>;

/// An odd constant with well-spread bits (2^64 over the golden ratio).
const SEED: u64 = 0x9e37_79b9_7f4a_7c15;

/// Folds each integer into the state with a multiply, as rustc's FxHasher
/// does. hashbrown takes its bucket from the low bits and its tag from the
/// top seven, so `finish` rotates the well-mixed high bits down: numbers
/// with the same low bits (every eighth block, say) still spread.
#[derive(Default, Clone, Copy)]
pub struct IntHasher(u64);

impl IntHasher {
    fn add(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(SEED);
    }
}

impl Hasher for IntHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }
    fn write_u8(&mut self, n: u8) {
        self.add(n as u64);
    }
    fn write_u16(&mut self, n: u16) {
        self.add(n as u64);
    }
    fn write_u32(&mut self, n: u32) {
        self.add(n as u64);
    }
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
    fn finish(&self) -> u64 {
        self.0.rotate_left(26)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Strided keys, as block numbers often are, must not share buckets:
    /// the low bits that pick one differ for each of them.
    #[test]
    fn strided_numbers_spread_over_the_low_bits() {
        let hash = |n: u32| {
            let mut h = IntHasher::default();
            h.write_u32(n);
            h.finish()
        };
        for stride in [1u32, 8, 64, 4096, 32768] {
            let buckets: IntSet<u64> = (0..1024u32).map(|i| hash(i * stride) & 1023).collect();
            assert!(
                buckets.len() > 600,
                "stride {stride}: {} buckets",
                buckets.len()
            );
        }
        let map: IntMap<u32, u32> = (0..10_000).map(|i| (i * 8, i)).collect();
        assert!((0..10_000).all(|i| map.get(&(i * 8)) == Some(&i)));
    }
}
