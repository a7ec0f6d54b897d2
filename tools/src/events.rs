//! `gpupm events`: the event catalogue.

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
    /// Hardware unit type that counts it (e.g. `sm`, `l2`).
    pub unit_type: &'static str,
    /// A multi-bit event (counted through a 6-bit accumulator).
    pub multibit: bool,
    /// `partition`: counted per partition/VM/context; `device`: device
    /// level only.
    pub scope: &'static str,
    /// What one count measures.
    pub unit: &'static str,
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
                unit_type: e.unit.name(),
                multibit: e.multibit,
                scope: scope_name(e.unit.scope()),
                unit: e.measure,
                description: e.description,
            })
            .collect();
        crate::output::emit(&crate::output::json_line(&list)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut text = format!(
        "{:>3}  {:<22} {:<7} {:<10} {:<11} DESCRIPTION\n",
        "ID", "NAME", "UNIT", "SCOPE", "COUNTS"
    );
    for e in CATALOGUE {
        text += &format!(
            "{:>3}  {:<22} {:<7} {:<10} {:<11} {}\n",
            e.id,
            e.name,
            e.unit.name(),
            scope_name(e.unit.scope()),
            e.measure,
            e.description
        );
    }
    crate::output::emit(&text)?;
    Ok(ExitCode::SUCCESS)
}
