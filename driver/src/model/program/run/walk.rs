//! The walk block by block: booking a finished block and choosing its
//! successor (branches, jumps, loops, calls, returns).

use gpupm_uapi::sampling::BranchEntry;

use super::{Cursor, Env, Frame, ProgramRun, Watch};
use crate::model::program::{CompiledExit, Program};

/// Where a finished block leads.
#[derive(Clone, Copy, Debug)]
pub(super) struct Step {
    /// Kernel of the successor.
    pub kernel: u16,
    /// The successor.
    pub block: u16,
    /// Whether getting there is a taken branch.
    pub taken: bool,
    /// The fewest frames the stack held on the way (returns pop before a
    /// relaunch pushes).
    pub low: usize,
}

impl Cursor {
    /// The running kernel.
    #[inline]
    pub(super) fn kernel(&self) -> u16 {
        self.frames.last().map_or(0, |f| f.kernel)
    }

    /// Back edges left of the loop whose latch is `b` in the current frame.
    pub(super) fn loop_left(&self, b: u16) -> Option<u32> {
        let frame = self.frames.last()?;
        frame
            .loops
            .iter()
            .find(|&&(l, _)| l == b)
            .map(|&(_, left)| left)
    }

    /// Sets the back edges left of the loop whose latch is `b` in the
    /// current frame.
    pub(super) fn set_loop_left(&mut self, b: u16, left: u32) {
        if let Some(frame) = self.frames.last_mut() {
            match frame.loops.iter_mut().find(|(l, _)| *l == b) {
                Some(l) => l.1 = left,
                None => frame.loops.push((b, left)),
            }
        }
    }

    /// The successor of block `b` of kernel `k`, which just finished;
    /// updates the call stack and loop counters. `branch` gives the edge a
    /// branch block (ledger row, edges) takes, `None` to fall through.
    pub(super) fn successor(
        &mut self,
        prog: &Program,
        k: u16,
        b: u16,
        branch: impl FnOnce(usize, &[(u16, u64)]) -> Option<usize>,
    ) -> Step {
        let len = prog.kernels[usize::from(k)].len();
        let next = b + 1;
        let mut low = self.frames.len();
        let step = |kernel, block, taken, low| Step {
            kernel,
            block,
            taken,
            low,
        };
        let fall = |cur: &mut Self, low: &mut usize| {
            if usize::from(next) < len {
                step(k, next, false, *low)
            } else {
                let (rk, rb) = cur.ret(prog, low);
                step(rk, rb, true, *low)
            }
        };
        let block = prog.block(k, b);
        match &block.exit {
            CompiledExit::Fall => fall(self, &mut low),
            CompiledExit::Branch(edges) => match branch(block.row, edges) {
                Some(e) => {
                    let to = edges[e].0;
                    step(k, to, to != next, low)
                }
                None => fall(self, &mut low),
            },
            CompiledExit::Jump(to) => step(k, *to, *to != next, low),
            CompiledExit::Loop { to, trips } => {
                let left = self.loop_left(b).unwrap_or(trips - 1);
                if left > 0 {
                    self.set_loop_left(b, left - 1);
                    step(k, *to, true, low)
                } else {
                    if let Some(frame) = self.frames.last_mut() {
                        frame.loops.retain(|&(l, _)| l != b);
                    }
                    fall(self, &mut low)
                }
            }
            CompiledExit::Call(callee) => {
                let loops = self.spare.pop().unwrap_or_default();
                self.frames.push(Frame {
                    kernel: *callee,
                    ret: Some((k, next)),
                    loops,
                });
                step(*callee, 0, true, low)
            }
            CompiledExit::Ret => {
                let (rk, rb) = self.ret(prog, &mut low);
                step(rk, rb, true, low)
            }
        }
    }

    /// Returns from the current kernel (relaunching from the entry, or
    /// returning again when the caller's continuation is past its end).
    fn ret(&mut self, prog: &Program, low: &mut usize) -> (u16, u16) {
        loop {
            let mut frame = self.frames.pop().expect("a running program has a frame");
            *low = (*low).min(self.frames.len());
            // Keep the loop counters' storage for the next call.
            let ret = frame.ret;
            frame.loops.clear();
            self.spare.push(std::mem::take(&mut frame.loops));
            match ret {
                None => {
                    let loops = self.spare.pop().unwrap_or_default();
                    self.frames.push(Frame {
                        kernel: prog.entry,
                        ret: None,
                        loops,
                    });
                    return (prog.entry, 0);
                }
                Some((k, b)) if usize::from(b) < prog.kernels[usize::from(k)].len() => {
                    return (k, b)
                }
                Some(_) => {}
            }
        }
    }
}

impl ProgramRun {
    /// Books the finished block and moves to its successor.
    pub(super) fn finish_block(&mut self, prog: &Program, env: &Env<'_>, watch: &mut impl Watch) {
        let (k, b) = (self.cur.kernel(), self.cur.block);
        let block = prog.block(k, b);
        let row = &mut self.rows[block.row];
        let (skip_i, skip_c) = std::mem::take(&mut self.skip);
        row[1] += u64::from(block.instructions) - skip_i;
        row[2] += self.cur.cycles - skip_c;
        self.retired_done += u64::from(block.instructions);
        let key = (env.seed, self.serial);
        let (draws, rows, before) = (&mut self.draws, &self.rows, &self.visits_before_reset);
        let step = self.cur.successor(prog, k, b, |r, edges| {
            // The visit that just finished is the row's latest.
            let visit = rows[r][0] + before.get(r).copied().unwrap_or(0) - 1;
            draws.outcome(key, r, visit, edges)
        });
        if step.taken {
            self.branches += 1;
            let entry = BranchEntry {
                from_kernel: k,
                from_block: b,
                to_kernel: step.kernel,
                to_block: step.block,
                cycle: self.cur.now,
            };
            watch.taken(entry, self.branches);
        }
        self.enter(prog, env, step.block);
        self.announce(prog, watch);
    }
}
