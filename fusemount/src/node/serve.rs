//! Mounting a node's directory, serving it and taking it away.
//!
//! The `/dev/fuse` descriptor is mounted here ([`crate::mount`], as root;
//! no `fusermount`) or passed by the service manager, mounted by
//! `gpupm-mount` ([`NodeMount::inherited`]). A `fuser` session serves it
//! from a thread of its own with the node's number of event-loop threads,
//! each reading its own clone of the descriptor (`FUSE_DEV_IOC_CLONE`) so
//! that a quick request does not queue behind a slow one on another
//! thread; where `/dev/fuse` cannot be opened (a sandbox's private `/dev`)
//! they share the one descriptor, which the kernel also serves
//! concurrently. The node keeps its state behind its own lock, so any
//! thread may serve any request.

use std::io;
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use fuser::{Config, Session, SessionACL};

use super::{NodeFs, NodeService};
use crate::mount::{MountError, MountOptions};

/// How long unmounting waits for the session to end by itself (it does at
/// once when no file is open) before aborting the connection.
const END_WAIT: Duration = Duration::from_millis(100);
/// How long it then waits before leaving the session to end with the
/// process.
const ABORT_WAIT: Duration = Duration::from_secs(2);

/// Why a node could not be served.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Mounting failed.
    #[error(transparent)]
    Mount(#[from] MountError),
    /// `serve` came before `mount`, or a second time.
    #[error("the node is not mounted")]
    NotMounted,
    /// The session's thread could not start.
    #[error("could not spawn the session thread")]
    Spawn(#[source] io::Error),
    /// The session ended as it started (its own error says more than the
    /// probe it failed).
    #[error("the FUSE session ended as it started")]
    Session(#[source] io::Error),
    /// The node was served but did not answer the probe.
    #[error("the mounted node does not answer")]
    Probe(#[source] io::Error),
}

/// A node directory's mount and the session serving it.
#[derive(Debug)]
pub struct NodeMount {
    dir: PathBuf,
    /// Source and subtype of the mount (`fuse.NAME`); `NAME-fuse` names
    /// the session thread.
    name: &'static str,
    /// Whether this process mounts the directory, and so takes it away.
    mounts_itself: bool,
    /// A mounted descriptor not served yet.
    fd: Option<OwnedFd>,
    /// Whether this process's mount is in place.
    mounted: bool,
    session: Option<JoinHandle<io::Result<()>>>,
}

impl NodeMount {
    /// A node that [`Self::mount`] mounts at `dir` as `fuse.NAME`, and
    /// [`Self::unmount`] takes away.
    pub fn new(dir: impl Into<PathBuf>, name: &'static str) -> NodeMount {
        NodeMount {
            dir: dir.into(),
            name,
            mounts_itself: true,
            fd: None,
            mounted: false,
            session: None,
        }
    }

    /// A node served on `fd`, a `/dev/fuse` descriptor its owner (the
    /// service manager, through `gpupm-mount`) already mounted at `dir`.
    /// Mounting and unmounting do nothing: the mount stays when the
    /// process exits, until its owner takes it away, and until then the
    /// session keeps answering.
    pub fn inherited(dir: impl Into<PathBuf>, name: &'static str, fd: OwnedFd) -> NodeMount {
        NodeMount {
            dir: dir.into(),
            name,
            mounts_itself: false,
            fd: Some(fd),
            mounted: false,
            session: None,
        }
    }

    /// The node directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether this process mounts the directory (not an inherited one).
    pub fn mounts_itself(&self) -> bool {
        self.mounts_itself
    }

    /// Mounts the directory (recovering a stale mount of a crashed server,
    /// refusing a live one); nothing for an inherited descriptor, or when
    /// mounted already.
    pub fn mount(&mut self) -> Result<(), MountError> {
        if !self.mounts_itself || self.mounted {
            return Ok(());
        }
        let fd = crate::mount::mount(&self.dir, &MountOptions::new(self.name))?;
        self.fd = Some(fd);
        self.mounted = true;
        Ok(())
    }

    /// Serves `service` from `threads` event-loop threads and returns once
    /// `probe` (given the directory) proves the node answers. On failure
    /// the mount this process made is taken away again.
    pub fn serve<S: NodeService>(
        &mut self,
        service: S,
        threads: NonZeroUsize,
        probe: impl FnOnce(&Path) -> io::Result<()>,
    ) -> Result<(), ServeError> {
        let res = self.start(service, threads, probe);
        if res.is_err() {
            if let Err(e) = self.unmount() {
                tracing::warn!(dir = %self.dir.display(), error = %e, "could not unmount after a failed start");
            }
        }
        res
    }

    fn start<S: NodeService>(
        &mut self,
        service: S,
        threads: NonZeroUsize,
        probe: impl FnOnce(&Path) -> io::Result<()>,
    ) -> Result<(), ServeError> {
        let fd = self.fd.take().ok_or(ServeError::NotMounted)?;
        let config = session_config(&fd, threads);
        tracing::info!(
            dir = %self.dir.display(),
            threads = threads.get(),
            cloned_fds = config.clone_fd,
            "serving the {} node",
            self.name
        );
        let fs = NodeFs::new(service);
        let name = self.name;
        // `from_fd` answers FUSE_INIT, which the kernel queued at mount
        // time; `run` spawns the event-loop threads and joins them. The
        // thread says how it ended itself: an inherited mount's session is
        // never joined.
        let thread = thread::Builder::new()
            .name(format!("{name}-fuse"))
            .spawn(move || {
                let served = Session::from_fd(fs, fd, SessionACL::All, config).and_then(Session::run);
                if let Err(e) = &served {
                    tracing::warn!(error = %e, "the {name} node's FUSE session ended with an error");
                }
                served
            })
            .map_err(ServeError::Spawn)?;
        self.session = Some(thread);
        probe(&self.dir).map_err(|e| self.session_failure().unwrap_or(ServeError::Probe(e)))
    }

    /// The session's own error when it has already ended.
    fn session_failure(&mut self) -> Option<ServeError> {
        if !self.session.as_ref()?.is_finished() {
            return None;
        }
        let source = match self.session.take()?.join() {
            Ok(Ok(())) => io::Error::other("the session ended at once"),
            Ok(Err(e)) => e,
            Err(_) => io::Error::other("the session thread panicked"),
        };
        Some(ServeError::Session(source))
    }

    /// Whether the session still runs.
    pub fn is_serving(&self) -> bool {
        self.session.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Detaches this process's mount and waits for the session to end;
    /// with files still open, aborts the connection so that their requests
    /// fail instead of pinning the session. Nothing for an inherited mount
    /// or one already taken away. Returns whether it took a mount away.
    pub fn unmount(&mut self) -> Result<bool, MountError> {
        if !self.mounted {
            return Ok(false);
        }
        let conn = crate::mount::detach(&self.dir)?;
        self.mounted = false;
        self.fd = None;
        let Some(session) = self.session.take() else {
            return Ok(true);
        };
        if !wait_finished(&session, END_WAIT) {
            if let Some(conn) = conn {
                conn.abort();
            }
            if !wait_finished(&session, ABORT_WAIT) {
                tracing::warn!(
                    "the {} node's FUSE session is still busy after unmount; it ends with the process",
                    self.name
                );
                return Ok(true);
            }
        }
        if session.join().is_err() {
            tracing::error!("the {} node's FUSE session thread panicked", self.name);
        }
        Ok(true)
    }
}

/// `threads` event loops, on cloned descriptors when `/dev/fuse` can be
/// opened here. The trial clone (closed at once) proves fuser's own clones
/// will succeed: one failing inside the session would end it. Any user may
/// reach the mount (it is `allow_other`): the node checks each caller.
fn session_config(fd: &OwnedFd, threads: NonZeroUsize) -> Config {
    let mut config = Config::default();
    config.acl = SessionACL::All;
    config.n_threads = Some(threads.get());
    if threads.get() > 1 {
        match crate::mount::clone_device(fd.as_fd()) {
            Ok(_trial) => config.clone_fd = true,
            Err(e) => tracing::info!(
                error = %e,
                threads = threads.get(),
                "cannot clone the /dev/fuse descriptor; the serving threads share it"
            ),
        }
    }
    config
}

fn wait_finished<T>(t: &JoinHandle<T>, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while !t.is_finished() {
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(5));
    }
    true
}
