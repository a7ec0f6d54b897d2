//! This build's binaries, located the cargo way.
//!
//! A test in the package that owns a binary gets its path from cargo:
//! `CARGO_BIN_EXE_<name>` at compile time, which [`bin!`](crate::bin)
//! reads in the calling crate, or, for the helpers of this crate that start
//! a binary, the binary cargo builds beside a test of its package (which
//! `CARGO_PKG_NAME` names at run time). Any other test gets them from one
//! `cargo build --locked` of the binary packages per test process, with
//! the profile the test was built with (a no-op when they are up to date,
//! and it never leaves a stale binary behind), into the target directory
//! the test executable sits in. (A build of the binaries alone unifies
//! fewer features than a test build, so it relinks them; a second target
//! directory would avoid that at the price of a second full build and its
//! disk space.)

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// A binary of the workspace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bin {
    /// `gpupm-driver`.
    Driver,
    /// `gpupmd`.
    Daemon,
    /// `gpupm`.
    Cli,
    /// `gpupm-mount`, the units' mount helper.
    Mount,
}

impl Bin {
    /// The executable's name.
    pub const fn name(self) -> &'static str {
        match self {
            Bin::Driver => "gpupm-driver",
            Bin::Daemon => "gpupmd",
            Bin::Cli => "gpupm",
            Bin::Mount => "gpupm-mount",
        }
    }

    /// The package it belongs to.
    pub const fn package(self) -> &'static str {
        match self {
            Bin::Driver => "gpupm-driver",
            Bin::Daemon => "gpupmd",
            Bin::Cli => "gpupm",
            Bin::Mount => "gpupm-fusemount",
        }
    }
}

/// The path of a workspace binary: `bin!(Driver)`, `bin!(Daemon)`,
/// `bin!(Cli)`, `bin!(Mount)`. Expands in the calling crate, so a test of the binary's own
/// package uses cargo's `CARGO_BIN_EXE_*` and builds nothing.
#[macro_export]
macro_rules! bin {
    (Driver) => {
        $crate::bins::locate(
            $crate::bins::Bin::Driver,
            option_env!("CARGO_BIN_EXE_gpupm-driver"),
        )
    };
    (Daemon) => {
        $crate::bins::locate(
            $crate::bins::Bin::Daemon,
            option_env!("CARGO_BIN_EXE_gpupmd"),
        )
    };
    (Cli) => {
        $crate::bins::locate($crate::bins::Bin::Cli, option_env!("CARGO_BIN_EXE_gpupm"))
    };
    (Mount) => {
        $crate::bins::locate(
            $crate::bins::Bin::Mount,
            option_env!("CARGO_BIN_EXE_gpupm-mount"),
        )
    };
}

/// `compiled` (cargo's path for the caller's own package); else, when
/// cargo runs a test of the binary's own package (`CARGO_PKG_NAME` at run
/// time), the binary cargo built beside the test for it; else the binary
/// from [`build_once`].
pub fn locate(bin: Bin, compiled: Option<&'static str>) -> PathBuf {
    if let Some(path) = compiled {
        return PathBuf::from(path);
    }
    if std::env::var("CARGO_PKG_NAME").as_deref() == Ok(bin.package()) {
        let beside = profile_dir().join(bin.name());
        if beside.is_file() {
            return beside;
        }
    }
    build_once().join(bin.name())
}

/// `target/<profile>`, where the running test executable's `deps/` is.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf()
}

/// Builds `gpupm-driver`, `gpupmd`, `gpupm` and `gpupm-mount` once per
/// process; returns the directory they are in.
pub fn build_once() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = profile_dir();
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let target = dir.parent().expect("the target dir").join("bins-for-tests");
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--locked", "--quiet", "--bins"])
            .args([
                "-p",
                "gpupm-driver",
                "-p",
                "gpupmd",
                "-p",
                "gpupm",
                "-p",
                "gpupm-fusemount",
            ])
            .current_dir(crate::workspace_root())
            .env("CARGO_TARGET_DIR", &target);
        let profile = match dir.file_name().and_then(|n| n.to_str()) {
            Some("release") => "release",
            _ => "test",
        };
        cmd.args(["--profile", profile]);
        let status = cmd
            .status()
            .unwrap_or_else(|e| panic!("cannot run cargo to build the binaries: {e}"));
        assert!(
            status.success(),
            "building the gpupm binaries failed ({status})"
        );
        // The test profile's output directory is `debug`.
        let out = target.join(if profile == "release" {
            "release"
        } else {
            "debug"
        });
        for bin in [Bin::Driver, Bin::Daemon, Bin::Cli, Bin::Mount] {
            assert!(
                out.join(bin.name()).is_file(),
                "{} missing in {}",
                bin.name(),
                out.display()
            );
        }
        out
    })
}
