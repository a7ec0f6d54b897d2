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

/// Value of the `ID` register: ASCII "gPMU" little-endian.
pub const DEVICE_MAGIC: u32 = u32::from_le_bytes(*b"gPMU");

// ---------------------------------------------------------------------------
// Identity, topology, clock (0x0000..0x0100)
// ---------------------------------------------------------------------------

/// RO: [`DEVICE_MAGIC`].
pub const ID: u64 = 0x0000;
/// RO: [`crate::ABI_VERSION`] of the device.
pub const ABI_VERSION: u64 = 0x0004;
/// RO: number of GPCs.
pub const TOPO_GPCS: u64 = 0x0008;
/// RO: number of SMs.
pub const TOPO_SMS: u64 = 0x000C;
/// RO: number of L2 slices.
pub const TOPO_L2_SLICES: u64 = 0x0010;
/// RO: number of frame-buffer partitions.
pub const TOPO_FB_PARTITIONS: u64 = 0x0014;
/// RO: number of NVLinks.
pub const TOPO_NVLINKS: u64 = 0x0018;
/// RO: number of copy engines.
pub const TOPO_COPY_ENGINES: u64 = 0x001C;
/// RO: number of CCUs.
pub const TOPO_CCUS: u64 = 0x0020;
/// RO: number of partition slots (RC1..RCn); RC0 is the system channel.
pub const TOPO_PARTITIONS: u64 = 0x0024;
/// RO: number of events in the catalogue ([`crate::events::EVENT_COUNT`]).
pub const TOPO_EVENTS: u64 = 0x0028;
/// RO: number of memory slices.
pub const TOPO_MEMORY_SLICES: u64 = 0x002C;
/// RO: nominal clock frequency in kHz.
pub const CLOCK_KHZ: u64 = 0x0030;
/// RO: current clock capability, see [`clock_cap`].
pub const CLOCK_CAP: u64 = 0x0034;
/// RO 64-bit: current device cycle.
pub const CYCLE: u64 = 0x0038;
/// RO: device status bits, see [`device_status`].
pub const DEVICE_STATUS: u64 = 0x0040;
/// WO: write [`RESET_MAGIC`] to reset counters, blocks and rings.
pub const RESET: u64 = 0x0044;
/// RO: number of VM table entries.
pub const TOPO_VMS: u64 = 0x0048;
/// RO: number of context table entries.
pub const TOPO_CONTEXTS: u64 = 0x004C;
/// RO 64-bit: CCU counter wraps ever observed (must stay 0; a model self-check).
pub const CCU_WRAPS: u64 = 0x0050;

/// Value that must be written to [`RESET`].
pub const RESET_MAGIC: u32 = 0x5245_5345; // "ESER"

/// Bits of [`CLOCK_CAP`].
pub mod clock_cap {
    /// Running at primary (boost) capability.
    pub const PRIMARY: u32 = 0;
    /// Running at secondary (throttled) capability.
    pub const SECONDARY: u32 = 1;
}

/// Bits of [`DEVICE_STATUS`].
pub mod device_status {
    /// The clock runs in step mode (advanced only by the host).
    pub const STEP_CLOCK: u32 = 1 << 0;
    /// At least one switch was completed by the device's fallback.
    pub const FALLBACK_SEEN: u32 = 1 << 1;
}

// ---------------------------------------------------------------------------
// Trigger block (0x0100..0x0200)
// ---------------------------------------------------------------------------

/// RW: periodic trigger period in cycles; 0 disables periodic triggers.
/// Non-zero values below [`TRIG_PERIOD_MIN`] are rejected.
pub const TRIG_PERIOD: u64 = 0x0100;
/// RW: trigger control bits, see [`trig_ctrl`].
pub const TRIG_CTRL: u64 = 0x0104;
/// RW: CCU threshold: when any active-bank CCU counter reaches this value
/// the partition owning the CCU is triggered. Must lie in
/// `[TRIG_THRESHOLD_MIN, TRIG_THRESHOLD_MAX]`.
pub const TRIG_THRESHOLD: u64 = 0x0108;
/// RW: target mask for [`TRIG_CMD`]: bit `p` selects partition slot `p`
/// (bit 0 = system CCUs).
pub const TRIG_TARGET: u64 = 0x010C;
/// WO: register-write trigger, bits in [`trig_cmd`], applied to the CCUs of
/// the partitions selected in [`TRIG_TARGET`].
pub const TRIG_CMD: u64 = 0x0110;
/// WO: external trigger input; writing 1 triggers every unpaused partition.
pub const TRIG_EXTERNAL: u64 = 0x0114;
/// RO 64-bit: periodic triggers delivered.
pub const TRIG_COUNT_PERIODIC: u64 = 0x0118;
/// RO 64-bit: threshold triggers delivered.
pub const TRIG_COUNT_THRESHOLD: u64 = 0x0120;
/// RO 64-bit: register-write and external triggers delivered.
pub const TRIG_COUNT_COMMAND: u64 = 0x0128;
/// RO 64-bit: records routed by the reduction-channel buffer.
pub const RECORDS_ROUTED: u64 = 0x0130;

/// Smallest non-zero periodic trigger period in cycles.
pub const TRIG_PERIOD_MIN: u32 = 1024;
/// Smallest threshold.
pub const TRIG_THRESHOLD_MIN: u32 = 1024;
/// Largest threshold: one more ULC transfer (at most [`ULC_COUNTER_MAX`])
/// can never carry a CCU counter at or below this value past
/// [`CCU_COUNTER_BITS`] bits.
pub const TRIG_THRESHOLD_MAX: u32 = (1 << CCU_COUNTER_BITS) - 1 - ULC_COUNTER_MAX;
/// Bits of the dither R added to each dithered period: R is uniform in
/// `0..=DITHER_MAX` (the "R uniform in 0..=255" of seed 004's sampler).
pub const DITHER_BITS: u32 = 8;
/// Largest dither R in cycles.
pub const DITHER_MAX: u32 = (1 << DITHER_BITS) - 1;

/// Width of a ULC counter (seed 000 ¶57: "up to 45 counters of up to 9 bits").
pub const ULC_COUNTER_BITS: u32 = 9;
/// Largest ULC count, which is also the ULC transfer period in cycles
/// (seed 000 ¶57: the ULC transfers every 2^9 − 1 = 511 cycles, so a
/// counter that counts at most once per cycle never wraps).
pub const ULC_COUNTER_MAX: u32 = (1 << ULC_COUNTER_BITS) - 1;
/// Width of a CCU counter (seed 000 ¶59: 28 bits).
pub const CCU_COUNTER_BITS: u32 = 28;
/// Width of the multi-bit accumulator in front of a 1-bit ULC counter
/// input (seed 000 ¶56: a six-bit counter whose most significant bit
/// drives the count, so the count is the signal sum modulo 32).
pub const MULTIBIT_ACC_BITS: u32 = 6;

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

// ---------------------------------------------------------------------------
// Interrupts (0x0200..0x0300)
// ---------------------------------------------------------------------------

/// RO: latched interrupt sources, bits in [`crate::intr::source`].
pub const INTR_STATUS: u64 = 0x0200;
/// RW: 1 = source masked (does not wake, no records delivered).
pub const INTR_MASK: u64 = 0x0204;
/// W1C: acknowledges latched sources.
pub const INTR_ACK: u64 = 0x0208;
/// RO: `INTR_STATUS & !INTR_MASK`.
pub const INTR_PENDING: u64 = 0x020C;
/// RO 64-bit: sequence number of the last interrupt record raised.
pub const INTR_SEQ: u64 = 0x0210;

// ---------------------------------------------------------------------------
// Mailboxes, SMBPBI-like: the host's (0x0300..0x0400) and the out-of-band
// one (0x0400..0x0500). They are two register sets with the same layout and
// opcodes; a command on one never touches the other's registers. The host's
// mailbox raises `MAILBOX_DONE` when a command completes; the OOB mailbox
// raises nothing on the host's interrupt stream (its completion is its own
// `OOB_MBOX_SEQ`). The host's node (`card0`) reaches only the host's set,
// the OOB node (`card0-oob`) only the OOB set.
// ---------------------------------------------------------------------------

/// RW: argument for the next command (e.g. an event id).
pub const MBOX_ARG: u64 = 0x0300;
/// WO: writing an opcode from [`mbox_op`] runs the command.
pub const MBOX_CMD: u64 = 0x0304;
/// RO: status of the last command, see [`mbox_status`].
pub const MBOX_STATUS: u64 = 0x0308;
/// RO: commands completed on this mailbox (modulo 2^32); a caller knows
/// its command completed when the value moved past the one it read before.
pub const MBOX_SEQ: u64 = 0x030C;
/// RO 64-bit: result data of the last command.
pub const MBOX_DATA: u64 = 0x0310;

/// Offset of the OOB mailbox's register set from the host's.
pub const OOB_MBOX_DELTA: u64 = 0x0100;
/// RW: the OOB mailbox's [`MBOX_ARG`].
pub const OOB_MBOX_ARG: u64 = MBOX_ARG + OOB_MBOX_DELTA;
/// WO: the OOB mailbox's [`MBOX_CMD`].
pub const OOB_MBOX_CMD: u64 = MBOX_CMD + OOB_MBOX_DELTA;
/// RO: the OOB mailbox's [`MBOX_STATUS`].
pub const OOB_MBOX_STATUS: u64 = MBOX_STATUS + OOB_MBOX_DELTA;
/// RO: the OOB mailbox's [`MBOX_SEQ`].
pub const OOB_MBOX_SEQ: u64 = MBOX_SEQ + OOB_MBOX_DELTA;
/// RO 64-bit: the OOB mailbox's [`MBOX_DATA`].
pub const OOB_MBOX_DATA: u64 = MBOX_DATA + OOB_MBOX_DELTA;

/// Mailbox opcodes for [`MBOX_CMD`] and [`OOB_MBOX_CMD`].
pub mod mbox_op {
    /// DATA = ABI version << 32 | number of events.
    pub const GET_CAPS: u32 = 0x01;
    /// DATA = system (RC0) total of event ARG: the committed total of the
    /// work of non-confidential VMs and of the device-level units (a
    /// confidential VM's counts never reach RC0).
    pub const READ_SYSTEM_COUNTER: u32 = 0x02;
    /// DATA = cycles with no context running on any partition.
    pub const READ_IDLE_CYCLES: u32 = 0x03;
    /// DATA = current device cycle.
    pub const READ_CYCLE: u32 = 0x04;
    /// DATA = number of fallback-completed switches, all partitions.
    pub const READ_FALLBACKS: u32 = 0x05;
}

/// Values of [`MBOX_STATUS`] and [`OOB_MBOX_STATUS`].
pub mod mbox_status {
    /// No command run yet.
    pub const IDLE: u32 = 0;
    /// Last command succeeded; DATA holds its result.
    pub const OK: u32 = 1;
    /// Unknown opcode.
    pub const ERR_OPCODE: u32 = 2;
    /// Argument out of range.
    pub const ERR_ARG: u32 = 3;
}

// ---------------------------------------------------------------------------
// Rekey staging (0x0500..0x0600): a confidential VM's next key, sealed under
// its current session key, staged here and installed by the VM entry's
// `VM_KEY_COMMIT` (see docs/confidential.md). Write-only: reads return 0.
// A refused commit leaves them as they are; a successful one clears them.
// ---------------------------------------------------------------------------

/// WO: the tenant-chosen 64 bits of the rekey blob's AES-GCM nonce, two
/// words (low word first). The nonce is [`REKEY_NONCE_DOMAIN`] (LE)
/// followed by these 8 bytes.
pub const REKEY_NONCE: u64 = 0x0500;
/// WO: eight words: the new AES-256 key encrypted under the current
/// session key (word `i` = bytes `4i..4i+4`, little-endian).
pub const REKEY_KEY: u64 = 0x0508;
/// WO: four words: the AES-GCM tag of the sealed key.
pub const REKEY_TAG: u64 = 0x0528;
/// Words in [`REKEY_NONCE`].
pub const REKEY_NONCE_WORDS: usize = 2;
/// Words in [`REKEY_KEY`].
pub const REKEY_KEY_WORDS: usize = 8;
/// Words in [`REKEY_TAG`].
pub const REKEY_TAG_WORDS: usize = 4;
/// First four nonce bytes (LE) of every rekey blob. The device's own
/// nonces start with the VM id (below [`MAX_VMS`]), so a tenant's rekey
/// nonce can never equal a nonce the device uses under the same key.
pub const REKEY_NONCE_DOMAIN: u32 = u32::MAX;

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

// ---------------------------------------------------------------------------
// CCUs (0x3000..0x4000)
// ---------------------------------------------------------------------------

/// Base of the CCU block array.
pub const CCU_BASE: u64 = 0x3000;
/// Stride between CCU blocks.
pub const CCU_STRIDE: u64 = 0x40;
/// Maximum CCUs.
pub const MAX_CCUS: u32 = 64;

/// Offset of register `reg` of CCU `c`.
pub const fn ccu(c: u32, reg: u64) -> u64 {
    CCU_BASE + c as u64 * CCU_STRIDE + reg
}

/// RO: partition slot owning this CCU (0 = system).
pub const CCU_OWNER: u64 = 0x00;
/// RO: number of ULCs served.
pub const CCU_ULCS: u64 = 0x04;
/// RO: number of counters (sum of the ULCs' counters).
pub const CCU_COUNTERS: u64 = 0x08;
/// RO: index of the active bank (0 or 1).
pub const CCU_ACTIVE_BANK: u64 = 0x0C;
/// RW: index of the 32-bit mask word that `CCU_MASK_DATA` accesses.
pub const CCU_MASK_INDEX: u64 = 0x10;
/// RW: mask word: bit i masks counter `32 * index + i` (1 = masked).
pub const CCU_MASK_DATA: u64 = 0x14;
/// RO 64-bit: records emitted.
pub const CCU_RECORDS: u64 = 0x18;
/// RO: unit group kind, see [`ccu_group`].
pub const CCU_GROUP: u64 = 0x20;
/// RO: unit group index within its kind.
pub const CCU_GROUP_INDEX: u64 = 0x24;

/// Values of [`CCU_GROUP`].
pub mod ccu_group {
    /// One GPC's SMs.
    pub const GPC: u32 = 0;
    /// One memory slice: L2 slices, FB partitions and copy engines.
    pub const MEMORY_SLICE: u32 = 1;
    /// Device-level shared units (NVLink), counted into RC0 only.
    pub const SYSTEM: u32 = 2;
    /// A partition's lane of the context-filtered shared units (PCIe).
    pub const SHARED_LANE: u32 = 3;
}

// ---------------------------------------------------------------------------
// VM table (0x4000..0x5000)
// ---------------------------------------------------------------------------

/// Base of the VM table; VM ids start at 1, entry `v` is at `VM_BASE + v * VM_STRIDE`.
pub const VM_BASE: u64 = 0x4000;
/// Stride between VM entries.
pub const VM_STRIDE: u64 = 0x40;
/// Largest VM id + 1.
pub const MAX_VMS: u32 = 64;

/// Offset of register `reg` of VM `v`.
pub const fn vm(v: u32, reg: u64) -> u64 {
    VM_BASE + v as u64 * VM_STRIDE + reg
}

/// RO: partition slot the VM is bound to (0 = entry unused).
pub const VM_PARTITION: u64 = 0x00;
/// RO: flags, see [`vm_flags`].
pub const VM_FLAGS: u64 = 0x04;
/// RO 64-bit: memory-window offset of the VM block slot.
pub const VM_BLOCK: u64 = 0x08;
/// WO: 1 = open the rekey blob staged in `REKEY_*` with this VM's current
/// session key and, only if it opens, install the key it carries (the key
/// epoch increments). A blob that does not open (forged, replayed, for
/// another VM, epoch or session, or malformed) fails with EINVAL and
/// changes nothing. Confidential VMs only.
pub const VM_KEY_COMMIT: u64 = 0x30;
/// RO: key epoch (number of keys installed, 1 = the provisioned key).
pub const VM_KEY_EPOCH: u64 = 0x34;
/// RO 64-bit: the device's current session (boot) id, drawn from the
/// operating system's random source at device start and at every reset;
/// 0 for a VM that is not confidential.
pub const VM_KEY_SESSION: u64 = 0x38;

/// Bits of [`VM_FLAGS`].
pub mod vm_flags {
    /// The VM is confidential: its blocks and stream records leave the
    /// device only as AES-256-GCM ciphertext.
    pub const CONFIDENTIAL: u32 = 1 << 0;
}

// ---------------------------------------------------------------------------
// Context table (0x8000..0x28000)
// ---------------------------------------------------------------------------

/// Base of the context table; context ids start at 1.
pub const CTX_BASE: u64 = 0x8000;
/// Stride between context entries.
pub const CTX_STRIDE: u64 = 0x20;
/// Largest context id + 1.
pub const MAX_CONTEXTS: u32 = 4096;

/// Offset of register `reg` of context `c`.
pub const fn ctx(c: u32, reg: u64) -> u64 {
    CTX_BASE + c as u64 * CTX_STRIDE + reg
}

/// RO: VM owning the context.
pub const CTX_VM: u64 = 0x00;
/// RO: lifecycle state, see [`ctx_state`].
pub const CTX_STATE: u64 = 0x04;
/// RO 64-bit: memory-window offset of the context block slot.
pub const CTX_BLOCK: u64 = 0x08;
/// WO: context command, see [`ctx_cmd`].
pub const CTX_CMD: u64 = 0x10;
/// RO: program the context runs: 0 = none (it counts by its profile's
/// rates alone), else 1 + its index in the scenario's program table
/// (`Scenario::programs`: the `[[program]]` entries in file order, then the
/// programs generated for churn contexts), see `docs/sampling.md`.
pub const CTX_PROGRAM: u64 = 0x14;
/// RO 64-bit: cycle at which the context was created. Context ids are
/// reused after release; (id, created cycle) names one context instance.
pub const CTX_CREATED_CYCLE: u64 = 0x18;

/// Values of [`CTX_STATE`].
pub mod ctx_state {
    /// Entry unused.
    pub const FREE: u32 = 0;
    /// Context exists and may be scheduled.
    pub const ACTIVE: u32 = 1;
    /// Context was destroyed; its block stays readable until released.
    pub const DESTROYED: u32 = 2;
}

/// Values of [`CTX_CMD`].
pub mod ctx_cmd {
    /// Release a destroyed context's block; the entry becomes free.
    pub const RELEASE: u32 = 1;
}

const _: () = assert!(CTX_BASE + MAX_CONTEXTS as u64 * CTX_STRIDE <= BAR0_SIZE);
const _: () = assert!(VM_BASE + MAX_VMS as u64 * VM_STRIDE <= CTX_BASE);
const _: () = assert!(CCU_BASE + MAX_CCUS as u64 * CCU_STRIDE <= VM_BASE);
const _: () =
    assert!(PART_BASE + MAX_PARTITION_SLOTS as u64 * PART_STRIDE <= crate::sampling::SAMP_BASE);

/// Whether `offset` names a 64-bit register (readable with one 8-byte access).
pub fn is_64bit(offset: u64) -> bool {
    const GLOBAL: [u64; 7] = [
        CYCLE,
        CCU_WRAPS,
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
