//! The device: owns every unit, the clock and the wiring between units.
//!
//! A register access is routed by address range to the unit that owns the
//! register ([`route`]); time advances event by event ([`time`]); the
//! flows that cross units — triggers through the CCUs, the RC buffer and
//! the RCs into memory and the rings ([`wiring`]), the switch handshake and
//! the context lifecycle ([`switch`]) — are written here, once, as the
//! units' operations in order. The host-facing surface is in [`api`].

pub(crate) mod api;
mod route;
mod switch;
mod time;
mod wiring;

use gpupm_uapi::layout::{block_kind, SYSTEM_BLOCK_SLOT};
use gpupm_uapi::regs::MAX_VMS;

use super::ccu::{Counting, EngineKind};
use super::clock::Clock;
use super::context::ContextTable;
use super::intr::Interrupts;
use super::ledger::{Attribution, Ledger};
use super::mailbox::Mailbox;
use super::memory::Memory;
use super::partition::Partitions;
use super::rates::Rates;
use super::rc::ReductionChannels;
use super::topology::{Topology, TopologyError};
use super::trigger::TriggerBlock;
use super::vm::VmTable;
use super::workload::Workload;
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

/// The emulated perfmon device.
#[derive(Clone, Debug)]
pub struct Device {
    scenario: Scenario,
    topo: Topology,
    clock: Clock,
    ccu: Counting,
    ledger: Ledger,
    trig: TriggerBlock,
    rc: ReductionChannels,
    parts: Partitions,
    vms: VmTable,
    ctxs: ContextTable,
    mem: Memory,
    intr: Interrupts,
    mbox: Mailbox,
    workload: Workload,
    rates: Rates,
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
            clock: Clock::new(scenario.clock, &scenario.throttle, step_clock),
            ccu: Counting::new(&topo, engine, scenario.seed),
            ledger: Ledger::default(),
            trig: TriggerBlock::new(scenario.trigger, scenario.seed),
            rc: ReductionChannels::default(),
            parts: Partitions::new(&topo),
            vms: VmTable::default(),
            ctxs: ContextTable::default(),
            mem: Memory::new(
                ring_slots,
                scenario.stream.ring_records,
                scenario.stream.watermark,
            ),
            intr: Interrupts::default(),
            mbox: Mailbox::default(),
            workload: Workload::new(scenario),
            rates: Rates::new(scenario, &topo),
            scenario: scenario.clone(),
            topo,
        };
        dev.configure()?;
        dev.process_events_at(0);
        Ok(dev)
    }

    /// Configures partitions and VMs from the scenario and starts the
    /// device-level units.
    fn configure(&mut self) -> Result<(), BuildError> {
        for p in &self.scenario.partitions {
            self.parts
                .configure(p, &self.topo, self.scenario.switch_timeout_cycles);
        }
        for v in &self.scenario.vms {
            let bad = |m: &str| BuildError::Scenario(format!("VM {}: {m}", v.id));
            if v.id == 0 || v.id >= MAX_VMS {
                return Err(bad("id out of range"));
            }
            if v.partition == 0 || !self.parts.is_configured(v.partition) {
                return Err(bad("bound to a partition that is not configured"));
            }
            self.vms.configure(v);
            self.parts.bind_vm(v.partition, v.id);
            self.mem
                .init_block(v.id, block_kind::VM, v.id, v.id, self.vms.cipher(v.id));
        }
        let vm_missing = |vm: u32| self.vms.partition(vm) == 0;
        if self.scenario.contexts.iter().any(|c| vm_missing(c.vm))
            || self.scenario.churn.iter().any(|c| vm_missing(c.vm))
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
        if self.scenario.device_profile.is_some() {
            let base = self.rates.device_base(0);
            self.start_generation(0, Attribution::default(), base);
        }
        Ok(())
    }

    /// Current device cycle.
    pub fn now(&self) -> u64 {
        self.clock.now()
    }

    /// The static layout.
    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// The scenario the device was built from.
    pub fn scenario(&self) -> &Scenario {
        &self.scenario
    }

    /// Counts partition `p` up to now.
    fn sync(&mut self, p: u32) {
        let thr = self.trig.threshold();
        self.ccu
            .sync(&self.topo, &mut self.ledger, p, self.clock.now(), thr);
    }

    /// Counts every configured partition up to now.
    fn sync_all(&mut self) {
        for p in 0..gpupm_uapi::regs::MAX_PARTITION_SLOTS {
            if self.parts.is_configured(p) {
                self.sync(p);
            }
        }
    }
}
