//! `gpupm`: the operator and tenant command line.
//!
//! Exit codes: 0 success, 1 the command ran but found a problem (e.g. a
//! ledger mismatch, an unhealthy daemon), 2 bad usage or an environment
//! error (no daemon, permission denied, unknown event, a scope that is not
//! the caller's). Errors are one line on stderr: `gpupm: CAUSE`.

mod bmc;
mod demo;
mod derived;
mod dmon;
mod duration;
mod error;
mod events;
mod gen;
mod health;
mod list;
mod node;
mod output;
mod progress;
mod record;
mod report;
mod schema;
mod signals;
mod simulate;
mod stat;
mod top;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::error::CliError;

#[derive(Parser, Debug)]
#[command(
    name = "gpupm",
    version,
    about = "GPU performance monitoring: operators' and tenants' tools"
)]
struct Cli {
    #[command(flatten)]
    global: node::Global,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run driver and daemon on private directories with a live view, then
    /// print the final totals beside the device's ledger.
    #[command(after_long_help = schema::long_help::<demo::summary::DemoJson>("one object"))]
    Demo(demo::Args),
    /// Partitions (admin), VMs and contexts visible to you.
    #[command(after_long_help = schema::long_help::<list::ListJson>("one object"))]
    List(list::Args),
    /// Event totals and derived metrics of a VM, context or the device.
    #[command(after_long_help = schema::long_help::<stat::StatJson>(
        "one object; with -I, one per line per interval"
    ))]
    Stat(stat::Args),
    /// Full-screen live view of VMs and contexts.
    Top(top::Args),
    /// One line per interval per VM, for scripts.
    #[command(after_long_help = schema::long_help::<dmon::DmonJson>(
        "one object per line per interval"
    ))]
    Dmon(dmon::Args),
    /// Capture a stream session into a file.
    Record(record::Args),
    /// Summarise a recording.
    #[command(after_long_help = schema::long_help::<report::ReportJson>("one object"))]
    Report(report::Args),
    /// Daemon and device health (admin).
    #[command(after_long_help = schema::long_help::<health::HealthJson>("one object"))]
    Health(health::Args),
    /// Device-level counters through the out-of-band mailbox (admin).
    #[command(after_long_help = schema::long_help::<bmc::BmcJson>("one object"))]
    Bmc(bmc::Args),
    /// Simulate a scenario in-process and print per-VM and per-context
    /// totals beside the device's ledger.
    #[command(after_long_help = schema::long_help::<simulate::SimulateJson>("one object"))]
    Simulate(simulate::Args),
    /// List the event catalogue with units and descriptions.
    #[command(after_long_help = schema::long_help::<Vec<events::EventJson>>("one array"))]
    Events(events::Args),
    /// Print a shell completion script.
    Completions(gen::CompletionArgs),
    /// Print (or write) the man pages.
    Man(gen::ManArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let g = &cli.global;
    let result = match &cli.command {
        Command::Demo(a) => demo::run(a),
        Command::List(a) => list::run(g, a),
        Command::Stat(a) => stat::run(g, a),
        Command::Top(a) => top::run(g, a),
        Command::Dmon(a) => dmon::run(g, a),
        Command::Record(a) => record::run(g, a),
        Command::Report(a) => report::run(a),
        Command::Health(a) => health::run(g, a),
        Command::Bmc(a) => bmc::run(g, a),
        Command::Simulate(a) => simulate::run(a).map_err(CliError::from),
        Command::Events(a) => events::run(a).map_err(CliError::from),
        Command::Completions(a) => gen::completions::<Cli>(a),
        Command::Man(a) => gen::man::<Cli>(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("gpupm: {e}");
            ExitCode::from(e.code)
        }
    }
}
