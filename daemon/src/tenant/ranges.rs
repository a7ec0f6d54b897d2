//! The tenant node's range and call-graph ioctls (ABI 1.7): checking the
//! requests (shape first, then the context), and answering them from the
//! range plane.

use gpupm_uapi::ranges::range_event;
use gpupm_uapi::tenant::ranges::{
    graph_flags, range_kind, range_trigger, AddRange, GraphEdge, GraphHeader, KernelSamples,
    ReadCallEdges, ReadCallKernels, ReadCallStacks, ReadRanges, RemoveRange, StackCount,
    GRAPH_EDGE_ROWS, GRAPH_KERNEL_ROWS, GRAPH_STACK_ROWS, STACK_FRAMES,
};
use gpupm_uapi::tenant::scope;

use super::answer::{check_no_flags, check_reserved, check_version};
use super::authz::{recheck, resolve};
use super::error::RequestError;
use super::policy::Identity;
use std::sync::Arc;

use gpupm_client::config::Limits;
use gpupm_uapi::ranges::RANGES_PER_PARTITION;

use super::Served;
use crate::ranges::{CallGraphData, RangeBook, RangeError, RangeQuota, RangeSpec};
use crate::view::{CounterView, Scope, Totals};

/// A context the caller may use ranges on: its VM, partition and program.
struct Target {
    ctx: u32,
    vm: u32,
    partition: u32,
    program: u32,
    book: Arc<RangeBook>,
}

/// The range registers of partition `partition` each VM bound to it may
/// use: an equal share of the partition's (at least one), fixed by the
/// device's VM table and not by what anyone holds.
pub fn register_quota(view: &dyn CounterView, partition: u32) -> u32 {
    let vms = view
        .vms()
        .into_iter()
        .filter(|&vm| view.vm_partition(vm) == Some(partition))
        .count();
    let vms = u32::try_from(vms).unwrap_or(u32::MAX).max(1);
    (RANGES_PER_PARTITION / vms).max(1)
}

/// Resolves `ctx` for the caller (EACCES / ENOENT as for every scope),
/// refusing a confidential VM's context (EOPNOTSUPP).
fn target(served: &Served, identity: &Identity, ctx: u32) -> Result<Target, RequestError> {
    let book = served
        .features
        .ranges
        .clone()
        .ok_or(RequestError::UnknownIoctl)?;
    let view = served.view.as_ref();
    let r = resolve(view, identity, scope::CONTEXT, ctx, false)?;
    let vm = r.vm.ok_or(RequestError::Internal("context without a VM"))?;
    let partition = view
        .vm_partition(vm)
        .ok_or(RequestError::Internal("VM without a partition"))?;
    let confidential = matches!(view.totals(Scope::Vm(vm)), Some(Totals::Sealed(_)));
    let program = view.ctx_program(ctx).unwrap_or(0);
    recheck(view, identity, r)?;
    if confidential {
        return Err(RequestError::Unsupported(
            "marked ranges of a confidential VM's context",
        ));
    }
    Ok(Target {
        ctx,
        vm,
        partition,
        program,
        book,
    })
}

fn range_error(e: RangeError, identity: &Identity) -> RequestError {
    match e {
        RangeError::NoSpace => RequestError::NoSpace,
        RangeError::Missing => super::authz::missing(identity),
        RangeError::Refused => RequestError::Invalid("the device refused the range"),
        RangeError::Inactive => RequestError::Invalid("the context is not active"),
        RangeError::Device(e) => {
            tracing::warn!(
                error = gpupm_fusemount::logging::one_line(e),
                "a range request failed on the device"
            );
            RequestError::Device
        }
    }
}

/// The range an [`AddRange`] describes, checked.
fn checked_spec(arg: &AddRange) -> Result<RangeSpec, RequestError> {
    check_version(arg.version)?;
    check_reserved(arg.reserved)?;
    check_no_flags(arg.flags)?;
    if arg.event >= range_event::COUNT {
        return Err(RequestError::Invalid("event out of range"));
    }
    match arg.trigger {
        range_trigger::NONE if arg.threshold != 0 => {
            return Err(RequestError::Invalid("threshold without a trigger"))
        }
        range_trigger::NONE => {}
        range_trigger::COUNT | range_trigger::LATENCY if arg.threshold == 0 => {
            return Err(RequestError::Invalid("a trigger needs a threshold"))
        }
        range_trigger::COUNT | range_trigger::LATENCY => {}
        _ => return Err(RequestError::Invalid("unknown trigger")),
    }
    if arg.first > arg.last {
        return Err(RequestError::Invalid("first after last"));
    }
    let kernel = match arg.kind {
        range_kind::CODE => {
            if arg.last > u32::from(u16::MAX) {
                return Err(RequestError::Invalid("block index out of range"));
            }
            u16::try_from(arg.kernel).map_err(|_| RequestError::Invalid("kernel out of range"))?
        }
        range_kind::DATA if arg.kernel != 0 => {
            return Err(RequestError::Invalid("a data range names no kernel"))
        }
        range_kind::DATA => 0,
        _ => return Err(RequestError::Invalid("unknown range kind")),
    };
    Ok(RangeSpec {
        kind: arg.kind,
        event: arg.event,
        trigger: arg.trigger,
        threshold: arg.threshold,
        kernel,
        first: arg.first,
        last: arg.last,
    })
}

pub(super) fn add_range(
    served: &Served,
    identity: &Identity,
    limits: &Limits,
    mut arg: Box<AddRange>,
) -> Result<Box<AddRange>, RequestError> {
    let view = served.view.as_ref();
    let spec = checked_spec(&arg)?;
    let t = target(served, identity, arg.ctx)?;
    if t.program == 0 {
        return Err(RequestError::Invalid("the context runs no program"));
    }
    let quota = RangeQuota {
        registers: register_quota(view, t.partition),
        ranges: usize::try_from(limits.ranges_per_vm).unwrap_or(usize::MAX),
    };
    let added = t
        .book
        .add(t.ctx, t.vm, t.partition, t.program, spec, quota)
        .map_err(|e| range_error(e, identity))?;
    arg.handle = added.handle;
    arg.partition = t.partition;
    arg.register = added.register;
    arg.shared = u32::from(added.shared);
    arg.program = t.program;
    Ok(arg)
}

pub(super) fn read_ranges(
    served: &Served,
    identity: &Identity,
    mut arg: Box<ReadRanges>,
) -> Result<Box<ReadRanges>, RequestError> {
    check_version(arg.version)?;
    check_reserved(arg.reserved)?;
    check_no_flags(arg.flags)?;
    let t = target(served, identity, arg.ctx)?;
    let rows = t.book.read(t.ctx).map_err(|e| range_error(e, identity))?;
    arg.count = 0;
    arg.partition = t.partition;
    arg.rows = Default::default();
    for (slot, r) in arg.rows.iter_mut().zip(&rows) {
        *slot = *r;
        arg.count += 1;
    }
    Ok(arg)
}

pub(super) fn remove_range(
    served: &Served,
    identity: &Identity,
    arg: &RemoveRange,
) -> Result<(), RequestError> {
    check_version(arg.version)?;
    check_reserved(arg.reserved)?;
    let t = target(served, identity, arg.ctx)?;
    t.book
        .remove(t.ctx, t.vm, arg.handle)
        .map_err(|e| range_error(e, identity))
}

/// Checks a graph request's head and answers it with `fill`, which
/// writes the rows from `head.first` and returns (rows written, total).
fn graph_read(
    served: &Served,
    identity: &Identity,
    head: &mut GraphHeader,
    fill: impl FnOnce(&CallGraphData, usize) -> Result<(usize, usize), RequestError>,
) -> Result<(), RequestError> {
    check_version(head.version)?;
    check_no_flags(head.flags)?;
    let t = target(served, identity, head.ctx)?;
    let first = usize::try_from(head.first).unwrap_or(usize::MAX);
    let answered = t
        .book
        .with_graph(t.ctx, |g| {
            fill(g, first)
                .map(|(count, total)| (count, total, g.crossings, g.lost, g.stacks_dropped))
        })
        .map_err(|e| range_error(e, identity))?;
    // A context without ranges has an empty graph.
    let (count, total, crossings, lost, dropped) = match answered {
        Some(r) => r?,
        None if first == 0 => (0, 0, 0, 0, 0),
        None => return Err(RequestError::Invalid("first row past the end")),
    };
    head.count = u32::try_from(count).unwrap_or(u32::MAX);
    head.total = u32::try_from(total).unwrap_or(u32::MAX);
    head.crossings = crossings;
    head.lost = lost;
    head.stacks_dropped = dropped;
    head.flags = if dropped > 0 {
        graph_flags::STACKS_DROPPED
    } else {
        0
    };
    Ok(())
}

/// Copies rows `first..` of `items` into `rows`; `first` past the end is
/// EINVAL.
fn page<I, R>(
    items: impl ExactSizeIterator<Item = I>,
    first: usize,
    rows: &mut [R],
    make: impl Fn(I) -> R,
) -> Result<(usize, usize), RequestError> {
    let total = items.len();
    if first > total {
        return Err(RequestError::Invalid("first row past the end"));
    }
    let mut n = 0;
    for (slot, item) in rows.iter_mut().zip(items.skip(first)) {
        *slot = make(item);
        n += 1;
    }
    Ok((n, total))
}

pub(super) fn read_call_edges(
    served: &Served,
    identity: &Identity,
    mut arg: Box<ReadCallEdges>,
) -> Result<Box<ReadCallEdges>, RequestError> {
    let mut rows = [GraphEdge::default(); GRAPH_EDGE_ROWS];
    graph_read(served, identity, &mut arg.head, |g, first| {
        page(
            g.edges.iter(),
            first,
            &mut rows,
            |(&(kernel, call_block, callee), &count)| GraphEdge {
                kernel,
                call_block,
                callee,
                reserved: 0,
                count,
            },
        )
    })?;
    arg.rows = rows;
    Ok(arg)
}

pub(super) fn read_call_kernels(
    served: &Served,
    identity: &Identity,
    mut arg: Box<ReadCallKernels>,
) -> Result<Box<ReadCallKernels>, RequestError> {
    let mut rows = [KernelSamples::default(); GRAPH_KERNEL_ROWS];
    graph_read(served, identity, &mut arg.head, |g, first| {
        page(
            g.kernels.iter(),
            first,
            &mut rows,
            |(&kernel, &(own, inclusive))| KernelSamples {
                kernel,
                self_samples: own,
                inclusive,
                ..KernelSamples::default()
            },
        )
    })?;
    arg.rows = rows;
    Ok(arg)
}

pub(super) fn read_call_stacks(
    served: &Served,
    identity: &Identity,
    mut arg: Box<ReadCallStacks>,
) -> Result<Box<ReadCallStacks>, RequestError> {
    let mut rows = [StackCount::default(); GRAPH_STACK_ROWS];
    graph_read(served, identity, &mut arg.head, |g, first| {
        page(g.stacks.iter(), first, &mut rows, |(path, &count)| {
            let mut frames = [0u16; STACK_FRAMES];
            let n = path.len().min(STACK_FRAMES);
            frames[..n].copy_from_slice(&path[..n]);
            StackCount {
                frames_len: u32::try_from(n).unwrap_or(0),
                count,
                frames,
                ..StackCount::default()
            }
        })
    })?;
    arg.rows = rows;
    Ok(arg)
}
