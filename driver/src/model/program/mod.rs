//! Programs on the SMs: the compiled program table and, per context, the
//! execution cursor with its exact per-block ledger ([`run`]).
//!
//! A program has no registers of its own; the context table's
//! `CTX_PROGRAM` names it. Its execution is walked lazily, when the
//! partition running it is counted: the counting engines ask the cursor
//! how many instructions retire in a span, and the sampling unit, runtime
//! instrumentation and the marked ranges watch the same walk (see
//! `docs/sampling.md`). Whole loop iterations are advanced in aggregate
//! ([`run`], `docs/architecture.md` "Programs in the engines"); for that
//! each loop's *branch points* — the branch blocks its body can reach —
//! are found here, once.

pub mod run;
pub mod watch;

use crate::scenario::program::{block_cycles, DataSpec, Exit, ProgramSpec};
use crate::scenario::Scenario;

/// A compiled block.
#[derive(Clone, Debug)]
pub struct Block {
    /// Warp instructions.
    pub instructions: u32,
    /// Cycles per profile phase (index `phase % len`), unthrottled.
    pub cycles: Vec<u64>,
    /// The same inside a throttle window.
    pub throttled: Vec<u64>,
    /// How it ends.
    pub exit: CompiledExit,
    /// Row of the block in the program's flat ledger.
    pub row: usize,
    /// A marker block (directed sampling, marker emits).
    pub marker: bool,
    /// The data address each visit touches, if any.
    pub data: Option<DataSpec>,
}

impl Block {
    /// The block's cycles when it starts in profile phase `phase`, inside
    /// a throttle window or not.
    #[inline]
    pub fn cycles_in(&self, phase: usize, secondary: bool) -> u64 {
        let table = if secondary {
            &self.throttled
        } else {
            &self.cycles
        };
        table[phase % table.len()]
    }
}

/// A block's exit with probabilities as 32-bit thresholds.
#[derive(Clone, Debug)]
pub enum CompiledExit {
    /// Fall through (the last block returns).
    Fall,
    /// Taken to `to` when the draw is below the cumulative threshold.
    Branch(Vec<(u16, u64)>),
    /// Always taken.
    Jump(u16),
    /// Loop back edge.
    Loop {
        /// Head.
        to: u16,
        /// Iterations per entry.
        trips: u32,
    },
    /// Call a kernel.
    Call(u16),
    /// Return.
    Ret,
}

/// A compiled program.
#[derive(Clone, Debug)]
pub struct Program {
    /// Kernels, each a list of blocks.
    pub kernels: Vec<Vec<Block>>,
    /// Entry kernel.
    pub entry: u16,
    /// Rows of the flat ledger (blocks over all kernels).
    pub rows: usize,
    /// Fewest cycles any block takes.
    pub min_branch_gap: u64,
    /// Per ledger row, the loop whose latch the block is (`None` for other
    /// blocks and for loops whose iterations cannot be advanced in
    /// aggregate: more than [`MAX_PATHS`] outcome combinations).
    pub loops: Vec<Option<LoopInfo>>,
    /// (kernel, block) of each ledger row.
    row_ids: Vec<(u16, u16)>,
    /// Per ledger row, for a loop's latch: its branch points outside the
    /// loops nested in it, the points of its iterations as composite
    /// paths see them ([`run`]).
    pub outer: Vec<Option<LoopInfo>>,
    /// The same for a launch of the entry kernel.
    pub launch: Option<LoopInfo>,
}

/// Most outcome combinations (paths) a loop's branch points may have for
/// its iterations to be advanced in aggregate.
pub const MAX_PATHS: usize = 16;
/// Most branch points such a loop has (each has two outcomes or more).
pub const MAX_POINTS: usize = 4;
const _: () = assert!(1 << MAX_POINTS == MAX_PATHS);

/// A loop's branch points: the branch blocks its body (the blocks from its
/// head to its latch, and every kernel they call) can reach.
///
/// An iteration whose walk visits each point exactly once is determined by
/// one outcome per point; its *path* (category) is the mixed-radix number
/// `Σ outcome(j) × radix(j)` (outcome 0 = fall through, `e + 1` = edge
/// `e`). A loop with no point runs the same blocks in every iteration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoopInfo {
    /// Ledger rows of the points, ascending.
    pub points: Vec<usize>,
    /// Per point, `Π (edges + 1)` of the points before it.
    pub radix: Vec<usize>,
    /// Per point, its outcomes: edges + 1.
    pub outcomes: Vec<usize>,
    /// Number of paths, `Π (edges + 1)`.
    pub paths: usize,
}

/// Probabilities are compared against 32-bit draws.
const P_ONE: f64 = 4_294_967_296.0;

impl Program {
    /// Compiles `spec`.
    pub fn compile(spec: &ProgramSpec) -> Self {
        let mut row = 0;
        let kernels = spec
            .kernels
            .iter()
            .map(|k| {
                k.blocks
                    .iter()
                    .map(|b| {
                        row += 1;
                        Block {
                            instructions: b.instructions,
                            cycles: b
                                .cpi
                                .iter()
                                .map(|&c| block_cycles(b.instructions, c))
                                .collect(),
                            throttled: b
                                .cpi
                                .iter()
                                .map(|&c| block_cycles(b.instructions, c * b.throttle))
                                .collect(),
                            exit: compile_exit(&b.exit),
                            row: row - 1,
                            marker: b.marker,
                            data: b.data,
                        }
                    })
                    .collect()
            })
            .collect();
        let mut prog = Program {
            kernels,
            entry: spec.entry,
            rows: row,
            min_branch_gap: spec.min_branch_gap(),
            loops: Vec::new(),
            row_ids: Vec::new(),
            outer: Vec::new(),
            launch: None,
        };
        prog.row_ids = prog
            .kernels
            .iter()
            .enumerate()
            .flat_map(|(k, blocks)| {
                let k = u16::try_from(k).unwrap_or(u16::MAX);
                (0..blocks.len()).map(move |b| (k, u16::try_from(b).unwrap_or(u16::MAX)))
            })
            .collect();
        prog.loops = prog
            .row_ids
            .iter()
            .map(|&(k, b)| prog.loop_info(k, b))
            .collect();
        prog.outer = prog
            .row_ids
            .iter()
            .map(|&(k, b)| match prog.block(k, b).exit {
                CompiledExit::Loop { to, .. } => {
                    let mut points = Vec::new();
                    let mut seen = vec![false; prog.kernels.len()];
                    prog.collect_outer(k, to..=b, Some(b), &mut points, &mut seen);
                    prog.info_of(points)
                }
                _ => None,
            })
            .collect();
        let mut points = Vec::new();
        let mut seen = vec![false; prog.kernels.len()];
        seen[usize::from(prog.entry)] = true;
        let last = u16::try_from(prog.kernels[usize::from(prog.entry)].len() - 1).unwrap_or(0);
        prog.collect_outer(prog.entry, 0..=last, None, &mut points, &mut seen);
        prog.launch = prog.info_of(points);
        prog
    }

    /// Adds the branch points of blocks `range` of kernel `k` (and of what
    /// they call) that lie outside every loop nested in them (`latch`, the
    /// range's own loop, is not nested in it).
    fn collect_outer(
        &self,
        k: u16,
        range: std::ops::RangeInclusive<u16>,
        latch: Option<u16>,
        points: &mut Vec<usize>,
        seen: &mut [bool],
    ) {
        let blocks = &self.kernels[usize::from(k)];
        let nested: Vec<(u16, u16)> = range
            .clone()
            .filter(|&x| Some(x) != latch)
            .filter_map(|x| match blocks[usize::from(x)].exit {
                CompiledExit::Loop { to, .. } => Some((to, x)),
                _ => None,
            })
            .collect();
        for y in range {
            if nested.iter().any(|&(to, x)| (to..=x).contains(&y)) {
                continue;
            }
            let block = &blocks[usize::from(y)];
            match block.exit {
                CompiledExit::Branch(_) => points.push(block.row),
                CompiledExit::Call(c) if !seen[usize::from(c)] => {
                    seen[usize::from(c)] = true;
                    let last = u16::try_from(self.kernels[usize::from(c)].len() - 1).unwrap_or(0);
                    self.collect_outer(c, 0..=last, None, points, seen);
                }
                _ => {}
            }
        }
    }

    /// The branch points of the loop whose latch is block `b` of kernel
    /// `k`, if it is a latch and its paths are few enough.
    fn loop_info(&self, k: u16, b: u16) -> Option<LoopInfo> {
        let CompiledExit::Loop { to, .. } = self.block(k, b).exit else {
            return None;
        };
        let mut points = Vec::new();
        let mut seen = vec![false; self.kernels.len()];
        for x in &self.kernels[usize::from(k)][usize::from(to)..=usize::from(b)] {
            self.collect_points(x, &mut points, &mut seen);
        }
        self.info_of(points)
    }

    /// The paths of branch points `points`, if few enough.
    fn info_of(&self, mut points: Vec<usize>) -> Option<LoopInfo> {
        points.sort_unstable();
        points.dedup();
        let mut radix = Vec::with_capacity(points.len());
        let mut outcomes = Vec::with_capacity(points.len());
        let mut paths = 1usize;
        for &row in &points {
            radix.push(paths);
            let (pk, pb) = self.row_id(row);
            let CompiledExit::Branch(edges) = &self.block(pk, pb).exit else {
                return None;
            };
            outcomes.push(edges.len() + 1);
            paths = paths.checked_mul(edges.len() + 1)?;
            if paths > MAX_PATHS {
                return None;
            }
        }
        Some(LoopInfo {
            points,
            radix,
            outcomes,
            paths,
        })
    }

    /// Adds `x`'s row if it branches, and the points of the kernel it calls.
    fn collect_points(&self, x: &Block, points: &mut Vec<usize>, seen: &mut [bool]) {
        match &x.exit {
            CompiledExit::Branch(_) => points.push(x.row),
            CompiledExit::Call(c) if !seen[usize::from(*c)] => {
                seen[usize::from(*c)] = true;
                for y in &self.kernels[usize::from(*c)] {
                    self.collect_points(y, points, seen);
                }
            }
            _ => {}
        }
    }

    /// Block `b` of kernel `k`.
    #[inline]
    pub fn block(&self, k: u16, b: u16) -> &Block {
        &self.kernels[usize::from(k)][usize::from(b)]
    }

    /// (kernel, block) of ledger row `row`.
    pub fn row_id(&self, row: usize) -> (u16, u16) {
        self.row_ids
            .get(row)
            .copied()
            .unwrap_or((u16::MAX, u16::MAX))
    }

    /// The loop whose latch is block `b` of kernel `k`: its head, and its
    /// branch points if its iterations can be advanced in aggregate.
    #[inline]
    pub fn latch(&self, k: u16, b: u16) -> Option<(u16, &LoopInfo)> {
        let block = self.block(k, b);
        match (&block.exit, self.loops[block.row].as_ref()) {
            (CompiledExit::Loop { to, .. }, Some(info)) => Some((*to, info)),
            _ => None,
        }
    }
}

// The probability lies in 0..=1, so the threshold lies in 0..=2^32.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn compile_exit(exit: &Exit) -> CompiledExit {
    match exit {
        Exit::Fall => CompiledExit::Fall,
        Exit::Branch(edges) => {
            let mut acc = 0.0;
            CompiledExit::Branch(
                edges
                    .iter()
                    .map(|&(to, p)| {
                        acc += p;
                        (to, (acc.min(1.0) * P_ONE) as u64)
                    })
                    .collect(),
            )
        }
        Exit::Jump(to) => CompiledExit::Jump(*to),
        Exit::Loop { to, trips } => CompiledExit::Loop {
            to: *to,
            trips: *trips,
        },
        Exit::Call(k) => CompiledExit::Call(*k),
        Exit::Ret => CompiledExit::Ret,
    }
}

/// The device's program table (`Scenario::program_table`, compiled).
#[derive(Clone, Debug, Default)]
pub struct Programs {
    table: Vec<Program>,
}

impl Programs {
    /// Compiles `scenario`'s program table.
    pub fn new(scenario: &Scenario) -> Self {
        Programs {
            table: scenario
                .program_table()
                .iter()
                .map(Program::compile)
                .collect(),
        }
    }

    /// Compiles `specs` (in table order).
    pub fn from_specs(specs: &[ProgramSpec]) -> Self {
        Programs {
            table: specs.iter().map(Program::compile).collect(),
        }
    }

    /// Program `i`.
    #[inline]
    pub fn get(&self, i: usize) -> Option<&Program> {
        self.table.get(i)
    }
}
