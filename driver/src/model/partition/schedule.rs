//! The per-partition scheduler: when a partition's timeslices expire or
//! its running context leaves, it picks the next context (round robin
//! within the VM) or the next VM, and requests a switch.

use gpupm_uapi::regs::hs_state;

use super::state::Partitions;
use crate::model::context::ContextTable;
use crate::model::vm::VmTable;

impl Partitions {
    /// Makes the scheduler decision for idle-handshake slot `p` at `now`:
    /// requests a switch and returns (VM, context) it brings in, or
    /// re-arms the timeslices and returns `None`.
    pub fn schedule(
        &mut self,
        p: u32,
        now: u64,
        vms: &VmTable,
        ctxs: &ContextTable,
    ) -> Option<(u32, u32)> {
        let choice = self.choose(p, now, vms, ctxs);
        match choice {
            Some((vm, ctx)) => self.request_switch(p, vm, ctx, now),
            None => self.rearm(p, now),
        }
        choice
    }

    fn choose(&self, p: u32, now: u64, vms: &VmTable, ctxs: &ContextTable) -> Option<(u32, u32)> {
        let part = &self.slots[p as usize];
        let cur = part.cur_ctx;
        if cur == 0 {
            return self.pick(p, part.cur_vm, 0, true, vms);
        }
        if ctxs.get(cur).exiting {
            return self
                .pick(p, part.cur_vm, cur, true, vms)
                .or(Some((part.cur_vm, 0)));
        }
        let vm_due = part.ts_vm > 0 && now >= part.vm_slice_start + u64::from(part.ts_vm);
        let ctx_due = part.ts_ctx > 0 && now >= part.slice_start + u64::from(part.ts_ctx);
        let other_vm = if vm_due {
            self.pick_other_vm(p, vms)
        } else {
            None
        };
        if other_vm.is_some() {
            other_vm
        } else if ctx_due {
            self.pick(p, part.cur_vm, cur, false, vms)
        } else {
            None
        }
    }

    /// No switch: restarts expired timeslices and sets the next decision.
    fn rearm(&mut self, p: u32, now: u64) {
        let part = &mut self.slots[p as usize];
        if part.cur_ctx != 0 && part.ts_ctx > 0 && now >= part.slice_start + u64::from(part.ts_ctx)
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

    /// Next runnable context of `vm` after `after` (round robin); with
    /// `any_vm`, falls back to the partition's other VMs.
    fn pick(&self, p: u32, vm: u32, after: u32, any_vm: bool, vms: &VmTable) -> Option<(u32, u32)> {
        let next_in = |v: u32, after: u32| {
            let r = vms.runnable(v);
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
        self.slots[p as usize]
            .vms
            .iter()
            .filter(|&&v| v != vm)
            .find_map(|&v| next_in(v, 0))
    }

    fn pick_other_vm(&self, p: u32, vms: &VmTable) -> Option<(u32, u32)> {
        let part = &self.slots[p as usize];
        let pos = part.vms.iter().position(|&v| v == part.cur_vm).unwrap_or(0);
        let n = part.vms.len();
        (1..n)
            .map(|k| part.vms[(pos + k) % n])
            .find_map(|v| vms.runnable(v).iter().next().map(|&c| (v, c)))
    }

    /// Whether slot `p` should be scheduled now that a context was created
    /// for it: it runs nothing and no switch is pending.
    pub fn wants_work(&self, p: u32) -> bool {
        let part = &self.slots[p as usize];
        part.hs == hs_state::IDLE && part.cur_ctx == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::topology::Topology;
    use crate::scenario::{h100_class, PartitionSpec, VmSpec};

    fn slice(ts_ctx: u32) -> (Partitions, VmTable, ContextTable) {
        let spec = PartitionSpec {
            slot: 1,
            gpcs: vec![0],
            memory_slices: vec![0],
            ctx_timeslice_cycles: ts_ctx,
            vm_timeslice_cycles: 0,
            ri_version: 1,
            ri_max_rgs: gpupm_uapi::ri::RGS_MAX,
        };
        let topo = Topology::build(&h100_class(), std::slice::from_ref(&spec)).unwrap();
        let mut parts = Partitions::new(&topo);
        parts.configure(&spec, &topo, 4096);
        parts.bind_vm(1, 1);
        let mut vms = VmTable::default();
        vms.configure(
            &VmSpec {
                id: 1,
                partition: 1,
                confidential: false,
                confidential_key: None,
            },
            1,
        );
        (parts, vms, ContextTable::default())
    }

    #[test]
    fn an_idle_partition_requests_its_first_runnable_context() {
        let (mut parts, mut vms, ctxs) = slice(2048);
        assert_eq!(parts.schedule(1, 0, &vms, &ctxs), None);
        assert_eq!(parts.get(1).wake_at(), u64::MAX);
        vms.set_runnable(1, 7, true);
        assert!(parts.wants_work(1));
        assert_eq!(parts.schedule(1, 10, &vms, &ctxs), Some((1, 7)));
        assert_eq!(parts.get(1).hs(), hs_state::REQUESTED);
        assert_eq!(parts.get(1).wake_at(), 10 + 4096);
        assert_eq!(parts.switch_requests(), 1);
    }
}
