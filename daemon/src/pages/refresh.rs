//! The refresher: every period, reads the device blocks behind the
//! published pages and rewrites the pages whose blocks changed.
//!
//! A refresh costs device round trips, not work per reader: one window
//! read covers every VM page (VM blocks are consecutive slots); with
//! context pages published, one register batch (commit count, running
//! context and switch count of each partition) says which context blocks
//! can have changed — the running one, the one switched out since the
//! last refresh, every one of a partition that switched more than once,
//! and those a drained commit named — and those are read in as few window
//! reads as their slots allow. A partition whose commit count went down
//! was reset: a new generation.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use gpupm_client::ops::{read32, read64, reg32};
use gpupm_client::{DevError, DevNode};
use gpupm_uapi::layout::{BlockSlot, BLOCK_SLOT_SIZE};
use gpupm_uapi::regs as r;
use zerocopy::FromBytes;

use super::table::{self, Key, Stale};
use super::Pages;
use crate::view::CtxId;

/// Gap (bytes) up to which two blocks are read in one window read rather
/// than two: copying it costs less than a round trip.
const MERGE_GAP: u64 = 64 * BLOCK_SLOT_SIZE;
/// Longest single window read.
const MAX_RUN: u64 = 256 * 1024;
/// Registers read per partition in the context-targeting batch.
const PART_REGS: usize = 3;
/// At most this often a failing refresh is logged.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// A partition's counters at one refresh.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PartNow {
    /// `PART_COMMIT_SEQ`.
    pub commit_seq: u64,
    /// `PART_CUR_CTX`.
    pub cur_ctx: CtxId,
    /// `PART_SWITCHES`.
    pub switches: u64,
}

/// What the refresher remembers between refreshes.
#[derive(Debug, Default)]
pub struct State {
    parts: BTreeMap<u32, PartNow>,
    /// Window read buffer, kept across refreshes.
    buf: Vec<u8>,
}

/// Which context blocks of one partition to read.
#[derive(Clone, Copy, Debug)]
pub(super) struct PartPlan {
    /// Its commit count moved since the last refresh.
    pub changed: bool,
    /// The running context now.
    pub cur_ctx: CtxId,
    /// The running context at the last refresh, if it was switched out.
    pub switched_out: Option<CtxId>,
    /// Read every context page of the partition (first refresh, or more
    /// than one switch since the last).
    pub all: bool,
}

impl Pages {
    /// Keys and block offsets to read: every VM page, and the context
    /// pages `parts` (or the drain) points at. Clears their dirty marks.
    pub(super) fn plan(&self, parts: &BTreeMap<u32, PartPlan>) -> Vec<(Key, u64)> {
        let mut inner = self.lock();
        let mut out = Vec::new();
        for (key, e) in inner.table.pages.iter_mut() {
            let want = match *key {
                Key::Vm(_) => true,
                Key::Ctx(ctx, _) => {
                    e.dirty
                        || parts.get(&e.source.partition).is_some_and(|p| {
                            p.all || (p.changed && p.cur_ctx == ctx) || p.switched_out == Some(ctx)
                        })
                }
            };
            if want {
                e.dirty = false;
                out.push((*key, e.source.block_offset));
            }
        }
        out
    }

    /// Folds the blocks read into the pages. Returns true when a VM block
    /// went backwards (a device reset).
    pub(super) fn apply(&self, blocks: &[(Key, u64, BlockSlot)]) -> bool {
        let mut inner = self.lock();
        let generation = inner.generation;
        let mut reset = false;
        for (key, offset, slot) in blocks {
            let Some(e) = inner.table.pages.get_mut(key) else {
                continue;
            };
            if e.source.block_offset != *offset {
                continue;
            }
            let pending = e.rate.is_some() || e.sealed_rate.is_some();
            if !pending && table::shows(*key, &e.source, &e.shown, generation, slot) {
                continue;
            }
            match table::with_slot(*key, &e.source, &e.shown, slot) {
                Ok(next) => {
                    let next = table::with_rates(next, e);
                    e.rate = None;
                    e.sealed_rate = None;
                    self.show(generation, e, next);
                }
                Err(Stale::Backwards) if matches!(key, Key::Vm(_)) => reset = true,
                Err(_) => {}
            }
        }
        reset
    }

    /// Partitions of the published pages, and whether any is a context's.
    fn partitions(&self) -> (Vec<u32>, bool) {
        let inner = self.lock();
        let mut parts: Vec<u32> = inner
            .table
            .pages
            .values()
            .map(|e| e.source.partition)
            .collect();
        parts.sort_unstable();
        parts.dedup();
        (parts, inner.table.ctx_count() > 0)
    }

    /// One refresh: reads what may have changed and rewrites the pages
    /// that did. Returns the window reads made.
    pub fn refresh(&self, state: &mut State) -> Result<usize, DevError> {
        let (parts, with_contexts) = self.partitions();
        if parts.is_empty() {
            return Ok(0);
        }
        let plans = if with_contexts {
            let now = read_parts(&self.dev, &parts)?;
            let plans = plan_parts(&state.parts, &now);
            let reset = now.iter().any(|(p, n)| {
                state
                    .parts
                    .get(p)
                    .is_some_and(|o| n.commit_seq < o.commit_seq)
            });
            state.parts = now;
            if reset {
                self.device_reset();
            }
            plans
        } else {
            state.parts.clear();
            BTreeMap::new()
        };
        let wanted = self.plan(&plans);
        let (blocks, reads) = read_blocks(&self.dev, &wanted, &mut state.buf)?;
        if self.apply(&blocks) {
            self.device_reset();
            state.parts.clear();
        }
        self.counters.refreshes.fetch_add(1, Ordering::Relaxed);
        Ok(reads)
    }
}

/// Commit count, running context and switch count of each partition.
fn read_parts(dev: &DevNode, parts: &[u32]) -> Result<BTreeMap<u32, PartNow>, DevError> {
    let mut out = BTreeMap::new();
    let per_batch = gpupm_uapi::ioctl::MAX_BATCH_OPS / PART_REGS;
    for chunk in parts.chunks(per_batch.max(1)) {
        let mut ops: Vec<_> = chunk
            .iter()
            .flat_map(|&p| {
                [
                    read64(r::part(p, r::PART_COMMIT_SEQ)),
                    read32(r::part(p, r::PART_CUR_CTX)),
                    read64(r::part(p, r::PART_SWITCHES)),
                ]
            })
            .collect();
        dev.batch(&mut ops)?;
        for (&p, v) in chunk.iter().zip(ops.chunks_exact(PART_REGS)) {
            out.insert(
                p,
                PartNow {
                    commit_seq: v[0].value,
                    cur_ctx: reg32(v[1].value),
                    switches: v[2].value,
                },
            );
        }
    }
    Ok(out)
}

/// Which contexts of each partition to read, from its counters now and
/// at the last refresh.
fn plan_parts(
    before: &BTreeMap<u32, PartNow>,
    now: &BTreeMap<u32, PartNow>,
) -> BTreeMap<u32, PartPlan> {
    now.iter()
        .map(|(&p, n)| {
            let plan = match before.get(&p) {
                None => PartPlan {
                    changed: true,
                    cur_ctx: n.cur_ctx,
                    switched_out: None,
                    all: true,
                },
                Some(b) => {
                    let switched = n.switches.wrapping_sub(b.switches);
                    PartPlan {
                        changed: n.commit_seq != b.commit_seq,
                        cur_ctx: n.cur_ctx,
                        switched_out: (switched >= 1 && b.cur_ctx != 0).then_some(b.cur_ctx),
                        all: switched >= 2 || n.commit_seq < b.commit_seq,
                    }
                }
            };
            (p, plan)
        })
        .collect()
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
        let len = usize::try_from(end - start).unwrap_or(0);
        buf.resize(len, 0);
        dev.window(start, &mut buf[..len])?;
        reads += 1;
        for &(key, off) in &sorted[i..j] {
            let at = usize::try_from(off - start).unwrap_or(usize::MAX);
            if let Some(slot) = buf
                .get(at..)
                .and_then(|b| BlockSlot::read_from_prefix(b).ok())
                .map(|(s, _)| s)
            {
                out.push((key, off, slot));
            }
        }
        i = j;
    }
    Ok((out, reads))
}

/// The refresher thread; stops and joins when dropped.
#[derive(Debug)]
pub struct Refresher {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Refresher {
    /// Runs [`Pages::refresh`] every `period` on a thread of its own,
    /// starting from `state` (the first refresh's, made before start).
    pub fn start(pages: Arc<Pages>, period: Duration, mut state: State) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = Arc::clone(&stop);
            thread::Builder::new()
                .name("gpupmd-pages".into())
                .spawn(move || {
                    let mut next = Instant::now();
                    let mut logged: Option<Instant> = None;
                    while !stop.load(Ordering::Acquire) {
                        next += period;
                        let now = Instant::now();
                        if next <= now {
                            // Late (a loaded host): refresh now, and keep the
                            // period from here rather than catching up.
                            next = now;
                        } else {
                            thread::park_timeout(next - now);
                            if Instant::now() < next {
                                continue;
                            }
                        }
                        if let Err(e) = pages.refresh(&mut state) {
                            if logged.is_none_or(|t| t.elapsed() >= LOG_EVERY) {
                                tracing::warn!(
                                    error = format!("{:#}", anyhow::Error::new(e)),
                                    "refreshing tenant pages failed"
                                );
                                logged = Some(Instant::now());
                            }
                        }
                    }
                })?
        };
        Ok(Refresher {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Refresher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            if t.join().is_err() {
                tracing::error!("the page refresher panicked");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now(commit_seq: u64, cur_ctx: u32, switches: u64) -> PartNow {
        PartNow {
            commit_seq,
            cur_ctx,
            switches,
        }
    }

    #[test]
    fn the_running_and_the_switched_out_context_are_read_and_two_switches_read_all() {
        let before = BTreeMap::from([(1, now(10, 5, 3)), (2, now(7, 8, 1))]);
        let after = BTreeMap::from([(1, now(12, 6, 4)), (2, now(7, 8, 1)), (3, now(1, 9, 0))]);
        let p = plan_parts(&before, &after);
        assert!(p[&1].changed && p[&1].cur_ctx == 6 && p[&1].switched_out == Some(5));
        assert!(!p[&1].all);
        assert!(!p[&2].changed && p[&2].switched_out.is_none() && !p[&2].all);
        assert!(p[&3].all, "a partition seen first is read whole");
        let twice = BTreeMap::from([(1, now(15, 7, 6))]);
        assert!(plan_parts(&before, &twice)[&1].all);
    }
}
