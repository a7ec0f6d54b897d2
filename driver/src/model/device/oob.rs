//! The out-of-band reduction channel wired into the device
//! (`docs/oob.md`): its own trigger, its commits, its flushes, the drain
//! before a host reset, the OOB mailbox and the host link the mailbox
//! reports.
//!
//! The channel's trigger is the device's own: every `[oob] period` cycles
//! the CCUs of every partition whose counts are not a confidential VM's
//! emit their banks (records reach the partition's RC and the OOB
//! accumulator beside RC0; their share for RC0 is held until the host's
//! next trigger of the partition), then every partition's OOB accumulator
//! commits into the OOB blocks of the owner of its counts.
//! A partition in a switch is left to the switch: its step 3 emits
//! everything, and the re-point commits its OOB accumulator to the
//! outgoing owner before the owner changes. An OOB flush does the same
//! for every partition (ULC partial counts included, also in a switch)
//! when its flush acks are in. The host's trigger programming, masks,
//! resets and switch handling cannot change what the channel ends up
//! counting, and the channel writes nothing the host's window shows
//! (`docs/oob.md`, "What the channel does to the host").

use gpupm_uapi::layout::SYSTEM_BLOCK_SLOT;
use gpupm_uapi::regs::{
    hs_state, mbox_op, mbox_status, oob_scope, FLUSH_ACK_MAX_CYCLES, MAX_PARTITION_SLOTS, MAX_VMS,
};

use super::Device;
use crate::model::mailbox::MailboxView;
use crate::model::oob::host::HostEvent;
use crate::model::oob::mailbox::{Answer, DeviceInfo, IdleInfo, OobView};
use crate::model::oob::{OobBlock, OobInfo};

impl Device {
    /// The channel's trigger and commit. With `flush` every partition not
    /// owned by a confidential VM is flushed (ULC partials included, also
    /// in a switch) — the quiescent point after which every OOB block
    /// holds everything generated so far; the periodic trigger leaves
    /// partitions in a switch to the switch.
    fn oob_trigger(&mut self, flush: bool) {
        for p in 0..MAX_PARTITION_SLOTS {
            if !self.parts.is_configured(p) || self.owner_confidential(p) {
                continue;
            }
            if flush || self.parts.get(p).hs() == hs_state::IDLE {
                self.emit_partition(p, flush, true);
            }
        }
        for p in 0..MAX_PARTITION_SLOTS {
            if self.parts.is_configured(p) {
                self.oob_commit_partition(p);
            }
        }
        self.oob.committed(self.clock.now(), !flush);
    }

    /// Commits partition `p`'s OOB accumulator (and what masks discarded
    /// there) into the blocks of the owner of its counts.
    pub(super) fn oob_commit_partition(&mut self, p: u32) {
        let who = self.ccu.owner(p);
        let masked = self.ccu.take_masked(p);
        self.oob.add_masked(p, &masked);
        let routed = self.rc.take_oob(p);
        self.oob.commit_partition(p, who, &routed);
    }

    /// The channel's events due at cycle `t` (the clock is at `t`): a
    /// flush whose acks are in, then the periodic commit.
    pub(super) fn oob_events_at(&mut self, t: u64) {
        if self.oob.flush_due().is_some_and(|due| due <= t) {
            self.oob_trigger(true);
            self.oob.flush_completed();
        }
        if self.oob.next_commit() <= t {
            self.oob_trigger(false);
        }
    }

    /// Before a host reset zeroes the counting hierarchy: everything in
    /// flight goes into the OOB channel, which the reset then leaves alone.
    pub(super) fn oob_drain_for_reset(&mut self) {
        self.oob_trigger(true);
        self.oob.reset_carried();
    }

    /// An `OOB_FLUSH` request: it completes when every CCU's flush ack is
    /// in, [`FLUSH_ACK_MAX_CYCLES`] from now; one at a time.
    fn oob_request_flush(&mut self) -> Answer {
        let due = self
            .clock
            .now()
            .saturating_add(u64::from(FLUSH_ACK_MAX_CYCLES));
        let n = self.oob.request_flush(due).ok_or(mbox_status::ERR_BUSY)?;
        Ok([n, due, 0, 0])
    }

    /// Runs OOB mailbox command `op`.
    pub(super) fn run_oob_mailbox(&mut self, op: u32) {
        let flush = (op == mbox_op::OOB_FLUSH).then(|| self.oob_request_flush());
        let now = self.clock.now();
        let (entries, idle_now) = self.clock.idle_periods();
        let vm_partitions: [u32; MAX_VMS as usize] =
            std::array::from_fn(|v| u32::try_from(v).map_or(0, |v| self.vms.partition(v)));
        let view = OobView {
            legacy: MailboxView {
                system_counters: &self.mem.block(SYSTEM_BLOCK_SLOT).counters,
                idle_cycles: self.clock.idle_cycles(),
                now,
                fallbacks: self.parts.total_fallbacks(),
            },
            channel: &self.oob,
            host: self.host.state(now),
            idle: IdleInfo {
                cycles: self.clock.idle_cycles(),
                entries,
                now: idle_now,
            },
            device: DeviceInfo {
                khz: self.scenario.clock.khz,
                khz_now: self.clock.khz_now(),
                resets: self.resets,
                configured: self.parts.configured_mask(),
            },
            vm_partitions: &vm_partitions,
        };
        self.oob_mbox.run(op, &view, flush);
    }

    /// Tells the device what the driver layer saw on the host's node
    /// (`card0`): the input of `OOB_HOST_STATE`.
    pub fn host_event(&mut self, event: HostEvent) {
        self.host.apply(event, self.clock.now());
    }

    /// The OOB block of `scope` (`oob_scope`) and `id` as it stands
    /// (device-internal; for tests — a BMC reads it through the OOB
    /// mailbox).
    pub fn oob_block(&self, scope: u32, id: u32) -> Option<&OobBlock> {
        match scope {
            oob_scope::SYSTEM if id == 0 => Some(self.oob.system()),
            oob_scope::VM => self.oob.vm(id),
            oob_scope::CONTEXT => self.oob.context(id),
            _ => None,
        }
    }

    /// Where the OOB channel stands (device-internal; for tests).
    pub fn oob_info(&self) -> OobInfo {
        self.oob.info()
    }
}
