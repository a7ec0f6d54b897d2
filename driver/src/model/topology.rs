//! Static layout of the counting hierarchy: unit instances, their ULCs, the
//! CCUs that serve them, and the flat counter index space the counting core
//! works on.
//!
//! CCUs are fixed by the hardware: one per GPC, one per memory slice, one for
//! the device-level shared units, and one lane CCU per partition slot for
//! the context-filtered shared units. A partition owns whole GPCs and memory
//! slices, so every CCU belongs to exactly one partition slot (0 = system)
//! or to none (unowned hardware never counts).

use gpupm_uapi::events::{UnitType, MAX_CCU_ULCS, MAX_ULC_COUNTERS};
use gpupm_uapi::regs::{ccu_group, MAX_CCUS, MAX_PARTITION_SLOTS};

pub use crate::scenario::h100_class;
use crate::scenario::{PartitionSpec, TopologySpec};

/// One unit instance with its ULC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ulc {
    /// Unit type.
    pub unit: UnitType,
    /// Instance index within its unit type (lane index for PCIe lanes).
    pub instance: u32,
    /// CCU serving this ULC.
    pub ccu: u32,
    /// First counter (flat index) of this ULC.
    pub first_counter: u32,
    /// Number of counters: one per event of the unit type.
    pub counters: u32,
}

/// One counter collection unit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ccu {
    /// One of [`ccu_group`].
    pub group: u32,
    /// Index within the group kind (GPC index, memory-slice index, lane slot).
    pub group_index: u32,
    /// Owning partition slot; `None` when no partition owns the hardware.
    pub owner: Option<u32>,
    /// ULC indices served (contiguous).
    pub ulcs: std::ops::Range<u32>,
    /// Flat counter range (contiguous).
    pub counters: std::ops::Range<u32>,
}

/// The whole layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    /// Spec it was built from.
    pub spec: TopologySpec,
    /// ULCs in CCU order.
    pub ulcs: Vec<Ulc>,
    /// CCUs.
    pub ccus: Vec<Ccu>,
    /// Event id of every flat counter.
    pub counter_event: Vec<u8>,
    /// ULC of every flat counter.
    pub counter_ulc: Vec<u32>,
    /// Whether every flat counter counts a multi-bit event.
    pub counter_multibit: Vec<bool>,
    /// CCUs owned by each partition slot (index = slot, 0 = system).
    pub partition_ccus: Vec<Vec<u32>>,
}

/// Why a topology cannot be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TopologyError {
    /// A CCU would serve more ULCs than the hardware allows.
    #[error("a CCU would serve {0} ULCs; at most {MAX_CCU_ULCS} are allowed")]
    TooManyUlcs(usize),
    /// More CCUs than the register map has room for.
    #[error("the topology needs {0} CCUs; at most {MAX_CCUS} are allowed")]
    TooManyCcus(usize),
    /// A partition names hardware that does not exist.
    #[error("partition {slot} names {what} {index}, which does not exist")]
    NoSuchUnit {
        /// Partition slot.
        slot: u32,
        /// "GPC" or "memory slice".
        what: &'static str,
        /// Index named.
        index: u32,
    },
    /// Two partitions claim the same hardware.
    #[error("{what} {index} is owned by more than one partition")]
    SharedOwnership {
        /// "GPC" or "memory slice".
        what: &'static str,
        /// Index claimed twice.
        index: u32,
    },
    /// Partition slot out of range.
    #[error("partition slot {0} is out of range 1..{MAX_PARTITION_SLOTS}")]
    BadSlot(u32),
}

impl Topology {
    /// Builds the layout for `spec` with `partitions` owning hardware.
    pub fn build(spec: &TopologySpec, partitions: &[PartitionSpec]) -> Result<Self, TopologyError> {
        let gpc_owner = owners(partitions, spec.sms_per_gpc.len(), "GPC", |p| &p.gpcs)?;
        let mem_owner = owners(
            partitions,
            spec.memory_slices as usize,
            "memory slice",
            |p| &p.memory_slices,
        )?;
        let mut b = Builder::default();
        for (g, &sms) in spec.sms_per_gpc.iter().enumerate() {
            let start = b.sm_count;
            b.sm_count += sms;
            b.ccu(
                ccu_group::GPC,
                g,
                gpc_owner[g],
                (start..start + sms).map(|i| (UnitType::Sm, i)),
            )?;
        }
        for (m, &owner) in mem_owner.iter().enumerate() {
            let m32 = u32::try_from(m).unwrap_or(u32::MAX);
            let per = |n: u32, t: UnitType| (m32 * n..(m32 + 1) * n).map(move |i| (t, i));
            let units = per(spec.l2_per_slice, UnitType::L2Slice)
                .chain(per(spec.fb_per_slice, UnitType::FbPartition))
                .chain(per(spec.ce_per_slice, UnitType::CopyEngine));
            b.ccu(ccu_group::MEMORY_SLICE, m, owner, units)?;
        }
        if spec.nvlinks > 0 {
            b.ccu(
                ccu_group::SYSTEM,
                0,
                Some(0),
                (0..spec.nvlinks).map(|i| (UnitType::Nvlink, i)),
            )?;
        }
        if spec.pcie {
            let mut slots: Vec<u32> = partitions.iter().map(|p| p.slot).collect();
            slots.sort_unstable();
            for slot in slots {
                b.ccu(
                    ccu_group::SHARED_LANE,
                    slot as usize,
                    Some(slot),
                    std::iter::once((UnitType::Pcie, slot)),
                )?;
            }
        }
        if b.ccus.len() > MAX_CCUS as usize {
            return Err(TopologyError::TooManyCcus(b.ccus.len()));
        }
        let mut partition_ccus = vec![Vec::new(); MAX_PARTITION_SLOTS as usize];
        for (i, c) in b.ccus.iter().enumerate() {
            if let Some(owner) = c.owner {
                partition_ccus[owner as usize].push(u32::try_from(i).unwrap_or(u32::MAX));
            }
        }
        Ok(Topology {
            spec: spec.clone(),
            ulcs: b.ulcs,
            ccus: b.ccus,
            counter_event: b.counter_event,
            counter_ulc: b.counter_ulc,
            counter_multibit: b.counter_multibit,
            partition_ccus,
        })
    }

    /// Total flat counters.
    pub fn counter_count(&self) -> usize {
        self.counter_event.len()
    }

    /// Number of SMs.
    pub fn sm_count(&self) -> u32 {
        self.spec.sms_per_gpc.iter().sum()
    }

    /// Flat counter ranges of partition slot `p`'s CCUs.
    pub fn partition_counter_ranges(
        &self,
        p: u32,
    ) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
        self.partition_ccus[p as usize].iter().map(|&c| {
            self.ccus[c as usize].counters.start as usize
                ..self.ccus[c as usize].counters.end as usize
        })
    }
}

fn owners(
    partitions: &[PartitionSpec],
    count: usize,
    what: &'static str,
    pick: impl Fn(&PartitionSpec) -> &Vec<u32>,
) -> Result<Vec<Option<u32>>, TopologyError> {
    let mut owner = vec![None; count];
    for p in partitions {
        if p.slot == 0 || p.slot >= MAX_PARTITION_SLOTS {
            return Err(TopologyError::BadSlot(p.slot));
        }
        for &i in pick(p) {
            let slot = owner.get_mut(i as usize).ok_or(TopologyError::NoSuchUnit {
                slot: p.slot,
                what,
                index: i,
            })?;
            if slot.replace(p.slot).is_some() {
                return Err(TopologyError::SharedOwnership { what, index: i });
            }
        }
    }
    Ok(owner)
}

#[derive(Default)]
struct Builder {
    ulcs: Vec<Ulc>,
    ccus: Vec<Ccu>,
    counter_event: Vec<u8>,
    counter_ulc: Vec<u32>,
    counter_multibit: Vec<bool>,
    sm_count: u32,
}

impl Builder {
    fn ccu(
        &mut self,
        group: u32,
        group_index: usize,
        owner: Option<u32>,
        units: impl Iterator<Item = (UnitType, u32)>,
    ) -> Result<(), TopologyError> {
        let ccu = u32::try_from(self.ccus.len()).unwrap_or(u32::MAX);
        let first_ulc = self.ulcs.len();
        let first_counter = self.counter_event.len();
        for (unit, instance) in units {
            let ulc = u32::try_from(self.ulcs.len()).unwrap_or(u32::MAX);
            let start = self.counter_event.len();
            for e in unit.events() {
                self.counter_event
                    .push(u8::try_from(e.id).unwrap_or(u8::MAX));
                self.counter_ulc.push(ulc);
                self.counter_multibit.push(e.multibit);
            }
            let counters = self.counter_event.len() - start;
            debug_assert!(counters <= MAX_ULC_COUNTERS);
            self.ulcs.push(Ulc {
                unit,
                instance,
                ccu,
                first_counter: to_u32(start),
                counters: to_u32(counters),
            });
        }
        let served = self.ulcs.len() - first_ulc;
        if served > MAX_CCU_ULCS {
            return Err(TopologyError::TooManyUlcs(served));
        }
        self.ccus.push(Ccu {
            group,
            group_index: to_u32(group_index),
            owner,
            ulcs: to_u32(first_ulc)..to_u32(self.ulcs.len()),
            counters: to_u32(first_counter)..to_u32(self.counter_event.len()),
        });
        Ok(())
    }
}

fn to_u32(v: usize) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(slot: u32, gpcs: &[u32], mem: &[u32]) -> PartitionSpec {
        PartitionSpec {
            slot,
            gpcs: gpcs.to_vec(),
            memory_slices: mem.to_vec(),
            ctx_timeslice_cycles: 0,
            vm_timeslice_cycles: 0,
            ri_version: 1,
            ri_max_rgs: gpupm_uapi::ri::RGS_MAX,
        }
    }

    #[test]
    fn h100_class_layout_has_132_sms_and_owned_ccus() {
        let t = Topology::build(
            &h100_class(),
            &[part(1, &[0, 1], &[0]), part(2, &[7], &[7])],
        )
        .unwrap();
        assert_eq!(t.sm_count(), 132);
        // 8 GPC + 8 memory + 1 system + 2 PCIe lanes.
        assert_eq!(t.ccus.len(), 19);
        assert_eq!(t.partition_ccus[1].len(), 4); // 2 GPCs, 1 slice, 1 lane
        assert_eq!(t.partition_ccus[0].len(), 1);
        assert!(t.ccus.iter().all(|c| c.ulcs.len() <= MAX_CCU_ULCS));
        let sm_counters = t
            .ulcs
            .iter()
            .filter(|u| u.unit == UnitType::Sm)
            .map(|u| u.counters)
            .sum::<u32>();
        assert_eq!(sm_counters as usize, 132 * UnitType::Sm.events().count());
        assert_eq!(t.counter_count(), t.counter_event.len());
    }

    #[test]
    fn overlapping_or_missing_ownership_is_rejected() {
        let err =
            Topology::build(&h100_class(), &[part(1, &[0], &[]), part(2, &[0], &[])]).unwrap_err();
        assert_eq!(
            err,
            TopologyError::SharedOwnership {
                what: "GPC",
                index: 0
            }
        );
        let err = Topology::build(&h100_class(), &[part(1, &[9], &[])]).unwrap_err();
        assert_eq!(
            err,
            TopologyError::NoSuchUnit {
                slot: 1,
                what: "GPC",
                index: 9
            }
        );
        let mut big = h100_class();
        big.sms_per_gpc = vec![49];
        assert_eq!(
            Topology::build(&big, &[]).unwrap_err(),
            TopologyError::TooManyUlcs(49)
        );
    }
}
