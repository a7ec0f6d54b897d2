//! The reduction-channel buffer and the reduction channels (RCs): the
//! buffer routes each CCU record to the RC of the partition that owns the
//! record's units and to RC0 (the device-wide view) — except records of a
//! confidential VM's counts, which reach only their partition's RC (whose
//! commits are sealed), never RC0; each RC adds up the records it
//! receives, 64 bits per event, until it commits.
//!
//! Registers: `RECORDS_ROUTED` (in the trigger block's range) and, per
//! partition slot, `PART_COMMIT_SEQ`.

use gpupm_uapi::events::MAX_EVENTS;
use gpupm_uapi::layout::{ccu_record_flags, CcuRecord};
use gpupm_uapi::regs::{self as r, MAX_PARTITION_SLOTS};

use super::access::{r64, RegValue};
use super::topology::Topology;

/// Per-event sums of one RC.
pub type Sums = [u64; MAX_EVENTS];

/// Where a trigger's bank contents go when the batched engine drains them
/// in its counting pass: the partition's RC (absent for the system CCUs)
/// and RC0 (absent for a confidential VM's counts).
#[derive(Debug)]
pub struct Drain<'a> {
    /// The owning partition's RC.
    pub partition_rc: Option<&'a mut Sums>,
    /// RC0.
    pub system_rc: Option<&'a mut Sums>,
}

impl Drain<'_> {
    /// Adds `v` counts of `event` to the RCs.
    #[inline]
    pub fn add(&mut self, event: u8, v: u32) {
        let (e, v) = (usize::from(event), u64::from(v));
        if let Some(rc) = self.system_rc.as_deref_mut() {
            rc[e] += v;
        }
        if let Some(rc) = self.partition_rc.as_deref_mut() {
            rc[e] += v;
        }
    }
}

/// One RC's commit bookkeeping.
#[derive(Clone, Copy, Debug, Default)]
struct Channel {
    commit_seq: u64,
    last_commit_cycle: u64,
}

/// The buffer and every RC (index = partition slot; 0 = RC0).
#[derive(Clone, Debug)]
pub struct ReductionChannels {
    sums: Vec<Sums>,
    channels: Vec<Channel>,
    records_routed: u64,
}

impl Default for ReductionChannels {
    fn default() -> Self {
        let slots = MAX_PARTITION_SLOTS as usize;
        ReductionChannels {
            sums: vec![[0; MAX_EVENTS]; slots],
            channels: vec![Channel::default(); slots],
            records_routed: 0,
        }
    }
}

impl ReductionChannels {
    /// Routes one CCU record of partition `owner`: into RC `owner` (unless
    /// 0) and, with `to_system`, RC0. A flush ack carries no values and is
    /// only counted.
    #[inline]
    pub fn route(&mut self, topo: &Topology, rec: &CcuRecord, owner: u32, to_system: bool) {
        self.records_routed += 1;
        if rec.flags & ccu_record_flags::FLUSH_ACK != 0 {
            return;
        }
        let base = topo.ccus[usize::from(rec.ccu)].counters.start as usize
            + usize::from(rec.first_counter);
        let events = &topo.counter_event[base..base + usize::from(rec.valid)];
        let (system, partitions) = self.sums.split_at_mut(1);
        for (&v, &e) in rec.values.iter().zip(events) {
            let (v, e) = (u64::from(v), usize::from(e));
            if to_system {
                system[0][e] += v;
            }
            if owner != 0 {
                partitions[owner as usize - 1][e] += v;
            }
        }
    }

    /// Counts `n` records that a fused counting pass routed through
    /// [`ReductionChannels::drain`].
    #[inline]
    pub fn count_routed(&mut self, n: u64) {
        self.records_routed += n;
    }

    /// Where partition `p`'s drained banks go (RC0 only `to_system`).
    #[inline]
    pub fn drain(&mut self, p: u32, to_system: bool) -> Drain<'_> {
        let (system, partitions) = self.sums.split_at_mut(1);
        Drain {
            partition_rc: (p != 0).then(|| &mut partitions[p as usize - 1]),
            system_rc: to_system.then(|| &mut system[0]),
        }
    }

    /// Takes RC `p`'s sums, leaving it reset.
    #[inline]
    pub fn take(&mut self, p: u32) -> Sums {
        std::mem::replace(&mut self.sums[p as usize], [0; MAX_EVENTS])
    }

    /// Records RC `p`'s commit at `now`; returns the cycle of the previous
    /// commit (the start of the span the commit covers).
    #[inline]
    pub fn committed(&mut self, p: u32, now: u64) -> u64 {
        let ch = &mut self.channels[p as usize];
        ch.commit_seq += 1;
        std::mem::replace(&mut ch.last_commit_cycle, now)
    }

    /// Zeroes every RC and commit count (device reset). The commit spans
    /// and the routed-records count carry on.
    pub fn reset(&mut self) {
        for s in &mut self.sums {
            *s = [0; MAX_EVENTS];
        }
        for ch in &mut self.channels {
            ch.commit_seq = 0;
        }
    }

    /// Reads `RECORDS_ROUTED`.
    pub fn read_global(&self, offset: u64) -> Option<RegValue> {
        (offset == r::RECORDS_ROUTED).then_some(RegValue::R64(self.records_routed))
    }

    /// Reads RC `p`'s register in the partition block.
    pub fn read_channel(&self, p: u32, offset: u64) -> Option<RegValue> {
        match offset {
            r::PART_COMMIT_SEQ => r64(self.channels[p as usize].commit_seq),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use gpupm_uapi::layout::RECORD_VALUES;

    use super::*;
    use crate::scenario::{h100_class, PartitionSpec};

    #[test]
    fn records_reach_their_partition_rc_and_rc0_and_acks_only_count() {
        let part = PartitionSpec {
            slot: 1,
            gpcs: vec![0],
            memory_slices: vec![0],
            ctx_timeslice_cycles: 0,
            vm_timeslice_cycles: 0,
            ri_version: 1,
            ri_max_rgs: gpupm_uapi::ri::RGS_MAX,
        };
        let topo = Topology::build(&h100_class(), &[part]).unwrap();
        let c = topo.partition_ccus[1][0];
        let rec = CcuRecord {
            ccu: u16::try_from(c).unwrap(),
            valid: 2,
            values: [3; RECORD_VALUES],
            ..CcuRecord::default()
        };
        let mut rc = ReductionChannels::default();
        rc.route(&topo, &rec, 1, true);
        let first = topo.ccus[c as usize].counters.start as usize;
        let e0 = usize::from(topo.counter_event[first]);
        assert_eq!(rc.sums[1][e0], 3);
        assert_eq!(rc.sums[0][e0], 3);
        // A confidential VM's record reaches only its partition's RC.
        rc.route(&topo, &rec, 1, false);
        assert_eq!(rc.sums[1][e0], 6);
        assert_eq!(rc.sums[0][e0], 3);
        let ack = CcuRecord {
            flags: ccu_record_flags::FLUSH_ACK,
            ..rec
        };
        rc.route(&topo, &ack, 1, true);
        assert_eq!(rc.read_global(r::RECORDS_ROUTED), Some(RegValue::R64(3)));
        assert_eq!(rc.take(1)[e0], 6);
        assert_eq!(rc.take(1)[e0], 0);
        assert_eq!(rc.committed(1, 50), 0);
        assert_eq!(rc.committed(1, 90), 50);
        assert_eq!(rc.read_channel(1, r::PART_COMMIT_SEQ), r64(2));
    }
}
