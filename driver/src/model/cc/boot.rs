//! Session (boot) ids: drawn from the operating system's random source at
//! every device start and reset, so that a session key — and with it every
//! (key, nonce) pair — is never used by two device lifetimes.

/// Where session ids come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootIds {
    /// The operating system's random source (`getrandom`): always, outside
    /// tests.
    Os,
    /// Derived from a seed and the number of resets so far, so that two
    /// devices built alike (the two engines a test compares) seal alike.
    /// Test builds only: a pinned id repeats across restarts.
    #[cfg(any(test, feature = "test-utils"))]
    Pinned(u64),
}

/// The random source failed.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[error("the operating system's random source failed: {0}")]
pub struct EntropyError(String);

impl BootIds {
    /// The session id of the device's `resets`-th session (0 at start).
    pub fn draw(self, resets: u64) -> Result<u64, EntropyError> {
        match (self, resets) {
            (BootIds::Os, _) => {
                let mut bytes = [0u8; 8];
                getrandom::getrandom(&mut bytes).map_err(|e| EntropyError(e.to_string()))?;
                Ok(u64::from_le_bytes(bytes))
            }
            #[cfg(any(test, feature = "test-utils"))]
            (BootIds::Pinned(seed), n) => Ok(crate::model::rng::hash(
                seed,
                &[crate::model::rng::domain::SESSION, n],
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_ids_differ_and_pinned_ids_follow_the_reset_count() {
        let a = BootIds::Os.draw(0).unwrap();
        let b = BootIds::Os.draw(0).unwrap();
        assert_ne!(a, b, "two draws from the random source were equal");
        let p = BootIds::Pinned(7);
        assert_eq!(p.draw(3), p.draw(3));
        assert_ne!(p.draw(3), p.draw(4));
    }
}
