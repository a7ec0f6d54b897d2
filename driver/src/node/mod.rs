//! The device as a character-device-like node.
//!
//! # File protocol of `card0`
//! - `pread`/`pwrite` of exactly 4 or 8 bytes at an offset below
//!   [`MEM_WINDOW_OFFSET`](gpupm_uapi::layout::MEM_WINDOW_OFFSET) access the
//!   BAR0 register at that offset (little-endian). The offset must be
//!   aligned to the width and the access must lie inside `BAR0_SIZE`;
//!   otherwise EINVAL and nothing changes. 64-bit registers are read
//!   atomically with one 8-byte read.
//! - `pread` at offsets at or above `MEM_WINDOW_OFFSET` reads the device
//!   memory window (blocks and stream rings) in bulk; the window is read-only.
//! - `read()` of at least 32 bytes (one
//!   [`InterruptRecord`](gpupm_uapi::intr::InterruptRecord)) returns whole
//!   interrupt records at the handle's own cursor, oldest first; the file
//!   offset is ignored. It blocks until a record exists, or fails with
//!   EAGAIN on an `O_NONBLOCK` handle. A handle's cursor starts at the next
//!   record raised after `open`, so every handle sees every record; a `seq`
//!   gap means records were dropped by the device's retention.
//! - `poll()`: `POLLIN` when the handle has unread records; `POLLPRI` while
//!   an unmasked source is latched in `INTR_STATUS` (level, until acked).
//! - ioctls of [`gpupm_uapi::ioctl`]; an unknown number fails with ENOTTY, a
//!   known number with the wrong size, or an argument with a wrong version,
//!   flags, reserved field or range, fails with EINVAL and changes nothing.
//!   A failed `GPUPM_IOC_REG_BATCH` fails with the op's errno and still
//!   copies back the argument with `failed_index` set.
//!
//! `card0-oob` accepts only 4/8-byte `pread`/`pwrite` of the `OOB_MBOX_*`
//! registers (the BMC path); `card0` reaches every register but those.
//! `GPUPM_IOC_LEDGER` exists only when the driver runs with
//! `--debug-ledger` (otherwise ENOTTY).
//!
//! Every request's uid/gid is checked against the admin policy
//! ([`access`]); others get EACCES, on `open` and on every later request.

pub mod access;
pub mod backend;
pub mod commit_wait;
pub mod cuse;
pub mod device;
pub mod error;
pub mod fuse;
pub mod ioctl;
pub mod mirror;
pub mod model_backend;
pub mod reg_access;
pub mod ticker;

use std::io;
use std::num::NonZeroUsize;
use std::path::PathBuf;

/// The node's well-known paths: its default directory and file names.
pub use gpupm_client::paths::{CARD_NAME, DEFAULT_NODE_DIR, OOB_NAME};
/// Serving threads of the node when `--threads` is not given: two, so
/// that a handshake batch need not wait for a bulk memory-window read.
pub const DEFAULT_THREADS: NonZeroUsize = NonZeroUsize::MIN.saturating_add(1);

/// How the node is made visible to other processes: a FUSE directory
/// ([`fuse::FuseTransport`], `card0` and `card0-oob`) or a character
/// device ([`cuse::CuseTransport`], `/dev/gpupm0`).
pub trait Transport {
    /// Makes the node visible at its location (recovering a stale instance).
    fn mount(&mut self) -> Result<(), TransportError>;
    /// Starts answering requests on a background thread and returns once
    /// the node answers a register read.
    fn serve(&mut self) -> Result<(), TransportError>;
    /// Whether the serving thread still runs.
    fn is_serving(&self) -> bool;
    /// Removes the node; requests still in flight fail. Idempotent.
    fn unmount(&mut self) -> Result<(), TransportError>;
}

/// Why the transport could not mount, serve or unmount.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// A mount-related system call failed.
    #[error("could not {op} at {dir}")]
    Mount {
        /// What was attempted.
        op: &'static str,
        /// The node directory.
        dir: PathBuf,
        /// The system error.
        #[source]
        source: io::Error,
    },
    /// Another live instance serves the directory.
    #[error("{0} is already a live FUSE mount (another gpupm-driver?)")]
    AlreadyMounted(PathBuf),
    /// `serve` was called before `mount`.
    #[error("the node is not mounted")]
    NotMounted,
    /// The kernel has no CUSE (no `/dev/cuse`).
    #[error("{0} does not exist: this kernel has no CUSE (load the cuse module, or use --transport fuse)")]
    CuseAbsent(PathBuf),
    /// Another CUSE server already has the device name.
    #[error("{0} is already served (another gpupm-driver?)")]
    DeviceExists(PathBuf),
    /// Creating or serving the character device failed.
    #[error("could not {op} {path}")]
    Cuse {
        /// What was attempted.
        op: &'static str,
        /// The file concerned.
        path: PathBuf,
        /// The system error.
        #[source]
        source: io::Error,
    },
    /// The freshly mounted node did not answer a register read.
    #[error("the node at {dir} does not answer")]
    Probe {
        /// The node directory.
        dir: PathBuf,
        /// The failure.
        #[source]
        source: io::Error,
    },
}
