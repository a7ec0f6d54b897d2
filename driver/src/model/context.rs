//! The context table: every context's lifecycle state, owning VM, block
//! slot, profile and creation cycle, and the pool of free context ids.
//!
//! Registers, per entry (`CTX_BASE + ctx * CTX_STRIDE`): `CTX_VM`,
//! `CTX_STATE`, `CTX_BLOCK`, `CTX_CMD`, `CTX_CREATED_CYCLE`. Entry 0 does
//! not exist (context ids start at 1).

use std::collections::BTreeSet;

use gpupm_uapi::layout::{self, CTX_BLOCK_SLOT_BASE};
use gpupm_uapi::regs::{self as r, ctx_cmd, ctx_state, MAX_CONTEXTS};

use super::access::{r32, r64, RegValue, Reject};

/// A context table entry.
#[derive(Clone, Copy, Debug, Default)]
pub struct CtxEntry {
    /// Lifecycle state ([`ctx_state`]).
    pub state: u32,
    /// Owning VM.
    pub vm: u32,
    /// Block slot.
    pub slot: u32,
    /// Profile index.
    pub profile: usize,
    /// Creation cycle.
    pub created_at: u64,
    /// Destroyed while running: destroyed once switched out.
    pub exiting: bool,
    /// Creation serial (names one context instance across id reuse).
    pub serial: u64,
    /// `CTX_PROGRAM`: 1 + index in the program table, 0 for none.
    pub program: u32,
}

/// The context table (index = context id).
#[derive(Clone, Debug)]
pub struct ContextTable {
    entries: Vec<CtxEntry>,
    free_ids: BTreeSet<u32>,
    serials: u64,
    create_failures: u64,
}

impl Default for ContextTable {
    fn default() -> Self {
        ContextTable {
            entries: vec![CtxEntry::default(); MAX_CONTEXTS as usize],
            free_ids: (1..MAX_CONTEXTS).collect(),
            serials: 0,
            create_failures: 0,
        }
    }
}

impl ContextTable {
    /// Entry `id` (a free entry for an id out of range).
    #[inline]
    pub fn get(&self, id: u32) -> CtxEntry {
        self.entries.get(id as usize).copied().unwrap_or_default()
    }

    /// Mutable entry `id`; `id` must be below `MAX_CONTEXTS`.
    #[inline]
    pub fn entry(&mut self, id: u32) -> &mut CtxEntry {
        &mut self.entries[id as usize]
    }

    /// The lowest free id, if any.
    pub fn first_free(&self) -> Option<u32> {
        self.free_ids.first().copied()
    }

    /// Counts a context the workload could not create.
    pub fn creation_failed(&mut self) {
        self.create_failures += 1;
    }

    /// Contexts the workload could not create (no free id or block).
    pub fn create_failures(&self) -> u64 {
        self.create_failures
    }

    /// Fills free entry `id` with a new active context; returns its serial.
    pub fn insert(&mut self, id: u32, vm: u32, slot: u32, profile: usize, now: u64) -> u64 {
        self.free_ids.remove(&id);
        self.serials += 1;
        self.entries[id as usize] = CtxEntry {
            state: ctx_state::ACTIVE,
            vm,
            slot,
            profile,
            created_at: now,
            exiting: false,
            serial: self.serials,
            program: 0,
        };
        self.serials
    }

    /// Frees entry `id`; returns the block slot it held.
    pub fn release(&mut self, id: u32) -> u32 {
        let slot = self.entries[id as usize].slot;
        self.entries[id as usize] = CtxEntry::default();
        self.free_ids.insert(id);
        slot
    }

    /// The live (not free) context created with `serial`.
    pub fn by_serial(&self, serial: u64) -> Option<u32> {
        (1..MAX_CONTEXTS).find(|&i| {
            let e = &self.entries[i as usize];
            e.serial == serial && e.state != ctx_state::FREE
        })
    }

    /// Block slot of context `ctx`, if it has one.
    pub fn slot(&self, ctx: u32) -> Option<u32> {
        let c = self.entries.get(ctx as usize)?;
        (c.state != ctx_state::FREE && c.slot >= CTX_BLOCK_SLOT_BASE).then_some(c.slot)
    }

    /// Contexts that exist (active or destroyed-unreleased): (id, vm, state).
    pub fn live(&self) -> impl Iterator<Item = (u32, u32, u32)> + '_ {
        (0..MAX_CONTEXTS)
            .zip(&self.entries)
            .filter(|(_, c)| c.state != ctx_state::FREE)
            .map(|(i, c)| (i, c.vm, c.state))
    }

    /// Reads register `offset` of entry `ctx`.
    pub fn read(&self, ctx: u32, offset: u64) -> Option<RegValue> {
        if ctx == 0 {
            return None;
        }
        let c = self.entries.get(ctx as usize)?;
        let free = c.state == ctx_state::FREE;
        match offset {
            r::CTX_VM => r32(c.vm),
            r::CTX_STATE => r32(c.state),
            r::CTX_PROGRAM => r32(if free { 0 } else { c.program }),
            r::CTX_BLOCK => r64(if free {
                0
            } else {
                layout::block_slot_offset(c.slot)
            }),
            r::CTX_CMD => r32(0),
            r::CTX_CREATED_CYCLE => r64(if free { 0 } else { c.created_at }),
            _ => None,
        }
    }

    /// Checks a write of `v` to register `offset` of entry `ctx`;
    /// `released` lists the contexts the batch has released so far.
    pub fn check_write(
        &self,
        ctx: u32,
        offset: u64,
        v: u32,
        released: &mut Vec<u32>,
    ) -> Result<u32, Reject> {
        match offset {
            r::CTX_CMD if v == ctx_cmd::RELEASE => {
                if self.get(ctx).state != ctx_state::DESTROYED || released.contains(&ctx) {
                    return Err(Reject::BadValue(
                        "only a destroyed, unreleased context can be released",
                    ));
                }
                released.push(ctx);
                Ok(ctx)
            }
            r::CTX_CMD => Err(Reject::BadValue("unknown context command")),
            _ => Err(Reject::ReadOnly),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_destroyed_context_is_released_once_per_batch() {
        let mut t = ContextTable::default();
        let id = t.first_free().unwrap();
        t.insert(id, 1, CTX_BLOCK_SLOT_BASE, 0, 7);
        let mut released = Vec::new();
        assert!(t
            .check_write(id, r::CTX_CMD, ctx_cmd::RELEASE, &mut released)
            .is_err());
        t.entry(id).state = ctx_state::DESTROYED;
        assert_eq!(
            t.check_write(id, r::CTX_CMD, ctx_cmd::RELEASE, &mut released),
            Ok(id)
        );
        assert!(t
            .check_write(id, r::CTX_CMD, ctx_cmd::RELEASE, &mut released)
            .is_err());
        assert_eq!(t.read(id, r::CTX_CREATED_CYCLE), r64(7));
        assert_eq!(t.release(id), CTX_BLOCK_SLOT_BASE);
        assert_eq!(t.read(id, r::CTX_BLOCK), r64(0));
        assert_eq!(t.first_free(), Some(id));
    }
}
