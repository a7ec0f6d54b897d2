//! The resolved scenario: what the device model consumes. Every time is in
//! device cycles, every event a catalogue id, every profile an index.

/// A validated scenario.
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    /// Human name.
    pub name: String,
    /// Seed of every random choice the device makes.
    pub seed: u64,
    /// Who the device is on its host.
    pub identity: IdentitySpec,
    /// Clock.
    pub clock: ClockSpec,
    /// Topology.
    pub topology: TopologySpec,
    /// Trigger block settings.
    pub trigger: TriggerSpec,
    /// Stream ring settings (every partition slot and the system channel).
    pub stream: StreamSpec,
    /// Cycles the device waits for host software before completing a
    /// requested switch itself.
    pub switch_timeout_cycles: u32,
    /// GPU slices. Slots are 1..=n, unique.
    pub partitions: Vec<PartitionSpec>,
    /// VMs, ids unique in 1..MAX_VMS, each bound to a configured partition.
    pub vms: Vec<VmSpec>,
    /// Activity profiles, referenced by index.
    pub profiles: Vec<ProfileSpec>,
    /// Declared programs (`[[program]]`), referenced by index; see
    /// [`Scenario::program_table`] for the table with generated ones.
    pub programs: Vec<super::program::ProgramSpec>,
    /// Profile driving the device-level units (NVLink), if any.
    pub device_profile: Option<usize>,
    /// Contexts created at fixed times.
    pub contexts: Vec<ContextSpec>,
    /// Generated context churn.
    pub churn: Vec<ChurnSpec>,
    /// Windows during which the clock runs at secondary capability.
    pub throttle: Vec<ThrottleWindow>,
    /// VM migrations between partitions, in the order they are due.
    pub migrations: Vec<MigrationSpec>,
    /// The out-of-band reduction channel (`[oob]`, `docs/oob.md`).
    pub oob: OobSpec,
}

/// The device's identity (`[identity]`; the `GPU_INDEX` … `MODEL_NAME`
/// registers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdentitySpec {
    /// Index on the host, `0..MAX_DEVICES`.
    pub index: u32,
    /// PCI address.
    pub pci: gpupm_uapi::identity::PciAddress,
    /// UUID.
    pub uuid: gpupm_uapi::identity::DeviceUuid,
    /// Serial number: printable ASCII, 1 to 16 bytes.
    pub serial: String,
    /// Model name: printable ASCII, 1 to 32 bytes.
    pub model: String,
}

/// The out-of-band reduction channel's settings: the device's own, which
/// no register can change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OobSpec {
    /// Period of the channel's own trigger and commit, in cycles; default
    /// 50 ms at the nominal clock, at least `OOB_PERIOD_MIN` cycles.
    pub period_cycles: u64,
    /// Cycles after which a host whose node is open but that made no
    /// request (and had no reader waiting) is reported not responding;
    /// default 1 s at the nominal clock.
    pub host_timeout_cycles: u64,
}

impl OobSpec {
    /// The defaults at a nominal clock of `khz`.
    pub fn at_khz(khz: u32) -> Self {
        let ms = |n: u64| (u64::from(khz) * n).max(1);
        OobSpec {
            period_cycles: ms(DEFAULT_OOB_PERIOD_MS).max(OOB_PERIOD_MIN),
            host_timeout_cycles: ms(DEFAULT_OOB_HOST_TIMEOUT_MS),
        }
    }
}

/// Default period of the OOB channel, in milliseconds of nominal time.
pub const DEFAULT_OOB_PERIOD_MS: u64 = 50;
/// Default host timeout of the OOB channel, in milliseconds of nominal time.
pub const DEFAULT_OOB_HOST_TIMEOUT_MS: u64 = 1_000;
/// Shortest OOB period in cycles (the trigger block's shortest period).
pub const OOB_PERIOD_MIN: u64 = gpupm_uapi::regs::TRIG_PERIOD_MIN as u64;

/// Clock settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockSpec {
    /// Nominal (primary capability) frequency in kHz; default 1_980_000.
    pub khz: u32,
    /// Frequency at secondary (throttled) capability in kHz; default khz / 2.
    pub secondary_khz: u32,
}

/// Topology. Defaults describe an H100-class GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopologySpec {
    /// SMs per GPC; its length is the GPC count. Default 8 GPCs, 132 SMs
    /// (17,17,17,17,16,16,16,16).
    pub sms_per_gpc: Vec<u32>,
    /// Memory slices; default 8.
    pub memory_slices: u32,
    /// L2 slices per memory slice; default 6.
    pub l2_per_slice: u32,
    /// FB partitions per memory slice; default 2.
    pub fb_per_slice: u32,
    /// Copy engines per memory slice; default 1.
    pub ce_per_slice: u32,
    /// NVLinks; default 18.
    pub nvlinks: u32,
    /// Whether the PCIe interface is present; default true.
    pub pcie: bool,
}

/// Trigger block settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TriggerSpec {
    /// Periodic trigger period in cycles; 0 disables. Default 1 ms.
    pub period_cycles: u32,
    /// P+R dithering. Default false.
    pub dither: bool,
    /// CCU threshold. Default `TRIG_THRESHOLD_MAX`.
    pub threshold: u32,
}

/// Stream ring settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamSpec {
    /// Ring capacity in records: a power of two in 16..=STREAM_RING_MAX. Default 1024.
    pub ring_records: u32,
    /// Watermark in records, 1..=ring_records. Default ring_records / 2.
    pub watermark: u32,
}

/// One GPU slice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionSpec {
    /// Slot 1..=15 (RC index).
    pub slot: u32,
    /// GPCs owned (indices < GPC count, owned by no other partition).
    pub gpcs: Vec<u32>,
    /// Memory slices owned (indices < memory_slices, owned by no other partition).
    pub memory_slices: Vec<u32>,
    /// Context timeslice in cycles; 0 = contexts never rotate. Default 2 ms.
    pub ctx_timeslice_cycles: u32,
    /// VM timeslice in cycles; 0 = VMs never rotate. Default 4 ms.
    pub vm_timeslice_cycles: u32,
    /// Capability version runtime-instrumentation sessions see (key
    /// `ri_version`, 0..=255, default 1); a VM migrated to a partition of
    /// another version halts its sessions.
    pub ri_version: u8,
    /// Largest RGS a session may use here (key `ri_max_rgs`, 0..=7,
    /// default 7).
    pub ri_max_rgs: u32,
}

/// One VM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmSpec {
    /// VM id, 1..MAX_VMS.
    pub id: u32,
    /// Partition slot it is bound to.
    pub partition: u32,
    /// Whether the VM is confidential: its counts leave the device only
    /// sealed under a session its tenant establishes (`docs/confidential.md`).
    pub confidential: bool,
    /// A key given in the scenario (64 hex digits in TOML): the VM starts
    /// with a session under it at every device start and reset. The host
    /// wrote it, so it protects nothing from the host: `gpupm-driver`
    /// refuses such a scenario unless run with `--insecure-scenario-keys`
    /// (tests and `gpupm demo`). Implies `confidential`.
    pub confidential_key: Option<[u8; 32]>,
}

impl VmSpec {
    /// Whether the VM is confidential (`confidential`, or a scenario key).
    pub fn is_confidential(&self) -> bool {
        self.confidential || self.confidential_key.is_some()
    }
}

/// An activity profile: phases that repeat.
#[derive(Clone, Debug, PartialEq)]
pub struct ProfileSpec {
    /// Name (unique).
    pub name: String,
    /// Phases, at least one.
    pub phases: Vec<PhaseSpec>,
    /// Program its contexts run (index into `Scenario::programs`).
    pub program: Option<usize>,
}

/// One phase of a profile.
#[derive(Clone, Debug, PartialEq)]
pub struct PhaseSpec {
    /// Length in cycles (> 0).
    pub duration_cycles: u64,
    /// Per-event rates: (event id, rate). Single-bit: probability per cycle
    /// in 0..=1. Multi-bit: mean signal value per cycle in 0..=32. Events of
    /// the same unit type as listed; unlisted events are 0.
    pub rates: Vec<(u16, f64)>,
}

/// A context created at a fixed time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContextSpec {
    /// Owning VM id.
    pub vm: u32,
    /// Profile index.
    pub profile: usize,
    /// Creation cycle.
    pub create_at: u64,
    /// Destruction cycle (> create_at), if any.
    pub destroy_at: Option<u64>,
}

/// Periodic context churn: starting at `start_at`, every `every_cycles` a
/// context is created in `vm` with the next profile of `profiles` (round
/// robin) and destroyed `lifetime_cycles` later.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChurnSpec {
    /// Owning VM id.
    pub vm: u32,
    /// Profile indices, at least one.
    pub profiles: Vec<usize>,
    /// First creation cycle.
    pub start_at: u64,
    /// Interval between creations (> 0).
    pub every_cycles: u64,
    /// Lifetime of each context (> 0).
    pub lifetime_cycles: u64,
    /// No creations at or after this cycle, if set.
    pub stop_at: Option<u64>,
}

/// A window [start, end) of secondary clock capability.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThrottleWindow {
    /// First cycle.
    pub start: u64,
    /// End cycle (exclusive, > start).
    pub end: u64,
}

/// A VM moved to another partition slot at a cycle (the `RI_MIGRATE`
/// register path's effect); while the VM is current or incoming on its
/// partition the device retries at the partition's next scheduling point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MigrationSpec {
    /// Cycle the migration is due.
    pub at: u64,
    /// The VM.
    pub vm: u32,
    /// Its new partition slot (configured, not the one it is on then).
    pub to: u32,
}

/// The H100-class topology: 8 GPCs of 132 SMs in all, 8 memory slices of
/// 6 L2 slices, 2 FB partitions and a copy engine, 18 NVLinks and PCIe.
pub fn h100_class() -> TopologySpec {
    TopologySpec {
        sms_per_gpc: vec![17, 17, 17, 17, 16, 16, 16, 16],
        memory_slices: 8,
        l2_per_slice: 6,
        fb_per_slice: 2,
        ce_per_slice: 1,
        nvlinks: 18,
        pcie: true,
    }
}
