//! FUSE plumbing shared by `gpupm-driver`'s device node, `gpupmd`'s tenant
//! node and the `gpupm-mount` helper of the systemd units.
//!
//! - [`mount`]: opening `/dev/fuse` and mounting it on a directory with the
//!   mount syscall (as root; no `fusermount`), recovering a stale mount left
//!   by a crashed server, refusing a live one, lazily detaching a mount
//!   (then aborting its connection through fusectl), and cloning a mounted
//!   descriptor ([`clone_device`]) so that several threads serve it.
//! - [`procfs`]: what `/proc/<pid>/status` says about a FUSE caller
//!   (supplementary groups, a pending SIGKILL).
//! - [`systemd`]: handing a descriptor to the service manager's file
//!   descriptor store ([`store_fd`]) and taking one it passed
//!   ([`inherited_fd`]).
//!
//! # Why a separate mount helper
//! A sandboxed systemd service runs in its own mount namespace; a FUSE
//! mount it made itself would be invisible on the host. The units run
//! `gpupm-mount --dir DIR --fdname NAME` unsandboxed before the service:
//! it mounts `/dev/fuse` on `DIR` in the host namespace and stores the
//! descriptor under `NAME`; the service finds it with
//! [`inherited_fd`]`(NAME)`, serves it, and leaves the mount alone when it
//! exits. `gpupm-mount --dir DIR --unmount` (`ExecStopPost=`) removes it.

pub mod mount;
pub mod procfs;
mod sys;
pub mod systemd;
#[cfg(feature = "test-utils")]
pub mod testing;

pub use mount::{
    clone_device, detach, mount, recover_stale_mount, unmount, Connection, MountError, MountOptions,
};
pub use systemd::{inherited_fd, store_fd, StoreError};
