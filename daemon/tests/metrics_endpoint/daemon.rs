//! The real `gpupm-driver` (step clock, the system tests' churn scenario:
//! contexts created and destroyed on three VMs, ids recycled lowest-first)
//! and the real `gpupmd`:
//!
//! * an unmapped uid (65534, in a child that dropped root) scraping the
//!   default listener gets no series, label or family of any tenant, and
//!   from the authenticated listener without credentials gets 401, or no
//!   TLS session at all;
//! * scrapes through context churn, retention pruning and two daemon
//!   restarts (SIGKILL, SIGTERM) find no event counter that went back, and
//!   every VM's context series add up to its VM series at every scrape.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;

use gpupm_test_support::device::step;
use gpupm_test_support::scenario::{churn, STEP};
use gpupm_test_support::scrape::{authenticated_metrics_addr, http_get, metrics_addr, samples};
use gpupm_test_support::services::spawn_daemon;
use gpupm_test_support::users::{run_as, Cred};
use gpupm_test_support::web::{write_web_config, Client, ClientCerts, Pki};
use gpupm_test_support::{Driver, DriverOptions, Proc, Scratch};
use nix::sys::signal::Signal;
use serde_json::json;

use crate::harness::{PASSWORD, USER};
use crate::tenant_samples;

/// A uid no tenant map names.
const NOBODY: u32 = 65534;
/// The event families: the device's blocks, never reset by the daemon.
const EVENT_FAMILIES: [&str; 3] = [
    "gpupm_device_events_total",
    "gpupm_vm_events_total",
    "gpupm_context_events_total",
];

/// A daemon configuration: everything in `tmp`, `[metrics] extra` keys,
/// an authenticated tenant-series listener from `web` if given.
fn config(tmp: &Scratch, metrics: &str, retired: &str, web: Option<&Path>) -> String {
    let authenticated = web
        .map(|w| {
            format!(
                "[metrics.authenticated]\nlisten = \"127.0.0.1:0\"\nweb_config_file = {:?}\ntenant_series = true\n",
                w.display().to_string()
            )
        })
        .unwrap_or_default();
    format!(
        "node_dir = {:?}\ntenant_dir = {:?}\nstate_dir = {:?}\n[pages]\ndir = {:?}\n\
         [health]\njournal_socket = \"/nonexistent/journal\"\n[retired]\n{retired}\n\
         [metrics]\nlisten = \"127.0.0.1:0\"\n{metrics}\n{authenticated}",
        tmp.join("dev"),
        tmp.join("tenant"),
        tmp.join("state"),
        tmp.join("pages"),
    )
}

fn start(tmp: &Scratch, config: &str) -> Proc {
    let mut d = spawn_daemon(tmp, config, &[], &[]);
    d.wait_for("READY=1");
    d
}

/// `GET /metrics` from `addr` as the unmapped uid: (status line, body).
fn scrape_as_nobody(addr: SocketAddr) -> (String, String) {
    let got = run_as(&Cred::user(NOBODY), move || {
        let (status, _, body) = http_get(addr, "/metrics", None);
        json!({ "uid": nix::unistd::getuid().as_raw(), "status": status, "body": body })
    });
    assert_eq!(got["uid"], NOBODY);
    (
        got["status"].as_str().unwrap().to_owned(),
        got["body"].as_str().unwrap().to_owned(),
    )
}

#[test]
fn an_unmapped_uid_scraping_the_default_listener_learns_nothing_of_any_tenant() {
    let tmp = Scratch::new("metrics-nobody");
    let driver = Driver::start_in(&tmp, DriverOptions::system(churn()));
    let dev = driver.node();
    let mut daemon = start(&tmp, &config(&tmp, "", "", None));
    for _ in 0..12 {
        step(&dev, STEP, &mut daemon);
    }
    let (status, body) = scrape_as_nobody(metrics_addr(&daemon.notes));
    assert!(status.contains(" 200 "), "{status}");
    assert_eq!(
        tenant_samples(&body),
        Vec::<String>::new(),
        "an unmapped uid read tenants' series"
    );
    // What it does get is the device's health, and the device has counted.
    let device_total: f64 = samples(&body)
        .iter()
        .filter(|(n, _, _)| n == "gpupm_device_events_total")
        .map(|(_, _, v)| v.parse::<f64>().unwrap())
        .sum();
    assert!(device_total > 0.0, "{body}");
    assert!(daemon.signal_and_wait(Signal::SIGTERM).success());
}

#[test]
fn an_unmapped_uid_gets_401_or_no_tls_session_from_the_authenticated_listener() {
    let tmp = Scratch::new("metrics-nobody-auth");
    let pki = Pki::generate(&tmp.join("pki"));
    let web = write_web_config(
        &tmp.join("web.yml"),
        Some((&pki, ClientCerts::None)),
        &[(USER, PASSWORD)],
    );
    let driver = Driver::start_in(&tmp, DriverOptions::system(churn()));
    let dev = driver.node();
    let mut daemon = start(&tmp, &config(&tmp, "", "", Some(&web)));
    for _ in 0..6 {
        step(&dev, STEP, &mut daemon);
    }
    let addr = authenticated_metrics_addr(&daemon.notes);
    assert!(
        daemon
            .notes
            .iter()
            .any(|l| l.contains("authenticated metrics at https://")),
        "{:?}",
        daemon.notes
    );
    // Plain HTTP to the TLS listener: no HTTP answer at all.
    let plain = run_as(
        &Cred::user(NOBODY),
        move || json!({ "answer": format!("{:?}", Client::plain().get(addr, "/metrics")) }),
    );
    assert!(
        plain["answer"].as_str().unwrap().starts_with("Err("),
        "{plain}"
    );
    // TLS without credentials, or with wrong ones: 401 and nothing else.
    // (The clients are made here: the scratch directory is root's.)
    let attempts = [
        Client::tls(&pki, None),
        Client::tls(&pki, None).basic_auth(USER, "guess"),
        Client::tls(&pki, None).basic_auth("root", PASSWORD),
    ];
    let refused = run_as(&Cred::user(NOBODY), move || {
        let answers: Vec<_> = attempts
            .iter()
            .map(|c| {
                let (code, _, body) = c.get(addr, "/metrics").expect("a TLS answer");
                json!([code, body])
            })
            .collect();
        json!(answers)
    });
    for answer in refused.as_array().unwrap() {
        assert_eq!(answer, &json!([401, "Unauthorized\n"]));
    }
    let (code, _, body) = Client::tls(&pki, None)
        .basic_auth(USER, PASSWORD)
        .get(addr, "/metrics")
        .unwrap();
    assert_eq!(code, 200);
    assert!(body.contains("gpupm_context_events_total{"), "{body}");
    assert!(daemon.signal_and_wait(Signal::SIGTERM).success());
}

/// One scrape's counter samples: (name, labels) → value.
type Counters = BTreeMap<(String, BTreeMap<String, String>), f64>;

fn counters(body: &str) -> Counters {
    let families: BTreeSet<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    samples(body)
        .into_iter()
        .filter(|(n, _, _)| families.contains(n.as_str()))
        .map(|(n, l, v)| ((n, l), v.parse().unwrap()))
        .collect()
}

/// Every plain VM's context series add up to its VM series.
fn assert_contexts_add_up(c: &Counters, when: &str) {
    let mut sums: BTreeMap<(String, String), f64> = BTreeMap::new();
    for ((name, labels), v) in c {
        if name == "gpupm_context_events_total" {
            *sums
                .entry((labels["vm"].clone(), labels["event"].clone()))
                .or_default() += v;
        }
    }
    for ((name, labels), v) in c {
        if name == "gpupm_vm_events_total" {
            let key = (labels["vm"].clone(), labels["event"].clone());
            assert_eq!(sums.get(&key), Some(v), "{when}: VM {key:?}");
        }
    }
}

#[test]
fn no_counter_goes_back_through_context_churn_pruning_and_daemon_restarts() {
    let tmp = Scratch::new("metrics-monotone");
    let web = write_web_config(&tmp.join("web.yml"), None, &[(USER, PASSWORD)]);
    let driver = Driver::start_in(&tmp, DriverOptions::system(churn()));
    let dev = driver.node();
    let cfg = config(
        &tmp,
        "max_contexts_per_vm = 2",
        "max_contexts = 3",
        Some(&web),
    );
    let client = Client::plain().basic_auth(USER, PASSWORD);
    let scrape = |d: &Proc| {
        let (code, _, body) = client
            .get(authenticated_metrics_addr(&d.notes), "/metrics")
            .unwrap();
        assert_eq!(code, 200, "{body}");
        counters(&body)
    };

    let mut daemon = start(&tmp, &cfg);
    let mut previous = scrape(&daemon);
    let (mut compared, mut restarts) = (0usize, 0);
    let mut instances: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    let mut other_grew = false;
    for round in 0..9 {
        let restarted = match round {
            3 => Some(Signal::SIGKILL),
            6 => Some(Signal::SIGTERM),
            _ => None,
        };
        if let Some(sig) = restarted {
            daemon.signal_and_wait(sig);
            daemon = start(&tmp, &cfg);
            restarts += 1;
        }
        for _ in 0..8 {
            step(&dev, STEP, &mut daemon);
        }
        let now = scrape(&daemon);
        let when = format!("round {round} (restarts {restarts})");
        assert_contexts_add_up(&now, &when);
        for ((name, labels), v) in &now {
            if name == "gpupm_context_events_total" {
                instances
                    .entry((labels["vm"].clone(), labels["ctx"].clone()))
                    .or_default()
                    .insert(labels.get("created_cycle").cloned().unwrap_or_default());
            }
            let Some(before) = previous.get(&(name.clone(), labels.clone())) else {
                continue;
            };
            compared += 1;
            if labels.get("ctx").map(String::as_str) == Some("other") && v > before {
                other_grew = true;
            }
            // The daemon's own work counters start again with it.
            let process_counter = !EVENT_FAMILIES.contains(&name.as_str());
            if process_counter && restarted.is_some() {
                continue;
            }
            assert!(
                v >= before,
                "{when}: {name}{labels:?} went back from {before} to {v}"
            );
        }
        previous = now;
    }
    // The run did what it is about: ids recycled into new instances,
    // instances folded into a growing `other`, retired ones pruned.
    let recycled: Vec<_> = instances
        .iter()
        .filter(|((_, ctx), cycles)| ctx != "other" && cycles.len() > 1)
        .collect();
    assert!(
        !recycled.is_empty(),
        "no context id was reused: {instances:?}"
    );
    assert!(other_grew, "ctx=\"other\" never grew");
    let pruned = previous
        .iter()
        .find(|((n, _), _)| n == "gpupm_contexts_pruned_total")
        .map_or(0.0, |(_, v)| *v);
    assert!(
        pruned > 0.0,
        "retention pruned nothing after the last restart"
    );
    assert!(compared > 10_000, "only {compared} comparisons");
    assert!(daemon.signal_and_wait(Signal::SIGTERM).success());
    drop(driver);
}

/// gpupmd with `config` (no device behind `node_dir`): (exit code, stderr).
fn refused(tmp: &Scratch, config: &str) -> (i32, String) {
    let path = tmp.join("gpupmd.toml");
    std::fs::write(&path, config).unwrap();
    let out = std::process::Command::new(gpupm_test_support::bin!(Daemon))
        .arg("--config")
        .arg(&path)
        .output()
        .expect("run gpupmd");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_web_configuration_others_may_read_or_that_is_malformed_stops_gpupmd_before_the_device() {
    use std::os::unix::fs::PermissionsExt;

    let tmp = Scratch::new("metrics-refused");
    let web = write_web_config(&tmp.join("web.yml"), None, &[(USER, PASSWORD)]);
    // node_dir names no device: a refusal of the metrics settings must
    // come first.
    let cfg = config(&tmp, "", "", Some(&web));
    std::fs::set_permissions(&web, std::fs::Permissions::from_mode(0o640)).unwrap();
    let (code, stderr) = refused(&tmp, &cfg);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("chmod 0600"), "{stderr}");
    assert!(!stderr.contains("$2b$"), "a hash in the error: {stderr}");

    std::fs::write(&web, "basic_auth_users:\n  prometheus: [\n").unwrap();
    std::fs::set_permissions(&web, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (code, stderr) = refused(&tmp, &cfg);
    assert_eq!(code, 2, "{stderr}");
    let at = format!("{}:", web.display());
    assert!(stderr.contains(&at), "{stderr}");
    let position = stderr.split(&at).nth(1).unwrap_or_default();
    assert!(
        position
            .split(':')
            .take(2)
            .all(|n| n.trim().parse::<u32>().is_ok()),
        "no LINE:COL in {stderr}"
    );

    // Tenant series on a listener that authenticates nobody.
    write_web_config(&web, None, &[]);
    let (code, stderr) = refused(&tmp, &cfg);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("tenant_series"), "{stderr}");
}
