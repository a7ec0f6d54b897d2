//! `gpupm record -o FILE`: captures the caller's stream session (the
//! per-commit deltas of one VM or context) into a file of the format in
//! [`format`], until `--duration` elapses or Ctrl-C.

pub mod format;

use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gpupm_client::tenant::scope_code;
use gpupm_client::{Scope, TenantClient};
use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use zerocopy::IntoBytes;

use self::format::{FileHeader, MAGIC, RECORD_SIZE, UNFINISHED, VERSION};
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
}

/// The header of a new recording of `scope` (records: unfinished).
fn new_header(scope: Scope, clock_khz: u32) -> FileHeader {
    let (kind, id) = scope_code(scope);
    FileHeader {
        magic: MAGIC,
        version: VERSION,
        header_size: u32::try_from(size_of::<FileHeader>()).unwrap_or(64),
        record_size: u32::try_from(RECORD_SIZE).unwrap_or(0),
        clock_khz,
        scope: kind,
        id,
        started_unix_ns: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        records: UNFINISHED,
        lost: 0,
        reserved: 0,
    }
}

/// Why draining the session stopped short.
enum Drained {
    /// Reading the node failed.
    Node(gpupm_client::ClientError),
    /// Writing the file failed.
    Write(std::io::Error),
}

/// Writes every queued record; returns how many, and whether the daemon
/// ended the session.
fn drain(
    stream: &TenantClient,
    header: &mut FileHeader,
    out: &mut impl Write,
) -> Result<(u64, bool), Drained> {
    let mut records = 0;
    loop {
        match stream.read_deltas(64) {
            Ok(batch) if batch.is_empty() => return Ok((records, true)),
            Ok(batch) => {
                for d in &batch {
                    header.lost += d.lost_before;
                    out.write_all(d.as_bytes()).map_err(Drained::Write)?;
                }
                records += batch.len() as u64;
            }
            Err(e) if e.errno() == Some(Errno::EAGAIN) => return Ok((records, false)),
            Err(e) => return Err(Drained::Node(e)),
        }
    }
}

/// Runs the command.
pub fn run(g: &Global, args: &Args) -> CliResult<ExitCode> {
    if args.scope.system {
        return Err(CliError::usage(
            "the system scope has no stream session; record --vm N or --ctx N",
        ));
    }
    let node = Node::open(&g.tenant_node)?;
    let who = node.whoami()?;
    let scope = args.scope.resolve(&node)?;
    let clock_khz = node.clock_khz(&who)?;
    let stream = TenantClient::open_nonblocking(&g.tenant_node).map_err(|e| node.fail(e, None))?;
    stream
        .open_stream(scope)
        .map_err(|e| node.fail(e, Some(scope)))?;
    crate::signals::install()?;
    let file = File::create(&args.output)
        .map_err(|e| CliError::usage(format!("cannot create {}: {e}", args.output.display())))?;
    let werr =
        |e: std::io::Error| CliError::runtime(format!("writing {}: {e}", args.output.display()));
    let mut header = new_header(scope, clock_khz);
    let mut out = BufWriter::new(file);
    out.write_all(header.as_bytes()).map_err(werr)?;
    let deadline = args.duration.map(|d| Instant::now() + d);
    let mut spin = Spinner::new(format!(
        "recording to {} (Ctrl-C to stop)",
        args.output.display()
    ));
    let mut records = 0u64;
    let mut ended = false;
    while !crate::signals::stopped() && deadline.is_none_or(|d| Instant::now() < d) && !ended {
        spin.tick();
        let left = deadline.map_or(Duration::from_millis(100), |d| {
            d.saturating_duration_since(Instant::now())
        });
        let timeout = PollTimeout::try_from(left.min(Duration::from_millis(100)))
            .unwrap_or(PollTimeout::ZERO);
        let mut fds = [PollFd::new(stream.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, timeout) {
            Ok(0) | Err(Errno::EINTR) => continue,
            Ok(_) => {}
            Err(e) => {
                return Err(CliError::runtime(format!(
                    "poll on {}: {e}",
                    g.tenant_node.display()
                )))
            }
        }
        let (n, end) = drain(&stream, &mut header, &mut out).map_err(|e| match e {
            Drained::Node(e) => node.fail(e, Some(scope)),
            Drained::Write(e) => werr(e),
        })?;
        records += n;
        ended = end;
    }
    spin.done();
    if ended {
        eprintln!("gpupm: the daemon ended the stream session");
    }
    header.records = records;
    out.seek(SeekFrom::Start(0)).map_err(werr)?;
    out.write_all(header.as_bytes()).map_err(werr)?;
    out.flush().map_err(werr)?;
    eprintln!(
        "gpupm: recorded {records} records ({} lost) to {}",
        header.lost,
        args.output.display()
    );
    Ok(ExitCode::SUCCESS)
}
