//! The commit mirror (`gpupm_uapi::mirror`, docs/pages.md): the driver's
//! shared-memory copy (readable by its owner, or also by its directory's
//! group) of the block slots each periodic commit wrote, with a sequence
//! lock and a futex doorbell.
//!
//! - [`MirrorWriter`]: creates the files and publishes commits (the
//!   driver);
//! - [`MirrorReader`]: opens and checks them, sleeps on the doorbell and
//!   reads slots consistently (the daemon's commit follower);
//! - `rings`: the ring area (ABI 1.10): the stream rings' records, which
//!   the writer copies and the reader (the daemon's drains) reads;
//! - `sys`: the module's `unsafe` (`openat`, shared mappings, atomics on
//!   them, the futex calls).

mod reader;
mod rings;
mod sys;
mod writer;

use std::fs::File;
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use gpupm_uapi::layout::{CTX_BLOCK_SLOTS, CTX_BLOCK_SLOT_BASE};
use gpupm_uapi::mirror::mirror_slot_offset;
use nix::unistd::getegid;

pub use self::reader::{MirrorError, MirrorReader, Snapshot};
pub use self::rings::{mirror_span, RingLayout, RingRead, MAX_MIRROR_RINGS};
pub use self::writer::{MirrorCommit, MirrorDirs, MirrorWriter};

/// Block slots the mirror holds: every slot of the memory window.
pub const MIRROR_SLOTS: u32 = CTX_BLOCK_SLOT_BASE + CTX_BLOCK_SLOTS;
/// Bytes of a mirror file with [`MIRROR_SLOTS`] slots.
pub const MIRROR_SIZE: u64 = mirror_slot_offset(MIRROR_SLOTS);
/// File name of the mirror in its directory.
pub const MIRROR_FILE: &str = "commits";
/// File name of the waiter word's file in the same directory.
pub const WAITERS_FILE: &str = "commits.waiters";

/// Which of the two mirror files is opened: what may be done with it and
/// which mode bits it may carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MirrorFile {
    /// The mirror itself: mapped read-only; no group write.
    Commits,
    /// The waiter word: mapped writable by the reader, so it may be
    /// group-writable, but only by the reader's own group: anyone who may
    /// write it may truncate it under the mappings (SIGBUS in the driver
    /// and the reader).
    Waiters,
}

/// The mode bits a mirror directory may not carry for its reader: write
/// by group or other (anyone who may write it could plant a file).
const DIR_FORBIDDEN: u32 = 0o022;

/// Opens `path` and checks it, on open descriptors (so nothing can be
/// swapped in between): its directory is opened first (not through a
/// final symlink) and must not be writable by group or other; the file
/// is then opened in that directory without following a symlink and must
/// be a regular file of at least
/// `min_size` bytes with the directory's owner (root, or the node's
/// server running unprivileged), no access for other, for
/// [`MirrorFile::Commits`] no group write, and for [`MirrorFile::Waiters`]
/// group write only when its group is this process's effective group. So
/// only root and the directory's owner can have placed it, and nobody but
/// them and the reader itself can shrink it under the mapping.
/// `PermissionDenied` for a file or directory that fails the owner or mode
/// check, `InvalidData` for one of the wrong type or size.
pub fn open_checked(path: &Path, which: MirrorFile, min_size: u64) -> io::Result<(File, u64)> {
    let (Some(dir_path), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: not a file in a directory", path.display()),
        ));
    };
    let dir = File::options()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir_path)?;
    let dir_meta = dir.metadata()?;
    let file = sys::open_in(&dir, name, which == MirrorFile::Waiters)?;
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
    let forbidden = match which {
        MirrorFile::Commits => 0o027,
        MirrorFile::Waiters if meta.gid() == getegid().as_raw() => 0o007,
        MirrorFile::Waiters => 0o027,
    };
    if meta.uid() != dir_meta.uid()
        || dir_meta.mode() & DIR_FORBIDDEN != 0
        || meta.mode() & forbidden != 0
    {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{}: owned by uid {} gid {} with mode {:o} in a directory of uid {} with mode {:o}; \
                 a mirror file must have its directory's owner, no other access and no group \
                 write (the waiter file: unless its group is the reader's own, gid {}), \
                 its directory no group or other write",
                path.display(),
                meta.uid(),
                meta.gid(),
                meta.mode() & 0o7777,
                dir_meta.uid(),
                dir_meta.mode() & 0o7777,
                getegid()
            ),
        ));
    }
    let ino = meta.ino();
    Ok((file, ino))
}

#[cfg(test)]
mod ring_tests;
#[cfg(test)]
mod tests;
