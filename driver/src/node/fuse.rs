//! The FUSE transport: a directory holding `card0` and `card0-oob`, served
//! through the [`gpupm_fusemount::node`] kit from a `/dev/fuse` descriptor
//! that it mounts itself (as root; no `fusermount` needed), or that the
//! service manager passed (mounted by `gpupm-mount`, see
//! [`FuseTransport::inherited`]). This module says only what the files do
//! ([`DeviceFiles`]): requests go to the [`NodeCore`], its errors become
//! errnos here.
//!
//! # Serving threads
//! Requests are served by [`FuseTransport::with_threads`] event-loop
//! threads (default [`DEFAULT_THREADS`]), each on its own clone of the
//! descriptor where it can be cloned, so that a register read or a
//! handshake batch does not queue behind a bulk memory-window read in
//! progress on another thread. Every request runs under the [`NodeCore`]
//! lock for its whole device access, so a `GPUPM_IOC_REG_BATCH` stays
//! atomic and handle cursors stay consistent whatever the thread count. A
//! blocking interrupt read never holds a thread: its reply is parked in
//! [`NodeCore`] and sent from whichever thread delivers the next record; so
//! is a `GPUPM_IOC_WAIT_COMMIT`'s, sent by the thread whose tick or request
//! made the commit it waited for.

use std::fs::File;
use std::io;
use std::num::NonZeroUsize;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fuser::{Errno, INodeNo, PollEvents};
use gpupm_fusemount::node::{
    FileAccess, FileRequest, IoctlReply, NodeMount, NodeService, PollWake, ReadReply, ServeError,
};
use gpupm_fusemount::{Caller, MountError};
use gpupm_uapi::regs;

use super::device::{NodeCore, NodeKind};
use super::error::NodeError;
use super::{Transport, TransportError, CARD_NAME, DEFAULT_THREADS, OOB_NAME};

const CARD_INO: INodeNo = INodeNo(2);
const OOB_INO: INodeNo = INodeNo(3);
/// Source and subtype of the mount (`fuse.gpupm`).
const FS_NAME: &str = "gpupm";

/// The FUSE transport.
#[derive(Debug)]
pub struct FuseTransport {
    core: Arc<NodeCore>,
    threads: NonZeroUsize,
    mount: NodeMount,
}

impl FuseTransport {
    /// A transport that will mount and serve `core` in directory `dir`.
    pub fn new(dir: impl Into<PathBuf>, core: Arc<NodeCore>) -> Self {
        FuseTransport {
            core,
            threads: DEFAULT_THREADS,
            mount: NodeMount::new(dir, FS_NAME),
        }
    }

    /// A transport that serves `core` on `fd`, a `/dev/fuse` descriptor
    /// already mounted at `dir` by its owner (the service manager passed
    /// it; see [`gpupm_fusemount::inherited_fd`]). It never mounts or
    /// unmounts: the mount stays when the driver exits, until its owner
    /// takes it away (`gpupm-mount --unmount`).
    pub fn inherited(dir: impl Into<PathBuf>, core: Arc<NodeCore>, fd: OwnedFd) -> Self {
        FuseTransport {
            core,
            threads: DEFAULT_THREADS,
            mount: NodeMount::inherited(dir, FS_NAME, fd),
        }
    }

    /// Serves requests from `threads` event-loop threads (see the module
    /// documentation); one serialises every request behind the previous one.
    pub fn with_threads(mut self, threads: NonZeroUsize) -> Self {
        self.threads = threads;
        self
    }
}

/// Whether `card0` in `dir` reads `DEVICE_MAGIC` from its ID register.
fn probe(dir: &Path) -> io::Result<()> {
    let card = File::open(dir.join(CARD_NAME))?;
    let mut id = [0u8; 4];
    card.read_exact_at(&mut id, regs::ID)?;
    if u32::from_le_bytes(id) != regs::DEVICE_MAGIC {
        return Err(io::Error::other("ID register does not read DEVICE_MAGIC"));
    }
    Ok(())
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
        if self.mount.mounts_itself() {
            self.mount.mount()?;
            tracing::info!(dir = %self.mount.dir().display(), "device node mounted");
        }
        Ok(())
    }

    fn serve(&mut self) -> Result<(), TransportError> {
        let files = DeviceFiles {
            core: Arc::clone(&self.core),
        };
        let served = self.mount.serve(files, self.threads, probe);
        if served.is_ok() {
            self.core.host_attached(true);
        }
        served.map_err(|e| {
            let dir = self.mount.dir().to_path_buf();
            match e {
                ServeError::Mount(e) => e.into(),
                ServeError::NotMounted => TransportError::NotMounted,
                ServeError::Spawn(source) => TransportError::Mount {
                    op: "spawn session thread",
                    dir,
                    source,
                },
                ServeError::Session(source) => TransportError::Mount {
                    op: "start the FUSE session",
                    dir,
                    source,
                },
                ServeError::Probe(source) => TransportError::Probe { dir, source },
            }
        })
    }

    fn is_serving(&self) -> bool {
        self.mount.is_serving()
    }

    fn unmount(&mut self) -> Result<(), TransportError> {
        self.core.host_attached(false);
        if self.mount.unmount()? {
            tracing::info!(dir = %self.mount.dir().display(), "device node unmounted");
        }
        Ok(())
    }
}

/// What `card0` and `card0-oob` do: the [`NodeCore`]'s requests, for the
/// callers its access policy admits.
#[derive(Debug)]
pub struct DeviceFiles {
    core: Arc<NodeCore>,
}

/// The one place a node error becomes what a FUSE caller sees.
fn errno(e: &NodeError) -> Errno {
    Errno::from_i32(e.errno())
}

impl NodeService for DeviceFiles {
    const FILES: &'static [(INodeNo, &'static str)] = &[(CARD_INO, CARD_NAME), (OOB_INO, OOB_NAME)];

    /// The policy's mode and group.
    fn access(&self) -> FileAccess {
        let policy = self.core.policy();
        FileAccess {
            perm: policy.file_mode(),
            gid: policy.admin_gid().unwrap_or(0),
        }
    }

    /// The admin rule, for every request: a chmod mistake on the mount
    /// cannot expose the device.
    fn admit(&self, caller: Caller) -> Result<(), Errno> {
        self.core.check(caller).map_err(|e| {
            tracing::debug!(error = %e, "request refused");
            errno(&e)
        })
    }

    fn open(&self, _caller: Caller, ino: INodeNo) -> Result<u64, Errno> {
        let kind = match ino {
            CARD_INO => NodeKind::Card,
            OOB_INO => NodeKind::Oob,
            _ => return Err(errno(&NodeError::NotFound)),
        };
        Ok(self.core.open(kind))
    }

    fn read(&self, file: FileRequest, offset: u64, size: u32, nonblock: bool, reply: ReadReply) {
        self.core.read(
            file.fh,
            offset,
            size,
            nonblock,
            file.caller.pid,
            Box::new(move |res| match res {
                Ok(bytes) => reply.data(&bytes),
                Err(e) => reply.error(errno(&e)),
            }),
        );
    }

    fn write(&self, file: FileRequest, offset: u64, data: &[u8]) -> Result<u32, Errno> {
        self.core
            .write(file.fh, offset, data)
            .map_err(|e| errno(&e))
    }

    fn ioctl(&self, file: FileRequest, cmd: u32, input: &[u8], out_size: u32, reply: IoctlReply) {
        // A commit wait's reply is kept and sent by the thread that
        // answers it: no serving thread waits.
        self.core.ioctl_deferred(
            file.fh,
            cmd,
            input,
            out_size,
            file.caller.pid,
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
        file: FileRequest,
        events: PollEvents,
        wake: Option<PollWake>,
    ) -> Result<PollEvents, Errno> {
        self.core
            .poll(file.fh, events.bits(), wake)
            .map(PollEvents::from_bits_retain)
            .map_err(|e| errno(&e))
    }

    fn release(&self, fh: u64) {
        self.core.release(fh);
    }
}
