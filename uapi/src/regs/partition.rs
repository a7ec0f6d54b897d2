//! Per-partition blocks: control, handshake, RC, stream ring.

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

/// RW: pause bits, see [`part_ctrl`]; writable only during a switch.
pub const PART_CTRL: u64 = 0x00;
/// RO: handshake state (bits 0..4, [`hs_state`]) and flags ([`part_status`]).
pub const PART_STATUS: u64 = 0x04;
/// RO: VM whose block the RC is bound to (0 = none).
pub const PART_CUR_VM: u64 = 0x08;
/// RO: context whose block the RC is bound to (0 = none).
pub const PART_CUR_CTX: u64 = 0x0C;
/// RO: VM the pending switch brings in (0 = none).
pub const PART_NEXT_VM: u64 = 0x10;
/// RO: context the pending switch brings in (0 = none, partition goes idle).
pub const PART_NEXT_CTX: u64 = 0x14;
/// RO 64-bit: CCUs assigned to this partition (bit = CCU index).
pub const PART_CCU_ASSIGNED: u64 = 0x18;
/// RO 64-bit: CCUs whose flush ack has arrived since the last flush
/// request; a CCU's bit is set [`flush_ack_latency`] cycles after the
/// request (device time), so a host polls it (bounded; on a step clock it
/// advances the clock, e.g. by [`FLUSH_ACK_MAX_CYCLES`]).
pub const PART_CCU_ACKED: u64 = 0x20;
/// WO: reduction-channel command, bits in [`rc_cmd`].
pub const PART_RC_CMD: u64 = 0x28;
/// RW: VM to bind at the next re-point.
pub const PART_RC_BIND_VM: u64 = 0x2C;
/// RW: context to bind at the next re-point.
pub const PART_RC_BIND_CTX: u64 = 0x30;
/// RW: cycles the device waits for host software to finish a requested
/// switch before completing it itself.
pub const PART_SWITCH_TIMEOUT: u64 = 0x34;
/// RO 64-bit: switches completed by the device's fallback.
pub const PART_FALLBACKS: u64 = 0x38;
/// RO 64-bit: switches completed (host-driven and fallback).
pub const PART_SWITCHES: u64 = 0x40;
/// RO 64-bit: RC commits (= stream records produced or lost).
pub const PART_COMMIT_SEQ: u64 = 0x48;
/// RO: stream ring head (next record index the device writes), modulo 2^32.
pub const PART_STREAM_HEAD: u64 = 0x50;
/// RW: stream ring tail (next record index the host reads), modulo 2^32.
/// Writes must lie in `[old tail, head]`.
pub const PART_STREAM_TAIL: u64 = 0x54;
/// RO: ring capacity in records (a power of two). Ring 0 (RC0) receives a
/// commit for the triggers of every partition, so it is larger: the
/// scenario's capacity times (GPU slices + 1), rounded up to a power of
/// two, at most `layout::STREAM_RING_MAX`.
pub const PART_STREAM_CAP: u64 = 0x58;
/// RW: raise `STREAM_WATERMARK` when `head - tail` reaches this (1..=cap);
/// raised once per drain (re-armed by a tail write).
pub const PART_STREAM_WATERMARK: u64 = 0x5C;
/// RO 64-bit: records lost because the ring was full.
pub const PART_STREAM_LOST: u64 = 0x60;
/// RO 64-bit: memory-window offset of the ring's first slot.
pub const PART_STREAM_BASE: u64 = 0x68;
/// RW: context timeslice in cycles (0 = never rotate contexts).
pub const PART_TIMESLICE_CTX: u64 = 0x70;
/// RW: VM timeslice in cycles (0 = never rotate VMs).
pub const PART_TIMESLICE_VM: u64 = 0x74;
/// RO: GPC ownership mask.
pub const PART_GPC_MASK: u64 = 0x78;
/// RO: memory-slice ownership mask.
pub const PART_MEM_MASK: u64 = 0x7C;
/// RO 64-bit: cycle at which the pending switch was requested.
pub const PART_SWITCH_REQ_CYCLE: u64 = 0x80;

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
