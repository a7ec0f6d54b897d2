//! Stream sessions of the handle table: opening one on a handle, the
//! task that feeds it from the view, and its queue of `TenantDelta`
//! records.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use gpupm_uapi::layout::{envelope_flags, Envelope, StreamRecord, StreamSlot, RECORD_MAGIC};
use gpupm_uapi::tenant::TenantDelta;
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;
use zerocopy::{FromBytes, IntoBytes};

use super::{run, serve_readers, Sessions, RECORD_SIZE};
use crate::tenant::bounds::{SessionCharge, SessionKind, Share};
use crate::tenant::error::RequestError;
use crate::tenant::requests::StreamGrant;
use crate::tenant::{TenantStats, SESSION_QUEUE};
use crate::view::DeltaSample;

/// Queue bytes a stream session reserves (its whole queue).
pub const STREAM_QUEUE_BYTES: u64 = (SESSION_QUEUE * RECORD_SIZE) as u64;

/// One stream session; its feed task is aborted when it is dropped.
pub(super) struct Session {
    pub(super) id: u64,
    pub(super) vm: u32,
    ctx: Option<u32>,
    partition: u16,
    pub(super) queue: VecDeque<TenantDelta>,
    next_seq: u64,
    lost_pending: u64,
    pub(super) ended: bool,
    task: Option<tokio::task::JoinHandle<()>>,
    stats: Arc<TenantStats>,
    _charge: Option<SessionCharge>,
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
        self.stats.open_sessions.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Session {
    fn accepts(&self, s: &DeltaSample) -> bool {
        s.vm == self.vm && self.ctx.is_none_or(|c| s.ctx == c)
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
    /// previous one), fed by a task on `rt`. ENOSPC past the uid's stream
    /// sessions or its queue budget; the previous session stays then.
    pub fn open_stream(
        self: &Arc<Self>,
        fh: u64,
        grant: StreamGrant,
        rt: &tokio::runtime::Handle,
        uid: u32,
        share: Share,
    ) -> Result<(), RequestError> {
        let mut guard = self.lock();
        let t = &mut *guard;
        if t.shut {
            return Err(RequestError::ShuttingDown);
        }
        let id = t.next_session;
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
        t.next_session += 1;
        self.stats.open_sessions.fetch_add(1, Ordering::Relaxed);
        let mut session = Session {
            id,
            vm: grant.vm,
            ctx: grant.ctx,
            partition: grant.partition,
            queue: VecDeque::new(),
            next_seq: 1,
            lost_pending: 0,
            ended: false,
            task: None,
            stats: Arc::clone(&self.stats),
            _charge: Some(charge),
        };
        // Spawned under the lock: the task cannot look for its session
        // before the session is in the table.
        session.task = Some(rt.spawn(feed(Arc::clone(self), fh, id, grant.feed)));
        let replaced = handle.session.replace(session);
        drop(guard);
        drop(replaced);
        Ok(())
    }

    /// Queues one sample for session `id` of `fh` (or counts `lagged`
    /// samples the feed skipped); false once that session is gone.
    fn deliver(&self, fh: u64, id: u64, sample: Option<&DeltaSample>, lagged: u64) -> bool {
        let mut actions = Vec::new();
        {
            let mut t = self.lock();
            let Some(handle) = t.handles.get_mut(&fh) else {
                return false;
            };
            let Some(session) = handle.session.as_mut().filter(|s| s.id == id) else {
                return false;
            };
            session.lost_pending = session.lost_pending.saturating_add(lagged);
            if let Some(s) = sample.filter(|s| session.accepts(s)) {
                if !session.push(s) {
                    self.stats.session_drops.fetch_add(1, Ordering::Relaxed);
                }
            }
            serve_readers(handle, &mut actions);
        }
        run(actions);
        true
    }

    /// The feed of session `id` ended: readers get EOF after the queue.
    fn end(&self, fh: u64, id: u64) {
        let mut actions = Vec::new();
        {
            let mut t = self.lock();
            let Some(handle) = t.handles.get_mut(&fh) else {
                return;
            };
            let Some(session) = handle.session.as_mut().filter(|s| s.id == id) else {
                return;
            };
            session.ended = true;
            serve_readers(handle, &mut actions);
        }
        run(actions);
    }
}

/// Feeds session `id` of `fh` until the session or the feed ends.
async fn feed(
    sessions: Arc<Sessions>,
    fh: u64,
    id: u64,
    mut rx: broadcast::Receiver<Arc<DeltaSample>>,
) {
    loop {
        let alive = match rx.recv().await {
            Ok(sample) => sessions.deliver(fh, id, Some(&sample), 0),
            Err(RecvError::Lagged(n)) => sessions.deliver(fh, id, None, n),
            Err(RecvError::Closed) => {
                sessions.end(fh, id);
                false
            }
        };
        if !alive {
            return;
        }
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
            id: 1,
            vm: 1,
            ctx: None,
            partition: 1,
            queue: VecDeque::new(),
            next_seq: 1,
            lost_pending: 0,
            ended: false,
            task: None,
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
