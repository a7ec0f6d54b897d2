//! The CCU register block: identity of each CCU, its bank, its record
//! count, and the counter mask written a 32-bit word at a time.

use gpupm_uapi::regs::{self as r};

use super::bank::Counting;
use crate::model::access::{count32, r32, r64, RegValue, Reject};
use crate::model::topology::Topology;

/// A checked write to a CCU register.
#[derive(Clone, Copy, Debug)]
pub enum CcuWrite {
    /// `CCU_MASK_INDEX`.
    MaskIndex(u32),
    /// `CCU_MASK_DATA`: the mask word at the current index.
    MaskData(u32),
}

impl Counting {
    /// Reads register `offset` of CCU `c` (none for a CCU that does not exist).
    pub fn read_ccu(&self, topo: &Topology, c: u32, offset: u64) -> Option<RegValue> {
        let ccu = topo.ccus.get(c as usize)?;
        let index = self.mask_index[c as usize];
        match offset {
            r::CCU_OWNER => r32(ccu.owner.unwrap_or(u32::MAX)),
            r::CCU_ULCS => count32(ccu.ulcs.len()),
            r::CCU_COUNTERS => count32(ccu.counters.len()),
            r::CCU_ACTIVE_BANK => r32(u32::from(self.active_bank[c as usize])),
            r::CCU_MASK_INDEX => r32(index),
            r::CCU_MASK_DATA => r32(self.mask_word(topo, c, index)),
            r::CCU_RECORDS => r64(self.records[c as usize]),
            r::CCU_GROUP => r32(ccu.group),
            r::CCU_GROUP_INDEX => r32(ccu.group_index),
            _ => None,
        }
    }

    fn mask_word(&self, topo: &Topology, c: u32, index: u32) -> u32 {
        let range = topo.ccus[c as usize].counters.clone();
        let first = range.start as usize + index as usize * 32;
        (0..32usize)
            .filter(|&b| first + b < range.end as usize && self.masked[first + b])
            .fold(0, |w, b| w | 1 << b)
    }

    /// The mask indices every batch starts from (index = CCU).
    pub fn mask_index_shadow(&self) -> [u32; r::MAX_CCUS as usize] {
        let mut out = [0; r::MAX_CCUS as usize];
        out[..self.mask_index.len()].copy_from_slice(&self.mask_index);
        out
    }

    /// Checks a write of `v` to register `offset` of CCU `c`; `index` is the
    /// batch's view of the CCU's mask index (advanced past an index write).
    pub fn check_ccu_write(
        topo: &Topology,
        c: u32,
        offset: u64,
        v: u32,
        index: &mut u32,
    ) -> Result<CcuWrite, Reject> {
        let counters = topo.ccus[c as usize].counters.len();
        let n = u32::try_from(counters).unwrap_or(u32::MAX);
        match offset {
            r::CCU_MASK_INDEX if v < n.div_ceil(32) => {
                *index = v;
                Ok(CcuWrite::MaskIndex(v))
            }
            r::CCU_MASK_INDEX => Err(Reject::BadValue(
                "mask word index beyond the CCU's counters",
            )),
            r::CCU_MASK_DATA => {
                let valid = (n - *index * 32).min(32);
                let allowed = if valid == 32 {
                    u32::MAX
                } else {
                    (1u32 << valid) - 1
                };
                if v & !allowed != 0 {
                    return Err(Reject::BadValue("mask bits beyond the CCU's counters"));
                }
                Ok(CcuWrite::MaskData(v))
            }
            _ => Err(Reject::ReadOnly),
        }
    }

    /// Executes a checked write to CCU `c` (the owning partition must be
    /// synced first: masks change what counts from now on).
    pub fn apply_ccu_write(&mut self, topo: &Topology, c: u32, w: CcuWrite) {
        match w {
            CcuWrite::MaskIndex(index) => self.mask_index[c as usize] = index,
            CcuWrite::MaskData(word) => {
                let ccu = &topo.ccus[c as usize];
                let first = ccu.counters.start as usize + self.mask_index[c as usize] as usize * 32;
                for b in 0..32usize {
                    if first + b < ccu.counters.end as usize {
                        self.masked[first + b] = word & (1 << b) != 0;
                    }
                }
            }
        }
    }
}
