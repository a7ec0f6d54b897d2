//! Pages follow the device's events, not a timer. With the backstop (the
//! full refresh every `[pages] backstop_ms`) far beyond the test's length,
//! commits reach VM and context pages (drained records, switches); and an
//! idle daemon neither reads the device for its pages nor rewrites one,
//! while it still serves an unrelated page request.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::fixture::{config, connect, device_slot, wait_current, NO_BACKSTOP_MS, VM_CC};
use gpupm_client::page::MappedPage;
use gpupm_client::DevNode;
use gpupm_test_support::device::{self, wait_none_destroyed};
use gpupm_test_support::scenario::STEP;
use gpupm_test_support::services::spawn_daemon;
use gpupm_test_support::{Driver, DriverOptions, Proc, Scratch};
use gpupm_uapi::regs::{self as r, ctx_state};

fn run_steps(dev: &DevNode, daemon: &mut Proc, n: u32) {
    for _ in 0..n {
        device::step(dev, STEP, daemon);
    }
}

/// Driver (step clock) and daemon whose backstop never fires in a test.
fn start(tag: &str) -> (Scratch, Driver, DevNode, Proc) {
    let tmp = Scratch::new(tag);
    let driver = Driver::start_in(&tmp, DriverOptions::system(crate::fixture::scenario()));
    let dev = driver.node();
    let mut daemon = spawn_daemon(&tmp, &config(&tmp, NO_BACKSTOP_MS, ""), &[], &[]);
    daemon.wait_for("READY=1");
    (tmp, driver, dev, daemon)
}

/// Pages of every plaintext VM and of their active context instances.
fn map_plaintext(tmp: &Scratch, dev: &DevNode) -> BTreeMap<String, MappedPage> {
    let pages = connect(tmp);
    let mut out = BTreeMap::new();
    for vm in crate::fixture::VMS.filter(|&vm| vm != VM_CC) {
        out.insert(format!("vm {vm}"), pages.map_vm(vm).expect("map a VM page"));
    }
    for (ctx, state, vm, created) in device::contexts(dev) {
        if state == ctx_state::ACTIVE && vm != VM_CC {
            if let Ok(p) = pages.map_instance(ctx, created) {
                out.insert(format!("ctx {ctx}@{created}"), p);
            }
        }
    }
    out
}

/// Waits (up to 30 s) until `done` holds.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within 30 s");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn commits_reach_vm_and_context_pages_with_the_backstop_out_of_reach() {
    let (tmp, _driver, dev, mut daemon) = start("pages-events-commit");
    run_steps(&dev, &mut daemon, 2);
    let pages = map_plaintext(&tmp, &dev);
    assert!(
        pages.keys().any(|k| k.starts_with("ctx")),
        "no context page"
    );
    let before: BTreeMap<&String, u64> = pages
        .iter()
        .map(|(k, p)| (k, p.read_counters().expect("page read").commit_seq))
        .collect();
    run_steps(&dev, &mut daemon, 6);
    let live: Vec<(u32, u64)> = device::contexts(&dev)
        .into_iter()
        .filter(|c| c.1 == ctx_state::ACTIVE)
        .map(|(ctx, _, _, created)| (ctx, created))
        .collect();
    let current: Vec<&MappedPage> = pages
        .values()
        .filter(|p| {
            let h = p.header();
            h.scope == gpupm_uapi::tenant::scope::VM || live.contains(&(h.id, h.created_cycle))
        })
        .collect();
    // Each page shows its block's latest commit: only events put it there.
    wait_current(&dev, &current);
    let moved = pages
        .iter()
        .filter(|(k, p)| p.read_counters().unwrap().commit_seq > before[k])
        .count();
    assert!(
        moved >= current.len() / 2,
        "only {moved} of {} pages moved",
        current.len()
    );
    assert!(
        pages.iter().any(|(k, p)| k.starts_with("ctx")
            && p.read_counters().unwrap().commit_seq > before[k]),
        "no context page moved"
    );
}

/// Partition rings are empty and every plaintext VM page shows, as its
/// latest rate sample, its block's last commit: the daemon has drained and
/// published everything.
fn caught_up(dev: &DevNode, pages: &BTreeMap<String, MappedPage>) -> bool {
    let rings: Vec<u64> = device::partitions(dev)
        .into_iter()
        .flat_map(|p| {
            [
                r::part(p, r::PART_STREAM_HEAD),
                r::part(p, r::PART_STREAM_TAIL),
            ]
        })
        .collect();
    let v = dev.read_many(&rings).expect("ring positions");
    if v.chunks_exact(2).any(|ht| ht[0] != ht[1]) {
        return false;
    }
    pages
        .iter()
        .filter(|(k, _)| k.starts_with("vm"))
        .all(|(_, p)| {
            let Some(block) = device_slot(dev, p).plain_block() else {
                return false;
            };
            let data = p.read().expect("page read");
            data.counters.commit_seq == block.commit_seq
                && (block.commit_seq == 0 || data.rate.end_cycle == block.last_commit_cycle)
        })
}

#[test]
fn an_idle_daemon_neither_refreshes_nor_rewrites_its_pages() {
    let (tmp, _driver, dev, mut daemon) = start("pages-events-idle");
    run_steps(&dev, &mut daemon, 2);
    let pages = map_plaintext(&tmp, &dev);
    run_steps(&dev, &mut daemon, 4);
    wait_none_destroyed(&dev);
    wait_until("pages caught up with the device", || {
        caught_up(&dev, &pages)
    });

    // Every record was drained, and from the driver's commit mirror: on a
    // step clock the mirror is published before the request that made
    // the records returns, so no drain finds it behind the registers.
    let drained = daemon.metric("gpupm_stream_drained_records_total");
    assert!(drained > 0, "nothing drained");
    assert_eq!(
        daemon.metric("gpupm_stream_mirrored_records_total"),
        drained,
        "records read through the window"
    );
    assert_eq!(daemon.metric("gpupm_stream_mirror_fallbacks_total"), 0);

    // The device is idle from here: the clock stands still.
    let seqs: BTreeMap<&String, u64> = pages.iter().map(|(k, p)| (k, p.seq())).collect();
    let refreshes = daemon.metric("gpupm_page_refreshes_total");
    let updates = daemon.metric("gpupm_page_updates_total");
    // Unrelated events: two new pages, each read once when made (its block
    // may have moved between the read and the insert).
    let socket = connect(&tmp);
    let _cc = socket
        .map_vm(VM_CC)
        .expect("map the confidential VM's page");
    wait_until("the first new page refreshed", || {
        daemon.metric("gpupm_page_refreshes_total") > refreshes
    });
    let cc_ctx = device::contexts(&dev)
        .into_iter()
        .find(|c| c.2 == VM_CC && c.1 == ctx_state::ACTIVE)
        .expect("a context of the confidential VM");
    let _cc_ctx = socket
        .map_instance(cc_ctx.0, cc_ctx.3)
        .expect("map its page");
    wait_until("the second new page refreshed", || {
        daemon.metric("gpupm_page_refreshes_total") > refreshes + 1
    });

    assert_eq!(
        daemon.metric("gpupm_page_refreshes_total"),
        refreshes + 2,
        "an idle daemon refreshed pages nothing asked for"
    );
    assert_eq!(
        daemon.metric("gpupm_page_updates_total"),
        updates,
        "an idle daemon rewrote pages"
    );
    for (k, p) in &pages {
        assert_eq!(
            p.seq(),
            seqs[k],
            "{k} was rewritten while the device was idle"
        );
    }
    assert!(daemon.alive(), "gpupmd died:\n{}", daemon.log());
}
