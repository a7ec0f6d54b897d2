//! The CCU array.

use crate::regdef::register_block;

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

register_block! {
    /// One CCU's registers: owner, size, banks, mask, records.
    pub const CCU_REGS = Ccu "CCU" in "regs",
        array CCU_BASE, stride CCU_STRIDE, count MAX_CCUS;
    registers {
        /// partition slot owning this CCU (0 = system).
        CCU_OWNER = 0x00, ro;
        /// number of ULCs served.
        CCU_ULCS = 0x04, ro;
        /// number of counters (sum of the ULCs' counters).
        CCU_COUNTERS = 0x08, ro;
        /// index of the active bank (0 or 1).
        CCU_ACTIVE_BANK = 0x0C, ro;
        /// index of the 32-bit mask word that `CCU_MASK_DATA` accesses.
        CCU_MASK_INDEX = 0x10, rw;
        /// mask word: bit i masks counter `32 * index + i` (1 = masked).
        CCU_MASK_DATA = 0x14, rw;
        /// records emitted.
        CCU_RECORDS = 0x18, ro64;
        /// unit group kind, see [`ccu_group`].
        CCU_GROUP = 0x20, ro;
        /// unit group index within its kind.
        CCU_GROUP_INDEX = 0x24, ro;
    }
}

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
