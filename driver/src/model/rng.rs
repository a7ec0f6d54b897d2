//! Stateless, seeded randomness.
//!
//! The device needs random numbers that depend only on *what* they are for
//! (seed, unit, event, epoch…), never on the order in which the simulation
//! happens to ask, so that the batched and the cycle-level models, and any
//! split of `advance` calls, draw exactly the same values. A counter-based
//! hash (SplitMix64's finaliser over the mixed keys) gives that; a stream RNG
//! such as ChaCha would tie values to call order.

use gpupm_splitmix::{mix, GAMMA};

/// Mixes `keys` into `seed` and returns 64 well-distributed bits.
pub fn hash(seed: u64, keys: &[u64]) -> u64 {
    keys.iter().fold(seed ^ GAMMA, |x, &k| then(x, k))
}

/// Mixes one more key into a [`hash`]: `then(hash(s, keys), k)` is
/// `hash(s, keys ++ [k])`, so many draws that share a key prefix hash the
/// prefix once.
#[inline]
pub fn then(hashed: u64, key: u64) -> u64 {
    mix(hashed ^ mix(key.wrapping_add(GAMMA)))
}

/// A factor in Q16 fixed point, uniform in `[lo, hi]` (both Q16).
pub fn factor_q16(seed: u64, keys: &[u64], lo: u32, hi: u32) -> u32 {
    let span = u64::from(hi - lo) + 1;
    lo + u32::try_from(hash(seed, keys) % span).unwrap_or(0)
}

/// Output `i` (0-based) of SplitMix64 started from state `hashed` (a
/// [`hash`]): many words for one key at one finaliser each.
#[inline]
pub fn nth(hashed: u64, i: u64) -> u64 {
    mix(hashed.wrapping_add(i.wrapping_add(1).wrapping_mul(GAMMA)))
}

/// Domain tags so unrelated draws never share keys.
pub mod domain {
    /// Per-ULC activity weight.
    pub const ULC_WEIGHT: u64 = 1;
    /// Per-(context, event, epoch) jitter.
    pub const JITTER: u64 = 2;
    /// Initial phase of a counter's generator.
    pub const PHASE: u64 = 3;
    /// Periodic-trigger dithering R.
    pub const DITHER: u64 = 4;
    /// Pinned session ids (test builds only).
    #[cfg(any(test, feature = "test-utils"))]
    pub const SESSION: u64 = 5;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_keys_same_value_different_keys_differ() {
        assert_eq!(hash(7, &[1, 2, 3]), hash(7, &[1, 2, 3]));
        assert_ne!(hash(7, &[1, 2, 3]), hash(7, &[1, 2, 4]));
        assert_ne!(hash(7, &[1, 2, 3]), hash(8, &[1, 2, 3]));
        assert_ne!(hash(7, &[1, 2]), hash(7, &[2, 1]));
        assert_eq!(then(hash(7, &[1, 2]), 3), hash(7, &[1, 2, 3]));
    }

    #[test]
    fn factor_stays_in_range_and_spreads() {
        let (lo, hi) = (49_152, 81_920);
        let draws: Vec<u32> = (0..2000).map(|i| factor_q16(1, &[i], lo, hi)).collect();
        assert!(draws.iter().all(|d| (lo..=hi).contains(d)));
        let mean = draws.iter().map(|&d| u64::from(d)).sum::<u64>() / 2000;
        assert!((62_000..69_000).contains(&mean), "mean {mean}");
    }
}
