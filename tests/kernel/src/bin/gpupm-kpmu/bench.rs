//! `read()` of a gpupm counter against `read()` of perf software counters,
//! alternating batches in one process on the PMU's designated CPU (so no
//! read needs a cross-CPU call): `cpu-clock` counted CPU-wide on that CPU
//! (the same kind of event as gpupm's) and `task-clock` of this thread.

use std::os::fd::OwnedFd;
use std::time::Instant;

use perf_event_open_sys::bindings::{
    perf_event_attr, PERF_COUNT_SW_CPU_CLOCK, PERF_COUNT_SW_TASK_CLOCK, PERF_FLAG_FD_CLOEXEC,
    PERF_TYPE_SOFTWARE,
};

use crate::pmu::Pmu;
use crate::sys;

const BATCH: u32 = 2_000;

/// A software counter (`PERF_COUNT_SW_*` `config`) on `pid`/`cpu`.
pub fn software(config: u32, pid: i32, cpu: i32) -> Result<OwnedFd, String> {
    let attr = perf_event_attr {
        type_: PERF_TYPE_SOFTWARE,
        size: sys::attr_size(),
        config: u64::from(config),
        ..Default::default()
    };
    sys::perf_open(&attr, pid, cpu, u64::from(PERF_FLAG_FD_CLOEXEC))
        .map_err(|e| format!("perf_event_open(software {config}): {e}"))
}

/// Mean ns per read over one batch.
fn batch(fd: &OwnedFd) -> Result<f64, String> {
    let mut buf = [0u8; 8];
    let start = Instant::now();
    for _ in 0..BATCH {
        sys::read_raw(fd, &mut buf).map_err(|e| format!("read: {e}"))?;
    }
    Ok(start.elapsed().as_nanos() as f64 / f64::from(BATCH))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `rounds` alternating batches of each; prints medians and ratios.
pub fn run(rounds: usize) -> Result<(), String> {
    let pmu = Pmu::find()?;
    let mut set = nix::sched::CpuSet::new();
    set.set(usize::try_from(pmu.cpu).unwrap_or(0))
        .map_err(|e| e.to_string())?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
        .map_err(|e| format!("pin to cpu {}: {e}", pmu.cpu))?;
    let gpupm = pmu.open(&pmu.attr("sm_inst_executed", 0, 0)?)?;
    let cpu_clock = software(PERF_COUNT_SW_CPU_CLOCK, -1, pmu.cpu)?;
    let task_clock = software(PERF_COUNT_SW_TASK_CLOCK, 0, -1)?;
    let (mut g, mut c, mut t) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        g.push(batch(&gpupm)?);
        c.push(batch(&cpu_clock)?);
        t.push(batch(&task_clock)?);
    }
    let (g, c, t) = (median(&mut g), median(&mut c), median(&mut t));
    println!(
        "@@gpupm metric read_reads_per_kind={}",
        rounds as u64 * u64::from(BATCH)
    );
    println!("@@gpupm metric read_ns_gpupm={g:.0}");
    println!("@@gpupm metric read_ns_cpu_clock={c:.0}");
    println!("@@gpupm metric read_ns_task_clock={t:.0}");
    println!("@@gpupm metric read_ratio_gpupm_cpu_clock={:.2}", g / c);
    println!("@@gpupm metric read_ratio_gpupm_task_clock={:.2}", g / t);
    Ok(())
}
