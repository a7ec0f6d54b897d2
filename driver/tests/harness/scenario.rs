//! Scenario files the node tests hand to `gpupm-driver --scenario`, written
//! as TOML from the event catalogue so that the device behind the node is
//! known exactly (topology, VMs, keys, timeslices).

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

/// A profile table giving every event of `types` a rate `scale` times a
/// per-event factor (the model tests' `busy_profile`).
fn profile(out: &mut String, name: &str, scale: f64, types: &[UnitType]) {
    writeln!(out, "[[profile]]\nname = \"{name}\"\n[[profile.phase]]\nduration_cycles = 3000000\n[profile.phase.rates]").unwrap();
    for e in CATALOGUE.iter().filter(|e| types.contains(&e.unit)) {
        let base = if e.multibit { 20.0 } else { 0.6 };
        let f = 0.3 + 0.7 * ((f64::from(e.id) * 0.37).fract());
        let cap = if e.multibit { 32.0 } else { 1.0 };
        let rate: f64 = (base * f * scale).min(cap);
        writeln!(out, "{} = {rate:?}", e.name).unwrap();
    }
}

fn hex(key: &[u8; 32]) -> String {
    key.iter().fold(String::new(), |mut s, b| {
        write!(s, "{b:02x}").unwrap();
        s
    })
}

/// The model tests' `small_scenario()` as a file: partition 1 time-slices
/// VMs 1 and 2, partition 2 runs the confidential VM 3; NVLink traffic on
/// the system channel, churn in VM 2, one throttle window.
pub fn small() -> String {
    let mut s = format!(
        r#"name = "small"
seed = 11
device_profile = "nvlink"
switch_timeout_cycles = 50000

[clock]
khz = 1980000
secondary_khz = 990000

[topology]
sms_per_gpc = [3, 2]
memory_slices = 2
l2_per_slice = 2
fb_per_slice = 1
ce_per_slice = 1
nvlinks = 2
pcie = true

[trigger]
period_cycles = 20000
dither = true
threshold = {TRIG_THRESHOLD_MAX}

[stream]
ring_records = 64
watermark = 32

[[partition]]
slot = 1
gpcs = [0]
memory_slices = [0]
ctx_timeslice_cycles = 30000
vm_timeslice_cycles = 70000

[[partition]]
slot = 2
gpcs = [1]
memory_slices = [1]
ctx_timeslice_cycles = 25000
vm_timeslice_cycles = 0

[[vm]]
id = 1
partition = 1

[[vm]]
id = 2
partition = 1

[[vm]]
id = 3
partition = 2
confidential_key = "{}"

[[context]]
vm = 1
profile = "busy"
create_at_cycles = 0

[[context]]
vm = 1
profile = "light"
create_at_cycles = 5000
destroy_at_cycles = 150000

[[context]]
vm = 2
profile = "busy"
create_at_cycles = 1000

[[context]]
vm = 3
profile = "busy"
create_at_cycles = 0

[[context]]
vm = 3
profile = "light"
create_at_cycles = 0

[[churn]]
vm = 2
profiles = ["busy", "light"]
start_at_cycles = 10000
every_cycles = 40000
lifetime_cycles = 60000

[[throttle]]
start_cycles = 100000
end_cycles = 200000

"#,
        hex(&VM3_KEY)
    );
    profile(&mut s, "busy", 1.0, &CONTEXT_TYPES);
    profile(&mut s, "light", 0.2, &CONTEXT_TYPES);
    profile(&mut s, "nvlink", 0.5, &[UnitType::Nvlink]);
    s
}

/// Switch timeout of [`switching`], in cycles.
pub const SWITCHING_TIMEOUT: u64 = 40_000;

/// A busy switching scenario for the handshake tests: three partitions with
/// short context timeslices; partitions 1 and 3 also time-slice two VMs
/// each (VM 5 confidential, like VM 3 on partition 2); churn in VM 2.
/// About one switch per 2,000 cycles device-wide.
pub fn switching() -> String {
    let mut s = format!(
        r#"name = "switching"
seed = 7
device_profile = "nvlink"
switch_timeout_cycles = {SWITCHING_TIMEOUT}

[topology]
sms_per_gpc = [2, 2, 1]
memory_slices = 3
l2_per_slice = 1
fb_per_slice = 1
ce_per_slice = 1
nvlinks = 1
pcie = true

[trigger]
period_cycles = 15000
dither = true

[stream]
ring_records = 256
watermark = 128

[[partition]]
slot = 1
gpcs = [0]
memory_slices = [0]
ctx_timeslice_cycles = 6000
vm_timeslice_cycles = 15000

[[partition]]
slot = 2
gpcs = [1]
memory_slices = [1]
ctx_timeslice_cycles = 5000
vm_timeslice_cycles = 0

[[partition]]
slot = 3
gpcs = [2]
memory_slices = [2]
ctx_timeslice_cycles = 7000
vm_timeslice_cycles = 20000

[[vm]]
id = 1
partition = 1

[[vm]]
id = 2
partition = 1

[[vm]]
id = 3
partition = 2
confidential_key = "{}"

[[vm]]
id = 4
partition = 3

[[vm]]
id = 5
partition = 3
confidential_key = "{}"

[[churn]]
vm = 2
profiles = ["busy", "light"]
start_at_cycles = 3000
every_cycles = 90000
lifetime_cycles = 200000

[[throttle]]
start_cycles = 300000
end_cycles = 500000

"#,
        hex(&VM3_KEY),
        hex(&VM5_KEY)
    );
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
    profile(&mut s, "busy", 1.0, &CONTEXT_TYPES);
    profile(&mut s, "light", 0.2, &CONTEXT_TYPES);
    profile(&mut s, "nvlink", 0.5, &[UnitType::Nvlink]);
    s
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
