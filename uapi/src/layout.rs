//! On-device memory layouts: counter blocks, stream-ring records, CCU
//! records, and the host-visible memory window that holds them.
//!
//! All multi-byte fields are little-endian (the device and every supported
//! host are little-endian; the size asserts below pin the layouts).

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::events::MAX_EVENTS;

/// Offset in the device node's file space where the memory window starts;
/// offsets below it address BAR0 registers.
pub const MEM_WINDOW_OFFSET: u64 = 1 << 32;

/// Size of one block slot in the memory window.
pub const BLOCK_SLOT_SIZE: u64 = core::mem::size_of::<BlockSlot>() as u64;
/// Slot index of the system block (RC0).
pub const SYSTEM_BLOCK_SLOT: u32 = 0;
/// Slot index of VM `v`'s block is `v` (VM ids are 1..MAX_VMS).
pub const VM_BLOCK_SLOT_BASE: u32 = 0;
/// First slot of the context-block pool.
pub const CTX_BLOCK_SLOT_BASE: u32 = 64;
/// Number of slots in the context-block pool.
pub const CTX_BLOCK_SLOTS: u32 = 4096;
/// Window offset where stream rings start.
pub const STREAM_REGION: u64 = (CTX_BLOCK_SLOT_BASE + CTX_BLOCK_SLOTS) as u64 * BLOCK_SLOT_SIZE;
/// Largest ring capacity in records.
pub const STREAM_RING_MAX: u32 = 8192;
/// Window bytes reserved per partition slot's ring (the ring may be smaller).
pub const STREAM_RING_SPAN: u64 = STREAM_RING_MAX as u64 * STREAM_SLOT_SIZE;
/// Size of one stream-ring slot.
pub const STREAM_SLOT_SIZE: u64 = core::mem::size_of::<StreamSlot>() as u64;

/// Window offset of block slot `slot`.
pub const fn block_slot_offset(slot: u32) -> u64 {
    slot as u64 * BLOCK_SLOT_SIZE
}

/// Window offset of ring slot `index` of partition slot `p`'s stream ring.
pub const fn stream_slot_offset(p: u32, index: u32) -> u64 {
    STREAM_REGION + p as u64 * STREAM_RING_SPAN + index as u64 * STREAM_SLOT_SIZE
}

/// Magic of a plaintext counter block: "gBLK".
pub const BLOCK_MAGIC: u32 = u32::from_le_bytes(*b"gBLK");
/// Magic of a plaintext stream record: "gREC".
pub const RECORD_MAGIC: u32 = u32::from_le_bytes(*b"gREC");

/// Kinds of counter block.
pub mod block_kind {
    /// The system block (RC0): everything counted on the device.
    pub const SYSTEM: u16 = 1;
    /// A VM block: everything its contexts were counted for.
    pub const VM: u16 = 2;
    /// A context block.
    pub const CONTEXT: u16 = 3;
}

/// A counter block as the device keeps it (plaintext).
///
/// Invariants: `counters[e]` is the cumulative count of event `e` committed
/// into this block; it only grows, by atomic adds from one RC at a time;
/// `commit_seq` counts the commits that touched the block.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct Block {
    /// [`BLOCK_MAGIC`] once the slot is in use, 0 when free.
    pub magic: u32,
    /// One of [`block_kind`].
    pub kind: u16,
    /// Layout version, [`crate::ABI_MAJOR`].
    pub version: u16,
    /// VM id for VM blocks, context id for context blocks, 0 for system.
    pub id: u32,
    /// Owning VM (context blocks), the VM itself (VM blocks), 0 (system).
    pub vm: u32,
    /// Number of commits added into this block.
    pub commit_seq: u64,
    /// Device cycle of the last commit.
    pub last_commit_cycle: u64,
    /// Cumulative counts indexed by event id.
    pub counters: [u64; MAX_EVENTS],
}
const _: () = assert!(core::mem::size_of::<Block>() == 544);

/// Envelope in front of every host-visible block or stream record.
///
/// For a confidential VM the payload that follows is AES-256-GCM ciphertext
/// and the 16-byte tag follows the payload. The key is the VM's *session
/// key*: `HKDF-SHA256(ikm = K_vm, salt = session (8 bytes LE), info =
/// "gpupm-cc-v1" || vm (4 bytes LE) || key_epoch (4 bytes LE))`, 32 bytes,
/// where `K_vm` is the VM's key of that epoch (epoch 1 = the key provisioned
/// when the VM was created) and `session = session_hi << 32 | session_lo`
/// is the device's boot id, drawn afresh at every device start and reset.
/// The nonce is `vm (4 bytes LE) || counter (8 bytes LE)` with a counter
/// that only increases within a session, so (session, key_epoch, nonce)
/// never repeats and no (key, nonce) pair is ever reused. The whole 32-byte
/// envelope is the associated data (see `docs/confidential.md`).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct Envelope {
    /// VM the payload belongs to (0 = system).
    pub vm: u32,
    /// Bits in [`envelope_flags`].
    pub flags: u32,
    /// Key epoch the payload was encrypted under (confidential only).
    pub key_epoch: u32,
    /// Low half of the session (boot) id (confidential only, else 0).
    pub session_lo: u32,
    /// AES-GCM nonce (confidential only, else 0).
    pub nonce: [u8; 12],
    /// High half of the session (boot) id (confidential only, else 0).
    pub session_hi: u32,
}
const _: () = assert!(core::mem::size_of::<Envelope>() == 32);

impl Envelope {
    /// The session (boot) id the payload was sealed in.
    pub const fn session(&self) -> u64 {
        (self.session_hi as u64) << 32 | self.session_lo as u64
    }
}

/// Bytes of the envelope bound as AES-GCM associated data: all of it.
pub const ENVELOPE_AAD_LEN: usize = 32;

/// `info` prefix of the session-key derivation (HKDF-SHA256).
pub const SESSION_KEY_INFO: &[u8] = b"gpupm-cc-v1";

/// Bits of [`Envelope::flags`].
pub mod envelope_flags {
    /// The slot holds data.
    pub const VALID: u32 = 1 << 0;
    /// The payload is ciphertext followed by a tag.
    pub const ENCRYPTED: u32 = 1 << 1;
    /// A confidential VM's slot while it has no session (ABI 1.11): set
    /// with `ENCRYPTED`; the payload, tag, key epoch, session and nonce
    /// are all 0. The counts stay inside the device and appear, sealed,
    /// once the VM's tenant establishes a session.
    pub const WITHHELD: u32 = 1 << 2;
}

/// A block slot in the memory window: envelope, block, GCM tag.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct BlockSlot {
    /// Envelope.
    pub envelope: Envelope,
    /// The block bytes (ciphertext when encrypted).
    pub payload: [u8; core::mem::size_of::<Block>()],
    /// GCM tag (0 when not encrypted).
    pub tag: [u8; 16],
}
const _: () = assert!(core::mem::size_of::<BlockSlot>() == 592);

impl BlockSlot {
    /// The plaintext block of the slot: `None` when it is encrypted (a
    /// confidential VM's), or empty or corrupt (no [`BLOCK_MAGIC`]).
    pub fn plain_block(&self) -> Option<Block> {
        if self.envelope.flags & envelope_flags::ENCRYPTED != 0 {
            return None;
        }
        let block = Block::read_from_bytes(&self.payload).ok()?;
        (block.magic == BLOCK_MAGIC).then_some(block)
    }
}

/// A stream-ring commit record: the deltas one RC commit added.
///
/// Invariants: for one ring, `seq` increases by one per commit, including
/// commits whose record was lost to overflow, so `seq` gaps equal the lost
/// count; summing `deltas` over all records of a context (plus lost records)
/// gives its block.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct StreamRecord {
    /// [`RECORD_MAGIC`].
    pub magic: u32,
    /// Partition slot of the RC.
    pub partition: u16,
    /// Bits in [`record_flags`].
    pub flags: u16,
    /// VM the commit went to (0 = none / system).
    pub vm: u32,
    /// Context the commit went to (0 = none).
    pub ctx: u32,
    /// Commit sequence number of the RC.
    pub seq: u64,
    /// First cycle covered (the previous commit's cycle).
    pub start_cycle: u64,
    /// Cycle of this commit.
    pub end_cycle: u64,
    /// Reserved, 0.
    pub reserved: u64,
    /// Per-event deltas.
    pub deltas: [u64; MAX_EVENTS],
}
const _: () = assert!(core::mem::size_of::<StreamRecord>() == 560);

/// Bits of [`StreamRecord::flags`].
pub mod record_flags {
    /// The commit was step 6 of a context/VM switch.
    pub const SWITCH: u16 = 1 << 0;
    /// The commit followed a fallback-completed switch.
    pub const FALLBACK: u16 = 1 << 1;
    /// The clock ran at secondary (throttled) capability at commit time.
    pub const SECONDARY_CLOCK: u16 = 1 << 2;
    /// Caused by a threshold trigger.
    pub const THRESHOLD: u16 = 1 << 3;
}

/// A stream-ring slot in the memory window.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct StreamSlot {
    /// Envelope.
    pub envelope: Envelope,
    /// The record bytes (ciphertext when encrypted).
    pub payload: [u8; core::mem::size_of::<StreamRecord>()],
    /// GCM tag (0 when not encrypted).
    pub tag: [u8; 16],
}
const _: () = assert!(core::mem::size_of::<StreamSlot>() == 608);

/// Values per CCU record.
pub const RECORD_VALUES: usize = 8;

/// A record a CCU sends to the reduction-channel buffer: eight consecutive
/// counter values of one bank, or (with `FLUSH_ACK`) no data at all.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct CcuRecord {
    /// Sending CCU.
    pub ccu: u16,
    /// Bits in [`ccu_record_flags`].
    pub flags: u16,
    /// Index of the first counter (within the CCU) this record carries.
    pub first_counter: u16,
    /// Number of valid values (0..=8).
    pub valid: u16,
    /// Counter values (28-bit).
    pub values: [u32; RECORD_VALUES],
}
const _: () = assert!(core::mem::size_of::<CcuRecord>() == 40);

/// Bits of [`CcuRecord::flags`].
pub mod ccu_record_flags {
    /// The empty record that acknowledges a flush request.
    pub const FLUSH_ACK: u16 = 1 << 0;
}

// ---------------------------------------------------------------------------
// Runtime-instrumentation report-group records (`crate::ri`)
// ---------------------------------------------------------------------------

/// Record types: the first byte of every 16-byte report-group record.
pub mod ri_record {
    /// Padding: the collection buffer held too few records to fill the group.
    pub const FILL: u8 = 0x00;
    /// First record of a group stored at ROA ([`super::RiBeginRecord`]).
    pub const BEGIN: u8 = 0x02;
    /// First record of every other group ([`super::RiTimestampRecord`]).
    pub const TIMESTAMP: u8 = 0x03;
    /// Last record of every group: the sample ([`super::RiInstructionRecord`]).
    pub const INSTRUCTION: u8 = 0x04;
    /// A value put into the collection buffer by RIEMIT or a marker block
    /// ([`super::RiEmitRecord`]).
    pub const EMIT: u8 = 0x10;
    /// The context was switched out mid-interval ([`super::RiAbortRecord`]).
    pub const ABORT: u8 = 0x11;
}

/// Bits of the `flags` of begin and timestamp records.
pub mod ri_group_flags {
    /// T: the sample point ran at secondary (throttled) clock capability
    /// (0 = primary).
    pub const SECONDARY: u8 = 1 << 0;
    /// S (begin record): the buffer was full and the session stopped.
    pub const STOPPED: u8 = 1 << 1;
    /// H (begin record): the session halted.
    pub const HALTED: u8 = 1 << 2;
}

/// Bits of the `flags` of instruction records.
pub mod ri_sample_flags {
    /// The sample point was a marker block (directed sampling).
    pub const DIRECTED: u8 = 1 << 0;
    /// The sample point ran at secondary clock capability.
    pub const SECONDARY: u8 = 1 << 1;
}

/// Values of an emit record's `source`.
pub mod ri_emit_source {
    /// A write of `RI_EMIT` (the daemon, on a tenant's RIEMIT).
    pub const REGISTER: u8 = 0;
    /// A marker block of the program.
    pub const MARKER: u8 = 1;
}

/// Begin record: the first record of the group stored at ROA. The device
/// rewrites it whenever it stores a later group (NRG) or stops or halts
/// the session (S, H), so it always holds the current group count and
/// the session's stop and halt bits.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct RiBeginRecord {
    /// [`ri_record::BEGIN`].
    pub kind: u8,
    /// Bits of [`ri_group_flags`].
    pub flags: u8,
    /// RGS of every group in the buffer.
    pub rgs: u8,
    /// Capability version of the partition the session began on.
    pub version: u8,
    /// NRG: groups stored since the session began (this one included).
    pub groups: u32,
    /// Device cycle at which the group was stored (the time of day).
    pub time: u64,
}
const _: () = assert!(core::mem::size_of::<RiBeginRecord>() == 16);

/// Timestamp record: the first record of every group not at ROA.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct RiTimestampRecord {
    /// [`ri_record::TIMESTAMP`].
    pub kind: u8,
    /// Bits of [`ri_group_flags`] (only `SECONDARY`).
    pub flags: u8,
    /// Reserved, 0.
    pub reserved: u8,
    /// Capability version of the partition the sample ran on.
    pub version: u8,
    /// Number of this group in the session (1-based; NRG after it).
    pub group: u32,
    /// Device cycle of the sample point.
    pub time: u64,
}
const _: () = assert!(core::mem::size_of::<RiTimestampRecord>() == 16);

/// Instruction record: the last record of every group, the sample.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct RiInstructionRecord {
    /// [`ri_record::INSTRUCTION`].
    pub kind: u8,
    /// Bits of [`ri_sample_flags`].
    pub flags: u8,
    /// Kernel executing at the sample point (the instruction address).
    pub kernel: u16,
    /// Block executing (index within the kernel).
    pub block: u16,
    /// Partition slot the context ran on.
    pub partition: u16,
    /// Context cycle (cycles the context has run) of the sample point.
    pub ctx_cycle: u64,
}
const _: () = assert!(core::mem::size_of::<RiInstructionRecord>() == 16);

/// Emit record: a value collected by RIEMIT or a marker block.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct RiEmitRecord {
    /// [`ri_record::EMIT`].
    pub kind: u8,
    /// One of [`ri_emit_source`].
    pub source: u8,
    /// Kernel executing when the value was collected (0 for a register
    /// emit while the context was not running).
    pub kernel: u16,
    /// Block executing.
    pub block: u16,
    /// Reserved, 0.
    pub reserved: u16,
    /// The value: the `RI_EMIT` write, or for a marker the number of
    /// marker-block entries of the context since the session began.
    pub data: u64,
}
const _: () = assert!(core::mem::size_of::<RiEmitRecord>() == 16);

/// Abort record: the context was switched out while an interval was in
/// progress (the model's analogue of a transaction abort).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct RiAbortRecord {
    /// [`ri_record::ABORT`].
    pub kind: u8,
    /// Reserved, 0.
    pub reserved: u8,
    /// Kernel executing when the context stopped.
    pub kernel: u16,
    /// Block executing.
    pub block: u16,
    /// Partition slot the context left.
    pub partition: u16,
    /// Context cycle at which it stopped.
    pub ctx_cycle: u64,
}
const _: () = assert!(core::mem::size_of::<RiAbortRecord>() == 16);
