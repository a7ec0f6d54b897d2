//! Confidential computing: the copy engine's encryption of a confidential
//! VM's blocks and stream records on their way to host-visible memory.
//!
//! AES-256-GCM under the VM's key. The 96-bit nonce is the VM id followed by
//! a per-VM 64-bit counter that only ever increases (it survives key
//! changes and device resets), so a (key, nonce) pair is never reused. The
//! envelope's first 16 bytes (VM, flags, key epoch) are bound as associated
//! data, so ciphertext cannot be replayed under another VM's envelope.
//!
//! Registers, per VM entry: `VM_FLAGS`, `VM_KEY` (eight staged key words),
//! `VM_KEY_COMMIT`, `VM_KEY_EPOCH` (a [`KeySlot`] inside the VM table).

use aes_gcm::aead::{AeadInPlace, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce, Tag};
use gpupm_uapi::layout::{envelope_flags, Envelope, ENVELOPE_AAD_LEN};
use gpupm_uapi::regs::{self as r, vm_flags};
use zerocopy::IntoBytes;

use super::access::{r32, RegValue, Reject};

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

/// Writes the envelope and tag of a host-visible slot whose `payload` was
/// just copied in: sealed under `cipher` for a confidential VM, plaintext
/// with a valid envelope naming `vm` otherwise.
pub fn seal(
    envelope: &mut Envelope,
    payload: &mut [u8],
    tag: &mut [u8; 16],
    vm: u32,
    cipher: Option<&mut VmCipher>,
) {
    match cipher {
        Some(c) => (*envelope, *tag) = c.seal(payload),
        None => {
            *envelope = Envelope {
                vm,
                flags: envelope_flags::VALID,
                ..Envelope::default()
            };
            *tag = [0; 16];
        }
    }
}

/// Words in an AES-256 key.
const KEY_WORDS: usize = 8;

/// A VM's key registers: the cipher of a confidential VM and the key words
/// staged for its next key.
#[derive(Clone, Debug, Default)]
pub struct KeySlot {
    cipher: Option<VmCipher>,
    staged: [u32; KEY_WORDS],
}

/// A checked write to a VM's key registers.
#[derive(Clone, Copy, Debug)]
pub enum KeyWrite {
    /// Stage word `index` of the next key.
    Word {
        /// Word index, below 8.
        index: usize,
        /// The word.
        word: u32,
    },
    /// Install the staged key.
    Commit,
}

impl KeySlot {
    /// The key slot of VM `vm`: confidential with `key`, or plaintext.
    pub fn new(vm: u32, key: Option<&[u8; 32]>) -> Self {
        KeySlot {
            cipher: key.map(|k| VmCipher::new(vm, k)),
            staged: [0; KEY_WORDS],
        }
    }

    /// The cipher, for a confidential VM.
    #[inline]
    pub fn cipher(&mut self) -> Option<&mut VmCipher> {
        self.cipher.as_mut()
    }

    /// A copy of the cipher (the device reset re-publishes blocks with it).
    pub fn cipher_copy(&self) -> Option<VmCipher> {
        self.cipher.clone()
    }

    /// Whether the VM is confidential.
    pub fn confidential(&self) -> bool {
        self.cipher.is_some()
    }

    /// Whether `offset` (inside a VM entry) is one of the key registers.
    pub fn owns(offset: u64) -> bool {
        offset == r::VM_FLAGS || (r::VM_KEY..=r::VM_KEY_EPOCH).contains(&offset)
    }

    /// Reads a key register (key words and commit read as 0).
    pub fn read(&self, offset: u64) -> Option<RegValue> {
        match offset {
            r::VM_FLAGS => r32(if self.confidential() {
                vm_flags::CONFIDENTIAL
            } else {
                0
            }),
            o if key_word(o).is_some() => r32(0),
            r::VM_KEY_COMMIT => r32(0),
            r::VM_KEY_EPOCH => r32(self.cipher.as_ref().map_or(0, VmCipher::key_epoch)),
            _ => None,
        }
    }

    /// Checks a write of `v` to a key register.
    pub fn check_write(&self, offset: u64, v: u32) -> Result<KeyWrite, Reject> {
        let confidential = self.confidential();
        match (key_word(offset), offset) {
            (Some(index), _) if confidential => Ok(KeyWrite::Word { index, word: v }),
            (None, r::VM_KEY_COMMIT) if confidential && v == 1 => Ok(KeyWrite::Commit),
            (Some(_), _) | (None, r::VM_KEY_COMMIT) => Err(Reject::BadValue(
                "keys exist only for confidential VMs; commit with 1",
            )),
            _ => Err(Reject::ReadOnly),
        }
    }

    /// Executes a checked write.
    pub fn apply(&mut self, w: KeyWrite) {
        match w {
            KeyWrite::Word { index, word } => self.staged[index] = word,
            KeyWrite::Commit => {
                let mut key = [0u8; 32];
                for (chunk, w) in key.chunks_exact_mut(4).zip(self.staged) {
                    chunk.copy_from_slice(&w.to_le_bytes());
                }
                if let Some(c) = self.cipher.as_mut() {
                    c.rekey(&key);
                }
            }
        }
    }
}

/// Index of the staged key word at `offset`, if it is one.
fn key_word(offset: u64) -> Option<usize> {
    let rel = offset.checked_sub(r::VM_KEY)?;
    let index = usize::try_from(rel / 4).ok()?;
    (rel % 4 == 0 && index < KEY_WORDS).then_some(index)
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

    #[test]
    fn staged_key_words_install_on_commit_and_plain_vms_refuse_keys() {
        let mut slot = KeySlot::new(4, Some(&[1; 32]));
        for i in 0..8u64 {
            let w = slot.check_write(r::VM_KEY + 4 * i, 0x0202_0202).unwrap();
            slot.apply(w);
        }
        let commit = slot.check_write(r::VM_KEY_COMMIT, 1).unwrap();
        slot.apply(commit);
        assert_eq!(slot.read(r::VM_KEY_EPOCH), r32(2));
        let mut buf = [9u8; 16];
        let (env, tag) = slot.cipher().unwrap().seal(&mut buf);
        open(&[2; 32], &env, &mut buf, &tag).unwrap();
        assert_eq!(buf, [9u8; 16]);
        let plain = KeySlot::new(5, None);
        assert!(matches!(
            plain.check_write(r::VM_KEY, 1),
            Err(Reject::BadValue(_))
        ));
        assert_eq!(
            plain.check_write(r::VM_KEY_EPOCH, 1).err(),
            Some(Reject::ReadOnly)
        );
        assert_eq!(plain.read(r::VM_FLAGS), r32(0));
    }
}
