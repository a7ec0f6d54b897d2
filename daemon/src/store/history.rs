//! Recent per-interval deltas: a bounded ring per scope and a live feed
//! (tokio broadcast) per subscribed scope.
//!
//! Samples are kept compact (only the non-zero deltas, LEB128-encoded,
//! behind a bitmap of the events present), one copy shared by the VM ring
//! and the context ring: with 512 contexts × 256 samples, full 64-event
//! samples would need ~80 MiB; compact ones need a fifth of that.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use tokio::sync::broadcast;

use gpupm_uapi::events::MAX_EVENTS;

use crate::view::{CtxId, DeltaSample, Scope};

/// A [`DeltaSample`] with its deltas packed.
#[derive(Debug)]
struct Packed {
    seq: u64,
    vm: u32,
    ctx: u32,
    start_cycle: u64,
    end_cycle: u64,
    lost_before: u64,
    flags: u16,
    /// Bit `e` set: event `e` has a non-zero delta in `values`.
    present: u64,
    /// LEB128 deltas of the present events in id order, or the sealed
    /// slot bytes.
    values: Box<[u8]>,
    sealed: bool,
}

impl Packed {
    fn pack(s: &DeltaSample) -> Packed {
        let mut present = 0u64;
        let values: Box<[u8]> = match &s.sealed {
            Some(bytes) => bytes.as_slice().into(),
            None => {
                // Sized exactly up front: one allocation per sample, no
                // growth, no shrink (drains pack thousands per second).
                let len = s.deltas.iter().map(|&d| leb128_len(d)).sum();
                let mut out = Vec::with_capacity(len);
                for (e, &d) in s.deltas.iter().enumerate().filter(|(_, &d)| d != 0) {
                    present |= 1 << e;
                    let mut v = d;
                    loop {
                        let byte = u8::try_from(v & 0x7f).unwrap_or(0);
                        v >>= 7;
                        if v == 0 {
                            out.push(byte);
                            break;
                        }
                        out.push(byte | 0x80);
                    }
                }
                out.into_boxed_slice()
            }
        };
        Packed {
            seq: s.seq,
            vm: s.vm,
            ctx: s.ctx,
            start_cycle: s.start_cycle,
            end_cycle: s.end_cycle,
            lost_before: s.lost_before,
            flags: s.flags,
            present,
            values,
            sealed: s.sealed.is_some(),
        }
    }

    fn unpack(&self) -> DeltaSample {
        let mut deltas = [0u64; MAX_EVENTS];
        if !self.sealed {
            let mut bytes = self.values.iter();
            for (e, d) in deltas.iter_mut().enumerate() {
                if self.present & (1 << e) == 0 {
                    continue;
                }
                let mut shift = 0;
                for &b in bytes.by_ref() {
                    *d |= u64::from(b & 0x7f) << shift;
                    shift += 7;
                    if b & 0x80 == 0 {
                        break;
                    }
                }
            }
        }
        DeltaSample {
            seq: self.seq,
            vm: self.vm,
            ctx: self.ctx,
            start_cycle: self.start_cycle,
            end_cycle: self.end_cycle,
            flags: self.flags,
            lost_before: self.lost_before,
            deltas,
            sealed: self.sealed.then(|| self.values.to_vec()),
        }
    }
}

/// Bytes of `v` in LEB128; a zero delta is not stored at all.
fn leb128_len(v: u64) -> usize {
    (64 - v.leading_zeros() as usize).div_ceil(7)
}

/// Capacity of each live feed; a subscriber that lags further loses the
/// oldest samples (and sees `RecvError::Lagged` with the count).
const FEED_CAPACITY: usize = 1024;

/// Rings and feeds.
#[derive(Debug)]
pub struct History {
    cap: usize,
    rings: HashMap<Scope, VecDeque<Arc<Packed>>>,
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
        let packed = Arc::new(Packed::pack(&sample));
        let vm_scope = if sample.vm == 0 {
            Scope::System
        } else {
            Scope::Vm(sample.vm)
        };
        let ctx_scope = (sample.ctx != 0).then_some(Scope::Ctx(sample.ctx));
        // Live feeds are rare; the shared unpacked copy is only made for one.
        let fed = !self.feeds.is_empty()
            && (self.feeds.contains_key(&vm_scope)
                || ctx_scope.is_some_and(|c| self.feeds.contains_key(&c)));
        let sample = fed.then(|| Arc::new(sample));
        self.push_scope(vm_scope, &packed, sample.as_ref());
        if let Some(ctx_scope) = ctx_scope {
            self.push_scope(ctx_scope, &packed, sample.as_ref());
        }
    }

    fn push_scope(
        &mut self,
        scope: Scope,
        packed: &Arc<Packed>,
        sample: Option<&Arc<DeltaSample>>,
    ) {
        let ring = self.rings.entry(scope).or_default();
        if ring.len() == self.cap {
            ring.pop_front();
        }
        ring.push_back(Arc::clone(packed));
        let Some(sample) = sample else { return };
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
        ring.iter().skip(skip).map(|s| s.unpack()).collect()
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
    fn packed_sizes_match_the_encoding() {
        assert_eq!(leb128_len(0), 0);
        assert_eq!(leb128_len(127), 1);
        assert_eq!(leb128_len(128), 2);
        assert_eq!(leb128_len(u64::MAX), 10);
        let mut s = sample(1, 1, 0);
        s.deltas[0] = u64::MAX;
        s.deltas[5] = 300;
        s.deltas[9] = 127;
        assert_eq!(Packed::pack(&s).values.len(), 10 + 2 + 1);
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
        let mut big = sample(7, 2, 0);
        big.deltas[0] = u64::MAX;
        big.deltas[5] = 300;
        big.deltas[63] = 1;
        h.push(big.clone());
        assert_eq!(h.recent(Scope::Vm(2), 1), vec![big]);
        let mut sealed = sample(0, 3, 0);
        sealed.sealed = Some(vec![1, 2, 3]);
        h.push(sealed.clone());
        assert_eq!(h.recent(Scope::Vm(3), 1), vec![sealed]);
        h.push(sample(9, 0, 0));
        assert_eq!(h.recent(Scope::System, 5).len(), 1);
        h.forget_ctx(5);
        assert!(h.recent(Scope::Ctx(5), 5).is_empty());
    }
}
