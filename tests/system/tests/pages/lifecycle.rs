//! The lives of pages: a destroyed context's page shows its final totals
//! as DESTROYED until the context is retired, then RETIRED, and its file
//! is gone; existing mappings outlive a daemon restart and a kill -9 and
//! see a new generation once the new daemon republishes, with no value
//! going backwards within a generation; a restart that changes who may
//! see a VM withdraws the VM's old page instead of writing it again.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::fixture::{
    config, connect, socket, wait_current, NO_BACKSTOP_MS, UID_A, UID_B, VMS, VM_A,
};
use gpupm_client::page::MappedPage;
use gpupm_client::page::{Source as ReadSource, Target};
use gpupm_client::{CounterReader, TenantClient};
use gpupm_test_support::device::{self, expected, flush, step, wait_none_destroyed};
use gpupm_test_support::scenario::STEP;
use gpupm_test_support::services::spawn_daemon;
use gpupm_test_support::{Driver, DriverOptions, Proc, Scratch};
use gpupm_uapi::ioctl::ledger_scope;
use gpupm_uapi::page::{page_state, PageCounters};
use gpupm_uapi::regs::ctx_state;
use nix::errno::Errno;
use nix::sys::signal::Signal;

fn run_steps(dev: &gpupm_client::DevNode, daemon: &mut Proc, n: u32) {
    for _ in 0..n {
        step(dev, STEP, daemon);
    }
}

fn start(tmp: &Scratch, cfg: &str) -> Proc {
    let mut d = spawn_daemon(tmp, cfg, &[], &[]);
    d.wait_for("READY=1");
    d
}

/// A tmpfs mounted on a directory for the test, unmounted on drop.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(dir: std::path::PathBuf) -> Tmpfs {
        std::fs::create_dir_all(&dir).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs"])
            .arg(&dir)
            .status()
            .expect("run mount");
        assert!(ok.success(), "mount a tmpfs on {}", dir.display());
        Tmpfs(dir)
    }

    fn remount(&self, opt: &str) {
        let ok = Command::new("mount")
            .args(["-o", &format!("remount,{opt}")])
            .arg(&self.0)
            .status()
            .expect("run mount");
        assert!(ok.success(), "remount {opt}");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        gpupm_test_support::scratch::force_unmount(&self.0);
    }
}

#[test]
fn a_destroyed_contexts_page_shows_its_final_totals_until_retired_then_goes() {
    let tmp = Scratch::new("pages-destroyed");
    // The state directory on a tmpfs that the test can make read-only:
    // the daemon then cannot persist (retire) a destroyed context, which
    // stays destroyed on the device until the directory is writable again.
    let state = Tmpfs::mount(tmp.join("state"));
    let driver = Driver::start_in(&tmp, DriverOptions::system(crate::fixture::scenario()));
    let dev = driver.node();
    let mut daemon = start(&tmp, &config(&tmp, NO_BACKSTOP_MS, ""));
    run_steps(&dev, &mut daemon, 4);
    let pages = connect(&tmp);
    // Pages of every live context of the churned VMs.
    let mut mapped: BTreeMap<(u32, u64), MappedPage> = BTreeMap::new();
    for (ctx, st, vm, created) in device::contexts(&dev) {
        if st == ctx_state::ACTIVE && [1, 3, 9].contains(&vm) {
            mapped.insert(
                (ctx, created),
                pages.map_instance(ctx, created).expect("map"),
            );
        }
    }
    state.remount("ro");
    let mut destroyed = None;
    for _ in 0..40 {
        step(&dev, STEP, &mut daemon);
        destroyed = device::contexts(&dev)
            .into_iter()
            .find(|&(ctx, st, _, created)| {
                st == ctx_state::DESTROYED && mapped.contains_key(&(ctx, created))
            });
        if destroyed.is_some() {
            break;
        }
    }
    let (ctx, _, _, created) = destroyed.expect("a mapped context was destroyed");
    let page = &mapped[&(ctx, created)];
    let block_at = dev
        .read64(gpupm_uapi::regs::ctx(ctx, gpupm_uapi::regs::CTX_BLOCK))
        .unwrap();
    // DESTROYED, with the totals the device's block holds (final: the
    // context runs no more).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let c = page.read_counters().unwrap();
        let block = dev.block_slot(block_at).unwrap().plain_block().unwrap();
        if c.state == page_state::DESTROYED && c.commit_seq == block.commit_seq {
            assert_eq!(c.totals, block.counters);
            assert_eq!(
                c.totals,
                expected(&dev.ledger(ledger_scope::CONTEXT, ctx).unwrap())
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "page not DESTROYED with its final totals: {c:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let file = tmp
        .join("pages")
        .join("store")
        .join(format!("ctx-{ctx}-{created}"));
    assert!(
        file.exists(),
        "a destroyed context's page stays until retired"
    );
    let destroyed_totals = page.read_counters().unwrap().totals;

    // Writable again. The engine retries a failed retirement at its next
    // resynchronisation, which a restart makes: the new daemon takes the
    // page over, persists and releases the context, and finishes the page.
    state.remount("rw");
    assert!(daemon.signal_and_wait(Signal::SIGTERM).success());
    let mut daemon = start(&tmp, &config(&tmp, NO_BACKSTOP_MS, ""));
    wait_none_destroyed(&dev);
    let deadline = Instant::now() + Duration::from_secs(30);
    while page.read_counters().unwrap().state != page_state::RETIRED {
        assert!(Instant::now() < deadline, "page not RETIRED");
        std::thread::sleep(Duration::from_millis(1));
    }
    let c = page.read_counters().unwrap();
    assert_eq!(c.totals, destroyed_totals, "the persisted final totals");
    assert!(!file.exists(), "a retired context's page file is removed");
    let pages = connect(&tmp);
    let refused = pages.map_instance(ctx, created).unwrap_err();
    assert_eq!(
        refused.errno(),
        Some(Errno::ENOENT),
        "the admin learns it is gone"
    );
    // A reader falls back to the tenant node, which has the same totals.
    let node = TenantClient::open(tmp.join("tenant").join("node")).unwrap();
    let mut reader = CounterReader::new(node, Some(socket(&tmp)));
    let r = reader
        .read(Target::Instance {
            ctx,
            created_cycle: created,
        })
        .unwrap();
    assert_eq!((r.values, r.source), (destroyed_totals, ReadSource::Ioctl));

    assert!(daemon.signal_and_wait(Signal::SIGTERM).success());
    driver.stop();
}

/// Checks every page's counters against the previous read: a generation
/// never decreases, and within one nothing decreases.
fn watch(
    pages: Vec<(String, MappedPage)>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<BTreeMap<String, Vec<u64>>> {
    std::thread::spawn(move || {
        let mut last: BTreeMap<String, PageCounters> = BTreeMap::new();
        let mut generations: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        while !stop.load(Ordering::Relaxed) {
            for (what, p) in &pages {
                let now = p.read_counters().expect("a page stays readable");
                if let Some(b) = last.get(what) {
                    assert!(
                        now.generation >= b.generation,
                        "{what}: generation went back"
                    );
                    if now.generation == b.generation {
                        assert!(
                            now.commit_seq >= b.commit_seq,
                            "{what}: commit_seq went back"
                        );
                        assert!(
                            now.totals.iter().zip(&b.totals).all(|(n, o)| n >= o),
                            "{what}: a total went back"
                        );
                    }
                }
                let g = generations.entry(what.clone()).or_default();
                if g.last() != Some(&now.generation) {
                    g.push(now.generation);
                }
                last.insert(what.clone(), now);
            }
            std::thread::yield_now();
        }
        generations
    })
}

/// Waits until `page` shows a generation above `old`.
fn wait_generation_above(page: &MappedPage, old: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let g = page.read_counters().unwrap().generation;
        if g > old {
            return g;
        }
        assert!(Instant::now() < deadline, "no new generation over {old}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn mappings_outlive_a_restart_and_a_kill_9_and_see_a_new_generation_once_republished() {
    let tmp = Scratch::new("pages-restart");
    let driver = Driver::start_in(&tmp, DriverOptions::system(crate::fixture::scenario()));
    let dev = driver.node();
    let cfg = config(&tmp, NO_BACKSTOP_MS, "");
    let mut daemon = start(&tmp, &cfg);
    run_steps(&dev, &mut daemon, 20);
    let pages = connect(&tmp);
    let (ctx, created) = device::contexts(&dev)
        .into_iter()
        .find(|&(_, st, vm, _)| st == ctx_state::ACTIVE && vm == 2)
        .map(|(c, _, _, cr)| (c, cr))
        .expect("a fixed context of VM 2");
    let mut watched: Vec<(String, MappedPage)> = VMS
        .map(|vm| (format!("vm {vm}"), pages.map_vm(vm).unwrap()))
        .collect();
    watched.push((
        format!("ctx {ctx}"),
        pages.map_instance(ctx, created).unwrap(),
    ));
    let probe = pages.map_vm(VM_A).unwrap();
    let ctx_probe = pages.map_instance(ctx, created).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch(watched, Arc::clone(&stop));
    let g1 = probe.read_counters().unwrap().generation;
    run_steps(&dev, &mut daemon, 20);

    // A clean stop: the pages stay readable and unchanged while no daemon runs.
    assert!(daemon.signal_and_wait(Signal::SIGTERM).success());
    let frozen = probe.read_counters().unwrap();
    run_steps_without_daemon(&dev, 3);
    assert_eq!(
        probe.read_counters().unwrap(),
        frozen,
        "nobody writes while the daemon is down"
    );
    let mut daemon = start(&tmp, &cfg);
    let g2 = wait_generation_above(&probe, g1);
    wait_generation_above(&ctx_probe, g1);
    run_steps(&dev, &mut daemon, 20);

    // kill -9: the same, and the files are found again.
    assert!(!daemon.signal_and_wait(Signal::SIGKILL).success());
    let frozen = probe.read_counters().unwrap();
    assert_eq!(frozen.generation, g2);
    let mut daemon = start(&tmp, &cfg);
    let g3 = wait_generation_above(&probe, g2);
    run_steps(&dev, &mut daemon, 20);
    flush(&dev);
    wait_none_destroyed(&dev);
    wait_current(&dev, &[&probe, &ctx_probe]);
    stop.store(true, Ordering::Relaxed);
    let generations = watcher
        .join()
        .expect("no value went backwards within a generation");
    assert_eq!(
        generations["vm 3"],
        vec![g1, g2, g3],
        "every page saw each generation in turn"
    );
    assert_eq!(generations[&format!("ctx {ctx}")], vec![g1, g2, g3]);
    assert_eq!(
        probe.read_counters().unwrap().totals,
        expected(&dev.ledger(ledger_scope::VM, VM_A).unwrap())
    );
    assert_eq!(
        ctx_probe.read_counters().unwrap().totals,
        expected(&dev.ledger(ledger_scope::CONTEXT, ctx).unwrap())
    );
    // The restarted daemon wrote into the same files: a new request maps
    // the same inode.
    let again = pages.map_vm(VM_A);
    assert!(again.is_err(), "the old connection ended with its daemon");
    let fresh = connect(&tmp).map_vm(VM_A).unwrap();
    assert_eq!(fresh.read_counters().unwrap().generation, g3);
    assert!(daemon.signal_and_wait(Signal::SIGTERM).success());
    driver.stop();
}

fn run_steps_without_daemon(dev: &gpupm_client::DevNode, n: u32) {
    // Switches wait for a host; the device's fallback completes them.
    for _ in 0..n {
        dev.advance(STEP).expect("advance");
    }
}

#[test]
fn a_restart_that_changes_who_may_see_a_vm_withdraws_its_old_page() {
    let tmp = Scratch::new("pages-audience");
    let driver = Driver::start_in(&tmp, DriverOptions::system(crate::fixture::scenario()));
    let dev = driver.node();
    let mut daemon = start(&tmp, &config(&tmp, NO_BACKSTOP_MS, ""));
    run_steps(&dev, &mut daemon, 10);
    let pages = connect(&tmp);
    let old = pages.map_vm(VM_A).unwrap();
    let other = pages.map_vm(2).unwrap();
    let store = tmp.join("pages").join("store");
    let old_ino = std::fs::metadata(store.join(format!("vm-{VM_A}")))
        .unwrap()
        .ino();
    let g1 = old.read_counters().unwrap().generation;
    assert!(daemon.signal_and_wait(Signal::SIGTERM).success());

    // VM A now belongs to tenant B.
    let swapped = config(&tmp, NO_BACKSTOP_MS, "")
        .replace(&format!("uid = {UID_A}"), &format!("uid = {UID_B}"));
    let mut daemon = start(&tmp, &swapped);
    let c = old.read_counters().unwrap();
    assert_eq!(
        c.state,
        page_state::WITHDRAWN,
        "the old audience's page is withdrawn"
    );
    let frozen = c;
    wait_generation_above(&other, g1);
    run_steps(&dev, &mut daemon, 10);
    assert_eq!(
        old.read_counters().unwrap(),
        frozen,
        "a withdrawn page is never written again"
    );
    let new = connect(&tmp).map_vm(VM_A).unwrap();
    let new_ino = std::fs::metadata(store.join(format!("vm-{VM_A}")))
        .unwrap()
        .ino();
    assert_ne!(new_ino, old_ino, "the new audience gets a new file");
    assert_eq!(new.read_counters().unwrap().state, page_state::ACTIVE);
    // VM 2's audience did not change: its page was adopted.
    assert_eq!(other.read_counters().unwrap().state, page_state::ACTIVE);
    assert!(daemon.signal_and_wait(Signal::SIGTERM).success());
    driver.stop();
}
