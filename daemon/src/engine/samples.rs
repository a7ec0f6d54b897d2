//! The sample-drain thread: drains every partition's sample buffers when
//! the interrupt thread reports a watermark or an overflow, and at least
//! every [`DRAIN_INTERVAL`] (the interval the buffers are sized for), and
//! routes the records to the tenants' sessions. It has its own thread so
//! that a burst of samples never delays ring drains or retiring. While no
//! buffer is programmed (no sampling session) it sleeps until one is.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Instant;

use crate::planes::Planes;
use crate::sampling::drain::DRAIN_INTERVAL;

/// Consecutive failures after which the thread gives up.
const MAX_FAILURES: u32 = 50;

/// Runs until `stop` is set or the node keeps failing; `rx` carries the
/// partitions whose buffers raised an interrupt.
pub fn run(planes: &Planes, rx: &Receiver<u32>, stop: &AtomicBool) {
    let mut failures = 0;
    let mut due = Instant::now() + DRAIN_INTERVAL;
    while !stop.load(Ordering::Acquire) {
        if planes.sampler.wait_for_buffers(stop) {
            due = Instant::now() + DRAIN_INTERVAL;
            continue;
        }
        let mut parts = BTreeSet::new();
        match rx.recv_timeout(due.saturating_duration_since(Instant::now())) {
            Ok(p) => {
                parts.insert(p);
                parts.extend(rx.try_iter());
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        if Instant::now() >= due {
            parts.extend(planes.sampler.partitions());
            due = Instant::now() + DRAIN_INTERVAL;
        }
        match drain(planes, &parts) {
            Ok(()) => failures = 0,
            Err(e) => {
                failures += 1;
                tracing::error!(
                    error = gpupm_fusemount::logging::one_line(e),
                    "draining sample buffers failed"
                );
                if failures >= MAX_FAILURES {
                    break;
                }
            }
        }
    }
}

fn drain(planes: &Planes, parts: &BTreeSet<u32>) -> Result<(), gpupm_client::DevError> {
    for &p in parts {
        for batch in planes.sampler.drain(p)? {
            planes.sampling.route(&batch);
        }
    }
    Ok(())
}
