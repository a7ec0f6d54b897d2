//! The sessions a recording reads: the stream session (counter deltas)
//! and the sampling session (branch stacks, PC samples), each on its own
//! non-blocking handle of the tenant node.

use std::os::fd::AsFd;
use std::path::Path;
use std::time::Duration;

use gpupm_client::sampling::session::{SamplingRequest, READ_BYTES};
use gpupm_client::{Scope, TenantClient};
use gpupm_uapi::tenant::sampling::{sample_kind, OpenSampling, SampleHeader};
use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use zerocopy::{FromBytes, IntoBytes};

use super::format::frame_kind;
use super::{Args, Output};
use crate::error::{CliError, CliResult};
use crate::node::{Global, Node};

/// The open sessions.
pub struct Sessions {
    stream: Option<TenantClient>,
    sampler: Option<(TenantClient, OpenSampling)>,
    buf: Vec<u8>,
    /// Counter deltas, branch stacks, PC samples written.
    counts: [u64; 3],
}

impl Sessions {
    /// Opens what `args` asks for on `scope`.
    pub fn open(g: &Global, node: &Node, scope: Scope, args: &Args) -> CliResult<Sessions> {
        let handle =
            || TenantClient::open_nonblocking(&g.tenant_node).map_err(|e| node.fail(e, None));
        let stream = if args.no_counters {
            None
        } else {
            let s = handle()?;
            s.open_stream(scope)
                .map_err(|e| node.fail(e, Some(scope)))?;
            Some(s)
        };
        let sampler = if args.sampling() {
            let s = handle()?;
            let req = SamplingRequest::cycles(scope, args.period, args.dither)
                .with_branches(args.branch_every);
            let answer = s
                .open_sampling(&req)
                .map_err(|e| node.fail(e, Some(scope)))?;
            Some((s, answer))
        } else {
            None
        };
        Ok(Sessions {
            stream,
            sampler,
            buf: vec![0; READ_BYTES],
            counts: [0; 3],
        })
    }

    /// The sampling session's answer, if sampling.
    pub fn sampling_answer(&self) -> Option<OpenSampling> {
        self.sampler.as_ref().map(|(_, a)| *a)
    }

    /// Counter deltas, branch stacks and PC samples written so far.
    pub fn counts(&self) -> [u64; 3] {
        self.counts
    }

    /// Waits up to `timeout` for a record; whether one may be queued.
    pub fn wait(&self, timeout: Duration, path: &Path) -> CliResult<bool> {
        let timeout = PollTimeout::try_from(timeout).unwrap_or(PollTimeout::ZERO);
        let mut fds: Vec<PollFd<'_>> = self
            .stream
            .iter()
            .chain(self.sampler.iter().map(|(s, _)| s))
            .map(|c| PollFd::new(c.as_fd(), PollFlags::POLLIN))
            .collect();
        match poll(&mut fds, timeout) {
            Ok(0) | Err(Errno::EINTR) => Ok(false),
            Ok(_) => Ok(true),
            Err(e) => Err(CliError::runtime(format!(
                "poll on {}: {e}",
                path.display()
            ))),
        }
    }

    /// Writes every queued record of both sessions; whether the daemon
    /// ended a session.
    pub fn drain(&mut self, node: &Node, scope: Scope, out: &mut Output) -> CliResult<bool> {
        let mut ended = false;
        if let Some(stream) = &self.stream {
            loop {
                match stream.read_deltas(64) {
                    Ok(batch) if batch.is_empty() => {
                        ended = true;
                        break;
                    }
                    Ok(batch) => {
                        for d in &batch {
                            out.frame(frame_kind::COUNTER_DELTA, d.as_bytes(), d.lost_before)?;
                        }
                        self.counts[0] += batch.len() as u64;
                    }
                    Err(e) if e.errno() == Some(Errno::EAGAIN) => break,
                    Err(e) => return Err(node.fail(e, Some(scope))),
                }
            }
        }
        if let Some((sampler, _)) = &self.sampler {
            loop {
                match sampler.read_raw(&mut self.buf) {
                    Ok(0) => {
                        ended = true;
                        break;
                    }
                    Ok(n) => {
                        let got = self.buf.get(..n).unwrap_or_default();
                        write_samples(got, out, &mut self.counts)?;
                    }
                    Err(e) if e.errno() == Some(Errno::EAGAIN) => break,
                    Err(e) => return Err(node.fail(e, Some(scope))),
                }
            }
        }
        Ok(ended)
    }
}

/// Writes the records of one sampling `read()` as frames, each exactly as
/// delivered (header and payload).
fn write_samples(mut bytes: &[u8], out: &mut Output, counts: &mut [u64; 3]) -> CliResult<()> {
    let bad = || CliError::runtime("the sampling session returned a partial record");
    while !bytes.is_empty() {
        let (h, _) = SampleHeader::read_from_prefix(bytes).map_err(|_| bad())?;
        let record = bytes.get(..h.size as usize).ok_or_else(bad)?;
        if record.len() < size_of::<SampleHeader>() {
            return Err(bad());
        }
        let (kind, slot) = match h.kind {
            sample_kind::BRANCH_STACK => (frame_kind::BRANCH_STACK, 1),
            sample_kind::CYCLE => (frame_kind::PC_SAMPLE, 2),
            _ => return Err(bad()),
        };
        out.frame(kind, record, h.lost_before)?;
        counts[slot] += 1;
        bytes = &bytes[record.len()..];
    }
    Ok(())
}
