//! Rekeying with proof of the current key: a confidential VM's next key
//! reaches the device only sealed under the VM's current session key, in
//! the `REKEY_*` staging registers; the VM entry's `VM_KEY_COMMIT` opens it
//! (with [`VmCipher::open_rekey`](super::VmCipher::open_rekey)) and only
//! then installs the key. The blob itself — how the tenant seals it, its
//! nonce and associated data — is [`gpupm_cc::RekeyBlob`]; this file is
//! the device's staging registers.

use gpupm_cc::{RekeyBlob, REKEY_WORDS as STAGING_WORDS};
use gpupm_uapi::regs as r;

use crate::model::access::{r32, RegValue, Reject};

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
    use gpupm_cc::OpenError;

    use super::super::session::VmCipher;
    use super::*;

    #[test]
    fn a_blob_opens_only_for_its_vm_epoch_session_and_key() {
        let current = [3u8; 32];
        let next = [4u8; 32];
        let cipher = VmCipher::with_key(5, &current, 77);
        let blob = RekeyBlob::seal(&current, 5, 1, 77, &next, [9; 8]);
        assert_eq!(cipher.open_rekey(&blob).as_deref(), Ok(&next));
        assert_eq!(
            VmCipher::without_session(5).open_rekey(&blob),
            Err(OpenError::Withheld),
            "no rekey without a session"
        );
        for bad in [
            RekeyBlob::seal(&[0u8; 32], 5, 1, 77, &next, [9; 8]),
            RekeyBlob::seal(&current, 6, 1, 77, &next, [9; 8]),
            RekeyBlob::seal(&current, 5, 2, 77, &next, [9; 8]),
            RekeyBlob::seal(&current, 5, 1, 78, &next, [9; 8]),
        ] {
            assert_eq!(
                cipher.open_rekey(&bad).err(),
                Some(OpenError::Authentication)
            );
        }
        let mut flipped = blob;
        flipped.sealed_key[0] ^= 1;
        assert_eq!(
            cipher.open_rekey(&flipped).err(),
            Some(OpenError::Authentication)
        );
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
