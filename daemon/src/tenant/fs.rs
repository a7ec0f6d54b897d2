//! The FUSE filesystem of the tenant node: the directory and its one file,
//! `node`. Requests are decoded here, authorised from the kernel-supplied
//! credentials and handed to [`requests`] and [`Sessions`]; every error
//! becomes an errno here, through [`RequestError::errno`].

use std::ffi::OsStr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use fuser::{
    Errno, FileHandle, Filesystem, FopenFlags, INodeNo, IoctlFlags, LockOwner, OpenFlags,
    PollEvents, PollFlags, PollNotifier, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyIoctl, ReplyOpen, ReplyPoll, ReplyWrite, Request, WriteFlags,
};

use super::bounds::Share;
use super::policy::{Identity, Policy};
use super::requests::{self, Answer, RequestError};
use super::ri;
use super::session::Sessions;
use super::Served;
use super::{TenantStats, NODE_NAME};
use crate::view::Caller;
use gpupm_fusemount::flat::{poll_wake, FileAccess, FlatDir, ROOT_INO};

/// Inode of `node`.
pub(super) const NODE_INO: INodeNo = INodeNo(2);
/// The one file of the tenant node's directory.
const FILES: &[(INodeNo, &str)] = &[(NODE_INO, NODE_NAME)];
/// Anyone may open `node`; the policy decides what each caller sees.
const NODE_ACCESS: FileAccess = FileAccess {
    perm: 0o666,
    gid: 0,
};

/// The filesystem.
pub(super) struct TenantFs {
    served: Served,
    policy: Policy,
    sessions: Arc<Sessions>,
    stats: Arc<TenantStats>,
    dir: FlatDir,
}

impl TenantFs {
    pub(super) fn new(
        served: Served,
        policy: Policy,
        sessions: Arc<Sessions>,
        stats: Arc<TenantStats>,
    ) -> Self {
        TenantFs {
            served,
            policy,
            sessions,
            stats,
            dir: FlatDir::new(FILES),
        }
    }

    fn identify(&self, req: &Request) -> (Caller, Identity) {
        let caller = Caller::of(req);
        (caller, self.policy.identify(caller))
    }

    /// The caller of `req`, unless it is mapped to nothing: then every
    /// request fails with EACCES before anything else is looked at.
    fn admit(&self, req: &Request) -> Result<(Caller, Identity), RequestError> {
        let (caller, identity) = self.identify(req);
        if identity.is_unmapped() {
            return Err(RequestError::Denied);
        }
        Ok((caller, identity))
    }
}

fn errno(e: &RequestError) -> Errno {
    Errno::from_i32(e.errno())
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
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.dir.reply_lookup(parent, name, NODE_ACCESS, reply);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.dir.reply_attr(ino, NODE_ACCESS, reply);
    }

    fn open(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match ino {
            NODE_INO => match self.admit(req).and_then(|(c, _)| self.sessions.open(c.uid)) {
                Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO),
                Err(e) => {
                    count(&self.stats, Err(&e));
                    reply.error(errno(&e));
                }
            },
            ROOT_INO => reply.error(Errno::EISDIR),
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn read(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _offset: u64,
        size: u32,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let (caller, identity) = match self.admit(req) {
            Ok(admitted) => admitted,
            Err(e) => {
                count(&self.stats, Err(&e));
                return reply.error(errno(&e));
            }
        };
        let stats = Arc::clone(&self.stats);
        self.sessions.read(
            fh.0,
            &identity,
            size,
            flags.0 & libc::O_NONBLOCK != 0,
            caller.uid,
            caller.pid,
            Box::new(move |res| {
                count(&stats, res.as_ref().map(|_| ()));
                match res {
                    Ok(bytes) => reply.data(&bytes),
                    Err(e) => reply.error(errno(&e)),
                }
            }),
        );
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        reply.error(errno(&RequestError::Invalid("the node is not writable")));
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
        self.sessions.release(fh.0);
        reply.ok();
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.dir.reply_opendir(ino, reply);
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        self.dir.reply_readdir(ino, offset, reply);
    }

    fn ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        let (caller, identity) = self.identify(req);
        let bounds = self.sessions.bounds();
        let uid = caller.uid;
        let metered = !identity.is_admin() && requests::reads_device(cmd);
        let res = if identity.is_unmapped() {
            Err(RequestError::Denied)
        } else if ino != NODE_INO {
            Err(RequestError::UnknownIoctl)
        } else if metered {
            bounds.device_read(uid)
        } else {
            Ok(())
        };
        let res = res.and_then(|()| {
            requests::dispatch(
                &self.served,
                &identity,
                bounds.limits(),
                caller,
                cmd,
                in_data,
                out_size,
            )
        });
        let share = |vm| {
            if identity.is_admin() {
                Share::Admin
            } else {
                Share::Vm(vm)
            }
        };
        let res = res.and_then(|a| match a {
            Answer::Data(bytes) => Ok(bytes),
            Answer::Stream(grant) => {
                let share = share(grant.vm);
                self.sessions
                    .open_stream(fh.0, grant, uid, share)
                    .map(|()| Vec::new())
            }
            // A daemon without a sampling plane answers as one older
            // than ABI 1.4.
            Answer::Sampling(grant) => match self.served.features.sampling.clone() {
                Some(plane) => {
                    let share = share(grant.target.vm);
                    self.sessions.open_sampling(fh.0, grant, &plane, uid, share)
                }
                None => Err(RequestError::UnknownIoctl),
            },
            Answer::Ri(grant) => match self.served.features.ri.clone() {
                Some(unit) => {
                    let share = share(grant.config.vm);
                    let quota = ri::block_quota(self.served.view.as_ref());
                    self.sessions.open_ri(fh.0, grant, &unit, quota, uid, share)
                }
                None => Err(RequestError::UnknownIoctl),
            },
            Answer::RiEmit(value) => self
                .sessions
                .ri_emit(fh.0, &identity, value)
                .map(|()| Vec::new()),
            Answer::RiStatus => self.sessions.ri_status(fh.0, &identity),
            Answer::RiResume => self.sessions.ri_resume(fh.0, &identity),
        });
        // A request refused for its shape or its scope was answered before
        // anything was read: it costs the caller's bucket nothing.
        let read_something = match &res {
            Ok(_) => true,
            Err(e) => {
                ![libc::EINVAL, libc::ENOTTY, libc::EACCES, libc::EAGAIN].contains(&e.errno())
            }
        };
        if metered && read_something {
            bounds.spend_device_read(uid);
        }
        count(&self.stats, res.as_ref().map(|_| ()));
        match res {
            Ok(bytes) => reply.ioctl(0, &bytes),
            Err(e) => {
                tracing::trace!(uid = caller.uid, cmd = format_args!("{cmd:#010x}"), error = %e, "tenant ioctl refused");
                reply.error(errno(&e));
            }
        }
    }

    fn poll(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        ph: PollNotifier,
        _events: PollEvents,
        flags: PollFlags,
        reply: ReplyPoll,
    ) {
        let identity = match self.admit(req) {
            Ok((_, identity)) => identity,
            Err(e) => return reply.error(errno(&e)),
        };
        match self.sessions.poll(fh.0, &identity, poll_wake(ph, flags)) {
            Ok(revents) => reply.poll(PollEvents::from_bits_retain(revents)),
            Err(e) => reply.error(errno(&e)),
        }
    }
}
