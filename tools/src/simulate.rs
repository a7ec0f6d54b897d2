//! `gpupm simulate`: runs a scenario on the in-process device model with the
//! host's handshakes, flushes, and prints every VM's and context's block
//! totals beside what the device's ledger says they must be.

use std::collections::BTreeMap;
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
use schemars::JsonSchema;
use serde::Serialize;

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
    confidential: bool,
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
        "{}: {:.1} ms simulated ({} cycles) in {:.2} s wall ({}x real time); {} host-driven switches, {} fallbacks",
        scenario.name,
        dev.now() as f64 / f64::from(scenario.clock.khz),
        dev.now(),
        wall,
        crate::numfmt::two_significant(
            dev.now() as f64 / f64::from(scenario.clock.khz) / 1000.0 / wall.max(1e-9)
        ),
        handshakes,
        fallbacks
    );
    let text = if args.json {
        crate::output::json_line(&to_json(&rows, &summary, all_exact))?
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
        confidential: false,
        block: dev.block(SYSTEM_BLOCK_SLOT).counters,
        ledger: expected(dev, ledger_scope::SYSTEM, 0)?,
    });
    let contexts: Vec<(u32, u32, u32)> = dev.contexts().collect();
    for vm in &s.vms {
        let confidential = vm.is_confidential();
        rows.push(Row {
            scope: "vm",
            id: vm.id,
            state: if confidential { "confidential" } else { "" },
            confidential,
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
                confidential,
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

/// Totals by event name.
type Totals = BTreeMap<&'static str, u64>;

fn totals(values: &[u64; MAX_EVENTS]) -> Totals {
    events::CATALOGUE
        .iter()
        .map(|e| (e.name, values[usize::from(e.id)]))
        .collect()
}

/// `gpupm simulate --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SimulateJson {
    /// One line: simulated time, wall time, switches, fallbacks.
    pub summary: String,
    /// The system block.
    pub system: SimBlock,
    /// Every VM of the scenario, with its contexts.
    pub vms: Vec<SimVm>,
    /// Every block equals the ledger on every event.
    pub ledger_match: bool,
}

/// A block beside what the device's ledger says it must hold.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SimBlock {
    /// Counted by the hierarchy into the memory block, by event name.
    pub totals: Totals,
    /// What the device generated (after masks, /32 for multi-bit).
    pub ledger: Totals,
    /// `totals` equals `ledger`.
    pub exact: bool,
}

/// A VM's block and its contexts'.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SimVm {
    /// VM id.
    pub vm: u32,
    /// A confidential VM: its counts leave the device only as ciphertext
    /// and are not part of the system scope (the simulator is the device,
    /// so it shows them in the clear).
    pub confidential: bool,
    /// The VM's block.
    #[serde(flatten)]
    pub block: SimBlock,
    /// Its contexts still on the device.
    pub contexts: Vec<SimCtx>,
}

/// A context's block.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SimCtx {
    /// Context id.
    pub ctx: u32,
    /// `active` or `destroyed`.
    pub state: &'static str,
    /// The context's block.
    #[serde(flatten)]
    pub block: SimBlock,
}

fn block(row: &Row) -> SimBlock {
    SimBlock {
        totals: totals(&row.block),
        ledger: totals(&row.ledger),
        exact: row.exact(),
    }
}

fn to_json(rows: &[Row], summary: &str, all_exact: bool) -> SimulateJson {
    let mut vms: Vec<SimVm> = Vec::new();
    for row in rows.iter().skip(1) {
        match row.scope {
            "vm" => vms.push(SimVm {
                vm: row.id,
                confidential: row.confidential,
                block: block(row),
                contexts: Vec::new(),
            }),
            _ => {
                if let Some(vm) = vms.last_mut() {
                    vm.contexts.push(SimCtx {
                        ctx: row.id,
                        state: row.state,
                        block: block(row),
                    });
                }
            }
        }
    }
    SimulateJson {
        summary: summary.to_string(),
        system: rows.first().map_or_else(
            || SimBlock {
                totals: Totals::new(),
                ledger: Totals::new(),
                exact: true,
            },
            block,
        ),
        vms,
        ledger_match: all_exact,
    }
}
