//! What gpupm's tests share: scratch directories that unmount what a test
//! left mounted ([`scratch`]), this build's binaries located the cargo way
//! ([`bins`]) and started with a notify socket the test owns ([`process`],
//! [`services`]), scenario files ([`scenario`]), the device through its
//! node ([`rawnode`] with raw system calls, [`device`] through
//! [`gpupm_client::DevNode`]), metrics scrapes ([`scrape`]) and the
//! metrics endpoint's certificates and credentials ([`web`]), other users
//! ([`users`]) and a perf software counter as a benchmark baseline
//! ([`perf`]).
//!
//! Only tests and benchmarks link this crate. Synchronisation never
//! sleeps for a guessed time: a notify datagram, a process exit or a device
//! register ends every wait, each with a deadline. A test that lacks root,
//! `/dev/fuse` or a tool fails saying so; it never skips.

pub mod bins;
pub mod cc;
pub mod cli;
pub mod device;
pub mod examples;
pub mod journald;
pub mod load;
pub mod model;
pub mod perf;
pub mod planes;
pub mod process;
pub mod procfs;
pub mod rawnode;
pub mod rng;
pub mod scenario;
pub mod scrape;
pub mod scratch;
pub mod services;
pub mod users;
pub mod web;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use bins::Bin;
pub use process::Proc;
pub use scratch::Scratch;
pub use services::{Driver, DriverOptions};

/// Asserts that this process may mount FUSE nodes (root, `/dev/fuse`);
/// `who` names the tests in the message.
pub fn require_root_and_fuse(who: &str) {
    assert!(
        nix::unistd::geteuid().is_root(),
        "{who} must run as root (they mount FUSE and switch users)"
    );
    assert!(Path::new("/dev/fuse").exists(), "{who} need /dev/fuse");
}

/// The path of `path_or_name` (a path, or a name looked up on `PATH`);
/// fails naming the Debian `package` that provides it.
pub fn require_tool(path_or_name: &str, package: &str) -> PathBuf {
    let found = if path_or_name.contains('/') {
        Some(PathBuf::from(path_or_name)).filter(|p| p.exists())
    } else {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(path_or_name))
                .find(|p| p.is_file())
        })
    };
    found.unwrap_or_else(|| {
        panic!("{path_or_name} is missing: install the Debian package `{package}`")
    })
}

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("test-support sits in the workspace root")
        .to_path_buf()
}

/// Calls `check` until it returns `Ok`, at most until `deadline` from now;
/// then fails with `what` and the last error. Between calls it waits
/// `poll`: for conditions outside this process that nothing signals (a
/// scrape, a rule evaluation, a unit's state).
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
            Err(last) => assert!(
                Instant::now() < end,
                "{what}: not within {deadline:?}; last: {last}"
            ),
        }
        std::thread::sleep(poll);
    }
}
