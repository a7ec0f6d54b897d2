//! Following the device's periodic commits: a thread (`gpupmd-commits`)
//! asleep on the doorbell of the device's commit mirror (ABI 1.9,
//! [`mirror`]) that then reads the moving pages' slots from the mirror —
//! no request to the node per commit — or, when the node offers no usable
//! mirror, blocked in `GPUPM_IOC_WAIT_COMMIT` (ABI 1.8) with those slots,
//! which the node answers when the next periodic commit has landed, with
//! the blocks read at that moment. Either way a thread that falls behind
//! gets the latest blocks at once (the doorbell or sequence it last saw is
//! already old), so bursts coalesce.
//!
//! What is followed: every page a refresh found moving (handed over by
//! [`Pages::follow`]); a page is dropped after [`KEY_MISSES`] answers in a
//! row in which it did not move (a partition paused for a switch misses a
//! commit or two; an idle one stops). A wait answered by its timeout means
//! no periodic commit for [`WAIT_TIMEOUT_US`]: following stops until a
//! refresh sees pages move again. So an idle device costs no wait at all.
//! The doorbell is slept on with no timeout (an armed one cost ~1 µs per
//! commit); the refresher's watchdog ([`super::watch`]) ends that sleep
//! when no commit came for its stall time, with the same effect.
//!
//! Pages the hooks mark meanwhile ride in the next wait (plaintext ones, up
//! to the slots left); the rest are left marked and the refresher woken.
//! (A "wait" below is either kind; a mirror wait that times out gives the
//! marks back.)
//!
//! The reply (or the mirror's copy) was read before this thread takes the
//! read lock, so a refresh may have shown a newer block meanwhile: a block
//! older than the page (commit count lower) is skipped here, never taken
//! for a device reset — the refresher, whose reads are ordered by the
//! lock, decides resets. Sealed pages are never waited for (their order cannot be told
//! from ciphertext).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use gpupm_client::cpus::CpuList;
use gpupm_client::mirror::MirrorError;
use gpupm_client::DevError;
use gpupm_uapi::commit_wait::{WaitCommit, WAIT_COMMIT_MAX_BLOCKS};
use gpupm_uapi::ioctl::IOCTL_STRUCT_VERSION;
use gpupm_uapi::layout::{BlockSlot, BLOCK_SLOT_SIZE};
use zerocopy::FromZeros;

use super::applied::Applied;
use super::mirror::{self, Follower, Offer};
use super::table::Key;
use super::Pages;

/// Answers in a row in which a followed page did not move before it is
/// no longer followed.
const KEY_MISSES: u32 = 8;
/// Longest wait: without a periodic commit for this long, following stops.
const WAIT_TIMEOUT_US: u32 = 50_000;
/// At most this often a failing wait is logged.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// The followed pages, each with the answers in a row it did not move.
#[derive(Debug, Default)]
pub(super) struct Followed(BTreeMap<Key, u32>);

impl Followed {
    /// Counts an answer: `moved` pages are followed (again), the others
    /// miss once; those that missed too often are dropped.
    fn answered(&mut self, moved: &[Key]) {
        for n in self.0.values_mut() {
            *n += 1;
        }
        for &k in moved {
            self.0.insert(k, 0);
        }
        self.0.retain(|_, n| *n <= KEY_MISSES);
    }
}

impl Pages {
    /// Refresher hook: `moved` pages' blocks moved; follows them (wakes the
    /// waiter if it was idle).
    pub(super) fn follow(&self, moved: &[Key]) {
        let on = self.periodic.load(Ordering::Acquire) && self.commit_wait.load(Ordering::Acquire);
        if moved.is_empty() || !on {
            return;
        }
        let mut followed = self.lock_followed();
        for &k in moved {
            followed.0.entry(k).or_insert(0);
        }
        self.following.store(true, Ordering::Release);
        drop(followed);
        if let Some(t) = self.waiter.get() {
            t.unpark();
        }
    }

    fn lock_followed(&self) -> std::sync::MutexGuard<'_, Followed> {
        self.followed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stops following; the refresher takes what the hooks mark.
    fn stop_following(&self) {
        self.lock_followed().0.clear();
        self.following.store(false, Ordering::Release);
        self.unpark_now();
    }

    /// The slots to wait for, into `out`: the followed pages' and the
    /// marked plaintext pages' (their marks taken), at most
    /// [`WAIT_COMMIT_MAX_BLOCKS`]. Marked pages that do not fit stay marked
    /// for the refresher. `keys` is scratch space (both reused per commit).
    fn wait_list(&self, keys: &mut Vec<Key>, out: &mut Vec<(Key, u64)>) {
        keys.clear();
        keys.extend(self.lock_followed().0.keys().copied());
        out.clear();
        let mut inner = self.lock();
        self.collect_switches(&mut inner);
        if inner.wake.full {
            self.unpark_now();
        }
        for key in keys.iter() {
            if let Some(e) = inner.table.pages.get_mut(key) {
                if out.len() < WAIT_COMMIT_MAX_BLOCKS && !e.source.confidential {
                    e.dirty = false;
                    out.push((*key, e.source.block_offset));
                }
            }
        }
        let mut left = false;
        if inner.marks {
            for (key, e) in inner.table.pages.iter_mut().filter(|(_, e)| e.dirty) {
                if out.len() < WAIT_COMMIT_MAX_BLOCKS && !e.source.confidential {
                    e.dirty = false;
                    out.push((*key, e.source.block_offset));
                } else {
                    left = true;
                }
            }
            inner.marks = left;
        }
        drop(inner);
        if left {
            self.unpark_now();
        }
    }

    /// Applies a commit's blocks (a wait's reply or the mirror's) and
    /// counts which pages moved (`applied` is scratch space kept across
    /// commits).
    fn apply_commit<'a>(
        &self,
        blocks: impl IntoIterator<Item = (Key, u64, &'a BlockSlot)>,
        applied: &mut Applied,
    ) {
        {
            let _reading = self.lock_reading();
            self.apply(blocks, true, applied);
            self.counters.refreshes.fetch_add(1, Ordering::Relaxed);
        }
        self.watch.applied();
        self.lock_followed().answered(&applied.moved);
    }
}

/// What one followed commit needs besides the pages: the wait's argument
/// and the scratch space kept across commits, so that following a commit
/// allocates nothing.
struct Scratch {
    arg: WaitCommit,
    keys: Vec<Key>,
    wanted: Vec<(Key, u64)>,
    applied: Applied,
}

/// Waits for the next commit with `wanted`'s slots; applies the reply.
/// Returns whether the wait timed out.
fn wait_once(pages: &Pages, s: &mut Scratch) -> Result<bool, DevError> {
    let arg = &mut s.arg;
    arg.count = u32::try_from(s.wanted.len()).unwrap_or(0);
    for (slot, &(_, off)) in arg.slots.iter_mut().zip(&s.wanted) {
        *slot = u32::try_from(off / BLOCK_SLOT_SIZE).unwrap_or(u32::MAX);
    }
    let after = arg.after;
    if let Err(e) = pages.dev.wait_commit(arg) {
        pages.remark(&s.wanted);
        return Err(e);
    }
    let blocks = s.wanted.iter().zip(&arg.blocks);
    pages.apply_commit(
        blocks.map(|(&(key, off), slot)| (key, off, slot)),
        &mut s.applied,
    );
    arg.after = arg.seq;
    Ok(arg.seq == after)
}

/// Waits for the mirror's next commit and applies `wanted`'s slots from
/// it. Returns whether the wait timed out.
fn mirror_once(
    pages: &Pages,
    follower: &mut Follower,
    s: &mut Scratch,
) -> Result<bool, MirrorError> {
    if !follower.next_commit(&pages.watch) {
        pages.remark(&s.wanted);
        return Ok(true);
    }
    let slots = match follower.read(&s.wanted) {
        Ok(slots) => slots,
        Err(e) => {
            pages.remark(&s.wanted);
            return Err(e);
        }
    };
    let blocks = s.wanted.iter().zip(slots);
    pages.apply_commit(
        blocks.map(|(&(key, off), slot)| (key, off, slot)),
        &mut s.applied,
    );
    Ok(false)
}

/// How the commits are followed.
#[derive(Debug)]
enum Via {
    /// Through the device's commit mirror.
    Mirror(Box<Follower>),
    /// With `GPUPM_IOC_WAIT_COMMIT`.
    Wait,
}

/// At a start of following: the mirror if the node offers a usable one
/// (the one in `via` when the node still names it), else the wait.
fn choose(pages: &Pages, via: Via, logged: &mut Option<Instant>) -> Via {
    let current = match via {
        Via::Mirror(f) => Some(f),
        Via::Wait => None,
    };
    let had = current.as_ref().map(|f| f.path());
    let via = choose_via(pages, current, had, logged);
    pages.watch.sleep_on(match &via {
        Via::Mirror(f) => Some(f.mirror()),
        Via::Wait => None,
    });
    via
}

fn choose_via(
    pages: &Pages,
    current: Option<Box<Follower>>,
    had: Option<String>,
    logged: &mut Option<Instant>,
) -> Via {
    match mirror::offer(&pages.mirror, current) {
        Offer::Mirror(f) => {
            if had.as_deref() != Some(&f.path()) {
                tracing::info!(path = %f.path(), "following the device's commits through its mirror");
            }
            Via::Mirror(f)
        }
        Offer::None => Via::Wait,
        Offer::Refused(e) => {
            if logged.is_none_or(|t| t.elapsed() >= LOG_EVERY) {
                tracing::warn!(
                    error = gpupm_fusemount::logging::one_line(e),
                    "the device's commit mirror is refused; following its commits with GPUPM_IOC_WAIT_COMMIT"
                );
                *logged = Some(Instant::now());
            }
            Via::Wait
        }
        Offer::Failed(e) => {
            tracing::debug!(error = %e, "asking for the commit mirror failed");
            Via::Wait
        }
    }
}

/// One commit followed `via`: whether it timed out, or the wait's error.
/// A mirror that fails is dropped for the wait.
fn follow_once(pages: &Pages, via: &mut Via, s: &mut Scratch) -> Result<bool, DevError> {
    let Via::Mirror(follower) = via else {
        return wait_once(pages, s);
    };
    match mirror_once(pages, follower, s) {
        Ok(timed_out) => Ok(timed_out),
        Err(e) => {
            tracing::warn!(
                error = gpupm_fusemount::logging::one_line(e),
                "reading the commit mirror failed; following commits with GPUPM_IOC_WAIT_COMMIT"
            );
            *via = Via::Wait;
            pages.watch.sleep_on(None);
            Ok(true)
        }
    }
}

/// The waiter's loop: parked while nothing is followed, else one wait per
/// periodic commit (on the mirror's doorbell when the node offers one).
fn run(pages: &Pages, stop: &AtomicBool) {
    let mut s = Scratch {
        arg: WaitCommit::new_zeroed(),
        keys: Vec::new(),
        wanted: Vec::new(),
        applied: Applied::default(),
    };
    s.arg.version = IOCTL_STRUCT_VERSION;
    s.arg.timeout_us = WAIT_TIMEOUT_US;
    let mut logged: Option<Instant> = None;
    let mut via = Via::Wait;
    let mut starting = true;
    while !stop.load(Ordering::Acquire) {
        let idle = pages.lock_followed().0.is_empty() || !pages.periodic.load(Ordering::Acquire);
        if idle {
            if pages.following.swap(false, Ordering::AcqRel) {
                pages.unpark_now();
            }
            // A `follow` before this park makes it return at once.
            thread::park();
            starting = true;
            continue;
        }
        if std::mem::take(&mut starting) {
            via = choose(pages, via, &mut logged);
        }
        if !pages.following.swap(true, Ordering::AcqRel) {
            // Following (again) without the refresher having set it (a
            // `follow` that raced `stop_following`): the refresher may be
            // parked until its backstop, and must keep the watchdog.
            pages.unpark_now();
        }
        pages.wait_list(&mut s.keys, &mut s.wanted);
        if s.wanted.is_empty() {
            pages.stop_following();
            continue;
        }
        match follow_once(pages, &mut via, &mut s) {
            Ok(false) => {}
            Ok(true) => pages.stop_following(),
            Err(DevError::Ioctl {
                source: nix::errno::Errno::ENOTTY,
                ..
            }) => {
                tracing::warn!(
                    "the device node has no GPUPM_IOC_WAIT_COMMIT (ABI < 1.8): \
                     pages follow events only"
                );
                pages.commit_wait.store(false, Ordering::Release);
                pages.stop_following();
                return;
            }
            Err(e) => {
                if logged.is_none_or(|t| t.elapsed() >= LOG_EVERY) {
                    tracing::warn!(
                        error = gpupm_fusemount::logging::one_line(e),
                        "waiting for the device's commits failed; pages follow events only"
                    );
                    logged = Some(Instant::now());
                }
                pages.stop_following();
            }
        }
    }
}

/// The waiter thread; stops and joins when dropped (within one wait's
/// timeout).
#[derive(Debug)]
pub(super) struct Waiter {
    pages: Arc<Pages>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Waiter {
    /// Starts the waiter for `pages`, on `cpus` when given.
    pub(super) fn start(pages: &Arc<Pages>, cpus: Option<CpuList>) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (pages, stop) = (Arc::clone(pages), Arc::clone(&stop));
            crate::affinity::spawn_device_thread("gpupmd-commits", cpus, move || {
                run(&pages, &stop)
            })?
        };
        if pages.waiter.set(thread.thread().clone()).is_err() {
            tracing::debug!("a commit waiter was already started");
        }
        Ok(Waiter {
            pages: Arc::clone(pages),
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            // Asleep on the doorbell with no timeout, it may not see one
            // kick (one just before it falls asleep is lost): kick until
            // it is out. (In a wait through the node it leaves within the
            // wait's timeout.)
            while !t.is_finished() {
                self.pages.watch.kick();
                t.thread().unpark();
                thread::sleep(Duration::from_millis(1));
            }
            if t.join().is_err() {
                tracing::error!("the commit waiter panicked");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_that_stop_moving_are_dropped_and_moving_ones_kept() {
        let (a, b) = (Key::Vm(1), Key::Vm(2));
        let mut f = Followed::default();
        f.answered(&[a, b]);
        for _ in 0..KEY_MISSES {
            f.answered(&[b]);
        }
        assert_eq!(
            f.0.keys().copied().collect::<Vec<_>>(),
            [a, b],
            "a missed {KEY_MISSES}: kept"
        );
        f.answered(&[b]);
        assert_eq!(
            f.0.keys().copied().collect::<Vec<_>>(),
            [b],
            "one more: a dropped"
        );
        f.answered(&[a]);
        assert_eq!(f.0.get(&a), Some(&0), "a moved again: followed again");
    }
}
