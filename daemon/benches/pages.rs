//! A tenant's counter read through its page, against the perf baseline.
//!
//! `cargo bench -p gpupmd --bench pages` starts the real `gpupm-driver`
//! on a real-time clock with the reference load (see `reference_load`)
//! and the real `gpupmd` (pages rewritten on events and at each periodic
//! commit while blocks move, with a backstop every
//! `GPUPM_BENCH_PAGE_BACKSTOP_MS`, default the daemon's), maps VM 1's page
//! through the page socket and times, in this process, one after the
//! other:
//!
//! - `page_read`: `MappedPage::read_counters` (the sequence-lock copy of
//!   the page's 552 bytes of counters: totals, commit count, cycle, state,
//!   generation), while the daemon keeps rewriting the page;
//! - `page_full_read`: `MappedPage::read` (all 2,288 protected bytes);
//! - `perf_read`: `read()` of a Linux perf software counter
//!   (`PERF_COUNT_SW_TASK_CLOCK`), the baseline;
//! - `ioctl_read`: `TENANT_IOC_READ_COUNTERS` of the same VM through the
//!   tenant node, for comparison.
//!
//! Each read is timed on its own with `Instant` (the same clock overhead in
//! every figure); `*_mean_ns` are per-read means of one long untimed loop.
//! `page_over_perf` = `page_read_p50_ns` / `perf_read_p50_ns`.
//!
//! The refresh cost: the daemon's CPU (% of one core, utime + stime) over
//! `GPUPM_BENCH_SECS` (default 10) with pages on and no reader, then the
//! same daemon restarted with `[pages] enabled = false` over the same
//! time as the baseline; the difference is what refreshing the pages
//! costs (`refresh_cpu_pct`), also per refresh (`refresh_us`, from the
//! daemon's `gpupm_page_refreshes_total` over the window). Readers add
//! nothing to it: a page read is a memory read. The load average is
//! printed before and after. The last line is JSON.

use std::io::Read;
use std::time::{Duration, Instant};

use gpupm_client::page::PageClient;
use gpupm_client::{Scope, TenantClient};
use gpupm_test_support::procfs::{self, cpu_during, load_average};
use gpupm_test_support::services::{daemon_config, spawn_daemon};
use gpupm_test_support::{load, perf, Driver, DriverOptions, Scratch};
use nix::sys::signal::Signal;

const WARMUP: usize = 10_000;

#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_precision_loss
)]
fn pct(v: &[u64], p: f64) -> u64 {
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// p50 and p99 of `n` individually timed calls of `f`, in ns.
fn timed(n: usize, mut f: impl FnMut()) -> (u64, u64) {
    for _ in 0..WARMUP.min(n) {
        f();
    }
    let mut v: Vec<u64> = (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX)
        })
        .collect();
    v.sort_unstable();
    (pct(&v, 0.5), pct(&v, 0.99))
}

/// Mean ns per call over `n` calls timed as one loop.
#[allow(clippy::cast_precision_loss)]
fn mean(n: usize, mut f: impl FnMut()) -> f64 {
    let t = Instant::now();
    for _ in 0..n {
        f();
    }
    t.elapsed().as_nanos() as f64 / n as f64
}

fn main() {
    let load_before = load_average();
    let backstop_ms: u64 = std::env::var("GPUPM_BENCH_PAGE_BACKSTOP_MS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(gpupm_client::config::DEFAULT_PAGE_BACKSTOP_MS);
    let secs: u64 = std::env::var("GPUPM_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let tck = procfs::ticks_per_s();
    let tmp = Scratch::new("bench-pages");
    let driver = Driver::start_in(
        &tmp,
        DriverOptions {
            clock: "realtime",
            ..DriverOptions::system(load::scenario())
        },
    );
    let config = |enabled: bool| {
        daemon_config(
            &tmp,
            &format!(
                "[pages]\nenabled = {enabled}\ndir = {:?}\nbackstop_ms = {backstop_ms}\n\
                 [health]\nsummary_interval_s = 86400\n",
                tmp.join("pages")
            ),
        )
    };
    let mut daemon = spawn_daemon(&tmp, &config(true), &[], &[]);
    daemon.wait_for("READY=1");
    let pages = PageClient::connect(tmp.join("pages").join("socket")).expect("page socket");
    let page = pages.map_vm(1).expect("map VM 1's page");
    let node = TenantClient::open(tmp.join("tenant").join("node")).expect("tenant node");
    // Let the daemon rewrite the page a few hundred times first.
    let first = page.read_counters().expect("read").commit_seq;
    let deadline = Instant::now() + Duration::from_secs(10);
    while page.read_counters().expect("read").commit_seq < first + 200 {
        assert!(Instant::now() < deadline, "the page is not being updated");
        std::thread::sleep(Duration::from_millis(5));
    }
    let refreshes_before = daemon.metric("gpupm_page_refreshes_total");
    let (pages_on_pct, _) = cpu_during(daemon.pid().as_raw(), tck, || {
        std::thread::sleep(Duration::from_secs(secs));
    });
    let refreshes = daemon.metric("gpupm_page_refreshes_total") - refreshes_before;

    let mut busy = 0u64;
    let (page_p50, page_p99) = timed(1_000_000, || {
        if page.read_counters().is_err() {
            busy += 1;
        }
    });
    let (full_p50, full_p99) = timed(200_000, || {
        if page.read().is_err() {
            busy += 1;
        }
    });
    let mut counter = perf::task_clock().expect("perf_event_open(PERF_COUNT_SW_TASK_CLOCK)");
    let mut b8 = [0u8; 8];
    let (perf_p50, perf_p99) = timed(200_000, || {
        counter.read_exact(&mut b8).expect("perf counter read");
    });
    let (ioctl_p50, ioctl_p99) = timed(5_000, || {
        node.read_counters(Scope::Vm(1), &[]).expect("ioctl read");
    });
    let page_mean = mean(2_000_000, || {
        if page.read_counters().is_err() {
            busy += 1;
        }
    });
    let perf_mean = mean(200_000, || {
        counter.read_exact(&mut b8).expect("perf counter read");
    });
    let updates = page.read_counters().expect("read").commit_seq - first;
    let load_after = load_average();

    let exit = daemon.signal_and_wait(Signal::SIGTERM);
    assert!(exit.success(), "gpupmd exit {exit}:\n{}", daemon.log());
    // The baseline: the same daemon and load without pages.
    let mut daemon = spawn_daemon(&tmp, &config(false), &[], &[]);
    daemon.wait_for("READY=1");
    let (pages_off_pct, _) = cpu_during(daemon.pid().as_raw(), tck, || {
        std::thread::sleep(Duration::from_secs(secs));
    });
    let exit = daemon.signal_and_wait(Signal::SIGTERM);
    assert!(exit.success(), "gpupmd exit {exit}:\n{}", daemon.log());
    driver.stop();
    let load_end = load_average();

    #[allow(clippy::cast_precision_loss)]
    let ratio = |a: u64, b: u64| a as f64 / b.max(1) as f64;
    let page_over_perf = ratio(page_p50, perf_p50);
    let refresh_cpu_pct = pages_on_pct - pages_off_pct;
    #[allow(clippy::cast_precision_loss)] // microseconds
    let (refresh_cost_us, per_s) = (
        refresh_cpu_pct / 100.0 * (secs as f64 * 1e6) / refreshes.max(1) as f64,
        refreshes as f64 / secs as f64,
    );
    println!("load average              {load_before} before, {load_after} after the reads, {load_end} at the end");
    println!(
        "page refresh              on events and following the periodic commits, {per_s:.1}/s; backstop every {backstop_ms} ms (GPUPM_BENCH_PAGE_BACKSTOP_MS); {updates} commits folded into VM 1's page during the reads"
    );
    println!(
        "daemon CPU                {pages_on_pct:.2} % of one core with pages, {pages_off_pct:.2} % without ({secs} s each)"
    );
    println!(
        "refresh cost              {refresh_cpu_pct:.2} % of one core, {refresh_cost_us:.1} µs of CPU per refresh"
    );
    println!(
        "page read (counters)      p50 {page_p50} ns   p99 {page_p99} ns   mean {page_mean:.1} ns"
    );
    println!("page read (all data)      p50 {full_p50} ns   p99 {full_p99} ns");
    println!(
        "perf counter read()       p50 {perf_p50} ns   p99 {perf_p99} ns   mean {perf_mean:.1} ns"
    );
    println!(
        "tenant ioctl read         p50 {ioctl_p50} ns   p99 {ioctl_p99} ns ({:.0}x the page read)",
        ratio(ioctl_p50, page_p50)
    );
    println!("page / perf (p50)         {page_over_perf:.3} (goal <= 1.0, moonshot <= 0.1); {busy} reads found the page busy");
    println!(
        "{{\"page_read_p50_ns\":{page_p50},\"page_read_p99_ns\":{page_p99},\"page_full_read_p50_ns\":{full_p50},\
         \"page_full_read_p99_ns\":{full_p99},\"perf_read_p50_ns\":{perf_p50},\"perf_read_p99_ns\":{perf_p99},\
         \"page_over_perf\":{page_over_perf:.4},\"page_read_mean_ns\":{page_mean:.2},\"perf_read_mean_ns\":{perf_mean:.2},\
         \"ioctl_read_p50_ns\":{ioctl_p50},\"ioctl_read_p99_ns\":{ioctl_p99},\"busy\":{busy},\"pages_on_cpu_pct\":{pages_on_pct:.3},\"pages_off_cpu_pct\":{pages_off_pct:.3},\
         \"refresh_cpu_pct\":{refresh_cpu_pct:.3},\"refresh_us\":{refresh_cost_us:.2},\"refreshes_per_s\":{per_s:.2},\"load\":\"{load_before}\"}}"
    );
}
