//! The reduction-channel buffer and the reduction channels (RCs): the
//! buffer routes each CCU record to the RC of the partition that owns the
//! record's units and to RC0 (the device-wide view) — except records of a
//! confidential VM's counts, which reach only their partition's RC (whose
//! commits are sealed), never RC0; each RC adds up the records it
//! receives, 64 bits per event, until it commits.
//!
//! The out-of-band reduction channel (`model/oob`) is fed here too: every
//! record routed to RC0 is also added into the OOB accumulator of its
//! partition ([`ReductionChannels::take_oob`]), which only the device's own
//! OOB schedule and switch re-points commit — never a host command. When
//! the OOB channel's own trigger makes a partition's CCUs emit
//! ([`SystemPath::Held`]), their share for RC0 is held here, per
//! partition, until the host's next trigger of that partition emits (which
//! releases it first): RC0 then commits, at every host trigger, exactly
//! what it would without the OOB channel, and a partition's RC is only
//! committed by the host anyway.
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

/// Where a partition's emitted records go beside its own RC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SystemPath {
    /// RC0 and the partition's OOB accumulator (a host trigger).
    Rc0,
    /// The partition's OOB accumulator, and held for RC0 until the host's
    /// next trigger of the partition (the OOB channel's own trigger).
    Held,
    /// Neither: a confidential VM's counts (and flush acks).
    Neither,
}

impl SystemPath {
    /// The path of a host trigger's records: RC0 unless `confidential`.
    pub fn host(confidential: bool) -> Self {
        if confidential {
            SystemPath::Neither
        } else {
            SystemPath::Rc0
        }
    }
}

/// Where a trigger's bank contents go when the batched engine drains them
/// in its counting pass: the partition's RC (absent for the system CCUs),
/// RC0 (or the partition's share held for it) and the partition's OOB
/// accumulator (both absent for a confidential VM's counts).
#[derive(Debug)]
pub struct Drain<'a> {
    /// The owning partition's RC.
    pub partition_rc: Option<&'a mut Sums>,
    /// RC0, or the partition's share held for it.
    pub system_rc: Option<&'a mut Sums>,
    /// The partition's accumulator in the OOB channel.
    pub oob_rc: Option<&'a mut Sums>,
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
        if let Some(rc) = self.oob_rc.as_deref_mut() {
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
    /// Per partition slot: what RC0 received from it (or was held for
    /// RC0) since the OOB channel last took it.
    oob: Vec<Sums>,
    /// Per partition slot: its share for RC0 of what the OOB channel's
    /// trigger made it emit, until the host's next trigger of it.
    held: Vec<Sums>,
}

impl Default for ReductionChannels {
    fn default() -> Self {
        let slots = MAX_PARTITION_SLOTS as usize;
        ReductionChannels {
            sums: vec![[0; MAX_EVENTS]; slots],
            channels: vec![Channel::default(); slots],
            records_routed: 0,
            oob: vec![[0; MAX_EVENTS]; slots],
            held: vec![[0; MAX_EVENTS]; slots],
        }
    }
}

impl ReductionChannels {
    /// Routes one CCU record of partition `owner`: into RC `owner` (unless
    /// 0) and along `path` (RC0 or held for it, and the OOB accumulator of
    /// `owner`). A flush ack carries no values and is only counted.
    #[inline]
    pub fn route(&mut self, topo: &Topology, rec: &CcuRecord, owner: u32, path: SystemPath) {
        self.records_routed += 1;
        if rec.flags & ccu_record_flags::FLUSH_ACK != 0 {
            return;
        }
        let base = topo.ccus[usize::from(rec.ccu)].counters.start as usize
            + usize::from(rec.first_counter);
        let events = &topo.counter_event[base..base + usize::from(rec.valid)];
        let mut drain = self.drain(owner, path);
        for (&v, &e) in rec.values.iter().zip(events) {
            drain.add(e, v);
        }
    }

    /// Moves partition `p`'s share held for RC0 into RC0: the host's
    /// trigger of `p` is emitting.
    #[inline]
    pub fn release_held(&mut self, p: u32) {
        let held = &mut self.held[p as usize];
        if held.iter().any(|&v| v != 0) {
            for (s, h) in self.sums[0].iter_mut().zip(held.iter_mut()) {
                *s += std::mem::take(h);
            }
        }
    }

    /// Counts `n` records that a fused counting pass routed through
    /// [`ReductionChannels::drain`].
    #[inline]
    pub fn count_routed(&mut self, n: u64) {
        self.records_routed += n;
    }

    /// Where partition `p`'s drained banks go: its RC, and along `path`.
    #[inline]
    pub fn drain(&mut self, p: u32, path: SystemPath) -> Drain<'_> {
        let (system, partitions) = self.sums.split_at_mut(1);
        let system_rc = match path {
            SystemPath::Rc0 => Some(&mut system[0]),
            SystemPath::Held => Some(&mut self.held[p as usize]),
            SystemPath::Neither => None,
        };
        let oob_rc = (path != SystemPath::Neither).then(|| &mut self.oob[p as usize]);
        Drain {
            partition_rc: (p != 0).then(|| &mut partitions[p as usize - 1]),
            system_rc,
            oob_rc,
        }
    }

    /// Takes partition `p`'s OOB accumulator, leaving it reset.
    #[inline]
    pub fn take_oob(&mut self, p: u32) -> Sums {
        std::mem::replace(&mut self.oob[p as usize], [0; MAX_EVENTS])
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

    /// Zeroes every RC, the shares held for RC0 and commit count (device
    /// reset). The commit spans, the routed-records count and the OOB
    /// accumulators (which the device commits before a reset) carry on.
    pub fn reset(&mut self) {
        for s in self.sums.iter_mut().chain(&mut self.held) {
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
        rc.route(&topo, &rec, 1, SystemPath::Rc0);
        let first = topo.ccus[c as usize].counters.start as usize;
        let e0 = usize::from(topo.counter_event[first]);
        assert_eq!(rc.sums[1][e0], 3);
        assert_eq!(rc.sums[0][e0], 3);
        assert_eq!(rc.oob[1][e0], 3, "the OOB accumulator gets what RC0 gets");
        // A confidential VM's record reaches only its partition's RC.
        rc.route(&topo, &rec, 1, SystemPath::Neither);
        assert_eq!(rc.sums[1][e0], 6);
        assert_eq!(rc.sums[0][e0], 3);
        assert_eq!(rc.take_oob(1)[e0], 3);
        assert_eq!(rc.take_oob(1)[e0], 0);
        // The OOB channel's trigger: RC0's share waits for the host's.
        rc.route(&topo, &rec, 1, SystemPath::Held);
        assert_eq!((rc.sums[1][e0], rc.sums[0][e0]), (9, 3));
        assert_eq!(rc.take_oob(1)[e0], 3);
        rc.release_held(1);
        assert_eq!(rc.sums[0][e0], 6);
        rc.release_held(1);
        assert_eq!(rc.sums[0][e0], 6, "released once");
        let ack = CcuRecord {
            flags: ccu_record_flags::FLUSH_ACK,
            ..rec
        };
        rc.route(&topo, &ack, 1, SystemPath::Rc0);
        assert_eq!(rc.read_global(r::RECORDS_ROUTED), Some(RegValue::R64(4)));
        assert_eq!(rc.take(1)[e0], 9);
        assert_eq!(rc.take(1)[e0], 0);
        assert_eq!(rc.committed(1, 50), 0);
        assert_eq!(rc.committed(1, 90), 50);
        assert_eq!(rc.read_channel(1, r::PART_COMMIT_SEQ), r64(2));
    }
}
