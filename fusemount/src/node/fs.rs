//! The one `fuser::Filesystem` of the nodes: a [`FlatDir`] around a
//! [`NodeService`]'s files. Each request is decided by a method taking the
//! kernel's credentials as a [`Caller`] (what the unit tests drive), and
//! answered by the `Filesystem` method around it.

use std::ffi::OsStr;

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, IoctlFlags,
    LockOwner, OpenFlags, PollEvents, PollFlags, PollNotifier, ReplyAttr, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyOpen, ReplyPoll, ReplyWrite, Request,
    WriteFlags,
};

use super::{FileRequest, IoctlReply, NodeService, PollWake, ReadReply};
use crate::flat::{poll_wake, FlatDir, ROOT_INO, TTL};
use crate::procfs::Caller;

/// A node's directory and files, served by `fuser`.
#[derive(Debug)]
pub struct NodeFs<S> {
    service: S,
    dir: FlatDir,
}

impl<S: NodeService> NodeFs<S> {
    /// The directory of `service`'s files, with times of now.
    pub fn new(service: S) -> Self {
        NodeFs {
            service,
            dir: FlatDir::new(S::FILES),
        }
    }

    /// The attributes of `name` in `parent`.
    fn entry(&self, caller: Caller, parent: INodeNo, name: &OsStr) -> Result<FileAttr, Errno> {
        self.service.admit(caller)?;
        self.dir
            .lookup(parent, name)
            .and_then(|ino| self.dir.attr(ino, self.service.access()))
            .ok_or(Errno::ENOENT)
    }

    /// The attributes of `ino`.
    fn attr(&self, caller: Caller, ino: INodeNo) -> Result<FileAttr, Errno> {
        self.service.admit(caller)?;
        self.dir
            .attr(ino, self.service.access())
            .ok_or(Errno::ENOENT)
    }

    /// Opens file `ino`: the node's handle.
    fn open_file(&self, caller: Caller, ino: INodeNo) -> Result<u64, Errno> {
        self.service.admit(caller)?;
        if ino == ROOT_INO {
            return Err(Errno::EISDIR);
        }
        if !self.dir.is_file(ino) {
            return Err(Errno::ENOENT);
        }
        self.service.open(caller, ino)
    }

    /// Whether `caller` may open `ino` as a directory: only the root is one.
    fn open_dir(&self, caller: Caller, ino: INodeNo) -> Result<(), Errno> {
        self.service.admit(caller)?;
        if ino != ROOT_INO {
            return Err(Errno::ENOTDIR);
        }
        Ok(())
    }

    /// The entries of directory `ino` from entry `offset` on.
    fn listing(
        &self,
        caller: Caller,
        ino: INodeNo,
        offset: u64,
    ) -> Result<impl Iterator<Item = (u64, INodeNo, FileType, &'static str)> + '_, Errno> {
        self.open_dir(caller, ino)?;
        Ok(self.dir.entries(offset))
    }

    fn write_file(&self, file: FileRequest, offset: u64, data: &[u8]) -> Result<u32, Errno> {
        self.service.admit(file.caller)?;
        self.service.write(file, offset, data)
    }

    fn poll_file(
        &self,
        file: FileRequest,
        events: PollEvents,
        wake: Option<PollWake>,
    ) -> Result<PollEvents, Errno> {
        self.service.admit(file.caller)?;
        self.service.poll(file, events, wake)
    }
}

fn file_request(req: &Request, ino: INodeNo, fh: FileHandle) -> FileRequest {
    FileRequest {
        caller: Caller::of(req),
        ino,
        fh: fh.0,
    }
}

impl<S: NodeService> Filesystem for NodeFs<S> {
    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.entry(Caller::of(req), parent, name) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr(Caller::of(req), ino) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.open_file(Caller::of(req), ino) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let file = file_request(req, ino, fh);
        if let Err(e) = self.service.admit(file.caller) {
            return reply.error(e);
        }
        let nonblock = flags.0 & libc::O_NONBLOCK != 0;
        self.service
            .read(file, offset, size, nonblock, ReadReply(reply));
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.write_file(file_request(req, ino, fh), offset, data) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
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
        self.service.release(fh.0);
        reply.ok();
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.open_dir(Caller::of(req), ino) {
            Ok(()) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        match self.listing(Caller::of(req), ino, offset) {
            Ok(entries) => {
                for (next, ino, kind, name) in entries {
                    if reply.add(ino, next, kind, name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
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
        let file = file_request(req, ino, fh);
        if let Err(e) = self.service.admit(file.caller) {
            return reply.error(e);
        }
        self.service
            .ioctl(file, cmd, in_data, out_size, IoctlReply(reply));
    }

    fn poll(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        ph: PollNotifier,
        events: PollEvents,
        flags: PollFlags,
        reply: ReplyPoll,
    ) {
        match self.poll_file(file_request(req, ino, fh), events, poll_wake(ph, flags)) {
            Ok(revents) => reply.poll(revents),
            Err(e) => reply.error(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::flat::FileAccess;

    const CARD: INodeNo = INodeNo(2);
    const OOB: INodeNo = INodeNo(3);
    const ROOT: Caller = Caller {
        uid: 0,
        gid: 0,
        pid: 1,
    };
    const STRANGER: Caller = Caller {
        uid: 1000,
        gid: 1000,
        pid: 2,
    };

    /// A node that admits only root and records what reaches it.
    #[derive(Default)]
    struct Recorder {
        calls: Mutex<Vec<String>>,
    }

    impl Recorder {
        fn calls(&self) -> Vec<String> {
            self.calls.lock().unwrap().clone()
        }
        fn record(&self, call: String) {
            self.calls.lock().unwrap().push(call);
        }
    }

    impl NodeService for Recorder {
        const FILES: &'static [(INodeNo, &'static str)] = &[(CARD, "card0"), (OOB, "card0-oob")];

        fn access(&self) -> FileAccess {
            FileAccess {
                perm: 0o640,
                gid: 7,
            }
        }
        fn admit(&self, caller: Caller) -> Result<(), Errno> {
            if caller.uid == 0 {
                Ok(())
            } else {
                Err(Errno::EACCES)
            }
        }
        fn open(&self, caller: Caller, ino: INodeNo) -> Result<u64, Errno> {
            self.record(format!("open {} by {}", ino.0, caller.pid));
            Ok(ino.0 * 10)
        }
        fn read(&self, _: FileRequest, _: u64, _: u32, _: bool, reply: ReadReply) {
            reply.error(Errno::EIO);
        }
        fn write(&self, file: FileRequest, offset: u64, data: &[u8]) -> Result<u32, Errno> {
            self.record(format!("write {} at {offset} on {}", data.len(), file.fh));
            u32::try_from(data.len()).map_err(|_| Errno::EINVAL)
        }
        fn ioctl(&self, _: FileRequest, _: u32, _: &[u8], _: u32, reply: IoctlReply) {
            reply.error(Errno::ENOTTY);
        }
        fn poll(
            &self,
            file: FileRequest,
            events: PollEvents,
            wake: Option<PollWake>,
        ) -> Result<PollEvents, Errno> {
            self.record(format!("poll on {} waking {}", file.fh, wake.is_some()));
            Ok(events & PollEvents::POLLIN)
        }
        fn release(&self, fh: u64) {
            self.record(format!("release {fh}"));
        }
    }

    fn fs() -> NodeFs<Recorder> {
        NodeFs::new(Recorder::default())
    }

    fn file(caller: Caller) -> FileRequest {
        FileRequest {
            caller,
            ino: CARD,
            fh: 20,
        }
    }

    #[test]
    fn files_are_looked_up_with_the_node_s_mode_and_group() {
        let fs = fs();
        let attr = fs.entry(ROOT, ROOT_INO, OsStr::new("card0-oob")).unwrap();
        assert_eq!((attr.ino, attr.perm, attr.gid), (OOB, 0o640, 7));
        assert_eq!(fs.attr(ROOT, CARD).unwrap().perm, 0o640);
        assert_eq!(fs.attr(ROOT, ROOT_INO).unwrap().kind, FileType::Directory);
        assert_eq!(
            fs.entry(ROOT, ROOT_INO, OsStr::new("card1")),
            Err(Errno::ENOENT)
        );
        assert_eq!(fs.attr(ROOT, INodeNo(9)), Err(Errno::ENOENT));
    }

    #[test]
    fn a_caller_the_node_refuses_learns_nothing_of_the_directory() {
        let fs = fs();
        assert_eq!(
            fs.entry(STRANGER, ROOT_INO, OsStr::new("card0")),
            Err(Errno::EACCES)
        );
        assert_eq!(
            fs.entry(STRANGER, ROOT_INO, OsStr::new("nothing")),
            Err(Errno::EACCES)
        );
        assert_eq!(fs.attr(STRANGER, ROOT_INO), Err(Errno::EACCES));
        assert_eq!(fs.open_dir(STRANGER, ROOT_INO), Err(Errno::EACCES));
        assert!(fs.listing(STRANGER, ROOT_INO, 0).is_err());
    }

    #[test]
    fn only_the_node_s_files_are_opened_and_by_the_node() {
        let fs = fs();
        assert_eq!(fs.open_file(ROOT, OOB), Ok(30));
        assert_eq!(fs.open_file(ROOT, ROOT_INO), Err(Errno::EISDIR));
        assert_eq!(fs.open_file(ROOT, INodeNo(9)), Err(Errno::ENOENT));
        // The node's refusal comes first, even for what does not exist.
        assert_eq!(fs.open_file(STRANGER, CARD), Err(Errno::EACCES));
        assert_eq!(fs.open_file(STRANGER, ROOT_INO), Err(Errno::EACCES));
        assert_eq!(fs.service.calls(), ["open 3 by 1"]);
    }

    #[test]
    fn only_the_root_is_a_directory_and_lists_dots_then_files() {
        let fs = fs();
        assert_eq!(fs.open_dir(ROOT, ROOT_INO), Ok(()));
        assert_eq!(fs.open_dir(ROOT, CARD), Err(Errno::ENOTDIR));
        assert!(fs.listing(ROOT, CARD, 0).is_err());
        let names: Vec<_> = fs
            .listing(ROOT, ROOT_INO, 1)
            .unwrap()
            .map(|(_, _, _, name)| name)
            .collect();
        assert_eq!(names, ["..", "card0", "card0-oob"]);
    }

    #[test]
    fn writes_and_polls_reach_the_node_only_past_its_admission() {
        let fs = fs();
        assert_eq!(fs.write_file(file(ROOT), 8, &[1, 2, 3, 4]), Ok(4));
        assert_eq!(
            fs.write_file(file(STRANGER), 8, &[1, 2, 3, 4]),
            Err(Errno::EACCES)
        );
        let wake: PollWake = Box::new(|| {});
        let events = PollEvents::POLLIN | PollEvents::POLLPRI;
        assert_eq!(
            fs.poll_file(file(ROOT), events, Some(wake)),
            Ok(PollEvents::POLLIN)
        );
        assert_eq!(
            fs.poll_file(file(STRANGER), events, None),
            Err(Errno::EACCES)
        );
        assert_eq!(
            fs.service.calls(),
            ["write 4 at 8 on 20", "poll on 20 waking true"]
        );
    }
}
