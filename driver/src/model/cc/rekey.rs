//! Rekeying with proof of the current key: a confidential VM's next key
//! reaches the device only sealed under the VM's current session key, in
//! the `REKEY_*` staging registers; the VM entry's `VM_KEY_COMMIT` opens it
//! and only then installs the key. The host, which does not hold the
//! current key, can neither forge a blob nor replay an old one: the blob's
//! associated data names the VM, the current key epoch and the session.
//!
//! [`RekeyBlob::seal`] is what the VM's trusted tenant tool runs;
//! [`RekeyBlob::register_writes`] lists the register writes (one atomic
//! batch) that stage and commit it.

use aes_gcm::aead::{AeadInPlace, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce, Tag};
use gpupm_uapi::regs::{self as r, REKEY_NONCE_DOMAIN};

use zeroize::Zeroizing;

use super::session::{session_key, Key, OpenError, VmCipher};
use crate::model::access::{r32, RegValue, Reject};

/// Label at the end of a rekey blob's associated data.
const REKEY_LABEL: &[u8; 5] = b"rekey";
/// Words of staging: nonce, sealed key, tag.
const STAGING_WORDS: usize = gpupm_client::ops::REKEY_WORDS;

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

/// The rekey nonce: the rekey domain, then the tenant's bytes.
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

    /// Opens the blob with `cipher`'s current session key; the new key if
    /// the blob was sealed for this VM, epoch and session under that key
    /// (never without a session).
    pub fn open(&self, cipher: &VmCipher) -> Result<Zeroizing<Key>, OpenError> {
        let aead = cipher.aead().ok_or(OpenError::Withheld)?;
        let aad = rekey_aad(cipher.vm(), cipher.key_epoch(), cipher.session());
        let mut key = Zeroizing::new(self.sealed_key);
        aead.decrypt_in_place_detached(
            Nonce::from_slice(&rekey_nonce(&self.nonce_tail)),
            &aad,
            key.as_mut_slice(),
            Tag::from_slice(&self.tag),
        )
        .map_err(|_| OpenError::Authentication)?;
        Ok(key)
    }

    /// The register writes (offset, value) that stage the blob and commit
    /// it for VM `vm`, in order ([`gpupm_client::ops::rekey_writes`]); run
    /// them as one register batch.
    pub fn register_writes(&self, vm: u32) -> Vec<(u64, u32)> {
        gpupm_client::ops::rekey_writes(vm, &self.to_words())
            .into_iter()
            .map(|op| (op.offset, gpupm_client::ops::reg32(op.value)))
            .collect()
    }

    /// The blob as the 14 staging words, in register order (what
    /// `TENANT_IOC_REKEY` carries).
    pub fn to_words(self) -> [u32; STAGING_WORDS] {
        let mut bytes = [0u8; STAGING_WORDS * 4];
        bytes[..8].copy_from_slice(&self.nonce_tail);
        bytes[8..40].copy_from_slice(&self.sealed_key);
        bytes[40..].copy_from_slice(&self.tag);
        let mut words = [0u32; STAGING_WORDS];
        for (w, chunk) in words.iter_mut().zip(bytes.chunks_exact(4)) {
            *w = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        }
        words
    }

    /// The blob from its 14 staging words.
    pub fn from_words(words: &[u32; STAGING_WORDS]) -> Self {
        let mut bytes = [0u8; STAGING_WORDS * 4];
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

/// The `REKEY_*` staging registers (write-only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RekeyStaging {
    words: [u32; STAGING_WORDS],
}

/// A checked write to a staging register: word `index` of the staging.
#[derive(Clone, Copy, Debug)]
pub struct StagingWrite {
    index: usize,
    word: u32,
}

impl RekeyStaging {
    /// Whether `offset` is a staging register.
    pub fn owns(offset: u64) -> bool {
        Self::index(offset).is_some()
    }

    fn index(offset: u64) -> Option<usize> {
        let rel = offset.checked_sub(r::REKEY_NONCE)?;
        let index = usize::try_from(rel / 4).ok()?;
        (rel % 4 == 0 && index < STAGING_WORDS).then_some(index)
    }

    /// Reads a staging register: write-only, reads 0.
    pub fn read(offset: u64) -> Option<RegValue> {
        Self::owns(offset).then_some(0).and_then(r32)
    }

    /// Checks a write of `v` and applies it to `shadow` (the batch's view).
    pub fn check_write(offset: u64, v: u32, shadow: &mut Self) -> Result<StagingWrite, Reject> {
        let index = Self::index(offset).ok_or(Reject::ReadOnly)?;
        shadow.words[index] = v;
        Ok(StagingWrite { index, word: v })
    }

    /// Executes a checked write.
    pub fn apply(&mut self, w: StagingWrite) {
        self.words[w.index] = w.word;
    }

    /// The staged blob.
    pub fn blob(&self) -> RekeyBlob {
        RekeyBlob::from_words(&self.words)
    }

    /// Clears the staging (after a successful commit, and at reset).
    pub fn clear(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blob_opens_only_for_its_vm_epoch_session_and_key() {
        let current = [3u8; 32];
        let next = [4u8; 32];
        let cipher = VmCipher::with_key(5, &current, 77);
        let blob = RekeyBlob::seal(&current, 5, 1, 77, &next, [9; 8]);
        assert_eq!(blob.open(&cipher).as_deref(), Ok(&next));
        assert_eq!(
            blob.open(&VmCipher::without_session(5)),
            Err(OpenError::Withheld),
            "no rekey without a session"
        );
        for bad in [
            RekeyBlob::seal(&[0u8; 32], 5, 1, 77, &next, [9; 8]),
            RekeyBlob::seal(&current, 6, 1, 77, &next, [9; 8]),
            RekeyBlob::seal(&current, 5, 2, 77, &next, [9; 8]),
            RekeyBlob::seal(&current, 5, 1, 78, &next, [9; 8]),
        ] {
            assert_eq!(bad.open(&cipher).err(), Some(OpenError::Authentication));
        }
        let mut flipped = blob;
        flipped.sealed_key[0] ^= 1;
        assert_eq!(flipped.open(&cipher).err(), Some(OpenError::Authentication));
    }

    #[test]
    fn register_writes_stage_the_blob_word_for_word() {
        let blob = RekeyBlob::seal(&[1; 32], 2, 1, 3, &[5; 32], [7; 8]);
        let writes = blob.register_writes(2);
        assert_eq!(writes.len(), STAGING_WORDS + 1);
        assert_eq!(writes.last(), Some(&(r::vm(2, r::VM_KEY_COMMIT), 1)));
        let mut staging = RekeyStaging::default();
        let mut shadow = staging;
        for &(offset, v) in &writes[..STAGING_WORDS] {
            let w = RekeyStaging::check_write(offset, v, &mut shadow).unwrap();
            staging.apply(w);
        }
        assert_eq!(staging, shadow);
        assert_eq!(staging.blob(), blob);
        assert_eq!(RekeyStaging::read(r::REKEY_TAG), r32(0));
        assert_eq!(RekeyStaging::read(r::REKEY_TAG + 16), None);
    }
}
