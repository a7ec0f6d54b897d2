//! The OOB mailbox (`OOB_MBOX_*`, reached only through `card0-oob`): the
//! host mailbox's five registers and opcodes plus a second argument, three
//! more result words and the out-of-band commands (`mbox_op::OOB_*`):
//! channel information and flush, enumeration of VMs and contexts, block
//! snapshots read a few words at a time from a latch, idle time, the
//! clock and the host driver's state (`docs/oob.md`).
//!
//! A snapshot copies one block into the mailbox's latch and answers a tag;
//! the counters are then read four at a time from the latch with that tag.
//! The latch cannot change under a reader except by another snapshot,
//! which changes the tag, so a reader whose tag still works has a
//! consistent copy; one whose tag went stale (`ERR_STALE`) takes a new
//! snapshot. Nothing here allocates: the latch is a fixed array.
//!
//! Every command completes within the write of `OOB_MBOX_CMD` (an
//! `OOB_FLUSH` completes as a request: the flush itself completes later,
//! `OOB_CHANNEL_INFO` shows when); a malformed one reports its status
//! with zero data and changes nothing else (the latch, the channel and
//! the device stay as they were).

use gpupm_uapi::events::{EVENT_COUNT, MAX_EVENTS};
use gpupm_uapi::regs::{
    self as r, mbox_op, mbox_status, oob_scope, oob_vm_flags, MAX_CONTEXTS, MAX_VMS, OOB_MBOX_WORDS,
};

use super::host::HostState;
use super::OobChannel;
use crate::model::access::{r32, r64, RegValue, Reject};
use crate::model::mailbox::{self, MailboxView};

/// The device's idle accounting as the OOB mailbox reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IdleInfo {
    /// Cycles with no context running on any partition.
    pub cycles: u64,
    /// Idle periods begun so far.
    pub entries: u64,
    /// Whether the last cycle was idle.
    pub now: bool,
}

/// Device-wide facts `OOB_DEVICE_INFO` reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Nominal clock, kHz.
    pub khz: u32,
    /// Clock now, kHz.
    pub khz_now: u32,
    /// Device resets so far.
    pub resets: u64,
    /// Mask of the configured partition slots.
    pub configured: u32,
}

/// What OOB commands read.
#[derive(Clone, Copy, Debug)]
pub struct OobView<'a> {
    /// What the host mailbox's opcodes read.
    pub legacy: MailboxView<'a>,
    /// The OOB channel.
    pub channel: &'a OobChannel,
    /// The host driver's state now.
    pub host: HostState,
    /// Idle accounting.
    pub idle: IdleInfo,
    /// Clock, resets, partitions.
    pub device: DeviceInfo,
    /// Per VM id: the partition slot it is bound to now (0: none).
    pub vm_partitions: &'a [u32],
}

impl OobView<'_> {
    fn partition(&self, vm: u32) -> u64 {
        u64::from(self.vm_partitions.get(vm as usize).copied().unwrap_or(0))
    }
}

/// A checked write to an OOB mailbox register.
#[derive(Clone, Copy, Debug)]
pub enum OobWrite {
    /// `OOB_MBOX_ARG`.
    Arg(u32),
    /// `OOB_MBOX_ARG2`.
    Arg2(u32),
    /// `OOB_MBOX_CMD`: run opcode.
    Command(u32),
}

/// A command's answer: its result words, or the status it failed with.
pub type Answer = Result<[u64; OOB_MBOX_WORDS], u32>;

/// The OOB mailbox's registers and latch.
#[derive(Clone, Debug)]
pub struct OobMailbox {
    arg: u32,
    arg2: u32,
    status: u32,
    seq: u32,
    data: [u64; OOB_MBOX_WORDS],
    /// Tag of the current latch; 0 before the first snapshot.
    latch_tag: u32,
    latch: [u64; MAX_EVENTS],
}

impl Default for OobMailbox {
    fn default() -> Self {
        OobMailbox {
            arg: 0,
            arg2: 0,
            status: mbox_status::IDLE,
            seq: 0,
            data: [0; OOB_MBOX_WORDS],
            latch_tag: 0,
            latch: [0; MAX_EVENTS],
        }
    }
}

impl OobMailbox {
    /// Reads the OOB register at `offset` (the `OOB_MBOX_*` offsets).
    pub fn read(&self, offset: u64) -> Option<RegValue> {
        match offset {
            r::OOB_MBOX_ARG => r32(self.arg),
            r::OOB_MBOX_CMD => r32(0),
            r::OOB_MBOX_STATUS => r32(self.status),
            r::OOB_MBOX_SEQ => r32(self.seq),
            r::OOB_MBOX_DATA => r64(self.data[0]),
            r::OOB_MBOX_ARG2 => r32(self.arg2),
            r::OOB_MBOX_DATA1 => r64(self.data[1]),
            r::OOB_MBOX_DATA2 => r64(self.data[2]),
            r::OOB_MBOX_DATA3 => r64(self.data[3]),
            _ => None,
        }
    }

    /// Checks a write of `v` at `offset`: any argument and any opcode is
    /// accepted (a bad one is answered in `OOB_MBOX_STATUS`, as the BMC
    /// protocol expects); the other registers are read-only.
    pub fn check_write(offset: u64, v: u32) -> Result<OobWrite, Reject> {
        match offset {
            r::OOB_MBOX_ARG => Ok(OobWrite::Arg(v)),
            r::OOB_MBOX_ARG2 => Ok(OobWrite::Arg2(v)),
            r::OOB_MBOX_CMD => Ok(OobWrite::Command(v)),
            _ => Err(Reject::ReadOnly),
        }
    }

    /// Stores an argument; returns the opcode of a command write.
    pub fn apply(&mut self, w: OobWrite) -> Option<u32> {
        match w {
            OobWrite::Arg(v) => self.arg = v,
            OobWrite::Arg2(v) => self.arg2 = v,
            OobWrite::Command(op) => return Some(op),
        }
        None
    }

    /// Runs `op` against `view`; `flush` is the answer of the flush
    /// request the device made for an `OOB_FLUSH` (and only then).
    /// Returns the status.
    pub fn run(&mut self, op: u32, view: &OobView<'_>, flush: Option<Answer>) -> u32 {
        let answer = match op {
            mbox_op::GET_CAPS
            | mbox_op::READ_SYSTEM_COUNTER
            | mbox_op::READ_IDLE_CYCLES
            | mbox_op::READ_CYCLE
            | mbox_op::READ_FALLBACKS => {
                mailbox::answer(op, self.arg, view.legacy).map(|d| [d, 0, 0, 0])
            }
            mbox_op::OOB_CHANNEL_INFO => {
                let info = view.channel.info();
                Ok([
                    info.generation,
                    info.last_commit_cycle,
                    info.period,
                    info.flushes_done,
                ])
            }
            mbox_op::OOB_FLUSH => flush.unwrap_or(Err(mbox_status::ERR_OPCODE)),
            mbox_op::OOB_NEXT_VM => self.next_vm(view),
            mbox_op::OOB_NEXT_CONTEXT => self.next_context(view.channel),
            mbox_op::OOB_SNAPSHOT => self.snapshot(view),
            mbox_op::OOB_READ_LATCH => self.read_latch(),
            mbox_op::OOB_READ_IDLE => Ok([
                view.idle.cycles,
                view.idle.entries,
                view.legacy.now,
                u64::from(view.idle.now),
            ]),
            mbox_op::OOB_HOST_STATE => Ok([
                view.host.state,
                view.host.since_request,
                u64::from(view.host.handles),
                view.host.timeout,
            ]),
            mbox_op::OOB_DEVICE_INFO => Ok([
                u64::from(view.device.khz),
                u64::from(view.device.khz_now),
                view.device.resets,
                u64::from(view.device.configured),
            ]),
            _ => Err(mbox_status::ERR_OPCODE),
        };
        (self.status, self.data) = match answer {
            Ok(data) => (mbox_status::OK, data),
            Err(status) => (status, [0; OOB_MBOX_WORDS]),
        };
        self.seq = self.seq.wrapping_add(1);
        self.status
    }

    fn next_vm(&self, view: &OobView<'_>) -> Answer {
        let ch = view.channel;
        if self.arg >= MAX_VMS {
            return Err(mbox_status::ERR_ARG);
        }
        let vm = ch.next_vm(self.arg).ok_or(mbox_status::END)?;
        let (flags, contexts) = if ch.is_confidential(vm) {
            (oob_vm_flags::CONFIDENTIAL, 0)
        } else {
            (0, ch.context_count(vm))
        };
        Ok([u64::from(vm), view.partition(vm), flags, contexts])
    }

    fn next_context(&self, ch: &OobChannel) -> Answer {
        let vm = self.arg2;
        if self.arg >= MAX_CONTEXTS || vm >= MAX_VMS {
            return Err(mbox_status::ERR_ARG);
        }
        if vm != 0 {
            if ch.is_confidential(vm) {
                return Err(mbox_status::ERR_CONFIDENTIAL);
            }
            if !ch.has_vm(vm) {
                return Err(mbox_status::ERR_NOT_FOUND);
            }
        }
        let (id, block) = ch.next_context(self.arg, vm).ok_or(mbox_status::END)?;
        Ok([
            u64::from(id),
            u64::from(block.vm),
            block.created_cycle,
            block.state,
        ])
    }

    fn snapshot(&mut self, view: &OobView<'_>) -> Answer {
        let ch = view.channel;
        let (id, scope) = (self.arg, self.arg2);
        let (block, extra) = match scope {
            oob_scope::SYSTEM if id == 0 => (ch.system(), 0),
            oob_scope::VM if (1..MAX_VMS).contains(&id) => {
                if ch.is_confidential(id) {
                    return Err(mbox_status::ERR_CONFIDENTIAL);
                }
                let block = ch.vm(id).ok_or(mbox_status::ERR_NOT_FOUND)?;
                (block, view.partition(id))
            }
            oob_scope::CONTEXT if (1..MAX_CONTEXTS).contains(&id) => {
                let block = ch.context(id).ok_or(mbox_status::ERR_NOT_FOUND)?;
                (block, block.created_cycle)
            }
            _ => return Err(mbox_status::ERR_ARG),
        };
        self.latch_tag = self.latch_tag.wrapping_add(1).max(1);
        self.latch = block.counters;
        Ok([
            u64::from(self.latch_tag),
            ch.info().generation,
            block.commits,
            extra,
        ])
    }

    fn read_latch(&self) -> Answer {
        if self.latch_tag == 0 || self.arg2 != self.latch_tag {
            return Err(mbox_status::ERR_STALE);
        }
        let first = usize::try_from(self.arg)
            .ok()
            .filter(|&e| e < EVENT_COUNT)
            .ok_or(mbox_status::ERR_ARG)?;
        let mut out = [0; OOB_MBOX_WORDS];
        for (o, e) in out.iter_mut().zip(first..EVENT_COUNT) {
            *o = self.latch[e];
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use gpupm_uapi::regs::oob_host_state;

    use super::*;
    use crate::model::ledger::Attribution;

    fn channel() -> OobChannel {
        let mut ch = OobChannel::new(1_000, [(1, false), (2, true)]);
        ch.context_created(5, 1, 10);
        let mut deltas = [0; MAX_EVENTS];
        for (e, d) in deltas.iter_mut().enumerate() {
            *d = u64::try_from(e).unwrap() + 1;
        }
        ch.commit_partition(1, Attribution { ctx: 5, vm: 1 }, &deltas);
        ch
    }

    fn run(m: &mut OobMailbox, ch: &OobChannel, op: u32, arg: u32, arg2: u32) -> (u32, [u64; 4]) {
        m.apply(OobWrite::Arg(arg));
        m.apply(OobWrite::Arg2(arg2));
        let counters = [0u64; MAX_EVENTS];
        let view = OobView {
            legacy: MailboxView {
                system_counters: &counters,
                idle_cycles: 7,
                now: 100,
                fallbacks: 0,
            },
            channel: ch,
            host: HostState {
                state: oob_host_state::UNLOADED,
                since_request: u64::MAX,
                handles: 0,
                timeout: 9,
            },
            idle: IdleInfo::default(),
            device: DeviceInfo::default(),
            vm_partitions: &[0, 1, 2],
        };
        let status = m.run(op, &view, None);
        (status, m.data)
    }

    #[test]
    fn a_snapshot_is_read_from_the_latch_and_a_newer_snapshot_makes_the_tag_stale() {
        let ch = channel();
        let mut m = OobMailbox::default();
        let (status, snap) = run(&mut m, &ch, mbox_op::OOB_SNAPSHOT, 1, oob_scope::VM);
        assert_eq!((status, snap[2], snap[3]), (mbox_status::OK, 1, 1));
        let tag = u32::try_from(snap[0]).unwrap();
        let (status, words) = run(&mut m, &ch, mbox_op::OOB_READ_LATCH, 4, tag);
        assert_eq!((status, words), (mbox_status::OK, [5, 6, 7, 8]));
        let last = u32::try_from(EVENT_COUNT).unwrap() - 1;
        let (_, words) = run(&mut m, &ch, mbox_op::OOB_READ_LATCH, last, tag);
        assert_eq!(
            words,
            [u64::from(last) + 1, 0, 0, 0],
            "0 past the last event"
        );
        run(&mut m, &ch, mbox_op::OOB_SNAPSHOT, 5, oob_scope::CONTEXT);
        let (status, words) = run(&mut m, &ch, mbox_op::OOB_READ_LATCH, 0, tag);
        assert_eq!((status, words), (mbox_status::ERR_STALE, [0; 4]));
        assert_eq!(m.read(r::OOB_MBOX_SEQ), r32(5));
    }

    #[test]
    fn legacy_opcodes_answer_in_the_first_word_and_a_flush_needs_the_devices_answer() {
        let ch = channel();
        let mut m = OobMailbox::default();
        assert_eq!(
            run(&mut m, &ch, mbox_op::READ_IDLE_CYCLES, 0, 0),
            (mbox_status::OK, [7, 0, 0, 0])
        );
        assert_eq!(
            run(&mut m, &ch, mbox_op::OOB_FLUSH, 0, 0),
            (mbox_status::ERR_OPCODE, [0; 4]),
            "not without the device"
        );
        assert_eq!(
            run(&mut m, &ch, mbox_op::OOB_HOST_STATE, 0, 0).1,
            [oob_host_state::UNLOADED, u64::MAX, 0, 9]
        );
        assert_eq!(
            OobMailbox::check_write(r::OOB_MBOX_DATA2, 0).err(),
            Some(Reject::ReadOnly)
        );
    }
}
