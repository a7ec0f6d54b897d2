//! The host's and the out-of-band mailboxes.

use crate::regdef::register_block;

// ---------------------------------------------------------------------------
// Mailboxes, SMBPBI-like: the host's (0x0300..0x0400) and the out-of-band
// one (0x0400..0x0500). They are two register sets; a command on one never
// touches the other's registers. The OOB mailbox has the host's five
// registers at the same place in its block and, from ABI 1.12, a second
// argument and three more result words of its own (so that one command
// answers four counters), and the out-of-band commands (`mbox_op::OOB_*`)
// that read the device's out-of-band reduction channel (`docs/oob.md`).
// The host's mailbox raises `MAILBOX_DONE` when a command completes; the
// OOB mailbox raises nothing on the host's interrupt stream (its completion
// is its own `OOB_MBOX_SEQ`). The host's node (`card0`) reaches only the
// host's set, the OOB node (`card0-oob`) only the OOB set: the whole of
// `OOB_MAILBOX_REGS`' range.
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
    /// [`OOB_MBOX_DELTA`] further on, then a second argument and three
    /// more result words of its own (ABI 1.12). `docs/oob.md` describes
    /// every command.
    pub const OOB_MAILBOX_REGS = OobMailbox "OOB_MBOX" in "regs",
        fixed 0x0400..0x0500;
    registers {
        /// the OOB mailbox's [`MBOX_ARG`]: the first argument.
        OOB_MBOX_ARG = MBOX_ARG + OOB_MBOX_DELTA, rw;
        /// the OOB mailbox's [`MBOX_CMD`]: writing an opcode from
        /// [`mbox_op`] runs the command within the write.
        OOB_MBOX_CMD = MBOX_CMD + OOB_MBOX_DELTA, wo;
        /// the OOB mailbox's [`MBOX_STATUS`].
        OOB_MBOX_STATUS = MBOX_STATUS + OOB_MBOX_DELTA, ro;
        /// the OOB mailbox's [`MBOX_SEQ`]: every command, refused or not,
        /// moves it by one.
        OOB_MBOX_SEQ = MBOX_SEQ + OOB_MBOX_DELTA, ro;
        /// the OOB mailbox's [`MBOX_DATA`]: the first result word.
        OOB_MBOX_DATA = MBOX_DATA + OOB_MBOX_DELTA, ro64;
        /// the second argument of the commands that take one (a scope, a
        /// VM filter, a snapshot tag); ABI 1.12.
        OOB_MBOX_ARG2 = 0x0418, rw;
        /// the second result word of the last command (0 when it failed
        /// or has none); ABI 1.12.
        OOB_MBOX_DATA1 = 0x0420, ro64;
        /// the third result word of the last command; ABI 1.12.
        OOB_MBOX_DATA2 = 0x0428, ro64;
        /// the fourth result word of the last command; ABI 1.12.
        OOB_MBOX_DATA3 = 0x0430, ro64;
    }
}

/// Result words of one OOB command: `OOB_MBOX_DATA`, `_DATA1`, `_DATA2`,
/// `_DATA3`.
pub const OOB_MBOX_WORDS: usize = 4;

/// Mailbox opcodes for [`MBOX_CMD`] and [`OOB_MBOX_CMD`]. The opcodes from
/// `0x10` on exist on the OOB mailbox only (the host's answers
/// [`mbox_status::ERR_OPCODE`]); on the OOB mailbox the host's opcodes
/// answer in `OOB_MBOX_DATA` alone, `_DATA1`..`_DATA3` reading 0.
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
    /// OOB: DATA = the OOB channel's generation (its commits so far),
    /// DATA1 = the cycle of its last commit, DATA2 = its trigger period in
    /// cycles, DATA3 = OOB flushes completed.
    pub const OOB_CHANNEL_INFO: u32 = 0x10;
    /// OOB: requests a flush of the OOB channel: when the CCUs' flush acks
    /// are in, [`crate::regs::FLUSH_ACK_MAX_CYCLES`] later, every CCU's pending
    /// and ULC partial counts of a VM that is not confidential go into the
    /// channel and it commits, so that every OOB block then holds
    /// everything generated up to that cycle. DATA = the flush's number
    /// (`OOB_CHANNEL_INFO`'s DATA3 reaches it when it completed), DATA1 =
    /// the cycle it completes at. Status [`super::mbox_status::ERR_BUSY`]
    /// while an earlier flush has not completed.
    pub const OOB_FLUSH: u32 = 0x11;
    /// OOB: ARG = a VM id (0 to start); DATA = the next configured VM id
    /// above it, DATA1 = its partition slot, DATA2 =
    /// [`super::oob_vm_flags`], DATA3 = its contexts in the OOB table (0
    /// for a confidential VM). Status `END` after the last.
    pub const OOB_NEXT_VM: u32 = 0x12;
    /// OOB: ARG = a context id (0 to start), ARG2 = a VM id to list only
    /// its contexts (0 = every VM); DATA = the next context id above ARG
    /// in the OOB table, DATA1 = its VM, DATA2 = its created cycle, DATA3
    /// = [`super::oob_ctx_state`]. Contexts of confidential VMs are not in
    /// the table. Status `END` after the last.
    pub const OOB_NEXT_CONTEXT: u32 = 0x13;
    /// OOB: ARG2 = [`super::oob_scope`], ARG = the VM or context id (0 for
    /// the system); copies the block's counters into the mailbox's latch.
    /// DATA = the latch tag (never 0), DATA1 = the channel generation,
    /// DATA2 = commits into the block, DATA3 = the context's created cycle
    /// (context scope) or the VM's partition slot (VM scope), else 0.
    pub const OOB_SNAPSHOT: u32 = 0x14;
    /// OOB: ARG = the first word (event id) to read, below the number of
    /// events; ARG2 = the latch tag `OOB_SNAPSHOT` answered; DATA..DATA3
    /// = the latched counters of events ARG..ARG+3 (0 past the last
    /// event). Status [`super::mbox_status::ERR_STALE`] when ARG2 is not
    /// the current latch's tag: another snapshot replaced the latch.
    pub const OOB_READ_LATCH: u32 = 0x15;
    /// OOB: DATA = cycles with no context running on any partition,
    /// DATA1 = idle periods begun (how often the device went idle), DATA2
    /// = the current cycle, DATA3 = 1 while the device is idle now.
    pub const OOB_READ_IDLE: u32 = 0x16;
    /// OOB: DATA = [`super::oob_host_state`], DATA1 = cycles since the
    /// host's last request (`u64::MAX`: never; 0 while a host reader
    /// waits), DATA2 = handles open on the host's node, DATA3 = the
    /// timeout in cycles after which an open but silent host is not
    /// responding.
    pub const OOB_HOST_STATE: u32 = 0x17;
    /// OOB: DATA = the nominal clock in kHz, DATA1 = the clock now in kHz
    /// (lower while throttled), DATA2 = device resets the host made (the
    /// OOB channel carried its counts across each), DATA3 = the mask of
    /// configured partition slots.
    pub const OOB_DEVICE_INFO: u32 = 0x18;
}

/// `ARG2` of [`mbox_op::OOB_SNAPSHOT`]: which block.
pub mod oob_scope {
    /// The system block (`ARG` = 0): the device-level units and every VM
    /// that is not confidential.
    pub const SYSTEM: u32 = 0;
    /// A VM's block (`ARG` = the VM).
    pub const VM: u32 = 1;
    /// A context's block (`ARG` = the context).
    pub const CONTEXT: u32 = 2;
}

/// `DATA2` of [`mbox_op::OOB_NEXT_VM`].
pub mod oob_vm_flags {
    /// The VM is confidential: the OOB channel holds no block and no
    /// context of it.
    pub const CONFIDENTIAL: u64 = 1 << 0;
}

/// `DATA3` of [`mbox_op::OOB_NEXT_CONTEXT`].
pub mod oob_ctx_state {
    /// The context exists on the device.
    pub const ACTIVE: u64 = 1;
    /// The context was destroyed; its OOB block keeps its final counts
    /// until the device reuses the id.
    pub const DESTROYED: u64 = 2;
}

/// `DATA` of [`mbox_op::OOB_HOST_STATE`]: the host driver as the device
/// sees it.
pub mod oob_host_state {
    /// The host's node is served, a handle is open on it, and it was used
    /// (or a host reader waited on it) within the timeout.
    pub const LOADED: u64 = 1;
    /// The host's node is served and open, but nothing used it and no
    /// reader waited on it for longer than the timeout.
    pub const NOT_RESPONDING: u64 = 2;
    /// The host's node is not served (never attached, unmounted, or the
    /// driver closed it) or no handle is open on it.
    pub const UNLOADED: u64 = 3;
}

/// Values of [`MBOX_STATUS`] and [`OOB_MBOX_STATUS`]; every status but
/// `OK` comes with zero result words and changed nothing.
pub mod mbox_status {
    /// No command run yet.
    pub const IDLE: u32 = 0;
    /// Last command succeeded; DATA holds its result.
    pub const OK: u32 = 1;
    /// Unknown opcode.
    pub const ERR_OPCODE: u32 = 2;
    /// Argument out of range.
    pub const ERR_ARG: u32 = 3;
    /// OOB: the VM or context named is not in the OOB channel.
    pub const ERR_NOT_FOUND: u32 = 4;
    /// OOB: ARG2 is not the tag of the current latch (another snapshot
    /// replaced it, or none was taken): take a new snapshot.
    pub const ERR_STALE: u32 = 5;
    /// OOB: a confidential VM, which the OOB channel leaves out.
    pub const ERR_CONFIDENTIAL: u32 = 6;
    /// OOB: an enumeration passed its last entry.
    pub const END: u32 = 7;
    /// OOB: an OOB flush is still in progress; ask again after it.
    pub const ERR_BUSY: u32 = 8;
}
