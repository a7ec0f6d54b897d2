//! `gpupm bmc`: device-level counters through the out-of-band mailbox node
//! (`card0-oob`, `OOB_MBOX_*` registers only, the BMC's own mailbox) — what a BMC reads without the
//! daemon and without any host memory allocation.
//!
//! JSON: [`BmcJson`] (`gpupm bmc --help` shows the schema).

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use gpupm_uapi::events::CATALOGUE;
use gpupm_uapi::regs::{
    mbox_op, mbox_status, OOB_MBOX_ARG, OOB_MBOX_CMD, OOB_MBOX_DATA, OOB_MBOX_STATUS,
};
use schemars::JsonSchema;
use serde::Serialize;

use crate::error::{CliError, CliResult};
use crate::node::Global;
use crate::output::emit;

/// File name of the out-of-band node.
pub const OOB_NAME: &str = "card0-oob";

/// Arguments of `gpupm bmc`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// An open mailbox.
#[derive(Debug)]
pub struct Mailbox {
    file: File,
    path: PathBuf,
}

/// The one-line message for a node that cannot be opened.
pub fn open_error(path: &Path, e: &io::Error) -> CliError {
    match e.kind() {
        io::ErrorKind::NotFound => CliError::usage(format!(
            "no device node: {} does not exist (is gpupm-driver running?)",
            path.display()
        )),
        io::ErrorKind::PermissionDenied => CliError::usage(format!(
            "permission denied on {} (root or the gpupm-admin group only)",
            path.display()
        )),
        _ => CliError::usage(format!("cannot open {}: {e}", path.display())),
    }
}

impl Mailbox {
    /// Opens `node_dir/card0-oob`.
    pub fn open(node_dir: &Path) -> CliResult<Mailbox> {
        let path = node_dir.join(OOB_NAME);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| open_error(&path, &e))?;
        Ok(Mailbox { file, path })
    }

    fn io(&self, e: &io::Error) -> CliError {
        CliError::runtime(format!("{}: {e}", self.path.display()))
    }

    /// Runs one mailbox command and returns DATA.
    pub fn command(&self, op: u32, arg: u32) -> CliResult<u64> {
        self.file
            .write_all_at(&arg.to_le_bytes(), OOB_MBOX_ARG)
            .map_err(|e| self.io(&e))?;
        self.file
            .write_all_at(&op.to_le_bytes(), OOB_MBOX_CMD)
            .map_err(|e| self.io(&e))?;
        let mut st = [0u8; 4];
        self.file
            .read_exact_at(&mut st, OOB_MBOX_STATUS)
            .map_err(|e| self.io(&e))?;
        match u32::from_le_bytes(st) {
            mbox_status::OK => {}
            s => {
                return Err(CliError::runtime(format!(
                    "{}: mailbox command {op:#x}({arg}) failed with status {s}",
                    self.path.display()
                )))
            }
        }
        let mut d = [0u8; 8];
        self.file
            .read_exact_at(&mut d, OOB_MBOX_DATA)
            .map_err(|e| self.io(&e))?;
        Ok(u64::from_le_bytes(d))
    }
}

/// `gpupm bmc --json`: what the mailbox answers.
#[derive(Debug, Serialize, JsonSchema)]
pub struct BmcJson {
    /// The device's ABI version, `MAJOR.MINOR`.
    pub abi_version: String,
    /// Events the device counts.
    pub events: u64,
    /// Device cycle now.
    pub cycle: u64,
    /// Cycles the device was idle.
    pub idle_cycles: u64,
    /// Switches the device completed by its fallback.
    pub fallbacks: u64,
    /// Device-wide (system) totals by event name.
    pub counters: BTreeMap<&'static str, u64>,
}

/// Runs the command.
pub fn run(g: &Global, args: &Args) -> CliResult<ExitCode> {
    let mb = Mailbox::open(&g.node_dir)?;
    let caps = mb.command(mbox_op::GET_CAPS, 0)?;
    let abi = caps >> 32;
    let n_events = caps & 0xffff_ffff;
    let cycle = mb.command(mbox_op::READ_CYCLE, 0)?;
    let idle = mb.command(mbox_op::READ_IDLE_CYCLES, 0)?;
    let fallbacks = mb.command(mbox_op::READ_FALLBACKS, 0)?;
    let mut counters = BTreeMap::new();
    for e in CATALOGUE.iter().filter(|e| u64::from(e.id) < n_events) {
        counters.insert(
            e.name,
            mb.command(mbox_op::READ_SYSTEM_COUNTER, u32::from(e.id))?,
        );
    }
    let abi_s = format!("{}.{}", abi >> 16, abi & 0xffff);
    if args.json {
        let o = BmcJson {
            abi_version: abi_s,
            events: n_events,
            cycle,
            idle_cycles: idle,
            fallbacks,
            counters,
        };
        emit(&crate::output::json_line(&o)?)?;
    } else {
        let idle_pct = if cycle > 0 {
            idle as f64 * 100.0 / cycle as f64
        } else {
            0.0
        };
        let mut t = format!(
            "{} (out-of-band mailbox)\nABI {abi_s}, {n_events} events\ncycle {cycle}, idle {idle} cycles ({idle_pct:.1} %), {fallbacks} fallback switches\n\n{:<22} {:>20}\n",
            mb.path.display(),
            "EVENT",
            "SYSTEM TOTAL"
        );
        for (k, v) in &counters {
            t += &format!("{k:<22} {v:>20}\n");
        }
        emit(&t)?;
    }
    Ok(ExitCode::SUCCESS)
}
