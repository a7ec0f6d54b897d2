//! The host's and the out-of-band mailboxes.

use crate::regdef::register_block;

// ---------------------------------------------------------------------------
// Mailboxes, SMBPBI-like: the host's (0x0300..0x0400) and the out-of-band
// one (0x0400..0x0500). They are two register sets with the same layout and
// opcodes; a command on one never touches the other's registers. The host's
// mailbox raises `MAILBOX_DONE` when a command completes; the OOB mailbox
// raises nothing on the host's interrupt stream (its completion is its own
// `OOB_MBOX_SEQ`). The host's node (`card0`) reaches only the host's set,
// the OOB node (`card0-oob`) only the OOB set.
// ---------------------------------------------------------------------------

register_block! {
    /// The host's mailbox (`card0` only).
    pub const MAILBOX_REGS = Mailbox "MBOX" in "regs",
        fixed 0x0300..0x0400;
    registers {
        /// argument for the next command (e.g. an event id).
        MBOX_ARG = 0x0300, rw;
        /// writing an opcode from [`mbox_op`] runs the command.
        MBOX_CMD = 0x0304, wo;
        /// status of the last command, see [`mbox_status`].
        MBOX_STATUS = 0x0308, ro;
        /// commands completed on this mailbox (modulo 2^32); a caller knows
        /// its command completed when the value moved past the one it read before.
        MBOX_SEQ = 0x030C, ro;
        /// result data of the last command.
        MBOX_DATA = 0x0310, ro64;
    }
}

/// Offset of the OOB mailbox's register set from the host's.
pub const OOB_MBOX_DELTA: u64 = 0x0100;
register_block! {
    /// The out-of-band mailbox (`card0-oob` only): the host's registers,
    /// [`OOB_MBOX_DELTA`] further on.
    pub const OOB_MAILBOX_REGS = OobMailbox "OOB_MBOX" in "regs",
        fixed 0x0400..0x0500;
    registers {
        /// the OOB mailbox's [`MBOX_ARG`].
        OOB_MBOX_ARG = MBOX_ARG + OOB_MBOX_DELTA, rw;
        /// the OOB mailbox's [`MBOX_CMD`].
        OOB_MBOX_CMD = MBOX_CMD + OOB_MBOX_DELTA, wo;
        /// the OOB mailbox's [`MBOX_STATUS`].
        OOB_MBOX_STATUS = MBOX_STATUS + OOB_MBOX_DELTA, ro;
        /// the OOB mailbox's [`MBOX_SEQ`].
        OOB_MBOX_SEQ = MBOX_SEQ + OOB_MBOX_DELTA, ro;
        /// the OOB mailbox's [`MBOX_DATA`].
        OOB_MBOX_DATA = MBOX_DATA + OOB_MBOX_DELTA, ro64;
    }
}

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
