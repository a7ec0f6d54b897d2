//! Interrupt sources and the fixed-size interrupt record read from the node.
//!
//! Every open handle of `card0` has its own cursor into the device's
//! records, starting at the next record raised after `open()`: a handle
//! never sees a record raised before it was opened, and every open handle
//! sees every record raised after. A host that (re)starts therefore opens
//! its interrupt handle first and then looks at the registers for what
//! earlier records announced: `PART_STATUS` of every configured slot for a
//! switch still `REQUESTED` or left between the handshake's two batches by
//! its previous run (`TRIGGERED`, `ACKED`), the context table, the stream
//! rings.
//! `INTR_ACK` only clears the latch (`INTR_STATUS`, `INTR_PENDING`,
//! `POLLPRI`); records are delivered whether or not anyone acknowledges.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Interrupt source bits (in `INTR_STATUS`, `INTR_MASK`, `INTR_ACK` and
/// [`InterruptRecord::source`]).
pub mod source {
    /// The device asks host software to run a context/VM switch handshake
    /// (`partition`; `arg` = incoming context, 0 = the slice goes idle;
    /// `arg2` = incoming VM).
    pub const SWITCH_REQUESTED: u32 = 1 << 0;
    /// A register-write or external trigger finished (records routed, RC
    /// committed; `arg` = target mask, `arg2` = command bits, 0 for
    /// `TRIG_EXTERNAL`).
    pub const TRIGGER_DONE: u32 = 1 << 1;
    /// A commit brought a stream ring to its watermark (`partition`, `arg` =
    /// fill). Edge-triggered: raised once, at the first such commit since
    /// the host last wrote `PART_STREAM_TAIL`; a tail write re-arms it. A
    /// drain must write the tail and re-read the head in one batch until
    /// they are equal, or a record committed during the drain waits for the
    /// next commit.
    pub const STREAM_WATERMARK: u32 = 1 << 2;
    /// A stream ring was full and a record was lost (`partition`, `arg` =
    /// records lost so far, saturating); raised at the first loss since the
    /// ring last stored a record.
    pub const STREAM_OVERFLOW: u32 = 1 << 3;
    /// A context was created: its block is allocated and bound
    /// (`partition`, `arg` = context, `arg2` = VM).
    pub const CTX_CREATED: u32 = 1 << 4;
    /// A context was destroyed: its block holds its final totals until the
    /// host releases it with `CTX_CMD` (`partition`, `arg` = context,
    /// `arg2` = VM).
    pub const CTX_DESTROYED: u32 = 1 << 5;
    /// The device completed a switch itself after the host timed out
    /// (`partition`, `arg` = incoming context, `arg2` = incoming VM).
    pub const SWITCH_FALLBACK: u32 = 1 << 6;
    /// A command of the host's mailbox (`MBOX_CMD`) completed (`arg` =
    /// opcode, `arg2` = `MBOX_STATUS`). A command of the out-of-band
    /// mailbox (`OOB_MBOX_CMD`) raises nothing: no record and no
    /// `INTR_STATUS` bit (its completion is `OOB_MBOX_SEQ` alone).
    pub const MAILBOX_DONE: u32 = 1 << 7;
    /// The device was reset: settings the host programmed are gone
    /// (`TRIG_TARGET` is 0 again); re-apply them.
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
    /// A runtime-instrumentation program buffer was full (`partition` =
    /// the context's slot, `arg` = control block, `arg2` = context): the
    /// session stopped, or (`WRAP`) its next group goes to ROA. Only with
    /// `ri_ctrl::INTR_ENABLE` (see `docs/ri.md`).
    pub const RI_BUFFER_FULL: u32 = 1 << 12;
    /// A runtime-instrumentation session halted (`partition` = the slot
    /// its VM moved to, `arg` = control block, `arg2` = reason,
    /// `ri::halt_reason`). Only with `ri_ctrl::INTR_ENABLE`.
    pub const RI_HALT: u32 = 1 << 13;
    /// A marked range's count or one entry's latency crossed its threshold
    /// (`partition`; `arg` = range index | `RANGE_IRQ_LATENCY` for a
    /// latency crossing | `RANGE_IRQ_LOST` when the ring was full and the
    /// record was lost; `arg2` = the context, 0 for a confidential VM's).
    /// Exactly one per crossing, with exactly one record produced.
    pub const RANGE_THRESHOLD: u32 = 1 << 14;
    /// All defined sources.
    pub const ALL: u32 = (1 << 15) - 1;
}

/// Names of the sources, indexed by bit number.
pub const SOURCE_NAMES: [&str; 15] = [
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
    "ri_buffer_full",
    "ri_halt",
    "range_threshold",
];

/// `arg` bit of a `RANGE_THRESHOLD` record: a latency crossing (clear: a
/// count crossing).
pub const RANGE_IRQ_LATENCY: u32 = 1 << 8;
/// `arg` bit of a `RANGE_THRESHOLD` record: the ring was full and the
/// record was lost (counted in `RRING_LOST`).
pub const RANGE_IRQ_LOST: u32 = 1 << 9;

/// One interrupt occurrence, as `read()` on the device node returns it
/// (whole records only, at the handle's own cursor).
///
/// `seq` increases by one per record raised by the device (masked sources
/// raise none), so a reader can detect records it missed: the device keeps
/// the last 16,384 for slow readers, and a reader further behind sees a
/// gap and must resynchronise from registers.
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
