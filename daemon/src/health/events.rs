//! Lifecycle events the daemon core emits, each with its own stable
//! `MESSAGE_ID` (journald catalogue style: 128-bit, lower-case hex, never
//! reused for another meaning).

use std::path::Path;
use std::time::Instant;

use gpupm_client::identity::GpuIdentity;
use gpupm_uapi::split_abi_version;

use super::ratelimit::{RateLimit, PER_EVENT_LOG_PERIOD};
use super::TARGET;
use crate::view::DeviceIdentity;

/// `MESSAGE_ID` of the startup event (`VERSION`, `CONFIG`).
pub const STARTUP_ID: &str = "85c75ac4aad0425f8c42869f09b7a620";
/// `MESSAGE_ID` of the shutdown event (`REASON`, `UPTIME_S`).
pub const SHUTDOWN_ID: &str = "f1b0dea80b28407ea22b45606350cad0";
/// `MESSAGE_ID` of the config-applied event (`CONFIG`, `DETAIL`).
pub const CONFIG_APPLIED_ID: &str = "9ece27c8651640bbbebf2cb95ec90d18";
/// `MESSAGE_ID` of the device-identity event (`ABI_VERSION`, `CLOCK_KHZ`,
/// `PARTITIONS`, `CCUS`, `SMS`; from ABI 1.12 also `GPU_INDEX`,
/// `GPU_UUID`, `GPU_PCI_ADDRESS`, `GPU_MODEL`, `GPU_SERIAL`).
pub const DEVICE_IDENTITY_ID: &str = "cde839ebdfb1442092af84e8fac94418";
/// `MESSAGE_ID` of the warning logged when the device completed a
/// context switch by its own fallback (`PARTITION`, `FALLBACKS`,
/// `SUPPRESSED`), at most once a minute.
pub const HANDSHAKE_FALLBACK_ID: &str = "e016e3fbc46a4ebd8ecdf279a8ca6839";
/// `MESSAGE_ID` of the event logged when the retention policy pruned
/// retired context instances (`PRUNED_BY_AGE`, `PRUNED_BY_COUNT`, `KEPT`,
/// `OLDEST_RETIRED_CYCLE` of the pruned ones).
pub const RETIRED_PRUNED_ID: &str = "491813e5979c42328f844d7287176380";

/// `MESSAGE_ID` of the warning logged at start when every local user may
/// read the configuration file (`CONFIG`, `MODE`): it holds the tenant map.
pub const CONFIG_READABLE_ID: &str = "4dba9beedd1e4d469e86773a08059a95";

/// The daemon started (before it is ready).
pub fn startup(version: &str, config: &Path) {
    tracing::info!(
        target: TARGET,
        message_id = STARTUP_ID,
        version,
        config = %config.display(),
        "gpupmd {version} starting with {}",
        config.display()
    );
}

/// Every local user may read the configuration file (`mode`: its
/// permission bits).
pub fn config_readable(config: &Path, mode: u32) {
    let mode = format!("{mode:04o}");
    tracing::warn!(
        target: TARGET,
        message_id = CONFIG_READABLE_ID,
        config = %config.display(),
        mode = %mode,
        "{} (mode {mode}) may be read by every local user, and it maps users to VMs: \
         chown root:gpupm-admin {0} && chmod 0640 {0}",
        config.display()
    );
}

/// The daemon is stopping.
pub fn shutdown(reason: &str, uptime_s: f64) {
    tracing::info!(
        target: TARGET,
        message_id = SHUTDOWN_ID,
        reason,
        uptime_s,
        "gpupmd stopping ({reason}) after {uptime_s:.1} s"
    );
}

/// A configuration was applied to the device (at start, on reload, or
/// again after a device reset); `detail` is a one-line summary.
pub fn config_applied(config: &Path, detail: &str) {
    tracing::info!(
        target: TARGET,
        message_id = CONFIG_APPLIED_ID,
        config = %config.display(),
        detail,
        "configuration {} applied: {detail}",
        config.display()
    );
}

/// The device was identified.
pub fn device_identity(id: &DeviceIdentity, gpu: Option<&GpuIdentity>) {
    let (major, minor) = split_abi_version(id.abi_version);
    let index = gpu.map(|g| g.index);
    let uuid = gpu.map(|g| g.uuid.to_string());
    let pci = gpu.map(|g| g.pci.to_string());
    tracing::info!(
        target: TARGET,
        message_id = DEVICE_IDENTITY_ID,
        abi_version = id.abi_version,
        clock_khz = id.clock_khz,
        partitions = id.partitions,
        ccus = id.ccus,
        sms = id.sms,
        gpu_index = index,
        gpu_uuid = uuid.as_deref(),
        gpu_pci_address = pci.as_deref(),
        gpu_model = gpu.map(|g| g.model.as_str()),
        gpu_serial = gpu.map(|g| g.serial.as_str()),
        "device{}: ABI {}.{}, {} kHz, {} partitions, {} CCUs, {} SMs",
        gpu.map_or_else(String::new, |g| format!(
            " {} {} ({}, PCI {})",
            g.index, g.uuid, g.model, g.pci
        )),
        major,
        minor,
        id.clock_khz,
        id.partitions,
        id.ccus,
        id.sms
    );
}

/// The per-event fallback warnings: a device in trouble finishes hundreds
/// of switches a second by its fallback.
static FALLBACK_LOG: RateLimit = RateLimit::new(PER_EVENT_LOG_PERIOD);

/// The device completed a switch of `partition` by its fallback because
/// the daemon's handshake did not finish in time; `fallbacks` is the total.
/// Logged at most once per [`PER_EVENT_LOG_PERIOD`] (`SUPPRESSED`: the
/// fallbacks not logged since the previous line); every one is counted in
/// the health summary.
pub fn handshake_fallback(partition: u32, fallbacks: u64) {
    let Some(suppressed) = FALLBACK_LOG.admit(Instant::now()) else {
        return;
    };
    tracing::warn!(
        target: TARGET,
        message_id = HANDSHAKE_FALLBACK_ID,
        partition,
        fallbacks,
        suppressed,
        "partition {partition}: the device completed a context switch by fallback ({fallbacks} in total, \
         {suppressed} more since the last such line; at most one a minute, the health summary counts them all)"
    );
}

/// Fallback warnings not logged so far (rate limit).
pub fn fallback_logs_suppressed() -> u64 {
    FALLBACK_LOG.suppressed_total()
}

/// The retention policy removed retired context instances (their files and
/// table entries); `oldest_retired_cycle` is the retirement cycle of the
/// oldest one removed. VM and system totals are unaffected.
pub fn retired_pruned(by_age: usize, by_count: usize, kept: usize, oldest_retired_cycle: u64) {
    tracing::info!(
        target: TARGET,
        message_id = RETIRED_PRUNED_ID,
        pruned_by_age = by_age,
        pruned_by_count = by_count,
        kept,
        oldest_retired_cycle,
        "retention: pruned {} retired contexts ({by_age} by age, {by_count} by count), {kept} kept",
        by_age + by_count
    );
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Level, Metadata, Subscriber};

    use super::*;

    /// Counts warnings.
    struct Warnings(Arc<AtomicU64>);

    impl Subscriber for Warnings {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, e: &Event<'_>) {
            if *e.metadata().level() == Level::WARN {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    #[test]
    fn a_burst_of_fallbacks_is_one_warning() {
        let n = Arc::new(AtomicU64::new(0));
        tracing::subscriber::with_default(Warnings(Arc::clone(&n)), || {
            for total in 1..=630 {
                handshake_fallback(1, total);
            }
        });
        assert_eq!(n.load(Ordering::Relaxed), 1);
        assert_eq!(fallback_logs_suppressed(), 629);
    }
}
