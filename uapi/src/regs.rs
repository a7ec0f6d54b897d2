//! BAR0 register map.
//!
//! All registers are 32 bits wide and naturally aligned unless marked
//! "64-bit"; those are read atomically with one 8-byte access at their offset
//! (a 4-byte access to either half is also allowed and reads that half).
//! Access notes: RO = read-only (writes are rejected), RW = read/write,
//! WO = write-only command register (reads return 0), W1C = write one to clear.
//!
//! Per-instance blocks (partitions, CCUs, VMs, contexts) are laid out as an
//! array with a fixed stride; use the helper functions instead of computing
//! offsets at call sites.

/// Size of the BAR0 register aperture in bytes.
pub const BAR0_SIZE: u64 = 0x0004_0000;

mod ccu;
mod ctx;
mod device;
mod mailbox;
mod partition;
mod trigger;
mod vm;

pub use self::ccu::*;
pub use self::ctx::*;
pub use self::device::*;
pub use self::mailbox::*;
pub use self::partition::*;
pub use self::trigger::*;
pub use self::vm::*;

const _: () = assert!(CTX_BASE + MAX_CONTEXTS as u64 * CTX_STRIDE <= BAR0_SIZE);
const _: () = assert!(VM_BASE + MAX_VMS as u64 * VM_STRIDE <= CTX_BASE);
const _: () = assert!(CCU_BASE + MAX_CCUS as u64 * CCU_STRIDE <= VM_BASE);
const _: () =
    assert!(PART_BASE + MAX_PARTITION_SLOTS as u64 * PART_STRIDE <= crate::sampling::SAMP_BASE);

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
    if crate::ri::is_64bit(offset) {
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
        crate::sampling::SAMP_BASE,
        crate::sampling::SAMP_STRIDE,
        MAX_PARTITION_SLOTS,
    ) {
        return crate::sampling::is_64bit_in_block(r);
    }
    if let Some(r) = in_array(
        crate::ranges::RANGE_BASE,
        crate::ranges::RANGE_STRIDE,
        MAX_PARTITION_SLOTS,
    ) {
        return crate::ranges::is_64bit_in_block(r);
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
