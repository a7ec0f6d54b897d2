//! The debug ledger's ioctls (only with `gpupm-driver --debug-ledger`):
//! each query's inputs are checked and its output fields must be zero,
//! before the backend answers.

use gpupm_uapi::ioc;
use gpupm_uapi::ioctl::{
    ledger_scope, BlockLedgerQuery, LedgerQuery, RiLedgerQuery, GPUPM_IOC_LEDGER,
    GPUPM_IOC_LEDGER_BLOCKS, GPUPM_IOC_LEDGER_CALLS, GPUPM_IOC_LEDGER_RANGES, GPUPM_IOC_LEDGER_RI,
    IOCTL_STRUCT_VERSION, IOC_MAGIC,
};
use gpupm_uapi::ranges::{CallLedgerQuery, RangeLedgerQuery};
use gpupm_uapi::ri::RI_BLOCKS;

use super::{check_flags, check_version, IoctlReply};
use crate::node::backend::DeviceBackend;
use crate::node::error::{malformed, NodeError};

/// The ledger ioctls' numbers (any size: a wrongly sized one must not
/// reveal that the ledger exists either).
const LEDGER_IOCTLS: [u32; 5] = [
    GPUPM_IOC_LEDGER,
    GPUPM_IOC_LEDGER_BLOCKS,
    GPUPM_IOC_LEDGER_RI,
    GPUPM_IOC_LEDGER_RANGES,
    GPUPM_IOC_LEDGER_CALLS,
];

/// Whether `cmd` has the number of a ledger ioctl.
pub(super) fn is_ledger(cmd: u32) -> bool {
    ioc::ty(cmd) == IOC_MAGIC && LEDGER_IOCTLS.iter().any(|&c| ioc::nr(c) == ioc::nr(cmd))
}

/// `GPUPM_IOC_LEDGER`: a scope's totals.
pub(super) fn totals(
    backend: &mut dyn DeviceBackend,
    arg: LedgerQuery,
) -> Result<IoctlReply, NodeError> {
    check_version(arg.version)?;
    check_flags(arg.flags)?;
    if arg.envelope != Default::default() || arg.tag != [0; 16] {
        return Err(malformed("ledger query with a non-zero envelope or tag"));
    }
    let scope_ok = match arg.scope {
        ledger_scope::CONTEXT | ledger_scope::VM => arg.id != 0,
        ledger_scope::SYSTEM => arg.id == 0,
        _ => false,
    };
    if !scope_ok {
        return Err(malformed(format!(
            "ledger scope {} id {}",
            arg.scope, arg.id
        )));
    }
    let mut out = backend.ledger(arg.scope, arg.id)?;
    out.version = IOCTL_STRUCT_VERSION;
    out.scope = arg.scope;
    out.id = arg.id;
    Ok(IoctlReply::ok(&out))
}

/// `GPUPM_IOC_LEDGER_BLOCKS`: a context's per-block ground truth.
pub(super) fn blocks(
    backend: &mut dyn DeviceBackend,
    arg: BlockLedgerQuery,
) -> Result<IoctlReply, NodeError> {
    check_version(arg.version)?;
    check_flags(arg.flags)?;
    let outputs_zero = arg.count == 0
        && arg.total == 0
        && arg.ctx_cycles == 0
        && arg.rows.iter().all(|r| *r == Default::default())
        && arg.envelope == Default::default()
        && arg.tag == [0; 16];
    if !outputs_zero || arg.ctx == 0 {
        return Err(malformed(format!(
            "block ledger query for ctx {} with non-zero output fields",
            arg.ctx
        )));
    }
    Ok(IoctlReply::ok(&backend.ledger_blocks(arg.ctx, arg.first)?))
}

/// `GPUPM_IOC_LEDGER_RI`: a runtime-instrumentation block's ground truth.
pub(super) fn ri(
    backend: &mut dyn DeviceBackend,
    arg: RiLedgerQuery,
) -> Result<IoctlReply, NodeError> {
    check_version(arg.version)?;
    check_flags(arg.flags)?;
    let query_only = RiLedgerQuery {
        version: arg.version,
        block: arg.block,
        ..RiLedgerQuery::default()
    };
    if arg != query_only || arg.block >= RI_BLOCKS {
        return Err(malformed(format!(
            "RI ledger query for block {} with non-zero output fields or out of range",
            arg.block
        )));
    }
    Ok(IoctlReply::ok(&backend.ledger_ri(arg.block)?))
}

/// `GPUPM_IOC_LEDGER_RANGES`: a partition's marked ranges for a context.
pub(super) fn ranges(
    backend: &mut dyn DeviceBackend,
    arg: RangeLedgerQuery,
) -> Result<IoctlReply, NodeError> {
    check_version(arg.version)?;
    check_flags(arg.flags)?;
    let outputs_zero = arg.rows.iter().all(|r| *r == Default::default())
        && arg.envelope == Default::default()
        && arg.tag == [0; 16];
    if !outputs_zero || arg.ctx == 0 || arg.partition == 0 {
        return Err(malformed(format!(
            "range ledger query for ctx {} partition {} with non-zero output fields",
            arg.ctx, arg.partition
        )));
    }
    Ok(IoctlReply::ok(
        &backend.ledger_ranges(arg.ctx, arg.partition)?,
    ))
}

/// `GPUPM_IOC_LEDGER_CALLS`: a context's call-graph ground truth.
pub(super) fn calls(
    backend: &mut dyn DeviceBackend,
    arg: CallLedgerQuery,
) -> Result<IoctlReply, NodeError> {
    check_version(arg.version)?;
    check_flags(arg.flags)?;
    let outputs_zero = arg.count == 0
        && arg.total == 0
        && arg.rows.iter().all(|r| *r == Default::default())
        && arg.envelope == Default::default()
        && arg.tag == [0; 16];
    if !outputs_zero || arg.ctx == 0 {
        return Err(malformed(format!(
            "call ledger query for ctx {} with non-zero output fields",
            arg.ctx
        )));
    }
    Ok(IoctlReply::ok(&backend.ledger_calls(arg.ctx, arg.first)?))
}
