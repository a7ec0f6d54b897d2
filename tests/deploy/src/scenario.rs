//! The scenario of the fleet and dashboard tests' nodes.

use std::fmt::Write as _;

/// Cycles per step of the step clock: below [`scenario`]'s switch timeout,
/// above its timeslices, so every partition asks for a switch in every
/// step and the daemon, not the device's fallback, finishes it.
pub const STEP: u64 = 8192;
/// Cycles after which the device finishes a pending switch itself.
pub const SWITCH_TIMEOUT: u64 = 200_000;
/// The plain (not confidential) VMs of [`scenario`].
pub const PLAIN_VMS: [u32; 4] = [1, 2, 3, 4];
/// The confidential VM of [`scenario`]: no per-event series.
pub const CONFIDENTIAL_VM: u32 = 5;

/// A small GPU: four one-GPC partitions; VM 1 on slot 1, VMs 2 and 3
/// time-sliced on slot 2, VM 4 on slot 3, the confidential VM 5 on slot
/// 4; two fixed contexts per VM, created with the device (no churn, so
/// every VM and context series exists from the first scrape, at zero);
/// NVLink traffic from a device-level profile. `seed` makes each node's
/// counts its own.
pub fn scenario(seed: u64) -> String {
    let mut s = format!(
        r#"name = "deploy-{seed}"
seed = {seed}
switch_timeout_cycles = {SWITCH_TIMEOUT}
device_profile = "links"
[clock]
mhz = 1000
[topology]
sms_per_gpc = [2, 2, 2, 2]
memory_slices = 4
l2_per_slice = 1
fb_per_slice = 1
ce_per_slice = 1
nvlinks = 2
pcie = true
[trigger]
period_cycles = 20000
[stream]
ring_records = 64
watermark = 32
[[profile]]
name = "busy"
[[profile.phase]]
duration_cycles = 30000
rates = {{ sm_cycles_elapsed = 1.0, sm_cycles_active = 0.9, sm_inst_executed = 0.6, sm_threads_active = 20.5, l2_read_req = 0.3, l2_hit = 0.2, fb_bytes = 0.4, pcie_rx_bytes = 0.1, ce_bytes = 0.05 }}
[[profile.phase]]
duration_cycles = 10000
rates = {{ sm_cycles_elapsed = 1.0, sm_cycles_active = 0.2, sm_warps_active = 7.25, l2_write_req = 0.1 }}
[[profile]]
name = "links"
[[profile.phase]]
duration_cycles = 50000
rates = {{ nvlink_rx_flits = 0.25, nvlink_tx_flits = 0.5 }}
"#
    );
    for p in 1..=4 {
        writeln!(
            s,
            "[[partition]]\nslot = {p}\ngpcs = [{}]\nmemory_slices = [{}]\nctx_timeslice_cycles = 6000\nvm_timeslice_cycles = 15000",
            p - 1,
            p - 1
        )
        .expect("write to a String");
    }
    for (vm, part) in [(1, 1), (2, 2), (3, 2), (4, 3), (CONFIDENTIAL_VM, 4)] {
        writeln!(s, "[[vm]]\nid = {vm}\npartition = {part}").expect("write to a String");
        if vm == CONFIDENTIAL_VM {
            s.push_str(
                "confidential_key = \"6465706c6f792d746573742d6b65792d6e6f742d612d7365637265742d303031\"\n",
            );
        }
        for _ in 0..2 {
            writeln!(s, "[[context]]\nvm = {vm}\nprofile = \"busy\"").expect("write to a String");
        }
    }
    s
}
