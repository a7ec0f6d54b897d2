//! The clock thread: advances a real-time device, delivers interrupt
//! records to waiting readers and pollers, and answers commit waits that
//! are due. (Reads and waits of killed processes are the reaper's,
//! [`NodeCore::start_reaper`], so that no `/proc` read delays a tick.)

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::device::NodeCore;

/// Tick period of a real-time clock.
pub const REALTIME_PERIOD: Duration = Duration::from_micros(250);
/// Wake-up period when the clock is stepped by the host (housekeeping only).
pub const STEP_PERIOD: Duration = Duration::from_millis(20);

/// A running clock thread; stopped and joined by [`Ticker::stop`] or on drop.
#[derive(Debug)]
pub struct Ticker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Ticker {
    /// Starts the thread; `realtime` selects whether it ticks the device.
    pub fn spawn(core: Arc<NodeCore>, realtime: bool) -> io::Result<Ticker> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let period = if realtime {
            REALTIME_PERIOD
        } else {
            STEP_PERIOD
        };
        let thread = thread::Builder::new()
            .name("gpupm-clock".into())
            .spawn(move || {
                while !flag.load(Ordering::Acquire) {
                    thread::park_timeout(period);
                    let now = Instant::now();
                    if realtime {
                        core.tick(now);
                    } else {
                        // Times out `GPUPM_IOC_WAIT_COMMIT`s (a step clock
                        // delivers only when its owner advances it).
                        core.deliver();
                    }
                }
            })?;
        Ok(Ticker {
            stop,
            thread: Some(thread),
        })
    }

    /// Whether the thread is still running.
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Stops and joins the thread.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            if t.join().is_err() {
                tracing::error!("clock thread panicked");
            }
        }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop();
    }
}
