//! Derived metrics computed from event counts over a span of device cycles.
//!
//! | name | formula |
//! |---|---|
//! | `sm_utilization` | `sm_cycles_active / sm_cycles_elapsed` (until the next minor release also as `sm_utilisation` in JSON) |
//! | `ipc` | `sm_inst_executed / sm_cycles_active` (warp instructions per active SM cycle) |
//! | `cpi` | `sm_cycles_active / sm_inst_executed` |
//! | `l1_hit_rate` | `sm_l1_hit / (sm_l1_hit + sm_l1_miss)` |
//! | `l2_hit_rate` | `l2_hit / (l2_hit + l2_miss)` |
//! | `dram_bytes_per_s` | `fb_bytes / seconds` |
//! | `pcie_bytes_per_s` | `(pcie_rx_bytes + pcie_tx_bytes) / seconds` |
//!
//! Counts here are in the events' units ([`in_units`]: a multi-bit
//! `*_bytes` count is 32 bytes on the device, bytes here). Seconds are
//! device cycles / (clock_khz × 1000). A metric whose denominator is zero
//! is omitted.

use gpupm_uapi::events::{self, MAX_EVENTS};

/// The most warp instructions an SM issues per cycle (four warp
/// schedulers): an `ipc` above it means the counts do not fit together.
pub const SM_MAX_IPC: f64 = 4.0;

/// One derived metric.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Metric {
    /// Stable name (JSON key).
    pub name: &'static str,
    /// Value.
    pub value: f64,
}

/// Device counts in the events' units: each count times its event's
/// scale (32 for multi-bit events: bytes, threads, warps).
pub fn in_units(v: &[u64; MAX_EVENTS]) -> [u64; MAX_EVENTS] {
    let mut out = *v;
    for e in events::CATALOGUE {
        let i = usize::from(e.id);
        out[i] = v[i].saturating_mul(e.scale());
    }
    out
}

fn ev(v: &[u64; MAX_EVENTS], name: &str) -> f64 {
    events::by_name(name).map_or(0.0, |e| v[usize::from(e.id)] as f64)
}

fn ratio(n: f64, d: f64) -> Option<f64> {
    (d > 0.0).then(|| n / d)
}

/// The derived metrics of `v` (device counts over `cycles` device cycles).
pub fn compute(v: &[u64; MAX_EVENTS], cycles: u64, clock_khz: u32) -> Vec<Metric> {
    let v = &in_units(v);
    let seconds = cycles as f64 / (f64::from(clock_khz.max(1)) * 1000.0);
    let active = ev(v, "sm_cycles_active");
    let inst = ev(v, "sm_inst_executed");
    let candidates = [
        ("sm_utilization", ratio(active, ev(v, "sm_cycles_elapsed"))),
        ("ipc", ratio(inst, active)),
        ("cpi", ratio(active, inst)),
        (
            "l1_hit_rate",
            ratio(ev(v, "sm_l1_hit"), ev(v, "sm_l1_hit") + ev(v, "sm_l1_miss")),
        ),
        (
            "l2_hit_rate",
            ratio(ev(v, "l2_hit"), ev(v, "l2_hit") + ev(v, "l2_miss")),
        ),
        ("dram_bytes_per_s", ratio(ev(v, "fb_bytes"), seconds)),
        (
            "pcie_bytes_per_s",
            ratio(ev(v, "pcie_rx_bytes") + ev(v, "pcie_tx_bytes"), seconds),
        ),
    ];
    candidates
        .into_iter()
        .filter_map(|(name, value)| value.map(|value| Metric { name, value }))
        .collect()
}

/// A metric by name.
pub fn get(m: &[Metric], name: &str) -> Option<f64> {
    m.iter().find(|x| x.name == name).map(|x| x.value)
}

/// A value for humans: ratios as percent, rates with SI prefixes.
pub fn human(m: &Metric) -> String {
    match m.name {
        "sm_utilization" | "l1_hit_rate" | "l2_hit_rate" => format!("{:.1} %", m.value * 100.0),
        "ipc" | "cpi" => format!("{:.3}", m.value),
        _ => format!("{}/s", bytes(m.value)),
    }
}

/// Bytes with a binary-free SI prefix.
pub fn bytes(v: f64) -> String {
    let units = ["B", "kB", "MB", "GB", "TB"];
    let mut v = v;
    let mut i = 0;
    while v >= 1000.0 && i + 1 < units.len() {
        v /= 1000.0;
        i += 1;
    }
    format!("{v:.1} {}", units[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_metrics_follow_their_formulas() {
        let mut v = [0u64; MAX_EVENTS];
        let set = |v: &mut [u64; MAX_EVENTS], n: &str, x: u64| {
            v[usize::from(events::by_name(n).unwrap().id)] = x
        };
        set(&mut v, "sm_cycles_elapsed", 1000);
        set(&mut v, "sm_cycles_active", 500);
        set(&mut v, "sm_inst_executed", 250);
        set(&mut v, "fb_bytes", 10);
        let m = compute(&v, 1_000_000, 1_000_000);
        assert_eq!(get(&m, "sm_utilization"), Some(0.5));
        assert_eq!(get(&m, "ipc"), Some(0.5));
        assert_eq!(get(&m, "cpi"), Some(2.0));
        assert_eq!(get(&m, "dram_bytes_per_s"), Some(320.0 * 1000.0));
        assert_eq!(get(&m, "l2_hit_rate"), None);
    }
}
