//! The context/VM switch handshake wired across units, its fallback, and
//! the context lifecycle.
//!
//! The steps are the same functions whether host software drives them
//! through registers or the device's fallback completes a switch itself.
//! The partition unit moves the handshake state; each step here also does
//! the step's work in the other units (counting, RCs, interrupts).

use gpupm_uapi::intr::source;
use gpupm_uapi::layout::{block_kind, record_flags};
use gpupm_uapi::regs::{ctx_state, hs_state};

use super::Device;
use crate::model::trigger::TriggerCause;

impl Device {
    /// Scheduler decision for idle-handshake partition `p`.
    pub(super) fn schedule(&mut self, p: u32) {
        let now = self.clock.now();
        if let Some((vm, ctx)) = self.parts.schedule(p, now, &self.vms, &self.ctxs) {
            self.intr.raise(source::SWITCH_REQUESTED, p, ctx, vm, now);
        }
    }

    /// Step 1: the outgoing context stops running.
    pub(super) fn step_pause_ctx(&mut self, p: u32) {
        self.sync(p);
        self.ccu.pause_generation(p, self.clock.now());
        self.parts.ctx_paused(p);
    }

    /// Step 2: periodic triggers and ULC transfers pause.
    pub(super) fn step_pause_transfers(&mut self, p: u32) {
        self.sync(p);
        self.ccu.set_ulc_paused(p, true);
        self.parts.transfers_paused(p);
    }

    /// Step 3: ULC partials flushed, CCUs emit everything (RC holds it).
    fn step_trigger(&mut self, p: u32) {
        self.trigger(1 << p, true, TriggerCause::Command);
        self.parts.triggered(p);
    }

    /// Step 6a: commit into the outgoing blocks.
    pub(super) fn step_commit(&mut self, p: u32, fallback: bool) {
        let in_switch = self.parts.commit_is_switch(p);
        let flags = if in_switch { record_flags::SWITCH } else { 0 }
            | if fallback { record_flags::FALLBACK } else { 0 };
        self.commit(p, flags);
        if in_switch {
            self.parts.committed(p);
        }
    }

    /// Step 6b: re-point the RC (MMU rebind) to the incoming blocks.
    pub(super) fn step_repoint(&mut self, p: u32) {
        // The OOB channel commits what the outgoing owner counted before
        // the owner changes, whoever drives the switch.
        self.oob_commit_partition(p);
        let who = self.parts.repointed(p);
        let out = self.ccu.owner(p).ctx;
        if out != who.ctx && self.ri.armed() {
            self.ri.switched_out(out);
        }
        self.ccu.set_owner(p, who);
    }

    /// Step 7: load the new context, unpause triggers and the context.
    pub(super) fn step_unpause(&mut self, p: u32) {
        self.ccu.set_ulc_paused(p, false);
        let done = self.parts.unpaused(p, self.clock.now());
        if done.incoming.ctx != 0 {
            self.start_generation(p, done.incoming);
        }
        let out = done.outgoing;
        if out != 0 && out != done.incoming.ctx && self.ctxs.get(out).exiting {
            self.finalize_destroy(out);
        }
        self.schedule(p);
    }

    /// Completes a pending switch from whatever step host software reached;
    /// a switch waiting for flush acks completes when the last arrives.
    pub(super) fn complete_by_fallback(&mut self, p: u32) {
        let hs = |dev: &Self| dev.parts.get(p).hs();
        if hs(self) == hs_state::REQUESTED {
            self.step_pause_ctx(p);
        }
        if hs(self) == hs_state::CTX_PAUSED {
            self.step_pause_transfers(p);
        }
        if hs(self) == hs_state::XFER_PAUSED {
            self.step_trigger(p);
        }
        if hs(self) == hs_state::TRIGGERED {
            if !self.parts.acks_outstanding(p) {
                self.flush_request(1 << p);
            }
            // The acks arrive later; their arrival resumes from here.
            self.parts.fallback_awaits_acks(p);
            return;
        }
        if hs(self) == hs_state::ACKED {
            self.step_commit(p, true);
        }
        if hs(self) == hs_state::COMMITTED {
            self.step_repoint(p);
        }
        let (ctx, vm) = self.parts.fallback_completed(p);
        self.intr
            .raise(source::SWITCH_FALLBACK, p, ctx, vm, self.clock.now());
        self.step_unpause(p);
    }

    /// Creates a context of `vm`; the driver layer allocates and binds its block.
    pub(super) fn create_context(
        &mut self,
        vm: u32,
        profile: usize,
        program: Option<usize>,
    ) -> Option<u32> {
        let p = self.vms.partition(vm);
        let (Some(id), true) = (self.ctxs.first_free(), p != 0) else {
            self.ctxs.creation_failed();
            return None;
        };
        let Some(slot) = self.mem.alloc_ctx_slot() else {
            self.ctxs.creation_failed();
            return None;
        };
        let now = self.clock.now();
        self.ctxs.insert(id, vm, slot, profile, now);
        self.assign_program(id, program);
        self.mem
            .init_block(slot, block_kind::CONTEXT, id, vm, self.vms.cipher(vm));
        self.ledger.reset_context(id);
        self.oob.context_created(id, vm, now);
        self.vms.set_runnable(vm, id, true);
        self.intr.raise(source::CTX_CREATED, p, id, vm, now);
        if self.parts.wants_work(p) {
            self.schedule(p);
        }
        Some(id)
    }

    /// Marks a context for destruction; it is destroyed once switched out.
    pub(super) fn destroy_context(&mut self, id: u32) {
        let c = self.ctxs.entry(id);
        if c.state != ctx_state::ACTIVE || c.exiting {
            return;
        }
        c.exiting = true;
        let vm = c.vm;
        self.vms.set_runnable(vm, id, false);
        let p = self.vms.partition(vm);
        let part = self.parts.get(p);
        if !part.involves(id) {
            self.finalize_destroy(id);
        } else if part.hs() == hs_state::IDLE {
            self.schedule(p);
        }
    }

    fn finalize_destroy(&mut self, id: u32) {
        let c = self.ctxs.entry(id);
        c.state = ctx_state::DESTROYED;
        c.exiting = false;
        let vm = c.vm;
        self.oob.context_destroyed(id);
        let p = self.vms.partition(vm);
        self.intr
            .raise(source::CTX_DESTROYED, p, id, vm, self.clock.now());
    }

    /// Releases a destroyed context's block (host request).
    pub(super) fn release_context(&mut self, id: u32) {
        let slot = self.ctxs.release(id);
        self.mem.release_ctx_slot(slot);
        self.ri.released(id);
    }
}
