//! Tenant clients of the reference-load bench: readers at 10 Hz through
//! the pages or the tenant node, and the commit-visibility probes.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gpupm_client::page::{MappedPage, PageClient};
use gpupm_client::{DevNode, Scope, TenantClient};
use gpupm_uapi::regs as r;

/// How a client reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// Its VM's page (one request, then memory reads).
    Page,
    /// `TENANT_IOC_READ_COUNTERS` through the tenant node.
    Ioctl,
}

/// Where the clients find the daemon.
#[derive(Clone, Debug)]
pub struct Paths {
    /// The tenant node.
    pub node: PathBuf,
    /// The page socket.
    pub pages: PathBuf,
    /// The device node directory (for the probes' device cycle).
    pub dev: PathBuf,
}

/// `n` clients reading VM `i % 8 + 1` at 10 Hz, their phases spread over
/// the 100 ms period as independent tenants' would be, until `stop`; each
/// returns its read latencies in ns.
pub fn spawn_readers(
    n: u32,
    via: Via,
    paths: &Paths,
    stop: &Arc<AtomicBool>,
) -> Vec<JoinHandle<Vec<u64>>> {
    (0..n)
        .map(|i| {
            let (paths, stop) = (paths.clone(), Arc::clone(stop));
            let phase = Duration::from_micros(u64::from(i) * 997);
            let vm = i % 8 + 1;
            // Every reader is root, one tenant identity: mapping the pages
            // one at a time keeps its page connections (each closed once
            // its page is mapped) under `[limits]
            // page_connections_per_tenant`, which 100 readers connecting at
            // once exceed.
            let page = (via == Via::Page).then(|| {
                PageClient::connect(&paths.pages)
                    .and_then(|p| p.map_vm(vm))
                    .expect("map the VM's page")
            });
            std::thread::spawn(move || reader(&paths, page, vm, phase, &stop))
        })
        .collect()
}

fn reader(
    paths: &Paths,
    page: Option<MappedPage>,
    vm: u32,
    phase: Duration,
    stop: &AtomicBool,
) -> Vec<u64> {
    let client = TenantClient::open(&paths.node).expect("open the tenant node");
    let mut lat = Vec::new();
    let mut next = Instant::now() + phase;
    std::thread::sleep(phase);
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        match &page {
            Some(p) => {
                p.read_counters().expect("read the page");
            }
            None => {
                client
                    .read_counters(Scope::Vm(vm), &[])
                    .expect("read counters");
            }
        }
        lat.push(u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX));
        next += Duration::from_millis(100);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    lat
}

/// Polls VM 1's totals (every `poll`) until `stop`; for each new commit,
/// the device time from the commit to the read that first showed it, in
/// ns (up to one polling interval included).
pub fn spawn_probe(
    via: Via,
    paths: &Paths,
    khz: f64,
    poll: Duration,
    stop: &Arc<AtomicBool>,
) -> JoinHandle<Probed> {
    let (paths, stop) = (paths.clone(), Arc::clone(stop));
    std::thread::spawn(move || probe(via, &paths, khz, poll, &stop))
}

/// What a probe saw, in ns, sorted: each new commit's age when first seen
/// (`visible`), and the age of the commit shown at one poll per
/// millisecond (`stale`: how old what a reader sees at a random instant is).
#[derive(Debug, Default)]
pub struct Probed {
    pub visible: Vec<u64>,
    pub stale: Vec<u64>,
}

#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // ns from a non-negative figure
fn probe(via: Via, paths: &Paths, khz: f64, poll: Duration, stop: &AtomicBool) -> Probed {
    let client = TenantClient::open(&paths.node).expect("open the tenant node");
    let page = (via == Via::Page).then(|| {
        PageClient::connect(&paths.pages)
            .and_then(|p| p.map_vm(1))
            .expect("map VM 1's page")
    });
    let dev = DevNode::open(Path::new(&paths.dev)).expect("open the device node");
    let age = |now: u64, cycle: u64| ((now.saturating_sub(cycle)) as f64 / khz * 1e6) as u64;
    // Staleness is sampled once per millisecond whatever the poll.
    let every = (Duration::from_millis(1).as_nanos() / poll.as_nanos().max(1)).max(1);
    let mut last = u64::MAX;
    let mut out = Probed::default();
    let mut polls = 0u128;
    while !stop.load(Ordering::Relaxed) {
        let (commit_seq, cycle) = match &page {
            Some(p) => {
                let c = p.read_counters().expect("read the page");
                (c.commit_seq, c.cycle)
            }
            None => {
                let rc = client
                    .read_counters(Scope::Vm(1), &[])
                    .expect("read counters");
                (rc.commit_seq, rc.cycle)
            }
        };
        let fresh = commit_seq != last;
        let sample = polls.is_multiple_of(every);
        if fresh || sample {
            let now = dev.read64(r::CYCLE).expect("cycle");
            if fresh && last != u64::MAX {
                out.visible.push(age(now, cycle));
            }
            if sample && last != u64::MAX {
                out.stale.push(age(now, cycle));
            }
            last = commit_seq;
        }
        polls += 1;
        std::thread::sleep(poll);
    }
    out.visible.sort_unstable();
    out.stale.sort_unstable();
    out
}

/// Joins `handles` and returns all their samples, sorted.
pub fn collect(handles: Vec<JoinHandle<Vec<u64>>>) -> Vec<u64> {
    let mut v: Vec<u64> = handles
        .into_iter()
        .flat_map(|h| h.join().expect("client thread"))
        .collect();
    v.sort_unstable();
    v
}
