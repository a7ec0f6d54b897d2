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
//! The switch hook runs on the interrupt thread, whose handshakes race the
//! device's fallback timeout: it never takes the page table's lock (whose
//! holder may be preempted on a loaded host) but leaves the switch in a
//! per-partition atomic that the refresher collects, and unparks it.
//!
//! Retirements publish the persisted final totals directly. What bypasses
//! these events is caught by the backstop, a full refresh every
//! `[pages] backstop_ms` (docs/pages.md).
//!
//! [`Entry::dirty`]: super::table::Entry::dirty

use std::sync::atomic::{AtomicU64, Ordering};

use gpupm_uapi::layout::StreamSlot;
use gpupm_uapi::regs::MAX_PARTITION_SLOTS;
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

/// A partition's switch not yet collected by the refresher: set.
const SWITCH_PENDING: u64 = 1 << 32;
/// The low 32 bits are the incoming context.
const SWITCH_KNOWN: u64 = 1 << 33;
/// More than one switch since the refresher last looked: the contexts
/// switched out in between are not known.
const SWITCH_MISSED: u64 = 1 << 34;

/// Switches the interrupt thread left for the refresher, by partition slot.
#[derive(Debug, Default)]
pub struct Switches([AtomicU64; MAX_PARTITION_SLOTS as usize]);

impl Pages {
    /// Marks `inner`'s wake-up as pending and wakes the refresher.
    pub(super) fn wake(&self, inner: &mut Inner) {
        inner.wake.pending = true;
        inner.marks = true;
        self.unpark();
    }

    /// Wakes the refresher thread (a no-op before it starts: it looks at
    /// what is pending before it first parks), unless the commit waiter
    /// follows the periodic commits: then its next wait, at most a period
    /// away, takes the marked pages, and a wake-up per hook would only cost
    /// CPU. (When it stops following, it wakes the refresher.)
    pub(super) fn unpark(&self) {
        if !self.following.load(Ordering::Acquire) {
            self.unpark_now();
        }
    }

    /// Wakes the refresher thread whatever it does.
    pub(super) fn unpark_now(&self) {
        if let Some(t) = self.refresher.get() {
            t.unpark();
        }
    }

    /// Asks for a full refresh: every page is read.
    pub fn refresh_all(&self) {
        let mut inner = self.lock();
        inner.wake.full = true;
        self.wake(&mut inner);
    }

    /// Whether a hook asked for anything since the refresher last looked.
    pub(super) fn has_events(&self) -> bool {
        self.switches
            .0
            .iter()
            .any(|s| s.load(Ordering::Acquire) != 0)
            || {
                let inner = self.lock();
                inner.wake.pending || inner.wake.full
            }
    }

    /// What the hooks asked since the refresher last looked, switches
    /// included (their pages are marked now); clears it.
    pub(super) fn take_wake(&self) -> Wake {
        let mut inner = self.lock();
        self.collect_switches(&mut inner);
        std::mem::take(&mut inner.wake)
    }

    /// Marks the pages of the switches the interrupt thread left (the
    /// refresher's and the commit waiter's first step).
    pub(super) fn collect_switches(&self, inner: &mut Inner) {
        for (p, slot) in (0u32..).zip(&self.switches.0) {
            let v = slot.swap(0, Ordering::AcqRel);
            if v != 0 {
                let known = v & SWITCH_KNOWN != 0 && v & SWITCH_MISSED == 0;
                #[allow(clippy::cast_possible_truncation)] // the low 32 bits
                let incoming = known.then_some(v as u32);
                self.mark_switch(inner, p, incoming);
            }
        }
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

    /// Store hook (the interrupt thread): partition `p` committed a switch
    /// (host-driven or by the device's fallback) to `incoming` (`None`: not
    /// known). Lock-free; the refresher marks the pages.
    pub fn switched(&self, p: u32, incoming: Option<CtxId>) {
        let Some(slot) = usize::try_from(p).ok().and_then(|i| self.switches.0.get(i)) else {
            return;
        };
        let v = SWITCH_PENDING | incoming.map_or(0, |c| SWITCH_KNOWN | u64::from(c));
        if slot.swap(v, Ordering::AcqRel) & SWITCH_PENDING != 0 {
            slot.fetch_or(SWITCH_MISSED, Ordering::AcqRel);
        }
        self.unpark();
    }

    /// Marks what partition `p`'s switch to `incoming` changed: its VM
    /// pages and the context switched out, the one the previous switch
    /// brought in (every context page of the partition when not known).
    fn mark_switch(&self, inner: &mut Inner, p: u32, incoming: Option<CtxId>) {
        let outgoing = match incoming {
            Some(ctx) => inner.running.insert(p, ctx),
            None => inner.running.remove(&p),
        };
        self.mark_where(inner, |key, e| {
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
