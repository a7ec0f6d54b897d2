//! 5,000 threads of one tenant each block in a `read()` of one handle
//! whose stream never gets a record. The daemon parks at most the uid's
//! cap of them (the others fail at once with EBUSY), another tenant's
//! reads keep their p99 (within 2× of the same test's unloaded windows),
//! and once the attacker is SIGKILLed every read it had waiting is failed
//! so that it can exit.

use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpupm_client::{Scope, TenantClient};
use gpupm_test_support::users::{spawn_as, Child, Cred};
use gpupm_test_support::wait_until;
use serde_json::json;

use crate::fixture::{p99, victim, System, IDLE_TENANT};

/// Reads the attacker blocks in.
const READERS: u64 = 5_000;
/// Parked reads of one uid under `fixture::LIMITS`.
const PARKED_PER_UID: u64 = 32;

/// The attacker: a stream session on VM 4 (which runs nothing) and
/// [`READERS`] threads each in one blocking `pread()` of it. Ready once
/// every thread is in (or back from) its read; reports how many came
/// back and with which errno.
fn attacker(node: &Path) -> Child {
    let node = node.to_owned();
    spawn_as(&Cred::user(IDLE_TENANT), move |ctl| {
        let c = Arc::new(TenantClient::open(&node).expect("open"));
        c.open_stream(Scope::Vm(4)).expect("own VM's stream");
        let entered = Arc::new(AtomicU64::new(0));
        let busy = Arc::new(AtomicU64::new(0));
        let other = Arc::new(AtomicU64::new(0));
        for _ in 0..READERS {
            let (c, entered, busy, other) = (
                Arc::clone(&c),
                Arc::clone(&entered),
                Arc::clone(&busy),
                Arc::clone(&other),
            );
            std::thread::Builder::new()
                .stack_size(64 << 10)
                .spawn(move || {
                    entered.fetch_add(1, Ordering::SeqCst);
                    // pread: read() of one file would queue the threads on
                    // its position lock in the kernel, one at a time.
                    let mut buf = [0u8; 1024];
                    match nix::sys::uio::pread(c.as_fd(), &mut buf, 0) {
                        Err(nix::errno::Errno::EBUSY) => busy.fetch_add(1, Ordering::SeqCst),
                        _ => other.fetch_add(1, Ordering::SeqCst),
                    };
                })
                .expect("a reader thread");
        }
        while entered.load(Ordering::SeqCst) < READERS {
            std::thread::yield_now();
        }
        // Every refusal comes back at once; wait for them (bounded).
        let deadline = Instant::now() + Duration::from_secs(20);
        while busy.load(Ordering::SeqCst) + PARKED_PER_UID < READERS && Instant::now() < deadline {
            std::thread::yield_now();
        }
        ctl.ready();
        ctl.wait_go();
        json!({ "busy": busy.load(Ordering::SeqCst), "other": other.load(Ordering::SeqCst) })
    })
}

#[test]
fn five_thousand_parked_reads_leave_another_tenant_served_and_die_with_their_reader() {
    let _machine = crate::fixture::measuring();
    let mut sys = System::realtime();
    let t0 = Instant::now();
    let mut v = victim(&sys.node(), 3, 1500);
    v.wait_ready();
    v.go();
    v.wait_ready();

    let mut a = attacker(&sys.node());
    a.wait_ready();
    // The uid's cap of reads is parked in the daemon (not queued in the
    // kernel): its own count says so.
    wait_until(
        "the reads parked",
        Duration::from_secs(10),
        Duration::from_millis(5),
        || {
            let n = sys.bound_use("parked_reads");
            (n == PARKED_PER_UID)
                .then_some(())
                .ok_or(format!("{n} parked"))
        },
    );
    v.go();
    v.wait_ready();
    // The attacker exits with its reads waiting: the kernel holds it in
    // them until each is failed.
    a.go();
    let (got, exit) = a.finish_within(Duration::from_secs(10));
    let exit_ms = exit.as_millis();
    assert_eq!(
        sys.bound_use("parked_reads"),
        0,
        "parked reads outlived their reader"
    );
    v.go();
    let windows = v.finish();
    let w: Vec<u64> = windows.as_array().unwrap().iter().map(p99).collect();
    eprintln!(
        "attacker {got}; victim p99 µs {w:?}; the attacker exited {exit_ms} ms after its answer; {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    assert!(sys.daemon.alive(), "gpupmd died:\n{}", sys.daemon.log());
    let unloaded = w[0].max(w[2]);
    assert!(
        w[1] <= 2 * unloaded.max(1),
        "the victim's p99 went from {unloaded} µs to {} µs with the reads parked",
        w[1]
    );
    assert_eq!(
        got,
        json!({ "busy": READERS - PARKED_PER_UID, "other": 0 }),
        "all but the uid's cap refused with EBUSY"
    );
    sys.daemon.stop();
}
