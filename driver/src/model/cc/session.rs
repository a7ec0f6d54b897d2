//! A confidential VM's sessions and the copy engine's sealing.
//!
//! The device never seals under a VM's key `K_vm` directly: it seals a
//! VM's blocks and records with the VM's *session key*
//! `HKDF-SHA256(ikm = K_vm, salt = session, info = "gpupm-cc-v1" || vm ||
//! key epoch)` ([`gpupm_cc::SessionCipher`], where the envelope's format
//! is). A session is established by the key exchange
//! (`super::exchange`), which gives it a fresh id and a fresh `K_vm`; a
//! rekey replaces `K_vm` and bumps the epoch. The 96-bit nonce is the VM
//! id followed by a counter that only increases over the VM's whole life
//! in this device ([`VmCipher`] keeps it), so no (key, nonce) pair is ever
//! reused, across sessions, resets, rekeys and driver restarts alike.
//!
//! A confidential VM without a session publishes nothing readable: its
//! slots are *withheld* (envelope `VALID | ENCRYPTED | WITHHELD`, every
//! other byte 0) while the device keeps its counts.

use gpupm_cc::envelope::withheld;
use gpupm_cc::{session_key, Key, OpenError, RekeyBlob, SessionCipher, Tag};
use gpupm_uapi::layout::{envelope_flags, Envelope};
use zerocopy::IntoBytes;
use zeroize::Zeroizing;

/// Where a VM's session came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A key written in the scenario (`--insecure-scenario-keys`): known
    /// to the host. A reset starts a new session under the same key.
    Scenario,
    /// The key exchange with the VM's tenant. A reset ends it.
    Exchange,
}

/// An established session: its key, origin and cipher (which holds its
/// id and epoch).
struct Session {
    vm_key: Zeroizing<Key>,
    origin: Origin,
    cipher: SessionCipher,
}

impl Session {
    fn new(vm: u32, id: u64, vm_key: &Key, epoch: u32, origin: Origin) -> Self {
        Session {
            vm_key: Zeroizing::new(*vm_key),
            origin,
            cipher: SessionCipher::new(vm_key, vm, id, epoch),
        }
    }

    fn id(&self) -> u64 {
        self.cipher.session()
    }

    fn epoch(&self) -> u32 {
        self.cipher.epoch()
    }
}

/// A confidential VM's session (if it has one) and nonce counter.
///
/// Not `Clone`: a copy would seal with the same key and counter as the
/// original, reusing nonces. There is exactly one per confidential VM.
pub struct VmCipher {
    vm: u32,
    counter: u64,
    session: Option<Session>,
}

impl std::fmt::Debug for VmCipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VmCipher")
            .field("vm", &self.vm)
            .field("key_epoch", &self.key_epoch())
            .field("session", &self.session())
            .field("counter", &self.counter)
            .finish_non_exhaustive()
    }
}

impl VmCipher {
    /// A confidential VM without a session: it withholds everything.
    pub fn without_session(vm: u32) -> Self {
        VmCipher {
            vm,
            counter: 0,
            session: None,
        }
    }

    /// A confidential VM with a session under a key from the scenario
    /// (epoch 1, id `session`).
    pub fn with_key(vm: u32, vm_key: &Key, session: u64) -> Self {
        VmCipher {
            vm,
            counter: 0,
            session: Some(Session::new(vm, session, vm_key, 1, Origin::Scenario)),
        }
    }

    /// The device was reset (a new device session `session`): a session
    /// the key exchange established ends; one under a scenario key goes on
    /// under a new id.
    pub fn start_session(&mut self, session: u64) {
        self.session = match self.session.take() {
            Some(s) if s.origin == Origin::Scenario => Some(Session::new(
                self.vm,
                session,
                &s.vm_key,
                s.epoch(),
                Origin::Scenario,
            )),
            _ => None,
        };
    }

    /// Installs the session a key exchange established: id `session`,
    /// first key `vm_key` (epoch 1). Replaces any current one.
    pub fn establish(&mut self, session: u64, vm_key: &Key) {
        self.session = Some(Session::new(self.vm, session, vm_key, 1, Origin::Exchange));
    }

    /// Installs `vm_key` as the VM's key of the next epoch (no-op without
    /// a session: a rekey cannot be checked then).
    pub fn rekey(&mut self, vm_key: &Key) {
        if let Some(s) = self.session.take() {
            self.session = Some(Session::new(
                self.vm,
                s.id(),
                vm_key,
                s.epoch().saturating_add(1),
                s.origin,
            ));
        }
    }

    /// Key epoch within the session (0 without one).
    pub fn key_epoch(&self) -> u32 {
        self.session.as_ref().map_or(0, Session::epoch)
    }

    /// The session id (0 without one).
    pub fn session(&self) -> u64 {
        self.session.as_ref().map_or(0, Session::id)
    }

    /// Whether the VM has a session.
    pub fn has_session(&self) -> bool {
        self.session.is_some()
    }

    /// Where the session came from, if there is one.
    pub fn origin(&self) -> Option<Origin> {
        self.session.as_ref().map(|s| s.origin)
    }

    /// The VM.
    pub fn vm(&self) -> u32 {
        self.vm
    }

    /// The current session key (what a FINISH replacing the session must
    /// prove), if there is a session.
    pub(super) fn current_session_key(&self) -> Option<Zeroizing<Key>> {
        let s = self.session.as_ref()?;
        Some(session_key(&s.vm_key, self.vm, s.id(), s.epoch()))
    }

    /// Opens a rekey blob with the current session key: the new key if
    /// the blob was sealed under it for this VM, epoch and session (never
    /// without a session).
    pub fn open_rekey(&self, blob: &RekeyBlob) -> Result<Zeroizing<Key>, OpenError> {
        let s = self.session.as_ref().ok_or(OpenError::Withheld)?;
        blob.open(&s.cipher)
    }

    /// Encrypts `payload` in place with the next nonce; returns the
    /// envelope and tag to store beside it. Without a session the payload
    /// is zeroed and the envelope says `WITHHELD`.
    pub fn seal(&mut self, payload: &mut [u8]) -> (Envelope, Tag) {
        let Some(s) = self.session.as_ref() else {
            payload.fill(0);
            return (withheld(self.vm), [0; 16]);
        };
        self.counter += 1;
        s.cipher.seal(self.counter, payload)
    }
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

#[cfg(test)]
mod tests {
    use gpupm_cc::open;

    use super::*;

    #[test]
    fn seal_then_open_round_trips_and_nonces_never_repeat() {
        let key = [7u8; 32];
        let mut c = VmCipher::with_key(3, &key, 0x1234_5678_9abc_def0);
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
    fn without_a_session_nothing_is_sealed_and_a_reset_ends_an_exchanged_session() {
        let mut c = VmCipher::without_session(4);
        let mut buf = [7u8; 40];
        let (env, tag) = c.seal(&mut buf);
        assert_eq!(buf, [0; 40], "a withheld payload is zeroed");
        assert_eq!(tag, [0; 16]);
        assert_eq!(
            env,
            Envelope {
                vm: 4,
                flags: envelope_flags::VALID | envelope_flags::ENCRYPTED | envelope_flags::WITHHELD,
                ..Envelope::default()
            }
        );
        assert_eq!(
            open(&[0; 32], &env, &mut buf, &tag),
            Err(OpenError::Withheld)
        );
        c.rekey(&[1; 32]);
        assert!(!c.has_session(), "no rekey without a session");
        c.establish(77, &[2; 32]);
        assert_eq!((c.session(), c.key_epoch()), (77, 1));
        let mut buf = [7u8; 40];
        let (env, tag) = c.seal(&mut buf);
        open(&[2; 32], &env, &mut buf, &tag).unwrap();
        assert_eq!(buf, [7; 40]);
        c.start_session(78);
        assert!(!c.has_session(), "a reset ends an exchanged session");
        let mut s = VmCipher::with_key(4, &[3; 32], 5);
        s.rekey(&[4; 32]);
        s.start_session(6);
        assert_eq!(
            (s.session(), s.key_epoch(), s.origin()),
            (6, 2, Some(Origin::Scenario)),
            "a scenario key's session goes on under a new id"
        );
    }

    #[test]
    fn wrong_key_or_tampered_envelope_fails() {
        let mut c = VmCipher::with_key(1, &[1; 32], 9);
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
