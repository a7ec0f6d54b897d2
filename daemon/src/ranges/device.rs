//! Register batches of the range plane: arming and disarming a register,
//! reading a partition's registers with its switch state, and draining its
//! record ring.

use gpupm_client::ops::{read32, read64, reg32, write32};
use gpupm_client::{DevError, DevNode};
use gpupm_uapi::layout::envelope_flags;
use gpupm_uapi::ranges::{
    range_ctrl, range_reg, range_span_offset, rring, RangeRecord, RangeSlot, RANGES_PER_PARTITION,
    RANGE_COUNT, RANGE_CTRL, RANGE_END, RANGE_ENTRIES, RANGE_RECORD_MAGIC, RANGE_START,
    RANGE_THRESHOLD, RRING_CAP, RRING_HEAD, RRING_LOST, RRING_MAX_RECORDS, RRING_TAIL,
};
use gpupm_uapi::regs::{self as r, hs_state, part_status};
use zerocopy::FromBytes;

use super::attrib::{Counts, PartState, Snapshot};

/// What one register is programmed with (`RANGE_CTRL` with `ENABLE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Programming {
    /// `RANGE_CTRL`.
    pub ctrl: u32,
    /// `RANGE_START`.
    pub start: u32,
    /// `RANGE_END`.
    pub end: u32,
    /// `RANGE_THRESHOLD`.
    pub threshold: u32,
}

impl Programming {
    /// Whether the register writes crossing records.
    pub fn has_threshold(&self) -> bool {
        self.ctrl & (range_ctrl::COUNT_IRQ | range_ctrl::LATENCY_IRQ) != 0
    }
}

/// Capacity of every partition's record ring.
pub const RING_RECORDS: u32 = RRING_MAX_RECORDS;

/// Arms register `i` of partition `p` and reads the partition's state, in
/// one batch (refused as a whole when the device refuses the
/// programming).
pub fn arm(dev: &DevNode, p: u32, i: u32, prog: &Programming) -> Result<PartState, DevError> {
    let mut ops = vec![
        write32(range_reg(p, i, RANGE_START), prog.start),
        write32(range_reg(p, i, RANGE_END), prog.end),
        write32(range_reg(p, i, RANGE_THRESHOLD), prog.threshold),
        write32(range_reg(p, i, RANGE_CTRL), prog.ctrl),
    ];
    ops.extend(part_reads(p));
    dev.batch(&mut ops)?;
    Ok(part_state(&ops[4..7]))
}

/// Disarms register `i` of partition `p`.
pub fn disarm(dev: &DevNode, p: u32, i: u32) -> Result<(), DevError> {
    dev.batch(&mut [write32(range_reg(p, i, RANGE_CTRL), 0)])
}

/// At start-up: disarms every range of partition `p` (a previous daemon's
/// ranges are not known to this one) and gives the partition its ring.
pub fn reset_partition(dev: &DevNode, p: u32) -> Result<(), DevError> {
    let mut ops: Vec<_> = (0..RANGES_PER_PARTITION)
        .map(|i| write32(range_reg(p, i, RANGE_CTRL), 0))
        .collect();
    dev.batch(&mut ops)?;
    // The ring may be resized only once no threshold is armed.
    dev.batch(&mut [write32(rring(p, RRING_CAP), RING_RECORDS)])
}

fn part_reads(p: u32) -> [gpupm_uapi::ioctl::RegOp; 3] {
    [
        read32(r::part(p, r::PART_STATUS)),
        read32(r::part(p, r::PART_CUR_CTX)),
        read64(r::part(p, r::PART_SWITCHES)),
    ]
}

fn part_state(ops: &[gpupm_uapi::ioctl::RegOp]) -> PartState {
    let state = reg32(ops[0].value) & part_status::STATE_MASK;
    PartState {
        paused: state != hs_state::IDLE && state != hs_state::REQUESTED,
        ctx: reg32(ops[1].value),
        switches: ops[2].value,
    }
}

/// Reads registers `regs` of partition `p` with the partition's state.
pub fn snapshot(dev: &DevNode, p: u32, regs: &[u32]) -> Result<Vec<Snapshot>, DevError> {
    let mut ops = part_reads(p).to_vec();
    for &i in regs {
        ops.push(read64(range_reg(p, i, RANGE_ENTRIES)));
        ops.push(read64(range_reg(p, i, RANGE_COUNT)));
    }
    dev.batch(&mut ops)?;
    let part = part_state(&ops[..3]);
    Ok(ops[3..]
        .chunks(2)
        .map(|c| Snapshot {
            part,
            counts: Counts {
                entries: c[0].value,
                count: c[1].value,
            },
        })
        .collect())
}

/// One drained slot.
#[derive(Debug)]
pub enum Drained {
    /// A plaintext record.
    Plain(Box<RangeRecord>),
    /// A confidential VM's sealed record (its VM).
    Sealed(u32),
    /// Bytes that are no record (counted, never trusted).
    Garbage,
}

/// Drains partition `p`'s ring from `tail`: the records and the new tail
/// (`RRING_LOST` is returned too, for the metrics).
pub fn drain(
    dev: &DevNode,
    p: u32,
    scratch: &mut Vec<u8>,
) -> Result<(Vec<Drained>, u32), DevError> {
    let mut ops = [
        read32(rring(p, RRING_HEAD)),
        read32(rring(p, RRING_TAIL)),
        read32(rring(p, RRING_LOST)),
    ];
    dev.batch(&mut ops)?;
    let (head, tail, lost) = (
        reg32(ops[0].value),
        reg32(ops[1].value),
        reg32(ops[2].value),
    );
    let fill = head.wrapping_sub(tail).min(RING_RECORDS);
    let slot = size_of::<RangeSlot>();
    let mut out = Vec::with_capacity(fill as usize);
    let mut done = 0u32;
    while done < fill {
        let idx = tail.wrapping_add(done) % RING_RECORDS;
        let n = (fill - done).min(RING_RECORDS - idx);
        scratch.resize(n as usize * slot, 0);
        dev.window(range_span_offset(p) + u64::from(idx) * slot as u64, scratch)?;
        out.extend(scratch.chunks_exact(slot).map(parse));
        done += n;
    }
    if fill > 0 {
        dev.batch(&mut [write32(rring(p, RRING_TAIL), tail.wrapping_add(fill))])?;
    }
    Ok((out, lost))
}

fn parse(bytes: &[u8]) -> Drained {
    let Ok(s) = RangeSlot::read_from_bytes(bytes) else {
        return Drained::Garbage;
    };
    if s.envelope.flags & envelope_flags::ENCRYPTED != 0 {
        return Drained::Sealed(s.envelope.vm);
    }
    match RangeRecord::read_from_bytes(&s.payload[..]) {
        Ok(rec) if rec.magic == RANGE_RECORD_MAGIC => Drained::Plain(Box::new(rec)),
        _ => Drained::Garbage,
    }
}
