//! The service shape: sd_notify (READY, STATUS, WATCHDOG, STOPPING), clean
//! SIGTERM shutdown, configuration errors (exit 2 with FILE:LINE:COL), a
//! missing device node, and the ABI check.

use std::process::Command;

use gpupm_test_support::scenario::churn;
use gpupm_test_support::services::{daemon_config, spawn_daemon};
use gpupm_test_support::{bin, Driver, DriverOptions, Scratch};
use nix::sys::signal::Signal;

#[test]
fn notifies_ready_status_and_watchdog_and_stops_cleanly_on_sigterm() {
    let tmp = Scratch::new("notify");
    let driver = Driver::start_in(&tmp, DriverOptions::system(churn()));
    let mut d = spawn_daemon(
        &tmp,
        &daemon_config(&tmp, ""),
        &[],
        &[("WATCHDOG_USEC", "200000")],
    );
    d.wait_for("READY=1");
    let status = d.wait_for("STATUS=serving");
    assert!(status.contains("card0"), "{status}");
    assert!(
        status.contains("8 partitions") && status.contains("10 VMs"),
        "{status}"
    );
    // Pings at half the watchdog timeout: several arrive.
    d.notes.retain(|l| l != "WATCHDOG=1");
    d.wait_for("WATCHDOG=1");
    d.notes.retain(|l| l != "WATCHDOG=1");
    d.wait_for("WATCHDOG=1");
    let exit = d.signal_and_wait(Signal::SIGTERM);
    assert!(exit.success(), "exit {exit}:\n{}", d.log());
    d.wait_for("STOPPING=1");
    let log = d.log();
    assert!(
        log.contains("gpupmd ready") && log.contains("gpupmd stopped"),
        "{log}"
    );
    driver.stop();
}

#[test]
fn sigint_also_stops_cleanly_and_no_watchdog_without_watchdog_usec() {
    let tmp = Scratch::new("sigint");
    let driver = Driver::start_in(&tmp, DriverOptions::system(churn()));
    let mut d = spawn_daemon(&tmp, &daemon_config(&tmp, ""), &[], &[]);
    d.wait_for("READY=1");
    let exit = d.signal_and_wait(Signal::SIGINT);
    assert!(exit.success(), "exit {exit}:\n{}", d.log());
    assert!(!d.notes.iter().any(|l| l == "WATCHDOG=1"));
    driver.stop();
}

fn run_with_config(tmp: &Scratch, text: &str) -> (i32, String) {
    let path = tmp.join("bad.toml");
    std::fs::write(&path, text).unwrap();
    let out = Command::new(bin!(Daemon))
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
fn malformed_config_exits_2_with_file_line_and_column() {
    let tmp = Scratch::new("config");
    let file = tmp.join("bad.toml").display().to_string();
    let cases = [
        (
            "node_dir = \"/x\"\n[trigger]\nperiod_us = \"fast\"\n",
            3,
            "invalid type",
        ),
        ("history_samples = 4\nbogus = 1\n", 2, "unknown field"),
        ("[stream]\nwatermark = 0\n", 2, "watermark"),
        (
            "[[tenant]]\nvm = 3\nuser = \"no-such-user-gpupm\"\n",
            3,
            "no user named",
        ),
        (
            "[metrics]\nlisten = \"not an address\"\n",
            2,
            "invalid socket address",
        ),
        ("[trigger\n", 1, ""),
    ];
    for (text, line, reason) in cases {
        let (code, stderr) = run_with_config(&tmp, text);
        assert_eq!(code, 2, "{text:?}: {stderr}");
        let prefix = format!("gpupmd: {file}:{line}:");
        assert!(
            stderr.starts_with(&prefix),
            "{text:?}: expected {prefix}…, got {stderr}"
        );
        assert!(stderr.contains(reason), "{text:?}: {stderr}");
    }
    let missing = tmp.join("missing.toml");
    let out = Command::new(bin!(Daemon))
        .arg("--config")
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.toml"));
}

#[test]
fn missing_device_node_fails_with_the_path() {
    let tmp = Scratch::new("nonode");
    let mut d = spawn_daemon(&tmp, &daemon_config(&tmp, ""), &[], &[]);
    let exit = d.wait_exit();
    assert_eq!(exit.code(), Some(1), "{}", d.log());
    assert!(d.log().contains("dev/card0"), "{}", d.log());
}

#[test]
fn a_refused_value_exits_2_naming_it() {
    let tmp = Scratch::new("refused");
    let driver = Driver::start_in(&tmp, DriverOptions::system(churn()));
    // The scenario's rings hold 64 records: a watermark of 100 is refused.
    let mut d = spawn_daemon(
        &tmp,
        &daemon_config(&tmp, "[stream]\nwatermark = 100\n"),
        &[],
        &[],
    );
    let exit = d.wait_exit();
    assert_eq!(exit.code(), Some(2), "{}", d.log());
    assert!(d.log().contains("stream watermark 100"), "{}", d.log());
    driver.stop();
}
