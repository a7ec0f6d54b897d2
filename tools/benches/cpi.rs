//! `cargo bench -p gpupm --bench cpi`: per-block CPI from fixed-period and
//! from dithered cycle samples, each against the exact CPI, measured on
//! the device, end to end (driver node → gpupmd → tenant node → reader),
//! on the built-in scenario (step clock, `--debug-ledger` for the truth):
//!
//! 1. **Accuracy**: the resonant loop (iteration 1025 cycles, four of
//!    which make P + S − A = 4100) sampled through a tenant session with a
//!    fixed period (R_MAX = 0) and then with P + R (R_MAX = 255); per block
//!    CPI reconstructed from the records vs the ledger's exact CPI over the
//!    same window. Blocks with ≥ 1 % of the exact cycles are scored.
//! 2. **Throughput**: one VM session per partition at P = 256 (cycle
//!    samples only), each read by its own thread; device time advanced in
//!    1 ms steps, each step released once the daemon drained the buffers.
//!    Samples per second of wall time from the first advance to the last
//!    record read, records lost, and gpupmd's CPU per 100k samples/s.
//!
//! The last line is JSON.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpupm_client::sampling::reconstruct::{Estimator, Scale};
use gpupm_client::sampling::session::{SampleBody, SamplingRequest};
use gpupm_client::{DevNode, Scope, TenantClient};
use gpupm_test_support::cli::Fixture;
use gpupm_test_support::device::{block_truth, builtin_shape, context_running};
use gpupm_test_support::procfs;
use gpupm_uapi::sampling::{self as s, buf_kind, samp};
use gpupm_uapi::tenant::sampling::{sample_kind, SampleHeader};
use zerocopy::FromBytes;

/// Cycle samples per accuracy run.
const ACCURACY_SAMPLES: u64 = 100_000;
/// Device time of the throughput run, ms.
const THROUGHPUT_MS: u64 = 100;

/// (mean, max) relative CPI error in percent over the blocks with ≥ 1 %
/// of the window's exact cycles, and the samples used.
fn accuracy(f: &mut Fixture, ctx: u32, program: u32, dither: u32) -> (f64, f64, u64) {
    let node = TenantClient::open_nonblocking(f.node()).expect("open the tenant node");
    let req = SamplingRequest::cycles(Scope::Ctx(ctx), 4096, dither).with_branches(64);
    node.open_sampling(&req).expect("open a session");
    let before = block_truth(&f.dev, ctx);
    let mut est = Estimator::new(builtin_shape(program)).with_branch_every(64);
    let (mut samples, mut stacks) = (0u64, 0u64);
    while samples < ACCURACY_SAMPLES {
        f.advance_ms(1);
        loop {
            match node.read_samples() {
                Ok(recs) => {
                    for rec in recs {
                        match rec.body {
                            SampleBody::Cycle(pc) => {
                                est.add_pc_record(&pc);
                                samples += 1;
                            }
                            SampleBody::Branch(b) => {
                                est.add_stack_record(&b);
                                stacks += rec.header.lost_before + 1;
                            }
                            SampleBody::Sealed(_) => {
                                panic!("the resonant context is not confidential")
                            }
                        }
                    }
                }
                Err(e) if e.errno() == Some(nix::errno::Errno::EAGAIN) => break,
                Err(e) => panic!("read: {e}"),
            }
        }
    }
    let after = block_truth(&f.dev, ctx);
    drop(node);
    let e = est.estimate(Scale::Rates {
        branch_records: stacks as f64,
        branch_every: 64.0,
    });
    let window: BTreeMap<(u32, u32), (u64, u64)> = after
        .iter()
        .map(|(k, &(i1, c1))| {
            let (i0, c0) = before.get(k).copied().unwrap_or((0, 0));
            (*k, (i1 - i0, c1 - c0))
        })
        .collect();
    let total_cycles: u64 = window.values().map(|v| v.1).sum();
    let mut errs = Vec::new();
    for (&(k, b), &(inst, cycles)) in &window {
        if cycles * 100 < total_cycles || inst == 0 {
            continue;
        }
        let exact = cycles as f64 / inst as f64;
        let got = e
            .kernels
            .iter()
            .find(|x| x.kernel == k)
            .and_then(|x| x.blocks.iter().find(|y| y.block == b))
            .map_or(0.0, |y| if y.cpi.is_finite() { y.cpi } else { 0.0 });
        let err = (got - exact).abs() / exact * 100.0;
        eprintln!(
            "  R_MAX {dither:>3}: block {k}/{b}: CPI {got:.3} vs exact {exact:.3} ({err:.2} %)"
        );
        errs.push(err);
    }
    let mean = errs.iter().sum::<f64>() / errs.len().max(1) as f64;
    let max = errs.iter().copied().fold(0.0, f64::max);
    (mean, max, samples)
}

/// CPU seconds (user + system) of process `pid`.
fn cpu_s(pid: i32) -> f64 {
    procfs::cpu_ticks(pid) as f64 / procfs::ticks_per_s()
}

struct Throughput {
    samples: u64,
    lost: u64,
    per_s: f64,
    daemon_cpu_pct_per_100k: f64,
}

fn throughput(f: &mut Fixture) -> Throughput {
    // Every VM of the built-in scenario: each record has one session.
    let vms = 1u32..=6;
    let total = Arc::new(AtomicU64::new(0));
    let lost = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for vm in vms {
        let node = TenantClient::open_nonblocking(f.node()).expect("open");
        let mut req = SamplingRequest::cycles(Scope::Vm(vm), 256, 255);
        req.queue_records = 1 << 20;
        node.open_sampling(&req).expect("VM session");
        let (total, lost, stop) = (Arc::clone(&total), Arc::clone(&lost), Arc::clone(&stop));
        readers.push(std::thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 20];
            while !stop.load(Ordering::Acquire) {
                match node.read_raw(&mut buf) {
                    Ok(n) => {
                        let mut at = 0;
                        while at < n {
                            let (h, _) =
                                SampleHeader::read_from_prefix(&buf[at..n]).expect("header");
                            assert_eq!(h.kind, sample_kind::CYCLE);
                            lost.fetch_add(h.lost_before, Ordering::Relaxed);
                            total.fetch_add(1, Ordering::Relaxed);
                            at += h.size as usize;
                        }
                    }
                    Err(e) if e.errno() == Some(nix::errno::Errno::EAGAIN) => {
                        std::thread::yield_now()
                    }
                    Err(e) => panic!("read: {e}"),
                }
            }
        }));
    }
    let parts = f.parts.clone();
    let produced = |dev: &DevNode| -> u64 {
        parts
            .iter()
            .map(|&p| {
                dev.read64(samp(p, s::buf(buf_kind::PC, s::BUF_PRODUCED)))
                    .unwrap_or(0)
            })
            .sum()
    };
    let device_lost = |dev: &DevNode| -> u64 {
        parts
            .iter()
            .map(|&p| {
                dev.read64(samp(p, s::buf(buf_kind::PC, s::BUF_LOST)))
                    .unwrap_or(0)
            })
            .sum()
    };
    // The daemon drained every buffer (the pace the plan assumes: no
    // buffer holds more than one step of records).
    let drained = |dev: &DevNode| -> bool {
        parts.iter().all(|&p| {
            let reg = |r| dev.read32(samp(p, s::buf(buf_kind::PC, r))).unwrap_or(0);
            reg(s::BUF_HEAD) == reg(s::BUF_TAIL)
        })
    };
    let pid = f.daemon.pid().as_raw();
    let (cpu0, produced0, lost0) = (cpu_s(pid), produced(&f.dev), device_lost(&f.dev));
    let t0 = Instant::now();
    for _ in 0..THROUGHPUT_MS {
        f.advance_ms(1);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !drained(&f.dev) {
            assert!(Instant::now() < deadline, "the daemon does not drain");
            std::thread::yield_now();
        }
    }
    let want = produced(&f.dev) - produced0;
    eprintln!(
        "advanced {THROUGHPUT_MS} ms in {:.2} s; {want} records produced, {} read so far",
        t0.elapsed().as_secs_f64(),
        total.load(Ordering::Relaxed)
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    while total.load(Ordering::Relaxed) + lost.load(Ordering::Relaxed) < want {
        assert!(
            Instant::now() < deadline,
            "records stuck: {} of {want}",
            total.load(Ordering::Relaxed)
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let wall = t0.elapsed().as_secs_f64();
    let cpu = cpu_s(pid) - cpu0;
    stop.store(true, Ordering::Release);
    for r in readers {
        r.join().expect("reader");
    }
    let samples = total.load(Ordering::Relaxed);
    let per_s = samples as f64 / wall;
    eprintln!(
        "device lost {}; sessions reported {} lost (a device loss is reported to every session of its partition)",
        device_lost(&f.dev) - lost0,
        lost.load(Ordering::Relaxed)
    );
    Throughput {
        samples,
        lost: (device_lost(&f.dev) - lost0) + (want - samples).min(lost.load(Ordering::Relaxed)),
        per_s,
        daemon_cpu_pct_per_100k: cpu / wall * 100.0 / (per_s / 100_000.0),
    }
}

fn main() {
    let mut f = Fixture::start_with("cpi-bench", &["--debug-ledger"]);
    f.advance_ms(3);
    let (ctx, program) = context_running(&f.dev, None, "resonant");
    eprintln!("resonant loop: context {ctx}");
    let (fixed_mean, fixed_max, fixed_n) = accuracy(&mut f, ctx, program, 0);
    let (dither_mean, dither_max, dither_n) = accuracy(&mut f, ctx, program, 255);
    let t = throughput(&mut f);
    eprintln!("| period | samples | mean CPI error | max CPI error |");
    eprintln!("|---|---|---|---|");
    eprintln!("| fixed P = 4096 | {fixed_n} | {fixed_mean:.2} % | {fixed_max:.2} % |");
    eprintln!("| P + U(0..=255) | {dither_n} | {dither_mean:.2} % | {dither_max:.2} % |");
    eprintln!(
        "throughput: {} samples in {THROUGHPUT_MS} ms of device time, {:.0} samples/s end to end, {} lost, gpupmd {:.1} % CPU per 100k samples/s",
        t.samples, t.per_s, t.lost, t.daemon_cpu_pct_per_100k
    );
    println!(
        "{}",
        serde_json::json!({
            "dither_mean_err_pct": dither_mean,
            "dither_max_err_pct": dither_max,
            "fixed_mean_err_pct": fixed_mean,
            "fixed_max_err_pct": fixed_max,
            "samples": fixed_n + dither_n + t.samples,
            "samples_per_s_end_to_end": t.per_s,
            "lost": t.lost,
            "daemon_cpu_pct_per_100k_samples_per_s": t.daemon_cpu_pct_per_100k,
        })
    );
    f.stop();
}
