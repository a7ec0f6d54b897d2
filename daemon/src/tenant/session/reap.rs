//! Failing parked reads whose process was killed.
//!
//! The kernel keeps a process with a fatal signal pending inside a FUSE
//! read until the request is answered, so the node must notice such a
//! reader itself: `/proc/PID/status` shows SIGKILL pending (a pidfd
//! would only tell that the process exited, which a killed reader cannot
//! do before its read is answered). The reaper thread looks at most
//! [`REAP_BATCH`] parked reads every [`REAP_PERIOD`], round robin over the
//! handles, while any read is parked, and sleeps while none is. The table
//! lock is held only to pick the batch and to take the killed ones out;
//! every `/proc` read happens without it, once per distinct process.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use gpupm_fusemount::procfs::fatal_signal_pending;

use super::{run, Action, Sessions};
use crate::tenant::error::RequestError;

/// How often a batch of parked reads is looked at.
pub const REAP_PERIOD: Duration = Duration::from_millis(100);
/// Most parked reads looked at per period: a killed reader is failed
/// within `parked_reads_total / REAP_BATCH` periods.
pub const REAP_BATCH: usize = 256;

impl Sessions {
    /// A read parked: wake the reaper.
    pub(super) fn now_parked(&self) {
        let mut p = self.parked.lock().unwrap_or_else(|e| e.into_inner());
        p.generation += 1;
        self.parked_bell.notify_all();
    }

    /// Up to `max` parked reads from handle `after` on (wrapping): their
    /// (handle, ticket, pid), and the handle to go on from.
    fn reap_batch(&self, after: u64, max: usize) -> (Vec<(u64, u64, u32)>, u64) {
        let t = self.lock();
        let mut out = Vec::new();
        let mut last = 0;
        let order = t
            .handles
            .range(after.saturating_add(1)..)
            .chain(t.handles.range(..=after));
        for (&fh, h) in order {
            if out.len() >= max {
                break;
            }
            out.extend(h.readers.iter().map(|r| (fh, r.ticket, r.pid)));
            last = fh;
        }
        (out, last)
    }

    /// Fails the parked reads named by (handle, ticket) in `killed`.
    fn fail_reads(&self, killed: &BTreeMap<u64, BTreeSet<u64>>) {
        let mut actions = Vec::new();
        {
            let mut t = self.lock();
            for (fh, tickets) in killed {
                let Some(h) = t.handles.get_mut(fh) else {
                    continue;
                };
                let (dead, alive) = std::mem::take(&mut h.readers)
                    .into_iter()
                    .partition(|r| tickets.contains(&r.ticket));
                h.readers = alive;
                actions.extend(
                    dead.into_iter()
                        .map(|r| Action::Complete(r.complete, Err(RequestError::Interrupted))),
                );
            }
        }
        run(actions);
    }

    /// One period's work: a batch from `cursor` on; answers the next cursor.
    pub(super) fn reap_once(&self, cursor: u64) -> u64 {
        let (batch, next) = self.reap_batch(cursor, REAP_BATCH);
        let pids: BTreeSet<u32> = batch.iter().map(|&(_, _, pid)| pid).collect();
        let dead: BTreeSet<u32> = pids
            .into_iter()
            .filter(|&pid| fatal_signal_pending(pid))
            .collect();
        let mut killed: BTreeMap<u64, BTreeSet<u64>> = BTreeMap::new();
        for (fh, ticket, pid) in batch {
            if dead.contains(&pid) {
                killed.entry(fh).or_default().insert(ticket);
            }
        }
        if !killed.is_empty() {
            self.fail_reads(&killed);
        }
        next
    }

    /// Stops the reaper thread.
    pub(crate) fn stop_reaper(&self) {
        let mut p = self.parked.lock().unwrap_or_else(|e| e.into_inner());
        p.stop = true;
        self.parked_bell.notify_all();
    }

    /// The reaper's loop: until [`Sessions::stop_reaper`].
    fn reap(&self) {
        let mut cursor = 0;
        let mut p = self.parked.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if p.stop {
                return;
            }
            let seen = p.generation;
            if self.bounds.parked_reads() == 0 {
                // Sleep until a read parks (or the stop).
                while p.generation == seen && !p.stop {
                    p = self.parked_bell.wait(p).unwrap_or_else(|e| e.into_inner());
                }
                continue;
            }
            let (guard, _) = self
                .parked_bell
                .wait_timeout_while(p, REAP_PERIOD, |p| !p.stop)
                .unwrap_or_else(|e| e.into_inner());
            if guard.stop {
                return;
            }
            drop(guard);
            cursor = self.reap_once(cursor);
            p = self.parked.lock().unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Starts the reaper thread of `sessions`; it ends after
/// [`Sessions::stop_reaper`].
pub(crate) fn start(sessions: Arc<Sessions>) -> std::io::Result<JoinHandle<()>> {
    thread::Builder::new()
        .name("gpupm-tenant-reaper".into())
        .spawn(move || sessions.reap())
}
