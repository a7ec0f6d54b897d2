//! The daemon under the reference load.
//!
//! `cargo bench -p gpupmd --bench reference_load` starts the real
//! `gpupm-driver` on a real-time clock with the reference load (H100-class
//! GPU, every counter active, 1 kHz periodic trigger, 8 partitions, 8 VMs,
//! 512 contexts, context timeslices giving 8 × 25 = 200 switches/s — the
//! scenario of `gpupm_driver::scenario::synthetic::reference_load`) and the
//! real `gpupmd`, lets them run for `GPUPM_BENCH_SECS` (default 20) under
//! the reference load, then `GPUPM_BENCH_PROBE_SECS` (default 5) more with
//! the visibility probe added, and prints:
//!
//! - daemon CPU % of one core: utime + stime from `/proc/<pid>/stat` over
//!   the reference phase (after READY), and separately over the probe
//!   phase (the probe alone issues as many requests as the 100 clients);
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
//! - tenant counter reads: 100 clients, each reading one VM's totals
//!   (TENANT_IOC_READ_COUNTERS through the tenant node) at 10 Hz; p50/p99
//!   of the ioctl, beside the perf baseline;
//! - trigger-to-tenant-visible: tenants read totals from the device's
//!   memory blocks through the daemon, so a commit is visible as soon as a
//!   tenant read returns it. In the probe phase one more client polls VM 1
//!   every millisecond; when a read shows a new commit it reads the device
//!   cycle, and (cycle now − commit cycle) / clock is the commit's
//!   visibility latency (it includes up to one polling interval).
//!
//! `GPUPM_NODE_THREADS` and `GPUPM_TENANT_THREADS` set the driver's
//! `--threads` and the daemon's `tenant_threads` (default: theirs, 2).
//!
//! The last line is JSON.

use std::fs;
use std::io::Read;
use std::time::{Duration, Instant};

use gpupm_test_support::perf;
use gpupm_test_support::services::{daemon_config, spawn_daemon};
use gpupm_test_support::{Driver, DriverOptions, Scratch};
use gpupm_uapi::events::{UnitType, CATALOGUE};
use gpupm_uapi::regs as r;
use nix::sys::signal::Signal;

/// The reference load as a scenario file.
fn scenario() -> String {
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

/// utime + stime of `pid` in clock ticks.
fn cpu_ticks(pid: i32) -> u64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc/pid/stat");
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields of the whole line.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).expect("stat format");
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().expect("utime") + f[12].parse::<u64>().expect("stime")
}

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

fn main() {
    let secs: u64 = std::env::var("GPUPM_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let probe_secs: u64 = std::env::var("GPUPM_BENCH_PROBE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let threads = |var| {
        std::env::var(var)
            .ok()
            .and_then(|s| s.parse::<usize>().ok())
    };
    let (node_threads, tenant_threads) = (
        threads("GPUPM_NODE_THREADS"),
        threads("GPUPM_TENANT_THREADS"),
    );
    let tmp = Scratch::new("bench");
    let driver_args: Vec<String> =
        node_threads.map_or_else(Vec::new, |n| vec!["--threads".into(), n.to_string()]);
    let driver = Driver::start_in(
        &tmp,
        DriverOptions {
            clock: "realtime",
            args: driver_args,
            ..DriverOptions::system(scenario())
        },
    );
    let dev = driver.node();
    let tenant_key = tenant_threads.map_or_else(String::new, |n| format!("tenant_threads = {n}\n"));
    let config = daemon_config(
        &tmp,
        &format!("{tenant_key}[health]\nsummary_interval_s = 86400\n"),
    );
    let mut daemon = spawn_daemon(&tmp, &config, &[], &[]);
    daemon.wait_for("READY=1");
    let pid = daemon.pid().as_raw();
    let parts: Vec<u64> = (1..=8).map(|p| r::part(p, r::PART_SWITCHES)).collect();
    let switches0: u64 = dev.read_many(&parts).expect("switches").iter().sum();
    let fb_regs: Vec<u64> = (1..=8).map(|p| r::part(p, r::PART_FALLBACKS)).collect();
    let fallbacks0: u64 = dev.read_many(&fb_regs).expect("fallbacks").iter().sum();

    let tck = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64;
    let node = tmp.join("tenant").join("node");
    let khz = f64::from(dev.read32(r::CLOCK_KHZ).expect("clock"));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // GPUPM_BENCH_CLIENTS (default 100, the reference load) tenant clients.
    let clients: u32 = std::env::var("GPUPM_BENCH_CLIENTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let readers: Vec<_> = (0..clients)
        .map(|i| {
            let (node, stop) = (node.clone(), std::sync::Arc::clone(&stop));
            // Spread the clients' phases over the 100 ms period, as
            // independent tenants would be.
            let phase = Duration::from_micros(u64::from(i) * 997);
            std::thread::spawn(move || tenant_reader(&node, i % 8 + 1, phase, &stop))
        })
        .collect();
    // The reference load alone: what the CPU and RSS goals are about.
    let (t0, c0) = (Instant::now(), cpu_ticks(pid));
    std::thread::sleep(Duration::from_secs(secs));
    let (wall, c1) = (t0.elapsed().as_secs_f64(), cpu_ticks(pid));
    let cpu_pct = (c1 - c0) as f64 / tck / wall * 100.0;
    let rss_mib = status_kib(pid, "VmRSS:") as f64 / 1024.0;
    let switches: u64 = dev.read_many(&parts).expect("switches").iter().sum::<u64>() - switches0;
    // Then the visibility probe on top: it polls at 1 kHz, as many requests
    // as the hundred clients together, so it runs in its own phase rather
    // than inflating the reference load's CPU figure.
    let probe_stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (node, stop, node_dir) = (
            node.clone(),
            std::sync::Arc::clone(&probe_stop),
            tmp.join("dev"),
        );
        std::thread::spawn(move || visibility_watcher(&node, &node_dir, khz, &stop))
    };
    let (t1, c2) = (Instant::now(), cpu_ticks(pid));
    std::thread::sleep(Duration::from_secs(probe_secs));
    let (probe_wall, c3) = (t1.elapsed().as_secs_f64(), cpu_ticks(pid));
    probe_stop.store(true, std::sync::atomic::Ordering::Relaxed);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let cpu_probe_pct = (c3 - c2) as f64 / tck / probe_wall * 100.0;
    let mut reads: Vec<u64> = readers
        .into_iter()
        .flat_map(|h| h.join().expect("reader"))
        .collect();
    reads.sort_unstable();
    let mut visible = watcher.join().expect("watcher");
    visible.sort_unstable();
    let (read_p50, read_p99) = if reads.is_empty() {
        (0, 0)
    } else {
        (pct(&reads, 0.50), pct(&reads, 0.99))
    };
    let visible_p99_ms = pct(&visible, 0.99) as f64 / 1e6;
    let visible_p50_ms = pct(&visible, 0.50) as f64 / 1e6;
    let hwm_mib = status_kib(pid, "VmHWM:") as f64 / 1024.0;
    let all_switches: u64 =
        dev.read_many(&parts).expect("switches").iter().sum::<u64>() - switches0;
    let fallbacks: u64 = dev
        .read_many(&fb_regs)
        .expect("fallbacks")
        .iter()
        .sum::<u64>()
        - fallbacks0;
    let (perf_p50, perf_p99) = perf_read_baseline();

    let exit = daemon.signal_and_wait(Signal::SIGTERM);
    assert!(exit.success(), "gpupmd exit {exit}:\n{}", daemon.log());
    let log = daemon.log();
    let hs_p50 =
        log_field(&log, "handshake_p50_us").expect("handshake_p50_us in the final summary");
    let hs_p99 =
        log_field(&log, "handshake_p99_us").expect("handshake_p99_us in the final summary");
    let handshakes = log_field(&log, "handshakes").unwrap_or(0.0);
    let response_max = log_field(&log, "handshake_response_max_us").unwrap_or(0.0);
    let failed = log
        .lines()
        .filter(|l| l.contains("handshake failed"))
        .count();
    let abandoned = log
        .lines()
        .filter(|l| l.contains("handshake abandoned"))
        .count();
    for line in log
        .lines()
        .filter(|l| l.contains("handshake failed"))
        .take(3)
    {
        eprintln!("gpupmd: {line}");
    }
    let lost = log_field(&log, "lost_records").unwrap_or(0.0);
    driver.stop();

    let shown = |n: Option<usize>| n.map_or_else(|| "default".to_owned(), |n| n.to_string());
    println!(
        "serving threads           driver {}, tenant node {}",
        shown(node_threads),
        shown(tenant_threads)
    );
    println!("run                       {wall:.1} s reference load + {probe_wall:.1} s with the visibility probe");
    println!("switches                  {switches} in the reference phase ({:.0}/s); {all_switches} in all, {fallbacks} by fallback; daemon lifetime: {handshakes} host handshakes, {lost} lost records", switches as f64 / wall);
    println!("daemon CPU                {cpu_pct:.2} % of one core (goal < 5 %); {cpu_probe_pct:.2} % with the 1 kHz visibility probe added");
    println!("daemon RSS                {rss_mib:.1} MiB (peak {hwm_mib:.1} MiB; goal < 64 MiB)");
    println!(
        "handshake latency         p50 {hs_p50:.1} µs   p99 {hs_p99:.1} µs (goal p99 < 500 µs)"
    );
    println!("handshake errors          {failed} failed, {abandoned} abandoned to the fallback");
    println!(
        "switch request → pause    max {response_max:.0} µs of device time (the fallback timeout is 2,000 µs)"
    );
    println!("perf counter read()       p50 {perf_p50} ns   p99 {perf_p99} ns");
    println!(
        "tenant counter read       p50 {read_p50} ns   p99 {read_p99} ns ({} reads by {clients} clients at 10 Hz; {:.1}x the perf read at p50)",
        reads.len(),
        read_p50 as f64 / perf_p50 as f64
    );
    println!(
        "trigger-to-tenant-visible p50 {visible_p50_ms:.2} ms   p99 {visible_p99_ms:.2} ms over {} commits (goal p99 < 5 ms)",
        visible.len()
    );
    println!(
        "{{\"cpu_pct\":{cpu_pct:.3},\"rss_mib\":{rss_mib:.2},\"handshake_p50_us\":{hs_p50:.2},\"handshake_p99_us\":{hs_p99:.2},\
         \"visible_p99_ms\":{visible_p99_ms:.3},\"tenant_read_p50_ns\":{read_p50},\"tenant_read_p99_ns\":{read_p99},\"perf_read_p50_ns\":{perf_p50},\
         \"cpu_with_probe_pct\":{cpu_probe_pct:.3},\"response_max_us\":{response_max:.0},\"handshake_failed\":{failed},\"handshake_abandoned\":{abandoned},\"switches_per_s\":{:.1},\"fallbacks\":{fallbacks},\"lost_records\":{lost}}}",
        switches as f64 / wall
    );
}

/// One tenant client: reads `vm`'s totals at 10 Hz until `stop`; returns
/// the ioctl latencies in ns.
fn tenant_reader(
    node: &std::path::Path,
    vm: u32,
    phase: Duration,
    stop: &std::sync::atomic::AtomicBool,
) -> Vec<u64> {
    use gpupm_client::Scope;
    use gpupm_client::TenantClient;

    let client = TenantClient::open(node).expect("open the tenant node");
    let mut lat = Vec::new();
    let mut next = Instant::now() + phase;
    std::thread::sleep(phase);
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let t = Instant::now();
        client
            .read_counters(Scope::Vm(vm), &[])
            .expect("read counters");
        lat.push(u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX));
        next += Duration::from_millis(100);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    lat
}

/// Polls VM 1's totals every millisecond; for each new commit, the device time
/// from the commit to the tenant read that first showed it, in ns.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // ns from a non-negative ms figure
fn visibility_watcher(
    node: &std::path::Path,
    node_dir: &std::path::Path,
    khz: f64,
    stop: &std::sync::atomic::AtomicBool,
) -> Vec<u64> {
    use gpupm_client::DevNode;
    use gpupm_client::Scope;
    use gpupm_client::TenantClient;

    let client = TenantClient::open(node).expect("open the tenant node");
    let dev = DevNode::open(node_dir).expect("open the device node");
    let mut last = u64::MAX;
    let mut out = Vec::new();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let rc = client
            .read_counters(Scope::Vm(1), &[])
            .expect("read counters");
        if rc.commit_seq != last {
            let now = dev.read64(r::CYCLE).expect("cycle");
            if last != u64::MAX {
                out.push(((now.saturating_sub(rc.cycle)) as f64 / khz * 1e6) as u64);
            }
            last = rc.commit_seq;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    out
}
