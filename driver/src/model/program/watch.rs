//! What watchers of a walk see: block visits and pieces of them, taken
//! branches and call stacks when the walk steps block by block, and
//! [`Window`]s of whole loop iterations when it advances in aggregate.
//!
//! A watcher (the sampling unit, a runtime-instrumentation session, the
//! marked ranges) must end in the same state whichever way the walk went:
//! the two engines split time differently (the cycle-level one never
//! advances in aggregate), and the property tests compare them bit for bit.

use gpupm_uapi::ranges::StackEntry;
use gpupm_uapi::sampling::BranchEntry;

use crate::scenario::program::DataSpec;

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

/// A call frame of a walk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub(crate) kernel: u16,
    /// Where the caller continues (kernel, block); `None` for the entry.
    pub(crate) ret: Option<(u16, u16)>,
    /// Loop counters: (latch block, back edges left).
    pub(crate) loops: Vec<(u16, u32)>,
}

impl Frame {
    /// The frame of a launch of kernel `kernel`.
    pub(crate) fn entry(kernel: u16) -> Self {
        Frame {
            kernel,
            ret: None,
            loops: Vec::new(),
        }
    }
}

/// The call stack of a walk, as a watcher sees it.
#[derive(Clone, Copy, Debug)]
pub struct CallStack<'a>(pub(crate) &'a [Frame]);

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
///
/// While the walk steps block by block it reports every visit
/// ([`Watch::entered`]), every piece of time in a block
/// ([`Watch::ran_block`]) and every taken branch ([`Watch::taken`]). At
/// the end of a loop's latch it may instead advance whole iterations in
/// aggregate: it offers them as a [`Window`], runs the first
/// [`Watch::admit`] of them (fewer if time or the loop ends first) and
/// reports them with [`Watch::skipped`]. A watcher admits only what it
/// can account for exactly from the window (its counts, and whatever it
/// observes inside, from the iterations' [`Path`]s); the walk steps
/// through the rest, so the state it ends in is the same either way.
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
    /// Whether the watcher ignores everything (the walk then advances in
    /// aggregate as far as time allows, telling it nothing).
    fn passive(&self) -> bool {
        false
    }
    /// How many of `window`'s iterations, from its first, the walk may run
    /// in aggregate. The default, 0, makes the walk step through all.
    fn admit(&mut self, _window: &Window<'_>) -> u64 {
        0
    }
    /// The first `n` iterations of `window` (at most what
    /// [`Watch::admit`] allowed) ran; the walk now stands at the end of
    /// the last one's latch, visit `latch` (already started, run to its
    /// end, its successor not chosen).
    fn skipped(&mut self, _window: &Window<'_>, _n: u64, _latch: &Visit) {}
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

/// One block visit of a [`Path`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathVisit {
    /// Kernel.
    pub kernel: u16,
    /// Block.
    pub block: u16,
    /// Context cycles from the iteration's start to the visit's.
    pub offset: u64,
    /// Context cycles the visit takes.
    pub cycles: u64,
    /// Instructions it retires.
    pub instructions: u32,
    /// Instructions the iteration retired before the visit started.
    pub retired: u64,
    /// Ledger row of the block.
    pub row: usize,
    /// A marker block.
    pub marker: bool,
    /// The block's data accesses (the address depends on the visit's
    /// lifetime ordinal, [`Window::visits_before`]).
    pub data: Option<DataSpec>,
    /// Calls the visit runs under, above the loop's own frame.
    pub calls: u8,
}

impl PathVisit {
    /// Instructions the visit retired `k` cycles after it started.
    #[inline]
    pub fn retired_after(&self, k: u64) -> u64 {
        k * u64::from(self.instructions) / self.cycles.max(1)
    }
}

/// What one iteration of a loop runs, from the end of the latch before it
/// to the end of its own latch: the blocks its branch points' outcomes
/// lead through.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Path {
    /// Context cycles.
    pub cycles: u64,
    /// Instructions retired.
    pub instructions: u64,
    /// Taken branches (the back edge into the iteration is the first).
    pub branches: u64,
    /// Marker-block entries.
    pub markers: u64,
    /// Block visits in order (the latch last).
    pub visits: Vec<PathVisit>,
    /// Taken branches in order, as branch records show them but with
    /// `cycle` relative to the iteration's start.
    pub taken: Vec<BranchEntry>,
    /// Per ledger row touched: (row, [visits, instructions, cycles]) the
    /// iteration adds to the per-block ledger.
    pub rows: Vec<(usize, [u64; 3])>,
}

impl Path {
    /// The visit running `off` cycles into the iteration: the one with
    /// `offset < off <= offset + cycles` (a cycle belongs to the piece it
    /// ends), for `off` in `1..=cycles`.
    pub fn visit_at(&self, off: u64) -> &PathVisit {
        let i = self.visits.partition_point(|v| v.offset + v.cycles < off);
        &self.visits[i.min(self.visits.len() - 1)]
    }
}

/// What a window's iterations add up, for [`Window::sum`] and
/// [`Window::find`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quantity {
    /// Context cycles.
    Cycles,
    /// Instructions retired.
    Instructions,
    /// Taken branches.
    Branches,
}

impl Quantity {
    fn of(self, p: &Path) -> u64 {
        match self {
            Quantity::Cycles => p.cycles,
            Quantity::Instructions => p.instructions,
            Quantity::Branches => p.branches,
        }
    }
}

/// Running sums over a window's iterations: entry `i` sums the first `i`.
#[derive(Clone, Debug)]
pub(crate) struct Sums {
    pub(crate) cycles: [u64; 65],
    pub(crate) instructions: [u64; 65],
    pub(crate) branches: [u64; 65],
}

impl Sums {
    /// The sums over `lanes` (each a path number of `paths`).
    pub(crate) fn new(lanes: &[u8], paths: &[Option<Path>]) -> Self {
        let mut s = Sums {
            cycles: [0; 65],
            instructions: [0; 65],
            branches: [0; 65],
        };
        for (i, &c) in lanes.iter().enumerate() {
            let p = paths[usize::from(c)]
                .as_ref()
                .expect("a path of the window");
            s.cycles[i + 1] = s.cycles[i] + p.cycles;
            s.instructions[i + 1] = s.instructions[i] + p.instructions;
            s.branches[i + 1] = s.branches[i] + p.branches;
        }
        s
    }

    fn of(&self, q: Quantity) -> &[u64; 65] {
        match q {
            Quantity::Cycles => &self.cycles,
            Quantity::Instructions => &self.instructions,
            Quantity::Branches => &self.branches,
        }
    }
}

/// Which path each iteration of a window takes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Lanes<'a> {
    /// Every iteration takes path 0 (a loop with no branch point).
    Same(u64),
    /// Iteration `i` takes path `paths[i]`.
    Each(&'a [u8]),
}

/// Whole iterations of one loop the walk may advance in aggregate.
#[derive(Clone, Copy, Debug)]
pub struct Window<'a> {
    /// Context cycle at which the first iteration starts (the end of the
    /// latch before it).
    pub start: u64,
    /// Instructions the context retired before it.
    pub retired: u64,
    /// Taken branches of the context before it.
    pub branches: u64,
    /// The calls the loop runs under (its frame last).
    pub stack: CallStack<'a>,
    pub(crate) lanes: Lanes<'a>,
    pub(crate) paths: &'a [Option<Path>],
    /// Running sums of the lanes (`None`: compute them when asked).
    pub(crate) sums: Option<&'a Sums>,
    /// Per ledger row: visits in the ledger, and visits device resets
    /// cleared from it (empty until the first reset).
    pub(crate) rows: &'a [[u64; 3]],
    pub(crate) before_reset: &'a [u64],
}

impl<'a> Window<'a> {
    /// Iterations offered.
    pub fn len(&self) -> u64 {
        match self.lanes {
            Lanes::Same(n) => n,
            Lanes::Each(l) => l.len() as u64,
        }
    }

    /// Whether no iteration is offered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The path iteration `i` takes.
    #[inline]
    pub fn path(&self, i: u64) -> &'a Path {
        self.paths[self.category(i)]
            .as_ref()
            .expect("every path of a window is known")
    }

    /// The number of the path iteration `i` takes (below
    /// [`super::MAX_PATHS`]; equal numbers, equal paths).
    #[inline]
    pub fn category(&self, i: u64) -> usize {
        match self.lanes {
            Lanes::Same(_) => 0,
            Lanes::Each(l) => usize::from(l[usize::try_from(i).unwrap_or(usize::MAX)]),
        }
    }

    /// Every path of the loop known so far (by number), the window's among
    /// them.
    pub fn known_paths(&self) -> impl Iterator<Item = (usize, &'a Path)> {
        self.paths
            .iter()
            .enumerate()
            .filter_map(|(c, p)| Some((c, p.as_ref()?)))
    }

    /// Calls `f` once per distinct path among the first `n` iterations
    /// with how many of them take it.
    pub fn tally(&self, n: u64, mut f: impl FnMut(&'a Path, u64)) {
        match self.lanes {
            Lanes::Same(len) => {
                if n.min(len) > 0 {
                    f(self.path(0), n.min(len));
                }
            }
            Lanes::Each(l) => {
                let mut counts = [0u64; super::MAX_PATHS];
                for &c in &l[..usize::try_from(n).unwrap_or(usize::MAX).min(l.len())] {
                    counts[usize::from(c)] += 1;
                }
                for (p, &k) in self.paths.iter().zip(&counts) {
                    if let (true, Some(p)) = (k > 0, p.as_ref()) {
                        f(p, k);
                    }
                }
            }
        }
    }

    /// Calls `f` once per distinct path number among the first `n`
    /// iterations with how many of them take it.
    pub fn tally_by_number(&self, n: u64, mut f: impl FnMut(usize, u64)) {
        match self.lanes {
            Lanes::Same(len) => {
                if n.min(len) > 0 {
                    f(0, n.min(len));
                }
            }
            Lanes::Each(l) => {
                let mut counts = [0u64; super::MAX_PATHS];
                for &c in &l[..usize::try_from(n).unwrap_or(usize::MAX).min(l.len())] {
                    counts[usize::from(c)] += 1;
                }
                for (c, &k) in counts.iter().enumerate().filter(|(_, &k)| k > 0) {
                    f(c, k);
                }
            }
        }
    }

    /// Path number `c`, if known.
    pub fn path_number(&self, c: usize) -> Option<&'a Path> {
        self.paths.get(c)?.as_ref()
    }

    /// `q` summed over the first `n` iterations.
    pub fn sum(&self, q: Quantity, n: u64) -> u64 {
        match (self.lanes, self.sums) {
            (Lanes::Same(len), _) => n.min(len) * q.of(self.path(0)),
            (Lanes::Each(l), Some(s)) => s.of(q)[usize::try_from(n).unwrap_or(0).min(l.len())],
            (Lanes::Each(_), None) => self.total(n, |p| q.of(p)),
        }
    }

    /// The most iterations, from the first, whose `q` sums below `limit`.
    pub fn below(&self, q: Quantity, limit: u64) -> u64 {
        match (self.lanes, self.sums) {
            (Lanes::Each(l), Some(s)) => {
                let sums = &s.of(q)[1..=l.len()];
                sums.partition_point(|&x| x < limit) as u64
            }
            _ => self.prefix_below(limit, |p| q.of(p)),
        }
    }

    /// The iteration holding unit `target` (1-based) of `q` among the first
    /// `n`: `(i, units before i)`, or `None` when they hold fewer units.
    pub fn find(&self, q: Quantity, target: u64, n: u64) -> Option<(u64, u64)> {
        match (self.lanes, self.sums) {
            (Lanes::Each(l), Some(s)) => {
                let n = usize::try_from(n).unwrap_or(0).min(l.len());
                let sums = s.of(q);
                // The first i whose running sum through it reaches target.
                let i = sums[1..=n].partition_point(|&x| x < target);
                (i < n).then(|| (i as u64, sums[i]))
            }
            _ => self.locate((0, 0), target, n, |p| q.of(p)),
        }
    }

    /// `qty` summed over the first `n` iterations.
    pub fn total(&self, n: u64, qty: impl Fn(&Path) -> u64) -> u64 {
        let mut t = 0;
        self.tally(n, |p, k| t += k * qty(p));
        t
    }

    /// The most iterations, from the first, whose `qty` sums below `limit`.
    pub fn prefix_below(&self, limit: u64, qty: impl Fn(&Path) -> u64) -> u64 {
        if limit == 0 {
            return 0;
        }
        match self.lanes {
            Lanes::Same(n) => match qty(self.path(0)) {
                0 => n,
                q => n.min((limit - 1) / q),
            },
            Lanes::Each(l) => {
                let mut sum = 0;
                for (i, _) in l.iter().enumerate() {
                    sum += qty(self.path(i as u64));
                    if sum >= limit {
                        return i as u64;
                    }
                }
                l.len() as u64
            }
        }
    }

    /// The iteration holding unit `target` (1-based) of `qty` counted from
    /// the window's start, searching from iteration `from.0` (with
    /// `from.1` units before it): `(i, units before i)`, or `None` when
    /// the first `n` iterations hold fewer units.
    pub fn locate(
        &self,
        from: (u64, u64),
        target: u64,
        n: u64,
        qty: impl Fn(&Path) -> u64,
    ) -> Option<(u64, u64)> {
        let (mut i, mut before) = from;
        if let Lanes::Same(len) = self.lanes {
            let q = qty(self.path(0));
            let n = n.min(len);
            if q == 0 || target <= before {
                return None;
            }
            let k = (target - before - 1) / q;
            return (i + k < n).then_some((i + k, before + k * q));
        }
        while i < n {
            let q = qty(self.path(i));
            if before + q >= target {
                return Some((i, before));
            }
            before += q;
            i += 1;
        }
        None
    }

    /// Visits of ledger row `row` over the context's life before the
    /// window (the ordinal of the row's next visit).
    pub fn visits_before(&self, row: usize) -> u64 {
        self.rows[row][0] + self.before_reset.get(row).copied().unwrap_or(0)
    }

    /// The taken branches `upto + 1 - count ..= upto` of the window
    /// (1-based, `count <= upto`), oldest first, with context cycles, into
    /// `out`. `upto` must lie in the window.
    pub fn branch_entries(&self, upto: u64, count: u64, out: &mut Vec<BranchEntry>) {
        out.clear();
        let Some((mut i, before)) = self.find(Quantity::Branches, upto, self.len()) else {
            return;
        };
        let mut idx = upto - before;
        let mut start = self.start + self.cycles_before(i);
        while (out.len() as u64) < count {
            let mut e = self.path(i).taken[usize::try_from(idx - 1).unwrap_or(0)];
            e.cycle += start;
            out.push(e);
            idx -= 1;
            while idx == 0 && (out.len() as u64) < count {
                i -= 1;
                let p = self.path(i);
                idx = p.branches;
                start -= p.cycles;
            }
        }
        out.reverse();
    }

    /// Context cycles the first `i` iterations take.
    pub fn cycles_before(&self, i: u64) -> u64 {
        self.sum(Quantity::Cycles, i)
    }
}
