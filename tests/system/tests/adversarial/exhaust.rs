//! One tenant opens handles and sessions until it is refused, each
//! session asking for the largest queue at the highest rate and never
//! read (the attack that took gpupmd from 8 MiB to 22 GiB and the OOM
//! killer). It is refused with the documented errnos, gpupmd's memory
//! stays within its uid's queue budget, another partition's tenant is
//! served as fast as before (p99 within 2× of the same test's unloaded
//! windows) and no more switches fall to the device's fallback than
//! while nobody attacked.

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
/// How long the attacker holds what it got, unread, while records pour in.
const HOLD: Duration = Duration::from_secs(2);
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

/// The attacker: handles until `open()` fails, each a sampling session
/// (VM 1, both kinds, the shortest period, every branch, 2^20 records),
/// else a stream session, else bare; holds them until told to go.
fn attacker(node: &Path) -> Child {
    let node = node.to_owned();
    spawn_as(&Cred::user(ATTACKER), move |ctl| {
        let mut held = Vec::new();
        let (mut sampling, mut streams, mut granted) = (0u64, 0u64, 0u64);
        let (mut open_errno, mut sampling_errno, mut stream_errno) = (0i64, 0i64, 0i64);
        while held.len() < MAX_TRIES {
            let c = match TenantClient::open(&node) {
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
        ctl.ready();
        ctl.wait_go();
        let handles = held.len();
        drop(held);
        json!({ "handles": handles, "sampling": sampling, "streams": streams,
                "granted_records": granted, "open_errno": open_errno,
                "sampling_errno": sampling_errno, "stream_errno": stream_errno })
    })
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

#[test]
fn a_tenant_opening_sessions_until_refused_leaves_memory_latency_and_handshakes_alone() {
    let mut sys = System::realtime();
    let t0 = Instant::now();
    let mut v = victim(&sys.node(), 3, 1500);
    v.wait_ready();
    let rss_before = sys.rss();
    let f0 = sys.fallbacks();
    v.go();
    v.wait_ready();
    let f1 = sys.fallbacks();

    let mut a = attacker(&sys.node());
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch_rss(sys.daemon.pid().as_raw(), a.pid.as_raw(), Arc::clone(&stop));
    // Holding everything (or killed as a runaway): the attack window.
    let attacked = Instant::now();
    let holding = a.ready_or_gone();
    v.go();
    v.wait_ready();
    let f2 = sys.fallbacks();
    let hold_until = attacked + HOLD;
    std::thread::sleep(hold_until.saturating_duration_since(Instant::now()));
    stop.store(true, Ordering::Relaxed);
    let peak = watcher.join().expect("rss watcher");
    assert!(
        holding && peak < RUNAWAY,
        "gpupmd's memory ran away under the attack: {} MiB (the attacker was stopped)",
        peak >> 20
    );
    a.go();
    let got: Value = a.finish();
    v.go();
    let windows = v.finish();
    assert!(sys.daemon.alive(), "gpupmd died:\n{}", sys.daemon.log());

    let handles = got["handles"].as_u64().unwrap();
    eprintln!(
        "attack: {got}\nrss before {} KiB, peak {} KiB; fallbacks baseline {} attack {}; \
         victim p99 µs {:?}; {:.1} s",
        rss_before >> 10,
        peak >> 10,
        f1 - f0,
        f2 - f1,
        windows.as_array().unwrap().iter().map(p99).collect::<Vec<_>>(),
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
    // The victim: its p99 under attack within 2× of the worse unloaded
    // window (before and after).
    let w: Vec<u64> = windows.as_array().unwrap().iter().map(p99).collect();
    let unloaded = w[0].max(w[2]);
    assert!(
        w[1] <= 2 * unloaded.max(1),
        "the victim's p99 went from {unloaded} µs to {} µs",
        w[1]
    );
    assert!(
        f2 - f1 <= f1 - f0,
        "{} fallbacks under attack, {} before",
        f2 - f1,
        f1 - f0
    );
    sys.daemon.stop();
}
