//! One instance at a time: a second `gpupmd` with the live one's
//! configuration, and a second `gpupm-driver` on the live one's node, exit
//! with `already running as pid N for NODE` before they touch anything —
//! the live driver's commit mirror file, the live daemon's pages and state
//! stay as they were and both keep serving. `--check-config` checks a
//! configuration without touching anything, and refuses what a start
//! refuses (a configuration others may change, a scenario that keys a
//! confidential VM); it reports the device identity.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

use gpupm_test_support::bin;
use gpupm_test_support::scratch::Scratch;
use gpupm_test_support::services::{daemon_config, start_daemon, Driver, DriverOptions};

/// Every file under `dir` with its inode and modification time.
fn files(dir: &Path) -> BTreeMap<String, (u64, i64, i64)> {
    let mut out = BTreeMap::new();
    for e in fs::read_dir(dir).expect("read_dir").flatten() {
        let m = e.metadata().expect("metadata");
        if m.is_file() {
            out.insert(
                e.file_name().to_string_lossy().into_owned(),
                (m.ino(), m.mtime(), m.mtime_nsec()),
            );
        }
    }
    out
}

#[test]
fn a_second_daemon_or_driver_leaves_the_live_ones_alone() {
    let scratch = Scratch::new("one-instance");
    let driver = Driver::start_in(&scratch, DriverOptions::default());
    let config = daemon_config(
        &scratch,
        &format!(
            "[health]\njournal_socket = {:?}\n",
            scratch.join("no-journal")
        ),
    );
    let mut daemon = start_daemon(&scratch, &config);
    let mirror_dir = scratch.join("dev.mirror");
    let mirror_before = files(&mirror_dir);
    assert!(mirror_before.contains_key("commits"), "{mirror_before:?}");
    let state_before = files(&scratch.join("state"));
    let pages_before = files(&scratch.join("pages"));

    // A second daemon, the same configuration.
    let second = Command::new(bin!(Daemon))
        .arg("--config")
        .arg(scratch.join("gpupmd.toml"))
        .output()
        .expect("gpupmd");
    let err = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "{err}");
    assert!(
        err.ends_with(&format!(
            "gpupmd: already running as pid {} for {} (lock {})\n",
            daemon.pid(),
            scratch.join("dev").display(),
            scratch.join("state/gpupmd.lock").display()
        )),
        "{err}"
    );
    for touched in ["device identified", "programm", "tenant node", "pages"] {
        assert!(
            !err.contains(touched),
            "the second daemon got as far as {touched:?}: {err}"
        );
    }

    // A second driver, the same node.
    let second = Command::new(bin!(Driver))
        .args(["--clock", "step", "--node-dir"])
        .arg(scratch.join("dev"))
        .env("RUST_LOG", "info")
        .output()
        .expect("gpupm-driver");
    let err = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "already running as pid {} for {} (lock {})",
            driver.pid(),
            scratch.join("dev").display(),
            mirror_dir.join("gpupm-driver.lock").display()
        )),
        "{err}"
    );
    assert!(!err.contains("device model built"), "{err}");

    // Nothing of the live ones was touched, and both still serve.
    let mut mirror_after = files(&mirror_dir);
    mirror_after.remove("gpupm-driver.lock");
    let mut mirror_before = mirror_before;
    mirror_before.remove("gpupm-driver.lock");
    let inodes = |m: &BTreeMap<String, (u64, i64, i64)>| -> Vec<(String, u64)> {
        m.iter().map(|(k, v)| (k.clone(), v.0)).collect()
    };
    assert_eq!(
        inodes(&mirror_after),
        inodes(&mirror_before),
        "the commit mirror was replaced"
    );
    assert_eq!(
        files(&scratch.join("pages")).keys().collect::<Vec<_>>(),
        pages_before.keys().collect::<Vec<_>>()
    );
    let mut state_after = files(&scratch.join("state"));
    state_after.remove("gpupmd.lock");
    let mut state_before = state_before;
    state_before.remove("gpupmd.lock");
    assert_eq!(state_after, state_before, "the state directory was touched");
    assert!(daemon.alive(), "the live daemon died:\n{}", daemon.log());
    driver
        .node()
        .read64(gpupm_uapi::regs::CYCLE)
        .expect("the live driver serves");
    daemon.stop();
    driver.stop();
}

#[test]
fn check_config_checks_and_touches_nothing() {
    let scratch = Scratch::new("check-config");
    let good = scratch.join("good.toml");
    fs::write(&good, daemon_config(&scratch, "")).expect("config");
    let out = Command::new(bin!(Daemon))
        .arg("--config")
        .arg(&good)
        .arg("--check-config")
        .output()
        .expect("gpupmd");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.starts_with(&format!("configuration {} is valid:", good.display())),
        "{text}"
    );
    assert!(
        text.contains("metrics                http://127.0.0.1:0/metrics"),
        "{text}"
    );
    let bad = scratch.join("bad.toml");
    fs::write(&bad, "[stream]\nwatermark = \"many\"\n").expect("config");
    let out = Command::new(bin!(Daemon))
        .arg("--config")
        .arg(&bad)
        .arg("--check-config")
        .output()
        .expect("gpupmd");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.toml"));

    let out = Command::new(bin!(Driver))
        .args(["--check-config", "--clock", "step", "--node-dir"])
        .arg(scratch.join("dev"))
        .output()
        .expect("gpupm-driver");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("the configuration is valid"), "{text}");
    let scenario = scratch.join("bad-scenario.toml");
    fs::write(&scenario, "name = 3\n").expect("scenario");
    let out = Command::new(bin!(Driver))
        .args(["--check-config", "--scenario"])
        .arg(&scenario)
        .output()
        .expect("gpupm-driver");
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Nothing was created: no state, no mirror, no mount point.
    for made in ["state", "dev.mirror", "dev", "tenant", "pages"] {
        assert!(!scratch.join(made).exists(), "--check-config made {made}");
    }
}

/// Runs `cmd` and answers its exit status, stdout and stderr.
fn output(cmd: &mut Command) -> (Option<i32>, String, String) {
    let out = cmd.output().expect("run");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_config_refuses_what_a_start_refuses_and_reports_the_identity() {
    use std::os::unix::fs::PermissionsExt;
    let scratch = Scratch::new("check-config-refusals");

    // A configuration every local user may change: refused (it holds the
    // tenant map), as a start refuses it.
    let open = scratch.join("open.toml");
    fs::write(&open, daemon_config(&scratch, "")).expect("config");
    fs::set_permissions(&open, fs::Permissions::from_mode(0o666)).expect("chmod");
    let (code, _, err) = output(
        Command::new(bin!(Daemon))
            .arg("--config")
            .arg(&open)
            .arg("--check-config"),
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("may be changed by"), "{err}");
    // Every local user may read it: accepted, with a warning.
    fs::set_permissions(&open, fs::Permissions::from_mode(0o644)).expect("chmod");
    let (code, out, err) = output(
        Command::new(bin!(Daemon))
            .arg("--config")
            .arg(&open)
            .arg("--check-config"),
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("every local user may read"), "{out}");

    // A scenario that keys a confidential VM: refused without
    // --insecure-scenario-keys, as a start refuses it.
    let keyed = scratch.join("keyed.toml");
    fs::write(&keyed, gpupm_test_support::cc::scenario(1.0)).expect("scenario");
    let driver = |extra: &[&str]| {
        let mut cmd = Command::new(bin!(Driver));
        cmd.args(["--check-config", "--clock", "step", "--node-dir"])
            .arg(scratch.join("dev"))
            .args(extra);
        output(&mut cmd)
    };
    let keyed_arg = keyed.display().to_string();
    let (code, _, err) = driver(&["--scenario", &keyed_arg]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("confidential_key"), "{err}");
    let (code, out, err) = driver(&["--scenario", &keyed_arg, "--insecure-scenario-keys"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("INSECURE"), "{out}");

    // The identity: none, missing, unusable, loaded.
    let (_, out, _) = driver(&[]);
    assert!(out.contains("identity        none"), "{out}");
    let identity = scratch.join("identity");
    let identity_arg = identity.display().to_string();
    let (code, out, err) = driver(&["--identity", &identity_arg]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("does not exist"), "{out}");
    fs::write(&identity, b"not an identity").expect("identity");
    fs::set_permissions(&identity, fs::Permissions::from_mode(0o600)).expect("chmod");
    let (code, out, err) = driver(&["--identity", &identity_arg]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("is unusable"), "{out}");
    fs::remove_file(&identity).expect("remove");
    gpupm_test_support::cc::provision_identity(&identity);
    let (code, out, err) = driver(&["--identity", &identity_arg]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("(serial "), "{out}");

    for made in ["state", "dev.mirror", "dev", "tenant", "pages"] {
        assert!(!scratch.join(made).exists(), "--check-config made {made}");
    }
}
