//! Node latency/throughput against two baselines.
//!
//! `cargo bench -p gpupm-driver --bench node` starts the real driver
//! serving the device model (the tests' three-partition switching
//! scenario, step clock, `RUST_LOG=info` as in production) and prints
//! p50/p99 of a register read via pread, a batched 8-op ioctl, a 64 KiB
//! memory-window read (MB/s), and a real context-switch handshake through
//! the node: the two register batches of `gpupm_driver::host::handshake`
//! on a partition whose switch the device requested (the clock is advanced
//! and the request read between samples, untimed; `service` adds that
//! record read). The handshakes are timed twice: alone, and while another
//! thread reads 64 KiB memory windows back to back on its own handle
//! (`handshake_loaded_p99_us`), which is where serving threads matter.
//!
//! Baselines in the same run: the read() of a perf software counter
//! (`PERF_COUNT_SW_TASK_CLOCK`), and a bare FUSE file served in-process by
//! a minimal file system ([`bare`]): 4-byte pread p50/p99 and 64 KiB read
//! MB/s, i.e. what the FUSE round trip costs before the driver does any
//! work.
//!
//! `GPUPM_NODE_THREADS=N` sets the driver's `--threads` and the bare file
//! system's thread count (default: the driver's default, 2);
//! `GPUPM_NODE_LOG=debug` runs the driver at the test harness's log level
//! (fuser then logs every request) instead of `info`. Last line: one JSON
//! object.

mod bare;

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use gpupm_driver::node::DEFAULT_THREADS;
use gpupm_test_support::perf;
use gpupm_test_support::rawnode::{
    advance, batch_of, drain_records, handshake, ioctl, read_op, service_pending, wr32, write_op,
};
use gpupm_test_support::scenario::{self, SWITCHING_TIMEOUT};
use gpupm_test_support::{Driver, DriverOptions, Scratch};
use gpupm_uapi::intr::source;
use gpupm_uapi::ioctl::{RegBatch, GPUPM_IOC_REG_BATCH};
use gpupm_uapi::layout::MEM_WINDOW_OFFSET;
use gpupm_uapi::regs;
use zerocopy::IntoBytes;

const WARMUP: usize = 500;
const WINDOW: usize = 64 * 1024;

fn measure(n: usize, mut f: impl FnMut()) -> Vec<Duration> {
    for _ in 0..WARMUP {
        f();
    }
    let mut v: Vec<Duration> = (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    v.sort_unstable();
    v
}

#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn pct(v: &[Duration], p: f64) -> Duration {
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i.min(v.len() - 1)]
}

fn report(name: &str, v: &[Duration]) -> (u128, u128) {
    let (p50, p99) = (pct(v, 0.50).as_nanos(), pct(v, 0.99).as_nanos());
    println!(
        "{name:<26} p50 {p50:>9} ns   p99 {p99:>9} ns   (n={})",
        v.len()
    );
    (p50, p99)
}

/// Four writes (of the value already there) and four reads.
fn batch8() -> RegBatch {
    let timeout = regs::part(2, regs::PART_SWITCH_TIMEOUT);
    batch_of(&[
        write_op(timeout, SWITCHING_TIMEOUT),
        read_op(timeout, 4),
        write_op(regs::INTR_MASK, 0),
        read_op(regs::CYCLE, 8),
        write_op(timeout, SWITCHING_TIMEOUT),
        read_op(regs::part(1, regs::PART_STATUS), 4),
        write_op(regs::INTR_MASK, 0),
        read_op(regs::INTR_STATUS, 4),
    ])
}

/// Times `n` real handshakes: advances until the device requests a switch,
/// then times the two batches (`hs`) and the record read plus both
/// batches (`service`). Other requests are handshaked untimed.
fn handshakes(card: &mut std::fs::File, n: usize) -> (Vec<Duration>, Vec<Duration>) {
    service_pending(card);
    let (mut hs, mut service) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let mut buf = [0u8; 32];
    while hs.len() < n {
        advance(card, 1_000).expect("advance");
        loop {
            let t = Instant::now();
            let got = match card.read(&mut buf) {
                Ok(got) => got,
                Err(e) if gpupm_test_support::rawnode::errno(&e) == libc::EAGAIN => break,
                Err(e) => panic!("interrupt read: {e}"),
            };
            let rec = gpupm_test_support::rawnode::records(&buf[..got])[0];
            if rec.source != source::SWITCH_REQUESTED {
                continue;
            }
            let t_hs = Instant::now();
            handshake(card, rec.partition).expect("handshake");
            hs.push(t_hs.elapsed());
            service.push(t.elapsed());
        }
        wr32(card, regs::INTR_ACK, source::ALL).expect("ack");
    }
    hs.sort_unstable();
    service.sort_unstable();
    (hs, service)
}

/// [`handshakes`] while another thread reads 64 KiB windows back to back
/// on its own handle; also returns the window reads completed meanwhile.
fn handshakes_loaded(d: &Driver, card: &mut File, n: usize) -> (Vec<Duration>, u64) {
    let stop = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    let hammer = d.card();
    let hs = thread::scope(|s| {
        s.spawn(|| {
            let mut buf = vec![0u8; WINDOW];
            while !stop.load(Ordering::Relaxed) {
                hammer
                    .read_exact_at(&mut buf, MEM_WINDOW_OFFSET)
                    .expect("window read");
                reads.fetch_add(1, Ordering::Relaxed);
            }
        });
        // The hammer is under way before the first timed handshake.
        while reads.load(Ordering::Relaxed) < 10 {
            thread::yield_now();
        }
        let (hs, _) = handshakes(card, n);
        stop.store(true, Ordering::Relaxed);
        hs
    });
    (hs, reads.into_inner())
}

/// The bare-FUSE baseline: 4-byte pread latencies and 64 KiB read MB/s.
fn bare_fuse(threads: usize) -> (Vec<Duration>, f64) {
    let tmp = Scratch::new("bare");
    let fs = bare::BareFuse::mount(&tmp.join("dev"), threads).expect("mount the bare FUSE file");
    let file = File::open(fs.file()).expect("open the bare FUSE file");
    let mut b4 = [0u8; 4];
    let small = measure(20_000, || {
        file.read_exact_at(&mut b4, 0).expect("bare FUSE read");
    });
    let mut big = vec![0u8; WINDOW];
    let bulk = measure(3_000, || {
        file.read_exact_at(&mut big, 0)
            .expect("bare FUSE 64 KiB read");
    });
    let mb_s = mb_per_s(&bulk, WINDOW);
    drop(file);
    fs.unmount().expect("unmount the bare FUSE file");
    (small, mb_s)
}

fn mb_per_s(samples: &[Duration], bytes: usize) -> f64 {
    let total: Duration = samples.iter().sum();
    (samples.len() * bytes) as f64 / total.as_secs_f64() / 1e6
}

fn main() {
    let threads = match std::env::var("GPUPM_NODE_THREADS") {
        Ok(v) => v
            .parse::<usize>()
            .expect("GPUPM_NODE_THREADS must be a number of threads"),
        Err(_) => DEFAULT_THREADS.get(),
    };
    let log = match std::env::var("GPUPM_NODE_LOG").as_deref() {
        Ok("debug") => "debug",
        _ => "info",
    };
    println!("serving threads            {threads} (GPUPM_NODE_THREADS), driver log {log}");
    let d = Driver::start_with(DriverOptions {
        threads: Some(threads),
        log,
        ..DriverOptions::toml(scenario::switching())
    });
    let mut card = d.card_nonblock();

    let mut b4 = [0u8; 4];
    let reg = measure(20_000, || {
        card.read_at(&mut b4, regs::ID).expect("register read");
    });
    let (reg_p50, reg_p99) = report("reg read (pread 4B)", &reg);

    let mut counter = perf::task_clock().expect("perf_event_open(PERF_COUNT_SW_TASK_CLOCK)");
    let mut b8 = [0u8; 8];
    let perf = measure(20_000, || {
        counter.read_exact(&mut b8).expect("perf counter read");
    });
    let (perf_p50, perf_p99) = report("perf read (task-clock)", &perf);

    let (bare, bare_window_mb_s) = bare_fuse(threads);
    let (bare_p50, bare_p99) = report("bare FUSE read (pread 4B)", &bare);

    let template = batch8();
    let batch = measure(10_000, || {
        let mut b = template;
        ioctl(&card, GPUPM_IOC_REG_BATCH, b.as_mut_bytes()).expect("batch ioctl");
    });
    let (_, batch_p99) = report("batch ioctl (8 ops)", &batch);

    let mut window = vec![0u8; WINDOW];
    let win = measure(3_000, || {
        card.read_exact_at(&mut window, MEM_WINDOW_OFFSET)
            .expect("window read");
    });
    let (win_p50, _) = report("window read (64 KiB)", &win);
    let window_mb_s = mb_per_s(&win, WINDOW);

    drain_records(&mut card);
    let (hs, service) = handshakes(&mut card, 3_000);
    let (_, hs_p99) = report("handshake (2 batches)", &hs);
    let (_, service_p99) = report("record read + handshake", &service);

    drain_records(&mut card);
    let started = Instant::now();
    let (loaded, hammer_reads) = handshakes_loaded(&d, &mut card, 2_000);
    let hammer_mb_s = hammer_reads as f64 * WINDOW as f64 / started.elapsed().as_secs_f64() / 1e6;
    let (_, loaded_p99) = report("handshake, windows loaded", &loaded);

    let us = |ns: u128| ns as f64 / 1000.0;
    let reg_over_perf = reg_p50 as f64 / perf_p50.max(1) as f64;
    let reg_over_bare = reg_p50 as f64 / bare_p50.max(1) as f64;
    println!("window read throughput     {window_mb_s:.0} MB/s (p50 {win_p50} ns per 64 KiB)");
    println!("bare FUSE 64 KiB reads     {bare_window_mb_s:.0} MB/s");
    println!("window load meanwhile      {hammer_reads} reads, {hammer_mb_s:.0} MB/s");
    println!("reg read / perf read       {reg_over_perf:.1}x (p50); perf p99 {perf_p99} ns");
    println!("reg read / bare FUSE read  {reg_over_bare:.2}x (p50)");
    drop(card);
    d.stop();
    println!(
        "{{\"node_threads\":{threads},\"reg_read_p50_ns\":{reg_p50},\"reg_read_p99_ns\":{reg_p99},\
         \"perf_read_p50_ns\":{perf_p50},\"reg_over_perf\":{reg_over_perf:.2},\
         \"bare_fuse_read_p50_ns\":{bare_p50},\"bare_fuse_read_p99_ns\":{bare_p99},\
         \"reg_over_bare_fuse\":{reg_over_bare:.2},\"bare_fuse_window_mb_s\":{bare_window_mb_s:.0},\
         \"batch8_p99_ns\":{batch_p99},\"handshake_p99_us\":{:.1},\"service_p99_us\":{:.1},\
         \"handshake_loaded_p99_us\":{:.1},\"window_mb_s\":{window_mb_s:.0}}}",
        us(hs_p99),
        us(service_p99),
        us(loaded_p99),
    );
}
