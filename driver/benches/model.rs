//! Device-model benchmark: the H100-class topology with every counter
//! active and a 1 kHz periodic trigger, 8 partitions, 8 VMs, 512 contexts,
//! 40 ms timeslices (200 switches/s), host handshakes in-process.
//!
//! Prints simulated-time/wall-time of the batched engine (single-threaded;
//! also over the thread's CPU time, which other load cannot inflate) and,
//! as the in-process baseline, of the cycle-level reference engine on the
//! same scenario; records routed per second; the cost of one context-switch
//! handshake; resident memory. The last line is one JSON object.

use std::time::Instant;

use gpupm_client::ops::write32 as write;
use gpupm_driver::host::{self, Host};
use gpupm_driver::model::{Device, EngineKind};
use gpupm_driver::scenario::synthetic::{reference_load, LoadSpec};
use gpupm_driver::scenario::Scenario;
use gpupm_uapi::regs::{self as r, hs_state};
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

/// The load with every profile running a built-in program (GEMM, reduce,
/// memcpy, resonant loop, round robin).
fn with_programs(scenario: &Scenario) -> Scenario {
    let mut out = scenario.clone();
    out.programs = gpupm_driver::scenario::builtin().programs;
    let n = out.programs.len();
    for (i, p) in out.profiles.iter_mut().enumerate() {
        p.program = Some(i % n);
    }
    out
}

/// Arms both samplers of partitions 1..=8 (P = 4096, R_MAX = 255, N = 64).
fn arm_all(dev: &mut Device) {
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

/// Consumes every record (a reader keeping up), returns how many.
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

/// Simulated seconds per CPU second over `sim_s` seconds of `scenario`,
/// samplers armed or not; and the records taken.
fn program_rate(scenario: &Scenario, armed: bool, khz: u64, sim_ms: u64) -> (f64, u64) {
    let mut dev = Device::new(scenario, EngineKind::Batched, true).expect("builds");
    let mut host = Host::new();
    if armed {
        arm_all(&mut dev);
    }
    let cycles = khz * sim_ms;
    let sim_s = sim_ms as f64 / 1000.0;
    let step = khz / 10;
    let mut records = 0;
    let cpu0 = thread_cpu_s();
    while dev.now() < cycles {
        dev.advance(step).unwrap();
        host.service(&mut dev).unwrap();
        records += drain_samples(&mut dev);
    }
    (sim_s / (thread_cpu_s() - cpu0), records)
}

fn main() {
    let khz = 1_980_000u64;
    let scenario = reference_load(LoadSpec {
        partitions: 8,
        vms: 8,
        contexts: 512,
        trigger_period: 1_980_000,
        // 8 partitions x 25 switches/s = the daemon's reference load of 200 switches/s.
        timeslice: 79_200_000,
    });
    let mut dev = Device::new(&scenario, EngineKind::Batched, true).expect("reference load builds");
    let mut host = Host::new();
    let counters = dev.topology().counter_count();

    // Batched engine: 1 s of device time, serviced every 100 µs.
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

    // Programs: the same load with every context running a program,
    // walked in closed form where no sampler watches; then watched.
    let programs = with_programs(&scenario);
    let (prog_rate, _) = program_rate(&programs, false, khz, 250);
    let (armed_rate, samples) = program_rate(&programs, true, khz, 250);
    let samples_per_sim_s = samples as f64 / 0.25;

    println!("model bench: {} counters, 8 partitions, 8 VMs, 512 contexts, 1 kHz periodic trigger, 40 ms timeslices (200 switches/s)", counters);
    println!("batched engine:   {sim_s:.2} s simulated in {wall:.3} s wall = {sim_over_wall:.1}x real time (goal >= 20x); {cpu:.3} s CPU = {sim_over_cpu:.1}x per core");
    println!(
        "reference engine: {ref_sim_over_wall:.6}x real time; batched/reference = {:.0}x",
        sim_over_wall / ref_sim_over_wall
    );
    println!("records routed:   {routed} = {records_per_s:.0} records/s; {handshakes} host-driven switches");
    println!(
        "handshake:        p50 {ctxsw_p50} ns, p99 {ctxsw_p99} ns (in-process, 2 register batches)"
    );
    println!("resident memory:  {rss:.1} MiB (goal < 64 MiB)");
    println!(
        "programs:         counting only {sim_over_cpu:.1}x per core; programs unwatched {prog_rate:.1}x ({:.2} of counting only); all 8 partitions sampled {armed_rate:.1}x ({:.2}), {samples_per_sim_s:.0} records per simulated s",
        prog_rate / sim_over_cpu,
        armed_rate / sim_over_cpu
    );
    println!(
        "{{\"sim_over_wall\":{sim_over_wall:.2},\"sim_over_cpu\":{sim_over_cpu:.2},\"records_per_s\":{records_per_s:.0},\"ctxsw_ns\":{ctxsw_p50},\"ctxsw_p99_ns\":{ctxsw_p99},\"rss_mib\":{rss:.1},\"reference_sim_over_wall\":{ref_sim_over_wall:.8},\"batched_over_reference\":{:.0},\"counters\":{counters},\"programs_sim_over_cpu\":{prog_rate:.2},\"sampled_sim_over_cpu\":{armed_rate:.2},\"sample_records_per_sim_s\":{samples_per_sim_s:.0}}}",
        sim_over_wall / ref_sim_over_wall
    );
}
