//! FUSE plumbing shared by `gpupm-driver`'s device node, `gpupmd`'s tenant
//! node and the `gpupm-mount` helper of the systemd units.
//!
//! - [`mount`]: opening `/dev/fuse` and mounting it on a directory with the
//!   mount syscall (as root; no `fusermount`), recovering a stale mount left
//!   by a crashed server, refusing a live one, lazily detaching a mount
//!   (then aborting its connection through fusectl), and cloning a mounted
//!   descriptor ([`clone_device`]) so that several threads serve it.
//! - [`node`]: the kit both nodes are made of: a node says what its files
//!   do ([`node::NodeService`]); the kit serves them in a directory of
//!   their own ([`node::NodeFs`], one `fuser::Filesystem` for both) and
//!   mounts, serves and unmounts it ([`node::NodeMount`]).
//! - [`namespace`]: joining the service manager's mount namespace, where
//!   `gpupm-mount` must mount (see below).
//! - [`procfs`]: a FUSE request's [`Caller`] and what `/proc/<pid>/status`
//!   says about it (supplementary groups, a pending SIGKILL).
//! - [`parked`]: parked blocking requests as a node's reaper sees them, and
//!   the [`parked::Reaper`] thread that fails those of killed readers,
//!   off the node's lock.
//! - [`logging`]: the services' log setup (journald when its socket
//!   exists, else stderr), one for `gpupm-driver` and `gpupmd`.
//! - [`notify`]: the service manager's end of `$NOTIFY_SOCKET`, for
//!   programs that start the services themselves (`gpupm demo`, tests).
//! - [`systemd`]: handing a descriptor to the service manager's file
//!   descriptor store ([`store_fd`]) and taking one it passed
//!   ([`inherited_fd`]).
//!
//! # Why a separate mount helper
//! A sandboxed systemd service runs in its own mount namespace; a FUSE
//! mount it made itself would be invisible on the host. The units run
//! `gpupm-mount --mount-namespace /proc/1/ns/mnt --dir DIR --fdname NAME`
//! with full privileges (`+`) before the service: it joins the service
//! manager's mount namespace (systemd runs even `+` commands in the unit's
//! namespace, see [`namespace`]), mounts `/dev/fuse` on `DIR` there and
//! stores the descriptor under `NAME`; the service finds it with
//! [`inherited_fd`]`(NAME)`, serves it, and leaves the mount alone when it
//! exits. `gpupm-mount --mount-namespace /proc/1/ns/mnt --dir DIR
//! --unmount --fdname NAME` (`ExecStopPost=`) removes it and has the
//! manager close the stored descriptor.

mod flat;
pub mod logging;
pub mod mount;
pub mod namespace;
pub mod node;
pub mod notify;
pub mod parked;
pub mod procfs;
mod sys;
pub mod systemd;

pub use mount::{
    clone_device, detach, is_mounted, mount, mount_type, recover_stale_mount, unmount, Connection,
    MountError, MountOptions,
};
pub use namespace::{join_mount_namespace, NamespaceError};
pub use procfs::Caller;
pub use systemd::{inherited_fd, remove_stored_fd, store_fd, StoreError};
