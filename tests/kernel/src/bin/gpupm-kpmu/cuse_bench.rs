//! One register read through `/dev/gpupm0` (`GPUPM_IOC_REG_READ` over
//! CUSE) against one through the FUSE `card0` (`pread`, and the same ioctl
//! there), against `read()` of a perf software counter (`task-clock` of
//! this thread: a syscall the kernel answers itself); and a block-slot
//! read of the memory window on both nodes. Alternating batches in one
//! process, medians of the per-read means; two drivers on step clocks
//! serve the nodes, so nothing but the requests runs in them.

use std::fs::File;
use std::os::fd::AsFd;
use std::path::Path;
use std::time::Instant;

use gpupm_client::{sys, DevNode};
use gpupm_uapi::ioctl::GPUPM_IOC_REG_READ;
use gpupm_uapi::layout::{block_slot_offset, BLOCK_SLOT_SIZE, SYSTEM_BLOCK_SLOT};
use gpupm_uapi::regs as r;
use perf_event_open_sys::bindings::PERF_COUNT_SW_TASK_CLOCK;

use crate::bench::software;
use crate::cuse::{access, open};
use crate::cuse_handshake::dev_err;
use crate::sys as ksys;

/// Reads per batch.
const BATCH: u32 = 200;
/// What is timed, in the order of the samples.
const KINDS: [&str; 6] = [
    "reg_read_ns_cuse_ioctl",
    "reg_read_ns_fuse_pread",
    "reg_read_ns_fuse_ioctl",
    "reg_read_ns_perf_sw",
    "window_read_ns_cuse_ioctl",
    "window_read_ns_fuse_pread",
];

/// Mean nanoseconds per call of `f` over one batch.
fn batch(mut f: impl FnMut() -> Result<(), String>) -> Result<f64, String> {
    let start = Instant::now();
    for _ in 0..BATCH {
        f()?;
    }
    Ok(start.elapsed().as_nanos() as f64 / f64::from(BATCH))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// `cuse-bench CUSE_NODE FUSE_DIR ROUNDS`.
pub fn run(cuse: &Path, fuse_dir: &Path, rounds: usize) -> Result<(), String> {
    let cuse = open(cuse)?;
    let fuse = DevNode::open(fuse_dir).map_err(dev_err)?;
    let fuse_file = File::open(fuse.path()).map_err(|e| e.to_string())?;
    let perf = software(PERF_COUNT_SW_TASK_CLOCK, 0, -1)?;
    let id = |dev: &DevNode| match dev.read32(r::ID) {
        Ok(r::DEVICE_MAGIC) => Ok(()),
        other => Err(format!("ID read {other:?}")),
    };
    let fuse_ioctl = || {
        let mut a = access(r::ID, 4, 0);
        sys::call(fuse_file.as_fd(), GPUPM_IOC_REG_READ, &mut a)
            .map_err(|e| format!("REG_READ on card0: {e}"))?;
        (a.value == u64::from(r::DEVICE_MAGIC))
            .then_some(())
            .ok_or_else(|| "ID by ioctl".to_string())
    };
    let mut word = [0u8; 8];
    let slot = block_slot_offset(SYSTEM_BLOCK_SLOT);
    let mut block = vec![0u8; usize::try_from(BLOCK_SLOT_SIZE).map_err(|e| e.to_string())?];
    let mut samples: [Vec<f64>; KINDS.len()] = Default::default();
    for _ in 0..rounds {
        samples[0].push(batch(|| id(&cuse))?);
        samples[1].push(batch(|| id(&fuse))?);
        samples[2].push(batch(fuse_ioctl)?);
        samples[3].push(batch(|| {
            ksys::read_raw(&perf, &mut word).map_err(|e| e.to_string())
        })?);
        samples[4].push(batch(|| cuse.window(slot, &mut block).map_err(dev_err))?);
        samples[5].push(batch(|| fuse.window(slot, &mut block).map_err(dev_err))?);
    }
    let m: Vec<f64> = samples.iter_mut().map(|v| median(v)).collect();
    println!(
        "@@gpupm metric reg_reads_per_kind={}",
        rounds as u64 * u64::from(BATCH)
    );
    for (name, v) in KINDS.iter().zip(&m) {
        println!("@@gpupm metric {name}={v:.0}");
    }
    for (name, a, b) in [
        ("reg_read_ratio_cuse_ioctl_fuse_pread", m[0], m[1]),
        ("reg_read_ratio_cuse_ioctl_perf_sw", m[0], m[3]),
        ("reg_read_ratio_fuse_pread_perf_sw", m[1], m[3]),
        ("reg_read_ratio_fuse_ioctl_fuse_pread", m[2], m[1]),
        ("window_read_ratio_cuse_ioctl_fuse_pread", m[4], m[5]),
    ] {
        println!("@@gpupm metric {name}={:.2}", a / b);
    }
    Ok(())
}
