//! Draining the per-partition stream rings: read the records between tail
//! and head from the window, turn them into [`DeltaSample`]s, advance
//! `PART_STREAM_TAIL`, and repeat until the ring is empty.
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
//! drain ([`drain_nonempty`], every `[stream] drain_interval_ms`) picks
//! them up, one register batch when every ring is empty.
//!
//! Records the device lost to a full ring (`PART_STREAM_LOST`) are
//! attributed to the next record read, as `lost_before`: a ring only loses
//! records while it is full, i.e. after every record it still holds, and
//! `PART_STREAM_LOST` is read in the same batch as the head.

use gpupm_client::ops::{read32, read64, reg32, write32};
use gpupm_client::{DevError, DevNode};
use gpupm_uapi::events::MAX_EVENTS;
use gpupm_uapi::ioctl::RegOp;
use gpupm_uapi::layout::{
    envelope_flags, StreamRecord, StreamSlot, RECORD_MAGIC, STREAM_SLOT_SIZE,
};
use gpupm_uapi::regs::{self as r, MAX_PARTITION_SLOTS};
use zerocopy::{FromBytes, IntoBytes};

use crate::store::Store;
use crate::view::DeltaSample;

/// Slots read per window access.
const CHUNK: u32 = 64;
/// Bytes of one ring slot.
const SLOT: usize = size_of::<StreamSlot>();
/// Most rounds of one drain. A ring that still is not empty after this
/// many is being filled as fast as it is read; the last tail write
/// re-armed its watermark, and the periodic drain comes back to it.
const MAX_ROUNDS: u32 = 16;

/// Per-ring drain state.
#[derive(Debug, Default)]
pub struct Rings {
    last_lost: [Option<u64>; MAX_PARTITION_SLOTS as usize],
    pending_lost: [u64; MAX_PARTITION_SLOTS as usize],
    /// Window read buffer, kept across drains (the drain loop is hot).
    buf: Vec<u8>,
}

impl Rings {
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

/// Drains partition slot `p`'s ring until it is empty (or
/// [`MAX_ROUNDS`] rounds); returns the records consumed.
pub fn drain(dev: &DevNode, store: &Store, rings: &mut Rings, p: u32) -> Result<u64, DevError> {
    let Some(i) = usize::try_from(p)
        .ok()
        .filter(|&i| i < MAX_PARTITION_SLOTS as usize)
    else {
        return Ok(0);
    };
    let mut regs = [
        read32(r::part(p, r::PART_STREAM_HEAD)),
        read32(r::part(p, r::PART_STREAM_TAIL)),
        read64(r::part(p, r::PART_STREAM_LOST)),
        read32(r::part(p, r::PART_STREAM_CAP)),
        read64(r::part(p, r::PART_STREAM_BASE)),
    ];
    dev.batch(&mut regs)?;
    let (cap, base) = (reg32(regs[3].value), regs[4].value);
    if cap == 0 {
        return Ok(0);
    }
    let mut at = Position {
        head: reg32(regs[0].value),
        tail: reg32(regs[1].value),
        lost: regs[2].value,
    };
    let first_fill = at.head.wrapping_sub(at.tail).min(cap);
    let mut consumed = 0u64;
    for _ in 0..MAX_ROUNDS {
        let fill = at.head.wrapping_sub(at.tail).min(cap);
        let samples = read_records(dev, rings, i, base, cap, at.tail, fill)?;
        if !samples.is_empty() {
            store.record_samples(samples);
        }
        rings.note_lost(i, at.lost);
        consumed += u64::from(fill);
        if fill == 0 {
            break;
        }
        at = advance_tail(dev, p, at.tail.wrapping_add(fill))?;
        if at.head == at.tail {
            break;
        }
    }
    rings.note_lost(i, at.lost);
    store.record_drain(consumed, u64::from(first_fill));
    Ok(consumed)
}

/// Writes the tail and, in the same atomic batch, reads where the ring
/// stands after it: nothing can be committed in between, so a head equal
/// to the new tail means the ring was empty with its watermark re-armed.
fn advance_tail(dev: &DevNode, p: u32, tail: u32) -> Result<Position, DevError> {
    let mut ops = [
        write32(r::part(p, r::PART_STREAM_TAIL), tail),
        read32(r::part(p, r::PART_STREAM_HEAD)),
        read64(r::part(p, r::PART_STREAM_LOST)),
    ];
    dev.batch(&mut ops)?;
    Ok(Position {
        head: reg32(ops[1].value),
        tail,
        lost: ops[2].value,
    })
}

/// The samples of the `fill` records from ring index `tail` on.
fn read_records(
    dev: &DevNode,
    rings: &mut Rings,
    i: usize,
    base: u64,
    cap: u32,
    tail: u32,
    fill: u32,
) -> Result<Vec<DeltaSample>, DevError> {
    let mut samples = Vec::with_capacity(fill as usize);
    let mut buf = std::mem::take(&mut rings.buf);
    buf.resize(CHUNK as usize * SLOT, 0);
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
            if let Some(mut s) = sample(&slot) {
                s.lost_before = std::mem::take(&mut rings.pending_lost[i]);
                samples.push(s);
            }
        }
        done += n;
    };
    rings.buf = buf;
    res.map(|()| samples)
}

/// Drains every ring of `partitions` that holds records, found with one
/// register batch (the periodic backstop for records below the watermark).
pub fn drain_nonempty(
    dev: &DevNode,
    store: &Store,
    rings: &mut Rings,
    partitions: &[u32],
) -> Result<u64, DevError> {
    let mut consumed = 0;
    // Two reads per ring; a batch holds 64 ops, every slot fits in one.
    for group in partitions.chunks(gpupm_uapi::ioctl::MAX_BATCH_OPS / 2) {
        let mut ops: Vec<RegOp> = group
            .iter()
            .flat_map(|&p| {
                [
                    read32(r::part(p, r::PART_STREAM_HEAD)),
                    read32(r::part(p, r::PART_STREAM_TAIL)),
                ]
            })
            .collect();
        dev.batch(&mut ops)?;
        for (&p, pos) in group.iter().zip(ops.chunks_exact(2)) {
            if pos[0].value != pos[1].value {
                consumed += drain(dev, store, rings, p)?;
            }
        }
    }
    Ok(consumed)
}

/// The sample of one published slot (`None` for an empty or corrupt slot).
fn sample(slot: &StreamSlot) -> Option<DeltaSample> {
    if slot.envelope.flags & envelope_flags::VALID == 0 {
        return None;
    }
    if slot.envelope.flags & envelope_flags::ENCRYPTED != 0 {
        // Ciphertext: only the envelope's VM is known; the context,
        // sequence and deltas are inside.
        return Some(DeltaSample {
            seq: 0,
            vm: slot.envelope.vm,
            ctx: 0,
            start_cycle: 0,
            end_cycle: 0,
            flags: 0,
            lost_before: 0,
            deltas: [0; MAX_EVENTS],
            sealed: Some(slot.as_bytes().to_vec()),
        });
    }
    let rec = StreamRecord::read_from_bytes(&slot.payload).ok()?;
    if rec.magic != RECORD_MAGIC {
        return None;
    }
    Some(DeltaSample {
        seq: rec.seq,
        vm: rec.vm,
        ctx: rec.ctx,
        start_cycle: rec.start_cycle,
        end_cycle: rec.end_cycle,
        flags: rec.flags,
        lost_before: 0,
        deltas: rec.deltas,
        sealed: None,
    })
}
