//! CCU records: a triggered CCU turns its idle bank into records of eight
//! counter values for the reduction-channel buffer; a flush request makes
//! it send one record with no valid data, the flush ack.

use gpupm_uapi::events::{MAX_CCU_ULCS, MAX_ULC_COUNTERS};
use gpupm_uapi::layout::{ccu_record_flags, CcuRecord, RECORD_VALUES};
use gpupm_uapi::regs::{flush_ack_latency, MAX_CCUS};

use super::bank::Counting;
use crate::model::topology::Topology;

// Every record field below is a CCU index or a counter index within one
// CCU; both bounds fit the 16-bit fields.
const _: () = assert!(MAX_CCUS as usize <= 1 << 16);
const _: () = assert!(MAX_CCU_ULCS * MAX_ULC_COUNTERS <= 1 << 16);

/// A CCU index or a counter index within a CCU as a 16-bit record field
/// (bounded by the asserts above).
fn field16(v: usize) -> u16 {
    u16::try_from(v).unwrap_or(u16::MAX)
}

impl Counting {
    /// Swaps CCU `c`'s banks and hands the now-idle bank to `route` as
    /// records of eight values, clearing it.
    pub fn emit_records(&mut self, topo: &Topology, c: u32, mut route: impl FnMut(&CcuRecord)) {
        let ccu = &topo.ccus[c as usize];
        let old = usize::from(self.active_bank[c as usize]);
        self.active_bank[c as usize] ^= 1;
        let (start, end) = (ccu.counters.start as usize, ccu.counters.end as usize);
        let mut records = 0;
        for first in (start..end).step_by(RECORD_VALUES) {
            let mut rec = CcuRecord {
                ccu: field16(c as usize),
                first_counter: field16(first - start),
                valid: field16((end - first).min(RECORD_VALUES)),
                ..CcuRecord::default()
            };
            for (k, v) in rec.values[..usize::from(rec.valid)].iter_mut().enumerate() {
                *v = std::mem::take(&mut self.bank[first + k][old]);
            }
            route(&rec);
            records += 1;
        }
        self.records[c as usize] += records;
    }

    /// Counts the records a fused trigger of partition `p`'s CCUs emitted
    /// (their values went straight to the RCs); returns how many.
    pub fn count_fused_records(&mut self, topo: &Topology, p: u32) -> u64 {
        let mut total = 0;
        for &c in &topo.partition_ccus[p as usize] {
            let records = topo.ccus[c as usize].counters.len().div_ceil(RECORD_VALUES);
            let records = u64::try_from(records).unwrap_or(u64::MAX);
            self.records[c as usize] += records;
            total += records;
        }
        total
    }

    /// When partition `p`'s CCUs' flush acks arrive after a flush request
    /// at `now`: (cycle, CCU mask) in cycle order. Each CCU first sends the
    /// records it still holds, one per cycle, then its ack.
    pub fn flush_ack_schedule(topo: &Topology, p: u32, now: u64) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        for &c in &topo.partition_ccus[p as usize] {
            let counters = topo.ccus[c as usize].counters.len();
            let latency = flush_ack_latency(u32::try_from(counters).unwrap_or(u32::MAX));
            let due = now + u64::from(latency);
            match out.iter_mut().find(|(at, _)| *at == due) {
                Some((_, mask)) => *mask |= 1 << c,
                None => out.push((due, 1 << c)),
            }
        }
        out.sort_unstable();
        out
    }
}

/// The empty record with which CCU `c` acknowledges a flush request.
pub fn flush_ack(c: u32) -> CcuRecord {
    CcuRecord {
        ccu: field16(c as usize),
        flags: ccu_record_flags::FLUSH_ACK,
        ..CcuRecord::default()
    }
}
