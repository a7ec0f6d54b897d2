//! The commit mirror (ABI 1.9): a privileged shared-memory file into which
//! the device copies, after every periodic commit, the block slots that
//! commit wrote — the emulated form of a GPU writing its
//! performance-monitor output into host memory by DMA. A host that keeps
//! copies of blocks current (the daemon's tenant pages) reads them there
//! instead of asking the node (`GPUPM_IOC_WAIT_COMMIT`) once per commit.
//!
//! # Finding it
//! `GPUPM_IOC_MIRROR_INFO` on the device node ([`MirrorInfo`]) answers the
//! file's path, size, layout version and generation; ENODEV when the
//! driver keeps no mirror. The file is created by the driver in a
//! directory owned by root or by the driver's uid with no group write and
//! no other access: mode 0600, or 0640 with the directory's group when
//! that group may search it (the shipped units: `gpupm-driver`,
//! `gpupm-admin`). A reader opens the directory and the file in it
//! (`O_NOFOLLOW`), checks with `fstat` that the file is a regular file of
//! at least [`MirrorInfo::size`] bytes with its directory's owner, no
//! other access and no group write, in a directory no group or other may
//! write, and maps it read-only and shared (docs/pages.md, "Security").
//!
//! # Layout
//! A [`MirrorHeader`] of [`MIRROR_HEADER_SIZE`] bytes, then one
//! [`crate::layout::BlockSlot`] per block slot of the memory window, in
//! window order (slot `i` at `MIRROR_HEADER_SIZE + i * BLOCK_SLOT_SIZE`).
//! Every access to the mapping, by the device and by readers, is an aligned
//! atomic access (32-bit for [`MirrorHeader::doorbell`] and the waiter
//! file's word, 64-bit for every other word), so no access is a data
//! race.
//!
//! # The sequence lock
//! The device writes a commit as: store `seq + 1` (relaxed), release
//! fence, copy the written block slots and store `commit_seq`, `cycle`
//! (relaxed atomic stores), store `seq + 2` (release). A reader: load
//! `seq`, acquire fence, retry while odd; load the words it wants
//! (relaxed); acquire fence; load `seq` again; the copy is consistent if
//! both loads are equal (the protocol of the counter pages,
//! docs/pages.md).
//!
//! # The doorbell
//! After `seq + 2`, the device adds 1 to [`MirrorHeader::doorbell`]
//! (sequentially consistent) and, when the `waiters` word (read after the
//! doorbell store, sequentially consistent) is not zero, wakes
//! the doorbell's waiters with a shared `FUTEX_WAKE` (not
//! `FUTEX_PRIVATE_FLAG`: the readers are other processes). A reader
//! remembers the doorbell value it has seen, reads the mirror, and sleeps
//! with `FUTEX_WAIT` on the doorbell for that value. `waiters` is the
//! first 32-bit word of a separate waiter file ([`MirrorInfo`]'s
//! `waiters_path`, like the mirror but group-writable when shared,
//! [`MIRROR_WAITERS_SIZE`] bytes), which a reader maps writable — so the
//! mirror itself stays read-only to every reader and a reader can at
//! most cause or save wake calls. A reader registers (+1, sequentially consistent)
//! before it re-checks the doorbell and sleeps, and deregisters after. By
//! the order of the two sequentially consistent pairs either the device
//! sees the waiter or the waiter sees the new doorbell value (and
//! `FUTEX_WAIT` itself refuses to sleep on a changed value).
//!
//! A device reset changes [`MirrorHeader::generation`] (in the commit
//! that publishes the blocks the reset zeroed); a driver that starts
//! again creates a new file (a new inode) with a new generation, and the
//! old file, which readers may still map, stops changing.
//!
//! # The ring area (ABI 1.10)
//! Real devices write their stream rings into host memory by DMA as they
//! write their block slots; so does the mirror. When
//! [`MirrorHeader::rings`] is not 0 it is the file offset of a
//! [`MirrorRings`] header, followed by `ring_count` [`MirrorRing`]
//! descriptors (descriptor `p` is partition slot `p`'s ring, at
//! [`mirror_ring_offset`]), and each ring's `cap` stream slots
//! ([`crate::layout::StreamSlot`], ring index `i` at
//! `slots + (i % cap) * slot_size`), in ring order, 64-byte aligned.
//! Capacities and window bases are the device's (`PART_STREAM_CAP`,
//! `PART_STREAM_BASE`), fixed for the life of the file.
//!
//! A 1.9 reader stays valid: the layout version is still 1, the header
//! and block slots keep their place and meaning, the word `rings` was
//! reserved (1.9 readers do not read it), and the area lies past the
//! block slots: the file and [`MirrorInfo::size`] are only larger (a 1.9
//! reader checks `size >= 64 + slot_count * slot size` and maps `size`
//! bytes, reading none past the slots). A 1.10 reader of a 1.9 driver's
//! mirror finds `rings == 0`: no ring area.
//!
//! ## Its ordering
//! At each publication the device copies the records pushed since the
//! previous one (`[published head, device head)`, at most `cap` of them:
//! older ones were overwritten on the device too) with relaxed 64-bit
//! atomic stores, then stores [`MirrorRing::head`] (32-bit, modulo 2^32
//! like `PART_STREAM_HEAD`) with release ordering. A reader loads the
//! generation (acquire), then `head` (acquire), reads the slots of
//! `[tail, head)` (relaxed 64-bit loads), issues an acquire fence and
//! loads the generation again: the records are those of `head`'s
//! generation if both loads agree. A slot the device has not yet
//! overwritten is never being written while read: the device writes ring
//! index `i` only once `i < tail + cap`, and the reader reads below its own
//! tail plus `cap` and moves the tail only after reading.
//!
//! A device reset restarts every ring at 0: in the same device-lock hold
//! as the reset (before any register shows the reset) the device stores
//! the new generation, a release fence, then every `head` as 0; the new
//! records' slot stores follow. A reader whose slot loads saw any store
//! made after the reset sees, through its acquire fence, the new
//! generation in its second load and discards what it read (reading the
//! window instead); a head that is behind the reader's tail or more than
//! `cap` ahead of it (a reset or restart raced the read) is not used
//! either. The mirror may lag the device (it is published at each
//! delivery, after the request that made the records): records past its
//! head are read from the window.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// [`MirrorHeader::magic`]: "GPMM" little-endian.
pub const MIRROR_MAGIC: u32 = u32::from_le_bytes(*b"GPMM");
/// Layout version of this header and slot array.
pub const MIRROR_VERSION: u32 = 1;
/// Bytes before the first block slot (one cache line).
pub const MIRROR_HEADER_SIZE: u64 = 64;
/// Longest path [`MirrorInfo`] carries, NUL included.
pub const MIRROR_PATH_MAX: usize = 256;
/// Size of the waiter file: one page, holding the `waiters` word at 0.
pub const MIRROR_WAITERS_SIZE: u64 = 4096;

/// The first [`MIRROR_HEADER_SIZE`] bytes of the mirror file.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct MirrorHeader {
    /// [`MIRROR_MAGIC`].
    pub magic: u32,
    /// [`MIRROR_VERSION`].
    pub version: u32,
    /// Block slots that follow (`CTX_BLOCK_SLOT_BASE + CTX_BLOCK_SLOTS`).
    pub slot_count: u32,
    /// Bytes per slot (`sizeof(struct gpupm_block_slot)`).
    pub slot_size: u32,
    /// Changes when the mirror is (re)created or the device is reset.
    pub generation: u64,
    /// Sequence lock: odd while the device writes.
    pub seq: u64,
    /// `TRIG_COUNT_PERIODIC` of the last commit copied.
    pub commit_seq: u64,
    /// The device cycle when it was copied.
    pub cycle: u64,
    /// Incremented after every copied commit; the futex word.
    pub doorbell: u32,
    /// Reserved, 0 (the readers' `waiters` word is in the waiter file).
    pub reserved0: u32,
    /// ABI 1.10: file offset of the ring area ([`MirrorRings`]); 0 when
    /// the mirror has none (a 1.9 driver's, where this word was reserved).
    pub rings: u64,
}
const _: () = assert!(core::mem::size_of::<MirrorHeader>() as u64 == MIRROR_HEADER_SIZE);
const _: () = assert!(core::mem::offset_of!(MirrorHeader, generation) == 16);
const _: () = assert!(core::mem::offset_of!(MirrorHeader, seq) == 24);
const _: () = assert!(core::mem::offset_of!(MirrorHeader, commit_seq) == 32);
const _: () = assert!(core::mem::offset_of!(MirrorHeader, cycle) == 40);
const _: () = assert!(core::mem::offset_of!(MirrorHeader, doorbell) == 48);
const _: () = assert!(core::mem::offset_of!(MirrorHeader, rings) == 56);

/// Bytes of the [`MirrorRings`] header.
pub const MIRROR_RINGS_HEADER_SIZE: u64 = 32;
/// Bytes of one [`MirrorRing`] descriptor.
pub const MIRROR_RING_SIZE: u64 = 32;

/// The head of the ring area (ABI 1.10), at [`MirrorHeader::rings`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct MirrorRings {
    /// Descriptors that follow: one per partition slot
    /// (`MAX_PARTITION_SLOTS`).
    pub ring_count: u32,
    /// Bytes per descriptor ([`MIRROR_RING_SIZE`]).
    pub ring_size: u32,
    /// Bytes per ring slot (`sizeof(struct gpupm_stream_slot)`).
    pub slot_size: u32,
    /// Reserved, 0.
    pub reserved0: u32,
    /// Bytes from [`MirrorHeader::rings`] to the end of the last ring's
    /// slots.
    pub area_size: u64,
    /// Reserved, 0.
    pub reserved: u64,
}
const _: () = assert!(core::mem::size_of::<MirrorRings>() as u64 == MIRROR_RINGS_HEADER_SIZE);
const _: () = assert!(core::mem::offset_of!(MirrorRings, area_size) == 16);

/// One ring's descriptor in the ring area.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct MirrorRing {
    /// Published head: the ring index after the last record copied,
    /// modulo 2^32 (32-bit atomic, stored with release ordering after the
    /// slots it covers). Restarts at 0 with a device reset.
    pub head: u32,
    /// Capacity in records (`PART_STREAM_CAP`); 0: the ring is not
    /// mirrored.
    pub cap: u32,
    /// `PART_STREAM_BASE`: the window offset of the ring's first slot.
    pub window_base: u64,
    /// File offset of the ring's first slot (ring index 0).
    pub slots: u64,
    /// Reserved, 0.
    pub reserved: u64,
}
const _: () = assert!(core::mem::size_of::<MirrorRing>() as u64 == MIRROR_RING_SIZE);
const _: () = assert!(core::mem::offset_of!(MirrorRing, cap) == 4);
const _: () = assert!(core::mem::offset_of!(MirrorRing, window_base) == 8);
const _: () = assert!(core::mem::offset_of!(MirrorRing, slots) == 16);

/// File offset of ring `ring`'s descriptor in a ring area at `rings`.
pub const fn mirror_ring_offset(rings: u64, ring: u32) -> u64 {
    rings + MIRROR_RINGS_HEADER_SIZE + ring as u64 * MIRROR_RING_SIZE
}

/// Byte offsets of the header's words, for atomic access to a mapping.
pub mod offset {
    /// [`super::MirrorHeader::generation`].
    pub const GENERATION: usize = core::mem::offset_of!(super::MirrorHeader, generation);
    /// [`super::MirrorHeader::seq`].
    pub const SEQ: usize = core::mem::offset_of!(super::MirrorHeader, seq);
    /// [`super::MirrorHeader::commit_seq`].
    pub const COMMIT_SEQ: usize = core::mem::offset_of!(super::MirrorHeader, commit_seq);
    /// [`super::MirrorHeader::cycle`].
    pub const CYCLE: usize = core::mem::offset_of!(super::MirrorHeader, cycle);
    /// [`super::MirrorHeader::doorbell`].
    pub const DOORBELL: usize = core::mem::offset_of!(super::MirrorHeader, doorbell);
    /// [`super::MirrorHeader::rings`].
    pub const RINGS: usize = core::mem::offset_of!(super::MirrorHeader, rings);
    /// [`super::MirrorRing::head`], from a descriptor's start.
    pub const RING_HEAD: usize = core::mem::offset_of!(super::MirrorRing, head);
    /// [`super::MirrorRing::cap`], from a descriptor's start.
    pub const RING_CAP: usize = core::mem::offset_of!(super::MirrorRing, cap);
    /// [`super::MirrorRing::window_base`], from a descriptor's start.
    pub const RING_WINDOW_BASE: usize = core::mem::offset_of!(super::MirrorRing, window_base);
    /// [`super::MirrorRing::slots`], from a descriptor's start.
    pub const RING_SLOTS: usize = core::mem::offset_of!(super::MirrorRing, slots);
}

/// Byte offset of block slot `slot` in the mirror file.
pub const fn mirror_slot_offset(slot: u32) -> u64 {
    MIRROR_HEADER_SIZE + slot as u64 * crate::layout::BLOCK_SLOT_SIZE
}

/// The argument of `GPUPM_IOC_MIRROR_INFO`: the caller sets `version` (and
/// zeroes the rest); the node fills the other fields. ENODEV when the
/// driver keeps no mirror; EINVAL for a wrong `version` or non-zero
/// `flags`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct MirrorInfo {
    /// [`crate::ioctl::IOCTL_STRUCT_VERSION`].
    pub version: u32,
    /// Must be 0.
    pub flags: u32,
    /// Out: [`MIRROR_VERSION`].
    pub mirror_version: u32,
    /// Out: block slots in the mirror.
    pub slot_count: u32,
    /// Out: bytes of the mirror file.
    pub size: u64,
    /// Out: [`MirrorHeader::generation`] now.
    pub generation: u64,
    /// Out: the mirror file's absolute path, NUL-terminated.
    pub path: [u8; MIRROR_PATH_MAX],
    /// Out: the waiter file's absolute path, NUL-terminated.
    pub waiters_path: [u8; MIRROR_PATH_MAX],
}
const _: () = assert!(core::mem::size_of::<MirrorInfo>() == 32 + 2 * MIRROR_PATH_MAX);

impl MirrorInfo {
    /// `bytes` as a path: up to its first NUL; `None` without one or when
    /// empty.
    pub fn path_of(bytes: &[u8; MIRROR_PATH_MAX]) -> Option<&[u8]> {
        let end = bytes.iter().position(|&b| b == 0)?;
        (end > 0).then(|| &bytes[..end])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{BlockSlot, BLOCK_SLOT_SIZE, CTX_BLOCK_SLOTS, CTX_BLOCK_SLOT_BASE};
    use zerocopy::FromZeros;

    #[test]
    fn slots_follow_the_header_in_window_order_and_stay_word_aligned() {
        assert_eq!(mirror_slot_offset(0), MIRROR_HEADER_SIZE);
        assert_eq!(
            mirror_slot_offset(CTX_BLOCK_SLOT_BASE + 1),
            64 + 65 * core::mem::size_of::<BlockSlot>() as u64
        );
        assert_eq!(BLOCK_SLOT_SIZE % 8, 0, "64-bit atomics cover a slot");
        let last = mirror_slot_offset(CTX_BLOCK_SLOT_BASE + CTX_BLOCK_SLOTS);
        assert_eq!(last, 64 + 4160 * 592, "the file's size");
    }

    #[test]
    fn ring_descriptors_follow_the_ring_area_head_and_the_rings_word_was_reserved() {
        assert_eq!(offset::RINGS, 56, "the 1.9 header's reserved word");
        assert_eq!(mirror_ring_offset(1000, 0), 1032);
        assert_eq!(mirror_ring_offset(1000, 8), 1032 + 8 * 32);
        assert_eq!(
            (
                offset::RING_HEAD,
                offset::RING_CAP,
                offset::RING_WINDOW_BASE
            ),
            (0, 4, 8)
        );
        assert_eq!(offset::RING_SLOTS, 16);
        assert_eq!(
            crate::layout::STREAM_SLOT_SIZE % 8,
            0,
            "64-bit atomics cover a slot"
        );
    }

    #[test]
    fn a_path_ends_at_its_nul_and_an_unterminated_or_empty_one_is_refused() {
        let mut p = [0u8; MIRROR_PATH_MAX];
        assert_eq!(MirrorInfo::path_of(&p), None);
        p[..4].copy_from_slice(b"/m/x");
        assert_eq!(MirrorInfo::path_of(&p), Some(&b"/m/x"[..]));
        let full = [b'a'; MIRROR_PATH_MAX];
        assert_eq!(MirrorInfo::path_of(&full), None);
        let info = MirrorInfo::new_zeroed();
        assert_eq!(info.as_bytes().len(), 544);
    }
}
