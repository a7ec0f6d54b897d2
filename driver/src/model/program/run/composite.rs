//! Advancing whole iterations of an outer loop — or whole launches of the
//! program — in aggregate while nothing watches the walk.
//!
//! An iteration of such a loop may hold *instances* of inner loops whose
//! iterations can be advanced in aggregate ([`super::bulk`]): an instance
//! runs `trips` passes through the inner loop's body (the first from the
//! head, the others after a back edge), each pass one of the inner loop's
//! paths, chosen by the outcomes of the inner branch points' next visits.
//! What the iteration runs outside its instances is fixed by its own
//! branch points (those outside the nested loops, visited once per
//! iteration, [`crate::model::program::Program::outer`]): its *composite
//! path*, learned once per loop (or launch), phase and clock capability by
//! walking an iteration on a copy of the cursor with those points'
//! outcomes forced and every instance cut out of the walk. An iteration
//! then costs one outcome per own point and, per instance, the inner
//! paths' counts over the visits it consumes: no block is walked. Watchers
//! need positions inside iterations, so only an unwatched walk goes this
//! way.

use super::bulk::{learn, Learned};
use super::draws::LANES;
use super::{Cursor, Env, Frame, ProgramRun};
use crate::model::program::{CompiledExit, LoopInfo, Program, MAX_PATHS};

/// Most block visits learning one composite path may walk.
const MAX_ITERATION_VISITS: usize = 4096;
/// Outer loops (each under one phase and capability) a context keeps.
const MAX_OUTER: usize = 8;
/// Most inner loop instances one composite path may hold.
const MAX_INSTANCES: usize = 8;

/// An inner loop instance of a composite path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Instance {
    kernel: u16,
    latch: u16,
    head: u16,
    /// Ledger row of the latch.
    row: usize,
    /// Passes through the body: the loop's trips.
    passes: u64,
}

/// What an iteration runs outside its instances, and its instances.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Composite {
    cycles: u64,
    instructions: u64,
    branches: u64,
    rows: Vec<(usize, [u64; 3])>,
    instances: Vec<Instance>,
}

/// The composite paths of one outer loop (or of launches) under one phase
/// and capability.
#[derive(Clone, Debug)]
struct OuterPaths {
    /// Ledger row of the block iterations end with.
    end: usize,
    phase: usize,
    secondary: bool,
    usable: bool,
    paths: Vec<Option<Composite>>,
}

/// A context's composite paths.
#[derive(Clone, Debug, Default)]
pub(super) struct CompositeCache {
    outer: Vec<OuterPaths>,
    evict: usize,
    /// Scratch: per instance of the iteration being booked, its loop's
    /// path slot and passes per path.
    passes: Vec<(usize, [u64; MAX_PATHS])>,
}

impl CompositeCache {
    /// Whether iterations ending with the block of ledger row `end` were
    /// advanced through a learned composite path.
    #[cfg(test)]
    pub(super) fn learned(&self, end: usize) -> bool {
        self.outer
            .iter()
            .any(|o| o.end == end && o.usable && o.paths.iter().any(Option::is_some))
    }

    fn slot(&mut self, end: usize, phase: usize, secondary: bool, paths: usize) -> usize {
        if let Some(i) = self
            .outer
            .iter()
            .position(|o| o.end == end && o.phase == phase && o.secondary == secondary)
        {
            return i;
        }
        let fresh = OuterPaths {
            end,
            phase,
            secondary,
            usable: true,
            paths: vec![None; paths],
        };
        if self.outer.len() < MAX_OUTER {
            self.outer.push(fresh);
            return self.outer.len() - 1;
        }
        let i = self.evict % MAX_OUTER;
        self.evict += 1;
        self.outer[i] = fresh;
        i
    }
}

/// One visit of a composite learning walk.
#[derive(Clone, Copy, Debug)]
struct Trace {
    kernel: u16,
    block: u16,
    row: usize,
    insts: u64,
    cycles: u64,
    depth: usize,
    /// Whether entering it was a taken branch.
    taken: bool,
    /// Whether it is a branch block that is not an own point.
    inner_point: bool,
}

/// Per inner loop (latch row), the passes earlier instances of the same
/// iteration consumed.
#[derive(Clone, Copy, Debug, Default)]
struct Used {
    loops: [(usize, u64); MAX_INSTANCES],
    len: usize,
}

impl Used {
    fn get(&self, row: usize) -> u64 {
        self.loops[..self.len]
            .iter()
            .find(|(r, _)| *r == row)
            .map_or(0, |&(_, n)| n)
    }

    fn set(&mut self, row: usize, n: u64) {
        match self.loops[..self.len].iter_mut().find(|(r, _)| *r == row) {
            Some(x) => x.1 = n,
            None if self.len < MAX_INSTANCES => {
                self.loops[self.len] = (row, n);
                self.len += 1;
            }
            None => {}
        }
    }
}

/// Adds `d` times `k` to `rows[row]`.
fn book(rows: &mut [[u64; 3]], row: usize, d: [u64; 3], k: u64) {
    for (x, dx) in rows[row].iter_mut().zip(d) {
        *x += k * dx;
    }
}

/// The cursor standing at the end of the latch of loop `latch` of kernel
/// `kernel`, one back edge left, alone on its stack.
fn at_latch(prog: &Program, kernel: u16, latch: u16, phase: usize, secondary: bool) -> Cursor {
    let b = prog.block(kernel, latch);
    Cursor {
        frames: vec![Frame {
            kernel,
            ret: None,
            loops: vec![(latch, 1)],
        }],
        block: latch,
        start: 0,
        cycles: b.cycles_in(phase, secondary),
        insts: b.instructions,
        now: 0,
        spare: Vec::new(),
    }
}

/// Walks one iteration of composite path `c` of the iterations ending
/// with the block `cur` stands at the end of (a loop's latch, or the
/// block that ends a launch), cutting out every inner loop instance.
fn learn_composite(
    prog: &Program,
    mut cur: Cursor,
    phase: usize,
    secondary: bool,
    own: &LoopInfo,
    c: usize,
) -> Option<Composite> {
    let (k, b) = (cur.kernel(), cur.block);
    let base = cur.frames.len();
    let head = match prog.block(k, b).exit {
        CompiledExit::Loop { to, .. } => Some(to),
        _ => None,
    };
    let launch = head.is_none();
    if !launch {
        cur.set_loop_left(b, 1);
    }
    let mut steps: Vec<Trace> = Vec::new();
    let mut instances: Vec<(usize, Instance)> = Vec::new();
    let mut seen = [0u8; MAX_PATHS];
    let mut extra_branches = 0;
    loop {
        let (fk, fb) = (cur.kernel(), cur.block);
        let fin = prog.block(fk, fb);
        if let (false, CompiledExit::Loop { to, trips }) = (steps.is_empty(), &fin.exit) {
            let own_loop = !launch && cur.frames.len() == base && (fk, fb) == (k, b);
            if !own_loop && cur.loop_left(fb).is_none() {
                // The first pass of an inner loop just ended: cut it out.
                prog.latch(fk, fb)?;
                let depth = cur.frames.len();
                let first = steps
                    .iter()
                    .rposition(|s| (s.kernel, s.block, s.depth) == (fk, *to, depth))?;
                extra_branches += u64::from(steps[first].taken);
                steps.truncate(first);
                instances.retain(|&(at, _)| at < first);
                instances.push((
                    first,
                    Instance {
                        kernel: fk,
                        latch: fb,
                        head: *to,
                        row: fin.row,
                        passes: u64::from(*trips),
                    },
                ));
                cur.set_loop_left(fb, 0);
            }
        }
        let mut inner_point = false;
        let step = cur.successor(prog, fk, fb, |row, edges| {
            let Ok(j) = own.points.binary_search(&row) else {
                inner_point = true;
                return None;
            };
            seen[j] = seen[j].saturating_add(1);
            (c / own.radix[j] % (edges.len() + 1)).checked_sub(1)
        });
        if inner_point {
            if let Some(last) = steps.last_mut() {
                last.inner_point = true;
            } else {
                return None;
            }
        }
        // A loop's iteration stays in its frame; a launch relaunches once,
        // at its start.
        let left_frame = if launch {
            step.low == 0 && !steps.is_empty()
        } else {
            step.low < base
        };
        if left_frame {
            return None;
        }
        let nb = prog.block(step.kernel, step.block);
        cur.block = step.block;
        cur.cycles = nb.cycles_in(phase, secondary);
        cur.insts = nb.instructions;
        steps.push(Trace {
            kernel: step.kernel,
            block: step.block,
            row: nb.row,
            insts: u64::from(nb.instructions),
            cycles: cur.cycles,
            depth: cur.frames.len(),
            taken: step.taken,
            inner_point: false,
        });
        let at_base = cur.frames.len() == base;
        if at_base && step.kernel == k && step.block == b {
            break;
        }
        if at_base && head.is_some_and(|h| !(h..=b).contains(&step.block)) {
            return None;
        }
        if steps.len() > MAX_ITERATION_VISITS {
            return None;
        }
    }
    let stray = steps.iter().any(|s| s.inner_point);
    let once = seen[..own.points.len()].iter().all(|&s| s == 1);
    if stray || !once || instances.len() > MAX_INSTANCES {
        return None;
    }
    let mut out = Composite {
        branches: extra_branches,
        instances: instances.into_iter().map(|(_, i)| i).collect(),
        ..Composite::default()
    };
    for s in &steps {
        out.cycles += s.cycles;
        out.instructions += s.insts;
        out.branches += u64::from(s.taken);
        match out.rows.iter_mut().find(|(r, _)| *r == s.row) {
            Some((_, x)) => {
                x[0] += 1;
                x[1] += s.insts;
                x[2] += s.cycles;
            }
            None => out.rows.push((s.row, [1, s.insts, s.cycles])),
        }
    }
    Some(out)
}

impl ProgramRun {
    /// At the end of a loop's latch, or of the block that ends a launch,
    /// with nothing watching: advances whole iterations (launches) in
    /// aggregate while time before `end` and the next throttle edge allows.
    pub(super) fn bulk_composite(&mut self, prog: &Program, env: &Env<'_>, end: u64) {
        let (k, b) = (self.cur.kernel(), self.cur.block);
        let block = prog.block(k, b);
        let past_end = |k: u16, b: u16| usize::from(b) >= prog.kernels[usize::from(k)].len();
        // The block ends a launch when returning from it returns from
        // every caller too (their continuations lie past their kernels'
        // ends) and relaunches.
        let relaunches = || {
            self.cur.frames[1..]
                .iter()
                .all(|f| f.ret.is_some_and(|(k, b)| past_end(k, b)))
        };
        let (own, left) = match block.exit {
            // A loop whose iterations advance by themselves needs no
            // composite paths.
            CompiledExit::Loop { .. }
                if prog.loops[block.row].is_some()
                    && self
                        .paths
                        .usable(block.row, env.phase, env.secondary(self.cur.now)) =>
            {
                return
            }
            CompiledExit::Loop { trips, .. } => (
                prog.outer[block.row].as_ref(),
                u64::from(self.cur.loop_left(b).unwrap_or(trips - 1)),
            ),
            CompiledExit::Ret if relaunches() => (prog.launch.as_ref(), u64::MAX),
            CompiledExit::Fall if past_end(k, b + 1) && relaunches() => {
                (prog.launch.as_ref(), u64::MAX)
            }
            _ => return,
        };
        let Some(own) = own else {
            return;
        };
        let now = self.cur.now;
        let until = env.next_throttle_edge(now).min(end);
        let secondary = env.secondary(now);
        let (phase, key) = (env.phase, (env.seed, self.serial));
        if left == 0 || until <= now || self.skip != (0, 0) {
            return;
        }
        if self.cur.cycles != block.cycles_in(phase, secondary) {
            return;
        }
        let slot = self.composite.slot(block.row, phase, secondary, own.paths);
        let mut done = 0;
        while done < left && self.composite.outer[slot].usable {
            // The iteration's own path.
            let mut c = 0;
            for (&row, &radix) in own.points.iter().zip(&own.radix) {
                let (pk, pb) = prog.row_id(row);
                if let CompiledExit::Branch(edges) = &prog.block(pk, pb).exit {
                    let v = self.lifetime_visits(row);
                    let e = self.draws.outcome(key, row, v, edges);
                    c += e.map_or(0, |e| e + 1) * radix;
                }
            }
            if self.composite.outer[slot].paths[c].is_none() {
                match learn_composite(prog, self.cur.clone(), phase, secondary, own, c) {
                    Some(p) => self.composite.outer[slot].paths[c] = Some(p),
                    None => {
                        self.composite.outer[slot].usable = false;
                        break;
                    }
                }
            }
            let Some(cycles) = self.composite_iteration(prog, env, slot, c, until - self.cur.now)
            else {
                break;
            };
            self.cur.now += cycles;
            done += 1;
        }
        if done > 0 {
            self.cur.start = self.cur.now - self.cur.cycles;
            if left != u64::MAX {
                self.cur
                    .set_loop_left(b, u32::try_from(left - done).unwrap_or(0));
            }
        }
    }

    /// Books one iteration of composite path `c` of slot `slot` if it
    /// takes at most `room` cycles; returns its cycles.
    fn composite_iteration(
        &mut self,
        prog: &Program,
        env: &Env<'_>,
        slot: usize,
        c: usize,
        room: u64,
    ) -> Option<u64> {
        let comp = self.composite.outer[slot].paths[c].take()?;
        let cycles = self.book_composite(prog, env, slot, &comp, room);
        self.composite.outer[slot].paths[c] = Some(comp);
        cycles
    }

    fn book_composite(
        &mut self,
        prog: &Program,
        env: &Env<'_>,
        slot: usize,
        comp: &Composite,
        room: u64,
    ) -> Option<u64> {
        // Each instance's passes, path by path, counted before anything is
        // booked: an instance that cannot be counted leaves the iteration
        // to the walk.
        let mut passes = std::mem::take(&mut self.composite.passes);
        passes.clear();
        let booked = self.count_instances(prog, env, slot, comp, &mut passes, room);
        self.composite.passes = passes;
        booked
    }

    /// Counts the passes of `comp`'s instances into `passes` and, if the
    /// iteration fits `room` cycles, books it; returns its cycles.
    fn count_instances(
        &mut self,
        prog: &Program,
        env: &Env<'_>,
        slot: usize,
        comp: &Composite,
        passes: &mut Vec<(usize, [u64; MAX_PATHS])>,
        room: u64,
    ) -> Option<u64> {
        let secondary = env.secondary(self.cur.now);
        let mut cycles = comp.cycles;
        // Visits of inner points consumed by earlier instances of the
        // iteration (the same loop may run twice).
        let mut used = Used::default();
        for inst in &comp.instances {
            let (_, info) = prog.latch(inst.kernel, inst.latch)?;
            let xslot = self.paths.slot(inst.row, env.phase, secondary, info.paths);
            let counts = self.pass_counts(prog, env.seed, info, inst, &mut used);
            for (p, &n) in counts
                .iter()
                .enumerate()
                .take(info.paths)
                .filter(|(_, &n)| n > 0)
            {
                if self.paths.loops[xslot].exits[p] {
                    return None;
                }
                if self.paths.loops[xslot].paths[p].is_none() {
                    let cur = at_latch(prog, inst.kernel, inst.latch, env.phase, secondary);
                    match learn(prog, cur, env.phase, secondary, (inst.head, info), p) {
                        Learned::Path(path) => self.paths.loops[xslot].paths[p] = Some(path),
                        Learned::Exits => {
                            self.paths.loops[xslot].exits[p] = true;
                            return None;
                        }
                        Learned::Unusable => {
                            self.composite.outer[slot].usable = false;
                            return None;
                        }
                    }
                }
                cycles += n * self.paths.loops[xslot].paths[p].as_ref()?.cycles;
            }
            passes.push((xslot, counts));
        }
        if cycles > room {
            return None;
        }
        for &(row, d) in &comp.rows {
            book(&mut self.rows, row, d, 1);
        }
        self.retired_done += comp.instructions;
        self.branches += comp.branches;
        for &(xslot, counts) in passes.iter() {
            // No back edge leads into an instance's first pass.
            self.branches -= 1;
            let lp = &self.paths.loops[xslot];
            for (p, &n) in lp.paths.iter().zip(&counts) {
                if let (true, Some(p)) = (n > 0, p.as_ref()) {
                    self.retired_done += n * p.instructions;
                    self.branches += n * p.branches;
                    for &(row, d) in &p.rows {
                        book(&mut self.rows, row, d, n);
                    }
                }
            }
        }
        Some(cycles)
    }

    /// How many of instance `inst`'s passes take each path of its loop
    /// (branch points `info`): the outcomes of the points' next visits,
    /// after those `used` by earlier instances of the same iteration.
    fn pass_counts(
        &mut self,
        prog: &Program,
        seed: u64,
        info: &LoopInfo,
        inst: &Instance,
        used: &mut Used,
    ) -> [u64; MAX_PATHS] {
        let mut counts = [0u64; MAX_PATHS];
        if info.points.is_empty() {
            counts[0] = inst.passes;
            return counts;
        }
        // Every point of the loop is visited once per pass.
        let mut offset = used.get(inst.row);
        let mut left = inst.passes;
        let mut masks = [0u64; MAX_PATHS];
        while left > 0 {
            let n = left.min(LANES);
            self.path_masks(prog, seed, info, offset, &mut masks);
            let keep = if n >= LANES { !0 } else { (1 << n) - 1 };
            for (c, m) in counts.iter_mut().zip(&masks).take(info.paths) {
                *c += u64::from((m & keep).count_ones());
            }
            offset += n;
            left -= n;
        }
        used.set(inst.row, offset);
        counts
    }
}
