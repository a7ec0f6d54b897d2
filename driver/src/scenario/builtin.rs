//! The built-in scenario the demo runs when given no scenario file.

use super::parse::parse;
use super::spec::Scenario;

/// The built-in scenario: an H100-class GPU split into four slices.
///
/// Slot 1 (GPCs 0-3) runs VM 1; slot 2 (GPCs 4-5) is time-sliced between
/// VMs 2 and 3; slot 3 (GPC 6) runs the confidential VM 4; slot 4 (GPC 7) is
/// shared by VM 5 and VM 6, which only runs churned contexts. NVLink traffic
/// comes from a device profile imitating all-reduce bursts, and the clock is
/// throttled for 10 ms.
///
/// Rates are per unit instance and cycle: SM rates per SM, L2 rates per L2
/// slice, FB rates per FB partition. Multi-bit byte signals are bytes per
/// cycle (`fb_bytes` is 32 x the sectors moved).
pub const BUILTIN_TOML: &str = r#"
name = "builtin-h100-4slice"
seed = 1
device_profile = "nvlink-allreduce"

[clock]
mhz = 1980
secondary_mhz = 1200

[trigger]
period_us = 1000
dither = false

[[partition]]
slot = 1
gpcs = [0, 1, 2, 3]
memory_slices = [0, 1, 2, 3]

[[partition]]
slot = 2
gpcs = [4, 5]
memory_slices = [4, 5]
vm_timeslice_us = 4000

[[partition]]
slot = 3
gpcs = [6]
memory_slices = [6]

[[partition]]
slot = 4
gpcs = [7]
memory_slices = [7]

[[vm]]
id = 1
partition = 1

[[vm]]
id = 2
partition = 2

[[vm]]
id = 3
partition = 2

[[vm]]
id = 4
partition = 3
confidential_key = "677075706d2d64656d6f2d6b65793a6e6f742d612d7365637265742d30303031"

[[vm]]
id = 5
partition = 4

[[vm]]
id = 6
partition = 4

# Tensor-core GEMM: tensor pipe busy, operands staged through shared memory,
# global loads mostly bypass L1 and hit in L2.
[[profile]]
name = "gemm"
program = "gemm"
[[profile.phase]]
duration_us = 1000
[profile.phase.rates]
sm_cycles_elapsed = 1.0
sm_cycles_active = 0.98
sm_issue_active = 0.60
sm_inst_executed = 0.60
sm_threads_active = 19.0
sm_warps_active = 16.0
sm_warps_launched = 0.0004
sm_inst_fp32 = 0.08
sm_tensor_active = 0.85
sm_ld_global = 0.03
sm_st_global = 0.004
sm_ld_shared = 0.18
sm_st_shared = 0.05
sm_l1_hit = 0.04
sm_l1_miss = 0.10
sm_branch = 0.03
sm_branch_divergent = 0.0003
sm_stall_memory = 0.12
sm_stall_sync = 0.08
l2_read_req = 0.25
l2_write_req = 0.03
l2_hit = 0.22
l2_miss = 0.04
l2_cycles_active = 0.40
fb_read_sectors = 0.10
fb_write_sectors = 0.02
fb_cycles_active = 0.25
fb_bytes = 3.84
ce_cycles_active = 0.01
ce_bytes = 0.2
pcie_rx_bytes = 0.3
pcie_tx_bytes = 0.1
pcie_cycles_active = 0.02

# STREAM-like bandwidth test: few instructions, most warps waiting on DRAM.
[[profile]]
name = "stream"
program = "memcpy"
[[profile.phase]]
duration_us = 1000
[profile.phase.rates]
sm_cycles_elapsed = 1.0
sm_cycles_active = 0.95
sm_issue_active = 0.22
sm_inst_executed = 0.22
sm_threads_active = 7.0
sm_warps_active = 28.0
sm_warps_launched = 0.002
sm_inst_fp32 = 0.05
sm_ld_global = 0.09
sm_st_global = 0.045
sm_l1_hit = 0.02
sm_l1_miss = 0.34
sm_branch = 0.02
sm_branch_divergent = 0.0001
sm_stall_memory = 0.70
sm_stall_sync = 0.01
l2_read_req = 0.60
l2_write_req = 0.30
l2_hit = 0.25
l2_miss = 0.62
l2_cycles_active = 0.92
fb_read_sectors = 0.55
fb_write_sectors = 0.28
fb_cycles_active = 0.95
fb_bytes = 26.5
ce_cycles_active = 0.005
ce_bytes = 0.1
pcie_rx_bytes = 0.05
pcie_tx_bytes = 0.05
pcie_cycles_active = 0.005

# Batched inference: copy the batch in, compute, then wait for the next one.
[[profile]]
name = "inference"
program = "reduce"
[[profile.phase]]
duration_us = 300
[profile.phase.rates]
sm_cycles_elapsed = 1.0
sm_cycles_active = 0.10
sm_issue_active = 0.02
sm_inst_executed = 0.02
sm_threads_active = 0.6
sm_warps_active = 1.0
sm_ld_global = 0.002
sm_l1_hit = 0.001
sm_l1_miss = 0.002
sm_branch = 0.002
l2_write_req = 0.20
l2_read_req = 0.01
l2_hit = 0.01
l2_miss = 0.005
l2_cycles_active = 0.22
fb_write_sectors = 0.30
fb_read_sectors = 0.01
fb_cycles_active = 0.35
fb_bytes = 9.9
ce_cycles_active = 0.60
ce_bytes = 18.0
pcie_rx_bytes = 20.0
pcie_tx_bytes = 0.5
pcie_cycles_active = 0.70
[[profile.phase]]
duration_us = 1200
[profile.phase.rates]
sm_cycles_elapsed = 1.0
sm_cycles_active = 0.90
sm_issue_active = 0.45
sm_inst_executed = 0.45
sm_threads_active = 14.0
sm_warps_active = 12.0
sm_warps_launched = 0.001
sm_inst_fp32 = 0.10
sm_tensor_active = 0.55
sm_ld_global = 0.05
sm_st_global = 0.01
sm_ld_shared = 0.10
sm_st_shared = 0.03
sm_l1_hit = 0.06
sm_l1_miss = 0.12
sm_branch = 0.04
sm_branch_divergent = 0.002
sm_stall_memory = 0.25
sm_stall_sync = 0.06
sm_atomic = 0.0005
l2_read_req = 0.30
l2_write_req = 0.05
l2_hit = 0.24
l2_miss = 0.09
l2_cycles_active = 0.50
l2_atomic = 0.001
fb_read_sectors = 0.25
fb_write_sectors = 0.04
fb_cycles_active = 0.45
fb_bytes = 9.28
pcie_rx_bytes = 0.2
pcie_tx_bytes = 0.2
pcie_cycles_active = 0.01
[[profile.phase]]
duration_us = 1500
[profile.phase.rates]
sm_cycles_elapsed = 1.0
sm_cycles_active = 0.02
sm_issue_active = 0.004
sm_inst_executed = 0.004
sm_threads_active = 0.12
sm_warps_active = 0.1
sm_branch = 0.0005
l2_read_req = 0.002
l2_hit = 0.0015
l2_miss = 0.0005
l2_cycles_active = 0.003
fb_read_sectors = 0.0015
fb_cycles_active = 0.004
fb_bytes = 0.048
ce_cycles_active = 0.02
ce_bytes = 0.4
pcie_tx_bytes = 6.0
pcie_cycles_active = 0.20

# A mostly idle tenant: a resident service kernel polling now and then.
[[profile]]
name = "idle-ish"
[[profile.phase]]
duration_us = 2000
[profile.phase.rates]
sm_cycles_elapsed = 1.0
sm_cycles_active = 0.03
sm_issue_active = 0.004
sm_inst_executed = 0.004
sm_threads_active = 0.1
sm_warps_active = 0.1
sm_warps_launched = 0.00001
sm_inst_fp32 = 0.001
sm_ld_global = 0.0005
sm_l1_hit = 0.0002
sm_l1_miss = 0.0004
sm_branch = 0.0008
sm_stall_memory = 0.002
l2_read_req = 0.003
l2_hit = 0.0025
l2_miss = 0.0005
l2_cycles_active = 0.005
fb_read_sectors = 0.0005
fb_cycles_active = 0.003
fb_bytes = 0.016
pcie_rx_bytes = 0.01
pcie_tx_bytes = 0.01
pcie_cycles_active = 0.001

# A kernel whose loop iteration (A + B = 205 + 820 = 1025 cycles) divides
# the default cycle-sampling interval P + S - A = 4096 + 12 - 8 = 4100: a
# sampler with a fixed period lands on the same instruction every time.
[[profile]]
name = "resonant"
program = "resonant"
[[profile.phase]]
duration_us = 1000
[profile.phase.rates]
sm_cycles_elapsed = 1.0
sm_cycles_active = 0.9
sm_issue_active = 0.3
sm_inst_executed = 0.24
sm_threads_active = 7.0
sm_warps_active = 16.0

# NVLink all-reduce: a burst every millisecond, a trickle in between.
[[profile]]
name = "nvlink-allreduce"
[[profile.phase]]
duration_us = 250
rates = { nvlink_rx_flits = 0.55, nvlink_tx_flits = 0.55, nvlink_cycles_active = 0.80 }
[[profile.phase]]
duration_us = 750
rates = { nvlink_rx_flits = 0.03, nvlink_tx_flits = 0.03, nvlink_cycles_active = 0.05 }

[[context]]
vm = 1
profile = "gemm"

[[context]]
vm = 1
profile = "stream"

[[context]]
vm = 1
profile = "inference"
create_at_us = 5000
destroy_at_us = 40000

[[context]]
vm = 2
profile = "gemm"

[[context]]
vm = 2
profile = "idle-ish"
create_at_us = 2000

[[context]]
vm = 3
profile = "inference"

[[context]]
vm = 3
profile = "stream"
create_at_us = 10000
destroy_at_us = 60000

[[context]]
vm = 4
profile = "inference"

[[context]]
vm = 4
profile = "gemm"
create_at_us = 30000
destroy_at_us = 80000

[[context]]
vm = 5
profile = "stream"

[[context]]
vm = 5
profile = "gemm"
create_at_us = 20000

[[context]]
vm = 2
profile = "resonant"

# Tiled GEMM: a hot MMA inner loop nested in the K loop, then a store call.
[[program]]
name = "gemm"
[[program.kernel]]
name = "main"
[[program.kernel.block]]
name = "setup"
instructions = 48
cpi = 1.6
[[program.kernel.block]]
name = "k_head"
instructions = 32
cpi = 1.2
marker = true
[[program.kernel.block]]
name = "mma"
instructions = 256
phase_cpi = [1.1, 1.4]
throttle = 1.8
data = { base = 0x1000_0000, stride = 256, span = 0x10_0000 }
loop = { to = "mma", trips = 8 }
[[program.kernel.block]]
name = "k_latch"
instructions = 16
cpi = 2.0
loop = { to = "k_head", trips = 64 }
[[program.kernel.block]]
name = "epilogue"
instructions = 64
cpi = 3.0
call = "store"
[[program.kernel]]
name = "store"
[[program.kernel.block]]
name = "store"
instructions = 128
cpi = 4.5
data = { base = 0x2000_0000, stride = 128, span = 0x4_0000 }

# Strided reduction: a data-dependent branch in the loop, a tree step call.
[[program]]
name = "reduce"
[[program.kernel]]
name = "main"
[[program.kernel.block]]
name = "load"
instructions = 48
cpi = 6.0
data = { base = 0x3000_0000, stride = 4096, span = 0x40_0000 }
[[program.kernel.block]]
name = "accumulate"
instructions = 32
cpi = 2.5
[[program.kernel.block]]
name = "check"
instructions = 8
cpi = 1.5
branch = [{ to = "odd", p = 0.3 }]
[[program.kernel.block]]
name = "even"
instructions = 24
cpi = 2.0
jump = "latch"
[[program.kernel.block]]
name = "odd"
instructions = 40
cpi = 3.0
[[program.kernel.block]]
name = "latch"
instructions = 8
cpi = 1.0
loop = { to = "accumulate", trips = 128 }
[[program.kernel.block]]
name = "tree"
instructions = 12
cpi = 2.0
marker = true
call = "tree_step"
[[program.kernel.block]]
name = "done"
instructions = 16
cpi = 2.0
ret = true
[[program.kernel]]
name = "tree_step"
[[program.kernel.block]]
name = "shuffle"
instructions = 20
cpi = 4.0
loop = { to = "shuffle", trips = 5 }
[[program.kernel.block]]
name = "sync"
instructions = 12
cpi = 8.0

# memcpy-like: a long copy loop waiting on memory.
[[program]]
name = "memcpy"
[[program.kernel]]
name = "main"
[[program.kernel.block]]
name = "setup"
instructions = 24
cpi = 2.0
[[program.kernel.block]]
name = "copy"
instructions = 64
cpi = 12.0
throttle = 1.2
data = { base = 0x4000_0000, stride = 512, span = 0x80_0000 }
loop = { to = "copy", trips = 1024 }
[[program.kernel.block]]
name = "tail"
instructions = 16
cpi = 6.0
marker = true

# The resonant loop (see the "resonant" profile).
[[program]]
name = "resonant"
[[program.kernel]]
name = "main"
[[program.kernel.block]]
name = "a"
instructions = 41
cpi = 5.0
[[program.kernel.block]]
name = "b"
instructions = 205
cpi = 4.0
loop = { to = "a", trips = 16777216 }

[[churn]]
vm = 3
profiles = ["inference", "idle-ish"]
start_at_us = 1000
every_us = 3000
lifetime_us = 7000

[[churn]]
vm = 6
profiles = ["gemm", "stream"]
start_at_us = 2000
every_us = 3000
lifetime_us = 7000

[[throttle]]
start_us = 50000
end_us = 60000
"#;

/// The parsed [`BUILTIN_TOML`].
///
/// # Panics
///
/// Never: the text is a constant that a unit test parses.
pub fn builtin() -> Scenario {
    match parse("builtin", BUILTIN_TOML) {
        Ok(s) => s,
        Err(e) => panic!("the built-in scenario is invalid: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use gpupm_uapi::events::{self, UnitType};

    use super::*;

    fn rate(phase: &crate::scenario::PhaseSpec, name: &str) -> f64 {
        let id = events::by_name(name).map(|e| e.id);
        phase
            .rates
            .iter()
            .find(|(e, _)| Some(*e) == id)
            .map_or(0.0, |(_, r)| *r)
    }

    #[test]
    fn builtin_parses_into_the_documented_shape() {
        let s = builtin();
        assert_eq!(s.clock.khz, 1_980_000);
        assert_eq!(s.topology.sms_per_gpc.iter().sum::<u32>(), 132);
        assert_eq!(s.trigger.period_cycles, 1_980_000);
        assert!(!s.trigger.dither);
        let slots: Vec<_> = s
            .partitions
            .iter()
            .map(|p| (p.slot, p.gpcs.clone(), p.memory_slices.clone()))
            .collect();
        assert_eq!(
            slots,
            vec![
                (1, vec![0, 1, 2, 3], vec![0, 1, 2, 3]),
                (2, vec![4, 5], vec![4, 5]),
                (3, vec![6], vec![6]),
                (4, vec![7], vec![7]),
            ]
        );
        assert_eq!(s.vms.len(), 6);
        assert_eq!(s.vms.iter().filter(|v| v.partition == 2).count(), 2);
        assert_eq!(
            s.vms
                .iter()
                .filter(|v| v.confidential_key.is_some())
                .count(),
            1
        );
        assert!(s.profiles.len() >= 4);
        assert!(s.profiles.iter().any(|p| p.phases.len() >= 2));
        assert!((10..=12).contains(&s.contexts.len()));
        assert_eq!(s.churn.len(), 2);
        assert!(s
            .churn
            .iter()
            .all(|c| c.every_cycles == 3 * 1_980_000 && c.lifetime_cycles == 7 * 1_980_000));
        assert_eq!(s.throttle.len(), 1);
        let device = s.device_profile.map(|i| &s.profiles[i]);
        assert!(device.is_some_and(|p| p.phases.iter().all(|ph| ph
            .rates
            .iter()
            .all(|(id, _)| events::by_id(*id).is_some_and(|e| e.unit == UnitType::Nvlink)))));
    }

    #[test]
    fn builtin_rates_are_internally_consistent() {
        let s = builtin();
        for p in &s.profiles {
            if Some(p.name.as_str()) == s.device_profile.map(|i| s.profiles[i].name.as_str()) {
                continue;
            }
            for ph in &p.phases {
                let r = |n| rate(ph, n);
                assert_eq!(r("sm_cycles_elapsed"), 1.0, "{}", p.name);
                assert!(
                    r("sm_cycles_active") <= r("sm_cycles_elapsed"),
                    "{}",
                    p.name
                );
                assert!(r("sm_issue_active") <= r("sm_cycles_active"), "{}", p.name);
                assert!(
                    r("sm_inst_executed") <= r("sm_issue_active") + 1e-9,
                    "{}",
                    p.name
                );
                assert!(
                    r("sm_threads_active") <= 32.0 * r("sm_inst_executed") + 1e-9,
                    "{}",
                    p.name
                );
                assert!(r("sm_branch_divergent") <= r("sm_branch"), "{}", p.name);
                assert!(
                    r("l2_hit") <= r("l2_read_req") + r("l2_write_req"),
                    "{}",
                    p.name
                );
                let fb_sectors = r("fb_read_sectors") + r("fb_write_sectors");
                assert!(
                    (r("fb_bytes") - 32.0 * fb_sectors).abs() <= 0.05 * 32.0 * fb_sectors + 1e-9,
                    "{}",
                    p.name
                );
            }
        }
    }
}
