//! The ledger: exact counts of everything the device generated, kept apart
//! from the counting hierarchy so tests and the privileged debug interface
//! can check the hierarchy against it.
//!
//! For every scope (context, VM, system) and event:
//! `generated = (committed + in_flight + masked) * scale + remainder`, where
//! `scale` is 32 for multi-bit events and 1 otherwise.
//!
//! The system scope is what the system block holds: the device-level units
//! and the VMs that are not confidential. A confidential VM's counts never
//! reach RC0, so its rows add nothing to the system row.

use std::collections::HashMap;

use gpupm_uapi::events::MAX_EVENTS;

/// Whom counts belong to: a context of a VM, or the system (both 0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Attribution {
    /// Context id (0 = device-level, no context).
    pub ctx: u32,
    /// VM id (0 = none).
    pub vm: u32,
}

/// One ledger row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerRow {
    /// Signal units generated.
    pub generated: [u64; MAX_EVENTS],
    /// Counts discarded by CCU masks.
    pub masked: [u64; MAX_EVENTS],
    /// Multi-bit residue dropped when a context left a partition.
    pub remainder: [u64; MAX_EVENTS],
}

impl Default for LedgerRow {
    fn default() -> Self {
        LedgerRow {
            generated: [0; MAX_EVENTS],
            masked: [0; MAX_EVENTS],
            remainder: [0; MAX_EVENTS],
        }
    }
}

impl LedgerRow {
    fn add(target: &mut [u64; MAX_EVENTS], values: &[u64; MAX_EVENTS]) {
        for (t, v) in target.iter_mut().zip(values) {
            *t += v;
        }
    }
}

/// The ledger.
#[derive(Clone, Debug, Default)]
pub struct Ledger {
    contexts: HashMap<u32, LedgerRow>,
    vms: HashMap<u32, LedgerRow>,
    system: LedgerRow,
    /// Bit `v` set: VM `v` is confidential (excluded from the system row).
    confidential: u64,
}

impl Ledger {
    /// An empty ledger; bit `v` of `confidential` marks VM `v` confidential.
    pub fn new(confidential: u64) -> Self {
        Ledger {
            confidential,
            ..Ledger::default()
        }
    }

    /// Empties every row (device reset); the confidential VMs stay.
    pub fn clear(&mut self) {
        *self = Ledger::new(self.confidential);
    }

    fn rows(&mut self, who: Attribution) -> [Option<&mut LedgerRow>; 3] {
        let in_system = 1u64
            .checked_shl(who.vm)
            .is_none_or(|bit| self.confidential & bit == 0);
        let Ledger {
            contexts,
            vms,
            system,
            ..
        } = self;
        let ctx = (who.ctx != 0).then(|| contexts.entry(who.ctx).or_default());
        let vm = (who.vm != 0).then(|| vms.entry(who.vm).or_default());
        [ctx, vm, in_system.then_some(system)]
    }

    /// Records generated signal units.
    pub fn add_generated(&mut self, who: Attribution, values: &[u64; MAX_EVENTS]) {
        if values.iter().all(|&v| v == 0) {
            return;
        }
        for row in self.rows(who).into_iter().flatten() {
            LedgerRow::add(&mut row.generated, values);
        }
    }

    /// Records counts discarded by masks.
    pub fn add_masked(&mut self, who: Attribution, values: &[u64; MAX_EVENTS]) {
        if values.iter().all(|&v| v == 0) {
            return;
        }
        for row in self.rows(who).into_iter().flatten() {
            LedgerRow::add(&mut row.masked, values);
        }
    }

    /// Records dropped multi-bit residue.
    pub fn add_remainder(&mut self, who: Attribution, values: &[u64; MAX_EVENTS]) {
        if values.iter().all(|&v| v == 0) {
            return;
        }
        for row in self.rows(who).into_iter().flatten() {
            LedgerRow::add(&mut row.remainder, values);
        }
    }

    /// Starts a fresh row for a context id being (re)used.
    pub fn reset_context(&mut self, ctx: u32) {
        self.contexts.remove(&ctx);
    }

    /// Row of a context.
    pub fn context(&self, ctx: u32) -> LedgerRow {
        self.contexts.get(&ctx).cloned().unwrap_or_default()
    }

    /// Row of a VM (all its contexts ever).
    pub fn vm(&self, vm: u32) -> LedgerRow {
        self.vms.get(&vm).cloned().unwrap_or_default()
    }

    /// Row of the system scope (everything but confidential VMs).
    pub fn system(&self) -> LedgerRow {
        self.system.clone()
    }
}
