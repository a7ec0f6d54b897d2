//! The daemon under the reference load.
//!
//! `cargo bench -p gpupmd --bench reference_load` starts the real
//! `gpupm-driver` on a real-time clock with the reference load (H100-class
//! GPU, every counter active, 1 kHz periodic trigger, 8 partitions, 8 VMs,
//! 512 contexts, context timeslices giving 8 × 25 = 200 switches/s — the
//! scenario of `gpupm_driver::scenario::synthetic::reference_load`) and the
//! real `gpupmd`, and, after a warm-up, runs four phases:
//!
//! 0. warm-up: the reference load with no client for
//!    `GPUPM_BENCH_WARMUP_SECS` (default 20), its CPU printed by 5 s
//!    window. A daemon just started fills its history rings (256 samples
//!    per context; a context runs 40 ms in every 2.56 s of its partition,
//!    ~16 records/s, so ~16 s), paying page faults and allocations that
//!    an always-on daemon pays once: the phases below measure the steady
//!    state after it, and the warm-up windows show the start-up cost;
//! 1. the reference load with the 100 tenant clients reading their VMs'
//!    pages (`GPUPM_BENCH_SECS`, default 20);
//! 2. the same with a page visibility probe added (`GPUPM_BENCH_PROBE_SECS`,
//!    default 5): it polls VM 1's page every 100 µs (no daemon work);
//! 3. the reference load with the 100 clients reading through the tenant
//!    node's ioctl instead (`GPUPM_BENCH_SECS`), for comparison;
//! 4. the same with the ioctl visibility probe (`GPUPM_BENCH_PROBE_SECS`),
//!    which polls every millisecond — as many requests as the hundred
//!    clients together, so it runs in its own phase;
//!
//! and prints:
//!
//! - daemon CPU % of one core: utime + stime from `/proc/<pid>/stat` over
//!   each phase (after READY), and by thread over the phase's client
//!   window (each thread's run time from `/proc/<pid>/task/*/schedstat`,
//!   by thread name; `page_threads_cpu_pct` in the JSON);
//! - daemon RSS (VmRSS at the end, VmHWM beside it);
//! - handshake latency p50/p99 as the daemon measures it: from the
//!   interrupt `read()` returning to the unpause register write completing
//!   (two register batches through the node), logged by the daemon in its
//!   shutdown summary. Not included: the device's interrupt delivery,
//!   which on the real-time clock is bounded by the driver's 250 µs tick.
//!   The device's fallback count shows whether any switch missed its
//!   timeout (2 ms);
//! - the read() of a perf software counter (PERF_COUNT_SW_TASK_CLOCK) as
//!   the baseline for tenant reads.
//!
//! - tenant counter reads: 100 clients, each reading one VM's totals at
//!   10 Hz, through its page (phase 1) or `TENANT_IOC_READ_COUNTERS`
//!   (phase 3); p50/p99 of a read, beside the perf baseline;
//! - commit-to-tenant-visible: when a probe read shows a new commit it
//!   reads the device cycle, and (cycle now − commit cycle) / clock is the
//!   commit's visibility latency (up to one polling interval included);
//! - staleness: once per millisecond the probe reads the device cycle
//!   whatever it saw, and (cycle now − cycle of the commit shown) / clock
//!   is how old what a reader sees is at that instant. A page is rewritten
//!   just after each periodic commit lands while its block moves (the
//!   daemon follows the trigger's period) and when an event says its data
//!   changed: a drain of the stream ring (a watermark, or the periodic
//!   drain every `[stream] drain_interval_ms`, `GPUPM_BENCH_DRAIN_MS`
//!   here, default the daemon's 100) or a switch's commit. An ioctl reads
//!   the block itself. `page refreshes` is the daemon's
//!   `gpupm_page_refreshes_total` over the page phase.
//!
//! `GPUPM_NODE_THREADS` and `GPUPM_TENANT_THREADS` set the driver's
//! `--threads` and the daemon's `tenant_threads` (default: theirs, 2).
//! `GPUPM_BENCH_CPUS` (default `0`) is the CPU list the device runs on
//! (the driver's `--cpus`, the emulator's stand-in for a device's
//! interrupt affinity) and the daemon's `device_cpus`, as an operator
//! pins them (docs/operations.md); `none` leaves both to the scheduler.
//! `GPUPM_BENCH_NO_MIRROR=1` starts the driver with `--no-mirror`, so the
//! daemon follows commits with `GPUPM_IOC_WAIT_COMMIT` (the baseline of
//! the commit mirror).
//! The load average is printed before and after. The last line is JSON.

// Page and ioctl readers, visibility probes.
mod clients;

use std::fs;
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clients::{Paths, Via};
use gpupm_test_support::procfs::{self, cpu_during, load_average};
use gpupm_test_support::services::{daemon_config, spawn_daemon};
use gpupm_test_support::{load, perf, Driver, DriverOptions, Scratch};
use gpupm_uapi::regs as r;
use nix::sys::signal::Signal;

fn status_kib(pid: i32, key: &str) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc/pid/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn log_field(log: &str, key: &str) -> Option<f64> {
    let line = log.lines().rev().find(|l| l.contains("final summary"))?;
    let at = line.find(&format!("{key}="))? + key.len() + 1;
    line[at..].split_whitespace().next()?.parse().ok()
}

#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn pct(v: &[u64], p: f64) -> u64 {
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn perf_read_baseline() -> (u64, u64) {
    let mut counter = perf::task_clock().expect("perf_event_open(PERF_COUNT_SW_TASK_CLOCK)");
    let mut buf = [0u8; 8];
    let mut v: Vec<u64> = (0..20_000)
        .map(|_| {
            let t = Instant::now();
            counter.read_exact(&mut buf).expect("read perf counter");
            u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX)
        })
        .collect();
    v.sort_unstable();
    (pct(&v, 0.5), pct(&v, 0.99))
}

fn env_u64(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// One client phase: `clients` readers via `via` for `secs`, then the
/// probe added for `probe_secs`.
struct Phase {
    cpu_pct: f64,
    /// CPU % of one core by daemon thread (name) over the same window.
    threads: Vec<(String, f64)>,
    cpu_probe_pct: f64,
    wall: f64,
    reads: Vec<u64>,
    probed: clients::Probed,
}

#[allow(clippy::too_many_arguments)]
fn phase(
    via: Via,
    paths: &Paths,
    pid: i32,
    tck: f64,
    khz: f64,
    clients: u32,
    secs: u64,
    probe_secs: u64,
) -> Phase {
    let stop = Arc::new(AtomicBool::new(false));
    let readers = clients::spawn_readers(clients, via, paths, &stop);
    let threads0 = procfs::thread_run_ns(pid);
    let (cpu_pct, wall) = cpu_during(pid, tck, || std::thread::sleep(Duration::from_secs(secs)));
    let threads = procfs::thread_cpu_pct(&threads0, &procfs::thread_run_ns(pid), wall);
    let probe_stop = Arc::new(AtomicBool::new(false));
    let poll = match via {
        Via::Page => Duration::from_micros(100),
        Via::Ioctl => Duration::from_millis(1),
    };
    let probe = clients::spawn_probe(via, paths, khz, poll, &probe_stop);
    let (cpu_probe_pct, _) = cpu_during(pid, tck, || {
        std::thread::sleep(Duration::from_secs(probe_secs));
    });
    probe_stop.store(true, Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    Phase {
        cpu_pct,
        threads,
        cpu_probe_pct,
        wall,
        reads: clients::collect(readers),
        probed: probe.join().expect("probe thread"),
    }
}

/// Length of one warm-up window.
const WARMUP_WINDOW_SECS: u64 = 5;

/// The reference load with no client for `secs` (rounded up to whole
/// windows): the daemon's CPU % (the sum over its threads, which have
/// nanosecond resolution where `/proc/<pid>/stat` has ticks) and its CPU %
/// by thread, per window.
fn warm_up(pid: i32, secs: u64) -> Vec<(f64, Vec<(String, f64)>)> {
    (0..secs.div_ceil(WARMUP_WINDOW_SECS))
        .map(|_| {
            let (threads0, t0) = (procfs::thread_run_ns(pid), Instant::now());
            std::thread::sleep(Duration::from_secs(WARMUP_WINDOW_SECS));
            let wall = t0.elapsed().as_secs_f64();
            let threads = procfs::thread_cpu_pct(&threads0, &procfs::thread_run_ns(pid), wall);
            (threads.iter().map(|(_, pct)| pct).sum(), threads)
        })
        .collect()
}

/// p50 and p99 of sorted samples (0 when empty).
fn p50_p99(v: &[u64]) -> (u64, u64) {
    if v.is_empty() {
        (0, 0)
    } else {
        (pct(v, 0.50), pct(v, 0.99))
    }
}

#[allow(clippy::cast_precision_loss)]
fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn main() {
    let load_before = load_average();
    let secs = env_u64("GPUPM_BENCH_SECS", 20);
    let probe_secs = env_u64("GPUPM_BENCH_PROBE_SECS", 5);
    let clients = u32::try_from(env_u64("GPUPM_BENCH_CLIENTS", 100)).unwrap_or(100);
    let threads = |var| {
        std::env::var(var)
            .ok()
            .and_then(|s| s.parse::<usize>().ok())
    };
    let (node_threads, tenant_threads) = (
        threads("GPUPM_NODE_THREADS"),
        threads("GPUPM_TENANT_THREADS"),
    );
    let backstop = std::env::var("GPUPM_BENCH_PAGE_BACKSTOP_MS").ok();
    let drain_ms = std::env::var("GPUPM_BENCH_DRAIN_MS").ok();
    let tmp = Scratch::new("bench");
    let mut driver_args: Vec<String> =
        node_threads.map_or_else(Vec::new, |n| vec!["--threads".into(), n.to_string()]);
    if std::env::var("GPUPM_BENCH_NO_MIRROR").is_ok_and(|v| v == "1") {
        driver_args.push("--no-mirror".into());
    }
    let cpus = std::env::var("GPUPM_BENCH_CPUS").unwrap_or_else(|_| "0".into());
    let pinned = (cpus != "none").then_some(cpus.as_str());
    if let Some(list) = pinned {
        driver_args.extend(["--cpus".into(), list.into()]);
    }
    let driver = Driver::start_in(
        &tmp,
        DriverOptions {
            clock: "realtime",
            args: driver_args,
            ..DriverOptions::system(load::scenario())
        },
    );
    let dev = driver.node();
    let mut top_keys =
        tenant_threads.map_or_else(String::new, |n| format!("tenant_threads = {n}\n"));
    if let Some(list) = pinned {
        top_keys.push_str(&format!("device_cpus = {list:?}\n"));
    }
    let pages_key = backstop.as_ref().map_or_else(String::new, |ms| {
        format!(
            "[pages]\ndir = {:?}\nbackstop_ms = {ms}\n",
            tmp.join("pages")
        )
    });
    let stream_key = drain_ms.as_ref().map_or_else(String::new, |ms| {
        format!("[stream]\ndrain_interval_ms = {ms}\n")
    });
    let config = daemon_config(
        &tmp,
        &format!("{top_keys}{pages_key}{stream_key}[health]\nsummary_interval_s = 86400\n"),
    );
    let mut daemon = spawn_daemon(&tmp, &config, &[], &[]);
    daemon.wait_for("READY=1");
    let pid = daemon.pid().as_raw();
    let parts: Vec<u64> = (1..=8).map(|p| r::part(p, r::PART_SWITCHES)).collect();
    let fb_regs: Vec<u64> = (1..=8).map(|p| r::part(p, r::PART_FALLBACKS)).collect();
    let sum = |regs: &[u64]| -> u64 { dev.read_many(regs).expect("registers").iter().sum() };
    let (switches0, fallbacks0) = (sum(&parts), sum(&fb_regs));
    let tck = procfs::ticks_per_s();
    let khz = f64::from(dev.read32(r::CLOCK_KHZ).expect("clock"));
    let paths = Paths {
        node: tmp.join("tenant").join("node"),
        pages: tmp.join("pages").join("socket"),
        dev: tmp.join("dev"),
    };

    let warmup = warm_up(pid, env_u64("GPUPM_BENCH_WARMUP_SECS", 20));
    let page_phase_switches0 = sum(&parts);
    let refreshes0 = daemon.metric("gpupm_page_refreshes_total");
    let paged = phase(Via::Page, &paths, pid, tck, khz, clients, secs, probe_secs);
    let page_refreshes = daemon.metric("gpupm_page_refreshes_total") - refreshes0;
    let switches_paged = sum(&parts) - page_phase_switches0;
    let rss_mib = status_kib(pid, "VmRSS:") as f64 / 1024.0;
    let ioctl = phase(Via::Ioctl, &paths, pid, tck, khz, clients, secs, probe_secs);
    let hwm_mib = status_kib(pid, "VmHWM:") as f64 / 1024.0;
    let (all_switches, fallbacks) = (sum(&parts) - switches0, sum(&fb_regs) - fallbacks0);
    let (perf_p50, perf_p99) = perf_read_baseline();
    let load_after = load_average();

    let exit = daemon.signal_and_wait(Signal::SIGTERM);
    assert!(exit.success(), "gpupmd exit {exit}:\n{}", daemon.log());
    let log = daemon.log();
    let field = |key| log_field(&log, key).unwrap_or(0.0);
    let (hs_p50, hs_p99) = (field("handshake_p50_us"), field("handshake_p99_us"));
    let (handshakes, response_max, lost) = (
        field("handshakes"),
        field("handshake_response_max_us"),
        field("lost_records"),
    );
    let count = |what: &str| log.lines().filter(|l| l.contains(what)).count();
    let (failed, abandoned) = (count("handshake failed"), count("handshake abandoned"));
    driver.stop();

    let (page_p50, page_p99) = p50_p99(&paged.reads);
    let (read_p50, read_p99) = p50_p99(&ioctl.reads);
    let (pvis_p50, pvis_p99) = p50_p99(&paged.probed.visible);
    let (vis_p50, vis_p99) = p50_p99(&ioctl.probed.visible);
    let (pstale_p50, pstale_p99) = p50_p99(&paged.probed.stale);
    let (stale_p50, stale_p99) = p50_p99(&ioctl.probed.stale);
    let shown = |n: Option<usize>| n.map_or_else(|| "default".to_owned(), |n| n.to_string());
    println!("load average              {load_before} before, {load_after} after");
    println!(
        "serving threads           driver {}, tenant node {}; page backstop {} ms, drain interval {} ms; device CPUs {}",
        shown(node_threads),
        shown(tenant_threads),
        backstop.as_deref().unwrap_or("default"),
        drain_ms.as_deref().unwrap_or("default"),
        pinned.unwrap_or("not pinned")
    );
    println!(
        "run                       {} s warm-up, then 2 x ({:.1} s reference load + {probe_secs} s with a visibility probe)",
        WARMUP_WINDOW_SECS * warmup.len() as u64,
        paged.wall
    );
    println!(
        "daemon CPU, warm-up       {} % of one core by {WARMUP_WINDOW_SECS} s window after READY (no client; the history rings fill)",
        warmup.iter().map(|(pct, _)| format!("{pct:.2}")).collect::<Vec<_>>().join(", ")
    );
    if let Some((_, threads)) = warmup.first() {
        println!("  by thread, first window {}", by_thread(threads));
    }
    println!("switches                  {switches_paged} in the page phase ({:.0}/s); {all_switches} in all, {fallbacks} by fallback; daemon lifetime: {handshakes} host handshakes, {lost} lost records", switches_paged as f64 / paged.wall);
    println!(
        "daemon CPU, page clients  {:.2} % of one core (goal < 2 %); {:.2} % with the page probe",
        paged.cpu_pct, paged.cpu_probe_pct
    );
    println!("  by thread               {}", by_thread(&paged.threads));
    println!(
        "page refreshes            {:.0}/s in the page phase",
        page_refreshes as f64 / (paged.wall + probe_secs as f64)
    );
    println!(
        "daemon CPU, ioctl clients {:.2} % of one core; {:.2} % with the 1 kHz ioctl probe",
        ioctl.cpu_pct, ioctl.cpu_probe_pct
    );
    println!("  by thread               {}", by_thread(&ioctl.threads));
    println!("daemon RSS                {rss_mib:.1} MiB (peak {hwm_mib:.1} MiB; goal < 64 MiB)");
    println!(
        "handshake latency         p50 {hs_p50:.1} µs   p99 {hs_p99:.1} µs (goal p99 < 500 µs)"
    );
    println!("handshake errors          {failed} failed, {abandoned} abandoned to the fallback");
    println!("switch request → pause    max {response_max:.0} µs of device time (the fallback timeout is 2,000 µs)");
    println!("perf counter read()       p50 {perf_p50} ns   p99 {perf_p99} ns");
    println!(
        "tenant page read          p50 {page_p50} ns   p99 {page_p99} ns ({} reads by {clients} clients at 10 Hz; {:.3}x the perf read at p50)",
        paged.reads.len(),
        page_p50 as f64 / perf_p50 as f64
    );
    println!(
        "tenant ioctl read         p50 {read_p50} ns   p99 {read_p99} ns ({} reads; {:.1}x the perf read at p50)",
        ioctl.reads.len(),
        read_p50 as f64 / perf_p50 as f64
    );
    println!(
        "commit → page-visible     p50 {:.2} ms   p99 {:.2} ms over {} commits (goal p99 < 1 ms)",
        ms(pvis_p50),
        ms(pvis_p99),
        paged.probed.visible.len()
    );
    println!(
        "page staleness            p50 {:.2} ms   p99 {:.2} ms over {} samples (1 kHz)",
        ms(pstale_p50),
        ms(pstale_p99),
        paged.probed.stale.len()
    );
    println!(
        "commit → ioctl-visible    p50 {:.2} ms   p99 {:.2} ms over {} commits (goal p99 < 5 ms)",
        ms(vis_p50),
        ms(vis_p99),
        ioctl.probed.visible.len()
    );
    println!(
        "ioctl staleness           p50 {:.2} ms   p99 {:.2} ms over {} samples",
        ms(stale_p50),
        ms(stale_p99),
        ioctl.probed.stale.len()
    );
    println!(
        "{{\"page_clients_cpu_pct\":{:.3},\"page_probe_cpu_pct\":{:.3},\"page_visible_p50_ms\":{:.3},\"page_visible_p99_ms\":{:.3},\"page_stale_p50_ms\":{:.3},\"page_stale_p99_ms\":{:.3},\"ioctl_stale_p99_ms\":{:.3},\
         \"page_read_p50_ns\":{page_p50},\"page_read_p99_ns\":{page_p99},\"cpu_pct\":{:.3},\"cpu_with_probe_pct\":{:.3},\
         \"rss_mib\":{rss_mib:.2},\"handshake_p50_us\":{hs_p50:.2},\"handshake_p99_us\":{hs_p99:.2},\"visible_p99_ms\":{:.3},\
         \"tenant_read_p50_ns\":{read_p50},\"tenant_read_p99_ns\":{read_p99},\"perf_read_p50_ns\":{perf_p50},\
         \"response_max_us\":{response_max:.0},\"handshake_failed\":{failed},\"handshake_abandoned\":{abandoned},\
         \"switches_per_s\":{:.1},\"fallbacks\":{fallbacks},\"lost_records\":{lost},\"load\":\"{load_before}\",\"device_cpus\":\"{}\",\
         \"warmup_cpu_pct\":[{}],\"page_threads_cpu_pct\":{{{}}}}}",
        paged.cpu_pct,
        paged.cpu_probe_pct,
        ms(pvis_p50),
        ms(pvis_p99),
        ms(pstale_p50),
        ms(pstale_p99),
        ms(stale_p99),
        ioctl.cpu_pct,
        ioctl.cpu_probe_pct,
        ms(vis_p99),
        switches_paged as f64 / paged.wall,
        pinned.unwrap_or("none"),
        warmup
            .iter()
            .map(|(pct, _)| format!("{pct:.3}"))
            .collect::<Vec<_>>()
            .join(","),
        paged
            .threads
            .iter()
            .filter(|(_, pct)| *pct >= 0.005)
            .map(|(name, pct)| format!("\"{name}\":{pct:.3}"))
            .collect::<Vec<_>>()
            .join(",")
    );
}

/// The threads that used at least 0.005 % of a core, busiest first.
fn by_thread(threads: &[(String, f64)]) -> String {
    threads
        .iter()
        .filter(|(_, pct)| *pct >= 0.005)
        .map(|(name, pct)| format!("{name} {pct:.2} %"))
        .collect::<Vec<_>>()
        .join(", ")
}
