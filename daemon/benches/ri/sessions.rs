//! Runtime-instrumentation sessions on 64 contexts at once.
//!
//! This part of `cargo bench -p gpupmd --bench ri` starts the real `gpupm-driver` on a
//! real-time clock with the reference load (`test_support::load`, 8
//! partitions, 512 contexts) running the built-in `gemm` program, and the
//! real `gpupmd`. It measures the daemon's CPU (% of one core, utime +
//! stime) over `GPUPM_BENCH_SECS` (default 10) with no RI session — the
//! baseline, same process, same load — then opens one cycle-mode session
//! (SF `GPUPM_BENCH_RI_SF`, default 200,000 cycles, RGS 2, program
//! buffers of `GPUPM_BENCH_RI_BUFFER` groups, default 0: the ABI's
//! default, the block's whole span) on each of 64
//! contexts through the tenant node and reads all of them from one
//! thread over the same time. It prints groups and records per second,
//! groups lost (`lost_before` and the daemon's `gpupm_ri_lost_groups_total`),
//! the daemon's CPU with and without sessions and the difference per
//! 100,000 records/s, and returns the figures for the bench's JSON line.

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use gpupm_client::TenantClient;
use gpupm_test_support::model::ri::builtin_program;
use gpupm_test_support::procfs::{self, cpu_during, load_average};
use gpupm_test_support::{load, Scratch};
use gpupm_uapi::tenant::ri::{max_buffer_groups, ri_session_mode, OpenRi};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::Signal;

use crate::{env_u64, start_services};

const SESSIONS: u32 = 64;

/// The reference load with every context running `gemm`.
fn scenario() -> String {
    load::scenario().replace(
        "[[profile]]\nname = \"all-active\"\n",
        "[[profile]]\nname = \"all-active\"\nprogram = \"gemm\"\n",
    ) + &builtin_program("gemm")
}

/// Groups, records and lost groups read from `clients` until `until`.
fn read_all(clients: &[TenantClient], until: Instant) -> (u64, u64, u64) {
    let (mut groups, mut records, mut lost) = (0, 0, 0);
    while Instant::now() < until {
        let mut fds: Vec<PollFd<'_>> = clients
            .iter()
            .map(|c| PollFd::new(c.as_fd(), PollFlags::POLLIN))
            .collect();
        let n = poll(&mut fds, PollTimeout::from(100u16)).expect("poll");
        if n == 0 {
            continue;
        }
        let ready: Vec<bool> = fds
            .iter()
            .map(|f| f.revents().is_some_and(|r| r.contains(PollFlags::POLLIN)))
            .collect();
        for (c, _) in clients.iter().zip(ready).filter(|(_, r)| *r) {
            for e in c.read_ri().expect("read") {
                lost += e.header.lost_before;
                if !e.is_halt() {
                    groups += 1;
                    records += e.records.len() as u64;
                }
            }
        }
    }
    (groups, records, lost)
}

#[allow(clippy::cast_precision_loss)]
/// Runs the sessions part; the figures as JSON members.
pub fn run() -> String {
    let secs = env_u64("GPUPM_BENCH_SECS", 10);
    let sf = u32::try_from(env_u64("GPUPM_BENCH_RI_SF", 200_000)).expect("SF fits 32 bits");
    let buffer = u32::try_from(env_u64("GPUPM_BENCH_RI_BUFFER", 0)).expect("buffer groups");
    let load_before = load_average();
    let tck = procfs::ticks_per_s();
    let tmp = Scratch::new("bench-ri");
    let (driver, mut daemon) = start_services(&tmp, scenario());
    let node = tmp.join("tenant").join("node");
    let pid = daemon.pid().as_raw();
    let (baseline_pct, _) = cpu_during(pid, tck, || std::thread::sleep(Duration::from_secs(secs)));

    // Contexts 1..=64 exist from the start (the scenario creates 512).
    let clients: Vec<TenantClient> = (1..=SESSIONS)
        .map(|ctx| {
            let c = TenantClient::open(&node).expect("tenant node");
            c.open_ri(&OpenRi {
                ctx,
                mode: ri_session_mode::CYCLE,
                sf,
                rgs: 2,
                buffer_groups: buffer,
                ..OpenRi::default()
            })
            .unwrap_or_else(|e| panic!("RI session on context {ctx}: {e}"));
            c
        })
        .collect();
    let lost_before = daemon.metric("gpupm_ri_lost_groups_total");
    let mut got = (0, 0, 0);
    let (with_pct, wall) = cpu_during(pid, tck, || {
        got = read_all(&clients, Instant::now() + Duration::from_secs(secs));
    });
    let (groups, records, lost) = got;
    let daemon_lost = daemon.metric("gpupm_ri_lost_groups_total") - lost_before;
    drop(clients);
    let load_after = load_average();
    let exit = daemon.signal_and_wait(Signal::SIGTERM);
    assert!(exit.success(), "gpupmd exit {exit}:\n{}", daemon.log());
    driver.stop();

    let groups_per_s = groups as f64 / wall;
    let records_per_s = records as f64 / wall;
    let extra_pct = with_pct - baseline_pct;
    let per_100k = if records_per_s > 0.0 {
        extra_pct / (records_per_s / 100_000.0)
    } else {
        0.0
    };
    println!("load average              {load_before} before, {load_after} after");
    println!(
        "sessions                  {SESSIONS} contexts, cycle mode, SF {sf}, RGS 2 (8 records a group), buffers of {} groups, {secs} s",
        if buffer == 0 { max_buffer_groups(2) } else { buffer }
    );
    println!("groups                    {groups} ({groups_per_s:.0}/s)");
    println!("records                   {records} ({records_per_s:.0}/s)");
    println!(
        "lost groups               {lost} seen by the sessions, {daemon_lost} counted by gpupmd"
    );
    println!(
        "daemon CPU                {with_pct:.2} % of one core with the sessions, {baseline_pct:.2} % without (baseline, same load)"
    );
    println!(
        "RI cost                   {extra_pct:.2} % of one core, {per_100k:.2} % per 100k records/s"
    );
    format!(
        "\"sessions\":{SESSIONS},\"sf\":{sf},\"buffer_groups\":{buffer},\"secs\":{secs},\"groups_per_s\":{groups_per_s:.1},\"records_per_s\":{records_per_s:.1},\"lost\":{lost},\"daemon_lost\":{daemon_lost},\"daemon_cpu_pct\":{with_pct:.3},\"baseline_daemon_cpu_pct\":{baseline_pct:.3},\"daemon_cpu_pct_per_100k_records\":{per_100k:.3}"
    )
}
