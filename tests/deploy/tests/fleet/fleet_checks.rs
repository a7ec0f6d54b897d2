//! What Prometheus must show at a quiescent point of the fleet, by the
//! devices' ledgers.

use std::collections::BTreeMap;

use gpupm_deploy_tests::device::{event_id, ledger_scope, Counts, Device};
use gpupm_deploy_tests::prometheus::{Prometheus, Sample, POLL};
use gpupm_deploy_tests::scenario::PLAIN_VMS;
use gpupm_deploy_tests::wait_until;
use gpupm_uapi::events::{Scope, CATALOGUE};
use gpupm_uapi::regs as r;

use crate::{NODES, SEEN};

/// Relative tolerance of rate comparisons (floating-point rounding only).
const REL: f64 = 1e-9;

/// One device's ledger at a quiescent point.
#[derive(Debug)]
pub struct Snapshot {
    /// The system block.
    pub system: Counts,
    /// Per plain VM.
    pub vms: BTreeMap<u32, Counts>,
    /// Per active context of a plain VM: (vm, counts).
    pub contexts: BTreeMap<u32, (u32, Counts)>,
    /// Switches the device finished by its fallback.
    pub fallbacks: u64,
}

impl Snapshot {
    /// Reads the ledger of `dev` (flushed, clock stopped).
    pub fn of(dev: &Device) -> Snapshot {
        let vms = PLAIN_VMS
            .iter()
            .map(|&vm| (vm, dev.expected(ledger_scope::VM, vm)))
            .collect();
        let contexts = dev
            .active_contexts()
            .into_iter()
            .filter(|(_, vm)| PLAIN_VMS.contains(vm))
            .map(|(ctx, vm)| (ctx, (vm, dev.expected(ledger_scope::CONTEXT, ctx))))
            .collect();
        Snapshot {
            system: dev.expected(ledger_scope::SYSTEM, 0),
            vms,
            contexts,
            fallbacks: dev.part_sum(r::PART_FALLBACKS),
        }
    }
}

fn close(got: f64, want: f64) -> bool {
    (got - want).abs() <= REL * want.abs().max(f64::MIN_POSITIVE)
}

#[allow(clippy::cast_precision_loss)] // counts far below 2^52
fn f(v: u64) -> f64 {
    v as f64
}

fn node_index(s: &Sample) -> Result<usize, String> {
    NODES
        .iter()
        .position(|n| n.0 == s.label("instance"))
        .ok_or_else(|| format!("a sample of an unknown instance: {s:?}"))
}

fn event_of(s: &Sample) -> Result<usize, String> {
    CATALOGUE
        .iter()
        .find(|e| e.name == s.label("event"))
        .map(|e| usize::from(e.id))
        .ok_or_else(|| format!("a sample of an unknown event: {s:?}"))
}

fn label_u32(s: &Sample, name: &str) -> Result<u32, String> {
    s.label(name)
        .parse()
        .map_err(|_| format!("label {name} of {s:?}"))
}

/// Events a VM block counts (device-level units never are).
fn vm_events() -> impl Iterator<Item = usize> {
    CATALOGUE
        .iter()
        .filter(|e| e.unit.scope() != Scope::Device)
        .map(|e| usize::from(e.id))
}

/// Waits (up to `SEEN`) until Prometheus's scrapes and rule evaluations
/// show `snaps`, then returns; fails with the last difference.
pub fn check_quiescent(prom: &Prometheus, snaps: &[Snapshot], no_fallbacks: bool) {
    wait_until("Prometheus shows the ledgers", SEEN, POLL, || {
        totals(prom, snaps)?;
        let rates = Rates::check(prom, snaps)?;
        utilisation(prom, snaps, &rates)?;
        if no_fallbacks {
            for s in prom.query("instance:gpupm_handshake_fallbacks:ratio_rate5m")? {
                if s.value != 0.0 {
                    return Err(format!("fallback share {s:?}"));
                }
            }
        }
        Ok(())
    });
}

/// `sum by (event) (gpupm_device_events_total)`, its recording rule, and
/// every node's VM totals, exactly.
fn totals(prom: &Prometheus, snaps: &[Snapshot]) -> Result<(), String> {
    let mut want = [0u64; gpupm_uapi::events::MAX_EVENTS];
    for s in snaps {
        want = gpupm_deploy_tests::device::add(&want, &s.system);
    }
    for q in [
        "sum by (event) (gpupm_device_events_total)",
        "event:gpupm_device_events_total:sum",
    ] {
        let got = prom.query(q)?;
        if got.len() != CATALOGUE.len() {
            return Err(format!("{q}: {} events", got.len()));
        }
        for s in &got {
            let e = event_of(s)?;
            if s.value != f(want[e]) {
                return Err(format!("{q}: {s:?}, the ledgers say {}", want[e]));
            }
        }
    }
    let vm = prom.query("gpupm_vm_events_total")?;
    let series = snaps.len() * PLAIN_VMS.len() * vm_events().count();
    if vm.len() != series {
        return Err(format!("{} VM series, not {series}", vm.len()));
    }
    for s in &vm {
        let (n, e, id) = (node_index(s)?, event_of(s)?, label_u32(s, "vm")?);
        let want = snaps[n].vms.get(&id).ok_or(format!("VM {id}"))?[e];
        if s.value != f(want) {
            return Err(format!("{s:?}, the ledger says {want}"));
        }
    }
    Ok(())
}

/// The rate rules. Every series of a node starts at 0 (the first scrape
/// precedes the first step) and carries the node's scrape timestamps, so
/// Prometheus's `rate()` over a window that still holds the first scrape
/// extrapolates every series of the node by the same factor: each node's
/// rates are its ledger times one factor `k[node]` > 0. The fleet rate is
/// then `Σ k[node] × ledger[node]`.
pub struct Rates {
    k: Vec<f64>,
}

impl Rates {
    fn check(prom: &Prometheus, snaps: &[Snapshot]) -> Result<Rates, String> {
        let mut k: Vec<Option<f64>> = vec![None; snaps.len()];
        let mut proportional = |n: usize, got: &Sample, ledger: u64| -> Result<(), String> {
            if ledger == 0 {
                return if got.value == 0.0 {
                    Ok(())
                } else {
                    Err(format!("{got:?}: the ledger says 0"))
                };
            }
            let ratio = got.value / f(ledger);
            match k[n] {
                None if ratio > 0.0 => k[n] = Some(ratio),
                Some(k) if close(ratio, k) => {}
                _ => return Err(format!("{got:?} is not {k:?} × {ledger}")),
            }
            Ok(())
        };
        let vm = prom.query("instance_vm_event:gpupm_vm_events:rate5m")?;
        let series = snaps.len() * PLAIN_VMS.len() * vm_events().count();
        if vm.len() != series {
            return Err(format!("{} VM rate series, not {series}", vm.len()));
        }
        for s in &vm {
            let (n, e, id) = (node_index(s)?, event_of(s)?, label_u32(s, "vm")?);
            proportional(n, s, snaps[n].vms.get(&id).ok_or(format!("VM {id}"))?[e])?;
        }
        let ctx = prom.query("instance_vm_ctx_event:gpupm_context_events:rate5m")?;
        // Every context is exported on its own (no churn, fewer than
        // max_contexts_per_vm per VM): each plain VM's `other` is 0.
        let (other, ctx): (Vec<_>, Vec<_>) =
            ctx.into_iter().partition(|s| s.label("ctx") == "other");
        let want_other = snaps.len() * PLAIN_VMS.len() * vm_events().count();
        if other.len() != want_other || other.iter().any(|s| s.value != 0.0) {
            return Err(format!(
                "ctx=\"other\" rates: {} series, want {want_other} at 0: {other:?}",
                other.len()
            ));
        }
        let series: usize =
            snaps.iter().map(|s| s.contexts.len()).sum::<usize>() * vm_events().count();
        if ctx.len() != series {
            return Err(format!("{} context rate series, not {series}", ctx.len()));
        }
        for s in &ctx {
            if s.label("created_cycle").is_empty() {
                return Err(format!("a context rate without its instance: {s:?}"));
            }
            let (n, e, id) = (node_index(s)?, event_of(s)?, label_u32(s, "ctx")?);
            let (vm, counts) = snaps[n].contexts.get(&id).ok_or(format!("ctx {id}"))?;
            if label_u32(s, "vm")? != *vm {
                return Err(format!("{s:?}: context {id} belongs to VM {vm}"));
            }
            proportional(n, s, counts[e])?;
        }
        let k: Vec<f64> = k
            .into_iter()
            .map(|k| k.ok_or("a node without rates"))
            .collect::<Result<_, _>>()?;
        for s in prom.query("event:gpupm_device_events:rate5m")? {
            let e = event_of(&s)?;
            let want: f64 = snaps
                .iter()
                .zip(&k)
                .map(|(sn, k)| k * f(sn.system[e]))
                .sum();
            if !close(s.value, want) {
                return Err(format!("fleet rate {s:?}, want {want}"));
            }
        }
        Ok(Rates { k })
    }
}

/// SM utilisation per VM and device: the ledger's active per elapsed SM
/// cycles (the factors cancel); the fleet's: weighted by each node's `k`.
fn utilisation(prom: &Prometheus, snaps: &[Snapshot], rates: &Rates) -> Result<(), String> {
    let (active, elapsed) = (event_id("sm_cycles_active"), event_id("sm_cycles_elapsed"));
    let ratio = |c: &Counts| f(c[active]) / f(c[elapsed]);
    let vm = prom.query("instance_vm:gpupm_sm_utilisation:ratio_rate5m")?;
    if vm.len() != snaps.len() * PLAIN_VMS.len() {
        return Err(format!("{} VM utilisation series", vm.len()));
    }
    for s in &vm {
        let (n, id) = (node_index(s)?, label_u32(s, "vm")?);
        let want = ratio(snaps[n].vms.get(&id).ok_or(format!("VM {id}"))?);
        if !(want > 0.0 && want < 1.0 && close(s.value, want)) {
            return Err(format!("{s:?}, the ledger says {want}"));
        }
    }
    let dev = prom.query("instance:gpupm_sm_utilisation:ratio_rate5m")?;
    if dev.len() != snaps.len() {
        return Err(format!("{} device utilisation series", dev.len()));
    }
    for s in &dev {
        let want = ratio(&snaps[node_index(s)?].system);
        if !close(s.value, want) {
            return Err(format!("{s:?}, the ledger says {want}"));
        }
    }
    let weighted = |e: usize| -> f64 {
        snaps
            .iter()
            .zip(&rates.k)
            .map(|(s, k)| k * f(s.system[e]))
            .sum()
    };
    let want = weighted(active) / weighted(elapsed);
    match prom
        .query("job:gpupm_sm_utilisation:ratio_rate5m")?
        .as_slice()
    {
        [s] if close(s.value, want) => Ok(()),
        other => Err(format!("fleet utilisation {other:?}, want {want}")),
    }
}
