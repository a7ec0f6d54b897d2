//! `gpupm`: the operator and tenant command line.
//!
//! Exit codes: 0 success, 1 the command ran but found a problem (e.g. a
//! ledger mismatch, an unhealthy daemon), 2 bad usage or an environment
//! error (no daemon, permission denied, unknown event, a scope that is not
//! the caller's). Errors are one line on stderr: `gpupm: CAUSE`.

mod bmc;
mod cc;
mod ccsession;
mod cpi;
mod demo;
mod derived;
mod dmon;
mod duration;
mod error;
mod events;
mod gen;
mod health;
mod interval;
mod keyfile;
mod list;
mod node;
mod numfmt;
mod output;
mod plan;
mod progress;
mod ranges;
mod record;
mod report;
mod ri;
mod schema;
mod signals;
mod simulate;
mod stat;
mod top;
mod trace;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::error::CliError;

#[derive(Parser, Debug)]
#[command(
    name = "gpupm",
    version,
    about = "GPU performance monitoring: operators' and tenants' tools",
    max_term_width = 80
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
    Demo(demo::Args),
    /// Partitions (admin), VMs and contexts visible to you.
    List(list::Args),
    /// Event totals and derived metrics of a VM, context or the device.
    Stat(stat::Args),
    /// Full-screen live view of VMs and contexts.
    Top(top::Args),
    /// One line per interval per VM, for scripts.
    Dmon(dmon::Args),
    /// Capture a stream session (and with --samples a sampling session)
    /// into a file.
    Record(record::Args),
    /// Summarise a recording, or print its merged trace (--trace).
    Report(report::Args),
    /// Sample-buffer sizes of a scenario, per partition and record type.
    Plan(plan::Args),
    /// Sample one of your contexts: kernels and hot blocks with
    /// instructions, cycles and CPI.
    Cpi(cpi::Args),
    /// Runtime instrumentation of one of your contexts: report groups of
    /// samples, emits and aborts.
    Ri(ri::Args),
    /// Marked ranges on one of your contexts: add, list (hottest first), rm.
    Ranges(ranges::Args),
    /// The call graph of one of your contexts, from its ranges' crossings.
    Callgraph(ranges::GraphArgs),
    /// Daemon and device health (admin).
    Health(health::Args),
    /// Device-level counters through the out-of-band mailbox (admin).
    Bmc(bmc::Args),
    /// A confidential VM's session: establish, status, rekey (the VM's
    /// tenant).
    Cc(cc::Args),
    /// Simulate a scenario in-process and print per-VM and per-context
    /// totals beside the device's ledger.
    Simulate(simulate::Args),
    /// List the event catalogue with units and descriptions.
    Events(events::Args),
    /// Print a shell completion script.
    Completions(gen::CompletionArgs),
    /// Print (or write) the man pages.
    Man(gen::ManArgs),
}

/// The command line, parsed. The `--json` schemas are generated into the
/// long help only when help is asked for: every other run would pay for
/// generating them.
fn parse() -> Cli {
    let mut cmd = Cli::command();
    if std::env::args_os().any(|a| a == "--help" || a == "help") {
        cmd = schema::with_json_schemas(cmd);
    }
    let matches = cmd.get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

fn main() -> ExitCode {
    let cli = parse();
    let g = &cli.global;
    let result = match &cli.command {
        Command::Demo(a) => demo::run(a),
        Command::List(a) => list::run(g, a),
        Command::Stat(a) => stat::run(g, a),
        Command::Top(a) => top::run(g, a),
        Command::Dmon(a) => dmon::run(g, a),
        Command::Record(a) => record::run(g, a),
        Command::Report(a) => report::run(a),
        Command::Plan(a) => plan::run(a).map_err(CliError::from),
        Command::Cpi(a) => cpi::run(g, a),
        Command::Ri(a) => ri::run(g, a),
        Command::Ranges(a) => ranges::run(g, a),
        Command::Callgraph(a) => ranges::run_graph(g, a),
        Command::Health(a) => health::run(g, a),
        Command::Bmc(a) => bmc::run(g, a),
        Command::Cc(a) => cc::run(g, a),
        Command::Simulate(a) => simulate::run(a).map_err(CliError::from),
        Command::Events(a) => events::run(a).map_err(CliError::from),
        Command::Completions(a) => gen::completions::<Cli>(a),
        Command::Man(a) => gen::man::<Cli>(a),
    };
    match result {
        Ok(code) => code,
        Err(e) if e.code == 0 => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpupm: {e}");
            ExitCode::from(e.code)
        }
    }
}
