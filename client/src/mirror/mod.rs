//! The commit mirror (`gpupm_uapi::mirror`, docs/pages.md): the driver's
//! root-only shared-memory copy of the block slots each periodic commit
//! wrote, with a sequence lock and a futex doorbell.
//!
//! - [`MirrorWriter`]: creates the files and publishes commits (the
//!   driver);
//! - [`MirrorReader`]: opens and checks them, sleeps on the doorbell and
//!   reads slots consistently (the daemon's commit follower);
//! - `sys`: the module's `unsafe` (shared mappings, atomics on them, the
//!   futex calls).

mod reader;
mod sys;
mod writer;

use std::fs::File;
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use gpupm_uapi::layout::{CTX_BLOCK_SLOTS, CTX_BLOCK_SLOT_BASE};
use gpupm_uapi::mirror::mirror_slot_offset;

pub use self::reader::{MirrorError, MirrorReader, Snapshot};
pub use self::writer::{MirrorCommit, MirrorWriter};

/// Block slots the mirror holds: every slot of the memory window.
pub const MIRROR_SLOTS: u32 = CTX_BLOCK_SLOT_BASE + CTX_BLOCK_SLOTS;
/// Bytes of a mirror file with [`MIRROR_SLOTS`] slots.
pub const MIRROR_SIZE: u64 = mirror_slot_offset(MIRROR_SLOTS);
/// File name of the mirror in its directory.
pub const MIRROR_FILE: &str = "commits";
/// File name of the waiter word's file in the same directory.
pub const WAITERS_FILE: &str = "commits.waiters";

/// Opens `path` without following a final symlink and checks, on the open
/// descriptor (so nothing can be swapped in between), that it is a regular
/// file owned by root, with no group or other access, at least `min_size`
/// bytes long. `PermissionDenied` for a file that fails the owner or mode
/// check, `InvalidData` for one of the wrong type or size.
pub fn open_checked(path: &Path, writable: bool, min_size: u64) -> io::Result<(File, u64)> {
    let file = File::options()
        .read(true)
        .write(writable)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() || meta.len() < min_size {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{}: not a regular file of at least {min_size} bytes",
                path.display()
            ),
        ));
    }
    if meta.uid() != 0 || meta.mode() & 0o077 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{}: owned by uid {} with mode {:o}; a mirror must be root's, mode 0600",
                path.display(),
                meta.uid(),
                meta.mode() & 0o7777
            ),
        ));
    }
    let ino = meta.ino();
    Ok((file, ino))
}

#[cfg(test)]
mod tests;
