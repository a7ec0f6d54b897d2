//! The command line's one error type: a one-line message and the exit code
//! it maps to (1 = the command ran but found a problem, 2 = usage or
//! environment error).

use std::fmt;

/// A failed command: printed as `gpupm: MESSAGE`, then exit with `code`
/// (code 0: the output's reader went away; nothing is printed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliError {
    /// Exit code (1 or 2).
    pub code: u8,
    /// One line naming the cause.
    pub msg: String,
}

impl CliError {
    /// A usage or environment error (exit 2).
    pub fn usage(msg: impl Into<String>) -> CliError {
        CliError {
            code: 2,
            msg: msg.into(),
        }
    }

    /// Standard output's reader has gone (`| head`): the command stops,
    /// quietly, with exit status 0.
    pub fn closed() -> CliError {
        CliError {
            code: 0,
            msg: String::new(),
        }
    }

    /// The command ran but found a problem (exit 1).
    pub fn runtime(msg: impl Into<String>) -> CliError {
        CliError {
            code: 1,
            msg: msg.into(),
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

impl From<String> for CliError {
    fn from(msg: String) -> CliError {
        CliError::usage(msg)
    }
}

/// Result of a subcommand.
pub type CliResult<T = ()> = Result<T, CliError>;

pub use gpupm_fusemount::logging::one_line;
