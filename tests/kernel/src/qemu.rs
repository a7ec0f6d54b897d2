//! Boots the guest under `qemu-system-x86_64`: console on the first serial
//! port (qemu's stdout), no disk, no network, `-no-reboot` so a panic or
//! `poweroff -f` ends qemu. A guest that reaches neither is killed (by the
//! child's pid) at its deadline.
//!
//! KVM is used only when it really runs this kernel: `/dev/kvm` opening is
//! not enough (nested virtualisation can accept the VM and then hang the
//! guest, as on the CI machines), so [`kvm_boots`] boots a tiny image with
//! KVM and waits for its init to speak; otherwise TCG.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use crate::GuestKernel;

/// How the guest's CPUs run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accel {
    /// Hardware virtualisation.
    Kvm,
    /// qemu's software emulation.
    Tcg,
}

/// Limits of one boot.
#[derive(Clone, Copy, Debug)]
pub struct Deadlines {
    /// The whole run.
    pub total: Duration,
    /// Longest time without a `@@gpupm` line.
    pub quiet: Duration,
}

/// One boot's outcome.
#[derive(Debug)]
pub struct Run {
    /// Everything the console printed.
    pub log: String,
    /// Host time from starting qemu to the guest's `@@gpupm boot` line.
    pub to_init: Option<Duration>,
    /// Host time of the whole boot.
    pub wall: Duration,
    /// Killed at a deadline (and which).
    pub killed: Option<&'static str>,
}

fn spawn(kernel: &GuestKernel, image: &Path, accel: Accel, mem_mib: u32) -> Result<Child, String> {
    let (accel_arg, cpu) = match accel {
        Accel::Kvm => ("kvm", "host"),
        Accel::Tcg => ("tcg", "max"),
    };
    Command::new("qemu-system-x86_64")
        .args([
            "-accel",
            accel_arg,
            "-cpu",
            cpu,
            "-smp",
            "2",
            "-m",
            &mem_mib.to_string(),
        ])
        .args([
            "-nodefaults",
            "-display",
            "none",
            "-no-reboot",
            "-serial",
            "stdio",
        ])
        .arg("-kernel")
        .arg(&kernel.vmlinuz)
        .arg("-initrd")
        .arg(image)
        .args(["-append", "console=ttyS0 panic=-1 loglevel=4 rdinit=/init cryptomgr.notests"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("qemu-system-x86_64 (install qemu-system-x86): {e}"))
}

/// Boots `image` and collects the console until qemu exits or a deadline.
pub fn boot(
    kernel: &GuestKernel,
    image: &Path,
    accel: Accel,
    limits: Deadlines,
) -> Result<Run, String> {
    let start = Instant::now();
    let mut child = spawn(kernel, image, accel, 2048)?;
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().ok_or("qemu stdout")?;
    let stderr = child.stderr.take().ok_or("qemu stderr")?;
    for stream in [
        Box::new(stdout) as Box<dyn std::io::Read + Send>,
        Box::new(stderr),
    ] {
        let tx = tx.clone();
        thread::spawn(move || {
            for line in BufReader::new(stream).split(b'\n') {
                let Ok(line) = line else { break };
                if tx
                    .send(String::from_utf8_lossy(&line).into_owned())
                    .is_err()
                {
                    break;
                }
            }
        });
    }
    drop(tx);
    let (mut log, mut to_init, mut killed) = (String::new(), None, None);
    let mut last_progress = Instant::now();
    loop {
        let now = Instant::now();
        let wait = (start + limits.total)
            .min(last_progress + limits.quiet)
            .saturating_duration_since(now);
        match rx.recv_timeout(wait) {
            Ok(line) => {
                if line.contains("@@gpupm ") {
                    last_progress = Instant::now();
                    if to_init.is_none() && line.contains("@@gpupm boot") {
                        to_init = Some(start.elapsed());
                    }
                }
                log.push_str(&line);
                log.push('\n');
            }
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => {
                killed = Some(if start.elapsed() >= limits.total {
                    "total deadline"
                } else {
                    "no progress"
                });
                child
                    .kill()
                    .map_err(|e| format!("kill qemu {}: {e}", child.id()))?;
                break;
            }
        }
    }
    child.wait().map_err(|e| format!("qemu: {e}"))?;
    Ok(Run {
        log,
        to_init,
        wall: start.elapsed(),
        killed,
    })
}

/// Whether KVM boots `probe` (an image whose init prints `@@gpupm boot`)
/// within `limit`; the string says why not.
pub fn kvm_boots(kernel: &GuestKernel, probe: &Path, limit: Duration) -> (bool, String) {
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
    {
        return (false, format!("/dev/kvm: {e}"));
    }
    let limits = Deadlines {
        total: limit,
        quiet: limit,
    };
    match boot(kernel, probe, Accel::Kvm, limits) {
        Ok(run) if run.to_init.is_some() => (
            true,
            format!("KVM booted the probe in {:.1} s", run.wall.as_secs_f64()),
        ),
        Ok(run) => {
            let tail: Vec<&str> = run.log.lines().rev().take(3).collect();
            (
                false,
                format!(
                    "KVM did not boot the probe ({}): {:?}",
                    run.killed.unwrap_or("qemu exited"),
                    tail
                ),
            )
        }
        Err(e) => (false, e),
    }
}
