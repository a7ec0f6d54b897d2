//! The reader's half of the mirror: opening and checking the files the
//! node names, sleeping on the doorbell, and copying slots consistently.

use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{fence, Ordering};
use std::time::Duration;

use gpupm_uapi::layout::{BlockSlot, BLOCK_SLOT_SIZE};
use gpupm_uapi::mirror::{
    mirror_slot_offset, offset, MirrorInfo, MIRROR_HEADER_SIZE, MIRROR_MAGIC, MIRROR_VERSION,
    MIRROR_WAITERS_SIZE,
};
use zerocopy::IntoBytes;

use super::rings::{self, RingArea, RingLayout, RingRead};
use super::sys::{futex_wait, futex_wake};
use super::{open_checked, MirrorFile};
use crate::patience::Patience;
use crate::shm::Shared;

/// Attempts a read spins before it starts yielding.
const SPINS: u32 = 1_000;
/// A sequence that stays odd (or keeps changing) this long means the
/// writer died mid-update or the mirror is unusable. As long as a page's
/// `PAGE_BUSY_MS`: a writer preempted mid-commit on a host with every CPU
/// busy held the sequence odd for more than the 5 ms this once was.
const BUSY: Duration = Duration::from_secs(1);

/// Why the mirror cannot be used or read.
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    /// The node's answer or the file is not a usable mirror.
    #[error("the commit mirror is unusable: {0}")]
    Invalid(String),
    /// Opening, checking or mapping a file failed (`PermissionDenied` for
    /// one that fails [`super::open_checked`]'s owner or mode check).
    #[error("the commit mirror could not be opened")]
    Io(#[from] io::Error),
    /// The sequence stayed odd or kept changing.
    #[error("the commit mirror stayed locked or kept changing for {BUSY:?}")]
    Busy,
}

/// The header words of one consistent read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// [`gpupm_uapi::mirror::MirrorHeader::generation`].
    pub generation: u64,
    /// `TRIG_COUNT_PERIODIC` of the commit the slots belong to.
    pub commit_seq: u64,
    /// Its device cycle.
    pub cycle: u64,
    /// The (even) sequence value read.
    pub seq: u64,
}

/// The mirror mapped read-only, and the waiter word mapped writable.
#[derive(Debug)]
pub struct MirrorReader {
    map: Shared,
    waiters: Shared,
    slot_count: u32,
    ino: u64,
    /// The ring area (ABI 1.10), when the file has one.
    rings: Option<RingArea>,
}

fn path_of(bytes: &[u8; gpupm_uapi::mirror::MIRROR_PATH_MAX]) -> Result<&Path, MirrorError> {
    let p = MirrorInfo::path_of(bytes).ok_or_else(|| MirrorError::Invalid("no path".into()))?;
    let p = Path::new(std::ffi::OsStr::from_bytes(p));
    if !p.is_absolute() {
        return Err(MirrorError::Invalid(format!(
            "{} is not absolute",
            p.display()
        )));
    }
    Ok(p)
}

impl MirrorReader {
    /// Opens the mirror `info` names: both files must pass
    /// [`open_checked`]; the layout must be this version's.
    pub fn open(info: &MirrorInfo) -> Result<MirrorReader, MirrorError> {
        let slot_bytes = u64::from(info.slot_count) * BLOCK_SLOT_SIZE;
        if info.mirror_version != MIRROR_VERSION
            || info.slot_count == 0
            || info.size < MIRROR_HEADER_SIZE + slot_bytes
        {
            return Err(MirrorError::Invalid(format!(
                "layout version {}, {} slots in {} bytes",
                info.mirror_version, info.slot_count, info.size
            )));
        }
        let (file, ino) = open_checked(path_of(&info.path)?, MirrorFile::Commits, info.size)?;
        let (wfile, _) = open_checked(
            path_of(&info.waiters_path)?,
            MirrorFile::Waiters,
            MIRROR_WAITERS_SIZE,
        )?;
        let len = usize::try_from(info.size).map_err(|_| MirrorError::Invalid("size".into()))?;
        let map = Shared::map(file.as_fd(), len, false)?;
        let waiters = Shared::map(wfile.as_fd(), 4, true)?;
        let magic = map.u64_at(0).map_or(0, |w| w.load(Ordering::Relaxed));
        if magic != u64::from(MIRROR_MAGIC) | u64::from(MIRROR_VERSION) << 32 {
            return Err(MirrorError::Invalid(format!("header {magic:#x}")));
        }
        let rings = RingArea::read_layout(&map, info.size).map_err(MirrorError::Invalid)?;
        Ok(MirrorReader {
            map,
            waiters,
            slot_count: info.slot_count,
            ino,
            rings,
        })
    }

    /// The mirror file's inode number (a re-created mirror has another).
    pub fn ino(&self) -> u64 {
        self.ino
    }

    /// Whether the file has a ring area (a 1.10 driver's).
    pub fn has_rings(&self) -> bool {
        self.rings.is_some()
    }

    /// Ring `ring`'s layout in the ring area.
    pub fn ring_layout(&self, ring: u32) -> Option<RingLayout> {
        let area = self.rings.as_ref()?;
        Some(area.rings.get(usize::try_from(ring).ok()?)?.layout)
    }

    /// Ring `ring`'s published head now.
    pub fn ring_head(&self, ring: u32) -> Option<u32> {
        self.rings.as_ref()?.load_head(&self.map, ring)
    }

    /// The generation now.
    pub fn generation(&self) -> u64 {
        self.map
            .u64_at(offset::GENERATION)
            .map_or(0, |w| w.load(Ordering::Acquire))
    }

    /// Hands `each` the records of ring `ring` from `tail` on, up to
    /// `device_head` (`PART_STREAM_HEAD` as the caller read it with the
    /// tail) or the mirror's head if nearer, in ring order, checking that
    /// the ring has `layout` (the device's) and that the generation did
    /// not change meanwhile (`gpupm_uapi::mirror`, "Its ordering"). On
    /// [`RingRead::GenerationChanged`] the caller discards what `each`
    /// got; on anything but [`RingRead::Taken`] it reads the window.
    pub fn read_ring(
        &self,
        (ring, layout): (u32, RingLayout),
        (tail, device_head): (u32, u32),
        each: impl FnMut(&gpupm_uapi::layout::StreamSlot),
    ) -> RingRead {
        let Some(area) = &self.rings else {
            return RingRead::Unusable;
        };
        rings::read_ring(&self.map, area, (ring, layout), (tail, device_head), each)
    }

    /// Readers registered as sleeping on the doorbell now.
    pub fn waiters(&self) -> u32 {
        self.waiters
            .u32_at(0)
            .map_or(0, |w| w.load(Ordering::SeqCst))
    }

    /// The doorbell now.
    pub fn doorbell(&self) -> u32 {
        self.map
            .u32_at(offset::DOORBELL)
            .map_or(0, |w| w.load(Ordering::SeqCst))
    }

    /// Sleeps until the doorbell differs from `seen`, `timeout` passed
    /// (`None`: no limit) or someone calls [`Self::wake_sleepers`] (or a
    /// spurious wake-up: the caller re-reads the doorbell in every case).
    pub fn wait(&self, seen: u32, timeout: Option<Duration>) -> io::Result<()> {
        let (Some(doorbell), Some(waiters)) =
            (self.map.u32_at(offset::DOORBELL), self.waiters.u32_at(0))
        else {
            return Ok(());
        };
        waiters.fetch_add(1, Ordering::SeqCst);
        let res = if doorbell.load(Ordering::SeqCst) == seen {
            futex_wait(doorbell, seen, timeout)
        } else {
            Ok(())
        };
        waiters.fetch_sub(1, Ordering::SeqCst);
        res
    }

    /// Wakes every thread sleeping in [`Self::wait`] on this mirror's
    /// doorbell, in any process, without ringing it: each re-reads the
    /// doorbell, finds it unchanged and goes on as after a spurious
    /// wake-up. For a reader that sleeps with no timeout, to end its sleep
    /// when the commits stop. Returns how many were woken.
    pub fn wake_sleepers(&self) -> io::Result<usize> {
        match self.map.u32_at(offset::DOORBELL) {
            Some(doorbell) => futex_wake(doorbell),
            None => Ok(0),
        }
    }

    /// Copies slots `slots[i]` into `out[i]` (`out` at least as long) and
    /// the header words, consistently (the sequence lock). A slot beyond
    /// the mirror is refused.
    pub fn read(&self, slots: &[u32], out: &mut [BlockSlot]) -> Result<Snapshot, MirrorError> {
        if out.len() < slots.len() {
            return Err(MirrorError::Invalid(
                "output shorter than the slot list".into(),
            ));
        }
        if let Some(s) = slots.iter().find(|&&s| s >= self.slot_count) {
            return Err(MirrorError::Invalid(format!("slot {s} beyond the mirror")));
        }
        let load = |at: usize| self.map.u64_at(at).map_or(0, |w| w.load(Ordering::Relaxed));
        let mut patience = Patience::new(SPINS, BUSY);
        loop {
            let s1 = load(offset::SEQ);
            fence(Ordering::Acquire);
            if s1 & 1 == 0 {
                let snap = Snapshot {
                    generation: load(offset::GENERATION),
                    commit_seq: load(offset::COMMIT_SEQ),
                    cycle: load(offset::CYCLE),
                    seq: s1,
                };
                for (&slot, dst) in slots.iter().zip(out.iter_mut()) {
                    self.copy_slot(slot, dst);
                }
                fence(Ordering::Acquire);
                if load(offset::SEQ) == s1 {
                    return Ok(snap);
                }
            }
            if !patience.wait() {
                return Err(MirrorError::Busy);
            }
        }
    }

    /// One slot's words (relaxed loads; the caller holds the lock).
    fn copy_slot(&self, slot: u32, dst: &mut BlockSlot) {
        let dst = dst.as_mut_bytes();
        let words = usize::try_from(mirror_slot_offset(slot))
            .ok()
            .and_then(|base| self.map.u64s_at(base, dst.len() / 8));
        let Some(words) = words else {
            // Not reached: `read` checked the slot against the mapping.
            dst.fill(0);
            return;
        };
        for (d, w) in dst.chunks_exact_mut(8).zip(words) {
            d.copy_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
        }
    }
}
