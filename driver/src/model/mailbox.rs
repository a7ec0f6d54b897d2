//! A mailbox (SMBPBI-like): a caller writes an argument and an opcode, then
//! reads status and a 64-bit result. Commands read device-level state
//! directly (the device hands the mailbox a [`MailboxView`] of it); nothing
//! is allocated, no host memory is touched, no daemon is involved.
//!
//! This is the host's (`MBOX_ARG`, `MBOX_CMD`, `MBOX_STATUS`, `MBOX_SEQ`,
//! `MBOX_DATA` at `0x0300..0x0400`). The out-of-band one a BMC uses
//! (`OOB_MBOX_*`) has registers and commands of its own
//! (`model/oob/mailbox.rs`) and answers the opcodes here with
//! [`answer`], so that neither caller's sequence can interleave with the
//! other's.

use gpupm_uapi::events::EVENT_COUNT;
use gpupm_uapi::regs::{self as r, mbox_op, mbox_status};

use super::access::{r32, r64, RegValue, Reject};

/// Mailbox registers.
#[derive(Clone, Copy, Debug, Default)]
pub struct Mailbox {
    arg: u32,
    status: u32,
    data: u64,
    /// Commands completed (`MBOX_SEQ`).
    seq: u32,
}

/// The device-level state mailbox commands read.
#[derive(Clone, Copy, Debug)]
pub struct MailboxView<'a> {
    /// The system block's counters (RC0's committed totals, which hold no
    /// confidential VM's counts).
    pub system_counters: &'a [u64],
    /// Cycles with no context running on any partition.
    pub idle_cycles: u64,
    /// Current device cycle.
    pub now: u64,
    /// Switches completed by the device's fallback, all partitions.
    pub fallbacks: u64,
}

/// A checked write to a mailbox register.
#[derive(Clone, Copy, Debug)]
pub enum MailboxWrite {
    /// `MBOX_ARG`.
    Arg(u32),
    /// `MBOX_CMD`: run opcode.
    Command(u32),
}

impl Mailbox {
    /// Reads one of the mailbox registers.
    pub fn read(&self, offset: u64) -> Option<RegValue> {
        match offset {
            r::MBOX_ARG => r32(self.arg),
            r::MBOX_CMD => r32(0),
            r::MBOX_STATUS => r32(self.status),
            r::MBOX_SEQ => r32(self.seq),
            r::MBOX_DATA => r64(self.data),
            _ => None,
        }
    }

    /// Checks a write of `v` to one of the mailbox registers. Any argument
    /// and any opcode is accepted: an unknown one is reported in
    /// `MBOX_STATUS`, as the BMC protocol expects.
    pub fn check_write(offset: u64, v: u32) -> Result<MailboxWrite, Reject> {
        match offset {
            r::MBOX_ARG => Ok(MailboxWrite::Arg(v)),
            r::MBOX_CMD => Ok(MailboxWrite::Command(v)),
            _ => Err(Reject::ReadOnly),
        }
    }

    /// Stores the argument of a checked write; returns the opcode to run
    /// for a command write.
    pub fn apply(&mut self, w: MailboxWrite) -> Option<u32> {
        match w {
            MailboxWrite::Arg(v) => {
                self.arg = v;
                None
            }
            MailboxWrite::Command(op) => Some(op),
        }
    }

    /// Runs command `op` against `view`; returns the resulting status.
    pub fn run(&mut self, op: u32, view: MailboxView<'_>) -> u32 {
        (self.status, self.data) = match answer(op, self.arg, view) {
            Ok(v) => (mbox_status::OK, v),
            Err(status) => (status, 0),
        };
        self.seq = self.seq.wrapping_add(1);
        self.status
    }
}

/// The answer of the mailbox opcodes both mailboxes share to `op` with
/// argument `arg`: the result, or the failed status.
pub fn answer(op: u32, arg: u32, view: MailboxView<'_>) -> Result<u64, u32> {
    match op {
        mbox_op::GET_CAPS => {
            Ok(u64::from(gpupm_uapi::ABI_VERSION) << 32 | u64::try_from(EVENT_COUNT).unwrap_or(0))
        }
        mbox_op::READ_SYSTEM_COUNTER => usize::try_from(arg)
            .ok()
            .filter(|&e| e < EVENT_COUNT)
            .and_then(|e| view.system_counters.get(e).copied())
            .ok_or(mbox_status::ERR_ARG),
        mbox_op::READ_IDLE_CYCLES => Ok(view.idle_cycles),
        mbox_op::READ_CYCLE => Ok(view.now),
        mbox_op::READ_FALLBACKS => Ok(view.fallbacks),
        _ => Err(mbox_status::ERR_OPCODE),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(counters: &[u64]) -> MailboxView<'_> {
        MailboxView {
            system_counters: counters,
            idle_cycles: 11,
            now: 22,
            fallbacks: 3,
        }
    }

    fn write(m: &mut Mailbox, offset: u64, v: u32, counters: &[u64]) {
        let w = Mailbox::check_write(offset, v).expect("mailbox accepts the write");
        if let Some(op) = m.apply(w) {
            m.run(op, view(counters));
        }
    }

    #[test]
    fn commands_report_status_and_data() {
        let counters = [5u64; EVENT_COUNT];
        let mut m = Mailbox::default();
        assert_eq!(m.read(r::MBOX_STATUS), r32(mbox_status::IDLE));
        assert_eq!(m.read(r::MBOX_SEQ), r32(0));
        write(&mut m, r::MBOX_ARG, 1, &counters);
        write(&mut m, r::MBOX_CMD, mbox_op::READ_SYSTEM_COUNTER, &counters);
        assert_eq!(m.read(r::MBOX_STATUS), r32(mbox_status::OK));
        assert_eq!(m.read(r::MBOX_SEQ), r32(1));
        assert_eq!(m.read(r::MBOX_DATA), r64(5));
        write(&mut m, r::MBOX_CMD, mbox_op::READ_FALLBACKS, &counters);
        assert_eq!(m.read(r::MBOX_DATA), r64(3));
    }

    #[test]
    fn bad_argument_or_opcode_clears_data_and_says_why() {
        let counters = [5u64; EVENT_COUNT];
        let mut m = Mailbox::default();
        let beyond = u32::try_from(EVENT_COUNT).unwrap_or(u32::MAX);
        write(&mut m, r::MBOX_ARG, beyond, &counters);
        write(&mut m, r::MBOX_CMD, mbox_op::READ_SYSTEM_COUNTER, &counters);
        assert_eq!(m.read(r::MBOX_STATUS), r32(mbox_status::ERR_ARG));
        assert_eq!(m.read(r::MBOX_DATA), r64(0));
        write(&mut m, r::MBOX_CMD, 0xEE, &counters);
        assert_eq!(m.read(r::MBOX_STATUS), r32(mbox_status::ERR_OPCODE));
        assert_eq!(
            Mailbox::check_write(r::MBOX_STATUS, 0).err(),
            Some(Reject::ReadOnly)
        );
    }
}
