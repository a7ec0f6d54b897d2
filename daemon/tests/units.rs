//! The systemd units: `systemd-analyze verify` is clean and
//! `systemd-analyze security --offline=yes` rates each unit's exposure at
//! most 2.0. Needs `systemd-analyze` (Debian package `systemd`), no running
//! systemd.

use std::path::{Path, PathBuf};
use std::process::Command;

use gpupm_test_support::require_tool;

const UNITS: [&str; 2] = ["gpupm-driver.service", "gpupmd.service"];
const MAX_EXPOSURE: f64 = 2.0;

fn unit_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../systemd")
}

fn analyze(args: &[&str]) -> (bool, String) {
    let tool = require_tool("systemd-analyze", "systemd");
    let out = Command::new(tool)
        .args(args)
        .current_dir(unit_dir())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The one diagnostic a verify run may print on a build machine: a unit's
/// binary that is not installed there (`/usr/bin/...` missing).
fn is_missing_installed_binary(line: &str) -> bool {
    line.split_once(": Command ")
        .and_then(|(_, rest)| rest.strip_suffix(" is not executable: No such file or directory"))
        .is_some_and(|path| path.starts_with("/usr/bin/") && !Path::new(path).exists())
}

#[test]
fn units_verify_clean_apart_from_binaries_not_installed_here() {
    let files: Vec<String> = UNITS.iter().map(|u| format!("./{u}")).collect();
    let mut args = vec!["verify", "--man=no"];
    args.extend(files.iter().map(String::as_str));
    let (ok, text) = analyze(&args);
    let problems: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !is_missing_installed_binary(l))
        .collect();
    assert!(problems.is_empty(), "systemd-analyze verify:\n{text}");
    assert!(
        ok || text.lines().any(is_missing_installed_binary),
        "verify failed without a reason:\n{text}"
    );
}

#[test]
fn units_expose_at_most_two_points() {
    for unit in UNITS {
        let (ok, text) = analyze(&["security", "--offline=yes", &format!("./{unit}")]);
        assert!(ok, "systemd-analyze security {unit}:\n{text}");
        let exposure: f64 = text
            .lines()
            .find_map(|l| {
                l.split_once("Overall exposure level for ")?
                    .1
                    .split_once(": ")?
                    .1
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            })
            .unwrap_or_else(|| panic!("no exposure level for {unit}:\n{text}"));
        assert!(
            exposure <= MAX_EXPOSURE,
            "{unit}: exposure {exposure} > {MAX_EXPOSURE}:\n{text}"
        );
    }
}
