//! The shape both nodes share: one root directory holding a few files,
//! every attribute fixed at start but the files' mode and group, which
//! the node gives. The node decides who may see what and what the files
//! do ([`crate::node`]); this is the directory around them.

use std::ffi::OsStr;
use std::time::{Duration, SystemTime};

use fuser::{FileAttr, FileType, INodeNo, PollFlags, PollNotifier};

/// The root directory's inode.
pub const ROOT_INO: INodeNo = INodeNo::ROOT;
/// How long the kernel may cache an entry or attribute.
pub const TTL: Duration = Duration::from_secs(1);

/// Tells a poller that its handle became ready.
pub type PollWake = Box<dyn FnOnce() + Send>;

/// What wakes the poller of a `poll` request: a notification through `ph`
/// when the kernel asked for one (`FUSE_POLL_SCHEDULE_NOTIFY`), else
/// nothing, since the poller is not waiting.
pub fn poll_wake(ph: PollNotifier, flags: PollFlags) -> Option<PollWake> {
    flags
        .contains(PollFlags::FUSE_POLL_SCHEDULE_NOTIFY)
        .then(|| {
            Box::new(move || {
                if let Err(e) = ph.notify() {
                    tracing::debug!(error = %e, "poll notification failed");
                }
            }) as PollWake
        })
}

/// A root directory and its files (inode, name).
#[derive(Debug)]
pub struct FlatDir {
    files: &'static [(INodeNo, &'static str)],
    started: SystemTime,
}

/// Mode and group of a node's files (its directory is `0755 root`).
#[derive(Clone, Copy, Debug)]
pub struct FileAccess {
    /// Permission bits.
    pub perm: u16,
    /// Owning group.
    pub gid: u32,
}

impl FlatDir {
    /// The directory of `files`, with times of now.
    pub fn new(files: &'static [(INodeNo, &'static str)]) -> FlatDir {
        FlatDir {
            files,
            started: SystemTime::now(),
        }
    }

    /// The inode of `name` in directory `parent`.
    pub fn lookup(&self, parent: INodeNo, name: &OsStr) -> Option<INodeNo> {
        let name = name.to_str()?;
        self.files
            .iter()
            .find(|&&(_, n)| parent == ROOT_INO && n == name)
            .map(|&(ino, _)| ino)
    }

    /// The attributes of `ino` (a file gets `file`'s mode and group).
    pub fn attr(&self, ino: INodeNo, file: FileAccess) -> Option<FileAttr> {
        let (kind, perm, gid) = if ino == ROOT_INO {
            (FileType::Directory, 0o755, 0)
        } else if self.is_file(ino) {
            (FileType::RegularFile, file.perm, file.gid)
        } else {
            return None;
        };
        Some(FileAttr {
            ino,
            size: 0,
            blocks: 0,
            atime: self.started,
            mtime: self.started,
            ctime: self.started,
            crtime: self.started,
            kind,
            perm,
            nlink: if kind == FileType::Directory { 2 } else { 1 },
            uid: 0,
            gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        })
    }

    /// Whether `ino` is one of the files (not the root).
    pub fn is_file(&self, ino: INodeNo) -> bool {
        self.files.iter().any(|&(i, _)| i == ino)
    }

    /// The root's entries from entry `offset` on: `.`, `..`, then the
    /// files, each with the offset of the entry after it.
    pub fn entries(
        &self,
        offset: u64,
    ) -> impl Iterator<Item = (u64, INodeNo, FileType, &'static str)> + '_ {
        let dots = [
            (ROOT_INO, FileType::Directory, "."),
            (ROOT_INO, FileType::Directory, ".."),
        ];
        let files = self
            .files
            .iter()
            .map(|&(i, n)| (i, FileType::RegularFile, n));
        let skip = usize::try_from(offset).unwrap_or(usize::MAX);
        (1u64..)
            .zip(dots.into_iter().chain(files))
            .skip(skip)
            .map(|(next, (ino, kind, name))| (next, ino, kind, name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILES: &[(INodeNo, &str)] = &[(INodeNo(2), "card0"), (INodeNo(3), "card0-oob")];
    const ACCESS: FileAccess = FileAccess {
        perm: 0o660,
        gid: 7,
    };

    #[test]
    fn files_are_found_only_in_the_root_and_carry_their_access() {
        let dir = FlatDir::new(FILES);
        assert_eq!(
            dir.lookup(ROOT_INO, OsStr::new("card0-oob")),
            Some(INodeNo(3))
        );
        assert_eq!(dir.lookup(INodeNo(2), OsStr::new("card0")), None);
        assert_eq!(dir.lookup(ROOT_INO, OsStr::new("card1")), None);
        let file = dir.attr(INodeNo(2), ACCESS).unwrap();
        assert_eq!(
            (file.kind, file.perm, file.gid, file.nlink),
            (FileType::RegularFile, 0o660, 7, 1)
        );
        let root = dir.attr(ROOT_INO, ACCESS).unwrap();
        assert_eq!(
            (root.kind, root.perm, root.gid, root.nlink),
            (FileType::Directory, 0o755, 0, 2)
        );
        assert!(dir.attr(INodeNo(4), ACCESS).is_none());
        assert!(dir.is_file(INodeNo(3)) && !dir.is_file(ROOT_INO));
    }

    #[test]
    fn a_listing_resumes_after_the_entry_it_stopped_at() {
        let dir = FlatDir::new(FILES);
        let all: Vec<_> = dir
            .entries(0)
            .map(|(next, _, _, name)| (next, name))
            .collect();
        assert_eq!(all, [(1, "."), (2, ".."), (3, "card0"), (4, "card0-oob")]);
        let rest: Vec<_> = dir
            .entries(3)
            .map(|(_, ino, kind, _)| (ino, kind))
            .collect();
        assert_eq!(rest, [(INodeNo(3), FileType::RegularFile)]);
        assert_eq!(dir.entries(u64::MAX).count(), 0);
    }
}
