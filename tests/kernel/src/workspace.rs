//! The workspace's own binaries for the guest.
//!
//! `CARGO_BIN_EXE_*` exists only for this package's binaries, so the lane
//! runs `cargo build` once for the other packages' binaries, with the
//! profile this test was built with, and takes them from
//! `target/<profile>/` next to the test executable (the same way the
//! daemon's tests find `gpupm-driver`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// `target/<profile>` of the running test.
pub fn profile_dir() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .ok_or_else(|| format!("{} is not in target/<profile>/deps", exe.display()))
}

/// Builds `bins` (`(package, binary)`) once and returns their paths.
pub fn binaries(bins: &[(&str, &str)]) -> Result<Vec<PathBuf>, String> {
    let profile_dir = profile_dir()?;
    let target = profile_dir.parent().ok_or("target dir")?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--quiet", "--locked"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("CARGO_TARGET_DIR", target);
    for (package, bin) in bins {
        cmd.args(["-p", package, "--bin", bin]);
    }
    match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("release") => cmd.arg("--release"),
        _ => cmd.args(["--profile", "test"]),
    };
    let st = cmd.status().map_err(|e| format!("cargo: {e}"))?;
    if !st.success() {
        return Err(format!("building {bins:?} failed ({st})"));
    }
    bins.iter()
        .map(|(_, bin)| {
            let p = profile_dir.join(bin);
            if p.exists() {
                Ok(p)
            } else {
                Err(format!("{} is missing after the build", p.display()))
            }
        })
        .collect()
}
