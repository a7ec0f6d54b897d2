//! The FUSE transport: a directory holding `card0` and `card0-oob`, served
//! by `fuser` from a `/dev/fuse` descriptor that this module mounts itself
//! (as root, through [`gpupm_fusemount`]; no `fusermount` needed), or that
//! the service manager passed (mounted by `gpupm-mount`, see
//! [`FuseTransport::inherited`]).
//!
//! Files are opened with `FOPEN_DIRECT_IO`, so every read and write reaches
//! the driver with the caller's offset and size and nothing is cached.
//!
//! # Serving threads
//! Requests are served by [`FuseTransport::with_threads`] event-loop
//! threads (default [`DEFAULT_THREADS`](super::DEFAULT_THREADS)), each
//! reading its own clone of the `/dev/fuse` descriptor
//! (`FUSE_DEV_IOC_CLONE`, also of an inherited one) so that a register
//! read or a handshake batch does not queue behind a bulk memory-window
//! read in progress on another thread. Where `/dev/fuse` cannot be opened
//! (a sandbox's private `/dev`) the threads share the one descriptor, which
//! the kernel also serves concurrently. Every request runs under the
//! [`NodeCore`] lock for its whole device access, so a `GPUPM_IOC_REG_BATCH`
//! stays atomic and handle cursors stay consistent whatever the thread
//! count. A blocking interrupt read never holds a thread: its reply is
//! parked in [`NodeCore`] and sent from whichever thread delivers the next
//! record; so is a `GPUPM_IOC_WAIT_COMMIT`'s, sent by the thread whose
//! tick or request made the commit it waited for.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use fuser::{
    Config, Errno, FileHandle, Filesystem, FopenFlags, INodeNo, IoctlFlags, LockOwner, OpenFlags,
    PollEvents, PollFlags, PollNotifier, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyIoctl, ReplyOpen, ReplyPoll, ReplyWrite, Request, Session, SessionACL,
    WriteFlags,
};
use gpupm_fusemount::flat::{poll_wake, FileAccess, FlatDir, ROOT_INO};
use gpupm_fusemount::{MountError, MountOptions};
use gpupm_uapi::regs;

use super::access::Caller;
use super::device::{NodeCore, NodeKind};
use super::error::NodeError;
use super::{Transport, TransportError, CARD_NAME, DEFAULT_THREADS, OOB_NAME};

const CARD_INO: INodeNo = INodeNo(2);
const OOB_INO: INodeNo = INodeNo(3);
/// The files of the node directory.
const FILES: &[(INodeNo, &str)] = &[(CARD_INO, CARD_NAME), (OOB_INO, OOB_NAME)];
/// How long `unmount` waits for the session thread to end by itself.
const SESSION_END_WAIT: Duration = Duration::from_secs(2);
/// Source and subtype of the mount (`fuse.gpupm`).
const FS_NAME: &str = "gpupm";

/// Who made the mount, and so who takes it away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    /// `mount` mounts it and `unmount` removes it.
    Transport,
    /// Mounted by someone else (`gpupm-mount`), who also removes it:
    /// `mount` and `unmount` do nothing.
    Inherited,
}

/// The FUSE transport.
#[derive(Debug)]
pub struct FuseTransport {
    dir: PathBuf,
    core: Arc<NodeCore>,
    owner: Owner,
    threads: NonZeroUsize,
    fuse_fd: Option<OwnedFd>,
    session: Option<JoinHandle<io::Result<()>>>,
    mounted: bool,
}

impl FuseTransport {
    /// A transport that will mount and serve `core` in directory `dir`.
    pub fn new(dir: impl Into<PathBuf>, core: Arc<NodeCore>) -> Self {
        FuseTransport {
            dir: dir.into(),
            core,
            owner: Owner::Transport,
            threads: DEFAULT_THREADS,
            fuse_fd: None,
            session: None,
            mounted: false,
        }
    }

    /// A transport that serves `core` on `fd`, a `/dev/fuse` descriptor
    /// already mounted at `dir` by its owner (the service manager passed
    /// it; see [`gpupm_fusemount::inherited_fd`]). It never mounts or
    /// unmounts: the mount stays when the driver exits, until its owner
    /// takes it away (`gpupm-mount --unmount`).
    pub fn inherited(dir: impl Into<PathBuf>, core: Arc<NodeCore>, fd: OwnedFd) -> Self {
        FuseTransport {
            dir: dir.into(),
            core,
            owner: Owner::Inherited,
            threads: DEFAULT_THREADS,
            fuse_fd: Some(fd),
            session: None,
            mounted: false,
        }
    }

    /// Serves requests from `threads` event-loop threads (see the module
    /// documentation); one serialises every request behind the previous one.
    pub fn with_threads(mut self, threads: NonZeroUsize) -> Self {
        self.threads = threads;
        self
    }

    /// The session configuration for `fd`: cloned descriptors when there is
    /// more than one thread and `/dev/fuse` can be opened here.
    fn session_config(&self, fd: &OwnedFd) -> Config {
        let mut config = Config::default();
        config.acl = SessionACL::All;
        config.n_threads = Some(self.threads.get());
        if self.threads.get() > 1 {
            // A trial clone, closed at once, proves that fuser's own clones
            // will succeed: a failed clone inside the session would end it.
            match gpupm_fusemount::clone_device(fd.as_fd()) {
                Ok(_trial) => config.clone_fd = true,
                Err(e) => tracing::info!(
                    error = %e,
                    threads = self.threads.get(),
                    "cannot clone the /dev/fuse descriptor; the serving threads share it"
                ),
            }
        }
        config
    }

    fn probe(&self) -> Result<(), TransportError> {
        let err = |source| TransportError::Probe {
            dir: self.dir.clone(),
            source,
        };
        let card = File::open(self.dir.join(CARD_NAME)).map_err(err)?;
        let mut id = [0u8; 4];
        card.read_exact_at(&mut id, regs::ID).map_err(err)?;
        if u32::from_le_bytes(id) != regs::DEVICE_MAGIC {
            return Err(err(io::Error::other(
                "ID register does not read DEVICE_MAGIC",
            )));
        }
        Ok(())
    }
}

impl From<MountError> for TransportError {
    fn from(e: MountError) -> Self {
        match e {
            MountError::AlreadyMounted(dir) => TransportError::AlreadyMounted(dir),
            MountError::Sys { op, dir, source } => TransportError::Mount { op, dir, source },
            MountError::NotFuse { ref dir, .. } => TransportError::Mount {
                op: "unmount",
                dir: dir.clone(),
                source: io::Error::other(e.to_string()),
            },
        }
    }
}

impl Transport for FuseTransport {
    fn mount(&mut self) -> Result<(), TransportError> {
        if self.owner == Owner::Inherited {
            return Ok(());
        }
        let fd = gpupm_fusemount::mount(&self.dir, &MountOptions::new(FS_NAME))?;
        self.fuse_fd = Some(fd);
        self.mounted = true;
        tracing::info!(dir = %self.dir.display(), "device node mounted");
        Ok(())
    }

    fn serve(&mut self) -> Result<(), TransportError> {
        let fd = self.fuse_fd.take().ok_or(TransportError::NotMounted)?;
        let fs = FuseFs::new(Arc::clone(&self.core));
        let config = self.session_config(&fd);
        tracing::info!(
            threads = self.threads.get(),
            cloned_fds = config.clone_fd,
            "serving the device node"
        );
        // `from_fd` answers FUSE_INIT, which the kernel queued at mount
        // time; `run` spawns the event-loop threads and joins them.
        let thread = thread::Builder::new()
            .name("gpupm-fuse".into())
            .spawn(move || Session::from_fd(fs, fd, SessionACL::All, config)?.run())
            .map_err(|source| TransportError::Mount {
                op: "spawn session thread",
                dir: self.dir.clone(),
                source,
            })?;
        self.session = Some(thread);
        self.probe()
            .map_err(|e| self.session_failure().unwrap_or(e))
    }

    fn is_serving(&self) -> bool {
        self.session.as_ref().is_some_and(|t| !t.is_finished())
    }

    fn unmount(&mut self) -> Result<(), TransportError> {
        if !self.mounted {
            return Ok(());
        }
        let conn = gpupm_fusemount::detach(&self.dir)?;
        self.mounted = false;
        tracing::info!(dir = %self.dir.display(), "device node unmounted");
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        // With no file open the kernel ends the connection now; otherwise
        // abort it so that open handles fail instead of pinning the session.
        if !wait_finished(&session, SESSION_END_WAIT / 20) {
            if let Some(conn) = conn {
                conn.abort();
            }
        }
        if wait_finished(&session, SESSION_END_WAIT) {
            match session.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "FUSE session ended with an error"),
                Err(_) => tracing::error!("FUSE session thread panicked"),
            }
        } else {
            tracing::warn!("FUSE session still busy after unmount; it ends with the process");
        }
        Ok(())
    }
}

impl FuseTransport {
    /// The session's own error when it has already ended: more telling than
    /// the failed probe it caused.
    fn session_failure(&mut self) -> Option<TransportError> {
        if !self.session.as_ref()?.is_finished() {
            return None;
        }
        let source = match self.session.take()?.join() {
            Ok(Ok(())) => io::Error::other("the session ended at once"),
            Ok(Err(e)) => e,
            Err(_) => io::Error::other("the session thread panicked"),
        };
        Some(TransportError::Mount {
            op: "start the FUSE session",
            dir: self.dir.clone(),
            source,
        })
    }
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

/// The FUSE filesystem of the node directory.
struct FuseFs {
    core: Arc<NodeCore>,
    dir: FlatDir,
}

fn errno(e: &NodeError) -> Errno {
    Errno::from_i32(e.errno())
}

impl FuseFs {
    fn new(core: Arc<NodeCore>) -> Self {
        FuseFs {
            core,
            dir: FlatDir::new(FILES),
        }
    }

    /// Mode and group of the node files (the policy's).
    fn access(&self) -> FileAccess {
        let policy = self.core.policy();
        FileAccess {
            perm: policy.file_mode(),
            gid: policy.admin_gid().unwrap_or(0),
        }
    }

    /// Checks the request's credentials; on refusal the caller replies EACCES.
    fn allowed(&self, req: &Request) -> Result<(), Errno> {
        self.core.check(Caller::of(req)).map_err(|e| {
            tracing::debug!(error = %e, "request refused");
            errno(&e)
        })
    }
}

impl Filesystem for FuseFs {
    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if let Err(e) = self.allowed(req) {
            return reply.error(e);
        }
        self.dir.reply_lookup(parent, name, self.access(), reply);
    }

    fn getattr(&self, req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if let Err(e) = self.allowed(req) {
            return reply.error(e);
        }
        self.dir.reply_attr(ino, self.access(), reply);
    }

    fn open(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if let Err(e) = self.allowed(req) {
            return reply.error(e);
        }
        let kind = match ino {
            CARD_INO => NodeKind::Card,
            OOB_INO => NodeKind::Oob,
            ROOT_INO => return reply.error(Errno::EISDIR),
            _ => return reply.error(Errno::ENOENT),
        };
        reply.opened(
            FileHandle(self.core.open(kind)),
            FopenFlags::FOPEN_DIRECT_IO,
        );
    }

    fn read(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        if let Err(e) = self.allowed(req) {
            return reply.error(e);
        }
        let nonblock = flags.0 & libc::O_NONBLOCK != 0;
        self.core.read(
            fh.0,
            offset,
            size,
            nonblock,
            req.pid(),
            Box::new(move |res| match res {
                Ok(bytes) => reply.data(&bytes),
                Err(e) => reply.error(errno(&e)),
            }),
        );
    }

    fn write(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        if let Err(e) = self.allowed(req) {
            return reply.error(e);
        }
        match self.core.write(fh.0, offset, data) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.core.release(fh.0);
        reply.ok();
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if let Err(e) = self.allowed(req) {
            return reply.error(e);
        }
        self.dir.reply_opendir(ino, reply);
    }

    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        if let Err(e) = self.allowed(req) {
            return reply.error(e);
        }
        self.dir.reply_readdir(ino, offset, reply);
    }

    fn ioctl(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        if let Err(e) = self.allowed(req) {
            return reply.error(e);
        }
        // A commit wait's reply is kept and sent by the thread that
        // answers it (fuser's replies are `Send`): no serving thread waits.
        self.core.ioctl_deferred(
            fh.0,
            cmd,
            in_data,
            out_size,
            req.pid(),
            Box::new(move |res| match res {
                Ok(r) => {
                    let n = r.data.len().min(out_size as usize);
                    reply.ioctl(r.result, &r.data[..n]);
                }
                Err(e) => {
                    tracing::debug!(cmd = format_args!("{cmd:#010x}"), error = %e, "ioctl refused");
                    reply.error(errno(&e));
                }
            }),
        );
    }

    fn poll(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        ph: PollNotifier,
        events: PollEvents,
        flags: PollFlags,
        reply: ReplyPoll,
    ) {
        if let Err(e) = self.allowed(req) {
            return reply.error(e);
        }
        match self.core.poll(fh.0, events.bits(), poll_wake(ph, flags)) {
            Ok(revents) => reply.poll(PollEvents::from_bits_retain(revents)),
            Err(e) => reply.error(errno(&e)),
        }
    }
}
