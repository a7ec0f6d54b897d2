//! Partitions (GPU slices): the per-partition scheduler, the context/VM
//! switch handshake (seed 000 ¶71–76) step by step, its fallback, and the
//! context lifecycle.
//!
//! The steps are the same functions whether host software drives them
//! through registers or the device's fallback completes a switch itself.

use gpupm_uapi::intr::source;
use gpupm_uapi::layout::{block_kind, ccu_record_flags, record_flags, CcuRecord};
use gpupm_uapi::regs::{ctx_state, hs_state, part_ctrl};

use super::device::{slots, Device, TriggerCause};
use super::ledger::Attribution;
use super::topology::Topology;
use crate::scenario::PartitionSpec;

/// Per-partition control state.
#[derive(Clone, Debug, Default)]
pub struct Partition {
    pub configured: bool,
    pub gpc_mask: u32,
    pub mem_mask: u32,
    pub ccu_assigned: u64,
    /// VMs bound to this partition, in id order.
    pub vms: Vec<u32>,
    pub cur_vm: u32,
    pub cur_ctx: u32,
    /// Handshake state ([`hs_state`]).
    pub hs: u32,
    /// Pause bits ([`part_ctrl`]).
    pub ctrl: u32,
    pub acked: u64,
    pub next_vm: u32,
    pub next_ctx: u32,
    pub req_cycle: u64,
    pub bind_vm: u32,
    pub bind_ctx: u32,
    pub timeout: u32,
    pub fallbacks: u64,
    pub switches: u64,
    pub last_fallback: bool,
    pub slice_start: u64,
    pub vm_slice_start: u64,
    pub ts_ctx: u32,
    pub ts_vm: u32,
    pub commit_seq: u64,
    pub last_commit_cycle: u64,
    pub overflow_reported: bool,
    /// STREAM_WATERMARK raised since the host last moved the tail.
    pub watermark_reported: bool,
    /// Next scheduler decision when no switch is pending.
    pub sched_at: u64,
    /// The switch in progress changed the VM (restarts the VM timeslice).
    pub vm_changed: bool,
    /// Context the RC was bound to before the last re-point.
    pub outgoing: u32,
}

impl Partition {
    pub(crate) fn configure_system(&mut self, topo: &Topology) {
        self.configured = true;
        self.ccu_assigned = mask_of(&topo.partition_ccus[0]);
        self.sched_at = u64::MAX;
    }

    pub(crate) fn configure(&mut self, spec: &PartitionSpec, topo: &Topology, timeout: u32) {
        self.configured = true;
        self.gpc_mask = spec.gpcs.iter().fold(0, |m, g| m | 1 << g);
        self.mem_mask = spec.memory_slices.iter().fold(0, |m, g| m | 1 << g);
        self.ccu_assigned = mask_of(&topo.partition_ccus[spec.slot as usize]);
        self.ts_ctx = spec.ctx_timeslice_cycles;
        self.ts_vm = spec.vm_timeslice_cycles;
        self.timeout = timeout;
        self.sched_at = u64::MAX;
    }

    /// Whether periodic triggers skip this partition (handshake step 2).
    pub fn triggers_paused(&self) -> bool {
        self.ctrl & part_ctrl::TRIG_PAUSE != 0
    }

    /// Whether the pending switch changes VM.
    pub fn vm_switch(&self) -> bool {
        self.hs != hs_state::IDLE && self.next_vm != self.cur_vm
    }

    /// When the partition next needs the device's attention.
    pub fn wake_at(&self) -> u64 {
        if self.hs == hs_state::IDLE {
            self.sched_at
        } else {
            self.req_cycle.saturating_add(u64::from(self.timeout))
        }
    }
}

fn mask_of(ccus: &[u32]) -> u64 {
    ccus.iter().fold(0, |m, &c| m | 1 << c)
}

impl Device {
    pub(crate) fn partition_wakeup(&mut self, p: u32) {
        if self.parts[p as usize].hs == hs_state::IDLE {
            self.schedule(p);
        } else {
            self.complete_by_fallback(p);
        }
    }

    /// Scheduler decision for an idle-handshake partition.
    pub(crate) fn schedule(&mut self, p: u32) {
        let now = self.now;
        let part = &self.parts[p as usize];
        let cur = part.cur_ctx;
        let choice = if cur == 0 {
            self.pick(p, part.cur_vm, 0, true)
        } else if self.ctxs[cur as usize].exiting {
            self.pick(p, part.cur_vm, cur, true)
                .or(Some((part.cur_vm, 0)))
        } else {
            let vm_due = part.ts_vm > 0 && now >= part.vm_slice_start + u64::from(part.ts_vm);
            let ctx_due = part.ts_ctx > 0 && now >= part.slice_start + u64::from(part.ts_ctx);
            let other_vm = if vm_due { self.pick_other_vm(p) } else { None };
            if other_vm.is_some() {
                other_vm
            } else if ctx_due {
                self.pick(p, part.cur_vm, cur, false)
            } else {
                None
            }
        };
        match choice {
            Some((vm, ctx)) => self.request_switch(p, vm, ctx),
            None => {
                let part = &mut self.parts[p as usize];
                if part.cur_ctx != 0
                    && part.ts_ctx > 0
                    && now >= part.slice_start + u64::from(part.ts_ctx)
                {
                    part.slice_start = now;
                }
                if part.ts_vm > 0 && now >= part.vm_slice_start + u64::from(part.ts_vm) {
                    part.vm_slice_start = now;
                }
                part.sched_at = if part.cur_ctx == 0 {
                    u64::MAX
                } else {
                    let c = if part.ts_ctx > 0 {
                        part.slice_start + u64::from(part.ts_ctx)
                    } else {
                        u64::MAX
                    };
                    let v = if part.ts_vm > 0 && part.vms.len() > 1 {
                        part.vm_slice_start + u64::from(part.ts_vm)
                    } else {
                        u64::MAX
                    };
                    c.min(v)
                };
            }
        }
    }

    /// Next runnable context of `vm` after `after` (round robin); with
    /// `any_vm`, falls back to the partition's other VMs.
    fn pick(&self, p: u32, vm: u32, after: u32, any_vm: bool) -> Option<(u32, u32)> {
        let next_in = |v: u32, after: u32| {
            let r = &self.vms[v as usize].runnable;
            r.range(after + 1..)
                .next()
                .or_else(|| r.iter().next())
                .copied()
                .filter(|&c| c != after)
                .map(|c| (v, c))
        };
        if vm != 0 {
            if let Some(found) = next_in(vm, after) {
                return Some(found);
            }
        }
        if !any_vm {
            return None;
        }
        self.parts[p as usize]
            .vms
            .iter()
            .filter(|&&v| v != vm)
            .find_map(|&v| next_in(v, 0))
    }

    fn pick_other_vm(&self, p: u32) -> Option<(u32, u32)> {
        let part = &self.parts[p as usize];
        let pos = part.vms.iter().position(|&v| v == part.cur_vm).unwrap_or(0);
        let n = part.vms.len();
        (1..n)
            .map(|k| part.vms[(pos + k) % n])
            .find_map(|v| self.vms[v as usize].runnable.iter().next().map(|&c| (v, c)))
    }

    fn request_switch(&mut self, p: u32, vm: u32, ctx: u32) {
        let now = self.now;
        let part = &mut self.parts[p as usize];
        part.hs = hs_state::REQUESTED;
        part.next_vm = vm;
        part.next_ctx = ctx;
        part.req_cycle = now;
        self.switch_requests += 1;
        self.intr.raise(source::SWITCH_REQUESTED, p, ctx, vm, now);
    }

    /// Step 1: the outgoing context stops running.
    pub(crate) fn step_pause_ctx(&mut self, p: u32) {
        self.sync(p);
        self.counting.pause_generation(p, self.now);
        let part = &mut self.parts[p as usize];
        part.ctrl = part_ctrl::CTX_PAUSE;
        part.hs = hs_state::CTX_PAUSED;
    }

    /// Step 2: periodic triggers and ULC transfers pause.
    pub(crate) fn step_pause_transfers(&mut self, p: u32) {
        self.sync(p);
        self.counting.parts[p as usize].ulc_paused = true;
        let part = &mut self.parts[p as usize];
        part.ctrl = part_ctrl::ALL;
        part.hs = hs_state::XFER_PAUSED;
    }

    /// Step 3: ULC partials flushed, CCUs emit everything (RC holds it).
    pub(crate) fn step_trigger(&mut self, p: u32) {
        self.trigger(1 << p, true, TriggerCause::Command);
        let part = &mut self.parts[p as usize];
        if part.hs == hs_state::XFER_PAUSED {
            part.hs = hs_state::TRIGGERED;
        }
    }

    /// Step 4-5: each CCU sends its (already sent) pending records and then
    /// an empty record, the flush ack.
    pub(crate) fn flush_request(&mut self, mask: u32) {
        for p in slots(mask) {
            self.parts[p as usize].acked = 0;
            for i in 0..self.topo.partition_ccus[p as usize].len() {
                let c = self.topo.partition_ccus[p as usize][i];
                let ack = CcuRecord {
                    ccu: c as u16,
                    flags: ccu_record_flags::FLUSH_ACK,
                    ..CcuRecord::default()
                };
                self.route(&ack, p);
                self.parts[p as usize].acked |= 1 << c;
            }
            let part = &mut self.parts[p as usize];
            if part.hs == hs_state::TRIGGERED && part.acked == part.ccu_assigned {
                part.hs = hs_state::ACKED;
            }
        }
    }

    /// Step 6a: commit into the outgoing blocks.
    pub(crate) fn step_commit(&mut self, p: u32, fallback: bool) {
        let in_switch = self.parts[p as usize].hs == hs_state::ACKED;
        let flags = if in_switch { record_flags::SWITCH } else { 0 }
            | if fallback { record_flags::FALLBACK } else { 0 };
        self.commit(p, flags);
        if in_switch {
            self.parts[p as usize].hs = hs_state::COMMITTED;
        }
    }

    /// Step 6b: re-point the RC (MMU rebind) to the incoming blocks.
    pub(crate) fn step_repoint(&mut self, p: u32) {
        let part = &mut self.parts[p as usize];
        part.vm_changed = part.cur_vm != part.next_vm;
        part.outgoing = part.cur_ctx;
        part.cur_vm = part.next_vm;
        part.cur_ctx = part.next_ctx;
        part.hs = hs_state::REPOINTED;
        let who = Attribution {
            ctx: part.cur_ctx,
            vm: part.cur_vm,
        };
        self.counting.set_owner(p, who);
    }

    /// Step 7: load the new context, unpause triggers and the context.
    pub(crate) fn step_unpause(&mut self, p: u32) {
        let now = self.now;
        let outgoing = self.parts[p as usize].outgoing;
        self.counting.parts[p as usize].ulc_paused = false;
        let part = &mut self.parts[p as usize];
        part.ctrl = 0;
        part.hs = hs_state::IDLE;
        part.switches += 1;
        part.slice_start = now;
        if part.vm_changed {
            part.vm_slice_start = now;
        }
        let (vm, ctx) = (part.cur_vm, part.cur_ctx);
        if ctx != 0 {
            let base = self.base_rates(p);
            self.start_generation(p, Attribution { ctx, vm }, base);
        }
        if outgoing != 0 && outgoing != ctx && self.ctxs[outgoing as usize].exiting {
            self.finalize_destroy(outgoing);
        }
        self.schedule(p);
    }

    /// Completes a pending switch from whatever step host software reached.
    pub(crate) fn complete_by_fallback(&mut self, p: u32) {
        if self.parts[p as usize].hs == hs_state::REQUESTED {
            self.step_pause_ctx(p);
        }
        if self.parts[p as usize].hs == hs_state::CTX_PAUSED {
            self.step_pause_transfers(p);
        }
        if self.parts[p as usize].hs == hs_state::XFER_PAUSED {
            self.step_trigger(p);
        }
        if self.parts[p as usize].hs == hs_state::TRIGGERED {
            self.flush_request(1 << p);
        }
        if self.parts[p as usize].hs == hs_state::ACKED {
            self.step_commit(p, true);
        }
        if self.parts[p as usize].hs == hs_state::COMMITTED {
            self.step_repoint(p);
        }
        let part = &mut self.parts[p as usize];
        part.fallbacks += 1;
        part.last_fallback = true;
        let (now, ctx, vm) = (self.now, part.next_ctx, part.next_vm);
        self.intr.raise(source::SWITCH_FALLBACK, p, ctx, vm, now);
        self.step_unpause(p);
    }

    /// Creates a context of `vm`; the driver layer allocates and binds its block.
    pub(crate) fn create_context(&mut self, vm: u32, profile: usize) -> Option<u32> {
        let (Some(&id), true) = (
            self.free_ctx_ids.first(),
            self.vms[vm as usize].partition != 0,
        ) else {
            self.ctx_create_failures += 1;
            return None;
        };
        let Some(slot) = self.mem.alloc_ctx_slot() else {
            self.ctx_create_failures += 1;
            return None;
        };
        self.free_ctx_ids.remove(&id);
        self.serials += 1;
        self.ctxs[id as usize] = super::device::CtxEntry {
            state: ctx_state::ACTIVE,
            vm,
            slot,
            profile,
            created_at: self.now,
            exiting: false,
            serial: self.serials,
        };
        self.mem.init_block(
            slot,
            block_kind::CONTEXT,
            id,
            vm,
            self.vms[vm as usize].cipher.as_mut(),
        );
        self.ledger.reset_context(id);
        self.vms[vm as usize].runnable.insert(id);
        let p = self.vms[vm as usize].partition;
        self.intr.raise(source::CTX_CREATED, p, id, vm, self.now);
        let part = &self.parts[p as usize];
        if part.hs == hs_state::IDLE && part.cur_ctx == 0 {
            self.schedule(p);
        }
        Some(id)
    }

    /// Marks a context for destruction; it is destroyed once switched out.
    pub(crate) fn destroy_context(&mut self, id: u32) {
        let c = &mut self.ctxs[id as usize];
        if c.state != ctx_state::ACTIVE || c.exiting {
            return;
        }
        c.exiting = true;
        let vm = c.vm;
        self.vms[vm as usize].runnable.remove(&id);
        let p = self.vms[vm as usize].partition;
        let part = &self.parts[p as usize];
        let involved = part.cur_ctx == id || (part.hs != hs_state::IDLE && part.next_ctx == id);
        if !involved {
            self.finalize_destroy(id);
        } else if part.hs == hs_state::IDLE {
            self.schedule(p);
        }
    }

    fn finalize_destroy(&mut self, id: u32) {
        let c = &mut self.ctxs[id as usize];
        c.state = ctx_state::DESTROYED;
        c.exiting = false;
        let vm = c.vm;
        let p = self.vms[vm as usize].partition;
        self.intr.raise(source::CTX_DESTROYED, p, id, vm, self.now);
    }

    /// Releases a destroyed context's block (host request).
    pub(crate) fn release_context(&mut self, id: u32) {
        let slot = self.ctxs[id as usize].slot;
        self.mem.release_ctx_slot(slot);
        self.ctxs[id as usize] = super::device::CtxEntry::default();
        self.free_ctx_ids.insert(id);
    }
}
