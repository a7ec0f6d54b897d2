//! SplitMix64 (Steele, Lea and Flood, 2014), the one 64-bit mixer of the
//! workspace: the device model's counter-based hashes, the scenario's
//! generated programs, the daemon's sampling dither and the tests' seeded
//! generators all draw from it.
//!
//! A crate of its own because the device model, the client and the
//! daemon all use it and none of them should depend on another for it.
//! It is neither part of the ABI (`gpupm-uapi`, whose every constant the
//! generated C header carries) nor a cryptographic generator (keys and
//! nonces come from the operating system's random source, see
//! `gpupm-cc`).

/// The golden-ratio increment between two states.
pub const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// The finaliser: 64 well-distributed bits of `z`.
#[inline]
pub const fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A seeded stream of draws; a run replays from its seed.
#[derive(Clone, Debug)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GAMMA);
        mix(self.0)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_sequence() {
        // The first outputs of SplitMix64 seeded with 0 (the published
        // reference implementation's).
        let mut r = SplitMix64(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(r.next_u64(), 0x06C4_5D18_8009_454F);
    }
}
