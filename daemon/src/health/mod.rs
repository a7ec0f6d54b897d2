//! Health in journald: structured log setup (journald when its socket
//! exists, stderr otherwise), the periodic health summary with a stable
//! `MESSAGE_ID`, anomaly warnings, and the lifecycle events the daemon core
//! emits (startup, shutdown, config applied, device identity, retired
//! contexts pruned), and the warning about a configuration file every
//! local user may read.
//!
//! # Journal fields
//! Every event of this module carries `MESSAGE_ID` (one of the `*_ID`
//! constants below) and its values as upper-case journal fields without a
//! prefix (`HANDSHAKES=…`, `HANDSHAKE_P99_US=…`), so
//! `journalctl MESSAGE_ID=<id> -o json` returns them ready to filter.
//! Summaries and lifecycle events are logged at `PRIORITY=6` (info),
//! anomalies at `PRIORITY=4` (warning).
//!
//! # Journal socket
//! Log setup is shared with the driver ([`gpupm_fusemount::logging`]):
//! [`HealthConfig::journal_socket`] only decides whether journald is used;
//! `tracing-journald` 0.3 always sends to `/run/systemd/journal/socket`.

mod daemon;
mod events;
mod fanout;
mod ratelimit;
mod reporter;

pub use daemon::DaemonHealth;
pub use events::{
    config_applied, config_readable, device_identity, fallback_logs_suppressed, handshake_fallback,
    retired_pruned, shutdown, startup, CONFIG_APPLIED_ID, CONFIG_READABLE_ID, DEVICE_IDENTITY_ID,
    HANDSHAKE_FALLBACK_ID, RETIRED_PRUNED_ID, SHUTDOWN_ID, STARTUP_ID,
};
pub use fanout::HealthFanout;
pub use gpupm_fusemount::logging::LogSink;
pub use ratelimit::{RateLimit, PER_EVENT_LOG_PERIOD};
pub use reporter::{
    percentile_ns, start_reporter, start_reporter_with, Anomaly, Summary, Thresholds, ANOMALY_ID,
    SUMMARY_ID,
};

/// `target` of every event this module emits.
pub const TARGET: &str = "gpupmd::health";

/// Health reporting settings, from the configuration file's format.
pub use gpupm_client::config::HealthConfig;
/// Default journald socket.
pub use gpupm_client::paths::DEFAULT_JOURNAL_SOCKET;

/// Why logging could not be set up.
pub use gpupm_fusemount::logging::LoggingError as HealthError;

/// Installs the global tracing subscriber ([`gpupm_fusemount::logging`]):
/// journald with structured fields when `cfg.journal_socket` exists, stderr
/// otherwise. The filter comes from `RUST_LOG` (default `info`).
pub fn init_logging(cfg: &HealthConfig) -> Result<(), HealthError> {
    init_logging_sink(cfg).map(|_sink| ())
}

/// Like [`init_logging`], and says which sink was chosen.
pub fn init_logging_sink(cfg: &HealthConfig) -> Result<LogSink, HealthError> {
    gpupm_fusemount::logging::init(&cfg.journal_socket)
}
