//! Open handles of the node, their stream sessions, parked blocking reads
//! and poll wake-ups, and the pump that feeds sessions from the view.
//!
//! No FUSE serving thread ever blocks: a `read()` with nothing queued
//! parks its reply here, and the pump thread ([`super::pump`]) completes it
//! when a record arrives. Every
//! completion and wake-up runs after the table lock is released.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use gpupm_fusemount::procfs::take_killed;
use gpupm_uapi::layout::{envelope_flags, Envelope, StreamRecord, StreamSlot, RECORD_MAGIC};
use gpupm_uapi::tenant::TenantDelta;
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;
use zerocopy::{FromBytes, IntoBytes};

use super::error::RequestError;
use super::policy::Identity;
use super::requests::StreamGrant;
use super::sampling::{SampleQueue, MAX_RECORD_BYTES};
use super::{TenantStats, SESSION_QUEUE};
use crate::sampling::Ticket;
use crate::view::DeltaSample;

/// Size of one record as `read()` returns it.
pub const RECORD_SIZE: usize = size_of::<TenantDelta>();

/// Completes a read with the bytes to return or an error.
pub type ReadCompletion = Box<dyn FnOnce(Result<Vec<u8>, RequestError>) + Send>;
pub use gpupm_fusemount::flat::PollWake;

struct ParkedRead {
    pid: u32,
    max_bytes: usize,
    complete: ReadCompletion,
}

/// One stream session; its feed task is aborted when it is dropped.
struct Session {
    id: u64,
    vm: u32,
    ctx: Option<u32>,
    partition: u16,
    queue: VecDeque<TenantDelta>,
    next_seq: u64,
    lost_pending: u64,
    ended: bool,
    task: Option<tokio::task::JoinHandle<()>>,
    stats: Arc<TenantStats>,
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

    fn take(&mut self, max: usize) -> Vec<u8> {
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

mod reserve;
mod ri;
mod sampling;

/// One sampling session: its queue and its hold on the samplers.
struct SampleSession {
    id: u64,
    vm: u32,
    queue: SampleQueue,
    ticket: Option<Ticket>,
}

#[derive(Default)]
struct Handle {
    session: Option<Session>,
    sampling: Option<SampleSession>,
    ri: Option<ri::RiSession>,
    readers: VecDeque<ParkedRead>,
    poll_wake: Option<PollWake>,
}

impl Handle {
    /// The VM of the handle's session, whichever kind it is.
    fn session_vm(&self) -> Option<u32> {
        self.session
            .as_ref()
            .map(|s| s.vm)
            .or(self.sampling.as_ref().map(|s| s.vm))
            .or(self.ri.as_ref().map(|s| s.vm))
    }

    /// Whether the handle holds a session of any kind.
    fn has_session(&self) -> bool {
        self.session.is_some() || self.sampling.is_some() || self.ri.is_some()
    }

    /// Whether the handle's session ended (reads return end of file after
    /// the queue).
    fn ended(&self) -> bool {
        self.session.as_ref().is_some_and(|s| s.ended) || self.ri.as_ref().is_some_and(|s| s.ended)
    }

    /// Whether a `read()` would return now (records, or end of file).
    fn readable(&self) -> bool {
        self.session
            .as_ref()
            .is_some_and(|s| !s.queue.is_empty() || s.ended)
            || self.sampling.as_ref().is_some_and(|s| !s.queue.is_empty())
            || self.ri.as_ref().is_some_and(ri::RiSession::readable)
    }

    /// What a read of `max_bytes` returns now.
    fn take(&mut self, max_bytes: usize) -> Vec<u8> {
        match (&mut self.session, &mut self.sampling) {
            (Some(s), _) => s.take(max_bytes / RECORD_SIZE),
            (None, Some(s)) => s.queue.take(max_bytes),
            (None, None) => self
                .ri
                .as_mut()
                .map_or_else(Vec::new, |s| s.queue.take(max_bytes)),
        }
    }

    /// The smallest read the handle's session accepts.
    fn min_read(&self) -> usize {
        if self.sampling.is_some() {
            MAX_RECORD_BYTES
        } else if let Some(s) = &self.ri {
            s.min_read()
        } else {
            RECORD_SIZE
        }
    }
}

#[derive(Default)]
struct Table {
    handles: HashMap<u64, Handle>,
    next_fh: u64,
    next_session: u64,
    shut: bool,
}

/// Deferred work that must run without the table lock held.
enum Action {
    Complete(ReadCompletion, Result<Vec<u8>, RequestError>),
    Wake(PollWake),
}

fn run(actions: Vec<Action>) {
    for a in actions {
        match a {
            Action::Complete(complete, res) => complete(res),
            Action::Wake(wake) => wake(),
        }
    }
}

/// Hands queued records to parked readers (and EOF once the feed ended).
fn serve_readers(handle: &mut Handle, actions: &mut Vec<Action>) {
    while handle.readable() {
        let Some(r) = handle.readers.pop_front() else {
            break;
        };
        let bytes = handle.take(r.max_bytes);
        actions.push(Action::Complete(r.complete, Ok(bytes)));
    }
    if handle.readable() {
        if let Some(w) = handle.poll_wake.take() {
            actions.push(Action::Wake(w));
        }
    }
}

/// Every open handle of the node.
pub struct Sessions {
    table: Mutex<Table>,
    stats: Arc<TenantStats>,
    /// Notified when a read parks, so that the reaper (`pump`) runs only
    /// while some read is parked.
    parked: tokio::sync::Notify,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Sessions {
    /// An empty table counting into `stats`.
    pub fn new(stats: Arc<TenantStats>) -> Arc<Self> {
        Arc::new(Sessions {
            table: Mutex::new(Table {
                next_fh: 1,
                next_session: 1,
                ..Table::default()
            }),
            stats,
            parked: tokio::sync::Notify::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // The table stays consistent between statements; a panic elsewhere
        // must not wedge every tenant.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens a handle.
    pub fn open(&self) -> u64 {
        let mut t = self.lock();
        let fh = t.next_fh;
        t.next_fh += 1;
        t.handles.insert(fh, Handle::default());
        self.stats.open_handles.fetch_add(1, Ordering::Relaxed);
        fh
    }

    /// Closes a handle and its session; a read still parked fails with EINTR.
    pub fn release(&self, fh: u64) {
        let handle = self.lock().handles.remove(&fh);
        if let Some(h) = handle {
            self.stats.open_handles.fetch_sub(1, Ordering::Relaxed);
            run(h
                .readers
                .into_iter()
                .map(|r| Action::Complete(r.complete, Err(RequestError::Interrupted)))
                .collect());
        }
    }

    /// Makes `fh` a stream session of `grant` (replacing any previous one),
    /// fed by a task on `rt`.
    pub fn open_stream(
        self: &Arc<Self>,
        fh: u64,
        grant: StreamGrant,
        rt: &tokio::runtime::Handle,
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
        };
        // Spawned under the lock: the task cannot look for its session
        // before the session is in the table.
        session.task = Some(rt.spawn(feed(Arc::clone(self), fh, id, grant.feed)));
        handle.session = Some(session);
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

    /// A `read()` of `size` bytes by a caller with `identity`. `complete`
    /// runs exactly once: now, or later for a parked blocking read.
    pub fn read(
        &self,
        fh: u64,
        identity: &Identity,
        size: u32,
        nonblock: bool,
        pid: u32,
        complete: ReadCompletion,
    ) {
        let res = {
            let mut t = self.lock();
            let shut = t.shut;
            match t.handles.get_mut(&fh) {
                _ if shut => Err(RequestError::ShuttingDown),
                None => Err(RequestError::BadHandle),
                Some(handle) => match handle.session_vm() {
                    None => Err(RequestError::Invalid("no session on this handle")),
                    Some(vm) if !identity.may_see_vm(vm) => Err(RequestError::Denied),
                    Some(_) if (size as usize) < handle.min_read() => {
                        Err(RequestError::Invalid("read smaller than a record"))
                    }
                    Some(_) if handle.readers.is_empty() && handle.readable() => {
                        Ok(handle.take(size as usize))
                    }
                    Some(_) if nonblock => Err(RequestError::WouldBlock),
                    Some(_) => {
                        handle.readers.push_back(ParkedRead {
                            pid,
                            max_bytes: size as usize,
                            complete,
                        });
                        self.parked.notify_one();
                        return;
                    }
                },
            }
        };
        complete(res);
    }

    /// Poll readiness for a caller with `identity`: `POLLIN` while records
    /// are queued (or the feed ended); otherwise `wake` runs once when one is.
    pub fn poll(
        &self,
        fh: u64,
        identity: &Identity,
        wake: Option<PollWake>,
    ) -> Result<u32, RequestError> {
        let mut t = self.lock();
        if t.shut {
            return Err(RequestError::ShuttingDown);
        }
        let handle = t.handles.get_mut(&fh).ok_or(RequestError::BadHandle)?;
        let vm = handle
            .session_vm()
            .ok_or(RequestError::Invalid("no session on this handle"))?;
        if !identity.may_see_vm(vm) {
            return Err(RequestError::Denied);
        }
        let readable = (libc::POLLIN | libc::POLLRDNORM) as u32;
        if handle.ended() {
            return Ok(readable | libc::POLLHUP as u32);
        }
        if handle.readable() {
            return Ok(readable);
        }
        if let Some(w) = wake {
            handle.poll_wake = Some(w);
        }
        Ok(0)
    }

    /// Ends every session, fails parked reads and refuses what follows.
    pub fn shutdown(&self) {
        let mut actions = Vec::new();
        let mut tickets = Vec::new();
        let mut ri_sessions = Vec::new();
        {
            let mut t = self.lock();
            t.shut = true;
            for h in t.handles.values_mut() {
                h.session = None;
                tickets.extend(h.sampling.take().and_then(|mut s| s.ticket.take()));
                ri_sessions.extend(h.ri.take());
                actions.extend(
                    h.readers
                        .drain(..)
                        .map(|r| Action::Complete(r.complete, Err(RequestError::ShuttingDown))),
                );
                actions.extend(h.poll_wake.take().map(Action::Wake));
            }
        }
        // Withdrawing demands programs the device: not under the lock.
        drop(tickets);
        drop(ri_sessions);
        run(actions);
    }

    /// Whether some read is parked.
    pub(super) fn has_parked_readers(&self) -> bool {
        self.lock().handles.values().any(|h| !h.readers.is_empty())
    }

    /// Completes once a read parked since the last call (or at once if
    /// one did before the first).
    pub(super) async fn read_parked(&self) {
        self.parked.notified().await;
    }

    /// Fails parked reads whose process has a fatal signal pending: the
    /// kernel keeps such a process in the read until the request is answered.
    pub(super) fn reap_killed_readers(&self) {
        let mut actions = Vec::new();
        {
            let mut t = self.lock();
            for h in t.handles.values_mut() {
                actions.extend(
                    take_killed(&mut h.readers, |r| r.pid)
                        .map(|r| Action::Complete(r.complete, Err(RequestError::Interrupted))),
                );
            }
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
