//! Synthetic scenarios for benchmarks and load tests.

use gpupm_uapi::events::{self, UnitType};
use gpupm_uapi::regs::TRIG_THRESHOLD_MAX;

use super::spec::{
    h100_class, ClockSpec, ContextSpec, IdentitySpec, OobSpec, PartitionSpec, PhaseSpec,
    ProfileSpec, Scenario, StreamSpec, TriggerSpec, VmSpec,
};

/// Parameters of [`reference_load`].
#[derive(Clone, Copy, Debug)]
pub struct LoadSpec {
    /// Partitions (each owns one GPC and one memory slice; ≤ 8).
    pub partitions: u32,
    /// VMs, spread round robin over the partitions.
    pub vms: u32,
    /// Contexts, spread round robin over the VMs, all created at cycle 0.
    pub contexts: u32,
    /// Periodic trigger period in cycles.
    pub trigger_period: u32,
    /// Context timeslice in cycles.
    pub timeslice: u32,
}

/// A profile in which every event of `types` is active (rates spread over
/// 30-100 % of a busy unit), so every counter counts.
pub fn all_active_profile(name: &str, types: &[UnitType]) -> ProfileSpec {
    let rates = events::CATALOGUE
        .iter()
        .filter(|e| types.contains(&e.unit))
        .map(|e| {
            let full = if e.multibit { 24.0 } else { 0.75 };
            (e.id, full * (0.3 + 0.7 * (f64::from(e.id) * 0.37).fract()))
        })
        .collect();
    ProfileSpec {
        name: name.into(),
        phases: vec![PhaseSpec {
            duration_cycles: 1 << 24,
            rates,
        }],
        program: None,
    }
}

/// The H100-class GPU with every counter active: `spec.partitions` slices,
/// contexts of all-active profiles, NVLink busy.
pub fn reference_load(spec: LoadSpec) -> Scenario {
    let khz = 1_980_000;
    let context_types = [
        UnitType::Sm,
        UnitType::L2Slice,
        UnitType::FbPartition,
        UnitType::CopyEngine,
        UnitType::Pcie,
    ];
    let partitions: Vec<PartitionSpec> = (0..spec.partitions.min(8))
        .map(|i| PartitionSpec {
            slot: i + 1,
            gpcs: vec![i],
            memory_slices: vec![i],
            ctx_timeslice_cycles: spec.timeslice,
            vm_timeslice_cycles: spec.timeslice.saturating_mul(4),
            ri_version: 1,
            ri_max_rgs: gpupm_uapi::ri::RGS_MAX,
        })
        .collect();
    let n_parts = spec.partitions.clamp(1, 8);
    let vms: Vec<VmSpec> = (1..=spec.vms.max(1))
        .map(|id| VmSpec {
            id,
            partition: (id - 1) % n_parts + 1,
            confidential: false,
            confidential_key: None,
        })
        .collect();
    let n_vms = spec.vms.max(1);
    let name = format!(
        "reference-load-{}p-{}vm-{}ctx",
        n_parts, n_vms, spec.contexts
    );
    Scenario {
        identity: IdentitySpec::derived(&name, 7, 0),
        name,
        seed: 7,
        clock: ClockSpec {
            khz,
            secondary_khz: khz / 2,
        },
        programs: Vec::new(),
        topology: h100_class(),
        trigger: TriggerSpec {
            period_cycles: spec.trigger_period,
            dither: false,
            threshold: TRIG_THRESHOLD_MAX,
        },
        stream: StreamSpec {
            ring_records: 1024,
            watermark: 512,
        },
        switch_timeout_cycles: 3_960_000,
        partitions,
        vms,
        profiles: vec![
            all_active_profile("all-active", &context_types),
            all_active_profile("nvlink", &[UnitType::Nvlink]),
        ],
        device_profile: Some(1),
        contexts: (0..spec.contexts)
            .map(|i| ContextSpec {
                vm: i % n_vms + 1,
                profile: 0,
                create_at: 0,
                destroy_at: None,
            })
            .collect(),
        churn: Vec::new(),
        throttle: Vec::new(),
        migrations: Vec::new(),
        oob: OobSpec::at_khz(khz),
    }
}
