//! The services' global tracing subscriber (`gpupm-driver` and `gpupmd`
//! alike): journald with structured fields when the journal socket exists
//! and answers, human-readable stderr otherwise. The filter comes from
//! `RUST_LOG` (default `info`).
//!
//! `tracing-journald` 0.3 always sends to [`DEFAULT_JOURNAL_SOCKET`]; the
//! socket passed to [`init`] only decides whether journald is used (it must
//! exist, and the crate's connect probe must succeed), and a non-default
//! path that exists is reported with a warning.

use std::io::IsTerminal;
use std::path::Path;

use tracing_journald::{Priority, PriorityMappings};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

/// `target` of the events this module logs about its own choice.
const TARGET: &str = "gpupm::logging";

pub use gpupm_client::paths::DEFAULT_JOURNAL_SOCKET;

/// Why logging could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    /// A global subscriber was already installed.
    #[error("logging was already initialised")]
    AlreadyInitialised,
}

/// Where log events go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogSink {
    /// The journal, through its native protocol socket.
    Journald,
    /// Standard error, one formatted line per event.
    Stderr,
}

impl LogSink {
    /// Lower-case name, as logged in `LOG_SINK`.
    pub const fn name(self) -> &'static str {
        match self {
            LogSink::Journald => "journald",
            LogSink::Stderr => "stderr",
        }
    }
}

/// Installs the global tracing subscriber: journald with structured fields
/// when `journal_socket` exists and journald answers, stderr otherwise;
/// says which sink was chosen (and logs why).
pub fn init(journal_socket: &Path) -> Result<LogSink, LoggingError> {
    let (filter, filter_error) = match EnvFilter::try_from_default_env() {
        Ok(f) => (f, None),
        Err(e) => (
            EnvFilter::new("info"),
            std::env::var_os("RUST_LOG").map(|_| e),
        ),
    };
    let socket = journal_socket;
    let (sink, journal_error) = if socket.exists() {
        match journald_layer() {
            Ok(layer) => {
                tracing_subscriber::registry()
                    .with(filter)
                    .with(layer)
                    .try_init()
                    .map_err(|_already| LoggingError::AlreadyInitialised)?;
                (LogSink::Journald, None)
            }
            Err(e) => {
                install_stderr(filter)?;
                (LogSink::Stderr, Some(e))
            }
        }
    } else {
        install_stderr(filter)?;
        (LogSink::Stderr, None)
    };
    report_choice(sink, socket, journal_error.as_ref());
    if let Some(e) = filter_error {
        tracing::warn!(target: TARGET, error = %e, "RUST_LOG is not a valid filter; logging at info");
    }
    Ok(sink)
}

fn journald_layer() -> std::io::Result<tracing_journald::Layer> {
    Ok(tracing_journald::Layer::new()?
        .with_field_prefix(None)
        .with_priority_mappings(PriorityMappings {
            error: Priority::Error,
            warn: Priority::Warning,
            info: Priority::Informational,
            debug: Priority::Debug,
            trace: Priority::Debug,
        }))
}

fn install_stderr(filter: EnvFilter) -> Result<(), LoggingError> {
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .try_init()
        .map_err(|_already| LoggingError::AlreadyInitialised)
}

fn report_choice(sink: LogSink, socket: &Path, journal_error: Option<&std::io::Error>) {
    let socket_shown = socket.display();
    match (sink, journal_error) {
        (LogSink::Stderr, Some(e)) => tracing::warn!(
            target: TARGET,
            log_sink = sink.name(),
            journal_socket = %socket_shown,
            error = %e,
            "journal socket exists but journald does not answer; logging to stderr"
        ),
        (LogSink::Stderr, None) => tracing::info!(
            target: TARGET,
            log_sink = sink.name(),
            journal_socket = %socket_shown,
            "no journal socket; logging to stderr"
        ),
        (LogSink::Journald, _) if socket != Path::new(DEFAULT_JOURNAL_SOCKET) => tracing::warn!(
            target: TARGET,
            log_sink = sink.name(),
            journal_socket = %socket_shown,
            "tracing-journald sends to {DEFAULT_JOURNAL_SOCKET} only; the configured socket only enabled journald"
        ),
        (LogSink::Journald, _) => tracing::debug!(
            target: TARGET,
            log_sink = sink.name(),
            journal_socket = %socket_shown,
            "logging to journald"
        ),
    }
}

/// An error and its causes on one line, `WHAT: CAUSE: …` (a newline inside
/// a message becomes a space): how every program of gpupm logs or prints
/// an error, one journal line each.
pub fn one_line(e: impl std::error::Error + Send + Sync + 'static) -> String {
    format!("{:#}", anyhow::Error::new(e)).replace('\n', " ")
}

#[cfg(test)]
mod one_line_tests {
    #[derive(Debug, thiserror::Error)]
    #[error("opening the node failed")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn the_chain_is_one_line_outer_first() {
        let inner = std::io::Error::other("no such\ndevice");
        assert_eq!(
            super::one_line(Outer(inner)),
            "opening the node failed: no such device"
        );
    }
}
