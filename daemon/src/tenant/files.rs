//! What the tenant node's one file, `node`, does, served through the
//! [`gpupm_fusemount::node`] kit. Requests are authorised here from the
//! kernel-supplied credentials and handed to [`requests`] and
//! [`Sessions`]; every error becomes an errno here, through
//! [`RequestError::errno`].

use std::sync::atomic::Ordering;
use std::sync::Arc;

use fuser::{Errno, INodeNo, PollEvents};
use gpupm_fusemount::node::{
    FileAccess, FileRequest, IoctlReply, NodeService, PollWake, ReadReply,
};

use super::bounds::Share;
use super::policy::{Identity, Policy};
use super::requests::{self, Answer, RequestError};
use super::ri;
use super::session::Sessions;
use super::Served;
use super::{TenantStats, NODE_NAME};
use crate::view::Caller;

/// Inode of `node`.
const NODE_INO: INodeNo = INodeNo(2);
/// Anyone may open `node`; the policy decides what each caller sees.
const NODE_ACCESS: FileAccess = FileAccess {
    perm: 0o666,
    gid: 0,
};

/// What `node` does.
pub(super) struct TenantFiles {
    served: Served,
    policy: Policy,
    sessions: Arc<Sessions>,
    stats: Arc<TenantStats>,
}

impl TenantFiles {
    pub(super) fn new(
        served: Served,
        policy: Policy,
        sessions: Arc<Sessions>,
        stats: Arc<TenantStats>,
    ) -> Self {
        TenantFiles {
            served,
            policy,
            sessions,
            stats,
        }
    }

    /// Who `caller` is, unless it is mapped to nothing: then every
    /// request on `node` fails with EACCES before anything else is looked
    /// at. (The directory is anyone's: the kit admits every caller.)
    fn identify(&self, caller: Caller) -> Result<Identity, RequestError> {
        let identity = self.policy.identify(caller);
        if identity.is_unmapped() {
            return Err(RequestError::Denied);
        }
        Ok(identity)
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

impl NodeService for TenantFiles {
    const FILES: &'static [(INodeNo, &'static str)] = &[(NODE_INO, NODE_NAME)];

    fn access(&self) -> FileAccess {
        NODE_ACCESS
    }

    /// Anyone reaches the node: every request is checked on its own
    /// against the policy (`identify`), which decides what each caller
    /// sees, and a caller mapped to nothing gets EACCES there.
    fn admit(&self, _caller: Caller) -> Result<(), Errno> {
        Ok(())
    }

    fn open(&self, caller: Caller, _ino: INodeNo) -> Result<u64, Errno> {
        self.identify(caller)
            .and_then(|_| self.sessions.open(caller.uid))
            .map_err(|e| {
                count(&self.stats, Err(&e));
                errno(&e)
            })
    }

    fn read(&self, file: FileRequest, _offset: u64, size: u32, nonblock: bool, reply: ReadReply) {
        let caller = file.caller;
        let identity = match self.identify(caller) {
            Ok(identity) => identity,
            Err(e) => {
                count(&self.stats, Err(&e));
                return reply.error(errno(&e));
            }
        };
        let stats = Arc::clone(&self.stats);
        self.sessions.read(
            file.fh,
            &identity,
            size,
            nonblock,
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

    fn write(&self, _file: FileRequest, _offset: u64, _data: &[u8]) -> Result<u32, Errno> {
        Err(errno(&RequestError::Invalid("the node is not writable")))
    }

    fn ioctl(&self, file: FileRequest, cmd: u32, input: &[u8], out_size: u32, reply: IoctlReply) {
        let caller = file.caller;
        let identity = self.policy.identify(caller);
        let bounds = self.sessions.bounds();
        let uid = caller.uid;
        let metered = !identity.is_admin() && requests::reads_device(cmd);
        let res = if identity.is_unmapped() {
            Err(RequestError::Denied)
        } else if file.ino != NODE_INO {
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
                input,
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
        let fh = file.fh;
        let res = res.and_then(|a| match a {
            Answer::Data(bytes) => Ok(bytes),
            Answer::Stream(grant) => {
                let share = share(grant.vm);
                self.sessions
                    .open_stream(fh, grant, uid, share)
                    .map(|()| Vec::new())
            }
            // A daemon without a sampling plane answers as one older
            // than ABI 1.4.
            Answer::Sampling(grant) => match self.served.features.sampling.clone() {
                Some(plane) => {
                    let share = share(grant.target.vm);
                    self.sessions.open_sampling(fh, grant, &plane, uid, share)
                }
                None => Err(RequestError::UnknownIoctl),
            },
            Answer::Ri(grant) => match self.served.features.ri.clone() {
                Some(unit) => {
                    let share = share(grant.config.vm);
                    let quota = ri::block_quota(self.served.view.as_ref());
                    self.sessions.open_ri(fh, grant, &unit, quota, uid, share)
                }
                None => Err(RequestError::UnknownIoctl),
            },
            Answer::RiEmit(value) => self
                .sessions
                .ri_emit(fh, &identity, value)
                .map(|()| Vec::new()),
            Answer::RiStatus => self.sessions.ri_status(fh, &identity),
            Answer::RiResume => self.sessions.ri_resume(fh, &identity),
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
        file: FileRequest,
        _events: PollEvents,
        wake: Option<PollWake>,
    ) -> Result<PollEvents, Errno> {
        self.identify(file.caller)
            .and_then(|identity| self.sessions.poll(file.fh, &identity, wake))
            .map(PollEvents::from_bits_retain)
            .map_err(|e| errno(&e))
    }

    fn release(&self, fh: u64) {
        self.sessions.release(fh);
    }
}
