//! The per-type and per-sample parts of `gpupm report`: how many records
//! of each type the recording holds (sealed, lost), and sample counts per
//! context, kernel and block.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Serialize;

use crate::trace::decode::Streams;
use crate::trace::{Body, RecordType};

/// One record type's counts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct TypeSummary {
    /// `counter_delta`, `branch_stack`, `pc_sample` or `ri_record` (the
    /// records of RI report groups and halt markers; lost: groups).
    #[serde(rename = "type")]
    pub record_type: &'static str,
    /// Records of the type in the recording.
    pub records: u64,
    /// Of them, sealed (a confidential VM's, not opened).
    pub sealed: u64,
    /// Records of the type the session did not get (Σ `lost_before`).
    pub lost: u64,
}

/// Samples of one block.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct BlockSamples {
    /// Kernel index.
    pub kernel: u16,
    /// Block index within the kernel.
    pub block: u16,
    /// PC samples that found the context there.
    pub pc_samples: u64,
}

/// Samples of one context.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ContextSamples {
    /// Context id.
    pub ctx: u32,
    /// Its VM.
    pub vm: u32,
    /// PC samples.
    pub pc_samples: u64,
    /// Branch stacks.
    pub branch_stacks: u64,
    /// PC samples per block, most sampled first.
    pub blocks: Vec<BlockSamples>,
}

/// Counts per record type, in [`RecordType::ALL`] order.
pub fn per_type(s: &Streams) -> Vec<TypeSummary> {
    RecordType::ALL
        .iter()
        .map(|&t| {
            let recs = s.streams.get(&t).map(Vec::as_slice).unwrap_or_default();
            TypeSummary {
                record_type: t.name(),
                records: recs.len() as u64,
                sealed: recs
                    .iter()
                    .filter(|r| matches!(r.body, Body::Sealed))
                    .count() as u64,
                lost: recs.iter().map(|r| r.lost_before).sum(),
            }
        })
        .collect()
}

/// Sample counts per context (by PC samples, most first), kernel and block.
pub fn per_context(s: &Streams) -> Vec<ContextSamples> {
    let mut ctxs: BTreeMap<u32, ContextSamples> = BTreeMap::new();
    let mut blocks: BTreeMap<(u32, u16, u16), u64> = BTreeMap::new();
    let samples = [RecordType::BranchStack, RecordType::PcSample]
        .iter()
        .filter_map(|t| s.streams.get(t))
        .flatten();
    for r in samples.filter(|r| !matches!(r.body, Body::Sealed)) {
        let entry = ctxs.entry(r.ctx).or_insert_with(|| ContextSamples {
            ctx: r.ctx,
            vm: r.vm,
            ..ContextSamples::default()
        });
        match &r.body {
            Body::Pc(pc) => {
                entry.pc_samples += 1;
                *blocks.entry((r.ctx, pc.kernel, pc.block)).or_default() += 1;
            }
            Body::Branch(_) => entry.branch_stacks += 1,
            Body::Counter(_) | Body::Ri(_) | Body::Sealed => {}
        }
    }
    for ((ctx, kernel, block), n) in blocks {
        if let Some(c) = ctxs.get_mut(&ctx) {
            c.blocks.push(BlockSamples {
                kernel,
                block,
                pc_samples: n,
            });
        }
    }
    let mut out: Vec<ContextSamples> = ctxs.into_values().collect();
    for c in &mut out {
        c.blocks.sort_by(|a, b| {
            b.pc_samples
                .cmp(&a.pc_samples)
                .then(a.kernel.cmp(&b.kernel))
        });
    }
    out.sort_by(|a, b| b.pc_samples.cmp(&a.pc_samples).then(a.ctx.cmp(&b.ctx)));
    out
}

/// The text of both parts (`top` blocks per context).
pub fn text(types: &[TypeSummary], ctxs: &[ContextSamples], top: usize) -> String {
    let mut t = format!(
        "\nrecord types:\n{:<14} {:>10} {:>8} {:>8}\n",
        "TYPE", "RECORDS", "SEALED", "LOST"
    );
    for ty in types {
        t += &format!(
            "{:<14} {:>10} {:>8} {:>8}\n",
            ty.record_type, ty.records, ty.sealed, ty.lost
        );
    }
    if ctxs.is_empty() {
        return t;
    }
    t += &format!(
        "\nsamples per context (top {top} blocks each):\n{:>6} {:>4} {:>10} {:>10}   BLOCKS (kernel/block: PC samples)\n",
        "CTX", "VM", "PC", "STACKS"
    );
    for c in ctxs {
        let blocks: Vec<String> = c
            .blocks
            .iter()
            .take(top)
            .map(|b| format!("{}/{}: {}", b.kernel, b.block, b.pc_samples))
            .collect();
        t += &format!(
            "{:>6} {:>4} {:>10} {:>10}   {}\n",
            c.ctx,
            c.vm,
            c.pc_samples,
            c.branch_stacks,
            blocks.join(", ")
        );
    }
    t
}
