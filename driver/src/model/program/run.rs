//! One context's execution of its program: the cursor (kernel, block,
//! call stack, loop counters), walked block by block in context cycles,
//! and the exact per-block ledger.
//!
//! The walk depends only on the program, the seed, the context's serial
//! and the (phase, throttle) at each block's start, never on how time is
//! split into spans: a block's successor is chosen lazily, when time moves
//! past its end, so the next block's cycle count is decided in the span
//! that runs it. Within a block of `I` instructions and `C` cycles, `⌊k·I/C⌋`
//! instructions have retired after `k` cycles.
//!
//! This file holds the cursor and its ledger; `walk` chooses successors.

use gpupm_uapi::ioctl::BlockTruth;
use gpupm_uapi::ranges::StackEntry;
use gpupm_uapi::sampling::BranchEntry;

use super::Program;
use crate::scenario::ThrottleWindow;

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

/// One piece of a block's execution inside a span, with what a watcher
/// needs to place instructions and block entries in it.
#[derive(Clone, Copy, Debug)]
pub struct BlockSpan {
    /// The piece is context cycles `(from, to]`.
    pub from: u64,
    /// End of the piece.
    pub to: u64,
    /// Kernel.
    pub kernel: u16,
    /// Block.
    pub block: u16,
    /// Context cycle at which the block started (`from == start` on the
    /// block's first piece: the block was entered at `from`).
    pub start: u64,
    /// The block's cycles.
    pub cycles: u64,
    /// The block's instructions (they retire evenly over its cycles).
    pub instructions: u32,
    /// Instructions the context retired before the block started.
    pub retired_before: u64,
    /// Whether the block is a marker block.
    pub marker: bool,
}

impl BlockSpan {
    /// Instructions the context retired up to context cycle `c` (in
    /// `start..=start + cycles`).
    #[inline]
    pub fn retired_at(&self, c: u64) -> u64 {
        self.retired_before + (c - self.start) * u64::from(self.instructions) / self.cycles.max(1)
    }
}

/// One visit of a block, as it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Visit {
    /// Kernel.
    pub kernel: u16,
    /// Block.
    pub block: u16,
    /// Context cycle the visit starts.
    pub start: u64,
    /// Context cycles the visit takes.
    pub cycles: u64,
    /// Instructions it retires.
    pub instructions: u32,
    /// The data address it touches, if the block touches data.
    pub address: Option<u32>,
}

/// The call stack of a walk, as a watcher sees it.
#[derive(Clone, Copy, Debug)]
pub struct CallStack<'a>(&'a [Frame]);

impl CallStack<'_> {
    /// Calls below the entry kernel.
    pub fn depth(&self) -> usize {
        self.0.len().saturating_sub(1)
    }

    /// Writes the calls, outermost first, into `out`; returns how many.
    pub fn write(&self, out: &mut [StackEntry]) -> usize {
        let mut n = 0;
        for (frame, slot) in self.0.iter().skip(1).zip(out.iter_mut()) {
            let (kernel, return_block) = frame.ret.unwrap_or((0, 0));
            *slot = StackEntry {
                kernel,
                call_block: return_block.wrapping_sub(1),
                return_block,
                callee: frame.kernel,
            };
            n += 1;
        }
        n
    }
}

/// Who watches the walk (the sampling unit, runtime instrumentation, the
/// marked ranges).
pub trait Watch {
    /// A block visit starts; `stack` is the call stack it runs under.
    fn entered(&mut self, _visit: &Visit, _stack: CallStack<'_>) {}
    /// The context ran context cycles `(from, to]` in block `b` of kernel `k`.
    fn ran(&mut self, from: u64, to: u64, k: u16, b: u16);
    /// [`Watch::ran`] with the block's shape; watchers that count
    /// instructions or see block entries override it.
    fn ran_block(&mut self, span: &BlockSpan) {
        self.ran(span.from, span.to, span.kernel, span.block);
    }
    /// A taken branch; `entry.cycle` is the context cycle its target starts.
    fn taken(&mut self, entry: BranchEntry, branches: u64);
    /// Whether the watcher ignores everything (the walk may then skip
    /// whole loop iterations in closed form).
    fn passive(&self) -> bool {
        false
    }
}

/// Watches nothing.
#[derive(Debug)]
pub struct Unwatched;

impl Watch for Unwatched {
    #[inline]
    fn ran(&mut self, _: u64, _: u64, _: u16, _: u16) {}
    #[inline]
    fn taken(&mut self, _: BranchEntry, _: u64) {}
    fn passive(&self) -> bool {
        true
    }
}

/// A call frame.
#[derive(Clone, Debug)]
pub struct Frame {
    kernel: u16,
    /// Where the caller continues (kernel, block); `None` for the entry.
    ret: Option<(u16, u16)>,
    /// Loop counters: (latch block, back edges left).
    loops: Vec<(u16, u32)>,
}

/// Ledger row: visits, instructions, cycles.
type Row = [u64; 3];

/// A context's execution of its program.
#[derive(Clone, Debug)]
pub struct ProgramRun {
    /// Index in the program table.
    pub program: usize,
    serial: u64,
    entered: bool,
    block: u16,
    block_start: u64,
    block_cycles: u64,
    block_insts: u32,
    now: u64,
    retired_done: u64,
    frames: Vec<Frame>,
    draws: u64,
    branches: u64,
    rows: Vec<Row>,
    /// (instructions, cycles) of the running block that a reset left out
    /// of its row.
    skip: (u64, u64),
    /// Per row, visits that device resets cleared from it (empty until
    /// the first reset): with the row's visits, the data-address ordinal.
    visits_before_reset: Vec<u64>,
}

/// Random-draw domain of branch decisions.
const BRANCH_DOMAIN: u64 = 0x4252_414E;

impl ProgramRun {
    /// A context (creation serial `serial`) about to start `program`.
    pub fn new(program: usize, prog: &Program, serial: u64) -> Self {
        ProgramRun {
            program,
            serial,
            entered: false,
            block: 0,
            block_start: 0,
            block_cycles: 0,
            block_insts: 0,
            now: 0,
            retired_done: 0,
            frames: Vec::with_capacity(crate::scenario::program::CALL_DEPTH),
            draws: 0,
            branches: 0,
            rows: vec![[0; 3]; prog.rows],
            visits_before_reset: Vec::new(),
            skip: (0, 0),
        }
    }

    /// Context cycles run so far.
    #[inline]
    pub fn ctx_cycles(&self) -> u64 {
        self.now
    }

    /// Taken branches so far.
    #[inline]
    pub fn branches(&self) -> u64 {
        self.branches
    }

    /// Instructions retired so far.
    pub fn retired(&self) -> u64 {
        self.retired_done + self.partial_insts()
    }

    fn partial_insts(&self) -> u64 {
        if !self.entered || self.block_cycles == 0 {
            return 0;
        }
        (self.now - self.block_start) * u64::from(self.block_insts) / self.block_cycles
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
        let end = self.now + n;
        while self.now < end {
            if !self.entered {
                self.frames.push(Frame {
                    kernel: prog.entry,
                    ret: None,
                    loops: Vec::new(),
                });
                self.enter(prog, env, 0);
                self.announce(prog, watch);
            } else if self.now == self.block_start + self.block_cycles {
                if watch.passive() {
                    self.skip_iterations(prog, env, end);
                }
                if self.now == end {
                    break;
                }
                self.finish_block(prog, env, watch);
            }
            let stop = end.min(self.block_start + self.block_cycles);
            let (kernel, block) = (self.kernel(), self.block);
            watch.ran_block(&BlockSpan {
                from: self.now,
                to: stop,
                kernel,
                block,
                start: self.block_start,
                cycles: self.block_cycles,
                instructions: self.block_insts,
                retired_before: self.retired_done,
                marker: !watch.passive() && prog.block(kernel, block).marker,
            });
            self.now = stop;
        }
        self.retired() - before
    }

    #[inline]
    fn kernel(&self) -> u16 {
        self.frames.last().map_or(0, |f| f.kernel)
    }

    /// Enters block `b` of the current kernel at the current cycle.
    fn enter(&mut self, prog: &Program, env: &Env<'_>, b: u16) {
        let block = prog.block(self.kernel(), b);
        let table = if env.secondary(self.now) {
            &block.throttled
        } else {
            &block.cycles
        };
        self.entered = true;
        self.block = b;
        self.block_start = self.now;
        self.block_cycles = table[env.phase % table.len()];
        self.block_insts = block.instructions;
        self.rows[block.row][0] += 1;
    }

    /// Visits of ledger row `row` over the context's life.
    fn lifetime_visits(&self, row: usize) -> u64 {
        self.rows[row][0] + self.visits_before_reset.get(row).copied().unwrap_or(0)
    }

    /// Tells `watch` the visit that just started.
    #[inline]
    fn announce(&self, prog: &Program, watch: &mut impl Watch) {
        if watch.passive() {
            return;
        }
        let (kernel, block) = (self.kernel(), self.block);
        let b = prog.block(kernel, block);
        let visit = Visit {
            kernel,
            block,
            start: self.block_start,
            cycles: self.block_cycles,
            instructions: self.block_insts,
            address: b.data.map(|d| d.address(self.lifetime_visits(b.row) - 1)),
        };
        watch.entered(&visit, CallStack(&self.frames));
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
            self.now - self.block_start.min(self.now),
        );
    }

    /// The ledger rows of the program, with the running block's partial
    /// execution included.
    pub fn truth(&self, prog: &Program) -> Vec<BlockTruth> {
        let current = self
            .entered
            .then(|| prog.block(self.kernel(), self.block).row);
        self.rows
            .iter()
            .enumerate()
            .map(|(row, r)| {
                let (kernel, block) = prog.row_id(row);
                let (mut insts, mut cycles) = (r[1], r[2]);
                if current == Some(row) {
                    insts += self.partial_insts() - self.skip.0;
                    cycles += self.now - self.block_start - self.skip.1;
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
