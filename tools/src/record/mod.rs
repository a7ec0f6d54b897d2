//! `gpupm record -o FILE`: captures the caller's stream session (the
//! per-commit deltas of one VM or context) and, with `--samples`, its
//! sampling session (branch stacks and PC samples, each record as the
//! session delivers it) into a file of the format in [`format`], until
//! `--duration` elapses or Ctrl-C. The file is flushed after every batch,
//! so a recording cut short still reads up to its last whole record.

pub mod format;
mod sessions;

use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gpupm_client::tenant::scope_code;
use gpupm_client::Scope;
use gpupm_uapi::sampling::{DEFAULT_BRANCH_PERIOD, DEFAULT_CYCLE_PERIOD, DEFAULT_DITHER};
use zerocopy::IntoBytes;

use self::format::{encode_frame, frame_kind, FileHeader, MAGIC, UNFINISHED, VERSION};
use self::sessions::Sessions;
use crate::error::{CliError, CliResult};
use crate::node::{Global, Node, ScopeArgs};
use crate::progress::Spinner;

/// Arguments of `gpupm record`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Output file.
    #[arg(short = 'o', long, value_name = "FILE")]
    output: PathBuf,
    #[command(flatten)]
    scope: ScopeArgs,
    /// How long to record (e.g. 5s, 500ms); default until Ctrl-C.
    #[arg(long, value_parser = crate::duration::parse)]
    duration: Option<Duration>,
    /// Also record samples: branch stacks and PC samples of a sampling
    /// session on the same scope.
    #[arg(long)]
    pub samples: bool,
    /// Record samples only, no counter deltas (implies --samples).
    #[arg(long)]
    pub no_counters: bool,
    /// P, cycles between PC samples before dither (with --samples).
    #[arg(long, default_value_t = DEFAULT_CYCLE_PERIOD)]
    pub period: u32,
    /// R_MAX: each period adds R uniform in 0..=R_MAX (0 = fixed period).
    #[arg(long, default_value_t = DEFAULT_DITHER)]
    pub dither: u32,
    /// N, taken branches per branch-stack capture (with --samples).
    #[arg(long, default_value_t = DEFAULT_BRANCH_PERIOD)]
    pub branch_every: u32,
}

impl Args {
    /// Whether the recording samples.
    pub fn sampling(&self) -> bool {
        self.samples || self.no_counters
    }
}

/// The file being written: header, frames, counts (also `gpupm ri -o`).
pub(crate) struct Output {
    path: PathBuf,
    out: BufWriter<File>,
    header: FileHeader,
    scratch: Vec<u8>,
}

impl Output {
    /// Creates the file, owner-only (mode 0600: a recording holds a
    /// tenant's counts; an existing file is truncated and narrowed too),
    /// with `header` marked unfinished.
    pub(crate) fn create(path: &PathBuf, header: FileHeader) -> CliResult<Output> {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let cannot =
            |e: std::io::Error| CliError::usage(format!("cannot create {}: {e}", path.display()));
        let file = File::options()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)
            .map_err(cannot)?;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(cannot)?;
        let mut o = Output {
            path: path.clone(),
            out: BufWriter::new(file),
            header,
            scratch: Vec::new(),
        };
        let unfinished = FileHeader {
            records: UNFINISHED,
            ..header
        };
        o.out
            .write_all(unfinished.as_bytes())
            .map_err(|e| o.werr(e))?;
        Ok(o)
    }

    fn werr(&self, e: std::io::Error) -> CliError {
        CliError::runtime(format!("writing {}: {e}", self.path.display()))
    }

    /// Appends a record frame of `kind`.
    pub(crate) fn frame(&mut self, kind: u16, body: &[u8], lost_before: u64) -> CliResult<()> {
        self.scratch.clear();
        encode_frame(&mut self.scratch, kind, body);
        self.out
            .write_all(&self.scratch)
            .map_err(|e| self.werr(e))?;
        if kind != frame_kind::SAMPLING_SESSION {
            self.header.lost += lost_before;
        }
        self.header.records += 1;
        Ok(())
    }

    pub(crate) fn flush(&mut self) -> CliResult<()> {
        self.out.flush().map_err(|e| self.werr(e))
    }

    /// Writes the final header.
    pub(crate) fn finish(mut self) -> CliResult<FileHeader> {
        let h = self.header;
        self.out
            .seek(SeekFrom::Start(0))
            .map_err(|e| self.werr(e))?;
        self.out.write_all(h.as_bytes()).map_err(|e| self.werr(e))?;
        self.flush()?;
        Ok(h)
    }
}

/// The header of a new recording of `scope` (no frames yet).
pub(crate) fn new_header(scope: Scope, clock_khz: u32, kinds: u64) -> FileHeader {
    let (kind, id) = scope_code(scope);
    FileHeader {
        magic: MAGIC,
        version: VERSION,
        header_size: u32::try_from(size_of::<FileHeader>()).unwrap_or(64),
        record_size: 0,
        clock_khz,
        scope: kind,
        id,
        started_unix_ns: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        records: 0,
        lost: 0,
        reserved: kinds,
    }
}

/// Record types a recording of `args` asks for (bits `1 << frame_kind`).
fn kinds_of(args: &Args) -> u64 {
    let mut k = 0;
    if !args.no_counters {
        k |= 1 << frame_kind::COUNTER_DELTA;
    }
    if args.sampling() {
        k |= 1 << frame_kind::BRANCH_STACK | 1 << frame_kind::PC_SAMPLE;
    }
    k
}

/// Runs the command.
pub fn run(g: &Global, args: &Args) -> CliResult<ExitCode> {
    if args.scope.system {
        return Err(CliError::usage(
            "the system scope has no stream or sampling session; record --vm N or --ctx N",
        ));
    }
    let node = Node::open(&g.tenant_node)?;
    let who = node.whoami()?;
    let scope = args.scope.resolve(&node)?;
    let clock_khz = node.clock_khz(&who)?;
    let mut sessions = Sessions::open(g, &node, scope, args)?;
    crate::signals::install()?;
    let mut out = Output::create(&args.output, new_header(scope, clock_khz, kinds_of(args)))?;
    if let Some(answer) = sessions.sampling_answer() {
        out.frame(frame_kind::SAMPLING_SESSION, answer.as_bytes(), 0)?;
    }
    // The file shows the sessions are open.
    out.flush()?;
    // What the recording covers: the scope's commit cycle and wall time
    // now and at the end (a sealed scope has no readable cycle).
    let start = (read_cycle(&node, scope), crate::interval::Moment::now());
    let deadline = args.duration.map(|d| Instant::now() + d);
    let mut spin = Spinner::new(format!(
        "recording to {} (Ctrl-C to stop)",
        args.output.display()
    ));
    let mut ended = false;
    while !crate::signals::stopped() && deadline.is_none_or(|d| Instant::now() < d) && !ended {
        spin.tick();
        let left = deadline.map_or(Duration::from_millis(100), |d| {
            d.saturating_duration_since(Instant::now())
        });
        if !sessions.wait(left.min(Duration::from_millis(100)), &g.tenant_node)? {
            continue;
        }
        ended = sessions.drain(&node, scope, &mut out)?;
        out.flush()?;
    }
    // What the sessions queued before we stopped.
    if !ended {
        sessions.drain(&node, scope, &mut out)?;
    }
    spin.done();
    if ended {
        eprintln!("gpupm: the daemon ended the stream session");
    }
    let counts = sessions.counts();
    let h = out.finish()?;
    eprintln!(
        "gpupm: recorded {} counter deltas, {} branch stacks, {} PC samples ({} lost) to {}",
        counts[0],
        counts[1],
        counts[2],
        h.lost,
        args.output.display()
    );
    if let (Some(first), Some(last)) = (start.0, read_cycle(&node, scope)) {
        let span = crate::interval::Span::new(
            &start.1,
            first,
            &crate::interval::Moment::now(),
            last,
            clock_khz,
        );
        eprintln!("gpupm: the recording covers {}", span.describe());
    }
    Ok(ExitCode::SUCCESS)
}

/// The device cycle of `scope`'s last commit (`None` when it cannot be
/// read or is sealed).
fn read_cycle(node: &Node, scope: Scope) -> Option<u64> {
    node.read(crate::node::Target::Scope(scope))
        .ok()
        .filter(|r| !r.sealed)
        .map(|r| r.cycle)
}
