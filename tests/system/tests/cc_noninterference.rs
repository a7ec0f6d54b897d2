//! Non-interference of the whole host side: the real
//! driver (step clock, `--debug-ledger`) and `gpupmd`, logging to a real
//! `systemd-journald`, run twice on the same scenario, differing only in
//! what the confidential VM runs — its profile's rates (10×) *and* its
//! program's body (same name and shape, other instructions, CPIs, loop
//! trips, branches, data). Its partition is time-sliced with a plain VM.
//! Before driving the clock the host arms every plane it can on that
//! partition through `card0`: marked ranges on the confidential program
//! (code, latency) and on every program's data, a range on the plain
//! program, the record ring, both samplers with small buffers, runtime
//! instrumentation on every context of both VMs (refused for the
//! confidential ones); and the admin asks the daemon for a range and an
//! RI session on a confidential context. Both runs are driven alike — the
//! same clock steps, and before every step the test waits until the daemon
//! has done all it can (handshakes waiting only for device time, every
//! stream ring and range ring drained), so the device timeline does not
//! depend on the daemon's wall-clock speed. At that quiescent end,
//! everything the host can read in plaintext must be byte-identical: the
//! outcome of every attempt, every register of BAR0, the whole memory
//! window (sealed payloads and tags blanked, lengths equal), every
//! interrupt record, both mailboxes' answers to every command (the BMC's
//! through `card0-oob`), the daemon's metrics scrapes (the local listener and the authenticated
//! one with tenant series), its journald fields
//! and the admin's view of every scope through the tenant node — the
//! totals gpupmd publishes to the kernel PMU. And the confidential VM's
//! tenant, opening its blocks with its key, sees exactly its ledger in
//! both runs — which differ.
//!
//! What is left out, and why (nothing else is):
//! * `VM_KEY_SESSION` of every VM entry and the envelopes' `session_lo` /
//!   `session_hi`: the device draws a fresh session id from the OS at every
//!   start, so two driver starts differ there whatever the workload (public
//!   by design, `docs/confidential.md`).
//! * metrics `gpupm_uptime_seconds`, `gpupm_handshake_duration_seconds`
//!   buckets and sum (its count stays), and journald `UPTIME_S`,
//!   `HANDSHAKE_P50_US`, `HANDSHAKE_P99_US` and the uptime in the shutdown
//!   message's text ("stopping (signal) after N s"): wall time of the
//!   daemon process itself (how long it ran, how fast it answered).
//! * journald's own fields (`_*`, `__*`: pid, timestamps, cursor, boot)
//!   and `TID`: which process and thread logged, and when.
//! * the scratch directory's path and the metrics listeners' ephemeral
//!   port, which appear in log messages: they are replaced by placeholders.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use gpupm_client::{DevNode, Scope, TenantClient};
use gpupm_driver::model::cc::open_ledger;
use gpupm_driver::model::{Device, EngineKind};
use gpupm_test_support::cc::{flush_and_settle, settle, STEP};
use gpupm_test_support::device::expected;
use gpupm_test_support::planes::{
    self, arm_everything, blank_sealed, mailbox, register_map, registers, RawPort, Workload, BUSY,
    CC_KEY, CC_VM, OTHER, SHARED_VM,
};
use gpupm_test_support::scrape::{authenticated_metrics_addr, http_get};
use gpupm_test_support::services::{daemon_config, spawn_daemon};
use gpupm_test_support::web::{write_web_config, Client};
use gpupm_test_support::{Driver, DriverOptions, Scratch};
use gpupm_uapi::events::MAX_EVENTS;
use gpupm_uapi::intr::InterruptRecord;
use gpupm_uapi::ioctl::ledger_scope;
use gpupm_uapi::layout::{Block, BLOCK_MAGIC};
use gpupm_uapi::ranges::range_event;
use gpupm_uapi::ranges::{rring, RRING_HEAD, RRING_TAIL};
use gpupm_uapi::regs as r;
use gpupm_uapi::tenant::counter_flags;
use gpupm_uapi::tenant::ranges::{range_kind, AddRange};
use gpupm_uapi::tenant::ri::{ri_session_mode, OpenRi};
use nix::sys::signal::Signal;
use serde_json::Value;
use zerocopy::{FromBytes, IntoBytes};

/// The authenticated metrics listener's basic-auth user and password.
const METRICS_USER: (&str, &str) = ("prometheus", "cc-not-a-secret");

/// Clock steps per run.
const STEPS: u32 = 40;

/// What one run's host could read, and what the tenant saw.
struct Observed {
    attempts: Vec<u8>,
    registers: Vec<u8>,
    window: planes::Window,
    interrupts: Vec<InterruptRecord>,
    mailboxes: Vec<u8>,
    metrics: String,
    journal: Vec<BTreeMap<String, String>>,
    admin: Vec<u8>,
    /// The confidential VM's block as its tenant opens it.
    tenant_block: [u64; MAX_EVENTS],
    /// The ranges' `RANGE_COUNT`s on the shared partition.
    range_counts: Vec<u64>,
}

/// Replaces what names this run's scratch directory or metrics port, and
/// the daemon's uptime in its shutdown message.
fn normalise(text: &str, tmp: &str, metrics: &[String]) -> String {
    let mut text = text.replace(tmp, "<tmp>");
    for (i, addr) in metrics.iter().enumerate() {
        text = text.replace(addr.as_str(), &format!("<metrics{i}>"));
    }
    match text.split_once(") after ") {
        Some((head, tail)) if tail.ends_with(" s\"") => format!("{head}) after <uptime> s\""),
        _ => text,
    }
}

/// The local listener's scrape, then the authenticated one's (tenant
/// series, basic auth).
fn metrics_scrape(local: SocketAddr, authenticated: SocketAddr) -> String {
    let (status, _, body) = http_get(local, "/metrics", None);
    assert!(status.contains("200"), "metrics: {status}");
    let (code, _, tenants) = Client::plain()
        .basic_auth(METRICS_USER.0, METRICS_USER.1)
        .get(authenticated, "/metrics")
        .expect("scrape the authenticated listener");
    assert_eq!(code, 200, "{tenants}");
    format!("{body}{tenants}")
        .lines()
        .filter(|l| {
            !l.starts_with("gpupm_uptime_seconds")
                && !l.starts_with("gpupm_handshake_duration_seconds_bucket")
                && !l.starts_with("gpupm_handshake_duration_seconds_sum")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The daemon's journal entries (it has exited), without the fields that
/// say which process logged and when, or the daemon's own wall time.
fn journal_of(pid: i32, tmp: &str, metrics: &[String]) -> Vec<BTreeMap<String, String>> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = Command::new("journalctl")
            .args(["--no-pager", "-o", "json", "--all"])
            .arg(format!("_PID={pid}"))
            .output()
            .expect("journalctl runs");
        let entries: Vec<Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let done = entries
            .iter()
            .any(|e| e["MESSAGE"].as_str() == Some("final summary"));
        if done {
            return entries
                .iter()
                .map(|e| {
                    e.as_object()
                        .expect("journal entry")
                        .iter()
                        .filter(|(k, _)| {
                            !k.starts_with('_')
                                && !matches!(
                                    k.as_str(),
                                    "TID" | "UPTIME_S" | "HANDSHAKE_P50_US" | "HANDSHAKE_P99_US"
                                )
                        })
                        .map(|(k, v)| (k.clone(), normalise(&v.to_string(), tmp, metrics)))
                        .collect()
                })
                .collect();
        }
        assert!(
            Instant::now() < deadline,
            "no final summary of gpupmd ({pid}) in the journal within 20 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether every range ring the daemon drains is empty.
fn range_rings_drained(dev: &DevNode) -> bool {
    let offsets: Vec<u64> = (1..=3)
        .flat_map(|p| [rring(p, RRING_HEAD), rring(p, RRING_TAIL)])
        .collect();
    let v = dev.read_many(&offsets).expect("range ring pointers");
    v.chunks_exact(2).all(|ht| ht[0] == ht[1])
}

/// The daemon settled: handshakes and stream rings ([`settle`]), and the
/// range rings, which it drains on their interrupts.
fn quiesce(dev: &DevNode, mut daemon_dead: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        settle(dev, &mut daemon_dead);
        if range_rings_drained(dev) {
            return;
        }
        assert!(!daemon_dead(), "gpupmd died");
        assert!(
            Instant::now() < deadline,
            "the daemon did not drain the range rings within 30 s"
        );
        std::thread::yield_now();
    }
}

/// What the admin reads through the tenant node: who it is, every VM's
/// contexts, the counters of the system, every VM and every context —
/// the totals gpupmd also publishes to the kernel PMU — with sealed
/// answers blanked ([`blank_sealed`]).
fn admin_view(admin: &TenantClient) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(admin.whoami().expect("whoami").as_bytes());
    let mut read = |s: Scope| match admin.read_counters(s, &[]) {
        Ok(mut rc) => {
            if rc.flags & counter_flags::SEALED != 0 {
                blank_sealed(rc.sealed.as_mut_bytes());
            }
            out.extend_from_slice(rc.as_bytes());
        }
        Err(e) => out.extend_from_slice(format!("{s:?}: {e}").as_bytes()),
    };
    read(Scope::System);
    for (vm, _) in planes::UIDS {
        read(Scope::Vm(vm));
        for c in admin.list_contexts(vm).expect("list contexts") {
            read(Scope::Ctx(c.ctx));
        }
    }
    out
}

/// The admin asks gpupmd for what the device does not offer on a
/// confidential context — a range and an RI session — and for the same on
/// a plain one: the answers, as text.
fn daemon_attempts(node: &std::path::Path, dev: &DevNode) -> Vec<u8> {
    let mut out = String::new();
    for vm in [CC_VM, SHARED_VM] {
        let ctx = planes::contexts_of(&mut &*dev, vm)[0];
        let admin = TenantClient::open(node).expect("open the tenant node");
        let range = AddRange {
            ctx,
            kind: range_kind::CODE,
            event: range_event::CYCLES,
            kernel: 0,
            first: 0,
            last: 0,
            ..AddRange::default()
        };
        let added = admin.add_range(&range).map(|a| (a.register, a.shared));
        let ri = OpenRi {
            ctx,
            mode: ri_session_mode::CYCLE,
            sf: 100_000,
            ..OpenRi::default()
        };
        let opened = admin.open_ri(&ri).map(|o| o.block);
        out += &format!("vm {vm}: range {added:?}; RI {opened:?}\n");
    }
    out.into_bytes()
}

fn observe(w: Workload) -> Observed {
    let tmp = Scratch::new("cc-ni");
    let tmp_name = tmp.path().to_string_lossy().into_owned();
    let driver = Driver::start_in(&tmp, DriverOptions::system(planes::scenario(w)));
    let dev = driver.node();
    let mut oob = RawPort(driver.open("card0-oob", 0));
    let mut intr = dev.interrupts().expect("interrupt handle");
    let web = write_web_config(&tmp.join("metrics-web.yml"), None, &[METRICS_USER]);
    let extra = format!(
        "{}\n[health]\nsummary_interval_s = 3600\n[metrics.authenticated]\nlisten = \"127.0.0.1:0\"\nweb_config_file = {:?}\ntenant_series = true\n",
        planes::tenants(),
        web.display().to_string()
    );
    let mut daemon = spawn_daemon(&tmp, &daemon_config(&tmp, &extra), &[], &[]);
    let status = daemon.wait_for("STATUS=serving");
    let addr: SocketAddr = status
        .rsplit("http://")
        .next()
        .and_then(|s| s.strip_suffix("/metrics"))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no metrics address in {status}"));
    daemon.wait_for("READY=1");
    let authenticated = authenticated_metrics_addr(&daemon.notes);
    let addresses = [addr.to_string(), authenticated.to_string()];
    let node = tmp.join("tenant").join("node");
    let admin = TenantClient::open(&node).expect("open the tenant node as root");

    quiesce(&dev, || !daemon.alive());
    let mut attempts: Vec<u8> = arm_everything(&mut &dev, None, true)
        .iter()
        .map(|&ok| u8::from(ok))
        .collect();
    attempts.extend(daemon_attempts(&node, &dev));
    for _ in 0..STEPS {
        dev.advance(STEP).expect("advance");
        quiesce(&dev, || !daemon.alive());
    }
    flush_and_settle(&dev, || !daemon.alive());
    quiesce(&dev, || !daemon.alive());

    // Which registers exist depends on the scenario alone: a model of it
    // finds them in process.
    let model = Device::new(
        &gpupm_driver::scenario::parse("m", &planes::scenario(w)).expect("parses"),
        EngineKind::Batched,
        true,
    )
    .expect("the model builds");
    let map = register_map(&mut { model });
    let sessions: Vec<u64> = (0..r::MAX_VMS)
        .flat_map(|vm| {
            let at = r::vm(vm, r::VM_KEY_SESSION);
            [at, at + 4]
        })
        .chain((r::OOB_MBOX_ARG..r::OOB_MBOX_ARG + 0x100).step_by(4))
        .collect();
    let registers = registers(&mut &dev, &map, &sessions);
    let window = planes::window(&mut &dev);
    let mut mailboxes = mailbox(&mut &dev, false);
    mailboxes.extend(mailbox(&mut oob, true));
    let range_counts = planes::range_counts(&mut &dev);
    let mut interrupts = Vec::new();
    intr.wait(Duration::ZERO, &mut interrupts)
        .expect("read interrupts");
    let admin_bytes = admin_view(&admin);
    let metrics = normalise(&metrics_scrape(addr, authenticated), &tmp_name, &addresses);
    let tenant_block = tenant_view(&dev);

    let pid = daemon.pid().as_raw();
    drop(admin);
    let exit = daemon.signal_and_wait(Signal::SIGTERM);
    assert!(exit.success(), "gpupmd exit {exit}");
    let journal = journal_of(pid, &tmp_name, &addresses);
    driver.stop();
    Observed {
        attempts,
        registers,
        window,
        interrupts,
        mailboxes,
        metrics,
        journal,
        admin: admin_bytes,
        tenant_block,
        range_counts,
    }
}

/// The confidential VM's block, opened with its key, checked against its
/// (sealed) debug ledger opened with the same key.
fn tenant_view(dev: &DevNode) -> [u64; MAX_EVENTS] {
    let off = dev.read64(r::vm(CC_VM, r::VM_BLOCK)).expect("VM_BLOCK");
    let mut slot = dev.block_slot(off).expect("block slot");
    gpupm_driver::model::cc::open(&CC_KEY, &slot.envelope, &mut slot.payload, &slot.tag)
        .expect("the tenant's key opens its block");
    let block = Block::read_from_bytes(slot.payload.as_bytes()).expect("block");
    assert_eq!(block.magic, BLOCK_MAGIC);
    let mut q = dev.ledger(ledger_scope::VM, CC_VM).expect("ledger");
    open_ledger(&mut q, &CC_KEY).expect("the sealed ledger opens");
    assert_eq!(
        block.counters,
        expected(&q),
        "the tenant's block != its ledger"
    );
    block.counters
}

fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .or((a.len() != b.len()).then_some(a.len().min(b.len())))
}

#[test]
fn nothing_the_host_side_shows_on_any_plane_depends_on_a_confidential_vms_workload() {
    let _journald = gpupm_test_support::journald::ensure();
    let busy = observe(BUSY);
    let other = observe(OTHER);

    // The workloads did differ, and each tenant view is its ledger.
    let total = |v: &[u64; MAX_EVENTS]| v.iter().sum::<u64>();
    let (b, l) = (total(&busy.tenant_block), total(&other.tenant_block));
    assert!(b > l && l > 0, "confidential totals: busy {b}, other {l}");
    assert_eq!(
        String::from_utf8_lossy(&busy.attempts),
        String::from_utf8_lossy(&other.attempts),
        "the attempts' outcomes differ"
    );
    let at = busy
        .interrupts
        .iter()
        .zip(&other.interrupts)
        .position(|(x, y)| x != y);
    assert_eq!(
        (at, busy.interrupts.len()),
        (None, other.interrupts.len()),
        "interrupt records differ: {:?}",
        at.map(|i| (&busy.interrupts[i], &other.interrupts[i]))
    );
    assert!(!busy.interrupts.is_empty());
    assert_eq!(busy.window.regions, other.window.regions);
    if let Some(at) = first_difference(&busy.window.bytes, &other.window.bytes) {
        let (region, offset) = busy.window.locate(at);
        panic!("the memory window differs in {region} at byte {offset}");
    }
    for (what, x, y) in [
        ("registers", &busy.registers, &other.registers),
        ("mailboxes", &busy.mailboxes, &other.mailboxes),
        ("admin's tenant view", &busy.admin, &other.admin),
    ] {
        let at = first_difference(x, y);
        let context =
            at.map(|i| String::from_utf8_lossy(&x[i.saturating_sub(40)..(i + 8).min(x.len())]));
        assert_eq!(at, None, "{what} differ at byte {at:?} ({context:?})");
    }
    for (a, b) in busy.metrics.lines().zip(other.metrics.lines()) {
        assert_eq!(a, b, "metrics scrape differs");
    }
    assert_eq!(busy.metrics, other.metrics, "metrics scrape differs");
    assert!(busy.metrics.contains("gpupm_vm_confidential"));
    assert!(busy.metrics.contains("gpupm_range_sealed_total 0"));
    assert_eq!(busy.journal.len(), other.journal.len(), "journal entries");
    for (a, b) in busy.journal.iter().zip(&other.journal) {
        assert_eq!(a, b, "journal entry differs");
    }
    let summary = busy
        .journal
        .iter()
        .find(|e| e.get("MESSAGE").map(String::as_str) == Some("\"final summary\""))
        .expect("final summary");
    assert_ne!(summary.get("HANDSHAKES").map(String::as_str), Some("\"0\""));
    // Every plane was armed; the ranges on the confidential program count
    // nothing, those that see the plain VM count it.
    assert_eq!(busy.attempts[..10], [1, 1, 1, 1, 1, 1, 0, 0, 1, 1]);
    let counts = &busy.range_counts;
    assert_eq!([counts[0], counts[1], counts[3]], [0, 0, 0], "{counts:?}");
    assert!(counts[2] > 0 && counts[4] > 0, "{counts:?}");
    assert!(busy.window.sealed > 0);

    eprintln!(
        "compared {} register bytes, {} window bytes ({} sealed slots), {} interrupt records, \
         {} mailbox bytes, {} metric lines, {} journal entries, {} admin-view bytes; \
         confidential totals {b} vs {l}; attempts {}",
        busy.registers.len(),
        busy.window.bytes.len(),
        busy.window.sealed,
        busy.interrupts.len(),
        busy.mailboxes.len(),
        busy.metrics.lines().count(),
        busy.journal.len(),
        busy.admin.len(),
        String::from_utf8_lossy(&busy.attempts[10..]),
    );
}
