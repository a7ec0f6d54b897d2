//! Support code of gpupm's deployment tests (`tests/`): the real
//! processes (`gpupm-driver`, `gpupmd`, a Prometheus server, a container
//! booted with systemd), the device's step clock and ledger, and the
//! Prometheus HTTP API. Nothing here is shipped.
//!
//! The tests need root, `/dev/fuse` and the tools `scripts/test-all`
//! installs; without them they fail with the reason, they never skip.

pub mod container;
pub mod device;
pub mod http;
pub mod node;
pub mod package;
pub mod process;
pub mod prometheus;
pub mod promql;
pub mod rules;
pub mod scenario;
pub mod scratch;

use std::path::{Path, PathBuf};

pub use gpupm_test_nspawn::require_tool;
use std::time::{Duration, Instant};

/// The workspace root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// Asserts that this process may mount FUSE nodes.
pub fn require_root_and_fuse() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the deployment tests must run as root (FUSE mounts, containers)"
    );
    assert!(
        Path::new("/dev/fuse").exists(),
        "the deployment tests need /dev/fuse"
    );
}

/// Calls `check` until it returns `Ok`, at most until `deadline` from
/// now; then fails with `what` and the last error. Between calls it waits
/// `poll` (the condition is external: a scrape, a rule evaluation, a unit
/// state).
pub fn wait_until<T>(
    what: &str,
    deadline: Duration,
    poll: Duration,
    mut check: impl FnMut() -> Result<T, String>,
) -> T {
    let end = Instant::now() + deadline;
    loop {
        match check() {
            Ok(v) => return v,
            Err(last) => {
                assert!(
                    Instant::now() < end,
                    "{what}: not within {deadline:?}; last: {last}"
                );
            }
        }
        std::thread::sleep(poll);
    }
}
