//! `gpupm ranges --ctx ID add|list|rm` and `gpupm callgraph --ctx ID`:
//! marked ranges on one of the caller's contexts and the call graph the
//! daemon builds from their threshold crossings (tenant node, ABI 1.7;
//! `docs/ranges.md`, "Host side").
//!
//! `callgraph --folded` prints the folded-stack profile flame-graph tools
//! read: one `k0;k1;…;kn COUNT` line per distinct stack, kernels named
//! `k<index>` (the kernel's index in the context's program), outermost
//! first.

use std::process::ExitCode;

use gpupm_client::ranges::CallGraphData;
use gpupm_client::Scope;
use gpupm_uapi::ranges::range_event;
use gpupm_uapi::tenant::ranges::{range_kind, range_row_flags, range_trigger, AddRange, RangeRow};
use nix::errno::Errno;

use crate::error::{CliError, CliResult};
use crate::node::{Global, Node};
use crate::numfmt::thousands;
use crate::output::emit;

/// Arguments of `gpupm ranges`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The context (one of yours).
    #[arg(long, value_name = "ID")]
    ctx: u32,
    /// JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    action: Action,
}

#[derive(clap::Subcommand, Debug)]
enum Action {
    /// Program a range: `--code KERNEL:FIRST-LAST` (blocks of a kernel of
    /// the context's program) or `--data START-END` (addresses).
    Add(AddArgs),
    /// The context's ranges, hottest (largest count) first.
    List,
    /// Remove a range by its handle.
    Rm {
        /// The handle `add` printed.
        handle: u32,
    },
}

#[derive(clap::Args, Debug)]
struct AddArgs {
    /// Code range: KERNEL:FIRST-LAST (block indices, inclusive).
    #[arg(long, conflicts_with = "data")]
    code: Option<String>,
    /// Data range: START-END (addresses, inclusive; 0x… accepted).
    #[arg(long)]
    data: Option<String>,
    /// Event counted inside the range.
    #[arg(long, value_parser = ["instructions", "cycles", "memory"], default_value = "instructions")]
    event: String,
    /// A crossing record every time the count reaches a multiple of T.
    #[arg(long, value_name = "T", conflicts_with = "latency")]
    count: Option<u32>,
    /// A crossing record when one entry stays T context cycles.
    #[arg(long, value_name = "T")]
    latency: Option<u32>,
}

/// One range in `gpupm ranges --json`.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct RangeJson {
    /// Handle.
    pub handle: u32,
    /// Range register of the partition.
    pub register: u16,
    /// "code" or "data".
    pub kind: &'static str,
    /// "instructions", "cycles" or "memory".
    pub event: &'static str,
    /// "none", "count" or "latency".
    pub trigger: &'static str,
    /// Threshold.
    pub threshold: u32,
    /// Kernel (code ranges).
    pub kernel: u32,
    /// First block or address.
    pub first: u32,
    /// Last block or address.
    pub last: u32,
    /// Entries of the context since the range was added.
    pub entries: u64,
    /// The event counted inside for the context.
    pub count: u64,
    /// Crossing records received.
    pub crossings: u64,
    /// Crossings whose record the device lost.
    pub lost: u64,
    /// Some counts could not be attributed to one context (a switch the
    /// daemon did not see).
    pub inexact: bool,
}

/// `gpupm ranges --json` (every action): the context's ranges after it.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct RangesJson {
    /// The context.
    pub ctx: u32,
    /// The handle `add` created (null for other actions).
    pub added: Option<u32>,
    /// Ranges, largest count first.
    pub ranges: Vec<RangeJson>,
}

fn event_name(e: u8) -> &'static str {
    match u32::from(e) {
        range_event::INSTRUCTIONS => "instructions",
        range_event::CYCLES => "cycles",
        _ => "memory",
    }
}

fn to_json(r: &RangeRow) -> RangeJson {
    RangeJson {
        handle: r.handle,
        register: r.register,
        kind: if u32::from(r.kind) == range_kind::DATA {
            "data"
        } else {
            "code"
        },
        event: event_name(r.event),
        trigger: match u32::from(r.trigger) {
            range_trigger::COUNT => "count",
            range_trigger::LATENCY => "latency",
            _ => "none",
        },
        threshold: r.threshold,
        kernel: r.kernel,
        first: r.first,
        last: r.last,
        entries: r.entries,
        count: r.count,
        crossings: r.crossings,
        lost: r.lost,
        inexact: r.flags & range_row_flags::INEXACT != 0,
    }
}

fn number(s: &str) -> CliResult<u32> {
    let s = s.trim();
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(&hex.replace('_', ""), 16),
        None => s.replace('_', "").parse(),
    };
    parsed.map_err(|_| CliError::usage(format!("not a number: {s:?}")))
}

fn span(s: &str) -> CliResult<(u32, u32)> {
    let (a, b) = s
        .split_once('-')
        .ok_or_else(|| CliError::usage(format!("expected FIRST-LAST, got {s:?}")))?;
    Ok((number(a)?, number(b)?))
}

fn request(ctx: u32, a: &AddArgs) -> CliResult<AddRange> {
    let (kind, kernel, (first, last)) = match (&a.code, &a.data) {
        (Some(code), None) => {
            let (k, blocks) = code
                .split_once(':')
                .ok_or_else(|| CliError::usage("--code takes KERNEL:FIRST-LAST"))?;
            (range_kind::CODE, number(k)?, span(blocks)?)
        }
        (None, Some(data)) => (range_kind::DATA, 0, span(data)?),
        _ => {
            return Err(CliError::usage(
                "give --code KERNEL:FIRST-LAST or --data START-END",
            ))
        }
    };
    let event = match a.event.as_str() {
        "cycles" => range_event::CYCLES,
        "memory" => range_event::MEMORY,
        _ => range_event::INSTRUCTIONS,
    };
    let (trigger, threshold) = match (a.count, a.latency) {
        (Some(t), _) => (range_trigger::COUNT, t),
        (None, Some(t)) => (range_trigger::LATENCY, t),
        (None, None) => (range_trigger::NONE, 0),
    };
    Ok(AddRange {
        ctx,
        kind,
        event,
        trigger,
        threshold,
        kernel,
        first,
        last,
        ..AddRange::default()
    })
}

/// Runs `gpupm ranges`.
pub fn run(g: &Global, args: &Args) -> CliResult<ExitCode> {
    let node = Node::open(&g.tenant_node)?;
    let scope = Some(Scope::Ctx(args.ctx));
    let client = node.client();
    let mut added = None;
    match &args.action {
        Action::Add(a) => {
            let req = request(args.ctx, a)?;
            let ans = client.add_range(&req).map_err(|e| fail(&node, e, scope))?;
            added = Some(ans.handle);
        }
        Action::Rm { handle } => {
            if let Err(e) = client.remove_range(args.ctx, *handle) {
                // The handle or the context: the context answers for itself.
                return Err(match client.read_ranges(args.ctx) {
                    Ok(rows) if matches!(e.errno(), Some(Errno::EACCES | Errno::ENOENT)) => {
                        let handles: Vec<String> =
                            rows.iter().map(|r| r.handle.to_string()).collect();
                        CliError::usage(format!(
                            "no range {handle} on context {} (its ranges: {})",
                            args.ctx,
                            if handles.is_empty() {
                                "none".to_string()
                            } else {
                                handles.join(", ")
                            }
                        ))
                    }
                    _ => fail(&node, e, scope),
                });
            }
        }
        Action::List => {}
    }
    let mut rows = client
        .read_ranges(args.ctx)
        .map_err(|e| fail(&node, e, scope))?;
    rows.sort_by(|a, b| b.count.cmp(&a.count).then(a.handle.cmp(&b.handle)));
    let out = RangesJson {
        ctx: args.ctx,
        added,
        ranges: rows.iter().map(to_json).collect(),
    };
    let text = if args.json {
        crate::output::json_line(&out)?
    } else {
        table(&out)
    };
    emit(&text)?;
    Ok(ExitCode::SUCCESS)
}

fn table(out: &RangesJson) -> String {
    let mut t = String::new();
    if let Some(h) = out.added {
        t += &format!("added range {h}\n");
    }
    t += &format!(
        "{:>6} {:>3} {:<5} {:<12} {:<14} {:>12} {:>16} {:>9} {:>6}\n",
        "HANDLE", "REG", "KIND", "EVENT", "WHERE", "ENTRIES", "COUNT", "CROSSINGS", "LOST"
    );
    for r in &out.ranges {
        let place = if r.kind == "code" {
            format!("k{}:{}-{}", r.kernel, r.first, r.last)
        } else {
            format!("{:#x}-{:#x}", r.first, r.last)
        };
        t += &format!(
            "{:>6} {:>3} {:<5} {:<12} {:<14} {:>12} {:>16} {:>9} {:>6}{}\n",
            r.handle,
            r.register,
            r.kind,
            r.event,
            place,
            thousands(r.entries),
            thousands(r.count),
            thousands(r.crossings),
            thousands(r.lost),
            if r.inexact { " (inexact)" } else { "" }
        );
    }
    t
}

/// EINVAL on a range request is the range, not the context id.
fn fail(node: &Node, e: gpupm_client::ClientError, s: Option<Scope>) -> CliError {
    match e.errno() {
        Some(Errno::EINVAL) => CliError::usage(format!(
            "the daemon refused the request (EINVAL): check the kernel, blocks, event and threshold: {}",
            crate::error::one_line(e)
        )),
        // Not a failure of the command: the request does not fit what the
        // partition and the context have free (exit 2, as every refused
        // request).
        Some(Errno::ENOSPC) => CliError::usage(format!(
            "no range register free on the partition, or the context already has {} ranges \
             (ENOSPC): remove one with `gpupm ranges --ctx ID rm HANDLE`",
            gpupm_uapi::tenant::ranges::MAX_CONTEXT_RANGES
        )),
        Some(Errno::EOPNOTSUPP) => CliError::usage(
            "ranges are not offered for a confidential VM's context (its records are sealed)",
        ),
        _ => node.fail(e, s),
    }
}

/// Arguments of `gpupm callgraph`.
#[derive(clap::Args, Debug)]
pub struct GraphArgs {
    /// The context (one of yours).
    #[arg(long, value_name = "ID")]
    ctx: u32,
    /// Folded stacks (`k0;k1 COUNT` per line) for flame-graph tools.
    #[arg(long, conflicts_with = "json")]
    folded: bool,
    /// JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// One edge in `gpupm callgraph --json`.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct EdgeJson {
    /// Calling kernel.
    pub caller: u16,
    /// Calling block.
    pub call_block: u16,
    /// Called kernel.
    pub callee: u16,
    /// Crossings whose stack holds this call.
    pub count: u64,
}

/// One kernel in `gpupm callgraph --json`.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct KernelJson {
    /// Kernel index.
    pub kernel: u16,
    /// Crossings in the kernel itself.
    #[serde(rename = "self")]
    pub self_samples: u64,
    /// Crossings with the kernel on the stack.
    pub inclusive: u64,
}

/// One stack in `gpupm callgraph --json`.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct StackJson {
    /// Kernels, outermost first.
    pub frames: Vec<u16>,
    /// Crossings with this stack.
    pub count: u64,
}

/// `gpupm callgraph --json`.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct GraphJson {
    /// The context.
    pub ctx: u32,
    /// Crossing records in the graph.
    pub crossings: u64,
    /// Crossings whose record the device lost.
    pub lost: u64,
    /// Crossings whose stack is not in `stacks` (the table was full).
    pub stacks_dropped: u64,
    /// Caller → callee edges.
    pub edges: Vec<EdgeJson>,
    /// Self and inclusive samples per kernel.
    pub kernels: Vec<KernelJson>,
    /// Distinct stacks.
    pub stacks: Vec<StackJson>,
}

fn graph_json(ctx: u32, g: &CallGraphData) -> GraphJson {
    GraphJson {
        ctx,
        crossings: g.crossings,
        lost: g.lost,
        stacks_dropped: g.stacks_dropped,
        edges: g
            .edges
            .iter()
            .map(|(&(caller, call_block, callee), &count)| EdgeJson {
                caller,
                call_block,
                callee,
                count,
            })
            .collect(),
        kernels: g
            .kernels
            .iter()
            .map(|(&kernel, &(own, inclusive))| KernelJson {
                kernel,
                self_samples: own,
                inclusive,
            })
            .collect(),
        stacks: g
            .stacks
            .iter()
            .map(|(frames, &count)| StackJson {
                frames: frames.clone(),
                count,
            })
            .collect(),
    }
}

/// Runs `gpupm callgraph`.
pub fn run_graph(g: &Global, args: &GraphArgs) -> CliResult<ExitCode> {
    let node = Node::open(&g.tenant_node)?;
    let graph = node
        .client()
        .call_graph(args.ctx)
        .map_err(|e| fail(&node, e, Some(Scope::Ctx(args.ctx))))?;
    let text = if args.folded {
        graph.folded(|k| format!("k{k}"))
    } else if args.json {
        crate::output::json_line(&graph_json(args.ctx, &graph))?
    } else {
        let mut t = format!(
            "ctx {}: {} crossings, {} lost, {} stacks dropped\n",
            args.ctx,
            thousands(graph.crossings),
            thousands(graph.lost),
            thousands(graph.stacks_dropped)
        );
        t += &format!("{:>8} {:>12} {:>12}\n", "KERNEL", "SELF", "INCLUSIVE");
        for (k, (own, inc)) in &graph.kernels {
            t += &format!(
                "{:>8} {:>12} {:>12}\n",
                format!("k{k}"),
                thousands(*own),
                thousands(*inc)
            );
        }
        t += &format!("{:<24} {:>12}\n", "CALL (caller:block -> callee)", "COUNT");
        for ((k, b, c), n) in &graph.edges {
            t += &format!(
                "{:<24} {:>12}\n",
                format!("k{k}:{b} -> k{c}"),
                thousands(*n)
            );
        }
        t
    };
    emit(&text)?;
    Ok(ExitCode::SUCCESS)
}
