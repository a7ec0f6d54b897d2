//! Writing command output. A closed pipe (`gpupm … | head`) ends a command
//! quietly with exit status 0: one-shot output stops writing
//! ([`emit`]); a stream stops reading and ends ([`emit_stream`] returns
//! [`CliError::closed`]).

use std::io::{ErrorKind, Write};

use crate::error::{CliError, CliResult};

/// Writes `text` to stdout; a closed pipe is not an error.
pub fn emit(text: &str) -> Result<(), String> {
    match write_stdout(text) {
        Ok(()) | Err(Written::Closed) => Ok(()),
        Err(Written::Failed(e)) => Err(e),
    }
}

/// Writes one piece of a stream to stdout: when the reader has gone, the
/// stream ends ([`CliError::closed`]: no message, exit status 0).
pub fn emit_stream(text: &str) -> CliResult {
    match write_stdout(text) {
        Ok(()) => Ok(()),
        Err(Written::Closed) => Err(CliError::closed()),
        Err(Written::Failed(e)) => Err(CliError::runtime(e)),
    }
}

enum Written {
    Closed,
    Failed(String),
}

fn write_stdout(text: &str) -> Result<(), Written> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Err(Written::Closed),
        Err(e) => Err(Written::Failed(format!("cannot write output: {e}"))),
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
