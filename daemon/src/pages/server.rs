//! The page socket: a `SOCK_SEQPACKET` Unix socket (mode 0666) in the
//! pages directory. Each connection is identified once, from the
//! credentials the kernel recorded when it connected (`SO_PEERCRED`,
//! `SO_PEERGROUPS`), with the tenant node's policy; each request gets one
//! reply, with the page's read-only descriptor when granted.
//!
//! One thread serves every connection (`poll`, non-blocking sockets): a
//! request is a table lookup and, for a page not yet published, one block
//! read and one file creation. Who may stay connected, and how many, is
//! [`super::conns`]'s: no connection of a caller mapped to nothing, at
//! most `page_connections_per_tenant` per tenant, `page_connections_total`
//! of all tenants; one idle for a minute is closed, and so is one that
//! does not take its replies (`conns::IDLE`).

use std::fs::{self, File};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::{self, JoinHandle};

use gpupm_uapi::page::{
    page_request_flags, page_state, PageData, PageReply, PageRequest, PAGES_SOCKET_NAME, PAGE_SIZE,
    PAGE_STRUCT_VERSION,
};
use gpupm_uapi::regs::{MAX_CONTEXTS, MAX_VMS};
use gpupm_uapi::tenant::scope;
use nix::errno::Errno;
use nix::sys::socket::{
    bind, listen, socket, AddressFamily, Backlog, SockFlag, SockType, UnixAddr,
};
use zerocopy::FromZeros;

use super::conns::{serve, Admission};
use super::table::{self, Entry, Key};
use super::{PageSource, Pages};
use crate::tenant::bounds::Bounds;
use crate::tenant::policy::{Identity, Policy};
use crate::view::BlockSource;

/// Why the page socket could not be served.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Creating, binding or listening failed.
    #[error("cannot listen on {path}")]
    Listen {
        /// Socket path.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
}

impl Pages {
    /// Answers `req` for `identity`: the reply and, when granted, a
    /// read-only descriptor of the page.
    pub fn grant(
        &self,
        source: &dyn PageSource,
        identity: &Identity,
        req: &PageRequest,
    ) -> Result<(PageReply, File), Errno> {
        let (key, src, destroyed) = resolve(source, identity, req)?;
        let file = self.page_file(source, key, src, destroyed)?;
        let reply = PageReply {
            version: PAGE_STRUCT_VERSION,
            status: 0,
            scope: req.scope,
            id: req.id,
            vm: src.vm,
            size: u32::try_from(PAGE_SIZE).unwrap_or(u32::MAX),
            created_cycle: match key {
                Key::Ctx(_, c) => c,
                Key::Vm(_) => 0,
            },
            generation: self.generation(),
        };
        Ok((reply, file))
    }

    /// The page of `key`, made (with its block's current values) if it
    /// does not exist yet.
    fn page_file(
        &self,
        source: &dyn PageSource,
        key: Key,
        src: BlockSource,
        destroyed: bool,
    ) -> Result<File, Errno> {
        if let Some(f) = self.existing(key)? {
            return Ok(f);
        }
        let slot = self.dev.block_slot(src.block_offset).map_err(|e| {
            tracing::warn!(
                error = gpupm_fusemount::logging::one_line(e),
                "reading a block for a new page failed"
            );
            Errno::EIO
        })?;
        let mut inner = self.lock();
        if inner.table.pages.contains_key(&key) {
            drop(inner);
            return self.existing(key)?.ok_or(Errno::EAGAIN);
        }
        // Still there? A context retired since the lookup must not get a
        // page that nothing would remove (the retire hook takes this lock).
        let still = match key {
            Key::Vm(vm) => source.vm_source(vm) == Some(src),
            Key::Ctx(ctx, created) => source
                .live_ctx(ctx)
                .is_some_and(|(c, s, _)| c == created && s == src),
        };
        if !still {
            return Err(Errno::EAGAIN);
        }
        let mut data = table::with_slot(key, &src, &PageData::new_zeroed(), &slot)
            .map_err(|_| Errno::EAGAIN)?;
        let state = if destroyed {
            page_state::DESTROYED
        } else {
            page_state::ACTIVE
        };
        data.counters.generation = inner.generation;
        data.counters.state = state;
        data.counters.clock_khz = self.clock_khz;
        let page = self
            .dir
            .create(key, &self.header(key, src.vm), &data)
            .map_err(|e| {
                tracing::warn!(
                    error = gpupm_fusemount::logging::one_line(e),
                    "creating a page failed"
                );
                Errno::EIO
            })?;
        inner.table.pages.insert(
            key,
            Entry {
                page,
                source: src,
                state,
                shown: Box::new(data),
                // Read once more: the block may have moved between the read
                // above and the insert, and the drain that saw it found no
                // page to mark.
                dirty: true,
                rate: None,
                sealed_rate: None,
            },
        );
        self.wake(&mut inner);
        self.dir.open_read_only(key).map_err(|e| {
            tracing::warn!(error = %e, "opening a page read-only failed");
            Errno::EIO
        })
    }

    /// A read-only descriptor of `key`'s page, if it is published (opened
    /// under the lock, so never of a page being removed).
    fn existing(&self, key: Key) -> Result<Option<File>, Errno> {
        let inner = self.lock();
        if !inner.table.pages.contains_key(&key) {
            return Ok(None);
        }
        self.dir.open_read_only(key).map(Some).map_err(|e| {
            tracing::warn!(error = %e, "opening a page read-only failed");
            Errno::EIO
        })
    }

    pub(super) fn count_request(&self, ok: bool) {
        use std::sync::atomic::Ordering::Relaxed;
        self.counters.requests.fetch_add(1, Relaxed);
        if !ok {
            self.counters.request_errors.fetch_add(1, Relaxed);
        }
    }
}

/// A scope that does not exist: the admin may learn that; a tenant gets
/// the same answer as for someone else's.
fn missing(identity: &Identity) -> Errno {
    if identity.is_admin() {
        Errno::ENOENT
    } else {
        Errno::EACCES
    }
}

/// Checks and authorises a request: the page's key, source and whether
/// the context is destroyed.
fn resolve(
    source: &dyn PageSource,
    identity: &Identity,
    req: &PageRequest,
) -> Result<(Key, BlockSource, bool), Errno> {
    if req.version != PAGE_STRUCT_VERSION || req.flags & !page_request_flags::ALL != 0 {
        return Err(Errno::EINVAL);
    }
    match req.scope {
        scope::VM => {
            if req.flags != 0 || req.created_cycle != 0 || !(1..MAX_VMS).contains(&req.id) {
                return Err(Errno::EINVAL);
            }
            if !identity.may_see_vm(req.id) {
                return Err(Errno::EACCES);
            }
            let src = source.vm_source(req.id).ok_or_else(|| missing(identity))?;
            Ok((Key::Vm(req.id), src, false))
        }
        scope::CONTEXT => {
            let latest = req.flags & page_request_flags::LATEST != 0;
            if !(1..MAX_CONTEXTS).contains(&req.id) || (latest && req.created_cycle != 0) {
                return Err(Errno::EINVAL);
            }
            if matches!(identity, Identity::Tenant(vms) if vms.is_empty()) {
                return Err(Errno::EACCES);
            }
            // One lookup whether the instance exists or not, then the
            // owner check: someone else's and a missing one fail alike.
            match source.live_ctx(req.id) {
                Some((created, src, destroyed))
                    if (latest || created == req.created_cycle) && identity.may_see_vm(src.vm) =>
                {
                    Ok((Key::Ctx(req.id, created), src, destroyed))
                }
                _ => Err(missing(identity)),
            }
        }
        _ => Err(Errno::EINVAL),
    }
}

/// The page socket's server thread; stops when dropped.
#[derive(Debug)]
pub struct PageServer {
    wake: Option<OwnedFd>,
    thread: Option<JoinHandle<()>>,
    path: PathBuf,
}

impl PageServer {
    /// Listens on `pages.dir()/socket` (replacing a stale socket) and
    /// serves it.
    pub fn start(
        pages: Arc<Pages>,
        source: Arc<dyn PageSource>,
        policy: Policy,
        bounds: Arc<Bounds>,
    ) -> Result<PageServer, ServerError> {
        let path = pages.dir().join(PAGES_SOCKET_NAME);
        let fail = |source: io::Error| ServerError::Listen {
            path: path.clone(),
            source,
        };
        let listener = socket(
            AddressFamily::Unix,
            SockType::SeqPacket,
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
            None,
        )
        .map_err(|e| fail(e.into()))?;
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(fail(e)),
        }
        let addr = UnixAddr::new(&path).map_err(|e| fail(e.into()))?;
        bind(listener.as_raw_fd(), &addr).map_err(|e| fail(e.into()))?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o666)).map_err(fail)?;
        let backlog = Backlog::new(64).map_err(|e| fail(e.into()))?;
        listen(&listener, backlog).map_err(|e| fail(e.into()))?;
        let (wake_rx, wake_tx) = nix::unistd::pipe().map_err(|e| fail(e.into()))?;
        let thread = thread::Builder::new()
            .name("gpupmd-pagesock".into())
            .spawn(move || {
                let admission = Admission::new(policy, bounds);
                serve(&pages, &*source, admission, &listener, &wake_rx);
            })
            .map_err(fail)?;
        tracing::info!(socket = %path.display(), "serving tenant pages");
        Ok(PageServer {
            wake: Some(wake_tx),
            thread: Some(thread),
            path,
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

impl Drop for PageServer {
    fn drop(&mut self) {
        // Closing the pipe's write end wakes the thread (POLLHUP).
        drop(self.wake.take());
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!("the page socket thread panicked");
            }
        }
    }
}
