//! SIGINT/SIGTERM as a flag, so long-running commands end cleanly (finish
//! a file, tear down child processes) instead of dying mid-way.

use std::sync::atomic::{AtomicBool, Ordering};

use nix::sys::signal::{self, SigHandler, Signal};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Installs the handlers.
pub fn install() -> Result<(), String> {
    for sig in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is
        // async-signal-safe, and no other code in gpupm installs handlers
        // for these signals.
        unsafe { signal::signal(sig, SigHandler::Handler(on_signal)) }
            .map_err(|e| format!("cannot install a {sig} handler: {e}"))?;
    }
    Ok(())
}

/// Whether SIGINT or SIGTERM arrived.
pub fn stopped() -> bool {
    STOP.load(Ordering::SeqCst)
}
