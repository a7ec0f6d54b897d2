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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_vectors::{hex, KEY_1_TO_32};

    const K_VM: Key = KEY_1_TO_32;
    const VM: u32 = 4;
    const SESSION: u64 = 0x0123_4567_89ab_cdef;
    const EPOCH: u32 = 2;

    /// The session key and one sealed slot as an independent implementation
    /// of `docs/confidential.md` ("Session keys and nonces") computes them:
    /// Python's `cryptography` package (`HKDF(SHA256(), 32, salt = session
    /// LE, info = b"gpupm-cc-v1" + vm LE + epoch LE)`, then `AESGCM(key)
    /// .encrypt(vm LE || counter LE, payload, envelope)`), not this crate.
    #[test]
    fn session_key_and_seal_match_an_independent_implementation() {
        assert_eq!(
            session_key(&K_VM, VM, SESSION, EPOCH).to_vec(),
            hex("9fe5f582ac6714e9e1ddbf9ef26becaa778a503312f7b69de142f096f9bb6414")
        );
        let c = SessionCipher::new(&K_VM, VM, SESSION, EPOCH);
        let mut payload = *b"gpupm sealed payload, 32 bytes!!";
        let (envelope, tag) = c.seal(7, &mut payload);
        assert_eq!(
            envelope,
            Envelope {
                vm: VM,
                flags: envelope_flags::VALID | envelope_flags::ENCRYPTED,
                key_epoch: EPOCH,
                session_lo: 0x89ab_cdef,
                nonce: [4, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0],
                session_hi: 0x0123_4567,
            }
        );
        assert_eq!(
            payload.to_vec(),
            hex("0f9ef7b1ccdaa8ab908125def33a838f65ba2c8173f19460ee354107579fce49")
        );
        assert_eq!(tag.to_vec(), hex("8b1a6dd0683116539e279d90d6e29877"));
    }

    #[test]
    fn seal_then_open_round_trips() {
        let c = SessionCipher::new(&K_VM, VM, SESSION, EPOCH);
        assert_eq!((c.vm(), c.session(), c.epoch()), (VM, SESSION, EPOCH));
        for (counter, len) in [(1, 0), (2, 1), (3, 48), (u64::MAX, 1536)] {
            let plain: Vec<u8> = (0..len).map(|i| u8::try_from(i % 251).unwrap()).collect();
            let mut buf = plain.clone();
            let (envelope, tag) = c.seal(counter, &mut buf);
            assert_eq!(envelope.nonce[4..], counter.to_le_bytes());
            if len > 0 {
                assert_ne!(buf, plain, "the payload is encrypted");
            }
            open(&K_VM, &envelope, &mut buf, &tag).unwrap();
            assert_eq!(buf, plain);
        }
    }

    #[test]
    fn an_altered_tag_envelope_nonce_or_payload_or_another_key_fails() {
        let c = SessionCipher::new(&K_VM, VM, SESSION, EPOCH);
        let mut sealed = [0x5au8; 40];
        let (envelope, tag) = c.seal(1, &mut sealed);
        let attempt = |key: &Key, envelope: &Envelope, payload: &[u8; 40], tag: &Tag| {
            let mut buf = *payload;
            open(key, envelope, &mut buf, tag)
        };
        assert_eq!(attempt(&K_VM, &envelope, &sealed, &tag), Ok(()));
        assert_eq!(
            attempt(&[0; 32], &envelope, &sealed, &tag),
            Err(OpenError::Authentication)
        );
        for bit in 0..128 {
            let mut bad = tag;
            bad[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(
                attempt(&K_VM, &envelope, &sealed, &bad),
                Err(OpenError::Authentication),
                "tag bit {bit}"
            );
        }
        for byte in 0..sealed.len() {
            let mut bad = sealed;
            bad[byte] ^= 0x01;
            assert_eq!(
                attempt(&K_VM, &envelope, &bad, &tag),
                Err(OpenError::Authentication),
                "payload byte {byte}"
            );
        }
        // Every byte of the envelope is associated data (the bit flipped is
        // none of the flags `open` reads first: see the next test).
        for byte in 0..ENVELOPE_AAD_LEN {
            let mut bytes = [0u8; 32];
            bytes.copy_from_slice(envelope.as_bytes());
            bytes[byte] ^= 0x80;
            let bad: Envelope = zerocopy::transmute!(bytes);
            assert_eq!(
                attempt(&K_VM, &bad, &sealed, &tag),
                Err(OpenError::Authentication),
                "envelope byte {byte}"
            );
        }
    }

    #[test]
    fn a_withheld_or_plaintext_slot_is_not_opened() {
        let mut buf = [0u8; 16];
        let envelope = withheld(9);
        assert_eq!(
            (envelope.vm, envelope.flags),
            (
                9,
                envelope_flags::VALID | envelope_flags::ENCRYPTED | envelope_flags::WITHHELD
            )
        );
        assert_eq!(
            Envelope {
                vm: 0,
                flags: 0,
                ..envelope
            },
            Envelope::default(),
            "nothing else is set"
        );
        assert_eq!(
            open(&K_VM, &envelope, &mut buf, &[0; 16]),
            Err(OpenError::Withheld)
        );
        let plain = Envelope {
            vm: 9,
            flags: envelope_flags::VALID,
            ..Envelope::default()
        };
        assert_eq!(
            open(&K_VM, &plain, &mut buf, &[0; 16]),
            Err(OpenError::NotEncrypted)
        );
    }
}
