//! The node's own threads: the feed thread, a small single-threaded
//! tokio runtime on which every stream session's feed task runs, and the
//! reaper of killed readers (`session::reap`, the shared
//! `gpupm_fusemount::parked::Reaper`), apart from it so that no
//! `/proc` work ever delays a feed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::{self, JoinHandle};

use tokio::sync::oneshot;

use gpupm_fusemount::parked::Reaper;

use super::session::{start_reaper, Sessions};

/// The feed thread and the reaper thread. The runtime lives and dies on
/// its thread, so dropping the pump is fine from any context, async or
/// not.
#[derive(Debug)]
pub struct Pump {
    rt: tokio::runtime::Handle,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    reaper: Option<Reaper>,
}

/// Pumps started (for thread names).
static PUMPS: AtomicU64 = AtomicU64::new(0);

impl Pump {
    /// Starts the feed thread and the reaper of `sessions`.
    pub fn start(sessions: Arc<Sessions>) -> std::io::Result<Pump> {
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let (rt_tx, rt_rx) = mpsc::sync_channel(1);
        let n = PUMPS.fetch_add(1, Ordering::Relaxed);
        let thread = thread::Builder::new()
            .name(format!("gpupm-tenant-feed-{n}"))
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        if rt_tx.send(Err(e)).is_err() {
                            tracing::error!("tenant feed thread could not report its start");
                        }
                        return;
                    }
                };
                if rt_tx.send(Ok(rt.handle().clone())).is_err() {
                    return;
                }
                rt.block_on(async move {
                    if stop_rx.await.is_err() {
                        tracing::debug!("tenant feed thread stopped without a word");
                    }
                });
            })?;
        let rt = rt_rx
            .recv()
            .map_err(|_| std::io::Error::other("tenant feed thread ended before starting"))??;
        let reaper = start_reaper(&sessions)?;
        Ok(Pump {
            rt,
            stop: Some(stop_tx),
            thread: Some(thread),
            reaper: Some(reaper),
        })
    }

    /// Where session feeds are spawned.
    pub fn handle(&self) -> tokio::runtime::Handle {
        self.rt.clone()
    }
}

impl Drop for Pump {
    fn drop(&mut self) {
        drop(self.reaper.take());
        if let Some(stop) = self.stop.take() {
            if stop.send(()).is_err() {
                tracing::debug!("tenant feed thread already stopped");
            }
        }
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!("tenant feed thread panicked");
            }
        }
    }
}
