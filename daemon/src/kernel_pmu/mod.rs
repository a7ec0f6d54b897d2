//! Publication of committed totals to the perf PMU module `gpupm_pmu.ko`
//! (`[kernel_pmu]` in `gpupmd.toml`, off by default).
//!
//! A thread of its own, every `interval_ms`, asks the module which context
//! scopes have open perf events (`GPUPM_PMU_IOC_WANTED`), then publishes
//! the cumulative totals of the system, every VM and those contexts
//! (`GPUPM_PMU_IOC_PUBLISH`, up to [`PUBLISH_BATCH`] scopes per call) as
//! the [`CounterView`] reads them from the device's memory blocks. A perf
//! count therefore lags the device by at most one interval plus one pass;
//! confidential VMs' totals are ciphertext and are not published (their
//! events read 0). Totals come from device memory, so a restarted daemon
//! republishes the same numbers and the module's counters neither jump nor
//! go back (`uapi/src/pmu.rs`).
//!
//! The health log says once whether the module's device was found
//! ([`KERNEL_PMU_ID`]) and again whenever that changes; until it is found
//! the thread retries every interval.

use std::fs::{File, OpenOptions};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Instant;

pub use gpupm_client::config::KernelPmuConfig;
use gpupm_client::sys;
use gpupm_uapi::events::EVENT_COUNT;
use gpupm_uapi::pmu::{
    scope, Publish, Wanted, GPUPM_PMU_IOC_PUBLISH, GPUPM_PMU_IOC_WANTED, PMU_STRUCT_VERSION,
    PUBLISH_BATCH,
};

use crate::health::TARGET;
use crate::view::{CounterView, Scope, Totals};

/// `MESSAGE_ID` of the event saying whether the module's publication
/// device was found (`FOUND`, `DEVICE`, `REASON`).
pub const KERNEL_PMU_ID: &str = "3d7c1a0e5b8f4c61a2e9d04f6b1c7e35";
/// The running publisher; stops and joins its thread on drop.
#[derive(Debug)]
pub struct Publisher {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            if t.join().is_err() {
                tracing::error!("the kernel PMU publisher panicked");
            }
        }
    }
}

/// Starts publishing when `cfg.enabled`.
pub fn start(
    cfg: &KernelPmuConfig,
    view: Arc<dyn CounterView>,
) -> std::io::Result<Option<Publisher>> {
    if !cfg.enabled {
        return Ok(None);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let (cfg, stop) = (cfg.clone(), Arc::clone(&stop));
        thread::Builder::new()
            .name("gpupmd-kpmu".into())
            .spawn(move || run(&cfg, view.as_ref(), &stop))?
    };
    Ok(Some(Publisher {
        stop,
        thread: Some(thread),
    }))
}

fn run(cfg: &KernelPmuConfig, view: &dyn CounterView, stop: &AtomicBool) {
    let mut device: Option<File> = None;
    let mut found: Option<bool> = None;
    let mut next = Instant::now();
    while !stop.load(Ordering::Acquire) {
        if device.is_none() {
            match open(&cfg.device) {
                Ok(f) => {
                    report(&mut found, true, &cfg.device, "opened");
                    device = Some(f);
                }
                Err(e) => report(&mut found, false, &cfg.device, &e.to_string()),
            }
        }
        if let Some(f) = &device {
            if let Err(e) = publish_once(f, view) {
                report(
                    &mut found,
                    false,
                    &cfg.device,
                    &format!("publication failed: {e}"),
                );
                device = None;
            }
        }
        next += cfg.interval;
        let now = Instant::now();
        if next <= now {
            next = now + cfg.interval;
        }
        // The period itself, not a synchronisation: `Drop` unparks early.
        thread::park_timeout(next - now);
    }
}

fn open(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
}

/// Logs the device's state when it changes.
fn report(state: &mut Option<bool>, found: bool, device: &Path, reason: &str) {
    if *state == Some(found) {
        return;
    }
    *state = Some(found);
    let device = device.display();
    if found {
        tracing::info!(
            target: TARGET,
            message_id = KERNEL_PMU_ID,
            found,
            device = %device,
            reason,
            "kernel PMU module found: publishing committed totals to {device}"
        );
    } else {
        tracing::warn!(
            target: TARGET,
            message_id = KERNEL_PMU_ID,
            found,
            device = %device,
            reason,
            "kernel PMU module not found at {device} ({reason}); retrying"
        );
    }
}

/// One pass: the system, every VM and the wanted contexts.
fn publish_once(device: &File, view: &dyn CounterView) -> nix::Result<()> {
    let mut wanted = Wanted::default();
    sys::call(device.as_fd(), GPUPM_PMU_IOC_WANTED, &mut wanted)?;
    let mut batch = Batch {
        device,
        req: Publish::default(),
    };
    batch.push(scope::SYSTEM, 0, 0, view.totals(Scope::System))?;
    for vm in view.vms() {
        batch.push(scope::VM, vm, 0, view.totals(Scope::Vm(vm)))?;
    }
    for ctx in wanted.context_ids() {
        if let Some(latest) = view.latest_instance(ctx) {
            let totals = view.instance_totals(ctx, latest.created_cycle);
            batch.push(scope::CONTEXT, ctx, latest.created_cycle, totals)?;
        }
    }
    batch.flush()
}

/// Fills [`Publish`] requests and sends each when full.
struct Batch<'a> {
    device: &'a File,
    req: Publish,
}

impl Batch<'_> {
    /// Adds one scope's plain totals (sealed or missing ones are skipped).
    fn push(
        &mut self,
        kind: u32,
        id: u32,
        generation: u64,
        totals: Option<Totals>,
    ) -> nix::Result<()> {
        let Some(Totals::Plain { counters, .. }) = totals else {
            return Ok(());
        };
        let entry = &mut self.req.entries[self.req.count as usize];
        entry.scope = kind;
        entry.id = id;
        entry.generation = generation;
        entry.counters[..EVENT_COUNT].copy_from_slice(&counters[..EVENT_COUNT]);
        self.req.count += 1;
        if self.req.count as usize == PUBLISH_BATCH {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> nix::Result<()> {
        if self.req.count > 0 {
            self.req.version = PMU_STRUCT_VERSION;
            sys::call(self.device.as_fd(), GPUPM_PMU_IOC_PUBLISH, &mut self.req)?;
        }
        self.req = Publish::default();
        Ok(())
    }
}
