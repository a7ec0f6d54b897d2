//! The rekey blob: a confidential VM's next key sealed under the VM's
//! current session key, which the device opens at `VM_KEY_COMMIT` and only
//! then installs. The host, which does not hold the current key, can
//! neither forge a blob nor replay an old one: the blob's associated data
//! names the VM, the current key epoch and the session.
//!
//! [`RekeyBlob::seal`] is what the VM's trusted tenant tool runs;
//! [`RekeyBlob::register_writes`] lists the register writes (one atomic
//! batch) that stage and commit it.

use aes_gcm::aead::{AeadInPlace, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce, Tag};
use gpupm_uapi::regs::{
    self as r, REKEY_KEY_WORDS, REKEY_NONCE_DOMAIN, REKEY_NONCE_WORDS, REKEY_TAG_WORDS,
};
use zeroize::Zeroizing;

use crate::envelope::{OpenError, SessionCipher};
use crate::schedule::{session_key, Key};

/// Label at the end of a rekey blob's associated data.
const REKEY_LABEL: &[u8; 5] = b"rekey";

/// Words of a rekey blob: `REKEY_NONCE`, `REKEY_KEY`, `REKEY_TAG`.
pub const REKEY_WORDS: usize = REKEY_NONCE_WORDS + REKEY_KEY_WORDS + REKEY_TAG_WORDS;

/// A new key sealed under a VM's current session key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RekeyBlob {
    /// The tenant-chosen 8 nonce bytes (random per blob).
    pub nonce_tail: [u8; 8],
    /// The new key, encrypted.
    pub sealed_key: Key,
    /// AES-GCM tag.
    pub tag: [u8; 16],
}

/// The rekey nonce: the rekey domain, then the tenant's bytes. The domain
/// `0xFFFFFFFF` is never a device nonce's first word (a VM id), so a
/// tenant's blob never shares a (key, nonce) pair with the device's seals.
fn rekey_nonce(tail: &[u8; 8]) -> [u8; 12] {
    let mut nonce = [0u8; 12];
    nonce[..4].copy_from_slice(&REKEY_NONCE_DOMAIN.to_le_bytes());
    nonce[4..].copy_from_slice(tail);
    nonce
}

/// Associated data of a rekey blob: `vm || epoch || session || "rekey"`.
fn rekey_aad(vm: u32, epoch: u32, session: u64) -> [u8; 21] {
    let mut aad = [0u8; 21];
    aad[..4].copy_from_slice(&vm.to_le_bytes());
    aad[4..8].copy_from_slice(&epoch.to_le_bytes());
    aad[8..16].copy_from_slice(&session.to_le_bytes());
    aad[16..].copy_from_slice(REKEY_LABEL);
    aad
}

impl RekeyBlob {
    /// Seals `new_key` for VM `vm` whose current key is `current_key` in
    /// key epoch `epoch` and device session `session` (`VM_KEY_EPOCH` and
    /// `VM_KEY_SESSION`), with the tenant's random `nonce_tail` (draw it
    /// from the operating system's random source for every blob).
    pub fn seal(
        current_key: &Key,
        vm: u32,
        epoch: u32,
        session: u64,
        new_key: &Key,
        nonce_tail: [u8; 8],
    ) -> Self {
        let aead = Aes256Gcm::new(session_key(current_key, vm, session, epoch).as_ref().into());
        let mut sealed_key = *new_key;
        let aad = rekey_aad(vm, epoch, session);
        // Encryption of 32 bytes in memory cannot fail; an empty tag would
        // only make the commit fail.
        let tag = aead
            .encrypt_in_place_detached(
                Nonce::from_slice(&rekey_nonce(&nonce_tail)),
                &aad,
                &mut sealed_key,
            )
            .map(|t| t.into())
            .unwrap_or([0; 16]);
        RekeyBlob {
            nonce_tail,
            sealed_key,
            tag,
        }
    }

    /// Opens the blob with `current`, the VM's current session key; the
    /// new key if the blob was sealed under that key for its VM, epoch and
    /// session.
    pub fn open(&self, current: &SessionCipher) -> Result<Zeroizing<Key>, OpenError> {
        let aad = rekey_aad(current.vm(), current.epoch(), current.session());
        let mut key = Zeroizing::new(self.sealed_key);
        current
            .aead()
            .decrypt_in_place_detached(
                Nonce::from_slice(&rekey_nonce(&self.nonce_tail)),
                &aad,
                key.as_mut_slice(),
                Tag::from_slice(&self.tag),
            )
            .map_err(|_| OpenError::Authentication)?;
        Ok(key)
    }

    /// The register writes (offset, value) that stage the blob and commit
    /// it for VM `vm`, in order ([`register_writes`]); run them as one
    /// register batch.
    pub fn register_writes(&self, vm: u32) -> Vec<(u64, u32)> {
        register_writes(vm, &self.to_words())
    }

    /// The blob as the 14 staging words, in register order (what
    /// `TENANT_IOC_REKEY` carries).
    pub fn to_words(self) -> [u32; REKEY_WORDS] {
        let mut bytes = [0u8; REKEY_WORDS * 4];
        bytes[..8].copy_from_slice(&self.nonce_tail);
        bytes[8..40].copy_from_slice(&self.sealed_key);
        bytes[40..].copy_from_slice(&self.tag);
        let mut words = [0u32; REKEY_WORDS];
        for (w, chunk) in words.iter_mut().zip(bytes.chunks_exact(4)) {
            *w = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        }
        words
    }

    /// The blob from its 14 staging words.
    pub fn from_words(words: &[u32; REKEY_WORDS]) -> Self {
        let mut bytes = [0u8; REKEY_WORDS * 4];
        for (chunk, w) in bytes.chunks_exact_mut(4).zip(words) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
        let mut blob = RekeyBlob {
            nonce_tail: [0; 8],
            sealed_key: [0; 32],
            tag: [0; 16],
        };
        blob.nonce_tail.copy_from_slice(&bytes[..8]);
        blob.sealed_key.copy_from_slice(&bytes[8..40]);
        blob.tag.copy_from_slice(&bytes[40..]);
        blob
    }
}

/// The register writes (offset, value) that stage a rekey blob (`words`
/// in staging-register order) and commit it for VM `vm`: the 14 staging
/// writes from `REKEY_NONCE` up, then `VM_KEY_COMMIT` = 1
/// (`docs/confidential.md`). Run them as one batch: the device opens the
/// blob at the commit, and a refused commit leaves every op of the batch
/// undone.
pub fn register_writes(vm: u32, words: &[u32; REKEY_WORDS]) -> Vec<(u64, u32)> {
    (r::REKEY_NONCE..)
        .step_by(4)
        .zip(words.iter().copied())
        .chain([(r::vm(vm, r::VM_KEY_COMMIT), 1)])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_vectors::{hex, KEY_1_TO_32};

    const CURRENT: Key = KEY_1_TO_32;
    const NEXT: Key = [0xA5; 32];
    const TAIL: [u8; 8] = [0xF0, 0xF1, 0xF2, 0xF3, 0xF4, 0xF5, 0xF6, 0xF7];

    /// The blob as an independent implementation of `docs/confidential.md`
    /// ("Rekeying with proof of the current key") computes it: Python's
    /// `cryptography` package, `AESGCM(session_key).encrypt(0xFFFFFFFF LE
    /// || tail, new key, vm LE || epoch LE || session LE || b"rekey")`,
    /// the session key by HKDF as in `envelope`'s test — not this crate.
    #[test]
    fn a_blob_matches_an_independent_implementation() {
        let blob = RekeyBlob::seal(&CURRENT, 4, 2, 0x0123_4567_89ab_cdef, &NEXT, TAIL);
        assert_eq!(blob.nonce_tail, TAIL);
        assert_eq!(
            blob.sealed_key.to_vec(),
            hex("fe90c42c8163d4a26f7a6650271127e61ef219411b526c55a344cb6ff86c7e51")
        );
        assert_eq!(blob.tag.to_vec(), hex("d71cb6dab1c5e861607c9f5bf698e0cb"));
    }

    #[test]
    fn a_blob_opens_only_under_its_key_for_its_vm_epoch_and_session_unaltered() {
        let current = SessionCipher::new(&CURRENT, 5, 77, 1);
        let blob = RekeyBlob::seal(&CURRENT, 5, 1, 77, &NEXT, TAIL);
        assert_eq!(blob.open(&current).as_deref(), Ok(&NEXT));
        for other in [
            SessionCipher::new(&[0; 32], 5, 77, 1),
            SessionCipher::new(&CURRENT, 6, 77, 1),
            SessionCipher::new(&CURRENT, 5, 78, 1),
            SessionCipher::new(&CURRENT, 5, 77, 2),
        ] {
            assert_eq!(
                blob.open(&other).err(),
                Some(OpenError::Authentication),
                "{other:?}"
            );
        }
        let words = blob.to_words();
        for word in 0..REKEY_WORDS {
            let mut altered = words;
            altered[word] ^= 0x0100;
            assert_eq!(
                RekeyBlob::from_words(&altered).open(&current).err(),
                Some(OpenError::Authentication),
                "word {word} (nonce, sealed key, tag)"
            );
        }
    }

    #[test]
    fn the_staging_words_carry_the_blob_in_register_order() {
        let blob = RekeyBlob::seal(&CURRENT, 2, 1, 3, &NEXT, TAIL);
        let words = blob.to_words();
        assert_eq!(words[0], u32::from_le_bytes([0xF0, 0xF1, 0xF2, 0xF3]));
        assert_eq!(RekeyBlob::from_words(&words), blob);
        let writes = blob.register_writes(2);
        assert_eq!(writes.len(), REKEY_WORDS + 1);
        assert_eq!(writes[0], (r::REKEY_NONCE, words[0]));
        assert_eq!(writes[2], (r::REKEY_KEY, words[2]));
        assert_eq!(writes[10], (r::REKEY_TAG, words[10]));
        assert_eq!(writes[REKEY_WORDS], (r::vm(2, r::VM_KEY_COMMIT), 1));
    }
}
