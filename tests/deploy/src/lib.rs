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
pub mod prometheus;
pub mod promql;
pub mod rules;
pub mod scenario;
pub mod web;

use std::path::PathBuf;

pub use gpupm_test_support::{process, require_tool, wait_until};

/// The workspace root.
pub fn repo() -> PathBuf {
    gpupm_test_support::workspace_root()
}

/// Asserts that this process may mount FUSE nodes.
pub fn require_root_and_fuse() {
    gpupm_test_support::require_root_and_fuse("the deployment tests");
}
