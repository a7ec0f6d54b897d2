//! Advancing whole loop iterations in aggregate.
//!
//! At the end of a loop's latch, with back edges left, the walk knows
//! which path each of the next iterations takes without walking them: an
//! iteration visits each of the loop's branch points once
//! ([`crate::model::program::LoopInfo`]), and the outcome of each visit is
//! a lane of a 64-visit batch ([`super::draws`]), so the next 64
//! iterations' paths are a handful of mask operations (a loop without
//! branch points takes the same path every time, however many iterations
//! are left). What a path runs — its blocks, cycles, instructions, taken
//! branches and its rows of the per-block ledger — is learned once per
//! loop, profile phase and clock capability, by walking one iteration of
//! it on a copy of the cursor with the branch outcomes forced ([`Path`]).
//! The iterations are then booked in one step per path: counts, not
//! blocks. A path that breaks the rules (visits a point twice or not at
//! all, leaves an inner loop unfinished, runs too long) stops aggregation
//! of the loop; one that leaves the loop ends the window before it.

use gpupm_uapi::sampling::BranchEntry;

use super::draws::{LANES, LANE_SLOTS};
use super::walk::Step;
use super::{CallStack, Cursor, Path, PathVisit, ProgramRun, Visit, Watch, Window};
use crate::model::program::run::Env;
use crate::model::program::watch::{Lanes, Quantity, Sums};
use crate::model::program::{LoopInfo, Program, MAX_PATHS, MAX_POINTS};

/// Most block visits one learned iteration may take.
const MAX_ITERATION_VISITS: usize = 4096;
/// Loops (each under one phase and clock capability) a context keeps
/// learned paths for.
const MAX_LOOPS: usize = 16;

/// Adds `d` to `row`'s entry of a path's ledger rows.
fn add(rows: &mut Vec<(usize, [u64; 3])>, row: usize, d: [u64; 3]) {
    match rows.iter_mut().find(|(r, _)| *r == row) {
        Some((_, x)) => x.iter_mut().zip(d).for_each(|(x, d)| *x += d),
        None => rows.push((row, d)),
    }
}

/// What learning one path found.
pub(super) enum Learned {
    /// A complete iteration.
    Path(Path),
    /// The path leaves the loop.
    Exits,
    /// The loop's iterations cannot be advanced in aggregate.
    Unusable,
}

/// The learned paths of one loop under one phase and clock capability.
#[derive(Clone, Debug)]
pub(super) struct LoopPaths {
    pub(super) latch: usize,
    phase: usize,
    secondary: bool,
    pub(super) usable: bool,
    pub(super) paths: Vec<Option<Path>>,
    pub(super) exits: Vec<bool>,
}

/// A context's learned paths.
#[derive(Clone, Debug, Default)]
pub(super) struct PathCache {
    pub(super) loops: Vec<LoopPaths>,
    evict: usize,
}

impl PathCache {
    /// Whether the loop with latch row `latch` is not known to be
    /// unusable under (phase, capability).
    pub(super) fn usable(&self, latch: usize, phase: usize, secondary: bool) -> bool {
        self.loops
            .iter()
            .find(|l| l.latch == latch && l.phase == phase && l.secondary == secondary)
            .is_none_or(|l| l.usable)
    }

    /// The slot of (latch row, phase, capability), made if new.
    pub(super) fn slot(
        &mut self,
        latch: usize,
        phase: usize,
        secondary: bool,
        paths: usize,
    ) -> usize {
        if let Some(i) = self
            .loops
            .iter()
            .position(|l| l.latch == latch && l.phase == phase && l.secondary == secondary)
        {
            return i;
        }
        let fresh = LoopPaths {
            latch,
            phase,
            secondary,
            usable: true,
            paths: vec![None; paths],
            exits: vec![false; paths],
        };
        if self.loops.len() < MAX_LOOPS {
            self.loops.push(fresh);
            return self.loops.len() - 1;
        }
        let i = self.evict % MAX_LOOPS;
        self.evict += 1;
        self.loops[i] = fresh;
        i
    }
}

impl ProgramRun {
    /// At the end of a loop latch: advances whole iterations of the loop
    /// in aggregate while time before `end` (and before the next throttle
    /// edge) and `watch` allow.
    pub(super) fn bulk(&mut self, prog: &Program, env: &Env<'_>, end: u64, watch: &mut impl Watch) {
        while self.bulk_window(prog, env, end, watch) {}
    }

    /// Advances up to one window of iterations; true if all of it ran and
    /// another may follow.
    fn bulk_window(
        &mut self,
        prog: &Program,
        env: &Env<'_>,
        end: u64,
        watch: &mut impl Watch,
    ) -> bool {
        let (k, b) = (self.cur.kernel(), self.cur.block);
        let Some((head, info)) = prog.latch(k, b) else {
            return false;
        };
        let latch = prog.block(k, b);
        let crate::model::program::CompiledExit::Loop { trips, .. } = latch.exit else {
            return false;
        };
        let left = u64::from(self.cur.loop_left(b).unwrap_or(trips - 1));
        let now = self.cur.now;
        let until = env.next_throttle_edge(now).min(end);
        if left == 0 || until <= now || self.skip != (0, 0) {
            return false;
        }
        // Every block of the window starts before `until`, at the
        // capability and in the phase the latch before it ran in.
        let secondary = env.secondary(now);
        if self.cur.cycles != latch.cycles_in(env.phase, secondary) {
            return false;
        }
        let slot = self.paths.slot(latch.row, env.phase, secondary, info.paths);
        if !self.paths.loops[slot].usable {
            return false;
        }
        let passive = watch.passive();
        let each = !info.points.is_empty();
        // Watchers look at windows iteration by iteration: at most 64.
        let offered = if each || !passive {
            left.min(LANES)
        } else {
            left
        };
        // Per path, the lanes (iterations of the window) that take it.
        let mut masks = [0u64; MAX_PATHS];
        if each {
            self.path_masks(prog, env.seed, info, 0, &mut masks);
            if offered < LANES {
                masks.iter_mut().for_each(|m| *m &= (1 << offered) - 1);
            }
        } else {
            masks[0] = 1;
        }
        let Some(exits) =
            self.learn_present(prog, env.phase, secondary, (head, info), slot, &masks)
        else {
            self.paths.loops[slot].usable = false;
            return false;
        };
        // Up to the first iteration that leaves the loop.
        let mut n = offered;
        if exits != 0 {
            let lanes = masks
                .iter()
                .enumerate()
                .filter(|&(c, _)| exits >> c & 1 == 1)
                .fold(0, |acc, (_, m)| acc | m);
            n = if each {
                u64::from(lanes.trailing_zeros())
            } else {
                0
            };
        }
        let counts = |take: u64| {
            let mut counts = [0u64; MAX_PATHS];
            if each {
                let keep = if take >= LANES { !0 } else { (1 << take) - 1 };
                for (c, m) in counts.iter_mut().zip(&masks).take(info.paths) {
                    *c = u64::from((m & keep).count_ones());
                }
            } else {
                counts[0] = take;
            }
            counts
        };
        if n == 0 {
            return false;
        }
        let lp = &self.paths.loops[slot];
        let totals = |counts: &[u64; MAX_PATHS]| {
            let (mut cycles, mut latch_visits) = (0, 0);
            for (p, &c) in lp.paths.iter().zip(counts).filter(|(_, &c)| c > 0) {
                let p = p.as_ref().expect("a path of the window");
                cycles += c * p.cycles;
                latch_visits += c * p
                    .rows
                    .iter()
                    .find(|(r, _)| *r == latch.row)
                    .map_or(0, |(_, d)| d[0]);
            }
            (cycles, latch_visits)
        };
        let mut counted = counts(n);
        let late = totals(&counted).0 > until - now;
        // Which path each iteration takes, when something looks at them
        // one by one.
        let mut lanes = [0u8; LANE_SLOTS];
        if each && (!passive || exits != 0 || late) {
            for (c, &m) in masks.iter().enumerate().take(info.paths) {
                let mut m = m;
                while m != 0 {
                    // Fewer than MAX_PATHS paths: the number fits a u8.
                    lanes[m.trailing_zeros() as usize] = u8::try_from(c).unwrap_or(0);
                    m &= m - 1;
                }
            }
        }
        let sums = (each && !passive)
            .then(|| Sums::new(&lanes[..usize::try_from(n).unwrap_or(0)], &lp.paths));
        let retired = self.retired();
        let ProgramRun {
            rows,
            visits_before_reset,
            cur,
            branches,
            ..
        } = &*self;
        let window = Window {
            start: now,
            retired,
            branches: *branches,
            stack: CallStack(&cur.frames),
            lanes: if each {
                Lanes::Each(&lanes[..usize::try_from(n).unwrap_or(0)])
            } else {
                Lanes::Same(n)
            },
            paths: &lp.paths,
            sums: sums.as_ref(),
            rows,
            before_reset: visits_before_reset,
        };
        let mut take = n;
        if late {
            take = window.below(Quantity::Cycles, until - now + 1);
        }
        if !passive {
            take = take.min(watch.admit(&window));
        }
        if take == 0 {
            return false;
        }
        if take < n {
            counted = counts(take);
        }
        let (cycles, latch_visits) = totals(&counted);
        if !passive {
            let ordinal = window.visits_before(latch.row) + latch_visits - 1;
            let visit = Visit {
                kernel: k,
                block: b,
                start: now + cycles - self.cur.cycles,
                cycles: self.cur.cycles,
                instructions: self.cur.insts,
                address: latch.data.map(|d| d.address(ordinal)),
            };
            watch.skipped(&window, take, &visit);
        }
        self.book(slot, &counted);
        self.cur.now += cycles;
        self.cur.start = self.cur.now - self.cur.cycles;
        self.cur
            .set_loop_left(b, u32::try_from(left - take).unwrap_or(0));
        take == offered
    }

    /// Books `counts[c]` iterations of each path `c` of loop slot `slot`.
    fn book(&mut self, slot: usize, counts: &[u64; MAX_PATHS]) {
        let lp = &self.paths.loops[slot];
        for (p, &c) in lp.paths.iter().zip(counts).filter(|(_, &c)| c > 0) {
            let p = p.as_ref().expect("a path of the window");
            self.retired_done += c * p.instructions;
            self.branches += c * p.branches;
            for &(row, d) in &p.rows {
                for (x, dx) in self.rows[row].iter_mut().zip(d) {
                    *x += c * dx;
                }
            }
        }
    }

    /// Per path of the loop with branch points `info`, which of the 64
    /// iterations after the next `offset` take it (bit `i`: iteration
    /// `offset + i`).
    pub(super) fn path_masks(
        &mut self,
        prog: &Program,
        seed: u64,
        info: &LoopInfo,
        offset: u64,
        masks: &mut [u64; MAX_PATHS],
    ) {
        let key = (seed, self.serial);
        if let [row] = info.points[..] {
            // One point: its outcomes are the paths.
            let (pk, pb) = prog.row_id(row);
            if let crate::model::program::CompiledExit::Branch(edges) = &prog.block(pk, pb).exit {
                let first = self.lifetime_visits(row) + offset;
                self.draws.window(key, row, first, edges, &mut masks[1..]);
                masks[0] = !masks[1..=edges.len()].iter().fold(0, |acc, m| acc | m);
            }
            return;
        }
        // Per point, the lanes of each outcome (0: falls through).
        let mut outcomes = [[0u64; MAX_PATHS]; MAX_POINTS];
        for (j, &row) in info.points.iter().enumerate() {
            let (pk, pb) = prog.row_id(row);
            let crate::model::program::CompiledExit::Branch(edges) = &prog.block(pk, pb).exit
            else {
                continue;
            };
            let first = self.lifetime_visits(row) + offset;
            let o = &mut outcomes[j];
            self.draws.window(key, row, first, edges, &mut o[1..]);
            o[0] = !o[1..=edges.len()].iter().fold(0, |acc, m| acc | m);
        }
        for (c, m) in masks.iter_mut().enumerate().take(info.paths) {
            *m = (0..info.points.len()).fold(!0, |acc, j| {
                acc & outcomes[j][c / info.radix[j] % info.outcomes[j]]
            });
        }
    }

    /// Learns the paths some lane of `masks` takes that are not known
    /// yet; returns which of them (bit per path) leave the loop, or `None`
    /// if the loop cannot be advanced in aggregate.
    fn learn_present(
        &mut self,
        prog: &Program,
        phase: usize,
        secondary: bool,
        (head, info): (u16, &LoopInfo),
        slot: usize,
        masks: &[u64; MAX_PATHS],
    ) -> Option<u64> {
        let mut exits = 0u64;
        for (c, _) in masks
            .iter()
            .enumerate()
            .take(info.paths)
            .filter(|(_, &m)| m != 0)
        {
            let lp = &self.paths.loops[slot];
            if lp.paths[c].is_none() && !lp.exits[c] {
                match learn(prog, self.cur.clone(), phase, secondary, (head, info), c) {
                    Learned::Path(p) => self.paths.loops[slot].paths[c] = Some(p),
                    Learned::Exits => self.paths.loops[slot].exits[c] = true,
                    Learned::Unusable => return None,
                }
            }
            if self.paths.loops[slot].exits[c] {
                exits |= 1 << c;
            }
        }
        Some(exits)
    }
}

/// Walks one iteration of path `c` from cursor `cur` (at the end of the
/// latch), the branch points' outcomes forced.
pub(super) fn learn(
    prog: &Program,
    mut cur: Cursor,
    phase: usize,
    secondary: bool,
    (head, info): (u16, &LoopInfo),
    c: usize,
) -> Learned {
    let b = cur.block;
    let base = cur.frames.len();
    cur.set_loop_left(b, 1);
    let others = |f: &super::Frame| -> Vec<(u16, u32)> {
        f.loops.iter().copied().filter(|l| l.0 != b).collect()
    };
    let before = others(&cur.frames[base - 1]);
    let mut seen = [0u8; MAX_PATHS];
    let mut foreign = false;
    let mut path = Path::default();
    let (mut t, mut retired) = (0u64, 0u64);
    loop {
        let (fk, fb) = (cur.kernel(), cur.block);
        let fin = prog.block(fk, fb);
        add(
            &mut path.rows,
            fin.row,
            [0, u64::from(fin.instructions), cur.cycles],
        );
        let step: Step = cur.successor(prog, fk, fb, |row, edges| {
            let Ok(j) = info.points.binary_search(&row) else {
                foreign = true;
                return None;
            };
            seen[j] = seen[j].saturating_add(1);
            let outcome = c / info.radix[j] % (edges.len() + 1);
            outcome.checked_sub(1)
        });
        if foreign {
            return Learned::Unusable;
        }
        if step.low < base {
            return Learned::Exits;
        }
        if step.taken {
            path.branches += 1;
            path.taken.push(BranchEntry {
                from_kernel: fk,
                from_block: fb,
                to_kernel: step.kernel,
                to_block: step.block,
                cycle: t,
            });
        }
        let nb = prog.block(step.kernel, step.block);
        cur.block = step.block;
        cur.cycles = nb.cycles_in(phase, secondary);
        cur.insts = nb.instructions;
        path.visits.push(PathVisit {
            kernel: step.kernel,
            block: step.block,
            offset: t,
            cycles: cur.cycles,
            instructions: nb.instructions,
            retired,
            row: nb.row,
            marker: nb.marker,
            data: nb.data,
            calls: u8::try_from(cur.frames.len() - base).unwrap_or(u8::MAX),
        });
        add(&mut path.rows, nb.row, [1, 0, 0]);
        path.markers += u64::from(nb.marker);
        t += cur.cycles;
        retired += u64::from(nb.instructions);
        let at_base = cur.frames.len() == base;
        if at_base && step.block == b {
            break;
        }
        if at_base && !(head..=b).contains(&step.block) {
            return Learned::Exits;
        }
        if path.visits.len() > MAX_ITERATION_VISITS {
            return Learned::Unusable;
        }
    }
    let once = seen[..info.points.len()].iter().all(|&s| s == 1);
    if !once || others(&cur.frames[base - 1]) != before {
        return Learned::Unusable;
    }
    path.cycles = t;
    path.instructions = retired;
    Learned::Path(path)
}
