//! `gpupm cpi --ctx ID`: samples one of the caller's contexts through a
//! tenant sampling session and prints its kernels and hot blocks with
//! instructions, cycles, CPI, sample count and a ~95 % confidence
//! interval, per-block CPI reconstructed from branch stacks and dithered
//! cycle samples (`gpupm_client::sampling::reconstruct`).
//!
//! The program's shape (kernels, blocks in layout order, instruction
//! counts) comes from the scenario description: the session answers the
//! context's program id (`CTX_PROGRAM`), an index into the scenario's
//! program table (`--scenario FILE`, or the built-in scenario).
//!
//! A confidential VM's samples arrive sealed, every sample of the VM's
//! contexts to every session on the VM (the daemon cannot read them to
//! thin them): with `--key-file` the tenant opens each with the VM's key
//! and keeps its context's; a key that does not open them is an
//! authentication error, and nothing is estimated from ciphertext.

mod output;

pub use output::CpiOutput;

use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use gpupm_client::sampling::reconstruct::{Estimator, Scale};
use gpupm_client::sampling::session::{SampleBody, SamplingRequest};
use gpupm_client::Scope;
use gpupm_driver::scenario;
use gpupm_uapi::layout::{envelope_flags, Envelope};
use gpupm_uapi::sampling::{DEFAULT_BRANCH_PERIOD, DEFAULT_CYCLE_PERIOD, DEFAULT_DITHER};
use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use zerocopy::FromBytes;

use crate::error::{CliError, CliResult};
use crate::keyfile::KeySource;
use crate::node::{Global, Node};

/// Arguments of `gpupm cpi`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The context (one of yours).
    #[arg(long, value_name = "ID")]
    ctx: u32,
    /// Scenario file the device runs (for the program's shape); the
    /// built-in scenario if omitted.
    #[arg(long)]
    scenario: Option<PathBuf>,
    /// P, cycles between cycle samples before dither.
    #[arg(long, default_value_t = DEFAULT_CYCLE_PERIOD)]
    period: u32,
    /// R_MAX: each period adds R uniform in 0..=R_MAX (0 = fixed period).
    #[arg(long, default_value_t = DEFAULT_DITHER)]
    dither: u32,
    /// N, taken branches per branch-stack capture.
    #[arg(long, default_value_t = DEFAULT_BRANCH_PERIOD)]
    branch_every: u32,
    /// Cycle samples to collect.
    #[arg(long, default_value_t = 20_000)]
    samples: u64,
    /// Longest time to sample, in seconds.
    #[arg(long, default_value_t = 30)]
    timeout_s: u64,
    /// Hot blocks shown per kernel.
    #[arg(long, default_value_t = 5)]
    top: usize,
    /// One JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// The confidential VM's session or key file, to open its sealed
    /// samples (default: your session of the VM; see `gpupm stat
    /// --key-file`).
    #[arg(long, value_name = "FILE")]
    key_file: Option<PathBuf>,
}

/// What one session collected.
#[derive(Debug)]
pub struct Collected {
    /// Cycle samples.
    pub samples: u64,
    /// Branch stacks.
    pub stacks: u64,
    /// Records lost (device buffers and the session's queue).
    pub lost: u64,
    /// Branch stacks lost.
    pub stacks_lost: u64,
    /// When the stacks came sealed (a confidential VM's, which the device
    /// writes on a schedule of the context's cycles, not every N-th taken
    /// branch): the context's taken branches from its first stack to its
    /// last, and the stacks produced after the first (lost included).
    pub scheduled: Option<(u64, u64)>,
}

impl Collected {
    /// Taken branches per stack produced: N, or for scheduled stacks what
    /// their own branch counts say.
    pub fn branches_per_stack(&self, n: u32) -> f64 {
        match self.scheduled {
            Some((branches, stacks)) if stacks > 0 => branches as f64 / stacks as f64,
            _ => f64::from(n),
        }
    }
}

/// Where the records go and which are the context's.
pub struct Sink<'a> {
    /// The estimator.
    pub est: &'a mut Estimator,
    /// The sampled context (sealed records of the VM's other contexts are
    /// dropped once opened).
    pub ctx: u32,
    /// The VM's keys, to open sealed records.
    pub keys: &'a KeySource,
}

/// A sealed record opened with the VM's keys (or the refusal without
/// any); `None` for a record withheld while the VM had no session (it
/// carries nothing: counted as lost).
fn unseal(node: &Node, kind: u16, slot: &[u8], keys: &KeySource) -> CliResult<Option<SampleBody>> {
    let envelope = Envelope::read_from_prefix(slot).map(|(e, _)| e).ok();
    let vm = envelope.map_or(0, |e| e.vm);
    let key = keys.for_vm(node, vm)?.ok_or_else(|| {
        CliError::usage(format!(
            "the context belongs to confidential VM {vm}: its samples are sealed; \
             establish its session with `gpupm cc establish --vm {vm}` (or give a key with --key-file)"
        ))
    })?;
    if envelope.is_some_and(|e| e.flags & envelope_flags::WITHHELD != 0) {
        return Ok(None);
    }
    crate::keyfile::open_sample(kind, slot, key).map(Some)
}

/// Reads records from `node`'s session into `sink` until `want` cycle
/// samples of its context arrived or `deadline` passed.
pub fn collect(node: &Node, sink: Sink<'_>, want: u64, deadline: Instant) -> CliResult<Collected> {
    let Sink { est, ctx, keys } = sink;
    let mut c = Collected {
        samples: 0,
        stacks: 0,
        lost: 0,
        stacks_lost: 0,
        scheduled: None,
    };
    let mut first_branches = None;
    while c.samples < want {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let wait = PollTimeout::try_from(left.min(Duration::from_millis(200)))
            .unwrap_or(PollTimeout::ZERO);
        let client = node.client();
        let mut fds = [PollFd::new(client.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, wait) {
            Ok(0) | Err(Errno::EINTR) => continue,
            Ok(_) => {}
            Err(e) => return Err(CliError::runtime(format!("poll: {e}"))),
        }
        let samples = client.read_samples().map_err(|e| node.fail(e, None))?;
        drop(client);
        for s in samples {
            c.lost += s.header.lost_before;
            let (body, sealed) = match s.body {
                SampleBody::Sealed(slot) => match unseal(node, s.header.kind, &slot, keys)? {
                    Some(body) => (body, true),
                    None => {
                        c.lost += 1;
                        continue;
                    }
                },
                plain => (plain, false),
            };
            match body {
                SampleBody::Cycle(pc) if pc.ctx == ctx => {
                    est.add_pc_record(&pc);
                    c.samples += 1;
                }
                SampleBody::Branch(b) if b.ctx == ctx => {
                    est.add_stack_record(&b);
                    c.stacks += 1;
                    c.stacks_lost += s.header.lost_before;
                    if sealed {
                        let first = *first_branches.get_or_insert(b.branches);
                        c.scheduled = Some(match c.scheduled {
                            None => (0, 0),
                            Some((_, n)) => (
                                b.branches.saturating_sub(first),
                                n.saturating_add(1).saturating_add(s.header.lost_before),
                            ),
                        });
                    }
                }
                // Another context of the confidential VM (sealed records
                // reach every session on the VM).
                SampleBody::Cycle(_) | SampleBody::Branch(_) | SampleBody::Sealed(_) => {}
            }
        }
    }
    Ok(c)
}

/// Runs `gpupm cpi`.
pub fn run(g: &Global, args: &Args) -> CliResult<ExitCode> {
    let scenario = match &args.scenario {
        Some(path) => scenario::parse_file(path).map_err(|e| CliError::usage(e.to_string()))?,
        None => scenario::builtin(),
    };
    let keys = KeySource::new(args.key_file.as_deref())?;
    let node = Node::open(&g.tenant_node)?;
    let scope = Scope::Ctx(args.ctx);
    let req =
        SamplingRequest::cycles(scope, args.period, args.dither).with_branches(args.branch_every);
    let opened = node
        .client()
        .open_sampling(&req)
        .map_err(|e| node.fail(e, Some(scope)))?;
    let table = scenario.program_table();
    let spec = usize::try_from(opened.program)
        .ok()
        .and_then(|p| p.checked_sub(1))
        .and_then(|i| table.get(i))
        .ok_or_else(|| {
            CliError::usage(format!(
                "context {} runs no program of this scenario (program id {})",
                args.ctx, opened.program
            ))
        })?;
    let mut est = Estimator::new(spec.shape()).with_branch_every(args.branch_every);
    let deadline = Instant::now() + Duration::from_secs(args.timeout_s);
    let sink = Sink {
        est: &mut est,
        ctx: args.ctx,
        keys: &keys,
    };
    let got = collect(&node, sink, args.samples, deadline)?;
    let estimate = est.estimate(Scale::Rates {
        branch_records: (got.stacks + got.stacks_lost) as f64,
        branch_every: got.branches_per_stack(args.branch_every),
    });
    let out = output::CpiOutput::new(args.ctx, spec, args, &got, &estimate);
    let text = if args.json {
        crate::output::json_line(&out)?
    } else {
        out.table(args.top)
    };
    crate::output::emit(&text)?;
    Ok(if got.samples == 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

impl Args {
    /// (P, R_MAX, N) asked for.
    pub fn rates(&self) -> (u32, u32, u32) {
        (self.period, self.dither, self.branch_every)
    }
}
