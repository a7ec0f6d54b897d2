//! The context series of one VM, built so that every counter only goes up
//! — across context churn, recycled context ids, retention pruning and
//! daemon restarts.
//!
//! # The rule
//! * A context *instance* is (id, created cycle): ids are recycled, the
//!   device's creation cycle is not. Every series carries both
//!   (`ctx`, `created_cycle`), so a new instance of an id is a new series,
//!   never a drop of the old one.
//! * Per VM, the `max_contexts_per_vm` newest instances (by created cycle,
//!   then id) are exported individually. A new instance is always the
//!   newest, so the set only ever gains new instances and loses its
//!   oldest: an instance that left it never comes back.
//! * `ctx="other"` (no `created_cycle`) is everything else the VM counted:
//!   the VM block minus the exported instances. The VM block is the sum of
//!   every instance that ever ran on the VM (the device counts each event
//!   once in its context's block and once in its VM's), so `other` is the
//!   sum over the instances not exported — also those retention pruned,
//!   whose files are gone. It grows with them and jumps up when an
//!   instance leaves the exported set; it never falls. The VM's context
//!   series always add up to its `gpupm_vm_events_total`.
//! * All of it is recomputed from the device's blocks and the persisted
//!   retired instances, so a restarted daemon exports the same values for
//!   the same label sets: nothing is kept in memory that a restart loses.
//!
//! The VM block and the instances' blocks are separate reads. The VM block
//! is read before and after the instances; when its commit sequence did not
//! move, no commit reached the VM (nor so any of its contexts) in between,
//! and the subtraction is exact. A VM that commits throughout is retried a
//! few times; the last try's result is then at worst high by what was
//! committed during the reads, and [`OtherFloor`] keeps `other` from
//! stepping back below what an earlier scrape showed.

use std::collections::BTreeMap;

use gpupm_uapi::events::MAX_EVENTS;

use crate::view::{CounterView, CtxId, Scope, Totals, VmId};

/// Per-event counters.
pub type Counters = [u64; MAX_EVENTS];

/// Reads of a VM before giving up on a commit-free window.
pub const CONSISTENT_TRIES: usize = 4;

/// One exported instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstanceSeries {
    /// Context id.
    pub ctx: CtxId,
    /// Device cycle of its creation.
    pub created_cycle: u64,
    /// Its totals.
    pub counters: Counters,
}

/// A plain VM's counters as one scrape exports them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmSeries {
    /// The VM block.
    pub totals: Counters,
    /// The newest instances, newest first.
    pub instances: Vec<InstanceSeries>,
    /// Everything else the VM counted.
    pub other: Counters,
}

fn plain(t: Option<Totals>) -> Option<(Counters, u64)> {
    match t? {
        Totals::Plain {
            counters,
            commit_seq,
            ..
        } => Some((counters, commit_seq)),
        Totals::Sealed(_) => None,
    }
}

/// Reads plain VM `vm` (None: no such VM, or confidential) with its
/// newest `max_ctx` instances and the rest as `other`.
pub fn read_vm(view: &dyn CounterView, vm: VmId, max_ctx: usize) -> Option<VmSeries> {
    let mut before = plain(view.totals(Scope::Vm(vm)))?;
    let mut last = None;
    for _ in 0..CONSISTENT_TRIES {
        let instances = newest_instances(view, vm, max_ctx);
        let after = plain(view.totals(Scope::Vm(vm)))?;
        let consistent = after.1 == before.1;
        // Inconsistent: the later read, which holds at least every
        // exported instance's count, so `other` cannot go negative.
        let totals = if consistent { before.0 } else { after.0 };
        let mut other = totals;
        for i in &instances {
            for (o, c) in other.iter_mut().zip(i.counters) {
                *o = o.saturating_sub(c);
            }
        }
        let series = VmSeries {
            totals,
            instances,
            other,
        };
        if consistent {
            return Some(series);
        }
        last = Some(series);
        before = after;
    }
    last
}

/// The newest `max_ctx` instances of `vm` whose totals are readable.
fn newest_instances(view: &dyn CounterView, vm: VmId, max_ctx: usize) -> Vec<InstanceSeries> {
    let mut infos = view.contexts(vm).unwrap_or_default();
    infos.retain(|c| c.vm == vm);
    infos.sort_unstable_by_key(|c| std::cmp::Reverse((c.created_cycle, c.ctx)));
    infos.dedup_by_key(|c| (c.created_cycle, c.ctx));
    infos
        .into_iter()
        .take(max_ctx)
        .filter_map(|c| {
            let (counters, _) = plain(view.instance_totals(c.ctx, c.created_cycle))?;
            Some(InstanceSeries {
                ctx: c.ctx,
                created_cycle: c.created_cycle,
                counters,
            })
        })
        .collect()
}

/// The highest `other` each VM has shown in this process: a scrape never
/// shows less (see the module documentation for when a read could).
#[derive(Debug, Default)]
pub struct OtherFloor {
    shown: BTreeMap<VmId, Counters>,
}

impl OtherFloor {
    /// Raises `other` of `vm` to what was shown before, and remembers it.
    pub fn apply(&mut self, vm: VmId, other: &mut Counters) {
        let floor = self.shown.entry(vm).or_insert([0; MAX_EVENTS]);
        for (o, f) in other.iter_mut().zip(floor.iter_mut()) {
            *o = (*o).max(*f);
            *f = *o;
        }
    }

    /// Forgets the VMs not in `present` (bounded by the device's VMs).
    pub fn retain(&mut self, present: &[VmId]) {
        self.shown.retain(|vm, _| present.contains(vm));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_keeps_every_event_at_its_highest() {
        let mut floor = OtherFloor::default();
        let mut a = [0u64; MAX_EVENTS];
        a[0] = 10;
        a[1] = 5;
        floor.apply(1, &mut a);
        let mut b = [0u64; MAX_EVENTS];
        b[0] = 7;
        b[1] = 9;
        floor.apply(1, &mut b);
        assert_eq!((b[0], b[1]), (10, 9));
        floor.retain(&[2]);
        let mut c = [0u64; MAX_EVENTS];
        floor.apply(1, &mut c);
        assert_eq!(c[0], 0);
    }
}
