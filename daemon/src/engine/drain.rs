//! Draining the per-partition stream rings: read the records between tail
//! and head from the window, turn them into [`DeltaSample`]s, advance
//! `PART_STREAM_TAIL`, and repeat until the ring is empty (or, with a
//! periodic drain, below its watermark).
//!
//! # Why a drain loops, and why there is a periodic drain too
//! `STREAM_WATERMARK` is edge-triggered: the device raises it at the first
//! commit that brings the ring to its watermark after the host last moved
//! the tail, and a tail write only re-arms it. A commit that lands while
//! the host drains (between its head read and its tail write) raises
//! nothing, so a drain that stopped at the head it first read would leave
//! that record stranded until some later commit — on a stopped step clock
//! or an idle partition, forever. So the tail write and a fresh read of
//! the head go in one atomic batch, and the drain goes on until they are
//! equal: the ring is then empty at an instant when the interrupt is
//! armed, and the next record that reaches the watermark raises it.
//!
//! Records below the watermark raise nothing by design; the periodic
//! drain ([`drain_rings`], every `[stream] drain_interval_ms`) picks
//! them up: one register batch reads every ring, one window read per ring
//! holding records, one batch writes every tail. So when there is
//! a periodic drain, a drain also stops once its tail write leaves the
//! ring below its watermark (re-armed): what is left is in the same place
//! as any record below the watermark, taken by the next watermark or the
//! periodic drain. Without that stop, a busy ring (RC0's gets a record
//! per trigger of every partition) took a round — a window read and a
//! register batch — for the one or two records committed during the
//! previous round, up to [`MAX_ROUNDS`] times per drain.
//!
//! # Reading the records from the commit mirror
//! When the device's commit mirror has a ring area (ABI 1.10,
//! `gpupm_uapi::mirror`, "The ring area"), the records `[tail, min(head,
//! mirror head))` are read from its shared mapping, with no system call
//! ([`Rings::follow`]); only the records the mirror has not published yet
//! (it is published after the request that made them) come through the
//! window. A mirror head behind the tail or more than a ring ahead of it,
//! another ring layout than the registers', or a generation that changed
//! during the read (a reset or a driver restart raced the drain) makes
//! that drain read the window, as without a mirror. Registers, the tail
//! writes and everything below are the same either way.
//!
//! Records the device lost to a full ring (`PART_STREAM_LOST`) are
//! attributed to the next record read, as `lost_before`: a ring only loses
//! records while it is full, i.e. after every record it still holds, and
//! `PART_STREAM_LOST` is read in the same batch as the head.

use std::sync::Arc;

use gpupm_client::mirror::{RingLayout, RingRead};
use gpupm_client::ops::{read32, read64, reg32, write32};
use gpupm_client::{DevError, DevNode};
use gpupm_uapi::events::MAX_EVENTS;
use gpupm_uapi::ioctl::RegOp;
use gpupm_uapi::layout::{
    envelope_flags, StreamRecord, StreamSlot, RECORD_MAGIC, STREAM_SLOT_SIZE,
};
use gpupm_uapi::regs::{self as r, MAX_PARTITION_SLOTS};
use zerocopy::{FromBytes, IntoBytes};

use crate::mirror::{DeviceMirror, Offer, OpenMirror};
use crate::store::Store;
use crate::view::DeltaSample;

/// Bytes of one ring slot.
const SLOT: usize = size_of::<StreamSlot>();
/// Slots read per window access (311 KiB): the records a drain finds at
/// the default watermark (512) in one read, since each access is a round
/// trip through the node (64 took eight).
const CHUNK: u32 = 512;
/// Most rounds of one drain. A ring that still is not empty after this
/// many is being filled as fast as it is read; the last tail write
/// re-armed its watermark, and the periodic drain comes back to it.
const MAX_ROUNDS: u32 = 16;

/// Per-ring drain state.
#[derive(Debug, Default)]
pub struct Rings {
    /// A periodic drain runs: a drain may stop with the ring below its
    /// watermark instead of empty.
    periodic: bool,
    last_lost: [Option<u64>; MAX_PARTITION_SLOTS as usize],
    pending_lost: [u64; MAX_PARTITION_SLOTS as usize],
    /// Window read buffer, kept across drains (the drain loop is hot).
    buf: Vec<u8>,
    /// The samples of one drain's read, kept across drains: a drain's
    /// samples (~60 KiB at the reference load) allocated afresh ten times
    /// a second per ring cost a malloc and free each.
    samples: Vec<DeltaSample>,
    /// The device's commit mirror, when it has a ring area.
    mirror: Option<Arc<OpenMirror>>,
    /// Records read from the mirror and through the window.
    mirrored: u64,
    windowed: u64,
    /// Drains whose mirror read was discarded or refused.
    fallbacks: u64,
}

/// Most samples [`Rings::samples`] keeps room for between drains (one
/// window read's worth): a drain after a long stall may read a whole ring.
const KEPT_SAMPLES: usize = CHUNK as usize;

impl Rings {
    /// Drain state for a daemon that also drains periodically (`periodic`)
    /// or only on interrupts.
    pub fn new(periodic: bool) -> Rings {
        Rings {
            periodic,
            ..Rings::default()
        }
    }

    /// Reads records from `source`'s ring area from now on, when the node
    /// offers a mirror that has one; returns whether it does.
    pub fn follow(&mut self, source: &DeviceMirror) -> bool {
        self.mirror = match source.offer() {
            Offer::Mirror(m) => return self.follow_mirror(m),
            Offer::None => None,
            Offer::Refused(e) => {
                tracing::warn!(
                    error = gpupm_fusemount::logging::one_line(e),
                    "the commit mirror is refused for the drains; they read the window"
                );
                None
            }
            Offer::Failed(e) => {
                tracing::debug!(error = %e, "asking for the commit mirror failed");
                None
            }
        };
        self.mirror.is_some()
    }

    /// Reads records from `mirror`'s ring area from now on (when it has
    /// one); returns whether it does.
    pub fn follow_mirror(&mut self, mirror: Arc<OpenMirror>) -> bool {
        self.mirror = mirror.reader.has_rings().then_some(mirror);
        self.mirror.is_some()
    }

    /// Records read from the mirror's ring area so far.
    pub fn mirrored_records(&self) -> u64 {
        self.mirrored
    }

    /// Records read through the window so far.
    pub fn window_records(&self) -> u64 {
        self.windowed
    }

    /// Reads of the mirror that fell back to the window so far.
    pub fn mirror_fallbacks(&self) -> u64 {
        self.fallbacks
    }

    /// Forgets what was seen (after a device reset).
    pub fn reset(&mut self) {
        self.last_lost = Default::default();
        self.pending_lost = Default::default();
    }

    /// Takes the growth of `PART_STREAM_LOST` of ring `i` into the loss
    /// carried to the next record.
    fn note_lost(&mut self, i: usize, lost: u64) {
        let before = self.last_lost[i].replace(lost).unwrap_or(lost);
        self.pending_lost[i] += lost.saturating_sub(before);
    }
}

/// Where a ring stands, as one batch read it.
#[derive(Clone, Copy, Debug)]
struct Position {
    head: u32,
    tail: u32,
    lost: u64,
}

/// A ring's position and layout, as one batch read it.
#[derive(Clone, Copy, Debug)]
struct RingState {
    at: Position,
    cap: u32,
    base: u64,
    watermark: u32,
}

/// Register reads per ring of [`RingState::ops`].
const STATE_OPS: usize = 6;
/// Register operations per ring of [`tail_ops`].
const TAIL_OPS: usize = 3;

impl RingState {
    /// The reads of ring `p`'s state, in one batch.
    fn ops(p: u32) -> [RegOp; STATE_OPS] {
        [
            read32(r::part(p, r::PART_STREAM_HEAD)),
            read32(r::part(p, r::PART_STREAM_TAIL)),
            read64(r::part(p, r::PART_STREAM_LOST)),
            read32(r::part(p, r::PART_STREAM_CAP)),
            read64(r::part(p, r::PART_STREAM_BASE)),
            read32(r::part(p, r::PART_STREAM_WATERMARK)),
        ]
    }

    /// The state the executed [`RingState::ops`] read.
    fn of(ops: &[RegOp]) -> RingState {
        RingState {
            at: Position {
                head: reg32(ops[0].value),
                tail: reg32(ops[1].value),
                lost: ops[2].value,
            },
            cap: reg32(ops[3].value),
            base: ops[4].value,
            watermark: reg32(ops[5].value),
        }
    }

    fn fill(&self, at: Position) -> u32 {
        at.head.wrapping_sub(at.tail).min(self.cap)
    }
}

/// Ring index of partition slot `p` (`None` past the device's slots).
fn ring_index(p: u32) -> Option<usize> {
    usize::try_from(p)
        .ok()
        .filter(|&i| i < MAX_PARTITION_SLOTS as usize)
}

impl Rings {
    /// Whether a drain may stop at `after`, the position its tail write
    /// left (`lost_before`: `PART_STREAM_LOST` before that write). Empty:
    /// always. Below the watermark, re-armed: when a periodic drain comes
    /// back, and the ring lost nothing meanwhile (a loss is attributed to
    /// the next record read, so it must come after the records it
    /// followed).
    fn may_stop(&self, ring: &RingState, lost_before: u64, after: Position) -> bool {
        let left = after.head.wrapping_sub(after.tail);
        left == 0 || (self.periodic && left < ring.watermark && after.lost == lost_before)
    }
}

/// Drains partition slot `p`'s ring until [`Rings::may_stop`] (or
/// [`MAX_ROUNDS`] rounds); returns the records consumed.
pub fn drain(dev: &DevNode, store: &Store, rings: &mut Rings, p: u32) -> Result<u64, DevError> {
    let Some(i) = ring_index(p) else {
        return Ok(0);
    };
    let mut ops = RingState::ops(p);
    dev.batch(&mut ops)?;
    let ring = RingState::of(&ops);
    if ring.cap == 0 {
        return Ok(0);
    }
    drain_from(dev, store, rings, (p, i), ring)
}

/// The rounds of a drain of ring `(p, i)` from `ring`'s position.
fn drain_from(
    dev: &DevNode,
    store: &Store,
    rings: &mut Rings,
    (p, i): (u32, usize),
    ring: RingState,
) -> Result<u64, DevError> {
    let mut at = ring.at;
    let first_fill = ring.fill(at);
    let mut consumed = 0u64;
    for _ in 0..MAX_ROUNDS {
        let fill = consume(dev, store, rings, i, &ring, at)?;
        consumed += u64::from(fill);
        if fill == 0 {
            break;
        }
        let lost_before = at.lost;
        at = advance_tail(dev, p, at.tail.wrapping_add(fill))?;
        if rings.may_stop(&ring, lost_before, at) {
            break;
        }
    }
    rings.note_lost(i, at.lost);
    store.record_drain(consumed, u64::from(first_fill));
    Ok(consumed)
}

/// Reads and records the records of ring `i` between `at`'s tail and
/// head, and takes `at`'s loss count; returns how many were read.
fn consume(
    dev: &DevNode,
    store: &Store,
    rings: &mut Rings,
    i: usize,
    ring: &RingState,
    at: Position,
) -> Result<u32, DevError> {
    let fill = ring.fill(at);
    let mut samples = std::mem::take(&mut rings.samples);
    let read = read_records(dev, rings, i, ring, (at.tail, fill), &mut samples);
    if read.is_ok() && !samples.is_empty() {
        store.record_samples(&samples);
    }
    samples.clear();
    samples.shrink_to(KEPT_SAMPLES);
    rings.samples = samples;
    store.record_mirror_reads(rings.mirrored, rings.fallbacks);
    read?;
    rings.note_lost(i, at.lost);
    Ok(fill)
}

/// Drains the rings of `partitions` together: one register batch reads
/// where every ring stands, each ring holding records is read (its window
/// reads), then one batch writes every tail, each with a fresh read of its
/// head (so each ring's tail write and head read stay atomic). A ring
/// that may not stop there ([`Rings::may_stop`]) goes on alone. Used for
/// the interrupts' drains and the periodic one alike: under load every
/// ring holds records at each periodic drain, which cost three round
/// trips per ring drained alone.
pub fn drain_rings(
    dev: &DevNode,
    store: &Store,
    rings: &mut Rings,
    partitions: &[u32],
) -> Result<u64, DevError> {
    let slots: Vec<(u32, usize)> = partitions
        .iter()
        .filter_map(|&p| Some((p, ring_index(p)?)))
        .collect();
    let mut consumed = 0;
    for group in slots.chunks(gpupm_uapi::ioctl::MAX_BATCH_OPS / STATE_OPS) {
        let mut ops: Vec<RegOp> = group.iter().flat_map(|&(p, _)| RingState::ops(p)).collect();
        dev.batch(&mut ops)?;
        let mut read = Vec::with_capacity(group.len());
        for (&slot, ops) in group.iter().zip(ops.chunks_exact(STATE_OPS)) {
            let ring = RingState::of(ops);
            if ring.cap == 0 {
                continue;
            }
            let fill = consume(dev, store, rings, slot.1, &ring, ring.at)?;
            consumed += u64::from(fill);
            if fill > 0 {
                read.push((slot, ring, fill));
            }
        }
        if read.is_empty() {
            continue;
        }
        let mut ops: Vec<RegOp> = read
            .iter()
            .flat_map(|&((p, _), ring, fill)| tail_ops(p, ring.at.tail.wrapping_add(fill)))
            .collect();
        dev.batch(&mut ops)?;
        for (&((p, i), ring, fill), ops) in read.iter().zip(ops.chunks_exact(TAIL_OPS)) {
            store.record_drain(u64::from(fill), u64::from(fill));
            let after = position_after_tail(ops, ring.at.tail.wrapping_add(fill));
            if rings.may_stop(&ring, ring.at.lost, after) {
                rings.note_lost(i, after.lost);
            } else {
                let rest = RingState { at: after, ..ring };
                consumed += drain_from(dev, store, rings, (p, i), rest)?;
            }
        }
    }
    Ok(consumed)
}

/// Writes ring `p`'s tail and, in the same atomic batch, reads where the
/// ring stands after it: nothing can be committed in between, so a head
/// equal to the new tail means the ring was empty with its watermark
/// re-armed.
fn tail_ops(p: u32, tail: u32) -> [RegOp; TAIL_OPS] {
    [
        write32(r::part(p, r::PART_STREAM_TAIL), tail),
        read32(r::part(p, r::PART_STREAM_HEAD)),
        read64(r::part(p, r::PART_STREAM_LOST)),
    ]
}

/// The position the executed [`tail_ops`] writing `tail` left.
fn position_after_tail(ops: &[RegOp], tail: u32) -> Position {
    Position {
        head: reg32(ops[1].value),
        tail,
        lost: ops[2].value,
    }
}

/// [`tail_ops`] as a batch of its own.
fn advance_tail(dev: &DevNode, p: u32, tail: u32) -> Result<Position, DevError> {
    let mut ops = tail_ops(p, tail);
    dev.batch(&mut ops)?;
    Ok(position_after_tail(&ops, tail))
}

/// Appends to `samples` the samples of the `fill` records of `ring` from
/// ring index `tail` on: those the mirror holds from it, the rest through
/// the window (`samples` is left partial on an error).
fn read_records(
    dev: &DevNode,
    rings: &mut Rings,
    i: usize,
    ring: &RingState,
    (tail, fill): (u32, u32),
    samples: &mut Vec<DeltaSample>,
) -> Result<(), DevError> {
    samples.reserve(fill as usize);
    let mirrored = read_mirrored(rings, i, ring, (tail, fill), samples);
    read_window(
        dev,
        rings,
        i,
        ring,
        (tail.wrapping_add(mirrored), fill - mirrored),
        samples,
    )
}

/// Appends the samples of the records from `tail` the mirror holds (at
/// most `fill`); returns how many it took (0 without a mirror, or when
/// the mirror cannot be used for this read: nothing is appended then).
fn read_mirrored(
    rings: &mut Rings,
    i: usize,
    ring: &RingState,
    (tail, fill): (u32, u32),
    samples: &mut Vec<DeltaSample>,
) -> u32 {
    let Rings {
        mirror: Some(mirror),
        pending_lost,
        ..
    } = rings
    else {
        return 0;
    };
    let (Ok(p), Some(lost)) = (u32::try_from(i), pending_lost.get_mut(i)) else {
        return 0;
    };
    let layout = RingLayout {
        cap: ring.cap,
        window_base: ring.base,
    };
    let (kept, lost_before) = (samples.len(), *lost);
    let read = mirror
        .reader
        .read_ring((p, layout), (tail, tail.wrapping_add(fill)), |slot| {
            push_sample(slot, lost, samples);
        });
    match read {
        RingRead::Taken(n) => {
            rings.mirrored += u64::from(n);
            n
        }
        RingRead::Unusable | RingRead::GenerationChanged => {
            samples.truncate(kept);
            *lost = lost_before;
            rings.fallbacks += 1;
            0
        }
    }
}

/// Appends the samples of the `fill` records of `ring` from ring index
/// `tail` on, read through the window.
fn read_window(
    dev: &DevNode,
    rings: &mut Rings,
    i: usize,
    ring: &RingState,
    (tail, fill): (u32, u32),
    samples: &mut Vec<DeltaSample>,
) -> Result<(), DevError> {
    let RingState { base, cap, .. } = *ring;
    if fill == 0 {
        return Ok(());
    }
    let mut buf = std::mem::take(&mut rings.buf);
    buf.resize(CHUNK as usize * SLOT, 0);
    // Not reached for a ring index the drains did not size.
    let mut no_ring = 0;
    let lost = rings.pending_lost.get_mut(i).unwrap_or(&mut no_ring);
    let mut done = 0u32;
    let res = loop {
        if done >= fill {
            break Ok(());
        }
        let idx = tail.wrapping_add(done) % cap;
        let n = (fill - done).min(cap - idx).min(CHUNK);
        let bytes = &mut buf[..n as usize * SLOT];
        if let Err(e) = dev.window(base + u64::from(idx) * STREAM_SLOT_SIZE, bytes) {
            break Err(e);
        }
        for chunk in bytes.chunks_exact(SLOT) {
            let Ok(slot) = StreamSlot::read_from_bytes(chunk) else {
                continue;
            };
            push_sample(&slot, lost, samples);
        }
        done += n;
    };
    rings.windowed += u64::from(done);
    rings.buf = buf;
    res
}

/// Appends the sample of one published slot to `samples` (nothing for an
/// empty or corrupt slot), charged with the `lost` records lost before it
/// (which it takes). Built straight into the vector: a sample is ~600
/// bytes and the drains append thousands a second, so building it
/// elsewhere and moving it in cost copies that showed in profiles.
fn push_sample(slot: &StreamSlot, lost: &mut u64, samples: &mut Vec<DeltaSample>) {
    if slot.envelope.flags & envelope_flags::VALID == 0 {
        return;
    }
    if slot.envelope.flags & envelope_flags::ENCRYPTED != 0 {
        // Ciphertext: only the envelope's VM is known; the context,
        // sequence and deltas are inside.
        samples.push(DeltaSample {
            seq: 0,
            vm: slot.envelope.vm,
            ctx: 0,
            start_cycle: 0,
            end_cycle: 0,
            flags: 0,
            lost_before: std::mem::take(lost),
            deltas: [0; MAX_EVENTS],
            sealed: Some(slot.as_bytes().to_vec()),
        });
        return;
    }
    let Ok(rec) = StreamRecord::read_from_bytes(&slot.payload) else {
        return;
    };
    if rec.magic != RECORD_MAGIC {
        return;
    }
    samples.push(DeltaSample {
        seq: rec.seq,
        vm: rec.vm,
        ctx: rec.ctx,
        start_cycle: rec.start_cycle,
        end_cycle: rec.end_cycle,
        flags: rec.flags,
        lost_before: std::mem::take(lost),
        deltas: rec.deltas,
        sealed: None,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(watermark: u32) -> RingState {
        RingState {
            at: Position {
                head: 600,
                tail: 0,
                lost: 7,
            },
            cap: 1024,
            base: 0,
            watermark,
        }
    }

    fn after(head: u32, lost: u64) -> Position {
        Position {
            head,
            tail: 600,
            lost,
        }
    }

    #[test]
    fn a_drain_stops_below_the_watermark_only_with_a_periodic_drain_and_no_loss() {
        let (periodic, interrupts_only) = (Rings::new(true), Rings::new(false));
        let r = ring(512);
        for rings in [&periodic, &interrupts_only] {
            assert!(rings.may_stop(&r, 7, after(600, 7)), "empty");
            assert!(rings.may_stop(&r, 7, after(600, 9)), "empty after a loss");
            assert!(
                !rings.may_stop(&r, 7, after(600 + 512, 7)),
                "at the watermark"
            );
        }
        assert!(periodic.may_stop(&r, 7, after(600 + 511, 7)));
        assert!(!interrupts_only.may_stop(&r, 7, after(601, 7)));
        assert!(
            !periodic.may_stop(&r, 7, after(601, 8)),
            "records lost meanwhile"
        );
        // Head indices wrap modulo 2^32.
        let wrapped = Position {
            head: 5,
            tail: u32::MAX - 4,
            lost: 7,
        };
        assert!(periodic.may_stop(&r, 7, wrapped));
        assert!(!periodic.may_stop(&ring(10), 7, wrapped));
    }
}
