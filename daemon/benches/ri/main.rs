//! `cargo bench -p gpupmd --bench ri`: the sampling plane II on the real
//! driver and daemon, in two parts that each start their own processes
//! and measure their own baseline in the same run:
//!
//! - `sessions`: runtime-instrumentation sessions on 64 contexts at once
//!   (groups and records per second, losses, daemon CPU per 100k
//!   records/s against the same load without sessions);
//! - `ranges`: marked-range threshold interrupts to the tenant-visible
//!   call-graph update (`range_irq_to_tenant_p50_us`, `_p99_us`, goal p99
//!   < 5 ms), against the same ranges without thresholds.
//!
//! `GPUPM_BENCH_RI_PARTS` (default `sessions,ranges`) picks the parts;
//! `GPUPM_BENCH_SECS` (default 10) is each measured phase's length. The
//! last line is one JSON object with every part's figures.

mod ranges;
mod sessions;

use gpupm_test_support::services::{daemon_config, start_daemon};
use gpupm_test_support::{Driver, DriverOptions, Proc, Scratch};

/// `name`'s value as a number, `default` when unset or not a number.
fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The real driver serving `scenario` on the real-time clock and the real
/// daemon (its health summary once a day, out of the measured phases),
/// both ready.
fn start_services(tmp: &Scratch, scenario: String) -> (Driver, Proc) {
    let driver = Driver::start_in(
        tmp,
        DriverOptions {
            clock: "realtime",
            ..DriverOptions::system(scenario)
        },
    );
    let daemon = start_daemon(
        tmp,
        &daemon_config(tmp, "[health]\nsummary_interval_s = 86400\n"),
    );
    (driver, daemon)
}

fn main() {
    let parts = std::env::var("GPUPM_BENCH_RI_PARTS").unwrap_or_else(|_| "sessions,ranges".into());
    let mut members = vec!["\"bench\":\"ri\"".to_string()];
    for part in parts.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        println!("== {part}");
        members.push(match part {
            "sessions" => sessions::run(),
            "ranges" => ranges::run(),
            other => panic!("GPUPM_BENCH_RI_PARTS: unknown part {other:?} (sessions, ranges)"),
        });
    }
    println!("{{{}}}", members.join(","));
}
