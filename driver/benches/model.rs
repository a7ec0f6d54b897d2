//! Device-model benchmark: the H100-class topology with every counter
//! active and a 1 kHz periodic trigger, 8 partitions, 8 VMs, 512 contexts,
//! 40 ms timeslices (200 switches/s), host handshakes in-process.
//!
//! Prints, as simulated time / CPU time of the benchmark thread (which
//! other load on the machine inflates less than wall time), each load with
//! the counting-only baseline of the same run beside it:
//!
//! - counting only: the reference load, no program (the baseline);
//! - the built-in scenario as shipped (`gpupm simulate`'s);
//! - every context running a program (gemm, reduce, memcpy, the resonant
//!   loop and a generated program, round robin), no plane armed;
//! - the same with both samplers armed on every slice at the default
//!   periods (P = 4096 + U(0..=255), N = 64);
//! - the same with 64 runtime-instrumentation sessions (cycle mode, SF
//!   200,000, RGS 2);
//! - the same with 8 marked ranges per partition.
//!
//! Each load runs `GPUPM_BENCH_RUNS` times (default 3) alternating with
//! the others, `GPUPM_BENCH_SIM_MS` of device time each (default 320);
//! the median and the range are printed. `GPUPM_BENCH_LOADS` (a comma
//! separated list of `builtin,programs,samplers,ri,ranges`) runs only
//! those besides the baseline and skips the figures after them. Then the cycle-level
//! reference engine, records routed, one in-process handshake and
//! resident memory, as before. The last line is one JSON object.

use std::time::Instant;

use gpupm_client::ops::write32 as write;
use gpupm_driver::host::{self, Host};
use gpupm_driver::model::{Device, EngineKind};
use gpupm_driver::scenario::program::generate;
use gpupm_driver::scenario::synthetic::{reference_load, LoadSpec};
use gpupm_driver::scenario::{builtin, Scenario};
use gpupm_uapi::ranges::{self as rg, code_item, range_ctrl, range_event, range_reg, rring};
use gpupm_uapi::regs::{self as r, hs_state};
use gpupm_uapi::ri::{self as ri, ri_ctrl, ri_mode};
use gpupm_uapi::sampling::{self as s, buf_kind, samp};

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// CPU time this thread has used, in seconds.
fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid local `ts`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return f64::NAN;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The load with its contexts spread round robin over five profiles, each
/// running one program: the four built-in ones (GEMM, reduce, memcpy, the
/// resonant loop) and a generated one (a loop with a random branch and a
/// call).
fn with_programs(scenario: &Scenario) -> Scenario {
    let mut out = scenario.clone();
    out.programs = builtin().programs;
    out.programs.push(generate(out.seed, 0));
    let base = out.profiles[0].clone();
    out.profiles.truncate(1);
    for i in 0..out.programs.len() {
        let mut p = base.clone();
        p.name = format!("{}-{}", base.name, out.programs[i].name);
        p.program = Some(i);
        if i == 0 {
            out.profiles[0] = p;
        } else {
            out.profiles.push(p);
        }
    }
    // The device profile (NVLink) keeps its place after the context ones.
    let device = scenario.profiles[1].clone();
    out.profiles.push(device);
    out.device_profile = Some(out.profiles.len() - 1);
    let n = out.programs.len();
    for (i, c) in out.contexts.iter_mut().enumerate() {
        c.profile = i % n;
    }
    out
}

/// What a load arms before it runs and drains while it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Planes {
    None,
    Samplers,
    Ri,
    Ranges,
}

/// Arms both samplers of partitions 1..=8 at the default periods
/// (P = 4096, R_MAX = 255, N = 64).
fn arm_samplers(dev: &mut Device) {
    for p in 1..=8 {
        let b = |kind, reg| samp(p, s::buf(kind, reg));
        let mut ops = [
            write(b(buf_kind::BRANCH, s::BUF_CAP), 1024),
            write(b(buf_kind::PC, s::BUF_BASE), 1 << 20),
            write(b(buf_kind::PC, s::BUF_CAP), 1 << 14),
            write(samp(p, s::SAMP_CTRL), s::samp_ctrl::ALL),
        ];
        dev.batch(&mut ops).expect("arming succeeds");
    }
}

/// 64 cycle-mode sessions (SF 200,000, RGS 2, a wrapping 64-group
/// buffer), 8 per partition: VM `v`'s first eight contexts, the ones its
/// partition runs first.
fn arm_ri(dev: &mut Device) {
    for i in 0..ri::RI_BLOCKS {
        let ctx = i % 8 + 1 + 8 * (i / 8);
        let groups = 64;
        let ctrl = ri_ctrl::ENABLE
            | ri_mode::CYCLE << ri_ctrl::MODE_SHIFT
            | 2 << ri_ctrl::RGS_SHIFT
            | ri_ctrl::WRAP;
        let mut ops = [
            write(ri::ri(i, ri::RI_CTX), ctx),
            write(ri::ri(i, ri::RI_SF), 200_000),
            write(ri::ri(i, ri::RI_RSIC), 0),
            write(ri::ri(i, ri::RI_ROA), 0),
            write(ri::ri(i, ri::RI_RLA), groups * 128 - 1),
            write(ri::ri(i, ri::RI_CTRL), ctrl),
        ];
        dev.batch(&mut ops).expect("an RI session arms");
    }
}

/// 8 ranges on every partition: code ranges over each program's hot
/// region counting instructions, cycles or memory accesses (some with
/// count or latency thresholds), and two data ranges.
fn arm_ranges(dev: &mut Device) {
    let code = |program: u32, kernel: u16, a: u16, b: u16, event: u32, irq: u32, thr: u32| {
        (
            range_ctrl::ENABLE
                | event << range_ctrl::EVENT_SHIFT
                | irq
                | program << range_ctrl::PROGRAM_SHIFT,
            code_item(kernel, a),
            code_item(kernel, b),
            thr,
        )
    };
    let data = |start: u32, end: u32, event: u32| {
        (
            range_ctrl::ENABLE | range_ctrl::DATA | event << range_ctrl::EVENT_SHIFT,
            start,
            end,
            1,
        )
    };
    let (inst, cyc, mem) = (
        range_event::INSTRUCTIONS,
        range_event::CYCLES,
        range_event::MEMORY,
    );
    let (count, latency) = (range_ctrl::COUNT_IRQ, range_ctrl::LATENCY_IRQ);
    let ranges = [
        code(1, 0, 1, 3, inst, count, 1_000_000),
        code(2, 0, 1, 5, cyc, count, 2_000_000),
        code(3, 0, 1, 1, mem, count, 1_000),
        code(1, 0, 1, 3, cyc, latency, 100_000),
        data(0x4000_0000, 0x403F_FFFF, mem),
        code(5, 0, 1, 4, inst, 0, 1),
        code(2, 1, 0, 1, cyc, count, 1_000_000),
        data(0x1000_0000, 0x1007_FFFF, inst),
    ];
    for p in 1..=8 {
        let mut ops = vec![write(rring(p, rg::RRING_CAP), rg::RRING_MAX_RECORDS)];
        for (i, &(ctrl, start, end, thr)) in (0u32..).zip(ranges.iter()) {
            ops.extend([
                write(range_reg(p, i, rg::RANGE_START), start),
                write(range_reg(p, i, rg::RANGE_END), end),
                write(range_reg(p, i, rg::RANGE_THRESHOLD), thr),
                write(range_reg(p, i, rg::RANGE_CTRL), ctrl),
            ]);
        }
        dev.batch(&mut ops).expect("ranges arm");
    }
}

/// Consumes every sample record (a reader keeping up), returns how many.
fn drain_samples(dev: &mut Device) -> u64 {
    let mut n = 0;
    for p in 1..=8 {
        for kind in [buf_kind::BRANCH, buf_kind::PC] {
            let head = dev.read_reg(samp(p, s::buf(kind, s::BUF_HEAD)), 4).unwrap();
            let tail = dev.read_reg(samp(p, s::buf(kind, s::BUF_TAIL)), 4).unwrap();
            // Head and tail are 32-bit registers.
            n += head.wrapping_sub(tail) & u64::from(u32::MAX);
            dev.write_reg(samp(p, s::buf(kind, s::BUF_TAIL)), 4, head)
                .unwrap();
        }
    }
    n
}

/// Consumes every range record, returns how many.
fn drain_ranges(dev: &mut Device) -> u64 {
    let mut n = 0;
    for p in 1..=8 {
        let head = dev.read_reg(rring(p, rg::RRING_HEAD), 4).unwrap();
        let tail = dev.read_reg(rring(p, rg::RRING_TAIL), 4).unwrap();
        n += head.wrapping_sub(tail) & u64::from(u32::MAX);
        dev.write_reg(rring(p, rg::RRING_TAIL), 4, head).unwrap();
    }
    n
}

/// Report groups stored by the 64 sessions so far.
fn ri_groups(dev: &Device) -> u64 {
    (0..ri::RI_BLOCKS)
        .map(|i| dev.read_reg(ri::ri(i, ri::RI_GROUPS), 4).unwrap())
        .sum()
}

/// One measured run: simulated seconds per CPU second, and the records
/// the planes produced.
#[derive(Clone, Copy, Debug)]
struct Run {
    rate: f64,
    records: u64,
}

/// Runs `scenario` for `sim_ms` of device time with `planes` armed,
/// serviced (and drained) every 100 µs of device time.
fn measure(scenario: &Scenario, planes: Planes, sim_ms: u64) -> Run {
    let khz = u64::from(scenario.clock.khz);
    let mut dev = Device::new(scenario, EngineKind::Batched, true).expect("builds");
    let mut host = Host::new();
    let step = khz / 10;
    dev.advance(1).unwrap();
    host.service(&mut dev).unwrap();
    match planes {
        Planes::None => {}
        Planes::Samplers => arm_samplers(&mut dev),
        Planes::Ri => arm_ri(&mut dev),
        Planes::Ranges => arm_ranges(&mut dev),
    }
    let cycles = khz * sim_ms;
    let mut records = 0;
    let start = dev.now();
    let cpu0 = thread_cpu_s();
    while dev.now() < start + cycles {
        dev.advance(step).unwrap();
        host.service(&mut dev).unwrap();
        records += match planes {
            Planes::Samplers => drain_samples(&mut dev),
            Planes::Ranges => drain_ranges(&mut dev),
            _ => 0,
        };
    }
    let cpu = thread_cpu_s() - cpu0;
    if planes == Planes::Ri {
        records = ri_groups(&dev);
    }
    Run {
        rate: sim_ms as f64 / 1000.0 / cpu,
        records,
    }
}

/// Median and range of `xs`.
fn summary(xs: &mut [f64]) -> (f64, f64, f64) {
    xs.sort_by(f64::total_cmp);
    (xs[xs.len() / 2], xs[0], xs[xs.len() - 1])
}

fn main() {
    let khz = 1_980_000u64;
    let runs = env_u64("GPUPM_BENCH_RUNS", 3).max(1);
    let sim_ms = env_u64("GPUPM_BENCH_SIM_MS", 320).max(10);
    let scenario = reference_load(LoadSpec {
        partitions: 8,
        vms: 8,
        contexts: 512,
        trigger_period: 1_980_000,
        // 8 partitions x 25 switches/s = the daemon's reference load of 200 switches/s.
        timeslice: 79_200_000,
    });
    let programs = with_programs(&scenario);
    let shipped = builtin();

    // The loads, alternating run by run so that a change in the machine's
    // load hits them alike.
    let loads: [(&str, &str, &Scenario, Planes); 6] = [
        (
            "counting",
            "counting only (reference load, no program)",
            &scenario,
            Planes::None,
        ),
        (
            "builtin",
            "built-in scenario as shipped",
            &shipped,
            Planes::None,
        ),
        (
            "programs",
            "every context running a program, no plane armed",
            &programs,
            Planes::None,
        ),
        (
            "samplers",
            "both samplers on every slice (P = 4096, N = 64)",
            &programs,
            Planes::Samplers,
        ),
        (
            "ri",
            "64 RI sessions (cycle mode, SF 200,000)",
            &programs,
            Planes::Ri,
        ),
        (
            "ranges",
            "8 ranges per partition",
            &programs,
            Planes::Ranges,
        ),
    ];
    let only = std::env::var("GPUPM_BENCH_LOADS").ok();
    let chosen = |key: &str| {
        key == "counting"
            || only
                .as_deref()
                .is_none_or(|o| o.split(',').any(|k| k == key))
    };
    let loads: Vec<_> = loads.into_iter().filter(|l| chosen(l.0)).collect();
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); loads.len()];
    let mut records = vec![0u64; loads.len()];
    for _ in 0..runs {
        for (i, (_, _, sc, planes)) in loads.iter().enumerate() {
            let run = measure(sc, *planes, sim_ms);
            rates[i].push(run.rate);
            records[i] = run.records;
        }
    }
    let medians: Vec<(f64, f64, f64)> = rates.iter_mut().map(|r| summary(r)).collect();
    let counting = medians[0].0;
    if only.is_some() {
        for (i, (key, _, _, _)) in loads.iter().enumerate() {
            println!(
                "{key}: {:.2}x, {:.3} of counting only",
                medians[i].0,
                medians[i].0 / counting
            );
        }
        return;
    }

    // Counting only over 1 s of device time against the wall clock too,
    // with records routed and host-driven switches.
    let mut dev = Device::new(&scenario, EngineKind::Batched, true).expect("reference load builds");
    let mut host = Host::new();
    let counters = dev.topology().counter_count();
    let sim_cycles = khz * 1000;
    let step = khz / 10;
    let routed_before = dev.read_reg(r::RECORDS_ROUTED, 8).unwrap();
    let t0 = Instant::now();
    let cpu0 = thread_cpu_s();
    let mut handshakes = 0;
    while dev.now() < sim_cycles {
        dev.advance(step).unwrap();
        handshakes += host.service(&mut dev).unwrap().handshakes;
    }
    let wall = t0.elapsed().as_secs_f64();
    let cpu = thread_cpu_s() - cpu0;
    let routed = dev.read_reg(r::RECORDS_ROUTED, 8).unwrap() - routed_before;
    let sim_s = sim_cycles as f64 / (khz as f64 * 1000.0);
    let sim_over_wall = sim_s / wall;
    let sim_over_cpu = sim_s / cpu;
    let records_per_s = routed as f64 / wall;

    // Handshake cost in-process: time host::handshake alone over many switches.
    let mut samples = Vec::new();
    let mut probe = dev;
    while samples.len() < 2000 {
        probe.advance(step).unwrap();
        for p in 1..=8u32 {
            if probe.read_reg(r::part(p, r::PART_STATUS), 4).unwrap() & 0xF
                == u64::from(hs_state::REQUESTED)
            {
                let t = Instant::now();
                host::handshake(&mut probe, p).unwrap();
                samples.push(u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX));
            }
        }
        host.service(&mut probe).unwrap();
    }
    samples.sort_unstable();
    let ctxsw_p50 = samples[samples.len() / 2];
    let ctxsw_p99 = samples[samples.len() * 99 / 100];
    let rss = rss_mib();

    // Baseline: the cycle-level reference engine on the same scenario.
    let mut slow = Device::new(&scenario, EngineKind::CycleLevel, true).unwrap();
    let mut slow_host = Host::new();
    slow.advance(1).unwrap();
    slow_host.service(&mut slow).unwrap();
    let ref_cycles = 20_000u64;
    let t1 = Instant::now();
    slow.advance(ref_cycles).unwrap();
    // Counting is lazy until something looks: make it count the span.
    let _counted = slow.counting_snapshot();
    let ref_wall = t1.elapsed().as_secs_f64();
    let ref_sim_over_wall = ref_cycles as f64 / (khz as f64 * 1000.0) / ref_wall;

    println!("model bench: {counters} counters, 8 partitions, 8 VMs, 512 contexts, 1 kHz periodic trigger, 40 ms timeslices (200 switches/s)");
    println!(
        "simulated s per CPU s, median of {runs} runs of {sim_ms} ms [range], beside the counting-only baseline of this run:"
    );
    for (i, (_, label, _, planes)) in loads.iter().enumerate() {
        let (m, lo, hi) = medians[i];
        let extra = match planes {
            Planes::Samplers => format!(
                "; {:.0} sample records per simulated s",
                records[i] as f64 * 1000.0 / sim_ms as f64
            ),
            Planes::Ri => format!("; {} report groups stored", records[i]),
            Planes::Ranges => format!(
                "; {:.0} range records per simulated s",
                records[i] as f64 * 1000.0 / sim_ms as f64
            ),
            Planes::None => String::new(),
        };
        println!(
            "  {label:<52} {m:>8.2}x [{lo:.2}-{hi:.2}]  {:>6.3} of counting only{extra}",
            m / counting
        );
    }
    println!("counting only, 1 s: {sim_s:.2} s simulated in {wall:.3} s wall = {sim_over_wall:.1}x real time; {cpu:.3} s CPU = {sim_over_cpu:.1}x per core");
    println!(
        "reference engine: {ref_sim_over_wall:.6}x real time; batched/reference = {:.0}x",
        sim_over_wall / ref_sim_over_wall
    );
    println!("records routed:   {routed} = {records_per_s:.0} records/s; {handshakes} host-driven switches");
    println!(
        "handshake:        p50 {ctxsw_p50} ns, p99 {ctxsw_p99} ns (in-process, 2 register batches)"
    );
    println!("resident memory:  {rss:.1} MiB (goal < 64 MiB)");
    let mut json = format!(
        "{{\"sim_over_wall\":{sim_over_wall:.2},\"sim_over_cpu\":{sim_over_cpu:.2},\"records_per_s\":{records_per_s:.0},\"ctxsw_ns\":{ctxsw_p50},\"ctxsw_p99_ns\":{ctxsw_p99},\"rss_mib\":{rss:.1},\"reference_sim_over_wall\":{ref_sim_over_wall:.8},\"batched_over_reference\":{:.0},\"counters\":{counters}",
        sim_over_wall / ref_sim_over_wall
    );
    for (i, (key, _, _, _)) in loads.iter().enumerate() {
        json.push_str(&format!(
            ",\"{key}_sim_over_cpu\":{:.3},\"{key}_over_counting\":{:.4}",
            medians[i].0,
            medians[i].0 / counting
        ));
    }
    json.push('}');
    println!("{json}");
}
