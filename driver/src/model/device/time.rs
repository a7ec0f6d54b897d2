//! How time advances: from event to event (flush acks, periodic and
//! threshold triggers, the OOB channel's commits and flushes, profile
//! phase changes, epochs, workload items, scheduler decisions and switch
//! fallbacks), counting in between with the
//! chosen engine. Nothing happens between events except counting, which is
//! lazy: a partition is counted up to now only when something needs its
//! counters.

use gpupm_uapi::events::MAX_EVENTS;
use gpupm_uapi::regs::{hs_state, MAX_PARTITION_SLOTS};

use super::Device;
use crate::model::ledger::Attribution;
use crate::model::trigger::TriggerCause;
use crate::model::workload::WorkItem;

impl Device {
    /// Runs the device until cycle `target`, handling every event on the way.
    pub(super) fn run_until(&mut self, target: u64) {
        self.run_until_or_request(target, false);
    }

    /// Runs events up to `target`; with `stop_at_request`, stops right
    /// after the first event time at which a switch request was raised.
    pub(super) fn run_until_or_request(&mut self, target: u64, stop_at_request: bool) {
        let requests = self.parts.switch_requests();
        while self.clock.now() < target
            && !(stop_at_request && self.parts.switch_requests() != requests)
        {
            let t = self.next_event_time().clamp(self.clock.now() + 1, target);
            let idle = (1..MAX_PARTITION_SLOTS).all(|p| !self.ccu.generating(p));
            self.clock.move_to(t, idle);
            self.process_events_at(t);
        }
        self.sync_sampled();
    }

    fn next_event_time(&self) -> u64 {
        let mut t = self
            .trig
            .next_periodic()
            .min(self.rates.next_epoch())
            .min(self.rates.next_phase_change())
            .min(self.workload.next_time())
            .min(self.oob.next_event());
        let thr = self.trig.threshold();
        for p in self.parts.configured() {
            t = t
                .min(self.parts.get(p).wake_at())
                .min(self.parts.next_ack(p))
                .min(self.threshold_horizon(p, thr));
        }
        t
    }

    /// When partition `p` next needs a threshold check: the time-only
    /// guard while a confidential VM's counts are in it, the earliest
    /// boundary its counters could reach the threshold otherwise.
    fn threshold_horizon(&self, p: u32, thr: u32) -> u64 {
        if self.owner_confidential(p) {
            self.ccu.guard_horizon(p, thr)
        } else {
            self.ccu.threshold_horizon(p, thr)
        }
    }

    /// Handles every event due at cycle `t` (the clock is at `t`).
    pub(super) fn process_events_at(&mut self, t: u64) {
        for p in 0..MAX_PARTITION_SLOTS {
            if self.parts.is_configured(p) && self.parts.next_ack(p) <= t {
                self.flush_acks_arrive(p);
            }
        }
        let thr = self.trig.threshold();
        for p in 0..MAX_PARTITION_SLOTS {
            if self.parts.is_configured(p) && self.threshold_horizon(p, thr) <= t {
                self.sync(p);
                // A confidential partition's guard fires whatever it counted.
                if self.owner_confidential(p) || self.ccu.reached(p, thr) {
                    self.trigger(1 << p, false, TriggerCause::Threshold);
                }
            }
        }
        if self.trig.next_periodic() <= t {
            let mask = self.parts.unpaused_mask();
            self.trigger(mask, false, TriggerCause::Periodic);
            self.trig.periodic_delivered(t);
        }
        self.oob_events_at(t);
        let epoch = self.rates.next_epoch() <= t;
        for p in 0..MAX_PARTITION_SLOTS {
            if !(epoch || self.rates.phase_change(p) <= t) {
                continue;
            }
            if self.ccu.generating(p) {
                self.sync(p);
                self.refresh_rates(p);
            } else {
                self.rates.no_phase_change(p);
            }
        }
        if epoch {
            self.rates.epoch_passed();
        }
        while let Some(item) = self.workload.pop_due(t) {
            self.run_work_item(item);
        }
        for p in 1..MAX_PARTITION_SLOTS {
            if self.parts.is_configured(p) && self.parts.get(p).wake_at() <= t {
                self.partition_wakeup(p);
            }
        }
    }

    /// Starts (or re-rates) generation in partition `p` at the current
    /// cycle for `who`, with the rates of what `p` runs now; the next
    /// change of its profile's phase becomes an event.
    pub(super) fn start_generation(&mut self, p: u32, who: Attribution) {
        self.sync(p);
        let now = self.clock.now();
        let (base, change) = self.base_rates(p);
        self.rates.set_phase_change(p, change);
        let program = p != 0 && self.runs_program(who.ctx);
        if program {
            let c = self.ctxs.get(who.ctx);
            self.phases[p as usize] = self.rates.context_phase(c.profile, c.created_at, now);
        }
        let last = std::mem::replace(&mut self.phase_vm[p as usize], who.vm);
        let scrub = p != 0
            && last != who.vm
            && (self.vms.confidential(last) || self.vms.confidential(who.vm));
        let topo = &self.topo;
        let mut rate_of = self.rates.counter_rates(topo, who, now, &base);
        let rate_of = move |j| {
            let r = rate_of(j);
            if program {
                Self::program_rate(topo, j, r)
            } else {
                r
            }
        };
        self.ccu.set_generation(topo, p, now, who, rate_of);
        if scrub {
            // The phases carry what the last VM generated: across a
            // confidential VM's boundary they restart from their power-on
            // values (docs/confidential.md, "Time-slicing").
            self.ccu.scrub_phases(topo, p, self.scenario.seed);
        }
    }

    /// Base rates of whatever partition `p` runs now, and the cycle its
    /// profile next changes phase (`u64::MAX` for a single phase).
    fn base_rates(&self, p: u32) -> ([u32; MAX_EVENTS], u64) {
        let now = self.clock.now();
        if p == 0 {
            return self.rates.device_base(now);
        }
        let (_, ctx) = self.parts.get(p).current();
        let c = self.ctxs.get(ctx);
        self.rates.context_base(c.profile, c.created_at, now)
    }

    fn refresh_rates(&mut self, p: u32) {
        let who = self.ccu.owner(p);
        self.start_generation(p, who);
    }

    fn partition_wakeup(&mut self, p: u32) {
        if self.parts.get(p).hs() == hs_state::IDLE {
            self.schedule(p);
        } else {
            self.complete_by_fallback(p);
        }
    }

    fn run_work_item(&mut self, item: WorkItem) {
        let now = self.clock.now();
        match item {
            WorkItem::CreateFixed { spec } => {
                let c = self.scenario.contexts[spec];
                let program = self.scenario.profiles[c.profile].program;
                if let Some(id) = self.create_context(c.vm, c.profile, program) {
                    if let Some(at) = c.destroy_at {
                        let serial = self.ctxs.get(id).serial;
                        self.workload.push(at, WorkItem::Destroy { serial });
                    }
                }
            }
            WorkItem::Churn { spec, n } => {
                let c = self.scenario.churn[spec].clone();
                let len = u64::try_from(c.profiles.len()).unwrap_or(u64::MAX);
                // The remainder is below the list's length, a usize.
                let pick = usize::try_from(n % len).unwrap_or(0);
                let program = self.scenario.churn_program(c.profiles[pick], n);
                if let Some(id) = self.create_context(c.vm, c.profiles[pick], program) {
                    let serial = self.ctxs.get(id).serial;
                    self.workload
                        .push(now + c.lifetime_cycles, WorkItem::Destroy { serial });
                }
                let next = now + c.every_cycles;
                if c.stop_at.is_none_or(|stop| next < stop) {
                    self.workload.push(next, WorkItem::Churn { spec, n: n + 1 });
                }
            }
            WorkItem::Destroy { serial } => {
                if let Some(id) = self.ctxs.by_serial(serial) {
                    self.destroy_context(id);
                }
            }
            WorkItem::Migrate { spec } => self.scenario_migration(spec),
        }
    }
}
