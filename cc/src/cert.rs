//! Device certificates: the device's Ed25519 identity key signed by the
//! vendor root ([`gpupm_uapi::cc::DeviceCert`]).

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use gpupm_uapi::cc::{
    DeviceCert, CC_ALG_ED25519, CC_CERT_CONTEXT, CC_CERT_MAGIC, CC_CERT_SIGNED_LEN,
    CC_CERT_VERSION, CC_KEY_ID_LEN, CC_PUBLIC_KEY_LEN, CC_SERIAL_LEN,
};
use sha2::{Digest, Sha256};
use zerocopy::IntoBytes;

use crate::CcError;

/// The vendor key id of a root public key: the first 8 bytes of its
/// SHA-256.
pub fn vendor_key_id(root: &[u8; CC_PUBLIC_KEY_LEN]) -> [u8; CC_KEY_ID_LEN] {
    let digest = Sha256::digest(root);
    let mut id = [0u8; CC_KEY_ID_LEN];
    id.copy_from_slice(&digest[..CC_KEY_ID_LEN]);
    id
}

/// What the vendor signs: [`CC_CERT_CONTEXT`] || the certificate's first
/// 64 bytes.
fn signed_bytes(cert: &DeviceCert) -> Vec<u8> {
    [CC_CERT_CONTEXT, &cert.as_bytes()[..CC_CERT_SIGNED_LEN]].concat()
}

/// A certificate for `device_key` with `serial`, signed by `vendor` (the
/// factory's act: see `gpupm-driver provision`).
pub fn issue(
    vendor: &SigningKey,
    serial: [u8; CC_SERIAL_LEN],
    device_key: &VerifyingKey,
) -> DeviceCert {
    let mut cert = DeviceCert {
        magic: CC_CERT_MAGIC,
        version: CC_CERT_VERSION,
        algorithm: CC_ALG_ED25519,
        serial,
        device_key: device_key.to_bytes(),
        vendor_key_id: vendor_key_id(&vendor.verifying_key().to_bytes()),
        signature: [0; 64],
    };
    cert.signature = vendor.sign(&signed_bytes(&cert)).to_bytes();
    cert
}

/// Checks `cert` against the vendor `root` key; the device's key it
/// certifies.
pub fn verify(cert: &DeviceCert, root: &[u8; CC_PUBLIC_KEY_LEN]) -> Result<VerifyingKey, CcError> {
    let bad = CcError::Certificate;
    if cert.magic != CC_CERT_MAGIC || cert.version != CC_CERT_VERSION {
        return Err(bad("not a gpupm device certificate of version 1"));
    }
    if cert.algorithm != CC_ALG_ED25519 {
        return Err(bad("an algorithm other than Ed25519"));
    }
    if cert.vendor_key_id != vendor_key_id(root) {
        return Err(bad("issued by another vendor key"));
    }
    let root = VerifyingKey::from_bytes(root).map_err(|_| bad("the vendor root is no key"))?;
    root.verify_strict(&signed_bytes(cert), &Signature::from_bytes(&cert.signature))
        .map_err(|_| bad("the vendor's signature does not verify"))?;
    let device = VerifyingKey::from_bytes(&cert.device_key)
        .map_err(|_| bad("the device key is not a valid Ed25519 point"))?;
    if device.is_weak() {
        return Err(bad("the device key is a weak (small-order) point"));
    }
    Ok(device)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_verifies_only_under_its_root_and_unaltered() {
        let vendor = SigningKey::from_bytes(&[7; 32]);
        let root = vendor.verifying_key().to_bytes();
        let device = SigningKey::from_bytes(&[9; 32]).verifying_key();
        let cert = issue(&vendor, [1; 16], &device);
        assert_eq!(verify(&cert, &root), Ok(device));
        let other = SigningKey::from_bytes(&[8; 32]).verifying_key().to_bytes();
        assert!(verify(&cert, &other).is_err(), "another root");
        let bytes = cert.as_bytes().to_vec();
        for i in 0..bytes.len() {
            let mut altered = bytes.clone();
            altered[i] ^= 0x40;
            let altered: DeviceCert = zerocopy::FromBytes::read_from_bytes(&altered[..]).unwrap();
            assert!(verify(&altered, &root).is_err(), "byte {i} altered");
        }
    }
}
