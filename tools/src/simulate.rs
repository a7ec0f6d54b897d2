//! `gpupm simulate`: runs a scenario on the in-process device model with the
//! host's handshakes, flushes, and prints every VM's and context's block
//! totals beside what the device's ledger says they must be.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use gpupm_driver::host::{self, Host};
use gpupm_driver::model::{Device, EngineKind};
use gpupm_driver::scenario::{self, Scenario};
use gpupm_uapi::events::{self, MAX_EVENTS};
use gpupm_uapi::ioctl::ledger_scope;
use gpupm_uapi::layout::SYSTEM_BLOCK_SLOT;
use gpupm_uapi::regs::{self as r, ctx_state};
use serde_json::{json, Map, Value};

/// Arguments of `gpupm simulate`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Scenario file (TOML); the built-in H100-class scenario if omitted.
    #[arg(long)]
    scenario: Option<PathBuf>,
    /// Simulated time in milliseconds.
    #[arg(long, default_value_t = 50)]
    duration_ms: u64,
    /// Events shown in the table (comma-separated catalogue names).
    #[arg(
        long,
        default_value = "sm_inst_executed,sm_threads_active,l2_hit,fb_bytes,pcie_rx_bytes"
    )]
    events: String,
    /// Print one JSON document instead of tables.
    #[arg(long)]
    json: bool,
}

struct Row {
    scope: &'static str,
    id: u32,
    state: &'static str,
    block: [u64; MAX_EVENTS],
    ledger: [u64; MAX_EVENTS],
}

impl Row {
    fn exact(&self) -> bool {
        self.block == self.ledger
    }
}

/// Runs the command.
pub fn run(args: &Args) -> Result<ExitCode, String> {
    let scenario = match &args.scenario {
        Some(path) => scenario::parse_file(path).map_err(|e| e.to_string())?,
        None => scenario::builtin(),
    };
    let shown = parse_events(&args.events)?;
    let mut dev =
        Device::new(&scenario, EngineKind::Batched, true).map_err(|e| format!("scenario: {e}"))?;
    let mut host = Host::new();
    host.release_destroyed = false;
    let cycles = args.duration_ms * u64::from(scenario.clock.khz);
    let step = u64::from(scenario.clock.khz) / 10; // 100 µs of device time
    let started = Instant::now();
    let mut handshakes = 0;
    while dev.now() < cycles {
        dev.advance(step.min(cycles - dev.now()))
            .map_err(|e| e.to_string())?;
        handshakes += host
            .service(&mut dev)
            .map_err(|(_, e)| e.to_string())?
            .handshakes;
    }
    host::settle(&mut dev, &mut host).map_err(|e| e.to_string())?;
    let wall = started.elapsed().as_secs_f64();
    let rows = collect(&mut dev, &scenario)?;
    let fallbacks: u64 = (1..r::MAX_PARTITION_SLOTS)
        .map(|p| dev.read_reg(r::part(p, r::PART_FALLBACKS), 8).unwrap_or(0))
        .sum();
    let all_exact = rows.iter().all(Row::exact);
    let summary = format!(
        "{}: {:.1} ms simulated ({} cycles) in {:.2} s wall ({:.0}x real time); {} host-driven switches, {} fallbacks",
        scenario.name,
        dev.now() as f64 / f64::from(scenario.clock.khz),
        dev.now(),
        wall,
        dev.now() as f64 / f64::from(scenario.clock.khz) / 1000.0 / wall.max(1e-9),
        handshakes,
        fallbacks
    );
    let text = if args.json {
        format!("{}\n", to_json(&rows, &summary, all_exact))
    } else {
        table(&rows, &shown, &summary, all_exact)
    };
    crate::output::emit(&text)?;
    Ok(if all_exact {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn parse_events(list: &str) -> Result<Vec<u16>, String> {
    list.split(',')
        .map(|n| {
            events::by_name(n.trim())
                .map(|e| e.id)
                .ok_or_else(|| format!("unknown event \"{}\" (see `gpupm events`)", n.trim()))
        })
        .collect()
}

fn collect(dev: &mut Device, s: &Scenario) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    let expected = |dev: &mut Device, scope, id| {
        dev.ledger_totals(scope, id)
            .map(|t| t.expected_committed())
            .map_err(|e| e.to_string())
    };
    rows.push(Row {
        scope: "system",
        id: 0,
        state: "",
        block: dev.block(SYSTEM_BLOCK_SLOT).counters,
        ledger: expected(dev, ledger_scope::SYSTEM, 0)?,
    });
    let contexts: Vec<(u32, u32, u32)> = dev.contexts().collect();
    for vm in &s.vms {
        rows.push(Row {
            scope: "vm",
            id: vm.id,
            state: "",
            block: dev.block(vm.id).counters,
            ledger: expected(dev, ledger_scope::VM, vm.id)?,
        });
        for &(ctx, _, state) in contexts.iter().filter(|c| c.1 == vm.id) {
            let slot = dev.ctx_slot(ctx).ok_or("context without a block")?;
            rows.push(Row {
                scope: "context",
                id: ctx,
                state: if state == ctx_state::ACTIVE {
                    "active"
                } else {
                    "destroyed"
                },
                block: dev.block(slot).counters,
                ledger: expected(dev, ledger_scope::CONTEXT, ctx)?,
            });
        }
    }
    Ok(rows)
}

fn table(rows: &[Row], shown: &[u16], summary: &str, all_exact: bool) -> String {
    let mut out = format!(
        "{summary}\nblock = counted by the hierarchy into the memory block; \
         ledger = what the device generated (after masks, /32 for multi-bit)\n{:<11} {:>5} {:<10}",
        "SCOPE", "ID", "STATE"
    );
    for &e in shown {
        out += &format!(
            " {:>20} {:>14}",
            events::by_id(e).map_or("?", |i| i.name),
            "ledger"
        );
    }
    out += &format!(" {:>6}\n", "EXACT");
    for row in rows {
        let scope = if row.scope == "context" {
            "  context"
        } else {
            row.scope
        };
        out += &format!("{:<11} {:>5} {:<10}", scope, row.id, row.state);
        for &e in shown {
            out += &format!(
                " {:>20} {:>14}",
                row.block[usize::from(e)],
                row.ledger[usize::from(e)]
            );
        }
        out += &format!(" {:>6}\n", if row.exact() { "yes" } else { "NO" });
    }
    out += if all_exact {
        "all blocks equal the ledger on every event\n"
    } else {
        "MISMATCH between blocks and ledger\n"
    };
    out
}

fn totals(values: &[u64; MAX_EVENTS]) -> Value {
    let mut m = Map::new();
    for e in events::CATALOGUE {
        m.insert(e.name.to_string(), json!(values[usize::from(e.id)]));
    }
    Value::Object(m)
}

fn to_json(rows: &[Row], summary: &str, all_exact: bool) -> Value {
    let system = &rows[0];
    let mut vms = Vec::new();
    for row in &rows[1..] {
        match row.scope {
            "vm" => vms.push(json!({
                "vm": row.id, "totals": totals(&row.block), "ledger": totals(&row.ledger), "exact": row.exact(), "contexts": [],
            })),
            _ => {
                if let Some(Value::Array(ctxs)) = vms.last_mut().and_then(|v| v.get_mut("contexts")) {
                    ctxs.push(json!({
                        "ctx": row.id, "state": row.state, "totals": totals(&row.block),
                        "ledger": totals(&row.ledger), "exact": row.exact(),
                    }));
                }
            }
        }
    }
    json!({
        "summary": summary,
        "system": {"totals": totals(&system.block), "ledger": totals(&system.ledger), "exact": system.exact()},
        "vms": vms,
        "ledger_match": all_exact,
    })
}
