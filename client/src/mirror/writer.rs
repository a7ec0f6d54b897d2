//! The device's half of the mirror: creating the files (owner-only, or
//! shared with the directory's group) and
//! publishing a commit under the sequence lock, then ringing the doorbell.

use std::fs::{self, DirBuilder, File};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{fchown, DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, Ordering};

use gpupm_uapi::ioctl::IOCTL_STRUCT_VERSION;
use gpupm_uapi::layout::{BlockSlot, BLOCK_SLOT_SIZE};
use gpupm_uapi::mirror::{
    mirror_slot_offset, offset, MirrorHeader, MirrorInfo, MIRROR_MAGIC, MIRROR_PATH_MAX,
    MIRROR_VERSION, MIRROR_WAITERS_SIZE,
};
use nix::unistd::geteuid;
use zerocopy::{FromZeros, IntoBytes};

use super::rings::{RingArea, RingLayout};
use super::sys::futex_wake;
use super::{MIRROR_FILE, MIRROR_SIZE, MIRROR_SLOTS, WAITERS_FILE};
use crate::shm::Shared;

/// The mirror as its one writer (the driver) holds it.
#[derive(Debug)]
pub struct MirrorWriter {
    map: Shared,
    waiters: Shared,
    path: PathBuf,
    waiters_path: PathBuf,
    generation: u64,
    wakes: u64,
    /// Bytes of the mirror file.
    size: u64,
    /// The ring area (ABI 1.10), when the mirror has one.
    rings: Option<RingArea>,
}

/// The mode bits a mirror directory may not carry for its writer: any
/// access by other, and group write (group read and search share the
/// files with the directory's group).
const DIR_FORBIDDEN: u32 = 0o027;

/// A file's mode and group in its directory: owner-only, unless the
/// directory lets its group search it (the shipped units'
/// `/run/gpupm/mirror`, group `gpupm-admin`, and `/run/gpupm/mirror/waiters`,
/// group `gpupm`), then shared with that group.
#[derive(Clone, Copy, Debug)]
struct FileMode {
    mode: u32,
    gid: u32,
}

/// Where the two files go.
#[derive(Clone, Copy, Debug)]
pub struct MirrorDirs<'a> {
    /// The mirror's directory. Its group, when it may search it, may read
    /// the mirror (`gpupm-admin` in the units).
    pub mirror: &'a Path,
    /// The waiter file's directory, when it is not the mirror's own. Its
    /// group, when it may search it, may write the waiter word, so it must
    /// be a group of the reader alone (`gpupm`, gpupmd's own, in the
    /// units): whoever may write the file may also truncate it under both
    /// processes' mappings, which kills them (SIGBUS). In the mirror's
    /// directory (`None`) the waiter file is owner-only, whatever its group.
    pub waiters: Option<&'a Path>,
}

/// Checks that `dir` is a directory (not a symlink) owned by root or by
/// this process's effective uid, with no access for other and no group
/// write, creating it (mode 0700) when missing; returns the group and
/// whether that group may search it.
fn checked_dir(dir: &Path) -> io::Result<(u32, bool)> {
    match DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = fs::symlink_metadata(dir)?;
    let owner_ok = meta.uid() == 0 || meta.uid() == geteuid().as_raw();
    if !meta.file_type().is_dir() || !owner_ok || meta.mode() & DIR_FORBIDDEN != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{}: the mirror's directory must be root's or the driver's, \
                 with no group write and no other access, not a symlink",
                dir.display()
            ),
        ));
    }
    Ok((meta.gid(), meta.mode() & 0o010 != 0))
}

/// Creates `path` afresh (a stale file from an earlier driver is removed:
/// its readers keep their mapping of the old inode, which stops changing)
/// `size` bytes long, with group `gid` and exactly `mode` (set on the
/// descriptor, so the umask does not matter; the file is owner-only until
/// its group is set), and maps it writable.
fn create_file(path: &Path, size: u64, FileMode { mode, gid }: FileMode) -> io::Result<Shared> {
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let file = File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    let made = finish_file(&file, size, mode, gid);
    if made.is_err() {
        // No half-made file is left behind.
        fs::remove_file(path).ok();
    }
    made
}

/// Gives the new `file` its group, mode and size, and maps it.
fn finish_file(file: &File, size: u64, mode: u32, gid: u32) -> io::Result<Shared> {
    // A set-group-ID directory already gave the file its group, and then no
    // chown is made (the driver's unit forbids the @chown system calls).
    if file.metadata()?.gid() != gid {
        fchown(file, None, Some(gid))?;
    }
    file.set_permissions(fs::Permissions::from_mode(mode))?;
    file.set_len(size)?;
    let len = usize::try_from(size).map_err(|_| io::ErrorKind::InvalidInput)?;
    Shared::map(file.as_fd(), len, true)
}

/// `path` as [`MirrorInfo`]'s NUL-terminated array.
fn path_bytes(path: &Path) -> io::Result<[u8; MIRROR_PATH_MAX]> {
    let bytes = path.as_os_str().as_bytes();
    let mut out = [0u8; MIRROR_PATH_MAX];
    if bytes.len() >= MIRROR_PATH_MAX || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{}: a mirror path must be shorter than {MIRROR_PATH_MAX} bytes",
                path.display()
            ),
        ));
    }
    out[..bytes.len()].copy_from_slice(bytes);
    Ok(out)
}

/// A commit being published: the sequence is odd until [`MirrorCommit::finish`].
#[derive(Debug)]
pub struct MirrorCommit<'a> {
    writer: &'a mut MirrorWriter,
    odd: u64,
}

impl MirrorWriter {
    /// Creates the mirror and its waiter file in `dir` (made owner-only if
    /// missing; refused unless root's or this process's, with no group
    /// write and no other access, not a symlink), with `generation` and no
    /// ring area (a 1.9 mirror). The mirror is 0640 with the directory's
    /// group when that group may search it, else 0600; the waiter file
    /// 0600 (see [`MirrorDirs`] for sharing it).
    pub fn create(dir: &Path, generation: u64) -> io::Result<MirrorWriter> {
        Self::create_with_rings(dir, generation, &[])
    }

    /// As [`MirrorWriter::create`], with a ring area holding `rings`
    /// (partition slot `p`'s ring at index `p`; none when empty). The
    /// file grows by their slots: tmpfs pages are only used once written.
    pub fn create_with_rings(
        dir: &Path,
        generation: u64,
        rings: &[RingLayout],
    ) -> io::Result<MirrorWriter> {
        let dirs = MirrorDirs {
            mirror: dir,
            waiters: None,
        };
        Self::create_in(dirs, generation, rings)
    }

    /// As [`MirrorWriter::create_with_rings`], with the waiter file in
    /// `dirs.waiters` when given. Each directory is checked as `dir` is
    /// (see [`MirrorWriter::create`]); the mirror is shared read-only with
    /// its directory's group, the waiter word writable with its own
    /// directory's group only when that is not the mirror's directory.
    pub fn create_in(
        dirs: MirrorDirs<'_>,
        generation: u64,
        rings: &[RingLayout],
    ) -> io::Result<MirrorWriter> {
        let area = (!rings.is_empty()).then(|| RingArea::plan(MIRROR_SIZE, rings));
        let size = area.as_ref().map_or(MIRROR_SIZE, |a| a.at + a.size);
        let (gid, shared) = checked_dir(dirs.mirror)?;
        let dir = fs::canonicalize(dirs.mirror)?;
        let commits = FileMode {
            mode: if shared { 0o640 } else { 0o600 },
            gid,
        };
        let (waiters_dir, waiters_mode) = match dirs.waiters {
            Some(w) => {
                let (wgid, wshared) = checked_dir(w)?;
                let w = fs::canonicalize(w)?;
                let own_dir = w != dir;
                let mode = if own_dir && wshared { 0o660 } else { 0o600 };
                (w, FileMode { mode, gid: wgid })
            }
            None => (dir.clone(), FileMode { mode: 0o600, gid }),
        };
        let (path, waiters_path) = (dir.join(MIRROR_FILE), waiters_dir.join(WAITERS_FILE));
        path_bytes(&path)?;
        path_bytes(&waiters_path)?;
        let waiters = create_file(&waiters_path, MIRROR_WAITERS_SIZE, waiters_mode)?;
        let map = create_file(&path, size, commits).inspect_err(|_| {
            fs::remove_file(&waiters_path).ok();
        })?;
        let mut head = MirrorHeader::new_zeroed();
        head.magic = MIRROR_MAGIC;
        head.version = MIRROR_VERSION;
        head.slot_count = MIRROR_SLOTS;
        head.slot_size = u32::try_from(BLOCK_SLOT_SIZE).unwrap_or(u32::MAX);
        head.generation = generation;
        for (i, word) in head.as_bytes().chunks_exact(8).enumerate() {
            let mut v = [0u8; 8];
            v.copy_from_slice(word);
            if let Some(w) = map.u64_at(i * 8) {
                w.store(u64::from_le_bytes(v), Ordering::Relaxed);
            }
        }
        if let Some(area) = &area {
            area.write_layout(&map);
        }
        Ok(MirrorWriter {
            map,
            waiters,
            path,
            waiters_path,
            generation,
            wakes: 0,
            size,
            rings: area,
        })
    }

    /// What `GPUPM_IOC_MIRROR_INFO` answers.
    pub fn info(&self) -> MirrorInfo {
        let mut info = MirrorInfo::new_zeroed();
        info.version = IOCTL_STRUCT_VERSION;
        info.mirror_version = MIRROR_VERSION;
        info.slot_count = MIRROR_SLOTS;
        info.size = self.size;
        info.generation = self.generation;
        // Both were checked by `create`.
        info.path = path_bytes(&self.path).unwrap_or([0; MIRROR_PATH_MAX]);
        info.waiters_path = path_bytes(&self.waiters_path).unwrap_or([0; MIRROR_PATH_MAX]);
        info
    }

    /// The mirror file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The current generation.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Futex wakes made so far (a doorbell rung while a reader waited).
    pub fn wakes(&self) -> u64 {
        self.wakes
    }

    /// The rings of the ring area (none without one), in partition-slot
    /// order.
    pub fn rings(&self) -> impl Iterator<Item = RingLayout> + '_ {
        self.rings
            .iter()
            .flat_map(|a| a.rings.iter().map(|r| r.layout))
    }

    /// Copies `records` (whole stream slots, ring order) into ring `ring`
    /// from ring index `first` on, wrapping at its capacity. Readers see
    /// them once [`MirrorWriter::publish_ring_head`] covers them.
    pub fn copy_ring_records(&self, ring: u32, first: u32, records: &[u8]) {
        if let Some(area) = &self.rings {
            area.store_records(&self.map, ring, first, records);
        }
    }

    /// Publishes ring `ring`'s head (release ordering: after the records
    /// copied below it).
    pub fn publish_ring_head(&self, ring: u32, head: u32) {
        if let Some(area) = &self.rings {
            area.store_head(&self.map, ring, head);
        }
    }

    /// Starts publishing a commit: the sequence turns odd.
    pub fn begin(&mut self) -> MirrorCommit<'_> {
        let seq = self
            .map
            .u64_at(offset::SEQ)
            .map_or(0, |w| w.load(Ordering::Relaxed));
        // A writer that died mid-update left it odd; move past it.
        let odd = if seq & 1 == 0 { seq + 1 } else { seq + 2 };
        if let Some(w) = self.map.u64_at(offset::SEQ) {
            w.store(odd, Ordering::Relaxed);
        }
        fence(Ordering::Release);
        MirrorCommit { writer: self, odd }
    }
}

impl MirrorCommit<'_> {
    /// Copies `block` into mirror slot `slot` (ignored beyond the slots).
    pub fn slot(&self, slot: u32, block: &BlockSlot) {
        let Ok(base) = usize::try_from(mirror_slot_offset(slot)) else {
            return;
        };
        for (i, word) in block.as_bytes().chunks_exact(8).enumerate() {
            let mut v = [0u8; 8];
            v.copy_from_slice(word);
            if let Some(w) = self.writer.map.u64_at(base + i * 8) {
                w.store(u64::from_le_bytes(v), Ordering::Relaxed);
            }
        }
    }

    /// Changes the generation (a device reset) within this commit, and
    /// restarts every ring's head at 0: after the generation and a
    /// release fence, so that a reader who sees a restarted head or any
    /// record copied after it sees the new generation in its check.
    pub fn set_generation(&mut self, generation: u64) {
        self.writer.generation = generation;
        self.store(offset::GENERATION, generation);
        fence(Ordering::Release);
        if let Some(area) = &self.writer.rings {
            for r in (0u32..).take(area.rings.len()) {
                area.store_head(&self.writer.map, r, 0);
            }
        }
    }

    fn store(&self, at: usize, v: u64) {
        if let Some(w) = self.writer.map.u64_at(at) {
            w.store(v, Ordering::Relaxed);
        }
    }

    /// Stores the commit's sequence and cycle, ends the write (even
    /// sequence, release), rings the doorbell and wakes its sleepers if
    /// any registered. Returns whether a wake was made.
    pub fn finish(self, commit_seq: u64, cycle: u64) -> bool {
        self.store(offset::COMMIT_SEQ, commit_seq);
        self.store(offset::CYCLE, cycle);
        let map = &self.writer.map;
        if let Some(w) = map.u64_at(offset::SEQ) {
            w.store(self.odd + 1, Ordering::Release);
        }
        let Some(doorbell) = map.u32_at(offset::DOORBELL) else {
            return false;
        };
        doorbell.fetch_add(1, Ordering::SeqCst);
        let waiting = self
            .writer
            .waiters
            .u32_at(0)
            .is_some_and(|w| w.load(Ordering::SeqCst) != 0);
        if waiting && futex_wake(doorbell).is_ok() {
            self.writer.wakes += 1;
            return true;
        }
        false
    }
}
