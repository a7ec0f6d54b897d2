//! The data path between units: a trigger makes the CCUs of the targeted
//! partitions emit their banks as records, the RC buffer routes them into
//! the RCs (a confidential VM's only into its partition's RC, never RC0),
//! and the RCs commit into the memory blocks of whoever they are bound to
//! and write a stream record into their ring; a flush request makes the
//! CCUs' acks arrive after their records drained.

use gpupm_uapi::intr::source;
use gpupm_uapi::layout::{record_flags, StreamRecord, RECORD_MAGIC, SYSTEM_BLOCK_SLOT};
use gpupm_uapi::regs::{hs_state, trig_cmd};
use zerocopy::FromZeros;

use super::Device;
use crate::model::access::slots;
use crate::model::ccu::record::flush_ack;
use crate::model::ccu::Counting;
use crate::model::memory::ring::RingEvent;
use crate::model::partition::handshake::AcksComplete;
use crate::model::rc::SystemPath;
use crate::model::trigger::TriggerCause;

impl Device {
    /// Triggers the CCUs of every partition in `mask`: optional ULC flush,
    /// bank swap, record emission and routing; then RC commits.
    pub(super) fn trigger(&mut self, mask: u32, flush_ulc: bool, cause: TriggerCause) {
        for p in slots(mask) {
            self.emit_partition(p, flush_ulc, false);
        }
        self.trig.count(cause);
        let flags = if cause == TriggerCause::Threshold {
            record_flags::THRESHOLD
        } else {
            0
        };
        for p in slots(mask).filter(|&p| p != 0) {
            if self.parts.get(p).hs() < hs_state::XFER_PAUSED {
                self.commit(p, flags);
            }
        }
        self.commit(0, flags);
    }

    /// Partition `p`'s CCUs emit their banks (after flushing the ULCs'
    /// partial counts with `flush_ulc`) into the RC buffer, which routes
    /// them; shared by the host's triggers and (`oob`) the OOB channel's
    /// own, whose share for RC0 the buffer holds until the host's next
    /// trigger of `p` releases it.
    pub(super) fn emit_partition(&mut self, p: u32, flush_ulc: bool, oob: bool) {
        let path = match SystemPath::host(self.owner_confidential(p)) {
            SystemPath::Rc0 if oob => SystemPath::Held,
            path => path,
        };
        if !oob {
            self.rc.release_held(p);
        }
        if !flush_ulc && self.trigger_fused(p, path) {
            return;
        }
        self.sync(p);
        if flush_ulc {
            let leaving = self.parts.get(p).hs() >= hs_state::CTX_PAUSED;
            self.ccu
                .flush_ulcs(&self.topo, &mut self.ledger, p, leaving);
        }
        let (topo, rc) = (&self.topo, &mut self.rc);
        for &c in &topo.partition_ccus[p as usize] {
            self.ccu
                .emit_records(topo, c, |rec| rc.route(topo, rec, p, path));
        }
        self.ccu.banks_emitted(p);
    }

    /// The batched engine's one-pass trigger of partition `p`'s CCUs (same
    /// result as sync + record emission and routing along `path`; a
    /// running program is walked in the same pass); false if the engine
    /// has none.
    fn trigger_fused(&mut self, p: u32, path: SystemPath) -> bool {
        if !self.count(p, Some(path)) {
            return false;
        }
        let records = self.ccu.count_fused_records(&self.topo, p);
        self.rc.count_routed(records);
        true
    }

    /// RC `p` adds its counters into its bound blocks, resets, and writes a
    /// stream record. Commits of nothing write nothing unless part of a
    /// switch or of a confidential VM (whose every trigger commits, so that
    /// whether a record appears says nothing of what it counted).
    pub(super) fn commit(&mut self, p: u32, flags: u16) {
        let deltas = self.rc.take(p);
        let (vm, ctx) = self.parts.get(p).current();
        let always = flags & record_flags::SWITCH != 0 || self.vms.confidential(vm);
        if !always && deltas.iter().all(|&d| d == 0) {
            return;
        }
        let now = self.clock.now();
        if p == 0 {
            self.mem.add(SYSTEM_BLOCK_SLOT, &deltas, now, None);
        } else {
            debug_assert!(
                ctx != 0 || deltas.iter().all(|&d| d == 0),
                "counts with no context bound"
            );
            if ctx != 0 {
                let slot = self.ctxs.get(ctx).slot;
                self.mem.add(slot, &deltas, now, self.vms.cipher(vm));
            }
            if vm != 0 {
                self.mem.add(vm, &deltas, now, self.vms.cipher(vm));
            }
        }
        let mut record = StreamRecord::new_zeroed();
        record.magic = RECORD_MAGIC;
        // A partition slot is below MAX_PARTITION_SLOTS (16).
        record.partition = u16::try_from(p).unwrap_or(u16::MAX);
        record.flags = flags
            | if self.clock.secondary_at(now) {
                record_flags::SECONDARY_CLOCK
            } else {
                0
            };
        record.vm = vm;
        record.ctx = ctx;
        record.start_cycle = self.rc.committed(p, now);
        record.end_cycle = now;
        record.deltas = deltas;
        let cipher = if p == 0 { None } else { self.vms.cipher(vm) };
        match self.mem.rings[p as usize].push_and_report(&mut record, cipher) {
            Some(RingEvent::Watermark { fill }) => {
                self.intr.raise(source::STREAM_WATERMARK, p, fill, 0, now);
            }
            Some(RingEvent::Overflow { lost }) => {
                let lost = u32::try_from(lost).unwrap_or(u32::MAX);
                self.intr.raise(source::STREAM_OVERFLOW, p, lost, 0, now);
            }
            None => {}
        }
    }

    /// Step 4 of a switch, for every partition in `mask`: each CCU sends
    /// its pending records (already routed) and then an empty record, the
    /// flush ack, which arrives after the CCU's link drained them.
    pub(super) fn flush_request(&mut self, mask: u32) {
        let now = self.clock.now();
        for p in slots(mask) {
            let schedule = Counting::flush_ack_schedule(&self.topo, p, now);
            self.parts.flush_requested(p, schedule);
        }
    }

    /// Step 5: partition `p`'s flush acks due by now reach the RC buffer;
    /// once all are in, the host is told (it may commit), or a fallback
    /// that waited for them finishes the switch.
    pub(super) fn flush_acks_arrive(&mut self, p: u32) {
        let now = self.clock.now();
        let (arrived, complete) = self.parts.acks_arrived(p, now);
        for c in (0..u64::BITS).filter(|&c| arrived & (1 << c) != 0) {
            self.rc
                .route(&self.topo, &flush_ack(c), p, SystemPath::Neither);
        }
        match complete {
            AcksComplete::No => {}
            AcksComplete::ForHost => {
                let (vm, ctx) = self.parts.get(p).incoming();
                self.intr.raise(source::FLUSH_ACKED, p, ctx, vm, now);
            }
            AcksComplete::ForFallback => self.complete_by_fallback(p),
        }
    }

    /// A `TRIG_CMD` write: `cmd` applied to the partitions in `mask`.
    pub(super) fn trigger_command(&mut self, mask: u32, cmd: u32) {
        if cmd & (trig_cmd::TRIGGER | trig_cmd::FLUSH_ULC) != 0 {
            let flush = cmd & trig_cmd::FLUSH_ULC != 0;
            if cmd & trig_cmd::TRIGGER != 0 {
                self.trigger(mask, flush, TriggerCause::Command);
            } else {
                for p in slots(mask) {
                    self.sync(p);
                    let leaving = self.parts.get(p).hs() >= hs_state::CTX_PAUSED;
                    self.ccu
                        .flush_ulcs(&self.topo, &mut self.ledger, p, leaving);
                }
            }
            for p in slots(mask) {
                self.parts.trigger_command(p, cmd);
            }
        }
        if cmd & trig_cmd::FLUSH_REQ != 0 {
            self.flush_request(mask);
        }
        self.intr
            .raise(source::TRIGGER_DONE, 0, mask, cmd, self.clock.now());
    }

    /// A `TRIG_EXTERNAL` write: every unpaused partition is triggered.
    pub(super) fn external_trigger(&mut self) {
        let mask = self.parts.unpaused_mask();
        self.trigger(mask, false, TriggerCause::Command);
        self.intr
            .raise(source::TRIGGER_DONE, 0, mask, 0, self.clock.now());
    }
}
