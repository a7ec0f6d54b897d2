//! The exchange's transcript hashes and key schedule, shared by both ends
//! (`docs/confidential.md`, "The key schedule"):
//!
//! ```text
//! TH1 = SHA-256(CC_TRANSCRIPT_LABEL || vm (4 LE) || requester_nonce || requester_share
//!               || cert (128) || session (8 LE) || responder_nonce || responder_share)
//! signature = Ed25519(device key, CC_SIGNATURE_CONTEXT || TH1)
//! TH2 = SHA-256(TH1 || signature)
//! PRK = HKDF-Extract(salt = CC_EXTRACT_SALT, ikm = X25519 shared secret)
//! rsp_finished = HKDF-Expand(PRK, CC_RSP_FINISHED_INFO || TH2, 32)
//! req_finished = HKDF-Expand(PRK, CC_REQ_FINISHED_INFO || TH2, 32)
//! responder_verify = HMAC-SHA256(rsp_finished, TH2)
//! TH3 = SHA-256(TH2 || responder_verify)
//! requester_verify = HMAC-SHA256(req_finished, TH3)
//! K_vm (epoch 1) = HKDF-Expand(PRK, CC_VM_KEY_INFO || TH3, 32)
//! replace_proof = HMAC-SHA256(current session key, CC_REPLACE_LABEL || TH3)
//! ```
//!
//! and the session key every seal uses (unchanged since ABI 1.3):
//! `HKDF-SHA256(ikm = K_vm, salt = session (8 LE), info = SESSION_KEY_INFO
//! || vm (4 LE) || epoch (4 LE))`.
//!
//! Secrets are returned in [`Zeroizing`] wrappers. (The `hkdf` and `hmac`
//! states are short-lived locals; they are not zeroized.)

use gpupm_uapi::cc::{
    KeyExchange, CC_EXTRACT_SALT, CC_REPLACE_LABEL, CC_REQ_FINISHED_INFO, CC_RSP_FINISHED_INFO,
    CC_SIGNATURE_CONTEXT, CC_TRANSCRIPT_LABEL, CC_VERIFY_LEN, CC_VM_KEY_INFO,
};
use gpupm_uapi::layout::SESSION_KEY_INFO;
use hkdf::Hkdf;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use zerocopy::IntoBytes;
use zeroize::Zeroizing;

/// A 256-bit key.
pub type Key = [u8; 32];
/// A SHA-256 transcript hash.
pub type Hash = [u8; 32];
/// Verify data (an HMAC-SHA256).
pub type Verify = [u8; CC_VERIFY_LEN];

/// TH1 of an exchange: the request's fields of `request` and the
/// response's fields of `response` (the same struct at the device; the
/// tenant passes its own request and the reply it got, so that a relay
/// that altered the echoed request fields changes nothing).
pub fn th1(vm: u32, request: &KeyExchange, response: &KeyExchange) -> Hash {
    let mut h = Sha256::new();
    h.update(CC_TRANSCRIPT_LABEL);
    h.update(vm.to_le_bytes());
    h.update(request.requester_nonce);
    h.update(request.requester_share);
    h.update(response.cert.as_bytes());
    h.update(response.session.to_le_bytes());
    h.update(response.responder_nonce);
    h.update(response.responder_share);
    h.finalize().into()
}

/// The message the device signs: [`CC_SIGNATURE_CONTEXT`] || TH1.
pub fn signed_message(th1: &Hash) -> Vec<u8> {
    [CC_SIGNATURE_CONTEXT, th1.as_slice()].concat()
}

/// TH2 = SHA-256(TH1 || signature).
pub fn th2(th1: &Hash, signature: &[u8]) -> Hash {
    Sha256::new()
        .chain_update(th1)
        .chain_update(signature)
        .finalize()
        .into()
}

/// TH3 = SHA-256(TH2 || responder_verify).
pub fn th3(th2: &Hash, responder_verify: &Verify) -> Hash {
    Sha256::new()
        .chain_update(th2)
        .chain_update(responder_verify)
        .finalize()
        .into()
}

/// The handshake secret of one exchange (HKDF's PRK).
pub struct Handshake {
    prk: Zeroizing<Key>,
}

impl std::fmt::Debug for Handshake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Handshake(..)")
    }
}

impl Handshake {
    /// PRK = HKDF-Extract(CC_EXTRACT_SALT, shared).
    pub fn new(shared: &[u8; 32]) -> Self {
        let (prk, _) = Hkdf::<Sha256>::extract(Some(CC_EXTRACT_SALT), shared);
        let mut out = Zeroizing::new([0u8; 32]);
        out.copy_from_slice(&prk);
        Handshake { prk: out }
    }

    fn expand(&self, label: &[u8], th: &Hash) -> Zeroizing<Key> {
        let mut okm = Zeroizing::new([0u8; 32]);
        // A PRK of one hash length is always valid, and 32 bytes is far
        // below HKDF-SHA256's limit: neither call can fail.
        if let Ok(hk) = Hkdf::<Sha256>::from_prk(self.prk.as_slice()) {
            if hk
                .expand_multi_info(&[label, th], okm.as_mut_slice())
                .is_err()
            {
                okm.fill(0);
            }
        }
        okm
    }

    /// The device's verify data: HMAC(rsp_finished, TH2).
    pub fn responder_verify(&self, th2: &Hash) -> Verify {
        mac(self.expand(CC_RSP_FINISHED_INFO, th2).as_slice(), &[th2])
    }

    /// The tenant's verify data: HMAC(req_finished, TH3), req_finished
    /// being derived with `th2`.
    pub fn requester_verify(&self, th2: &Hash, th3: &Hash) -> Verify {
        mac(self.expand(CC_REQ_FINISHED_INFO, th2).as_slice(), &[th3])
    }

    /// The session's first VM key, K_vm of epoch 1.
    pub fn vm_key(&self, th3: &Hash) -> Zeroizing<Key> {
        self.expand(CC_VM_KEY_INFO, th3)
    }
}

/// HMAC-SHA256 of the concatenated `parts` under `key`.
pub fn mac(key: &[u8], parts: &[&[u8]]) -> Verify {
    // HMAC takes a key of any length.
    let Ok(mut m) = Hmac::<Sha256>::new_from_slice(key) else {
        return [0; CC_VERIFY_LEN];
    };
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

/// Whether `tag` is the HMAC-SHA256 of `parts` under `key`, compared in
/// constant time.
pub fn mac_matches(key: &[u8], parts: &[&[u8]], tag: &[u8]) -> bool {
    let Ok(mut m) = Hmac::<Sha256>::new_from_slice(key) else {
        return false;
    };
    for p in parts {
        m.update(p);
    }
    m.verify_slice(tag).is_ok()
}

/// The proof of a VM's current session that a FINISH replacing it
/// carries: HMAC(current session key, CC_REPLACE_LABEL || TH3).
pub fn replace_proof(current_session_key: &Key, th3: &Hash) -> Verify {
    mac(current_session_key, &[CC_REPLACE_LABEL, th3.as_slice()])
}

/// The session key of `vm` under `vm_key` in session `session` and key
/// epoch `epoch`: what seals (and opens) a slot whose envelope names them.
pub fn session_key(vm_key: &Key, vm: u32, session: u64, epoch: u32) -> Zeroizing<Key> {
    let hk = Hkdf::<Sha256>::new(Some(&session.to_le_bytes()), vm_key);
    let mut okm = Zeroizing::new([0u8; 32]);
    // 32 bytes is far below HKDF-SHA256's limit of 255 hash lengths, the
    // only way expansion can fail.
    if hk
        .expand_multi_info(
            &[SESSION_KEY_INFO, &vm.to_le_bytes(), &epoch.to_le_bytes()],
            okm.as_mut_slice(),
        )
        .is_err()
    {
        okm.fill(0);
    }
    okm
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_check_only_their_own_key_and_message() {
        let t = mac(b"k", &[b"a", b"bc"]);
        assert!(mac_matches(b"k", &[b"abc"], &t), "parts concatenate");
        assert!(!mac_matches(b"K", &[b"abc"], &t));
        assert!(!mac_matches(b"k", &[b"abd"], &t));
        assert!(!mac_matches(b"k", &[b"abc"], &t[..31]));
    }

    #[test]
    fn every_derived_secret_differs() {
        let hs = Handshake::new(&[1; 32]);
        let (a, b) = ([2u8; 32], [3u8; 32]);
        let all = [
            hs.responder_verify(&a),
            hs.requester_verify(&a, &b),
            *hs.vm_key(&b),
            *hs.vm_key(&a),
            hs.responder_verify(&b),
            *Handshake::new(&[4; 32]).vm_key(&b),
        ];
        for (i, x) in all.iter().enumerate() {
            for y in &all[i + 1..] {
                assert_ne!(x, y);
            }
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
}
