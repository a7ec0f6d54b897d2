//! The envelope of a host-visible slot and the AEAD that seals it.
//!
//! A confidential VM's blocks, stream records, samples, range records and
//! (debug) ledger answers leave the device as `envelope (32 bytes) ||
//! payload (ciphertext) || tag (16 bytes)`, sealed with AES-256-GCM under
//! the VM's *session key* ([`session_key`]), never under its key `K_vm`
//! directly. The 96-bit nonce is the VM id followed by a 64-bit counter;
//! the whole envelope is the associated data.
//!
//! [`SessionCipher::seal`] is the device's copy engine; the counter it
//! takes is the device's to keep (one per VM, never going back). [`open`]
//! is what the VM's trusted environment does: it derives the session key
//! from its `K_vm` and the envelope's VM, session and epoch.

use aes_gcm::aead::{AeadInPlace, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce};
use gpupm_uapi::layout::{envelope_flags, Envelope, ENVELOPE_AAD_LEN};
use zerocopy::IntoBytes;

use crate::schedule::{session_key, Key};

/// An AES-GCM tag.
pub type Tag = [u8; 16];

/// The AEAD of one VM's session key in one session and key epoch: what
/// seals the VM's slots and opens a rekey blob sealed under that key.
pub struct SessionCipher {
    vm: u32,
    session: u64,
    epoch: u32,
    aead: Aes256Gcm,
}

impl std::fmt::Debug for SessionCipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionCipher")
            .field("vm", &self.vm)
            .field("session", &self.session)
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

impl SessionCipher {
    /// The cipher of VM `vm` under `vm_key` in session `session` and key
    /// epoch `epoch`: AES-256-GCM under [`session_key`]`(vm_key, vm,
    /// session, epoch)`.
    pub fn new(vm_key: &Key, vm: u32, session: u64, epoch: u32) -> Self {
        SessionCipher {
            vm,
            session,
            epoch,
            aead: Aes256Gcm::new(session_key(vm_key, vm, session, epoch).as_ref().into()),
        }
    }

    /// The VM.
    pub fn vm(&self) -> u32 {
        self.vm
    }

    /// The session id.
    pub fn session(&self) -> u64 {
        self.session
    }

    /// The key epoch.
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// The AEAD itself (the rekey blob uses it with its own nonce domain).
    pub(crate) fn aead(&self) -> &Aes256Gcm {
        &self.aead
    }

    /// Encrypts `payload` in place under the nonce `vm (4 LE) || counter
    /// (8 LE)`; returns the envelope and tag to store beside it.
    ///
    /// `counter` must never repeat under this session key: the device
    /// keeps one counter per VM that only increases over the VM's whole
    /// life.
    pub fn seal(&self, counter: u64, payload: &mut [u8]) -> (Envelope, Tag) {
        let mut nonce = [0u8; 12];
        nonce[..4].copy_from_slice(&self.vm.to_le_bytes());
        nonce[4..].copy_from_slice(&counter.to_le_bytes());
        let envelope = Envelope {
            vm: self.vm,
            flags: envelope_flags::VALID | envelope_flags::ENCRYPTED,
            key_epoch: self.epoch,
            session_lo: low32(self.session),
            nonce,
            session_hi: low32(self.session >> 32),
        };
        let aad = &envelope.as_bytes()[..ENVELOPE_AAD_LEN];
        // Encryption of an in-memory buffer below the AES-GCM length limit
        // cannot fail; an empty tag would only make the slot fail to open.
        let tag = self
            .aead
            .encrypt_in_place_detached(Nonce::from_slice(&nonce), aad, payload)
            .map(|t| t.into())
            .unwrap_or([0; 16]);
        (envelope, tag)
    }
}

/// The envelope of a confidential VM's slot while the VM has no session:
/// `VALID | ENCRYPTED | WITHHELD` and every other byte 0 (the payload and
/// the tag are 0 too).
pub fn withheld(vm: u32) -> Envelope {
    Envelope {
        vm,
        flags: envelope_flags::VALID | envelope_flags::ENCRYPTED | envelope_flags::WITHHELD,
        ..Envelope::default()
    }
}

/// The low 32 bits of `x`.
fn low32(x: u64) -> u32 {
    u32::try_from(x & u64::from(u32::MAX)).unwrap_or(0)
}

/// Why a sealed slot did not open.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OpenError {
    /// The envelope does not say the payload is encrypted.
    #[error("the slot is not encrypted")]
    NotEncrypted,
    /// The VM had no session: nothing was sealed, the counts are held
    /// inside the device.
    #[error("the slot is withheld: the VM had no session")]
    Withheld,
    /// Wrong key, or the bytes were altered.
    #[error("authentication failed: wrong key or altered ciphertext")]
    Authentication,
}

/// Decrypts a sealed payload in place with the VM's key `vm_key` of the
/// envelope's key epoch (what the VM's trusted environment does; the host
/// never holds the key): derives the session key from the envelope's VM,
/// session and epoch, then opens.
pub fn open(
    vm_key: &Key,
    envelope: &Envelope,
    payload: &mut [u8],
    tag: &Tag,
) -> Result<(), OpenError> {
    if envelope.flags & envelope_flags::ENCRYPTED == 0 {
        return Err(OpenError::NotEncrypted);
    }
    if envelope.flags & envelope_flags::WITHHELD != 0 {
        return Err(OpenError::Withheld);
    }
    let key = session_key(vm_key, envelope.vm, envelope.session(), envelope.key_epoch);
    let aad = &envelope.as_bytes()[..ENVELOPE_AAD_LEN];
    Aes256Gcm::new(key.as_ref().into())
        .decrypt_in_place_detached(
            Nonce::from_slice(&envelope.nonce),
            aad,
            payload,
            aes_gcm::Tag::from_slice(tag),
        )
        .map_err(|_| OpenError::Authentication)
}
