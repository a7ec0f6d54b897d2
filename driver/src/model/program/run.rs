//! One context's execution of its program: the cursor (kernel, block,
//! call stack, loop counters), walked in context cycles, and the exact
//! per-block ledger.
//!
//! The walk depends only on the program, the seed, the context's serial
//! and the (phase, throttle) at each block's start, never on how time is
//! split into spans: a block's successor is chosen lazily, when time moves
//! past its end, so the next block's cycle count is decided in the span
//! that runs it, and a branch's outcome depends only on which visit of the
//! branch block it is ([`draws`]). Within a block of `I` instructions and
//! `C` cycles, `⌊k·I/C⌋` instructions have retired after `k` cycles.
//!
//! At the end of a loop's latch the walk advances whole iterations in
//! aggregate ([`bulk`]), as far as time and the watchers allow; elsewhere
//! it steps block by block ([`walk`]). Both reach the same state.

use gpupm_uapi::ioctl::BlockTruth;

use super::Program;
use crate::scenario::ThrottleWindow;

pub use super::watch::{
    BlockSpan, CallStack, Frame, Path, PathVisit, Quantity, Unwatched, Visit, Watch, Window,
};

mod bulk;
mod composite;
mod draws;
mod walk;

/// What the device knows about the span being run.
#[derive(Clone, Copy, Debug)]
pub struct Env<'a> {
    /// Context cycle at the span start.
    pub ctx_base: u64,
    /// Device cycle at the span start.
    pub dev_base: u64,
    /// The context's profile phase during the span.
    pub phase: usize,
    /// Throttle windows (secondary clock).
    pub throttle: &'a [ThrottleWindow],
    /// Scenario seed.
    pub seed: u64,
}

impl Env<'_> {
    /// Device cycle of context cycle `c` (inside the span).
    #[inline]
    pub fn device_cycle(&self, c: u64) -> u64 {
        self.dev_base + (c - self.ctx_base)
    }

    /// The first context cycle after `c` at which the clock capability can
    /// change (a throttle window starts or ends), or `u64::MAX`.
    pub fn next_throttle_edge(&self, c: u64) -> u64 {
        let t = self.device_cycle(c);
        let edge = self
            .throttle
            .iter()
            .flat_map(|w| [w.start, w.end])
            .filter(|&e| e > t)
            .min();
        edge.map_or(u64::MAX, |e| c + (e - t))
    }

    /// Whether the clock is secondary at context cycle `c`.
    pub fn secondary(&self, c: u64) -> bool {
        let t = self.device_cycle(c);
        self.throttle.iter().any(|w| (w.start..w.end).contains(&t))
    }
}

/// Where a walk stands: the call stack and the block running.
#[derive(Clone, Debug)]
pub(crate) struct Cursor {
    frames: Vec<Frame>,
    block: u16,
    /// Context cycle the block started.
    start: u64,
    /// The block's cycles.
    cycles: u64,
    /// The block's instructions.
    insts: u32,
    /// Context cycles run.
    now: u64,
    /// Loop-counter storage of returned frames, for the next calls.
    spare: Vec<Vec<(u16, u32)>>,
}

/// Ledger row: visits, instructions, cycles.
type Row = [u64; 3];

/// Where a walk stands ahead of the counters of the partition running it
/// (a watched walk is brought up to now whenever time stops; the counters
/// only when something needs them): device cycles, each with the
/// instructions the context had retired by then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ahead {
    /// The counters' position.
    pub counted: (u64, u64),
    /// The last ULC transfer boundary after it that the walk passed.
    pub boundary: Option<(u64, u64)>,
    /// The walk's position.
    pub walked: (u64, u64),
}

/// A context's execution of its program.
#[derive(Clone, Debug)]
pub struct ProgramRun {
    /// Index in the program table.
    pub program: usize,
    serial: u64,
    entered: bool,
    cur: Cursor,
    retired_done: u64,
    branches: u64,
    rows: Vec<Row>,
    /// (instructions, cycles) of the running block that a reset left out
    /// of its row.
    skip: (u64, u64),
    /// Per row, visits that device resets cleared from it (empty until
    /// the first reset): with the row's visits, the lifetime ordinal of
    /// the row's next visit (data addresses, branch outcomes).
    visits_before_reset: Vec<u64>,
    draws: draws::Draws,
    paths: bulk::PathCache,
    composite: composite::CompositeCache,
    /// Set while the walk is ahead of the counters.
    pub ahead: Option<Ahead>,
}

impl ProgramRun {
    /// A context (creation serial `serial`) about to start `program`.
    pub fn new(program: usize, prog: &Program, serial: u64) -> Self {
        ProgramRun {
            program,
            serial,
            entered: false,
            cur: Cursor {
                frames: Vec::with_capacity(crate::scenario::program::CALL_DEPTH),
                block: 0,
                start: 0,
                cycles: 0,
                insts: 0,
                now: 0,
                spare: Vec::new(),
            },
            retired_done: 0,
            branches: 0,
            rows: vec![[0; 3]; prog.rows],
            skip: (0, 0),
            visits_before_reset: Vec::new(),
            draws: draws::Draws::default(),
            paths: bulk::PathCache::default(),
            composite: composite::CompositeCache::default(),
            ahead: None,
        }
    }

    /// Context cycles run so far.
    #[inline]
    pub fn ctx_cycles(&self) -> u64 {
        self.cur.now
    }

    /// Instructions retired so far.
    pub fn retired(&self) -> u64 {
        self.retired_done + self.partial_insts()
    }

    /// Taken branches so far.
    pub fn branches(&self) -> u64 {
        self.branches
    }

    fn partial_insts(&self) -> u64 {
        if !self.entered || self.cur.cycles == 0 {
            return 0;
        }
        (self.cur.now - self.cur.start) * u64::from(self.cur.insts) / self.cur.cycles
    }

    /// Runs `n` context cycles; returns the instructions retired in them.
    pub fn advance(
        &mut self,
        n: u64,
        prog: &Program,
        env: &Env<'_>,
        watch: &mut impl Watch,
    ) -> u64 {
        let before = self.retired();
        let end = self.cur.now + n;
        while self.cur.now < end {
            if !self.entered {
                self.cur.frames.push(Frame::entry(prog.entry));
                self.enter(prog, env, 0);
                self.announce(prog, watch);
            } else if self.cur.now == self.cur.start + self.cur.cycles {
                self.bulk(prog, env, end, watch);
                if watch.passive() && self.cur.now < end {
                    self.bulk_composite(prog, env, end);
                }
                if self.cur.now == end {
                    break;
                }
                self.finish_block(prog, env, watch);
            }
            let stop = end.min(self.cur.start + self.cur.cycles);
            let (kernel, block) = (self.cur.kernel(), self.cur.block);
            watch.ran_block(&BlockSpan {
                from: self.cur.now,
                to: stop,
                kernel,
                block,
                start: self.cur.start,
                cycles: self.cur.cycles,
                instructions: self.cur.insts,
                retired_before: self.retired_done,
                marker: !watch.passive() && prog.block(kernel, block).marker,
            });
            self.cur.now = stop;
        }
        self.retired() - before
    }

    /// Enters block `b` of the current kernel at the current cycle.
    fn enter(&mut self, prog: &Program, env: &Env<'_>, b: u16) {
        let block = prog.block(self.cur.kernel(), b);
        self.entered = true;
        self.cur.block = b;
        self.cur.start = self.cur.now;
        self.cur.cycles = block.cycles_in(env.phase, env.secondary(self.cur.now));
        self.cur.insts = block.instructions;
        self.rows[block.row][0] += 1;
    }

    /// Visits of ledger row `row` over the context's life.
    #[inline]
    fn lifetime_visits(&self, row: usize) -> u64 {
        self.rows[row][0] + self.visits_before_reset.get(row).copied().unwrap_or(0)
    }

    /// Tells `watch` the visit that just started.
    #[inline]
    fn announce(&self, prog: &Program, watch: &mut impl Watch) {
        if watch.passive() {
            return;
        }
        watch.entered(&self.visit(prog), CallStack(&self.cur.frames));
    }

    /// The visit running now.
    fn visit(&self, prog: &Program) -> Visit {
        let (kernel, block) = (self.cur.kernel(), self.cur.block);
        let b = prog.block(kernel, block);
        Visit {
            kernel,
            block,
            start: self.cur.start,
            cycles: self.cur.cycles,
            instructions: self.cur.insts,
            address: b.data.map(|d| d.address(self.lifetime_visits(b.row) - 1)),
        }
    }

    /// Zeroes the per-block ledger (device reset): the running block's
    /// cycles and instructions so far are left out of it.
    pub fn clear_truth(&mut self) {
        self.visits_before_reset.resize(self.rows.len(), 0);
        for (r, before) in self.rows.iter_mut().zip(&mut self.visits_before_reset) {
            *before += r[0];
            *r = [0; 3];
        }
        self.skip = (
            self.partial_insts(),
            self.cur.now - self.cur.start.min(self.cur.now),
        );
    }

    /// The ledger rows of the program, with the running block's partial
    /// execution included.
    pub fn truth(&self, prog: &Program) -> Vec<BlockTruth> {
        let current = self
            .entered
            .then(|| prog.block(self.cur.kernel(), self.cur.block).row);
        self.rows
            .iter()
            .enumerate()
            .map(|(row, r)| {
                let (kernel, block) = prog.row_id(row);
                let (mut insts, mut cycles) = (r[1], r[2]);
                if current == Some(row) {
                    insts += self.partial_insts() - self.skip.0;
                    cycles += self.cur.now - self.cur.start - self.skip.1;
                }
                BlockTruth {
                    kernel,
                    block,
                    reserved: 0,
                    visits: r[0],
                    instructions: insts,
                    cycles,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
