//! `gpupm demo`: the whole system on private directories — `gpupm-driver`
//! (step clock driven by the demo at wall-clock pace, the built-in or a
//! given scenario) and `gpupmd` (a private config, metrics on an ephemeral
//! loopback port, logs to files) — a live view until Ctrl-C or
//! `--duration`, then a flush, the final totals beside the ledger, and
//! teardown (SIGTERM, wait, remove the directories).
//!
//! The demo plays every tenant, confidential ones too: it gives each
//! confidential VM that has no key a fresh random one for this run, in
//! its private copy of the scenario, and serves that copy with
//! `--insecure-scenario-keys` (`docs/confidential.md`: a key in a scenario
//! protects nothing from the host; it is what a demo needs).

pub mod clock;
pub mod procs;
pub mod summary;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use gpupm_client::DevNode;
use gpupm_driver::scenario;

use self::clock::Stepper;
use self::procs::{find_binary, Proc, TempDir};
use crate::error::{CliError, CliResult};
use crate::node::Node;
use crate::output::emit;
use crate::top::{self, sample::Sampler, LiveOpts, SortKey};

/// Arguments of `gpupm demo`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// How long to run (e.g. 5s); default until Ctrl-C (or `q` in the view).
    #[arg(long, value_parser = crate::duration::parse)]
    duration: Option<Duration>,
    /// No live view; print the final summary only.
    #[arg(long)]
    headless: bool,
    /// Print the final summary as JSON.
    #[arg(long)]
    json: bool,
    /// Scenario file (TOML); the built-in H100-class scenario if omitted.
    #[arg(long, value_name = "FILE")]
    scenario: Option<PathBuf>,
}

/// Runs the command.
pub fn run(args: &Args) -> CliResult<ExitCode> {
    if let Some(p) = &args.scenario {
        // Bad input is reported before anything starts.
        scenario::parse_file(p).map_err(|e| CliError::usage(e.to_string()))?;
    }
    let (driver_bin, daemon_bin) = preflight()?;
    crate::signals::install()?;
    let tmp = TempDir::new()?;
    let scenario_path = keyed_scenario(args, &tmp)?;
    let scen =
        scenario::parse_file(&scenario_path).map_err(|e| CliError::runtime(e.to_string()))?;
    let (mut driver, mut daemon) = start(&tmp, &scenario_path, &driver_bin, &daemon_bin)?;

    let dev =
        DevNode::open(&tmp.join("dev")).map_err(|e| CliError::usage(crate::error::one_line(e)))?;
    let mut stepper = Stepper::new(dev)?;
    let node_path = tmp.join("tenant").join("node");
    let deadline = args.duration.map(|d| Instant::now() + d);
    let interactive = !args.headless && std::io::stdout().is_terminal();
    stepper.restart();
    if interactive {
        let pages = tmp
            .join("pages")
            .join(gpupm_client::paths::PAGES_SOCKET_NAME);
        let sampler = Sampler::new(Node::open_with_pages(&node_path, Some(pages))?)?;
        let opts = LiveOpts {
            interval: Duration::from_millis(1000),
            sort: SortKey::Id,
            contexts: true,
            headless_frames: None,
            title: format!("gpupm demo — {}", scen.name),
            hook_every: Duration::from_millis(20),
        };
        top::live(sampler, &opts, &mut || {
            stepper.catch_up(&mut daemon, Duration::from_millis(15))?;
            Ok(!crate::signals::stopped() && deadline.is_none_or(|d| Instant::now() < d))
        })?;
    } else {
        let mut spin =
            crate::progress::Spinner::new(format!("running {} (Ctrl-C to stop)", scen.name));
        while !crate::signals::stopped() && deadline.is_none_or(|d| Instant::now() < d) {
            spin.tick();
            stepper.catch_up(&mut daemon, Duration::from_millis(50))?;
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    stepper.flush_and_settle(&mut daemon)?;
    let node = Node::open(&node_path)?;
    let sum = summary::collect(&node, &stepper.dev, &scen)?;
    drop(node);
    let text = if args.json {
        crate::output::json_line(&summary::to_json(&sum))?
    } else {
        summary::table(&sum)
    };
    if let Some(st) = daemon.stop().filter(|s| !s.success()) {
        return Err(CliError::runtime(format!(
            "gpupmd exited with {st}: {}",
            daemon.why()
        )));
    }
    drop(stepper);
    if let Some(st) = driver.stop().filter(|s| !s.success()) {
        return Err(CliError::runtime(format!(
            "gpupm-driver exited with {st}: {}",
            driver.why()
        )));
    }
    drop(tmp);
    emit(&text)?;
    Ok(if sum.ledger_match {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The demo's private copy of the scenario (`args.scenario` or the
/// built-in one), with a fresh random key for every confidential VM
/// without one; its path.
fn keyed_scenario(args: &Args, tmp: &TempDir) -> CliResult<PathBuf> {
    let text = match &args.scenario {
        Some(p) => std::fs::read_to_string(p)
            .map_err(|e| CliError::usage(format!("cannot read {}: {e}", p.display())))?,
        None => scenario::BUILTIN_TOML.to_string(),
    };
    let mut doc: toml::Table = text
        .parse()
        .map_err(|e| CliError::usage(format!("the scenario: {e}")))?;
    if let Some(vms) = doc.get_mut("vm").and_then(toml::Value::as_array_mut) {
        for vm in vms.iter_mut().filter_map(toml::Value::as_table_mut) {
            let confidential = vm.get("confidential").and_then(toml::Value::as_bool) == Some(true);
            if confidential && !vm.contains_key("confidential_key") {
                let mut key = zeroize::Zeroizing::new([0u8; 32]);
                getrandom::getrandom(key.as_mut_slice())
                    .map_err(|e| CliError::runtime(format!("no randomness from the OS: {e}")))?;
                let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
                vm.insert("confidential_key".into(), toml::Value::String(hex));
            }
        }
    }
    let path = tmp.join("scenario.toml");
    let out = toml::to_string(&doc)
        .map_err(|e| CliError::runtime(format!("cannot write the scenario: {e}")))?;
    std::fs::write(&path, out)
        .map_err(|e| CliError::usage(format!("cannot write {}: {e}", path.display())))?;
    Ok(path)
}

/// Starts the driver (step clock) and the daemon (a private configuration)
/// on the private directory; returns once both are ready.
fn start(
    tmp: &TempDir,
    scenario_path: &Path,
    driver_bin: &Path,
    daemon_bin: &Path,
) -> CliResult<(Proc, Proc)> {
    let mut cmd = Command::new(driver_bin);
    // The demo compares every total with the device's debug ledger.
    cmd.args(["--clock", "step", "--debug-ledger", "--node-dir"])
        .arg(tmp.join("dev"))
        .arg("--scenario")
        .arg(scenario_path)
        .arg("--insecure-scenario-keys");
    let mut driver = Proc::spawn(
        "gpupm-driver",
        cmd,
        &tmp.join("driver.sock"),
        &tmp.join("driver.log"),
    )?;
    driver.wait_ready()?;
    let config = format!(
        "node_dir = {:?}\ntenant_dir = {:?}\nstate_dir = {:?}\n[metrics]\nlisten = \"127.0.0.1:0\"\n[health]\njournal_socket = {:?}\n[pages]\ndir = {:?}\n",
        tmp.join("dev"),
        tmp.join("tenant"),
        tmp.join("state"),
        tmp.join("no-journal"),
        tmp.join("pages"),
    );
    let cfg_path = tmp.join("gpupmd.toml");
    std::fs::write(&cfg_path, config)
        .map_err(|e| CliError::usage(format!("cannot write {}: {e}", cfg_path.display())))?;
    let mut cmd = Command::new(daemon_bin);
    cmd.arg("--config").arg(&cfg_path);
    let mut daemon = Proc::spawn(
        "gpupmd",
        cmd,
        &tmp.join("gpupmd.sock"),
        &tmp.join("gpupmd.log"),
    )?;
    daemon.wait_ready()?;
    Ok((driver, daemon))
}

/// The driver's and the daemon's binaries, once the demo can run here.
fn preflight() -> CliResult<(PathBuf, PathBuf)> {
    let driver_bin = find_binary("gpupm-driver")?;
    let daemon_bin = find_binary("gpupmd")?;
    if !nix::unistd::geteuid().is_root() {
        return Err(CliError::usage(
            "the demo mounts FUSE device nodes: run it as root",
        ));
    }
    if !std::path::Path::new("/dev/fuse").exists() {
        return Err(CliError::usage(
            "the demo needs /dev/fuse (FUSE is not available here)",
        ));
    }
    Ok((driver_bin, daemon_bin))
}
