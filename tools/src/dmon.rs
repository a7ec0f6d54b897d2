//! `gpupm dmon`: one line per interval per VM, for scripts (like
//! `nvidia-smi dmon`). Columns: VM, SM utilisation %, IPC, warp
//! instructions/s, L2 hit %, DRAM MB/s, PCIe MB/s; `-` where a metric has
//! no data in the interval, `sealed` for confidential VMs. With `--json`,
//! one [`DmonJson`] object per line per interval instead (no header).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::Serialize;

use crate::derived::get;
use crate::error::CliResult;
use crate::node::Global;
use crate::output::emit;
use crate::top::sample::{Row, Sampler};
use crate::top::IntervalArgs;

/// Arguments of `gpupm dmon`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    interval: IntervalArgs,
    /// Number of intervals (default: until interrupted).
    #[arg(long, value_name = "K")]
    count: Option<u64>,
    /// One JSON object per line per interval (the schema is below).
    #[arg(long)]
    json: bool,
}

/// One interval of `gpupm dmon --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct DmonJson {
    /// Interval length in milliseconds.
    pub interval_ms: u64,
    /// One entry per visible VM.
    pub vms: Vec<DmonVm>,
}

/// One VM over one interval; a metric without data in the interval, or
/// of a confidential VM, is null.
#[derive(Debug, Default, Serialize, JsonSchema)]
pub struct DmonVm {
    /// VM id.
    pub vm: u32,
    /// Confidential: counters sealed, no metrics.
    pub sealed: bool,
    /// Fraction of SM cycles active (0..1).
    pub sm_utilisation: Option<f64>,
    /// Warp instructions per active SM cycle.
    pub ipc: Option<f64>,
    /// Warp instructions per second.
    pub inst_per_s: Option<f64>,
    /// L2 hits over L2 accesses (0..1).
    pub l2_hit_rate: Option<f64>,
    /// DRAM bytes per second.
    pub dram_bytes_per_s: Option<f64>,
    /// PCIe bytes per second (both directions).
    pub pcie_bytes_per_s: Option<f64>,
}

impl DmonVm {
    fn of(r: &Row) -> DmonVm {
        if r.sealed {
            return DmonVm {
                vm: r.vm,
                sealed: true,
                ..DmonVm::default()
            };
        }
        let m = &r.metrics;
        DmonVm {
            vm: r.vm,
            sealed: false,
            sm_utilisation: get(m, "sm_utilisation"),
            ipc: get(m, "ipc"),
            inst_per_s: Some(r.inst_per_s),
            l2_hit_rate: get(m, "l2_hit_rate"),
            dram_bytes_per_s: get(m, "dram_bytes_per_s"),
            pcie_bytes_per_s: get(m, "pcie_bytes_per_s"),
        }
    }
}

fn col(v: Option<f64>, scale: f64, prec: usize) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{:.prec$}", x * scale))
}

/// Runs the command.
pub fn run(g: &Global, args: &Args) -> CliResult<ExitCode> {
    let mut s = Sampler::new(g.node()?)?;
    s.sample(false)?;
    if !args.json {
        emit(&format!(
            "# {:>4} {:>6} {:>6} {:>10} {:>7} {:>10} {:>10}\n",
            "vm", "sm%", "ipc", "inst/s", "l2hit%", "dramMB/s", "pcieMB/s"
        ))?;
    }
    let period = Duration::from_millis(args.interval.ms.max(1));
    let mut next = Instant::now() + period;
    let mut n = 0;
    while args.count.is_none_or(|k| n < k) {
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        next += period;
        let (_, rows) = s.sample(false)?;
        if args.json {
            let interval = DmonJson {
                interval_ms: period.as_millis().try_into().unwrap_or(u64::MAX),
                vms: rows.iter().map(DmonVm::of).collect(),
            };
            emit(&crate::output::json_line(&interval)?)?;
            n += 1;
            continue;
        }
        let mut t = String::new();
        for r in rows {
            if r.sealed {
                t += &format!("  {:>4} sealed\n", r.vm);
                continue;
            }
            let m = &r.metrics;
            t += &format!(
                "  {:>4} {:>6} {:>6} {:>10.3e} {:>7} {:>10} {:>10}\n",
                r.vm,
                col(get(m, "sm_utilisation"), 100.0, 1),
                col(get(m, "ipc"), 1.0, 2),
                r.inst_per_s,
                col(get(m, "l2_hit_rate"), 100.0, 1),
                col(get(m, "dram_bytes_per_s"), 1e-6, 1),
                col(get(m, "pcie_bytes_per_s"), 1e-6, 1),
            );
        }
        emit(&t)?;
        n += 1;
    }
    Ok(ExitCode::SUCCESS)
}
