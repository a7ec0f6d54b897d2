//! The page socket's connections: who is admitted at `accept`, how many
//! each may keep, the serving loop, and one request's answer.
//!
//! A connection is admitted from the credentials the kernel recorded at
//! `connect` (`SO_PEERCRED`, `SO_PEERGROUPS`), once:
//!
//! * a caller mapped to nothing (neither the admin nor named by a
//!   `[[tenant]]` entry) is refused: it could only ever be told EACCES, so
//!   it holds no descriptor of the daemon's — however many uids it has
//!   (a user's subordinate uids included), they are one class that gets
//!   nothing;
//! * the callers mapped to the same VMs are one tenant and keep at most
//!   `page_connections_per_tenant` connections together; the admin has
//!   as many of its own;
//! * all tenants together keep at most `page_connections_total` (the
//!   admin's are not counted there, so no tenant can lock the admin out).
//!
//! A refused connection is sent one [`PageReply`] whose `status` says why
//! — EACCES (no tenant), EMFILE (the tenant's cap), ENFILE (the total) —
//! and closed; `gpupm_client::page::PageClient` returns it as
//! `PageError::Refused`. When `accept` itself fails for want of
//! descriptors or memory, the loop stops accepting for [`ACCEPT_BACKOFF`]
//! (and serves the connections it has) instead of spinning on a listener
//! that stays readable.

use std::io::IoSlice;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpupm_uapi::page::{PageReply, PageRequest, PAGE_STRUCT_VERSION};
use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{getsockopt, recv, sendmsg, sockopt, ControlMessage, MsgFlags, UnixAddr};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

use super::{sys, PageSource, Pages};
use crate::tenant::bounds::Bounds;
use crate::tenant::policy::{Identity, Policy};

/// A connection with no request for this long is closed.
pub const IDLE: Duration = Duration::from_secs(60);
/// How long the loop stops accepting after `accept` ran out of
/// descriptors or memory.
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

struct Conn {
    sock: OwnedFd,
    identity: Identity,
    last: Instant,
}

/// Who may connect, and how many: the policy and the `[limits]`.
pub(super) struct Admission {
    policy: Policy,
    bounds: Arc<Bounds>,
}

impl Admission {
    pub(super) fn new(policy: Policy, bounds: Arc<Bounds>) -> Self {
        Admission { policy, bounds }
    }

    /// Whether a caller with `identity` may keep one more connection
    /// besides `conns`: the errno of the refusal otherwise.
    fn admit(&self, identity: &Identity, conns: &[Conn]) -> Result<(), Errno> {
        if identity.is_unmapped() {
            return Err(Errno::EACCES);
        }
        let limits = self.bounds.limits();
        let per_tenant = usize::try_from(limits.page_connections_per_tenant).unwrap_or(usize::MAX);
        let total = usize::try_from(limits.page_connections_total).unwrap_or(usize::MAX);
        if conns.iter().filter(|c| c.identity == *identity).count() >= per_tenant {
            return Err(Errno::EMFILE);
        }
        let tenants = conns.iter().filter(|c| !c.identity.is_admin()).count();
        if !identity.is_admin() && tenants >= total {
            return Err(Errno::ENFILE);
        }
        Ok(())
    }
}

/// Serves the socket until `wake` reports (its write end closed).
pub(super) fn serve(
    pages: &Pages,
    source: &dyn PageSource,
    admission: Admission,
    listener: &OwnedFd,
    wake: &OwnedFd,
) {
    let mut conns: Vec<Conn> = Vec::new();
    let mut paused_until: Option<Instant> = None;
    loop {
        let now = Instant::now();
        let accepting = paused_until.is_none_or(|t| now >= t);
        if accepting {
            paused_until = None;
        }
        let mut fds = vec![
            PollFd::new(wake.as_fd(), PollFlags::POLLIN),
            PollFd::new(
                listener.as_fd(),
                if accepting {
                    PollFlags::POLLIN
                } else {
                    PollFlags::empty()
                },
            ),
        ];
        fds.extend(
            conns
                .iter()
                .map(|c| PollFd::new(c.sock.as_fd(), PollFlags::POLLIN)),
        );
        // Wake at least once a minute to close idle connections, and when
        // a pause in accepting ends.
        let wait = paused_until.map_or(IDLE, |t| t.saturating_duration_since(now));
        let timeout = PollTimeout::try_from(wait).unwrap_or(PollTimeout::MAX);
        match poll(&mut fds, timeout) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => {
                tracing::error!(error = %e, "the page socket failed; no more page requests are served");
                return;
            }
        }
        let ready = |f: &PollFd<'_>| f.revents().is_some_and(|r| !r.is_empty());
        if ready(&fds[0]) {
            return;
        }
        let accept_ready = accepting && ready(&fds[1]);
        let readable: Vec<bool> = fds[2..].iter().map(ready).collect();
        drop(fds);
        let now = Instant::now();
        let mut keep = Vec::with_capacity(conns.len());
        for (c, r) in conns.into_iter().zip(readable) {
            let alive = if r {
                answer(pages, source, &c)
            } else {
                now.duration_since(c.last) < IDLE
            };
            if alive {
                keep.push(Conn {
                    last: if r { now } else { c.last },
                    ..c
                });
            }
        }
        conns = keep;
        if accept_ready && !accept_all(listener, &admission, &mut conns, now) {
            paused_until = Some(now + ACCEPT_BACKOFF);
        }
        admission.bounds.set_page_connections(conns.len());
    }
}

/// Accepts every pending connection and admits those the limits allow
/// (the others get their refusal and are closed). False when `accept`
/// ran out of descriptors or memory: the caller backs off.
fn accept_all(
    listener: &OwnedFd,
    admission: &Admission,
    conns: &mut Vec<Conn>,
    now: Instant,
) -> bool {
    loop {
        let sock = match sys::accept(listener.as_fd()) {
            Ok(s) => s,
            Err(Errno::EAGAIN | Errno::EINTR | Errno::ECONNABORTED) => return true,
            Err(e @ (Errno::EMFILE | Errno::ENFILE | Errno::ENOBUFS | Errno::ENOMEM)) => {
                tracing::warn!(error = %e, "accepting a page connection failed; pausing");
                return false;
            }
            Err(e) => {
                tracing::warn!(error = %e, "accepting a page connection failed");
                return true;
            }
        };
        let Ok(cred) = getsockopt(&sock, sockopt::PeerCredentials) else {
            continue;
        };
        let groups = match sys::peer_groups(sock.as_fd()) {
            Ok(g) => g,
            Err(e) => {
                tracing::warn!(error = %e, "reading a page client's groups failed");
                continue;
            }
        };
        let identity = admission
            .policy
            .identify_groups(cred.uid(), cred.gid(), &groups);
        match admission.admit(&identity, conns) {
            Ok(()) => conns.push(Conn {
                sock,
                identity,
                last: now,
            }),
            Err(e) => {
                admission.bounds.page_refused();
                refuse(&sock, e);
            }
        }
    }
}

/// Tells a refused client why, then (on drop) closes its connection.
/// What the client already sent is read first: a connection closed with
/// unread data would make the client's next receive fail with
/// ECONNRESET before it got to the refusal.
fn refuse(sock: &OwnedFd, why: Errno) {
    let mut buf = [0u8; 64];
    while recv(
        sock.as_raw_fd(),
        &mut buf,
        MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_TRUNC,
    )
    .is_ok_and(|n| n > 0)
    {}
    let mut reply = PageReply::new_zeroed();
    reply.version = PAGE_STRUCT_VERSION;
    reply.status = why as u32;
    let sent = sendmsg::<UnixAddr>(
        sock.as_raw_fd(),
        &[IoSlice::new(reply.as_bytes())],
        &[],
        MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
        None,
    );
    if let Err(e) = sent {
        tracing::trace!(error = %e, "a refused page client did not take its refusal");
    }
}

/// Reads one request from `c` and answers it; false when the connection
/// is to be closed (end, error, or a client that does not read replies).
fn answer(pages: &Pages, source: &dyn PageSource, c: &Conn) -> bool {
    let mut buf = [0u8; 64];
    let n = match recv(
        c.sock.as_raw_fd(),
        &mut buf,
        MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_TRUNC,
    ) {
        Ok(0) => return false,
        Ok(n) => n,
        Err(Errno::EAGAIN | Errno::EINTR) => return true,
        Err(_) => return false,
    };
    let req = (n == size_of::<PageRequest>())
        .then(|| PageRequest::read_from_bytes(&buf[..n]).ok())
        .flatten();
    let result = match &req {
        Some(req) => pages.grant(source, &c.identity, req),
        None => Err(Errno::EINVAL),
    };
    pages.count_request(result.is_ok());
    let (reply, file) = match result {
        Ok((reply, file)) => (reply, Some(file)),
        Err(e) => {
            let mut reply = PageReply::new_zeroed();
            reply.version = PAGE_STRUCT_VERSION;
            reply.status = e as u32;
            if let Some(req) = req {
                reply.scope = req.scope;
                reply.id = req.id;
            }
            (reply, None)
        }
    };
    let raw: Vec<_> = file.iter().map(|f| f.as_raw_fd()).collect();
    let cmsg: Vec<ControlMessage<'_>> = if raw.is_empty() {
        Vec::new()
    } else {
        vec![ControlMessage::ScmRights(&raw)]
    };
    sendmsg::<UnixAddr>(
        c.sock.as_raw_fd(),
        &[IoSlice::new(reply.as_bytes())],
        &cmsg,
        MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .is_ok()
}
