//! Sizing the per-type sample buffers ahead: for each record type and
//! partition, records per sampling event × sampling events per drain
//! interval × record size, plus a margin, so that at the planned rates a
//! buffer drained once per interval cannot overflow.
//!
//! The daemon sizes the device's buffers with [`plan`]; `gpupm plan`
//! prints the same numbers for a scenario. The bounds are the device's
//! own (`gpupm_uapi::sampling::{pc_records_per_drain,
//! branch_records_per_drain, planned_capacity}`):
//! * cycle samples: one record per sampling event, events at least
//!   P + S − A cycles apart (the dither R only lengthens a period);
//! * branch stacks: one record per N taken branches, taken branches at
//!   least `min_branch_gap` cycles apart;
//!
//! each plus one for an event straddling the interval's start, then the
//! margin, rounded up to the power of two the device's `BUF_CAP` takes,
//! and clamped to what the partition's sample span holds (reported).

use gpupm_uapi::sampling::{
    branch_records_per_drain, buf_kind, pc_records_per_drain, planned_capacity, slot_size,
    BUF_ALIGN, SAMPLE_SPAN,
};

/// Default drain interval of the daemon's sample buffers, in ms.
pub const DEFAULT_DRAIN_MS: u64 = 5;
/// Default margin over the computed bound, in percent.
pub const DEFAULT_MARGIN_PCT: u32 = 25;

/// Which buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordType {
    /// Branch-stack records.
    BranchStack,
    /// Cycle (PC) samples.
    Cycle,
}

impl RecordType {
    /// Name as `gpupm plan` prints it.
    pub fn name(self) -> &'static str {
        match self {
            RecordType::BranchStack => "branch_stack",
            RecordType::Cycle => "cycle",
        }
    }

    fn buf_kind(self) -> u32 {
        match self {
            RecordType::BranchStack => buf_kind::BRANCH,
            RecordType::Cycle => buf_kind::PC,
        }
    }
}

/// What a partition's samplers are programmed to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SamplerSettings {
    /// Partition slot.
    pub partition: u32,
    /// Nominal clock in kHz (cycles per ms).
    pub clock_khz: u32,
    /// P of the cycle sampler, `None` when off.
    pub cycle_period: Option<u32>,
    /// N of the branch sampler, `None` when off.
    pub branch_every: Option<u32>,
    /// Fewest cycles between two taken branches of the partition's programs.
    pub min_branch_gap: u64,
}

/// The sizing of one buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct BufferPlan {
    /// Partition slot.
    pub partition: u32,
    /// Which buffer.
    pub record_type: RecordType,
    /// Records one sampling event produces.
    pub records_per_event: u64,
    /// Most sampling events in one drain interval (phase included).
    pub events_per_interval: u64,
    /// Bytes of one record slot in the buffer.
    pub record_size: u64,
    /// Margin added, in percent.
    pub margin_pct: u32,
    /// Capacity in records (a power of two).
    pub records: u64,
    /// Capacity in bytes.
    pub bytes: u64,
    /// The plan wanted more than the sample span holds; `records` is what fits.
    pub clamped: bool,
}

/// The plan for one partition's samplers drained every `drain_us`
/// microseconds; buffers of samplers that are off are not listed.
pub fn plan(s: &SamplerSettings, drain_us: u64, margin_pct: u32) -> Vec<BufferPlan> {
    let cycles = u64::from(s.clock_khz).saturating_mul(drain_us) / 1000;
    let mut out = Vec::new();
    if let Some(n) = s.branch_every {
        let events = branch_records_per_drain(cycles, n, s.min_branch_gap);
        out.push(sized(
            s.partition,
            RecordType::BranchStack,
            events,
            margin_pct,
        ));
    }
    if let Some(p) = s.cycle_period {
        let events = pc_records_per_drain(cycles, p);
        out.push(sized(s.partition, RecordType::Cycle, events, margin_pct));
    }
    clamp_to_span(&mut out);
    out
}

fn sized(partition: u32, record_type: RecordType, events: u64, margin_pct: u32) -> BufferPlan {
    let record_size = slot_size(record_type.buf_kind());
    let records = planned_capacity(events, u64::from(margin_pct));
    BufferPlan {
        partition,
        record_type,
        records_per_event: 1,
        events_per_interval: events,
        record_size,
        margin_pct,
        records,
        bytes: records.saturating_mul(record_size),
        clamped: false,
    }
}

/// Halves the largest buffer until all fit the partition's sample span
/// (each aligned to `BUF_ALIGN`).
fn clamp_to_span(bufs: &mut [BufferPlan]) {
    let used = |bufs: &[BufferPlan]| -> u64 {
        bufs.iter()
            .map(|b| b.bytes.next_multiple_of(BUF_ALIGN))
            .sum()
    };
    while used(bufs) > SAMPLE_SPAN {
        let Some(big) = bufs.iter_mut().max_by_key(|b| b.bytes) else {
            return;
        };
        big.records /= 2;
        big.bytes = big.records * big.record_size;
        big.clamped = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpupm_uapi::sampling::{REFILL_CYCLES, SKID_CYCLES};

    fn settings(period: Option<u32>, every: Option<u32>) -> SamplerSettings {
        SamplerSettings {
            partition: 2,
            clock_khz: 2_000_000,
            cycle_period: period,
            branch_every: every,
            min_branch_gap: 16,
        }
    }

    #[test]
    fn cycle_buffer_holds_one_interval_of_the_shortest_periods() {
        let p = plan(&settings(Some(4000), None), 1000, 25);
        assert_eq!(p.len(), 1);
        let min_period = 4000 + u64::from(SKID_CYCLES) - u64::from(REFILL_CYCLES);
        let events = 2_000_000 / min_period + 1;
        assert_eq!(p[0].events_per_interval, events);
        assert!(p[0].records >= events + events / 4 && p[0].records.is_power_of_two());
        assert_eq!(p[0].bytes, p[0].records * 96);
        assert!(!p[0].clamped);
    }

    #[test]
    fn branch_buffer_shrinks_with_n_and_everything_fits_the_span() {
        let a = plan(&settings(None, Some(64)), 1000, 0);
        let b = plan(&settings(None, Some(128)), 1000, 0);
        assert!(a[0].events_per_interval > b[0].events_per_interval);
        let huge = plan(&settings(Some(256), Some(1)), 100_000, 25);
        assert!(huge.iter().any(|b| b.clamped));
        let bytes: u64 = huge
            .iter()
            .map(|b| b.bytes.next_multiple_of(BUF_ALIGN))
            .sum();
        assert!(bytes <= SAMPLE_SPAN);
    }
}
