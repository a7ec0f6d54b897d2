//! The sampling units: per partition slot, a branch-record sampler and a
//! cycle (PC) sampler, each writing its own record type into its own ring
//! buffer in the memory window.
//!
//! Register blocks are at [`samp`]`(p, reg)`, one per partition slot
//! (slot 0, the system channel, runs no programs: like an unconfigured
//! slot it answers only a zero [`SAMP_STATUS`]). Buffers live in the
//! partition's *sample span* of the memory window
//! ([`sample_span_offset`]); the host places and sizes them with
//! [`BUF_BASE`] and [`BUF_CAP`] and finds their first slot at [`BUF_ADDR`].
//!
//! See `docs/sampling.md` for the semantics.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::layout::{Envelope, STREAM_REGION, STREAM_RING_SPAN};
use crate::regdef::register_block;
use crate::regs::MAX_PARTITION_SLOTS;

// ---------------------------------------------------------------------------
// Registers (0x2000..0x3000)
// ---------------------------------------------------------------------------

/// Base of the sampling block array.
pub const SAMP_BASE: u64 = 0x2000;
/// Stride between sampling blocks.
pub const SAMP_STRIDE: u64 = 0x100;

/// Offset of register `reg` of partition slot `p`'s sampling block.
pub const fn samp(p: u32, reg: u64) -> u64 {
    SAMP_BASE + p as u64 * SAMP_STRIDE + reg
}

register_block! {
    /// One partition slot's sampling block: the two samplers' settings
    /// and counts, then one register set per buffer kind.
    pub const SAMP_REGS = Sampling "SAMP" in "sampling",
        array SAMP_BASE, stride SAMP_STRIDE, count MAX_PARTITION_SLOTS;
    registers {
        /// sampler enables, see [`samp_ctrl`]. Enabling a sampler whose
        /// buffer has no capacity fails.
        SAMP_CTRL = 0x00, rw;
        /// status bits, see [`samp_status`].
        SAMP_STATUS = 0x04, ro;
        /// N — the branch-record sampler captures its stack into a record
        /// every N taken branches (`1..=BRANCH_PERIOD_MAX`; 0 fails).
        SAMP_BRANCH_PERIOD = 0x08, rw;
        /// P — the cycle sampler's base period in context cycles
        /// (`CYCLE_PERIOD_MIN..=CYCLE_PERIOD_MAX`).
        SAMP_CYCLE_PERIOD = 0x0C, rw;
        /// R_MAX — each cycle-sampler interval adds R uniform in `0..=R_MAX`
        /// from the device's seeded generator (`0..=DITHER_MAX`; 0 = the fixed
        /// period, for comparison). Default [`DEFAULT_DITHER`].
        SAMP_CYCLE_DITHER = 0x10, rw;
        /// S, the interrupt skid in cycles (a device parameter).
        SAMP_SKID = 0x14, ro;
        /// A, the pipeline-refill cycles (a device parameter).
        SAMP_REFILL = 0x18, ro;
        /// entries in the branch stack ([`BRANCH_STACK_ENTRIES`]).
        SAMP_STACK_DEPTH = 0x1C, ro;
        /// taken branches the branch-record sampler saw while enabled.
        SAMP_BRANCHES = 0x20, ro64;
        /// cycle samples taken while enabled.
        SAMP_CYCLE_SAMPLES = 0x28, ro64;
        /// bytes in this partition's sample span ([`SAMPLE_SPAN`]).
        SAMP_SPAN = 0x30, ro;
        /// fewest context cycles between two taken branches of any program a
        /// context of this partition can run (the `min_branch_gap` argument of
        /// [`branch_records_per_drain`]); 0 when none runs a program.
        SAMP_MIN_BRANCH_GAP = 0x34, ro;
        /// the scope whose lost records the buffers' [`BUF_LOST_SELECTED`]
        /// registers count ([`lost_select`]: a context id, or a VM id with
        /// [`lost_select::VM`]). An id out of range or undefined bits fail.
        /// 0 after reset (context 0: no context, counts 0).
        SAMP_LOST_SELECT = 0x38, rw;
    }
    set BUF(at SAMP_BUF_BRANCH, stride SAMP_BUF_STRIDE, count buf_kind::COUNT) {
        /// byte offset of the buffer's first slot inside the partition's
        /// sample span; a multiple of [`BUF_ALIGN`]. Writable only while the
        /// buffer's sampler is disabled; a write empties the buffer.
        BUF_BASE = 0x00, rw;
        /// capacity in records: 0 (no buffer) or a power of two, with the
        /// buffer inside the span and not overlapping the other buffer. Writable
        /// only while the buffer's sampler is disabled; a write empties the buffer
        /// (head, tail, lost and sequence return to 0).
        BUF_CAP = 0x04, rw;
        /// next record index the device writes, modulo 2^32.
        BUF_HEAD = 0x08, ro;
        /// next record index the host reads, modulo 2^32; writes must lie in
        /// `[old tail, head]`.
        BUF_TAIL = 0x0C, rw;
        /// raise `SAMPLE_WATERMARK` when `head - tail` reaches this (1..=cap);
        /// raised once per drain (re-armed by a tail write). A `BUF_CAP` write sets
        /// it to half the capacity (at least 1).
        BUF_WATERMARK = 0x10, rw;
        /// records lost because the buffer was full.
        BUF_LOST = 0x18, ro64;
        /// memory-window offset of the buffer's first slot.
        BUF_ADDR = 0x20, ro64;
        /// records produced (stored or lost) since the last `BUF_CAP`
        /// write; a record's `seq` is this count after it.
        BUF_PRODUCED = 0x28, ro64;
        /// records of the scope [`SAMP_LOST_SELECT`] names (a context,
        /// or every context of a VM) this buffer lost since the last `BUF_CAP`
        /// write. Each lost record counts for exactly one context (the one that
        /// was running), so over the contexts of the partition these sum to
        /// [`BUF_LOST`]. Select and read in one batch (batches are atomic).
        BUF_LOST_SELECTED = 0x30, ro64;
    }
}

/// Encoding of [`SAMP_LOST_SELECT`].
pub mod lost_select {
    /// The low bits name a VM, not a context.
    pub const VM: u32 = 1 << 31;
    /// The id bits.
    pub const ID_MASK: u32 = 0xFFFF;
}

/// Offset of the branch-stack buffer's registers in the sampling block.
pub const SAMP_BUF_BRANCH: u64 = 0x40;
/// Offset of the PC buffer's registers in the sampling block.
pub const SAMP_BUF_PC: u64 = 0x80;
/// Stride between the buffers' register sets.
pub const SAMP_BUF_STRIDE: u64 = 0x40;

/// Offset of buffer register `reg` of buffer `kind` ([`buf_kind`]) inside
/// the sampling block.
pub const fn buf(kind: u32, reg: u64) -> u64 {
    SAMP_BUF_BRANCH + kind as u64 * SAMP_BUF_STRIDE + reg
}

/// Buffer kinds (the index in [`buf`], and `arg2` of the sample interrupts).
pub mod buf_kind {
    /// Branch-stack records ([`super::BranchStackRecord`]).
    pub const BRANCH: u32 = 0;
    /// PC records ([`super::PcRecord`]).
    pub const PC: u32 = 1;
    /// Number of kinds.
    pub const COUNT: u32 = 2;
}

/// Bits of [`SAMP_CTRL`].
pub mod samp_ctrl {
    /// The branch-record sampler is enabled.
    pub const BRANCH_ENABLE: u32 = 1 << 0;
    /// The cycle sampler is enabled.
    pub const CYCLE_ENABLE: u32 = 1 << 1;
    /// All defined bits.
    pub const ALL: u32 = BRANCH_ENABLE | CYCLE_ENABLE;
}

/// Bits of [`SAMP_STATUS`].
pub mod samp_status {
    /// The partition slot is configured (it has SMs and runs programs).
    pub const CONFIGURED: u32 = 1 << 8;
}

/// Largest N.
pub const BRANCH_PERIOD_MAX: u32 = 1 << 20;
/// Smallest P.
pub const CYCLE_PERIOD_MIN: u32 = 256;
/// Largest P.
pub const CYCLE_PERIOD_MAX: u32 = 1 << 30;
/// Largest R_MAX.
pub const DITHER_MAX: u32 = 4095;
/// R_MAX after reset: R uniform in 0..=255.
pub const DEFAULT_DITHER: u32 = 255;
/// N after reset.
pub const DEFAULT_BRANCH_PERIOD: u32 = 64;
/// P after reset.
pub const DEFAULT_CYCLE_PERIOD: u32 = 4096;
/// S: cycles from the sampler's counter expiring to the interrupt taking
/// the sample.
pub const SKID_CYCLES: u32 = 12;
/// A: cycles the pipeline refills after the sample, not counted.
pub const REFILL_CYCLES: u32 = 8;
/// Entries in the branch stack.
pub const BRANCH_STACK_ENTRIES: usize = 32;
/// A confidential VM's context gets one branch stack every N × this many
/// of its context cycles plus a dither below that (not every N-th taken
/// branch), so that nothing the host reads depends on its branches;
/// `SAMP_MIN_BRANCH_GAP` of a slot with a confidential VM is at most this.
pub const CONFIDENTIAL_BRANCH_CYCLES: u32 = 64;

/// Alignment of a buffer's base inside the span.
pub const BUF_ALIGN: u64 = 4096;
/// Bytes of the memory window reserved per partition slot for sample
/// buffers.
pub const SAMPLE_SPAN: u64 = 16 << 20;
/// Window offset of the sample region: after the stream rings, page aligned.
pub const SAMPLE_REGION: u64 =
    (STREAM_REGION + MAX_PARTITION_SLOTS as u64 * STREAM_RING_SPAN).next_multiple_of(BUF_ALIGN);

/// Window offset of partition slot `p`'s sample span.
pub const fn sample_span_offset(p: u32) -> u64 {
    SAMPLE_REGION + p as u64 * SAMPLE_SPAN
}

// ---------------------------------------------------------------------------
// Records
// ---------------------------------------------------------------------------

/// Magic of a branch-stack record: "gBRS".
pub const BRANCH_RECORD_MAGIC: u32 = u32::from_le_bytes(*b"gBRS");
/// Magic of a PC record: "gPCS".
pub const PC_RECORD_MAGIC: u32 = u32::from_le_bytes(*b"gPCS");

/// Bits of the records' `flags`.
pub mod sample_flags {
    /// The clock ran at secondary (throttled) capability when the record
    /// was taken (the record's clock capability).
    pub const SECONDARY_CLOCK: u16 = 1 << 0;
}

/// One taken branch: from the block that ended with it to its target.
/// A call, a return and a kernel relaunch are taken branches too.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct BranchEntry {
    /// Kernel of the branching block.
    pub from_kernel: u16,
    /// Branching block (index within its kernel).
    pub from_block: u16,
    /// Kernel of the target block.
    pub to_kernel: u16,
    /// Target block.
    pub to_block: u16,
    /// Context cycle (cycles the context has run) at which the target
    /// block started.
    pub cycle: u64,
}
const _: () = assert!(core::mem::size_of::<BranchEntry>() == 16);

/// A branch-stack record: the last (up to) 32 taken branches of the
/// context, oldest first, captured at every N-th taken branch.
///
/// Invariants: per buffer `seq` increases by one per record produced,
/// including lost ones; `entries[count - 1]` is the capturing branch and
/// `branches` the context's taken-branch count including it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct BranchStackRecord {
    /// [`BRANCH_RECORD_MAGIC`].
    pub magic: u32,
    /// Partition slot.
    pub partition: u16,
    /// Bits in [`sample_flags`].
    pub flags: u16,
    /// VM of the context.
    pub vm: u32,
    /// Context.
    pub ctx: u32,
    /// Buffer sequence number (1-based).
    pub seq: u64,
    /// Device cycle of the capture.
    pub cycle: u64,
    /// Taken branches the context executed so far (this one included).
    pub branches: u64,
    /// Valid entries (1..=32).
    pub count: u32,
    /// Reserved, 0.
    pub reserved: u32,
    /// The branches, oldest first.
    pub entries: [BranchEntry; BRANCH_STACK_ENTRIES],
}
const _: () = assert!(core::mem::size_of::<BranchStackRecord>() == 560);

/// A PC record: where the context was when the cycle sampler fired.
///
/// Invariants: per buffer `seq` increases by one per record produced,
/// including lost ones; `ctx_cycle` increases within one context by the
/// record's `interval` plus the cycles the context ran while the sampler
/// was disabled.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct PcRecord {
    /// [`PC_RECORD_MAGIC`].
    pub magic: u32,
    /// Partition slot.
    pub partition: u16,
    /// Bits in [`sample_flags`] (the clock capability).
    pub flags: u16,
    /// VM of the context.
    pub vm: u32,
    /// Context.
    pub ctx: u32,
    /// Buffer sequence number (1-based).
    pub seq: u64,
    /// Device cycle of the sample.
    pub cycle: u64,
    /// Context cycle (cycles the context has run) of the sample.
    pub ctx_cycle: u64,
    /// Kernel executing.
    pub kernel: u16,
    /// Block executing (index within the kernel).
    pub block: u16,
    /// Context cycles since the previous sample point: P + R + S − A for
    /// the interval that ended here (each sample stands for this many cycles).
    pub interval: u32,
}
const _: () = assert!(core::mem::size_of::<PcRecord>() == 48);

/// A branch-stack buffer slot in the memory window (sealed like blocks).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct BranchSlot {
    /// Envelope.
    pub envelope: Envelope,
    /// The record bytes (ciphertext when encrypted).
    pub payload: [u8; core::mem::size_of::<BranchStackRecord>()],
    /// GCM tag (0 when not encrypted).
    pub tag: [u8; 16],
}
const _: () = assert!(core::mem::size_of::<BranchSlot>() == 608);

/// A PC buffer slot in the memory window (sealed like blocks).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct PcSlot {
    /// Envelope.
    pub envelope: Envelope,
    /// The record bytes (ciphertext when encrypted).
    pub payload: [u8; core::mem::size_of::<PcRecord>()],
    /// GCM tag (0 when not encrypted).
    pub tag: [u8; 16],
}
const _: () = assert!(core::mem::size_of::<PcSlot>() == 96);

/// Bytes of one slot of buffer `kind`.
pub const fn slot_size(kind: u32) -> u64 {
    if kind == buf_kind::BRANCH {
        core::mem::size_of::<BranchSlot>() as u64
    } else {
        core::mem::size_of::<PcSlot>() as u64
    }
}

// ---------------------------------------------------------------------------
// Sizing: the same arithmetic for `gpupm plan`, the daemon and the model's
// tests.
// ---------------------------------------------------------------------------

/// Most PC records a partition produces in `drain_cycles` cycles with
/// period `p`: one per sampling event, events at least `P + S − A` cycles
/// apart (R ≥ 0), plus one for an interval that straddles the start.
pub const fn pc_records_per_drain(drain_cycles: u64, p: u32) -> u64 {
    let min_interval = p as u64 + SKID_CYCLES as u64 - REFILL_CYCLES as u64;
    drain_cycles / min_interval + 1
}

/// Most branch-stack records a partition produces in `drain_cycles`
/// cycles with capture period `n`, when the programs it runs take a
/// branch at most every `min_branch_gap` cycles (one record per N taken
/// branches, plus one for a count that straddles the start).
pub const fn branch_records_per_drain(drain_cycles: u64, n: u32, min_branch_gap: u64) -> u64 {
    let gap = if min_branch_gap == 0 {
        1
    } else {
        min_branch_gap
    };
    let n = if n == 0 { 1 } else { n as u64 };
    (drain_cycles / gap + 1) / n + 1
}

/// Buffer capacity in records for `records` per drain with `margin_pct`
/// percent margin: the next power of two at or above it (at least 1).
pub const fn planned_capacity(records: u64, margin_pct: u64) -> u64 {
    let want = records + (records * margin_pct).div_ceil(100);
    if want <= 1 {
        1
    } else {
        want.next_power_of_two()
    }
}

const _: () = assert!(SAMP_BUF_PC == buf(buf_kind::PC, 0));
const _: () = assert!(CYCLE_PERIOD_MIN + SKID_CYCLES > REFILL_CYCLES + 1);
const _: () = assert!(SAMPLE_SPAN.is_multiple_of(BUF_ALIGN));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_and_buffers_fit_their_blocks() {
        assert_eq!(samp(1, SAMP_CTRL), 0x2100);
        assert_eq!(buf(buf_kind::PC, BUF_PRODUCED) + 8, SAMP_BUF_PC + 0x30);
        assert!(buf(buf_kind::PC, BUF_LOST_SELECTED) + 8 <= SAMP_STRIDE);
        let wide = |reg| crate::map::is_64bit(samp(3, reg));
        assert!(wide(buf(buf_kind::PC, BUF_LOST_SELECTED)));
        assert!(wide(buf(buf_kind::BRANCH, BUF_LOST)));
        assert!(!wide(buf(buf_kind::PC, BUF_TAIL)));
        assert_eq!(SAMPLE_REGION % BUF_ALIGN, 0);
    }

    #[test]
    fn sizing_bounds_hold_at_the_extremes() {
        // One interval of exactly P + S - A fits twice into 2 intervals.
        let min = u64::from(DEFAULT_CYCLE_PERIOD + SKID_CYCLES - REFILL_CYCLES);
        assert_eq!(pc_records_per_drain(2 * min, DEFAULT_CYCLE_PERIOD), 3);
        assert_eq!(branch_records_per_drain(1000, 10, 10), 11);
        assert_eq!(planned_capacity(100, 25), 128);
        assert_eq!(planned_capacity(0, 25), 1);
    }
}
