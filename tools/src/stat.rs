//! `gpupm stat`: chosen events of one scope, like `perf stat`, with derived
//! metrics; one-shot totals or per-interval deltas.
//!
//! # JSON (stable)
//! [`StatJson`]: one object; in interval mode (`-I MS`) one per line per
//! interval, holding that interval's deltas (rates over the cycles between
//! the two reads). `gpupm stat --help` shows the schema.
//!
//! # CSV
//! Header `scope,id,cycle,interval_ms,kind,name,value`; one row per event
//! (`kind` = `event`) and per derived metric (`kind` = `derived`);
//! `interval_ms` is empty in one-shot mode; `id` is `ID@CYCLE` for a
//! context instance.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use gpupm_client::Scope;
use gpupm_uapi::events::{self, MAX_EVENTS};
use schemars::JsonSchema;
use serde::Serialize;

use crate::derived::{self, Metric};
use crate::error::CliResult;
use crate::node::{self, Global, Reading, ScopeArgs, Target};
use crate::output::emit;

const DEFAULT_EVENTS: &str = "sm_cycles_elapsed,sm_cycles_active,sm_inst_executed,l2_hit,l2_miss,fb_bytes,pcie_rx_bytes,pcie_tx_bytes";

/// Arguments of `gpupm stat`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Events (comma-separated catalogue names, see `gpupm events`).
    #[arg(short = 'e', long, value_name = "EV[,EV...]", default_value = DEFAULT_EVENTS)]
    events: String,
    #[command(flatten)]
    scope: ScopeArgs,
    /// Print deltas every MS milliseconds instead of totals once.
    #[arg(short = 'I', long = "interval", value_name = "MS")]
    interval_ms: Option<u64>,
    /// Number of intervals (default: until interrupted).
    #[arg(long, value_name = "K")]
    count: Option<u64>,
    /// JSON, one object per reading (the schema is below).
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// CSV.
    #[arg(long)]
    csv: bool,
    /// A confidential VM's session file (default: the one `gpupm cc
    /// establish` keeps for the VM in your state directory), or a raw key
    /// of a VM whose key the scenario gives (32 bytes or 64 hex digits);
    /// owner-only: the sealed totals are opened with it.
    #[arg(long, value_name = "FILE")]
    key_file: Option<PathBuf>,
}

struct Sample<'a> {
    target: Target,
    cycle: u64,
    interval_ms: Option<u64>,
    values: &'a [u64; MAX_EVENTS],
    shown: &'a [u16],
    derived: &'a [Metric],
    sealed: bool,
}

/// Runs the command.
pub fn run(g: &Global, args: &Args) -> CliResult<ExitCode> {
    let shown = node::parse_events(&args.events)?;
    let node = g.node()?;
    let who = node.whoami()?;
    let target = args.scope.resolve_target(&node)?;
    let keys = crate::keyfile::KeySource::new(args.key_file.as_deref())?;
    let first = node.read_opened(target, &keys)?;
    let clock_khz = node.clock_khz(&who)?;
    if args.csv {
        emit("scope,id,cycle,interval_ms,kind,name,value\n")?;
    }
    let Some(ms) = args.interval_ms else {
        let d = derived::compute(&first.values, first.cycle, clock_khz);
        print(
            args,
            &Sample {
                target,
                cycle: first.cycle,
                interval_ms: None,
                values: &first.values,
                shown: &shown,
                derived: &d,
                sealed: first.sealed,
            },
        )?;
        return Ok(ExitCode::SUCCESS);
    };
    let period = Duration::from_millis(ms.max(1));
    let mut prev: Reading = first;
    let mut next = Instant::now() + period;
    let mut n = 0;
    while args.count.is_none_or(|k| n < k) {
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        next += period;
        let cur = node.read_opened(target, &keys)?;
        let d = node::delta(&cur.values, &prev.values);
        let metrics = derived::compute(&d, cur.cycle.saturating_sub(prev.cycle), clock_khz);
        print(
            args,
            &Sample {
                target,
                cycle: cur.cycle,
                interval_ms: Some(ms),
                values: &d,
                shown: &shown,
                derived: &metrics,
                sealed: cur.sealed,
            },
        )?;
        prev = cur;
        n += 1;
    }
    Ok(ExitCode::SUCCESS)
}

fn name(id: u16) -> &'static str {
    events::by_id(id).map_or("?", |e| e.name)
}

/// Kind and id of a target as the JSON and CSV schemas name them.
fn kind_id(t: Target) -> (ScopeKind, u32, Option<u64>) {
    match t {
        Target::Scope(Scope::System) => (ScopeKind::System, 0, None),
        Target::Scope(Scope::Vm(vm)) => (ScopeKind::Vm, vm, None),
        Target::Scope(Scope::Ctx(ctx)) => (ScopeKind::Ctx, ctx, None),
        Target::Instance { ctx, created_cycle } => (ScopeKind::Ctx, ctx, Some(created_cycle)),
    }
}

impl ScopeKind {
    /// The name in CSV and text.
    fn name(self) -> &'static str {
        match self {
            ScopeKind::Vm => "vm",
            ScopeKind::Ctx => "ctx",
            ScopeKind::System => "system",
        }
    }
}

/// What a reading reads, in `gpupm stat`'s JSON and CSV.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ScopeKind {
    /// A VM.
    Vm,
    /// A context (an id's newest instance, or one instance).
    Ctx,
    /// The whole device.
    System,
}

/// One reading of `gpupm stat --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct StatJson {
    /// What was read.
    pub scope: ScopeKind,
    /// VM or context id (0 for the system).
    pub id: u32,
    /// The context instance read (`--ctx ID@CYCLE`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_cycle: Option<u64>,
    /// Device cycle of the scope's last commit.
    pub cycle: u64,
    /// The interval (`-I MS`); absent for one-shot totals.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval_ms: Option<u64>,
    /// The chosen events: cumulative totals, or the interval's deltas.
    pub events: BTreeMap<&'static str, u64>,
    /// Derived metrics over the same span: `sm_utilisation`, `ipc`, `cpi`,
    /// `l1_hit_rate`, `l2_hit_rate` (fractions and ratios),
    /// `dram_bytes_per_s`, `pcie_bytes_per_s`; those without data in the
    /// span are left out.
    pub derived: BTreeMap<&'static str, f64>,
    /// A confidential scope: `events` and `derived` are empty. Present
    /// only when true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sealed: bool,
}

/// The JSON object of one sample.
fn to_json(s: &Sample<'_>) -> StatJson {
    let (kind, id, created_cycle) = kind_id(s.target);
    let mut out = StatJson {
        scope: kind,
        id,
        created_cycle,
        cycle: s.cycle,
        interval_ms: s.interval_ms,
        events: BTreeMap::new(),
        derived: BTreeMap::new(),
        sealed: s.sealed,
    };
    if !s.sealed {
        out.events = s
            .shown
            .iter()
            .map(|&e| (name(e), s.values[usize::from(e)]))
            .collect();
        out.derived = s.derived.iter().map(|m| (m.name, m.value)).collect();
    }
    out
}

fn print(args: &Args, s: &Sample<'_>) -> CliResult {
    let (kind, id, created_cycle) = kind_id(s.target);
    let kind = kind.name();
    let id = match created_cycle {
        Some(c) => format!("{id}@{c}"),
        None => id.to_string(),
    };
    let text = if args.json {
        crate::output::json_line(&to_json(s))?
    } else if args.csv {
        let iv = s.interval_ms.map(|m| m.to_string()).unwrap_or_default();
        let mut t = String::new();
        if !s.sealed {
            for &e in s.shown {
                t += &format!(
                    "{kind},{id},{},{iv},event,{},{}\n",
                    s.cycle,
                    name(e),
                    s.values[usize::from(e)]
                );
            }
            for m in s.derived {
                t += &format!(
                    "{kind},{id},{},{iv},derived,{},{}\n",
                    s.cycle, m.name, m.value
                );
            }
        }
        t
    } else {
        let head = match s.interval_ms {
            Some(ms) => format!(
                "{kind} {id}: {ms} ms interval ending at cycle {}\n",
                s.cycle
            ),
            None => format!(
                "Performance counter stats for {kind} {id} (last commit at cycle {}):\n\n",
                s.cycle
            ),
        };
        let mut t = head;
        if s.sealed {
            t += "  (confidential VM: counters are sealed; only the VM can decrypt them: --key-file)\n";
        }
        for &e in s.shown.iter().filter(|_| !s.sealed) {
            let info = events::by_id(e);
            t += &format!(
                "  {:>20}  {:<22} # {}\n",
                s.values[usize::from(e)],
                name(e),
                info.map_or("", |i| i.measure)
            );
        }
        if !s.derived.is_empty() && !s.sealed {
            t += "\n";
            for m in s.derived {
                t += &format!("  {:>20}  {}\n", derived::human(m), m.name);
            }
        }
        t + "\n"
    };
    Ok(emit(&text)?)
}
