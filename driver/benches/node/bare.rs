//! The bare-FUSE baseline: one file served in-process by a minimal `fuser`
//! file system (`direct_io`; a read returns the requested bytes from a
//! static buffer, whatever the offset), mounted on a scratch directory the
//! same way as the node (`gpupm_fusemount::mount`, `Session::from_fd`, the
//! same thread count and descriptor cloning). What it costs is the FUSE
//! round trip alone; the node's excess over it is the driver's own work.

use std::ffi::OsStr;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::thread::{self, JoinHandle};
use std::time::{Duration, UNIX_EPOCH};

use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    LockOwner, OpenFlags, ReplyAttr, ReplyData, ReplyEntry, ReplyOpen, Request, Session,
    SessionACL,
};
use gpupm_fusemount::MountOptions;

/// Name of the one file.
pub const FILE_NAME: &str = "data";
const FILE_INO: INodeNo = INodeNo(2);
/// The file's bytes: enough for the largest read the benchmark makes.
static DATA: [u8; 64 * 1024] = [0x5a; 64 * 1024];
const TTL: Duration = Duration::from_secs(3600);

struct OneFile;

fn attr(ino: INodeNo) -> Option<FileAttr> {
    let (kind, perm, size) = match ino {
        INodeNo::ROOT => (FileType::Directory, 0o755, 0),
        FILE_INO => (FileType::RegularFile, 0o644, DATA.len() as u64),
        _ => return None,
    };
    Some(FileAttr {
        ino,
        size,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind,
        perm,
        nlink: 1,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    })
}

impl Filesystem for OneFile {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match attr(FILE_INO) {
            Some(a) if parent == INodeNo::ROOT && name == FILE_NAME => {
                reply.entry(&TTL, &a, Generation(0));
            }
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match attr(ino) {
            Some(a) => reply.attr(&TTL, &a),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO);
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let n = usize::try_from(size).map_or(DATA.len(), |s| s.min(DATA.len()));
        reply.data(&DATA[..n]);
    }
}

/// A mounted bare file system; [`BareFuse::unmount`] takes it away.
pub struct BareFuse {
    dir: PathBuf,
    session: Option<JoinHandle<io::Result<()>>>,
}

impl BareFuse {
    /// Mounts the file system at `dir` and serves it from `threads` threads.
    pub fn mount(dir: &Path, threads: usize) -> io::Result<BareFuse> {
        let fd = gpupm_fusemount::mount(dir, &MountOptions::new("gpupm-bare"))
            .map_err(io::Error::other)?;
        let mut config = Config::default();
        config.acl = SessionACL::All;
        config.n_threads = Some(threads);
        // As the node does: cloned descriptors where the trial clone works.
        config.clone_fd = threads > 1 && gpupm_fusemount::clone_device(fd.as_fd()).is_ok();
        let session = thread::Builder::new()
            .name("bare-fuse".into())
            .spawn(move || Session::from_fd(OneFile, fd, SessionACL::All, config)?.run())?;
        Ok(BareFuse {
            dir: dir.to_owned(),
            session: Some(session),
        })
    }

    /// Path of the one file.
    pub fn file(&self) -> PathBuf {
        self.dir.join(FILE_NAME)
    }

    /// Detaches the mount, aborts its connection and joins the session.
    pub fn unmount(mut self) -> io::Result<()> {
        gpupm_fusemount::unmount(&self.dir).map_err(io::Error::other)?;
        match self.session.take().map(JoinHandle::join) {
            Some(Ok(res)) => res,
            Some(Err(_)) => Err(io::Error::other("bare FUSE session panicked")),
            None => Ok(()),
        }
    }
}
