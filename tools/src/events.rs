//! `gpupm events`: the event catalogue.

use std::process::ExitCode;

use gpupm_uapi::events::{Scope, CATALOGUE};

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

/// Runs the command.
pub fn run(args: &Args) -> Result<ExitCode, String> {
    if args.json {
        let list: Vec<serde_json::Value> = CATALOGUE
            .iter()
            .map(|e| {
                serde_json::json!({
                    "id": e.id, "name": e.name, "unit_type": e.unit.name(), "multibit": e.multibit,
                    "scope": scope_name(e.unit.scope()), "unit": e.measure, "description": e.description,
                })
            })
            .collect();
        crate::output::emit(&format!("{}\n", serde_json::Value::Array(list)))?;
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
