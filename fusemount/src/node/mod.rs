//! The kit both FUSE nodes are built from: a node says what its files do
//! ([`NodeService`]); the kit serves them in a directory ([`NodeFs`]) and
//! mounts, serves and unmounts that directory ([`NodeMount`]).
//!
//! # What the kit decides, what the node decides
//! The kit answers the directory itself (its `FlatDir`: lookup, getattr,
//! opendir, readdir) and `flush`, refuses to open the root (EISDIR) or an
//! inode that is not one of the node's files (ENOENT), opens every file
//! with `FOPEN_DIRECT_IO` (each read and write reaches the node with the
//! caller's offset and size; nothing is cached), and hands everything
//! else to the node with the credentials the kernel sent. Before any
//! request but `flush` and `release` it asks the node's
//! [`NodeService::admit`]: a node whose every request passes one check
//! (the device node's admin rule) says so there, once; a node whose checks
//! differ per request (the tenant node's) admits everyone and checks in
//! its file operations. `release` is never refused, so that no handle
//! outlives its file.
//!
//! # Answers that come later
//! No serving thread ever waits. A read (or an ioctl) with nothing to
//! answer yet keeps its [`ReadReply`] (or [`IoctlReply`]) — it is `Send`
//! and answers from any thread — and whoever makes it answerable sends it;
//! a `poll` with nothing ready keeps its [`PollWake`]. Replies of killed
//! readers are failed by the node's [`Reaper`](crate::parked::Reaper).

mod fs;
mod serve;

use fuser::{Errno, INodeNo, PollEvents, ReplyData, ReplyIoctl};

pub use self::fs::NodeFs;
pub use self::serve::{NodeMount, ServeError};
pub use crate::flat::{FileAccess, PollWake};
use crate::procfs::Caller;

/// A request on an open file: who sent it, on which file and handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileRequest {
    /// The credentials the kernel sent with the request.
    pub caller: Caller,
    /// The file's inode (the root's, for a request on the directory).
    pub ino: INodeNo,
    /// The handle [`NodeService::open`] returned.
    pub fh: u64,
}

/// The answer to a `read`, sent now or kept and sent later from any thread.
/// Dropped unanswered, it fails the read with EIO.
#[derive(Debug)]
pub struct ReadReply(ReplyData);

impl ReadReply {
    /// Returns `bytes` to the reader.
    pub fn data(self, bytes: &[u8]) {
        self.0.data(bytes);
    }

    /// Fails the read with `errno`.
    pub fn error(self, errno: Errno) {
        self.0.error(errno);
    }
}

/// The answer to an `ioctl`, sent now or kept and sent later from any
/// thread. Dropped unanswered, it fails the ioctl with EIO.
#[derive(Debug)]
pub struct IoctlReply(ReplyIoctl);

impl IoctlReply {
    /// Returns `result` (the ioctl's return value) and `data` (copied out
    /// to the caller's argument; at most the `out_size` it asked for).
    pub fn ioctl(self, result: i32, data: &[u8]) {
        self.0.ioctl(result, data);
    }

    /// Fails the ioctl with `errno`.
    pub fn error(self, errno: Errno) {
        self.0.error(errno);
    }
}

/// What a node's files do. Every error is an errno here: a node maps its
/// own errors in its implementation, the one place they reach a caller.
pub trait NodeService: Send + Sync + 'static {
    /// The files of the node's directory (inode, name); inodes from 2 on,
    /// since 1 is the directory.
    const FILES: &'static [(INodeNo, &'static str)];

    /// Mode and group of the files, asked at every lookup and getattr.
    fn access(&self) -> FileAccess;

    /// Whether the node answers `caller` at all, checked before every
    /// request but `flush` and `release`; a refusal is the request's
    /// answer. No default: each node states who reaches it, so a new node
    /// cannot be open to everyone by omission.
    fn admit(&self, caller: Caller) -> Result<(), Errno>;

    /// Opens file `ino` (one of [`Self::FILES`]) for `caller`: the handle
    /// every later request on it names.
    fn open(&self, caller: Caller, ino: INodeNo) -> Result<u64, Errno>;

    /// A read of `size` bytes at `offset`; `nonblock` when the file was
    /// opened `O_NONBLOCK`. Answers `reply` now or keeps it.
    fn read(&self, file: FileRequest, offset: u64, size: u32, nonblock: bool, reply: ReadReply);

    /// A write of `data` at `offset`: the bytes written.
    fn write(&self, file: FileRequest, offset: u64, data: &[u8]) -> Result<u32, Errno>;

    /// An ioctl `cmd` with the argument bytes the kernel copied in, whose
    /// caller takes at most `out_size` bytes back. Answers `reply` now or
    /// keeps it.
    fn ioctl(&self, file: FileRequest, cmd: u32, input: &[u8], out_size: u32, reply: IoctlReply);

    /// The events of `events` (and those always reported) ready now; when
    /// none is and `wake` is given, the node runs it once one is.
    fn poll(
        &self,
        file: FileRequest,
        events: PollEvents,
        wake: Option<PollWake>,
    ) -> Result<PollEvents, Errno>;

    /// The last descriptor of handle `fh` closed: whatever it keeps parked
    /// is answered and it is gone.
    fn release(&self, fh: u64);
}
