//! Interrupt sources and the fixed-size interrupt record read from the node.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Interrupt source bits (in `INTR_STATUS`, `INTR_MASK`, `INTR_ACK` and
/// [`InterruptRecord::source`]).
pub mod source {
    /// The device asks host software to run a context/VM switch handshake.
    pub const SWITCH_REQUESTED: u32 = 1 << 0;
    /// A register-write or external trigger finished (records routed, RC committed).
    pub const TRIGGER_DONE: u32 = 1 << 1;
    /// A stream ring is at or above its watermark (raised once, then again
    /// only after the host moved the tail).
    pub const STREAM_WATERMARK: u32 = 1 << 2;
    /// A stream ring was full and a record was lost.
    pub const STREAM_OVERFLOW: u32 = 1 << 3;
    /// A context was created (its block is allocated and bound).
    pub const CTX_CREATED: u32 = 1 << 4;
    /// A context was destroyed (its block stays until released).
    pub const CTX_DESTROYED: u32 = 1 << 5;
    /// The device completed a switch itself after the host timed out.
    pub const SWITCH_FALLBACK: u32 = 1 << 6;
    /// An OOB mailbox command completed.
    pub const MAILBOX_DONE: u32 = 1 << 7;
    /// The device was reset.
    pub const DEVICE_RESET: u32 = 1 << 8;
    /// Every CCU assigned to a partition acknowledged the flush request of
    /// a switch in progress (`hs_state::ACKED`): the host may commit
    /// (step 6). Not raised when the device's fallback finishes the switch
    /// itself. A host that cannot poll `PART_CCU_ACKED` until the acks
    /// arrive (they take up to `FLUSH_ACK_MAX_CYCLES` of device time, and
    /// a step clock moves only when host software advances it) resumes the
    /// handshake on this record.
    pub const FLUSH_ACKED: u32 = 1 << 9;
    /// A sample buffer reached its watermark (raised once, then again only
    /// after the host moved its tail): `arg` = fill, `arg2` = buffer kind
    /// (`sampling::buf_kind`).
    pub const SAMPLE_WATERMARK: u32 = 1 << 10;
    /// A sample buffer was full and a record was lost (raised at the first
    /// loss since the buffer last stored a record or the host moved its
    /// tail): `arg` = records lost so far (low 32 bits of `BUF_LOST`),
    /// `arg2` = buffer kind.
    pub const SAMPLE_OVERFLOW: u32 = 1 << 11;
    /// All defined sources.
    pub const ALL: u32 = (1 << 12) - 1;
}

/// Names of the sources, indexed by bit number.
pub const SOURCE_NAMES: [&str; 12] = [
    "switch_requested",
    "trigger_done",
    "stream_watermark",
    "stream_overflow",
    "ctx_created",
    "ctx_destroyed",
    "switch_fallback",
    "mailbox_done",
    "device_reset",
    "flush_acked",
    "sample_watermark",
    "sample_overflow",
];

/// One interrupt occurrence, as `read()` on the device node returns it.
///
/// `seq` increases by one per record raised by the device (masked sources
/// raise none), so a reader can detect records it missed.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct InterruptRecord {
    /// Device-wide sequence number.
    pub seq: u64,
    /// Device cycle at which it was raised.
    pub cycle: u64,
    /// Exactly one bit of [`source`].
    pub source: u32,
    /// Partition slot concerned (0 = device/system).
    pub partition: u32,
    /// Source-specific argument: context id (switch, created, destroyed),
    /// lost-record count (overflow), ring fill (watermark).
    pub arg: u32,
    /// Second argument: VM id where applicable.
    pub arg2: u32,
}
const _: () = assert!(core::mem::size_of::<InterruptRecord>() == 32);
