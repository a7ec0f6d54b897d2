//! gpupm-cc: the cryptography of confidential VMs that the device and the
//! VM's tenant share — the envelope in one place.
//!
//! - [`envelope`]: session keys' AEAD (AES-256-GCM) and the envelope of a
//!   host-visible slot — [`SessionCipher::seal`] (the device's copy
//!   engine) and [`open`] (the tenant);
//! - [`ledger`]: the same for a debug ledger answer's counts;
//! - [`rekey`]: the rekey blob, a VM's next key sealed under its current
//!   session key, and the register writes that stage and commit it;
//! - [`schedule`]: the key exchange's transcript hashes and key schedule,
//!   and the session-key derivation every seal uses;
//! - [`cert`]: device certificates (the vendor's signature over the
//!   device's identity key);
//! - [`requester`]: the tenant's side of the key exchange (the device's
//!   side, which holds device-only state, is the device model's);
//! - [`secret_file`]: the files that hold keys, read and written safely.
//!
//! The protocol and the formats are in `docs/confidential.md`; the
//! structs and constants are [`gpupm_uapi::cc`], [`gpupm_uapi::layout`]
//! and [`gpupm_uapi::regs`]. Nothing here holds device state: a VM's
//! nonce counter, its sessions and the staging registers are the device
//! model's (`gpupm_driver::model::cc`); talking to a node is
//! `gpupm-client`'s.

pub mod cert;
pub mod envelope;
pub mod ledger;
pub mod rekey;
pub mod requester;
pub mod schedule;
pub mod secret_file;

#[cfg(test)]
mod test_vectors;

pub use envelope::{open, OpenError, SessionCipher, Tag};
pub use ledger::{open_ledger, seal_ledger};
pub use rekey::{RekeyBlob, REKEY_WORDS};
pub use requester::{Agreed, Requester};
pub use schedule::{session_key, Key};

/// Why an exchange failed on the tenant's side. Every variant but
/// `Entropy` means the reply did not come from the device unaltered: a
/// relay substituted a key share, a certificate or a signature.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum CcError {
    /// The certificate does not check against the vendor root.
    #[error("the device certificate is not valid: {0}")]
    Certificate(&'static str),
    /// The device's signature over the transcript does not verify.
    #[error("the device's signature over the exchange does not verify (a relay altered it, or substituted a key share)")]
    Signature,
    /// The device's verify data does not match the shared secret.
    #[error("the device's verify data does not match (the exchange was altered)")]
    ResponderVerify,
    /// The device's key share gives an all-zero shared secret.
    #[error("the device's key share is a small-order point")]
    NotContributory,
    /// The reply does not belong to the request.
    #[error("malformed reply: {0}")]
    Malformed(&'static str),
    /// The random source failed.
    #[error("the operating system's random source failed: {0}")]
    Entropy(String),
}
