//! The trigger block and the reduction-channel buffer's registers.

use crate::regdef::register_block;

// ---------------------------------------------------------------------------
// Trigger block (0x0100..0x0130), RC buffer (0x0130..0x0200)
// ---------------------------------------------------------------------------

register_block! {
    /// The trigger block: periodic, threshold, command and external
    /// triggers, and their counts.
    pub const TRIGGER_REGS = Trigger "TRIG" in "regs",
        fixed 0x0100..0x0130;
    registers {
        /// periodic trigger period in cycles; 0 disables periodic triggers.
        /// Non-zero values below [`TRIG_PERIOD_MIN`] are rejected.
        TRIG_PERIOD = 0x0100, rw;
        /// trigger control bits, see [`trig_ctrl`].
        TRIG_CTRL = 0x0104, rw;
        /// CCU threshold: when any active-bank CCU counter reaches this value
        /// the partition owning the CCU is triggered. Must lie in
        /// `[TRIG_THRESHOLD_MIN, TRIG_THRESHOLD_MAX]`.
        TRIG_THRESHOLD = 0x0108, rw;
        /// target mask for [`TRIG_CMD`]: bit `p` selects partition slot `p`
        /// (bit 0 = system CCUs).
        TRIG_TARGET = 0x010C, rw;
        /// register-write trigger, bits in [`trig_cmd`], applied to the CCUs of
        /// the partitions selected in [`TRIG_TARGET`].
        TRIG_CMD = 0x0110, wo;
        /// external trigger input; writing 1 triggers every unpaused partition.
        TRIG_EXTERNAL = 0x0114, wo;
        /// periodic triggers delivered.
        TRIG_COUNT_PERIODIC = 0x0118, ro64;
        /// threshold triggers delivered.
        TRIG_COUNT_THRESHOLD = 0x0120, ro64;
        /// register-write and external triggers delivered.
        TRIG_COUNT_COMMAND = 0x0128, ro64;
    }
}

register_block! {
    /// The reduction-channel buffer's device-wide registers.
    pub const RC_BUFFER_REGS = RcBuffer "RC_BUFFER" in "regs",
        fixed 0x0130..0x0200;
    registers {
        /// records routed by the reduction-channel buffer.
        RECORDS_ROUTED = 0x0130, ro64;
    }
}

/// Smallest non-zero periodic trigger period in cycles.
pub const TRIG_PERIOD_MIN: u32 = 1024;
/// Smallest threshold.
pub const TRIG_THRESHOLD_MIN: u32 = 1024;
/// Largest threshold: one more ULC transfer (at most [`ULC_COUNTER_MAX`])
/// can never carry a CCU counter at or below this value past
/// [`CCU_COUNTER_BITS`] bits.
pub const TRIG_THRESHOLD_MAX: u32 = (1 << CCU_COUNTER_BITS) - 1 - ULC_COUNTER_MAX;
/// Bits of the dither R added to each dithered period: R is uniform in
/// `0..=DITHER_MAX`, the cycle sampler's default range, so that a
/// periodic trigger does not stay in step with a loop.
pub const DITHER_BITS: u32 = 8;
/// Largest dither R in cycles.
pub const DITHER_MAX: u32 = (1 << DITHER_BITS) - 1;

/// Width of a ULC counter (a ULC has up to 45 counters of up to 9 bits).
pub const ULC_COUNTER_BITS: u32 = 9;
/// Largest ULC count, which is also the ULC transfer period in cycles
/// (the ULC transfers every 2^9 − 1 = 511 cycles, so a counter that
/// counts at most once per cycle never wraps).
pub const ULC_COUNTER_MAX: u32 = (1 << ULC_COUNTER_BITS) - 1;
/// Width of a CCU counter (28 bits).
pub const CCU_COUNTER_BITS: u32 = 28;
/// Width of the multi-bit accumulator in front of a 1-bit ULC counter
/// input (a six-bit counter whose most significant bit drives the count,
/// so the count is the signal sum modulo 32).
pub const MULTIBIT_ACC_BITS: u32 = 6;
// The catalogue's divisor for multi-bit events is the value of this
// accumulator's most significant bit (declared with the events, which
// know nothing of the register map).
const _: () = assert!(crate::events::MULTIBIT_SCALE == 1 << (MULTIBIT_ACC_BITS - 1));

/// Cycles from a flush request until a CCU's flush ack reaches the RC
/// buffer, before the CCU's own records: the ack follows the records the
/// CCU still sends, one record per cycle (see [`flush_ack_latency`]).
pub const FLUSH_ACK_BASE_CYCLES: u32 = 16;
/// Largest flush-ack latency of any CCU: a host on a step clock that
/// advances this many cycles after a flush request finds every ack in.
pub const FLUSH_ACK_MAX_CYCLES: u32 = flush_ack_latency(MAX_CCU_COUNTERS);

/// Most counters one CCU has (48 ULCs of up to 45 counters).
// 2160 fits in 32 bits (asserted); a const cannot use `try_from`.
#[allow(clippy::cast_possible_truncation)]
const MAX_CCU_COUNTERS: u32 = {
    let n = crate::events::MAX_CCU_ULCS * crate::events::MAX_ULC_COUNTERS;
    assert!(n <= u32::MAX as usize);
    n as u32
};

/// Values per CCU record, as a `u32`.
// Eight fits in 32 bits (asserted); a const cannot use `try_from`.
#[allow(clippy::cast_possible_truncation)]
const RECORD_VALUES: u32 = {
    assert!(crate::layout::RECORD_VALUES <= 64);
    crate::layout::RECORD_VALUES as u32
};

/// Cycles until the flush ack of a CCU with `counters` counters arrives:
/// [`FLUSH_ACK_BASE_CYCLES`] plus one cycle per record of eight values.
pub const fn flush_ack_latency(counters: u32) -> u32 {
    FLUSH_ACK_BASE_CYCLES + counters.div_ceil(RECORD_VALUES)
}

/// Bits of [`TRIG_CTRL`].
pub mod trig_ctrl {
    /// Periodic triggers enabled.
    pub const PERIODIC_ENABLE: u32 = 1 << 0;
    /// Period dithering: each period is P + R, R uniform in 0..=255.
    pub const DITHER: u32 = 1 << 1;
    /// Threshold triggers enabled. They are the guard that keeps a 28-bit
    /// CCU counter from ever wrapping, so the bit must be set in every
    /// `TRIG_CTRL` write (a write without it fails with EINVAL).
    pub const THRESHOLD_ENABLE: u32 = 1 << 2;
    /// All defined bits.
    pub const ALL: u32 = PERIODIC_ENABLE | DITHER | THRESHOLD_ENABLE;
}

/// Bits of [`TRIG_CMD`].
pub mod trig_cmd {
    /// ULCs send their partial counts to their CCUs first.
    pub const FLUSH_ULC: u32 = 1 << 0;
    /// CCUs swap banks and emit records of the idle bank.
    pub const TRIGGER: u32 = 1 << 1;
    /// CCUs send pending records, then an empty record (the flush ack); a
    /// CCU's ack reaches the RC buffer [`super::flush_ack_latency`] cycles
    /// after the request and sets its bit in `PART_CCU_ACKED`.
    pub const FLUSH_REQ: u32 = 1 << 2;
    /// All defined bits.
    pub const ALL: u32 = FLUSH_ULC | TRIGGER | FLUSH_REQ;
}
