//! Serving the tenant node: a `/dev/fuse` descriptor mounted here through
//! [`gpupm_fusemount`] (as root; no `fusermount`) or passed by the service
//! manager (mounted by `gpupm-mount`), served by `fuser` event-loop threads,
//! each on its own clone of the descriptor where `/dev/fuse` can be opened
//! (they share it otherwise). Handles, sessions and parked reads live
//! behind the [`Sessions`](super::session::Sessions) lock, so any thread
//! may serve any request, and a blocking read holds none of them.

use std::io;
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use fuser::{Config, Session, SessionACL};
use gpupm_fusemount::{MountError, MountOptions};

use super::fs::TenantFs;
use super::NODE_NAME;

/// How long unmounting waits for the session to end before aborting the
/// connection, and then before leaving the thread to end with the process.
const END_WAIT: Duration = Duration::from_millis(200);
const ABORT_WAIT: Duration = Duration::from_secs(2);
/// Source and subtype of the mount (`fuse.gpupm-tenant`).
const FS_NAME: &str = "gpupm-tenant";

/// Why the node could not be served.
#[derive(Debug, thiserror::Error)]
pub(super) enum ServeError {
    /// Mounting failed.
    #[error(transparent)]
    Mount(#[from] MountError),
    /// A system call failed.
    #[error("could not {op}")]
    Sys {
        /// What was attempted.
        op: &'static str,
        /// The system error.
        #[source]
        source: io::Error,
    },
}

/// `threads` event loops, on cloned descriptors when `/dev/fuse` can be
/// opened here. The trial clone (closed at once) proves fuser's own clones
/// will succeed: one failing inside the session would end it.
fn session_config(fd: &OwnedFd, threads: NonZeroUsize) -> Config {
    let mut config = Config::default();
    config.acl = SessionACL::All;
    config.n_threads = Some(threads.get());
    if threads.get() > 1 {
        match gpupm_fusemount::clone_device(fd.as_fd()) {
            Ok(_trial) => config.clone_fd = true,
            Err(e) => tracing::info!(
                error = %e,
                threads = threads.get(),
                "cannot clone the tenant node's /dev/fuse descriptor; the serving threads share it"
            ),
        }
    }
    config
}

/// A served node directory.
#[derive(Debug)]
pub(super) struct Mounted {
    dir: PathBuf,
    /// Whether this process made the mount (and so takes it away).
    owned: bool,
    session: Option<JoinHandle<()>>,
    ended: mpsc::Receiver<()>,
}

impl Mounted {
    /// Mounts `fs` at `dir` (recovering a stale mount), serves it from
    /// `threads` threads, and returns once `node` answers.
    pub(super) fn mount(
        dir: &Path,
        fs: TenantFs,
        threads: NonZeroUsize,
    ) -> Result<Mounted, ServeError> {
        let fd = gpupm_fusemount::mount(dir, &MountOptions::new(FS_NAME))?;
        Mounted::serve(dir, fd, fs, threads, true)
    }

    /// Serves `fs` on `fd`, a `/dev/fuse` descriptor someone else mounted
    /// at `dir`, and returns once `node` answers. The mount is left alone
    /// when the node is dropped.
    pub(super) fn serve_inherited(
        dir: &Path,
        fd: OwnedFd,
        fs: TenantFs,
        threads: NonZeroUsize,
    ) -> Result<Mounted, ServeError> {
        Mounted::serve(dir, fd, fs, threads, false)
    }

    fn serve(
        dir: &Path,
        fd: OwnedFd,
        fs: TenantFs,
        threads: NonZeroUsize,
        owned: bool,
    ) -> Result<Mounted, ServeError> {
        let (ended_tx, ended) = mpsc::channel();
        let config = session_config(&fd, threads);
        // `from_fd` answers FUSE_INIT (queued at mount time); `run` spawns
        // the event-loop threads and joins them.
        let spawned = thread::Builder::new()
            .name("gpupm-tenant-fuse".into())
            .spawn(move || {
                let served =
                    Session::from_fd(fs, fd, SessionACL::All, config).and_then(Session::run);
                if let Err(e) = served {
                    tracing::warn!(error = %e, "tenant node session ended with an error");
                }
                if ended_tx.send(()).is_err() {
                    tracing::debug!("nobody waits for the tenant node session");
                }
            });
        let mut mounted = Mounted {
            dir: dir.to_owned(),
            owned,
            session: None,
            ended,
        };
        match spawned {
            Ok(t) => mounted.session = Some(t),
            Err(source) => {
                mounted.unmount();
                return Err(ServeError::Sys {
                    op: "spawn the session thread",
                    source,
                });
            }
        }
        if let Err(source) = std::fs::metadata(dir.join(NODE_NAME)) {
            mounted.unmount();
            return Err(ServeError::Sys {
                op: "probe the mounted node",
                source,
            });
        }
        Ok(mounted)
    }

    /// Detaches a mount this process made and waits for the session to
    /// end; with files still open, aborts the connection so that their
    /// requests fail. An inherited mount stays, and its session thread
    /// keeps answering until the process exits or the mount's owner takes
    /// it away.
    pub(super) fn unmount(mut self) {
        if !self.owned {
            return;
        }
        let conn = match gpupm_fusemount::detach(&self.dir) {
            Ok(conn) => conn,
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), error = %e, "could not unmount the tenant node");
                None
            }
        };
        let Some(session) = self.session.take() else {
            return;
        };
        if self.ended.recv_timeout(END_WAIT).is_err() {
            if let Some(conn) = conn {
                conn.abort();
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

    /// Whether this process made the mount.
    pub(super) fn is_owned(&self) -> bool {
        self.owned
    }
}
