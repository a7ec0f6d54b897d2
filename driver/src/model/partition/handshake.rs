//! The seven-step switch handshake's states as transitions of a
//! partition's control state. Each step is the same whether host software
//! drives it through registers or the device's fallback completes a switch
//! itself; the device runs the counting, RC and interrupt side of each.
//!
//! `IDLE → REQUESTED` (scheduler) `→ CTX_PAUSED` (step 1) `→ XFER_PAUSED`
//! (step 2) `→ TRIGGERED` (step 3) `→ ACKED` (steps 4–5: the flush request,
//! then device time until the last assigned CCU's ack arrives)
//! `→ COMMITTED` (step 6a) `→ REPOINTED` (step 6b) `→ IDLE` (step 7).

use gpupm_uapi::regs::{hs_state, part_ctrl, trig_cmd};

use super::state::Partitions;
use crate::model::ledger::Attribution;

/// The state a legal `PART_CTRL` write of `v` in state `hs` leads to.
pub fn after_ctrl_write(hs: u32, v: u32) -> Option<u32> {
    match (hs, v) {
        (hs_state::REQUESTED, part_ctrl::CTX_PAUSE) => Some(hs_state::CTX_PAUSED),
        (hs_state::CTX_PAUSED, part_ctrl::ALL) => Some(hs_state::XFER_PAUSED),
        (hs_state::REPOINTED, 0) => Some(hs_state::IDLE),
        _ => None,
    }
}

/// Handshake state after trigger command `cmd` on a partition in state
/// `hs`. A flush request does not change it: the state moves to `ACKED`
/// only when the acks arrive, later in device time.
pub fn after_trigger(hs: u32, cmd: u32) -> u32 {
    let full = trig_cmd::FLUSH_ULC | trig_cmd::TRIGGER;
    if hs == hs_state::XFER_PAUSED && cmd & full == full {
        hs_state::TRIGGERED
    } else {
        hs
    }
}

/// What the last step of a switch hands back to the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unpaused {
    /// Who runs now.
    pub incoming: Attribution,
    /// Context the switch took out (0 = none).
    pub outgoing: u32,
}

impl Partitions {
    /// Records a switch request of slot `p` to (`vm`, `ctx`) at `now`.
    pub(super) fn request_switch(&mut self, p: u32, vm: u32, ctx: u32, now: u64) {
        let part = &mut self.slots[p as usize];
        part.hs = hs_state::REQUESTED;
        part.next_vm = vm;
        part.next_ctx = ctx;
        part.req_cycle = now;
        self.switch_requests += 1;
    }

    /// Step 1: the outgoing context is paused.
    pub fn ctx_paused(&mut self, p: u32) {
        let part = &mut self.slots[p as usize];
        part.ctrl = part_ctrl::CTX_PAUSE;
        part.hs = hs_state::CTX_PAUSED;
    }

    /// Step 2: periodic triggers and ULC transfers are paused.
    pub fn transfers_paused(&mut self, p: u32) {
        let part = &mut self.slots[p as usize];
        part.ctrl = part_ctrl::ALL;
        part.hs = hs_state::XFER_PAUSED;
    }

    /// Step 3 done by the fallback's own trigger.
    pub fn triggered(&mut self, p: u32) {
        self.trigger_command(p, trig_cmd::FLUSH_ULC | trig_cmd::TRIGGER);
    }

    /// A `TRIG_CMD` with bits `cmd` (flush request excluded) reached slot
    /// `p`. Step 3 starts the flush over: acks of an earlier flush request
    /// do not vouch for the records it emitted.
    pub fn trigger_command(&mut self, p: u32, cmd: u32) {
        let part = &mut self.slots[p as usize];
        let hs = after_trigger(part.hs, cmd);
        if hs == hs_state::TRIGGERED && part.hs != hs {
            part.acked = 0;
            part.acks_due.clear();
        }
        part.hs = hs;
    }

    /// Step 4: a flush request reached slot `p`; its CCUs' acks arrive at
    /// the cycles of `schedule` ((cycle, CCU mask), in cycle order).
    pub fn flush_requested(&mut self, p: u32, schedule: Vec<(u64, u64)>) {
        let part = &mut self.slots[p as usize];
        part.acked = 0;
        part.acks_due = schedule;
    }

    /// Cycle of slot `p`'s next flush ack (`u64::MAX` if none is due).
    #[inline]
    pub fn next_ack(&self, p: u32) -> u64 {
        self.slots[p as usize]
            .acks_due
            .first()
            .map_or(u64::MAX, |a| a.0)
    }

    /// Whether slot `p` waits for flush acks.
    pub fn acks_outstanding(&self, p: u32) -> bool {
        !self.slots[p as usize].acks_due.is_empty()
    }

    /// Step 5: the acks due at or before `t` arrive. Returns the CCUs
    /// whose acks arrived and what their arrival completed.
    pub fn acks_arrived(&mut self, p: u32, t: u64) -> (u64, AcksComplete) {
        let part = &mut self.slots[p as usize];
        let due = part.acks_due.partition_point(|a| a.0 <= t);
        let arrived = part.acks_due.drain(..due).fold(0, |m, a| m | a.1);
        part.acked |= arrived;
        if part.hs != hs_state::TRIGGERED || part.acked != part.ccu_assigned {
            return (arrived, AcksComplete::No);
        }
        part.hs = hs_state::ACKED;
        if part.fallback_waiting {
            part.fallback_waiting = false;
            (arrived, AcksComplete::ForFallback)
        } else {
            (arrived, AcksComplete::ForHost)
        }
    }

    /// The device's fallback waits for slot `p`'s outstanding acks.
    pub fn fallback_awaits_acks(&mut self, p: u32) {
        self.slots[p as usize].fallback_waiting = true;
    }

    /// Whether a commit of slot `p` now is the switch's step 6a.
    pub fn commit_is_switch(&self, p: u32) -> bool {
        self.slots[p as usize].hs == hs_state::ACKED
    }

    /// Step 6a done.
    pub fn committed(&mut self, p: u32) {
        self.slots[p as usize].hs = hs_state::COMMITTED;
    }

    /// Step 6b: the RC is re-pointed to the incoming blocks; returns whom
    /// the partition's counts belong to from now on.
    pub fn repointed(&mut self, p: u32) -> Attribution {
        let part = &mut self.slots[p as usize];
        part.vm_changed = part.cur_vm != part.next_vm;
        part.outgoing = part.cur_ctx;
        part.cur_vm = part.next_vm;
        part.cur_ctx = part.next_ctx;
        part.hs = hs_state::REPOINTED;
        Attribution {
            ctx: part.cur_ctx,
            vm: part.cur_vm,
        }
    }

    /// Step 7 at `now`: the switch is complete and the partition idle.
    pub fn unpaused(&mut self, p: u32, now: u64) -> Unpaused {
        let part = &mut self.slots[p as usize];
        part.ctrl = 0;
        part.hs = hs_state::IDLE;
        part.switches += 1;
        part.slice_start = now;
        if part.vm_changed {
            part.vm_slice_start = now;
        }
        Unpaused {
            incoming: Attribution {
                ctx: part.cur_ctx,
                vm: part.cur_vm,
            },
            outgoing: part.outgoing,
        }
    }

    /// Host software finished a switch itself (its last `PART_CTRL` write).
    pub fn host_completed(&mut self, p: u32) {
        self.slots[p as usize].last_fallback = false;
    }

    /// The fallback completed slot `p`'s switch; returns the (context, VM)
    /// it brought in, for the interrupt.
    pub fn fallback_completed(&mut self, p: u32) -> (u32, u32) {
        let part = &mut self.slots[p as usize];
        part.fallbacks += 1;
        part.last_fallback = true;
        (part.next_ctx, part.next_vm)
    }
}

/// What the arrival of a partition's last flush ack completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcksComplete {
    /// Not every assigned CCU acked yet, or no switch waits for them.
    No,
    /// The switch the host drives may commit (step 6).
    ForHost,
    /// The device's fallback waited for them and finishes the switch.
    ForFallback,
}

#[cfg(test)]
mod tests {
    use gpupm_uapi::regs::part_ctrl;

    use super::*;

    #[test]
    fn ctrl_writes_follow_the_steps_in_order() {
        assert_eq!(
            after_ctrl_write(hs_state::REQUESTED, part_ctrl::CTX_PAUSE),
            Some(hs_state::CTX_PAUSED)
        );
        assert_eq!(after_ctrl_write(hs_state::REQUESTED, part_ctrl::ALL), None);
        assert_eq!(
            after_ctrl_write(hs_state::CTX_PAUSED, part_ctrl::ALL),
            Some(hs_state::XFER_PAUSED)
        );
        assert_eq!(after_ctrl_write(hs_state::IDLE, 0), None);
        assert_eq!(
            after_ctrl_write(hs_state::REPOINTED, 0),
            Some(hs_state::IDLE)
        );
    }

    #[test]
    fn a_full_trigger_reaches_triggered_and_a_flush_request_waits_for_acks() {
        let full = trig_cmd::FLUSH_ULC | trig_cmd::TRIGGER;
        assert_eq!(
            after_trigger(hs_state::XFER_PAUSED, trig_cmd::TRIGGER),
            hs_state::XFER_PAUSED
        );
        assert_eq!(
            after_trigger(hs_state::XFER_PAUSED, full),
            hs_state::TRIGGERED
        );
        assert_eq!(
            after_trigger(hs_state::XFER_PAUSED, full | trig_cmd::FLUSH_REQ),
            hs_state::TRIGGERED
        );
        assert_eq!(
            after_trigger(hs_state::TRIGGERED, trig_cmd::FLUSH_REQ),
            hs_state::TRIGGERED
        );
        assert_eq!(after_trigger(hs_state::IDLE, full), hs_state::IDLE);
    }
}
