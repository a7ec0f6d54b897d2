//! Programs that contexts run on the SMs (see `docs/sampling.md`): kernels
//! of basic blocks with a control-flow graph, in their resolved form, and
//! the programs generated for churn contexts.

use gpupm_client::sampling::reconstruct::{KernelShape, ProgramShape};
use gpupm_splitmix::{mix, GAMMA};

/// Most frames on a program's call stack (the entry kernel's included).
pub const CALL_DEPTH: usize = 16;
/// Programs generated for churn contexts whose profile names none.
pub const GENERATED_PROGRAMS: u32 = 4;

/// A program: kernels, the entry kernel first launched.
#[derive(Clone, Debug, PartialEq)]
pub struct ProgramSpec {
    /// Name (unique).
    pub name: String,
    /// Index of the entry kernel.
    pub entry: u16,
    /// Kernels in file order (the ids records carry).
    pub kernels: Vec<KernelSpec>,
}

/// A kernel: basic blocks in layout order.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelSpec {
    /// Name (unique in the program).
    pub name: String,
    /// Blocks; block `i + 1` is block `i`'s fall-through successor.
    pub blocks: Vec<BlockSpec>,
}

/// A basic block.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockSpec {
    /// Name (unique in the kernel).
    pub name: String,
    /// Warp instructions, 1..=65535.
    pub instructions: u32,
    /// Cycles per instruction per profile phase (phase `i` uses entry
    /// `i % len`), each in 1.0..=64.0; at least one.
    pub cpi: Vec<f64>,
    /// CPI factor when the block starts in a throttle window, 1.0..=16.0.
    pub throttle: f64,
    /// How the block ends.
    pub exit: Exit,
    /// A marker block (`marker = true`): its every entry is a directed
    /// sample point of runtime-instrumentation sessions and emits a
    /// marker record (see `docs/ri.md`).
    pub marker: bool,
    /// The data address each visit touches, if any.
    pub data: Option<DataSpec>,
}

/// A block's data accesses: visit `v` (0-based, per context, counted over
/// the context's life) touches one address, `base + (v × stride) mod span`
/// — a strided sweep over `span` bytes that wraps around.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataSpec {
    /// First address.
    pub base: u32,
    /// Bytes between two visits' addresses.
    pub stride: u32,
    /// Bytes swept before wrapping, 1..; `base + span − 1` fits 32 bits.
    pub span: u32,
}

impl DataSpec {
    /// The address visit `v` touches.
    pub fn address(&self, v: u64) -> u32 {
        let off = v.wrapping_mul(u64::from(self.stride)) % u64::from(self.span);
        // off < span and base + span − 1 fits 32 bits.
        self.base + u32::try_from(off).unwrap_or(0)
    }
}

/// How a block ends.
#[derive(Clone, Debug, PartialEq)]
pub enum Exit {
    /// Falls through to the next block (the last block returns).
    Fall,
    /// Taken to block `to` with probability `p` each; otherwise falls through.
    Branch(Vec<(u16, f64)>),
    /// Always taken to block `to`.
    Jump(u16),
    /// Back edge to `to` (≤ this block), taken `trips − 1` times per entry.
    Loop {
        /// Loop head.
        to: u16,
        /// Iterations per entry, ≥ 1.
        trips: u32,
    },
    /// Calls kernel `k`, then continues with the next block.
    Call(u16),
    /// Returns to the caller (relaunches from the entry kernel).
    Ret,
}

impl ProgramSpec {
    /// What a sample reconstruction needs of the program: its kernels'
    /// names and instructions per block.
    pub fn shape(&self) -> ProgramShape {
        ProgramShape {
            kernels: self
                .kernels
                .iter()
                .map(|k| KernelShape {
                    name: k.name.clone(),
                    block_instructions: k
                        .blocks
                        .iter()
                        .map(|b| u64::from(b.instructions))
                        .collect(),
                })
                .collect(),
        }
    }

    /// The fewest cycles a block of this program can take: a lower bound
    /// on the context cycles between two taken branches.
    pub fn min_branch_gap(&self) -> u64 {
        self.kernels
            .iter()
            .flat_map(|k| &k.blocks)
            .map(|b| {
                let cpi = b.cpi.iter().copied().fold(f64::INFINITY, f64::min);
                block_cycles(b.instructions, cpi.max(1.0))
            })
            .min()
            .unwrap_or(1)
    }
}

/// Cycles of a block of `instructions` at `cpi`: `ceil(I × cpi)`, at
/// least `I` (an SM retires at most one warp instruction per cycle).
// I ≤ 65535 and cpi × factor ≤ 1024, so the product fits a u64 exactly
// enough and is finite and positive.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub fn block_cycles(instructions: u32, cpi: f64) -> u64 {
    let c = (f64::from(instructions) * cpi).ceil();
    (c as u64).max(u64::from(instructions))
}

/// Generated program `k` of a scenario with `seed`: an entry kernel with a
/// prologue, a loop whose body branches and calls a helper, and an
/// epilogue; sizes, CPIs, trip counts and probabilities from the seed.
pub fn generate(seed: u64, k: u32) -> ProgramSpec {
    let draw = |what: u64, lo: u64, hi: u64| {
        lo + splitmix(seed ^ splitmix(u64::from(k) << 32 | what)) % (hi - lo + 1)
    };
    let inst = |what: u64| u32::try_from(draw(what, 8, 160)).unwrap_or(8);
    // Draws below 2^12, exact as f64.
    #[allow(clippy::cast_precision_loss)]
    let cpi = |what: u64| vec![1.0 + draw(what, 0, 3000) as f64 / 1000.0];
    #[allow(clippy::cast_precision_loss)]
    let p = draw(20, 5, 60) as f64 / 100.0;
    let block = |name: &str, i: u64, exit: Exit| BlockSpec {
        name: name.into(),
        instructions: inst(i),
        cpi: cpi(i + 100),
        throttle: 1.5,
        exit,
        marker: name == "after_call",
        data: None,
    };
    let data = |base: u64, stride: u64| DataSpec {
        base: u32::try_from(draw(base, 0, 255)).unwrap_or(0) << 16,
        stride: u32::try_from(draw(stride, 1, 16)).unwrap_or(1) * 64,
        span: 1 << 16,
    };
    let trips = u32::try_from(draw(21, 2, 64)).unwrap_or(2);
    ProgramSpec {
        name: format!("generated{k}"),
        entry: 0,
        kernels: vec![
            KernelSpec {
                name: "main".into(),
                blocks: vec![
                    block("prologue", 1, Exit::Fall),
                    block("head", 2, Exit::Branch(vec![(4, p)])),
                    BlockSpec {
                        data: Some(data(22, 23)),
                        ..block("work", 3, Exit::Call(1))
                    },
                    block("after_call", 4, Exit::Fall),
                    block("latch", 5, Exit::Loop { to: 1, trips }),
                    block("epilogue", 6, Exit::Ret),
                ],
            },
            KernelSpec {
                name: "helper".into(),
                blocks: vec![
                    BlockSpec {
                        data: Some(data(24, 25)),
                        ..block("body", 7, Exit::Fall)
                    },
                    block("tail", 8, Exit::Ret),
                ],
            },
        ],
    }
}

/// SplitMix64's step from state `x` (the scenario layer does not reach
/// into the model's `rng`).
fn splitmix(x: u64) -> u64 {
    mix(x.wrapping_add(GAMMA))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_programs_are_deterministic_and_differ() {
        assert_eq!(generate(3, 1), generate(3, 1));
        assert_ne!(generate(3, 1), generate(3, 2));
        let g = generate(9, 0);
        assert!(g.min_branch_gap() >= 8);
    }

    #[test]
    fn block_cycles_round_up_and_never_go_below_the_instructions() {
        assert_eq!(block_cycles(10, 1.25), 13);
        assert_eq!(block_cycles(10, 1.0), 10);
    }
}
