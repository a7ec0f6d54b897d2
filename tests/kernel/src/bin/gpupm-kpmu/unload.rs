//! Unloading with open events: refused (EAGAIN, "in use") while a perf
//! event or the daemon's publication file holds the module, the event
//! still reads afterwards; once both are closed the module unloads, its
//! PMU and device disappear, and it loads again.

use std::path::Path;
use std::process::Command;

use nix::errno::Errno;

use crate::pmu::{count, Pmu, SYSFS};
use crate::sys;

const MODULE: &str = "gpupm_pmu";

fn refcnt() -> Result<String, String> {
    std::fs::read_to_string(format!("/sys/module/{MODULE}/refcnt"))
        .map(|s| s.trim().to_string())
        .map_err(|e| format!("refcnt: {e}"))
}

fn expect_busy(what: &str) -> Result<(), String> {
    match sys::delete_module(MODULE) {
        Err(Errno::EAGAIN) => Ok(()),
        other => Err(format!(
            "{what}: delete_module got {other:?}, expected EAGAIN (in use)"
        )),
    }
}

/// `ko` is the module file to load again at the end.
pub fn run(ko: &Path) -> Result<(), String> {
    let pmu = Pmu::find()?;
    let fd = pmu.open(&pmu.attr("sm_inst_executed", 0, 0)?)?;
    let before = count(&fd)?;
    println!("@@gpupm metric unload_refcnt_with_event={}", refcnt()?);
    expect_busy("with an open event")?;
    if !Path::new(SYSFS).exists() {
        return Err("the PMU vanished after a refused unload".into());
    }
    let after = count(&fd)?;
    if after < before {
        return Err(format!("the event went back from {before} to {after}"));
    }
    drop(fd);
    if !Path::new("/dev/gpupm_pmu").exists() {
        return Err("/dev/gpupm_pmu is missing".into());
    }
    sys::delete_module(MODULE).map_err(|e| format!("unload with nothing open: {e}"))?;
    for gone in [SYSFS, "/dev/gpupm_pmu", "/sys/module/gpupm_pmu"] {
        if Path::new(gone).exists() {
            return Err(format!("{gone} is still there after the unload"));
        }
    }
    let st = Command::new("insmod")
        .arg(ko)
        .status()
        .map_err(|e| format!("insmod: {e}"))?;
    if !st.success() {
        return Err(format!("insmod {} failed: {st}", ko.display()));
    }
    let pmu = Pmu::find()?;
    let fd = pmu.open(&pmu.attr("sm_inst_executed", 1, 0)?)?;
    let v = count(&fd)?;
    if v != 0 {
        return Err(format!("a fresh module's unpublished counter reads {v}"));
    }
    println!("@@gpupm metric unload_reload=ok");
    Ok(())
}
