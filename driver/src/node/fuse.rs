//! The FUSE transport: a directory holding `card0` and `card0-oob`, served
//! by `fuser` from a `/dev/fuse` descriptor that this module mounts itself
//! (as root, through [`gpupm_fusemount`]; no `fusermount` needed), or that
//! the service manager passed (mounted by `gpupm-mount`, see
//! [`FuseTransport::inherited`]).
//!
//! Files are opened with `FOPEN_DIRECT_IO`, so every read and write reaches
//! the driver with the caller's offset and size and nothing is cached.
//! Requests are served on one session thread; a blocking interrupt read
//! never holds it: its reply is parked in [`NodeCore`] and sent from
//! whichever thread delivers the next record.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime};

use fuser::consts::{FOPEN_DIRECT_IO, FUSE_POLL_SCHEDULE_NOTIFY};
use fuser::{
    FileAttr, FileType, Filesystem, PollHandle, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyIoctl, ReplyOpen, ReplyPoll, ReplyWrite, Request, Session, SessionACL,
};
use gpupm_fusemount::{MountError, MountOptions};
use gpupm_uapi::regs;

use super::access::Caller;
use super::device::{NodeCore, NodeKind};
use super::{Transport, TransportError, CARD_NAME, OOB_NAME};

const ROOT_INO: u64 = fuser::FUSE_ROOT_ID;
const CARD_INO: u64 = 2;
const OOB_INO: u64 = 3;
const TTL: Duration = Duration::from_secs(1);
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
            fuse_fd: Some(fd),
            session: None,
            mounted: false,
        }
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
        let mut session = Session::from_fd(fs, fd, SessionACL::All);
        let thread = thread::Builder::new()
            .name("gpupm-fuse".into())
            .spawn(move || session.run())
            .map_err(|source| TransportError::Mount {
                op: "spawn session thread",
                dir: self.dir.clone(),
                source,
            })?;
        self.session = Some(thread);
        self.probe()
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
    started: SystemTime,
}

impl FuseFs {
    fn new(core: Arc<NodeCore>) -> Self {
        FuseFs {
            core,
            started: SystemTime::now(),
        }
    }

    fn attr(&self, ino: u64) -> Option<FileAttr> {
        let policy = self.core.policy();
        let (kind, perm) = match ino {
            ROOT_INO => (FileType::Directory, 0o755),
            CARD_INO | OOB_INO => (FileType::RegularFile, policy.file_mode()),
            _ => return None,
        };
        Some(FileAttr {
            ino,
            size: 0,
            blocks: 0,
            atime: self.started,
            mtime: self.started,
            ctime: self.started,
            crtime: self.started,
            kind,
            perm,
            nlink: if kind == FileType::Directory { 2 } else { 1 },
            uid: 0,
            gid: if ino == ROOT_INO {
                0
            } else {
                policy.admin_gid().unwrap_or(0)
            },
            rdev: 0,
            blksize: 4096,
            flags: 0,
        })
    }

    /// Checks the request's credentials; on refusal the caller replies EACCES.
    fn allowed(&self, req: &Request<'_>) -> Result<(), i32> {
        let caller = Caller {
            uid: req.uid(),
            gid: req.gid(),
            pid: req.pid(),
        };
        self.core.check(caller).map_err(|e| {
            tracing::debug!(error = %e, "request refused");
            e.errno()
        })
    }
}

impl Filesystem for FuseFs {
    fn lookup(&mut self, req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        if let Err(e) = self.allowed(req) {
            return reply.error(e);
        }
        let ino = match name.to_str() {
            Some(CARD_NAME) if parent == ROOT_INO => CARD_INO,
            Some(OOB_NAME) if parent == ROOT_INO => OOB_INO,
            _ => return reply.error(libc::ENOENT),
        };
        match self.attr(ino) {
            Some(a) => reply.entry(&TTL, &a, 0),
            None => reply.error(libc::ENOENT),
        }
    }

    fn getattr(&mut self, req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        if let Err(e) = self.allowed(req) {
            return reply.error(e);
        }
        match self.attr(ino) {
            Some(a) => reply.attr(&TTL, &a),
            None => reply.error(libc::ENOENT),
        }
    }

    fn open(&mut self, req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        if let Err(e) = self.allowed(req) {
            return reply.error(e);
        }
        let kind = match ino {
            CARD_INO => NodeKind::Card,
            OOB_INO => NodeKind::Oob,
            ROOT_INO => return reply.error(libc::EISDIR),
            _ => return reply.error(libc::ENOENT),
        };
        reply.opened(self.core.open(kind), FOPEN_DIRECT_IO);
    }

    fn read(
        &mut self,
        req: &Request<'_>,
        _ino: u64,
        fh: u64,
        offset: i64,
        size: u32,
        flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        if let Err(e) = self.allowed(req) {
            return reply.error(e);
        }
        let nonblock = flags & libc::O_NONBLOCK != 0;
        self.core.read(
            fh,
            offset,
            size,
            nonblock,
            req.pid(),
            Box::new(move |res| match res {
                Ok(bytes) => reply.data(&bytes),
                Err(e) => reply.error(e.errno()),
            }),
        );
    }

    fn write(
        &mut self,
        req: &Request<'_>,
        _ino: u64,
        fh: u64,
        offset: i64,
        data: &[u8],
        _write_flags: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyWrite,
    ) {
        if let Err(e) = self.allowed(req) {
            return reply.error(e);
        }
        match self.core.write(fh, offset, data) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn flush(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        _fh: u64,
        _lock_owner: u64,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        _flags: i32,
        _lock_owner: Option<u64>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.core.release(fh);
        reply.ok();
    }

    fn opendir(&mut self, req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        if let Err(e) = self.allowed(req) {
            return reply.error(e);
        }
        if ino != ROOT_INO {
            return reply.error(libc::ENOTDIR);
        }
        reply.opened(0, 0);
    }

    fn readdir(
        &mut self,
        req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        mut reply: ReplyDirectory,
    ) {
        if let Err(e) = self.allowed(req) {
            return reply.error(e);
        }
        if ino != ROOT_INO {
            return reply.error(libc::ENOTDIR);
        }
        let entries = [
            (ROOT_INO, FileType::Directory, "."),
            (ROOT_INO, FileType::Directory, ".."),
            (CARD_INO, FileType::RegularFile, CARD_NAME),
            (OOB_INO, FileType::RegularFile, OOB_NAME),
        ];
        let skip = usize::try_from(offset).unwrap_or(0);
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(skip) {
            if reply.add(*ino, (i + 1) as i64, *kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn ioctl(
        &mut self,
        req: &Request<'_>,
        _ino: u64,
        fh: u64,
        _flags: u32,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        if let Err(e) = self.allowed(req) {
            return reply.error(e);
        }
        match self.core.ioctl(fh, cmd, in_data, out_size) {
            Ok(r) => {
                let n = r.data.len().min(out_size as usize);
                reply.ioctl(r.result, &r.data[..n]);
            }
            Err(e) => {
                tracing::debug!(cmd = format_args!("{cmd:#010x}"), error = %e, "ioctl refused");
                reply.error(e.errno());
            }
        }
    }

    fn poll(
        &mut self,
        req: &Request<'_>,
        _ino: u64,
        fh: u64,
        ph: PollHandle,
        events: u32,
        flags: u32,
        reply: ReplyPoll,
    ) {
        if let Err(e) = self.allowed(req) {
            return reply.error(e);
        }
        let wake = (flags & FUSE_POLL_SCHEDULE_NOTIFY != 0).then(|| {
            Box::new(move || {
                if let Err(e) = ph.notify() {
                    tracing::debug!(error = %e, "poll notification failed");
                }
            }) as Box<dyn FnOnce() + Send>
        });
        match self.core.poll(fh, events, wake) {
            Ok(revents) => reply.poll(revents),
            Err(e) => reply.error(e.errno()),
        }
    }
}
