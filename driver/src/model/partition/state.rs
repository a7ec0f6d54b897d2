//! A partition's control state and the queries the device makes of it.

use gpupm_uapi::regs::{hs_state, part_ctrl, MAX_PARTITION_SLOTS};

use crate::model::topology::Topology;
use crate::scenario::PartitionSpec;

/// Per-partition control state.
#[derive(Clone, Debug, Default)]
pub struct Partition {
    pub(super) configured: bool,
    pub(super) gpc_mask: u32,
    pub(super) mem_mask: u32,
    pub(super) ccu_assigned: u64,
    /// VMs bound to this partition, in id order.
    pub(super) vms: Vec<u32>,
    pub(super) cur_vm: u32,
    pub(super) cur_ctx: u32,
    /// Handshake state ([`hs_state`]).
    pub(super) hs: u32,
    /// Pause bits ([`part_ctrl`]).
    pub(super) ctrl: u32,
    pub(super) acked: u64,
    /// Flush acks on their way: (arrival cycle, CCU mask), in cycle order.
    pub(super) acks_due: Vec<(u64, u64)>,
    /// The device's fallback is finishing the switch and waits for acks.
    pub(super) fallback_waiting: bool,
    pub(super) next_vm: u32,
    pub(super) next_ctx: u32,
    pub(super) req_cycle: u64,
    pub(super) bind_vm: u32,
    pub(super) bind_ctx: u32,
    pub(super) timeout: u32,
    pub(super) fallbacks: u64,
    pub(super) switches: u64,
    pub(super) last_fallback: bool,
    pub(super) slice_start: u64,
    pub(super) vm_slice_start: u64,
    pub(super) ts_ctx: u32,
    pub(super) ts_vm: u32,
    /// Next scheduler decision when no switch is pending.
    pub(super) sched_at: u64,
    /// The switch in progress changed the VM (restarts the VM timeslice).
    pub(super) vm_changed: bool,
    /// Context the RC was bound to before the last re-point.
    pub(super) outgoing: u32,
}

impl Partition {
    /// Whether the slot is configured (owns units).
    #[inline]
    pub fn configured(&self) -> bool {
        self.configured
    }

    /// Handshake state ([`hs_state`]).
    #[inline]
    pub fn hs(&self) -> u32 {
        self.hs
    }

    /// VM and context the RC is bound to.
    #[inline]
    pub fn current(&self) -> (u32, u32) {
        (self.cur_vm, self.cur_ctx)
    }

    /// VM and context a pending switch brings in.
    #[inline]
    pub fn incoming(&self) -> (u32, u32) {
        (self.next_vm, self.next_ctx)
    }

    /// Whether context `ctx` runs here or is the one a pending switch brings in.
    pub fn involves(&self, ctx: u32) -> bool {
        self.cur_ctx == ctx || (self.hs != hs_state::IDLE && self.next_ctx == ctx)
    }

    /// Switches completed by the device's fallback.
    pub fn fallbacks(&self) -> u64 {
        self.fallbacks
    }

    /// Whether periodic triggers skip this partition (handshake step 2).
    #[inline]
    pub fn triggers_paused(&self) -> bool {
        self.ctrl & part_ctrl::TRIG_PAUSE != 0
    }

    /// Whether the pending switch changes VM.
    pub fn vm_switch(&self) -> bool {
        self.hs != hs_state::IDLE && self.next_vm != self.cur_vm
    }

    /// When the partition next needs the device's attention (a fallback
    /// waiting for flush acks is woken by their arrival instead).
    #[inline]
    pub fn wake_at(&self) -> u64 {
        if self.hs == hs_state::IDLE {
            self.sched_at
        } else if self.fallback_waiting {
            u64::MAX
        } else {
            self.req_cycle.saturating_add(u64::from(self.timeout))
        }
    }
}

/// Every partition slot (index = slot; 0 = the system channel).
#[derive(Clone, Debug)]
pub struct Partitions {
    pub(super) slots: Vec<Partition>,
    /// Switch requests raised so far (a real-time tick stops at each).
    pub(super) switch_requests: u64,
}

impl Partitions {
    /// Slot 0 configured as the system channel owning the system CCUs;
    /// every other slot unconfigured.
    pub fn new(topo: &Topology) -> Self {
        let mut slots = vec![Partition::default(); MAX_PARTITION_SLOTS as usize];
        let system = &mut slots[0];
        system.configured = true;
        system.ccu_assigned = mask_of(&topo.partition_ccus[0]);
        system.sched_at = u64::MAX;
        Partitions {
            slots,
            switch_requests: 0,
        }
    }

    /// Configures slot `spec.slot` as a GPU slice.
    pub fn configure(&mut self, spec: &PartitionSpec, topo: &Topology, timeout: u32) {
        let part = &mut self.slots[spec.slot as usize];
        part.configured = true;
        part.gpc_mask = spec.gpcs.iter().fold(0, |m, g| m | 1 << g);
        part.mem_mask = spec.memory_slices.iter().fold(0, |m, g| m | 1 << g);
        part.ccu_assigned = mask_of(&topo.partition_ccus[spec.slot as usize]);
        part.ts_ctx = spec.ctx_timeslice_cycles;
        part.ts_vm = spec.vm_timeslice_cycles;
        part.timeout = timeout;
        part.sched_at = u64::MAX;
    }

    /// Binds VM `vm` to slot `p` (VMs are bound in id order).
    pub fn bind_vm(&mut self, p: u32, vm: u32) {
        self.slots[p as usize].vms.push(vm);
    }

    /// Moves VM `vm` from slot `from` to slot `to` (a migration; the VM
    /// is neither current nor incoming on `from`).
    pub fn move_vm(&mut self, vm: u32, from: u32, to: u32) {
        self.slots[from as usize].vms.retain(|&v| v != vm);
        let vms = &mut self.slots[to as usize].vms;
        if let Err(at) = vms.binary_search(&vm) {
            vms.insert(at, vm);
        }
    }

    /// Slot `p`; `p` must be below `MAX_PARTITION_SLOTS`.
    #[inline]
    pub fn get(&self, p: u32) -> &Partition {
        &self.slots[p as usize]
    }

    /// Whether slot `p` exists and is configured.
    #[inline]
    pub fn is_configured(&self, p: u32) -> bool {
        self.slots
            .get(p as usize)
            .is_some_and(Partition::configured)
    }

    /// Configured slots, in slot order.
    pub fn configured(&self) -> impl Iterator<Item = u32> + '_ {
        (0..MAX_PARTITION_SLOTS).filter(|&p| self.slots[p as usize].configured)
    }

    /// Mask of the configured slots.
    pub fn configured_mask(&self) -> u32 {
        self.configured().fold(0, |m, p| m | 1 << p)
    }

    /// Mask of the configured slots whose periodic triggers are not paused.
    pub fn unpaused_mask(&self) -> u32 {
        self.configured()
            .filter(|&p| !self.slots[p as usize].triggers_paused())
            .fold(0, |m, p| m | 1 << p)
    }

    /// Configured GPU slices (slot 0 excluded).
    pub fn slice_count(&self) -> usize {
        self.configured().filter(|&p| p != 0).count()
    }

    /// Switch requests raised so far.
    pub fn switch_requests(&self) -> u64 {
        self.switch_requests
    }

    /// Whether some partition's switch is between request and completion.
    pub fn switch_pending(&self) -> bool {
        self.slots
            .iter()
            .any(|part| part.configured && part.hs != hs_state::IDLE)
    }

    /// Whether any switch was ever completed by the fallback.
    pub fn fallback_seen(&self) -> bool {
        self.slots.iter().any(|p| p.fallbacks > 0)
    }

    /// Switches completed by the fallback, all partitions.
    pub fn total_fallbacks(&self) -> u64 {
        self.slots.iter().map(|p| p.fallbacks).sum()
    }
}

fn mask_of(ccus: &[u32]) -> u64 {
    ccus.iter().fold(0, |m, &c| m | 1 << c)
}
