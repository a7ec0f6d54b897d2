//! The sampling unit watching one context's walk: cycle samples and branch
//! stacks as the walk steps block by block, and the same records taken
//! from the iterations' paths when it advances whole loop iterations in
//! aggregate ([`Watch::skipped`]). Either way the unit ends in the same
//! state and writes the same records in the same order (each is sealed as
//! it is written, so the order shows in the envelopes' nonces).
//!
//! A plain context's branch stacks are captured every N-th taken branch;
//! a confidential context's follow the schedule of its context cycles
//! ([`Sampler::stack_interval`]), interleaved with the cycle samples in
//! cycle order (the stack first at a tie), each holding the branches
//! taken before its cycle.

use gpupm_uapi::sampling::{
    buf_kind, samp_ctrl, sample_flags, BranchEntry, BranchStackRecord, PcRecord,
    BRANCH_RECORD_MAGIC, BRANCH_STACK_ENTRIES, PC_RECORD_MAGIC,
};
use zerocopy::{FromZeros, IntoBytes};

use super::Sampler;
use crate::model::cc::VmCipher;
use crate::model::program::run::{Env, Quantity, Visit, Watch, Window};

/// The sampling unit watching one context's walk through one span.
#[derive(Debug)]
pub struct Watcher<'a> {
    /// The unit.
    pub unit: &'a mut Sampler,
    /// The running context.
    pub ctx: u32,
    /// Its VM.
    pub vm: u32,
    /// Its serial (the branch stack holds only its branches).
    pub serial: u64,
    /// The span.
    pub env: Env<'a>,
    /// Whether the VM is confidential: its branch stacks follow the
    /// schedule of its context cycles, not its branches.
    pub confidential: bool,
    /// The context's taken branches so far (kept up to date by the walk).
    pub branches: u64,
    /// The VM's cipher when confidential.
    pub cipher: Option<&'a mut VmCipher>,
}

impl Watcher<'_> {
    fn flags(&self, ctx_cycle: u64) -> u16 {
        if self.env.secondary(ctx_cycle) {
            sample_flags::SECONDARY_CLOCK
        } else {
            0
        }
    }

    fn store(&mut self, kind: u32, bytes: &[u8], at: u64) {
        let buf = &mut self.unit.bufs[kind as usize];
        if let Some(ev) = buf.push(bytes, (self.vm, self.ctx), self.cipher.as_deref_mut()) {
            self.unit.events.push((kind, ev, at));
        }
    }

    /// Whether the unit writes this context's branch stacks on the
    /// schedule of its cycles.
    fn scheduled_stacks(&self) -> bool {
        self.confidential && self.unit.ctrl & samp_ctrl::BRANCH_ENABLE != 0
    }

    /// The branch stack holds only the running context's branches.
    fn own_stack(&mut self) {
        let unit = &mut *self.unit;
        if unit.stack_owner != self.serial {
            unit.stack.clear();
            unit.stack_owner = self.serial;
        }
    }

    /// A cycle sample at context cycle `at`, in block `block` of `kernel`.
    fn pc_sample(&mut self, at: u64, kernel: u16, block: u16) {
        let cycle = self.env.device_cycle(at);
        let rec = PcRecord {
            magic: PC_RECORD_MAGIC,
            partition: u16::try_from(self.unit.partition).unwrap_or(0),
            flags: self.flags(at),
            vm: self.vm,
            ctx: self.ctx,
            seq: self.unit.bufs[1].produced() + 1,
            cycle,
            ctx_cycle: at,
            kernel,
            block,
            interval: self.unit.interval,
        };
        self.store(buf_kind::PC, rec.as_bytes(), cycle);
        self.unit.samples += 1;
        self.unit.draw_interval();
    }

    /// A branch-stack record of `stack` (oldest first) at context cycle
    /// `at`, the context having taken `branches` branches: a plain
    /// context's at its capturing branch (the newest entry), a
    /// confidential context's at its scheduled cycle.
    fn stack_record(&mut self, stack: &[BranchEntry], branches: u64, at: u64) {
        let mut rec = BranchStackRecord::new_zeroed();
        rec.magic = BRANCH_RECORD_MAGIC;
        rec.partition = u16::try_from(self.unit.partition).unwrap_or(0);
        rec.vm = self.vm;
        rec.ctx = self.ctx;
        rec.seq = self.unit.bufs[0].produced() + 1;
        rec.cycle = self.env.device_cycle(at);
        rec.branches = branches;
        rec.count = u32::try_from(stack.len()).unwrap_or(0);
        rec.entries[..stack.len()].copy_from_slice(stack);
        rec.flags = self.flags(at);
        let cycle = rec.cycle;
        self.store(buf_kind::BRANCH, rec.as_bytes(), cycle);
    }

    /// The scheduled branch stack of a confidential context, due at
    /// context cycle `at`: what the unit's stack holds now.
    fn scheduled_stack(&mut self, at: u64) {
        self.own_stack();
        let stack = std::mem::take(&mut self.unit.stack);
        self.stack_record(&stack, self.branches, at);
        self.unit.stack = stack;
        self.unit.scheduled += 1;
        self.unit.stack_due = self.unit.stack_interval();
    }

    /// The stack's last entries followed by `newer` (the newest 32), into
    /// `out`.
    fn stack_with(&self, newer: &[BranchEntry], out: &mut Vec<BranchEntry>) {
        let old = &self.unit.stack;
        let keep = BRANCH_STACK_ENTRIES
            .saturating_sub(newer.len())
            .min(old.len());
        out.clear();
        out.extend_from_slice(&old[old.len() - keep..]);
        out.extend_from_slice(&newer[newer.len().saturating_sub(BRANCH_STACK_ENTRIES)..]);
    }

    /// The unit's stack followed by the first `k` taken branches of `w`
    /// (the newest 32), into `out`; `entries` is scratch.
    fn stack_after(
        &self,
        w: &Window<'_>,
        k: u64,
        entries: &mut Vec<BranchEntry>,
        out: &mut Vec<BranchEntry>,
    ) {
        if k == 0 {
            entries.clear();
        } else {
            w.branch_entries(k, k.min(BRANCH_STACK_ENTRIES as u64), entries);
        }
        self.stack_with(entries, out);
    }

    /// The cycle sample due `at` cycles into the first `n` iterations of
    /// `w`, in the visit its path runs at that cycle.
    fn pc_sample_in(&mut self, w: &Window<'_>, at: u64, n: u64) {
        if let Some((i, before)) = w.find(Quantity::Cycles, at, n) {
            let v = w.path(i).visit_at(at - before);
            self.pc_sample(w.start + at, v.kernel, v.block);
        }
    }

    /// The cycle samples that fall in the first `n` iterations of `w`:
    /// each in the visit its path runs at that cycle.
    fn skipped_cycles(&mut self, w: &Window<'_>, n: u64) {
        let total = w.sum(Quantity::Cycles, n);
        let mut at = self.unit.remaining;
        while at <= total {
            let Some((i, before)) = w.find(Quantity::Cycles, at, n) else {
                break;
            };
            let v = w.path(i).visit_at(at - before);
            self.pc_sample(w.start + at, v.kernel, v.block);
            at += self.unit.remaining;
        }
        self.unit.remaining = at - total;
    }

    /// The taken branches of the first `n` iterations of `w` for a plain
    /// context: the captures among them, with their stacks from the paths.
    fn skipped_captures(&mut self, w: &Window<'_>, total: u64) {
        let period = u64::from(self.unit.n);
        let mut entries = Vec::with_capacity(BRANCH_STACK_ENTRIES);
        let mut stack = Vec::with_capacity(BRANCH_STACK_ENTRIES);
        // A period written below the count so far captures at the next branch.
        let mut k = period
            .saturating_sub(u64::from(self.unit.since_capture))
            .max(1);
        let mut since = u64::from(self.unit.since_capture) + total;
        while k <= total {
            self.stack_after(w, k, &mut entries, &mut stack);
            let at = stack.last().map_or(0, |e| e.cycle);
            self.stack_record(&stack, w.branches + k, at);
            since = total - k;
            k += period;
        }
        self.unit.branches += total;
        self.unit.since_capture = u32::try_from(since).unwrap_or(u32::MAX);
    }

    /// Taken branches among the first `n` iterations of `w` whose targets
    /// start before `at` cycles into them (`at` in `1..=` their cycles):
    /// those a stack due at `at` holds, since the walk reports a branch
    /// after the time up to its target's start.
    fn branches_before(w: &Window<'_>, at: u64, n: u64) -> u64 {
        let Some((i, before)) = w.find(Quantity::Cycles, at, n) else {
            return w.sum(Quantity::Branches, n);
        };
        let off = at - before;
        let within = w.path(i).taken.partition_point(|e| e.cycle < off) as u64;
        w.sum(Quantity::Branches, i) + within
    }

    /// The first `n` iterations of `w` for a confidential context whose
    /// branch stacks are scheduled: its stacks and cycle samples in cycle
    /// order (the stack first at a tie), as [`Watch::ran`] takes them.
    fn skipped_scheduled(&mut self, w: &Window<'_>, n: u64) {
        let pcs = self.unit.ctrl & samp_ctrl::CYCLE_ENABLE != 0;
        let total = w.sum(Quantity::Cycles, n);
        let mut entries = Vec::with_capacity(BRANCH_STACK_ENTRIES);
        let mut stack = Vec::with_capacity(BRANCH_STACK_ENTRIES);
        let mut at = 0;
        loop {
            let to_pc = if pcs { self.unit.remaining } else { u64::MAX };
            let step = self.unit.stack_due.min(to_pc);
            if step > total - at {
                break;
            }
            at += step;
            self.unit.stack_due -= step;
            if self.unit.stack_due == 0 {
                let k = Self::branches_before(w, at, n);
                self.own_stack();
                self.stack_after(w, k, &mut entries, &mut stack);
                self.stack_record(&stack, w.branches + k, w.start + at);
                self.unit.scheduled += 1;
                self.unit.stack_due = self.unit.stack_interval();
            }
            if pcs {
                self.unit.remaining -= step;
                if self.unit.remaining == 0 {
                    self.pc_sample_in(w, at, n);
                }
            }
        }
        self.unit.stack_due -= total - at;
        if pcs {
            self.unit.remaining -= total - at;
        }
    }
}

impl Watch for Watcher<'_> {
    fn ran(&mut self, from: u64, to: u64, kernel: u16, block: u16) {
        // Cycle samples, and a confidential context's scheduled branch
        // stacks (holding the branches taken before them), in cycle order
        // (stack first at a tie): each record is sealed as it is written,
        // so the order must not depend on how the walk's spans are cut.
        let stacks = self.scheduled_stacks();
        let pcs = self.unit.ctrl & samp_ctrl::CYCLE_ENABLE != 0;
        if !stacks && !pcs {
            return;
        }
        let mut at = from;
        loop {
            let to_stack = if stacks {
                self.unit.stack_due
            } else {
                u64::MAX
            };
            let to_pc = if pcs { self.unit.remaining } else { u64::MAX };
            let step = to_stack.min(to_pc);
            if step > to - at {
                break;
            }
            at += step;
            if stacks {
                self.unit.stack_due -= step;
                if self.unit.stack_due == 0 {
                    self.scheduled_stack(at);
                }
            }
            if pcs {
                self.unit.remaining -= step;
                if self.unit.remaining == 0 {
                    self.pc_sample(at, kernel, block);
                }
            }
        }
        if stacks {
            self.unit.stack_due -= to - at;
        }
        if pcs {
            self.unit.remaining -= to - at;
        }
    }

    fn taken(&mut self, entry: BranchEntry, branches: u64) {
        self.branches = branches;
        if self.unit.ctrl & samp_ctrl::BRANCH_ENABLE == 0 {
            return;
        }
        self.own_stack();
        let unit = &mut *self.unit;
        if unit.stack.len() == BRANCH_STACK_ENTRIES {
            unit.stack.remove(0);
        }
        unit.stack.push(entry);
        if self.confidential {
            // Its stacks follow the schedule of its cycles (`ran`).
            return;
        }
        unit.branches += 1;
        unit.since_capture += 1;
        if unit.since_capture < unit.n {
            return;
        }
        unit.since_capture = 0;
        let stack = std::mem::take(&mut unit.stack);
        self.stack_record(&stack, branches, entry.cycle);
        self.unit.stack = stack;
    }

    /// Everything: samples and branch records inside the iterations are
    /// taken from their paths.
    fn admit(&mut self, window: &Window<'_>) -> u64 {
        window.len()
    }

    fn skipped(&mut self, window: &Window<'_>, n: u64, _latch: &Visit) {
        let branches = window.sum(Quantity::Branches, n);
        if self.scheduled_stacks() {
            self.skipped_scheduled(window, n);
        } else {
            if self.unit.ctrl & samp_ctrl::CYCLE_ENABLE != 0 {
                self.skipped_cycles(window, n);
            }
            if self.unit.ctrl & samp_ctrl::BRANCH_ENABLE != 0 && branches > 0 {
                self.own_stack();
                self.skipped_captures(window, branches);
            }
        }
        if self.unit.ctrl & samp_ctrl::BRANCH_ENABLE != 0 && branches > 0 {
            // The stack the window's branches leave.
            self.own_stack();
            let mut entries = Vec::with_capacity(BRANCH_STACK_ENTRIES);
            let mut stack = Vec::with_capacity(BRANCH_STACK_ENTRIES);
            self.stack_after(window, branches, &mut entries, &mut stack);
            self.unit.stack = stack;
        }
        self.branches = window.branches + branches;
    }
}
