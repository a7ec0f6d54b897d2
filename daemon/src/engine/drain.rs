//! Draining the per-partition stream rings: read the records between tail
//! and head from the window, turn them into [`DeltaSample`]s, advance
//! `PART_STREAM_TAIL`. Records the device lost to a full ring
//! (`PART_STREAM_LOST`) are attributed to the next record read, as
//! `lost_before`: a ring only loses records while it is full, i.e. after
//! every record it still holds.

use gpupm_client::ops::{read32, read64, reg32, write32};
use gpupm_client::{DevError, DevNode};
use gpupm_uapi::events::MAX_EVENTS;
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
}

/// Drains partition slot `p`'s ring; returns the records consumed.
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
        read32(r::part(p, r::PART_STREAM_CAP)),
        read64(r::part(p, r::PART_STREAM_LOST)),
        read64(r::part(p, r::PART_STREAM_BASE)),
    ];
    dev.batch(&mut regs)?;
    let (head, tail, cap) = (
        reg32(regs[0].value),
        reg32(regs[1].value),
        reg32(regs[2].value),
    );
    let (lost, base) = (regs[3].value, regs[4].value);
    if cap == 0 {
        return Ok(0);
    }
    let fill = head.wrapping_sub(tail).min(cap);
    let mut samples = Vec::with_capacity(fill as usize);
    let mut buf = std::mem::take(&mut rings.buf);
    buf.resize(CHUNK as usize * SLOT, 0);
    let mut done = 0u32;
    while done < fill {
        let idx = tail.wrapping_add(done) % cap;
        let n = (fill - done).min(cap - idx).min(CHUNK);
        let bytes = &mut buf[..n as usize * SLOT];
        dev.window(base + u64::from(idx) * STREAM_SLOT_SIZE, bytes)?;
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
    }
    if fill > 0 {
        dev.batch(&mut [write32(
            r::part(p, r::PART_STREAM_TAIL),
            tail.wrapping_add(fill),
        )])?;
    }
    rings.buf = buf;
    let before = rings.last_lost[i].replace(lost).unwrap_or(lost);
    rings.pending_lost[i] += lost.saturating_sub(before);
    store.record_drain(u64::from(fill), u64::from(fill));
    store.record_samples(samples);
    Ok(u64::from(fill))
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
