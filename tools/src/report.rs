//! `gpupm report FILE`: summarises a `gpupm record` file per context (top N
//! by warp instructions) and per interval of device time.
//!
//! JSON (stable): `{"version": 1, "scope": "vm"|"ctx", "id": N, "clock_khz": K,
//! "records": R, "lost": L, "sealed_records": S, "first_cycle": C, "last_cycle": C,
//! "contexts": [{"ctx": ID, "vm": ID, "commits": N, "cycles": C, "totals": {EVENT: N}, "derived": {…}}],
//! "intervals": [{"start_cycle": C, "end_cycle": C, "commits": N, "totals": {…}, "derived": {…}}]}`
//! — `contexts` sorted by `sm_inst_executed`, at most `--top`; `totals`
//! holds every catalogue event.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use gpupm_uapi::events::{CATALOGUE, MAX_EVENTS};
use gpupm_uapi::layout::{envelope_flags, StreamRecord, RECORD_MAGIC};
use gpupm_uapi::tenant::scope;
use serde_json::{json, Map, Value};
use zerocopy::FromBytes;

use crate::derived;
use crate::error::{CliError, CliResult};
use crate::output::emit;
use crate::record::format;

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
    /// JSON instead of tables.
    #[arg(long)]
    json: bool,
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

fn totals_json(v: &[u64; MAX_EVENTS]) -> Value {
    Value::Object(
        CATALOGUE
            .iter()
            .map(|e| (e.name.to_string(), json!(v[usize::from(e.id)])))
            .collect(),
    )
}

fn derived_json(v: &[u64; MAX_EVENTS], cycles: u64, khz: u32) -> Value {
    Value::Object(
        derived::compute(v, cycles, khz)
            .into_iter()
            .map(|m| (m.name.to_string(), json!(m.value)))
            .collect::<Map<_, _>>(),
    )
}

/// Runs the command.
pub fn run(args: &Args) -> CliResult<ExitCode> {
    let bytes = std::fs::read(&args.file)
        .map_err(|e| CliError::usage(format!("cannot read {}: {e}", args.file.display())))?;
    let (h, recs) = format::decode(&bytes)
        .map_err(|e| CliError::usage(format!("{}: {e}", args.file.display())))?;
    let khz = h.clock_khz.max(1);
    let bucket = (args.interval_ms.max(1) * u64::from(khz)).max(1);
    let mut ctxs: BTreeMap<u32, Acc> = BTreeMap::new();
    let mut intervals: BTreeMap<u64, Acc> = BTreeMap::new();
    let (mut sealed, mut lost) = (0u64, 0u64);
    let (mut first, mut last) = (u64::MAX, 0u64);
    for d in &recs {
        lost += d.lost_before;
        if d.slot.envelope.flags & envelope_flags::ENCRYPTED != 0 {
            sealed += 1;
            continue;
        }
        let Ok((r, _)) = StreamRecord::read_from_prefix(&d.slot.payload) else {
            continue;
        };
        if r.magic != RECORD_MAGIC {
            continue;
        }
        first = first.min(r.start_cycle);
        last = last.max(r.end_cycle);
        ctxs.entry(r.ctx).or_default().add(&r);
        intervals.entry(r.end_cycle / bucket).or_default().add(&r);
    }
    let mut order: Vec<(&u32, &Acc)> = ctxs.iter().collect();
    order.sort_by(|a, b| b.1.totals.get(3).cmp(&a.1.totals.get(3)).then(a.0.cmp(b.0)));
    order.truncate(args.top);
    let kind = if h.scope == scope::CONTEXT {
        "ctx"
    } else {
        "vm"
    };
    if first == u64::MAX {
        first = 0;
    }
    if args.json {
        let contexts: Vec<Value> = order
            .iter()
            .map(|(c, a)| {
                let v = a.values();
                json!({"ctx": c, "vm": a.vm, "commits": a.commits, "cycles": a.cycles, "totals": totals_json(&v), "derived": derived_json(&v, a.cycles, khz)})
            })
            .collect();
        let ivs: Vec<Value> = intervals
            .iter()
            .map(|(&b, a)| {
                let v = a.values();
                json!({"start_cycle": b * bucket, "end_cycle": (b + 1) * bucket, "commits": a.commits, "totals": totals_json(&v), "derived": derived_json(&v, bucket, khz)})
            })
            .collect();
        let o = json!({
            "version": h.version, "scope": kind, "id": h.id, "clock_khz": khz, "records": recs.len(), "lost": lost,
            "sealed_records": sealed, "first_cycle": first, "last_cycle": last, "contexts": contexts, "intervals": ivs,
        });
        emit(&format!("{o}\n"))?;
        return Ok(ExitCode::SUCCESS);
    }
    let ms = |c: u64| c as f64 / f64::from(khz);
    let mut t = format!(
        "{}: {kind} {}, {} records ({lost} lost, {sealed} sealed), cycles {first}..{last} ({:.1} ms)\n\n",
        args.file.display(),
        h.id,
        recs.len(),
        ms(last.saturating_sub(first))
    );
    t += &format!("top {} contexts by warp instructions:\n{:>6} {:>4} {:>8} {:>10} {:>16} {:>7} {:>6} {:>12}\n", order.len(), "CTX", "VM", "COMMITS", "MS", "INST", "SM %", "IPC", "DRAM/s");
    for (c, a) in &order {
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
    for (&b, a) in &intervals {
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
    emit(&t)?;
    Ok(ExitCode::SUCCESS)
}
