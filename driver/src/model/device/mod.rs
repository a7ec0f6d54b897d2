//! The device: owns every unit, the clock and the wiring between units.
//!
//! A register access is routed by address range to the unit that owns the
//! register ([`route`]); time advances event by event ([`time`]); the
//! flows that cross units — triggers through the CCUs, the RC buffer and
//! the RCs into memory and the rings ([`wiring`]), the switch handshake and
//! the context lifecycle ([`switch`]), the out-of-band channel's own
//! trigger, commits and mailbox ([`oob`]) — are written here, once, as the
//! units' operations in order. The host-facing surface is in [`api`].

pub(crate) mod api;
mod cc;
mod lane;
mod oob;
mod programs;
mod ranges;
mod ri;
mod route;
mod switch;
mod time;
mod wiring;

use gpupm_uapi::layout::{block_kind, STREAM_RING_MAX, SYSTEM_BLOCK_SLOT};
use gpupm_uapi::regs::{MAX_CONTEXTS, MAX_PARTITION_SLOTS, MAX_VMS};

use super::cc::{BootIds, EntropyError, RekeyStaging, Responder};
use super::ccu::{Counting, EngineKind};
use super::clock::Clock;
use super::context::ContextTable;
use super::intr::Interrupts;
use super::ledger::{Attribution, Ledger};
use super::mailbox::Mailbox;
use super::memory::Memory;
use super::oob::host::HostLink;
use super::oob::mailbox::OobMailbox;
use super::oob::OobChannel;
use super::partition::Partitions;
use super::program::run::ProgramRun;
use super::program::Programs;
use super::ranges::RangeUnit;
use super::rates::Rates;
use super::rc::ReductionChannels;
use super::ri::RiUnit;
use super::sampling::Sampler;
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
    /// No session id could be drawn.
    #[error("cannot start a confidential session")]
    Entropy(#[from] EntropyError),
}

/// The emulated perfmon device.
///
/// Not `Clone`: a copy would seal confidential VMs' data with the same
/// session keys and nonce counters as the original.
#[derive(Debug)]
pub struct Device {
    scenario: Scenario,
    boot: BootIds,
    /// Device resets so far (the session ids drawn after the first).
    resets: u64,
    /// The confidential rekey staging registers.
    staging: RekeyStaging,
    /// The device's side of confidential VMs' key exchanges.
    responder: Responder,
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
    oob_mbox: OobMailbox,
    /// The out-of-band reduction channel and its blocks.
    oob: OobChannel,
    /// The host driver as the device sees it (for the OOB mailbox).
    host: HostLink,
    workload: Workload,
    rates: Rates,
    programs: Programs,
    /// Per context id: the execution of its program, if it runs one.
    runs: Vec<Option<ProgramRun>>,
    /// Per partition slot: the sampling unit.
    samplers: Vec<Sampler>,
    /// The runtime-instrumentation control blocks.
    ri: RiUnit,
    /// Per partition slot: the marked-range unit.
    ranges: Vec<RangeUnit>,
    /// Per partition slot: the profile phase of what it runs.
    phases: [usize; MAX_PARTITION_SLOTS as usize],
    /// Per partition slot: the VM whose generation last moved the
    /// generator phases (0: none yet) — a switch between it and another
    /// VM scrubs them when either is confidential.
    phase_vm: [u32; MAX_PARTITION_SLOTS as usize],
    /// Test builds: the marked ranges count confidential VMs' contexts
    /// (a leak of the confidential workload), to prove the
    /// non-interference tests see it.
    #[cfg(any(test, feature = "test-utils"))]
    range_leak: bool,
}

impl Device {
    /// Builds the device for `scenario` at cycle 0 and runs cycle 0's
    /// events; its first session id comes from the operating system.
    pub fn new(
        scenario: &Scenario,
        engine: EngineKind,
        step_clock: bool,
    ) -> Result<Self, BuildError> {
        Self::build(scenario, engine, step_clock, BootIds::Os)
    }

    /// [`Device::new`] with session ids from `boot` (test builds: two
    /// devices with the same pinned ids seal alike).
    #[cfg(any(test, feature = "test-utils"))]
    pub fn with_boot_ids(
        scenario: &Scenario,
        engine: EngineKind,
        step_clock: bool,
        boot: BootIds,
    ) -> Result<Self, BuildError> {
        Self::build(scenario, engine, step_clock, boot)
    }

    fn build(
        scenario: &Scenario,
        engine: EngineKind,
        step_clock: bool,
        boot: BootIds,
    ) -> Result<Self, BuildError> {
        let topo = Topology::build(&scenario.topology, &scenario.partitions)?;
        let ring_slots = scenario
            .partitions
            .iter()
            .map(|p| p.slot)
            .max()
            .unwrap_or(0)
            + 1;
        let session = boot.draw(0)?;
        let confidential = scenario
            .vms
            .iter()
            .filter(|v| v.is_confidential() && v.id < MAX_VMS)
            .fold(0u64, |m, v| m | 1 << v.id);
        let mut dev = Device {
            boot,
            resets: 0,
            staging: RekeyStaging::default(),
            responder: Responder::default(),
            clock: Clock::new(scenario.clock, &scenario.throttle, step_clock),
            ccu: Counting::new(&topo, engine, scenario.seed),
            ledger: Ledger::new(confidential),
            trig: TriggerBlock::new(scenario.trigger, scenario.seed),
            rc: ReductionChannels::default(),
            parts: Partitions::new(&topo),
            vms: VmTable::default(),
            ctxs: ContextTable::default(),
            mem: Memory::new(ring_slots, |p| ring_size(scenario, p)),
            intr: Interrupts::default(),
            mbox: Mailbox::default(),
            oob_mbox: OobMailbox::default(),
            oob: OobChannel::new(
                scenario.oob.period_cycles,
                scenario.vms.iter().map(|v| (v.id, v.is_confidential())),
            ),
            host: HostLink::new(scenario.oob.host_timeout_cycles),
            workload: Workload::new(scenario),
            rates: Rates::new(scenario, &topo),
            programs: Programs::new(scenario),
            runs: vec![None; MAX_CONTEXTS as usize],
            samplers: samplers(scenario),
            ri: RiUnit::new(scenario),
            ranges: ranges::range_units(scenario),
            phases: [0; MAX_PARTITION_SLOTS as usize],
            phase_vm: [0; MAX_PARTITION_SLOTS as usize],
            #[cfg(any(test, feature = "test-utils"))]
            range_leak: false,
            scenario: scenario.clone(),
            topo,
        };
        dev.configure(session)?;
        dev.process_events_at(0);
        Ok(dev)
    }

    /// Configures partitions and VMs from the scenario and starts the
    /// device-level units.
    fn configure(&mut self, session: u64) -> Result<(), BuildError> {
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
            self.vms.configure(v, session);
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
            self.start_generation(0, Attribution::default());
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

    /// Test builds only: from now on the marked ranges count confidential
    /// VMs' contexts too — registers, records and interrupts that depend
    /// on the confidential workload. It exists so
    /// that the non-interference tests can show they catch that leak; no
    /// shipped build has it.
    #[cfg(any(test, feature = "test-utils"))]
    pub fn reintroduce_range_leak(&mut self) {
        self.range_leak = true;
    }

    /// Whether the marked ranges count confidential VMs' contexts (only
    /// ever in a test build that asked for it).
    #[inline]
    fn leaks_confidential_ranges(&self) -> bool {
        #[cfg(any(test, feature = "test-utils"))]
        return self.range_leak;
        #[cfg(not(any(test, feature = "test-utils")))]
        false
    }

    /// Whether partition `p`'s counts belong to a confidential VM now.
    fn owner_confidential(&self, p: u32) -> bool {
        self.vms.confidential(self.ccu.owner(p).vm)
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

/// Capacity and watermark of partition slot `p`'s stream ring. RC0
/// commits at the triggers of every partition, so ring 0 holds the
/// scenario's capacity once per GPU slice and once for the device-wide
/// triggers (a power of two, at most [`STREAM_RING_MAX`]), with the
/// watermark at the same fraction.
fn ring_size(scenario: &Scenario, p: u32) -> (u32, u32) {
    let (cap, watermark) = (scenario.stream.ring_records, scenario.stream.watermark);
    if p != 0 {
        return (cap, watermark);
    }
    let receivers = u32::try_from(scenario.partitions.len()).unwrap_or(u32::MAX);
    let cap0 = cap
        .saturating_mul(receivers.saturating_add(1))
        .checked_next_power_of_two()
        .unwrap_or(STREAM_RING_MAX)
        .min(STREAM_RING_MAX);
    let scaled = u64::from(watermark) * u64::from(cap0) / u64::from(cap.max(1));
    (cap0, u32::try_from(scaled).unwrap_or(cap0).clamp(1, cap0))
}

/// One sampling unit per partition slot, knowing the shortest taken-branch
/// gap of the programs its contexts can run.
fn samplers(scenario: &Scenario) -> Vec<Sampler> {
    (0..MAX_PARTITION_SLOTS)
        .map(|p| {
            let configured = p != 0 && scenario.partitions.iter().any(|s| s.slot == p);
            Sampler::new(p, configured, scenario.min_branch_gap(p), scenario.seed)
        })
        .collect()
}
