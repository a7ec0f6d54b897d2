//! Programs on the SMs: the compiled program table and, per context, the
//! execution cursor with its exact per-block ledger ([`run`]).
//!
//! A program has no registers of its own; the context table's
//! `CTX_PROGRAM` names it. Its execution is walked block by block (each
//! block one step of `instructions × cpi` cycles), lazily, when the
//! partition running it is counted: the counting engines ask the cursor
//! how many instructions retire in a span, and the sampling unit watches
//! the same walk (see `docs/sampling.md`).

pub mod run;

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
        Program {
            kernels,
            entry: spec.entry,
            rows: row,
            min_branch_gap: spec.min_branch_gap(),
        }
    }

    /// Block `b` of kernel `k`.
    #[inline]
    pub fn block(&self, k: u16, b: u16) -> &Block {
        &self.kernels[usize::from(k)][usize::from(b)]
    }

    /// Whether every iteration of the loop whose latch is block `b` of
    /// kernel `k` runs the same blocks: its body stays inside `to..=b` and
    /// draws nothing at random (nested loops and calls of kernels that
    /// draw nothing are fine).
    pub fn deterministic_loop(&self, k: u16, b: u16) -> bool {
        let CompiledExit::Loop { to, .. } = self.block(k, b).exit else {
            return false;
        };
        let inside = |t: u16| (to..=b).contains(&t);
        self.kernels[usize::from(k)][usize::from(to)..usize::from(b)]
            .iter()
            .all(|x| match x.exit {
                CompiledExit::Fall => true,
                CompiledExit::Jump(t) | CompiledExit::Loop { to: t, .. } => inside(t),
                CompiledExit::Call(c) => self.deterministic_kernel(c),
                CompiledExit::Branch(_) | CompiledExit::Ret => false,
            })
    }

    /// Whether kernel `k` (and what it calls) draws nothing at random.
    fn deterministic_kernel(&self, k: u16) -> bool {
        self.kernels[usize::from(k)].iter().all(|x| match x.exit {
            CompiledExit::Branch(_) => false,
            CompiledExit::Call(c) => self.deterministic_kernel(c),
            _ => true,
        })
    }

    /// (kernel, block) of ledger row `row`.
    pub fn row_id(&self, row: usize) -> (u16, u16) {
        let mut left = row;
        for (k, blocks) in self.kernels.iter().enumerate() {
            if left < blocks.len() {
                return (
                    u16::try_from(k).unwrap_or(u16::MAX),
                    u16::try_from(left).unwrap_or(u16::MAX),
                );
            }
            left -= blocks.len();
        }
        (u16::MAX, u16::MAX)
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
