//! What the store tells whoever follows its tables as they change: a
//! trait the store defines and a follower (the tenant pages) implements,
//! handed to the store when it is made, so that the store knows nothing of
//! who follows it.

use std::collections::BTreeMap;

use gpupm_uapi::layout::BlockSlot;

use crate::view::{BlockSource, CtxId, DeltaSample, VmId};

/// A follower of the store's tables.
pub trait TableEvents: Send + Sync + std::fmt::Debug {
    /// The VM table is now `vms` (where each VM's numbers come from).
    fn vms_changed(&self, vms: &BTreeMap<VmId, BlockSource>);
    /// The live contexts are now `live`: (created cycle, destroyed) by id.
    fn live_changed(&self, live: &BTreeMap<CtxId, (u64, bool)>);
    /// A context instance was destroyed on the device.
    fn ctx_destroyed(&self, ctx: CtxId, created_cycle: u64);
    /// A context instance was persisted and is about to be released;
    /// `final_slot` loads its persisted final block.
    fn ctx_retired(
        &self,
        ctx: CtxId,
        created_cycle: u64,
        final_slot: &dyn Fn() -> Option<BlockSlot>,
    );
    /// Partition `p` committed a switch to `incoming` (`None`: not known).
    fn switched(&self, p: u32, incoming: Option<CtxId>);
    /// The device was reset.
    fn device_reset(&self);
    /// The tables were rebuilt from the device's registers.
    fn resynced(&self);
    /// Stream deltas were drained.
    fn samples(&self, samples: &[DeltaSample]);
}
