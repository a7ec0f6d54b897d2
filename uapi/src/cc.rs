//! Confidential sessions (ABI 1.11): the authenticated key exchange, in the
//! style of DMTF SPDM's KEY_EXCHANGE / FINISH, by which a confidential VM's
//! tenant tool and the device agree the VM's key without the host learning
//! it (`docs/confidential.md`, "Establishing a session").
//!
//! The device holds an Ed25519 identity key certified by the (emulated)
//! vendor root: a [`DeviceCert`]. The tenant sends an ephemeral X25519
//! public key and a nonce ([`KeyExchange`] request half); the device
//! answers its own ephemeral public key and nonce, a fresh session id, its
//! certificate, its signature over the transcript and an HMAC proving it
//! derived the handshake keys. The tenant checks the certificate against
//! the vendor root it ships with, the signature against the certificate's
//! key and the HMAC, then proves in [`Finish`] that it holds the same
//! secret. Only then does the device seal the VM's counts under the new
//! session. The host relays both messages (the device node's
//! [`GPUPM_IOC_CC_KEY_EXCHANGE`](crate::ioctl::GPUPM_IOC_CC_KEY_EXCHANGE) /
//! [`GPUPM_IOC_CC_FINISH`](crate::ioctl::GPUPM_IOC_CC_FINISH), reached by
//! tenants through the tenant node's
//! [`TENANT_IOC_CC_KEY_EXCHANGE`](crate::tenant::TENANT_IOC_CC_KEY_EXCHANGE) /
//! [`TENANT_IOC_CC_FINISH`](crate::tenant::TENANT_IOC_CC_FINISH)): every byte
//! it sees is public.
//!
//! Byte strings below are the exact labels the transcript and the key
//! schedule use (no terminating NUL).

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Bytes of a nonce (each side draws its own from a random source).
pub const CC_NONCE_LEN: usize = 32;
/// Bytes of an X25519 public key (a key share).
pub const CC_SHARE_LEN: usize = 32;
/// Bytes of an Ed25519 public key.
pub const CC_PUBLIC_KEY_LEN: usize = 32;
/// Bytes of an Ed25519 signature.
pub const CC_SIGNATURE_LEN: usize = 64;
/// Bytes of an HMAC-SHA256 (the verify data of both sides).
pub const CC_VERIFY_LEN: usize = 32;
/// Bytes of a device serial number.
pub const CC_SERIAL_LEN: usize = 16;
/// Bytes of the vendor key id (the first bytes of SHA-256 of the vendor
/// root's public key).
pub const CC_KEY_ID_LEN: usize = 8;

/// [`DeviceCert::magic`]: "GPCC" in little-endian byte order.
pub const CC_CERT_MAGIC: u32 = u32::from_le_bytes(*b"GPCC");
/// [`DeviceCert::version`].
pub const CC_CERT_VERSION: u16 = 1;
/// [`DeviceCert::algorithm`]: Ed25519 (RFC 8032) for both the device key
/// and the vendor's signature.
pub const CC_ALG_ED25519: u16 = 1;

/// Signed by the vendor root: `CC_CERT_CONTEXT || cert bytes 0..64`.
pub const CC_CERT_CONTEXT: &[u8] = b"gpupm-cc-spdm-v1 vendor certificate";
/// Start of the transcript hash TH1.
pub const CC_TRANSCRIPT_LABEL: &[u8] = b"gpupm-cc-spdm-v1 key exchange";
/// Signed by the device: `CC_SIGNATURE_CONTEXT || TH1`.
pub const CC_SIGNATURE_CONTEXT: &[u8] = b"gpupm-cc-spdm-v1 device signature";
/// HKDF-Extract salt of the handshake secret.
pub const CC_EXTRACT_SALT: &[u8] = b"gpupm-cc-spdm-v1";
/// HKDF-Expand info prefix of the device's finished key (then TH2).
pub const CC_RSP_FINISHED_INFO: &[u8] = b"rsp finished";
/// HKDF-Expand info prefix of the tenant's finished key (then TH2).
pub const CC_REQ_FINISHED_INFO: &[u8] = b"req finished";
/// HKDF-Expand info prefix of the VM key (then TH3).
pub const CC_VM_KEY_INFO: &[u8] = b"vm key";
/// HMAC message prefix of [`Finish::replace_proof`] (then TH3).
pub const CC_REPLACE_LABEL: &[u8] = b"gpupm-cc-spdm-v1 replace";

/// A device certificate: the device's Ed25519 public key, signed by the
/// vendor root. 128 bytes; `signature` is Ed25519 by the vendor root over
/// [`CC_CERT_CONTEXT`] followed by the first 64 bytes (every field before
/// `signature`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct DeviceCert {
    /// [`CC_CERT_MAGIC`].
    pub magic: u32,
    /// [`CC_CERT_VERSION`].
    pub version: u16,
    /// [`CC_ALG_ED25519`].
    pub algorithm: u16,
    /// The device's serial number (random at provisioning).
    pub serial: [u8; CC_SERIAL_LEN],
    /// The device's Ed25519 identity public key.
    pub device_key: [u8; CC_PUBLIC_KEY_LEN],
    /// First 8 bytes of SHA-256 of the vendor root's public key.
    pub vendor_key_id: [u8; CC_KEY_ID_LEN],
    /// The vendor root's Ed25519 signature.
    pub signature: [u8; CC_SIGNATURE_LEN],
}
const _: () = assert!(core::mem::size_of::<DeviceCert>() == 128);

/// Bytes of a [`DeviceCert`] the vendor signs (all before `signature`).
pub const CC_CERT_SIGNED_LEN: usize = 64;

/// `GPUPM_IOC_CC_KEY_EXCHANGE` / `TENANT_IOC_CC_KEY_EXCHANGE`: the
/// tenant's half of the exchange in, the device's half out.
///
/// Input: `version` (1), `vm`, `requester_nonce`, `requester_share`;
/// `flags`, `reserved` and every output field must be 0. The device keeps
/// one pending exchange per VM (a new one replaces it); it does not change
/// the VM's current session, which keeps sealing until a [`Finish`] for
/// the new one succeeds.
///
/// Output: `session` (the new session's id, never 0), `responder_nonce`,
/// `responder_share`, `cert`, `signature` (Ed25519 by `cert.device_key`
/// over [`CC_SIGNATURE_CONTEXT`] || TH1) and `responder_verify`
/// (HMAC-SHA256 with the device's finished key over TH2).
///
/// Errors: EINVAL for a malformed request, a VM that is not confidential
/// or an all-zero share; ENODEV when the device has no identity (the
/// driver was started without one).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct KeyExchange {
    /// 1 (`IOCTL_STRUCT_VERSION` / `TENANT_STRUCT_VERSION`).
    pub version: u32,
    /// The confidential VM.
    pub vm: u32,
    /// Must be 0.
    pub flags: u32,
    /// Reserved, 0.
    pub reserved: u32,
    /// The tenant's random nonce.
    pub requester_nonce: [u8; CC_NONCE_LEN],
    /// The tenant's ephemeral X25519 public key.
    pub requester_share: [u8; CC_SHARE_LEN],
    /// Output: the id of the session this exchange establishes.
    pub session: u64,
    /// Output: the device's random nonce.
    pub responder_nonce: [u8; CC_NONCE_LEN],
    /// Output: the device's ephemeral X25519 public key.
    pub responder_share: [u8; CC_SHARE_LEN],
    /// Output: the device's certificate.
    pub cert: DeviceCert,
    /// Output: the device's signature over the transcript.
    pub signature: [u8; CC_SIGNATURE_LEN],
    /// Output: the device's verify data (key confirmation).
    pub responder_verify: [u8; CC_VERIFY_LEN],
}
const _: () = assert!(core::mem::size_of::<KeyExchange>() == 376);

/// Bits of [`Finish::flags`].
pub mod finish_flags {
    /// The VM has an established session that this one replaces:
    /// [`super::Finish::replace_proof`] proves its current key.
    pub const REPLACE: u32 = 1 << 0;
}

/// `GPUPM_IOC_CC_FINISH` / `TENANT_IOC_CC_FINISH`: the tenant proves it
/// derived the same handshake secret; the device then makes the session
/// the VM's own.
///
/// Input: `version` (1), `vm`, `session` (from the exchange),
/// `requester_verify` (HMAC-SHA256 with the tenant's finished key over
/// TH3), `flags` ([`finish_flags`]) and, with `REPLACE`, `replace_proof`
/// (HMAC-SHA256 under the VM's *current* session key over
/// [`CC_REPLACE_LABEL`] || TH3); otherwise `replace_proof` must be 0.
/// `reserved`, `key_epoch` and `reserved2` must be 0.
///
/// Output: `key_epoch` = 1. Every counter of the VM is republished under
/// the new session at once.
///
/// Errors (the pending exchange is consumed by any attempt that names it,
/// successful or not): EINVAL for a malformed request, no pending exchange
/// of this VM with this session id, or a verify data or proof that does
/// not check; EBUSY when the VM already has an established session and
/// `REPLACE` is missing.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct Finish {
    /// 1 (`IOCTL_STRUCT_VERSION` / `TENANT_STRUCT_VERSION`).
    pub version: u32,
    /// The confidential VM.
    pub vm: u32,
    /// Bits of [`finish_flags`].
    pub flags: u32,
    /// Reserved, 0.
    pub reserved: u32,
    /// The session id the exchange answered.
    pub session: u64,
    /// The tenant's verify data.
    pub requester_verify: [u8; CC_VERIFY_LEN],
    /// With [`finish_flags::REPLACE`]: proof of the current session key.
    pub replace_proof: [u8; CC_VERIFY_LEN],
    /// Output: the new session's key epoch (1).
    pub key_epoch: u32,
    /// Reserved, 0.
    pub reserved2: u32,
}
const _: () = assert!(core::mem::size_of::<Finish>() == 96);

/// The (emulated) vendor root's Ed25519 public key, which every tenant
/// tool ships with and checks a [`DeviceCert`] against. Its private half
/// stands for the vendor's signing service: in this emulation it is the
/// file `packaging/factory/vendor-root.key`, used only to provision a
/// device's identity (`gpupm-driver provision`; see `docs/confidential.md`,
/// "The emulation boundary").
pub const CC_VENDOR_ROOT_KEY: [u8; CC_PUBLIC_KEY_LEN] = [
    0x95, 0x86, 0x78, 0xee, 0x4a, 0x81, 0x77, 0x2a, 0xb1, 0x23, 0x04, 0x5f, 0x07, 0x57, 0x13, 0x12,
    0xfc, 0x44, 0x76, 0xde, 0xd7, 0x0e, 0x20, 0xb2, 0xdf, 0x63, 0x0b, 0xbf, 0xe1, 0xe5, 0x97, 0x07,
];
