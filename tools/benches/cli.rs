//! `cargo bench -p gpupm --bench cli`: against a live driver and daemon
//! (step clock, built-in scenario, advanced by the bench):
//!
//! * `gpupm stat --vm 1` end-to-end wall time, process start to exit with
//!   its output read, p50 over 50 runs (goal < 30 ms);
//! * `gpupm top` CPU at a 1 s refresh over 10 frames (`--headless-frames`,
//!   the same sampling and rendering path as the full-screen view, into an
//!   in-memory terminal), as % of one core (goal < 1 %).
//!
//! The last line is JSON: `{"stat_wall_p50_ms": …, "top_cpu_pct": …}`.

use std::time::{Duration, Instant};

use nix::sys::resource::{getrusage, UsageWho};

fn cpu_children() -> Duration {
    let u = getrusage(UsageWho::RUSAGE_CHILDREN).expect("getrusage");
    let tv = |t: nix::sys::time::TimeVal| {
        Duration::new(
            u64::try_from(t.tv_sec()).unwrap_or(0),
            u32::try_from(t.tv_usec()).unwrap_or(0) * 1000,
        )
    };
    tv(u.user_time()) + tv(u.system_time())
}

fn main() {
    let mut f = gpupm_test_support::cli::Fixture::start("bench");
    f.advance_ms(50);

    let mut walls = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        let r = f.gpupm(&["stat", "--vm", "1", "--json"]);
        walls.push(t.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(r.code, 0, "{}", r.err);
    }
    walls.sort_by(f64::total_cmp);
    let p50 = walls[walls.len() / 2];
    let p90 = walls[walls.len() * 9 / 10];
    eprintln!(
        "gpupm stat --vm 1: p50 {p50:.2} ms, p90 {p90:.2} ms, min {:.2} ms over {} runs",
        walls[0],
        walls.len()
    );

    let frames = 10;
    let mut args: Vec<String> = [
        "top",
        "--headless-frames",
        &frames.to_string(),
        "-I",
        "1000",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(["--tenant-node".into(), f.node()]);
    let cpu0 = cpu_children();
    let t0 = Instant::now();
    let mut child = gpupm_test_support::cli::spawn_as(None, &args);
    // Keep the device running at a modest pace while top samples.
    while child.try_wait().expect("try_wait").is_none() {
        f.advance_ms(1);
        std::thread::sleep(Duration::from_millis(20));
    }
    let wall = t0.elapsed();
    let r = gpupm_test_support::cli::finish(child);
    assert_eq!(r.code, 0, "{}", r.err);
    let cpu = cpu_children() - cpu0;
    let pct = cpu.as_secs_f64() / wall.as_secs_f64() * 100.0;
    eprintln!(
        "gpupm top, 1 s refresh, {frames} frames: {:.1} ms CPU in {:.2} s = {pct:.3} % of a core",
        cpu.as_secs_f64() * 1000.0,
        wall.as_secs_f64()
    );
    f.stop();
    println!("{{\"stat_wall_p50_ms\":{p50:.3},\"top_cpu_pct\":{pct:.4}}}");
}
