//! One scrape: what the view and the health source say now, gathered into
//! plain data and encoded as metric families by a `prometheus-client`
//! [`Collector`].
//!
//! # Families
//! | name | type | labels | served |
//! |---|---|---|---|
//! | `gpupm_device_events_total` | counter | `event` (every catalogue event; the system block) | always |
//! | `gpupm_vm_events_total` | counter | `vm`, `event` (events not of device-only units) | tenant series only |
//! | `gpupm_context_events_total` | counter | `vm`, `ctx`, `created_cycle`, `event` (bounded, see [`super::contexts`]) | tenant series only |
//! | `gpupm_vm_confidential` | gauge | `vm` (1: confidential, nothing per event is exported) | tenant series only |
//! | `gpupm_handshake_duration_seconds` | histogram | | always |
//! | `gpupm_handshakes_total`, `gpupm_handshake_fallbacks_total` | counter | | always |
//! | `gpupm_stream_lost_records_total`, `gpupm_stream_drained_records_total` | counter | | always |
//! | `gpupm_stream_mirrored_records_total`, `gpupm_stream_mirror_fallbacks_total` | counter | | always |
//! | `gpupm_stream_drain_lag_records` | gauge | | always |
//! | `gpupm_handshake_response_max_seconds` | gauge | | always |
//! | `gpupm_device_lag_seconds_total` | counter | | always |
//! | `gpupm_tenant_requests_total`, `gpupm_tenant_request_errors_total` | counter | | always |
//! | `gpupm_contexts_active` | gauge | | always |
//! | `gpupm_contexts_retired_total`, `gpupm_contexts_pruned_total` | counter | | always |
//! | `gpupm_contexts_retained` | gauge | | always |
//! | `gpupm_uptime_seconds` | gauge | | always |
//! | `gpupm_pages` | gauge | `kind` (`vm`, `context`): tenant pages published | always |
//! | `gpupm_page_updates_total`, `gpupm_page_refreshes_total` | counter | | always |
//! | `gpupm_page_requests_total`, `gpupm_page_request_errors_total` | counter | | always |
//! | `gpupm_range_records_total`, `gpupm_range_lost_total`, `gpupm_range_sealed_total`, `gpupm_range_unclaimed_total`, `gpupm_range_malformed_total`, `gpupm_callgraph_records_total` | counter | | always |
//! | `gpupm_range_ranges`, `gpupm_range_registers`, `gpupm_callgraph_graphs` | gauge | | always |
//! | `gpupm_metrics_*` | see [`super::stats`] | `listener` | always |
//!
//! "Tenant series only": on a listener with `tenant_series = true`, which
//! the web configuration must authenticate; every other family describes
//! the device or the daemon, never one tenant.
//!
//! Event values are in the events' units (`gpupm events`): a multi-bit
//! event's device count times its scale, so `*_bytes` series are bytes.
//!
//! The event counters only go up while the device runs (see
//! [`super::contexts`]); the daemon's own work counters
//! (`gpupm_handshakes_total` … `gpupm_metrics_*`) count since the daemon
//! started and restart from zero with it, as every exporter's process
//! counters do (`gpupm_uptime_seconds` falls at the same scrape).

use gpupm_uapi::events::{Scope as EventScope, CATALOGUE};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

use super::contexts::{read_vm, Counters, InstanceSeries, OtherFloor};
use super::stats::ListenerCounts;
use crate::view::{CounterView, HealthSnapshot, Scope, Totals, VmId};

/// Label value of the cumulative context series.
pub const OTHER_CTX: &str = "other";

/// Which families a listener serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Series {
    /// Device and daemon health: nothing of any one tenant.
    Health,
    /// Also the per-VM and per-context families.
    Tenants,
}

/// Everything one scrape exports.
#[derive(Debug)]
pub struct ScrapeData {
    /// Which families are encoded.
    pub series: Series,
    /// System block totals (None when the view has none).
    pub device: Option<Counters>,
    /// Per VM, ascending ids (empty for [`Series::Health`]).
    pub vms: Vec<VmData>,
    /// Daemon self-metrics (latency samples already in `handshakes`).
    pub health: HealthSnapshot,
    /// Cumulative handshake latency histogram.
    pub handshakes: Histogram,
    /// The metrics listeners' own counts.
    pub listeners: Vec<ListenerCounts>,
}

/// One VM of a scrape.
#[derive(Debug)]
pub struct VmData {
    /// The VM.
    pub vm: VmId,
    /// Confidential: only ciphertext; nothing per event is exported.
    pub confidential: bool,
    /// VM block totals (None when confidential).
    pub totals: Option<Counters>,
    /// Exported instances, newest first.
    pub instances: Vec<InstanceSeries>,
    /// The cumulative `other` series (None when confidential).
    pub other: Option<Counters>,
}

/// Reads the view now. `max_ctx` bounds the individual context series per
/// VM; `floor` keeps every VM's `other` from stepping back.
pub fn gather(
    view: &dyn CounterView,
    series: Series,
    max_ctx: usize,
    floor: &mut OtherFloor,
    health: HealthSnapshot,
    handshakes: Histogram,
    listeners: Vec<ListenerCounts>,
) -> ScrapeData {
    let device = plain(view.totals(Scope::System));
    let vms = match series {
        Series::Health => Vec::new(),
        Series::Tenants => gather_vms(view, max_ctx, floor),
    };
    ScrapeData {
        series,
        device,
        vms,
        health,
        handshakes,
        listeners,
    }
}

fn gather_vms(view: &dyn CounterView, max_ctx: usize, floor: &mut OtherFloor) -> Vec<VmData> {
    let mut vm_ids = view.vms();
    vm_ids.sort_unstable();
    vm_ids.dedup();
    floor.retain(&vm_ids);
    vm_ids
        .into_iter()
        .filter_map(|vm| match view.totals(Scope::Vm(vm))? {
            Totals::Sealed(_) => Some(VmData {
                vm,
                confidential: true,
                totals: None,
                instances: Vec::new(),
                other: None,
            }),
            Totals::Plain { .. } => {
                let mut read = read_vm(view, vm, max_ctx)?;
                floor.apply(vm, &mut read.other);
                Some(VmData {
                    vm,
                    confidential: false,
                    totals: Some(read.totals),
                    instances: read.instances,
                    other: Some(read.other),
                })
            }
        })
        .collect()
}

fn plain(t: Option<Totals>) -> Option<Counters> {
    match t? {
        Totals::Plain { counters, .. } => Some(counters),
        Totals::Sealed(_) => None,
    }
}

/// Events a VM or context block can count (device-only units never are).
fn partition_events() -> impl Iterator<Item = &'static gpupm_uapi::events::EventInfo> {
    CATALOGUE
        .iter()
        .filter(|e| e.unit.scope() != EventScope::Device)
}

/// Event `id` of `c` in the event's unit: a multi-bit count times its
/// scale (a `fb_bytes` count is 32 bytes), as `gpupm stat` shows it.
fn value(c: &Counters, id: u16) -> u64 {
    let scale = gpupm_uapi::events::by_id(id).map_or(1, |e| e.scale());
    c.get(usize::from(id))
        .copied()
        .unwrap_or(0)
        .wrapping_mul(scale)
}

impl Collector for ScrapeData {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        self.encode_device(&mut encoder)?;
        if self.series == Series::Tenants {
            self.encode_tenants(&mut encoder)?;
        }
        self.encode_health(&mut encoder)?;
        super::stats::encode(&self.listeners, &mut encoder)
    }
}

impl ScrapeData {
    /// The system block's family.
    fn encode_device(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut m = encoder.encode_descriptor(
            "gpupm_device_events",
            "Events counted device-wide (system block, every partition and device-level units).",
            None,
            MetricType::Counter,
        )?;
        if let Some(dev) = &self.device {
            for e in CATALOGUE {
                let labels = [("event", e.name)];
                m.encode_family(&labels)?
                    .encode_counter::<NoLabelSet, _, u64>(&value(dev, e.id), None)?;
            }
        }
        Ok(())
    }

    /// The per-VM and per-context families (tenant series only).
    fn encode_tenants(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut m = encoder.encode_descriptor(
            "gpupm_vm_events",
            "Events counted for a VM (every context it ran).",
            None,
            MetricType::Counter,
        )?;
        for vm in &self.vms {
            let Some(totals) = &vm.totals else { continue };
            let vm_label = vm.vm.to_string();
            for e in partition_events() {
                let labels = [("vm", vm_label.as_str()), ("event", e.name)];
                m.encode_family(&labels)?
                    .encode_counter::<NoLabelSet, _, u64>(&value(totals, e.id), None)?;
            }
        }

        let mut m = encoder.encode_descriptor(
            "gpupm_context_events",
            "Events counted for a context instance (ctx, created_cycle); per VM the newest instances individually, everything else the VM counted in ctx=\"other\".",
            None,
            MetricType::Counter,
        )?;
        for vm in &self.vms {
            let vm_label = vm.vm.to_string();
            for i in &vm.instances {
                let (ctx, created) = (i.ctx.to_string(), i.created_cycle.to_string());
                for e in partition_events() {
                    let labels = [
                        ("vm", vm_label.as_str()),
                        ("ctx", ctx.as_str()),
                        ("created_cycle", created.as_str()),
                        ("event", e.name),
                    ];
                    m.encode_family(&labels)?
                        .encode_counter::<NoLabelSet, _, u64>(&value(&i.counters, e.id), None)?;
                }
            }
            let Some(other) = &vm.other else { continue };
            for e in partition_events() {
                let labels = [
                    ("vm", vm_label.as_str()),
                    ("ctx", OTHER_CTX),
                    ("event", e.name),
                ];
                m.encode_family(&labels)?
                    .encode_counter::<NoLabelSet, _, u64>(&value(other, e.id), None)?;
            }
        }

        let mut m = encoder.encode_descriptor(
            "gpupm_vm_confidential",
            "1 for a confidential VM (its counters are sealed and not exported), 0 otherwise.",
            None,
            MetricType::Gauge,
        )?;
        for vm in &self.vms {
            let labels = [("vm", vm.vm.to_string())];
            m.encode_family(&labels)?
                .encode_gauge(&u64::from(vm.confidential))?;
        }
        Ok(())
    }

    fn encode_health(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let h = &self.health;
        let m = encoder.encode_descriptor(
            "gpupm_handshake_duration",
            "Context-switch handshake latency, switch request read to unpause written.",
            Some(&Unit::Seconds),
            self.handshakes.metric_type(),
        )?;
        self.handshakes.encode(m)?;
        let counters = health_counters(h);
        for (name, help, v) in counters {
            encoder
                .encode_descriptor(name, help, None, MetricType::Counter)?
                .encode_counter::<NoLabelSet, _, u64>(&v, None)?;
        }
        encoder
            .encode_descriptor(
                "gpupm_stream_drain_lag_records",
                "Largest stream ring fill seen at drain time since the previous scrape.",
                None,
                MetricType::Gauge,
            )?
            .encode_gauge(&h.drain_lag_records)?;
        #[allow(clippy::cast_precision_loss)] // ns far below 2^52
        let response_max_s = h.handshake_response_max_ns as f64 / 1e9;
        encoder
            .encode_descriptor(
                "gpupm_handshake_response_max_seconds",
                "Longest device time from a switch request to the host's pause since the previous scrape (the margin to the device's fallback timeout).",
                None,
                MetricType::Gauge,
            )?
            .encode_gauge(&response_max_s)?;
        let khz = f64::from(h.device.clock_khz.max(1));
        #[allow(clippy::cast_precision_loss)] // cycles far below 2^52
        let lag_s = h.clock_lag_cycles as f64 / (khz * 1e3);
        encoder
            .encode_descriptor(
                "gpupm_device_lag",
                "Device time the device's real-time clock dropped (it ran slower than the wall clock), from CLOCK_LAG at the nominal clock.",
                Some(&Unit::Seconds),
                MetricType::Counter,
            )?
            .encode_counter::<NoLabelSet, _, f64>(&lag_s, None)?;
        encoder
            .encode_descriptor(
                "gpupm_contexts_active",
                "Contexts active on the device.",
                None,
                MetricType::Gauge,
            )?
            .encode_gauge(&h.contexts_active)?;
        encoder
            .encode_descriptor(
                "gpupm_contexts_retained",
                "Retired contexts kept (readable through the tenant node).",
                None,
                MetricType::Gauge,
            )?
            .encode_gauge(&h.contexts_retained)?;
        let mut m = encoder.encode_descriptor(
            "gpupm_pages",
            "Tenant counter pages published (at most one per VM and per live context).",
            None,
            MetricType::Gauge,
        )?;
        for (kind, n) in [("vm", h.pages.vm_pages), ("context", h.pages.ctx_pages)] {
            m.encode_family(&[("kind", kind)])?.encode_gauge(&n)?;
        }
        crate::ri::metrics::encode(&h.ri, encoder)?;
        crate::tenant::bounds_metrics::encode(&h.bounds, encoder)?;
        encoder
            .encode_descriptor(
                "gpupm_uptime",
                "Seconds since the daemon started.",
                Some(&Unit::Seconds),
                MetricType::Gauge,
            )?
            .encode_gauge(&h.uptime_s)?;
        encode_ranges(encoder, &h.ranges)
    }
}

/// The range plane's families (`gpupm_range_*`, `gpupm_callgraph_*`).
fn encode_ranges(
    encoder: &mut DescriptorEncoder,
    r: &crate::ranges::RangeMetrics,
) -> Result<(), std::fmt::Error> {
    let counters = [
        (
            "gpupm_range_records",
            "Range crossing records drained.",
            r.records,
        ),
        (
            "gpupm_range_lost",
            "Range crossing records the device rings lost (sequence gaps).",
            r.lost,
        ),
        (
            "gpupm_range_sealed",
            "Sealed (confidential) range records counted and dropped.",
            r.sealed,
        ),
        (
            "gpupm_range_unclaimed",
            "Range records of contexts holding no range on the register.",
            r.unclaimed,
        ),
        (
            "gpupm_range_malformed",
            "Range ring slots or stacks that were no record or call path.",
            r.malformed,
        ),
        (
            "gpupm_callgraph_records",
            "Crossing records added to call graphs.",
            r.graph_records,
        ),
    ];
    for (name, help, v) in counters {
        encoder
            .encode_descriptor(name, help, None, MetricType::Counter)?
            .encode_counter::<NoLabelSet, _, u64>(&v, None)?;
    }
    let gauges = [
        (
            "gpupm_range_ranges",
            "Marked ranges tenants hold.",
            r.ranges,
        ),
        (
            "gpupm_range_registers",
            "Range registers armed.",
            r.registers,
        ),
        (
            "gpupm_callgraph_graphs",
            "Per-context call graphs kept.",
            r.graphs,
        ),
    ];
    for (name, help, v) in gauges {
        encoder
            .encode_descriptor(name, help, None, MetricType::Gauge)?
            .encode_gauge(&v)?;
    }
    Ok(())
}

/// The daemon's work counters as (name, help, value).
fn health_counters(h: &HealthSnapshot) -> [(&'static str, &'static str, u64); 14] {
    [
        (
            "gpupm_handshakes",
            "Host-driven context-switch handshakes completed.",
            h.handshakes,
        ),
        (
            "gpupm_handshake_fallbacks",
            "Context switches the device completed by its fallback.",
            h.fallbacks,
        ),
        (
            "gpupm_stream_lost_records",
            "Stream records lost to ring overflow.",
            h.lost_records,
        ),
        (
            "gpupm_stream_drained_records",
            "Stream records drained.",
            h.drained_records,
        ),
        (
            "gpupm_stream_mirrored_records",
            "Stream records drained from the device's commit mirror (the rest through the memory window).",
            h.mirrored_records,
        ),
        (
            "gpupm_stream_mirror_fallbacks",
            "Drain reads of the commit mirror that fell back to the memory window.",
            h.mirror_fallbacks,
        ),
        (
            "gpupm_tenant_requests",
            "Tenant node requests served.",
            h.tenant_requests,
        ),
        (
            "gpupm_tenant_request_errors",
            "Tenant node requests answered with an error.",
            h.tenant_errors,
        ),
        (
            "gpupm_contexts_retired",
            "Contexts retired (final totals persisted, block released).",
            h.contexts_retired,
        ),
        (
            "gpupm_contexts_pruned",
            "Retired contexts removed by the retention policy.",
            h.contexts_pruned,
        ),
        (
            "gpupm_page_updates",
            "Tenant page publications (sequence-lock writes of a page that changed).",
            h.pages.updates,
        ),
        (
            "gpupm_page_refreshes",
            "Refreshes of the tenant pages that read the device.",
            h.pages.refreshes,
        ),
        (
            "gpupm_page_requests",
            "Page socket requests answered.",
            h.pages.requests,
        ),
        (
            "gpupm_page_request_errors",
            "Page socket requests refused.",
            h.pages.request_errors,
        ),
    ]
}
