//! `gpupm list`: partitions (admin, from the device node), VMs and contexts
//! visible to the caller (from the tenant node; the admin sees all).
//!
//! JSON: [`ListJson`] (`gpupm list --help` shows the schema).

use std::process::ExitCode;

use gpupm_client::ops::reg32;
use gpupm_client::DevNode;
use gpupm_client::{Scope, WhoamiExt};
use gpupm_uapi::regs::{self as r, part_status, MAX_PARTITION_SLOTS};
use gpupm_uapi::tenant::ctx_state;
use schemars::JsonSchema;
use serde::Serialize;

use crate::error::CliResult;
use crate::gpu::{identity, GpuJson};
use crate::node::{self, Global, Node};
use crate::output::emit;

/// Arguments of `gpupm list`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Show retired contexts too (they can be many).
    #[arg(long)]
    all: bool,
}

/// Name of a context state, as the JSON spells it.
fn state_name(s: CtxStateName) -> &'static str {
    match s {
        CtxStateName::Active => "active",
        CtxStateName::Destroyed => "destroyed",
        CtxStateName::Retired => "retired",
    }
}

/// Configured partition slots (other slots' registers refuse access).
pub fn configured_partitions(dev: &DevNode) -> Result<Vec<u32>, gpupm_client::DevError> {
    let all: Vec<u32> = (1..MAX_PARTITION_SLOTS).collect();
    let status = dev.read_many(
        &all.iter()
            .map(|&p| r::part(p, r::PART_STATUS))
            .collect::<Vec<_>>(),
    )?;
    Ok(all
        .iter()
        .zip(status)
        .filter(|(_, s)| reg32(*s) & part_status::CONFIGURED != 0)
        .map(|(&p, _)| p)
        .collect())
}

/// A partition in use: (slot, running VM, running context, VMs bound).
pub type PartitionRow = (u32, u32, u32, Vec<u32>);

/// Partition slots in use.
pub fn partitions(dev: &DevNode, vms: &[u32]) -> Option<Vec<PartitionRow>> {
    let slots = configured_partitions(dev).ok()?;
    let offs: Vec<u64> = slots
        .iter()
        .flat_map(|&p| [r::part(p, r::PART_CUR_VM), r::part(p, r::PART_CUR_CTX)])
        .collect();
    let vals = dev.read_many(&offs).ok()?;
    let vm_parts = dev
        .read_many(
            &vms.iter()
                .map(|&v| r::vm(v, r::VM_PARTITION))
                .collect::<Vec<_>>(),
        )
        .ok()?;
    Some(
        slots
            .iter()
            .zip(vals.chunks_exact(2))
            .map(|(&p, v)| {
                let bound = vms
                    .iter()
                    .zip(&vm_parts)
                    .filter(|(_, &vp)| reg32(vp) == p)
                    .map(|(&vm, _)| vm)
                    .collect();
                (p, reg32(v[0]), reg32(v[1]), bound)
            })
            .collect(),
    )
}

/// `gpupm list --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ListJson {
    /// Whether the caller is the admin (sees every VM and the device).
    pub admin: bool,
    /// The caller's uid.
    pub uid: u32,
    /// The device (the admin, when the device node is readable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuJson>,
    /// Partitions in use (the admin, when the device node is readable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<Vec<PartitionJson>>,
    /// The VMs visible to the caller.
    pub vms: Vec<VmJson>,
}

/// A partition in use.
#[derive(Debug, Serialize, JsonSchema)]
pub struct PartitionJson {
    /// Partition slot.
    pub slot: u32,
    /// VMs bound to it.
    pub vms: Vec<u32>,
    /// VM running now.
    pub running_vm: u32,
    /// Context running now (0: none).
    pub running_ctx: u32,
}

/// A VM and its contexts.
#[derive(Debug, Serialize, JsonSchema)]
pub struct VmJson {
    /// VM id.
    pub vm: u32,
    /// Confidential: its counters are sealed.
    pub sealed: bool,
    /// Its contexts (retired ones with `--all`).
    pub contexts: Vec<CtxJson>,
}

/// A context instance.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CtxJson {
    /// Context id.
    pub ctx: u32,
    /// Lifecycle state.
    pub state: CtxStateName,
    /// Device cycle of its creation (names the instance with `ctx`).
    pub created_cycle: u64,
}

/// A context's lifecycle state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CtxStateName {
    /// Exists and may run.
    Active,
    /// Destroyed; its block is still on the device.
    Destroyed,
    /// Destroyed, final totals persisted by the daemon.
    Retired,
}

impl CtxStateName {
    /// From the ABI's `ctx_state`.
    fn of(s: u32) -> Option<CtxStateName> {
        match s {
            ctx_state::ACTIVE => Some(CtxStateName::Active),
            ctx_state::DESTROYED => Some(CtxStateName::Destroyed),
            ctx_state::RETIRED => Some(CtxStateName::Retired),
            _ => None,
        }
    }
}

/// Reads what the caller may see.
fn collect(g: &Global, args: &Args) -> CliResult<ListJson> {
    let node = Node::open(&g.tenant_node)?;
    let who = node.whoami()?;
    let vms = who.visible_vms();
    let dev = (who.admin != 0)
        .then(|| DevNode::open(&g.node_dir).ok())
        .flatten();
    let partitions = dev.as_ref().and_then(|d| partitions(d, &vms));
    let gpu = dev.as_ref().and_then(|d| identity(d).ok().flatten());
    let mut out_vms = Vec::new();
    for &vm in &vms {
        let s = Scope::Vm(vm);
        let rc = node.totals(s)?;
        let ctxs = node
            .client()
            .list_contexts(vm)
            .map_err(|e| node.fail(e, Some(s)))?;
        let contexts = ctxs
            .iter()
            .filter(|c| args.all || c.state != ctx_state::RETIRED)
            .filter_map(|c| {
                Some(CtxJson {
                    ctx: c.ctx,
                    state: CtxStateName::of(c.state)?,
                    created_cycle: c.created_cycle,
                })
            })
            .collect();
        out_vms.push(VmJson {
            vm,
            sealed: node::sealed(&rc),
            contexts,
        });
    }
    Ok(ListJson {
        admin: who.admin != 0,
        uid: who.uid,
        gpu,
        partitions: partitions.map(|p| {
            p.into_iter()
                .map(|(slot, running_vm, running_ctx, vms)| PartitionJson {
                    slot,
                    vms,
                    running_vm,
                    running_ctx,
                })
                .collect()
        }),
        vms: out_vms,
    })
}

/// Runs the command.
pub fn run(g: &Global, args: &Args) -> CliResult<ExitCode> {
    let list = collect(g, args)?;
    if args.json {
        emit(&crate::output::json_line(&list)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    emit(&table(&list))?;
    Ok(ExitCode::SUCCESS)
}

/// The listing as tables.
fn table(list: &ListJson) -> String {
    let mut t = String::new();
    if let Some(gpu) = &list.gpu {
        t += &gpu.line();
        t += "\n\n";
    }
    if let Some(p) = &list.partitions {
        t += &format!(
            "{:<10} {:<16} {:>10} {:>11}\n",
            "PARTITION", "VMS", "RUNNING_VM", "RUNNING_CTX"
        );
        for q in p {
            let b: Vec<String> = q.vms.iter().map(u32::to_string).collect();
            t += &format!(
                "{:<10} {:<16} {:>10} {:>11}\n",
                q.slot,
                b.join(","),
                q.running_vm,
                q.running_ctx
            );
        }
        t += "\n";
    }
    t += &format!(
        "{:<5} {:<7} {:>6} {:<10} {:>16}\n",
        "VM", "SEALED", "CTX", "STATE", "CREATED_CYCLE"
    );
    for v in &list.vms {
        let sealed = if v.sealed { "yes" } else { "no" };
        t += &format!("{:<5} {:<7}\n", v.vm, sealed);
        for c in &v.contexts {
            t += &format!(
                "{:<5} {:<7} {:>6} {:<10} {:>16}\n",
                "",
                "",
                c.ctx,
                state_name(c.state),
                c.created_cycle
            );
        }
    }
    t
}
