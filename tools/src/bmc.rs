//! `gpupm bmc`: what a BMC reads through the out-of-band node (`card0-oob`,
//! the BMC's own mailbox, `OOB_MBOX_*` registers only) without the daemon
//! and without any host memory allocation: the device-level counters of
//! the legacy reads, and the out-of-band reduction channel
//! (`docs/oob.md`) — the host driver's state, idle time, the channel's
//! generation and period, and every VM in it with its counters
//! (confidential VMs: listed, never counted). Through
//! [`gpupm_client::oob`].
//!
//! JSON: [`BmcJson`] (`gpupm bmc --help` shows the schema).

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use gpupm_client::oob::{HostDriver, OobClient, OobError, OobScope};
use gpupm_client::paths::OOB_NAME;
use gpupm_uapi::events::{self, CATALOGUE};
use schemars::JsonSchema;
use serde::Serialize;

use crate::error::{one_line, CliError, CliResult};
use crate::node::Global;
use crate::numfmt::thousands;
use crate::output::emit;

/// The events shown per VM: the channel's headline counters.
pub const HEADLINE_EVENTS: [&str; 5] = [
    "sm_cycles_active",
    "sm_inst_executed",
    "l2_hit",
    "l2_miss",
    "fb_read_sectors",
];

/// How long `--flush` waits for the device clock to complete the flush.
const FLUSH_WAIT: Duration = Duration::from_secs(2);
/// How long `--flush` waits for the clock to move at all.
const CLOCK_STILL: Duration = Duration::from_millis(200);

/// Arguments of `gpupm bmc`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Flush the OOB channel first and wait until it completed, so every
    /// VM's counters hold everything generated up to now (a real-time
    /// clock only: on a step clock nothing advances by itself).
    #[arg(long)]
    flush: bool,
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

/// An OOB error as the command's one-line message, with its causes.
fn oob_error(path: &Path, e: OobError) -> CliError {
    match e {
        OobError::Open { path, source } => open_error(&path, &source),
        e @ OobError::FlushNotCompleted { .. } => CliError::runtime(format!(
            "{}: {}: the device clock did not complete it within {} s (on a step clock nothing advances by itself)",
            path.display(),
            one_line(e),
            FLUSH_WAIT.as_secs()
        )),
        e => CliError::runtime(format!("{}: {}", path.display(), one_line(e))),
    }
}

/// The host driver's state, as `--json` names it.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HostStateName {
    /// Served, open, and heard from within the timeout.
    Loaded,
    /// Served and open, but silent past the timeout.
    NotResponding,
    /// Not served, or no handle open.
    Unloaded,
}

/// The host driver as the device sees it (`OOB_HOST_STATE`).
#[derive(Debug, Serialize, JsonSchema)]
pub struct HostJson {
    /// The host driver's state, as the device last judged it.
    pub state: HostStateName,
    /// Cycles since the host's last request; null: never.
    pub cycles_since_request: Option<u64>,
    /// Handles open on `card0`.
    pub handles: u64,
    /// The timeout after which a silent host is not responding, in cycles.
    pub timeout_cycles: u64,
}

/// Idle time and how often (`OOB_READ_IDLE`).
#[derive(Debug, Serialize, JsonSchema)]
pub struct IdleJson {
    /// Cycles with no context running on any partition.
    pub cycles: u64,
    /// The same in seconds at the nominal clock.
    pub seconds: f64,
    /// Idle periods begun: how often the device went idle.
    pub periods: u64,
    /// The last cycle was idle.
    pub now: bool,
}

/// The out-of-band reduction channel (`OOB_CHANNEL_INFO`,
/// `OOB_DEVICE_INFO`).
#[derive(Debug, Serialize, JsonSchema)]
pub struct ChannelJson {
    /// Channel commits so far (periodic, flushes, reset drains).
    pub generation: u64,
    /// Cycle of the last commit.
    pub last_commit_cycle: u64,
    /// The channel's own commit period in cycles.
    pub period_cycles: u64,
    /// OOB flushes completed.
    pub flushes_completed: u64,
    /// This run flushed the channel first (`--flush`).
    pub flushed: bool,
    /// The nominal clock in kHz.
    pub nominal_khz: u64,
    /// The clock now in kHz.
    pub clock_khz: u64,
    /// Device resets the channel carried its counts across.
    pub resets: u64,
}

/// A VM in the out-of-band channel (`OOB_NEXT_VM`, its block).
#[derive(Debug, Serialize, JsonSchema)]
pub struct VmJson {
    /// VM id.
    pub vm: u32,
    /// Its partition slot.
    pub partition: u32,
    /// Confidential: left out of the channel, no counters.
    pub confidential: bool,
    /// Its contexts in the channel (0 for a confidential VM).
    pub contexts: u64,
    /// Commits into its block (not for a confidential VM).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commits: Option<u64>,
    /// Its block's counters of the headline events, by event name, in
    /// counts (not for a confidential VM).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counters: Option<BTreeMap<&'static str, u64>>,
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
    /// Device-wide (system) totals by event name: the host's system
    /// block, as its triggers commit it.
    pub counters: BTreeMap<&'static str, u64>,
    /// The host driver as the device sees it.
    pub host: HostJson,
    /// Idle time and how often.
    pub idle: IdleJson,
    /// The out-of-band reduction channel.
    pub channel: ChannelJson,
    /// Every configured VM, by id.
    pub vms: Vec<VmJson>,
}

/// Requests an OOB flush and waits for it on a real-time clock; a clock
/// that does not move (a step clock) is a clear error.
fn flush(oob: &OobClient) -> Result<(), OobError> {
    let start = Instant::now();
    let mut last = None;
    let mut still_since = start;
    oob.flush(|to_go| {
        if last != Some(to_go) {
            last = Some(to_go);
            still_since = Instant::now();
        }
        if still_since.elapsed() > CLOCK_STILL || start.elapsed() > FLUSH_WAIT {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
        true
    })
    .map(drop)
}

fn vm_json(oob: &OobClient, vm: gpupm_client::oob::OobVm) -> Result<VmJson, OobError> {
    let mut out = VmJson {
        vm: vm.id,
        partition: vm.slot,
        confidential: vm.confidential,
        contexts: vm.contexts,
        commits: None,
        counters: None,
    };
    if !vm.confidential {
        let block = oob.read_block(OobScope::Vm(vm.id))?;
        let counters = HEADLINE_EVENTS
            .iter()
            .filter_map(|name| events::by_name(name))
            .filter_map(|e| Some((e.name, *block.counters.get(usize::from(e.id))?)))
            .collect();
        out.commits = Some(block.snapshot.commits);
        out.counters = Some(counters);
    }
    Ok(out)
}

fn read(oob: &OobClient, flushed: bool) -> Result<BmcJson, OobError> {
    let caps = oob.caps()?;
    let n_events = u64::from(caps.events);
    let cycle = oob.cycle()?;
    let idle_cycles = oob.idle_cycles()?;
    let fallbacks = oob.fallbacks()?;
    let mut counters = BTreeMap::new();
    for e in CATALOGUE.iter().filter(|e| u64::from(e.id) < n_events) {
        counters.insert(e.name, oob.system_counter(e.id)?);
    }
    let host = oob.host_state()?;
    let idle = oob.idle()?;
    let info = oob.channel_info()?;
    let dev = oob.device_info()?;
    let vms = oob
        .vms()
        .map(|vm| vm_json(oob, vm?))
        .collect::<Result<_, _>>()?;
    let seconds = if dev.nominal_khz > 0 {
        idle.idle_cycles as f64 / dev.nominal_khz as f64 / 1000.0
    } else {
        0.0
    };
    Ok(BmcJson {
        abi_version: format!("{}.{}", caps.abi_major, caps.abi_minor),
        events: n_events,
        cycle,
        idle_cycles,
        fallbacks,
        counters,
        host: HostJson {
            state: match host.driver {
                HostDriver::Loaded => HostStateName::Loaded,
                HostDriver::NotResponding => HostStateName::NotResponding,
                HostDriver::Unloaded => HostStateName::Unloaded,
            },
            cycles_since_request: host.since_request,
            handles: host.handles,
            timeout_cycles: host.timeout_cycles,
        },
        idle: IdleJson {
            cycles: idle.idle_cycles,
            seconds,
            periods: idle.idle_periods,
            now: idle.idle_now,
        },
        channel: ChannelJson {
            generation: info.generation,
            last_commit_cycle: info.last_commit_cycle,
            period_cycles: info.period_cycles,
            flushes_completed: info.flushes_completed,
            flushed,
            nominal_khz: dev.nominal_khz,
            clock_khz: dev.clock_khz,
            resets: dev.resets,
        },
        vms,
    })
}

fn table(path: &Path, o: &BmcJson) -> String {
    let idle_pct = if o.cycle > 0 {
        o.idle_cycles as f64 * 100.0 / o.cycle as f64
    } else {
        0.0
    };
    let mut t = format!(
        "{} (out-of-band mailbox)\nABI {}, {} events\ncycle {}, idle {} cycles ({idle_pct:.1} %), {} fallback switches\n",
        path.display(),
        o.abi_version,
        o.events,
        o.cycle,
        o.idle_cycles,
        o.fallbacks
    );
    let h = &o.host;
    let driver = match h.state {
        HostStateName::Loaded => HostDriver::Loaded,
        HostStateName::NotResponding => HostDriver::NotResponding,
        HostStateName::Unloaded => HostDriver::Unloaded,
    };
    let last = h
        .cycles_since_request
        .map_or("never".into(), |c| format!("{} cycles ago", thousands(c)));
    t += &format!(
        "host driver: {} ({} handles on card0, last request {last}, timeout {} cycles)\n",
        driver.name(),
        h.handles,
        thousands(h.timeout_cycles)
    );
    t += &format!(
        "idle: {:.3} s in {} periods{}; clock {} kHz (nominal {}), {} resets\n",
        o.idle.seconds,
        thousands(o.idle.periods),
        if o.idle.now { ", idle now" } else { "" },
        thousands(o.channel.clock_khz),
        thousands(o.channel.nominal_khz),
        o.channel.resets
    );
    let c = &o.channel;
    t += &format!(
        "OOB channel: generation {}, last commit at cycle {}, period {} cycles, {} flushes completed{}\n",
        thousands(c.generation),
        thousands(c.last_commit_cycle),
        thousands(c.period_cycles),
        c.flushes_completed,
        if c.flushed { " (flushed now)" } else { "" }
    );
    t += &format!("\n{:<22} {:>20}\n", "EVENT", "SYSTEM TOTAL");
    for (k, v) in &o.counters {
        t += &format!("{k:<22} {v:>20}\n");
    }
    t += &format!("\n{:>4} {:>9} {:>8}", "VM", "PARTITION", "CONTEXTS");
    for name in HEADLINE_EVENTS {
        t += &format!(" {name:>18}");
    }
    t += "\n";
    for vm in &o.vms {
        t += &format!("{:>4} {:>9} {:>8}", vm.vm, vm.partition, vm.contexts);
        match &vm.counters {
            Some(counters) => {
                for name in HEADLINE_EVENTS {
                    let v = counters.get(name).map_or("-".into(), |v| thousands(*v));
                    t += &format!(" {v:>18}");
                }
            }
            None => t += "  confidential: not in the OOB channel",
        }
        t += "\n";
    }
    t
}

/// Runs the command.
pub fn run(g: &Global, args: &Args) -> CliResult<ExitCode> {
    let path = g.node_dir.join(OOB_NAME);
    let oob = OobClient::open(&g.node_dir).map_err(|e| oob_error(&path, e))?;
    if args.flush {
        flush(&oob).map_err(|e| oob_error(&path, e))?;
    }
    let o = read(&oob, args.flush).map_err(|e| oob_error(&path, e))?;
    if args.json {
        emit(&crate::output::json_line(&o)?)?;
    } else {
        emit(&table(&path, &o))?;
    }
    Ok(ExitCode::SUCCESS)
}
