//! End to end: `gpupm-driver` (step clock) and `gpupmd` as processes, a
//! scenario with context churn and time-sliced VMs, ≥ 10,000 switches, all
//! handshakes done by the daemon (no fallback), then every total exact.

use std::time::Instant;

use gpupm_system_tests::check_exact;
use gpupm_test_support::device::{self, flush, step, wait_none_destroyed, Instances};
use gpupm_test_support::scenario::{churn, STEP};
use gpupm_test_support::services::{daemon_config, start_daemon};
use gpupm_test_support::web::write_web_config;
use gpupm_test_support::{Driver, DriverOptions, Scratch};
use gpupm_uapi::regs as r;
use nix::sys::signal::Signal;

/// The metrics endpoint's basic-auth user and password.
const METRICS_USER: (&str, &str) = ("prometheus", "e2e-not-a-secret");

/// Host-driven switches the test runs at least.
const SWITCHES: u64 = 10_000;

/// Daemon settings the tests program: a trigger period, dithering, a
/// threshold and a ring watermark different from the scenario's.
const PROGRAM: &str =
    "[trigger]\nperiod_us = 25\ndither = true\nthreshold = 1000000\n[stream]\nwatermark = 16\n";

#[test]
fn every_vm_context_and_retired_context_equals_the_ledger_after_10000_host_driven_switches() {
    let t0 = Instant::now();
    let tmp = Scratch::new("e2e");
    let driver = Driver::start_in(&tmp, DriverOptions::system(churn()));
    let dev = driver.node();
    let mut seen = Instances::new(&dev);
    // Tenant series come from an authenticated listener only (basic auth;
    // plain HTTP is allowed on loopback).
    let web = write_web_config(&tmp.join("metrics-web.yml"), None, &[METRICS_USER]);
    let extra = format!(
        "{PROGRAM}[metrics.authenticated]\nlisten = \"127.0.0.1:0\"\nweb_config_file = {:?}\ntenant_series = true\n",
        web.display().to_string()
    );
    let mut daemon = start_daemon(&tmp, &daemon_config(&tmp, &extra));
    assert!(
        daemon.notes.iter().any(|l| l.starts_with("STATUS=serving")),
        "{:?}",
        daemon.notes
    );

    // The configuration reached the device.
    assert_eq!(dev.read32(r::TRIG_PERIOD).unwrap(), 25_000);
    assert_eq!(dev.read32(r::TRIG_THRESHOLD).unwrap(), 1_000_000);
    assert_ne!(dev.read32(r::TRIG_CTRL).unwrap() & r::trig_ctrl::DITHER, 0);
    assert_eq!(
        dev.read32(r::part(1, r::PART_STREAM_WATERMARK)).unwrap(),
        16
    );

    let mut steps = 0u64;
    let switches = loop {
        step(&dev, STEP, &mut daemon);
        seen.update();
        steps += 1;
        if steps.is_multiple_of(64) {
            let s = device::part_sum(&dev, r::PART_SWITCHES);
            if s >= SWITCHES {
                break s;
            }
        }
    };
    assert_eq!(
        device::part_sum(&dev, r::PART_FALLBACKS),
        0,
        "a handshake fell back:\n{}",
        daemon.log()
    );
    flush(&dev);
    wait_none_destroyed(&dev);
    seen.update();
    let checked = check_exact(&dev, &tmp.join("state"), &seen.destroyed);
    assert!(checked.retired >= 100, "too little churn: {checked:?}");
    metrics_agree_with_the_ledger(&daemon, &dev);
    eprintln!(
        "{switches} switches in {steps} steps, {checked:?}, no fallback, {:.1} s",
        t0.elapsed().as_secs_f64()
    );

    let status = daemon.signal_and_wait(Signal::SIGTERM);
    assert!(status.success(), "gpupmd exit {status}:\n{}", daemon.log());
    daemon.wait_for("STOPPING=1");
    driver.stop();
}

/// The same run, read through the tenant node ABI as the admin: every VM
/// and context total (including retired ones) equals the ledger.
#[test]
fn tenant_node_totals_equal_the_ledger_after_10000_host_driven_switches() {
    use std::fs::OpenOptions;
    use std::os::fd::AsFd;

    use gpupm_client::sys;
    use gpupm_uapi::ioctl::ledger_scope;
    use gpupm_uapi::tenant::TENANT_IOC_READ_COUNTERS;
    use gpupm_uapi::tenant::{scope, ReadCounters, TENANT_STRUCT_VERSION};
    use zerocopy::FromZeros;

    let tmp = Scratch::new("e2e-tenant");
    let driver = Driver::start_in(&tmp, DriverOptions::system(churn()));
    let dev = driver.node();
    let mut seen = Instances::new(&dev);
    let mut daemon =
        gpupm_test_support::services::spawn_daemon(&tmp, &daemon_config(&tmp, PROGRAM), &[], &[]);
    daemon.wait_for("READY=1");
    let node = OpenOptions::new()
        .read(true)
        .open(tmp.join("tenant").join("node"))
        .expect("open tenant node");
    let read = |sc: u32, id: u32| {
        let mut rc = ReadCounters::new_zeroed();
        rc.version = TENANT_STRUCT_VERSION;
        rc.scope = sc;
        rc.id = id;
        sys::call(node.as_fd(), TENANT_IOC_READ_COUNTERS, &mut rc)
            .expect("TENANT_IOC_READ_COUNTERS");
        rc.values
    };
    while device::part_sum(&dev, r::PART_SWITCHES) < SWITCHES {
        for _ in 0..64 {
            step(&dev, STEP, &mut daemon);
            seen.update();
        }
    }
    assert_eq!(device::part_sum(&dev, r::PART_FALLBACKS), 0);
    flush(&dev);
    wait_none_destroyed(&dev);
    seen.update();
    check_exact(&dev, &tmp.join("state"), &seen.destroyed);
    assert_eq!(
        read(scope::SYSTEM, 0),
        device::expected(&dev.ledger(ledger_scope::SYSTEM, 0).unwrap())
    );
    for (ctx, _, _, _) in device::contexts(&dev) {
        assert_eq!(
            read(scope::CONTEXT, ctx),
            device::expected(&dev.ledger(ledger_scope::CONTEXT, ctx).unwrap())
        );
    }
    let (retired, _) = gpupmd::store::retired::RetiredStore::open(&tmp.join("state"))
        .unwrap()
        .load_all()
        .unwrap();
    let live: Vec<u32> = device::contexts(&dev).iter().map(|c| c.0).collect();
    for rec in retired.iter().filter(|r| !live.contains(&r.ctx)) {
        // The latest instance of a free id is the one the node reports.
        let latest = retired
            .iter()
            .filter(|o| o.ctx == rec.ctx)
            .map(|o| o.created_cycle)
            .max();
        if latest == Some(rec.created_cycle) {
            assert_eq!(
                read(scope::CONTEXT, rec.ctx),
                rec.block().unwrap().counters,
                "retired context {}",
                rec.ctx
            );
        }
    }
    for vm in 1..=10 {
        assert_eq!(
            read(scope::VM, vm),
            device::expected(&dev.ledger(ledger_scope::VM, vm).unwrap()),
            "VM {vm}"
        );
    }
    let status = daemon.signal_and_wait(Signal::SIGTERM);
    assert!(status.success());
    driver.stop();
}

/// The daemon's authenticated metrics listener (address from its READY
/// status): the scrape passes `promtool check metrics`, and every VM's
/// per-event totals equal the ledger.
// Exposition values are floats; these counts are exact below 2^53.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn metrics_agree_with_the_ledger(daemon: &gpupm_test_support::Proc, dev: &gpupm_client::DevNode) {
    use gpupm_test_support::scrape::authenticated_metrics_addr;
    use gpupm_test_support::web::Client;

    use gpupm_uapi::events::{Scope, CATALOGUE};
    use gpupm_uapi::ioctl::ledger_scope;

    let (code, _, body) = Client::plain()
        .basic_auth(METRICS_USER.0, METRICS_USER.1)
        .get(authenticated_metrics_addr(&daemon.notes), "/metrics")
        .expect("scrape the authenticated listener");
    assert_eq!(code, 200, "{body}");
    let body = body.as_str();
    let (clean, problems) = promtool_check(body);
    assert!(clean, "promtool check metrics: {problems}");
    for vm in 1..=10u32 {
        let expected = device::expected(&dev.ledger(ledger_scope::VM, vm).expect("ledger"));
        for e in CATALOGUE.iter().filter(|e| e.unit.scope() != Scope::Device) {
            let series = format!("gpupm_vm_events_total{{vm=\"{vm}\",event=\"{}\"}} ", e.name);
            let value = body
                .lines()
                .find_map(|l| l.strip_prefix(series.as_str()))
                .map(|v| v.trim().parse::<f64>().expect("a number") as u64);
            assert_eq!(value, Some(expected[usize::from(e.id)]), "metric {series}");
        }
    }
}

/// Runs `promtool check metrics` on `body`: (no problems, what it said).
fn promtool_check(body: &str) -> (bool, String) {
    use std::io::Write;
    use std::process::{Command, Stdio};

    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs (Debian package prometheus)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success() && text.trim().is_empty(), text)
}
