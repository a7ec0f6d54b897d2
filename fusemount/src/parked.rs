//! Parked blocking requests and the reaping of killed readers, shared by
//! both nodes (the device node of `gpupm-driver` and the tenant node of
//! `gpupmd`).
//!
//! Neither node ever blocks a FUSE serving thread: a read (or a wait) with
//! nothing to return parks its reply, and whoever makes it answerable
//! completes it. The kernel keeps a process with a fatal signal pending
//! inside such a request until it is answered, so a node must notice a
//! killed reader itself: `/proc/PID/status` shows SIGKILL pending (a pidfd
//! would only tell that the process exited, which a killed reader cannot
//! do before its request is answered).
//!
//! A [`Reaper`] thread does that for a node that implements [`Parking`]:
//! every [`REAP_PERIOD`], while any request is parked, it looks at most
//! [`REAP_BATCH`] of them, round robin over the handles, and sleeps while
//! none is ([`Bell::ring`] wakes it when one parks). The node's lock is
//! held only to pick the batch and to take the killed ones out; every
//! `/proc` read happens without it, once per distinct process, so neither
//! the node's serving threads nor its clock wait on procfs.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::procfs::fatal_signal_pending;

/// How often a batch of parked requests is looked at.
pub const REAP_PERIOD: Duration = Duration::from_millis(100);
/// Most parked requests looked at per period: a killed reader is failed
/// within `parked_total / REAP_BATCH` periods.
pub const REAP_BATCH: usize = 256;

/// A parked request as the reaper sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParkedRef {
    /// The handle it is parked on.
    pub handle: u64,
    /// Names it among the handle's parked requests (unique while the node
    /// runs).
    pub ticket: u64,
    /// The process that made it.
    pub pid: u32,
}

/// A node whose handles park requests.
pub trait Parking: Send + Sync + 'static {
    /// Up to `max` parked requests, from the handle after `after` on
    /// (wrapping round), and the last handle looked at (the next call's
    /// `after`).
    fn parked_batch(&self, after: u64, max: usize) -> (Vec<ParkedRef>, u64);
    /// Fails the parked requests named (handle → tickets) with EINTR; one
    /// answered meanwhile is no longer there and is skipped.
    fn fail_killed(&self, killed: &BTreeMap<u64, BTreeSet<u64>>);
    /// Whether any request is parked.
    fn any_parked(&self) -> bool;
}

/// Up to `max` parked requests of `handles`, from the handle after
/// `after` on (wrapping round), each handle's as `parked` lists them
/// (pushing (ticket, pid) pairs), and the last handle looked at: how a
/// node answers [`Parking::parked_batch`] from its handle table.
pub fn batch_of<H>(
    handles: &BTreeMap<u64, H>,
    after: u64,
    max: usize,
    parked: impl Fn(&H, &mut Vec<(u64, u32)>),
) -> (Vec<ParkedRef>, u64) {
    let mut out = Vec::new();
    let mut pairs = Vec::new();
    let mut last = 0;
    let order = handles
        .range(after.saturating_add(1)..)
        .chain(handles.range(..=after));
    for (&handle, h) in order {
        if out.len() >= max {
            break;
        }
        parked(h, &mut pairs);
        out.extend(pairs.drain(..).map(|(ticket, pid)| ParkedRef {
            handle,
            ticket,
            pid,
        }));
        last = handle;
    }
    (out, last)
}

/// Takes out of `parked` the requests whose ticket (`ticket_of`) is in
/// `tickets`, for the node to fail them; the others stay, in order.
pub fn take_tickets<Q, T>(
    parked: &mut Q,
    tickets: &BTreeSet<u64>,
    ticket_of: impl Fn(&T) -> u64,
) -> Q
where
    Q: Default + IntoIterator<Item = T> + Extend<T>,
{
    let (taken, kept): (Q, Q) = std::mem::take(parked)
        .into_iter()
        .partition(|r| tickets.contains(&ticket_of(r)));
    *parked = kept;
    taken
}

/// One period's work: a batch after handle `cursor`, its processes looked
/// up once each, the killed ones' requests failed. Returns the next cursor.
pub fn reap_once(node: &dyn Parking, cursor: u64) -> u64 {
    let (batch, next) = node.parked_batch(cursor, REAP_BATCH);
    let pids: BTreeSet<u32> = batch.iter().map(|p| p.pid).collect();
    let dead: BTreeSet<u32> = pids
        .into_iter()
        .filter(|&pid| fatal_signal_pending(pid))
        .collect();
    let mut killed: BTreeMap<u64, BTreeSet<u64>> = BTreeMap::new();
    for p in batch.into_iter().filter(|p| dead.contains(&p.pid)) {
        killed.entry(p.handle).or_default().insert(p.ticket);
    }
    if !killed.is_empty() {
        node.fail_killed(&killed);
    }
    next
}

#[derive(Debug, Default)]
struct BellState {
    /// Requests parked so far (a generation).
    rung: u64,
    stop: bool,
}

/// The reaper's doorbell: a node rings it whenever a request parks.
#[derive(Debug, Default)]
pub struct Bell {
    state: Mutex<BellState>,
    cond: Condvar,
    /// The reaper sleeps until a request parks (it found none parked).
    /// A node parks requests all the time (the daemon's interrupt reader
    /// after every batch of records): only this case needs a wake-up, and
    /// the others cost one load.
    idle: AtomicBool,
}

impl Bell {
    /// A request parked: wake the reaper if it sleeps for want of one.
    ///
    /// The reaper sets `idle` before it looks for parked requests under
    /// the node's lock, and a node rings after parking under that lock and
    /// releasing it: either the reaper's look sees the request, or this
    /// load sees `idle`.
    pub fn ring(&self) {
        if !self.idle.load(Ordering::SeqCst) {
            return;
        }
        let mut s = self.lock();
        s.rung += 1;
        self.cond.notify_all();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BellState> {
        // The state is two plain fields, consistent after every update.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn stop(&self) {
        self.lock().stop = true;
        self.cond.notify_all();
    }
}

/// The reaper thread of one node; stopped and joined on drop.
#[derive(Debug)]
pub struct Reaper {
    bell: Arc<Bell>,
    thread: Option<JoinHandle<()>>,
}

impl Reaper {
    /// Starts the thread `name`, reaping `node`, woken by `bell`.
    pub fn start(name: &str, node: Arc<dyn Parking>, bell: Arc<Bell>) -> std::io::Result<Reaper> {
        let thread = {
            let bell = Arc::clone(&bell);
            thread::Builder::new()
                .name(name.into())
                .spawn(move || run(node.as_ref(), &bell))?
        };
        Ok(Reaper {
            bell,
            thread: Some(thread),
        })
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        self.bell.stop();
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!("a reaper thread panicked");
            }
        }
    }
}

/// The reaper's loop: until the bell says stop.
fn run(node: &dyn Parking, bell: &Bell) {
    let mut cursor = 0;
    let mut s = bell.lock();
    loop {
        if s.stop {
            return;
        }
        let seen = s.rung;
        bell.idle.store(true, Ordering::SeqCst);
        if !node.any_parked() {
            // Sleep until a request parks (or the stop).
            while s.rung == seen && !s.stop {
                s = bell.cond.wait(s).unwrap_or_else(|e| e.into_inner());
            }
            bell.idle.store(false, Ordering::SeqCst);
            continue;
        }
        bell.idle.store(false, Ordering::SeqCst);
        let (guard, _) = bell
            .cond
            .wait_timeout_while(s, REAP_PERIOD, |s| !s.stop)
            .unwrap_or_else(|e| e.into_inner());
        if guard.stop {
            return;
        }
        drop(guard);
        cursor = reap_once(node, cursor);
        s = bell.lock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A node with fixed parked requests; records what it was told to fail.
    struct Fake {
        parked: Vec<ParkedRef>,
        failed: Mutex<BTreeMap<u64, BTreeSet<u64>>>,
        any: AtomicBool,
    }

    impl Parking for Fake {
        fn parked_batch(&self, after: u64, max: usize) -> (Vec<ParkedRef>, u64) {
            let mut order: Vec<ParkedRef> = self
                .parked
                .iter()
                .filter(|p| p.handle > after)
                .chain(self.parked.iter().filter(|p| p.handle <= after))
                .copied()
                .collect();
            order.truncate(max);
            let last = order.last().map_or(0, |p| p.handle);
            (order, last)
        }
        fn fail_killed(&self, killed: &BTreeMap<u64, BTreeSet<u64>>) {
            let mut f = self.failed.lock().unwrap();
            for (h, t) in killed {
                f.entry(*h).or_default().extend(t);
            }
        }
        fn any_parked(&self) -> bool {
            self.any.load(Ordering::Relaxed)
        }
    }

    #[test]
    fn only_the_requests_of_killed_or_gone_processes_are_failed() {
        let me = std::process::id();
        // A pid above the kernel's pid_max: no such process, so "gone".
        let gone = 1 << 23;
        let node = Fake {
            parked: vec![
                ParkedRef {
                    handle: 1,
                    ticket: 10,
                    pid: me,
                },
                ParkedRef {
                    handle: 2,
                    ticket: 11,
                    pid: gone,
                },
                ParkedRef {
                    handle: 2,
                    ticket: 12,
                    pid: me,
                },
                ParkedRef {
                    handle: 3,
                    ticket: 13,
                    pid: gone,
                },
            ],
            failed: Mutex::default(),
            any: AtomicBool::new(true),
        };
        let next = reap_once(&node, 0);
        assert_eq!(next, 3);
        let failed = node.failed.lock().unwrap().clone();
        let want: BTreeMap<u64, BTreeSet<u64>> =
            [(2, [11].into()), (3, [13].into())].into_iter().collect();
        assert_eq!(failed, want);
    }

    #[test]
    fn a_batch_goes_round_robin_from_the_handle_after_the_cursor() {
        let handles: BTreeMap<u64, Vec<(u64, u32)>> = (1..=5)
            .map(|h| (h, vec![(10 * h, 7), (10 * h + 1, 8)]))
            .collect();
        let list = |h: &Vec<(u64, u32)>, out: &mut Vec<(u64, u32)>| out.extend(h);
        let (batch, last) = batch_of(&handles, 3, 3, list);
        let tickets: Vec<u64> = batch.iter().map(|p| p.ticket).collect();
        // Handle 4's two, then handle 5's (a handle is never split), then stop.
        assert_eq!((tickets, last), (vec![40, 41, 50, 51], 5));
        let (batch, last) = batch_of(&handles, 5, 100, list);
        assert_eq!((batch.len(), batch[0].handle, last), (10, 1, 5));
    }

    #[test]
    fn take_tickets_takes_the_named_and_keeps_the_rest_in_order() {
        let mut parked = std::collections::VecDeque::from([(1, 'a'), (2, 'b'), (3, 'c'), (4, 'd')]);
        let taken = take_tickets(&mut parked, &[2, 4, 9].into(), |r: &(u64, char)| r.0);
        assert_eq!(taken, [(2, 'b'), (4, 'd')]);
        assert_eq!(parked, [(1, 'a'), (3, 'c')]);
    }

    #[test]
    fn the_reaper_stops_when_dropped_even_while_nothing_is_parked() {
        let node = Arc::new(Fake {
            parked: Vec::new(),
            failed: Mutex::default(),
            any: AtomicBool::new(false),
        });
        let bell = Arc::new(Bell::default());
        let reaper = Reaper::start("test-reaper", node, Arc::clone(&bell)).unwrap();
        bell.ring();
        drop(reaper);
    }
}
