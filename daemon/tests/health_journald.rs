//! Health in a real journald: a child process (this test binary, running
//! the ignored `probe` test) logs through `init_logging` and the reporter;
//! `journalctl -o json` must show the structured fields. Without a journal
//! socket the same events go to stderr.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use gpupm_client::identity::GpuIdentity;
use gpupm_test_support::require_tool;
use gpupm_uapi::identity::{DeviceUuid, PciAddress};
use gpupmd::health::{
    self, HealthConfig, ANOMALY_ID, DEVICE_IDENTITY_ID, SHUTDOWN_ID, STARTUP_ID, SUMMARY_ID,
};
use gpupmd::view::{DeviceIdentity, HealthSnapshot, HealthSource};
use serde_json::Value;

const SOCKET: &str = health::DEFAULT_JOURNAL_SOCKET;
const PROBE_SOCKET_ENV: &str = "GPUPM_HEALTH_PROBE_SOCKET";

/// Runs this binary's `probe` test as a child process.
fn run_probe(socket: &str) -> (u32, Output) {
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "probe",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(PROBE_SOCKET_ENV, socket)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "probe failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (pid, out)
}

/// The probe's script: a baseline, a busy interval, a troubled interval
/// (fallbacks, lost records, a slow handshake, tenant errors), a quiet one.
fn script() -> Vec<HealthSnapshot> {
    let base = HealthSnapshot {
        device: identity(),
        ..HealthSnapshot::default()
    };
    let busy = HealthSnapshot {
        uptime_s: 1.5,
        handshakes: 100,
        handshake_latency_ns: (1..=100).map(|us| us * 1000).collect(),
        drained_records: 5000,
        drain_lag_records: 7,
        handshake_response_max_ns: 421_600,
        contexts_active: 12,
        contexts_retired: 3,
        tenant_requests: 400,
        tenant_errors: 2,
        ..base.clone()
    };
    let mut slow: Vec<u64> = vec![10_000; 98];
    slow.extend([2_000_000, 2_000_000]);
    let troubled = HealthSnapshot {
        uptime_s: 2.5,
        handshakes: 200,
        handshake_latency_ns: slow,
        fallbacks: 2,
        lost_records: 5,
        tenant_requests: 500,
        tenant_errors: 60,
        ..busy.clone()
    };
    let quiet = HealthSnapshot {
        uptime_s: 3.5,
        handshake_latency_ns: Vec::new(),
        ..troubled.clone()
    };
    vec![base, busy, troubled, quiet]
}

fn identity() -> DeviceIdentity {
    DeviceIdentity {
        abi_version: 0x0001_0001,
        clock_khz: 1_410_000,
        partitions: 7,
        ccus: 24,
        sms: 132,
    }
}

fn gpu() -> GpuIdentity {
    GpuIdentity {
        index: 3,
        pci: PciAddress::parse("0000:5d:00.0").unwrap(),
        uuid: DeviceUuid::parse("GPU-3b2a9c4e-1f00-8d21-a5b6-0c7d8e9fa0b1").unwrap(),
        serial: "1650923012345".into(),
        model: "H100 SXM5 80GB".into(),
    }
}

/// Child side: log lifecycle events and three summaries, then exit.
#[test]
#[ignore = "run as a child process by the journald tests"]
fn probe() {
    let socket = std::env::var(PROBE_SOCKET_ENV).unwrap_or_else(|_| SOCKET.to_owned());
    let cfg = HealthConfig {
        summary_interval: Duration::from_millis(100),
        journal_socket: socket.into(),
    };
    let sink = health::init_logging_sink(&cfg).expect("init logging");
    println!("LOG_SINK={}", sink.name());
    health::startup("0.1.0-test", Path::new("/etc/gpupm/gpupmd.toml"));
    health::device_identity(&identity(), Some(&gpu()));
    health::config_applied(
        Path::new("/etc/gpupm/gpupmd.toml"),
        "trigger period 1000 cycles",
    );
    let source = Arc::new(ScriptedHealth::new(script()));
    let reporter = health::start_reporter(Arc::clone(&source) as _, cfg).expect("reporter");
    // Baseline plus three ticks; stopping the reporter waits for the pass
    // that took the fourth snapshot, so the third summary is logged.
    source.wait_for_calls(4);
    drop(reporter);
    health::shutdown("probe done", 3.5);
}

fn journal_entries(pid: u32) -> Vec<Value> {
    let journalctl = require_tool("journalctl", "systemd");
    let out = Command::new(journalctl)
        .args(["-o", "json", "--no-pager", "--output-fields="])
        .arg(format!("_PID={pid}"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn field<'a>(e: &'a Value, name: &str) -> &'a str {
    e[name]
        .as_str()
        .unwrap_or_else(|| panic!("no {name} in {e}"))
}

fn with_id<'a>(entries: &'a [Value], id: &str) -> Vec<&'a Value> {
    entries
        .iter()
        .filter(|e| e["MESSAGE_ID"].as_str() == Some(id))
        .collect()
}

#[test]
fn summary_anomalies_and_lifecycle_reach_journald_with_structured_fields() {
    let _journald = gpupm_test_support::journald::ensure();
    let (pid, out) = run_probe(SOCKET);
    assert!(String::from_utf8_lossy(&out.stdout).contains("LOG_SINK=journald"));

    // journald writes asynchronously: read back until everything is there.
    let deadline = Instant::now() + Duration::from_secs(20);
    let entries = loop {
        let entries = journal_entries(pid);
        if with_id(&entries, SHUTDOWN_ID).len() == 1 && with_id(&entries, SUMMARY_ID).len() == 3 {
            break entries;
        }
        assert!(
            Instant::now() < deadline,
            "journal of pid {pid} incomplete: {entries:#?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };

    let summaries = with_id(&entries, SUMMARY_ID);
    let s = summaries[0];
    for (name, want) in [
        ("PRIORITY", "6"),
        ("HANDSHAKES", "100"),
        ("HANDSHAKE_SAMPLES", "100"),
        ("HANDSHAKE_P50_US", "50"),
        ("HANDSHAKE_P99_US", "99"),
        ("FALLBACKS", "0"),
        ("LOST_RECORDS", "0"),
        ("DRAINED_RECORDS", "5000"),
        ("DRAIN_LAG_RECORDS", "7"),
        ("HANDSHAKE_RESPONSE_MAX_US", "422"),
        ("CONTEXTS_ACTIVE", "12"),
        ("CONTEXTS_RETIRED", "3"),
        ("TENANT_REQUESTS", "400"),
        ("TENANT_ERRORS", "2"),
        ("UPTIME_S", "1.5"),
    ] {
        assert_eq!(field(s, name), want, "{name} in {s}");
    }
    let rate: f64 = field(s, "TENANT_REQUEST_RATE").parse().unwrap();
    assert!(rate > 0.0 && rate.is_finite(), "rate {rate}");
    assert_eq!(field(summaries[1], "HANDSHAKE_P99_US"), "2000");
    assert_eq!(field(summaries[1], "FALLBACKS"), "2");
    assert_eq!(field(summaries[2], "HANDSHAKE_SAMPLES"), "0");

    let anomalies = with_id(&entries, ANOMALY_ID);
    let kinds: Vec<&str> = anomalies.iter().map(|e| field(e, "ANOMALY")).collect();
    assert_eq!(
        kinds,
        [
            "fallbacks",
            "lost_records",
            "handshake_p99",
            "tenant_errors"
        ],
        "{anomalies:#?}"
    );
    assert!(anomalies.iter().all(|e| field(e, "PRIORITY") == "4"));
    assert_eq!(field(anomalies[0], "NEW"), "2");
    assert_eq!(field(anomalies[1], "NEW"), "5");
    assert_eq!(field(anomalies[2], "HANDSHAKE_P99_US"), "2000");
    assert_eq!(
        (
            field(anomalies[3], "ERRORS"),
            field(anomalies[3], "REQUESTS")
        ),
        ("58", "100")
    );

    let start = with_id(&entries, STARTUP_ID);
    assert_eq!(field(start[0], "VERSION"), "0.1.0-test");
    let dev = with_id(&entries, DEVICE_IDENTITY_ID);
    assert_eq!(
        (
            field(dev[0], "SMS"),
            field(dev[0], "CCUS"),
            field(dev[0], "CLOCK_KHZ")
        ),
        ("132", "24", "1410000")
    );
    assert_eq!(
        [
            "GPU_INDEX",
            "GPU_UUID",
            "GPU_PCI_ADDRESS",
            "GPU_MODEL",
            "GPU_SERIAL"
        ]
        .map(|k| field(dev[0], k)),
        [
            "3",
            "GPU-3b2a9c4e-1f00-8d21-a5b6-0c7d8e9fa0b1",
            "0000:5d:00.0",
            "H100 SXM5 80GB",
            "1650923012345"
        ]
    );
    assert_eq!(with_id(&entries, health::CONFIG_APPLIED_ID).len(), 1);
}

#[test]
fn without_a_journal_socket_events_go_to_stderr() {
    let (_pid, out) = run_probe("/nonexistent/gpupm-test/journal/socket");
    assert!(String::from_utf8_lossy(&out.stdout).contains("LOG_SINK=stderr"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches(SUMMARY_ID).count(), 3, "{err}");
    assert!(
        err.contains("handshake_p50_us=50") && err.contains("handshake_p99_us=99"),
        "{err}"
    );
    assert!(
        err.contains("WARN") && err.contains("anomaly=\"fallbacks\""),
        "{err}"
    );
    assert!(err.contains("no journal socket"), "{err}");
}

/// Returns `script[k]` on the k-th call (the last one thereafter) and
/// counts the calls.
#[derive(Debug)]
pub struct ScriptedHealth {
    script: Vec<HealthSnapshot>,
    calls: Mutex<usize>,
    called: Condvar,
}

impl ScriptedHealth {
    pub fn new(script: Vec<HealthSnapshot>) -> Self {
        assert!(!script.is_empty());
        Self {
            script,
            calls: Mutex::new(0),
            called: Condvar::new(),
        }
    }

    /// Waits until `n` snapshots were taken.
    pub fn wait_for_calls(&self, n: usize) {
        let calls = self.calls.lock().unwrap();
        drop(self.called.wait_while(calls, |k| *k < n).unwrap());
    }
}

impl HealthSource for ScriptedHealth {
    fn snapshot(&self) -> HealthSnapshot {
        let mut calls = self.calls.lock().unwrap();
        let snap = self.script[(*calls).min(self.script.len() - 1)].clone();
        *calls += 1;
        self.called.notify_all();
        snap
    }
}
