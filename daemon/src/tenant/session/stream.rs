//! Stream sessions of the handle table: opening one on a handle, feeding
//! it from its scope's [`FeedReceiver`] (on the node's feed worker,
//! [`super::super::pump`]), and its queue of `TenantDelta` records.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use gpupm_uapi::layout::{envelope_flags, Envelope, StreamRecord, StreamSlot, RECORD_MAGIC};
use gpupm_uapi::tenant::TenantDelta;
use zerocopy::{FromBytes, IntoBytes};

use super::{run, serve_readers, Sessions, RECORD_SIZE};
use crate::feed::{FeedReceiver, Received};
use crate::tenant::bounds::{SessionCharge, SessionKind, Share};
use crate::tenant::error::RequestError;
use crate::tenant::requests::StreamGrant;
use crate::tenant::{TenantStats, SESSION_QUEUE};
use crate::view::DeltaSample;

/// Queue bytes a stream session reserves (its whole queue).
pub const STREAM_QUEUE_BYTES: u64 = (SESSION_QUEUE * RECORD_SIZE) as u64;

/// One stream session; it leaves its feed when it is dropped.
pub(super) struct Session {
    pub(super) vm: u32,
    ctx: Option<u32>,
    partition: u16,
    pub(super) queue: VecDeque<TenantDelta>,
    next_seq: u64,
    lost_pending: u64,
    pub(super) ended: bool,
    feed: Option<FeedReceiver<DeltaSample>>,
    stats: Arc<TenantStats>,
    _charge: Option<SessionCharge>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.stats.open_sessions.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Session {
    fn accepts(&self, s: &DeltaSample) -> bool {
        s.vm == self.vm && self.ctx.is_none_or(|c| s.ctx == c)
    }

    /// Takes what the feed published since the last call: queues the
    /// samples of this session's scope, counts the lost ones, and notes
    /// the feed's end. True when readers may have something new.
    fn drain_feed(&mut self, drops: &std::sync::atomic::AtomicU64) -> bool {
        let Some(mut feed) = self.feed.take() else {
            return false;
        };
        let mut changed = false;
        loop {
            match feed.try_recv() {
                Received::Item(sample) => {
                    if !self.accepts(&sample) {
                        continue;
                    }
                    if !self.push(&sample) {
                        drops.fetch_add(1, Ordering::Relaxed);
                    }
                    changed = true;
                }
                Received::Lagged(n) => {
                    self.lost_pending = self.lost_pending.saturating_add(n);
                }
                Received::Empty => {
                    self.feed = Some(feed);
                    return changed;
                }
                Received::Closed => {
                    self.ended = true;
                    return true;
                }
            }
        }
    }

    /// Queues `s` (or counts it lost when the queue is full or it is malformed).
    fn push(&mut self, s: &DeltaSample) -> bool {
        let Some(slot) = slot_of(s, self.partition) else {
            self.lost_pending += 1;
            return false;
        };
        if self.queue.len() >= SESSION_QUEUE {
            self.lost_pending += 1;
            return false;
        }
        self.queue.push_back(TenantDelta {
            seq: self.next_seq,
            lost_before: self.lost_pending.saturating_add(s.lost_before),
            slot,
        });
        self.next_seq += 1;
        self.lost_pending = 0;
        true
    }

    pub(super) fn take(&mut self, max: usize) -> Vec<u8> {
        let n = self.queue.len().min(max);
        let mut out = Vec::with_capacity(n * RECORD_SIZE);
        for d in self.queue.drain(..n) {
            out.extend_from_slice(d.as_bytes());
        }
        out
    }
}

/// The stream slot of a sample: the published bytes for a confidential VM,
/// else a plaintext record built from the sample.
fn slot_of(s: &DeltaSample, partition: u16) -> Option<StreamSlot> {
    if let Some(bytes) = &s.sealed {
        return StreamSlot::read_from_bytes(bytes).ok();
    }
    let record = StreamRecord {
        magic: RECORD_MAGIC,
        partition,
        flags: s.flags,
        vm: s.vm,
        ctx: s.ctx,
        seq: s.seq,
        start_cycle: s.start_cycle,
        end_cycle: s.end_cycle,
        reserved: 0,
        deltas: s.deltas,
    };
    Some(StreamSlot {
        envelope: Envelope {
            vm: s.vm,
            flags: envelope_flags::VALID,
            ..Envelope::default()
        },
        payload: zerocopy::transmute!(record),
        tag: [0; 16],
    })
}

impl Sessions {
    /// Makes `fh` a stream session of `grant` for `uid` (replacing any
    /// previous one), fed by the node's feed worker. ENOSPC past the uid's stream
    /// sessions or its queue budget; the previous session stays then.
    pub fn open_stream(
        &self,
        fh: u64,
        grant: StreamGrant,
        uid: u32,
        share: Share,
    ) -> Result<(), RequestError> {
        let mut guard = self.lock();
        let t = &mut *guard;
        if t.shut {
            return Err(RequestError::ShuttingDown);
        }
        let handle = t.handles.get_mut(&fh).ok_or(RequestError::BadHandle)?;
        if handle.sampling.is_some() || handle.ri.is_some() {
            return Err(RequestError::Busy);
        }
        let charge = self.bounds.open_session(
            uid,
            SessionKind::Stream,
            share,
            STREAM_QUEUE_BYTES,
            STREAM_QUEUE_BYTES,
        )?;
        self.stats.open_sessions.fetch_add(1, Ordering::Relaxed);
        grant.feed.ring_on_publish(Arc::clone(&self.feed_bell));
        let session = Session {
            vm: grant.vm,
            ctx: grant.ctx,
            partition: grant.partition,
            queue: VecDeque::new(),
            next_seq: 1,
            lost_pending: 0,
            ended: false,
            feed: Some(grant.feed),
            stats: Arc::clone(&self.stats),
            _charge: Some(charge),
        };
        let replaced = handle.session.replace(session);
        t.streams.insert(fh);
        drop(guard);
        drop(replaced);
        // What was published between the subscription and now.
        self.feed_bell.ring();
        Ok(())
    }

    /// Moves what the feeds published into their sessions' queues and
    /// serves the readers waiting on them (one pass of the feed worker).
    pub(in crate::tenant) fn pump_feeds(&self) {
        let mut actions = Vec::new();
        {
            let mut guard = self.lock();
            let t = &mut *guard;
            t.streams.retain(|fh| {
                let Some(handle) = t.handles.get_mut(fh) else {
                    return false;
                };
                let Some(session) = handle.session.as_mut() else {
                    return false;
                };
                let changed = session.drain_feed(&self.stats.session_drops);
                // A session whose feed ended needs no more visits.
                let live = session.feed.is_some();
                if changed {
                    serve_readers(handle, &mut actions);
                }
                live
            });
        }
        run(actions);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(vm: u32, ctx: u32, seq: u64) -> DeltaSample {
        DeltaSample {
            seq,
            vm,
            ctx,
            start_cycle: seq * 10,
            end_cycle: seq * 10 + 10,
            flags: 0,
            lost_before: 0,
            deltas: [seq; 64],
            sealed: None,
        }
    }

    #[test]
    fn a_full_queue_counts_drops_in_the_next_record() {
        let stats = Arc::new(TenantStats::default());
        stats.open_sessions.fetch_add(1, Ordering::Relaxed);
        let mut s = Session {
            vm: 1,
            ctx: None,
            partition: 1,
            queue: VecDeque::new(),
            next_seq: 1,
            lost_pending: 0,
            ended: false,
            feed: None,
            stats: Arc::clone(&stats),
            _charge: None,
        };
        for i in 0..SESSION_QUEUE as u64 + 5 {
            s.push(&sample(1, 2, i));
        }
        assert_eq!(s.queue.len(), SESSION_QUEUE);
        let bytes = s.take(usize::MAX);
        assert_eq!(bytes.len(), SESSION_QUEUE * RECORD_SIZE);
        assert!(s.push(&sample(1, 2, 999)));
        let d = s.queue.pop_front().unwrap();
        assert_eq!((d.seq, d.lost_before), (SESSION_QUEUE as u64 + 1, 5));
        let rec = StreamRecord::read_from_bytes(&d.slot.payload).unwrap();
        assert_eq!(
            (rec.magic, rec.vm, rec.ctx, rec.seq, rec.deltas[3]),
            (RECORD_MAGIC, 1, 2, 999, 999)
        );
        assert!(!s.accepts(&sample(2, 2, 1)));
        drop(s);
        assert_eq!(stats.open_sessions.load(Ordering::Relaxed), 0);
    }
}
