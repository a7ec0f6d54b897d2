//! Marked ranges and call graphs through the tenant node (ABI 1.7): the
//! requests of `gpupm_uapi::tenant::ranges` on a [`TenantClient`], with
//! the call-graph reads paged into one [`CallGraphData`].

use std::collections::BTreeMap;

use gpupm_uapi::tenant::ranges::{
    AddRange, GraphHeader, RangeRow, ReadCallEdges, ReadCallKernels, ReadCallStacks, ReadRanges,
    RemoveRange,
};
use gpupm_uapi::tenant::{
    TENANT_IOC_ADD_RANGE, TENANT_IOC_READ_CALL_EDGES, TENANT_IOC_READ_CALL_KERNELS,
    TENANT_IOC_READ_CALL_STACKS, TENANT_IOC_READ_RANGES, TENANT_IOC_REMOVE_RANGE,
    TENANT_STRUCT_VERSION,
};
use zerocopy::FromZeros;

use crate::tenant::{ClientError, TenantClient};

/// A context's call graph, all pages read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallGraphData {
    /// Crossing records in the graph.
    pub crossings: u64,
    /// Crossings whose record the device lost.
    pub lost: u64,
    /// Crossings whose stack is not in `stacks`.
    pub stacks_dropped: u64,
    /// (kernel, call block, callee) → count.
    pub edges: BTreeMap<(u16, u16, u16), u64>,
    /// kernel → (self, inclusive).
    pub kernels: BTreeMap<u16, (u64, u64)>,
    /// Kernel path (outermost first) → count.
    pub stacks: BTreeMap<Vec<u16>, u64>,
}

/// The rows an answer says it filled (never more than it has).
fn filled<T>(rows: &[T], count: u32) -> &[T] {
    let n = usize::try_from(count).map_or(rows.len(), |n| n.min(rows.len()));
    &rows[..n]
}

fn head(ctx: u32, first: u32) -> GraphHeader {
    GraphHeader {
        version: TENANT_STRUCT_VERSION,
        ctx,
        first,
        ..GraphHeader::default()
    }
}

impl TenantClient {
    /// Programs `req` (its input fields); answers it with the outputs.
    pub fn add_range(&self, req: &AddRange) -> Result<AddRange, ClientError> {
        let mut arg = AddRange {
            version: TENANT_STRUCT_VERSION,
            ..*req
        };
        self.call("TENANT_IOC_ADD_RANGE", TENANT_IOC_ADD_RANGE, &mut arg)?;
        Ok(arg)
    }

    /// The ranges of context `ctx`.
    pub fn read_ranges(&self, ctx: u32) -> Result<Vec<RangeRow>, ClientError> {
        let mut arg = ReadRanges::new_zeroed();
        (arg.version, arg.ctx) = (TENANT_STRUCT_VERSION, ctx);
        self.call("TENANT_IOC_READ_RANGES", TENANT_IOC_READ_RANGES, &mut arg)?;
        Ok(filled(&arg.rows, arg.count).to_vec())
    }

    /// Removes range `handle` of context `ctx`.
    pub fn remove_range(&self, ctx: u32, handle: u32) -> Result<(), ClientError> {
        let mut arg = RemoveRange {
            version: TENANT_STRUCT_VERSION,
            ctx,
            handle,
            reserved: 0,
        };
        self.call("TENANT_IOC_REMOVE_RANGE", TENANT_IOC_REMOVE_RANGE, &mut arg)
    }

    /// The call graph of context `ctx` (every page of the three reads).
    pub fn call_graph(&self, ctx: u32) -> Result<CallGraphData, ClientError> {
        let mut g = CallGraphData::default();
        let mut first = 0;
        loop {
            let mut arg = ReadCallEdges::new_zeroed();
            arg.head = head(ctx, first);
            self.call(
                "TENANT_IOC_READ_CALL_EDGES",
                TENANT_IOC_READ_CALL_EDGES,
                &mut arg,
            )?;
            (g.crossings, g.lost, g.stacks_dropped) =
                (arg.head.crossings, arg.head.lost, arg.head.stacks_dropped);
            for e in filled(&arg.rows, arg.head.count) {
                g.edges.insert((e.kernel, e.call_block, e.callee), e.count);
            }
            first += arg.head.count;
            if arg.head.count == 0 || first >= arg.head.total {
                break;
            }
        }
        first = 0;
        loop {
            let mut arg = ReadCallKernels::new_zeroed();
            arg.head = head(ctx, first);
            self.call(
                "TENANT_IOC_READ_CALL_KERNELS",
                TENANT_IOC_READ_CALL_KERNELS,
                &mut arg,
            )?;
            for k in filled(&arg.rows, arg.head.count) {
                g.kernels.insert(k.kernel, (k.self_samples, k.inclusive));
            }
            first += arg.head.count;
            if arg.head.count == 0 || first >= arg.head.total {
                break;
            }
        }
        first = 0;
        loop {
            let mut arg = ReadCallStacks::new_zeroed();
            arg.head = head(ctx, first);
            self.call(
                "TENANT_IOC_READ_CALL_STACKS",
                TENANT_IOC_READ_CALL_STACKS,
                &mut arg,
            )?;
            for s in filled(&arg.rows, arg.head.count) {
                g.stacks
                    .insert(filled(&s.frames, s.frames_len).to_vec(), s.count);
            }
            first += arg.head.count;
            if arg.head.count == 0 || first >= arg.head.total {
                break;
            }
        }
        Ok(g)
    }
}

impl CallGraphData {
    /// The folded-stack profile flame-graph tools read: one
    /// `k0;k1;…;kn COUNT` line per stack, kernels named by `name`.
    pub fn folded(&self, name: impl Fn(u16) -> String) -> String {
        let mut out = String::new();
        for (path, count) in &self.stacks {
            let names: Vec<String> = path.iter().map(|&k| name(k)).collect();
            out.push_str(&names.join(";"));
            out.push(' ');
            out.push_str(&count.to_string());
            out.push('\n');
        }
        out
    }
}
