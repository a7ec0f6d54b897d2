//! The BAR0 register space as a whole, across the units that each declare
//! their own blocks (`regs` for the original units, `sampling`, `ri` and
//! `ranges` for the later ones): the width of any register, and the
//! blocks of one unit not running into the next. It depends on every unit
//! and none depends on it, so the units need not know each other.

use crate::regs::{
    CCU_BASE, CCU_RECORDS, CCU_STRIDE, CCU_WRAPS, CLOCK_LAG, CTX_BASE, CTX_BLOCK,
    CTX_CREATED_CYCLE, CTX_STRIDE, CYCLE, INTR_SEQ, MAX_CCUS, MAX_CONTEXTS, MAX_PARTITION_SLOTS,
    MAX_VMS, MBOX_DATA, OOB_MBOX_DATA, PART_BASE, PART_CCU_ACKED, PART_CCU_ASSIGNED,
    PART_COMMIT_SEQ, PART_FALLBACKS, PART_STREAM_BASE, PART_STREAM_LOST, PART_STRIDE,
    PART_SWITCHES, PART_SWITCH_REQ_CYCLE, RECORDS_ROUTED, TRIG_COUNT_COMMAND, TRIG_COUNT_PERIODIC,
    TRIG_COUNT_THRESHOLD, VM_BASE, VM_BLOCK, VM_KEY_SESSION, VM_STRIDE,
};
use crate::{ranges, ri, sampling};

const _: () = assert!(PART_BASE + MAX_PARTITION_SLOTS as u64 * PART_STRIDE <= sampling::SAMP_BASE);

/// Whether `offset` names a 64-bit register (readable with one 8-byte access).
pub fn is_64bit(offset: u64) -> bool {
    const GLOBAL: [u64; 8] = [
        CYCLE,
        CCU_WRAPS,
        CLOCK_LAG,
        TRIG_COUNT_PERIODIC,
        TRIG_COUNT_THRESHOLD,
        TRIG_COUNT_COMMAND,
        RECORDS_ROUTED,
        INTR_SEQ,
    ];
    const PART: [u64; 8] = [
        PART_CCU_ASSIGNED,
        PART_CCU_ACKED,
        PART_FALLBACKS,
        PART_SWITCHES,
        PART_COMMIT_SEQ,
        PART_STREAM_LOST,
        PART_STREAM_BASE,
        PART_SWITCH_REQ_CYCLE,
    ];
    if GLOBAL.contains(&offset) || offset == MBOX_DATA || offset == OOB_MBOX_DATA {
        return true;
    }
    if ri::is_64bit(offset) {
        return true;
    }
    let in_array = |base: u64, stride: u64, count: u32| {
        (base..base + stride * count as u64)
            .contains(&offset)
            .then(|| (offset - base) % stride)
    };
    if let Some(r) = in_array(PART_BASE, PART_STRIDE, MAX_PARTITION_SLOTS) {
        return PART.contains(&r);
    }
    if let Some(r) = in_array(
        sampling::SAMP_BASE,
        sampling::SAMP_STRIDE,
        MAX_PARTITION_SLOTS,
    ) {
        return sampling::is_64bit_in_block(r);
    }
    if let Some(r) = in_array(
        ranges::RANGE_BASE,
        ranges::RANGE_STRIDE,
        MAX_PARTITION_SLOTS,
    ) {
        return ranges::is_64bit_in_block(r);
    }
    if let Some(r) = in_array(CCU_BASE, CCU_STRIDE, MAX_CCUS) {
        return r == CCU_RECORDS;
    }
    if let Some(r) = in_array(VM_BASE, VM_STRIDE, MAX_VMS) {
        return r == VM_BLOCK || r == VM_KEY_SESSION;
    }
    if let Some(r) = in_array(CTX_BASE, CTX_STRIDE, MAX_CONTEXTS) {
        return r == CTX_BLOCK || r == CTX_CREATED_CYCLE;
    }
    false
}
