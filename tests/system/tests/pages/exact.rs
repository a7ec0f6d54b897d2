//! Conservation through the tenant pages: `gpupm-driver` (step clock,
//! context churn, a confidential VM) and `gpupmd` as processes; the
//! admin maps every VM page and every live context's page while the
//! device runs; no value ever goes backwards within a generation, retired
//! contexts' pages end with their persisted final totals, and at a
//! quiescent point every VM and context page equals the device's ledger,
//! the tenant node's answer and (sealed) the device's ciphertext.

use std::collections::BTreeMap;

use crate::fixture::{
    assert_sealed_page, config, connect, scenario, wait_current, NO_BACKSTOP_MS, VMS, VM_CC,
};
use gpupm_client::page::MappedPage;
use gpupm_client::{Scope, TenantClient};
use gpupm_test_support::device::{self, expected, flush, step, wait_none_destroyed, Instances};
use gpupm_test_support::scenario::STEP;
use gpupm_test_support::services::spawn_daemon;
use gpupm_test_support::{Driver, DriverOptions, Scratch};
use gpupm_uapi::ioctl::ledger_scope;
use gpupm_uapi::page::{page_flags, page_state, PageCounters};
use gpupm_uapi::tenant::scope;
use gpupmd::store::retired::RetiredStore;
use nix::sys::signal::Signal;

/// Checks that `now` never shows less than `before` within a generation.
fn never_backwards(what: &str, before: &PageCounters, now: &PageCounters) {
    if before.generation != now.generation {
        assert!(
            now.generation > before.generation,
            "{what}: generation went back"
        );
        return;
    }
    assert!(
        now.commit_seq >= before.commit_seq,
        "{what}: commit_seq went back"
    );
    assert!(now.cycle >= before.cycle, "{what}: cycle went back");
    for (e, (n, b)) in now.totals.iter().zip(&before.totals).enumerate() {
        assert!(n >= b, "{what}: event {e} went back from {b} to {n}");
    }
}

#[test]
fn every_vm_and_context_page_equals_the_ledger_at_a_quiescent_point() {
    let tmp = Scratch::new("pages-exact");
    let driver = Driver::start_in(&tmp, DriverOptions::system(scenario()));
    let dev = driver.node();
    let mut seen = Instances::new(&dev);
    let mut daemon = spawn_daemon(&tmp, &config(&tmp, NO_BACKSTOP_MS, ""), &[], &[]);
    daemon.wait_for("READY=1");
    let pages = connect(&tmp);
    let vm_pages: BTreeMap<u32, MappedPage> = VMS
        .map(|vm| (vm, pages.map_vm(vm).expect("map a VM page as root")))
        .collect();
    // Context pages by (id, created cycle), mapped as instances appear.
    let mut ctx_pages: BTreeMap<(u32, u64), MappedPage> = BTreeMap::new();
    let mut last: BTreeMap<String, PageCounters> = BTreeMap::new();
    let mut observe = |what: String, page: &MappedPage| {
        let now = page.read_counters().expect("page read");
        if let Some(before) = last.get(&what) {
            never_backwards(&what, before, &now);
        }
        last.insert(what, now);
    };

    for _ in 0..400u32 {
        step(&dev, STEP, &mut daemon);
        seen.update();
        // Every round: on a loaded host the daemon may publish a new
        // context's page a few rounds after the device created it, and a
        // short-lived context is only mapped if the test keeps asking.
        for (ctx, state, _, created) in device::contexts(&dev) {
            if state == gpupm_uapi::regs::ctx_state::ACTIVE
                && !ctx_pages.contains_key(&(ctx, created))
            {
                if let Ok(p) = pages.map_instance(ctx, created) {
                    ctx_pages.insert((ctx, created), p);
                }
            }
        }
        for (vm, p) in &vm_pages {
            observe(format!("vm {vm}"), p);
        }
        for ((ctx, created), p) in &ctx_pages {
            observe(format!("ctx {ctx}@{created}"), p);
        }
    }
    flush(&dev);
    wait_none_destroyed(&dev);
    seen.update();
    let live: Vec<(u32, u64)> = device::contexts(&dev)
        .into_iter()
        .map(|(ctx, _, _, created)| (ctx, created))
        .collect();
    for &(ctx, created) in &live {
        if let std::collections::btree_map::Entry::Vacant(e) = ctx_pages.entry((ctx, created)) {
            e.insert(
                pages
                    .map_instance(ctx, created)
                    .expect("map a live context"),
            );
        }
    }
    let (retired, _) = RetiredStore::open(&tmp.join("state"))
        .unwrap()
        .load_all()
        .unwrap();
    let retired: BTreeMap<(u32, u64), _> = retired
        .into_iter()
        .map(|r| ((r.ctx, r.created_cycle), r))
        .collect();
    let mut finished = 0;
    for (&(ctx, created), p) in &ctx_pages {
        if live.contains(&(ctx, created)) {
            continue;
        }
        // A page whose context retired: its final totals, then no more.
        let c = p.read_counters().unwrap();
        assert_eq!(c.state, page_state::RETIRED, "ctx {ctx}@{created}");
        let rec = &retired[&(ctx, created)];
        match rec.block() {
            Some(b) => assert_eq!(c.totals, b.counters, "final totals of ctx {ctx}@{created}"),
            None => assert_eq!(p.read().unwrap().sealed, rec.slot),
        }
        finished += 1;
    }
    assert!(
        finished >= 10,
        "too few retired context pages: {finished} of {} destroyed instances",
        seen.destroyed.len()
    );

    let live_pages: Vec<&MappedPage> = vm_pages
        .values()
        .chain(
            ctx_pages
                .iter()
                .filter(|(k, _)| live.contains(k))
                .map(|(_, p)| p),
        )
        .collect();
    wait_current(&dev, &live_pages);
    let node = TenantClient::open(tmp.join("tenant").join("node")).unwrap();
    for (&vm, p) in &vm_pages {
        let d = p.read().unwrap();
        assert_eq!(d.counters.state, page_state::ACTIVE);
        assert_eq!(d.counters.generation, p.read_counters().unwrap().generation);
        if vm == VM_CC {
            assert_ne!(d.counters.flags & page_flags::SEALED, 0);
            assert_eq!(d.counters.totals, [0; 64]);
            assert_sealed_page(&dev, p, &d, (ledger_scope::VM, vm), &format!("VM {vm}"));
            continue;
        }
        let want = expected(&dev.ledger(ledger_scope::VM, vm).unwrap());
        assert_eq!(d.counters.totals, want, "VM {vm} page");
        let rc = node.read_counters(Scope::Vm(vm), &[]).unwrap();
        assert_eq!(
            (rc.values, rc.commit_seq, rc.cycle),
            (d.counters.totals, d.counters.commit_seq, d.counters.cycle),
            "VM {vm}: page and ioctl"
        );
        assert_ne!(
            d.counters.flags & page_flags::RATE,
            0,
            "VM {vm} has a rate sample"
        );
        assert!(
            d.rate.end_cycle <= d.counters.cycle && d.rate.end_cycle > 0,
            "VM {vm} rate sample"
        );
    }
    let mut checked = 0;
    for &(ctx, created) in &live {
        let p = &ctx_pages[&(ctx, created)];
        let h = p.header();
        assert_eq!(
            (h.scope, h.id, h.created_cycle),
            (scope::CONTEXT, ctx, created)
        );
        let d = p.read().unwrap();
        assert_eq!(d.counters.state, page_state::ACTIVE);
        if h.vm == VM_CC {
            let who = format!("ctx {ctx}");
            assert_sealed_page(&dev, p, &d, (ledger_scope::CONTEXT, ctx), &who);
            continue;
        }
        let want = expected(&dev.ledger(ledger_scope::CONTEXT, ctx).unwrap());
        assert_eq!(d.counters.totals, want, "ctx {ctx}@{created} page");
        checked += 1;
    }
    assert!(checked >= 20, "too few live context pages: {checked}");
    eprintln!(
        "{} VM pages, {checked} live and {finished} retired context pages checked",
        vm_pages.len()
    );

    let status = daemon.signal_and_wait(Signal::SIGTERM);
    assert!(status.success(), "gpupmd exit {status}:\n{}", daemon.log());
    driver.stop();
}
