//! The host's and the out-of-band mailboxes.

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
