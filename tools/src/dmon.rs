//! `gpupm dmon`: one line per interval per VM, for scripts (like
//! `nvidia-smi dmon`). Columns: VM, SM utilisation %, IPC, warp
//! instructions/s, L2 hit %, DRAM MB/s, PCIe MB/s; `-` where a metric has
//! no data in the interval, `sealed` for confidential VMs.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::derived::get;
use crate::error::CliResult;
use crate::node::{Global, Node};
use crate::output::emit;
use crate::top::sample::Sampler;

/// Arguments of `gpupm dmon`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Interval in milliseconds.
    #[arg(
        short = 'I',
        long = "interval",
        value_name = "MS",
        default_value_t = 1000
    )]
    interval_ms: u64,
    /// Number of intervals (default: until interrupted).
    #[arg(long, value_name = "K")]
    count: Option<u64>,
}

fn col(v: Option<f64>, scale: f64, prec: usize) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{:.prec$}", x * scale))
}

/// Runs the command.
pub fn run(g: &Global, args: &Args) -> CliResult<ExitCode> {
    let mut s = Sampler::new(Node::open(&g.tenant_node)?)?;
    s.sample(false)?;
    emit(&format!(
        "# {:>4} {:>6} {:>6} {:>10} {:>7} {:>10} {:>10}\n",
        "vm", "sm%", "ipc", "inst/s", "l2hit%", "dramMB/s", "pcieMB/s"
    ))?;
    let period = Duration::from_millis(args.interval_ms.max(1));
    let mut next = Instant::now() + period;
    let mut n = 0;
    while args.count.is_none_or(|k| n < k) {
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        next += period;
        let (_, rows) = s.sample(false)?;
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
