//! The `gpupm_ri_*` metric families.

use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

use super::RiCounts;

/// Encodes the RI unit's counters.
pub fn encode(c: &RiCounts, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    encoder
        .encode_descriptor(
            "gpupm_ri_sessions",
            "Runtime-instrumentation sessions open (one device control block each).",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&c.sessions)?;
    for (name, help, v) in [
        (
            "gpupm_ri_groups",
            "Report groups drained from program buffers into RI sessions.",
            c.groups,
        ),
        (
            "gpupm_ri_records",
            "Records (16 bytes each) in the report groups drained.",
            c.records,
        ),
        (
            "gpupm_ri_lost_groups",
            "Report groups lost: overwritten in a program buffer before a drain, or dropped by a full session queue.",
            c.lost,
        ),
        ("gpupm_ri_halts", "RI sessions halted by a migration.", c.halts),
    ] {
        encoder
            .encode_descriptor(name, help, None, MetricType::Counter)?
            .encode_counter::<NoLabelSet, _, u64>(&v, None)?;
    }
    Ok(())
}
