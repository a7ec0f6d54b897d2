//! The kernel lane's harness: builds `gpupm_pmu.ko` against Debian's
//! headers, packs an initramfs (busybox, the workspace's binaries, perf,
//! their shared libraries, the kernel modules the checks need), boots
//! Debian's kernel on it under `qemu-system-x86_64` with the console on a
//! serial port and no disk, and parses the guest's result lines.
//!
//! The guest's `/init` (`guest/init.sh`) runs the check scripts named in
//! `/checks/list` in order — each `guest/checks/NAME.sh`, run with `sh -e`
//! — and prints one line per check:
//!
//! ```text
//! @@gpupm boot uptime=SECONDS              init started
//! @@gpupm check NAME pass|fail start=S end=S
//! @@gpupm metric KEY=VALUE                 printed by the checks
//! @@gpupm done uptime=SECONDS              before it powers off
//! ```
//!
//! A lane adds checks by listing more scripts ([`Lane::check`]) and
//! putting what they need into the image ([`initramfs::Initramfs`]).

pub mod initramfs;
pub mod kbuild;
pub mod qemu;
pub mod report;
pub mod workspace;

use std::path::{Path, PathBuf};

/// The guest kernel: an image unpacked from Debian's `linux-image-*`
/// package and the headers of exactly the same version.
#[derive(Clone, Debug)]
pub struct GuestKernel {
    /// `uname -r` of the image, e.g. `6.1.0-56-amd64`.
    pub release: String,
    /// `boot/vmlinuz-RELEASE`.
    pub vmlinuz: PathBuf,
    /// `lib/modules/RELEASE` of the unpacked image.
    pub modules: PathBuf,
    /// The matching kbuild tree (`/usr/src/linux-headers-RELEASE`).
    pub build: PathBuf,
}

/// Where `scripts/test-all` unpacks the image (`GPUPM_GUEST_KERNEL_DIR`
/// overrides it).
pub const DEFAULT_KERNEL_DIR: &str = "/var/cache/gpupm/guest-kernel";

impl GuestKernel {
    /// Finds the unpacked image and its headers; the error says how to get
    /// them.
    pub fn locate() -> Result<GuestKernel, String> {
        let dir = std::env::var_os("GPUPM_GUEST_KERNEL_DIR")
            .map_or_else(|| PathBuf::from(DEFAULT_KERNEL_DIR), PathBuf::from);
        let hint = "run scripts/test-all (it unpacks Debian's linux-image-amd64 there and installs the matching linux-headers)";
        let boot = dir.join("boot");
        let mut releases: Vec<String> = std::fs::read_dir(&boot)
            .map_err(|e| format!("{}: {e}; {hint}", boot.display()))?
            .filter_map(|e| {
                e.ok()?
                    .file_name()
                    .to_str()?
                    .strip_prefix("vmlinuz-")
                    .map(String::from)
            })
            .collect();
        releases.sort();
        let release = releases
            .pop()
            .ok_or_else(|| format!("no vmlinuz-* in {}; {hint}", boot.display()))?;
        let build = PathBuf::from(format!("/usr/src/linux-headers-{release}"));
        let modules = dir.join("lib/modules").join(&release);
        for need in [&build, &modules] {
            if !need.is_dir() {
                return Err(format!(
                    "{} is missing for kernel {release}; {hint}",
                    need.display()
                ));
            }
        }
        Ok(GuestKernel {
            vmlinuz: boot.join(format!("vmlinuz-{release}")),
            release,
            modules,
            build,
        })
    }
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The guest scripts directory (`tests/kernel/guest`).
pub fn guest_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("guest")
}

/// The checks one guest run performs, in order.
#[derive(Clone, Debug, Default)]
pub struct Lane {
    checks: Vec<String>,
}

impl Lane {
    /// Adds `guest/checks/NAME.sh`.
    pub fn check(mut self, name: &str) -> Lane {
        self.checks.push(name.to_string());
        self
    }

    /// The names, in order.
    pub fn checks(&self) -> &[String] {
        &self.checks
    }

    /// Copies the scripts, their helpers (`/checks/lib.sh`) and their list
    /// into the image.
    pub fn install(&self, fs: &mut initramfs::Initramfs) -> Result<(), String> {
        for name in &self.checks {
            let src = guest_dir().join("checks").join(format!("{name}.sh"));
            fs.file(&src, &format!("/checks/{name}.sh"), 0o755)?;
        }
        fs.file(&guest_dir().join("lib.sh"), "/checks/lib.sh", 0o644)?;
        fs.text("/checks/list", &(self.checks.join("\n") + "\n"), 0o644)?;
        fs.file(&guest_dir().join("init.sh"), "/init", 0o755)
    }
}
