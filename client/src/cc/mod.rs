//! Confidential VMs' sessions, from the tenant's side: the key exchange
//! with the device ([`requester`]), its transcript and key schedule
//! ([`schedule`], which the device's side shares), device certificates
//! ([`cert`]) and the files that hold secrets ([`secret_file`]).
//!
//! The protocol, message by message, is in `docs/confidential.md`
//! ("Establishing a session"); the structs are [`gpupm_uapi::cc`].

pub mod cert;
pub mod requester;
pub mod schedule;
pub mod secret_file;

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
