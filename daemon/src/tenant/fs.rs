//! The FUSE filesystem of the tenant node: the directory and its one file,
//! `node`. Requests are decoded here, authorised from the kernel-supplied
//! credentials and handed to [`requests`] and [`Sessions`]; every error
//! becomes an errno here, through [`RequestError::errno`].

use std::ffi::OsStr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fuser::consts::{FOPEN_DIRECT_IO, FUSE_POLL_SCHEDULE_NOTIFY};
use fuser::{
    FileAttr, FileType, Filesystem, PollHandle, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyIoctl, ReplyOpen, ReplyPoll, ReplyWrite, Request,
};

use super::policy::{Identity, Policy};
use super::requests::{self, Answer, RequestError};
use super::session::{PollWake, Sessions};
use super::{TenantStats, NODE_NAME};
use crate::view::{Caller, CounterView};

/// Inode of the directory.
pub(super) const ROOT_INO: u64 = fuser::FUSE_ROOT_ID;
/// Inode of `node`.
pub(super) const NODE_INO: u64 = 2;
const TTL: Duration = Duration::from_secs(1);

/// The filesystem.
pub(super) struct TenantFs {
    view: Arc<dyn CounterView>,
    policy: Policy,
    sessions: Arc<Sessions>,
    rt: tokio::runtime::Handle,
    stats: Arc<TenantStats>,
    started: SystemTime,
}

impl TenantFs {
    pub(super) fn new(
        view: Arc<dyn CounterView>,
        policy: Policy,
        sessions: Arc<Sessions>,
        rt: tokio::runtime::Handle,
        stats: Arc<TenantStats>,
    ) -> Self {
        TenantFs {
            view,
            policy,
            sessions,
            rt,
            stats,
            started: SystemTime::now(),
        }
    }

    fn attr(&self, ino: u64) -> Option<FileAttr> {
        let (kind, perm) = match ino {
            ROOT_INO => (FileType::Directory, 0o755),
            NODE_INO => (FileType::RegularFile, 0o666),
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
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        })
    }

    fn identify(&self, req: &Request<'_>) -> (Caller, Identity) {
        let caller = Caller {
            uid: req.uid(),
            gid: req.gid(),
            pid: req.pid(),
        };
        (caller, self.policy.identify(caller))
    }
}

/// Counts one answered request into `stats`.
fn count(stats: &TenantStats, res: Result<(), &RequestError>) {
    stats.requests.fetch_add(1, Ordering::Relaxed);
    if let Err(e) = res {
        if *e != RequestError::WouldBlock {
            stats.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Filesystem for TenantFs {
    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        if parent != ROOT_INO || name.to_str() != Some(NODE_NAME) {
            return reply.error(libc::ENOENT);
        }
        match self.attr(NODE_INO) {
            Some(a) => reply.entry(&TTL, &a, 0),
            None => reply.error(libc::ENOENT),
        }
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        match self.attr(ino) {
            Some(a) => reply.attr(&TTL, &a),
            None => reply.error(libc::ENOENT),
        }
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        match ino {
            NODE_INO => reply.opened(self.sessions.open(), FOPEN_DIRECT_IO),
            ROOT_INO => reply.error(libc::EISDIR),
            _ => reply.error(libc::ENOENT),
        }
    }

    fn read(
        &mut self,
        req: &Request<'_>,
        _ino: u64,
        fh: u64,
        _offset: i64,
        size: u32,
        flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        let (caller, identity) = self.identify(req);
        let stats = Arc::clone(&self.stats);
        self.sessions.read(
            fh,
            &identity,
            size,
            flags & libc::O_NONBLOCK != 0,
            caller.pid,
            Box::new(move |res| {
                count(&stats, res.as_ref().map(|_| ()));
                match res {
                    Ok(bytes) => reply.data(&bytes),
                    Err(e) => reply.error(e.errno()),
                }
            }),
        );
    }

    fn write(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        _fh: u64,
        _offset: i64,
        _data: &[u8],
        _write_flags: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyWrite,
    ) {
        reply.error(RequestError::Invalid("the node is not writable").errno());
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
        self.sessions.release(fh);
        reply.ok();
    }

    fn opendir(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        if ino != ROOT_INO {
            return reply.error(libc::ENOTDIR);
        }
        reply.opened(0, 0);
    }

    fn readdir(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        mut reply: ReplyDirectory,
    ) {
        if ino != ROOT_INO {
            return reply.error(libc::ENOTDIR);
        }
        let entries = [
            (ROOT_INO, FileType::Directory, "."),
            (ROOT_INO, FileType::Directory, ".."),
            (NODE_INO, FileType::RegularFile, NODE_NAME),
        ];
        let skip = usize::try_from(offset).unwrap_or(usize::MAX);
        for (next, (ino, kind, name)) in (1i64..).zip(entries.iter()).skip(skip) {
            if reply.add(*ino, next, *kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn ioctl(
        &mut self,
        req: &Request<'_>,
        ino: u64,
        fh: u64,
        _flags: u32,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        let (caller, identity) = self.identify(req);
        let res = if ino == NODE_INO {
            requests::dispatch(
                self.view.as_ref(),
                &identity,
                caller,
                cmd,
                in_data,
                out_size,
            )
            .and_then(|a| match a {
                Answer::Data(bytes) => Ok(bytes),
                Answer::Stream(grant) => self
                    .sessions
                    .open_stream(fh, grant, &self.rt)
                    .map(|()| Vec::new()),
            })
        } else {
            Err(RequestError::UnknownIoctl)
        };
        count(&self.stats, res.as_ref().map(|_| ()));
        match res {
            Ok(bytes) => reply.ioctl(0, &bytes),
            Err(e) => {
                tracing::trace!(uid = caller.uid, cmd = format_args!("{cmd:#010x}"), error = %e, "tenant ioctl refused");
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
        _events: u32,
        flags: u32,
        reply: ReplyPoll,
    ) {
        let (_, identity) = self.identify(req);
        let wake = (flags & FUSE_POLL_SCHEDULE_NOTIFY != 0).then(|| {
            Box::new(move || {
                if let Err(e) = ph.notify() {
                    tracing::debug!(error = %e, "poll notification failed");
                }
            }) as PollWake
        });
        match self.sessions.poll(fh, &identity, wake) {
            Ok(revents) => reply.poll(revents),
            Err(e) => reply.error(e.errno()),
        }
    }
}
