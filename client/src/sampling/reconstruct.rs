//! Per-block instruction counts, cycles and CPI from samples.
//!
//! * **Instructions**: a branch-stack record lists the last taken branches
//!   of a context, oldest first. Between two consecutive taken branches the
//!   program ran straight through: from the target block of the first to
//!   the source block of the second, each block in layout order (a block's
//!   fall-through successor is the next block of the same kernel). Every
//!   block on that walk executed once more; its instructions are its
//!   instruction count times the walks that crossed it.
//! * **Cycles**: a cycle sample names the block the context was in; the
//!   cycles of a block are its share of the samples times the cycles
//!   sampled. A sample stands for the interval since the previous sample
//!   point, so a lost sample's interval is in no record: when records carry
//!   their context cycle, the cycles between the first and the last sample
//!   received are what the samples stand for under [`Scale::Rates`], not
//!   the sum of the intervals received (which falls short by the share
//!   lost, a bias every block shares).
//! * **Scale**: walks and samples give shares; [`Scale`] turns them into
//!   absolute numbers, either from exact totals (the context's
//!   `sm_inst_executed` and cycle counters from the counting plane) or from
//!   the samplers' own rates.
//! * **CPI** = cycles / instructions, per block and per kernel.
//!
//! A walk whose two ends are not in one kernel with the target at or
//! before the source (a stack that spans something the program
//! description does not explain) is counted as broken and contributes
//! nothing; [`Estimate::broken_walks`] reports how many.

use std::collections::BTreeMap;

/// A basic block of a program: (kernel index, block index in the kernel).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlockRef {
    /// Kernel index in the program.
    pub kernel: u32,
    /// Block index in the kernel (layout order).
    pub block: u32,
}

/// One taken branch of a branch stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TakenBranch {
    /// The block that ended with the branch.
    pub from: BlockRef,
    /// The block it went to.
    pub to: BlockRef,
}

/// What reconstruction needs of a program: per kernel, its name and its
/// blocks' instruction counts in layout order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProgramShape {
    /// Kernels, by index.
    pub kernels: Vec<KernelShape>,
}

/// One kernel of a [`ProgramShape`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelShape {
    /// Name, for reports.
    pub name: String,
    /// Instructions of each block, in layout order.
    pub block_instructions: Vec<u64>,
}

impl ProgramShape {
    fn instructions(&self, b: BlockRef) -> Option<u64> {
        self.kernels
            .get(b.kernel as usize)?
            .block_instructions
            .get(b.block as usize)
            .copied()
    }
}

/// How walk counts and sample counts become absolute numbers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scale {
    /// Exact totals of the sampled span (from the counting plane): each
    /// block gets its share of them.
    Totals {
        /// Instructions the context executed.
        instructions: f64,
        /// Cycles it ran.
        cycles: f64,
    },
    /// The samplers' own rates: a branch stack was captured every
    /// `branch_every` taken branches (`branch_records` captured, lost ones
    /// included), and each cycle sample stands for the cycles it was
    /// added with ([`Estimator::add_sample`]'s `cycles`: the record's
    /// interval, P + R + S − A), scaled up to the context cycles the
    /// samples span when they were added with their context cycle
    /// ([`Estimator::add_sample_at`]) and some were lost between.
    Rates {
        /// Branch-stack records the device produced (delivered + lost).
        branch_records: f64,
        /// N: taken branches per capture.
        branch_every: f64,
    },
}

/// Accumulates walks and samples of one context (or one set of contexts
/// running the same program).
#[derive(Clone, Debug)]
pub struct Estimator {
    shape: ProgramShape,
    walks: BTreeMap<BlockRef, u64>,
    walks_total: u64,
    broken: u64,
    stacks: u64,
    intervals: u64,
    branch_every: u32,
    samples: BTreeMap<BlockRef, (u64, u64)>,
    samples_total: u64,
    sampled_cycles: u64,
    unknown_samples: u64,
    span: Option<SampledSpan>,
}

/// The context cycles the cycle samples span: the first and the last
/// sample's context cycle, and the intervals of the samples after the
/// first (what those samples stand for; short of `last − first` by the
/// intervals of the samples lost between).
#[derive(Clone, Copy, Debug)]
struct SampledSpan {
    first: u64,
    last: u64,
    chained: u64,
}

impl SampledSpan {
    /// Context cycles spanned per cycle the samples after the first stand
    /// for: 1 when none was lost.
    fn scale(&self) -> f64 {
        if self.chained == 0 {
            1.0
        } else {
            (self.last - self.first) as f64 / self.chained as f64
        }
    }
}

/// Estimated numbers of one block.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct BlockEstimate {
    /// Block index in its kernel.
    pub block: u32,
    /// Estimated instructions executed.
    pub instructions: f64,
    /// Estimated cycles spent.
    pub cycles: f64,
    /// cycles / instructions (NaN when no walk crossed the block).
    pub cpi: f64,
    /// Cycle samples that named the block.
    pub samples: u64,
    /// Walks that crossed the block.
    pub walks: u64,
    /// Lower end of the ~95 % confidence interval of `cpi`.
    pub cpi_low: f64,
    /// Upper end of the ~95 % confidence interval of `cpi`.
    pub cpi_high: f64,
}

/// Estimated numbers of one kernel and its blocks.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct KernelEstimate {
    /// Kernel index.
    pub kernel: u32,
    /// Kernel name.
    pub name: String,
    /// Sum over its blocks.
    pub instructions: f64,
    /// Sum over its blocks.
    pub cycles: f64,
    /// cycles / instructions.
    pub cpi: f64,
    /// Cycle samples in the kernel.
    pub samples: u64,
    /// Blocks with at least one sample or walk, hottest (most cycles) first.
    pub blocks: Vec<BlockEstimate>,
}

/// The reconstruction of a program's execution.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Estimate {
    /// Kernels with at least one sample or walk, hottest first.
    pub kernels: Vec<KernelEstimate>,
    /// Cycle samples used.
    pub samples: u64,
    /// Cycle samples naming a block the program does not have (ignored).
    pub unknown_samples: u64,
    /// Branch stacks used.
    pub stacks: u64,
    /// Walks between consecutive taken branches that were counted.
    pub walks: u64,
    /// Walks the program description could not explain (ignored).
    pub broken_walks: u64,
}

/// z for a two-sided ~95 % interval.
const Z95: f64 = 1.96;

impl Estimator {
    /// An empty estimator for programs of `shape`.
    pub fn new(shape: ProgramShape) -> Self {
        Estimator {
            shape,
            walks: BTreeMap::new(),
            walks_total: 0,
            broken: 0,
            stacks: 0,
            intervals: 0,
            branch_every: 1,
            samples: BTreeMap::new(),
            samples_total: 0,
            sampled_cycles: 0,
            unknown_samples: 0,
            span: None,
        }
    }

    /// Declares that branch stacks were captured every `n` taken branches
    /// (N); only the confidence intervals depend on it. Default 1, the
    /// most conservative.
    pub fn with_branch_every(mut self, n: u32) -> Self {
        self.branch_every = n.max(1);
        self
    }

    /// Adds one branch stack, oldest branch first.
    pub fn add_branch_stack(&mut self, stack: &[TakenBranch]) {
        self.stacks += 1;
        for pair in stack.windows(2) {
            let (start, end) = (pair[0].to, pair[1].from);
            if start.kernel != end.kernel
                || start.block > end.block
                || self.shape.instructions(end).is_none()
            {
                self.broken += 1;
                continue;
            }
            self.intervals += 1;
            for block in start.block..=end.block {
                *self.walks.entry(BlockRef { block, ..start }).or_default() += 1;
                self.walks_total += 1;
            }
        }
    }

    /// Adds one cycle sample that found the context in `block` and
    /// stands for `cycles` cycles (the interval since the previous one).
    pub fn add_sample(&mut self, block: BlockRef, cycles: u64) {
        if self.shape.instructions(block).is_none() {
            self.unknown_samples += 1;
            return;
        }
        let e = self.samples.entry(block).or_default();
        e.0 += 1;
        e.1 += cycles;
        self.samples_total += 1;
        self.sampled_cycles += cycles;
    }

    /// Adds one cycle sample as [`Estimator::add_sample`], taken at
    /// context cycle `ctx_cycle` (samples come in context-cycle order): the
    /// span of context cycles the samples cover corrects, under
    /// [`Scale::Rates`], for samples lost between.
    pub fn add_sample_at(&mut self, block: BlockRef, ctx_cycle: u64, cycles: u64) {
        self.span = Some(match self.span {
            None => SampledSpan {
                first: ctx_cycle,
                last: ctx_cycle,
                chained: 0,
            },
            Some(s) if ctx_cycle > s.last => SampledSpan {
                last: ctx_cycle,
                chained: s.chained.saturating_add(cycles),
                ..s
            },
            // Not after the last one: a record out of order, or a repeat;
            // it is counted but does not move the span.
            Some(s) => s,
        });
        self.add_sample(block, cycles);
    }

    /// Adds a device branch-stack record (its valid entries).
    pub fn add_stack_record(&mut self, r: &gpupm_uapi::sampling::BranchStackRecord) {
        let n = (r.count as usize).min(r.entries.len());
        let stack: Vec<TakenBranch> = r.entries[..n]
            .iter()
            .map(|e| TakenBranch {
                from: BlockRef {
                    kernel: u32::from(e.from_kernel),
                    block: u32::from(e.from_block),
                },
                to: BlockRef {
                    kernel: u32::from(e.to_kernel),
                    block: u32::from(e.to_block),
                },
            })
            .collect();
        self.add_branch_stack(&stack);
    }

    /// Adds a device PC record (its block, standing for its interval,
    /// taken at its context cycle).
    pub fn add_pc_record(&mut self, r: &gpupm_uapi::sampling::PcRecord) {
        let block = BlockRef {
            kernel: u32::from(r.kernel),
            block: u32::from(r.block),
        };
        self.add_sample_at(block, r.ctx_cycle, u64::from(r.interval));
    }

    /// Cycle samples added (known blocks only).
    pub fn samples(&self) -> u64 {
        self.samples_total
    }

    /// Estimates with `scale`.
    pub fn estimate(&self, scale: Scale) -> Estimate {
        let walked_instructions: f64 = self
            .walks
            .iter()
            .map(|(&b, &w)| w as f64 * self.shape.instructions(b).unwrap_or(0) as f64)
            .sum();
        let walks_counted: u64 = self.walks_total;
        let intervals = self.stacks_intervals();
        // Instructions per walk-count of an instruction, and cycles per sample.
        // Instructions per walked instruction, and cycles per sampled cycle.
        let (inst_per_walk, cycle_scale) = match scale {
            Scale::Totals {
                instructions,
                cycles,
            } => (
                ratio(instructions, walked_instructions),
                ratio(cycles, self.sampled_cycles as f64),
            ),
            Scale::Rates {
                branch_records,
                branch_every,
            } => (
                ratio(branch_records * branch_every, intervals),
                self.span.map_or(1.0, |s| s.scale()),
            ),
        };
        let overlap = self.overlap();
        let mut kernels: BTreeMap<u32, KernelEstimate> = BTreeMap::new();
        let keys: std::collections::BTreeSet<BlockRef> = self
            .walks
            .keys()
            .chain(self.samples.keys())
            .copied()
            .collect();
        for b in keys {
            let walks = self.walks.get(&b).copied().unwrap_or(0);
            let (samples, weight) = self.samples.get(&b).copied().unwrap_or((0, 0));
            let inst =
                walks as f64 * self.shape.instructions(b).unwrap_or(0) as f64 * inst_per_walk;
            let cycles = weight as f64 * cycle_scale;
            let cpi = ratio(cycles, inst);
            let rse = self.relative_error(walks, samples, overlap);
            let k = kernels.entry(b.kernel).or_insert_with(|| KernelEstimate {
                kernel: b.kernel,
                name: self.shape.kernels[b.kernel as usize].name.clone(),
                instructions: 0.0,
                cycles: 0.0,
                cpi: f64::NAN,
                samples: 0,
                blocks: Vec::new(),
            });
            k.instructions += inst;
            k.cycles += cycles;
            k.samples += samples;
            k.blocks.push(BlockEstimate {
                block: b.block,
                instructions: inst,
                cycles,
                cpi,
                samples,
                walks,
                cpi_low: cpi * (1.0 - Z95 * rse).max(0.0),
                cpi_high: cpi * (1.0 + Z95 * rse),
            });
        }
        let mut kernels: Vec<KernelEstimate> = kernels.into_values().collect();
        for k in &mut kernels {
            k.cpi = ratio(k.cycles, k.instructions);
            k.blocks.sort_by(|a, b| b.cycles.total_cmp(&a.cycles));
        }
        kernels.sort_by(|a, b| b.cycles.total_cmp(&a.cycles));
        Estimate {
            kernels,
            samples: self.samples_total,
            unknown_samples: self.unknown_samples,
            stacks: self.stacks,
            walks: walks_counted,
            broken_walks: self.broken,
        }
    }

    /// Intervals seen (counted and broken): the denominator that turns
    /// walks into executions under [`Scale::Rates`].
    fn stacks_intervals(&self) -> f64 {
        (self.intervals + self.broken) as f64
    }

    /// How many stacks saw each taken branch: stacks of `depth` branches
    /// captured every `branch_every` branches overlap, so their walks are
    /// not independent observations.
    fn overlap(&self) -> f64 {
        if self.stacks == 0 {
            return 1.0;
        }
        let depth = (self.intervals + self.broken) as f64 / self.stacks as f64;
        (depth / self.branch_every as f64).max(1.0)
    }

    /// Relative standard error of a block's CPI: the cycle share's
    /// binomial error and the walk share's, in quadrature (walks counted
    /// once per independent stack).
    fn relative_error(&self, walks: u64, samples: u64, overlap: f64) -> f64 {
        let term = |k: f64, n: f64| {
            if k <= 0.0 || n <= 0.0 {
                f64::INFINITY
            } else {
                (1.0 - k / n).max(0.0) / k
            }
        };
        let walk_term = term(walks as f64 / overlap, self.walks_total as f64 / overlap);
        (term(samples as f64, self.samples_total as f64) + walk_term).sqrt()
    }
}

/// `a / b`, NaN when `b` is 0.
fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        f64::NAN
    } else {
        a / b
    }
}
