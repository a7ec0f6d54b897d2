//! Marked ranges: per partition slot, [`RANGES_PER_PARTITION`] range
//! registers, each a *code range* (blocks of one kernel of one program) or
//! a *data range* (data addresses the program's blocks touch), counting
//! entries and one chosen event inside the range; a count or per-entry
//! latency passing a programmed threshold writes a [`RangeRecord`] (with
//! the context's device-side call stack) into the partition's record ring
//! and raises `RANGE_THRESHOLD`.
//!
//! Range registers are at [`range_reg`]`(p, i, reg)`; the partition's
//! ring registers at [`rring`]`(p, reg)`; the ring's slots in the
//! partition's span of the range region ([`range_span_offset`]).
//!
//! See `docs/ranges.md` for the semantics.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::layout::Envelope;
use crate::regdef::register_block;
use crate::regs::MAX_PARTITION_SLOTS;

// ---------------------------------------------------------------------------
// Range registers (0x6000..0x7000)
// ---------------------------------------------------------------------------

/// Base of the range blocks (one per partition slot).
pub const RANGE_BASE: u64 = 0x6000;
/// Stride between partition slots' range blocks.
pub const RANGE_STRIDE: u64 = 0x100;
/// Stride between the register sets of two ranges of one partition.
pub const RANGE_REG_STRIDE: u64 = 0x20;
/// Range registers per partition slot.
pub const RANGES_PER_PARTITION: u32 = 8;

/// Offset of register `reg` of range `i` of partition slot `p`.
pub const fn range_reg(p: u32, i: u32, reg: u64) -> u64 {
    RANGE_BASE + p as u64 * RANGE_STRIDE + i as u64 * RANGE_REG_STRIDE + reg
}

register_block! {
    /// One partition slot's marked ranges: [`RANGES_PER_PARTITION`]
    /// register sets, one per range.
    pub const RANGE_REGS = Range "RANGE" in "ranges",
        array RANGE_BASE, stride RANGE_STRIDE, count MAX_PARTITION_SLOTS;
    registers {
    }
    set RANGE(at 0, stride RANGE_REG_STRIDE, count RANGES_PER_PARTITION) {
        /// what the range is and counts, see [`range_ctrl`]. Writing a value
        /// with [`range_ctrl::ENABLE`] *arms* the range: it checks the whole
        /// programming (`RANGE_START`, `RANGE_END`, `RANGE_THRESHOLD` and this
        /// value) and zeroes the counts. While armed, the only accepted write is
        /// 0 (disarm; the counts stay readable).
        RANGE_CTRL = 0x00, rw;
        /// first item of the range, inclusive: `kernel << 16 | block` for a
        /// code range, a data address for a data range. Writable only while the
        /// range is disarmed.
        RANGE_START = 0x04, rw;
        /// last item of the range, inclusive (same encoding as
        /// [`RANGE_START`]). Writable only while the range is disarmed.
        RANGE_END = 0x08, rw;
        /// the threshold [`range_ctrl::COUNT_IRQ`] or
        /// [`range_ctrl::LATENCY_IRQ`] compares against (1..=2^32 − 1 when one
        /// is set). Writable only while the range is disarmed.
        RANGE_THRESHOLD = 0x0C, rw;
        /// entries into the range since it was armed.
        RANGE_ENTRIES = 0x10, ro64;
        /// the chosen event counted inside the range since it was armed.
        RANGE_COUNT = 0x18, ro64;
    }
}

/// Bits of [`RANGE_CTRL`].
pub mod range_ctrl {
    /// The range is armed.
    pub const ENABLE: u32 = 1 << 0;
    /// A data-address range (clear: a code range).
    pub const DATA: u32 = 1 << 1;
    /// Shift of the event field ([`super::range_event`]).
    pub const EVENT_SHIFT: u32 = 4;
    /// Mask of the event field.
    pub const EVENT_MASK: u32 = 0x3 << EVENT_SHIFT;
    /// Every time the count reaches a multiple of `RANGE_THRESHOLD`, write
    /// a record and raise `RANGE_THRESHOLD`.
    pub const COUNT_IRQ: u32 = 1 << 8;
    /// When one entry's residence reaches `RANGE_THRESHOLD` context cycles,
    /// write a record and raise `RANGE_THRESHOLD` (once per entry).
    pub const LATENCY_IRQ: u32 = 1 << 9;
    /// Shift of the program field: the program id (`CTX_PROGRAM`, 1 + the
    /// index in the scenario's program table) the range applies to;
    /// required for a code range, 0 = every program for a data range.
    pub const PROGRAM_SHIFT: u32 = 16;
    /// Mask of the program field.
    pub const PROGRAM_MASK: u32 = 0xFFFF << PROGRAM_SHIFT;
    /// All defined bits.
    pub const ALL: u32 = ENABLE | DATA | EVENT_MASK | COUNT_IRQ | LATENCY_IRQ | PROGRAM_MASK;
}

/// Events a range counts inside (the event field of [`RANGE_CTRL`]).
pub mod range_event {
    /// Warp instructions retired (one SM).
    pub const INSTRUCTIONS: u32 = 0;
    /// Context cycles.
    pub const CYCLES: u32 = 1;
    /// Memory accesses (one per visit of a block that touches data).
    pub const MEMORY: u32 = 2;
    /// Number of events.
    pub const COUNT: u32 = 3;
}

/// `RANGE_START`/`RANGE_END` of a code range naming `block` of `kernel`.
pub const fn code_item(kernel: u16, block: u16) -> u32 {
    (kernel as u32) << 16 | block as u32
}

// ---------------------------------------------------------------------------
// Record ring registers (0x0700..0x0800)
// ---------------------------------------------------------------------------

/// Base of the record-ring register sets (one per partition slot).
pub const RRING_BASE: u64 = 0x0700;
/// Stride between partition slots' ring register sets.
pub const RRING_STRIDE: u64 = 0x10;

/// Offset of ring register `reg` of partition slot `p`.
pub const fn rring(p: u32, reg: u64) -> u64 {
    RRING_BASE + p as u64 * RRING_STRIDE + reg
}

register_block! {
    /// One partition slot's range-record ring registers.
    pub const RRING_REGS = RangeRing "RRING" in "ranges",
        array RRING_BASE, stride RRING_STRIDE, count MAX_PARTITION_SLOTS;
    registers {
        /// ring capacity in records: 0 or a power of two up to
        /// [`RRING_MAX_RECORDS`]. Writable only while no range of the partition
        /// has a threshold armed; a write empties the ring (head, tail, lost and
        /// sequence return to 0).
        RRING_CAP = 0x00, rw;
        /// next record index the device writes, modulo 2^32.
        RRING_HEAD = 0x04, ro;
        /// next record index the host reads, modulo 2^32; writes must lie in
        /// `[old tail, head]`.
        RRING_TAIL = 0x08, rw;
        /// records lost to a full ring since the last [`RRING_CAP`] write,
        /// modulo 2^32 (a record's 64-bit `seq` counts lost records too, so gaps
        /// in `seq` are exact).
        RRING_LOST = 0x0C, ro;
    }
}

// ---------------------------------------------------------------------------
// The range region of the memory window
// ---------------------------------------------------------------------------

/// Bytes of the memory window reserved per partition slot for its record
/// ring.
pub const RANGE_SPAN: u64 = 1 << 20;
/// Window offset of the range region: after the runtime-instrumentation
/// region, page aligned.
pub const RANGE_REGION: u64 = (crate::ri::RI_REGION
    + crate::ri::RI_BLOCKS as u64 * crate::ri::RI_SPAN)
    .next_multiple_of(4096);
/// Most records a ring holds (the largest power of two whose slots fit
/// [`RANGE_SPAN`]).
pub const RRING_MAX_RECORDS: u32 = 4096;

/// Window offset of partition slot `p`'s ring (slot 0 of the ring).
pub const fn range_span_offset(p: u32) -> u64 {
    RANGE_REGION + p as u64 * RANGE_SPAN
}

// ---------------------------------------------------------------------------
// Records
// ---------------------------------------------------------------------------

/// Magic of a range record: "gRNG".
pub const RANGE_RECORD_MAGIC: u32 = u32::from_le_bytes(*b"gRNG");
/// Entries in a record's call stack (at least the deepest a program can
/// call: 15 frames below the entry kernel).
pub const RANGE_STACK_DEPTH: usize = 16;

/// What crossed (a record's `kind`).
pub mod crossing_kind {
    /// The count reached a multiple of the threshold.
    pub const COUNT: u8 = 1;
    /// One entry's residence reached the threshold.
    pub const LATENCY: u8 = 2;
}

/// Bits of a record's `flags`.
pub mod range_flags {
    /// The clock ran at secondary (throttled) capability at the crossing.
    pub const SECONDARY_CLOCK: u16 = 1 << 0;
}

/// One frame of the device-side call stack: the call in kernel `kernel`
/// at block `call_block` into kernel `callee`, which returns to block
/// `return_block` of `kernel` (`call_block + 1`; equal to the kernel's
/// block count when the call was its last block, which then returns on).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct StackEntry {
    /// Calling kernel.
    pub kernel: u16,
    /// Calling block (index within `kernel`).
    pub call_block: u16,
    /// Return block (index within `kernel`).
    pub return_block: u16,
    /// Called kernel.
    pub callee: u16,
}
const _: () = assert!(core::mem::size_of::<StackEntry>() == 8);

/// A threshold crossing: written to the partition's ring (sealed like
/// sample records), one per crossing, with `RANGE_THRESHOLD` raised.
///
/// Invariants: per ring `seq` increases by one per record produced,
/// including lost ones; `stack[..depth]` is the context's call stack at
/// the crossing, outermost call first, and `stack[depth - 1].callee` (or
/// the program's entry kernel when `depth` is 0) is `kernel`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct RangeRecord {
    /// [`RANGE_RECORD_MAGIC`].
    pub magic: u32,
    /// Partition slot.
    pub partition: u16,
    /// Range index (0..[`RANGES_PER_PARTITION`]).
    pub range: u8,
    /// What crossed ([`crossing_kind`]).
    pub kind: u8,
    /// VM of the context.
    pub vm: u32,
    /// Context running at the crossing.
    pub ctx: u32,
    /// Ring sequence number (1-based).
    pub seq: u64,
    /// Device cycle of the crossing.
    pub cycle: u64,
    /// Context cycle (cycles the context has run) of the crossing.
    pub ctx_cycle: u64,
    /// Count crossing: the range's count reached (a multiple of
    /// `threshold`). Latency crossing: context cycles since the entry
    /// (equal to `threshold`).
    pub value: u64,
    /// The range's `RANGE_ENTRIES` at the crossing.
    pub entries: u64,
    /// `RANGE_THRESHOLD`.
    pub threshold: u32,
    /// Bits in [`range_flags`].
    pub flags: u16,
    /// The range's event ([`range_event`]).
    pub event: u8,
    /// Reserved, 0.
    pub reserved: u8,
    /// Kernel executing at the crossing.
    pub kernel: u16,
    /// Block executing at the crossing.
    pub block: u16,
    /// Valid entries of `stack` (calls below the entry kernel).
    pub depth: u32,
    /// The call stack, outermost call first.
    pub stack: [StackEntry; RANGE_STACK_DEPTH],
}
const _: () = assert!(core::mem::size_of::<RangeRecord>() == 200);

/// A ring slot in the memory window (sealed like blocks).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct RangeSlot {
    /// Envelope.
    pub envelope: Envelope,
    /// The record bytes (ciphertext when encrypted).
    pub payload: [u8; core::mem::size_of::<RangeRecord>()],
    /// GCM tag (0 when not encrypted).
    pub tag: [u8; 16],
}
const _: () = assert!(core::mem::size_of::<RangeSlot>() == 248);
const _: () = assert!(RRING_MAX_RECORDS as u64 * 248 <= RANGE_SPAN);
const _: () = assert!(2 * RRING_MAX_RECORDS as u64 * 248 > RANGE_SPAN);

// ---------------------------------------------------------------------------
// Debug ledger: per-(context, range) truth and the call-graph truth
// ---------------------------------------------------------------------------

/// Exact counts of one range for one context since the range was armed.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct RangeTruth {
    /// Range index.
    pub range: u32,
    /// The range's `RANGE_CTRL` (0: never armed).
    pub ctrl: u32,
    /// Entries of the context into the range.
    pub entries: u64,
    /// The range's event counted inside the range for the context.
    pub count: u64,
    /// Threshold crossings attributed to the context.
    pub crossings: u64,
}
const _: () = assert!(core::mem::size_of::<RangeTruth>() == 32);

/// Rows of a [`RangeLedgerQuery`]: one per range register.
pub const RANGE_LEDGER_ROWS: usize = RANGES_PER_PARTITION as usize;

/// `GPUPM_IOC_LEDGER_RANGES` (debug only): the ground truth of every range
/// of partition slot `partition` for context `ctx`. A confidential VM's
/// context's answer is sealed like `GPUPM_IOC_LEDGER_BLOCKS`' (`rows` is
/// ciphertext, `flags` has `ledger_flags::SEALED`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct RangeLedgerQuery {
    /// `IOCTL_STRUCT_VERSION`.
    pub version: u32,
    /// Context id (active, or destroyed and not yet released).
    pub ctx: u32,
    /// Partition slot (1..16, configured).
    pub partition: u32,
    /// Must be 0 on input; bits of `ledger_flags` on output.
    pub flags: u32,
    /// Output: one row per range register.
    pub rows: [RangeTruth; RANGE_LEDGER_ROWS],
    /// Envelope of a sealed answer (all 0 otherwise); must be 0 on input.
    pub envelope: Envelope,
    /// GCM tag of a sealed answer (all 0 otherwise); must be 0 on input.
    pub tag: [u8; 16],
}
const _: () = assert!(core::mem::size_of::<RangeLedgerQuery>() == 16 + 256 + 32 + 16);

/// Bytes of a [`RangeLedgerQuery`] that a sealed answer encrypts: `rows`.
pub const RANGE_LEDGER_SEALED_LEN: usize = 32 * RANGE_LEDGER_ROWS;

/// Calls made from one call site of a context's program.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct CallEdge {
    /// Calling kernel.
    pub kernel: u16,
    /// Calling block.
    pub call_block: u16,
    /// Called kernel.
    pub callee: u16,
    /// Reserved, 0.
    pub reserved: u16,
    /// Calls made (the callee was entered) since the context started or
    /// the device was last reset.
    pub calls: u64,
}
const _: () = assert!(core::mem::size_of::<CallEdge>() == 16);

/// Rows in one [`CallLedgerQuery`] answer.
pub const CALL_LEDGER_ROWS: usize = 64;

/// `GPUPM_IOC_LEDGER_CALLS` (debug only): the call-graph ground truth of
/// context `ctx` — one row per call site of its program, in (kernel,
/// block) order, from row `first`; page with `first += count` until
/// `first == total`. Sealed for a confidential VM's context like
/// `GPUPM_IOC_LEDGER_BLOCKS`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct CallLedgerQuery {
    /// `IOCTL_STRUCT_VERSION`.
    pub version: u32,
    /// Context id.
    pub ctx: u32,
    /// Input: first row (must be `<= total`).
    pub first: u32,
    /// Must be 0 on input; bits of `ledger_flags` on output.
    pub flags: u32,
    /// Output: rows filled.
    pub count: u32,
    /// Output: call sites the program has.
    pub total: u32,
    /// The rows.
    pub rows: [CallEdge; CALL_LEDGER_ROWS],
    /// Envelope of a sealed answer (all 0 otherwise); must be 0 on input.
    pub envelope: Envelope,
    /// GCM tag of a sealed answer (all 0 otherwise); must be 0 on input.
    pub tag: [u8; 16],
}
const _: () = assert!(core::mem::size_of::<CallLedgerQuery>() == 24 + 16 * CALL_LEDGER_ROWS + 48);

/// Bytes of a [`CallLedgerQuery`] that a sealed answer encrypts: `rows`.
pub const CALL_LEDGER_SEALED_LEN: usize = 16 * CALL_LEDGER_ROWS;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_fit_their_blocks() {
        assert_eq!(range_reg(1, 0, RANGE_CTRL), 0x6100);
        assert_eq!(range_reg(15, 7, RANGE_COUNT) + 8, 0x7000);
        assert_eq!(rring(15, RRING_LOST) + 4, 0x0800);
        assert!(crate::map::is_64bit(range_reg(2, 3, RANGE_COUNT)));
        assert!(!crate::map::is_64bit(range_reg(2, 3, RANGE_THRESHOLD)));
        assert_eq!(RANGE_REGION % 4096, 0);
        assert_eq!(code_item(2, 5), 0x0002_0005);
    }
}
