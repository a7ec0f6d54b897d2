//! The demo's final summary: totals read through the tenant node as the
//! admin (retired context instances whose id was reused since come from the
//! demo's own state directory, the only place they still exist), sealed
//! blocks of confidential VMs opened with the scenario's key (the demo
//! wrote the scenario, so it holds the key), and the comparison with the
//! device's ledger (`GPUPM_IOC_LEDGER`).
//!
//! JSON (stable): `{"system": {"totals": {EVENT: N}}, "vms": [{"vm": ID,
//! "sealed": BOOL, "totals": {…}, "contexts": [{"ctx": ID, "created_cycle": C,
//! "totals": {…}}]}], "events": {EVENT: {"scope": "partition"|"device",
//! "unit": UNIT}}, "ledger_match": BOOL}` — `sealed` VMs' totals are shown
//! after decryption with the scenario's key; a sealed VM without a known key
//! has no `totals`.

use std::collections::BTreeMap;
use std::path::Path;

use gpupm_driver::model::cc;
use gpupm_driver::scenario::Scenario;
use gpupm_uapi::events::{self, Scope as EventScope, CATALOGUE, MAX_EVENTS, MULTIBIT_SCALE};
use gpupm_uapi::ioctl::{ledger_scope, LedgerQuery};
use gpupm_uapi::layout::{Block, BlockSlot};
use gpupm_uapi::tenant::{ctx_state, ReadCounters};
use gpupmd::devnode::DevNode;
use gpupmd::store::retired::{plain_block, RetiredStore};
use gpupmd::tenant::client::WhoamiExt;
use gpupmd::view::Scope;
use serde_json::{json, Map, Value};
use zerocopy::{FromBytes, IntoBytes};

use crate::error::{CliError, CliResult};
use crate::node::{self, Node};

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
    if let Some(b) = plain_block(slot) {
        return Some(b.counters);
    }
    let key = key?;
    let mut payload = slot.payload;
    cc::open(key, &slot.envelope, &mut payload, &slot.tag).ok()?;
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

/// Reads every total and compares with the ledger.
pub fn collect(
    node: &Node,
    dev: &DevNode,
    state_dir: &Path,
    scenario: &Scenario,
) -> CliResult<Summary> {
    let who = node.whoami()?;
    let retired = RetiredStore::open(state_dir).map_err(|e| CliError::runtime(node::chain(&e)))?;
    // A confidential VM's ledger answers are sealed like its blocks: the
    // demo opens them with the VM's key from the scenario, as its tenant
    // would.
    let ledger = |scope, id, key: Option<&[u8; 32]>| {
        let mut l = dev
            .ledger(scope, id)
            .map_err(|e| CliError::runtime(node::chain(&e)))?;
        if let Some(k) = key {
            cc::open_ledger(&mut l, k)
                .map_err(|e| CliError::runtime(format!("ledger of {scope}/{id}: {e}")))?;
        }
        Ok::<_, CliError>(expected(&l))
    };
    let mut mismatches = Vec::new();
    let system = node.totals(Scope::System)?.values;
    if system != ledger(ledger_scope::SYSTEM, 0, None)? {
        mismatches.push("system".to_string());
    }
    // Context ids are reused, across VMs too: the node answers for the
    // latest instance of an id, the state directory for the earlier ones.
    let mut lists = Vec::new();
    let mut latest: BTreeMap<u32, u64> = BTreeMap::new();
    for vm in who.visible_vms() {
        let list = node
            .client
            .list_contexts(vm)
            .map_err(|e| node.fail(&e, Some(Scope::Vm(vm))))?;
        for c in &list {
            let e = latest.entry(c.ctx).or_insert(c.created_cycle);
            *e = (*e).max(c.created_cycle);
        }
        lists.push((vm, list));
    }
    let mut vms = Vec::new();
    for (vm, list) in lists {
        let key = scenario
            .vms
            .iter()
            .find(|v| v.id == vm)
            .and_then(|v| v.confidential_key.as_ref());
        let rc = node.totals(Scope::Vm(vm))?;
        let sealed = node::sealed(&rc);
        let totals = answer(&rc, key);
        if totals.is_some_and(|t| {
            t != ledger(ledger_scope::VM, vm, key).unwrap_or([u64::MAX; MAX_EVENTS])
        }) {
            mismatches.push(format!("VM {vm}"));
        }
        let mut contexts = Vec::new();
        for c in &list {
            let live = c.state != ctx_state::RETIRED;
            let totals = if latest.get(&c.ctx) == Some(&c.created_cycle) {
                answer(&*node.totals(Scope::Ctx(c.ctx))?, key)
            } else {
                let rec = retired.load(c.ctx, c.created_cycle).ok_or_else(|| {
                    CliError::runtime(format!(
                        "retired context {} (created at {}) is not in the state directory",
                        c.ctx, c.created_cycle
                    ))
                })?;
                open_slot(&rec.slot, key)
            };
            if live
                && totals.is_some_and(|t| {
                    t != ledger(ledger_scope::CONTEXT, c.ctx, key).unwrap_or([u64::MAX; MAX_EVENTS])
                })
            {
                mismatches.push(format!("context {}", c.ctx));
            }
            contexts.push(CtxTotals {
                ctx: c.ctx,
                created_cycle: c.created_cycle,
                totals,
            });
        }
        vms.push(VmTotals {
            vm,
            sealed,
            totals,
            contexts,
        });
    }
    Ok(Summary {
        system,
        vms,
        ledger_match: mismatches.is_empty(),
        mismatches,
    })
}

fn totals_json(v: &[u64; MAX_EVENTS]) -> Value {
    Value::Object(
        CATALOGUE
            .iter()
            .map(|e| (e.name.to_string(), json!(v[usize::from(e.id)])))
            .collect::<Map<_, _>>(),
    )
}

/// The summary as the documented JSON.
pub fn to_json(s: &Summary) -> Value {
    let vms: Vec<Value> = s
        .vms
        .iter()
        .map(|v| {
            let ctxs: Vec<Value> = v
                .contexts
                .iter()
                .map(|c| {
                    let mut o = json!({"ctx": c.ctx, "created_cycle": c.created_cycle});
                    if let Some(t) = &c.totals {
                        o["totals"] = totals_json(t);
                    }
                    o
                })
                .collect();
            let mut o = json!({"vm": v.vm, "sealed": v.sealed, "contexts": ctxs});
            if let Some(t) = &v.totals {
                o["totals"] = totals_json(t);
            }
            o
        })
        .collect();
    let events: Map<String, Value> = CATALOGUE
        .iter()
        .map(|e| {
            let scope = if e.unit.scope() == EventScope::Device {
                "device"
            } else {
                "partition"
            };
            (
                e.name.to_string(),
                json!({"scope": scope, "unit": e.measure}),
            )
        })
        .collect();
    json!({"system": {"totals": totals_json(&s.system)}, "vms": vms, "events": events, "ledger_match": s.ledger_match})
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
        t += &format!(" {n:>18}");
    }
    t += "\n";
    let row = |t: &mut String, scope: &str, id: u32, n: String, v: &Totals| {
        *t += &format!("{scope:<8} {id:>5} {n:>9}");
        for &e in &ids {
            *t += &format!(
                " {:>18}",
                v.map_or_else(|| "sealed".to_string(), |v| v[e].to_string())
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
