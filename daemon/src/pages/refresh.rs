//! The refresher: a thread that sleeps until a hook marks pages
//! (`events`), reads exactly those pages' block slots and rewrites the
//! pages whose blocks changed; and, every backstop period, reads every
//! page's slot (a full refresh) for whatever bypassed the events. Pages it
//! finds moving are handed to the commit waiter (`commits`) on a real-time
//! clock.
//!
//! A refresh costs device round trips, not work per reader: the slots are
//! read in as few window reads as their offsets allow (VM blocks are
//! consecutive slots, so every VM page is one read). A VM block that went
//! backwards means a device reset: a new generation.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use gpupm_client::cpus::CpuList;
use gpupm_client::ops::{read32, reg32};
use gpupm_client::{DevError, DevNode};
use gpupm_uapi::layout::{BlockSlot, BLOCK_SLOT_SIZE};
use gpupm_uapi::regs::{self as r, trig_ctrl};
use zerocopy::FromBytes;

use super::applied::Applied;
use super::commits::Waiter;
use super::table::{self, Key, Next, Stale};
use super::watch::WATCH_EVERY;
use super::Pages;

/// Gap (bytes) up to which two blocks are read in one window read rather
/// than two: copying it costs less than a round trip.
const MERGE_GAP: u64 = 64 * BLOCK_SLOT_SIZE;
/// Longest single window read.
const MAX_RUN: u64 = 256 * 1024;
/// How long the refresher lets a burst of events gather before it reads
/// the device.
const COALESCE: Duration = Duration::from_millis(5);
/// At most this often a failing refresh is logged.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// What the refresher keeps between refreshes.
#[derive(Debug, Default)]
pub struct State {
    /// Window read buffer, kept across refreshes.
    buf: Vec<u8>,
    /// Pages found moving are followed ([`super::commits`]); off (the
    /// default) on a step clock, whose commits land only when its owner
    /// advances it.
    follow: bool,
}

impl State {
    /// A state that also follows the periodic commits of a real-time
    /// device clock (of `_clock_khz`; the device says when they land).
    pub fn following(_clock_khz: u32) -> Self {
        State {
            buf: Vec::new(),
            follow: true,
        }
    }
}

impl Pages {
    /// Keys and block offsets to read: every page (`all`) or the marked
    /// ones. Clears their marks.
    fn take_wanted(&self, all: bool) -> Vec<(Key, u64)> {
        let mut inner = self.lock();
        let mut out = Vec::new();
        for (key, e) in inner.table.pages.iter_mut() {
            if all || e.dirty {
                e.dirty = false;
                out.push((*key, e.source.block_offset));
            }
        }
        out
    }

    /// Marks `keys` again (their read failed).
    pub(super) fn remark(&self, keys: &[(Key, u64)]) {
        let mut inner = self.lock();
        for (key, _) in keys {
            if let Some(e) = inner.table.pages.get_mut(key) {
                e.dirty = true;
            }
        }
        inner.marks = true;
    }

    /// Folds the blocks read into the pages: which moved, and whether a
    /// VM block went backwards (a device reset), into `out` (cleared
    /// first; the commit waiter keeps one across commits). A commit wait's
    /// reply (`waited`) may be older than what a refresh showed meanwhile:
    /// its blocks that went backwards are skipped.
    pub(super) fn apply<'a>(
        &self,
        blocks: impl IntoIterator<Item = (Key, u64, &'a BlockSlot)>,
        waited: bool,
        out: &mut Applied,
    ) {
        out.reset = false;
        out.moved.clear();
        let mut inner = self.lock();
        let generation = inner.generation;
        for (key, offset, slot) in blocks {
            let Some(e) = inner.table.pages.get_mut(&key) else {
                continue;
            };
            if e.source.block_offset != offset {
                continue;
            }
            let pending = e.rate.is_some() || e.sealed_rate.is_some();
            if !pending && table::shows(key, &e.source, &e.shown, generation, slot) {
                continue;
            }
            let (was, was_generation) = (e.shown.counters.commit_seq, e.shown.counters.generation);
            match table::next_of(key, e, slot) {
                Ok(next) => {
                    let now = match &next {
                        Next::Counters => e.shown.counters.commit_seq,
                        Next::Page(page) => page.counters.commit_seq,
                    };
                    if now > was && was_generation == generation {
                        out.moved.push(key);
                    }
                    match next {
                        Next::Counters => self.show_counters(generation, e),
                        Next::Page(page) => {
                            e.rate = None;
                            e.sealed_rate = None;
                            self.show(generation, e, *page);
                        }
                    }
                }
                Err(Stale::Backwards) if !waited && matches!(key, Key::Vm(_)) => out.reset = true,
                Err(_) => {}
            }
        }
    }

    /// A full refresh: reads every page's block slot and rewrites the
    /// pages whose blocks changed. Returns the window reads made.
    pub fn refresh(&self, state: &mut State) -> Result<usize, DevError> {
        self.refresh_wanted(state, true)
    }

    /// Reads the slots of the pages the hooks marked and rewrites those
    /// that changed. Returns the window reads made (0: nothing marked).
    pub fn refresh_marked(&self, state: &mut State) -> Result<usize, DevError> {
        self.refresh_wanted(state, false)
    }

    fn refresh_wanted(&self, state: &mut State, all: bool) -> Result<usize, DevError> {
        let (reads, applied) = {
            let _reading = self.lock_reading();
            self.read_and_apply(state, all)?
        };
        if state.follow {
            self.follow(&applied.moved);
        }
        Ok(reads)
    }

    fn read_and_apply(&self, state: &mut State, all: bool) -> Result<(usize, Applied), DevError> {
        if all {
            let on = self.trigger_period()?.is_some();
            self.periodic.store(on, Ordering::Release);
        }
        let wanted = self.take_wanted(all);
        if wanted.is_empty() {
            return Ok((0, Applied::default()));
        }
        let (blocks, reads) = match read_blocks(&self.dev, &wanted, &mut state.buf) {
            Ok(r) => r,
            Err(e) => {
                self.remark(&wanted);
                return Err(e);
            }
        };
        let mut applied = Applied::default();
        self.apply(
            blocks.iter().map(|(k, o, s)| (*k, *o, s)),
            false,
            &mut applied,
        );
        if applied.reset {
            self.device_reset();
        }
        self.counters.refreshes.fetch_add(1, Ordering::Relaxed);
        Ok((reads, applied))
    }

    /// `TRIG_PERIOD` while periodic triggers are on.
    fn trigger_period(&self) -> Result<Option<u64>, DevError> {
        let mut ops = [read32(r::TRIG_PERIOD), read32(r::TRIG_CTRL)];
        self.dev.batch(&mut ops)?;
        let on = reg32(ops[1].value) & trig_ctrl::PERIODIC_ENABLE != 0;
        Ok(on.then_some(ops[0].value))
    }
}

/// Block slots read, with the page and offset each was read for.
type Blocks = Vec<(Key, u64, BlockSlot)>;

/// Reads the block slots at the wanted offsets, merging nearby ones into
/// one window read. Returns the slots and the number of reads.
fn read_blocks(
    dev: &DevNode,
    wanted: &[(Key, u64)],
    buf: &mut Vec<u8>,
) -> Result<(Blocks, usize), DevError> {
    let mut sorted = wanted.to_vec();
    sorted.sort_by_key(|&(_, off)| off);
    let mut out = Vec::with_capacity(sorted.len());
    let mut reads = 0;
    for run in runs(&sorted) {
        let (start, end) = (run[0].1, run[run.len() - 1].1 + BLOCK_SLOT_SIZE);
        let len = usize::try_from(end - start).unwrap_or(0);
        buf.resize(len, 0);
        dev.window(start, &mut buf[..len])?;
        reads += 1;
        for &(key, off) in run {
            let at = usize::try_from(off - start).unwrap_or(usize::MAX);
            if let Some(slot) = buf
                .get(at..)
                .and_then(|b| BlockSlot::read_from_prefix(b).ok())
                .map(|(s, _)| s)
            {
                out.push((key, off, slot));
            }
        }
    }
    Ok((out, reads))
}

/// Splits `sorted` (by offset) into runs that one window read covers:
/// gaps of at most [`MERGE_GAP`], at most [`MAX_RUN`] bytes in all.
fn runs(sorted: &[(Key, u64)]) -> Vec<&[(Key, u64)]> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i].1;
        let mut end = start + BLOCK_SLOT_SIZE;
        let mut j = i + 1;
        while j < sorted.len()
            && sorted[j].1 <= end + MERGE_GAP
            && sorted[j].1 + BLOCK_SLOT_SIZE - start <= MAX_RUN
        {
            end = end.max(sorted[j].1 + BLOCK_SLOT_SIZE);
            j += 1;
        }
        out.push(&sorted[i..j]);
        i = j;
    }
    out
}

/// The refresher thread; stops and joins when dropped.
#[derive(Debug)]
pub struct Refresher {
    pages: Arc<Pages>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// The commit waiter, when commits are followed.
    waiter: Option<Waiter>,
}

impl Refresher {
    /// Runs the refresher on a thread of its own, starting from `state`
    /// (the first full refresh's, made before start): a refresh of the
    /// marked pages whenever a hook wakes it, a full refresh when a hook
    /// asks for one and every `backstop`; and, when `state` follows
    /// commits, the commit waiter.
    /// The commit waiter runs on `device_cpus` when given.
    pub fn start(
        pages: Arc<Pages>,
        backstop: Duration,
        mut state: State,
        device_cpus: Option<CpuList>,
    ) -> std::io::Result<Self> {
        let waiter = state
            .follow
            .then(|| Waiter::start(&pages, device_cpus))
            .transpose()?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (pages, stop) = (Arc::clone(&pages), Arc::clone(&stop));
            thread::Builder::new()
                .name("gpupmd-pages".into())
                .spawn(move || run(&pages, backstop, &mut state, &stop))?
        };
        if pages.refresher.set(thread.thread().clone()).is_err() {
            tracing::debug!("a page refresher was already started");
        }
        Ok(Refresher {
            pages,
            stop,
            thread: Some(thread),
            waiter,
        })
    }
}

/// The refresher's loop: a read of the marked pages when a hook wakes it
/// (after letting the burst gather), a full read every `backstop`. (While
/// the commit waiter follows the periodic commits, hooks leave the marked
/// pages to its next wait, and the refresher looks at least every
/// [`WATCH_EVERY`] whether that waiter still gets commits: the
/// watchdog of [`super::watch`].)
fn run(pages: &Pages, backstop: Duration, state: &mut State, stop: &AtomicBool) {
    let mut next_full = Instant::now() + backstop;
    let mut logged: Option<Instant> = None;
    let mut settled = false;
    while !stop.load(Ordering::Acquire) {
        let now = Instant::now();
        let following = pages.following.load(Ordering::Acquire);
        pages.watch.check(following, now);
        if !settled && now < next_full && pages.has_events() {
            // Let the burst that woke us finish (a switch comes with the
            // other partitions' switches and their handshakes, a drain
            // with the other rings'): one refresh for all, and no device
            // round trips racing the handshakes.
            thread::sleep(COALESCE);
            settled = true;
            continue;
        }
        settled = false;
        let wake = pages.take_wake();
        let result = if wake.full || now >= next_full {
            next_full = now + backstop;
            pages.refresh(state)
        } else if wake.pending {
            pages.refresh_marked(state)
        } else {
            // A hook's unpark before this park makes it return at once:
            // no wake-up is lost. While commits are followed the
            // waiter's watchdog needs a look every WATCH_EVERY.
            let until_full = next_full - now;
            thread::park_timeout(if following {
                until_full.min(WATCH_EVERY)
            } else {
                until_full
            });
            continue;
        };
        if let Err(e) = result {
            if logged.is_none_or(|t| t.elapsed() >= LOG_EVERY) {
                tracing::warn!(
                    error = gpupm_fusemount::logging::one_line(e),
                    "refreshing tenant pages failed"
                );
                logged = Some(Instant::now());
            }
        }
    }
}

impl Drop for Refresher {
    fn drop(&mut self) {
        self.waiter = None;
        self.stop.store(true, Ordering::Release);
        self.pages.unpark_now();
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!("the page refresher panicked");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearby_slots_share_a_window_read_and_distant_ones_do_not() {
        let s = BLOCK_SLOT_SIZE;
        let at = |i: u32, off: u64| (Key::Vm(i), off);
        let sorted = [
            at(1, 0),
            at(2, s),
            at(3, 2 * s + MERGE_GAP),
            at(4, 3 * s + 2 * MERGE_GAP + 1),
            at(5, MAX_RUN * 4),
        ];
        let lens: Vec<usize> = runs(&sorted).iter().map(|r| r.len()).collect();
        assert_eq!(lens, [3, 1, 1]);
        let far: Vec<(Key, u64)> = (0..(MAX_RUN / s + 8))
            .map(|i| at(u32::try_from(i).unwrap(), i * s))
            .collect();
        let split = runs(&far);
        assert!(split.len() >= 2, "a run never exceeds MAX_RUN");
        assert!(split
            .iter()
            .all(|r| r[r.len() - 1].1 + s - r[0].1 <= MAX_RUN));
    }
}
