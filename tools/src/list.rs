//! `gpupm list`: partitions (admin, from the device node), VMs and contexts
//! visible to the caller (from the tenant node; the admin sees all).
//!
//! JSON: `{"admin": BOOL, "uid": N, "partitions": [{"slot": P, "vms": [ID…],
//! "running_vm": ID, "running_ctx": ID}] (admin with access to the device
//! node, else absent), "vms": [{"vm": ID, "sealed": BOOL, "contexts":
//! [{"ctx": ID, "state": "active"|"destroyed"|"retired", "created_cycle": C}]}]}`

use std::process::ExitCode;

use gpupm_client::ops::reg32;
use gpupm_client::DevNode;
use gpupm_client::{Scope, WhoamiExt};
use gpupm_uapi::regs::{self as r, part_status, MAX_PARTITION_SLOTS};
use gpupm_uapi::tenant::ctx_state;
use serde_json::{json, Value};

use crate::error::CliResult;
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

/// Name of a context state.
pub fn state_name(s: u32) -> &'static str {
    match s {
        ctx_state::ACTIVE => "active",
        ctx_state::DESTROYED => "destroyed",
        ctx_state::RETIRED => "retired",
        _ => "?",
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

/// Runs the command.
pub fn run(g: &Global, args: &Args) -> CliResult<ExitCode> {
    let node = Node::open(&g.tenant_node)?;
    let who = node.whoami()?;
    let vms = who.visible_vms();
    let parts = if who.admin != 0 {
        DevNode::open(&g.node_dir)
            .ok()
            .and_then(|d| partitions(&d, &vms))
    } else {
        None
    };
    let mut out_vms = Vec::new();
    for &vm in &vms {
        let s = Scope::Vm(vm);
        let rc = node.totals(s)?;
        let sealed = node::sealed(&rc);
        let ctxs = node
            .client
            .list_contexts(vm)
            .map_err(|e| node.fail(e, Some(s)))?;
        let ctxs: Vec<Value> = ctxs
            .iter()
            .filter(|c| args.all || c.state != ctx_state::RETIRED)
            .map(|c| json!({"ctx": c.ctx, "state": state_name(c.state), "created_cycle": c.created_cycle}))
            .collect();
        out_vms.push(json!({"vm": vm, "sealed": sealed, "contexts": ctxs}));
    }
    if args.json {
        let mut o = json!({"admin": who.admin != 0, "uid": who.uid, "vms": out_vms});
        if let Some(p) = &parts {
            o["partitions"] = p
                .iter()
                .map(|(slot, cv, cc, bound)| json!({"slot": slot, "vms": bound, "running_vm": cv, "running_ctx": cc}))
                .collect();
        }
        emit(&format!("{o}\n"))?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = String::new();
    if let Some(p) = &parts {
        t += &format!(
            "{:<10} {:<16} {:>10} {:>11}\n",
            "PARTITION", "VMS", "RUNNING_VM", "RUNNING_CTX"
        );
        for (slot, cv, cc, bound) in p {
            let b: Vec<String> = bound.iter().map(u32::to_string).collect();
            t += &format!("{:<10} {:<16} {:>10} {:>11}\n", slot, b.join(","), cv, cc);
        }
        t += "\n";
    }
    t += &format!(
        "{:<5} {:<7} {:>6} {:<10} {:>16}\n",
        "VM", "SEALED", "CTX", "STATE", "CREATED_CYCLE"
    );
    for v in &out_vms {
        let sealed = if v["sealed"] == json!(true) {
            "yes"
        } else {
            "no"
        };
        t += &format!("{:<5} {:<7}\n", v["vm"], sealed);
        for c in v["contexts"].as_array().into_iter().flatten() {
            t += &format!(
                "{:<5} {:<7} {:>6} {:<10} {:>16}\n",
                "",
                "",
                c["ctx"],
                c["state"].as_str().unwrap_or(""),
                c["created_cycle"]
            );
        }
    }
    emit(&t)?;
    Ok(ExitCode::SUCCESS)
}
