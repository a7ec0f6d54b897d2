//! What `gpupm cpi` prints: the table and the `--json` object.

use gpupm_client::sampling::reconstruct::{BlockEstimate, Estimate, KernelEstimate};
use gpupm_driver::scenario::program::ProgramSpec;

use super::{Args, Collected};

/// `gpupm cpi --json`.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct CpiOutput {
    /// Context sampled.
    pub ctx: u32,
    /// Program it runs (scenario name).
    pub program: String,
    /// P asked for.
    pub period: u32,
    /// R_MAX asked for.
    pub dither: u32,
    /// N asked for.
    pub branch_every: u32,
    /// Cycle samples used.
    pub samples: u64,
    /// Branch stacks used.
    pub stacks: u64,
    /// Records lost (device buffers and the session's queue).
    pub lost: u64,
    /// Walks between taken branches the program could not explain.
    pub broken_walks: u64,
    /// Kernels, most cycles first.
    pub kernels: Vec<KernelOut>,
}

/// One kernel of [`CpiOutput`].
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct KernelOut {
    /// Kernel index in the program: `k<index>` in `gpupm ranges`,
    /// `callgraph` and `report`.
    pub kernel: u32,
    /// Kernel name.
    pub name: String,
    /// Estimated instructions (one SM).
    pub instructions: f64,
    /// Estimated cycles.
    pub cycles: f64,
    /// cycles / instructions; null without instructions.
    pub cpi: Option<f64>,
    /// Cycle samples in the kernel.
    pub samples: u64,
    /// Blocks, most cycles first.
    pub blocks: Vec<BlockOut>,
}

/// One block of [`KernelOut`].
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct BlockOut {
    /// Block name.
    pub name: String,
    /// Block index in the kernel.
    pub block: u32,
    /// Estimated instructions (one SM).
    pub instructions: f64,
    /// Estimated cycles.
    pub cycles: f64,
    /// cycles / instructions; null when no walk crossed the block.
    pub cpi: Option<f64>,
    /// Cycle samples in the block.
    pub samples: u64,
    /// ~95 % confidence interval of `cpi`, low end.
    pub cpi_low: Option<f64>,
    /// ~95 % confidence interval of `cpi`, high end.
    pub cpi_high: Option<f64>,
}

fn finite(v: f64) -> Option<f64> {
    v.is_finite().then_some(v)
}

impl CpiOutput {
    /// The output of one run.
    pub fn new(ctx: u32, spec: &ProgramSpec, args: &Args, got: &Collected, e: &Estimate) -> Self {
        let (period, dither, branch_every) = args.rates();
        CpiOutput {
            ctx,
            program: spec.name.clone(),
            period,
            dither,
            branch_every,
            samples: e.samples,
            stacks: e.stacks,
            lost: got.lost,
            broken_walks: e.broken_walks,
            kernels: e.kernels.iter().map(|k| kernel(spec, k)).collect(),
        }
    }

    /// The table, with `top` blocks per kernel.
    pub fn table(&self, top: usize) -> String {
        let mut out = format!(
            "ctx {}: program {} — P = {} + U(0..={}), N = {}: {} cycle samples, {} branch stacks, {} lost\n",
            self.ctx,
            self.program,
            self.period,
            self.dither,
            self.branch_every,
            self.samples,
            self.stacks,
            self.lost
        );
        for k in &self.kernels {
            out.push_str(&format!(
                "\nkernel k{} ({}): {:.4e} instructions, {:.4e} cycles, CPI {}, {} samples\n",
                k.kernel,
                k.name,
                k.instructions,
                k.cycles,
                fmt_opt(k.cpi),
                k.samples
            ));
            out.push_str(&format!(
                "  {:<22} {:>12} {:>12} {:>7} {:>8}  {:<17}\n",
                "block (KERNEL:BLOCK)", "instructions", "cycles", "CPI", "samples", "95 % CI"
            ));
            for b in k.blocks.iter().take(top) {
                // The place as `gpupm ranges add --code` takes it.
                let place = format!("k{}:{} {}", k.kernel, b.block, b.name);
                out.push_str(&format!(
                    "  {:<22} {:>12.4e} {:>12.4e} {:>7} {:>8}  [{}, {}]\n",
                    place,
                    b.instructions,
                    b.cycles,
                    fmt_opt(b.cpi),
                    b.samples,
                    fmt_opt(b.cpi_low),
                    fmt_opt(b.cpi_high)
                ));
            }
        }
        out
    }
}

fn fmt_opt(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.3}"))
}

fn kernel(spec: &ProgramSpec, k: &KernelEstimate) -> KernelOut {
    let ks = spec.kernels.get(k.kernel as usize);
    KernelOut {
        kernel: k.kernel,
        name: k.name.clone(),
        instructions: k.instructions,
        cycles: k.cycles,
        cpi: finite(k.cpi),
        samples: k.samples,
        blocks: k
            .blocks
            .iter()
            .map(|b| {
                block(
                    ks.and_then(|ks| ks.blocks.get(b.block as usize))
                        .map(|s| s.name.as_str()),
                    b,
                )
            })
            .collect(),
    }
}

fn block(name: Option<&str>, b: &BlockEstimate) -> BlockOut {
    BlockOut {
        name: name.map_or_else(|| format!("b{}", b.block), str::to_owned),
        block: b.block,
        instructions: b.instructions,
        cycles: b.cycles,
        cpi: finite(b.cpi),
        samples: b.samples,
        cpi_low: finite(b.cpi_low),
        cpi_high: finite(b.cpi_high),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_and_blocks_are_named_as_ranges_and_callgraph_name_them() {
        let out = CpiOutput {
            ctx: 3,
            program: "p".into(),
            period: 1,
            dither: 0,
            branch_every: 1,
            samples: 1,
            stacks: 1,
            lost: 0,
            broken_walks: 0,
            kernels: vec![KernelOut {
                kernel: 2,
                name: "gemm".into(),
                instructions: 1.0,
                cycles: 1.0,
                cpi: Some(1.0),
                samples: 1,
                blocks: vec![BlockOut {
                    name: "loop".into(),
                    block: 7,
                    instructions: 1.0,
                    cycles: 1.0,
                    cpi: Some(1.0),
                    samples: 1,
                    cpi_low: None,
                    cpi_high: None,
                }],
            }],
        };
        let t = out.table(5);
        assert!(t.contains("\nkernel k2 (gemm):"), "{t}");
        assert!(t.contains("  k2:7 loop "), "{t}");
    }
}
