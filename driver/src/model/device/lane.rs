//! A partition's running program as the counting engines see it: a
//! [`Lane`] that answers how many instructions retire over the cycles
//! being counted by walking the program (with whatever watches it).
//!
//! The walk may run ahead of the counters: a watched partition's walk is
//! brought up to now whenever time stops, so that its records are in the
//! window, while its counters wait until something needs them (a trigger,
//! a handshake step). The batched engine asks for the instructions retired
//! at the last ULC transfer boundary of a span and at its end, so the walk
//! records the instructions at the boundary it passes ahead
//! ([`ProgramRun::ahead`]); a boundary inside the part already walked is
//! always that one (the next lies after the walk's position).

use super::super::ccu::Lane;
use crate::model::ccu::bank::ULC_PERIOD;
use crate::model::program::run::{
    Ahead, BlockSpan, CallStack, Env, ProgramRun, Unwatched, Visit, Watch, Window,
};
use crate::model::program::Program;
use crate::model::ranges::watch::RangeWatcher;
use crate::model::ri::watch::{RiWatcher, Tee};
use crate::model::sampling::Watcher;
use crate::scenario::ThrottleWindow;

/// An environment the lane replaces before every span.
pub(super) fn blank_env() -> Env<'static> {
    Env {
        ctx_base: 0,
        dev_base: 0,
        phase: 0,
        throttle: &[],
        seed: 0,
    }
}

/// A partition's running program, as the counting engines see it.
pub(super) struct ProgLane<'a> {
    run: &'a mut ProgramRun,
    prog: &'a Program,
    phase: usize,
    throttle: &'a [ThrottleWindow],
    seed: u64,
    watcher: Option<Watcher<'a>>,
    ri: Option<RiWatcher<'a>>,
    /// The marked ranges, when armed.
    pub(super) ranges: Option<RangeWatcher<'a>>,
    /// Device cycle the walk stands at.
    walked: u64,
    /// Device cycle and instructions retired at the counters' position.
    counted: (u64, u64),
    /// The last transfer boundary the walk passed ahead of the counters.
    boundary: Option<(u64, u64)>,
}

/// Two watchers on one walk.
struct Both<'x, A, B>(&'x mut A, &'x mut B);

impl<A: Watch, B: Watch> Watch for Both<'_, A, B> {
    fn entered(&mut self, visit: &Visit, stack: CallStack<'_>) {
        self.0.entered(visit, stack);
        self.1.entered(visit, stack);
    }
    fn ran(&mut self, from: u64, to: u64, k: u16, b: u16) {
        self.0.ran(from, to, k, b);
        self.1.ran(from, to, k, b);
    }
    fn ran_block(&mut self, span: &BlockSpan) {
        self.0.ran_block(span);
        self.1.ran_block(span);
    }
    fn taken(&mut self, entry: gpupm_uapi::sampling::BranchEntry, branches: u64) {
        self.0.taken(entry, branches);
        self.1.taken(entry, branches);
    }
    fn admit(&mut self, window: &Window<'_>) -> u64 {
        self.0.admit(window).min(self.1.admit(window))
    }
    fn skipped(&mut self, window: &Window<'_>, n: u64, latch: &Visit) {
        self.0.skipped(window, n, latch);
        self.1.skipped(window, n, latch);
    }
}

/// What watches a walk: the sampling unit, the context's RI session, the
/// partition's ranges.
type Watchers<'a> = (
    Option<Watcher<'a>>,
    Option<RiWatcher<'a>>,
    Option<RangeWatcher<'a>>,
);

impl<'a> ProgLane<'a> {
    /// The lane of `run` (program `prog`) on a partition counted up to
    /// device cycle `synced`, in profile phase `env.0` with throttle
    /// windows `env.1` and scenario seed `env.2`.
    pub(super) fn new(
        run: &'a mut ProgramRun,
        prog: &'a Program,
        synced: u64,
        env: (usize, &'a [ThrottleWindow], u64),
        (watcher, ri, ranges): Watchers<'a>,
    ) -> Self {
        let (counted, boundary, walked) = match run.ahead.take() {
            Some(a) => {
                debug_assert_eq!(a.counted.0, synced, "the counters did not move");
                (a.counted, a.boundary, a.walked.0)
            }
            None => ((synced, run.retired()), None, synced),
        };
        ProgLane {
            run,
            prog,
            phase: env.0,
            throttle: env.1,
            seed: env.2,
            watcher,
            ri,
            ranges,
            walked,
            counted,
            boundary,
        }
    }

    /// Walks `n` context cycles from where the walk stands.
    fn walk(&mut self, n: u64) {
        if n == 0 {
            return;
        }
        let env = Env {
            ctx_base: self.run.ctx_cycles(),
            dev_base: self.walked,
            phase: self.phase,
            throttle: self.throttle,
            seed: self.seed,
        };
        self.walked += n;
        if let Some(w) = self.watcher.as_mut() {
            w.env = env;
        }
        if let Some(w) = self.ri.as_mut() {
            w.env = env;
        }
        if let Some(r) = self.ranges.as_mut() {
            r.env = env;
        }
        let (samp, ri) = (self.watcher.as_mut(), self.ri.as_mut());
        let run = &mut *self.run;
        match (samp, ri, self.ranges.as_mut()) {
            (None, None, None) => run.advance(n, self.prog, &env, &mut Unwatched),
            (Some(w), None, None) => run.advance(n, self.prog, &env, w),
            (None, None, Some(r)) => run.advance(n, self.prog, &env, r),
            (samp, ri, None) => run.advance(n, self.prog, &env, &mut Tee { samp, ri }),
            (samp, ri, Some(r)) => {
                let mut tee = Tee { samp, ri };
                run.advance(n, self.prog, &env, &mut Both(&mut tee, r))
            }
        };
    }

    /// Walks up to device cycle `t` without counting, noting the
    /// instructions retired at the last transfer boundary on the way.
    pub(super) fn walk_to(&mut self, t: u64) {
        if t <= self.walked {
            return;
        }
        let b = t / ULC_PERIOD * ULC_PERIOD;
        if b >= self.walked && b > self.counted.0 {
            self.walk(b - self.walked);
            self.boundary = Some((b, self.run.retired()));
        }
        self.walk(t - self.walked);
    }

    /// Hands the walk's position back to the context's program run.
    pub(super) fn finish(self) {
        if self.walked > self.counted.0 {
            self.run.ahead = Some(Ahead {
                counted: self.counted,
                boundary: self.boundary,
                walked: (self.walked, self.run.retired()),
            });
        }
    }
}

impl Lane for ProgLane<'_> {
    fn run(&mut self, n: u64) -> u64 {
        let target = self.counted.0 + n;
        let retired = if target > self.walked {
            self.walk(target - self.walked);
            self.run.retired()
        } else if target == self.walked {
            self.run.retired()
        } else {
            // Inside the part walked ahead: the boundary it noted.
            match self.boundary {
                Some((b, r)) if b == target => r,
                _ => {
                    debug_assert!(target == self.counted.0, "no record of cycle {target}");
                    self.counted.1
                }
            }
        };
        let done = retired - self.counted.1;
        self.counted = (target, retired);
        done
    }
}
