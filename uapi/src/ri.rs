//! Runtime-instrumentation (RI) control blocks: registers, bits, limits and
//! the program-buffer region of the memory window. The 16-byte records a
//! control block stores into its program buffer are in [`crate::layout`]
//! (`Ri*Record`).
//!
//! A control block ([`RI_BASE`] + i · [`RI_STRIDE`], `i` in
//! `0..RI_BLOCKS`) is bound to one context ([`RI_CTX`]); while enabled it
//! watches that context's program wherever it runs and, at every sample
//! point its mode and scaling factor pick, stores one *report group* of
//! 2^(RGS+1) records into its program buffer, a byte range
//! `[ROA, RLA]` of the block's own span of the memory window
//! ([`ri_span_offset`]). Global registers at `0x0600..0x0700` describe the
//! unit, each partition's characteristics, and migrate VMs between
//! partitions.
//!
//! See `docs/ri.md` for the programming model.

use crate::regdef::register_block;
use crate::regs::MAX_PARTITION_SLOTS;
use crate::sampling::{SAMPLE_REGION, SAMPLE_SPAN};

// ---------------------------------------------------------------------------
// Global registers (0x0600..0x0700)
// ---------------------------------------------------------------------------

register_block! {
    /// The runtime-instrumentation unit's device-wide registers: the
    /// unit's size, VM migration, and each partition slot's
    /// characteristics.
    pub const RI_GLOBAL_REGS = RiGlobal "RI_GLOBAL" in "ri",
        fixed 0x0600..0x0700;
    registers {
        /// number of control blocks ([`RI_BLOCKS`]).
        RI_COUNT = 0x0600, ro;
        /// the largest RGS the device accepts ([`RGS_MAX`]); a partition may
        /// declare a smaller limit ([`ri_part_max_rgs`]).
        RI_MAX_RGS = 0x0604, ro;
        /// bytes of each control block's span of the memory window
        /// ([`RI_SPAN`]).
        RI_SPAN_BYTES = 0x0608, ro;
        /// the VM that the next [`RI_MIGRATE`] write moves (staging).
        RI_MIGRATE_VM = 0x060C, rw;
        /// migrate the VM staged in [`RI_MIGRATE_VM`] to the partition slot
        /// written here. Refused (EINVAL, nothing changes) when the VM does not
        /// exist, the slot is not configured or is the VM's own, or the VM is
        /// running or about to run on its partition (current or incoming of a
        /// switch). On success every enabled control block bound to a context
        /// of the VM is checked against the new partition and halts when the
        /// partition's version differs from the one its session began on, or
        /// its maximum RGS is below the session's RGS.
        RI_MIGRATE = 0x0610, wo;
        /// migrations performed (register writes and scenario timeline).
        RI_MIGRATIONS = 0x0614, ro;
        /// per partition slot `p`, at `RI_PART_VERSION + 4p`: the partition's
        /// capability version (scenario key `ri_version`, default 1).
        RI_PART_VERSION = 0x0640, ro words MAX_PARTITION_SLOTS as usize;
        /// per partition slot `p`, at `RI_PART_MAX_RGS + 4p`: the largest RGS
        /// a session may use on the partition (scenario key `ri_max_rgs`, default
        /// [`RGS_MAX`]).
        RI_PART_MAX_RGS = 0x0680, ro words MAX_PARTITION_SLOTS as usize;
    }
}

/// Offset of partition slot `p`'s version register.
pub const fn ri_part_version(p: u32) -> u64 {
    RI_PART_VERSION + 4 * p as u64
}

/// Offset of partition slot `p`'s max-RGS register.
pub const fn ri_part_max_rgs(p: u32) -> u64 {
    RI_PART_MAX_RGS + 4 * p as u64
}

// ---------------------------------------------------------------------------
// Control blocks (0x5000..0x6000)
// ---------------------------------------------------------------------------

/// Base of the control-block array.
pub const RI_BASE: u64 = 0x5000;
/// Stride between control blocks.
pub const RI_STRIDE: u64 = 0x40;
/// Number of control blocks.
pub const RI_BLOCKS: u32 = 64;

/// Offset of register `reg` of control block `i`.
pub const fn ri(i: u32, reg: u64) -> u64 {
    RI_BASE + i as u64 * RI_STRIDE + reg
}

register_block! {
    /// One runtime-instrumentation control block.
    pub const RI_REGS = Ri "RI" in "ri",
        array RI_BASE, stride RI_STRIDE, count RI_BLOCKS;
    registers {
        /// the context the block watches (0 = none). Writable only while the
        /// block is disabled; a context another block watches, a free context, or
        /// a context of a confidential VM is refused.
        RI_CTX = 0x00, rw;
        /// control bits, see [`ri_ctrl`]. Setting `ENABLE` checks the whole
        /// control block (context bound, mode, RGS within the limit of the
        /// context's partition, origin and limit) and starts a session: RCA =
        /// ROA, the next group is a begin group, the countdown starts from RSIC
        /// (or SF when RSIC is 0), the halt and stop conditions are cleared.
        /// While enabled only `ENABLE` may change (clearing it ends the session;
        /// the buffer and counts stay readable).
        RI_CTRL = 0x04, rw;
        /// status bits, see [`ri_status`].
        RI_STATUS = 0x08, ro;
        /// why the session halted, see [`halt_reason`].
        RI_HALT_REASON = 0x0C, ro;
        /// SF, the scaling factor: sample every SF units of the mode (cycles
        /// or instructions). 0 loads 1; values outside
        /// `SF_MIN..=SF_MAX` of the mode load the nearest bound when the block is
        /// enabled. Writable only while disabled.
        RI_SF = 0x10, rw;
        /// RSIC, the remaining sample-interval count. Reads the live
        /// countdown; a write (only while disabled) sets the first interval of
        /// the next session (0 = a full SF interval).
        RI_RSIC = 0x14, rw;
        /// ROA, byte offset of the program buffer's first byte in the block's
        /// span; a multiple of the group size 2^(RGS+5) (checked at enable).
        /// Writable only while disabled.
        RI_ROA = 0x18, rw;
        /// RLA, byte offset of the program buffer's last byte in the block's
        /// span (< [`RI_SPAN`]); the buffer must hold at least one group
        /// (checked at enable). Writable only while disabled.
        RI_RLA = 0x1C, rw;
        /// RCA, byte offset in the span where the next group goes: ROA plus
        /// a multiple of the group size. An enable sets it to ROA; a full buffer
        /// in `WRAP` mode sets it back to ROA.
        RI_RCA = 0x20, ro;
        /// RIEMIT — puts an emit record with this value into the collection
        /// buffer (while enabled with `EMIT`, not halted or stopped; otherwise the
        /// write is accepted and does nothing, as RIEMIT is a no-op then).
        RI_EMIT = 0x24, wo;
        /// report groups stored since the session began (NRG).
        RI_GROUPS = 0x28, ro64;
        /// sample points whose group was suppressed (Y/Z).
        RI_SUPPRESSED = 0x30, ro64;
        /// collection-buffer records overwritten before a group reported them.
        RI_OVERWRITTEN = 0x38, ro;
        /// entries in the collection buffer now (0..=[`COLLECTION_ENTRIES`]).
        RI_COLLECTED = 0x3C, ro;
    }
}

/// Bits and fields of [`RI_CTRL`].
pub mod ri_ctrl {
    /// The session runs.
    pub const ENABLE: u32 = 1 << 0;
    /// Mode field: bits 4..=7, values in [`super::ri_mode`].
    pub const MODE_SHIFT: u32 = 4;
    /// Mode field mask.
    pub const MODE_MASK: u32 = 0xF << MODE_SHIFT;
    /// RGS field: bits 8..=10 (a group is 2^(RGS+1) records).
    pub const RGS_SHIFT: u32 = 8;
    /// RGS field mask.
    pub const RGS_MASK: u32 = 0x7 << RGS_SHIFT;
    /// E: RIEMIT ([`super::RI_EMIT`]) and marker blocks put emit records
    /// into the collection buffer.
    pub const EMIT: u32 = 1 << 12;
    /// X: a context switched out mid-interval puts an abort record into
    /// the collection buffer.
    pub const ABORT: u32 = 1 << 13;
    /// Y: suppress groups whose sample point ran at primary clock capability.
    pub const SUPPRESS_PRIMARY: u32 = 1 << 16;
    /// Z: suppress groups whose sample point ran at secondary (throttled)
    /// clock capability.
    pub const SUPPRESS_SECONDARY: u32 = 1 << 17;
    /// U: raise `RI_BUFFER_FULL` and `RI_HALT` interrupts.
    pub const INTR_ENABLE: u32 = 1 << 18;
    /// On a full buffer, wrap to ROA (a new begin group) instead of stopping.
    pub const WRAP: u32 = 1 << 19;
    /// All defined bits and fields.
    pub const ALL: u32 = ENABLE
        | MODE_MASK
        | RGS_MASK
        | EMIT
        | ABORT
        | SUPPRESS_PRIMARY
        | SUPPRESS_SECONDARY
        | INTR_ENABLE
        | WRAP;
}

/// Values of the mode field of [`RI_CTRL`].
pub mod ri_mode {
    /// Sample every SF context cycles.
    pub const CYCLE: u32 = 1;
    /// Sample every SF retired warp instructions.
    pub const INSTRUCTION: u32 = 2;
    /// Sample at every entry into a marker block (the RINEXT analogue).
    pub const DIRECTED: u32 = 3;
}

/// Bits of [`RI_STATUS`].
pub mod ri_status {
    /// A session is enabled.
    pub const ENABLED: u32 = 1 << 0;
    /// S: the buffer was full (stop mode): no more groups are stored.
    pub const STOPPED: u32 = 1 << 1;
    /// H: the session halted ([`super::RI_HALT_REASON`] says why): no more
    /// groups are stored, RIEMIT does nothing.
    pub const HALTED: u32 = 1 << 2;
    /// L: a buffer-full notification was raised (pending until the next enable).
    pub const FULL_PENDING: u32 = 1 << 3;
    /// G: a halt notification was raised (pending until the next enable).
    pub const HALT_PENDING: u32 = 1 << 4;
}

/// Values of [`RI_HALT_REASON`].
pub mod halt_reason {
    /// Not halted.
    pub const NONE: u32 = 0;
    /// The VM moved to a partition of another capability version.
    pub const VERSION: u32 = 1;
    /// The VM moved to a partition whose maximum RGS is below the session's.
    pub const RGS_LIMIT: u32 = 2;
}

/// Largest RGS (groups of 256 records).
pub const RGS_MAX: u32 = 7;
/// Entries of a control block's collection buffer (the newest are kept).
pub const COLLECTION_ENTRIES: usize = 32;
/// Smallest SF in cycle mode (a smaller one loads this).
pub const SF_MIN_CYCLES: u32 = 256;
/// Smallest SF in instruction mode.
pub const SF_MIN_INSTRUCTIONS: u32 = 16;
/// Largest SF in any mode.
pub const SF_MAX: u32 = 1 << 30;
/// Bytes of one record.
pub const RI_RECORD_SIZE: u64 = 16;

/// Bytes of a report group of size `rgs`: 2^(RGS+1) records of 16 bytes.
pub const fn group_bytes(rgs: u32) -> u64 {
    RI_RECORD_SIZE << (rgs + 1)
}

/// Bytes of each control block's span of the memory window.
pub const RI_SPAN: u64 = 1 << 20;
/// Alignment of the RI region.
pub const RI_ALIGN: u64 = 4096;
/// Window offset of the program-buffer region: after the sample spans.
pub const RI_REGION: u64 =
    (SAMPLE_REGION + MAX_PARTITION_SLOTS as u64 * SAMPLE_SPAN).next_multiple_of(RI_ALIGN);

/// Window offset of control block `i`'s span; its program buffer is at
/// `ri_span_offset(i) + ROA ..= ri_span_offset(i) + RLA`.
pub const fn ri_span_offset(i: u32) -> u64 {
    RI_REGION + i as u64 * RI_SPAN
}

const _: () = assert!(group_bytes(RGS_MAX) == 4096);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_and_region_fit_their_space() {
        assert_eq!(ri(1, RI_CTRL), 0x5044);
        assert!(crate::map::is_64bit(ri(3, RI_GROUPS)));
        assert!(!crate::map::is_64bit(ri(3, RI_COLLECTED)));
        assert_eq!(group_bytes(0), 32);
        assert_eq!(RI_REGION % RI_ALIGN, 0);
        assert!(ri_span_offset(RI_BLOCKS) > ri_span_offset(0));
    }
}
