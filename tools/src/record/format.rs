//! The `gpupm record` file format, version 1.
//!
//! ```text
//! offset 0            FileHeader (64 bytes, little-endian)
//! offset header_size  record 0 ─┐ `record_size` bytes each: a TenantDelta
//!                     record 1  │ (gpupm_uapi::tenant) exactly as the
//!                     …        ─┘ tenant node's stream session returned it
//! ```
//!
//! Invariants:
//! - `magic` is `b"GPUPMREC"`; readers refuse other magics, a `version`
//!   they do not know, and a `record_size` other than
//!   `size_of::<TenantDelta>()` (624 for version 1).
//! - Records appear in the session's order (`seq` 1, 2, …); a record's
//!   `lost_before` counts records the daemon could not deliver before it.
//!   `slot` holds a plaintext `StreamRecord` or, for a confidential VM,
//!   ciphertext only the VM's key opens (the file never holds plaintext of a
//!   sealed VM).
//! - `records` and `lost` are written when the recording ends cleanly;
//!   `records == u64::MAX` marks a recording that did not finish, whose
//!   record count is `(file length − header_size) / record_size` (a
//!   trailing partial record is ignored).

use gpupm_uapi::tenant::TenantDelta;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// File magic.
pub const MAGIC: [u8; 8] = *b"GPUPMREC";
/// Current format version.
pub const VERSION: u32 = 1;
/// Size of one record.
pub const RECORD_SIZE: usize = size_of::<TenantDelta>();
/// `records` of a recording that did not end cleanly.
pub const UNFINISHED: u64 = u64::MAX;

/// The file header.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct FileHeader {
    /// [`MAGIC`].
    pub magic: [u8; 8],
    /// [`VERSION`].
    pub version: u32,
    /// Bytes before the first record (64 in version 1).
    pub header_size: u32,
    /// Bytes per record ([`RECORD_SIZE`]).
    pub record_size: u32,
    /// Nominal device clock in kHz, to turn cycles into seconds.
    pub clock_khz: u32,
    /// `gpupm_uapi::tenant::scope` kind of the recorded session.
    pub scope: u32,
    /// VM or context id.
    pub id: u32,
    /// Wall-clock start, ns since the Unix epoch.
    pub started_unix_ns: u64,
    /// Records in the file, or [`UNFINISHED`].
    pub records: u64,
    /// Sum of `lost_before` over the records.
    pub lost: u64,
    /// Reserved, 0.
    pub reserved: u64,
}
const _: () = assert!(size_of::<FileHeader>() == 64);
const _: () = assert!(RECORD_SIZE == 624);

/// Why a file was refused.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// Shorter than a header.
    #[error("too short for a gpupm recording")]
    Short,
    /// Wrong magic.
    #[error("not a gpupm recording (bad magic)")]
    Magic,
    /// Unknown version or geometry.
    #[error("unsupported recording version {version} (record size {record_size}); this gpupm reads version {VERSION}")]
    Version {
        /// Version in the file.
        version: u32,
        /// Record size in the file.
        record_size: u32,
    },
}

/// Decodes a whole file: its header and records.
pub fn decode(bytes: &[u8]) -> Result<(FileHeader, Vec<TenantDelta>), FormatError> {
    let (h, _) = FileHeader::read_from_prefix(bytes).map_err(|_| FormatError::Short)?;
    if h.magic != MAGIC {
        return Err(FormatError::Magic);
    }
    if h.version != VERSION
        || h.record_size as usize != RECORD_SIZE
        || (h.header_size as usize) < size_of::<FileHeader>()
    {
        return Err(FormatError::Version {
            version: h.version,
            record_size: h.record_size,
        });
    }
    let body = bytes.get(h.header_size as usize..).unwrap_or_default();
    let whole = body.len() / RECORD_SIZE * RECORD_SIZE;
    let recs = <[TenantDelta]>::ref_from_bytes(&body[..whole]).map_err(|_| FormatError::Short)?;
    Ok((h, recs.to_vec()))
}

#[cfg(test)]
mod tests {
    use zerocopy::FromZeros;

    use super::*;

    #[test]
    fn decode_refuses_bad_magic_and_version_and_ignores_a_partial_record() {
        let mut h = FileHeader::new_zeroed();
        h.magic = MAGIC;
        h.version = VERSION;
        h.header_size = 64;
        h.record_size = u32::try_from(RECORD_SIZE).unwrap();
        let mut bytes = h.as_bytes().to_vec();
        bytes.extend(TenantDelta::new_zeroed().as_bytes());
        bytes.extend([0u8; 10]);
        assert_eq!(decode(&bytes).unwrap().1.len(), 1);
        bytes[0] = b'X';
        assert!(matches!(decode(&bytes), Err(FormatError::Magic)));
        bytes[0] = b'G';
        bytes[8] = 2;
        assert!(matches!(decode(&bytes), Err(FormatError::Version { .. })));
        assert!(matches!(decode(&bytes[..10]), Err(FormatError::Short)));
    }
}
