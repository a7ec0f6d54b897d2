//! Mounting the tenant node: `/dev/fuse` opened and mounted with the mount
//! syscall (as root; no `fusermount`), served by `fuser` on its own thread.
//!
//! The same steps as the device node's transport in
//! `gpupm_driver::node::fuse`; a shared helper could serve both.

use std::fs::{self, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use fuser::{Session, SessionACL};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sys::statfs::{statfs, FUSE_SUPER_MAGIC};

use super::fs::TenantFs;
use super::NODE_NAME;

/// How long unmounting waits for the session to end before aborting the
/// connection, and then before leaving the thread to end with the process.
const END_WAIT: Duration = Duration::from_millis(200);
const ABORT_WAIT: Duration = Duration::from_secs(2);

/// Why the node could not be mounted.
#[derive(Debug, thiserror::Error)]
pub(super) enum MountError {
    /// A system call failed.
    #[error("could not {op}")]
    Sys {
        /// What was attempted.
        op: &'static str,
        /// The system error.
        #[source]
        source: io::Error,
    },
    /// A FUSE file system that still answers is mounted there.
    #[error("a live FUSE mount is already there (another gpupmd running?)")]
    AlreadyMounted,
}

impl MountError {
    fn sys(op: &'static str) -> impl FnOnce(io::Error) -> MountError {
        move |source| MountError::Sys { op, source }
    }

    /// The message with its cause, for [`super::TenantError`].
    pub(super) fn describe(&self) -> String {
        match self {
            MountError::Sys { source, .. } => format!("{self}: {source}"),
            MountError::AlreadyMounted => self.to_string(),
        }
    }
}

fn errno(e: nix::errno::Errno) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

/// A mounted, served node directory.
#[derive(Debug)]
pub(super) struct Mounted {
    dir: PathBuf,
    session: Option<JoinHandle<()>>,
    ended: mpsc::Receiver<()>,
}

impl Mounted {
    /// Mounts `fs` at `dir` (recovering a stale mount), serves it, and
    /// returns once `node` answers.
    pub(super) fn mount(dir: &Path, fs: TenantFs) -> Result<Mounted, MountError> {
        recover_stale_mount(dir)?;
        fs::create_dir_all(dir).map_err(MountError::sys("create the node directory"))?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o755))
            .map_err(MountError::sys("set the node directory's mode"))?;
        let fuse = OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .map_err(MountError::sys("open /dev/fuse"))?;
        let fd = OwnedFd::from(fuse);
        let data = format!(
            "fd={},rootmode=40755,user_id=0,group_id=0,allow_other,default_permissions",
            fd.as_raw_fd()
        );
        let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
        mount(
            Some("gpupm-tenant"),
            dir,
            Some("fuse.gpupm-tenant"),
            flags,
            Some(data.as_str()),
        )
        .map_err(|e| MountError::Sys {
            op: "mount",
            source: errno(e),
        })?;
        let (ended_tx, ended) = mpsc::channel();
        let mut session = Session::from_fd(fs, fd, SessionACL::All);
        let spawned = thread::Builder::new()
            .name("gpupm-tenant-fuse".into())
            .spawn(move || {
                if let Err(e) = session.run() {
                    tracing::warn!(error = %e, "tenant node session ended with an error");
                }
                if ended_tx.send(()).is_err() {
                    tracing::debug!("nobody waits for the tenant node session");
                }
            });
        let mut mounted = Mounted {
            dir: dir.to_owned(),
            session: None,
            ended,
        };
        match spawned {
            Ok(t) => mounted.session = Some(t),
            Err(e) => {
                mounted.unmount();
                return Err(MountError::Sys {
                    op: "spawn the session thread",
                    source: e,
                });
            }
        }
        if let Err(e) = fs::metadata(dir.join(NODE_NAME)) {
            mounted.unmount();
            return Err(MountError::Sys {
                op: "probe the mounted node",
                source: e,
            });
        }
        Ok(mounted)
    }

    /// Detaches the mount and waits for the session to end; with files
    /// still open, aborts the connection so that their requests fail.
    pub(super) fn unmount(mut self) {
        let dev = fs::metadata(&self.dir).map(|m| m.dev()).ok();
        if let Err(e) = umount2(&self.dir, MntFlags::MNT_DETACH) {
            tracing::warn!(dir = %self.dir.display(), error = %e, "could not unmount the tenant node");
        }
        let Some(session) = self.session.take() else {
            return;
        };
        if self.ended.recv_timeout(END_WAIT).is_err() {
            if let Some(dev) = dev {
                abort_connection(dev);
            }
            if self.ended.recv_timeout(ABORT_WAIT).is_err() {
                tracing::warn!(
                    "tenant node session still busy after unmount; it ends with the process"
                );
                return;
            }
        }
        if session.join().is_err() {
            tracing::error!("tenant node session thread panicked");
        }
    }
}

/// Aborts the FUSE connection of device number `dev` through fusectl, if mounted.
fn abort_connection(dev: u64) {
    let path = format!(
        "/sys/fs/fuse/connections/{}/abort",
        nix::sys::stat::minor(dev)
    );
    if let Err(e) = fs::write(&path, b"1") {
        tracing::debug!(path, error = %e, "could not abort the FUSE connection");
    }
}

/// Detaches mounts left at `dir` by crashed instances (ENOTCONN; several
/// may be stacked after repeated crashes), and refuses to stack on a FUSE
/// mount that still answers.
fn recover_stale_mount(dir: &Path) -> Result<(), MountError> {
    // statfs, not stat: the kernel may answer stat of a dead FUSE root from
    // its attribute cache, while statfs always reaches the filesystem.
    let dead = |dir: &Path| {
        matches!(statfs(dir), Err(nix::errno::Errno::ENOTCONN))
            || fs::metadata(dir).is_err_and(|e| e.raw_os_error() == Some(libc::ENOTCONN))
    };
    for _ in 0..16 {
        match fs::metadata(dir) {
            _ if dead(dir) => {
                tracing::warn!(dir = %dir.display(), "stale tenant node mount from a crashed instance; detaching it");
                umount2(dir, MntFlags::MNT_DETACH).map_err(|e| MountError::Sys {
                    op: "detach the stale mount",
                    source: errno(e),
                })?;
            }
            Ok(_) if statfs(dir).is_ok_and(|s| s.filesystem_type() == FUSE_SUPER_MAGIC) => {
                return Err(MountError::AlreadyMounted)
            }
            _ => return Ok(()),
        }
    }
    Err(MountError::Sys { op: "detach stale mounts", source: io::Error::from_raw_os_error(libc::ENOTCONN) })
}
