//! Retention of retired contexts: `gpupm-driver` (step clock
//! at 1 MHz, so a second of device time is 10^6 cycles) with context churn
//! and `gpupmd` as processes, restarted with tighter `[retired]` limits.
//! Each restart keeps exactly the instances the policy allows (the newest
//! by retirement; none older than `max_age_s`), the kept ones read exactly
//! what they read before, the pruned ones are gone for good, and no VM or
//! system total changes: they equal the device ledger throughout. A running
//! daemon prunes as contexts retire, logs it in the health log and counts
//! it in its metrics.

use gpupm_test_support::scrape::{metrics, metrics_addr};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use gpupm_client::DevNode;
use gpupm_client::Scope;
use gpupm_client::TenantClient;
use gpupm_test_support::device::{contexts, expected, flush, step, wait_none_destroyed, Instances};
use gpupm_test_support::scenario::{churn, STEP};
use gpupm_test_support::services::{daemon_config, spawn_daemon};
use gpupm_test_support::{Driver, DriverOptions, Proc, Scratch};
use gpupm_uapi::events::MAX_EVENTS;
use gpupm_uapi::ioctl::ledger_scope;
use gpupm_uapi::layout::{block_slot_offset, SYSTEM_BLOCK_SLOT};
use gpupm_uapi::regs as r;
use gpupm_uapi::tenant::ctx_state;
use gpupmd::store::retired::{plain_block, RetiredFile, RetiredStore};
use nix::sys::signal::Signal;

/// VMs of [`churn_scenario`].
const VMS: std::ops::RangeInclusive<u32> = 1..=10;
/// Device cycles per second of the scenario's clock.
const CYCLES_PER_S: u64 = 1_000_000;

/// Retention order: (retired cycle, created cycle, id).
type Key = (u64, u64, u32);

fn key(f: &RetiredFile) -> Key {
    (f.retired_cycle, f.created_cycle, f.ctx)
}

/// The persisted set, by retention order.
fn persisted(state: &Path) -> BTreeMap<Key, RetiredFile> {
    let (files, bad) = RetiredStore::open(state)
        .expect("state dir")
        .load_all()
        .expect("load retired");
    assert!(bad.is_empty(), "unreadable retired files: {bad:?}");
    files.into_iter().map(|f| (key(&f), f)).collect()
}

/// Starts the daemon with `retired` as its `[retired]` section.
fn start(tmp: &Scratch, retired: &str) -> Proc {
    let extra =
        format!("[retired]\n{retired}\n[health]\njournal_socket = \"/nonexistent/journal\"\n");
    let mut d = spawn_daemon(tmp, &daemon_config(tmp, &extra), &[], &[]);
    d.wait_for("READY=1");
    d
}

fn stop(mut d: Proc) {
    let status = d.signal_and_wait(Signal::SIGTERM);
    assert!(status.success(), "gpupmd exit {status}:\n{}", d.log());
}

/// Advances `n` steps, each handshake done by the daemon.
fn run(dev: &DevNode, seen: &mut Instances, daemon: &mut Proc, n: u32) {
    for _ in 0..n {
        step(dev, STEP, daemon);
        seen.update();
    }
    flush(dev);
    wait_none_destroyed(dev);
    seen.update();
}

/// The system and VM totals as the tenant node reads them.
fn scope_totals(c: &TenantClient) -> Vec<[u64; MAX_EVENTS]> {
    std::iter::once(Scope::System)
        .chain(VMS.map(Scope::Vm))
        .map(|s| c.read_counters(s, &[]).expect("read counters").values)
        .collect()
}

/// The system and VM totals the device's ledger requires, after checking
/// that the device's own blocks hold them.
fn ledger_totals(dev: &DevNode) -> Vec<[u64; MAX_EVENTS]> {
    let block = |off| {
        plain_block(&dev.block_slot(off).expect("block slot"))
            .expect("plain block")
            .counters
    };
    let sys = expected(&dev.ledger(ledger_scope::SYSTEM, 0).expect("ledger"));
    assert_eq!(
        block(block_slot_offset(SYSTEM_BLOCK_SLOT)),
        sys,
        "system block"
    );
    let mut out = vec![sys];
    for vm in VMS {
        let want = expected(&dev.ledger(ledger_scope::VM, vm).expect("ledger"));
        let off = dev.read64(r::vm(vm, r::VM_BLOCK)).expect("VM_BLOCK");
        assert_eq!(block(off), want, "VM {vm} block");
        out.push(want);
    }
    out
}

/// Retired instances the node lists (admin).
fn listed_retired(c: &TenantClient) -> BTreeSet<(u32, u64)> {
    VMS.flat_map(|vm| c.list_contexts(vm).expect("list"))
        .filter(|e| e.state == ctx_state::RETIRED)
        .map(|e| (e.ctx, e.created_cycle))
        .collect()
}

/// After a restart that pruned to `kept`: the node lists exactly `kept`,
/// each reads its persisted totals, every other instance of `before` is
/// gone (ENOENT), and the scope totals are unchanged and exact.
fn check_pruned_to(
    c: &TenantClient,
    dev: &DevNode,
    state: &Path,
    before: &BTreeMap<Key, RetiredFile>,
    kept: &BTreeSet<Key>,
    totals_before: &[[u64; MAX_EVENTS]],
) {
    let now = persisted(state);
    assert_eq!(
        &now.keys().copied().collect::<BTreeSet<_>>(),
        kept,
        "files kept"
    );
    let listed: BTreeSet<(u32, u64)> = kept.iter().map(|&(_, c, id)| (id, c)).collect();
    assert_eq!(listed_retired(c), listed, "instances listed");
    for (k, f) in before {
        let r = c.read_instance(f.ctx, f.created_cycle, &[]);
        if kept.contains(k) {
            let r = r.expect("kept instance reads");
            assert_eq!(r.values, f.block().expect("plain").counters, "{k:?}");
            assert_eq!(r.state, ctx_state::RETIRED);
        } else {
            let errno = r.err().and_then(|e| e.errno()).map(|e| e as i32);
            assert_eq!(errno, Some(libc::ENOENT), "pruned {k:?} still reads");
        }
    }
    let exact = ledger_totals(dev);
    assert_eq!(
        scope_totals(c),
        exact,
        "tenant-node totals against the ledger"
    );
    assert_eq!(
        totals_before,
        &exact[..],
        "pruning changed a VM or system total"
    );
}

/// `gpupm_contexts_pruned_total` from the daemon's metrics endpoint.
// Exposition values are floats; these counts are exact below 2^53.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn pruned_metric(d: &Proc) -> u64 {
    let body = metrics(metrics_addr(&d.notes));
    body.lines()
        .find_map(|l| l.strip_prefix("gpupm_contexts_pruned_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
        .unwrap_or_else(|| panic!("no gpupm_contexts_pruned_total in:\n{body}"))
}

#[test]
fn pruning_keeps_the_newest_retired_contexts_and_never_changes_a_vm_or_system_total() {
    let tmp = Scratch::new("retention");
    let driver = Driver::start_in(
        &tmp,
        DriverOptions::system(churn().replace("mhz = 1000", "khz = 1000")),
    );
    let dev = driver.node();
    assert_eq!(dev.identity().expect("identity").clock_khz, 1000);
    let mut seen = Instances::new(&dev);
    let state = tmp.join("state");
    let node = tmp.join("tenant").join("node");

    // 1. No limit reached: every destroyed instance is kept.
    let mut daemon = start(&tmp, "max_contexts = 100000");
    run(&dev, &mut seen, &mut daemon, 240);
    let all = persisted(&state);
    let keys: BTreeSet<(u32, u64)> = all.values().map(|f| (f.ctx, f.created_cycle)).collect();
    assert_eq!(keys, seen.destroyed, "persisted set");
    let now = dev.read64(r::CYCLE).expect("CYCLE");
    let span = all.keys().map(|k| k.0);
    let (first, last) = (span.clone().min().unwrap(), span.max().unwrap());
    eprintln!(
        "{} retired between cycles {first} and {last}; now {now}",
        all.len()
    );
    assert!(
        all.len() >= 60 && now - first > CYCLES_PER_S && now - last < CYCLES_PER_S,
        "the run must leave instances on both sides of one second: {first}..{last}, now {now}"
    );
    let totals = {
        let c = TenantClient::open(&node).expect("open");
        let t = scope_totals(&c);
        assert_eq!(t, ledger_totals(&dev));
        t
    };
    assert_eq!(pruned_metric(&daemon), 0);
    stop(daemon);

    // 2. Restart with a one-second age limit: exactly the instances retired
    //    within the last second of device time stay.
    let daemon = start(&tmp, "max_contexts = 100000\nmax_age_s = 1");
    let by_age: BTreeSet<Key> = all
        .keys()
        .filter(|k| now - k.0 <= CYCLES_PER_S)
        .copied()
        .collect();
    assert!(by_age.len() < all.len() && !by_age.is_empty());
    let c = TenantClient::open(&node).expect("open");
    check_pruned_to(&c, &dev, &state, &all, &by_age, &totals);
    let pruned_by_age = all.len() - by_age.len();
    assert_eq!(pruned_metric(&daemon), pruned_by_age as u64);
    assert!(
        daemon.log().contains(&format!(
            "retention: pruned {pruned_by_age} retired contexts ({pruned_by_age} by age, 0 by count)"
        )),
        "no pruning event in the health log:\n{}",
        daemon.log()
    );
    drop(c);
    stop(daemon);

    // 3. Restart with a count limit: the newest by retirement stay, and
    //    what the age limit pruned did not come back.
    const K: usize = 12;
    let before = persisted(&state);
    let newest: BTreeSet<Key> = before.keys().rev().take(K).copied().collect();
    assert!(before.len() > K);
    let mut daemon = start(&tmp, &format!("max_contexts = {K}"));
    let c = TenantClient::open(&node).expect("open");
    check_pruned_to(&c, &dev, &state, &all, &newest, &totals);
    assert_eq!(pruned_metric(&daemon), (before.len() - K) as u64);

    // 4. Running at the limit: contexts retiring now push the oldest out.
    run(&dev, &mut seen, &mut daemon, 40);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let kept = loop {
        let p = persisted(&state);
        if p.len() == K && listed_retired(&c).len() == K {
            break p;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still {} retired kept",
            p.len()
        );
        // Each check runs the CLI: apart, not back to back.
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    let new: BTreeSet<(u32, u64)> = seen
        .destroyed
        .iter()
        .filter(|i| !all.values().any(|f| (f.ctx, f.created_cycle) == **i))
        .copied()
        .collect();
    assert!(new.len() > K, "too little churn in phase 4: {}", new.len());
    for f in kept.values() {
        assert!(
            new.contains(&(f.ctx, f.created_cycle)),
            "an older instance outlived newer ones"
        );
    }
    // Pruned while running: the K instances phase 3 kept, and the new ones
    // beyond K (K + new - K); the VM and system totals still equal the
    // ledger.
    assert_eq!(
        pruned_metric(&daemon),
        (before.len() - K + new.len()) as u64
    );
    assert_eq!(scope_totals(&c), ledger_totals(&dev));
    for (ctx, st, _, _) in contexts(&dev) {
        assert_eq!(st, r::ctx_state::ACTIVE);
        let live = c
            .read_counters(Scope::Ctx(ctx), &[])
            .expect("live context")
            .values;
        assert_eq!(
            live,
            expected(&dev.ledger(ledger_scope::CONTEXT, ctx).expect("ledger"))
        );
    }
    drop(c);
    stop(daemon);
    driver.stop();
}
