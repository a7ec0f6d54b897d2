//! Confidential computing: the copy engine's encryption of a confidential
//! VM's blocks and stream records on their way to host-visible memory.
//!
//! AES-256-GCM under the VM's key. The 96-bit nonce is the VM id followed by
//! a per-VM 64-bit counter that only ever increases (it survives key
//! changes and device resets), so a (key, nonce) pair is never reused. The
//! envelope's first 16 bytes (VM, flags, key epoch) are bound as associated
//! data, so ciphertext cannot be replayed under another VM's envelope.

use aes_gcm::aead::{AeadInPlace, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce, Tag};
use gpupm_uapi::layout::{envelope_flags, Envelope, ENVELOPE_AAD_LEN};
use zerocopy::IntoBytes;

/// A confidential VM's key material and nonce counter.
#[derive(Clone)]
pub struct VmCipher {
    cipher: Aes256Gcm,
    vm: u32,
    key_epoch: u32,
    counter: u64,
}

impl std::fmt::Debug for VmCipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VmCipher")
            .field("vm", &self.vm)
            .field("key_epoch", &self.key_epoch)
            .field("counter", &self.counter)
            .finish_non_exhaustive()
    }
}

impl VmCipher {
    /// A cipher for `vm` with its first key.
    pub fn new(vm: u32, key: &[u8; 32]) -> Self {
        VmCipher {
            cipher: Aes256Gcm::new(key.into()),
            vm,
            key_epoch: 1,
            counter: 0,
        }
    }

    /// Installs a new key; the nonce counter keeps counting.
    pub fn rekey(&mut self, key: &[u8; 32]) {
        self.cipher = Aes256Gcm::new(key.into());
        self.key_epoch += 1;
    }

    /// Key epoch (number of keys installed).
    pub fn key_epoch(&self) -> u32 {
        self.key_epoch
    }

    /// Encrypts `payload` in place; returns the envelope and tag to store beside it.
    pub fn seal(&mut self, payload: &mut [u8]) -> (Envelope, [u8; 16]) {
        self.counter += 1;
        let mut nonce = [0u8; 12];
        nonce[..4].copy_from_slice(&self.vm.to_le_bytes());
        nonce[4..].copy_from_slice(&self.counter.to_le_bytes());
        let envelope = Envelope {
            vm: self.vm,
            flags: envelope_flags::VALID | envelope_flags::ENCRYPTED,
            key_epoch: self.key_epoch,
            reserved: 0,
            nonce,
            reserved2: 0,
        };
        let aad = &envelope.as_bytes()[..ENVELOPE_AAD_LEN];
        // Encryption of an in-memory buffer below the AES-GCM length limit
        // cannot fail; an empty tag would only make the slot fail to open.
        let tag = self
            .cipher
            .encrypt_in_place_detached(Nonce::from_slice(&nonce), aad, payload)
            .map(|t| t.into())
            .unwrap_or([0; 16]);
        (envelope, tag)
    }
}

/// Why a sealed slot did not open.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OpenError {
    /// The envelope does not say the payload is encrypted.
    #[error("the slot is not encrypted")]
    NotEncrypted,
    /// Wrong key, or the bytes were altered.
    #[error("authentication failed: wrong key or altered ciphertext")]
    Authentication,
}

/// Decrypts a sealed payload in place with `key` (what the VM's trusted
/// environment does; the host never holds the key).
pub fn open(
    key: &[u8; 32],
    envelope: &Envelope,
    payload: &mut [u8],
    tag: &[u8; 16],
) -> Result<(), OpenError> {
    if envelope.flags & envelope_flags::ENCRYPTED == 0 {
        return Err(OpenError::NotEncrypted);
    }
    let cipher = Aes256Gcm::new(key.into());
    let aad = &envelope.as_bytes()[..ENVELOPE_AAD_LEN];
    cipher
        .decrypt_in_place_detached(
            Nonce::from_slice(&envelope.nonce),
            aad,
            payload,
            Tag::from_slice(tag),
        )
        .map_err(|_| OpenError::Authentication)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_then_open_round_trips_and_nonces_never_repeat() {
        let key = [7u8; 32];
        let mut c = VmCipher::new(3, &key);
        let mut seen = std::collections::HashSet::new();
        for i in 0..100u8 {
            let plain = [i; 48];
            let mut buf = plain;
            let (env, tag) = c.seal(&mut buf);
            assert_ne!(buf, plain);
            assert!(seen.insert(env.nonce), "nonce reused");
            if i == 50 {
                c.rekey(&[9u8; 32]);
            }
            let k = if i > 50 { [9u8; 32] } else { key };
            open(&k, &env, &mut buf, &tag).unwrap();
            assert_eq!(buf, plain);
        }
    }

    #[test]
    fn wrong_key_or_tampered_envelope_fails() {
        let mut c = VmCipher::new(1, &[1; 32]);
        let mut buf = [5u8; 32];
        let (mut env, tag) = c.seal(&mut buf);
        let mut copy = buf;
        assert_eq!(
            open(&[2; 32], &env, &mut copy, &tag),
            Err(OpenError::Authentication)
        );
        env.vm = 2;
        let mut copy = buf;
        assert_eq!(
            open(&[1; 32], &env, &mut copy, &tag),
            Err(OpenError::Authentication)
        );
    }
}
