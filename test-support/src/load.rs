//! The reference load (H100-class GPU, every counter active, 1 kHz
//! periodic trigger, 8 partitions, 8 VMs, 512 contexts, context timeslices
//! giving 8 × 25 = 200 switches/s) as a scenario file, for the benches.

use gpupm_uapi::events::{UnitType, CATALOGUE};

/// The reference load as a scenario file.
pub fn scenario() -> String {
    let mut s = String::from(
        "name = \"reference-load\"\nseed = 7\nswitch_timeout_cycles = 3960000\ndevice_profile = \"nvlink\"\n\
         [trigger]\nperiod_us = 1000\n[stream]\nring_records = 1024\nwatermark = 512\n",
    );
    for (name, link) in [("all-active", false), ("nvlink", true)] {
        s += &format!("[[profile]]\nname = \"{name}\"\n[[profile.phase]]\nduration_cycles = 16777216\n[profile.phase.rates]\n");
        for e in CATALOGUE
            .iter()
            .filter(|e| (e.unit == UnitType::Nvlink) == link)
        {
            let full = if e.multibit { 24.0 } else { 0.75 };
            s += &format!(
                "{} = {:.4}\n",
                e.name,
                full * (0.3 + 0.7 * (f64::from(e.id) * 0.37).fract())
            );
        }
    }
    for p in 1..=8 {
        s += &format!(
            "[[partition]]\nslot = {p}\ngpcs = [{}]\nmemory_slices = [{}]\nctx_timeslice_cycles = 79200000\nvm_timeslice_cycles = 316800000\n",
            p - 1,
            p - 1
        );
    }
    for vm in 1..=8 {
        s += &format!("[[vm]]\nid = {vm}\npartition = {vm}\n");
    }
    for i in 0..512 {
        s += &format!(
            "[[context]]\nvm = {}\nprofile = \"all-active\"\n",
            i % 8 + 1
        );
    }
    s
}
