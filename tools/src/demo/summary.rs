//! The demo's final summary: totals read through the tenant node as the
//! admin (every context instance, retired ones included, by its id and
//! created cycle), sealed blocks of confidential VMs opened with the key
//! the demo gave them in its private copy of the scenario (the demo plays
//! their tenants), and the comparison with the device's ledger
//! (`GPUPM_IOC_LEDGER`).
//!
//! JSON (stable): [`DemoJson`] (`gpupm demo --help` shows the schema) —
//! `sealed` VMs' totals are shown after decryption with the scenario's key;
//! a sealed VM without a known key has no `totals`.

use std::collections::BTreeMap;

use gpupm_client::DevNode;
use gpupm_client::{Scope, WhoamiExt};
use gpupm_driver::scenario::Scenario;
use gpupm_uapi::events::{self, Scope as EventScope, CATALOGUE, MAX_EVENTS, MULTIBIT_SCALE};
use gpupm_uapi::ioctl::{ledger_scope, LedgerQuery};
use gpupm_uapi::layout::{Block, BlockSlot};
use gpupm_uapi::tenant::{counter_flags, ctx_state, CtxEntry, ReadCounters};
use schemars::JsonSchema;
use serde::Serialize;
use zerocopy::{FromBytes, IntoBytes};

use crate::error::{CliError, CliResult};
use crate::node::{self, Node, Target};

/// Totals of one scope (`None`: sealed without a key).
type Totals = Option<[u64; MAX_EVENTS]>;

/// One context instance.
#[derive(Debug)]
pub struct CtxTotals {
    /// Id.
    pub ctx: u32,
    /// Creation cycle.
    pub created_cycle: u64,
    /// Totals.
    pub totals: Totals,
}

/// One VM.
#[derive(Debug)]
pub struct VmTotals {
    /// Id.
    pub vm: u32,
    /// Confidential.
    pub sealed: bool,
    /// Totals.
    pub totals: Totals,
    /// Every context instance.
    pub contexts: Vec<CtxTotals>,
}

/// Everything the summary shows.
#[derive(Debug)]
pub struct Summary {
    /// The system block.
    pub system: [u64; MAX_EVENTS],
    /// VMs.
    pub vms: Vec<VmTotals>,
    /// Whether every block equals the ledger.
    pub ledger_match: bool,
    /// Scopes that differ from the ledger.
    pub mismatches: Vec<String>,
}

fn open_slot(slot: &BlockSlot, key: Option<&[u8; 32]>) -> Totals {
    if let Some(b) = slot.plain_block() {
        return Some(b.counters);
    }
    let key = key?;
    let mut payload = slot.payload;
    gpupm_cc::open(key, &slot.envelope, &mut payload, &slot.tag).ok()?;
    Block::read_from_prefix(payload.as_bytes())
        .ok()
        .map(|(b, _)| b.counters)
}

fn answer(rc: &ReadCounters, key: Option<&[u8; 32]>) -> Totals {
    if node::sealed(rc) {
        open_slot(&rc.sealed, key)
    } else {
        Some(rc.values)
    }
}

/// What a block must hold after a flush: `(generated − remainder)/scale − masked`.
pub fn expected(l: &LedgerQuery) -> [u64; MAX_EVENTS] {
    let mut out = [0; MAX_EVENTS];
    for (e, o) in out.iter_mut().enumerate() {
        let scale = match u16::try_from(e).ok().and_then(events::by_id) {
            Some(info) if info.multibit => MULTIBIT_SCALE,
            _ => 1,
        };
        *o = (l.generated[e].saturating_sub(l.remainder[e]) / scale).saturating_sub(l.masked[e]);
    }
    out
}

/// Totals of an earlier instance of a context id (the id now names a
/// newer one): read by (id, created cycle), retired ones included.
fn instance_totals(
    node: &Node,
    ctx: u32,
    created_cycle: u64,
    key: Option<&[u8; 32]>,
) -> CliResult<Totals> {
    let t = Target::Instance { ctx, created_cycle };
    let ri = node
        .client()
        .read_instance(ctx, created_cycle, &[])
        .map_err(|e| CliError::runtime(format!("{t}: {}", node.fail(e, None))))?;
    Ok(if ri.out_flags & counter_flags::SEALED != 0 {
        open_slot(&ri.sealed, key)
    } else {
        Some(ri.values)
    })
}

/// The ledger's totals of (`scope`, `id`). A confidential VM's ledger
/// answers are sealed like its blocks: the demo opens them with the VM's
/// key from the scenario, as its tenant would.
fn ledger_totals(
    dev: &DevNode,
    scope: u32,
    id: u32,
    key: Option<&[u8; 32]>,
) -> CliResult<[u64; MAX_EVENTS]> {
    let mut l = dev
        .ledger(scope, id)
        .map_err(|e| CliError::runtime(crate::error::one_line(e)))?;
    if let Some(k) = key {
        gpupm_cc::open_ledger(&mut l, k)
            .map_err(|e| CliError::runtime(format!("ledger of {scope}/{id}: {e}")))?;
    }
    Ok(expected(&l))
}

/// Whether `totals` (when readable) differ from the ledger's.
fn differs(totals: Option<[u64; MAX_EVENTS]>, ledger: CliResult<[u64; MAX_EVENTS]>) -> bool {
    totals.is_some_and(|t| t != ledger.unwrap_or([u64::MAX; MAX_EVENTS]))
}

/// A VM and its contexts.
type VmContexts = (u32, Vec<CtxEntry>);

/// The contexts of every visible VM, and the created cycle of the latest
/// instance of each context id. Context ids are reused, across VMs too: a
/// scope read answers for the latest instance of an id, an instance read
/// for the earlier ones.
fn visible_contexts(
    node: &Node,
    vms: impl IntoIterator<Item = u32>,
) -> CliResult<(Vec<VmContexts>, BTreeMap<u32, u64>)> {
    let mut lists = Vec::new();
    let mut latest: BTreeMap<u32, u64> = BTreeMap::new();
    for vm in vms {
        let list = node
            .client()
            .list_contexts(vm)
            .map_err(|e| node.fail(e, Some(Scope::Vm(vm))))?;
        for c in &list {
            let e = latest.entry(c.ctx).or_insert(c.created_cycle);
            *e = (*e).max(c.created_cycle);
        }
        lists.push((vm, list));
    }
    Ok((lists, latest))
}

/// VM `vm`'s totals and its contexts', each compared with the ledger
/// (mismatches appended to `mismatches`).
fn vm_totals(
    node: &Node,
    dev: &DevNode,
    (vm, list): VmContexts,
    latest: &BTreeMap<u32, u64>,
    key: Option<&[u8; 32]>,
    mismatches: &mut Vec<String>,
) -> CliResult<VmTotals> {
    let rc = node.totals(Scope::Vm(vm))?;
    let sealed = node::sealed(&rc);
    let totals = answer(&rc, key);
    if differs(totals, ledger_totals(dev, ledger_scope::VM, vm, key)) {
        mismatches.push(format!("VM {vm}"));
    }
    let mut contexts = Vec::new();
    for c in &list {
        let live = c.state != ctx_state::RETIRED;
        let totals = if latest.get(&c.ctx) == Some(&c.created_cycle) {
            answer(&*node.totals(Scope::Ctx(c.ctx))?, key)
        } else {
            instance_totals(node, c.ctx, c.created_cycle, key)?
        };
        if live
            && differs(
                totals,
                ledger_totals(dev, ledger_scope::CONTEXT, c.ctx, key),
            )
        {
            mismatches.push(format!("context {}", c.ctx));
        }
        contexts.push(CtxTotals {
            ctx: c.ctx,
            created_cycle: c.created_cycle,
            totals,
        });
    }
    Ok(VmTotals {
        vm,
        sealed,
        totals,
        contexts,
    })
}

/// Reads every total and compares with the ledger.
pub fn collect(node: &Node, dev: &DevNode, scenario: &Scenario) -> CliResult<Summary> {
    let who = node.whoami()?;
    let mut mismatches = Vec::new();
    let system = node.totals(Scope::System)?.values;
    if system != ledger_totals(dev, ledger_scope::SYSTEM, 0, None)? {
        mismatches.push("system".to_string());
    }
    let (lists, latest) = visible_contexts(node, who.visible_vms())?;
    let mut vms = Vec::new();
    for entry in lists {
        let key = scenario
            .vms
            .iter()
            .find(|v| v.id == entry.0)
            .and_then(|v| v.confidential_key.as_ref());
        vms.push(vm_totals(node, dev, entry, &latest, key, &mut mismatches)?);
    }
    Ok(Summary {
        system,
        vms,
        ledger_match: mismatches.is_empty(),
        mismatches,
    })
}

/// Totals by event name, in the events' units (bytes for `*_bytes`).
type TotalsJson = BTreeMap<&'static str, u64>;

fn totals_json(v: &[u64; MAX_EVENTS]) -> TotalsJson {
    let v = crate::derived::in_units(v);
    CATALOGUE
        .iter()
        .map(|e| (e.name, v[usize::from(e.id)]))
        .collect()
}

/// `gpupm demo --json`: the final totals beside the device's ledger.
#[derive(Debug, Serialize, JsonSchema)]
pub struct DemoJson {
    /// The whole device.
    pub system: DemoSystem,
    /// Every VM, with every context instance it ran.
    pub vms: Vec<DemoVm>,
    /// The catalogue: where each event is counted and in what unit.
    pub events: BTreeMap<&'static str, DemoEvent>,
    /// Every block equals the device's ledger.
    pub ledger_match: bool,
}

/// The system block.
#[derive(Debug, Serialize, JsonSchema)]
pub struct DemoSystem {
    /// Totals by event name.
    pub totals: TotalsJson,
}

/// One VM.
#[derive(Debug, Serialize, JsonSchema)]
pub struct DemoVm {
    /// VM id.
    pub vm: u32,
    /// Confidential (totals decrypted with the scenario's key).
    pub sealed: bool,
    /// Totals by event name (absent: sealed without a known key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub totals: Option<TotalsJson>,
    /// Every context instance, retired ones included.
    pub contexts: Vec<DemoCtx>,
}

/// One context instance.
#[derive(Debug, Serialize, JsonSchema)]
pub struct DemoCtx {
    /// Context id.
    pub ctx: u32,
    /// Creation cycle (names the instance with `ctx`).
    pub created_cycle: u64,
    /// Totals by event name (absent: sealed without a known key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub totals: Option<TotalsJson>,
}

/// Where an event is counted and in what unit.
#[derive(Debug, Serialize, JsonSchema)]
pub struct DemoEvent {
    /// `partition` (per VM and context) or `device` (device level only).
    pub scope: &'static str,
    /// The unit the totals are in (`bytes`, `cycles`, …).
    pub unit: &'static str,
    /// What one device count is worth in `unit` (32 for multi-bit events;
    /// the totals are already multiplied).
    pub scale: u64,
}

/// The summary as the documented JSON.
pub fn to_json(s: &Summary) -> DemoJson {
    let vms = s
        .vms
        .iter()
        .map(|v| DemoVm {
            vm: v.vm,
            sealed: v.sealed,
            totals: v.totals.as_ref().map(totals_json),
            contexts: v
                .contexts
                .iter()
                .map(|c| DemoCtx {
                    ctx: c.ctx,
                    created_cycle: c.created_cycle,
                    totals: c.totals.as_ref().map(totals_json),
                })
                .collect(),
        })
        .collect();
    let events = CATALOGUE
        .iter()
        .map(|e| {
            let scope = if e.unit.scope() == EventScope::Device {
                "device"
            } else {
                "partition"
            };
            (
                e.name,
                DemoEvent {
                    scope,
                    unit: e.unit_name(),
                    scale: e.scale(),
                },
            )
        })
        .collect();
    DemoJson {
        system: DemoSystem {
            totals: totals_json(&s.system),
        },
        vms,
        events,
        ledger_match: s.ledger_match,
    }
}

/// The summary as a table of a few events.
pub fn table(s: &Summary) -> String {
    let shown = [
        "sm_inst_executed",
        "sm_cycles_active",
        "l2_hit",
        "fb_bytes",
        "pcie_rx_bytes",
    ];
    let ids: Vec<usize> = shown
        .iter()
        .filter_map(|n| events::by_name(n))
        .map(|e| usize::from(e.id))
        .collect();
    let mut t = format!("{:<8} {:>5} {:>9}", "SCOPE", "ID", "CONTEXTS");
    for n in shown {
        t += &format!(" {n:>22}");
    }
    t += "\n";
    let row = |t: &mut String, scope: &str, id: u32, n: String, v: &Totals| {
        *t += &format!("{scope:<8} {id:>5} {n:>9}");
        let v = v.as_ref().map(crate::derived::in_units);
        for &e in &ids {
            *t += &format!(
                " {:>22}",
                v.map_or_else(|| "sealed".to_string(), |v| crate::numfmt::thousands(v[e]))
            );
        }
        *t += "\n";
    };
    row(&mut t, "system", 0, String::new(), &Some(s.system));
    for v in &s.vms {
        row(
            &mut t,
            if v.sealed { "vm (cc)" } else { "vm" },
            v.vm,
            v.contexts.len().to_string(),
            &v.totals,
        );
    }
    t += &if s.ledger_match {
        "every total equals the device's ledger\n".to_string()
    } else {
        format!("MISMATCH with the ledger: {}\n", s.mismatches.join(", "))
    };
    t
}
