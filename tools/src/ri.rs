//! `gpupm ri --ctx ID`: a runtime-instrumentation session (`docs/ri.md`) on
//! one of the caller's contexts through the tenant node; streams the report
//! groups gpupmd drains, one line per record (or one JSON object per entry
//! with `--json`), or with `-o FILE` records each entry as read into a
//! `gpupm record` file (frame kind 4, for `gpupm report`), until
//! `--duration` passes, the session ends (the context was released) or the
//! command is interrupted.

use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use gpupm_client::ri::RiEntry;
use gpupm_client::Scope;
use gpupm_uapi::layout::{
    ri_record, RiAbortRecord, RiBeginRecord, RiEmitRecord, RiInstructionRecord, RiTimestampRecord,
};
use gpupm_uapi::tenant::ri::{ri_controls, ri_entry, ri_session_mode, OpenRi};
use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use schemars::JsonSchema;
use serde::Serialize;
use zerocopy::{FromBytes, IntoBytes};

use crate::error::{CliError, CliResult};
use crate::node::{Global, Node};
use crate::record::format::frame_kind;
use crate::record::{new_header, Output};

/// Sampling modes of `--mode`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum Mode {
    /// Every SF context cycles.
    Cycle,
    /// Every SF retired warp instructions.
    Instr,
    /// At every entry into a marker block.
    Directed,
}

/// Capabilities `--suppress` drops samples at.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum Suppress {
    /// Primary (nominal) clock capability.
    Primary,
    /// Secondary (throttled) clock capability.
    Secondary,
}

/// Arguments of `gpupm ri`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The context (one of yours).
    #[arg(long, value_name = "ID")]
    ctx: u32,
    /// Sampling mode.
    #[arg(long, value_enum, default_value = "cycle")]
    mode: Mode,
    /// SF: a sample every N cycles or instructions (unused in directed mode).
    #[arg(long, default_value_t = 10_000)]
    interval: u32,
    /// RGS: groups of 2^(K+1) records of 16 bytes (0..=7).
    #[arg(long, default_value_t = 2)]
    rgs: u32,
    /// Drop samples taken at this clock capability (repeatable).
    #[arg(long, value_enum)]
    suppress: Vec<Suppress>,
    /// Collect emit records (RIEMIT and marker blocks).
    #[arg(long)]
    emit_markers: bool,
    /// Collect abort records (the context was switched out).
    #[arg(long)]
    aborts: bool,
    /// Stop after this long (e.g. 500ms, 5s, 2m); until interrupted if omitted.
    #[arg(long, value_parser = crate::duration::parse)]
    duration: Option<Duration>,
    /// Record the entries into FILE (a `gpupm record` file, format 2,
    /// frame kind 4: read it with `gpupm report`) instead of printing them.
    #[arg(short = 'o', long, value_name = "FILE", conflicts_with = "json")]
    output: Option<PathBuf>,
    /// One JSON object per line per entry instead of text.
    #[arg(long)]
    json: bool,
}

/// One entry of the session (`--json`, one object per line).
#[derive(Serialize, JsonSchema, Debug)]
pub struct RiEntryJson {
    /// "group" or "halt".
    pub kind: &'static str,
    /// Session id.
    pub session: u64,
    /// The group's number in the device session (1-based); for a halt, the
    /// groups stored before it.
    pub group: u64,
    /// RGS of the group.
    pub rgs: u8,
    /// Groups lost since the previous entry.
    pub lost_before: u64,
    /// Halt reason (1 version, 2 RGS limit); 0 for a group.
    pub halt_reason: u8,
    /// The group's records in order (fill records omitted).
    pub records: Vec<RiRecordJson>,
}

/// One record of a report group.
#[derive(Serialize, JsonSchema, Clone, Debug, PartialEq, Eq)]
pub struct RiRecordJson {
    /// "begin", "timestamp", "emit", "abort", "instruction" or "unknown".
    pub kind: &'static str,
    /// Device cycle the group was stored (begin, timestamp).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time: Option<u64>,
    /// Partition version (begin, timestamp).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<u8>,
    /// Kernel index (emit, abort, instruction).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<u16>,
    /// Block index (emit, abort, instruction).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block: Option<u16>,
    /// Context cycle (abort, instruction).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ctx_cycle: Option<u64>,
    /// The emitted value (register emit) or marker entries (marker emit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<u64>,
    /// Emit source: "register" or "marker".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<&'static str>,
    /// Record flags as the device wrote them.
    pub flags: u8,
}

impl RiRecordJson {
    fn new(kind: &'static str, flags: u8) -> Self {
        RiRecordJson {
            kind,
            time: None,
            version: None,
            kernel: None,
            block: None,
            ctx_cycle: None,
            data: None,
            source: None,
            flags,
        }
    }
}

/// Decodes one 16-byte record; `None` for fill.
pub fn decode(r: &[u8; 16]) -> Option<RiRecordJson> {
    Some(match r[0] {
        ri_record::FILL => return None,
        ri_record::BEGIN => {
            let b = RiBeginRecord::read_from_bytes(r).ok()?;
            RiRecordJson {
                time: Some(b.time),
                version: Some(b.version),
                ..RiRecordJson::new("begin", b.flags)
            }
        }
        ri_record::TIMESTAMP => {
            let t = RiTimestampRecord::read_from_bytes(r).ok()?;
            RiRecordJson {
                time: Some(t.time),
                version: Some(t.version),
                ..RiRecordJson::new("timestamp", t.flags)
            }
        }
        ri_record::INSTRUCTION => {
            let i = RiInstructionRecord::read_from_bytes(r).ok()?;
            RiRecordJson {
                kernel: Some(i.kernel),
                block: Some(i.block),
                ctx_cycle: Some(i.ctx_cycle),
                ..RiRecordJson::new("instruction", i.flags)
            }
        }
        ri_record::EMIT => {
            let e = RiEmitRecord::read_from_bytes(r).ok()?;
            RiRecordJson {
                kernel: Some(e.kernel),
                block: Some(e.block),
                data: Some(e.data),
                source: Some(if e.source == 0 { "register" } else { "marker" }),
                ..RiRecordJson::new("emit", 0)
            }
        }
        ri_record::ABORT => {
            let a = RiAbortRecord::read_from_bytes(r).ok()?;
            RiRecordJson {
                kernel: Some(a.kernel),
                block: Some(a.block),
                ctx_cycle: Some(a.ctx_cycle),
                ..RiRecordJson::new("abort", 0)
            }
        }
        _ => RiRecordJson::new("unknown", r[1]),
    })
}

/// An entry as `--json` prints it.
pub fn entry_json(e: &RiEntry) -> RiEntryJson {
    RiEntryJson {
        kind: if e.header.kind == ri_entry::HALT {
            "halt"
        } else {
            "group"
        },
        session: e.header.session,
        group: e.header.group,
        rgs: e.header.rgs,
        lost_before: e.header.lost_before,
        halt_reason: e.header.halt_reason,
        records: e.records.iter().filter_map(decode).collect(),
    }
}

/// The text lines of one entry: one per record (fill omitted).
pub fn entry_lines(e: &RiEntryJson) -> Vec<String> {
    let lost = if e.lost_before > 0 {
        format!(" (lost {} before)", e.lost_before)
    } else {
        String::new()
    };
    if e.kind == "halt" {
        let why = match e.halt_reason {
            1 => "the partition's version differs",
            2 => "RGS above the partition's maximum",
            _ => "unknown reason",
        };
        return vec![format!("halt after group {}: {why}{lost}", e.group)];
    }
    e.records
        .iter()
        .map(|r| {
            let what = match r.kind {
                "begin" | "timestamp" => format!(
                    "{} time {} version {} flags {:#04x}",
                    r.kind,
                    r.time.unwrap_or(0),
                    r.version.unwrap_or(0),
                    r.flags
                ),
                "emit" => format!(
                    "emit {} {} at {}/{}",
                    r.source.unwrap_or("?"),
                    r.data.unwrap_or(0),
                    r.kernel.unwrap_or(0),
                    r.block.unwrap_or(0)
                ),
                "abort" | "instruction" => format!(
                    "{} {}/{} ctx_cycle {} flags {:#04x}",
                    r.kind,
                    r.kernel.unwrap_or(0),
                    r.block.unwrap_or(0),
                    r.ctx_cycle.unwrap_or(0),
                    r.flags
                ),
                other => other.to_string(),
            };
            format!("group {}{lost}: {what}", e.group)
        })
        .collect()
}

fn request(args: &Args) -> OpenRi {
    let mode = match args.mode {
        Mode::Cycle => ri_session_mode::CYCLE,
        Mode::Instr => ri_session_mode::INSTRUCTION,
        Mode::Directed => ri_session_mode::DIRECTED,
    };
    let mut controls = 0;
    for s in &args.suppress {
        controls |= match s {
            Suppress::Primary => ri_controls::SUPPRESS_PRIMARY,
            Suppress::Secondary => ri_controls::SUPPRESS_SECONDARY,
        };
    }
    if args.emit_markers {
        controls |= ri_controls::EMIT;
    }
    if args.aborts {
        controls |= ri_controls::ABORT;
    }
    OpenRi {
        ctx: args.ctx,
        mode,
        controls,
        sf: if mode == ri_session_mode::DIRECTED {
            0
        } else {
            args.interval
        },
        rgs: args.rgs,
        ..OpenRi::default()
    }
}

/// Runs `gpupm ri`.
pub fn run(g: &Global, args: &Args) -> CliResult<ExitCode> {
    let node = Node::open(&g.tenant_node)?;
    let scope = Scope::Ctx(args.ctx);
    let req = request(args);
    node.client().open_ri(&req).map_err(|e| match e.errno() {
        Some(Errno::EOPNOTSUPP) => CliError::usage(
            "the context belongs to a confidential VM: the device offers no runtime \
             instrumentation there (use `gpupm cpi`)",
        ),
        Some(Errno::EINVAL) => CliError::usage(
            "the device or the context's partition refuses this control block \
             (RGS above the partition's maximum, or an interval out of range)",
        ),
        Some(Errno::EBUSY) => CliError::usage("the context already has an RI session"),
        Some(Errno::EAGAIN) => CliError::runtime("every RI control block is in use"),
        _ => node.fail(e, Some(scope)),
    })?;
    match &args.output {
        Some(path) => record(&node, args, path),
        None => print(&node, args),
    }
}

/// Prints every entry to standard output, as text or JSON lines, then
/// the session's summary on stderr.
fn print(node: &Node, args: &Args) -> CliResult<ExitCode> {
    let mut tally = Tally::default();
    each_batch(node, args, |entries| {
        let mut text = String::new();
        for e in entries {
            tally.add(e);
            let j = entry_json(e);
            if args.json {
                text += &crate::output::json_line(&j)?;
            } else {
                for line in entry_lines(&j) {
                    text += &line;
                    text.push('\n');
                }
            }
        }
        crate::output::emit_stream(&text)
    })?;
    Ok(tally.finish("printed"))
}

/// What a session delivered and lost.
#[derive(Debug, Default)]
struct Tally {
    groups: u64,
    halts: u64,
    lost: u64,
}

impl Tally {
    fn add(&mut self, e: &RiEntry) {
        if e.is_halt() {
            self.halts += 1;
        } else {
            self.groups += 1;
        }
        self.lost += e.header.lost_before;
    }

    /// The summary on stderr; exit status 1 when groups were lost.
    fn finish(&self, what: &str) -> ExitCode {
        let all = self.groups + self.lost;
        #[allow(clippy::cast_precision_loss)] // a percentage
        let share = if all > 0 {
            self.lost as f64 * 100.0 / all as f64
        } else {
            0.0
        };
        eprintln!(
            "gpupm: {what} {} report groups, {} halts; {} groups lost ({share:.1} %)",
            self.groups, self.halts, self.lost
        );
        if self.lost == 0 {
            return ExitCode::SUCCESS;
        }
        eprintln!(
            "gpupm: the device overwrote groups before they were read: record with -o FILE \
             (no printing in the way), a larger --rgs or a longer --interval"
        );
        ExitCode::from(1)
    }
}

/// Records every entry, as read, as one frame of kind
/// [`frame_kind::RI_GROUP`]; the file is flushed after every batch, so a
/// recording cut short still reads up to its last whole entry.
fn record(node: &Node, args: &Args, path: &PathBuf) -> CliResult<ExitCode> {
    let who = node.whoami()?;
    let clock_khz = node.clock_khz(&who)?;
    let header = new_header(Scope::Ctx(args.ctx), clock_khz, 1 << frame_kind::RI_GROUP);
    let mut out = Output::create(path, header)?;
    out.flush()?;
    let mut tally = Tally::default();
    let mut body = Vec::new();
    each_batch(node, args, |entries| {
        for e in entries {
            body.clear();
            body.extend_from_slice(e.header.as_bytes());
            body.extend(e.records.iter().flatten());
            out.frame(frame_kind::RI_GROUP, &body, e.header.lost_before)?;
            tally.add(e);
        }
        out.flush()
    })?;
    out.finish()?;
    Ok(tally.finish(&format!("recorded to {}:", path.display())))
}

/// Hands `f` each batch of entries the session delivers, until
/// `--duration` passes or the session ends.
fn each_batch(
    node: &Node,
    args: &Args,
    mut f: impl FnMut(&[RiEntry]) -> CliResult<()>,
) -> CliResult<()> {
    let scope = Scope::Ctx(args.ctx);
    let deadline = args.duration.map(|d| Instant::now() + d);
    loop {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if left.is_some_and(|l| l.is_zero()) {
            return Ok(());
        }
        let wait = left
            .unwrap_or(Duration::from_millis(200))
            .min(Duration::from_millis(200));
        let client = node.client();
        let mut fds = [PollFd::new(client.as_fd(), PollFlags::POLLIN)];
        match poll(
            &mut fds,
            PollTimeout::try_from(wait).unwrap_or(PollTimeout::ZERO),
        ) {
            Ok(0) | Err(Errno::EINTR) => continue,
            Ok(_) => {}
            Err(e) => return Err(CliError::runtime(format!("poll: {e}"))),
        }
        let entries = client.read_ri().map_err(|e| node.fail(e, Some(scope)))?;
        drop(client);
        if entries.is_empty() {
            return Ok(()); // The session ended: the context was released.
        }
        f(&entries)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_decode_by_their_type_code_and_fill_is_omitted() {
        let emit = RiEmitRecord {
            kind: ri_record::EMIT,
            source: 0,
            kernel: 1,
            block: 2,
            reserved: 0,
            data: 42,
        };
        let mut bytes = [0u8; 16];
        bytes.copy_from_slice(emit.as_bytes());
        let d = decode(&bytes).unwrap();
        assert_eq!(
            (d.kind, d.source, d.data, d.kernel, d.block),
            ("emit", Some("register"), Some(42), Some(1), Some(2))
        );
        assert_eq!(decode(&[0; 16]), None);
    }
}
