//! The device through its node, as a test drives it: the step clock, the
//! handshake state of every partition, flushes, and what the ledger says
//! every block must hold.

use std::collections::BTreeMap;
use std::path::Path;

use gpupm_client::ops::reg32;
use gpupm_client::{stepclock, DevNode};
use gpupm_uapi::events::{self, MAX_EVENTS};
pub use gpupm_uapi::ioctl::ledger_scope;
use gpupm_uapi::ioctl::LedgerQuery;
use gpupm_uapi::regs::{self as r, ctx_state, MAX_CONTEXTS, MAX_VMS};

/// Per-event counts, indexed by event id.
pub type Counts = [u64; MAX_EVENTS];

/// An open device node and its configured partition slots.
#[derive(Debug)]
pub struct Device {
    node: DevNode,
    parts: Vec<u32>,
}

impl Device {
    /// Opens `node_dir/card0` (root or the admin group only).
    pub fn open(node_dir: &Path) -> Device {
        let node = DevNode::open(node_dir)
            .unwrap_or_else(|e| panic!("{e}: {:?}", std::error::Error::source(&e)));
        let parts = stepclock::configured_partitions(&node).expect("read PART_STATUS");
        Device { node, parts }
    }

    /// The node itself.
    pub fn node(&self) -> &DevNode {
        &self.node
    }

    /// Advances the step clock by `cycles`, then waits until the host has
    /// finished every switch that raised (the daemon's handshakes), or
    /// `give_up()` says the host is gone; returns whether all went idle.
    pub fn step(&self, cycles: u64, give_up: impl FnMut() -> bool) -> bool {
        self.node.advance(cycles).expect("GPUPM_IOC_ADVANCE");
        gpupm_test_support::device::wait_idle(&self.node, give_up)
    }

    /// Commits everything counted so far into the blocks (ULC partials,
    /// CCU banks, RCs) on every partition and the system channel, in one
    /// atomic batch. With the clock stopped and no switch pending, every
    /// block then equals [`Device::expected`].
    pub fn flush(&self) {
        stepclock::flush_all(&self.node, &self.parts).expect("flush batch");
    }

    /// What a flushed block of `scope`/`id` must hold by the ledger:
    /// `(generated − remainder) / scale − masked` per event.
    pub fn expected(&self, scope: u32, id: u32) -> Counts {
        expected_from(&self.node.ledger(scope, id).expect("GPUPM_IOC_LEDGER"))
    }

    /// Sum of a 64-bit partition register over the partitions.
    pub fn part_sum(&self, reg: u64) -> u64 {
        let offsets: Vec<u64> = self.parts.iter().map(|&p| r::part(p, reg)).collect();
        self.node
            .read_many(&offsets)
            .expect("read partition registers")
            .iter()
            .sum()
    }

    /// VMs bound to a partition.
    pub fn vms(&self) -> Vec<u32> {
        let offsets: Vec<u64> = (1..MAX_VMS).map(|v| r::vm(v, r::VM_PARTITION)).collect();
        let bound = self.node.read_many(&offsets).expect("read VM_PARTITION");
        (1..MAX_VMS)
            .zip(bound)
            .filter(|&(_, p)| p != 0)
            .map(|(v, _)| v)
            .collect()
    }

    /// Active contexts and their VMs.
    pub fn active_contexts(&self) -> BTreeMap<u32, u32> {
        let states: Vec<u64> = (1..MAX_CONTEXTS).map(|c| r::ctx(c, r::CTX_STATE)).collect();
        let states = self.node.read_many(&states).expect("read CTX_STATE");
        let active: Vec<u32> = (1..MAX_CONTEXTS)
            .zip(states)
            .filter(|&(_, s)| reg32(s) == ctx_state::ACTIVE)
            .map(|(c, _)| c)
            .collect();
        let vm_regs: Vec<u64> = active.iter().map(|&c| r::ctx(c, r::CTX_VM)).collect();
        let vms = self.node.read_many(&vm_regs).expect("read CTX_VM");
        active.into_iter().zip(vms.into_iter().map(reg32)).collect()
    }
}

/// What a flushed block must hold for ledger `l`.
pub fn expected_from(l: &LedgerQuery) -> Counts {
    gpupm_test_support::device::expected(l)
}

/// `a + b`, event by event.
pub fn add(a: &Counts, b: &Counts) -> Counts {
    let mut out = *a;
    for (x, y) in out.iter_mut().zip(b) {
        *x += y;
    }
    out
}

/// The id of event `name`; panics on a name the catalogue lacks.
pub fn event_id(name: &str) -> usize {
    usize::from(
        events::by_name(name)
            .unwrap_or_else(|| panic!("no event {name}"))
            .id,
    )
}
