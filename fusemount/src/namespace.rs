//! Joining another process's mount namespace, for `gpupm-mount`.
//!
//! systemd runs every process of a unit that has any file-system
//! sandboxing option in a mount namespace of its own whose propagation
//! towards the host is cut (`MS_SLAVE`); the `+` prefix of `ExecStartPre=`
//! only leaves out the sandbox's restrictions, not the namespace, and a
//! mount made in it disappears when the command exits (systemd.exec(5),
//! `PrivateMounts=`). Seen with systemd 252: the helper's FUSE mount was
//! gone before the service started and the stored descriptor reported
//! `EPOLLERR`, so systemd dropped it from the store. `gpupm-mount
//! --mount-namespace /proc/1/ns/mnt` therefore mounts (and unmounts) in the
//! service manager's namespace, where everybody sees the node; the
//! service's own namespace, set up after the helper exits, starts as a copy
//! of it and so contains the mount.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::sched::{setns, CloneFlags};

/// Why the namespace could not be joined.
#[derive(Debug, thiserror::Error)]
#[error("could not {op} mount namespace {path}")]
pub struct NamespaceError {
    /// What was attempted.
    op: &'static str,
    /// The namespace file.
    path: PathBuf,
    /// The system error.
    #[source]
    source: io::Error,
}

/// Makes `ns` (a mount namespace file such as `/proc/1/ns/mnt`) this
/// process's mount namespace; root and working directory become that
/// namespace's root. Returns `false` when the process is in it already.
///
/// Needs `CAP_SYS_ADMIN` and `CAP_SYS_CHROOT`, and must run before the
/// process starts a thread: the kernel refuses (`EINVAL`) to move a process
/// whose file-system attributes other threads share.
pub fn join_mount_namespace(ns: &Path) -> Result<bool, NamespaceError> {
    let err = |op| {
        move |source| NamespaceError {
            op,
            path: ns.to_owned(),
            source,
        }
    };
    let target = File::open(ns).map_err(err("open"))?;
    let theirs = target.metadata().map_err(err("inspect"))?;
    let ours = fs::metadata("/proc/self/ns/mnt").map_err(err("compare with"))?;
    if (theirs.dev(), theirs.ino()) == (ours.dev(), ours.ino()) {
        return Ok(false);
    }
    setns(&target, CloneFlags::CLONE_NEWNS)
        .map_err(|e| err("join")(io::Error::from_raw_os_error(e as i32)))?;
    Ok(true)
}
