//! Who may change and read `gpupmd.toml` (docs/operations.md, "The
//! configuration file"), against the real binary and a real journald: a
//! file every local user may write is refused (exit 2, before anything
//! starts: no startup event), one every local user may read starts with a
//! warning in the journal (`CONFIG_READABLE_ID`, `CONFIG`, `MODE`), and the
//! package's 0640 starts without one. The device node does not exist, so
//! each accepted start ends right after its startup event (exit 1).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use gpupm_test_support::{require_tool, Scratch};
use gpupmd::health::{CONFIG_READABLE_ID, STARTUP_ID};
use serde_json::Value;

/// A configuration naming a device node that does not exist.
fn config(dir: &Scratch, mode: u32) -> std::path::PathBuf {
    let path = dir.join(format!("gpupmd-{mode:o}.toml"));
    fs::write(
        &path,
        format!(
            "node_dir = \"{}\"\ntenant_dir = \"{}\"\nstate_dir = \"{}\"\n",
            dir.join("no-node").display(),
            dir.join("tenant").display(),
            dir.join("state").display()
        ),
    )
    .unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
    path
}

fn gpupmd(config: &Path) -> (u32, Output) {
    let child = Command::new(env!("CARGO_BIN_EXE_gpupmd"))
        .arg("--config")
        .arg(config)
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    (pid, child.wait_with_output().unwrap())
}

fn journal(pid: u32) -> Vec<Value> {
    let out = Command::new(require_tool("journalctl", "systemd"))
        .args(["-o", "json", "--no-pager"])
        .arg(format!("_PID={pid}"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn with_id<'a>(entries: &'a [Value], id: &str) -> Vec<&'a Value> {
    entries
        .iter()
        .filter(|e| e["MESSAGE_ID"].as_str() == Some(id))
        .collect()
}

/// The journal of `pid` once its startup event is in (journald stores a
/// process's datagrams in order, so everything logged before it is too).
fn journal_after_startup(pid: u32) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let entries = journal(pid);
        if !with_id(&entries, STARTUP_ID).is_empty() {
            return entries;
        }
        assert!(
            Instant::now() < deadline,
            "no startup event of gpupmd[{pid}] in the journal: {entries:#?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_world_writable_configuration_is_refused_and_a_world_readable_one_reported() {
    let _journald = gpupm_test_support::journald::ensure();
    let dir = Scratch::new("config-access");

    let (pid, out) = gpupmd(&config(&dir, 0o666));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("may be changed by every local user") && stderr.contains("0666"),
        "{stderr}"
    );
    // Refused before the startup event (and before the device or the
    // tenant node were touched).
    assert!(with_id(&journal(pid), STARTUP_ID).is_empty());
    assert!(!dir.join("tenant").exists() && !dir.join("state").exists());

    let readable = config(&dir, 0o644);
    let (pid, out) = gpupmd(&readable);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let entries = journal_after_startup(pid);
    let warnings = with_id(&entries, CONFIG_READABLE_ID);
    assert_eq!(warnings.len(), 1, "{entries:#?}");
    let w = warnings[0];
    assert_eq!(w["PRIORITY"].as_str(), Some("4"), "{w}");
    assert_eq!(w["MODE"].as_str(), Some("0644"), "{w}");
    assert_eq!(w["CONFIG"].as_str(), readable.to_str(), "{w}");
    assert!(
        w["MESSAGE"]
            .as_str()
            .is_some_and(|m| m.contains("may be read by every local user")),
        "{w}"
    );

    let (pid, out) = gpupmd(&config(&dir, 0o640));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let entries = journal_after_startup(pid);
    assert!(
        with_id(&entries, CONFIG_READABLE_ID).is_empty(),
        "{entries:#?}"
    );
}
