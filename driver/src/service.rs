//! Running as a systemd service: the `sd_notify` datagram protocol
//! (`READY=1`, `WATCHDOG=1`, `STOPPING=1`) and log setup (journald when
//! present, else stderr).

use std::env;
use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::Path;
use std::time::Duration;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

/// Socket on which journald accepts native-protocol messages.
pub const JOURNAL_SOCKET: &str = "/run/systemd/journal/socket";

/// The service manager's notification socket (`$NOTIFY_SOCKET`).
#[derive(Debug)]
pub struct SdNotify {
    socket: UnixDatagram,
    addr: SocketAddr,
}

impl SdNotify {
    /// The socket named by `$NOTIFY_SOCKET`, or `None` when not run by a
    /// service manager. An address starting with `@` is abstract.
    pub fn from_env() -> io::Result<Option<SdNotify>> {
        let Some(path) = env::var_os("NOTIFY_SOCKET") else {
            return Ok(None);
        };
        let bytes = path.as_encoded_bytes();
        let addr = match bytes.strip_prefix(b"@") {
            Some(name) => SocketAddr::from_abstract_name(name)?,
            None => SocketAddr::from_pathname(Path::new(&path))?,
        };
        Ok(Some(SdNotify {
            socket: UnixDatagram::unbound()?,
            addr,
        }))
    }

    /// Sends one notification, e.g. `"READY=1\nSTATUS=serving"`.
    pub fn notify(&self, state: &str) -> io::Result<()> {
        self.socket
            .send_to_addr(state.as_bytes(), &self.addr)
            .map(drop)
    }
}

/// Half the watchdog timeout the service manager set for this process
/// (`$WATCHDOG_USEC`, honouring `$WATCHDOG_PID`), i.e. the ping interval.
pub fn watchdog_interval() -> Option<Duration> {
    if let Some(pid) = env::var("WATCHDOG_PID")
        .ok()
        .and_then(|p| p.parse::<u32>().ok())
    {
        if pid != std::process::id() {
            return None;
        }
    }
    let usec: u64 = env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    (usec > 0).then(|| Duration::from_micros(usec / 2))
}

/// Installs the global tracing subscriber: journald when its socket exists,
/// else stderr. The filter comes from `$RUST_LOG` (default `info`).
pub fn init_logging() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let registry = tracing_subscriber::registry().with(filter);
    if Path::new(JOURNAL_SOCKET).exists() {
        if let Ok(journald) = tracing_journald::layer() {
            registry.with(journald).init();
            return;
        }
    }
    registry
        .with(tracing_subscriber::fmt::layer().with_writer(io::stderr))
        .init();
}
