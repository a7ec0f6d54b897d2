//! The device's side of the key exchange (`gpupm_uapi::cc`): it answers a
//! tenant's KEY_EXCHANGE with its ephemeral share, a fresh session id, its
//! certificate, its signature over the transcript and its verify data, and
//! keeps one pending exchange per VM; a FINISH whose verify data checks
//! (and, when the VM has a session, whose proof of that session checks)
//! makes the pending session the VM's.
//!
//! Every secret of an exchange — the ephemeral key, the shared secret, the
//! finished keys, the new `K_vm` — lives only here (inside the device) and
//! is zeroized when the exchange ends.

use gpupm_cc::schedule::{self, Handshake, Hash, Key};
use gpupm_uapi::cc::{finish_flags, Finish, KeyExchange, CC_VERIFY_LEN};
use gpupm_uapi::regs::MAX_VMS;
use rand_core::OsRng;
use x25519_dalek::{EphemeralSecret, PublicKey};
use zeroize::Zeroizing;

use super::identity::DeviceIdentity;
use super::session::VmCipher;

/// Why the device refused an exchange message.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum ExchangeError {
    /// The driver runs without a device identity.
    #[error("the device has no identity (the driver was started without --identity)")]
    NoIdentity,
    /// The VM does not exist or is not confidential.
    #[error("VM {0} is not a confidential VM")]
    NotConfidential(u32),
    /// The tenant's key share is a small-order point.
    #[error("the key share gives no shared secret")]
    NotContributory,
    /// No pending exchange of this VM has this session id.
    #[error("no pending key exchange of VM {0} has this session id")]
    NoPending(u32),
    /// The tenant's verify data does not check.
    #[error("the requester's verify data does not check")]
    Verify,
    /// The VM has a session and the FINISH does not prove it.
    #[error("VM {0} has an established session: replacing it needs proof of its key")]
    SessionExists(u32),
    /// The proof of the current session does not check.
    #[error("the proof of the VM's current session does not check")]
    Proof,
    /// The random source failed.
    #[error("the operating system's random source failed: {0}")]
    Entropy(String),
}

/// An answered exchange waiting for its FINISH.
struct Pending {
    session: u64,
    th2: Hash,
    th3: Hash,
    handshake: Handshake,
    vm_key: Zeroizing<Key>,
}

/// A FINISH that checked: the session to install.
pub struct Established {
    /// Its id.
    pub session: u64,
    /// Its first key (epoch 1).
    pub vm_key: Zeroizing<Key>,
}

impl std::fmt::Debug for Established {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Established")
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

/// The device's exchange state: its identity and a pending exchange per VM.
pub struct Responder {
    identity: Option<DeviceIdentity>,
    pending: Vec<Option<Pending>>,
}

impl Default for Responder {
    fn default() -> Self {
        Responder {
            identity: None,
            pending: (0..MAX_VMS).map(|_| None).collect(),
        }
    }
}

impl std::fmt::Debug for Responder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Responder")
            .field("identity", &self.identity)
            .field(
                "pending",
                &self.pending.iter().filter(|p| p.is_some()).count(),
            )
            .finish()
    }
}

impl Responder {
    /// Gives the device its identity.
    pub fn set_identity(&mut self, identity: DeviceIdentity) {
        self.identity = Some(identity);
    }

    /// Whether the device has an identity.
    pub fn has_identity(&self) -> bool {
        self.identity.is_some()
    }

    /// Drops every pending exchange (device reset).
    pub fn clear(&mut self) {
        for p in &mut self.pending {
            *p = None;
        }
    }

    /// Answers `msg` (its request fields set, its output fields 0) for
    /// confidential VM `vm` (`cipher` is its cipher, `None` if `vm` is not
    /// confidential): fills the output fields and keeps the exchange
    /// pending, replacing an earlier pending one of the VM.
    pub fn key_exchange(
        &mut self,
        msg: &mut KeyExchange,
        cipher: Option<&VmCipher>,
    ) -> Result<(), ExchangeError> {
        let vm = msg.vm;
        let identity = self.identity.as_ref().ok_or(ExchangeError::NoIdentity)?;
        let slot = self
            .pending
            .get_mut(vm as usize)
            .filter(|_| cipher.is_some())
            .ok_or(ExchangeError::NotConfidential(vm))?;
        let secret = EphemeralSecret::random_from_rng(OsRng);
        msg.responder_share = PublicKey::from(&secret).to_bytes();
        let shared = secret.diffie_hellman(&PublicKey::from(msg.requester_share));
        if !shared.was_contributory() {
            clear_outputs(msg);
            return Err(ExchangeError::NotContributory);
        }
        let mut session = 0u64;
        let mut random = [0u8; 8];
        while session == 0 {
            getrandom::getrandom(&mut random).map_err(|e| ExchangeError::Entropy(e.to_string()))?;
            session = u64::from_le_bytes(random);
        }
        getrandom::getrandom(&mut msg.responder_nonce)
            .map_err(|e| ExchangeError::Entropy(e.to_string()))?;
        msg.session = session;
        msg.cert = *identity.cert();
        let th1 = schedule::th1(vm, msg, msg);
        msg.signature = identity.sign(&schedule::signed_message(&th1)).to_bytes();
        let handshake = Handshake::new(shared.as_bytes());
        let th2 = schedule::th2(&th1, &msg.signature);
        msg.responder_verify = handshake.responder_verify(&th2);
        let th3 = schedule::th3(&th2, &msg.responder_verify);
        let vm_key = handshake.vm_key(&th3);
        *slot = Some(Pending {
            session,
            th2,
            th3,
            handshake,
            vm_key,
        });
        Ok(())
    }

    /// Checks `msg` against VM `msg.vm`'s pending exchange (which any
    /// attempt consumes) and, when the VM has a session (`cipher`), the
    /// proof of it. The session to install if everything checks.
    pub fn finish(
        &mut self,
        msg: &Finish,
        cipher: Option<&VmCipher>,
    ) -> Result<Established, ExchangeError> {
        let vm = msg.vm;
        let cipher = cipher.ok_or(ExchangeError::NotConfidential(vm))?;
        let slot = self
            .pending
            .get_mut(vm as usize)
            .ok_or(ExchangeError::NotConfidential(vm))?;
        let Some(p) = slot.take_if(|p| p.session == msg.session) else {
            return Err(ExchangeError::NoPending(vm));
        };
        let expected = p.handshake.requester_verify(&p.th2, &p.th3);
        if !equal(&expected, &msg.requester_verify) {
            return Err(ExchangeError::Verify);
        }
        match (
            cipher.current_session_key(),
            msg.flags & finish_flags::REPLACE != 0,
        ) {
            (None, false) if msg.replace_proof == [0; CC_VERIFY_LEN] => {}
            (None, _) => return Err(ExchangeError::Proof),
            (Some(_), false) => return Err(ExchangeError::SessionExists(vm)),
            (Some(current), true) => {
                let proof = schedule::replace_proof(&current, &p.th3);
                if !equal(&proof, &msg.replace_proof) {
                    return Err(ExchangeError::Proof);
                }
            }
        }
        Ok(Established {
            session: p.session,
            vm_key: p.vm_key,
        })
    }
}

/// The output fields of a KEY_EXCHANGE back to 0.
fn clear_outputs(msg: &mut KeyExchange) {
    msg.session = 0;
    msg.responder_nonce = [0; 32];
    msg.responder_share = [0; 32];
    msg.signature = [0; 64];
    msg.responder_verify = [0; 32];
    msg.cert = zerocopy::FromZeros::new_zeroed();
}

/// Whether `a == b`, in time independent of where they differ.
fn equal(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use ed25519_dalek::SigningKey;
    use gpupm_cc::{CcError, Requester};
    use gpupm_uapi::cc::CC_VENDOR_ROOT_KEY;

    use super::super::identity::test_identity;
    use super::*;

    fn responder() -> Responder {
        let mut r = Responder::default();
        r.set_identity(test_identity());
        r
    }

    #[test]
    fn an_exchange_gives_both_ends_the_same_key_and_the_finish_is_checked() {
        let mut dev = responder();
        let mut cipher = VmCipher::without_session(4);
        let req = Requester::new(4).unwrap();
        let mut msg = req.request();
        dev.key_exchange(&mut msg, Some(&cipher)).unwrap();
        let agreed = req.check(&msg, &CC_VENDOR_ROOT_KEY).unwrap();
        let mut wrong = agreed.finish_request(None);
        wrong.requester_verify[0] ^= 1;
        assert_eq!(
            dev.finish(&wrong, Some(&cipher)).err(),
            Some(ExchangeError::Verify)
        );
        let good = agreed.finish_request(None);
        assert_eq!(
            dev.finish(&good, Some(&cipher)).err(),
            Some(ExchangeError::NoPending(4)),
            "a failed FINISH consumed the exchange"
        );
        // Again, right this time.
        let req = Requester::new(4).unwrap();
        let mut msg = req.request();
        dev.key_exchange(&mut msg, Some(&cipher)).unwrap();
        let agreed = req.check(&msg, &CC_VENDOR_ROOT_KEY).unwrap();
        let done = dev
            .finish(&agreed.finish_request(None), Some(&cipher))
            .unwrap();
        assert_eq!(done.session, agreed.session());
        assert_eq!(*done.vm_key, *agreed.vm_key());
        cipher.establish(done.session, &done.vm_key);

        // A new exchange while the session exists: only with proof of it.
        let req = Requester::new(4).unwrap();
        let mut msg = req.request();
        dev.key_exchange(&mut msg, Some(&cipher)).unwrap();
        let next = req.check(&msg, &CC_VENDOR_ROOT_KEY).unwrap();
        assert_eq!(
            dev.finish(&next.finish_request(None), Some(&cipher)).err(),
            Some(ExchangeError::SessionExists(4))
        );
        let req = Requester::new(4).unwrap();
        let mut msg = req.request();
        dev.key_exchange(&mut msg, Some(&cipher)).unwrap();
        let next = req.check(&msg, &CC_VENDOR_ROOT_KEY).unwrap();
        let forged = next.finish_request(Some((&[0x11; 32], agreed.session(), 1)));
        assert_eq!(
            dev.finish(&forged, Some(&cipher)).err(),
            Some(ExchangeError::Proof)
        );
        let req = Requester::new(4).unwrap();
        let mut msg = req.request();
        dev.key_exchange(&mut msg, Some(&cipher)).unwrap();
        let next = req.check(&msg, &CC_VENDOR_ROOT_KEY).unwrap();
        let proven = next.finish_request(Some((agreed.vm_key(), agreed.session(), 1)));
        assert!(dev.finish(&proven, Some(&cipher)).is_ok());
    }

    #[test]
    fn a_relay_that_substitutes_a_key_share_or_the_devices_credentials_is_detected() {
        let mut dev = responder();
        let cipher = VmCipher::without_session(4);
        // The relay replaces the tenant's share with its own towards the
        // device: the device signs the relay's share, which the tenant's
        // transcript does not contain.
        let req = Requester::new(4).unwrap();
        let mallory = Requester::new(4).unwrap();
        let mut msg = req.request();
        msg.requester_share = mallory.request().requester_share;
        dev.key_exchange(&mut msg, Some(&cipher)).unwrap();
        msg.requester_share = req.request().requester_share;
        assert_eq!(
            req.check(&msg, &CC_VENDOR_ROOT_KEY).err(),
            Some(CcError::Signature)
        );
        // The relay replaces the device's share with its own.
        let req = Requester::new(4).unwrap();
        let mut msg = req.request();
        dev.key_exchange(&mut msg, Some(&cipher)).unwrap();
        msg.responder_share = mallory.request().requester_share;
        assert_eq!(
            req.check(&msg, &CC_VENDOR_ROOT_KEY).err(),
            Some(CcError::Signature)
        );
        // The relay answers as a device of its own, certified by a root
        // the tenant does not trust…
        let mut fake = Responder::default();
        let rogue_vendor = SigningKey::from_bytes(&[0x66; 32]);
        fake.set_identity(super::super::identity::DeviceIdentity::generate(&rogue_vendor).unwrap());
        let req = Requester::new(4).unwrap();
        let mut msg = req.request();
        fake.key_exchange(&mut msg, Some(&cipher)).unwrap();
        assert!(matches!(
            req.check(&msg, &CC_VENDOR_ROOT_KEY),
            Err(CcError::Certificate(_))
        ));
        // …or with the real device's certificate and its own signature.
        let req = Requester::new(4).unwrap();
        let mut msg = req.request();
        fake.key_exchange(&mut msg, Some(&cipher)).unwrap();
        msg.cert = *dev.identity.as_ref().unwrap().cert();
        assert_eq!(
            req.check(&msg, &CC_VENDOR_ROOT_KEY).err(),
            Some(CcError::Signature)
        );
        // Altered verify data.
        let req = Requester::new(4).unwrap();
        let mut msg = req.request();
        dev.key_exchange(&mut msg, Some(&cipher)).unwrap();
        msg.responder_verify[5] ^= 1;
        assert_eq!(
            req.check(&msg, &CC_VENDOR_ROOT_KEY).err(),
            Some(CcError::ResponderVerify)
        );
    }

    #[test]
    fn no_exchange_without_an_identity_a_confidential_vm_or_a_real_share() {
        let mut bare = Responder::default();
        let cipher = VmCipher::without_session(4);
        let mut msg = Requester::new(4).unwrap().request();
        assert_eq!(
            bare.key_exchange(&mut msg, Some(&cipher)),
            Err(ExchangeError::NoIdentity)
        );
        let mut dev = responder();
        assert_eq!(
            dev.key_exchange(&mut msg, None),
            Err(ExchangeError::NotConfidential(4))
        );
        msg.requester_share = [0; 32];
        assert_eq!(
            dev.key_exchange(&mut msg, Some(&cipher)),
            Err(ExchangeError::NotContributory)
        );
        assert_eq!(msg.session, 0, "a refused exchange answers nothing");
    }
}
