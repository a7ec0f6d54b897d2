//! The partition register block: reads, the batch shadow, and the checks
//! that decide which writes are legal in which handshake state.

use gpupm_uapi::regs::{self as r, ctx_state, hs_state, part_status, rc_cmd, MAX_PARTITION_SLOTS};

use super::handshake;
use super::state::{Partition, Partitions};
use crate::model::access::{r32, r64, RegValue, Reject};
use crate::model::context::ContextTable;
use crate::model::vm::VmTable;

/// Smallest programmable switch timeout and non-zero timeslice, in cycles.
pub const MIN_TIMING_CYCLES: u32 = 1024;

/// What a batch of register writes may change of a partition, advanced
/// write by write while the batch is checked.
#[derive(Clone, Copy, Debug, Default)]
pub struct PartShadow {
    hs: u32,
    ctrl: u32,
    bind_vm: u32,
    bind_ctx: u32,
}

impl PartShadow {
    /// The handshake state as the batch sees it.
    pub fn hs(&self) -> u32 {
        self.hs
    }

    /// Moves the batch's view of the handshake state (a trigger command
    /// advances it).
    pub fn advance_hs(&mut self, hs: u32) {
        self.hs = hs;
    }
}

/// A checked write to a partition register.
#[derive(Clone, Copy, Debug)]
pub enum PartWrite {
    /// `PART_CTRL`: the next pause/unpause step of the switch.
    Ctrl(u32),
    /// `PART_RC_CMD`.
    RcCmd(u32),
    /// `PART_RC_BIND_VM`.
    BindVm(u32),
    /// `PART_RC_BIND_CTX`.
    BindCtx(u32),
    /// `PART_SWITCH_TIMEOUT`.
    SwitchTimeout(u32),
    /// `PART_TIMESLICE_CTX`.
    TimesliceCtx(u32),
    /// `PART_TIMESLICE_VM`.
    TimesliceVm(u32),
}

impl Partition {
    fn read(&self, offset: u64) -> Option<RegValue> {
        let pending = |v| if self.hs == hs_state::IDLE { 0 } else { v };
        match offset {
            r::PART_CTRL => r32(self.ctrl),
            r::PART_STATUS => r32(self.status()),
            r::PART_CUR_VM => r32(self.cur_vm),
            r::PART_CUR_CTX => r32(self.cur_ctx),
            r::PART_NEXT_VM => r32(pending(self.next_vm)),
            r::PART_NEXT_CTX => r32(pending(self.next_ctx)),
            r::PART_CCU_ASSIGNED => r64(self.ccu_assigned),
            r::PART_CCU_ACKED => r64(self.acked),
            r::PART_RC_CMD => r32(0),
            r::PART_RC_BIND_VM => r32(self.bind_vm),
            r::PART_RC_BIND_CTX => r32(self.bind_ctx),
            r::PART_SWITCH_TIMEOUT => r32(self.timeout),
            r::PART_FALLBACKS => r64(self.fallbacks),
            r::PART_SWITCHES => r64(self.switches),
            r::PART_TIMESLICE_CTX => r32(self.ts_ctx),
            r::PART_TIMESLICE_VM => r32(self.ts_vm),
            r::PART_GPC_MASK => r32(self.gpc_mask),
            r::PART_MEM_MASK => r32(self.mem_mask),
            r::PART_SWITCH_REQ_CYCLE => r64(if self.hs == hs_state::IDLE {
                0
            } else {
                self.req_cycle
            }),
            _ => None,
        }
    }

    fn status(&self) -> u32 {
        let flag = |on: bool, bit: u32| if on { bit } else { 0 };
        self.hs
            | part_status::CONFIGURED
            | flag(self.last_fallback, part_status::LAST_FALLBACK)
            | flag(self.vm_switch(), part_status::VM_SWITCH)
    }
}

impl Partitions {
    /// Reads register `offset` of slot `p` (an unconfigured slot shows only
    /// a zero `PART_STATUS`).
    pub fn read(&self, p: u32, offset: u64) -> Option<RegValue> {
        let part = self.slots.get(p as usize)?;
        if !part.configured {
            return (offset == r::PART_STATUS).then_some(RegValue::R32(0));
        }
        part.read(offset)
    }

    /// The shadow every batch starts from.
    pub fn shadow(&self) -> [PartShadow; MAX_PARTITION_SLOTS as usize] {
        let mut out = [PartShadow::default(); MAX_PARTITION_SLOTS as usize];
        for (s, p) in out.iter_mut().zip(&self.slots) {
            *s = PartShadow {
                hs: p.hs,
                ctrl: p.ctrl,
                bind_vm: p.bind_vm,
                bind_ctx: p.bind_ctx,
            };
        }
        out
    }

    /// Checks a write of `v` to register `offset` of slot `p` against the
    /// batch's shadow `ps` of that slot, and advances the shadow past it.
    pub fn check_write(
        &self,
        p: u32,
        offset: u64,
        v: u32,
        ps: &mut PartShadow,
        tables: (&VmTable, &ContextTable),
    ) -> Result<PartWrite, Reject> {
        let seq = |state, reason| Reject::BadSequence {
            partition: p,
            state,
            reason,
        };
        let bad = |reason| Err(Reject::BadValue(reason));
        let at_least_min = v >= MIN_TIMING_CYCLES;
        if p == 0 {
            return match offset {
                r::PART_CTRL | r::PART_RC_CMD | r::PART_RC_BIND_VM | r::PART_RC_BIND_CTX => {
                    bad("the system channel has no contexts to switch")
                }
                _ => Err(Reject::ReadOnly),
            };
        }
        match offset {
            r::PART_CTRL => {
                ps.hs = handshake::after_ctrl_write(ps.hs, v).ok_or(seq(
                    ps.hs,
                    "pause bits must follow the switch steps in order",
                ))?;
                ps.ctrl = v;
                Ok(PartWrite::Ctrl(v))
            }
            r::PART_RC_CMD => self.check_rc_cmd(p, v, ps),
            r::PART_RC_BIND_VM => {
                let (vms, _) = tables;
                if v != 0 && vms.partition(v) != p {
                    return bad("not a VM bound to this partition");
                }
                ps.bind_vm = v;
                Ok(PartWrite::BindVm(v))
            }
            r::PART_RC_BIND_CTX => {
                let (vms, ctxs) = tables;
                let c = ctxs.get(v);
                if v != 0 && (c.state != ctx_state::ACTIVE || vms.partition(c.vm) != p) {
                    return bad("not an active context of this partition");
                }
                ps.bind_ctx = v;
                Ok(PartWrite::BindCtx(v))
            }
            r::PART_SWITCH_TIMEOUT if at_least_min => Ok(PartWrite::SwitchTimeout(v)),
            r::PART_TIMESLICE_CTX if v == 0 || at_least_min => Ok(PartWrite::TimesliceCtx(v)),
            r::PART_TIMESLICE_VM if v == 0 || at_least_min => Ok(PartWrite::TimesliceVm(v)),
            r::PART_SWITCH_TIMEOUT | r::PART_TIMESLICE_CTX | r::PART_TIMESLICE_VM => {
                bad("below the minimum of 1024 cycles")
            }
            _ => Err(Reject::ReadOnly),
        }
    }

    /// Checks a `PART_RC_CMD` write of `v` to GPU slice `p`: a commit is
    /// step 6a and needs every ack in, a re-point (step 6b) needs the
    /// commit and bind registers naming the incoming VM and context.
    fn check_rc_cmd(&self, p: u32, v: u32, ps: &mut PartShadow) -> Result<PartWrite, Reject> {
        let part = &self.slots[p as usize];
        let seq = |state, reason| Reject::BadSequence {
            partition: p,
            state,
            reason,
        };
        let bad = |reason| Err(Reject::BadValue(reason));
        if v == 0 || v & !rc_cmd::ALL != 0 {
            return bad("needs defined RC command bits");
        }
        let hs_now = ps.hs;
        if v & rc_cmd::COMMIT != 0 {
            if ps.hs != hs_state::ACKED {
                return Err(seq(
                    hs_now,
                    "commit only after the flush request and every CCU's ack",
                ));
            }
            ps.hs = hs_state::COMMITTED;
        }
        if v & rc_cmd::REPOINT != 0 {
            if ps.hs != hs_state::COMMITTED {
                return Err(seq(hs_now, "re-point only after the switch commit"));
            }
            if (ps.bind_vm, ps.bind_ctx) != (part.next_vm, part.next_ctx) {
                return Err(seq(
                    hs_now,
                    "bind registers must name the incoming VM and context",
                ));
            }
            ps.hs = hs_state::REPOINTED;
        }
        Ok(PartWrite::RcCmd(v))
    }

    /// Executes a checked write that only sets state; returns whether the
    /// partition needs a scheduler decision now (a timeslice changed while
    /// no switch is pending). Handshake writes are the device's to wire.
    pub fn apply_setting(&mut self, p: u32, w: &PartWrite) -> bool {
        let part = &mut self.slots[p as usize];
        match *w {
            PartWrite::BindVm(vm) => part.bind_vm = vm,
            PartWrite::BindCtx(ctx) => part.bind_ctx = ctx,
            PartWrite::SwitchTimeout(cycles) => part.timeout = cycles,
            PartWrite::TimesliceCtx(cycles) => {
                part.ts_ctx = cycles;
                return part.hs == hs_state::IDLE;
            }
            PartWrite::TimesliceVm(cycles) => {
                part.ts_vm = cycles;
                return part.hs == hs_state::IDLE;
            }
            PartWrite::Ctrl(_) | PartWrite::RcCmd(_) => {}
        }
        false
    }
}

#[cfg(test)]
mod tests;
