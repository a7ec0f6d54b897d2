//! `gpupm events`: the event catalogue.
//!
//! "Unit" means one thing in gpupm's output: what a value is measured in
//! (`bytes`, `cycles`, …), as gpupm prints it. The hardware that counts an
//! event is its `source` (`sm`, `l2`, `fb`, …). A multi-bit event's device
//! count is worth `scale` units (a `fb_bytes` count is 32 bytes); every
//! command prints values already multiplied, in `unit`.

use std::process::ExitCode;

use gpupm_uapi::events::{Scope, CATALOGUE};
use schemars::JsonSchema;
use serde::Serialize;

/// Arguments of `gpupm events`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

fn scope_name(s: Scope) -> &'static str {
    match s {
        Scope::Partition => "partition",
        Scope::ContextFiltered => "partition",
        Scope::Device => "device",
    }
}

/// One catalogue entry of `gpupm events --json` (an array of them).
#[derive(Debug, Serialize, JsonSchema)]
pub struct EventJson {
    /// Event id (the index in counter arrays).
    pub id: u16,
    /// Event name.
    pub name: &'static str,
    /// The hardware that counts it (`sm`, `l2`, `fb`, `ce`, `pcie`,
    /// `nvlink`).
    pub source: &'static str,
    /// Deprecated: `source` (kept until the next minor release).
    pub unit_type: &'static str,
    /// A multi-bit event (counted through a 6-bit accumulator).
    pub multibit: bool,
    /// `partition`: counted per partition/VM/context; `device`: device
    /// level only.
    pub scope: &'static str,
    /// What gpupm's values of the event are measured in.
    pub unit: &'static str,
    /// Units one device count is worth (32 for multi-bit events): the ABI's
    /// counter arrays hold device counts; gpupm prints counts × scale.
    pub scale: u64,
    /// What the event counts.
    pub description: &'static str,
}

/// Runs the command.
pub fn run(args: &Args) -> Result<ExitCode, String> {
    if args.json {
        let list: Vec<EventJson> = CATALOGUE
            .iter()
            .map(|e| EventJson {
                id: e.id,
                name: e.name,
                source: e.unit.name(),
                unit_type: e.unit.name(),
                multibit: e.multibit,
                scope: scope_name(e.unit.scope()),
                unit: e.unit_name(),
                scale: e.scale(),
                description: e.description,
            })
            .collect();
        crate::output::emit(&crate::output::json_line(&list)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut text = format!(
        "{:>3}  {:<22} {:<7} {:<10} {:<11} {:>5}  DESCRIPTION\n",
        "ID", "NAME", "SOURCE", "SCOPE", "UNIT", "SCALE"
    );
    for e in CATALOGUE {
        text += &format!(
            "{:>3}  {:<22} {:<7} {:<10} {:<11} {:>5}  {}\n",
            e.id,
            e.name,
            e.unit.name(),
            scope_name(e.unit.scope()),
            e.unit_name(),
            e.scale(),
            e.description
        );
    }
    crate::output::emit(&text)?;
    Ok(ExitCode::SUCCESS)
}
