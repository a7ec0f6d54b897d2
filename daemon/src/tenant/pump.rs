//! The thread that feeds stream sessions and fails parked reads of killed
//! processes (every [`REAP_PERIOD`] while a read is parked; it sleeps
//! while none is): a small single-threaded tokio runtime owned by the
//! node.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use tokio::sync::oneshot;

use super::session::Sessions;

/// How often parked reads of killed processes are failed.
const REAP_PERIOD: Duration = Duration::from_millis(100);

/// The thread running the session feeds (and the reaper of killed readers).
/// The runtime lives and dies on that thread, so dropping the pump is fine
/// from any context, async or not.
#[derive(Debug)]
pub struct Pump {
    rt: tokio::runtime::Handle,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// Pumps started (for thread names).
static PUMPS: AtomicU64 = AtomicU64::new(0);

impl Pump {
    /// Starts the pump thread.
    pub fn start(sessions: Arc<Sessions>) -> std::io::Result<Pump> {
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let (rt_tx, rt_rx) = mpsc::sync_channel(1);
        let n = PUMPS.fetch_add(1, Ordering::Relaxed);
        let thread = thread::Builder::new()
            .name(format!("gpupm-tenant-pump-{n}"))
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        if rt_tx.send(Err(e)).is_err() {
                            tracing::error!("tenant pump could not report its start");
                        }
                        return;
                    }
                };
                if rt_tx.send(Ok(rt.handle().clone())).is_err() {
                    return;
                }
                rt.block_on(async move {
                    let mut reap = tokio::time::interval(REAP_PERIOD);
                    reap.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    let mut stop_rx = stop_rx;
                    loop {
                        // With no read parked there is nothing to reap:
                        // sleep until one parks rather than tick.
                        if sessions.has_parked_readers() {
                            tokio::select! {
                                _ = &mut stop_rx => break,
                                _ = reap.tick() => sessions.reap_killed_readers(),
                            }
                        } else {
                            tokio::select! {
                                _ = &mut stop_rx => break,
                                () = sessions.read_parked() => {}
                            }
                        }
                    }
                });
            })?;
        let rt = rt_rx
            .recv()
            .map_err(|_| std::io::Error::other("tenant pump thread ended before starting"))??;
        Ok(Pump {
            rt,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// Where session feeds are spawned.
    pub fn handle(&self) -> tokio::runtime::Handle {
        self.rt.clone()
    }
}

impl Drop for Pump {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            if stop.send(()).is_err() {
                tracing::debug!("tenant pump already stopped");
            }
        }
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!("tenant pump thread panicked");
            }
        }
    }
}
