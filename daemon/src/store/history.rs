//! Recent per-interval deltas: a bounded ring per scope and a live
//! [`Feed`] per subscribed scope.
//!
//! Samples are kept compact (only the non-zero deltas, LEB128-encoded,
//! behind a bitmap of the events present): with 512 contexts × 256
//! samples, full 64-event samples would need ~80 MiB; compact ones need a
//! fifth of that. Each ring keeps its samples' bytes in one buffer of its
//! own, so recording a sample (thousands per second from the drains)
//! allocates nothing once the ring is full: a sample is packed once into
//! a scratch buffer and copied into its VM's ring and its context's ring.
//! The VM rings are few (one per VM), so the second copy costs little.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use gpupm_uapi::events::MAX_EVENTS;
use gpupm_uapi::regs::{MAX_CONTEXTS, MAX_VMS};

use crate::feed::{Feed, FeedReceiver};
use crate::view::{CtxId, DeltaSample, Scope};

/// Longest packed deltas of one sample: every event, ten LEB128 bytes each.
const MAX_PACKED: usize = MAX_EVENTS * 10;

/// What a ring keeps of a [`DeltaSample`] besides its packed bytes.
#[derive(Clone, Copy, Debug)]
struct Head {
    seq: u64,
    vm: u32,
    ctx: u32,
    start_cycle: u64,
    end_cycle: u64,
    lost_before: u64,
    flags: u16,
    /// Bit `e` set: event `e` has a non-zero delta in the packed bytes.
    present: u64,
    /// Bytes of this sample in its ring's buffer: LEB128 deltas of the
    /// present events in id order, or the sealed slot bytes.
    len: usize,
    sealed: bool,
}

impl Head {
    fn of(s: &DeltaSample, present: u64, len: usize) -> Head {
        Head {
            seq: s.seq,
            vm: s.vm,
            ctx: s.ctx,
            start_cycle: s.start_cycle,
            end_cycle: s.end_cycle,
            lost_before: s.lost_before,
            flags: s.flags,
            present,
            len,
            sealed: s.sealed.is_some(),
        }
    }

    /// The sample, from its `len` packed bytes.
    fn unpack<'a>(&self, mut bytes: impl Iterator<Item = &'a u8>) -> DeltaSample {
        let mut deltas = [0u64; MAX_EVENTS];
        let sealed = if self.sealed {
            Some(bytes.copied().collect())
        } else {
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
            None
        };
        DeltaSample {
            seq: self.seq,
            vm: self.vm,
            ctx: self.ctx,
            start_cycle: self.start_cycle,
            end_cycle: self.end_cycle,
            flags: self.flags,
            lost_before: self.lost_before,
            deltas,
            sealed,
        }
    }
}

/// Packs the non-zero `deltas` into `out` (LEB128, in event order);
/// returns the bitmap of the events present and the bytes written.
fn pack(deltas: &[u64; MAX_EVENTS], out: &mut [u8; MAX_PACKED]) -> (u64, usize) {
    let mut present = 0u64;
    let mut n = 0;
    for (e, &d) in deltas.iter().enumerate() {
        if d == 0 {
            continue;
        }
        present |= 1 << e;
        let mut v = d;
        while v >= 0x80 {
            out[n] = (v & 0x7f) as u8 | 0x80;
            v >>= 7;
            n += 1;
        }
        out[n] = (v & 0x7f) as u8;
        n += 1;
    }
    (present, n)
}

/// One scope's samples, oldest first.
#[derive(Debug, Default)]
struct Ring {
    heads: VecDeque<Head>,
    /// The packed bytes of `heads`, back to back in the same order.
    bytes: VecDeque<u8>,
}

impl Ring {
    /// Appends a sample, dropping the oldest one when `cap` are kept.
    fn push(&mut self, cap: usize, head: Head, bytes: &[u8]) {
        if self.heads.len() >= cap {
            if let Some(oldest) = self.heads.pop_front() {
                self.bytes.drain(..oldest.len);
            }
        }
        // Doubled, but never far past what a full ring of samples like
        // these needs: there is a ring per context instance, and plain
        // doubling left up to half of each unused (~10 MiB more RSS at the
        // reference load); growing by small steps instead copied the
        // rings over and over.
        let need = self.bytes.len() + bytes.len();
        if need > self.bytes.capacity() {
            let per_sample = need / (self.heads.len() + 1);
            let full = per_sample * cap + per_sample * cap / 8;
            let want = (2 * self.bytes.len()).min(full).max(need);
            self.bytes.reserve_exact(want - self.bytes.len());
        }
        if self.heads.len() == self.heads.capacity() {
            let want = (2 * self.heads.len()).clamp(4, cap.max(4));
            self.heads
                .reserve_exact(want.saturating_sub(self.heads.len()).max(1));
        }
        self.bytes.extend(bytes);
        self.heads.push_back(head);
    }

    /// The most recent `max` samples, oldest first.
    fn recent(&self, max: usize) -> Vec<DeltaSample> {
        let skip = self.heads.len().saturating_sub(max);
        let mut at: usize = self.heads.iter().take(skip).map(|h| h.len).sum();
        self.heads
            .iter()
            .skip(skip)
            .map(|h| {
                let s = h.unpack(self.bytes.range(at..at + h.len));
                at += h.len;
                s
            })
            .collect()
    }
}

/// Every scope's ring, found by index: a drain records each sample into
/// two rings, thousands of times a second, and hashing the scope for a
/// map (SipHash) cost more than the copies into the rings.
#[derive(Debug, Default)]
struct ScopeRings {
    system: Ring,
    /// VM `v`'s ring at `v`, grown to the largest VM id seen.
    vms: Vec<Ring>,
    /// Context id `c`'s ring at `c`, grown to the largest id seen (at most
    /// [`MAX_CONTEXTS`] empty rings, 256 KiB).
    ctxs: Vec<Ring>,
    /// Ids past the device's limits, which a conforming device never
    /// records: kept all the same.
    beyond: HashMap<Scope, Ring>,
}

/// Index of id `id` in a table of at most `max` entries.
fn table_index(id: u32, max: u32) -> Option<usize> {
    (id < max).then(|| usize::try_from(id).ok()).flatten()
}

impl ScopeRings {
    fn get(&self, scope: Scope) -> Option<&Ring> {
        match scope {
            Scope::System => Some(&self.system),
            Scope::Vm(v) => match table_index(v, MAX_VMS) {
                Some(i) => self.vms.get(i),
                None => self.beyond.get(&scope),
            },
            Scope::Ctx(c) => match table_index(c, MAX_CONTEXTS) {
                Some(i) => self.ctxs.get(i),
                None => self.beyond.get(&scope),
            },
        }
    }

    fn get_or_insert(&mut self, scope: Scope) -> &mut Ring {
        let (table, i) = match scope {
            Scope::System => return &mut self.system,
            Scope::Vm(v) => (&mut self.vms, table_index(v, MAX_VMS)),
            Scope::Ctx(c) => (&mut self.ctxs, table_index(c, MAX_CONTEXTS)),
        };
        let Some(i) = i else {
            return self.beyond.entry(scope).or_default();
        };
        if table.len() <= i {
            table.resize_with(i + 1, Ring::default);
        }
        &mut table[i]
    }

    fn remove(&mut self, scope: Scope) {
        let table_slot = match scope {
            Scope::System => Some(&mut self.system),
            Scope::Vm(v) => table_index(v, MAX_VMS).and_then(|i| self.vms.get_mut(i)),
            Scope::Ctx(c) => table_index(c, MAX_CONTEXTS).and_then(|i| self.ctxs.get_mut(i)),
        };
        match table_slot {
            Some(ring) => *ring = Ring::default(),
            None => {
                self.beyond.remove(&scope);
            }
        }
    }
}

/// Rings and feeds.
#[derive(Debug)]
pub struct History {
    cap: usize,
    rings: ScopeRings,
    feeds: HashMap<Scope, Feed<DeltaSample>>,
    /// Where a sample is packed before it is copied into its rings.
    scratch: Box<[u8; MAX_PACKED]>,
}

impl History {
    /// Keeps `cap` samples per scope.
    pub fn new(cap: usize) -> History {
        History {
            cap: cap.max(1),
            rings: ScopeRings::default(),
            feeds: HashMap::new(),
            scratch: Box::new([0; MAX_PACKED]),
        }
    }

    /// Adds a sample to the scopes it belongs to: its VM (or the system
    /// scope for VM 0) and its context, if any.
    pub fn push(&mut self, sample: &DeltaSample) {
        let vm_scope = if sample.vm == 0 {
            Scope::System
        } else {
            Scope::Vm(sample.vm)
        };
        let ctx_scope = (sample.ctx != 0).then_some(Scope::Ctx(sample.ctx));
        let (present, len) = match &sample.sealed {
            Some(bytes) => (0, bytes.len()),
            None => pack(&sample.deltas, &mut self.scratch),
        };
        let head = Head::of(sample, present, len);
        let bytes = sample.sealed.as_deref().unwrap_or(&self.scratch[..len]);
        for scope in std::iter::once(vm_scope).chain(ctx_scope) {
            self.rings.get_or_insert(scope).push(self.cap, head, bytes);
        }
        // Live feeds are rare; the shared copy is only made for one.
        if self.feeds.is_empty() {
            return;
        }
        let mut shared = None;
        for scope in std::iter::once(vm_scope).chain(ctx_scope) {
            let Some(feed) = self.feeds.get(&scope) else {
                continue;
            };
            let s = shared.get_or_insert_with(|| Arc::new(sample.clone()));
            if !feed.publish(Arc::clone(s)) {
                // No receiver left: drop the feed until someone subscribes.
                self.feeds.remove(&scope);
            }
        }
    }

    /// Forgets a context id's samples (the id names a new instance now).
    pub fn forget_ctx(&mut self, ctx: CtxId) {
        self.rings.remove(Scope::Ctx(ctx));
    }

    /// The most recent `max` samples, oldest first.
    pub fn recent(&self, scope: Scope, max: usize) -> Vec<DeltaSample> {
        self.rings
            .get(scope)
            .map_or_else(Vec::new, |ring| ring.recent(max))
    }

    /// A live feed of `scope`.
    pub fn subscribe(&mut self, scope: Scope) -> FeedReceiver<DeltaSample> {
        self.feeds.entry(scope).or_default().subscribe()
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
        let mut out = [0u8; MAX_PACKED];
        assert_eq!(pack(&[0; MAX_EVENTS], &mut out), (0, 0));
        let mut deltas = [0u64; MAX_EVENTS];
        deltas[0] = u64::MAX;
        deltas[5] = 300;
        deltas[9] = 127;
        assert_eq!(pack(&deltas, &mut out), (1 | 1 << 5 | 1 << 9, 10 + 2 + 1));
        assert_eq!(&out[10..13], &[0xac, 0x02, 0x7f]);
        assert_eq!(
            pack(&[u64::MAX; MAX_EVENTS], &mut out),
            (u64::MAX, MAX_PACKED)
        );
    }

    proptest::proptest! {
        /// Each delta drawn with 0 to 64 significant bits, so every LEB128
        /// length (1–10 bytes) occurs: what is packed unpacks to the same
        /// sample, and no byte is left over or missing.
        #[test]
        fn packed_deltas_unpack_to_the_same_sample(
            raw in proptest::collection::vec((0u32..=64, proptest::num::u64::ANY), MAX_EVENTS)
        ) {
            let mut s = sample(1, 2, 3);
            for (d, &(bits, v)) in s.deltas.iter_mut().zip(&raw) {
                *d = if bits == 0 { 0 } else { (v | 1 << 63) >> (64 - bits) };
            }
            let mut out = [0u8; MAX_PACKED];
            let (present, len) = pack(&s.deltas, &mut out);
            let head = Head::of(&s, present, len);
            let mut bytes = out[..len].iter();
            proptest::prop_assert_eq!(head.unpack(bytes.by_ref()), s);
            proptest::prop_assert_eq!(bytes.len(), 0, "bytes left after the last delta");
        }
    }

    /// A sample whose packed size depends on `seq` (sealed every 7th), so
    /// that the rings drop samples of every size.
    fn varied(seq: u64) -> DeltaSample {
        let mut s = sample(seq, 4, 9);
        s.lost_before = seq % 3;
        if seq.is_multiple_of(7) {
            s.sealed = Some((0..(seq % 40) as u8).collect());
            return s;
        }
        for (e, d) in s.deltas.iter_mut().enumerate() {
            let e = e as u64;
            if !(e + seq).is_multiple_of(5) {
                *d = (seq + 1) << ((e * seq) % 60);
            }
        }
        s
    }

    #[test]
    fn full_rings_keep_the_newest_samples_whole() {
        let mut h = History::new(5);
        let all: Vec<DeltaSample> = (0..60).map(varied).collect();
        for (n, s) in all.iter().enumerate() {
            h.push(s);
            let kept = &all[(n + 1).saturating_sub(5)..=n];
            assert_eq!(h.recent(Scope::Vm(4), 10), kept);
            assert_eq!(h.recent(Scope::Ctx(9), 10), kept);
            let last_two = &all[n.saturating_sub(1)..=n];
            assert_eq!(h.recent(Scope::Ctx(9), 2), last_two);
        }
        assert!(h.recent(Scope::Vm(4), 0).is_empty());
    }

    #[test]
    fn every_scope_keeps_its_own_samples_inside_and_beyond_the_device_limits() {
        let mut h = History::new(8);
        let (big_vm, big_ctx) = (MAX_VMS + 5, MAX_CONTEXTS + 1);
        let pushed = [
            sample(1, 3, MAX_CONTEXTS - 1),
            sample(2, big_vm, big_ctx),
            sample(3, 3, 0),
            sample(4, 0, 7),
            sample(5, big_vm, 7),
        ];
        for s in &pushed {
            h.push(s);
        }
        let seqs = |h: &History, scope| -> Vec<u64> {
            h.recent(scope, 10).iter().map(|s| s.seq).collect()
        };
        assert_eq!(seqs(&h, Scope::Vm(3)), [1, 3]);
        assert_eq!(seqs(&h, Scope::Vm(big_vm)), [2, 5]);
        assert_eq!(seqs(&h, Scope::System), [4]);
        assert_eq!(seqs(&h, Scope::Ctx(MAX_CONTEXTS - 1)), [1]);
        assert_eq!(seqs(&h, Scope::Ctx(big_ctx)), [2]);
        assert_eq!(seqs(&h, Scope::Ctx(7)), [4, 5]);
        assert!(seqs(&h, Scope::Vm(4)).is_empty());
        assert!(seqs(&h, Scope::Ctx(MAX_CONTEXTS)).is_empty());

        h.forget_ctx(big_ctx);
        h.forget_ctx(7);
        assert!(seqs(&h, Scope::Ctx(big_ctx)).is_empty());
        assert!(seqs(&h, Scope::Ctx(7)).is_empty());
        assert_eq!(seqs(&h, Scope::Ctx(MAX_CONTEXTS - 1)), [1], "others kept");
        assert_eq!(seqs(&h, Scope::Vm(big_vm)), [2, 5], "VM rings kept");
        h.push(&sample(6, 0, 7));
        assert_eq!(seqs(&h, Scope::Ctx(7)), [6], "a new instance starts empty");
    }

    #[test]
    fn rings_are_bounded_and_feeds_see_new_samples() {
        let mut h = History::new(2);
        let mut rx = h.subscribe(Scope::Ctx(5));
        for seq in 0..3 {
            h.push(&sample(seq, 1, 5));
        }
        let seqs: Vec<u64> = h.recent(Scope::Vm(1), 10).iter().map(|s| s.seq).collect();
        assert_eq!(seqs, vec![1, 2]);
        assert_eq!(h.recent(Scope::Ctx(5), 1)[0].seq, 2);
        match rx.try_recv() {
            crate::feed::Received::Item(s) => assert_eq!(s.seq, 0),
            other => panic!("expected the first sample, got {other:?}"),
        }
        let mut big = sample(7, 2, 0);
        big.deltas[0] = u64::MAX;
        big.deltas[5] = 300;
        big.deltas[63] = 1;
        h.push(&big);
        assert_eq!(h.recent(Scope::Vm(2), 1), vec![big]);
        let mut sealed = sample(0, 3, 0);
        sealed.sealed = Some(vec![1, 2, 3]);
        h.push(&sealed);
        assert_eq!(h.recent(Scope::Vm(3), 1), vec![sealed]);
        h.push(&sample(9, 0, 0));
        assert_eq!(h.recent(Scope::System, 5).len(), 1);
        h.forget_ctx(5);
        assert!(h.recent(Scope::Ctx(5), 5).is_empty());
    }
}
