//! The tenant's side of the exchange: what a confidential VM's tenant tool
//! runs to establish the VM's session with the device through an
//! untrusted relay.
//!
//! ```text
//! let req = Requester::new(vm)?;                       // ephemeral key, nonce
//! let mut msg = req.request();                         // → KEY_EXCHANGE
//! node.cc_key_exchange(&mut msg)?;                     //   relayed by the host
//! let agreed = req.check(&msg, &CC_VENDOR_ROOT_KEY)?;  // cert, signature, verify data
//! let mut fin = agreed.finish_request(None);           // → FINISH
//! node.cc_finish(&mut fin)?;                           //   the device installs it
//! // agreed.vm_key() is K_vm of epoch 1 of session agreed.session()
//! ```

use ed25519_dalek::Signature;
use gpupm_uapi::cc::{
    finish_flags, DeviceCert, Finish, KeyExchange, CC_NONCE_LEN, CC_PUBLIC_KEY_LEN,
};
use rand_core::OsRng;
use x25519_dalek::{EphemeralSecret, PublicKey};
use zerocopy::FromZeros;
use zeroize::Zeroizing;

use crate::schedule::{self, Handshake, Hash, Key, Verify};
use crate::{cert, CcError};

/// Version of the exchange's structs (`IOCTL_STRUCT_VERSION` and
/// `TENANT_STRUCT_VERSION` are both 1).
pub const EXCHANGE_STRUCT_VERSION: u32 = 1;

/// A tenant's exchange in progress: its ephemeral secret and request.
pub struct Requester {
    vm: u32,
    request: KeyExchange,
    secret: EphemeralSecret,
}

impl std::fmt::Debug for Requester {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Requester")
            .field("vm", &self.vm)
            .finish_non_exhaustive()
    }
}

impl Requester {
    /// A fresh exchange for VM `vm`: an ephemeral X25519 key and a nonce
    /// from the operating system's random source.
    pub fn new(vm: u32) -> Result<Self, CcError> {
        let mut nonce = [0u8; CC_NONCE_LEN];
        getrandom::getrandom(&mut nonce).map_err(|e| CcError::Entropy(e.to_string()))?;
        let secret = EphemeralSecret::random_from_rng(OsRng);
        let mut request = KeyExchange::new_zeroed();
        request.version = EXCHANGE_STRUCT_VERSION;
        request.vm = vm;
        request.requester_nonce = nonce;
        request.requester_share = PublicKey::from(&secret).to_bytes();
        Ok(Requester {
            vm,
            request,
            secret,
        })
    }

    /// The KEY_EXCHANGE request to send (the output fields are 0).
    pub fn request(&self) -> KeyExchange {
        self.request
    }

    /// Checks the device's `reply`: its certificate against the vendor
    /// `root`, its signature over the transcript of *this* request and the
    /// reply, and its verify data. Consumes the ephemeral secret.
    pub fn check(
        self,
        reply: &KeyExchange,
        root: &[u8; CC_PUBLIC_KEY_LEN],
    ) -> Result<Agreed, CcError> {
        if reply.vm != self.vm || reply.session == 0 {
            return Err(CcError::Malformed(
                "the reply names another VM or no session",
            ));
        }
        let device_key = cert::verify(&reply.cert, root)?;
        let th1 = schedule::th1(self.vm, &self.request, reply);
        device_key
            .verify_strict(
                &schedule::signed_message(&th1),
                &Signature::from_bytes(&reply.signature),
            )
            .map_err(|_| CcError::Signature)?;
        let shared = self
            .secret
            .diffie_hellman(&PublicKey::from(reply.responder_share));
        if !shared.was_contributory() {
            return Err(CcError::NotContributory);
        }
        let handshake = Handshake::new(shared.as_bytes());
        let th2 = schedule::th2(&th1, &reply.signature);
        let expected = handshake.responder_verify(&th2);
        if !constant_time_eq(&expected, &reply.responder_verify) {
            return Err(CcError::ResponderVerify);
        }
        let th3 = schedule::th3(&th2, &reply.responder_verify);
        Ok(Agreed {
            vm: self.vm,
            session: reply.session,
            cert: reply.cert,
            th3,
            requester_verify: handshake.requester_verify(&th2, &th3),
            vm_key: handshake.vm_key(&th3),
        })
    }
}

/// Whether `a == b`, in time independent of where they differ.
fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A checked exchange: the session's id and first key, and what FINISH
/// must carry.
pub struct Agreed {
    vm: u32,
    session: u64,
    cert: DeviceCert,
    th3: Hash,
    requester_verify: Verify,
    vm_key: Zeroizing<Key>,
}

impl std::fmt::Debug for Agreed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agreed")
            .field("vm", &self.vm)
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

impl Agreed {
    /// The new session's id.
    pub fn session(&self) -> u64 {
        self.session
    }

    /// The device's certificate (checked against the vendor root).
    pub fn cert(&self) -> &DeviceCert {
        &self.cert
    }

    /// K_vm of the session's epoch 1.
    pub fn vm_key(&self) -> &Key {
        &self.vm_key
    }

    /// The FINISH request. `replacing` is the VM's current session — its
    /// K_vm, session id and epoch — when the VM has one (the device then
    /// requires proof of it).
    pub fn finish_request(&self, replacing: Option<(&Key, u64, u32)>) -> Finish {
        let mut f = Finish {
            version: EXCHANGE_STRUCT_VERSION,
            vm: self.vm,
            session: self.session,
            requester_verify: self.requester_verify,
            ..Finish::default()
        };
        if let Some((key, session, epoch)) = replacing {
            let current = schedule::session_key(key, self.vm, session, epoch);
            f.flags = finish_flags::REPLACE;
            f.replace_proof = schedule::replace_proof(&current, &self.th3);
        }
        f
    }
}
