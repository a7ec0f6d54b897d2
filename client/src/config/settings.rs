//! The configuration as checked and resolved: plain values for the daemon
//! (and for tools that need to know where it serves).

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

pub use super::kernel_pmu::KernelPmuConfig;
pub use super::limits::Limits;
pub use super::pages::PagesConfig;
use crate::cpus::CpuList;
use crate::paths::DEFAULT_JOURNAL_SOCKET;
use crate::tenant::VmId;

/// Threads serving the tenant node when the configuration does not say
/// (`tenant_threads`): two, so that one slow request (a large counter read)
/// does not hold up every other tenant's.
pub const DEFAULT_TENANT_THREADS: NonZeroUsize = NonZeroUsize::MIN.saturating_add(1);
/// Upper bound of `tenant_threads` (each thread reserves a 16 MiB request
/// buffer; more threads than concurrent requests only cost memory).
pub const MAX_TENANT_THREADS: usize = 64;
/// Default of `[retired] max_contexts`.
pub const DEFAULT_MAX_CONTEXTS: usize = 10_000;
/// Largest `[retired] max_contexts` (about 6 GiB of files and 600 MiB of
/// tables: beyond any fleet's use, below any overflow).
pub const MAX_MAX_CONTEXTS: usize = 10_000_000;

/// Default of `[stream] drain_interval_ms`: how long a stream record below
/// the watermark (which raises no interrupt) waits at most to be drained.
pub const DEFAULT_DRAIN_INTERVAL_MS: u64 = 100;
/// Largest `[stream] drain_interval_ms`.
pub const MAX_DRAIN_INTERVAL_MS: u64 = 60_000;

/// The configuration, checked and resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// Where it came from (`None` = defaults).
    pub source: Option<PathBuf>,
    /// Device node directory.
    pub node_dir: PathBuf,
    /// Tenant node mount point.
    pub tenant_dir: PathBuf,
    /// Threads serving the tenant node.
    pub tenant_threads: NonZeroUsize,
    /// CPUs the threads the device wakes (`gpupmd-irq`, `gpupmd-commits`)
    /// are pinned to (`None`: wherever the scheduler puts them).
    pub device_cpus: Option<CpuList>,
    /// State directory.
    pub state_dir: PathBuf,
    /// Device programming.
    pub program: Programming,
    /// Delta samples kept per scope.
    pub history_samples: usize,
    /// Interval of the periodic drain of every non-empty stream ring
    /// (`None`: drained on interrupts only).
    pub drain_interval: Option<Duration>,
    /// Who may see what.
    pub policy: TenantPolicy,
    /// Metrics listen address.
    pub metrics_listen: SocketAddr,
    /// Metrics settings.
    pub metrics: MetricsConfig,
    /// Health settings.
    pub health: HealthConfig,
    /// Retention of retired contexts.
    pub retention: Retention,
    /// Publication to the perf PMU module.
    pub kernel_pmu: KernelPmuConfig,
    /// Tenant counter pages.
    pub pages: PagesConfig,
    /// What tenants can make the daemon hold (`[limits]`).
    pub limits: Limits,
}

/// What the daemon writes to the device at start and after a reset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Programming {
    /// Trigger period in µs.
    pub period_us: Option<u64>,
    /// Dithering.
    pub dither: Option<bool>,
    /// Threshold.
    pub threshold: Option<u32>,
    /// Ring watermark.
    pub watermark: Option<u32>,
    /// Masks (ccu, word, bits).
    pub masks: Vec<(u32, u32, u32)>,
}

/// Who may see what.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TenantPolicy {
    /// Members of this group (primary or supplementary) are admins, like root.
    pub admin_gid: Option<u32>,
    /// VM → tenant mapping.
    pub tenants: Vec<TenantMap>,
}

/// One VM's tenant: a uid, a gid, or both (either matching grants access).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantMap {
    /// The VM.
    pub vm: VmId,
    /// Tenant user.
    pub uid: Option<u32>,
    /// Tenant group.
    pub gid: Option<u32>,
}

/// The retention policy of retired contexts (`[retired]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// Most retired instances kept (≥ 1).
    pub max_contexts: usize,
    /// Longest an instance is kept after its retirement, in seconds of
    /// device time (`None`: no age limit).
    pub max_age_s: Option<u64>,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            max_contexts: DEFAULT_MAX_CONTEXTS,
            max_age_s: None,
        }
    }
}

impl Retention {
    /// `max_age_s` in device cycles at `clock_khz`.
    pub fn max_age_cycles(&self, clock_khz: u32) -> Option<u64> {
        self.max_age_s
            .map(|s| s.saturating_mul(u64::from(clock_khz)).saturating_mul(1000))
    }

    /// How often a running daemon looks for instances that aged out while
    /// nothing retired (retirements trigger a check themselves): an eighth
    /// of the age limit, between 1 s and 60 s.
    pub fn age_check_period(&self) -> Option<Duration> {
        self.max_age_s
            .map(|s| Duration::from_secs(s.div_ceil(8).clamp(1, 60)))
    }
}

/// Default of `[metrics] max_contexts_per_vm`.
pub const DEFAULT_MAX_CONTEXTS_PER_VM: usize = 64;
/// Largest `[metrics] max_contexts_per_vm` (each exported instance is one
/// series per event: beyond this a scrape is megabytes per VM).
pub const MAX_MAX_CONTEXTS_PER_VM: usize = 4096;

/// Metrics settings (`[metrics]` besides the local listen address).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricsConfig {
    /// Per VM, context instances exported individually (the newest); the
    /// rest are counted in one cumulative `ctx="other"` series (bounded
    /// label cardinality).
    pub max_contexts_per_vm: usize,
    /// The authenticated listener, when configured.
    pub authenticated: Option<AuthenticatedListener>,
}

impl Default for MetricsConfig {
    /// 64 contexts per VM, no authenticated listener.
    fn default() -> Self {
        Self {
            max_contexts_per_vm: DEFAULT_MAX_CONTEXTS_PER_VM,
            authenticated: None,
        }
    }
}

/// `[metrics.authenticated]`, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthenticatedListener {
    /// Listen address.
    pub listen: SocketAddr,
    /// The exporter-toolkit web configuration file (absolute).
    pub web_config_file: PathBuf,
    /// Serve the per-VM and per-context families.
    pub tenant_series: bool,
}

/// Health reporting settings (`[health]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthConfig {
    /// Interval of the health summary (default 60 s).
    pub summary_interval: Duration,
    /// journald socket (default `/run/systemd/journal/socket`).
    pub journal_socket: PathBuf,
}

impl Default for HealthConfig {
    fn default() -> Self {
        Self {
            summary_interval: Duration::from_secs(60),
            journal_socket: PathBuf::from(DEFAULT_JOURNAL_SOCKET),
        }
    }
}
