//! Recent per-interval deltas: a bounded ring per scope and a live feed
//! (tokio broadcast) per subscribed scope.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use tokio::sync::broadcast;

use crate::view::{CtxId, DeltaSample, Scope};

/// Capacity of each live feed; a subscriber that lags further loses the
/// oldest samples (and sees `RecvError::Lagged` with the count).
const FEED_CAPACITY: usize = 1024;

/// Rings and feeds.
#[derive(Debug)]
pub struct History {
    cap: usize,
    rings: HashMap<Scope, VecDeque<Arc<DeltaSample>>>,
    feeds: HashMap<Scope, broadcast::Sender<Arc<DeltaSample>>>,
}

impl History {
    /// Keeps `cap` samples per scope.
    pub fn new(cap: usize) -> History {
        History {
            cap: cap.max(1),
            rings: HashMap::new(),
            feeds: HashMap::new(),
        }
    }

    /// Adds a sample to the scopes it belongs to: its VM (or the system
    /// scope for VM 0) and its context, if any.
    pub fn push(&mut self, sample: DeltaSample) {
        let sample = Arc::new(sample);
        let vm_scope = if sample.vm == 0 {
            Scope::System
        } else {
            Scope::Vm(sample.vm)
        };
        self.push_scope(vm_scope, &sample);
        if sample.ctx != 0 {
            self.push_scope(Scope::Ctx(sample.ctx), &sample);
        }
    }

    fn push_scope(&mut self, scope: Scope, sample: &Arc<DeltaSample>) {
        let ring = self.rings.entry(scope).or_default();
        if ring.len() == self.cap {
            ring.pop_front();
        }
        ring.push_back(Arc::clone(sample));
        if let Some(tx) = self.feeds.get(&scope) {
            if tx.send(Arc::clone(sample)).is_err() {
                // No receiver left: drop the feed until someone subscribes.
                self.feeds.remove(&scope);
            }
        }
    }

    /// Forgets a context id's samples (the id names a new instance now).
    pub fn forget_ctx(&mut self, ctx: CtxId) {
        self.rings.remove(&Scope::Ctx(ctx));
    }

    /// The most recent `max` samples, oldest first.
    pub fn recent(&self, scope: Scope, max: usize) -> Vec<DeltaSample> {
        let Some(ring) = self.rings.get(&scope) else {
            return Vec::new();
        };
        let skip = ring.len().saturating_sub(max);
        ring.iter().skip(skip).map(|s| (**s).clone()).collect()
    }

    /// A live feed of `scope`.
    pub fn subscribe(&mut self, scope: Scope) -> broadcast::Receiver<Arc<DeltaSample>> {
        self.feeds
            .entry(scope)
            .or_insert_with(|| broadcast::channel(FEED_CAPACITY).0)
            .subscribe()
    }
}

#[cfg(test)]
mod tests {
    use gpupm_uapi::events::MAX_EVENTS;

    use super::*;

    fn sample(seq: u64, vm: u32, ctx: u32) -> DeltaSample {
        DeltaSample {
            seq,
            vm,
            ctx,
            start_cycle: 0,
            end_cycle: 0,
            flags: 0,
            lost_before: 0,
            deltas: [0; MAX_EVENTS],
            sealed: None,
        }
    }

    #[test]
    fn rings_are_bounded_and_feeds_see_new_samples() {
        let mut h = History::new(2);
        let mut rx = h.subscribe(Scope::Ctx(5));
        for seq in 0..3 {
            h.push(sample(seq, 1, 5));
        }
        let seqs: Vec<u64> = h.recent(Scope::Vm(1), 10).iter().map(|s| s.seq).collect();
        assert_eq!(seqs, vec![1, 2]);
        assert_eq!(h.recent(Scope::Ctx(5), 1)[0].seq, 2);
        assert_eq!(rx.try_recv().unwrap().seq, 0);
        h.push(sample(9, 0, 0));
        assert_eq!(h.recent(Scope::System, 5).len(), 1);
        h.forget_ctx(5);
        assert!(h.recent(Scope::Ctx(5), 5).is_empty());
    }
}
