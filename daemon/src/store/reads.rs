//! The store's readers: [`CounterView`] over the device's blocks (live),
//! the persisted slots (retired) and the recent-delta history.

use gpupm_uapi::layout::{
    block_kind, block_slot_offset, envelope_flags, BlockSlot, SYSTEM_BLOCK_SLOT,
};
use gpupm_uapi::regs;
use zerocopy::IntoBytes;

use super::retired::plain_block;
use super::{LiveCtx, Store, Tables, INSTANCE_SCAN};
use crate::feed::FeedReceiver;
use crate::view::{CounterView, CtxId, CtxInfo, CtxState, DeltaSample, Scope, Totals, VmId};

impl Store {
    fn slot_totals(slot: &BlockSlot, sealed: bool, expect: Option<(u16, u32)>) -> Option<Totals> {
        if sealed || slot.envelope.flags & envelope_flags::ENCRYPTED != 0 {
            return Some(Totals::Sealed(slot.as_bytes().to_vec()));
        }
        let block = plain_block(slot)?;
        if let Some((kind, id)) = expect {
            if block.kind != kind || block.id != id {
                return None;
            }
        }
        Some(Totals::Plain {
            counters: block.counters,
            commit_seq: block.commit_seq,
            cycle: block.last_commit_cycle,
        })
    }

    /// The persisted totals of a retired instance the table still holds.
    fn retired_totals(&self, ctx: CtxId, created_cycle: u64) -> Option<Totals> {
        if !self.read().retired.contains_key(&(ctx, created_cycle)) {
            return None;
        }
        let rec = self.retired_files.load(ctx, created_cycle)?;
        if rec.ctx != ctx || rec.created_cycle != created_cycle {
            return None;
        }
        Self::slot_totals(&rec.slot, rec.sealed(), None)
    }

    /// The instance after (`ctx`, `created_cycle`) with the same id, if any.
    fn next_instance(t: &Tables, ctx: CtxId, created_cycle: u64) -> Option<u64> {
        let retired = t
            .retired
            .range((ctx, created_cycle.saturating_add(1))..=(ctx, u64::MAX))
            .next()
            .map(|(&(_, c), _)| c);
        let live = t
            .live
            .get(&ctx)
            .map(|c| c.created_cycle)
            .filter(|&c| c > created_cycle);
        retired.into_iter().chain(live).min()
    }

    fn live_info(ctx: CtxId, c: &LiveCtx) -> CtxInfo {
        CtxInfo {
            ctx,
            vm: c.vm,
            created_cycle: c.created_cycle,
            state: if c.destroyed {
                CtxState::Destroyed
            } else {
                CtxState::Active
            },
        }
    }
}

impl CounterView for Store {
    fn ctx_program(&self, ctx: CtxId) -> Option<u32> {
        self.dev
            .read32(regs::ctx(ctx, regs::CTX_PROGRAM))
            .map_err(|e| tracing::warn!(ctx, error = %e, "reading CTX_PROGRAM failed"))
            .ok()
    }

    fn vm_keys(&self) -> Option<&dyn crate::view::VmKeys> {
        Some(self)
    }

    fn earlier_tenancy(&self, ctx: CtxId, created_cycle: u64) -> bool {
        let entry = self.read().retired.get(&(ctx, created_cycle)).copied();
        entry.is_some_and(|e| e.tenancy != 0 && e.tenancy != self.tenancy(e.vm))
    }

    fn vms(&self) -> Vec<VmId> {
        self.read().vms.keys().copied().collect()
    }

    fn vm_partition(&self, vm: VmId) -> Option<u32> {
        self.read().vms.get(&vm).map(|v| v.partition)
    }

    fn contexts(&self, vm: VmId) -> Option<Vec<CtxInfo>> {
        let t = self.read();
        t.vms.get(&vm)?;
        let mut out: Vec<CtxInfo> = t
            .retired
            .iter()
            .filter(|(_, e)| e.vm == vm)
            .map(|(&(ctx, created_cycle), _)| CtxInfo {
                ctx,
                vm,
                created_cycle,
                state: CtxState::Retired,
            })
            .collect();
        out.extend(
            t.live
                .iter()
                .filter(|(_, c)| c.vm == vm)
                .map(|(&ctx, c)| Self::live_info(ctx, c)),
        );
        out.sort_by_key(|c| (c.ctx, c.created_cycle));
        Some(out)
    }

    fn ctx_vm(&self, ctx: CtxId) -> Option<VmId> {
        let t = self.read();
        if let Some(c) = t.live.get(&ctx) {
            return Some(c.vm);
        }
        t.retired
            .range((ctx, 0)..=(ctx, u64::MAX))
            .next_back()
            .map(|(_, e)| e.vm)
    }

    fn totals(&self, scope: Scope) -> Option<Totals> {
        match scope {
            Scope::System => {
                let slot = self
                    .dev
                    .block_slot(block_slot_offset(SYSTEM_BLOCK_SLOT))
                    .ok()?;
                Self::slot_totals(&slot, false, Some((block_kind::SYSTEM, 0)))
            }
            Scope::Vm(vm) => {
                let info = self.vm_info(vm)?;
                let slot = self.dev.block_slot(info.block_offset).ok()?;
                Self::slot_totals(&slot, info.confidential, Some((block_kind::VM, vm)))
            }
            Scope::Ctx(ctx) => {
                let latest = self.latest_instance(ctx)?;
                self.instance_totals(ctx, latest.created_cycle)
            }
        }
    }

    fn instance(&self, ctx: CtxId, created_cycle: u64) -> Option<CtxInfo> {
        let t = self.read();
        if let Some(c) = t
            .live
            .get(&ctx)
            .filter(|c| c.created_cycle == created_cycle)
        {
            return Some(Self::live_info(ctx, c));
        }
        t.retired.get(&(ctx, created_cycle)).map(|e| CtxInfo {
            ctx,
            vm: e.vm,
            created_cycle,
            state: CtxState::Retired,
        })
    }

    fn latest_instance(&self, ctx: CtxId) -> Option<CtxInfo> {
        let t = self.read();
        if let Some(c) = t.live.get(&ctx) {
            return Some(Self::live_info(ctx, c));
        }
        t.retired
            .range((ctx, 0)..=(ctx, u64::MAX))
            .next_back()
            .map(|(&(_, created_cycle), e)| CtxInfo {
                ctx,
                vm: e.vm,
                created_cycle,
                state: CtxState::Retired,
            })
    }

    fn instance_totals(&self, ctx: CtxId, created_cycle: u64) -> Option<Totals> {
        if let Some(c) = self.live(ctx).filter(|c| c.created_cycle == created_cycle) {
            let sealed = self.vm_info(c.vm).is_some_and(|v| v.confidential);
            let slot = self.dev.block_slot(c.block_offset).ok()?;
            // Still the same instance? (It may have been persisted and
            // released since the table was read; then its file answers.)
            if let Some(t) = Self::slot_totals(&slot, sealed, Some((block_kind::CONTEXT, ctx))) {
                if self
                    .live(ctx)
                    .is_some_and(|now| now.created_cycle == created_cycle)
                {
                    return Some(t);
                }
            }
        }
        self.retired_totals(ctx, created_cycle)
    }

    fn instance_recent(
        &self,
        ctx: CtxId,
        created_cycle: u64,
        max: usize,
    ) -> Option<Vec<DeltaSample>> {
        let info = self.instance(ctx, created_cycle)?;
        let next = Self::next_instance(&self.read(), ctx, created_cycle);
        // A commit belongs to the instance the id named at its end cycle:
        // from the instance's creation until the next instance's.
        let mine = |s: &DeltaSample| {
            s.ctx == ctx
                && s.vm == info.vm
                && s.end_cycle >= created_cycle
                && next.is_none_or(|n| s.end_cycle < n)
        };
        // The newest instance: the id's own ring holds its samples. An
        // older one: the id's ring was cleared for the newer instance; what
        // is left of it is in its VM's ring.
        let scope = match next {
            None => Scope::Ctx(ctx),
            Some(_) => Scope::Vm(info.vm),
        };
        // Unpack the ring's tail, widening until `max` samples match, the
        // ring is exhausted or INSTANCE_SCAN samples were looked at: a
        // request never unpacks a whole large history (history_samples may
        // be 65536) while the drain waits for the lock.
        let mut n = max.saturating_mul(4).clamp(1, INSTANCE_SCAN);
        loop {
            let pool = self.hist().recent(scope, n);
            let looked = pool.len();
            let mut out: Vec<DeltaSample> = pool.into_iter().filter(mine).collect();
            if out.len() >= max || looked < n || n >= INSTANCE_SCAN {
                out.drain(..out.len().saturating_sub(max));
                return Some(out);
            }
            n = n.saturating_mul(4).min(INSTANCE_SCAN);
        }
    }

    fn recent(&self, scope: Scope, max: usize) -> Option<Vec<crate::view::DeltaSample>> {
        self.exists(scope).then(|| self.hist().recent(scope, max))
    }

    fn subscribe(&self, scope: Scope) -> Option<FeedReceiver<DeltaSample>> {
        self.exists(scope).then(|| self.hist().subscribe(scope))
    }

    fn clock_khz(&self) -> u32 {
        self.identity.clock_khz
    }
}

impl Store {
    fn exists(&self, scope: Scope) -> bool {
        match scope {
            Scope::System => true,
            Scope::Vm(vm) => self.vm_info(vm).is_some(),
            Scope::Ctx(ctx) => self.ctx_vm(ctx).is_some(),
        }
    }
}
