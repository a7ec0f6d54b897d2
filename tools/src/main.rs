//! `gpupm`: the operator and tenant command line.
//!
//! Exit codes: 0 success, 1 the command ran but found a problem (e.g. a
//! ledger mismatch), 2 bad usage or an environment error.

mod events;
mod output;
mod simulate;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "gpupm", version, about = "GPU performance monitoring: operators' and tenants' tools")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Simulate a scenario in-process and print per-VM and per-context
    /// totals beside the device's ledger.
    Simulate(simulate::Args),
    /// List the event catalogue with units and descriptions.
    Events(events::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Simulate(a) => simulate::run(&a),
        Command::Events(a) => events::run(&a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("gpupm: {e}");
            ExitCode::from(2)
        }
    }
}
