//! The device: owns every unit's state and advances simulated time event by
//! event (periodic and threshold triggers, epochs, scheduler decisions,
//! switch fallbacks, workload), counting in between with the chosen engine.

use gpupm_uapi::events::MAX_EVENTS;
use gpupm_uapi::intr::source;
use gpupm_uapi::layout::{
    block_kind, ccu_record_flags, record_flags, CcuRecord, StreamRecord, RECORD_MAGIC,
    RECORD_VALUES, SYSTEM_BLOCK_SLOT,
};
use gpupm_uapi::regs::{hs_state, trig_ctrl, MAX_CONTEXTS, MAX_PARTITION_SLOTS, MAX_VMS};
use zerocopy::FromZeros;

use super::cc::VmCipher;
use super::counting::{Counting, EngineKind};
use super::intr::Interrupts;
use super::ledger::{Attribution, Ledger};
use super::memory::{Memory, Pushed};
use super::partition::Partition;
use super::rates::{self, CompiledProfile, EPOCH_CYCLES};
use super::topology::{Topology, TopologyError};
use super::workload::{WorkItem, Workload};
use crate::scenario::Scenario;

/// Why a device could not be built from a scenario.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BuildError {
    /// The topology is invalid.
    #[error("invalid topology")]
    Topology(#[from] TopologyError),
    /// A VM or reference is invalid.
    #[error("invalid scenario: {0}")]
    Scenario(String),
}

/// Trigger block state.
#[derive(Clone, Debug, Default)]
pub struct TriggerBlock {
    pub period: u32,
    pub ctrl: u32,
    pub threshold: u32,
    pub target: u32,
    pub next_periodic: u64,
    pub periodic_index: u64,
    pub count_periodic: u64,
    pub count_threshold: u64,
    pub count_command: u64,
    pub records_routed: u64,
}

/// A VM table entry.
#[derive(Clone, Debug, Default)]
pub struct VmEntry {
    pub partition: u32,
    pub cipher: Option<VmCipher>,
    pub staged_key: [u32; 8],
    /// Runnable contexts (active, not exiting), ordered by id.
    pub runnable: std::collections::BTreeSet<u32>,
}

/// A context table entry.
#[derive(Clone, Debug, Default)]
pub struct CtxEntry {
    pub state: u32,
    pub vm: u32,
    pub slot: u32,
    pub profile: usize,
    pub created_at: u64,
    pub exiting: bool,
    pub serial: u64,
}

/// Why a trigger happened (for stream-record flags and counters).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TriggerCause {
    Periodic,
    Threshold,
    Command,
}

/// The emulated perfmon device.
#[derive(Clone, Debug)]
pub struct Device {
    pub(crate) scenario: Scenario,
    pub(crate) topo: Topology,
    pub(crate) counting: Counting,
    pub(crate) ledger: Ledger,
    pub(crate) mem: Memory,
    pub(crate) intr: Interrupts,
    pub(crate) now: u64,
    pub(crate) step_clock: bool,
    pub(crate) trig: TriggerBlock,
    pub(crate) parts: Vec<Partition>,
    pub(crate) vms: Vec<VmEntry>,
    pub(crate) ctxs: Vec<CtxEntry>,
    pub(crate) free_ctx_ids: std::collections::BTreeSet<u32>,
    pub(crate) workload: Workload,
    pub(crate) rcs: Vec<[u64; MAX_EVENTS]>,
    pub(crate) ccu_mask_index: Vec<u32>,
    pub(crate) ccu_records: Vec<u64>,
    pub(crate) profiles: Vec<CompiledProfile>,
    pub(crate) ulc_weights: Vec<u32>,
    pub(crate) mbox: super::mailbox::Mailbox,
    pub(crate) idle_cycles: u64,
    pub(crate) next_epoch: u64,
    pub(crate) serials: u64,
    pub(crate) ctx_create_failures: u64,
    pub(crate) pacer: Option<super::clock::Pacer>,
    /// Real-time cycles a tick owed but did not run because it stopped at
    /// a switch request (see [`Device::tick`]).
    pub(crate) tick_debt: u64,
    /// Switch requests raised so far (a tick stops at each).
    pub(crate) switch_requests: u64,
}

impl Device {
    /// Builds the device for `scenario` at cycle 0 and runs cycle 0's events.
    pub fn new(
        scenario: &Scenario,
        engine: EngineKind,
        step_clock: bool,
    ) -> Result<Self, BuildError> {
        let topo = Topology::build(&scenario.topology, &scenario.partitions)?;
        let ring_slots = scenario
            .partitions
            .iter()
            .map(|p| p.slot)
            .max()
            .unwrap_or(0)
            + 1;
        let mut dev = Device {
            counting: Counting::new(&topo, engine, scenario.seed),
            ulc_weights: rates::ulc_weights(&topo, scenario.seed),
            ledger: Ledger::default(),
            mem: Memory::new(
                ring_slots,
                scenario.stream.ring_records,
                scenario.stream.watermark,
            ),
            intr: Interrupts::default(),
            now: 0,
            step_clock,
            trig: TriggerBlock::default(),
            parts: vec![Partition::default(); MAX_PARTITION_SLOTS as usize],
            vms: vec![VmEntry::default(); MAX_VMS as usize],
            ctxs: vec![CtxEntry::default(); MAX_CONTEXTS as usize],
            free_ctx_ids: (1..MAX_CONTEXTS).collect(),
            workload: Workload::new(scenario),
            rcs: vec![[0; MAX_EVENTS]; MAX_PARTITION_SLOTS as usize],
            ccu_mask_index: vec![0; topo.ccus.len()],
            ccu_records: vec![0; topo.ccus.len()],
            profiles: scenario
                .profiles
                .iter()
                .map(CompiledProfile::compile)
                .collect(),
            mbox: Default::default(),
            idle_cycles: 0,
            next_epoch: EPOCH_CYCLES,
            serials: 0,
            ctx_create_failures: 0,
            pacer: None,
            tick_debt: 0,
            switch_requests: 0,
            scenario: scenario.clone(),
            topo,
        };
        dev.configure()?;
        dev.process_events_at(0);
        Ok(dev)
    }

    fn configure(&mut self) -> Result<(), BuildError> {
        self.program_trigger_defaults();
        self.parts[0].configure_system(&self.topo);
        for p in &self.scenario.partitions {
            self.parts[p.slot as usize].configure(
                p,
                &self.topo,
                self.scenario.switch_timeout_cycles,
            );
        }
        for v in &self.scenario.vms {
            let bad = |m: &str| BuildError::Scenario(format!("VM {}: {m}", v.id));
            if v.id == 0 || v.id >= MAX_VMS {
                return Err(bad("id out of range"));
            }
            if !self
                .parts
                .get(v.partition as usize)
                .is_some_and(|p| p.configured)
                || v.partition == 0
            {
                return Err(bad("bound to a partition that is not configured"));
            }
            let entry = &mut self.vms[v.id as usize];
            entry.partition = v.partition;
            entry.cipher = v.confidential_key.map(|k| VmCipher::new(v.id, &k));
            self.parts[v.partition as usize].vms.push(v.id);
            self.mem
                .init_block(v.id, block_kind::VM, v.id, v.id, entry.cipher.as_mut());
        }
        if self
            .scenario
            .contexts
            .iter()
            .any(|c| self.vms[c.vm as usize].partition == 0)
            || self
                .scenario
                .churn
                .iter()
                .any(|c| self.vms[c.vm as usize].partition == 0)
        {
            return Err(BuildError::Scenario(
                "a context names a VM that does not exist".into(),
            ));
        }
        if self.scenario.profiles.is_empty()
            && !(self.scenario.contexts.is_empty() && self.scenario.churn.is_empty())
        {
            return Err(BuildError::Scenario(
                "contexts need at least one profile".into(),
            ));
        }
        self.mem
            .init_block(SYSTEM_BLOCK_SLOT, block_kind::SYSTEM, 0, 0, None);
        if let Some(dp) = self.scenario.device_profile {
            let base = *self.profiles[dp].rates_at(0);
            self.start_generation(0, Attribution::default(), base);
        }
        Ok(())
    }

    pub(crate) fn program_trigger_defaults(&mut self) {
        let t = &self.scenario.trigger;
        self.trig.period = t.period_cycles;
        self.trig.ctrl = trig_ctrl::THRESHOLD_ENABLE
            | if t.period_cycles > 0 {
                trig_ctrl::PERIODIC_ENABLE
            } else {
                0
            }
            | if t.dither { trig_ctrl::DITHER } else { 0 };
        self.trig.threshold = t.threshold;
        self.schedule_periodic(self.now);
    }

    pub(crate) fn schedule_periodic(&mut self, from: u64) {
        self.trig.next_periodic =
            if self.trig.ctrl & trig_ctrl::PERIODIC_ENABLE != 0 && self.trig.period > 0 {
                let r = if self.trig.ctrl & trig_ctrl::DITHER != 0 {
                    super::rng::hash(
                        self.scenario.seed,
                        &[super::rng::domain::DITHER, self.trig.periodic_index],
                    ) & 0xFF
                } else {
                    0
                };
                from + u64::from(self.trig.period) + r
            } else {
                u64::MAX
            };
    }

    /// Current device cycle.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// The static layout.
    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// The scenario the device was built from.
    pub fn scenario(&self) -> &Scenario {
        &self.scenario
    }

    pub(crate) fn threshold(&self) -> Option<u32> {
        (self.trig.ctrl & trig_ctrl::THRESHOLD_ENABLE != 0).then_some(self.trig.threshold)
    }

    pub(crate) fn sync(&mut self, p: u32) {
        let thr = self.threshold();
        self.counting
            .sync(&self.topo, &mut self.ledger, p, self.now, thr);
    }

    pub(crate) fn sync_all(&mut self) {
        for p in 0..MAX_PARTITION_SLOTS {
            if self.parts[p as usize].configured {
                self.sync(p);
            }
        }
    }

    /// Runs the device until cycle `target`, handling every event on the way.
    pub(crate) fn run_until(&mut self, target: u64) {
        self.run_until_or_request(target, false);
    }

    /// Runs events up to `target`; with `stop_at_request`, stops right
    /// after the first event time at which a switch request was raised.
    pub(crate) fn run_until_or_request(&mut self, target: u64, stop_at_request: bool) {
        let requests = self.switch_requests;
        while self.now < target && !(stop_at_request && self.switch_requests != requests) {
            let t = self.next_event_time().clamp(self.now + 1, target);
            if (1..MAX_PARTITION_SLOTS).all(|p| !self.counting.parts[p as usize].generating) {
                self.idle_cycles += t - self.now;
            }
            self.now = t;
            self.process_events_at(t);
        }
    }

    fn next_event_time(&self) -> u64 {
        let mut t = self
            .trig
            .next_periodic
            .min(self.next_epoch)
            .min(self.workload.next_time());
        let thr = self.threshold();
        for p in 0..MAX_PARTITION_SLOTS {
            let part = &self.parts[p as usize];
            if !part.configured {
                continue;
            }
            t = t.min(part.wake_at());
            if let Some(thr) = thr {
                t = t.min(self.counting.threshold_horizon(p, thr));
            }
        }
        t
    }

    fn process_events_at(&mut self, t: u64) {
        if let Some(thr) = self.threshold() {
            for p in 0..MAX_PARTITION_SLOTS {
                if self.parts[p as usize].configured && self.counting.threshold_horizon(p, thr) <= t
                {
                    self.sync(p);
                    if self.counting.parts[p as usize].max_active >= thr {
                        self.trigger(1 << p, false, TriggerCause::Threshold);
                    }
                }
            }
        }
        if self.trig.next_periodic <= t {
            let mask = (0..MAX_PARTITION_SLOTS)
                .filter(|&p| {
                    self.parts[p as usize].configured && !self.parts[p as usize].triggers_paused()
                })
                .fold(0u32, |m, p| m | 1 << p);
            self.trigger(mask, false, TriggerCause::Periodic);
            self.trig.periodic_index += 1;
            self.schedule_periodic(t);
        }
        if self.next_epoch <= t {
            for p in 0..MAX_PARTITION_SLOTS {
                if self.counting.parts[p as usize].generating {
                    self.sync(p);
                    self.refresh_rates(p);
                }
            }
            self.next_epoch += EPOCH_CYCLES;
        }
        while let Some(item) = self.workload.pop_due(t) {
            self.run_work_item(item);
        }
        for p in 1..MAX_PARTITION_SLOTS {
            if self.parts[p as usize].configured && self.parts[p as usize].wake_at() <= t {
                self.partition_wakeup(p);
            }
        }
    }

    /// Starts (or re-rates) generation in partition `p` at the current
    /// cycle for `who` with profile base rates `base`.
    pub(crate) fn start_generation(&mut self, p: u32, who: Attribution, base: [u32; MAX_EVENTS]) {
        self.sync(p);
        let epoch_rates =
            rates::epoch_rates(self.scenario.seed, who.ctx, self.now / EPOCH_CYCLES, &base);
        let (topo, weights) = (&self.topo, &self.ulc_weights);
        self.counting.set_generation(topo, p, self.now, who, |j| {
            rates::counter_rate(topo, weights, &epoch_rates, j)
        });
    }

    /// Base rates of whatever partition `p` runs now.
    pub(crate) fn base_rates(&self, p: u32) -> [u32; MAX_EVENTS] {
        if p == 0 {
            return self
                .scenario
                .device_profile
                .map_or([0; MAX_EVENTS], |dp| *self.profiles[dp].rates_at(self.now));
        }
        let ctx = self.parts[p as usize].cur_ctx;
        let c = &self.ctxs[ctx as usize];
        *self.profiles[c.profile].rates_at(self.now - c.created_at)
    }

    fn refresh_rates(&mut self, p: u32) {
        let who = self.counting.parts[p as usize].who;
        let base = self.base_rates(p);
        self.start_generation(p, who, base);
    }

    /// Triggers the CCUs of every partition in `mask`: optional ULC flush,
    /// bank swap, record emission and routing; then RC commits.
    pub(crate) fn trigger(&mut self, mask: u32, flush_ulc: bool, cause: TriggerCause) {
        for p in slots(mask) {
            if !flush_ulc && self.trigger_fused(p) {
                continue;
            }
            self.sync(p);
            if flush_ulc {
                let leaving = self.parts[p as usize].hs >= hs_state::CTX_PAUSED;
                self.counting
                    .flush_ulcs(&self.topo, &mut self.ledger, p, leaving);
            }
            for i in 0..self.topo.partition_ccus[p as usize].len() {
                let c = self.topo.partition_ccus[p as usize][i];
                self.emit_ccu(c, p);
            }
            self.counting.parts[p as usize].max_active = 0;
        }
        match cause {
            TriggerCause::Periodic => self.trig.count_periodic += 1,
            TriggerCause::Threshold => self.trig.count_threshold += 1,
            TriggerCause::Command => self.trig.count_command += 1,
        }
        let flags = if cause == TriggerCause::Threshold {
            record_flags::THRESHOLD
        } else {
            0
        };
        for p in slots(mask).filter(|&p| p != 0) {
            if self.parts[p as usize].hs < hs_state::XFER_PAUSED {
                self.commit(p, flags);
            }
        }
        self.commit(0, flags);
    }

    /// The batched engine's one-pass trigger of partition `p`'s CCUs (same
    /// result as sync + [`Device::emit_ccu`]); false if the engine has none.
    fn trigger_fused(&mut self, p: u32) -> bool {
        let (system, partitions) = self.rcs.split_at_mut(1);
        let drain = super::counting::batched::Drain {
            partition_rc: (p != 0).then(|| &mut partitions[p as usize - 1]),
            system_rc: &mut system[0],
        };
        if !self
            .counting
            .sync_and_trigger(&self.topo, &mut self.ledger, p, self.now, drain)
        {
            return false;
        }
        for &c in &self.topo.partition_ccus[p as usize] {
            let records = self.topo.ccus[c as usize]
                .counters
                .len()
                .div_ceil(RECORD_VALUES) as u64;
            self.ccu_records[c as usize] += records;
            self.trig.records_routed += records;
        }
        true
    }

    /// Swaps CCU `c`'s banks and sends the now-idle bank as records of
    /// eight values to the reduction-channel buffer, clearing it.
    fn emit_ccu(&mut self, c: u32, owner: u32) {
        let ccu = &self.topo.ccus[c as usize];
        let old = usize::from(self.counting.active_bank[c as usize]);
        self.counting.active_bank[c as usize] ^= 1;
        let (start, end) = (ccu.counters.start as usize, ccu.counters.end as usize);
        let mut records = 0;
        for first in (start..end).step_by(RECORD_VALUES) {
            let mut rec = CcuRecord {
                ccu: c as u16,
                first_counter: (first - start) as u16,
                valid: (end - first).min(RECORD_VALUES) as u16,
                ..CcuRecord::default()
            };
            for (k, v) in rec.values[..usize::from(rec.valid)].iter_mut().enumerate() {
                *v = std::mem::take(&mut self.counting.bank[first + k][old]);
            }
            self.route(&rec, owner);
            records += 1;
        }
        self.ccu_records[c as usize] += records;
    }

    /// The reduction-channel buffer: each record goes to its owner's RC and to RC0.
    pub(crate) fn route(&mut self, rec: &CcuRecord, owner: u32) {
        self.trig.records_routed += 1;
        if rec.flags & ccu_record_flags::FLUSH_ACK != 0 {
            return;
        }
        let base = self.topo.ccus[usize::from(rec.ccu)].counters.start as usize
            + usize::from(rec.first_counter);
        let events = &self.topo.counter_event[base..base + usize::from(rec.valid)];
        let (system, partitions) = self.rcs.split_at_mut(1);
        for (&v, &e) in rec.values.iter().zip(events) {
            let (v, e) = (u64::from(v), usize::from(e));
            system[0][e] += v;
            if owner != 0 {
                partitions[owner as usize - 1][e] += v;
            }
        }
    }

    /// RC `p` adds its counters into its bound blocks, resets, and writes a
    /// stream record. Commits of nothing write nothing unless part of a switch.
    pub(crate) fn commit(&mut self, p: u32, flags: u16) {
        let deltas = std::mem::replace(&mut self.rcs[p as usize], [0; MAX_EVENTS]);
        if flags & record_flags::SWITCH == 0 && deltas.iter().all(|&d| d == 0) {
            return;
        }
        let (vm, ctx) = (
            self.parts[p as usize].cur_vm,
            self.parts[p as usize].cur_ctx,
        );
        let now = self.now;
        if p == 0 {
            self.mem.add(SYSTEM_BLOCK_SLOT, &deltas, now, None);
        } else {
            debug_assert!(
                ctx != 0 || deltas.iter().all(|&d| d == 0),
                "counts with no context bound"
            );
            let cipher = &mut self.vms[vm as usize].cipher;
            if ctx != 0 {
                self.mem
                    .add(self.ctxs[ctx as usize].slot, &deltas, now, cipher.as_mut());
            }
            if vm != 0 {
                self.mem.add(vm, &deltas, now, cipher.as_mut());
            }
        }
        let part = &mut self.parts[p as usize];
        let mut record = StreamRecord::new_zeroed();
        record.magic = RECORD_MAGIC;
        record.partition = p as u16;
        record.flags = flags
            | if super::throttle::secondary_at(&self.scenario.throttle, now) {
                record_flags::SECONDARY_CLOCK
            } else {
                0
            };
        record.vm = vm;
        record.ctx = ctx;
        record.start_cycle = part.last_commit_cycle;
        record.end_cycle = now;
        record.deltas = deltas;
        part.last_commit_cycle = now;
        part.commit_seq += 1;
        let cipher = if p == 0 {
            None
        } else {
            self.vms[vm as usize].cipher.as_mut()
        };
        let ring = &mut self.mem.rings[p as usize];
        match ring.push(record, cipher) {
            Pushed::Stored { fill } => {
                part.overflow_reported = false;
                // Raised once per drain: at the first push that leaves the
                // ring at or above the watermark since the host last moved
                // the tail, so records arriving while the host drains can
                // never leave it waiting for an interrupt that does not come.
                if fill >= ring.watermark && !part.watermark_reported {
                    part.watermark_reported = true;
                    self.intr.raise(source::STREAM_WATERMARK, p, fill, 0, now);
                }
            }
            Pushed::Lost => {
                if !part.overflow_reported {
                    part.overflow_reported = true;
                    let lost = u32::try_from(ring.lost).unwrap_or(u32::MAX);
                    self.intr.raise(source::STREAM_OVERFLOW, p, lost, 0, now);
                }
            }
        }
    }

    fn run_work_item(&mut self, item: WorkItem) {
        match item {
            WorkItem::CreateFixed { spec } => {
                let c = self.scenario.contexts[spec];
                if let Some(id) = self.create_context(c.vm, c.profile) {
                    if let Some(at) = c.destroy_at {
                        let serial = self.ctxs[id as usize].serial;
                        self.workload.push(at, WorkItem::Destroy { serial });
                    }
                }
            }
            WorkItem::Churn { spec, n } => {
                let c = self.scenario.churn[spec].clone();
                let profile = c.profiles[(n % c.profiles.len() as u64) as usize];
                if let Some(id) = self.create_context(c.vm, profile) {
                    let serial = self.ctxs[id as usize].serial;
                    self.workload
                        .push(self.now + c.lifetime_cycles, WorkItem::Destroy { serial });
                }
                let next = self.now + c.every_cycles;
                if c.stop_at.is_none_or(|stop| next < stop) {
                    self.workload.push(next, WorkItem::Churn { spec, n: n + 1 });
                }
            }
            WorkItem::Destroy { serial } => {
                if let Some(id) = (1..MAX_CONTEXTS).find(|&i| {
                    self.ctxs[i as usize].serial == serial && self.ctxs[i as usize].state != 0
                }) {
                    self.destroy_context(id);
                }
            }
        }
    }
}

/// Partition slots named by a mask.
pub(crate) fn slots(mask: u32) -> impl Iterator<Item = u32> {
    (0..MAX_PARTITION_SLOTS).filter(move |p| mask & (1 << p) != 0)
}
