//! The mirror's ring area (ABI 1.10, `gpupm_uapi::mirror`, "The ring
//! area"): where it lies in the file, the writer's copies of stream
//! records and head publications, and the reader's reads of records
//! under the generation check.

use std::sync::atomic::{fence, Ordering};

use gpupm_uapi::layout::{StreamSlot, STREAM_SLOT_SIZE};
use gpupm_uapi::mirror::{mirror_ring_offset, offset, MIRROR_RINGS_HEADER_SIZE, MIRROR_RING_SIZE};
use zerocopy::{FromZeros, IntoBytes};

use crate::shm::Shared;

/// Bytes of one stream slot.
const SLOT_BYTES: usize = size_of::<StreamSlot>();

/// Most rings a ring area may describe (a reader refuses more).
pub const MAX_MIRROR_RINGS: u32 = 64;

/// One ring as the device lays it out (`PART_STREAM_CAP`,
/// `PART_STREAM_BASE`); a `cap` of 0 is not mirrored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingLayout {
    /// Capacity in records.
    pub cap: u32,
    /// Window offset of the ring's first slot.
    pub window_base: u64,
}

/// A ring of the file: its layout and where its slots are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct MirroredRing {
    pub(super) layout: RingLayout,
    /// File offset of ring index 0's slot.
    pub(super) slots: u64,
}

/// The ring area of one file: where it starts and its rings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct RingArea {
    /// File offset of the area ([`gpupm_uapi::mirror::MirrorHeader::rings`]).
    pub(super) at: u64,
    pub(super) rings: Vec<MirroredRing>,
    /// Bytes from `at` to the end of the last ring's slots.
    pub(super) size: u64,
}

const fn align64(v: u64) -> u64 {
    v.div_ceil(64) * 64
}

impl RingArea {
    /// The area for `layouts`, starting at the first 64-byte boundary at
    /// or after `after`; each ring's slots 64-byte aligned.
    pub(super) fn plan(after: u64, layouts: &[RingLayout]) -> RingArea {
        let at = align64(after);
        let count = layouts.len() as u64;
        let mut next = align64(mirror_ring_offset(at, 0) + count * MIRROR_RING_SIZE);
        let rings = layouts
            .iter()
            .map(|&layout| {
                let slots = next;
                next = align64(slots + u64::from(layout.cap) * STREAM_SLOT_SIZE);
                MirroredRing { layout, slots }
            })
            .collect();
        RingArea {
            at,
            rings,
            size: next - at,
        }
    }

    /// Writes the area's header and descriptors (heads 0) into a fresh
    /// mapping, and the area's offset into the file header.
    pub(super) fn write_layout(&self, map: &Shared) {
        let store64 = |at: u64, v: u64| {
            if let Some(w) = usize::try_from(at).ok().and_then(|a| map.u64_at(a)) {
                w.store(v, Ordering::Relaxed);
            }
        };
        let store32 = |at: u64, v: u32| {
            if let Some(w) = usize::try_from(at).ok().and_then(|a| map.u32_at(a)) {
                w.store(v, Ordering::Relaxed);
            }
        };
        let count = u32::try_from(self.rings.len()).unwrap_or(u32::MAX);
        store32(self.at, count);
        store32(
            self.at + 4,
            u32::try_from(MIRROR_RING_SIZE).unwrap_or(u32::MAX),
        );
        store32(
            self.at + 8,
            u32::try_from(STREAM_SLOT_SIZE).unwrap_or(u32::MAX),
        );
        store64(self.at + 16, self.size);
        for (r, ring) in (0u32..).zip(&self.rings) {
            let d = mirror_ring_offset(self.at, r);
            store32(d + offset::RING_CAP as u64, ring.layout.cap);
            store64(d + offset::RING_WINDOW_BASE as u64, ring.layout.window_base);
            store64(d + offset::RING_SLOTS as u64, ring.slots);
        }
        store64(offset::RINGS as u64, self.at);
    }

    /// The area a mapping of `len` bytes describes: `None` for no area
    /// (`rings == 0`); an error naming what is wrong for one that does not
    /// fit the mapping or this layout.
    pub(super) fn read_layout(map: &Shared, len: u64) -> Result<Option<RingArea>, String> {
        let load64 = |at: u64| {
            usize::try_from(at)
                .ok()
                .and_then(|a| map.u64_at(a))
                .map(|w| w.load(Ordering::Relaxed))
        };
        let load32 = |at: u64| {
            usize::try_from(at)
                .ok()
                .and_then(|a| map.u32_at(a))
                .map(|w| w.load(Ordering::Relaxed))
        };
        let at = load64(offset::RINGS as u64).unwrap_or(0);
        if at == 0 {
            return Ok(None);
        }
        let bad = |what: &str| format!("ring area at {at}: {what}");
        let (Some(count), Some(ring_size), Some(slot_size), Some(size)) =
            (load32(at), load32(at + 4), load32(at + 8), load64(at + 16))
        else {
            return Err(bad("beyond the file"));
        };
        if u64::from(ring_size) != MIRROR_RING_SIZE
            || u64::from(slot_size) != STREAM_SLOT_SIZE
            || count > MAX_MIRROR_RINGS
            || at.checked_add(size).is_none_or(|end| end > len)
            || at % 64 != 0
        {
            return Err(bad(&format!(
                "{count} rings of {ring_size}-byte descriptors, {slot_size}-byte slots, \
                 {size} bytes"
            )));
        }
        let end = at + size;
        let mut rings = Vec::with_capacity(count as usize);
        for r in 0..count {
            let d = mirror_ring_offset(at, r);
            let (Some(cap), Some(window_base), Some(slots)) = (
                load32(d + offset::RING_CAP as u64),
                load64(d + offset::RING_WINDOW_BASE as u64),
                load64(d + offset::RING_SLOTS as u64),
            ) else {
                return Err(bad("descriptors beyond the file"));
            };
            let fits = u64::from(cap)
                .checked_mul(STREAM_SLOT_SIZE)
                .and_then(|n| slots.checked_add(n))
                .is_some_and(|e| e <= end);
            if !fits || slots % 8 != 0 || slots < mirror_ring_offset(at, count) {
                return Err(bad(&format!("ring {r}'s {cap} slots at {slots}")));
            }
            rings.push(MirroredRing {
                layout: RingLayout { cap, window_base },
                slots,
            });
        }
        if mirror_ring_offset(at, count) > end || size < MIRROR_RINGS_HEADER_SIZE {
            return Err(bad("descriptors beyond the area"));
        }
        Ok(Some(RingArea { at, rings, size }))
    }

    /// File offset of ring `r`'s head word.
    fn head_at(&self, r: u32) -> Option<usize> {
        let d = mirror_ring_offset(self.at, r) + offset::RING_HEAD as u64;
        usize::try_from(d).ok()
    }

    /// File offset of the slot of ring index `index` of ring `r`.
    fn slot_at(&self, r: u32, index: u32) -> Option<(usize, usize)> {
        let ring = self.rings.get(usize::try_from(r).ok()?)?;
        if ring.layout.cap == 0 {
            return None;
        }
        let at = ring.slots + u64::from(index % ring.layout.cap) * STREAM_SLOT_SIZE;
        Some((usize::try_from(at).ok()?, SLOT_BYTES / 8))
    }

    /// Copies `records` (whole stream slots) into ring `r` from ring index
    /// `first` on, wrapping at its capacity (relaxed 64-bit stores).
    pub(super) fn store_records(&self, map: &Shared, r: u32, first: u32, records: &[u8]) {
        for (k, record) in (0u32..).zip(records.chunks_exact(SLOT_BYTES)) {
            let words = self
                .slot_at(r, first.wrapping_add(k))
                .and_then(|(at, n)| map.u64s_at(at, n));
            let Some(words) = words else { return };
            for (w, bytes) in words.iter().zip(record.chunks_exact(8)) {
                let mut v = [0u8; 8];
                v.copy_from_slice(bytes);
                w.store(u64::from_le_bytes(v), Ordering::Relaxed);
            }
        }
    }

    /// Publishes ring `r`'s head (release: after the slots it covers).
    pub(super) fn store_head(&self, map: &Shared, r: u32, head: u32) {
        if let Some(w) = self.head_at(r).and_then(|at| map.u32_at(at)) {
            w.store(head, Ordering::Release);
        }
    }

    /// Ring `r`'s published head (acquire: the slots below it are loaded
    /// after it).
    pub(super) fn load_head(&self, map: &Shared, r: u32) -> Option<u32> {
        if r as usize >= self.rings.len() {
            return None;
        }
        let w = self.head_at(r).and_then(|at| map.u32_at(at))?;
        Some(w.load(Ordering::Acquire))
    }

    /// Ring `r`'s slot of ring index `index`, loaded word by word
    /// (relaxed 64-bit loads: the device may be writing other slots of
    /// the same mapping, and on a reset racing the read even this one, so
    /// the slot is never viewed in place as plain memory).
    pub(super) fn load_slot(&self, map: &Shared, r: u32, index: u32, out: &mut StreamSlot) {
        let words = self
            .slot_at(r, index)
            .and_then(|(at, n)| map.u64s_at(at, n));
        let out = out.as_mut_bytes();
        let Some(words) = words else {
            // Not reached: `read_layout` checked every ring's slots.
            out.fill(0);
            return;
        };
        for (d, w) in out.chunks_exact_mut(8).zip(words) {
            d.copy_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
        }
    }
}

/// How many records `[tail, tail + n)` a drain may take from a ring whose
/// mirror head is `mirror_head`, the device head `device_head` and
/// capacity `cap`: `None` when the mirror's head is behind the tail or
/// more than `cap` ahead of it (a reset or a restart raced the read: the
/// window is read instead), else the records up to the nearer head.
pub fn mirror_span(tail: u32, device_head: u32, mirror_head: u32, cap: u32) -> Option<u32> {
    let ahead = mirror_head.wrapping_sub(tail);
    if ahead > cap {
        return None;
    }
    Some(ahead.min(device_head.wrapping_sub(tail).min(cap)))
}

/// What [`super::MirrorReader::read_ring`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingRead {
    /// The first `n` records from the tail were handed over, all of one
    /// generation.
    Taken(u32),
    /// Nothing can be read from the mirror for this ring now: no ring
    /// area, another layout than the device's, or a head that
    /// [`mirror_span`] refuses.
    Unusable,
    /// The generation changed while reading: what was handed over must be
    /// discarded.
    GenerationChanged,
}

/// Reads through `area` of `map`: the records of ring `r` from `tail` up
/// to `device_head` that the mirror holds, each handed to `each`.
pub(super) fn read_ring(
    map: &Shared,
    area: &RingArea,
    (r, layout): (u32, RingLayout),
    (tail, device_head): (u32, u32),
    mut each: impl FnMut(&StreamSlot),
) -> RingRead {
    let mirrored = usize::try_from(r).ok().and_then(|i| area.rings.get(i));
    if mirrored.is_none_or(|m| m.layout != layout || layout.cap == 0) {
        return RingRead::Unusable;
    }
    let generation = |o| map.u64_at(offset::GENERATION).map_or(0, |w| w.load(o));
    let before = generation(Ordering::Acquire);
    let Some(head) = area.load_head(map, r) else {
        return RingRead::Unusable;
    };
    let Some(n) = mirror_span(tail, device_head, head, layout.cap) else {
        return RingRead::Unusable;
    };
    let mut slot = StreamSlot::new_zeroed();
    for k in 0..n {
        area.load_slot(map, r, tail.wrapping_add(k), &mut slot);
        each(&slot);
    }
    fence(Ordering::Acquire);
    if generation(Ordering::Relaxed) != before {
        return RingRead::GenerationChanged;
    }
    RingRead::Taken(n)
}
