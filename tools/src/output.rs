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

/// `value` as one line of JSON.
pub fn json_line(value: &impl serde::Serialize) -> Result<String, String> {
    serde_json::to_string(value)
        .map(|mut line| {
            line.push('\n');
            line
        })
        .map_err(|e| format!("cannot write JSON: {e}"))
}
