//! Sharing one [`HealthSource`] between several consumers.
//!
//! [`HealthSource::snapshot`] hands out the handshake latency samples
//! taken since the previous call and clears them, so two consumers calling
//! it directly (the health reporter and the metrics endpoint) would each
//! see only part of the samples. [`HealthFanout`] takes the samples once
//! and gives every subscriber all of them. The drain lag (a maximum since
//! the previous snapshot) is shared out the same way.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::view::{HealthSnapshot, HealthSource};

/// Most samples kept for one subscriber between two of its snapshots; the
/// oldest are dropped beyond this (a subscriber that never reads must not
/// grow without bound).
pub const MAX_PENDING_SAMPLES: usize = 1 << 16;

/// Splits one [`HealthSource`] into subscribers that each receive every
/// latency sample.
#[derive(Clone)]
pub struct HealthFanout {
    inner: Arc<Inner>,
}

struct Inner {
    source: Arc<dyn HealthSource>,
    pending: Mutex<Vec<Pending>>,
}

/// What one subscriber has not seen yet.
#[derive(Debug, Default)]
struct Pending {
    latency_ns: Vec<u64>,
    drain_lag_max: u64,
    response_max_ns: u64,
}

impl fmt::Debug for HealthFanout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HealthFanout")
            .field("subscribers", &lock(&self.inner.pending).len())
            .finish_non_exhaustive()
    }
}

impl HealthFanout {
    /// Wraps `source`; it should have no other consumer.
    pub fn new(source: Arc<dyn HealthSource>) -> Self {
        Self {
            inner: Arc::new(Inner {
                source,
                pending: Mutex::new(Vec::new()),
            }),
        }
    }

    /// A new consumer; it receives the samples taken from now on.
    pub fn subscribe(&self) -> Arc<dyn HealthSource> {
        let mut pending = lock(&self.inner.pending);
        let index = pending.len();
        pending.push(Pending::default());
        Arc::new(Subscriber {
            inner: Arc::clone(&self.inner),
            index,
        })
    }
}

struct Subscriber {
    inner: Arc<Inner>,
    index: usize,
}

impl HealthSource for Subscriber {
    fn snapshot(&self) -> HealthSnapshot {
        let mut pending = lock(&self.inner.pending);
        let mut snap = self.inner.source.snapshot();
        let fresh = std::mem::take(&mut snap.handshake_latency_ns);
        for (i, p) in pending.iter_mut().enumerate() {
            if i != self.index {
                p.latency_ns.extend_from_slice(&fresh);
                trim_oldest(&mut p.latency_ns);
                p.drain_lag_max = p.drain_lag_max.max(snap.drain_lag_records);
                p.response_max_ns = p.response_max_ns.max(snap.handshake_response_max_ns);
            }
        }
        if let Some(mine) = pending.get_mut(self.index) {
            let mut latency = std::mem::take(&mut mine.latency_ns);
            latency.extend(fresh);
            trim_oldest(&mut latency);
            snap.handshake_latency_ns = latency;
            snap.drain_lag_records = snap.drain_lag_records.max(mine.drain_lag_max);
            mine.drain_lag_max = 0;
            snap.handshake_response_max_ns =
                snap.handshake_response_max_ns.max(mine.response_max_ns);
            mine.response_max_ns = 0;
        }
        snap
    }
}

fn trim_oldest(buf: &mut Vec<u64>) {
    if let Some(excess) = buf.len().checked_sub(MAX_PENDING_SAMPLES) {
        buf.drain(..excess);
    }
}

/// The pending buffers stay consistent even if a holder panicked, so a
/// poisoned lock is taken over.
fn lock(m: &Mutex<Vec<Pending>>) -> MutexGuard<'_, Vec<Pending>> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Counting(Mutex<u64>);

    impl HealthSource for Counting {
        fn snapshot(&self) -> HealthSnapshot {
            let mut n = self.0.lock().unwrap();
            *n += 1;
            HealthSnapshot {
                handshake_latency_ns: vec![*n],
                ..HealthSnapshot::default()
            }
        }
    }

    #[test]
    fn every_subscriber_sees_every_sample_once() {
        let fan = HealthFanout::new(Arc::new(Counting(Mutex::new(0))));
        let a = fan.subscribe();
        let b = fan.subscribe();
        assert_eq!(a.snapshot().handshake_latency_ns, vec![1]);
        assert_eq!(a.snapshot().handshake_latency_ns, vec![2]);
        assert_eq!(b.snapshot().handshake_latency_ns, vec![1, 2, 3]);
        assert_eq!(a.snapshot().handshake_latency_ns, vec![3, 4]);
        assert_eq!(b.snapshot().handshake_latency_ns, vec![4, 5]);
    }
}
