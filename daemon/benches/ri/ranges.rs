//! Threshold interrupt → tenant-visible call-graph update, against a
//! baseline without thresholds.
//!
//! This part of `cargo bench -p gpupmd --bench ri` starts the real `gpupm-driver`
//! on a real-time clock (one partition, two VMs, three contexts of the
//! built-in GEMM switching every 10,000 cycles) and the real `gpupmd`,
//! and as the admin (root) programs two ranges on one context: `store`
//! (kernel 1) cycles and the K loop (kernel 0 blocks 1..=3) instructions.
//!
//! - Baseline: both ranges without a threshold for `GPUPM_BENCH_SECS`
//!   (default 10): the daemon's CPU (% of one core) with ranges counted
//!   but no crossings.
//! - Thresholds: the same ranges with count thresholds (T = 200 cycles,
//!   4,000 instructions) for the same time. This process reads the
//!   device's interrupt records on its own handle (a second reader of
//!   `card0`'s interrupts) and stamps each `RANGE_THRESHOLD` record of the
//!   context as it wakes; a reader thread polls the context's call graph
//!   (`TENANT_IOC_READ_CALL_EDGES`, head only) and stamps the moment the
//!   graph's `crossings` reaches each count. The latency of crossing k is
//!   visible(k) − interrupt(k): `range_irq_to_tenant_p50_us`, `_p99_us`
//!   (goal p99 < 5 ms), with the crossings per second and the daemon's
//!   CPU; `cpu_over_baseline_pct` is the difference.
//!
//! Its figures join the bench's JSON line.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gpupm_client::{DevNode, TenantClient};
use gpupm_test_support::procfs::{self, cpu_during, load_average};
use gpupm_test_support::Scratch;
use gpupm_uapi::intr::{source, InterruptRecord, RANGE_IRQ_LOST};
use gpupm_uapi::ranges::range_event;
use gpupm_uapi::regs as r;
use gpupm_uapi::tenant::ranges::{range_kind, range_trigger, AddRange, GraphHeader, ReadCallEdges};
use gpupm_uapi::tenant::{TENANT_IOC_READ_CALL_EDGES, TENANT_STRUCT_VERSION};
use zerocopy::FromZeros;

use crate::{env_u64, start_services};

fn ranges(ctx: u32, thresholds: bool) -> [AddRange; 2] {
    let trig = |t: u32| {
        if thresholds {
            (range_trigger::COUNT, t)
        } else {
            (range_trigger::NONE, 0)
        }
    };
    let (store_trigger, store_t) = trig(200);
    let (loop_trigger, loop_t) = trig(4_000);
    [
        AddRange {
            version: TENANT_STRUCT_VERSION,
            ctx,
            kind: range_kind::CODE,
            event: range_event::CYCLES,
            trigger: store_trigger,
            threshold: store_t,
            kernel: 1,
            ..AddRange::default()
        },
        AddRange {
            version: TENANT_STRUCT_VERSION,
            ctx,
            kind: range_kind::CODE,
            event: range_event::INSTRUCTIONS,
            trigger: loop_trigger,
            threshold: loop_t,
            kernel: 0,
            first: 1,
            last: 3,
            ..AddRange::default()
        },
    ]
}

/// An active context, once one exists.
fn first_context(dev: &DevNode) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let found = (1..64)
            .find(|&c| dev.read32(r::ctx(c, r::CTX_STATE)).ok() == Some(r::ctx_state::ACTIVE));
        if let Some(c) = found {
            return c;
        }
        assert!(Instant::now() < deadline, "no context");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The context's graph crossings (one ioctl, head only).
fn crossings(node: &TenantClient, ctx: u32) -> u64 {
    let mut arg = ReadCallEdges::new_zeroed();
    arg.head = GraphHeader {
        version: TENANT_STRUCT_VERSION,
        ctx,
        ..GraphHeader::default()
    };
    node.call("READ_CALL_EDGES", TENANT_IOC_READ_CALL_EDGES, &mut arg)
        .expect("read call edges");
    arg.head.crossings
}

#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_precision_loss
)]
fn pct(v: &[u64], p: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// Stamps of one thresholds run: interrupt wake-ups and graph updates of
/// the context, in crossing order.
struct Stamps {
    irq: Vec<Instant>,
    visible: Vec<Instant>,
    /// Interrupt records the device dropped on this process's handle (the
    /// pairing of stamps is off after one).
    missed: u64,
}

fn measure(
    dev: &DevNode,
    node: &TenantClient,
    node_file: &std::path::Path,
    ctx: u32,
    secs: u64,
) -> Stamps {
    let stop = Arc::new(AtomicBool::new(false));
    let visible = Arc::new(Mutex::new(Vec::new()));
    // The interrupt handle first: every crossing after `base` then has its
    // record on it (unless the device drops records: `missed`).
    let mut intr = dev.interrupts().expect("interrupt handle");
    let base = crossings(node, ctx);
    let reader = {
        let (stop, visible) = (Arc::clone(&stop), Arc::clone(&visible));
        let node = TenantClient::open(node_file).expect("tenant node");
        std::thread::spawn(move || {
            let mut seen = base;
            while !stop.load(Ordering::Acquire) {
                let now = crossings(&node, ctx);
                if now > seen {
                    let t = Instant::now();
                    let mut v = visible.lock().unwrap();
                    v.extend((seen..now).map(|_| t));
                    seen = now;
                }
            }
        })
    };
    let mut irq = Vec::new();
    let mut missed = 0;
    let mut recs: Vec<InterruptRecord> = Vec::new();
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        recs.clear();
        missed += intr
            .wait(Duration::from_millis(100), &mut recs)
            .expect("interrupts")
            .missed;
        let t = Instant::now();
        irq.extend(
            recs.iter()
                .filter(|rec| {
                    rec.source == source::RANGE_THRESHOLD
                        && rec.arg2 == ctx
                        && rec.arg & RANGE_IRQ_LOST == 0
                })
                .map(|_| t),
        );
    }
    // Let the last crossings become visible.
    std::thread::sleep(Duration::from_millis(50));
    stop.store(true, Ordering::Release);
    reader.join().expect("reader");
    let visible = std::mem::take(&mut *visible.lock().unwrap());
    Stamps {
        irq,
        visible,
        missed,
    }
}

/// Runs the ranges part; the figures as JSON members.
pub fn run() -> String {
    let load_before = load_average();
    let secs = env_u64("GPUPM_BENCH_SECS", 10);
    let tck = procfs::ticks_per_s();
    let tmp = Scratch::new("bench-ranges");
    let (driver, mut daemon) =
        start_services(&tmp, gpupm_test_support::scenario::shared_gemm_partition());
    let node_file = tmp.join("tenant").join("node");
    let node = TenantClient::open(&node_file).expect("tenant node");
    let dev = driver.node();
    let ctx = first_context(&dev);
    let pid = daemon.pid().as_raw();

    let handles: Vec<u32> = ranges(ctx, false)
        .iter()
        .map(|a| node.add_range(a).expect("add").handle)
        .collect();
    let (baseline_cpu, _) = cpu_during(pid, tck, || std::thread::sleep(Duration::from_secs(secs)));
    for h in handles {
        node.remove_range(ctx, h).expect("remove");
    }
    for a in ranges(ctx, true) {
        node.add_range(&a).expect("add");
    }
    let mut stamps = None;
    let (cpu, wall) = cpu_during(pid, tck, || {
        stamps = Some(measure(&dev, &node, &node_file, ctx, secs))
    });
    let stamps = stamps.expect("measured");
    let n = stamps.irq.len().min(stamps.visible.len());
    let mut lat: Vec<u64> = (0..n)
        .map(|k| {
            let d = stamps.visible[k].saturating_duration_since(stamps.irq[k]);
            u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
        })
        .collect();
    lat.sort_unstable();
    #[allow(clippy::cast_precision_loss)]
    let rate = stamps.irq.len() as f64 / wall;
    let (p50, p99) = (pct(&lat, 0.50), pct(&lat, 0.99));
    println!(
        "crossings of the context: {} interrupts, {} visible, {} records missed",
        stamps.irq.len(),
        stamps.visible.len(),
        stamps.missed
    );
    println!("range_irq_to_tenant_p50_us {p50}");
    println!("range_irq_to_tenant_p99_us {p99} (goal < 5000)");
    println!("crossings_per_s {rate:.0}");
    println!("daemon_cpu_pct {cpu:.1} (baseline without thresholds {baseline_cpu:.1})");
    println!(
        "load average before {load_before}, after {}",
        load_average()
    );
    let json = format!(
        "\"range_irq_to_tenant_p50_us\":{p50},\"range_irq_to_tenant_p99_us\":{p99},\
         \"range_crossings\":{},\"range_crossings_per_s\":{rate:.1},\"range_daemon_cpu_pct\":{cpu:.2},\
         \"range_baseline_daemon_cpu_pct\":{baseline_cpu:.2},\"range_cpu_over_baseline_pct\":{:.2},\"range_missed\":{},\"range_secs\":{secs}",
        stamps.irq.len(),
        cpu - baseline_cpu,
        stamps.missed
    );
    daemon.stop();
    driver.stop();
    json
}
