//! `gpupm stat`: chosen events of one scope, like `perf stat`, with derived
//! metrics: totals since the device's reset, the counts over `--duration`
//! or over a command's run (`gpupm stat -- CMD ARGS…`, printed on stderr
//! like `perf stat`, exit status the command's), or per-interval deltas
//! (`-I`). Values are in the events' units (`gpupm events`: a `fb_bytes`
//! value is bytes). Every reading says what it covers: its first and last
//! device cycle, device and wall time, and a timestamp
//! ([`crate::interval`]: gaps, catch-ups and resets of a live view).
//!
//! # JSON (stable)
//! [`StatJson`]: one object; in interval mode one per line per interval.
//! `gpupm stat --help` shows the schema.
//!
//! # CSV
//! Header `scope,id,cycle,interval_ms,kind,name,value,timestamp,start_cycle,device_ms,wall_ms,status`;
//! one row per event (`kind` = `event`) and per derived metric (`kind` =
//! `derived`); `interval_ms` is empty without `-I`; `id` is `ID@CYCLE` for
//! a context instance; `value` is empty in a `no_data` or `reset` row and
//! `<not supported>` for a device-level event of a VM or context.

mod print;

use std::path::PathBuf;
use std::process::{Child, Command, ExitCode};
use std::time::{Duration, Instant};

use crate::keyfile::KeySource;

pub use self::print::StatJson;
use self::print::{Out, Sample};
use crate::error::{CliError, CliResult};
use crate::interval::{self, Moment, Outages, Span, Status};
use crate::node::{self, Global, Missing, Node, Reading, ScopeArgs, Target};

const DEFAULT_EVENTS: &str = "sm_cycles_elapsed,sm_cycles_active,sm_inst_executed,l2_hit,l2_miss,fb_bytes,pcie_rx_bytes,pcie_tx_bytes";

/// Arguments of `gpupm stat`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Events (comma-separated catalogue names, see `gpupm events`);
    /// default: sm_cycles_elapsed, sm_cycles_active, sm_inst_executed,
    /// l2_hit, l2_miss, fb_bytes, pcie_rx_bytes, pcie_tx_bytes.
    #[arg(short = 'e', long, value_name = "EV[,EV...]", default_value = DEFAULT_EVENTS,
          hide_default_value = true)]
    events: String,
    #[command(flatten)]
    scope: ScopeArgs,
    /// Print deltas every INTERVAL (1s, 500ms, or plain milliseconds)
    /// instead of totals once.
    #[arg(short = 'I', long = "interval", value_name = "INTERVAL", value_parser = interval::parse_interval)]
    interval: Option<Duration>,
    /// Number of intervals (default: until interrupted, `--duration`
    /// passes or the command exits).
    #[arg(long, value_name = "K", requires = "interval")]
    count: Option<u64>,
    /// Count for this long (500ms, 5s, 2m) and print the counts of that
    /// span (with -I: stop after it).
    #[arg(long, value_parser = crate::duration::parse)]
    duration: Option<Duration>,
    /// With -I: end with exit status 1 after gpupmd has not answered for
    /// this long (intervals until then are marked as not counted).
    #[arg(long, value_name = "DURATION", value_parser = crate::duration::parse,
          default_value = interval::DEFAULT_GIVE_UP)]
    give_up_after: Duration,
    /// JSON, one object per reading (the schema is below).
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// CSV.
    #[arg(long)]
    csv: bool,
    /// A confidential VM's session file (default: the one `gpupm cc
    /// establish` keeps for the VM in your state directory), or a raw key
    /// of a VM whose key the scenario gives (32 bytes or 64 hex digits);
    /// owner-only: the sealed totals are opened with it.
    #[arg(long, value_name = "FILE")]
    key_file: Option<PathBuf>,
    /// Run CMD and count while it runs, like `perf stat CMD`: the counts
    /// go to stderr, the exit status is CMD's.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

/// What one run reads with.
struct Reader<'a> {
    node: Node,
    target: Target,
    keys: &'a KeySource,
    clock_khz: u32,
}

impl Reader<'_> {
    fn read(&self) -> Result<(Reading, Moment), Missing> {
        let r = self.node.read_live(self.target, Some(self.keys))?;
        Ok((r, Moment::now()))
    }
}

/// Runs the command.
pub fn run(g: &Global, args: &Args) -> CliResult<ExitCode> {
    let shown = node::parse_events(&args.events)?;
    let node = g.node()?;
    let who = node.whoami()?;
    let target = args.scope.resolve_target(&node)?;
    let keys = KeySource::new(args.key_file.as_deref())?;
    let first = node.read_opened(target, &keys)?;
    let first_at = Moment::now();
    let clock_khz = node.clock_khz(&who)?;
    let out = Out {
        json: args.json,
        csv: args.csv,
        to_stderr: !args.command.is_empty(),
        shown: &shown,
        target,
    };
    out.header()?;
    let reader = Reader {
        node,
        target,
        keys: &keys,
        clock_khz,
    };
    let mut child = match args.command.as_slice() {
        [] => None,
        [cmd, rest @ ..] => {
            crate::signals::install()?;
            let c = Command::new(cmd)
                .args(rest)
                .spawn()
                .map_err(|e| CliError::usage(format!("cannot run {cmd}: {e}")))?;
            Some(c)
        }
    };
    let result = if let Some(period) = args.interval {
        intervals(args, &out, reader, (first, first_at), period, &mut child)
    } else if child.is_some() || args.duration.is_some() {
        span_once(args, &out, &reader, (first, first_at), &mut child)
    } else {
        let span = Span::since_reset(&first_at, first.cycle, clock_khz);
        out.sample(&Sample::of(&first, None, span, None, Status::Ok, clock_khz))
    };
    let status = match child.as_mut() {
        Some(c) => Some(
            c.wait()
                .map_err(|e| CliError::runtime(format!("waiting for the command: {e}")))?,
        ),
        None => None,
    };
    result?;
    Ok(status.map_or(ExitCode::SUCCESS, exit_code_of))
}

/// The exit status of a command as `gpupm stat`'s own (128 + N for a
/// command killed by signal N, as shells report it).
fn exit_code_of(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    let code = status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1);
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// Waits until `deadline` passes, the command exits or a signal asks to
/// stop; whether to go on.
fn wait_until(deadline: Option<Instant>, child: &mut Option<Child>) -> CliResult<bool> {
    loop {
        if let Some(c) = child.as_mut() {
            if c.try_wait()
                .map_err(|e| CliError::runtime(format!("waiting for the command: {e}")))?
                .is_some()
            {
                return Ok(false);
            }
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return Ok(true);
        }
        let step = deadline.map_or(Duration::from_millis(20), |d| {
            d.saturating_duration_since(now)
                .min(Duration::from_millis(20))
        });
        std::thread::sleep(step);
    }
}

/// The counts of one span: `--duration`, or the command's run.
fn span_once(
    args: &Args,
    out: &Out<'_>,
    reader: &Reader<'_>,
    (first, first_at): (Reading, Moment),
    child: &mut Option<Child>,
) -> CliResult {
    let deadline = args.duration.map(|d| first_at.at + d);
    wait_until(deadline, child)?;
    let (cur, at) = reader.read().map_err(|m| match m {
        Missing::Gone(why) => {
            CliError::runtime(format!("no reading at the end of the span: {why}"))
        }
        Missing::Failed(e) => e,
    })?;
    let span = Span::new(&first_at, first.cycle, &at, cur.cycle, reader.clock_khz);
    if cur.cycle < first.cycle {
        let why =
            "the device was reset during the span (its cycle went back): no counts".to_string();
        return out.sample(&Sample::missing(span, None, Status::Reset, why));
    }
    let d = node::delta(&cur.values, &first.values);
    out.sample(&Sample::of(
        &cur,
        Some(&d),
        span,
        None,
        Status::Ok,
        reader.clock_khz,
    ))
}

/// Whether the device was reset between two readings: its cycle went
/// back or a total went down.
fn reset_between(prev: &Reading, cur: &Reading) -> bool {
    cur.cycle < prev.cycle
        || (!cur.sealed && !prev.sealed && cur.values.iter().zip(&prev.values).any(|(c, p)| c < p))
}

/// Interval mode: a row per interval until `--count`, `--duration`, the
/// command's exit or a signal (the command's exit and the end of
/// `--duration` print the part of an interval they cut).
fn intervals(
    args: &Args,
    out: &Out<'_>,
    mut reader: Reader<'_>,
    first: (Reading, Moment),
    period: Duration,
    child: &mut Option<Child>,
) -> CliResult {
    let end = args.duration.map(|d| first.1.at + d);
    let mut prev = first;
    let mut row_start = prev.1;
    let mut outages = Outages::new(args.give_up_after);
    let mut next = Instant::now() + period;
    let mut n = 0;
    while args.count.is_none_or(|k| n < k) && !crate::signals::stopped() {
        let last = end.is_some_and(|e| e <= next);
        let due = if last { end.unwrap_or(next) } else { next };
        let last = !wait_until(Some(due), child)? || last;
        next += period;
        n += 1;
        match reader.read() {
            Ok((cur, at)) => {
                let resumed = outages.answered();
                let span = Span::new(&prev.1, prev.0.cycle, &at, cur.cycle, reader.clock_khz);
                if reset_between(&prev.0, &cur) {
                    let why = format!(
                        "the device was reset (cycle {} went back to {}): its counts restarted \
                         from zero; the next row counts from here",
                        prev.0.cycle, cur.cycle
                    );
                    out.sample(&Sample::missing(span, Some(period), Status::Reset, why))?;
                } else {
                    let status = if resumed || interval::late(&span, period) {
                        Status::CatchUp
                    } else {
                        Status::Ok
                    };
                    let d = node::delta(&cur.values, &prev.0.values);
                    let s =
                        Sample::of(&cur, Some(&d), span, Some(period), status, reader.clock_khz);
                    out.sample(&s)?;
                }
                prev = (cur, at);
                row_start = at;
            }
            Err(Missing::Gone(why)) => {
                outages.gone(&why)?;
                let now = Moment::now();
                let span = Span::new(
                    &row_start,
                    prev.0.cycle,
                    &now,
                    prev.0.cycle,
                    reader.clock_khz,
                );
                out.sample(&Sample::missing(span, Some(period), Status::NoData, why))?;
                row_start = now;
                // After a restart the old descriptor stays dead.
                match reader.node.reopen() {
                    Ok(()) | Err(Missing::Gone(_)) => {}
                    Err(Missing::Failed(e)) => return Err(e),
                }
            }
            Err(Missing::Failed(e)) => return Err(e),
        }
        if last {
            break;
        }
    }
    Ok(())
}
