//! What wakes the refresher: hooks the engine calls when pages' data may
//! have changed, and the wait the refresher runs between refreshes.
//!
//! A hook marks the pages the event can have changed ([`Entry::dirty`])
//! and wakes the refresher, which then reads only those pages' block
//! slots: several events for one page before it runs cost one read, and a
//! page nothing marked is not read. An idle device raises no event, so it
//! costs no refresh at all.
//!
//! | event | pages marked |
//! |---|---|
//! | drained commit records ([`Pages::samples`]) | the record's VM and context instance; every page of a confidential record's VM (its context is inside the ciphertext); every page after records the ring lost |
//! | a switch's commit ([`Pages::switched`]) | the partition's VM pages and the context switched out (every context page of the partition when the one switched out is not known) |
//! | a context destroyed | its page |
//! | a new page | itself (its block may have moved since it was read) |
//! | a device reset, a resynchronisation | every page (a full refresh) |
//!
//! Retirements publish the persisted final totals directly. What bypasses
//! these events is caught by the backstop, a full refresh every
//! `[pages] backstop_ms` (docs/pages.md).
//!
//! [`Entry::dirty`]: super::table::Entry::dirty

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use gpupm_uapi::layout::StreamSlot;
use gpupm_uapi::tenant::RateSample;
use zerocopy::FromBytes;

use super::table::Key;
use super::{Inner, Pages};
use crate::view::{CtxId, DeltaSample};

/// What the hooks asked of the refresher since it last looked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wake {
    /// Some page is marked.
    pub pending: bool,
    /// Read every page (a reset or a resynchronisation).
    pub full: bool,
}

impl Pages {
    /// Wakes the refresher for what `inner` marks.
    pub(super) fn wake(&self, inner: &mut Inner) {
        inner.wake.pending = true;
        self.changed.notify_one();
    }

    /// Asks for a full refresh: every page is read.
    pub fn refresh_all(&self) {
        let mut inner = self.lock();
        inner.wake.full = true;
        self.wake(&mut inner);
    }

    /// Wakes the refresher with nothing to do (so that it sees `stop`).
    pub(super) fn interrupt(&self) {
        let _inner = self.lock();
        self.changed.notify_all();
    }

    /// Waits until a hook wakes the refresher, `until` passes or `stop` is
    /// set; returns (and clears) what the hooks asked.
    pub(super) fn wait_for_events(&self, until: Instant, stop: &AtomicBool) -> Wake {
        let mut inner = self.lock();
        loop {
            if inner.wake.pending || stop.load(Ordering::Acquire) {
                break;
            }
            let Some(left) = until
                .checked_duration_since(Instant::now())
                .filter(|d| !d.is_zero())
            else {
                break;
            };
            inner = match self.changed.wait_timeout(inner, left) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
        std::mem::take(&mut inner.wake)
    }

    /// Marks every page for which `hit` holds; wakes the refresher if any.
    fn mark_where(&self, inner: &mut Inner, hit: impl Fn(Key, &super::table::Entry) -> bool) {
        let mut any = false;
        for (key, e) in inner.table.pages.iter_mut() {
            if hit(*key, e) {
                e.dirty = true;
                any = true;
            }
        }
        if any {
            self.wake(inner);
        }
    }

    /// Store hook: partition `p` committed a switch (host-driven or by the
    /// device's fallback) to `incoming` (`None`: not known). The context
    /// switched out is the one the previous switch brought in.
    pub fn switched(&self, p: u32, incoming: Option<CtxId>) {
        let mut inner = self.lock();
        let outgoing = match incoming {
            Some(ctx) => inner.running.insert(p, ctx),
            None => inner.running.remove(&p),
        };
        self.mark_where(&mut inner, |key, e| {
            e.source.partition == p
                && match key {
                    Key::Vm(_) => true,
                    Key::Ctx(ctx, _) => outgoing.is_none_or(|o| o == ctx),
                }
        });
    }

    /// Store hook: drained commit records. Each plaintext record is the
    /// latest rate sample of its VM's page and of its context instance's
    /// page; a sealed one is the latest sealed stream slot of its VM's
    /// page. The pages they touched are read at the refresher's next
    /// wake-up.
    pub fn samples(&self, samples: &[DeltaSample]) {
        let mut inner = self.lock();
        if inner.table.pages.is_empty() || samples.is_empty() {
            return;
        }
        let mut marked = false;
        for s in samples {
            if s.lost_before > 0 {
                // Records were lost before this one: any page may have moved.
                inner.table.pages.values_mut().for_each(|e| e.dirty = true);
                marked = true;
            }
            if let Some(bytes) = &s.sealed {
                if let Some(e) = inner.table.pages.get_mut(&Key::Vm(s.vm)) {
                    e.sealed_rate = StreamSlot::read_from_bytes(bytes).ok();
                }
                // The context is inside the ciphertext: every page of the VM.
                for e in inner.table.pages.values_mut() {
                    if e.source.vm == s.vm {
                        e.dirty = true;
                        marked = true;
                    }
                }
                continue;
            }
            marked |= note_plain(&mut inner, s);
        }
        if marked {
            self.wake(&mut inner);
        }
    }
}

/// Records plaintext sample `s` as the latest rate of its VM's page and of
/// its context instance's page, and marks both. Returns whether either
/// has a page.
fn note_plain(inner: &mut Inner, s: &DeltaSample) -> bool {
    let rate = RateSample {
        start_cycle: s.start_cycle,
        end_cycle: s.end_cycle,
        flags: u32::from(s.flags),
        ctx: s.ctx,
        deltas: s.deltas,
    };
    let mut marked = false;
    if let Some(e) = inner.table.pages.get_mut(&Key::Vm(s.vm)) {
        e.rate = Some(rate);
        e.dirty = true;
        marked = true;
    }
    if s.ctx == 0 {
        return marked;
    }
    // The instance the commit went to: the newest of the id created at or
    // before the commit.
    let instance = inner
        .table
        .pages
        .range(Key::Ctx(s.ctx, 0)..=Key::Ctx(s.ctx, s.end_cycle))
        .next_back()
        .map(|(k, _)| *k);
    if let Some(e) = instance.and_then(|k| inner.table.pages.get_mut(&k)) {
        if e.source.vm == s.vm {
            e.rate = Some(rate);
            e.dirty = true;
            marked = true;
        }
    }
    marked
}
