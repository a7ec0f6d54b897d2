//! Scenario files handed to `gpupm-driver --scenario`, written as TOML
//! so that the device behind the node is known exactly (topology, VMs,
//! keys, timeslices): the node tests' scenarios, generated from the event
//! catalogue, and the system tests' (8 partitions with churn; the fleet's
//! four, one of them confidential). The fixed parts of the larger ones
//! are TOML files beside this module, with `@NAME@` placeholders for the
//! constants defined here.

use std::fmt::Write as _;

use gpupm_uapi::events::{UnitType, CATALOGUE};
use gpupm_uapi::regs::TRIG_THRESHOLD_MAX;

/// Key of the confidential VM 3 in every scenario here.
pub const VM3_KEY: [u8; 32] = [0x5A; 32];
/// Key of the confidential VM 5 in [`switching`].
pub const VM5_KEY: [u8; 32] = [0xC3; 32];

/// Unit types a context's profile drives.
pub const CONTEXT_TYPES: [UnitType; 5] = [
    UnitType::Sm,
    UnitType::L2Slice,
    UnitType::FbPartition,
    UnitType::CopyEngine,
    UnitType::Pcie,
];

/// Appends a profile table giving every event of `types` a rate `scale`
/// times a per-event factor (the model tests' `busy_profile`).
pub fn profile(out: &mut String, name: &str, scale: f64, types: &[UnitType]) {
    writeln!(out, "[[profile]]\nname = \"{name}\"\n[[profile.phase]]\nduration_cycles = 3000000\n[profile.phase.rates]").unwrap();
    for e in CATALOGUE.iter().filter(|e| types.contains(&e.unit)) {
        let base = if e.multibit { 20.0 } else { 0.6 };
        let f = 0.3 + 0.7 * ((f64::from(e.id) * 0.37).fract());
        let cap = if e.multibit { 32.0 } else { 1.0 };
        let rate: f64 = (base * f * scale).min(cap);
        writeln!(out, "{} = {rate:?}", e.name).unwrap();
    }
}

/// `key` as the hex string a scenario file takes.
pub fn hex(key: &[u8; 32]) -> String {
    key.iter().fold(String::new(), |mut s, b| {
        write!(s, "{b:02x}").unwrap();
        s
    })
}

/// The model tests' `small_scenario()` as a file: partition 1 time-slices
/// VMs 1 and 2, partition 2 runs the confidential VM 3; NVLink traffic on
/// the system channel, churn in VM 2, one throttle window.
pub fn small() -> String {
    let mut s = include_str!("scenario/small.toml")
        .replace("@TRIG_THRESHOLD_MAX@", &TRIG_THRESHOLD_MAX.to_string())
        .replace("@VM3_KEY@", &hex(&VM3_KEY));
    with_model_profiles(&mut s);
    s
}

/// Switch timeout of [`switching`], in cycles.
pub const SWITCHING_TIMEOUT: u64 = 40_000;

/// A busy switching scenario for the handshake tests: three partitions with
/// short context timeslices; partitions 1 and 3 also time-slice two VMs
/// each (VM 5 confidential, like VM 3 on partition 2); churn in VM 2.
/// About one switch per 2,000 cycles device-wide.
pub fn switching() -> String {
    let mut s = include_str!("scenario/switching.toml")
        .replace("@SWITCHING_TIMEOUT@", &SWITCHING_TIMEOUT.to_string())
        .replace("@VM3_KEY@", &hex(&VM3_KEY))
        .replace("@VM5_KEY@", &hex(&VM5_KEY));
    for (vm, at) in [
        (1, 0),
        (1, 500),
        (2, 0),
        (2, 900),
        (3, 0),
        (3, 0),
        (3, 2000),
        (4, 0),
        (4, 100),
        (5, 0),
        (5, 4000),
    ] {
        let profile = if at % 1000 == 0 { "busy" } else { "light" };
        writeln!(
            s,
            "[[context]]\nvm = {vm}\nprofile = \"{profile}\"\ncreate_at_cycles = {at}\n"
        )
        .unwrap();
    }
    with_model_profiles(&mut s);
    s
}

/// The profiles [`small`] and [`switching`] name: "busy", "light" (a fifth
/// of busy's rates) and the device-level "nvlink".
fn with_model_profiles(s: &mut String) {
    profile(s, "busy", 1.0, &CONTEXT_TYPES);
    profile(s, "light", 0.2, &CONTEXT_TYPES);
    profile(s, "nvlink", 0.5, &[UnitType::Nvlink]);
}

/// A slow real-time scenario (1 MHz clock) for the clock-thread test: one
/// partition switching between two contexts every 20 ms of wall time.
pub fn slow_realtime() -> String {
    let mut s = String::from(
        r#"name = "slow"
switch_timeout_cycles = 5000

[clock]
khz = 1000

[topology]
sms_per_gpc = [1]
memory_slices = 1
l2_per_slice = 1
fb_per_slice = 1
ce_per_slice = 1
nvlinks = 0

[trigger]
period_cycles = 10000

[[partition]]
slot = 1
gpcs = [0]
memory_slices = [0]
ctx_timeslice_cycles = 20000
vm_timeslice_cycles = 0

[[vm]]
id = 1
partition = 1

[[context]]
vm = 1
profile = "light"

[[context]]
vm = 1
profile = "light"

"#,
    );
    profile(&mut s, "light", 0.2, &CONTEXT_TYPES);
    s
}

/// Confidential VMs' keys in the scenarios above.
pub fn key_of(vm: u32) -> Option<[u8; 32]> {
    match vm {
        3 => Some(VM3_KEY),
        5 => Some(VM5_KEY),
        _ => None,
    }
}

/// Cycles per clock step of [`churn`] and [`fleet`]: below their switch
/// timeout, above their timeslices, so that every partition asks for a
/// switch in every step and the daemon, not the device's fallback,
/// finishes it.
pub const STEP: u64 = 8192;
/// Switch timeout of [`churn`] and [`fleet`], in cycles.
pub const SYSTEM_SWITCH_TIMEOUT: u64 = 200_000;

/// The 1 GHz header shared by [`churn`] and [`fleet`]: `gpcs` two-SM GPCs
/// and as many memory slices, a "busy" profile (with `sm_cycles_elapsed`
/// when `elapsed`) and the device-level NVLink profile "links".
fn system_header(name: &str, seed: u64, gpcs: usize, elapsed: bool) -> String {
    let sms = vec!["2"; gpcs].join(", ");
    let el = if elapsed {
        "sm_cycles_elapsed = 1.0, "
    } else {
        ""
    };
    format!(
        r#"name = "{name}"
seed = {seed}
switch_timeout_cycles = {SYSTEM_SWITCH_TIMEOUT}
device_profile = "links"
[clock]
mhz = 1000
[topology]
sms_per_gpc = [{sms}]
memory_slices = {gpcs}
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
rates = {{ {el}sm_cycles_active = 0.9, sm_inst_executed = 0.6, sm_threads_active = 20.5, l2_read_req = 0.3, l2_hit = 0.2, fb_bytes = 0.4, pcie_rx_bytes = 0.1, ce_bytes = 0.05 }}
[[profile.phase]]
duration_cycles = 10000
rates = {{ {el}sm_cycles_active = 0.2, sm_warps_active = 7.25, l2_write_req = 0.1 }}
[[profile]]
name = "links"
[[profile.phase]]
duration_cycles = 50000
rates = {{ nvlink_rx_flits = 0.25, nvlink_tx_flits = 0.5 }}
"#
    )
}

/// Partition slots `1..=n`, each on GPC and memory slice `slot - 1`, with
/// 6,000-cycle context and 15,000-cycle VM timeslices.
pub(crate) fn one_gpc_partitions(s: &mut String, n: u32) {
    for p in 1..=n {
        writeln!(
            s,
            "[[partition]]\nslot = {p}\ngpcs = [{}]\nmemory_slices = [{}]\nctx_timeslice_cycles = 6000\nvm_timeslice_cycles = 15000",
            p - 1,
            p - 1
        )
        .unwrap();
    }
}

/// VM `vm` on partition `part` with two "busy" contexts.
fn vm_with_two_contexts(s: &mut String, vm: u32, part: u32, key: Option<&[u8; 32]>) {
    writeln!(s, "[[vm]]\nid = {vm}\npartition = {part}").unwrap();
    if let Some(k) = key {
        writeln!(s, "confidential_key = \"{}\"", hex(k)).unwrap();
    }
    for _ in 0..2 {
        writeln!(s, "[[context]]\nvm = {vm}\nprofile = \"busy\"").unwrap();
    }
}

/// Partition slots of [`churn`].
pub const CHURN_PARTS: std::ops::RangeInclusive<u32> = 1..=8;

/// The system tests' scenario: 8 one-GPC partitions on a small GPU, 10 VMs
/// (partitions 1 and 2 time-slice two VMs each), 2 fixed contexts per VM
/// plus churn on three VMs, short timeslices so that every partition asks
/// for a switch in every step of [`STEP`] cycles.
pub fn churn() -> String {
    let mut s = system_header("daemon-e2e", 11, 8, false);
    one_gpc_partitions(&mut s, 8);
    for (vm, p) in [
        (1, 1),
        (2, 2),
        (3, 3),
        (4, 4),
        (5, 5),
        (6, 6),
        (7, 7),
        (8, 8),
        (9, 1),
        (10, 2),
    ] {
        vm_with_two_contexts(&mut s, vm, p, None);
    }
    for vm in [1, 3, 9] {
        writeln!(
            s,
            "[[churn]]\nvm = {vm}\nprofiles = [\"busy\"]\nevery_cycles = 45000\nlifetime_cycles = 120000"
        )
        .unwrap();
    }
    s
}

/// The plain (not confidential) VMs of [`fleet`].
pub const FLEET_PLAIN_VMS: [u32; 4] = [1, 2, 3, 4];
/// The confidential VM of [`fleet`]: no per-event series.
pub const FLEET_CONFIDENTIAL_VM: u32 = 5;
/// Its key.
pub const FLEET_KEY: [u8; 32] = *b"deploy-test-key-not-a-secret-001";

/// The deployment tests' node: four one-GPC partitions; VM 1 on slot 1,
/// VMs 2 and 3 time-sliced on slot 2, VM 4 on slot 3, the confidential VM
/// 5 on slot 4; two fixed contexts per VM, created with the device (no
/// churn, so every VM and context series exists from the first scrape, at
/// zero); NVLink traffic from a device-level profile. `seed` makes each
/// node's counts its own.
pub fn fleet(seed: u64) -> String {
    let mut s = system_header(&format!("deploy-{seed}"), seed, 4, true);
    one_gpc_partitions(&mut s, 4);
    for (vm, part) in [(1, 1), (2, 2), (3, 2), (4, 3), (FLEET_CONFIDENTIAL_VM, 4)] {
        let key = (vm == FLEET_CONFIDENTIAL_VM).then_some(&FLEET_KEY);
        vm_with_two_contexts(&mut s, vm, part, key);
    }
    s
}

/// The TOML of the built-in program named `name`.
pub fn builtin_program(name: &str) -> String {
    let text = gpupm_driver::scenario::BUILTIN_TOML;
    let start = text
        .find(&format!("[[program]]\nname = \"{name}\""))
        .expect("built-in program");
    let rest = &text[start + 1..];
    let end = rest
        .find("[[program]]")
        .or_else(|| rest.find("[[churn]]"))
        .map_or(text.len(), |e| start + 1 + e);
    text[start..end].to_string()
}

/// One slice (two SMs) running one context of VM 1 whose profile runs the
/// built-in program `program` alone: the node tests' block and range
/// ledgers, with nothing else on the device.
pub fn one_slice_running(program: &str) -> String {
    format!(
        "seed = 3\n[topology]\nsms_per_gpc = [2]\nmemory_slices = 1\nnvlinks = 0\n\
         [[partition]]\nslot = 1\ngpcs = [0]\nmemory_slices = [0]\n\
         [[vm]]\nid = 1\npartition = 1\n\
         [[profile]]\nname = \"p\"\nprogram = \"{program}\"\n[[profile.phase]]\nduration_cycles = 1000000\n\
         rates = {{ sm_cycles_elapsed = 1.0 }}\n[[context]]\nvm = 1\nprofile = \"p\"\n{}",
        builtin_program(program)
    )
}

/// Partition 1 shared by VM 1 (two contexts) and VM 2 (one), all running
/// the built-in `gemm`, switching contexts every 10,000 cycles and VMs
/// every 30,000: the marked-range tests' and bench's device.
pub fn shared_gemm_partition() -> String {
    shared_gemm_partition_with(
        "[[context]]\nvm = 1\nprofile = \"g\"\n[[context]]\nvm = 1\nprofile = \"g\"\n\
         [[context]]\nvm = 2\nprofile = \"g\"\n",
    )
}

/// [`shared_gemm_partition`]'s device (VMs 1 and 2 on partition 1, the
/// built-in `gemm` as profile `g`) with the `[[context]]` tables
/// `contexts` instead of its three.
pub fn shared_gemm_partition_with(contexts: &str) -> String {
    format!(
        "seed = 5\n[topology]\nsms_per_gpc = [2]\nmemory_slices = 1\nnvlinks = 0\n\
         [[partition]]\nslot = 1\ngpcs = [0]\nmemory_slices = [0]\n\
         ctx_timeslice_cycles = 10000\nvm_timeslice_cycles = 30000\n\
         [[vm]]\nid = 1\npartition = 1\n[[vm]]\nid = 2\npartition = 1\n\
         [[profile]]\nname = \"g\"\nprogram = \"gemm\"\n[[profile.phase]]\nduration_cycles = 1000000\n\
         rates = {{ sm_cycles_elapsed = 1.0 }}\n\
         {contexts}{}",
        builtin_program("gemm")
    )
}
