//! The out-of-band reduction channel (`docs/oob.md`): a reduction channel
//! of its own beside the partitions' RCs and RC0, with its own system, VM
//! and context blocks in device-internal memory — never in the
//! host-visible window — committed on its own trigger schedule, which no
//! register can change. The BMC reads it through the OOB mailbox
//! ([`mailbox`]) without allocating anything.
//!
//! What feeds it: every CCU record the RC buffer routes to RC0 (that is,
//! of a VM that is not confidential, or of the device-level units) is also
//! added into the OOB accumulator of the record's partition, in the RC
//! buffer (`rc::ReductionChannels::take_oob`); the counts a host's CCU mask
//! discarded are added here ([`OobChannel::add_masked`]): masks are the
//! host's sampling choice, and the out-of-band view counts what the units
//! generated. A partition's accumulator is committed into the blocks of
//! whoever owned its counts — at every OOB commit and, before the owner
//! changes, at the re-point of a switch — so attribution needs nothing
//! from the host.
//!
//! Confidential VMs are left out, as from RC0 (`docs/confidential.md`):
//! the BMC is not trusted with their counts, so the channel holds none and
//! lists neither their contexts nor a block for them.
//!
//! Context blocks are indexed by context id and tagged with the creation
//! cycle: a destroyed context's block keeps its final counts until the
//! device reuses the id (the host releasing its own block does not touch
//! it).
//!
//! Layout of an OOB block (device-internal, read only through the OOB
//! mailbox's latch): one 64-bit total per event id, the number of commits
//! that added into it, its VM, and for a context its created cycle and
//! [`oob_ctx_state`]. Invariant: at a quiescent point (after an OOB
//! flush) a block holds, per event, every count its scope's units
//! generated since the block began — `(generated - remainder) / scale` of
//! the ledger row, masked counts included — plus what it held across
//! host resets.

pub mod host;
pub mod mailbox;

use gpupm_uapi::events::MAX_EVENTS;
use gpupm_uapi::regs::{oob_ctx_state, MAX_CONTEXTS, MAX_PARTITION_SLOTS, MAX_VMS};

use super::ledger::Attribution;
use super::rc::Sums;

/// One OOB block: counters and bookkeeping, device-internal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OobBlock {
    /// Per-event totals.
    pub counters: Sums,
    /// Commits that added counts into this block.
    pub commits: u64,
    /// The VM (VM and context blocks).
    pub vm: u32,
    /// Creation cycle (context blocks).
    pub created_cycle: u64,
    /// [`oob_ctx_state`] of a context block; 0 for an unused one.
    pub state: u64,
}

impl Default for OobBlock {
    fn default() -> Self {
        OobBlock {
            counters: [0; MAX_EVENTS],
            commits: 0,
            vm: 0,
            created_cycle: 0,
            state: 0,
        }
    }
}

impl OobBlock {
    fn add(&mut self, deltas: &Sums) {
        for (c, d) in self.counters.iter_mut().zip(deltas) {
            *c += d;
        }
        self.commits += 1;
    }
}

/// Where the channel stands: its commits, schedule and flushes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OobInfo {
    /// Channel commits so far (periodic, flushes, reset drains).
    pub generation: u64,
    /// Cycle of the last channel commit.
    pub last_commit_cycle: u64,
    /// Period of the channel's own trigger, in cycles.
    pub period: u64,
    /// OOB flushes requested so far.
    pub flushes_requested: u64,
    /// OOB flushes completed so far.
    pub flushes_done: u64,
    /// Host resets the channel carried its counts across.
    pub resets: u64,
}

/// The channel: per-partition accumulators and the blocks they commit into.
#[derive(Clone, Debug)]
pub struct OobChannel {
    /// Per partition slot (0 = the device-level units): counts CCU masks
    /// discarded since the partition's last OOB commit.
    masked: Vec<Sums>,
    system: OobBlock,
    vms: Vec<OobBlock>,
    contexts: Vec<OobBlock>,
    /// Bit `v`: VM `v` is confidential (no block, no contexts).
    confidential: u64,
    info: OobInfo,
    next_commit: u64,
    /// Cycle the pending OOB flush completes at.
    flush_due: Option<u64>,
}

impl OobChannel {
    /// The channel of a device whose own trigger fires every `period`
    /// cycles (at least 1), with the VMs `vms` (id, confidential); its
    /// first commit is one period from 0.
    pub fn new(period: u64, vms: impl IntoIterator<Item = (u32, bool)>) -> Self {
        let period = period.max(1);
        let mut channel = OobChannel {
            masked: vec![[0; MAX_EVENTS]; MAX_PARTITION_SLOTS as usize],
            system: OobBlock::default(),
            vms: vec![OobBlock::default(); MAX_VMS as usize],
            contexts: vec![OobBlock::default(); MAX_CONTEXTS as usize],
            confidential: 0,
            info: OobInfo {
                period,
                ..OobInfo::default()
            },
            next_commit: period,
            flush_due: None,
        };
        for (vm, confidential) in vms {
            if let Some(block) = channel.vms.get_mut(vm as usize).filter(|_| vm != 0) {
                block.vm = vm;
                if confidential {
                    channel.confidential |= 1u64.checked_shl(vm).unwrap_or(0);
                }
            }
        }
        channel
    }

    /// Whether VM `vm` is confidential (left out of the channel).
    pub fn is_confidential(&self, vm: u32) -> bool {
        1u64.checked_shl(vm)
            .is_some_and(|bit| self.confidential & bit != 0)
    }

    /// Adds counts a CCU mask of partition `p` discarded.
    pub fn add_masked(&mut self, p: u32, masked: &Sums) {
        for (s, m) in self.masked[p as usize].iter_mut().zip(masked) {
            *s += m;
        }
    }

    /// Commits partition `p`'s counts — `routed` (its OOB accumulator in
    /// the RC buffer) and what masks discarded — into the blocks of `who`
    /// (the owner of its counts since its last commit). A confidential
    /// VM's records never reach the accumulator; what masks discarded of
    /// its counts is dropped here, never shown.
    pub fn commit_partition(&mut self, p: u32, who: Attribution, routed: &Sums) {
        let mut deltas = std::mem::replace(&mut self.masked[p as usize], [0; MAX_EVENTS]);
        for (d, r) in deltas.iter_mut().zip(routed) {
            *d += r;
        }
        if deltas.iter().all(|&d| d == 0) || self.is_confidential(who.vm) {
            return;
        }
        self.system.add(&deltas);
        if let Some(block) = self.vms.get_mut(who.vm as usize).filter(|_| who.vm != 0) {
            block.add(&deltas);
        }
        if let Some(block) = self
            .contexts
            .get_mut(who.ctx as usize)
            .filter(|_| who.ctx != 0)
        {
            block.add(&deltas);
        }
    }

    /// Counts one channel commit at `now`; a periodic one schedules the
    /// next on the channel's fixed grid (flushes and reset drains do not
    /// move it).
    pub fn committed(&mut self, now: u64, periodic: bool) {
        self.info.generation += 1;
        self.info.last_commit_cycle = now;
        if periodic {
            let period = self.info.period;
            self.next_commit = (now / period).saturating_add(1).saturating_mul(period);
        }
    }

    /// Cycle of the next scheduled periodic commit.
    #[inline]
    pub fn next_commit(&self) -> u64 {
        self.next_commit
    }

    /// Cycle of the channel's next event: its periodic commit or the
    /// completion of a pending flush.
    #[inline]
    pub fn next_event(&self) -> u64 {
        self.next_commit.min(self.flush_due.unwrap_or(u64::MAX))
    }

    /// Cycle the pending flush completes at, if one is pending.
    #[inline]
    pub fn flush_due(&self) -> Option<u64> {
        self.flush_due
    }

    /// Requests a flush completing at `due`; returns its number, or
    /// `None` while an earlier one is pending (nothing changes then).
    pub fn request_flush(&mut self, due: u64) -> Option<u64> {
        if self.flush_due.is_some() {
            return None;
        }
        self.flush_due = Some(due);
        self.info.flushes_requested += 1;
        Some(self.info.flushes_requested)
    }

    /// The pending flush completed (the device flushed and committed).
    pub fn flush_completed(&mut self) {
        if self.flush_due.take().is_some() {
            self.info.flushes_done += 1;
        }
    }

    /// A context was created with `id` in `vm` at `now`: its block starts
    /// from zero (a reused id's previous instance is gone). Contexts of a
    /// confidential VM get no block.
    pub fn context_created(&mut self, id: u32, vm: u32, now: u64) {
        let confidential = self.is_confidential(vm);
        let Some(block) = self.contexts.get_mut(id as usize) else {
            return;
        };
        *block = OobBlock::default();
        if !confidential {
            block.vm = vm;
            block.created_cycle = now;
            block.state = oob_ctx_state::ACTIVE;
        }
    }

    /// Context `id` was destroyed: its block keeps its counts.
    pub fn context_destroyed(&mut self, id: u32) {
        if let Some(block) = self.contexts.get_mut(id as usize) {
            if block.state == oob_ctx_state::ACTIVE {
                block.state = oob_ctx_state::DESTROYED;
            }
        }
    }

    /// A host reset happened; the channel kept its counts.
    pub fn reset_carried(&mut self) {
        self.info.resets += 1;
    }

    /// The system block.
    pub fn system(&self) -> &OobBlock {
        &self.system
    }

    /// VM `vm`'s block, if the VM is configured and not confidential.
    pub fn vm(&self, vm: u32) -> Option<&OobBlock> {
        self.vms
            .get(vm as usize)
            .filter(|b| vm != 0 && b.vm == vm && !self.is_confidential(vm))
    }

    /// Whether VM `vm` is configured (confidential or not).
    pub fn has_vm(&self, vm: u32) -> bool {
        self.vms
            .get(vm as usize)
            .is_some_and(|b| vm != 0 && b.vm == vm)
    }

    /// Context `ctx`'s block, if the OOB table has it.
    pub fn context(&self, ctx: u32) -> Option<&OobBlock> {
        self.contexts
            .get(ctx as usize)
            .filter(|b| ctx != 0 && b.state != 0)
    }

    /// The first configured VM id above `after` (confidential ones
    /// included, flagged by [`Self::is_confidential`]).
    pub fn next_vm(&self, after: u32) -> Option<u32> {
        let from = after as usize + 1;
        self.vms
            .get(from..)?
            .iter()
            .find(|b| b.vm != 0)
            .map(|b| b.vm)
    }

    /// The first context id above `after` in the table, of VM `vm` (or of
    /// any VM when 0).
    pub fn next_context(&self, after: u32, vm: u32) -> Option<(u32, &OobBlock)> {
        let from = after as usize + 1;
        self.contexts
            .get(from..)?
            .iter()
            .zip(from..)
            .find(|(b, _)| b.state != 0 && (vm == 0 || b.vm == vm))
            .and_then(|(b, id)| Some((u32::try_from(id).ok()?, b)))
    }

    /// Contexts of VM `vm` in the table.
    pub fn context_count(&self, vm: u32) -> u64 {
        let n = self
            .contexts
            .iter()
            .filter(|b| b.state != 0 && b.vm == vm)
            .count();
        u64::try_from(n).unwrap_or(u64::MAX)
    }

    /// Where the channel stands.
    pub fn info(&self) -> OobInfo {
        self.info
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_reach_system_vm_and_context_blocks_but_never_a_confidential_vms() {
        let mut ch = OobChannel::new(50_000, [(1, false), (2, true)]);
        assert_eq!(ch.info().period, 50_000);
        ch.context_created(7, 1, 10);
        ch.context_created(8, 2, 11);
        let mut events = [0; MAX_EVENTS];
        events[3] = 2;
        ch.add_masked(1, &events);
        events[3] = 5;
        ch.commit_partition(1, Attribution { ctx: 7, vm: 1 }, &events);
        assert_eq!(ch.system().counters[3], 7);
        assert_eq!(ch.vm(1).map(|b| b.counters[3]), Some(7));
        assert_eq!(
            ch.context(7).map(|b| (b.counters[3], b.created_cycle)),
            Some((7, 10))
        );
        ch.add_masked(2, &events);
        ch.commit_partition(2, Attribution { ctx: 8, vm: 2 }, &events);
        assert_eq!(
            ch.system().counters[3],
            7,
            "a confidential VM's counts are dropped"
        );
        assert!(ch.vm(2).is_none(), "a confidential VM has no OOB block");
        assert!(ch.has_vm(2), "but the channel knows it exists");
        assert!(ch.context(8).is_none(), "nor do its contexts");
        assert_eq!(
            (ch.next_vm(0), ch.next_vm(1), ch.next_vm(2)),
            (Some(1), Some(2), None)
        );
        assert!(ch.is_confidential(2));
        ch.context_destroyed(7);
        assert_eq!(
            ch.context(7).map(|b| b.state),
            Some(oob_ctx_state::DESTROYED)
        );
        assert_eq!(ch.next_context(0, 0).map(|(id, _)| id), Some(7));
        assert_eq!(ch.next_context(7, 0).map(|(id, _)| id), None);
        assert_eq!(ch.next_context(0, 2).map(|(id, _)| id), None);
        ch.context_created(7, 1, 99);
        assert_eq!(
            ch.context(7).map(|b| (b.counters[3], b.created_cycle)),
            Some((0, 99))
        );
        assert_eq!(
            ch.system().counters[3],
            7,
            "the system block keeps what it had"
        );
    }

    #[test]
    fn the_schedule_is_a_fixed_grid_and_one_flush_is_pending_at_a_time() {
        let mut ch = OobChannel::new(1_000, []);
        assert_eq!(ch.next_event(), 1_000);
        assert_eq!(ch.request_flush(400), Some(1));
        assert_eq!(ch.request_flush(500), None, "busy");
        assert_eq!((ch.next_event(), ch.flush_due()), (400, Some(400)));
        ch.committed(400, false);
        ch.flush_completed();
        assert_eq!(ch.next_event(), 1_000, "a flush does not move the grid");
        ch.committed(2_500, true);
        assert_eq!(ch.next_commit(), 3_000);
        let info = ch.info();
        assert_eq!(
            (
                info.generation,
                info.last_commit_cycle,
                info.flushes_requested,
                info.flushes_done
            ),
            (2, 2_500, 1, 1)
        );
        assert_eq!(ch.request_flush(2_600), Some(2));
    }
}
