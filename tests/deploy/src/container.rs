//! A clean Debian container booted with systemd as PID 1, for installing
//! the package as an operator would.
//!
//! The tree is a minimal Debian bookworm (`mmdebstrap --variant=minbase`
//! with `systemd`), made once by `scripts/make-test-rootfs` and kept at
//! [`rootfs`]. Every boot mounts it read-only under a tmpfs overlay
//! ([`Tree::Overlay`]), so every run starts from the same clean tree in
//! about a second, whatever the previous run installed, and nothing of the
//! tree changes. Nothing of the workspace is bound in: files reach the
//! container only through `copy_in`. Booting and running commands is
//! `gpupm-test-nspawn`'s, shared with `tests/system/tests/systemd_boot.rs`.

use std::ops::Deref;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use gpupm_test_nspawn::{Tree, BOOT};

use gpupm_test_support::Scratch;

/// The file `scripts/make-test-rootfs` writes last into a complete tree.
pub const ROOTFS_STAMP: &str = "etc/gpupm-test-rootfs";

/// The test tree: `$GPUPM_TEST_ROOTFS`, else
/// `/var/cache/gpupm-tests/rootfs-bookworm`.
pub fn rootfs() -> PathBuf {
    std::env::var_os("GPUPM_TEST_ROOTFS").map_or_else(
        || PathBuf::from("/var/cache/gpupm-tests/rootfs-bookworm"),
        PathBuf::from,
    )
}

/// What `systemctl show` says about a unit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitState {
    /// LoadState (`loaded`, `masked`, `not-found`, …).
    pub load: String,
    /// ActiveState.
    pub active: String,
    /// SubState.
    pub sub: String,
    /// MainPID (0: none).
    pub main_pid: u32,
}

/// The booted clean tree; powered off on drop.
#[derive(Debug)]
pub struct Container {
    inner: gpupm_test_nspawn::Container,
    // Dropped after the container is gone.
    _work: Scratch,
}

impl Deref for Container {
    type Target = gpupm_test_nspawn::Container;

    fn deref(&self) -> &Self::Target {
        &self.inner
    }
}

impl Container {
    /// Boots [`rootfs`] and returns once its systemd has finished booting.
    pub fn boot() -> Container {
        crate::require_root_and_fuse();
        let tree = rootfs();
        assert!(
            tree.join(ROOTFS_STAMP).exists(),
            "no test tree at {}: run scripts/make-test-rootfs (scripts/test-all does)",
            tree.display()
        );
        let work = Scratch::new("container");
        let inner =
            gpupm_test_nspawn::Container::boot(&Tree::Overlay(tree), &[], work.path(), "gpupm-deb");
        Container { inner, _work: work }
    }

    /// What `systemctl show` says about `unit`.
    pub fn unit(&self, unit: &str) -> UnitState {
        let p = self
            .inner
            .unit_properties(unit, &["LoadState", "ActiveState", "SubState", "MainPID"]);
        UnitState {
            load: p.get("LoadState").to_owned(),
            active: p.get("ActiveState").to_owned(),
            sub: p.get("SubState").to_owned(),
            main_pid: p.number("MainPID"),
        }
    }

    /// Polls `unit` until `ok` holds; fails with the unit's journal after
    /// [`BOOT`].
    pub fn wait_unit(&self, unit: &str, what: &str, ok: impl Fn(&UnitState) -> bool) -> UnitState {
        let deadline = Instant::now() + BOOT;
        loop {
            let s = self.unit(unit);
            if ok(&s) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "{unit}: not {what} within {BOOT:?} (last {s:?})\n{}",
                self.journal(unit)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until `unit` is active (running) with a main process other
    /// than `not_pid` (0: any), i.e. it sent `READY=1` (`Type=notify`).
    pub fn wait_running(&self, unit: &str, not_pid: u32) -> UnitState {
        self.wait_unit(unit, "active (running)", |s| {
            s.active == "active" && s.sub == "running" && s.main_pid != 0 && s.main_pid != not_pid
        })
    }

    /// The journal of `unit`.
    pub fn journal(&self, unit: &str) -> String {
        let out = self.inner.run(&[
            "journalctl",
            "--no-pager",
            "-o",
            "short-monotonic",
            "-u",
            unit,
        ]);
        format!(
            "--- journal of {unit} ---\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    }
}
