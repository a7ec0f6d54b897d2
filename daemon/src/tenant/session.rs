//! Open handles of the node, their sessions (`stream`, `sampling`, `ri`),
//! parked blocking reads and poll wake-ups, and the reaper of killed
//! readers (`reap`).
//!
//! No FUSE serving thread ever blocks: a `read()` with nothing queued
//! parks its reply here, and whoever queues a record (the feed worker of
//! [`super::pump`], the sampling plane, the RI unit) completes it. Every
//! completion and wake-up runs after the table lock is released. What a
//! caller holds here — the handle, a session and its queue, a parked read
//! — carries its charge against the `[limits]` ([`super::bounds`]), which
//! goes back when the thing goes.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use gpupm_fusemount::parked::Bell;

use gpupm_uapi::tenant::TenantDelta;

use super::bounds::{Bounds, HandleCharge, ParkCharge, SessionCharge};
use super::error::RequestError;
use super::policy::Identity;
use super::sampling::{SampleQueue, MAX_RECORD_BYTES};
use super::TenantStats;
use crate::sampling::Ticket;
use crate::worker::Doorbell;

/// Size of one record as `read()` returns it.
pub const RECORD_SIZE: usize = size_of::<TenantDelta>();

/// Completes a read with the bytes to return or an error.
pub type ReadCompletion = Box<dyn FnOnce(Result<Vec<u8>, RequestError>) + Send>;
pub use gpupm_fusemount::node::PollWake;

struct ParkedRead {
    /// Names the read for the reaper (unique while the node runs).
    ticket: u64,
    pid: u32,
    max_bytes: usize,
    complete: ReadCompletion,
    _charge: ParkCharge,
}

mod reap;
mod reserve;
mod ri;
mod sampling;
mod stream;

pub(crate) use self::reap::start as start_reaper;
use self::stream::Session;
pub use self::stream::STREAM_QUEUE_BYTES;

/// One sampling session: its queue and its hold on the samplers.
struct SampleSession {
    id: u64,
    vm: u32,
    queue: SampleQueue,
    ticket: Option<Ticket>,
    _charge: SessionCharge,
}

#[derive(Default)]
struct Handle {
    /// The uid that opened the handle, charged for it.
    _charge: Option<HandleCharge>,
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
    handles: BTreeMap<u64, Handle>,
    /// The handles with a stream session whose feed is live: what the
    /// feed worker visits on every publish (not every handle).
    streams: BTreeSet<u64>,
    next_fh: u64,
    next_session: u64,
    next_ticket: u64,
    /// Per uid, the last session id it was shown: ids are per tenant, so
    /// that one tenant's ids say nothing of another's sessions.
    public_ids: BTreeMap<u32, u64>,
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
    bounds: Arc<Bounds>,
    /// The reaper's doorbell, rung when a read parks (`reap`).
    bell: Arc<Bell>,
    /// The feed worker's doorbell, rung by the stream sessions' feeds.
    feed_bell: Arc<Doorbell>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Sessions {
    /// An empty table counting into `stats`, charging what callers hold
    /// to `bounds`.
    pub fn new(stats: Arc<TenantStats>, bounds: Arc<Bounds>) -> Arc<Self> {
        Arc::new(Sessions {
            table: Mutex::new(Table {
                next_fh: 1,
                next_session: 1,
                next_ticket: 1,
                ..Table::default()
            }),
            stats,
            bounds,
            bell: Arc::new(Bell::default()),
            feed_bell: Doorbell::new(),
        })
    }

    /// What wakes the feed worker (`pump`): a publish to any stream
    /// session's feed.
    pub(super) fn feed_bell(&self) -> &Arc<Doorbell> {
        &self.feed_bell
    }

    /// The accountant of what callers hold.
    pub fn bounds(&self) -> &Arc<Bounds> {
        &self.bounds
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // The table stays consistent between statements; a panic elsewhere
        // must not wedge every tenant.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens a handle for `uid`: EMFILE past the uid's handles, ENFILE
    /// past everyone's.
    pub fn open(&self, uid: u32) -> Result<u64, RequestError> {
        let charge = self.bounds.open_handle(uid)?;
        let mut t = self.lock();
        let fh = t.next_fh;
        t.next_fh += 1;
        t.handles.insert(
            fh,
            Handle {
                _charge: Some(charge),
                ..Handle::default()
            },
        );
        self.stats.open_handles.fetch_add(1, Ordering::Relaxed);
        Ok(fh)
    }

    /// The next session id `uid` is shown.
    fn public_id(t: &mut Table, uid: u32) -> u64 {
        let id = t.public_ids.entry(uid).or_insert(0);
        *id += 1;
        *id
    }

    /// Closes a handle and its session; a read still parked fails with EINTR.
    pub fn release(&self, fh: u64) {
        let handle = {
            let mut t = self.lock();
            t.streams.remove(&fh);
            t.handles.remove(&fh)
        };
        if let Some(h) = handle {
            self.stats.open_handles.fetch_sub(1, Ordering::Relaxed);
            run(h
                .readers
                .into_iter()
                .map(|r| Action::Complete(r.complete, Err(RequestError::Interrupted)))
                .collect());
        }
    }

    /// A `read()` of `size` bytes by a caller with `identity` (`uid`,
    /// process `pid`). `complete` runs exactly once: now, or later for a
    /// parked blocking read. A read that would wait while the caller's
    /// (or everyone's) parked reads are at their cap fails with EBUSY.
    #[allow(clippy::too_many_arguments)]
    pub fn read(
        &self,
        fh: u64,
        identity: &Identity,
        size: u32,
        nonblock: bool,
        uid: u32,
        pid: u32,
        complete: ReadCompletion,
    ) {
        let res = {
            let mut guard = self.lock();
            let t = &mut *guard;
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
                    Some(_) => match self.bounds.park(uid) {
                        Err(e) => Err(e),
                        Ok(charge) => {
                            handle.readers.push_back(ParkedRead {
                                ticket: t.next_ticket,
                                pid,
                                max_bytes: size as usize,
                                complete,
                                _charge: charge,
                            });
                            t.next_ticket += 1;
                            drop(guard);
                            self.bell.ring();
                            return;
                        }
                    },
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
            t.streams.clear();
            for h in t.handles.values_mut() {
                h.session = None;
                tickets.extend(h.sampling.take().and_then(|mut s| s.ticket.take()));
                ri_sessions.extend(h.ri.take());
                let readers = std::mem::take(&mut h.readers);
                actions.extend(
                    readers
                        .into_iter()
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
}
