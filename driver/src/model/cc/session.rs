//! Session keys and the copy engine's sealing.
//!
//! The device never seals under a VM's key `K_vm` directly. At every
//! device start and reset it draws a fresh 64-bit session (boot) id, and
//! seals a VM's blocks and records with the VM's *session key*
//! `HKDF-SHA256(ikm = K_vm, salt = session, info = "gpupm-cc-v1" || vm ||
//! key epoch)`. The 96-bit nonce is the VM id followed by a counter that
//! only increases, so within one session key no nonce repeats, and a new
//! session or a new key epoch is a new key: the (key, nonce) pair of a
//! seal is never reused, across resets, rekeys and driver restarts alike.

use aes_gcm::aead::{AeadInPlace, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce, Tag};
use gpupm_uapi::layout::{envelope_flags, Envelope, ENVELOPE_AAD_LEN, SESSION_KEY_INFO};
use hkdf::Hkdf;
use sha2::Sha256;
use zerocopy::IntoBytes;

/// An AES-256 key.
pub type Key = [u8; 32];

/// The session key of `vm` under `vm_key` in session `session` and key
/// epoch `epoch` (what the VM's trusted environment derives from the
/// envelope to open a slot).
pub fn session_key(vm_key: &Key, vm: u32, session: u64, epoch: u32) -> Key {
    let hk = Hkdf::<Sha256>::new(Some(&session.to_le_bytes()), vm_key);
    let mut info = [0u8; SESSION_KEY_INFO.len() + 8];
    let (label, ids) = info.split_at_mut(SESSION_KEY_INFO.len());
    label.copy_from_slice(SESSION_KEY_INFO);
    ids[..4].copy_from_slice(&vm.to_le_bytes());
    ids[4..].copy_from_slice(&epoch.to_le_bytes());
    let mut okm = [0u8; 32];
    // 32 bytes is far below HKDF-SHA256's limit of 255 hash lengths, the
    // only way expansion can fail.
    match hk.expand(&info, &mut okm) {
        Ok(()) => okm,
        Err(_) => [0; 32],
    }
}

/// A confidential VM's key, its current session key and nonce counter.
///
/// Not `Clone`: a copy would seal with the same key and counter as the
/// original, reusing nonces. There is exactly one per confidential VM.
pub struct VmCipher {
    vm: u32,
    vm_key: Key,
    key_epoch: u32,
    session: u64,
    aead: Aes256Gcm,
    counter: u64,
}

impl std::fmt::Debug for VmCipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VmCipher")
            .field("vm", &self.vm)
            .field("key_epoch", &self.key_epoch)
            .field("session", &self.session)
            .field("counter", &self.counter)
            .finish_non_exhaustive()
    }
}

impl VmCipher {
    /// A cipher for `vm` with its provisioned key (epoch 1) in `session`.
    pub fn new(vm: u32, vm_key: &Key, session: u64) -> Self {
        VmCipher {
            vm,
            vm_key: *vm_key,
            key_epoch: 1,
            session,
            aead: Aes256Gcm::new(&session_key(vm_key, vm, session, 1).into()),
            counter: 0,
        }
    }

    /// Moves to a new session (device reset): a new session key.
    pub fn start_session(&mut self, session: u64) {
        self.session = session;
        self.derive();
    }

    /// Installs `vm_key` as the VM's key of the next epoch.
    pub fn rekey(&mut self, vm_key: &Key) {
        self.vm_key = *vm_key;
        self.key_epoch += 1;
        self.derive();
    }

    fn derive(&mut self) {
        let key = session_key(&self.vm_key, self.vm, self.session, self.key_epoch);
        self.aead = Aes256Gcm::new(&key.into());
    }

    /// Key epoch (number of keys installed; 1 = the provisioned key).
    pub fn key_epoch(&self) -> u32 {
        self.key_epoch
    }

    /// The session (boot) id the cipher seals in.
    pub fn session(&self) -> u64 {
        self.session
    }

    /// The VM.
    pub fn vm(&self) -> u32 {
        self.vm
    }

    /// The AEAD under the current session key (the rekey blob is opened
    /// with it).
    pub(super) fn aead(&self) -> &Aes256Gcm {
        &self.aead
    }

    /// Encrypts `payload` in place with the next nonce; returns the
    /// envelope and tag to store beside it.
    pub fn seal(&mut self, payload: &mut [u8]) -> (Envelope, [u8; 16]) {
        self.counter += 1;
        let mut nonce = [0u8; 12];
        nonce[..4].copy_from_slice(&self.vm.to_le_bytes());
        nonce[4..].copy_from_slice(&self.counter.to_le_bytes());
        let envelope = Envelope {
            vm: self.vm,
            flags: envelope_flags::VALID | envelope_flags::ENCRYPTED,
            key_epoch: self.key_epoch,
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

/// The low 32 bits of `x`.
fn low32(x: u64) -> u32 {
    u32::try_from(x & u64::from(u32::MAX)).unwrap_or(0)
}

/// Writes the envelope and tag of a host-visible slot whose `payload` was
/// just copied in: sealed by `cipher` for a confidential VM, plaintext with
/// a valid envelope naming `vm` otherwise.
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

/// Copies `record` into a host-visible ring `slot` (envelope, payload,
/// 16-byte tag) and seals it as [`seal`] does.
pub fn seal_into_slot(slot: &mut [u8], record: &[u8], vm: u32, cipher: Option<&mut VmCipher>) {
    let (env_bytes, rest) = slot.split_at_mut(core::mem::size_of::<Envelope>());
    let (payload, tag) = rest.split_at_mut(record.len());
    payload.copy_from_slice(record);
    let mut envelope = Envelope::default();
    let mut tag16 = [0u8; 16];
    seal(&mut envelope, payload, &mut tag16, vm, cipher);
    env_bytes.copy_from_slice(envelope.as_bytes());
    tag.copy_from_slice(&tag16);
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

/// Decrypts a sealed payload in place with the VM's key `vm_key` of the
/// envelope's key epoch (what the VM's trusted environment does; the host
/// never holds the key): derives the session key from the envelope's VM,
/// session and epoch, then opens.
pub fn open(
    vm_key: &Key,
    envelope: &Envelope,
    payload: &mut [u8],
    tag: &[u8; 16],
) -> Result<(), OpenError> {
    if envelope.flags & envelope_flags::ENCRYPTED == 0 {
        return Err(OpenError::NotEncrypted);
    }
    let key = session_key(vm_key, envelope.vm, envelope.session(), envelope.key_epoch);
    let aad = &envelope.as_bytes()[..ENVELOPE_AAD_LEN];
    Aes256Gcm::new(&key.into())
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
        let mut c = VmCipher::new(3, &key, 0x1234_5678_9abc_def0);
        let mut seen = std::collections::HashSet::new();
        for i in 0..100u8 {
            let plain = [i; 48];
            let mut buf = plain;
            let (env, tag) = c.seal(&mut buf);
            assert_ne!(buf, plain);
            let session = if i > 70 { 42 } else { 0x1234_5678_9abc_def0 };
            assert_eq!(env.session(), session);
            assert!(
                seen.insert((env.session(), env.key_epoch, env.nonce)),
                "nonce reused"
            );
            if i == 50 {
                c.rekey(&[9u8; 32]);
            }
            if i == 70 {
                c.start_session(42);
            }
            let k = if i > 50 { [9u8; 32] } else { key };
            open(&k, &env, &mut buf, &tag).unwrap();
            assert_eq!(buf, plain);
        }
    }

    #[test]
    fn session_keys_differ_by_session_epoch_vm_and_key() {
        let k = [1u8; 32];
        let base = session_key(&k, 1, 5, 1);
        assert_ne!(base, session_key(&k, 1, 6, 1));
        assert_ne!(base, session_key(&k, 1, 5, 2));
        assert_ne!(base, session_key(&k, 2, 5, 1));
        assert_ne!(base, session_key(&[2u8; 32], 1, 5, 1));
        assert_eq!(base, session_key(&k, 1, 5, 1));
    }

    #[test]
    fn wrong_key_or_tampered_envelope_fails() {
        let mut c = VmCipher::new(1, &[1; 32], 9);
        let mut buf = [5u8; 32];
        let (env, tag) = c.seal(&mut buf);
        let mut copy = buf;
        assert_eq!(
            open(&[2; 32], &env, &mut copy, &tag),
            Err(OpenError::Authentication)
        );
        for tamper in [
            |e: &mut Envelope| e.vm = 2,
            |e: &mut Envelope| e.session_hi ^= 1,
            |e: &mut Envelope| e.key_epoch = 2,
            |e: &mut Envelope| e.nonce[11] ^= 1,
        ] {
            let mut bad = env;
            tamper(&mut bad);
            let mut copy = buf;
            assert_eq!(
                open(&[1; 32], &bad, &mut copy, &tag),
                Err(OpenError::Authentication)
            );
        }
    }
}
