//! The marked-range units in the device: their interrupts, their window
//! region, and the debug ledgers of ranges and call graphs.

use gpupm_uapi::intr::source;
use gpupm_uapi::ioctl::{ledger_flags, IOCTL_STRUCT_VERSION};
use gpupm_uapi::layout::Envelope;
use gpupm_uapi::ranges::{
    range_span_offset, CallEdge, CallLedgerQuery, RangeLedgerQuery, CALL_LEDGER_ROWS, RANGE_REGION,
    RANGE_SPAN,
};
use gpupm_uapi::regs::{ctx_state, MAX_PARTITION_SLOTS};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

use super::api::DeviceError;
use super::Device;
use crate::model::memory::WindowError;
use crate::model::program::CompiledExit;
use crate::model::ranges::RangeUnit;
use crate::scenario::Scenario;

impl Device {
    /// Seals and stores the records partition `p`'s range unit produced
    /// in the last walk (of a context of VM `vm`) and raises their
    /// interrupts.
    pub(super) fn deliver_range_events(&mut self, p: u32, vm: u32) {
        let unit = &mut self.ranges[p as usize];
        unit.flush(vm, self.vms.cipher(vm));
        for (arg, who, cycle) in std::mem::take(&mut unit.events) {
            self.intr.raise(source::RANGE_THRESHOLD, p, arg, who, cycle);
        }
    }

    /// Copies range-region bytes at window `offset` into `buf`.
    pub(super) fn read_range_window(&self, offset: u64, buf: &mut [u8]) -> Result<(), WindowError> {
        let err = WindowError::OutOfRange {
            offset,
            len: buf.len(),
        };
        let rel = offset.checked_sub(RANGE_REGION).ok_or(err.clone())?;
        let p = u32::try_from(rel / RANGE_SPAN).map_err(|_| err.clone())?;
        let unit = self.ranges.get(p as usize).ok_or(err.clone())?;
        unit.read_ring_window(offset - range_span_offset(p), buf)
            .ok_or(err)
    }

    /// Context `ctx` as a debug-ledger scope: it exists (active or
    /// destroyed, not yet released), counted up to now.
    fn ledger_context(&mut self, ctx: u32) -> Result<(u32, u64), DeviceError> {
        let c = self.ctxs.get(ctx);
        if ctx == 0 || c.state == ctx_state::FREE {
            return Err(DeviceError::BadLedgerScope { scope: 0, id: ctx });
        }
        let (vm, serial) = (c.vm, c.serial);
        let p = self.vms.partition(vm);
        if self.ccu.owner(p).ctx == ctx {
            self.sync(p);
        }
        Ok((vm, serial))
    }

    /// The ground truth of partition `p`'s ranges for context `ctx`
    /// (debug ledger), sealed for a confidential VM's context.
    pub fn ledger_ranges(&mut self, ctx: u32, p: u32) -> Result<RangeLedgerQuery, DeviceError> {
        let bad = DeviceError::BadLedgerScope { scope: 0, id: ctx };
        if p == 0 || p >= MAX_PARTITION_SLOTS || !self.parts.is_configured(p) {
            return Err(bad);
        }
        let (vm, serial) = self.ledger_context(ctx)?;
        let mut q = RangeLedgerQuery::new_zeroed();
        q.version = IOCTL_STRUCT_VERSION;
        q.ctx = ctx;
        q.partition = p;
        q.rows = self.ranges[p as usize].truth(ctx, serial);
        if let Some(cipher) = self.vms.cipher(vm) {
            let mut payload = q.rows.as_bytes().to_vec();
            (q.envelope, q.tag) = cipher.seal(&mut payload);
            q.rows = FromBytes::read_from_bytes(&payload[..]).map_err(|_| bad)?;
            q.flags |= ledger_flags::SEALED;
        }
        Ok(q)
    }

    /// The call-graph ground truth of context `ctx` from call site
    /// `first` (debug ledger), sealed for a confidential VM's context.
    pub fn ledger_calls(&mut self, ctx: u32, first: u32) -> Result<CallLedgerQuery, DeviceError> {
        let bad = DeviceError::BadLedgerScope { scope: 0, id: ctx };
        let (vm, _) = self.ledger_context(ctx)?;
        let mut q = CallLedgerQuery::new_zeroed();
        q.version = IOCTL_STRUCT_VERSION;
        q.ctx = ctx;
        q.first = first;
        let edges = self.call_edges(ctx);
        let start = usize::try_from(first).unwrap_or(usize::MAX);
        if start > edges.len() {
            return Err(bad);
        }
        let page = &edges[start..edges.len().min(start + CALL_LEDGER_ROWS)];
        q.rows[..page.len()].copy_from_slice(page);
        q.count = u32::try_from(page.len()).unwrap_or(0);
        q.total = u32::try_from(edges.len()).unwrap_or(u32::MAX);
        if let Some(cipher) = self.vms.cipher(vm) {
            let mut payload = q.rows.as_bytes().to_vec();
            let (envelope, tag): (Envelope, [u8; 16]) = cipher.seal(&mut payload);
            q.rows = FromBytes::read_from_bytes(&payload[..]).map_err(|_| bad)?;
            (q.envelope, q.tag) = (envelope, tag);
            q.flags |= ledger_flags::SEALED;
        }
        Ok(q)
    }

    /// Per call site of context `ctx`'s program, in (kernel, block) order:
    /// the visits of the calling block (each visit makes the call when it
    /// ends; a visit in progress counts), from its per-block ledger.
    fn call_edges(&self, ctx: u32) -> Vec<CallEdge> {
        let Some(run) = self.runs.get(ctx as usize).and_then(Option::as_ref) else {
            return Vec::new();
        };
        let Some(prog) = self.programs.get(run.program) else {
            return Vec::new();
        };
        run.truth(prog)
            .iter()
            .filter_map(|row| match prog.block(row.kernel, row.block).exit {
                CompiledExit::Call(callee) => Some(CallEdge {
                    kernel: row.kernel,
                    call_block: row.block,
                    callee,
                    reserved: 0,
                    calls: row.visits,
                }),
                _ => None,
            })
            .collect()
    }
}

/// One range unit per partition slot.
pub(super) fn range_units(scenario: &Scenario) -> Vec<RangeUnit> {
    (0..MAX_PARTITION_SLOTS)
        .map(|p| {
            let configured = p != 0 && scenario.partitions.iter().any(|s| s.slot == p);
            RangeUnit::new(p, configured)
        })
        .collect()
}
