//! What the attacks share: the device (a real-time clock, so that
//! switches and their handshakes go on under the attack), the tenants,
//! the daemon with test-sized `[limits]`, and the victim's measurements.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use gpupm_client::{DevNode, Scope, TenantClient};
use gpupm_test_support::device::part_sum;
use gpupm_test_support::scenario::builtin_program;
use gpupm_test_support::scrape::{metrics, metrics_addr, samples};
use gpupm_test_support::services::{daemon_config, spawn_daemon};
use gpupm_test_support::users::{spawn_as, Child, Cred};
use gpupm_test_support::{Driver, DriverOptions, Proc, Scratch};
use gpupm_uapi::regs as r;
use serde_json::{json, Value};

/// The attacker: VM 1's tenant.
pub(crate) const ATTACKER: u32 = 61801;
/// Its co-tenant on partition 1: VM 2's tenant.
pub(crate) const NEIGHBOUR: u32 = 61802;
/// Another partition's tenant, whose service the attacks must not slow:
/// VM 3's.
pub(crate) const VICTIM: u32 = 61803;
/// The tenant of VM 4, which runs nothing (its streams stay empty, so
/// reads on them wait).
pub(crate) const IDLE_TENANT: u32 = 61804;
/// Uids mapped to nothing.
pub(crate) const UNMAPPED: [u32; 7] = [61811, 61812, 61813, 61814, 61815, 61816, 61817];

/// Device cycles per second of [`realtime_scenario`].
pub(crate) const KHZ: u64 = 20_000;

/// The tenant map of every attack.
pub(crate) fn tenants() -> String {
    [(1, ATTACKER), (2, NEIGHBOUR), (3, VICTIM), (4, IDLE_TENANT)]
        .iter()
        .map(|(vm, uid)| format!("[[tenant]]\nvm = {vm}\nuid = {uid}\n"))
        .collect()
}

/// The `[limits]` of the attacks: small enough that a test reaches them
/// in a moment, each checked against what the attack could hold.
pub(crate) const LIMITS: &str = "[limits]\n\
    handles_per_uid = 64\nhandles_total = 512\n\
    stream_sessions_per_uid = 16\nsampling_sessions_per_uid = 8\nri_sessions_per_uid = 4\n\
    parked_reads_per_uid = 32\nparked_reads_total = 128\n\
    queued_mib_per_uid = 24\nqueued_mib_total = 96\n\
    page_connections_per_tenant = 16\npage_connections_total = 64\n";

/// Bytes of queue the attacker's uid may reserve under [`LIMITS`].
pub(crate) const ATTACKER_QUEUE_BYTES: u64 = 24 << 20;
/// Handles one uid may hold under [`LIMITS`].
pub(crate) const HANDLES_PER_UID: u64 = 64;

/// Partition 1 time-slices VMs 1 and 2 (two and one contexts), partition
/// 2 runs VM 3 (two contexts), VM 4 sits on partition 2 with no context;
/// every context runs the built-in GEMM, so that samplers have programs
/// to sample. At [`KHZ`] a context switches every 5 ms of wall time on
/// each partition; a switch the daemon does not finish within 100 ms
/// falls to the device's fallback.
pub(crate) fn realtime_scenario() -> String {
    format!(
        "seed = 11\nswitch_timeout_cycles = {timeout}\n[clock]\nkhz = {KHZ}\n\
         [topology]\nsms_per_gpc = [2, 2]\nmemory_slices = 2\nnvlinks = 0\n\
         [trigger]\nperiod_cycles = 20000\n\
         [[partition]]\nslot = 1\ngpcs = [0]\nmemory_slices = [0]\n\
         ctx_timeslice_cycles = 100000\nvm_timeslice_cycles = 300000\n\
         [[partition]]\nslot = 2\ngpcs = [1]\nmemory_slices = [1]\n\
         ctx_timeslice_cycles = 100000\nvm_timeslice_cycles = 0\n\
         [[vm]]\nid = 1\npartition = 1\n[[vm]]\nid = 2\npartition = 1\n\
         [[vm]]\nid = 3\npartition = 2\n[[vm]]\nid = 4\npartition = 2\n\
         [[profile]]\nname = \"g\"\nprogram = \"gemm\"\n[[profile.phase]]\nduration_cycles = 1000000\n\
         rates = {{ sm_cycles_elapsed = 1.0 }}\n\
         [[context]]\nvm = 1\nprofile = \"g\"\n[[context]]\nvm = 1\nprofile = \"g\"\n\
         [[context]]\nvm = 2\nprofile = \"g\"\n\
         [[context]]\nvm = 3\nprofile = \"g\"\n[[context]]\nvm = 3\nprofile = \"g\"\n{}",
        builtin_program("gemm"),
        timeout = KHZ * 100,
    )
}

/// The real driver (real-time clock) and the daemon with the tenants
/// and `extra` configuration.
pub(crate) struct System {
    pub(crate) driver: Driver,
    pub(crate) daemon: Proc,
    pub(crate) tmp: Scratch,
}

impl System {
    /// Starts both on [`realtime_scenario`] with [`LIMITS`].
    pub(crate) fn realtime() -> System {
        System::start(realtime_scenario(), "realtime", LIMITS)
    }

    /// Starts both on `scenario` with `clock`, [`tenants`] and `extra`
    /// configuration.
    pub(crate) fn start(scenario: String, clock: &'static str, extra: &str) -> System {
        System::start_mapped(scenario, clock, &tenants(), extra)
    }

    /// Starts both with the tenant map `map`.
    pub(crate) fn start_mapped(
        scenario: String,
        clock: &'static str,
        map: &str,
        extra: &str,
    ) -> System {
        let tmp = Scratch::new("adversarial");
        let driver = Driver::start_in(
            &tmp,
            DriverOptions {
                clock,
                log: "info",
                ..DriverOptions::system(scenario)
            },
        );
        let daemon = start_daemon(&tmp, map, extra);
        System {
            driver,
            daemon,
            tmp,
        }
    }

    /// Stops the daemon and starts another with the tenant map `map`,
    /// on the same state directory.
    pub(crate) fn restart_daemon(&mut self, map: &str, extra: &str) {
        self.daemon.stop();
        self.daemon = start_daemon(&self.tmp, map, extra);
    }

    pub(crate) fn node(&self) -> PathBuf {
        self.tmp.join("tenant").join("node")
    }

    pub(crate) fn pages_socket(&self) -> PathBuf {
        self.tmp.join("pages").join("socket")
    }

    pub(crate) fn dev(&self) -> DevNode {
        self.driver.node()
    }

    /// Switches the device completed by its fallback so far.
    pub(crate) fn fallbacks(&self) -> u64 {
        part_sum(&self.dev(), r::PART_FALLBACKS)
    }

    /// gpupmd's resident memory, bytes.
    pub(crate) fn rss(&self) -> u64 {
        rss_of(self.daemon.pid().as_raw())
    }

    /// `gpupm_bound_use{resource}` in a scrape of gpupmd's metrics.
    pub(crate) fn bound_use(&self, resource: &str) -> u64 {
        let body = metrics(metrics_addr(&self.daemon.notes));
        samples(&body)
            .into_iter()
            .find(|(n, labels, _)| {
                n == "gpupm_bound_use"
                    && labels.iter().any(|(k, v)| k == "resource" && v == resource)
            })
            .and_then(|(_, _, v)| v.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no gpupm_bound_use{{resource={resource:?}}}:\n{body}"))
    }

    /// Descriptors gpupmd holds.
    pub(crate) fn fds(&self) -> usize {
        fs::read_dir(format!("/proc/{}/fd", self.daemon.pid()))
            .expect("gpupmd's descriptors")
            .count()
    }
}

fn start_daemon(tmp: &Scratch, map: &str, extra: &str) -> Proc {
    let config = daemon_config(
        tmp,
        &format!("{map}{extra}\n[health]\njournal_socket = \"/nonexistent/journal\"\n"),
    );
    let mut daemon = spawn_daemon(tmp, &config, &[], &[]);
    daemon.wait_for("READY=1");
    daemon
}

/// `VmRSS` of process `pid`, bytes.
pub(crate) fn rss_of(pid: i32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .expect("VmRSS")
}

/// The victim's service, measured in windows the parent starts: each
/// window is `reads` requests, one per millisecond, each a counter read
/// of its VM (`gpupm stat`'s request) and a non-blocking read of its
/// stream session (the handle table every session shares). Answers the
/// latencies of each window, in µs.
pub(crate) fn victim(node: &Path, windows: usize, reads: usize) -> Child {
    let node = node.to_owned();
    spawn_as(&Cred::user(VICTIM), move |ctl| {
        let c = TenantClient::open(&node).expect("open");
        let stream = TenantClient::open_nonblocking(&node).expect("open");
        stream.open_stream(Scope::Vm(3)).expect("own VM's stream");
        ctl.ready();
        let mut out = Vec::new();
        for _ in 0..windows {
            ctl.wait_go();
            let mut lat = Vec::with_capacity(reads);
            let start = Instant::now();
            for i in 0..reads {
                let t = Instant::now();
                c.read_counters(Scope::Vm(3), &[]).expect("own VM");
                match stream.read_deltas(16) {
                    Ok(_) => {}
                    Err(e) if e.errno() == Some(nix::errno::Errno::EAGAIN) => {}
                    Err(e) => panic!("stream read: {e}"),
                }
                lat.push(u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX));
                // Paced at 1 kHz, within the victim's own device-read bucket.
                let due = start + Duration::from_millis(u64::try_from(i).unwrap_or(0) + 1);
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
            }
            out.push(json!(lat));
            ctl.ready();
        }
        json!(out)
    })
}

/// The 99th percentile of `window`'s latencies, µs.
pub(crate) fn p99(window: &Value) -> u64 {
    let mut v: Vec<u64> = window
        .as_array()
        .expect("latencies")
        .iter()
        .map(|x| x.as_u64().expect("µs"))
        .collect();
    v.sort_unstable();
    v[(v.len() * 99 / 100).min(v.len() - 1)]
}

/// The machine, as the tests of this binary share it: the libtest harness
/// runs them on parallel threads, and a test that compares a victim's
/// latency with and without its attack must not also measure another
/// test's attack (pageflood's 1,100 connections put a victim's p99 at 2×
/// in a run where the attack under test cost the daemon no CPU at all).
static MACHINE: RwLock<()> = RwLock::new(());

/// Held by a test that measures latency: it runs alone.
pub(crate) fn measuring() -> RwLockWriteGuard<'static, ()> {
    MACHINE.write().unwrap_or_else(PoisonError::into_inner)
}

/// Held by every other test: they run beside each other, never beside a
/// measuring one.
pub(crate) fn sharing() -> RwLockReadGuard<'static, ()> {
    MACHINE.read().unwrap_or_else(PoisonError::into_inner)
}
