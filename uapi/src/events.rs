//! The event catalogue: stable ids, names and units per unit type.
//!
//! Event ids index the counter arrays of every memory block and stream
//! record, so an id is never reused or renumbered within an ABI major.
//! Every event belongs to exactly one unit type, which lets a reduction
//! channel aggregate records per event id without ambiguity.

/// Number of counter slots in a block or stream record. Ids `>= EVENT_COUNT`
/// are reserved and always read 0.
pub const MAX_EVENTS: usize = 64;

/// Most counters one ULC may have.
pub const MAX_ULC_COUNTERS: usize = 45;

/// Most ULCs one CCU may serve.
pub const MAX_CCU_ULCS: usize = 48;

/// Kinds of unit instance that carry a ULC.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UnitType {
    /// Streaming multiprocessor (owned by a partition through its GPC).
    Sm = 0,
    /// L2 cache slice (owned through its memory slice).
    L2Slice = 1,
    /// Frame-buffer partition (owned through its memory slice).
    FbPartition = 2,
    /// Copy engine (owned through its memory slice).
    CopyEngine = 3,
    /// PCIe interface, shared by all partitions, filtered per context.
    Pcie = 4,
    /// NVLink, shared by all partitions, device-level only.
    Nvlink = 5,
}

/// Where a unit type's counts are attributed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Units owned by one partition: counted into that partition's RC and RC0.
    Partition,
    /// Shared units whose traffic is filtered by the running context of each
    /// partition: one lane per partition, routed like owned units.
    ContextFiltered,
    /// Shared units counted into RC0 (the system block) only.
    Device,
}

/// The ABI numbers of [`Scope`] (`EventInfo::scope` of the tenant node,
/// `gpupm_event_scope[]` of the C header).
pub mod scope_code {
    /// Units a partition owns (SM, L2 slice, FB partition, copy engine):
    /// counted into the running context's block, its VM's block and the
    /// system block.
    pub const PARTITION: u8 = 0;
    /// Shared units filtered by each partition's running context (PCIe, one
    /// lane per partition): counted like `PARTITION`.
    pub const CONTEXT_FILTERED: u8 = 1;
    /// Device-level shared units (NVLink): counted into the system block
    /// only; VM and context blocks hold 0 for them.
    pub const DEVICE: u8 = 2;
}

impl Scope {
    /// The scope's number in the ABI ([`scope_code`]).
    pub const fn code(self) -> u8 {
        match self {
            Scope::Partition => scope_code::PARTITION,
            Scope::ContextFiltered => scope_code::CONTEXT_FILTERED,
            Scope::Device => scope_code::DEVICE,
        }
    }
}

impl UnitType {
    /// Every unit type, in id order.
    pub const ALL: [UnitType; 6] = [
        UnitType::Sm,
        UnitType::L2Slice,
        UnitType::FbPartition,
        UnitType::CopyEngine,
        UnitType::Pcie,
        UnitType::Nvlink,
    ];

    /// Attribution scope of this unit type.
    pub const fn scope(self) -> Scope {
        match self {
            UnitType::Pcie => Scope::ContextFiltered,
            UnitType::Nvlink => Scope::Device,
            _ => Scope::Partition,
        }
    }

    /// Short lower-case name.
    pub const fn name(self) -> &'static str {
        match self {
            UnitType::Sm => "sm",
            UnitType::L2Slice => "l2",
            UnitType::FbPartition => "fb",
            UnitType::CopyEngine => "ce",
            UnitType::Pcie => "pcie",
            UnitType::Nvlink => "nvlink",
        }
    }

    /// The events this unit type's ULC counts, in ULC counter order.
    pub fn events(self) -> impl Iterator<Item = &'static EventInfo> {
        CATALOGUE.iter().filter(move |e| e.unit == self)
    }
}

/// One catalogue entry.
#[derive(Clone, Copy, Debug)]
pub struct EventInfo {
    /// Stable id: index into block and record counter arrays.
    pub id: u16,
    /// Stable name used on command lines and in metrics.
    pub name: &'static str,
    /// Unit type whose ULC counts it.
    pub unit: UnitType,
    /// Multi-bit event: the per-cycle signal is 0..=32 and goes through the
    /// 6-bit accumulator, so one count stands for 32 signal units.
    pub multibit: bool,
    /// What one count measures.
    pub measure: &'static str,
    /// One-line description.
    pub description: &'static str,
}

macro_rules! catalogue {
    ($( $id:literal $name:literal $unit:ident $multi:literal $measure:literal $desc:literal; )*) => {
        /// The catalogue, indexed by event id.
        pub const CATALOGUE: &[EventInfo] = &[
            $( EventInfo { id: $id, name: $name, unit: UnitType::$unit, multibit: $multi,
                           measure: $measure, description: $desc }, )*
        ];
    };
}

catalogue! {
    0  "sm_cycles_elapsed"    Sm false "cycles"       "Cycles the SM was clocked while a context of its partition ran";
    1  "sm_cycles_active"     Sm false "cycles"       "Cycles with at least one warp resident";
    2  "sm_issue_active"      Sm false "cycles"       "Cycles in which an instruction was issued";
    3  "sm_inst_executed"     Sm false "warp-insts"   "Warp instructions executed";
    4  "sm_threads_active"    Sm true  "32 threads"   "Active threads per executed instruction, summed (multi-bit)";
    5  "sm_warps_active"      Sm true  "32 warps"     "Resident warps per cycle, summed (multi-bit)";
    6  "sm_warps_launched"    Sm false "warps"        "Warps launched";
    7  "sm_inst_fp32"         Sm false "warp-insts"   "FP32 warp instructions";
    8  "sm_inst_fp64"         Sm false "warp-insts"   "FP64 warp instructions";
    9  "sm_tensor_active"     Sm false "cycles"       "Cycles the tensor pipe was active";
    10 "sm_ld_global"         Sm false "requests"     "Global load requests";
    11 "sm_st_global"         Sm false "requests"     "Global store requests";
    12 "sm_ld_shared"         Sm false "requests"     "Shared-memory load requests";
    13 "sm_st_shared"         Sm false "requests"     "Shared-memory store requests";
    14 "sm_l1_hit"            Sm false "sectors"      "L1 sector hits";
    15 "sm_l1_miss"           Sm false "sectors"      "L1 sector misses";
    16 "sm_branch"            Sm false "warp-insts"   "Branch instructions";
    17 "sm_branch_divergent"  Sm false "warp-insts"   "Divergent branch instructions";
    18 "sm_stall_memory"      Sm false "cycles"       "Cycles the issue slot stalled on memory";
    19 "sm_stall_sync"        Sm false "cycles"       "Cycles the issue slot stalled on a barrier";
    20 "sm_atomic"            Sm false "requests"     "Atomic operations";
    21 "l2_read_req"          L2Slice false "requests" "L2 read requests";
    22 "l2_write_req"         L2Slice false "requests" "L2 write requests";
    23 "l2_hit"               L2Slice false "sectors"  "L2 sector hits";
    24 "l2_miss"              L2Slice false "sectors"  "L2 sector misses";
    25 "l2_cycles_active"     L2Slice false "cycles"   "Cycles the slice was busy";
    26 "l2_atomic"            L2Slice false "requests" "L2 atomic operations";
    27 "fb_read_sectors"      FbPartition false "sectors" "DRAM sectors read";
    28 "fb_write_sectors"     FbPartition false "sectors" "DRAM sectors written";
    29 "fb_cycles_active"     FbPartition false "cycles"  "Cycles the FB partition was busy";
    30 "fb_bytes"             FbPartition true  "32 bytes" "DRAM bytes moved (multi-bit)";
    31 "ce_cycles_active"     CopyEngine false "cycles"   "Cycles the copy engine was busy";
    32 "ce_bytes"             CopyEngine true  "32 bytes" "Bytes copied (multi-bit)";
    33 "pcie_rx_bytes"        Pcie true  "32 bytes"   "PCIe bytes received for the context (multi-bit)";
    34 "pcie_tx_bytes"        Pcie true  "32 bytes"   "PCIe bytes sent for the context (multi-bit)";
    35 "pcie_cycles_active"   Pcie false "cycles"     "Cycles the PCIe lane carried the context's traffic";
    36 "nvlink_rx_flits"      Nvlink false "flits"    "NVLink flits received";
    37 "nvlink_tx_flits"      Nvlink false "flits"    "NVLink flits sent";
    38 "nvlink_cycles_active" Nvlink false "cycles"   "Cycles the link was busy";
}

/// Number of defined events.
pub const EVENT_COUNT: usize = CATALOGUE.len();

const _: () = assert!(EVENT_COUNT <= MAX_EVENTS);
const _: () = {
    let mut i = 0;
    while i < CATALOGUE.len() {
        assert!(
            CATALOGUE[i].id as usize == i,
            "catalogue ids must equal their index"
        );
        i += 1;
    }
};

impl EventInfo {
    /// What one count is worth in [`EventInfo::unit_name`]: 32 for a
    /// multi-bit event (a `fb_bytes` count is 32 bytes), 1 otherwise.
    /// Tools and metrics show counts multiplied by it; the ABI's counter
    /// arrays hold the device's counts.
    pub const fn scale(&self) -> u64 {
        if self.multibit {
            MULTIBIT_SCALE
        } else {
            1
        }
    }

    /// The unit a count times [`EventInfo::scale`] is in: `measure`
    /// without its multiplier (`"32 bytes"` → `"bytes"`).
    pub fn unit_name(&self) -> &'static str {
        match self.measure.split_once(' ') {
            Some((n, unit)) if n.bytes().all(|b| b.is_ascii_digit()) => unit,
            _ => self.measure,
        }
    }
}

/// Looks an event up by id.
pub fn by_id(id: u16) -> Option<&'static EventInfo> {
    CATALOGUE.get(usize::from(id))
}

/// Looks an event up by its exact name.
pub fn by_name(name: &str) -> Option<&'static EventInfo> {
    CATALOGUE.iter().find(|e| e.name == name)
}

/// Divisor that turns one count of `event` into signal units (32 for
/// multi-bit): the value of the multi-bit accumulator's most significant
/// bit, which drives the count.
pub const MULTIBIT_SCALE: u64 = 32;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_ulcs_fit() {
        for (i, a) in CATALOGUE.iter().enumerate() {
            assert!(
                CATALOGUE[i + 1..].iter().all(|b| b.name != a.name),
                "{}",
                a.name
            );
        }
        for t in UnitType::ALL {
            let n = t.events().count();
            assert!((1..=MAX_ULC_COUNTERS).contains(&n), "{t:?} has {n} events");
        }
    }

    #[test]
    fn a_scaled_count_is_in_the_measures_unit() {
        for e in CATALOGUE {
            let want = if e.scale() == 1 {
                e.unit_name().to_string()
            } else {
                format!("{} {}", e.scale(), e.unit_name())
            };
            assert_eq!(e.measure, want, "{}", e.name);
            if e.name.ends_with("_bytes") {
                assert_eq!(e.unit_name(), "bytes", "{}", e.name);
            }
        }
        assert_eq!(by_name("fb_bytes").map(EventInfo::scale), Some(32));
    }

    #[test]
    fn lookup_round_trips() {
        for e in CATALOGUE {
            assert_eq!(by_name(e.name).map(|f| f.id), Some(e.id));
            assert_eq!(by_id(e.id).map(|f| f.name), Some(e.name));
        }
        assert!(by_name("no_such_event").is_none());
        assert!(by_id(u16::try_from(EVENT_COUNT).unwrap()).is_none());
    }
}
