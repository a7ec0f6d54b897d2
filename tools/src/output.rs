//! Writing command output: a closed pipe (`gpupm … | head`) ends the
//! command quietly instead of panicking.

use std::io::{ErrorKind, Write};

/// Writes `text` to stdout.
pub fn emit(text: &str) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(format!("cannot write output: {e}")),
    }
}
