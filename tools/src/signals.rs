//! SIGINT/SIGTERM as a flag, so long-running commands end cleanly (finish
//! a file, tear down child processes) instead of dying mid-way.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::sync::OnceLock;

use signal_hook::consts::{SIGINT, SIGTERM};

static STOP: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// Installs the handlers.
pub fn install() -> Result<(), String> {
    let flag = STOP.get_or_init(|| Arc::new(AtomicBool::new(false)));
    for sig in [SIGINT, SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(flag))
            .map_err(|e| format!("cannot install a handler for signal {sig}: {e}"))?;
    }
    Ok(())
}

/// Whether SIGINT or SIGTERM arrived.
pub fn stopped() -> bool {
    STOP.get().is_some_and(|f| f.load(Ordering::SeqCst))
}
