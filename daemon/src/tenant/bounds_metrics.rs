//! The `gpupm_bound_*` metric families: what tenants hold against each
//! `[limits]` bound, the bounds themselves, and what was refused
//! (docs/isolation.md). No family carries a tenant's uid or VM: the
//! largest use of one uid is exported, not whose it is.

use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

use crate::view::BoundsSnapshot;

/// Encodes `b`.
pub fn encode(b: &BoundsSnapshot, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    let l = &b.limits;
    let mut m = encoder.encode_descriptor(
        "gpupm_bound_use",
        "What tenants hold now, by resource, against the [limits] bounds.",
        None,
        MetricType::Gauge,
    )?;
    for (resource, v) in [
        ("handles", b.handles),
        ("stream_sessions", b.stream_sessions),
        ("sampling_sessions", b.sampling_sessions),
        ("ri_sessions", b.ri_sessions),
        ("parked_reads", b.parked_reads),
        ("queued_bytes", b.queued_bytes),
        ("page_connections", b.page_connections),
    ] {
        m.encode_family(&[("resource", resource)])?
            .encode_gauge(&v)?;
    }
    let mut m = encoder.encode_descriptor(
        "gpupm_bound_max_use",
        "The most of a resource one holder (a uid, or for queued_bytes_share the callers of one VM or the admin) holds now.",
        None,
        MetricType::Gauge,
    )?;
    for (resource, v) in [
        ("handles", b.max_uid_handles),
        ("parked_reads", b.max_uid_parked_reads),
        ("queued_bytes", b.max_uid_queued_bytes),
        ("queued_bytes_share", b.max_share_queued_bytes),
    ] {
        m.encode_family(&[("resource", resource)])?
            .encode_gauge(&v)?;
    }
    let mut m = encoder.encode_descriptor(
        "gpupm_bound_limit",
        "The [limits] bounds in force: per holder (scope=\"each\") and for everyone (scope=\"total\").",
        None,
        MetricType::Gauge,
    )?;
    for (resource, scope, v) in [
        ("handles", "each", l.handles_per_uid),
        ("handles", "total", l.handles_total),
        ("stream_sessions", "each", l.stream_sessions_per_uid),
        ("sampling_sessions", "each", l.sampling_sessions_per_uid),
        ("ri_sessions", "each", l.ri_sessions_per_uid),
        ("sessions", "total", l.sessions_total),
        ("ranges", "each", l.ranges_per_vm),
        ("parked_reads", "each", l.parked_reads_per_uid),
        ("parked_reads", "total", l.parked_reads_total),
        ("queued_bytes", "each", l.queued_bytes_per_uid()),
        ("queued_bytes_share", "each", b.share_bytes),
        ("queued_bytes", "total", l.queued_bytes_total()),
        ("page_connections", "each", l.page_connections_per_tenant),
        ("page_connections", "total", l.page_connections_total),
        ("device_reads_per_second", "each", l.device_reads_per_s),
        ("sample_period_min", "each", l.tenant_min_sample_period),
        ("branch_every_min", "each", l.tenant_min_branch_every),
    ] {
        m.encode_family(&[("resource", resource), ("scope", scope)])?
            .encode_gauge(&v)?;
    }
    let mut m = encoder.encode_descriptor(
        "gpupm_bound_refusals",
        "Requests refused at a [limits] bound, by what they asked for.",
        None,
        MetricType::Counter,
    )?;
    for (resource, v) in [
        ("handles", b.refused_handles),
        ("sessions", b.refused_sessions),
        ("queued_bytes", b.refused_queued),
        ("parked_reads", b.refused_parked_reads),
        ("device_reads", b.refused_device_reads),
        ("page_connections", b.refused_page_connections),
    ] {
        m.encode_family(&[("resource", resource)])?
            .encode_counter::<NoLabelSet, _, u64>(&v, None)?;
    }
    Ok(())
}
