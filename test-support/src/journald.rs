//! A real `systemd-journald` for the tests that read the journal back:
//! the machine's own when it answers, otherwise one started standalone
//! (it creates the socket itself) and stopped again by its pid.

use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::process::KillOnDrop;
use crate::require_tool;

/// The journal's native socket.
pub const JOURNAL_SOCKET: &str = "/run/systemd/journal/socket";

/// How long a started journald may take to open its socket.
const START_PATIENCE: Duration = Duration::from_secs(10);

/// Whether a journald accepts datagrams on [`JOURNAL_SOCKET`].
pub fn answers() -> bool {
    UnixDatagram::unbound()
        .and_then(|s| s.send_to(b"", JOURNAL_SOCKET))
        .is_ok()
}

/// The running journald (`None`), or one this test starts: the guard
/// stops it by its pid when dropped.
pub fn ensure() -> Option<KillOnDrop> {
    if answers() {
        return None;
    }
    let bin = require_tool("/lib/systemd/systemd-journald", "systemd");
    let child = Command::new(bin)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start systemd-journald (the test must run as root)");
    let mut guard = KillOnDrop(child, "systemd-journald");
    let deadline = Instant::now() + START_PATIENCE;
    // journald offers no readiness notification when started by hand: the
    // socket answering is the condition, polled until the deadline.
    while !answers() {
        if let Ok(Some(status)) = guard.0.try_wait() {
            panic!("systemd-journald exited at start ({status}); the test must run as root");
        }
        assert!(
            Instant::now() < deadline,
            "systemd-journald did not open {JOURNAL_SOCKET} within {START_PATIENCE:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(guard)
}
