//! Per-partition blocks: control, handshake, RC, stream ring.

use crate::regdef::register_block;

#[cfg(doc)] // the links below name the trigger block's timing
use super::trigger::{flush_ack_latency, FLUSH_ACK_MAX_CYCLES};

// ---------------------------------------------------------------------------
// Per-partition blocks: partition control, handshake, RC, stream ring.
// Slot 0 is the system channel (RC0); slots 1..=TOPO_PARTITIONS are GPU slices.
// ---------------------------------------------------------------------------

/// Base of the partition block array.
pub const PART_BASE: u64 = 0x1000;
/// Stride between partition blocks.
pub const PART_STRIDE: u64 = 0x100;
/// Maximum partition slots including the system slot 0.
pub const MAX_PARTITION_SLOTS: u32 = 16;

/// Offset of register `reg` (one of the `PART_*` offsets below) of partition slot `p`.
pub const fn part(p: u32, reg: u64) -> u64 {
    PART_BASE + p as u64 * PART_STRIDE + reg
}

register_block! {
    /// One partition slot's block: control, handshake, RC, stream ring.
    pub const PART_REGS = Partition "PART" in "regs",
        array PART_BASE, stride PART_STRIDE, count MAX_PARTITION_SLOTS;
    registers {
        /// pause bits, see [`part_ctrl`]; writable only during a switch.
        PART_CTRL = 0x00, rw;
        /// handshake state (bits 0..4, [`hs_state`]) and flags ([`part_status`]).
        PART_STATUS = 0x04, ro;
        /// VM whose block the RC is bound to (0 = none).
        PART_CUR_VM = 0x08, ro;
        /// context whose block the RC is bound to (0 = none).
        PART_CUR_CTX = 0x0C, ro;
        /// VM the pending switch brings in (0 = none).
        PART_NEXT_VM = 0x10, ro;
        /// context the pending switch brings in (0 = none, partition goes idle).
        PART_NEXT_CTX = 0x14, ro;
        /// CCUs assigned to this partition (bit = CCU index).
        PART_CCU_ASSIGNED = 0x18, ro64;
        /// CCUs whose flush ack has arrived since the last flush
        /// request; a CCU's bit is set [`flush_ack_latency`] cycles after the
        /// request (device time), so a host polls it (bounded; on a step clock it
        /// advances the clock, e.g. by [`FLUSH_ACK_MAX_CYCLES`]).
        PART_CCU_ACKED = 0x20, ro64;
        /// reduction-channel command, bits in [`rc_cmd`].
        PART_RC_CMD = 0x28, wo;
        /// VM to bind at the next re-point.
        PART_RC_BIND_VM = 0x2C, rw;
        /// context to bind at the next re-point.
        PART_RC_BIND_CTX = 0x30, rw;
        /// cycles the device waits for host software to finish a requested
        /// switch before completing it itself.
        PART_SWITCH_TIMEOUT = 0x34, rw;
        /// switches completed by the device's fallback.
        PART_FALLBACKS = 0x38, ro64;
        /// switches completed (host-driven and fallback).
        PART_SWITCHES = 0x40, ro64;
        /// RC commits (= stream records produced or lost).
        PART_COMMIT_SEQ = 0x48, ro64;
        /// stream ring head (next record index the device writes), modulo 2^32.
        PART_STREAM_HEAD = 0x50, ro;
        /// stream ring tail (next record index the host reads), modulo 2^32.
        /// Writes must lie in `[old tail, head]`.
        PART_STREAM_TAIL = 0x54, rw;
        /// ring capacity in records (a power of two). Ring 0 (RC0) receives a
        /// commit for the triggers of every partition, so it is larger: the
        /// scenario's capacity times (GPU slices + 1), rounded up to a power of
        /// two, at most `layout::STREAM_RING_MAX`.
        PART_STREAM_CAP = 0x58, ro;
        /// raise `STREAM_WATERMARK` when `head - tail` reaches this (1..=cap);
        /// raised once per drain (re-armed by a tail write).
        PART_STREAM_WATERMARK = 0x5C, rw;
        /// records lost because the ring was full.
        PART_STREAM_LOST = 0x60, ro64;
        /// memory-window offset of the ring's first slot.
        PART_STREAM_BASE = 0x68, ro64;
        /// context timeslice in cycles (0 = never rotate contexts).
        PART_TIMESLICE_CTX = 0x70, rw;
        /// VM timeslice in cycles (0 = never rotate VMs).
        PART_TIMESLICE_VM = 0x74, rw;
        /// GPC ownership mask.
        PART_GPC_MASK = 0x78, ro;
        /// memory-slice ownership mask.
        PART_MEM_MASK = 0x7C, ro;
        /// cycle at which the pending switch was requested.
        PART_SWITCH_REQ_CYCLE = 0x80, ro64;
    }
}

/// Bits of [`PART_CTRL`].
pub mod part_ctrl {
    /// Step 1: the running context is paused (generates nothing).
    pub const CTX_PAUSE: u32 = 1 << 0;
    /// Step 2: periodic triggers trigger-block→CCU are paused.
    pub const TRIG_PAUSE: u32 = 1 << 1;
    /// Step 2: periodic ULC→CCU transfers are paused.
    pub const ULC_PAUSE: u32 = 1 << 2;
    /// All defined bits.
    pub const ALL: u32 = CTX_PAUSE | TRIG_PAUSE | ULC_PAUSE;
}

/// Flag bits of [`PART_STATUS`] above the handshake state.
pub mod part_status {
    /// Mask of the handshake state field.
    pub const STATE_MASK: u32 = 0xF;
    /// The partition slot is configured (owns units).
    pub const CONFIGURED: u32 = 1 << 8;
    /// The last switch was completed by the device's fallback.
    pub const LAST_FALLBACK: u32 = 1 << 9;
    /// The pending switch is a VM switch (re-points the VM block too).
    pub const VM_SWITCH: u32 = 1 << 10;
}

/// Handshake states in `PART_STATUS & STATE_MASK`.
pub mod hs_state {
    /// No switch pending.
    pub const IDLE: u32 = 0;
    /// The device asked for a switch; the outgoing context still runs.
    pub const REQUESTED: u32 = 1;
    /// Step 1 done.
    pub const CTX_PAUSED: u32 = 2;
    /// Step 2 done.
    pub const XFER_PAUSED: u32 = 3;
    /// Step 3 done: ULC partials flushed, CCUs triggered.
    pub const TRIGGERED: u32 = 4;
    /// Steps 4-5 done: every assigned CCU acked.
    pub const ACKED: u32 = 5;
    /// Step 6a done: RC committed into the outgoing blocks.
    pub const COMMITTED: u32 = 6;
    /// Step 6b done: RC re-pointed to the incoming blocks.
    pub const REPOINTED: u32 = 7;
}

/// Bits of [`PART_RC_CMD`].
pub mod rc_cmd {
    /// Step 6a: commit the RC's counters into the bound blocks and reset
    /// them. Legal only in `hs_state::ACKED` (after the flush request and
    /// every assigned CCU's ack); anywhere else the write fails.
    pub const COMMIT: u32 = 1 << 0;
    /// Re-point the RC to `PART_RC_BIND_VM`/`PART_RC_BIND_CTX`.
    pub const REPOINT: u32 = 1 << 1;
    /// All defined bits.
    pub const ALL: u32 = COMMIT | REPOINT;
}
