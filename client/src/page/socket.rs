//! The client side of the page socket: one `SOCK_SEQPACKET` connection,
//! one [`PageRequest`] and one [`PageReply`] (with the page's descriptor)
//! per page.

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use gpupm_uapi::page::{page_request_flags, PageReply, PageRequest, PAGE_STRUCT_VERSION};
use gpupm_uapi::tenant::scope;
use nix::cmsg_space;
use nix::errno::Errno;
use nix::sys::socket::{
    connect, recvmsg, sendmsg, socket, AddressFamily, ControlMessageOwned, MsgFlags, SockFlag,
    SockType, UnixAddr,
};
use zerocopy::{FromZeros, IntoBytes};

use super::{sys, MappedPage, PageError};
use crate::tenant::{CtxId, VmId};

/// A connection to the daemon's page socket.
#[derive(Debug)]
pub struct PageClient {
    sock: OwnedFd,
    path: PathBuf,
}

impl PageClient {
    /// Connects to the page socket at `path`.
    pub fn connect(path: impl AsRef<Path>) -> Result<PageClient, PageError> {
        let path = path.as_ref();
        let fail = |source| PageError::Connect {
            path: path.to_owned(),
            source,
        };
        let sock = socket(
            AddressFamily::Unix,
            SockType::SeqPacket,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .map_err(fail)?;
        let addr = UnixAddr::new(path).map_err(fail)?;
        connect(sock.as_raw_fd(), &addr).map_err(fail)?;
        Ok(PageClient {
            sock,
            path: path.to_owned(),
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Sends `req` and returns the reply and, when it grants the page, the
    /// page's descriptor (read-only).
    pub fn request(&self, req: &PageRequest) -> Result<(PageReply, Option<OwnedFd>), PageError> {
        let fd = self.sock.as_raw_fd();
        let sent = sendmsg::<UnixAddr>(
            fd,
            &[IoSlice::new(req.as_bytes())],
            &[],
            MsgFlags::MSG_NOSIGNAL,
            None,
        );
        match sent {
            Ok(_) => {}
            // A connection the daemon refused at accept (no tenant, or
            // past a cap) is closed with its refusal waiting to be read.
            Err(Errno::EPIPE | Errno::ECONNRESET) => {}
            Err(e) => return Err(PageError::Socket(e)),
        }
        let mut reply = PageReply::new_zeroed();
        let mut cmsg = cmsg_space!([std::os::fd::RawFd; 1]);
        let (bytes, flags, fds) = {
            let mut iov = [IoSliceMut::new(reply.as_mut_bytes())];
            let msg = match recvmsg::<UnixAddr>(
                fd,
                &mut iov,
                Some(&mut cmsg),
                MsgFlags::MSG_CMSG_CLOEXEC,
            ) {
                // The daemon closed a refused connection with our
                // request unread: the error comes first, then the
                // refusal it had sent.
                Err(Errno::ECONNRESET) => recvmsg::<UnixAddr>(
                    fd,
                    &mut iov,
                    Some(&mut cmsg),
                    MsgFlags::MSG_CMSG_CLOEXEC | MsgFlags::MSG_DONTWAIT,
                )
                .map_err(|_| PageError::Socket(Errno::ECONNRESET))?,
                other => other.map_err(PageError::Socket)?,
            };
            let mut fds = Vec::new();
            for c in msg.cmsgs().map_err(PageError::Socket)? {
                if let ControlMessageOwned::ScmRights(raw) = c {
                    fds.extend(raw);
                }
            }
            (msg.bytes, msg.flags, sys::own_received(fds))
        };
        if bytes == 0 {
            return Err(match sent {
                Err(e) => PageError::Socket(e),
                Ok(_) => PageError::Closed,
            });
        }
        if bytes != size_of::<PageReply>() || flags.contains(MsgFlags::MSG_TRUNC) {
            return Err(PageError::Protocol("a reply of the wrong size"));
        }
        if reply.version != PAGE_STRUCT_VERSION {
            return Err(PageError::Protocol("a reply of another version"));
        }
        let mut fds = fds.into_iter();
        let page = fds.next();
        if reply.status != 0 {
            return Ok((reply, None));
        }
        match (page, fds.next()) {
            (Some(fd), None) => Ok((reply, Some(fd))),
            _ => Err(PageError::Protocol(
                "a granted reply without exactly one descriptor",
            )),
        }
    }

    /// Requests and maps a page: `Ok` with the mapping, or the refusal.
    pub fn map(&self, req: &PageRequest) -> Result<MappedPage, PageError> {
        let (reply, fd) = self.request(req)?;
        if reply.status != 0 {
            return Err(PageError::Refused(Errno::from_raw(
                i32::try_from(reply.status).unwrap_or(i32::MAX),
            )));
        }
        let fd = fd.ok_or(PageError::Protocol("a granted reply without a descriptor"))?;
        MappedPage::from_fd(fd.as_fd())
    }

    /// VM `vm`'s page.
    pub fn map_vm(&self, vm: VmId) -> Result<MappedPage, PageError> {
        self.map(&request(scope::VM, vm, 0, 0))
    }

    /// The page of context id `ctx`'s newest live instance.
    pub fn map_ctx(&self, ctx: CtxId) -> Result<MappedPage, PageError> {
        self.map(&request(scope::CONTEXT, ctx, page_request_flags::LATEST, 0))
    }

    /// The page of the live context instance (`ctx`, `created_cycle`).
    pub fn map_instance(&self, ctx: CtxId, created_cycle: u64) -> Result<MappedPage, PageError> {
        self.map(&request(scope::CONTEXT, ctx, 0, created_cycle))
    }
}

/// A request with the current struct version.
pub fn request(kind: u32, id: u32, flags: u32, created_cycle: u64) -> PageRequest {
    PageRequest {
        version: PAGE_STRUCT_VERSION,
        scope: kind,
        id,
        flags,
        created_cycle,
    }
}

impl AsFd for PageClient {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.sock.as_fd()
    }
}
