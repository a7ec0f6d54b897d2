//! `gpupm stat`: chosen events of one scope, like `perf stat`, with derived
//! metrics; one-shot totals or per-interval deltas.
//!
//! # JSON schema (stable)
//! One-shot, one object:
//! `{"scope": "vm"|"ctx"|"system", "id": N, "cycle": C, "events": {NAME: VALUE}, "derived": {NAME: VALUE}}`
//! where `cycle` is the device cycle of the scope's last commit, `events`
//! holds the cumulative totals of the chosen events and `derived` the
//! metrics of [`crate::derived`] over the scope's whole life (rates over
//! `cycle`). Interval mode (`-I MS`): one such object per line per interval
//! with `"interval_ms": MS` added, `events` and `derived` holding the
//! deltas of that interval (rates over the cycles between the two reads).
//! A confidential scope adds `"sealed": true` and has empty `events` and
//! `derived`. A context instance (`--ctx ID@CYCLE`) is `"scope": "ctx"`,
//! `"id": ID` with `"created_cycle": CYCLE` added.
//!
//! # CSV
//! Header `scope,id,cycle,interval_ms,kind,name,value`; one row per event
//! (`kind` = `event`) and per derived metric (`kind` = `derived`);
//! `interval_ms` is empty in one-shot mode; `id` is `ID@CYCLE` for a
//! context instance.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use gpupm_uapi::events::{self, MAX_EVENTS};
use serde_json::{json, Map, Value};

use crate::derived::{self, Metric};
use crate::error::CliResult;
use crate::node::{self, Global, Node, Reading, ScopeArgs, Target};
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
    /// JSON (see the schema in `gpupm man`).
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// CSV.
    #[arg(long)]
    csv: bool,
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
    let node = Node::open(&g.tenant_node)?;
    let who = node.whoami()?;
    let target = args.scope.resolve_target(&node)?;
    let first = node.read(target)?;
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
        let cur = node.read(target)?;
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
fn kind_id(t: Target) -> (&'static str, u32, Option<u64>) {
    match t {
        Target::Scope(s) => {
            let (kind, id) = node::scope_name(s);
            (kind, id, None)
        }
        Target::Instance { ctx, created_cycle } => ("ctx", ctx, Some(created_cycle)),
    }
}

/// The JSON object of one sample (the schema above).
fn to_json(s: &Sample<'_>) -> Value {
    let (kind, id, created_cycle) = kind_id(s.target);
    let mut ev = Map::new();
    let mut de = Map::new();
    if !s.sealed {
        for &e in s.shown {
            ev.insert(name(e).into(), json!(s.values[usize::from(e)]));
        }
        for m in s.derived {
            de.insert(m.name.into(), json!(m.value));
        }
    }
    let mut o = json!({"scope": kind, "id": id, "cycle": s.cycle, "events": ev, "derived": de});
    if let Some(c) = created_cycle {
        o["created_cycle"] = json!(c);
    }
    if let Some(ms) = s.interval_ms {
        o["interval_ms"] = json!(ms);
    }
    if s.sealed {
        o["sealed"] = json!(true);
    }
    o
}

fn print(args: &Args, s: &Sample<'_>) -> CliResult {
    let (kind, id, created_cycle) = kind_id(s.target);
    let id = match created_cycle {
        Some(c) => format!("{id}@{c}"),
        None => id.to_string(),
    };
    let text = if args.json {
        format!("{}\n", to_json(s))
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
            t += "  (confidential VM: counters are sealed; only the VM can decrypt them)\n";
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
