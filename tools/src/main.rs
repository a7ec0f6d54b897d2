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
mod gpu;
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

/// The node options are accepted before the subcommand too (`gpupm
/// --tenant-node PATH stat`), but are global only inside the subcommands
/// that talk to the nodes ([`OnNodes`]): clap would otherwise list them in
/// the help of every subcommand, `simulate` and `plan` included. Given
/// before the subcommand, clap carries the value into the subcommand's
/// own copy (same argument ids), which is the one the commands read.
#[derive(Parser, Debug)]
#[command(
    name = "gpupm",
    version,
    about = "GPU performance monitoring: operators' and tenants' tools",
    max_term_width = 80,
    mut_arg("tenant_node", |a| a.global(false)),
    mut_arg("node_dir", |a| a.global(false)),
    mut_arg("pages_socket", |a| a.global(false)),
    mut_arg("no_pages", |a| a.global(false))
)]
struct Cli {
    #[command(flatten)]
    nodes: node::Global,
    #[command(subcommand)]
    command: Command,
}

/// A subcommand that talks to the nodes: its own arguments and where the
/// nodes are.
#[derive(clap::Args, Debug)]
struct OnNodes<A: clap::Args> {
    #[command(flatten)]
    args: A,
    #[command(flatten)]
    nodes: node::Global,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run driver and daemon on private directories with a live view, then
    /// print the final totals beside the device's ledger.
    Demo(demo::Args),
    /// Partitions (admin), VMs and contexts visible to you.
    List(OnNodes<list::Args>),
    /// Event totals and derived metrics of a VM, context or the device.
    Stat(OnNodes<stat::Args>),
    /// Full-screen live view of VMs and contexts.
    Top(OnNodes<top::Args>),
    /// One line per interval per VM, for scripts.
    Dmon(OnNodes<dmon::Args>),
    /// Capture a stream session (and with --samples a sampling session)
    /// into a file.
    Record(OnNodes<record::Args>),
    /// Summarise a recording, or print its merged trace (--trace).
    Report(report::Args),
    /// Sample-buffer sizes of a scenario, per partition and record type.
    Plan(plan::Args),
    /// Sample one of your contexts: kernels and hot blocks with
    /// instructions, cycles and CPI.
    Cpi(OnNodes<cpi::Args>),
    /// Runtime instrumentation of one of your contexts: report groups of
    /// samples, emits and aborts.
    Ri(OnNodes<ri::Args>),
    /// Marked ranges on one of your contexts: add, list (hottest first), rm.
    Ranges(OnNodes<ranges::Args>),
    /// The call graph of one of your contexts, from its ranges' crossings.
    Callgraph(OnNodes<ranges::GraphArgs>),
    /// Daemon and device health (admin).
    Health(OnNodes<health::Args>),
    /// What a BMC reads out of band: device counters, the host driver's
    /// state, idle time and the OOB channel's VMs (admin).
    Bmc(OnNodes<bmc::Args>),
    /// A confidential VM's session: establish, status, rekey (the VM's
    /// tenant).
    Cc(OnNodes<cc::Args>),
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
    let result = match &cli.command {
        Command::Demo(a) => demo::run(a),
        Command::List(a) => list::run(&a.nodes, &a.args),
        Command::Stat(a) => stat::run(&a.nodes, &a.args),
        Command::Top(a) => top::run(&a.nodes, &a.args),
        Command::Dmon(a) => dmon::run(&a.nodes, &a.args),
        Command::Record(a) => record::run(&a.nodes, &a.args),
        Command::Report(a) => report::run(a),
        Command::Plan(a) => plan::run(a).map_err(CliError::from),
        Command::Cpi(a) => cpi::run(&a.nodes, &a.args),
        Command::Ri(a) => ri::run(&a.nodes, &a.args),
        Command::Ranges(a) => ranges::run(&a.nodes, &a.args),
        Command::Callgraph(a) => ranges::run_graph(&a.nodes, &a.args),
        Command::Health(a) => health::run(&a.nodes, &a.args),
        Command::Bmc(a) => bmc::run(&a.nodes, &a.args),
        Command::Cc(a) => cc::run(&a.nodes, &a.args),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_options_before_the_subcommand_reach_its_own() {
        let before = [
            "gpupm",
            "--no-pages",
            "--pages-socket",
            "/p",
            "stat",
            "--vm",
            "1",
        ];
        let Command::Stat(stat) = Cli::try_parse_from(before).unwrap().command else {
            panic!("not stat");
        };
        assert!(stat.nodes.no_pages);
        assert_eq!(stat.nodes.pages_socket, std::path::Path::new("/p"));
        assert_eq!(
            stat.nodes.tenant_node,
            std::path::Path::new(node::DEFAULT_TENANT_NODE)
        );
        let after = [
            "gpupm",
            "--tenant-node",
            "/a",
            "stat",
            "--vm",
            "1",
            "--tenant-node",
            "/b",
        ];
        let Command::Stat(stat) = Cli::try_parse_from(after).unwrap().command else {
            panic!("not stat");
        };
        assert_eq!(stat.nodes.tenant_node, std::path::Path::new("/b"));
    }
}
