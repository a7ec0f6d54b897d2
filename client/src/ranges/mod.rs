//! Marked ranges and call graphs through the tenant node (ABI 1.7): the
//! requests of `gpupm_uapi::tenant::ranges` on a [`TenantClient`], with
//! the call-graph reads paged into one [`CallGraphData`].

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

pub mod graph;

pub use self::graph::{BadStack, CallGraphData};
use crate::tenant::{ClientError, TenantClient};

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
