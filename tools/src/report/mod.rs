//! `gpupm report FILE`: merges every record type of a `gpupm record` file
//! into one trace ordered by (cycle, sequence) ([`crate::trace`]) and
//! summarises it — counter deltas per context (top N by warp
//! instructions) and per interval of device time, record counts per type,
//! samples per context and block, runtime-instrumentation groups — or
//! prints it (`--trace`).
//!
//! JSON (stable): [`ReportJson`] (`gpupm report --help` shows the
//! schema), and with `--trace` one [`trace_lines::TraceLine`] per line (the `--trace`
//! help lists its fields).

mod ri;
mod samples;
mod trace_lines;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use gpupm_uapi::events::{CATALOGUE, MAX_EVENTS};
use gpupm_uapi::layout::StreamRecord;
use gpupm_uapi::tenant::scope;
use schemars::JsonSchema;
use serde::Serialize;

use self::samples::{ContextSamples, TypeSummary};
use crate::derived;
use crate::error::{CliError, CliResult};
use crate::output::emit;
use crate::record::format;
use crate::trace::{Body, RecordType, TraceRecord};

/// Arguments of `gpupm report`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A file written by `gpupm record`.
    file: PathBuf,
    /// Contexts shown.
    #[arg(long, value_name = "N", default_value_t = 10)]
    top: usize,
    /// Interval length in milliseconds of device time.
    #[arg(long, value_name = "MS", default_value_t = 100)]
    interval_ms: u64,
    /// JSON instead of tables (with --trace: one object per record and line).
    #[arg(long)]
    json: bool,
    /// Print the merged trace, one line per record, instead of the
    /// summary. With --json, one object per record and line: cycle,
    /// sequence (the merge key), type (counter_delta, branch_stack,
    /// pc_sample, ri_record), session_seq, lost_before, sealed, vm, ctx,
    /// and when known kernel, block, device_seq, span (docs/sampling.md),
    /// and for RI records ri {session, group, rgs, halt_reason, record
    /// {kind, time, version, kernel, block, ctx_cycle, data, source,
    /// flags}} (docs/ri.md); an RI record's cycle is its group's time.
    #[arg(long)]
    trace: bool,
    /// Open a confidential VM's sealed records with its session file (the
    /// session they were recorded in) or key file (see `gpupm stat
    /// --key-file`).
    #[arg(long, value_name = "FILE")]
    key_file: Option<PathBuf>,
}

#[derive(Default)]
struct Acc {
    vm: u32,
    commits: u64,
    cycles: u64,
    first: u64,
    last: u64,
    totals: Vec<u64>,
}

impl Acc {
    fn add(&mut self, r: &StreamRecord) {
        if self.totals.is_empty() {
            self.totals = vec![0; MAX_EVENTS];
            self.first = r.start_cycle;
        }
        self.vm = r.vm;
        self.commits += 1;
        self.cycles += r.end_cycle.saturating_sub(r.start_cycle);
        self.first = self.first.min(r.start_cycle);
        self.last = self.last.max(r.end_cycle);
        for (t, d) in self.totals.iter_mut().zip(r.deltas) {
            *t += d;
        }
    }

    fn values(&self) -> [u64; MAX_EVENTS] {
        let mut v = [0; MAX_EVENTS];
        for (o, t) in v.iter_mut().zip(&self.totals) {
            *o = *t;
        }
        v
    }
}

fn totals_json(v: &[u64; MAX_EVENTS]) -> BTreeMap<&'static str, u64> {
    CATALOGUE
        .iter()
        .map(|e| (e.name, v[usize::from(e.id)]))
        .collect()
}

fn derived_json(v: &[u64; MAX_EVENTS], cycles: u64, khz: u32) -> BTreeMap<&'static str, f64> {
    derived::compute(v, cycles, khz)
        .into_iter()
        .map(|m| (m.name, m.value))
        .collect()
}

/// `gpupm report --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ReportJson {
    /// Recording format version.
    pub version: u32,
    /// The recorded scope.
    pub scope: RecordedScope,
    /// Its VM or context id.
    pub id: u32,
    /// Nominal device clock in kHz.
    pub clock_khz: u32,
    /// Records in the file, every type.
    pub records: usize,
    /// Records lost before they were recorded, every type.
    pub lost: u64,
    /// Counter deltas of a confidential VM (sealed; not summed).
    pub sealed_records: u64,
    /// Records, sealed records and lost records per record type.
    pub types: Vec<TypeSummary>,
    /// Records of types this gpupm does not know (skipped).
    pub unknown_records: u64,
    /// False when the recorder did not end cleanly (the file holds what it
    /// wrote up to its last whole record).
    pub finished: bool,
    /// Samples per context (most PC samples first), kernel and block.
    pub samples: Vec<ContextSamples>,
    /// Runtime-instrumentation entries (`gpupm ri -o`): groups, halts,
    /// lost groups, records by type.
    pub ri: ri::RiSummary,
    /// First device cycle covered.
    pub first_cycle: u64,
    /// Last device cycle covered.
    pub last_cycle: u64,
    /// The top contexts by `sm_inst_executed` (at most `--top`).
    pub contexts: Vec<ReportContext>,
    /// Every interval of `--interval-ms` device time with commits.
    pub intervals: Vec<ReportInterval>,
}

/// What a recording holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RecordedScope {
    /// A VM.
    Vm,
    /// A context.
    Ctx,
}

/// One context's sums.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ReportContext {
    /// Context id.
    pub ctx: u32,
    /// Its VM.
    pub vm: u32,
    /// Commits recorded.
    pub commits: u64,
    /// Device cycles covered by them.
    pub cycles: u64,
    /// Every catalogue event, summed.
    pub totals: BTreeMap<&'static str, u64>,
    /// Derived metrics over `cycles` (as in `gpupm stat`).
    pub derived: BTreeMap<&'static str, f64>,
}

/// One interval's sums.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ReportInterval {
    /// First cycle of the interval.
    pub start_cycle: u64,
    /// End of the interval (exclusive).
    pub end_cycle: u64,
    /// Commits that ended inside it.
    pub commits: u64,
    /// Every catalogue event, summed.
    pub totals: BTreeMap<&'static str, u64>,
    /// Derived metrics over the interval.
    pub derived: BTreeMap<&'static str, f64>,
}

/// The recording, summed per context and per interval.
struct Summary {
    khz: u32,
    bucket: u64,
    records: usize,
    ctxs: BTreeMap<u32, Acc>,
    intervals: BTreeMap<u64, Acc>,
    sealed: u64,
    lost: u64,
    first: u64,
    last: u64,
}

fn summarise<'a>(
    recs: impl Iterator<Item = &'a TraceRecord>,
    khz: u32,
    interval_ms: u64,
) -> Summary {
    let bucket = (interval_ms.max(1) * u64::from(khz)).max(1);
    let mut s = Summary {
        khz,
        bucket,
        records: 0,
        ctxs: BTreeMap::new(),
        intervals: BTreeMap::new(),
        sealed: 0,
        lost: 0,
        first: u64::MAX,
        last: 0,
    };
    for d in recs {
        s.records += 1;
        s.lost += d.lost_before;
        let r = match &d.body {
            Body::Counter(r) => r,
            Body::Sealed => {
                s.sealed += 1;
                continue;
            }
            Body::Branch(_) | Body::Pc(_) | Body::Ri(_) => continue,
        };
        s.first = s.first.min(r.start_cycle);
        s.last = s.last.max(r.end_cycle);
        s.ctxs.entry(r.ctx).or_default().add(r);
        s.intervals.entry(r.end_cycle / bucket).or_default().add(r);
    }
    if s.first == u64::MAX {
        s.first = 0;
    }
    s
}

/// Runs the command.
pub fn run(args: &Args) -> CliResult<ExitCode> {
    let bytes = std::fs::read(&args.file)
        .map_err(|e| CliError::usage(format!("cannot read {}: {e}", args.file.display())))?;
    let shown = |e: String| CliError::usage(format!("{}: {e}", args.file.display()));
    let decoded = format::decode(&bytes).map_err(|e| shown(e.to_string()))?;
    let keys = crate::keyfile::KeySource::new(args.key_file.as_deref())?;
    let mut streams = crate::trace::decode::decode(&decoded.frames, keys.explicit())
        .map_err(|e| shown(e.msg.clone()))?;
    let h = decoded.header;
    if h.scope == scope::CONTEXT {
        streams.set_ri_context(h.id);
    }
    if args.trace {
        let merged = streams.into_trace();
        emit(&trace_lines::render(&merged, args.json)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    let counters = streams
        .streams
        .get(&RecordType::CounterDelta)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let sum = summarise(counters.iter(), h.clock_khz.max(1), args.interval_ms);
    let types = samples::per_type(&streams);
    let ctx_samples = samples::per_context(&streams);
    let ri_summary = ri::summary(&streams);
    let mut order: Vec<(&u32, &Acc)> = sum.ctxs.iter().collect();
    order.sort_by(|a, b| b.1.totals.get(3).cmp(&a.1.totals.get(3)).then(a.0.cmp(b.0)));
    order.truncate(args.top);
    let scope = if h.scope == scope::CONTEXT {
        RecordedScope::Ctx
    } else {
        RecordedScope::Vm
    };
    let all = Totals {
        records: types.iter().map(|t| t.records).sum::<u64>(),
        lost: types.iter().map(|t| t.lost).sum(),
        unknown: streams.unknown,
    };
    if args.json {
        let mut report = to_json(&sum, &order, h.version, scope, h.id);
        (report.records, report.lost) =
            (usize::try_from(all.records).unwrap_or(usize::MAX), all.lost);
        report.unknown_records = all.unknown;
        report.finished = decoded.finished;
        report.types = types;
        report.samples = ctx_samples;
        report.ri = ri_summary;
        emit(&crate::output::json_line(&report)?)?;
    } else {
        let kind = if scope == RecordedScope::Ctx {
            "ctx"
        } else {
            "vm"
        };
        let mut t = text(args, &sum, &order, kind, h.id, &all);
        if !decoded.finished {
            t.insert_str(
                0,
                "(an unfinished recording: read up to its last whole record)\n",
            );
        }
        t += &samples::text(&types, &ctx_samples, 5);
        t += &ri::text(&ri_summary);
        emit(&t)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Records and losses over every type.
struct Totals {
    records: u64,
    lost: u64,
    unknown: u64,
}

fn to_json(
    sum: &Summary,
    order: &[(&u32, &Acc)],
    version: u32,
    scope: RecordedScope,
    id: u32,
) -> ReportJson {
    let (khz, bucket) = (sum.khz, sum.bucket);
    ReportJson {
        version,
        scope,
        id,
        clock_khz: khz,
        records: sum.records,
        lost: sum.lost,
        sealed_records: sum.sealed,
        types: Vec::new(),
        unknown_records: 0,
        finished: true,
        samples: Vec::new(),
        ri: ri::RiSummary::default(),
        first_cycle: sum.first,
        last_cycle: sum.last,
        contexts: order
            .iter()
            .map(|&(&ctx, a)| {
                let v = a.values();
                ReportContext {
                    ctx,
                    vm: a.vm,
                    commits: a.commits,
                    cycles: a.cycles,
                    totals: totals_json(&v),
                    derived: derived_json(&v, a.cycles, khz),
                }
            })
            .collect(),
        intervals: sum
            .intervals
            .iter()
            .map(|(&b, a)| {
                let v = a.values();
                ReportInterval {
                    start_cycle: b * bucket,
                    end_cycle: (b + 1) * bucket,
                    commits: a.commits,
                    totals: totals_json(&v),
                    derived: derived_json(&v, bucket, khz),
                }
            })
            .collect(),
    }
}

fn text(
    args: &Args,
    sum: &Summary,
    order: &[(&u32, &Acc)],
    kind: &str,
    id: u32,
    all: &Totals,
) -> String {
    let (khz, bucket, lost, sealed, first, last) = (
        sum.khz, sum.bucket, all.lost, sum.sealed, sum.first, sum.last,
    );
    let intervals = &sum.intervals;
    let ms = |c: u64| c as f64 / f64::from(khz);
    let mut t = format!(
        "{}: {kind} {}, {} records ({lost} lost, {sealed} sealed counter deltas{}), counters cover cycles {first}..{last} ({:.1} ms)\n\n",
        args.file.display(),
        id,
        all.records,
        if all.unknown > 0 { format!(", {} of unknown types skipped", all.unknown) } else { String::new() },
        ms(last.saturating_sub(first))
    );
    t += &format!("top {} contexts by warp instructions:\n{:>6} {:>4} {:>8} {:>10} {:>16} {:>7} {:>6} {:>12}\n", order.len(), "CTX", "VM", "COMMITS", "MS", "INST", "SM %", "IPC", "DRAM/s");
    for (c, a) in order {
        let v = a.values();
        let m = derived::compute(&v, a.cycles, khz);
        t += &format!(
            "{c:>6} {:>4} {:>8} {:>10.1} {:>16} {:>7} {:>6} {:>12}\n",
            a.vm,
            a.commits,
            ms(a.cycles),
            v[3],
            derived::get(&m, "sm_utilisation").map_or("-".into(), |x| format!("{:.1}", x * 100.0)),
            derived::get(&m, "ipc").map_or("-".into(), |x| format!("{x:.2}")),
            derived::get(&m, "dram_bytes_per_s")
                .map_or("-".into(), |x| format!("{}/s", derived::bytes(x))),
        );
    }
    t += &format!(
        "\nper {} ms interval:\n{:>12} {:>8} {:>16} {:>7} {:>12}\n",
        args.interval_ms, "START_MS", "COMMITS", "INST", "SM %", "DRAM/s"
    );
    for (&b, a) in intervals {
        let v = a.values();
        let m = derived::compute(&v, bucket, khz);
        t += &format!(
            "{:>12.1} {:>8} {:>16} {:>7} {:>12}\n",
            ms(b * bucket),
            a.commits,
            v[3],
            derived::get(&m, "sm_utilisation").map_or("-".into(), |x| format!("{:.1}", x * 100.0)),
            derived::get(&m, "dram_bytes_per_s")
                .map_or("-".into(), |x| format!("{}/s", derived::bytes(x))),
        );
    }
    t
}
