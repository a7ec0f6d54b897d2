//! Node latency/throughput against the perf-counter baseline.
//!
//! `cargo bench -p gpupm-driver --bench node` starts the real driver
//! serving the device model (the tests' three-partition switching
//! scenario, step clock) and prints p50/p99 of a register read via pread,
//! a batched 8-op ioctl, a 64 KiB memory-window read (MB/s), the read() of
//! a perf software counter (`PERF_COUNT_SW_TASK_CLOCK`), and a real
//! context-switch handshake through the node: the two register batches of
//! `gpupm_driver::host::handshake` on a partition whose switch the device
//! requested (the clock is advanced and the request read between samples,
//! untimed; `service` adds that record read). Last line: one JSON object.

#[path = "../tests/harness/mod.rs"]
mod harness;
#[path = "node/perf.rs"]
mod perf;

use std::io::Read;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use gpupm_uapi::intr::source;
use gpupm_uapi::ioctl::{RegBatch, GPUPM_IOC_REG_BATCH};
use gpupm_uapi::layout::MEM_WINDOW_OFFSET;
use gpupm_uapi::regs;
use harness::node::{
    advance, batch_of, drain_records, handshake, read_op, service_pending, write_op,
};
use harness::scenario::{self, SWITCHING_TIMEOUT};
use harness::sys::ioctl;
use harness::{wr32, Driver, Options};
use zerocopy::IntoBytes;

const WARMUP: usize = 500;

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
                Err(e) if harness::errno(&e) == libc::EAGAIN => break,
                Err(e) => panic!("interrupt read: {e}"),
            };
            let rec = harness::records(&buf[..got])[0];
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

fn main() {
    let d = Driver::start_with(Options::toml(scenario::switching()));
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

    let template = batch8();
    let batch = measure(10_000, || {
        let mut b = template;
        ioctl(&card, GPUPM_IOC_REG_BATCH, b.as_mut_bytes()).expect("batch ioctl");
    });
    let (_, batch_p99) = report("batch ioctl (8 ops)", &batch);

    let mut window = vec![0u8; 64 * 1024];
    let win = measure(3_000, || {
        card.read_exact_at(&mut window, MEM_WINDOW_OFFSET)
            .expect("window read");
    });
    let (win_p50, _) = report("window read (64 KiB)", &win);
    let total: Duration = win.iter().sum();
    let window_mb_s = (win.len() * window.len()) as f64 / total.as_secs_f64() / 1e6;

    drain_records(&mut card);
    let (hs, service) = handshakes(&mut card, 3_000);
    let (_, hs_p99) = report("handshake (2 batches)", &hs);
    let (_, service_p99) = report("record read + handshake", &service);

    let reg_over_perf = reg_p50 as f64 / perf_p50.max(1) as f64;
    println!("window read throughput     {window_mb_s:.0} MB/s (p50 {win_p50} ns per 64 KiB)");
    println!("reg read / perf read       {reg_over_perf:.1}x (p50); perf p99 {perf_p99} ns");
    drop(card);
    d.stop();
    println!(
        "{{\"reg_read_p50_ns\":{reg_p50},\"reg_read_p99_ns\":{reg_p99},\"perf_read_p50_ns\":{perf_p50},\
         \"reg_over_perf\":{reg_over_perf:.2},\"batch8_p99_ns\":{batch_p99},\
         \"handshake_p99_us\":{:.1},\"service_p99_us\":{:.1},\"window_mb_s\":{window_mb_s:.0}}}",
        hs_p99 as f64 / 1000.0,
        service_p99 as f64 / 1000.0
    );
}
