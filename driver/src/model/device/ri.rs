//! Runtime instrumentation in the device: executing the control-block
//! writes (syncing the watched context first), VM migration, the RI
//! region of the window, the interrupts and the debug ground truth.

use gpupm_uapi::ioctl::{RiLedgerQuery, IOCTL_STRUCT_VERSION};
use gpupm_uapi::ri::{RI_BLOCKS, RI_REGION};

use super::api::DeviceError;
use super::Device;
use crate::model::memory::WindowError;
use crate::model::ri::{RiWrite, Tables};
use crate::model::workload::WorkItem;

impl Device {
    /// The tables the unit's checks read.
    pub(super) fn ri_tables(&self) -> Tables<'_> {
        Tables {
            vms: &self.vms,
            ctxs: &self.ctxs,
            parts: &self.parts,
        }
    }

    /// Counts the partition running context `ctx` up to now, if it runs,
    /// so that a control-block change takes effect from now on.
    fn sync_running(&mut self, ctx: u32) {
        if ctx == 0 {
            return;
        }
        let p = self.vms.partition(self.ctxs.get(ctx).vm);
        if p != 0 && self.ccu.owner(p).ctx == ctx {
            self.sync(p);
        }
    }

    /// Executes a checked RI write.
    pub(super) fn execute_ri(&mut self, w: RiWrite) {
        let block_ctx = |dev: &Self, i: u32| dev.ri.session(i).map_or(0, |s| s.ctx);
        let mut version = 0;
        match w {
            RiWrite::Ctrl(i, _) | RiWrite::Emit(i, _) => {
                let ctx = block_ctx(self, i);
                self.sync_running(ctx);
                version = self.ri.version(self.vms.partition(self.ctxs.get(ctx).vm));
            }
            RiWrite::Migrate { vm, to } => {
                self.migrate(vm, to);
            }
            _ => {}
        }
        self.ri.apply(w, version);
        self.deliver_ri_events();
    }

    /// Runs the scenario's migration `spec` the way the `RI_MIGRATE`
    /// register path would; while the VM is current or incoming on its
    /// partition (the register path refuses then) it is retried when that
    /// partition next needs the device (its next scheduling point or
    /// handshake deadline). A VM already on the target slot (a host moved
    /// it there) is left where it is.
    pub(super) fn scenario_migration(&mut self, spec: usize) {
        let m = self.scenario.migrations[spec];
        let from = self.vms.partition(m.vm);
        if from == 0 || from == m.to {
            return;
        }
        let part = self.parts.get(from);
        if part.current().0 == m.vm || part.incoming().0 == m.vm {
            let retry = part.wake_at().max(self.clock.now() + 1);
            if retry != u64::MAX {
                self.workload.push(retry, WorkItem::Migrate { spec });
            }
            return;
        }
        self.execute_ri(RiWrite::Migrate { vm: m.vm, to: m.to });
    }

    /// Moves VM `vm` (neither running nor incoming) to slot `to`; its
    /// contexts run there from now on.
    fn migrate(&mut self, vm: u32, to: u32) {
        let from = self.vms.partition(vm);
        self.vms.set_partition(vm, to);
        self.parts.move_vm(vm, from, to);
        let now = self.clock.now();
        self.ri.migrated(&self.ctxs, vm, to, now);
        if self.parts.get(to).hs() == gpupm_uapi::regs::hs_state::IDLE {
            self.schedule(to);
        }
    }

    /// Raises the interrupts the control blocks produced.
    pub(super) fn deliver_ri_events(&mut self) {
        if !self.ri.has_events() {
            return;
        }
        for (src, p, block, arg2, cycle) in self.ri.take_events() {
            self.intr.raise(src, p, block, arg2, cycle);
        }
    }

    /// Copies RI-region bytes at window `offset` into `buf`.
    pub(super) fn read_ri_window(&self, offset: u64, buf: &mut [u8]) -> Result<(), WindowError> {
        let err = WindowError::OutOfRange {
            offset,
            len: buf.len(),
        };
        let within = offset.checked_sub(RI_REGION).ok_or(err.clone())?;
        self.ri.read_window(within, buf).ok_or(err)
    }

    /// What control block `block` did since its session began (debug
    /// ledger), counted up to now.
    pub fn ledger_ri(&mut self, block: u32) -> Result<RiLedgerQuery, DeviceError> {
        if block >= RI_BLOCKS {
            return Err(DeviceError::BadLedgerScope {
                scope: 0,
                id: block,
            });
        }
        let ctx = self.ri.session(block).map_or(0, |s| s.ctx);
        self.sync_running(ctx);
        self.deliver_ri_events();
        let mut q = self.ri.truth(block).unwrap_or_default();
        q.version = IOCTL_STRUCT_VERSION;
        q.block = block;
        q.ctx = ctx;
        Ok(q)
    }
}
