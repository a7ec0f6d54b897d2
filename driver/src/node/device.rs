//! Transport-independent request handling of the device node: open handles
//! with their interrupt cursors, parked blocking readers, poll wake-ups, and
//! dispatch of reads, writes and ioctls to the backend.
//!
//! A transport (FUSE or CUSE) decodes its wire requests, calls these methods
//! and turns [`NodeError`]s into errnos with [`NodeError::errno`]. Every
//! completion of a parked reader and every poll wake-up runs after the
//! device lock is released.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use gpupm_fusemount::parked::{batch_of, take_tickets, Bell, ParkedRef, Parking, Reaper};
use gpupm_uapi::intr::InterruptRecord;
use gpupm_uapi::layout::MEM_WINDOW_OFFSET;
use zerocopy::IntoBytes;

use super::access::{AccessPolicy, Caller};
use super::backend::DeviceBackend;
use super::commit_wait::{self, IoctlCompletion, ParkedWait};
use super::error::{malformed, NodeError};
use super::ioctl::{self, IoctlReply};
use super::mirror::Mirror;
use super::reg_access::reg_access;
pub use super::reg_access::NodeKind;
use crate::model::oob::host::HostEvent;

/// Size of one interrupt record as `read()` returns it.
pub const RECORD_SIZE: usize = core::mem::size_of::<InterruptRecord>();

/// Completes a parked blocking read with the bytes to return or an error.
pub type ReadCompletion = Box<dyn FnOnce(Result<Vec<u8>, NodeError>) + Send>;
pub use gpupm_fusemount::node::PollWake;

struct ParkedRead {
    /// Names the read for the reaper (unique while the node runs).
    ticket: u64,
    pid: u32,
    max_records: usize,
    complete: ReadCompletion,
}

struct Handle {
    kind: NodeKind,
    /// Sequence number of the next interrupt record this handle reads.
    cursor: u64,
    readers: VecDeque<ParkedRead>,
    /// `GPUPM_IOC_WAIT_COMMIT` requests waiting for a commit.
    waits: Vec<ParkedWait>,
    poll_wake: Option<PollWake>,
}

struct Inner {
    backend: Box<dyn DeviceBackend>,
    handles: BTreeMap<u64, Handle>,
    next_fh: u64,
    /// The next parked request's ticket.
    next_ticket: u64,
    scratch: Vec<InterruptRecord>,
    /// The commit mirror, when the driver keeps one.
    mirror: Option<Mirror>,
}

/// Deferred work that must run without the device lock held.
enum Action {
    Complete(ReadCompletion, Result<Vec<u8>, NodeError>),
    Answer(IoctlCompletion, Result<IoctlReply, NodeError>),
    Wake(PollWake),
}

impl Inner {
    /// Lets the mirror publish a reset the request just made, before the
    /// lock is released ([`Mirror::after_request`]).
    fn mirror_after_request(&mut self) {
        if let Some(m) = self.mirror.as_mut() {
            m.after_request(self.backend.as_mut());
        }
    }

    /// Tells the device of a request on a handle of `kind`: the host
    /// driver is alive while it makes requests on `card0` (the BMC's own
    /// requests say nothing of the host).
    fn host_request(&mut self, kind: NodeKind) {
        if kind == NodeKind::Card {
            self.backend.host_event(HostEvent::Request);
        }
    }

    /// Tells the device how many `card0` handles are open and how many of
    /// their readers wait for interrupt records.
    fn host_handles_changed(&mut self) {
        let (mut handles, mut waiting) = (0u32, 0u32);
        for h in self.handles.values().filter(|h| h.kind == NodeKind::Card) {
            handles = handles.saturating_add(1);
            waiting = waiting.saturating_add(u32::try_from(h.readers.len()).unwrap_or(u32::MAX));
        }
        self.backend.host_event(HostEvent::Handles(handles));
        self.backend.host_event(HostEvent::Waiting(waiting));
    }
}

/// The device node, shared by the transport's serving thread and the clock
/// thread.
pub struct NodeCore {
    inner: Mutex<Inner>,
    policy: AccessPolicy,
    /// The reaper's doorbell, rung when a read or a wait parks.
    bell: Arc<Bell>,
}

impl std::fmt::Debug for NodeCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeCore")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl NodeCore {
    /// Serves `backend` to callers allowed by `policy`.
    pub fn new(backend: Box<dyn DeviceBackend>, policy: AccessPolicy) -> Arc<Self> {
        Arc::new(NodeCore {
            inner: Mutex::new(Inner {
                backend,
                handles: BTreeMap::new(),
                next_fh: 1,
                next_ticket: 1,
                scratch: Vec::new(),
                mirror: None,
            }),
            policy,
            bell: Arc::new(Bell::default()),
        })
    }

    /// Starts the thread that fails the reads and waits of killed
    /// processes ([`gpupm_fusemount::parked`]); it stops when dropped.
    pub fn start_reaper(self: &Arc<Self>) -> std::io::Result<Reaper> {
        let node = Arc::clone(self) as Arc<dyn Parking>;
        Reaper::start("gpupm-reaper", node, Arc::clone(&self.bell))
    }

    /// Keeps `mirror` current from now on and answers
    /// `GPUPM_IOC_MIRROR_INFO` with it.
    pub fn set_mirror(&self, mirror: Mirror) {
        self.lock().mirror = Some(mirror);
        self.deliver();
    }

    /// Creates the commit mirror in `dir` with `generation`, with a ring
    /// area for the device's stream rings, and keeps it current.
    pub fn start_mirror(
        &self,
        dirs: gpupm_client::mirror::MirrorDirs<'_>,
        generation: u64,
    ) -> std::io::Result<()> {
        let rings = super::mirror::ring_layouts(self.lock().backend.as_mut());
        let mirror = Mirror::create(dirs, generation, &rings)?;
        tracing::info!(path = %mirror.path().display(), "commit mirror created");
        self.set_mirror(mirror);
        Ok(())
    }

    /// The access policy.
    pub fn policy(&self) -> AccessPolicy {
        self.policy
    }

    /// Checks the credentials of one request.
    pub fn check(&self, caller: Caller) -> Result<(), NodeError> {
        self.policy.check(caller)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves the device state as the last
        // completed call left it; serving on is better than wedging the node.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens a handle; its interrupt cursor starts at the next record.
    pub fn open(&self, kind: NodeKind) -> u64 {
        let mut inner = self.lock();
        let cursor = next_seq(inner.backend.as_ref());
        let fh = inner.next_fh;
        inner.next_fh += 1;
        inner.handles.insert(
            fh,
            Handle {
                kind,
                cursor,
                readers: VecDeque::new(),
                waits: Vec::new(),
                poll_wake: None,
            },
        );
        inner.host_request(kind);
        inner.host_handles_changed();
        fh
    }

    /// The host's node started (true) or stopped (false) being served.
    pub fn host_attached(&self, attached: bool) {
        self.lock()
            .backend
            .host_event(HostEvent::Attached(attached));
    }

    /// Closes a handle; a reader still parked on it fails with EINTR.
    pub fn release(&self, fh: u64) {
        let handle = {
            let mut inner = self.lock();
            let handle = inner.handles.remove(&fh);
            inner.host_handles_changed();
            handle
        };
        if let Some(handle) = handle {
            for r in handle.readers {
                (r.complete)(Err(NodeError::Interrupted));
            }
            for w in handle.waits {
                (w.complete)(Err(NodeError::Interrupted));
            }
        }
    }

    /// A read at file offset `offset` of `size` bytes.
    ///
    /// On `card0`: offsets at or above `MEM_WINDOW_OFFSET` read the memory
    /// window; otherwise a 4- or 8-byte read is a register read and a read of
    /// at least one record's size returns interrupt records (the offset is
    /// ignored), waiting for one unless `nonblock`.
    ///
    /// `complete` runs exactly once: now, or for a parked blocking read when
    /// a record arrives, the reader is killed, or the handle is released.
    pub fn read(
        &self,
        fh: u64,
        offset: u64,
        size: u32,
        nonblock: bool,
        pid: u32,
        complete: ReadCompletion,
    ) {
        let mut slot = Some(complete);
        let res = self.read_or_park(fh, offset, size, nonblock, pid, &mut slot);
        self.answer_or_ring(res, slot);
    }

    /// Completes a request answered now (`res`), or, for one that parked
    /// its completion (`None`), rings the reaper's bell.
    fn answer_or_ring<R>(&self, res: Option<R>, slot: Option<Box<dyn FnOnce(R) + Send>>) {
        match (res, slot) {
            (None, _) => self.bell.ring(),
            (Some(res), Some(complete)) => complete(res),
            (Some(_), None) => {}
        }
    }

    /// Answers a read now (`Some`) or parks `slot`'s completion (`None`).
    fn read_or_park(
        &self,
        fh: u64,
        offset: u64,
        size: u32,
        nonblock: bool,
        pid: u32,
        slot: &mut Option<ReadCompletion>,
    ) -> Option<Result<Vec<u8>, NodeError>> {
        let size = size as usize;
        let mut inner = self.lock();
        let Some(kind) = inner.handles.get(&fh).map(|h| h.kind) else {
            return Some(Err(NodeError::NotFound));
        };
        inner.host_request(kind);
        if kind == NodeKind::Card && offset >= MEM_WINDOW_OFFSET {
            let mut buf = vec![0; size];
            let res = inner.backend.read_mem(offset - MEM_WINDOW_OFFSET, &mut buf);
            return Some(res.map(|()| buf).map_err(NodeError::from));
        }
        if size == 4 || size == 8 {
            let res = reg_access(kind, offset, size)
                .and_then(|w| Ok(inner.backend.read_reg(offset, w)?))
                .map(|v| v.to_le_bytes()[..size].to_vec());
            return Some(res);
        }
        if kind != NodeKind::Card || size < RECORD_SIZE {
            return Some(Err(malformed(format!(
                "read of {size} bytes is neither a register nor an interrupt read"
            ))));
        }
        let max_records = size / RECORD_SIZE;
        let inner = &mut *inner;
        let Some(handle) = inner.handles.get_mut(&fh) else {
            return Some(Err(NodeError::NotFound));
        };
        if handle.readers.is_empty() {
            let bytes = take_records(
                inner.backend.as_ref(),
                &mut inner.scratch,
                handle,
                max_records,
            );
            if !bytes.is_empty() {
                return Some(Ok(bytes));
            }
        }
        if nonblock {
            return Some(Err(NodeError::WouldBlock));
        }
        let complete = slot.take()?;
        handle.readers.push_back(ParkedRead {
            ticket: inner.next_ticket,
            pid,
            max_records,
            complete,
        });
        inner.next_ticket += 1;
        inner.host_handles_changed();
        None
    }

    /// A write of `data` at `offset`: one register write of 4 or 8 bytes.
    pub fn write(&self, fh: u64, offset: u64, data: &[u8]) -> Result<u32, NodeError> {
        let res = {
            let mut inner = self.lock();
            let kind = inner.handles.get(&fh).ok_or(NodeError::NotFound)?.kind;
            inner.host_request(kind);
            if kind == NodeKind::Card && offset >= MEM_WINDOW_OFFSET {
                return Err(malformed("the memory window is read-only"));
            }
            let width = reg_access(kind, offset, data.len())?;
            let mut le = [0u8; 8];
            le[..data.len()].copy_from_slice(data);
            let res = inner
                .backend
                .write_reg(offset, width, u64::from_le_bytes(le))
                .map(|()| width);
            inner.mirror_after_request();
            res
        };
        self.deliver();
        Ok(res?)
    }

    /// An ioctl with the argument bytes the kernel copied in.
    pub fn ioctl(
        &self,
        fh: u64,
        cmd: u32,
        input: &[u8],
        out_size: u32,
    ) -> Result<IoctlReply, NodeError> {
        let res = {
            let mut inner = self.lock();
            let kind = inner.handles.get(&fh).ok_or(NodeError::NotFound)?.kind;
            if kind != NodeKind::Card {
                return Err(NodeError::NotOnThisNode("ioctl"));
            }
            inner.host_request(kind);
            if cmd == gpupm_uapi::ioctl::GPUPM_IOC_MIRROR_INFO {
                return Mirror::info(inner.mirror.as_ref(), input);
            }
            let res = ioctl::dispatch(inner.backend.as_mut(), cmd, input, out_size);
            inner.mirror_after_request();
            res
        };
        self.deliver();
        res
    }

    /// An ioctl that may be answered later: `GPUPM_IOC_WAIT_COMMIT` parks
    /// until the device's next periodic commit or its timeout; every other
    /// ioctl is answered now, as [`Self::ioctl`]. `complete` runs exactly
    /// once: now, when the wait is answered, or with EINTR when the waiter
    /// (thread `pid`) is killed or interrupted or the handle released.
    pub fn ioctl_deferred(
        &self,
        fh: u64,
        cmd: u32,
        input: &[u8],
        out_size: u32,
        pid: u32,
        complete: IoctlCompletion,
    ) {
        if cmd != gpupm_uapi::ioctl::GPUPM_IOC_WAIT_COMMIT {
            return complete(self.ioctl(fh, cmd, input, out_size));
        }
        let mut slot = Some(complete);
        let res = self.wait_or_park(fh, input, pid, &mut slot);
        self.answer_or_ring(res, slot);
    }

    /// Answers a wait now (`Some`) or parks `slot`'s completion (`None`).
    fn wait_or_park(
        &self,
        fh: u64,
        input: &[u8],
        pid: u32,
        slot: &mut Option<IoctlCompletion>,
    ) -> Option<Result<IoctlReply, NodeError>> {
        let now = Instant::now();
        let arg = match commit_wait::parse(input) {
            Ok(arg) => arg,
            Err(e) => return Some(Err(e)),
        };
        let mut inner = self.lock();
        let inner = &mut *inner;
        let Some(handle) = inner.handles.get_mut(&fh) else {
            return Some(Err(NodeError::NotFound));
        };
        if handle.kind != NodeKind::Card {
            return Some(Err(NodeError::NotOnThisNode("ioctl")));
        }
        inner.backend.host_event(HostEvent::Request);
        let seq = match commit_wait::sequence(inner.backend.as_mut()) {
            Ok(seq) => seq,
            Err(e) => return Some(Err(e)),
        };
        let deadline = commit_wait::deadline(&arg, now);
        if commit_wait::due(arg.after, seq, deadline, now) {
            return Some(commit_wait::answer(inner.backend.as_mut(), arg, seq));
        }
        let complete = slot.take()?;
        handle.waits.push(ParkedWait {
            ticket: inner.next_ticket,
            pid,
            arg,
            deadline,
            complete,
        });
        inner.next_ticket += 1;
        inner.host_handles_changed();
        None
    }

    /// Poll readiness: `POLLIN` when the handle has unread records, `POLLPRI`
    /// (if asked for) while an unmasked interrupt source is latched. When
    /// nothing is ready and `wake` is given, it runs once when a record arrives.
    pub fn poll(&self, fh: u64, events: u32, wake: Option<PollWake>) -> Result<u32, NodeError> {
        let mut inner = self.lock();
        let next = next_seq(inner.backend.as_ref());
        let pending = inner.backend.interrupt_pending();
        let handle = inner.handles.get_mut(&fh).ok_or(NodeError::NotFound)?;
        if handle.kind != NodeKind::Card {
            return Ok(0);
        }
        let mut revents = 0;
        if handle.cursor < next {
            revents |= (libc::POLLIN | libc::POLLRDNORM) as u32;
        }
        if pending != 0 && events & libc::POLLPRI as u32 != 0 {
            revents |= libc::POLLPRI as u32;
        }
        if revents == 0 {
            if let Some(w) = wake {
                handle.poll_wake = Some(w);
            }
        }
        Ok(revents)
    }

    /// Advances a real-time device to `now` and delivers new records.
    pub fn tick(&self, now: Instant) {
        self.lock().backend.tick(now);
        self.deliver();
    }

    /// Hands new interrupt records to parked readers and wakes pollers.
    pub fn deliver(&self) {
        let mut actions = Vec::new();
        {
            let mut guard = self.lock();
            let inner = &mut *guard;
            let next = next_seq(inner.backend.as_ref());
            let mut readers_served = false;
            for handle in inner.handles.values_mut() {
                if handle.cursor >= next {
                    continue;
                }
                if let Some(w) = handle.poll_wake.take() {
                    actions.push(Action::Wake(w));
                }
                while let Some(r) = handle.readers.front() {
                    let bytes = take_records(
                        inner.backend.as_ref(),
                        &mut inner.scratch,
                        handle,
                        r.max_records,
                    );
                    if bytes.is_empty() {
                        break;
                    }
                    if let Some(r) = handle.readers.pop_front() {
                        actions.push(Action::Complete(r.complete, Ok(bytes)));
                        readers_served = true;
                    }
                }
            }
            if readers_served {
                inner.host_handles_changed();
            }
            answer_waits(inner, &mut actions);
            if let Some(m) = inner.mirror.as_mut() {
                m.publish(inner.backend.as_mut());
            }
        }
        run(actions);
    }

    /// Fails the reads that thread `pid` has parked on handle `fh` with
    /// EINTR: the transport learnt that the reader took a signal (CUSE's
    /// `FUSE_INTERRUPT`). Returns whether one was parked.
    pub fn interrupt_reads(&self, fh: u64, pid: u32) -> bool {
        let (interrupted, waits): (Vec<ParkedRead>, Vec<ParkedWait>) = {
            let mut inner = self.lock();
            let Some(handle) = inner.handles.get_mut(&fh) else {
                return false;
            };
            let (hit, kept): (VecDeque<_>, VecDeque<_>) =
                handle.readers.drain(..).partition(|r| r.pid == pid);
            handle.readers = kept;
            let (waits, kept): (Vec<_>, Vec<_>) =
                handle.waits.drain(..).partition(|w| w.pid == pid);
            handle.waits = kept;
            (hit.into_iter().collect(), waits)
        };
        let any = !interrupted.is_empty() || !waits.is_empty();
        for r in interrupted {
            (r.complete)(Err(NodeError::Interrupted));
        }
        for w in waits {
            (w.complete)(Err(NodeError::Interrupted));
        }
        any
    }
}

/// The node's parked reads and commit waits as the shared reaper sees them.
impl Parking for NodeCore {
    fn parked_batch(&self, after: u64, max: usize) -> (Vec<ParkedRef>, u64) {
        batch_of(&self.lock().handles, after, max, |h: &Handle, out| {
            out.extend(h.readers.iter().map(|r| (r.ticket, r.pid)));
            out.extend(h.waits.iter().map(|w| (w.ticket, w.pid)));
        })
    }

    fn fail_killed(&self, killed: &BTreeMap<u64, BTreeSet<u64>>) {
        let mut actions = Vec::new();
        {
            let mut inner = self.lock();
            for (fh, tickets) in killed {
                let Some(h) = inner.handles.get_mut(fh) else {
                    continue;
                };
                let readers = take_tickets(&mut h.readers, tickets, |r: &ParkedRead| r.ticket);
                actions.extend(
                    readers
                        .into_iter()
                        .map(|r| Action::Complete(r.complete, Err(NodeError::Interrupted))),
                );
                let waits = take_tickets(&mut h.waits, tickets, |w: &ParkedWait| w.ticket);
                actions.extend(
                    waits
                        .into_iter()
                        .map(|w| Action::Answer(w.complete, Err(NodeError::Interrupted))),
                );
            }
        }
        run(actions);
    }

    fn any_parked(&self) -> bool {
        self.lock()
            .handles
            .values()
            .any(|h| !h.readers.is_empty() || !h.waits.is_empty())
    }
}

fn run(actions: Vec<Action>) {
    for a in actions {
        match a {
            Action::Complete(complete, res) => complete(res),
            Action::Answer(complete, res) => complete(res),
            Action::Wake(wake) => wake(),
        }
    }
}

/// Answers the parked waits that are due: a newer periodic commit, or
/// their deadline passed.
fn answer_waits(inner: &mut Inner, actions: &mut Vec<Action>) {
    if inner.handles.values().all(|h| h.waits.is_empty()) {
        return;
    }
    let backend = inner.backend.as_mut();
    let seq = match commit_wait::sequence(backend) {
        Ok(seq) => seq,
        Err(e) => return tracing::warn!(error = %e, "periodic commit count unreadable"),
    };
    let now = Instant::now();
    for handle in inner.handles.values_mut() {
        let (due, kept): (Vec<_>, Vec<_>) = handle
            .waits
            .drain(..)
            .partition(|w| commit_wait::due(w.arg.after, seq, w.deadline, now));
        handle.waits = kept;
        for w in due {
            let reply = commit_wait::answer(backend, w.arg, seq);
            actions.push(Action::Answer(w.complete, reply));
        }
    }
}

fn next_seq(backend: &dyn DeviceBackend) -> u64 {
    backend.interrupts_since(u64::MAX, &mut Vec::new())
}

/// Takes up to `max` records at the handle's cursor and advances it. Records
/// lost to retention are skipped (the reader sees the seq gap).
fn take_records(
    backend: &dyn DeviceBackend,
    scratch: &mut Vec<InterruptRecord>,
    handle: &mut Handle,
    max: usize,
) -> Vec<u8> {
    scratch.clear();
    let next = backend.interrupts_since(handle.cursor, scratch);
    let taken = &scratch[..scratch.len().min(max)];
    match taken.last() {
        Some(last) => handle.cursor = last.seq + 1,
        None => handle.cursor = handle.cursor.max(next),
    }
    taken.as_bytes().to_vec()
}
