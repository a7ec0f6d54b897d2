//! The marked ranges watching one context's walk: membership per block
//! visit, entries, the event inside, threshold crossings and their records.
//!
//! A range *observes* the block visits a context starts after the range
//! was armed, and only while the walk was watched without a gap. A visit
//! is *inside* a code range when its (kernel, block) lies in the range and
//! the context runs the range's program; inside a data range when it
//! touches an address in the range (and the program matches, if named).
//! An *entry* is an observed visit inside the range whose previous observed
//! visit was outside (or that is the first observed). The residence lasts
//! from the entering visit's start to the start of the next visit outside,
//! in context cycles (a paused or switched-out context runs none).

use gpupm_uapi::intr::{RANGE_IRQ_LATENCY, RANGE_IRQ_LOST};
use gpupm_uapi::ranges::{
    crossing_kind, range_ctrl, range_event, range_flags, RangeRecord, RangeTruth, StackEntry,
    RANGE_RECORD_MAGIC, RANGE_STACK_DEPTH,
};
use gpupm_uapi::sampling::BranchEntry;
use zerocopy::IntoBytes;

mod bulk;

use super::{RangeProg, RangeUnit, RANGES};
use crate::model::cc::VmCipher;
use crate::model::program::run::{CallStack, Env, Visit, Watch, Window};

/// Where a context stands with one range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum State {
    /// No visit observed since the range was armed.
    Unseen,
    /// The last observed visit was outside.
    Out,
    /// Inside since context cycle `since`; `fired` once its latency
    /// crossing was recorded.
    In { since: u64, fired: bool },
}

/// One context's walk state and its exact ledger rows.
#[derive(Clone, Debug)]
pub struct Cursor {
    /// The context's creation serial (a reused id starts afresh).
    pub serial: u64,
    pub(super) program: u32,
    /// Context cycle up to which the walk was watched without a gap.
    pub(super) seen_to: Option<u64>,
    pub(super) visit: Option<Visit>,
    depth: u32,
    stack: [StackEntry; RANGE_STACK_DEPTH],
    pub(super) state: [State; RANGES],
    /// The ledger: per range, entries, count and crossings of this context.
    pub truth: [RangeTruth; RANGES],
}

impl Cursor {
    fn new(serial: u64, program: u32, progs: &[RangeProg; RANGES]) -> Self {
        Cursor {
            serial,
            program,
            seen_to: None,
            visit: None,
            depth: 0,
            stack: [StackEntry::default(); RANGE_STACK_DEPTH],
            state: [State::Unseen; RANGES],
            truth: std::array::from_fn(|i| RangeTruth {
                ctrl: progs[i].ctrl,
                ..RangeTruth::default()
            }),
        }
    }

    /// Range `i` was armed with `ctrl`.
    pub(super) fn rearm(&mut self, i: usize, ctrl: u32) {
        self.state[i] = State::Unseen;
        self.truth[i] = RangeTruth {
            ctrl,
            ..RangeTruth::default()
        };
    }

    /// The walk ran unwatched before `at`: nothing observed carries over.
    fn check_gap(&mut self, at: u64) {
        if self.seen_to != Some(at) {
            self.visit = None;
            self.state = [State::Unseen; RANGES];
        }
    }
}

/// A crossing's record and interrupt, waiting for the device to seal and
/// store the record (the VM's cipher is the device's, shared with the
/// sampling unit watching the same walk).
#[derive(Clone, Debug)]
pub struct Pending {
    record: RangeRecord,
    arg: u32,
    who: u32,
}

impl RangeUnit {
    /// Stores the records the last walk produced (sealed for `vm` through
    /// `cipher` when confidential) and queues their interrupts.
    pub fn flush(&mut self, vm: u32, mut cipher: Option<&mut VmCipher>) {
        for mut p in std::mem::take(&mut self.pending) {
            p.record.seq = self.ring.produced + 1;
            let stored = self
                .ring
                .push(p.record.as_bytes(), vm, cipher.as_deref_mut());
            let arg = if stored {
                p.arg
            } else {
                p.arg | RANGE_IRQ_LOST
            };
            self.events.push((arg, p.who, p.record.cycle));
        }
    }
}

/// A crossing found in a span: (context cycle, range, kind, value).
type Crossing = (u64, usize, u8, u64);

/// The unit watching one context's walk through one span.
#[derive(Debug)]
pub struct RangeWatcher<'a> {
    pub(super) unit: &'a mut RangeUnit,
    ctx: u32,
    vm: u32,
    pub(super) cursor: Option<Cursor>,
    /// The span.
    pub env: Env<'a>,
    confidential: bool,
    found: Vec<Crossing>,
    /// What the ranges make of the window the walk offers now.
    memo: bulk::Memo,
}

impl<'a> RangeWatcher<'a> {
    /// Watches context `ctx` (VM `vm`, creation serial `serial`, program
    /// id `program` = 1 + its table index) on `unit`; a `confidential`
    /// VM's records are sealed when the device flushes them
    /// ([`RangeUnit::flush`]) and its interrupts do not name the context.
    pub fn new(
        unit: &'a mut RangeUnit,
        ids: (u32, u32, u64, u32),
        env: Env<'a>,
        confidential: bool,
    ) -> Self {
        let (ctx, vm, serial, program) = ids;
        let cursor = match unit.cursors.remove(&ctx) {
            Some(c) if c.serial == serial => c,
            _ => Cursor::new(serial, program, &unit.progs),
        };
        RangeWatcher {
            unit,
            ctx,
            vm,
            cursor: Some(cursor),
            env,
            confidential,
            found: Vec::new(),
            memo: bulk::Memo::default(),
        }
    }

    pub(super) fn cursor(&mut self) -> &mut Cursor {
        self.cursor
            .as_mut()
            .expect("a watcher holds its cursor until dropped")
    }

    /// Whether `visit` lies inside range `p` for a context of `program`.
    pub(super) fn inside(p: &RangeProg, program: u32, visit: &Visit) -> bool {
        if p.program() != 0 && p.program() != program {
            return false;
        }
        if p.ctrl & range_ctrl::DATA != 0 {
            return visit
                .address
                .is_some_and(|a| (p.start..=p.end).contains(&a));
        }
        let kernel = u32::from(visit.kernel);
        let block = u32::from(visit.block);
        kernel == p.start >> 16 && (p.start & 0xFFFF..=p.end & 0xFFFF).contains(&block)
    }

    /// Adds `n` events to range `i` ending at context cycle `at`, noting
    /// count crossings; `at_count` maps a count reached to its cycle.
    fn add(&mut self, i: usize, n: u64, at_count: impl Fn(u64) -> u64) {
        if n == 0 {
            return;
        }
        let p = self.unit.progs[i];
        let c = &mut self.unit.counts[i];
        let before = c.count;
        c.count += n;
        let after = c.count;
        if let Some(row) = self.cursor.as_mut().map(|cur| &mut cur.truth[i]) {
            row.count += n;
        }
        if p.ctrl & range_ctrl::COUNT_IRQ == 0 {
            return;
        }
        while c.next <= after {
            let reached = c.next;
            self.found
                .push((at_count(reached - before), i, crossing_kind::COUNT, reached));
            c.next += u64::from(p.threshold);
        }
    }

    /// Writes the records and queues the interrupts of the crossings
    /// found, in cycle order.
    fn emit(&mut self) {
        if self.found.is_empty() {
            return;
        }
        let mut found = std::mem::take(&mut self.found);
        found.sort_unstable_by_key(|&(at, i, _, _)| (at, i));
        for &(at, i, kind, value) in &found {
            self.emit_one(at, i, kind, value);
        }
        found.clear();
        self.found = found;
    }

    fn emit_one(&mut self, at: u64, i: usize, kind: u8, value: u64) {
        let cursor = self.cursor.as_mut().expect("held");
        let visit = cursor.visit.expect("a crossing happens inside a visit");
        cursor.truth[i].crossings += 1;
        let unit = &mut *self.unit;
        let p = unit.progs[i];
        let cycle = self.env.device_cycle(at);
        let rec = RangeRecord {
            magic: RANGE_RECORD_MAGIC,
            partition: u16::try_from(unit.partition).unwrap_or(0),
            range: u8::try_from(i).unwrap_or(0),
            kind,
            vm: self.vm,
            ctx: self.ctx,
            seq: 0,
            cycle,
            ctx_cycle: at,
            value,
            entries: unit.counts[i].entries,
            threshold: p.threshold,
            flags: if self.env.secondary(at) {
                range_flags::SECONDARY_CLOCK
            } else {
                0
            },
            event: u8::try_from(p.event()).unwrap_or(0),
            reserved: 0,
            kernel: visit.kernel,
            block: visit.block,
            depth: cursor.depth,
            stack: cursor.stack,
        };
        let mut arg = u32::try_from(i).unwrap_or(0);
        if kind == crossing_kind::LATENCY {
            arg |= RANGE_IRQ_LATENCY;
        }
        let who = if self.confidential { 0 } else { self.ctx };
        unit.pending.push(Pending {
            record: rec,
            arg,
            who,
        });
    }
}

impl Drop for RangeWatcher<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.cursor.take() {
            self.unit.cursors.insert(self.ctx, c);
        }
    }
}

impl Watch for RangeWatcher<'_> {
    fn entered(&mut self, visit: &Visit, stack: CallStack<'_>) {
        let progs = self.unit.progs;
        let cursor = self.cursor();
        cursor.check_gap(visit.start);
        cursor.seen_to = Some(visit.start);
        cursor.visit = Some(*visit);
        let depth = stack.write(&mut cursor.stack);
        cursor.stack[depth..].fill(StackEntry::default());
        cursor.depth = u32::try_from(depth).unwrap_or(0);
        let program = cursor.program;
        for (i, p) in progs.iter().enumerate() {
            if !p.armed() {
                continue;
            }
            let inside = Self::inside(p, program, visit);
            let cursor = self.cursor();
            match (cursor.state[i], inside) {
                (State::In { .. }, true) => {}
                (_, true) => {
                    cursor.state[i] = State::In {
                        since: visit.start,
                        fired: false,
                    };
                    cursor.truth[i].entries += 1;
                    self.unit.counts[i].entries += 1;
                }
                (_, false) => cursor.state[i] = State::Out,
            }
            if inside && p.event() == range_event::MEMORY && visit.address.is_some() {
                let start = visit.start;
                self.add(i, 1, |_| start);
            }
        }
        self.emit();
    }

    fn ran(&mut self, from: u64, to: u64, _kernel: u16, _block: u16) {
        let cursor = self.cursor();
        cursor.check_gap(from);
        cursor.seen_to = Some(to);
        let Some(v) = cursor.visit else {
            return;
        };
        let progs = self.unit.progs;
        for (i, p) in progs.iter().enumerate() {
            let State::In { since, fired } = self.cursor().state[i] else {
                continue;
            };
            if !p.armed() {
                continue;
            }
            match p.event() {
                range_event::CYCLES => self.add(i, to - from, |need| from + need),
                range_event::INSTRUCTIONS => {
                    let (i_, c_) = (u64::from(v.instructions), v.cycles);
                    let retired = |c: u64| (c - v.start) * i_ / c_;
                    let base = retired(from);
                    // The first cycle at which `base + need` have retired.
                    let at = |need: u64| v.start + ((base + need) * c_).div_ceil(i_);
                    self.add(i, retired(to) - base, at);
                }
                _ => {}
            }
            let latency = u64::from(p.threshold);
            if p.ctrl & range_ctrl::LATENCY_IRQ != 0 && !fired && since + latency <= to {
                // `since + latency > from`: an earlier span would have fired.
                self.cursor().state[i] = State::In { since, fired: true };
                self.found
                    .push((since + latency, i, crossing_kind::LATENCY, latency));
            }
        }
        self.emit();
    }

    fn taken(&mut self, _entry: BranchEntry, _branches: u64) {}

    fn admit(&mut self, window: &Window<'_>) -> u64 {
        self.admit_window(window)
    }

    fn skipped(&mut self, window: &Window<'_>, n: u64, latch: &Visit) {
        self.skip_window(window, n, latch);
    }
}
