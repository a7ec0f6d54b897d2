//! Node latency/throughput against the perf-counter baseline.
//!
//! `cargo bench -p gpupm-driver --bench node` starts the real driver (fake
//! backend, step clock) and prints p50/p99 of a register read via pread, a
//! batched 8-op ioctl, a 64 KiB memory-window read (MB/s), and the read()
//! of a perf software counter, then one JSON line.
//!
//! `handshake_p99_us` is three batched 8-op ioctls back to back (the fake
//! backend has no switch state machine to drive a real handshake).

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "node/perf.rs"]
mod perf;

use std::io::Read;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use common::sys::ioctl;
use common::Driver;
use gpupm_uapi::ioctl::{reg_op, RegBatch, RegOp, GPUPM_IOC_REG_BATCH, IOCTL_STRUCT_VERSION};
use gpupm_uapi::layout::MEM_WINDOW_OFFSET;
use gpupm_uapi::regs;
use zerocopy::{FromZeros, IntoBytes};

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
        "{name:<24} p50 {p50:>9} ns   p99 {p99:>9} ns   (n={})",
        v.len()
    );
    (p50, p99)
}

fn batch8(writes: bool) -> RegBatch {
    let mut b = RegBatch::new_zeroed();
    b.version = IOCTL_STRUCT_VERSION;
    b.count = 8;
    for (i, op) in b.ops[..8].iter_mut().enumerate() {
        let off = regs::part(1, regs::PART_RC_BIND_VM) + 4 * (i as u64 % 2);
        *op = if writes && i % 2 == 0 {
            RegOp {
                offset: off,
                value: i as u64,
                op: reg_op::WRITE,
                width: 4,
            }
        } else {
            RegOp {
                offset: off,
                value: 0,
                op: reg_op::READ,
                width: 4,
            }
        };
    }
    b
}

fn main() {
    let d = Driver::start();
    let card = d.card();

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

    let template = batch8(true);
    let batch = measure(10_000, || {
        let mut b = template;
        ioctl(&card, GPUPM_IOC_REG_BATCH, b.as_mut_bytes()).expect("batch ioctl");
    });
    let (_, batch_p99) = report("batch ioctl (8 ops)", &batch);

    let hs = [batch8(true), batch8(false), batch8(true)];
    let handshake = measure(3_000, || {
        for t in &hs {
            let mut b = *t;
            ioctl(&card, GPUPM_IOC_REG_BATCH, b.as_mut_bytes()).expect("batch ioctl");
        }
    });
    let (_, hs_p99) = report("3 x batch8 (handshake)", &handshake);

    let mut window = vec![0u8; 64 * 1024];
    let win = measure(3_000, || {
        let n = card
            .read_at(&mut window, MEM_WINDOW_OFFSET)
            .expect("window read");
        assert_eq!(n, window.len());
    });
    let (win_p50, _) = report("window read (64 KiB)", &win);
    let total: Duration = win.iter().sum();
    let window_mb_s = (win.len() * window.len()) as f64 / total.as_secs_f64() / 1e6;
    let reg_over_perf = reg_p50 as f64 / perf_p50.max(1) as f64;
    println!("window read throughput   {window_mb_s:.0} MB/s (p50 {win_p50} ns per 64 KiB)");
    println!("reg read / perf read     {reg_over_perf:.1}x (p50); perf p99 {perf_p99} ns");
    drop(card);
    d.stop();
    println!(
        "{{\"reg_read_p50_ns\":{reg_p50},\"reg_read_p99_ns\":{reg_p99},\"perf_read_p50_ns\":{perf_p50},\
         \"reg_over_perf\":{reg_over_perf:.2},\"batch8_p99_ns\":{batch_p99},\
         \"handshake_p99_us\":{:.1},\"window_mb_s\":{window_mb_s:.0}}}",
        hs_p99 as f64 / 1000.0
    );
}
