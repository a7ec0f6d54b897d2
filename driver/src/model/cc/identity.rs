//! The device's identity: its Ed25519 key and the vendor's certificate for
//! it — what a real device keeps in fuses or a secure element, written at
//! the factory. The emulation keeps them in one file (`--identity`), which
//! `gpupm-driver provision` writes with the vendor root's private key
//! (the "factory": `docs/confidential.md`, "The emulation boundary").
//!
//! File format (168 bytes): `"GPID"`, version 1 (u32 LE), the Ed25519
//! secret seed (32 bytes), the [`DeviceCert`] (128 bytes). The file must be
//! a regular file of this process's uid that nobody else may access.

use std::path::Path;

use ed25519_dalek::{Signature, Signer, SigningKey};
use gpupm_cc::secret_file::{self, SecretFileError};
use gpupm_cc::{cert, CcError};
use gpupm_uapi::cc::{DeviceCert, CC_SERIAL_LEN, CC_VENDOR_ROOT_KEY};
use zerocopy::{FromBytes, IntoBytes};
use zeroize::Zeroizing;

/// First bytes of an identity file.
const MAGIC: &[u8; 4] = b"GPID";
/// Its format version.
const VERSION: u32 = 1;
/// Its length.
const FILE_LEN: usize = 4 + 4 + 32 + core::mem::size_of::<DeviceCert>();
/// A vendor key file: 32 raw bytes or 64 hex digits and a newline.
const VENDOR_KEY_MAX: usize = 66;

/// Why an identity could not be loaded or made.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// The file is unsafe or unreadable.
    #[error(transparent)]
    File(#[from] SecretFileError),
    /// The file is not an identity.
    #[error("{0}")]
    Format(String),
    /// The certificate does not check against the vendor root the tools
    /// ship with, or does not certify this key.
    #[error("the identity's certificate is not valid: {0}")]
    Certificate(#[from] CcError),
    /// The random source failed.
    #[error("the operating system's random source failed: {0}")]
    Entropy(String),
    /// The identity exists and replacing it was not asked for.
    #[error("{0} exists; a device identity is provisioned once (pass --force to replace it)")]
    Exists(String),
    /// Could not give the file to its directory's owner.
    #[error("cannot give {path} to uid {uid}: {source}")]
    Chown {
        /// The file.
        path: String,
        /// Its directory's owner.
        uid: u32,
        /// The cause.
        #[source]
        source: nix::Error,
    },
}

/// The device's identity key and certificate.
pub struct DeviceIdentity {
    signing: SigningKey,
    cert: DeviceCert,
}

impl std::fmt::Debug for DeviceIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceIdentity")
            .field("serial", &self.cert.serial)
            .finish_non_exhaustive()
    }
}

impl DeviceIdentity {
    /// Loads the identity in `path` and checks its certificate against the
    /// vendor root.
    pub fn load(path: &Path) -> Result<Self, IdentityError> {
        let bytes = secret_file::read(path, FILE_LEN)?;
        Self::from_bytes(&bytes)
            .map_err(|e| IdentityError::Format(format!("{}: {e}", path.display())))?
            .checked(&CC_VENDOR_ROOT_KEY)
    }

    fn from_bytes(bytes: &[u8]) -> Result<Self, &'static str> {
        if bytes.len() != FILE_LEN || &bytes[..4] != MAGIC {
            return Err("not a gpupm device identity");
        }
        if bytes[4..8] != VERSION.to_le_bytes() {
            return Err("a device identity of an unknown version");
        }
        let mut seed = Zeroizing::new([0u8; 32]);
        seed.copy_from_slice(&bytes[8..40]);
        let cert = DeviceCert::read_from_bytes(&bytes[40..]).map_err(|_| "a truncated identity")?;
        Ok(DeviceIdentity {
            signing: SigningKey::from_bytes(&seed),
            cert,
        })
    }

    /// The identity if its certificate checks against `root` and certifies
    /// its key.
    fn checked(self, root: &[u8; 32]) -> Result<Self, IdentityError> {
        let certified = cert::verify(&self.cert, root)?;
        if certified != self.signing.verifying_key() {
            return Err(IdentityError::Certificate(CcError::Certificate(
                "it certifies another key than the identity's",
            )));
        }
        Ok(self)
    }

    /// A new identity certified by `vendor` (tests and `provision`).
    pub fn generate(vendor: &SigningKey) -> Result<Self, IdentityError> {
        let mut seed = Zeroizing::new([0u8; 32]);
        let mut serial = [0u8; CC_SERIAL_LEN];
        getrandom::getrandom(seed.as_mut_slice())
            .and_then(|()| getrandom::getrandom(&mut serial))
            .map_err(|e| IdentityError::Entropy(e.to_string()))?;
        let signing = SigningKey::from_bytes(&seed);
        let cert = cert::issue(vendor, serial, &signing.verifying_key());
        Ok(DeviceIdentity { signing, cert })
    }

    fn to_bytes(&self) -> Zeroizing<Vec<u8>> {
        let mut out = Zeroizing::new(Vec::with_capacity(FILE_LEN));
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(self.signing.as_bytes());
        out.extend_from_slice(self.cert.as_bytes());
        out
    }

    /// The certificate.
    pub fn cert(&self) -> &DeviceCert {
        &self.cert
    }

    /// Signs `message` with the identity key.
    pub fn sign(&self, message: &[u8]) -> Signature {
        self.signing.sign(message)
    }
}

/// Reads the vendor root's private key (the factory's): 32 raw bytes or 64
/// hex digits, in a file only its owner may access.
pub fn load_vendor_key(path: &Path) -> Result<SigningKey, IdentityError> {
    let bytes = secret_file::read(path, VENDOR_KEY_MAX)?;
    let bad = || {
        IdentityError::Format(format!(
            "{}: neither 32 raw bytes nor 64 hexadecimal digits",
            path.display()
        ))
    };
    let mut seed = Zeroizing::new([0u8; 32]);
    if bytes.len() == 32 {
        seed.copy_from_slice(&bytes);
    } else {
        let text = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
        if text.len() != 64 {
            return Err(bad());
        }
        for (b, pair) in seed.iter_mut().zip(text.chunks_exact(2)) {
            let digits = std::str::from_utf8(pair).map_err(|_| bad())?;
            *b = u8::from_str_radix(digits, 16).map_err(|_| bad())?;
        }
    }
    Ok(SigningKey::from_bytes(&seed))
}

/// The factory: writes a new identity certified by the vendor key in
/// `vendor_key` to `identity` (mode 0600, owned by the directory's owner,
/// so that root can provision it for the unprivileged driver). An existing
/// identity is kept (`Ok(false)`) unless `force`; with neither `force` nor
/// `keep_existing` it is an error.
pub fn provision(
    vendor_key: &Path,
    identity: &Path,
    keep_existing: bool,
    force: bool,
) -> Result<bool, IdentityError> {
    if !force && identity.symlink_metadata().is_ok() {
        if keep_existing {
            return Ok(false);
        }
        return Err(IdentityError::Exists(identity.display().to_string()));
    }
    let vendor = load_vendor_key(vendor_key)?;
    let id = DeviceIdentity::generate(&vendor)?.checked(&CC_VENDOR_ROOT_KEY)?;
    secret_file::write(identity, &id.to_bytes())?;
    give_to_directory_owner(identity)?;
    Ok(true)
}

/// Gives `path` to the owner of its directory when that differs from this
/// process (root provisioning a directory of `gpupm-driver`).
fn give_to_directory_owner(path: &Path) -> Result<(), IdentityError> {
    use std::os::unix::fs::MetadataExt;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let owner = std::fs::metadata(dir)
        .map_err(|source| {
            IdentityError::File(SecretFileError::Io {
                what: "stat",
                path: dir.to_path_buf(),
                source,
            })
        })?
        .uid();
    if owner == nix::unistd::geteuid().as_raw() {
        return Ok(());
    }
    let uid = nix::unistd::Uid::from_raw(owner);
    nix::unistd::fchownat(
        None,
        path,
        Some(uid),
        None,
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    )
    .map_err(|source| IdentityError::Chown {
        path: path.display().to_string(),
        uid: owner,
        source,
    })
}

/// An identity certified by the committed vendor root, for tests (the
/// factory's key is read from the repository).
#[cfg(any(test, feature = "test-utils"))]
pub fn test_identity() -> DeviceIdentity {
    let text = include_str!("../../../../packaging/factory/vendor-root.key");
    let mut seed = [0u8; 32];
    for (b, pair) in seed.iter_mut().zip(text.trim().as_bytes().chunks_exact(2)) {
        *b = u8::from_str_radix(std::str::from_utf8(pair).unwrap_or("00"), 16).unwrap_or(0);
    }
    match DeviceIdentity::generate(&SigningKey::from_bytes(&seed)) {
        Ok(id) => id,
        Err(e) => panic!("cannot make a test identity: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn a_provisioned_identity_loads_and_checks_against_the_shipped_root() {
        let dir = tempfile::tempdir().unwrap();
        let vendor = dir.path().join("vendor.key");
        let repo_key = include_str!("../../../../packaging/factory/vendor-root.key");
        std::fs::write(&vendor, repo_key).unwrap();
        std::fs::set_permissions(&vendor, std::fs::Permissions::from_mode(0o600)).unwrap();
        let path = dir.path().join("identity");
        assert!(provision(&vendor, &path, false, false).unwrap());
        let id = DeviceIdentity::load(&path).unwrap();
        assert_eq!(
            cert::verify(id.cert(), &CC_VENDOR_ROOT_KEY).ok(),
            Some(id.signing.verifying_key())
        );
        assert!(!provision(&vendor, &path, true, false).unwrap(), "kept");
        assert!(matches!(
            provision(&vendor, &path, false, false),
            Err(IdentityError::Exists(_))
        ));
        // A certificate by another vendor key is refused at load.
        let other = dir.path().join("other.key");
        std::fs::write(&other, [5u8; 32]).unwrap();
        std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(provision(&other, &path, false, true).is_err());
        let forged = DeviceIdentity::generate(&SigningKey::from_bytes(&[5; 32])).unwrap();
        secret_file::write(&path, &forged.to_bytes()).unwrap();
        assert!(matches!(
            DeviceIdentity::load(&path),
            Err(IdentityError::Certificate(_))
        ));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            DeviceIdentity::load(&path),
            Err(IdentityError::File(SecretFileError::Mode { .. }))
        ));
    }
}
