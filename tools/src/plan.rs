//! `gpupm plan`: the per-type sample-buffer sizes of a scenario, per
//! partition and record type: records per sampling event ×
//! sampling events per drain interval × record size, with the margin —
//! the same arithmetic gpupmd sizes the device's buffers with
//! (`gpupm_client::sampling::plan`).

use std::path::PathBuf;
use std::process::ExitCode;

use gpupm_client::sampling::plan::{self, BufferPlan, SamplerSettings};
use gpupm_driver::scenario::{self, Scenario};
use gpupm_uapi::sampling::{DEFAULT_BRANCH_PERIOD, DEFAULT_CYCLE_PERIOD};

/// Arguments of `gpupm plan`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Scenario file (TOML); the built-in scenario if omitted.
    scenario: Option<PathBuf>,
    /// Longest time between two drains of a buffer, in ms.
    #[arg(long, default_value_t = plan::DEFAULT_DRAIN_MS)]
    drain_ms: u64,
    /// P, the cycle sampler's period.
    #[arg(long, default_value_t = DEFAULT_CYCLE_PERIOD)]
    period: u32,
    /// N, taken branches per branch-stack capture.
    #[arg(long, default_value_t = DEFAULT_BRANCH_PERIOD)]
    branch_every: u32,
    /// Margin over the bound, in percent.
    #[arg(long, default_value_t = plan::DEFAULT_MARGIN_PCT)]
    margin: u32,
    /// One JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// The plan of every partition of `scenario` that runs programs.
pub fn scenario_plan(
    scenario: &Scenario,
    drain_ms: u64,
    period: u32,
    branch_every: u32,
    margin_pct: u32,
) -> Vec<BufferPlan> {
    scenario
        .partitions
        .iter()
        .flat_map(|p| {
            // The device's SAMP_MIN_BRANCH_GAP of the slot, which gpupmd sizes with.
            let gap = scenario.min_branch_gap(p.slot);
            plan::plan(
                &SamplerSettings {
                    partition: p.slot,
                    clock_khz: scenario.clock.khz,
                    cycle_period: Some(period),
                    branch_every: (gap > 0).then_some(branch_every),
                    min_branch_gap: gap.max(1),
                },
                drain_ms.saturating_mul(1000),
                margin_pct,
            )
        })
        .collect()
}

/// `gpupm plan --json`.
#[derive(serde::Serialize, schemars::JsonSchema)]
pub struct PlanJson {
    /// Scenario name.
    scenario: String,
    /// Drain interval the buffers are sized for, ms.
    drain_ms: u64,
    /// P, cycles.
    period: u32,
    /// N, taken branches per capture.
    branch_every: u32,
    /// One entry per partition and record type.
    buffers: Vec<BufferJson>,
    /// Sum of `buffers[].bytes`.
    total_bytes: u64,
}

/// One buffer of [`PlanJson`].
#[derive(serde::Serialize, schemars::JsonSchema)]
pub struct BufferJson {
    /// Partition slot.
    partition: u32,
    /// `branch_stack` or `cycle`.
    record_type: String,
    /// Records one sampling event produces.
    records_per_event: u64,
    /// Most sampling events in one drain interval.
    events_per_interval: u64,
    /// Bytes of one record slot.
    record_size: u64,
    /// Margin, percent.
    margin_pct: u32,
    /// Capacity, records (a power of two).
    records: u64,
    /// Capacity, bytes.
    bytes: u64,
    /// The plan wanted more than the partition's sample span holds.
    clamped: bool,
}

impl From<&BufferPlan> for BufferJson {
    fn from(b: &BufferPlan) -> Self {
        BufferJson {
            partition: b.partition,
            record_type: b.record_type.name().into(),
            records_per_event: b.records_per_event,
            events_per_interval: b.events_per_interval,
            record_size: b.record_size,
            margin_pct: b.margin_pct,
            records: b.records,
            bytes: b.bytes,
            clamped: b.clamped,
        }
    }
}

/// Runs `gpupm plan`.
pub fn run(args: &Args) -> Result<ExitCode, String> {
    let scenario = match &args.scenario {
        Some(path) => scenario::parse_file(path).map_err(|e| e.to_string())?,
        None => scenario::builtin(),
    };
    if args.drain_ms == 0 {
        return Err("--drain-ms must be at least 1".into());
    }
    let bufs = scenario_plan(
        &scenario,
        args.drain_ms,
        args.period,
        args.branch_every,
        args.margin,
    );
    let total_bytes = bufs.iter().map(|b| b.bytes).sum();
    let text = if args.json {
        crate::output::json_line(&PlanJson {
            scenario: scenario.name.clone(),
            drain_ms: args.drain_ms,
            period: args.period,
            branch_every: args.branch_every,
            buffers: bufs.iter().map(BufferJson::from).collect(),
            total_bytes,
        })?
    } else {
        table(&scenario.name, args, &bufs, total_bytes)
    };
    crate::output::emit(&text)?;
    Ok(ExitCode::SUCCESS)
}

fn table(name: &str, args: &Args, bufs: &[BufferPlan], total: u64) -> String {
    let mut out = format!(
        "{name}: drained every {} ms, P = {}, N = {}, margin {} %\n",
        args.drain_ms, args.period, args.branch_every, args.margin
    );
    out.push_str(&format!(
        "{:>4}  {:<12} {:>10} {:>12} {:>8} {:>10} {:>12}\n",
        "part", "type", "rec/event", "events/drain", "rec B", "records", "bytes"
    ));
    for b in bufs {
        out.push_str(&format!(
            "{:>4}  {:<12} {:>10} {:>12} {:>8} {:>10} {:>12}{}\n",
            b.partition,
            b.record_type.name(),
            b.records_per_event,
            b.events_per_interval,
            b.record_size,
            b.records,
            b.bytes,
            if b.clamped {
                "  (clamped to the span)"
            } else {
                ""
            }
        ));
    }
    out.push_str(&format!("total {total} bytes\n"));
    out
}
