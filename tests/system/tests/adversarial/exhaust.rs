//! One tenant opens handles and sessions until it is refused, each
//! session asking for the largest queue at the highest rate and never
//! read (the attack that took gpupmd from 8 MiB to 22 GiB and the OOM
//! killer), three times, letting everything go in between. It is refused
//! with the documented errnos, gpupmd's memory stays within its uid's
//! queue budget and no more switches fall to the device's fallback than
//! while nobody attacked, and another partition's tenant's median p99
//! over the attacked windows stays within 2× that of the unloaded ones
//! (the attacker's rates are raised to the tenant floors).

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpupm_client::{Scope, TenantClient};
use gpupm_test_support::users::{spawn_as, Child, Cred};
use gpupm_uapi::tenant::sampling::{sample_kind, MAX_SESSION_RECORDS, MIN_SAMPLE_PERIOD};
use gpupm_uapi::tenant::{scope, OpenSampling, TENANT_IOC_OPEN_SAMPLING, TENANT_STRUCT_VERSION};
use serde_json::{json, Value};

use crate::fixture::{
    p99, rss_of, victim, System, ATTACKER, ATTACKER_QUEUE_BYTES, HANDLES_PER_UID,
};

/// Most handles the attacker tries (far beyond any cap).
const MAX_TRIES: usize = 4096;
/// Reads in each of the victim's windows (one a millisecond).
const WINDOW_READS: usize = 1000;
/// What a handle, an idle session and the daemon's allocator may cost
/// besides the queues, per handle the attacker holds.
const PER_HANDLE: u64 = 16 << 10;
/// Slack for what the daemon allocates anyway (FUSE buffers, history).
const SLACK: u64 = 16 << 20;
/// gpupmd's memory at which the test stops the attack rather than let it
/// run the machine out of memory.
const RUNAWAY: u64 = 1 << 30;

fn errno(e: &gpupm_client::ClientError) -> i64 {
    e.errno().map_or(-1, |e| e as i64)
}

/// Rounds of the attack: each takes everything, holds it through one of
/// the victim's windows, and lets it all go for the next window.
const ROUNDS: usize = 3;

/// The attacker: [`ROUNDS`] times, handles until `open()` fails, each a
/// sampling session (VM 1, both kinds, the shortest period, every
/// branch, 2^20 records), else a stream session, else bare; ready while
/// it holds them, ready again once it dropped them. Answers the first
/// round's tally.
fn attacker(node: &Path) -> Child {
    let node = node.to_owned();
    spawn_as(&Cred::user(ATTACKER), move |ctl| {
        let mut first = None;
        for _ in 0..ROUNDS {
            let (held, tally) = take_everything(&node);
            first.get_or_insert(tally);
            ctl.ready();
            ctl.wait_go();
            drop(held);
            ctl.ready();
            ctl.wait_go();
        }
        first.unwrap_or_default()
    })
}

fn take_everything(node: &Path) -> (Vec<TenantClient>, Value) {
    let mut held = Vec::new();
    let (mut sampling, mut streams, mut granted) = (0u64, 0u64, 0u64);
    let mut rates = None;
    let (mut open_errno, mut sampling_errno, mut stream_errno) = (0i64, 0i64, 0i64);
    while held.len() < MAX_TRIES {
        let c = match TenantClient::open(node) {
            Ok(c) => c,
            Err(e) => {
                open_errno = errno(&e);
                break;
            }
        };
        let mut arg = OpenSampling {
            version: TENANT_STRUCT_VERSION,
            scope: scope::VM,
            id: 1,
            kinds: u32::from(sample_kind::ALL),
            period: MIN_SAMPLE_PERIOD,
            branch_every: 1,
            queue_records: MAX_SESSION_RECORDS,
            ..OpenSampling::default()
        };
        match c.call("open sampling", TENANT_IOC_OPEN_SAMPLING, &mut arg) {
            Ok(()) => {
                sampling += 1;
                granted += u64::from(arg.queue_records);
                rates.get_or_insert((arg.device_period, arg.device_branch_every));
            }
            Err(e) => {
                sampling_errno = errno(&e);
                match c.open_stream(Scope::Vm(1)) {
                    Ok(()) => streams += 1,
                    Err(e) => stream_errno = errno(&e),
                }
            }
        }
        held.push(c);
    }
    let tally = json!({ "handles": held.len(), "sampling": sampling, "streams": streams,
            "granted_records": granted, "open_errno": open_errno,
            "sampling_errno": sampling_errno, "stream_errno": stream_errno,
            "granted_rates": rates });
    (held, tally)
}

/// Samples gpupmd's memory every 20 ms until `stop`; kills `attacker`
/// if it runs away. Answers the peak.
fn watch_rss(pid: i32, attacker: i32, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    let peak = Arc::new(AtomicU64::new(0));
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let rss = rss_of(pid);
            peak.fetch_max(rss, Ordering::Relaxed);
            if rss > RUNAWAY {
                nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(attacker),
                    nix::sys::signal::Signal::SIGKILL,
                )
                .expect("stop the attacker");
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        peak.load(Ordering::Relaxed)
    })
}

/// Runs the victim's next window; answers the fallbacks during it.
fn window(sys: &System, v: &mut Child) -> u64 {
    let f = sys.fallbacks();
    v.go();
    v.wait_ready();
    sys.fallbacks() - f
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

#[test]
fn a_tenant_opening_sessions_until_refused_leaves_memory_and_handshakes_alone() {
    let _machine = crate::fixture::measuring();
    let mut sys = System::realtime();
    let t0 = Instant::now();
    let mut v = victim(&sys.node(), 1 + 2 * ROUNDS, WINDOW_READS);
    v.wait_ready();
    let rss_before = sys.rss();
    let mut a = attacker(&sys.node());
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch_rss(sys.daemon.pid().as_raw(), a.pid.as_raw(), Arc::clone(&stop));
    let cpu = |pid: i32| gpupm_test_support::procfs::cpu_ticks(pid);
    let (daemon, driver) = (sys.daemon.pid().as_raw(), sys.driver.proc.pid().as_raw());
    // Unloaded, then each round: attacked, unloaded again.
    let mut fallbacks = [0u64; 2];
    let mut ticks = [[0u64; 2]; 2];
    let mut count = |sys: &System, v: &mut Child, attacked: usize| {
        let before = [cpu(daemon), cpu(driver)];
        let f = window(sys, v);
        fallbacks[attacked] += f;
        ticks[attacked][0] += cpu(daemon) - before[0];
        ticks[attacked][1] += cpu(driver) - before[1];
    };
    count(&sys, &mut v, 0);
    let mut holding = true;
    for _ in 0..ROUNDS {
        // Holding everything (or killed as a runaway): an attacked window.
        holding &= a.ready_or_gone();
        if !holding {
            break;
        }
        count(&sys, &mut v, 1);
        a.go();
        a.wait_ready();
        count(&sys, &mut v, 0);
        a.go();
    }
    stop.store(true, Ordering::Relaxed);
    let peak = watcher.join().expect("rss watcher");
    assert!(
        holding && peak < RUNAWAY,
        "gpupmd's memory ran away under the attack: {} MiB (the attacker was stopped)",
        peak >> 20
    );
    let got: Value = a.finish();
    let windows = v.finish();
    assert!(sys.daemon.alive(), "gpupmd died:\n{}", sys.daemon.log());

    let p: Vec<u64> = windows.as_array().unwrap().iter().map(p99).collect();
    let unloaded = median(p.iter().copied().step_by(2).collect());
    let attacked = median(p.iter().copied().skip(1).step_by(2).collect());
    let handles = got["handles"].as_u64().unwrap();
    eprintln!(
        "attack: {got}\nrss before {} KiB, peak {} KiB; fallbacks unloaded {} attacked {}; \
         victim p99 µs by window {p:?} (unloaded median {unloaded}, attacked {attacked}); \
         CPU ticks (gpupmd, driver) unloaded {:?} attacked {:?}; {:.1} s",
        rss_before >> 10,
        peak >> 10,
        fallbacks[0],
        fallbacks[1],
        ticks[0],
        ticks[1],
        t0.elapsed().as_secs_f64()
    );
    // Refused at the documented caps with the documented errnos.
    assert_eq!(handles, HANDLES_PER_UID, "{got}");
    assert_eq!(got["open_errno"], json!(libc::EMFILE), "{got}");
    assert_eq!(got["sampling_errno"], json!(libc::ENOSPC), "{got}");
    assert!(
        got["granted_records"].as_u64().unwrap() < u64::from(MAX_SESSION_RECORDS),
        "queues were clamped to the budget: {got}"
    );
    // Memory within the uid's queue budget.
    let budget = ATTACKER_QUEUE_BYTES + handles * PER_HANDLE + SLACK;
    assert!(
        peak.saturating_sub(rss_before) <= budget,
        "gpupmd grew by {} KiB, over its budget of {} KiB",
        peak.saturating_sub(rss_before) >> 10,
        budget >> 10
    );
    // The shortest period and every branch were raised to the tenant
    // floors: what the attacker's sessions cost the device and the daemon
    // is what a tenant sampling at the defaults costs.
    let limits = gpupm_client::config::Limits::default();
    assert_eq!(
        got["granted_rates"],
        json!([
            limits.tenant_min_sample_period,
            limits.tenant_min_branch_every
        ]),
        "{got}"
    );
    // Another partition's tenant is served as fast as without the attack.
    assert!(
        attacked <= 2 * unloaded,
        "the victim's median p99 went from {unloaded} µs to {attacked} µs under attack"
    );
    assert!(
        fallbacks[1] <= fallbacks[0],
        "{} fallbacks under attack, {} without",
        fallbacks[1],
        fallbacks[0]
    );
    sys.daemon.stop();
}
