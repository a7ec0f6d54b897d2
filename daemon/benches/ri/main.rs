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
