//! Pinning the threads the device wakes (`device_cpus` in gpupmd.toml).
//!
//! The interrupt thread and the commit thread sleep until the device (its
//! interrupt, its commit mirror's doorbell) wakes them: about 1,250 times
//! a second at the reference load. A wake-up from another CPU costs the
//! woken thread several times what one on the waker's CPU costs (14–19 µs
//! against ~4 µs measured on the project's virtual machines), so an
//! operator pins these threads to the CPUs that take the device's
//! interrupts. Other threads are left to the scheduler.

use std::io;
use std::sync::mpsc;
use std::thread::{self, JoinHandle};

use gpupm_client::cpus::CpuList;

/// Spawns the thread `name` running `f` on `cpus` (anywhere when `None`),
/// and returns once it is pinned: the daemon's READY comes after its
/// threads started, so it also means they run where configured.
pub fn spawn_device_thread<T: Send + 'static>(
    name: &str,
    cpus: Option<CpuList>,
    f: impl FnOnce() -> T + Send + 'static,
) -> io::Result<JoinHandle<T>> {
    let (pinned_tx, pinned) = mpsc::sync_channel(1);
    let handle = thread::Builder::new().name(name.into()).spawn(move || {
        pin_device_thread(cpus.as_ref());
        // The spawner waits for this unless it panicked: nobody to tell.
        pinned_tx.send(()).ok();
        f()
    })?;
    // An error here means the thread ended before pinning: it panicked,
    // which its join handle reports.
    pinned.recv().ok();
    Ok(handle)
}

/// Restricts the calling thread to `cpus` (nothing when `None`). The CPUs
/// were checked against the process's affinity at start; should one have
/// gone offline since, the thread runs unpinned with a warning rather
/// than not at all.
fn pin_device_thread(cpus: Option<&CpuList>) {
    let Some(cpus) = cpus else {
        return;
    };
    let name = thread::current().name().unwrap_or("?").to_owned();
    match cpus.pin_current_thread() {
        Ok(()) => tracing::info!(thread = %name, cpus = %cpus, "pinned to the device's CPUs"),
        Err(e) => tracing::warn!(
            thread = %name,
            cpus = %cpus,
            error = %e,
            "could not pin to the device's CPUs; running where the scheduler puts it"
        ),
    }
}
