//! Serving CUSE requests: each serving thread reads whole requests from
//! its own duplicate of the `/dev/cuse` descriptor, decodes them
//! ([`super::abi`]), checks the caller, hands them to the [`NodeCore`] and
//! writes the reply through the shared [`Channel`].
//!
//! The character device has no file position, so the node's requests
//! are: `open`; `read()` of whole interrupt records (a parked blocking
//! read is answered later, from whichever thread delivers the next
//! record); `poll()` with wake-up notifications; the ioctls, register and
//! window access included (a `GPUPM_IOC_WAIT_COMMIT` is parked and
//! answered like a blocking read); `release`. `write()` fails with EINVAL.
//! A `FUSE_INTERRUPT` fails the interrupted read or wait with EINTR.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, IoSlice, Read, Write};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::abi::{
    self, opcode, InHeader, InterruptIn, IoctlIn, IoctlOut, NotifyPollWakeup, OpenIn, OpenOut,
    OutHeader, PollIn, PollOut, ReadIn, ReleaseIn, ShortRequest, INT_REQ_BIT, IOCTL_UNRESTRICTED,
    POLL_SCHEDULE_NOTIFY,
};
use crate::node::access::Caller;
use crate::node::device::{NodeCore, NodeKind, PollWake, RECORD_SIZE};
use crate::node::error::{malformed, NodeError};

/// Bytes of one request buffer: an ioctl argument (at most 16 KiB) with
/// its headers, and far above `FUSE_MIN_READ_BUFFER`.
pub const REQUEST_BUFFER: usize = 64 * 1024;

/// The write side of `/dev/cuse`: replies and notifications, from any
/// thread. Closed by [`Channel::close`] (which, once the serving threads'
/// duplicates are gone too, makes the kernel remove the device).
#[derive(Debug)]
pub struct Channel {
    file: RwLock<Option<File>>,
}

impl Channel {
    /// A channel writing to `file`.
    pub fn new(file: File) -> Self {
        Channel {
            file: RwLock::new(Some(file)),
        }
    }

    /// A duplicate descriptor for a serving thread to read from.
    pub fn reader(&self) -> io::Result<File> {
        match &*self.file.read().unwrap_or_else(PoisonError::into_inner) {
            Some(f) => f.try_clone(),
            None => Err(io::Error::from_raw_os_error(libc::ENODEV)),
        }
    }

    /// Closes the channel's own descriptor; later writes fail with ENODEV.
    pub fn close(&self) {
        self.file
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }

    /// Writes one message: an out header with `error` and `unique`, then `body`.
    pub fn send(&self, unique: u64, error: i32, body: &[&[u8]]) -> io::Result<()> {
        let len = core::mem::size_of::<OutHeader>() + body.iter().map(|b| b.len()).sum::<usize>();
        let header = OutHeader {
            len: u32::try_from(len).map_err(|_| io::Error::other("reply too long"))?,
            error,
            unique,
        };
        let mut slices = [IoSlice::new(&[]); 4];
        slices[0] = IoSlice::new(header.as_bytes());
        let parts = body.len().min(slices.len() - 1);
        for (slot, part) in slices[1..].iter_mut().zip(&body[..parts]) {
            *slot = IoSlice::new(part);
        }
        let guard = self.file.read().unwrap_or_else(PoisonError::into_inner);
        let file = guard
            .as_ref()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENODEV))?;
        // The kernel takes a message in one write or not at all.
        let written = (&*file).write_vectored(&slices[..=parts])?;
        if written == len {
            Ok(())
        } else {
            Err(io::Error::other(format!("wrote {written} of {len} bytes")))
        }
    }

    /// Answers request `unique` with `body`.
    pub fn reply(&self, unique: u64, body: &[&[u8]]) {
        log_send_failure(unique, self.send(unique, 0, body));
    }

    /// Fails request `unique` with `errno`.
    pub fn reply_error(&self, unique: u64, errno: i32) {
        log_send_failure(unique, self.send(unique, -errno, &[]));
    }

    /// Wakes the poller whose kernel handle is `kh`.
    pub fn notify_poll(&self, kh: u64) {
        let wake = NotifyPollWakeup { kh };
        if let Err(e) = self.send(0, abi::NOTIFY_POLL, &[wake.as_bytes()]) {
            tracing::debug!(error = %e, "poll notification failed");
        }
    }
}

fn log_send_failure(unique: u64, res: io::Result<()>) {
    match res {
        Ok(()) => {}
        // The request is gone: interrupted and answered, or the connection
        // was aborted.
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENODEV)) => {
            tracing::debug!(unique, error = %e, "reply to a request that is gone");
        }
        Err(e) => tracing::warn!(unique, error = %e, "CUSE reply failed"),
    }
}

/// Reads that may be parked in the core, by request id: what a
/// `FUSE_INTERRUPT` needs to find them.
type ParkedReads = Mutex<HashMap<u64, (u64, u32)>>;

/// A request parked in the core: its entry in [`ParkedReads`], which
/// the request's callback removes once it answers.
struct Parked {
    reads: Arc<ParkedReads>,
    unique: u64,
}

impl Parked {
    /// The request is answered: an interrupt no longer finds it.
    fn answered(&self) {
        self.reads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.unique);
    }
}

/// The request handling shared by the serving threads.
#[derive(Debug)]
pub struct Session {
    core: Arc<NodeCore>,
    channel: Arc<Channel>,
    parked: Arc<ParkedReads>,
}

impl From<ShortRequest> for NodeError {
    fn from(e: ShortRequest) -> Self {
        malformed(e.to_string())
    }
}

impl Session {
    /// Serves `core` through `channel`.
    pub fn new(core: Arc<NodeCore>, channel: Arc<Channel>) -> Self {
        Session {
            core,
            channel,
            parked: Arc::default(),
        }
    }

    /// One serving thread's loop over `reader` (a duplicate of the channel
    /// descriptor). Returns when the connection is aborted or closed.
    pub fn serve(&self, mut reader: File) -> io::Result<()> {
        let mut buf = vec![0u64; REQUEST_BUFFER / 8];
        loop {
            let n = match reader.read(buf.as_mut_bytes()) {
                Ok(n) => n,
                Err(e) => match e.raw_os_error() {
                    // The connection was aborted or the device released.
                    Some(libc::ENODEV | libc::ECONNABORTED) => return Ok(()),
                    // A request vanished before it could be read.
                    Some(libc::EINTR | libc::ENOENT | libc::EAGAIN) => continue,
                    _ => return Err(e),
                },
            };
            let Some(bytes) = buf.as_bytes().get(..n) else {
                continue;
            };
            self.handle(bytes);
        }
    }

    /// Handles one request; every failure becomes an error reply.
    pub fn handle(&self, request: &[u8]) {
        let (header, body) = match abi::split::<InHeader>(request) {
            Ok(split) => split,
            Err(e) => return tracing::warn!(error = %e, "undecodable CUSE request"),
        };
        if header.len as usize != request.len() {
            return self.channel.reply_error(header.unique, libc::EIO);
        }
        if let Err(e) = self.dispatch(header, body) {
            tracing::debug!(opcode = header.opcode, error = %e, "CUSE request refused");
            self.channel.reply_error(header.unique, e.errno());
        }
    }

    fn dispatch(&self, header: &InHeader, body: &[u8]) -> Result<(), NodeError> {
        let unique = header.unique;
        match header.opcode {
            opcode::OPEN => {
                self.allowed(header)?;
                let (_flags, _) = abi::split::<OpenIn>(body)?;
                let out = OpenOut {
                    fh: self.core.open(NodeKind::Card),
                    ..OpenOut::default()
                };
                self.channel.reply(unique, &[out.as_bytes()]);
            }
            opcode::READ => {
                self.allowed(header)?;
                self.read(header, arg(body)?);
            }
            opcode::WRITE => {
                self.allowed(header)?;
                return Err(malformed(
                    "write() on the character device has no offset: use GPUPM_IOC_REG_WRITE",
                ));
            }
            opcode::IOCTL => {
                self.allowed(header)?;
                let (ioctl, data) = abi::split::<IoctlIn>(body)?;
                self.ioctl(header, ioctl, data)?;
            }
            opcode::POLL => {
                self.allowed(header)?;
                self.poll(unique, arg(body)?)?;
            }
            opcode::RELEASE => {
                let release: &ReleaseIn = arg(body)?;
                self.core.release(release.fh);
                self.channel.reply(unique, &[]);
            }
            opcode::FLUSH | opcode::FSYNC => self.channel.reply(unique, &[]),
            opcode::INTERRUPT => self.interrupt(unique, arg(body)?),
            other => {
                tracing::debug!(opcode = other, "unsupported CUSE request");
                self.channel.reply_error(unique, libc::ENOSYS);
            }
        }
        Ok(())
    }

    /// The same rule as on `card0`, for every request but `release`.
    fn allowed(&self, header: &InHeader) -> Result<(), NodeError> {
        self.core.check(Caller {
            uid: header.uid,
            gid: header.gid,
            pid: header.pid,
        })
    }

    fn read(&self, header: &InHeader, read: &ReadIn) {
        let unique = header.unique;
        if (read.size as usize) < RECORD_SIZE {
            let e = malformed(format!(
                "read() of {} bytes: the character device's read() returns interrupt records; \
                 registers and the window are read with ioctls",
                read.size
            ));
            return self.channel.reply_error(unique, e.errno());
        }
        let nonblock = read.flags & (libc::O_NONBLOCK as u32) != 0;
        let parked = self.park(unique, read.fh, header.pid);
        let channel = Arc::clone(&self.channel);
        // The offset is ignored for a read of interrupt records.
        self.core.read(
            read.fh,
            0,
            read.size,
            nonblock,
            header.pid,
            Box::new(move |res| {
                parked.answered();
                match res {
                    Ok(bytes) => channel.reply(unique, &[&bytes]),
                    Err(e) => channel.reply_error(unique, e.errno()),
                }
            }),
        );
    }

    /// An ioctl; a `GPUPM_IOC_WAIT_COMMIT` may be answered later, from
    /// the thread that makes the commit (parked like a read, so that a
    /// `FUSE_INTERRUPT` finds it).
    fn ioctl(&self, header: &InHeader, ioctl: &IoctlIn, data: &[u8]) -> Result<(), NodeError> {
        let unique = header.unique;
        if ioctl.flags & IOCTL_UNRESTRICTED != 0 {
            return Err(malformed("unrestricted ioctl"));
        }
        if data.len() != ioctl.in_size as usize {
            return Err(malformed(format!(
                "ioctl carries {} bytes, in_size says {}",
                data.len(),
                ioctl.in_size
            )));
        }
        let parked = self.park(unique, ioctl.fh, header.pid);
        let channel = Arc::clone(&self.channel);
        let (cmd, out_size) = (ioctl.cmd, ioctl.out_size as usize);
        self.core.ioctl_deferred(
            ioctl.fh,
            cmd,
            data,
            ioctl.out_size,
            header.pid,
            Box::new(move |res| {
                parked.answered();
                match res {
                    Ok(reply) => {
                        let n = reply.data.len().min(out_size);
                        let out = IoctlOut {
                            result: reply.result,
                            ..IoctlOut::default()
                        };
                        channel.reply(unique, &[out.as_bytes(), &reply.data[..n]]);
                    }
                    Err(e) => {
                        tracing::debug!(cmd = format_args!("{cmd:#010x}"), error = %e, "ioctl refused");
                        channel.reply_error(unique, e.errno());
                    }
                }
            }),
        );
        Ok(())
    }

    fn poll(&self, unique: u64, poll: &PollIn) -> Result<(), NodeError> {
        let wake = (poll.flags & POLL_SCHEDULE_NOTIFY != 0).then(|| {
            let (channel, kh) = (Arc::clone(&self.channel), poll.kh);
            Box::new(move || channel.notify_poll(kh)) as PollWake
        });
        let revents = self.core.poll(poll.fh, poll.events, wake)?;
        let out = PollOut {
            revents,
            padding: 0,
        };
        self.channel.reply(unique, &[out.as_bytes()]);
        Ok(())
    }

    /// Fails the interrupted read with EINTR. An interrupt for a request
    /// not (or not yet) parked is answered EAGAIN, which makes the kernel
    /// send it again while the request is still in flight and drop it
    /// once the request is answered.
    fn interrupt(&self, unique: u64, interrupt: &InterruptIn) {
        let target = self.lock_parked().get(&interrupt.unique).copied();
        if let Some((fh, pid)) = target {
            if self.core.interrupt_reads(fh, pid) {
                return;
            }
        }
        self.channel.reply_error(unique | INT_REQ_BIT, libc::EAGAIN);
    }

    /// Parks request `unique` (of `pid`, on `fh`) until its callback
    /// answers it, so that a `FUSE_INTERRUPT` finds it meanwhile.
    fn park(&self, unique: u64, fh: u64, pid: u32) -> Parked {
        self.lock_parked().insert(unique, (fh, pid));
        Parked {
            reads: Arc::clone(&self.parked),
            unique,
        }
    }

    fn lock_parked(&self) -> std::sync::MutexGuard<'_, HashMap<u64, (u64, u32)>> {
        self.parked.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The argument struct of a request with nothing after it.
fn arg<T: FromBytes + KnownLayout + Immutable>(body: &[u8]) -> Result<&T, NodeError> {
    Ok(abi::split::<T>(body)?.0)
}
