//! The block-by-block walk: choosing a finished block's successor
//! (branches, jumps, loops, calls, returns) and skipping the iterations of
//! a deterministic loop nothing watches.

use gpupm_uapi::sampling::BranchEntry;

use super::{Env, Frame, ProgramRun, Unwatched, Watch, BRANCH_DOMAIN};
use crate::model::program::{CompiledExit, Program};
use crate::model::rng;

impl ProgramRun {
    /// At the end of a loop latch whose iterations all run the same
    /// blocks, walks one iteration and repeats its effect as many times as
    /// fit before `end`, the next throttle edge and the loop's exit: O(one
    /// iteration) instead of O(iterations), reaching the state the
    /// block-by-block walk reaches (the latch finished, its successor not
    /// chosen yet). Only when nothing watches the walk: samples and branch
    /// records need every step.
    pub(super) fn skip_iterations(&mut self, prog: &Program, env: &Env<'_>, end: u64) {
        let (k, b) = (self.kernel(), self.block);
        if !prog.deterministic_loop(k, b) {
            return;
        }
        let CompiledExit::Loop { trips, .. } = prog.block(k, b).exit else {
            return;
        };
        let left = self.loop_left(b).unwrap_or(trips - 1);
        let until = env.next_throttle_edge(self.now).min(end);
        if left < 3 {
            return;
        }
        // The first iteration books the latch instance that ran before
        // (perhaps in another phase): measure the second one.
        let before = self.clone();
        if !self.walk_iteration(prog, env, until) {
            *self = before;
            return;
        }
        let mid = self.clone();
        if !self.walk_iteration(prog, env, until) {
            *self = mid;
            return;
        }
        let iter = self.now - mid.now;
        let more = u64::from(left - 2).min((until - self.now) / iter);
        for (row, old) in self.rows.iter_mut().zip(&mid.rows) {
            for (x, o) in row.iter_mut().zip(old) {
                *x += more * (*x - o);
            }
        }
        self.retired_done += more * (self.retired_done - mid.retired_done);
        self.branches += more * (self.branches - mid.branches);
        self.now += more * iter;
        self.block_start += more * iter;
        let more32 = u32::try_from(more).unwrap_or(u32::MAX);
        if let Some((_, l)) = self
            .frames
            .last_mut()
            .and_then(|f| f.loops.iter_mut().find(|(l, _)| *l == b))
        {
            *l -= more32;
        }
    }

    /// Walks from the end of the current loop latch to its end in the next
    /// iteration; false if that would run past `until`.
    pub(super) fn walk_iteration(&mut self, prog: &Program, env: &Env<'_>, until: u64) -> bool {
        let (k, b, depth) = (self.kernel(), self.block, self.frames.len());
        loop {
            self.finish_block(prog, env, &mut Unwatched);
            self.now = self.block_start + self.block_cycles;
            if self.now > until {
                return false;
            }
            if self.block == b && self.frames.len() == depth && self.kernel() == k {
                return true;
            }
        }
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

    /// Books the finished block and moves to its successor.
    pub(super) fn finish_block(&mut self, prog: &Program, env: &Env<'_>, watch: &mut impl Watch) {
        let (k, b) = (self.kernel(), self.block);
        let block = prog.block(k, b);
        let row = &mut self.rows[block.row];
        let (skip_i, skip_c) = std::mem::take(&mut self.skip);
        row[1] += u64::from(block.instructions) - skip_i;
        row[2] += self.block_cycles - skip_c;
        self.retired_done += u64::from(block.instructions);
        let (to_k, to_b, taken) = self.successor(prog, env, k, b);
        if taken {
            self.branches += 1;
            let entry = BranchEntry {
                from_kernel: k,
                from_block: b,
                to_kernel: to_k,
                to_block: to_b,
                cycle: self.now,
            };
            watch.taken(entry, self.branches);
        }
        self.enter(prog, env, to_b);
        self.announce(prog, watch);
    }

    /// The next (kernel, block) and whether getting there is a taken branch;
    /// updates the call stack and loop counters.
    pub(super) fn successor(
        &mut self,
        prog: &Program,
        env: &Env<'_>,
        k: u16,
        b: u16,
    ) -> (u16, u16, bool) {
        let len = prog.kernels[usize::from(k)].len();
        let next = b + 1;
        let fall = |run: &mut Self| {
            if usize::from(next) < len {
                (k, next, false)
            } else {
                run.ret(prog)
            }
        };
        match &prog.block(k, b).exit {
            CompiledExit::Fall => fall(self),
            CompiledExit::Branch(edges) => {
                let draw =
                    rng::hash(env.seed, &[BRANCH_DOMAIN, self.serial, self.draws]) & 0xFFFF_FFFF;
                self.draws += 1;
                match edges.iter().find(|&&(_, thr)| draw < thr) {
                    Some(&(to, _)) => (k, to, to != next),
                    None => fall(self),
                }
            }
            CompiledExit::Jump(to) => (k, *to, *to != next),
            CompiledExit::Loop { to, trips } => {
                let frame = self
                    .frames
                    .last_mut()
                    .expect("a running program has a frame");
                let left = match frame.loops.iter().position(|&(l, _)| l == b) {
                    Some(i) => &mut frame.loops[i].1,
                    None => {
                        frame.loops.push((b, trips - 1));
                        &mut frame.loops.last_mut().expect("just pushed").1
                    }
                };
                if *left > 0 {
                    *left -= 1;
                    (k, *to, true)
                } else {
                    frame.loops.retain(|&(l, _)| l != b);
                    fall(self)
                }
            }
            CompiledExit::Call(callee) => {
                self.frames.push(Frame {
                    kernel: *callee,
                    ret: Some((k, next)),
                    loops: Vec::new(),
                });
                (*callee, 0, true)
            }
            CompiledExit::Ret => self.ret(prog),
        }
    }

    /// Returns from the current kernel (relaunching from the entry, or
    /// returning again when the caller's continuation is past its end).
    pub(super) fn ret(&mut self, prog: &Program) -> (u16, u16, bool) {
        loop {
            let frame = self.frames.pop().expect("a running program has a frame");
            match frame.ret {
                None => {
                    self.frames.push(Frame {
                        kernel: prog.entry,
                        ret: None,
                        loops: Vec::new(),
                    });
                    return (prog.entry, 0, true);
                }
                Some((k, b)) if usize::from(b) < prog.kernels[usize::from(k)].len() => {
                    return (k, b, true)
                }
                Some(_) => {}
            }
        }
    }
}
