//! `gpupm dmon`: one line per VM per interval, for people and scripts,
//! like `nvidia-smi dmon`: fixed right-aligned columns, a header and a
//! units row (repeated every `--header-every` lines), `-` for a value
//! that is not available in every column, `-s` to choose the metric
//! columns, `--vm` to choose the VMs, `-o D,T` for date and time columns,
//! `--csv` and `--json`.
//!
//! Columns and units: `sm` (SM utilization, %), `ipc` (warp instructions
//! per active SM cycle), `inst` (millions of warp instructions per second
//! of device time), `l2hit` (%), `dram` and `pcie` (MB/s = 10^6 bytes per
//! second of device time), then `devms` (the device time the row covers,
//! ms) and `status` (`ok`; `catchup`: the row covers the `nodata` rows
//! before it or a late reading; `nodata`: gpupmd did not answer; `reset`:
//! the device was reset; `sealed`: a confidential VM). A value never loses
//! digits: a column grows instead.
//!
//! CSV: header `timestamp,date,time,vm,FIELDS…,start_cycle,end_cycle,device_ms,wall_ms,status`
//! with the selected fields as `sm_utilization_pct`, `ipc`, `inst_per_s`,
//! `l2_hit_pct`, `dram_bytes_per_s`, `pcie_bytes_per_s` (plain numbers,
//! empty when not available).
//!
//! JSON: one [`DmonJson`] object per line per interval (every field).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::Serialize;

use crate::derived::get;
use crate::error::{CliError, CliResult};
use crate::interval::{self, Moment, Outages, Span, Status};
use crate::node::{Global, Missing};
use crate::output::emit_stream;
use crate::top::sample::{Frame, Row, Sampler};

/// The metric columns `-s` chooses from, in output order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Field {
    /// SM utilization, %.
    Sm,
    /// Warp instructions per active SM cycle.
    Ipc,
    /// Millions of warp instructions per second.
    Inst,
    /// L2 hit rate, %.
    L2hit,
    /// DRAM MB/s.
    Dram,
    /// PCIe MB/s (both directions).
    Pcie,
}

impl Field {
    const ALL: [Field; 6] = [
        Field::Sm,
        Field::Ipc,
        Field::Inst,
        Field::L2hit,
        Field::Dram,
        Field::Pcie,
    ];

    /// Header, units row, width, decimals.
    fn shape(self) -> (&'static str, &'static str, usize, usize) {
        match self {
            Field::Sm => ("sm", "%", 5, 1),
            Field::Ipc => ("ipc", "i/c", 5, 2),
            Field::Inst => ("inst", "Mi/s", 9, 1),
            Field::L2hit => ("l2hit", "%", 5, 1),
            Field::Dram => ("dram", "MB/s", 9, 1),
            Field::Pcie => ("pcie", "MB/s", 9, 1),
        }
    }

    fn csv_name(self) -> &'static str {
        match self {
            Field::Sm => "sm_utilization_pct",
            Field::Ipc => "ipc",
            Field::Inst => "inst_per_s",
            Field::L2hit => "l2_hit_pct",
            Field::Dram => "dram_bytes_per_s",
            Field::Pcie => "pcie_bytes_per_s",
        }
    }

    /// The value in the table's unit, and in the CSV's.
    fn value(self, v: &DmonVm) -> Option<(f64, f64)> {
        Some(match self {
            Field::Sm => (v.sm_utilization? * 100.0, v.sm_utilization? * 100.0),
            Field::Ipc => (v.ipc?, v.ipc?),
            Field::Inst => (v.inst_per_s? / 1e6, v.inst_per_s?),
            Field::L2hit => (v.l2_hit_rate? * 100.0, v.l2_hit_rate? * 100.0),
            Field::Dram => (v.dram_bytes_per_s? / 1e6, v.dram_bytes_per_s?),
            Field::Pcie => (v.pcie_bytes_per_s? / 1e6, v.pcie_bytes_per_s?),
        })
    }
}

/// Arguments of `gpupm dmon`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Time between two samples: 1s, 500ms, or plain milliseconds.
    #[arg(short = 'I', long = "interval", value_name = "INTERVAL", default_value = "1s",
          value_parser = interval::parse_interval)]
    interval: Duration,
    /// Number of intervals (default: until interrupted).
    #[arg(short = 'c', long, value_name = "K")]
    count: Option<u64>,
    /// The VMs to show (comma-separated ids; default every visible VM).
    #[arg(long, value_name = "N[,N...]", value_delimiter = ',')]
    vm: Vec<u32>,
    /// The metric columns, in this order (default all).
    #[arg(
        short = 's',
        long = "select",
        value_name = "FIELD[,FIELD...]",
        value_enum,
        value_delimiter = ','
    )]
    select: Vec<Field>,
    /// Date (`D`, YYYYMMDD) and time (`T`, HH:MM:SS) columns, local time:
    /// `-o T` (the default), `-o DT`, `-o none`.
    #[arg(
        short = 'o',
        long = "options",
        value_name = "D|T|DT|none",
        default_value = "T"
    )]
    options: String,
    /// Repeat the header and units rows after N lines or more, between
    /// two intervals (0: once).
    #[arg(long, value_name = "N", default_value_t = 20)]
    header_every: u64,
    /// End with exit status 1 after gpupmd has not answered for this long.
    #[arg(long, value_name = "DURATION", value_parser = crate::duration::parse,
          default_value = interval::DEFAULT_GIVE_UP)]
    give_up_after: Duration,
    /// CSV (the header names the fields with their units).
    #[arg(long, conflicts_with = "json")]
    csv: bool,
    /// One JSON object per line per interval (the schema is below).
    #[arg(long)]
    json: bool,
}

/// One interval of `gpupm dmon --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct DmonJson {
    /// The interval asked for, in milliseconds.
    pub interval_ms: u64,
    /// What the interval's values cover (start and end cycle, device and
    /// wall time, timestamp).
    #[serde(flatten)]
    pub span: Span,
    /// `ok`, `catch_up` (the values cover the `no_data` intervals before
    /// it, or a late sample), `no_data` (gpupmd did not answer: every
    /// metric null), `reset` (the device was reset: every metric null).
    pub status: Status,
    /// One entry per shown VM.
    pub vms: Vec<DmonVm>,
}

/// One VM over one interval; a metric without data in the interval, or
/// of a confidential VM, is null.
#[derive(Debug, Default, Clone, Serialize, JsonSchema)]
pub struct DmonVm {
    /// VM id.
    pub vm: u32,
    /// Confidential: counters sealed, no metrics.
    pub sealed: bool,
    /// Fraction of SM cycles active (0..1).
    pub sm_utilization: Option<f64>,
    /// Deprecated spelling of `sm_utilization` (until the next minor
    /// release).
    pub sm_utilisation: Option<f64>,
    /// Warp instructions per active SM cycle.
    pub ipc: Option<f64>,
    /// Warp instructions per second of device time.
    pub inst_per_s: Option<f64>,
    /// L2 hits over L2 accesses (0..1).
    pub l2_hit_rate: Option<f64>,
    /// DRAM bytes per second of device time.
    pub dram_bytes_per_s: Option<f64>,
    /// PCIe bytes per second of device time (both directions).
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
        let sm = get(m, "sm_utilization");
        DmonVm {
            vm: r.vm,
            sealed: false,
            sm_utilization: sm,
            sm_utilisation: sm,
            ipc: get(m, "ipc"),
            inst_per_s: r.inst_per_s.is_finite().then_some(r.inst_per_s),
            l2_hit_rate: get(m, "l2_hit_rate"),
            dram_bytes_per_s: get(m, "dram_bytes_per_s"),
            pcie_bytes_per_s: get(m, "pcie_bytes_per_s"),
        }
    }

    fn empty(vm: u32) -> DmonVm {
        DmonVm {
            vm,
            ..DmonVm::default()
        }
    }
}

/// What to print, chosen once.
struct Layout {
    fields: Vec<Field>,
    date: bool,
    time: bool,
}

impl Layout {
    fn of(args: &Args) -> CliResult<Layout> {
        let o = args.options.to_ascii_uppercase();
        let (date, time) = match o.as_str() {
            "NONE" | "" => (false, false),
            _ if o.chars().all(|c| c == 'D' || c == 'T') => (o.contains('D'), o.contains('T')),
            _ => {
                return Err(CliError::usage(format!(
                    "-o takes D, T, DT or none, not \"{}\"",
                    args.options
                )))
            }
        };
        let fields = if args.select.is_empty() {
            Field::ALL.to_vec()
        } else {
            Field::ALL
                .iter()
                .copied()
                .filter(|f| args.select.contains(f))
                .collect()
        };
        Ok(Layout { fields, date, time })
    }

    /// The header and units rows.
    fn header(&self) -> String {
        let mut names = String::from("#");
        let mut units = String::from("#");
        if self.date {
            names += &format!("{:<8} ", "Date");
            units += &format!("{:<8} ", "YYYYMMDD");
        }
        if self.time {
            names += &format!("{:<8} ", "Time");
            units += &format!("{:<8} ", "HH:MM:SS");
        }
        names += &format!("{:>4}", "vm");
        units += &format!("{:>4}", "Idx");
        for f in &self.fields {
            let (h, u, w, _) = f.shape();
            names += &format!(" {h:>w$}");
            units += &format!(" {u:>w$}");
        }
        names += &format!(" {:>7} {:>7}\n", "devms", "status");
        units += &format!(" {:>7} {:>7}\n", "ms", "-");
        names + &units
    }

    fn line(&self, at: &Moment, v: &DmonVm, span: &Span, status: &str) -> String {
        let (d, t) = at.date_time();
        let mut l = String::from(" ");
        if self.date {
            l += &format!("{d:<8} ");
        }
        if self.time {
            l += &format!("{t:<8} ");
        }
        l += &format!("{:>4}", v.vm);
        for f in &self.fields {
            let (_, _, w, prec) = f.shape();
            let cell = f
                .value(v)
                .map_or_else(|| "-".into(), |(x, _)| format!("{x:.prec$}"));
            l += &format!(" {cell:>w$}");
        }
        let devms = if status == "nodata" || status == "reset" {
            "-".to_string()
        } else {
            format!("{:.1}", span.device_ms)
        };
        l += &format!(" {devms:>7} {status:>7}\n");
        l
    }

    fn csv_header(&self) -> String {
        let fields: Vec<&str> = self.fields.iter().map(|f| f.csv_name()).collect();
        format!(
            "timestamp,date,time,vm,{},start_cycle,end_cycle,device_ms,wall_ms,status\n",
            fields.join(",")
        )
    }

    fn csv_line(&self, at: &Moment, v: &DmonVm, span: &Span, status: &str) -> String {
        let (d, t) = at.date_time();
        let mut l = format!("{},{d},{t},{}", span.timestamp, v.vm);
        for f in &self.fields {
            l.push(',');
            if let Some((_, x)) = f.value(v) {
                l += &x.to_string();
            }
        }
        let wall = span.wall_ms.map(|w| format!("{w:.3}")).unwrap_or_default();
        l += &format!(
            ",{},{},{:.3},{wall},{status}\n",
            span.start_cycle, span.end_cycle, span.device_ms
        );
        l
    }
}

/// What one interval printed: rows of `vms` with `status`.
fn print_interval(
    args: &Args,
    layout: &Layout,
    lines: &mut u64,
    (span, status, at): (&Span, Status, &Moment),
    vms: &[DmonVm],
) -> CliResult {
    if args.json {
        let j = DmonJson {
            interval_ms: u64::try_from(args.interval.as_millis()).unwrap_or(u64::MAX),
            span: span.clone(),
            status,
            vms: vms.to_vec(),
        };
        return emit_stream(&crate::output::json_line(&j)?);
    }
    let mut t = String::new();
    // The header repeats between intervals, never inside one.
    if !args.csv && args.header_every > 0 && *lines >= args.header_every {
        t += &layout.header();
        *lines = 0;
    }
    for v in vms {
        let st = match status {
            _ if v.sealed => "sealed",
            Status::Ok => "ok",
            Status::CatchUp => "catchup",
            Status::NoData => "nodata",
            Status::Reset => "reset",
        };
        if args.csv {
            t += &layout.csv_line(at, v, span, st);
            continue;
        }
        t += &layout.line(at, v, span, st);
        *lines += 1;
    }
    emit_stream(&t)
}

/// Runs the command.
pub fn run(g: &Global, args: &Args) -> CliResult<ExitCode> {
    let layout = Layout::of(args)?;
    let mut s = Sampler::new(g.node()?)?.with_period(args.interval);
    let shown: Vec<u32> = if args.vm.is_empty() {
        s.vms().to_vec()
    } else {
        if let Some(vm) = args.vm.iter().find(|v| !s.vms().contains(v)) {
            return Err(crate::node::not_visible(gpupm_client::Scope::Vm(*vm)));
        }
        args.vm.clone()
    };
    let first = s.sample(false).map_err(|m| match m {
        Missing::Gone(why) => CliError::usage(format!("no gpupmd: {why}")),
        Missing::Failed(e) => e,
    })?;
    let mut last = (first.span.end_cycle, first.at);
    if args.csv {
        emit_stream(&layout.csv_header())?;
    } else if !args.json {
        emit_stream(&layout.header())?;
    }
    let mut outages = Outages::new(args.give_up_after);
    let mut told_differ = false;
    let mut lines = 0;
    let mut next = Instant::now() + args.interval;
    let mut n = 0;
    while args.count.is_none_or(|k| n < k) {
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        next += args.interval;
        n += 1;
        match s.sample(false) {
            Ok(Frame {
                rows,
                span,
                status,
                at,
            }) => {
                outages.answered();
                if !told_differ && status == Status::Ok && span.times_differ() {
                    told_differ = true;
                    eprintln!(
                        "gpupm: device and wall time differ: {} of device time in {} of wall \
                         time; rates are per second of device time (the devms column)",
                        interval::ms(span.device_ms),
                        interval::ms(span.wall_ms.unwrap_or(0.0))
                    );
                }
                let vms: Vec<DmonVm> = rows
                    .iter()
                    .filter(|r| shown.contains(&r.vm))
                    .map(|r| {
                        if status == Status::Reset {
                            DmonVm::empty(r.vm)
                        } else {
                            DmonVm::of(r)
                        }
                    })
                    .collect();
                print_interval(args, &layout, &mut lines, (&span, status, &at), &vms)?;
                last = (span.end_cycle, at);
            }
            Err(Missing::Gone(why)) => {
                outages.gone(&why)?;
                let now = Moment::now();
                let span = Span::new(&last.1, last.0, &now, last.0, 1);
                let vms: Vec<DmonVm> = shown.iter().map(|&v| DmonVm::empty(v)).collect();
                print_interval(
                    args,
                    &layout,
                    &mut lines,
                    (&span, Status::NoData, &now),
                    &vms,
                )?;
                last.1 = now;
                match s.reopen() {
                    Ok(()) | Err(Missing::Gone(_)) => {}
                    Err(Missing::Failed(e)) => return Err(e),
                }
            }
            Err(Missing::Failed(e)) => return Err(e),
        }
    }
    Ok(ExitCode::SUCCESS)
}
