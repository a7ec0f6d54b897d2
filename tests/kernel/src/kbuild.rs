//! Builds `gpupm_pmu.ko` with the kernel's own build system:
//! `make -C BUILD M=DIR W=1 modules` on a copy of the repository's `Kbuild`
//! and `kmod/` (the source tree stays free of build output, and two runs
//! never share objects). Any compiler warning fails the build.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{repo_root, GuestKernel};

/// The module file and the build's output.
#[derive(Debug)]
pub struct Built {
    /// `DIR/kmod/gpupm_pmu.ko`.
    pub ko: PathBuf,
    /// What make printed.
    pub log: String,
}

/// Builds the module in `dir` (emptied first).
pub fn build(kernel: &GuestKernel, dir: &Path) -> Result<Built, String> {
    if dir.exists() {
        fs::remove_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    fs::create_dir_all(dir.join("kmod")).map_err(|e| format!("{}: {e}", dir.display()))?;
    let root = repo_root();
    fs::copy(root.join("Kbuild"), dir.join("Kbuild")).map_err(|e| format!("Kbuild: {e}"))?;
    for entry in fs::read_dir(root.join("kmod")).map_err(|e| format!("kmod: {e}"))? {
        let path = entry.map_err(|e| e.to_string())?.path();
        let name = path.file_name().ok_or("kmod entry")?;
        if path.extension().is_some_and(|x| x == "c" || x == "h") {
            fs::copy(&path, dir.join("kmod").join(name))
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    let out = Command::new("make")
        .arg("-C")
        .arg(&kernel.build)
        .arg(format!("M={}", dir.display()))
        .args(["W=1", "modules"])
        .output()
        .map_err(|e| format!("make: {e}"))?;
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        return Err(format!("the module build failed ({}):\n{log}", out.status));
    }
    if log.contains("warning:") {
        return Err(format!("the module build printed warnings (W=1):\n{log}"));
    }
    let ko = dir.join("kmod/gpupm_pmu.ko");
    if !ko.exists() {
        return Err(format!("{} was not built:\n{log}", ko.display()));
    }
    Ok(Built { ko, log })
}
