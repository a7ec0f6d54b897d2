//! A control block watching its context's walk through one span, and the
//! tee that lets it watch alongside the partition's sampling unit.

use gpupm_uapi::ri::ri_mode;
use gpupm_uapi::sampling::BranchEntry;

use super::session::{Point, Session};
use crate::model::program::run::{BlockSpan, Env, Quantity, Visit, Watch, Window};
use crate::model::sampling::Watcher;

/// A session watching its context run on partition `partition`.
#[derive(Debug)]
pub struct RiWatcher<'a> {
    /// The session.
    pub session: &'a mut Session,
    /// Partition slot the context runs on.
    pub partition: u32,
    /// The span.
    pub env: Env<'a>,
}

impl RiWatcher<'_> {
    fn point(&self, span: &BlockSpan, c: u64) -> Point {
        Point {
            kernel: span.kernel,
            block: span.block,
            ctx_cycle: c,
            dev_cycle: self.env.device_cycle(c),
            partition: self.partition,
            secondary: self.env.secondary(c),
            retired: span.retired_at(c),
        }
    }

    /// Cycle mode: a sample point every SF context cycles.
    fn cycles(&mut self, span: &BlockSpan) {
        let mut at = span.from;
        while let Some(rest) = self.session.count(span.to - at) {
            at = span.to - rest;
            let p = self.point(span, at);
            self.session.sample(p, false);
        }
    }

    /// Instruction mode: a sample point at the cycle the SF-th instruction
    /// retires (instructions retire evenly over the block's cycles).
    fn instructions(&mut self, span: &BlockSpan) {
        let mut at = span.from;
        let insts = u64::from(span.instructions);
        loop {
            let (done, end) = (span.retired_at(at), span.retired_at(span.to));
            let want = done + self.session.countdown();
            if want > end || insts == 0 {
                self.session.count(end - done);
                return;
            }
            self.session.count(want - done);
            let k = (want - span.retired_before) * span.cycles;
            at = span.start + k.div_ceil(insts);
            let p = self.point(span, at);
            self.session.sample(p, false);
        }
    }
}

impl Watch for RiWatcher<'_> {
    fn ran(&mut self, _: u64, _: u64, _: u16, _: u16) {}

    /// Iterations before the next sample point (and, when marker entries
    /// emit or sample, before the first one).
    fn admit(&mut self, window: &Window<'_>) -> u64 {
        let s = &*self.session;
        let n = if s.markers_observed() {
            window.prefix_below(1, |p| p.markers)
        } else {
            window.len()
        };
        match s.mode() {
            ri_mode::CYCLE => n.min(window.below(Quantity::Cycles, s.countdown())),
            ri_mode::INSTRUCTION => n.min(window.below(Quantity::Instructions, s.countdown())),
            _ => n,
        }
    }

    fn skipped(&mut self, window: &Window<'_>, n: u64, latch: &Visit) {
        let (mut cycles, mut insts, mut markers) = (0, 0, 0);
        window.tally(n, |p, k| {
            cycles += k * p.cycles;
            insts += k * p.instructions;
            markers += k * p.markers;
        });
        self.session.markers_passed(markers);
        let counted = match self.session.mode() {
            ri_mode::CYCLE => self.session.count(cycles),
            ri_mode::INSTRUCTION => self.session.count(insts),
            _ => None,
        };
        debug_assert!(counted.is_none(), "admit keeps sample points out");
        let end = window.start + cycles;
        self.session.last = Point {
            kernel: latch.kernel,
            block: latch.block,
            ctx_cycle: end,
            dev_cycle: self.env.device_cycle(end),
            partition: self.partition,
            secondary: self.env.secondary(end),
            retired: window.retired + insts,
        };
    }

    fn ran_block(&mut self, span: &BlockSpan) {
        if span.marker && span.from == span.start {
            let p = self.point(span, span.from);
            self.session.marker(p);
        }
        match self.session.mode() {
            ri_mode::CYCLE => self.cycles(span),
            ri_mode::INSTRUCTION => self.instructions(span),
            _ => {}
        }
        self.session.last = self.point(span, span.to);
    }

    fn taken(&mut self, _: BranchEntry, _: u64) {}
}

/// The sampling unit and a control block watching one walk.
#[derive(Debug)]
pub struct Tee<'s, 'a> {
    /// The partition's sampling unit, when armed.
    pub samp: Option<&'s mut Watcher<'a>>,
    /// The context's control block, when enabled.
    pub ri: Option<&'s mut RiWatcher<'a>>,
}

impl Watch for Tee<'_, '_> {
    fn ran(&mut self, from: u64, to: u64, k: u16, b: u16) {
        if let Some(w) = self.samp.as_deref_mut() {
            w.ran(from, to, k, b);
        }
    }

    fn ran_block(&mut self, span: &BlockSpan) {
        if let Some(w) = self.samp.as_deref_mut() {
            w.ran_block(span);
        }
        if let Some(w) = self.ri.as_deref_mut() {
            w.ran_block(span);
        }
    }

    fn taken(&mut self, entry: BranchEntry, branches: u64) {
        if let Some(w) = self.samp.as_deref_mut() {
            w.taken(entry, branches);
        }
    }

    fn passive(&self) -> bool {
        self.samp.is_none() && self.ri.is_none()
    }

    fn admit(&mut self, window: &Window<'_>) -> u64 {
        let samp = self
            .samp
            .as_deref_mut()
            .map_or(u64::MAX, |w| w.admit(window));
        let ri = self.ri.as_deref_mut().map_or(u64::MAX, |w| w.admit(window));
        samp.min(ri)
    }

    fn skipped(&mut self, window: &Window<'_>, n: u64, latch: &Visit) {
        if let Some(w) = self.samp.as_deref_mut() {
            w.skipped(window, n, latch);
        }
        if let Some(w) = self.ri.as_deref_mut() {
            w.skipped(window, n, latch);
        }
    }
}
