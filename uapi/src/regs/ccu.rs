//! The CCU array.

// ---------------------------------------------------------------------------
// CCUs (0x3000..0x4000)
// ---------------------------------------------------------------------------

/// Base of the CCU block array.
pub const CCU_BASE: u64 = 0x3000;
/// Stride between CCU blocks.
pub const CCU_STRIDE: u64 = 0x40;
/// Maximum CCUs.
pub const MAX_CCUS: u32 = 64;

/// Offset of register `reg` of CCU `c`.
pub const fn ccu(c: u32, reg: u64) -> u64 {
    CCU_BASE + c as u64 * CCU_STRIDE + reg
}

/// RO: partition slot owning this CCU (0 = system).
pub const CCU_OWNER: u64 = 0x00;
/// RO: number of ULCs served.
pub const CCU_ULCS: u64 = 0x04;
/// RO: number of counters (sum of the ULCs' counters).
pub const CCU_COUNTERS: u64 = 0x08;
/// RO: index of the active bank (0 or 1).
pub const CCU_ACTIVE_BANK: u64 = 0x0C;
/// RW: index of the 32-bit mask word that `CCU_MASK_DATA` accesses.
pub const CCU_MASK_INDEX: u64 = 0x10;
/// RW: mask word: bit i masks counter `32 * index + i` (1 = masked).
pub const CCU_MASK_DATA: u64 = 0x14;
/// RO 64-bit: records emitted.
pub const CCU_RECORDS: u64 = 0x18;
/// RO: unit group kind, see [`ccu_group`].
pub const CCU_GROUP: u64 = 0x20;
/// RO: unit group index within its kind.
pub const CCU_GROUP_INDEX: u64 = 0x24;

/// Values of [`CCU_GROUP`].
pub mod ccu_group {
    /// One GPC's SMs.
    pub const GPC: u32 = 0;
    /// One memory slice: L2 slices, FB partitions and copy engines.
    pub const MEMORY_SLICE: u32 = 1;
    /// Device-level shared units (NVLink), counted into RC0 only.
    pub const SYSTEM: u32 = 2;
    /// A partition's lane of the context-filtered shared units (PCIe).
    pub const SHARED_LANE: u32 = 3;
}
