//! `gpupmd.toml`: the daemon's configuration, read by the daemon and by
//! the admin tools (`gpupm health` finds the daemon's metrics endpoint and
//! node directory in the same file, checked the same way).
//!
//! Every key is optional (`#[serde(default)]`) and documented in the
//! commented example `daemon/gpupmd.toml`; unknown keys, wrong types,
//! out-of-range values and names that do not resolve (users, groups) are
//! rejected as `FILE:LINE:COL: reason`. A missing file is an error unless it
//! is the default path, which then means "all defaults".
//!
//! Files: this one (the file as written, loading, errors), `settings` (the
//! checked result), `resolve` (checking and resolving names).

mod kernel_pmu;
mod limits;
mod pages;
mod resolve;
mod settings;

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

pub use self::kernel_pmu::{
    KernelPmuSection, DEFAULT_DEVICE as DEFAULT_KERNEL_PMU_DEVICE,
    MAX_INTERVAL_MS as MAX_KERNEL_PMU_INTERVAL_MS,
};
pub use self::limits::{default as default_limits, Limits, LimitsSection};
pub use self::pages::{
    PagesConfig, PagesSection, DEFAULT_BACKSTOP_MS as DEFAULT_PAGE_BACKSTOP_MS,
    MAX_BACKSTOP_MS as MAX_PAGE_BACKSTOP_MS, MIN_BACKSTOP_MS as MIN_PAGE_BACKSTOP_MS,
};
use self::resolve::resolve;
pub use self::settings::{
    AuthenticatedListener, HealthConfig, KernelPmuConfig, MetricsConfig, Programming, Retention,
    Settings, TenantMap, TenantPolicy, DEFAULT_DRAIN_INTERVAL_MS, DEFAULT_MAX_CONTEXTS,
    DEFAULT_MAX_CONTEXTS_PER_VM, DEFAULT_TENANT_THREADS, MAX_DRAIN_INTERVAL_MS, MAX_MAX_CONTEXTS,
    MAX_MAX_CONTEXTS_PER_VM, MAX_TENANT_THREADS,
};
pub use crate::paths::DEFAULT_CONFIG as DEFAULT_PATH;
use crate::paths::{DEFAULT_JOURNAL_SOCKET, DEFAULT_NODE_DIR, DEFAULT_TENANT_DIR};

/// The file as written.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Directory of the device node (`card0`), or the CUSE character
    /// device itself (`/dev/gpupm0`).
    pub node_dir: PathBuf,
    /// Mount point of the tenant node.
    pub tenant_dir: PathBuf,
    /// Threads serving the tenant node.
    pub tenant_threads: Spanned<usize>,
    /// CPUs of the threads the device wakes (a `taskset -c` list).
    pub device_cpus: Option<Spanned<String>>,
    /// Where retired contexts' final totals are persisted.
    pub state_dir: PathBuf,
    /// Trigger programming.
    pub trigger: TriggerConfig,
    /// Stream-ring programming.
    pub stream: StreamConfig,
    /// CCU masks.
    pub mask: Vec<Spanned<MaskConfig>>,
    /// Delta samples kept per VM and per context.
    pub history_samples: Spanned<u32>,
    /// Admin group by id.
    pub admin_gid: Option<u32>,
    /// Admin group by name.
    pub admin_group: Option<Spanned<String>>,
    /// VM → tenant mapping.
    pub tenant: Vec<Spanned<TenantConfig>>,
    /// Metrics endpoint.
    pub metrics: MetricsSection,
    /// Health reporting.
    pub health: HealthSection,
    /// Retention of retired contexts.
    pub retired: RetiredSection,
    /// Publication to the perf PMU module.
    pub kernel_pmu: KernelPmuSection,
    /// Tenant counter pages.
    pub pages: PagesSection,
    /// What tenants can make the daemon hold.
    pub limits: LimitsSection,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            node_dir: PathBuf::from(DEFAULT_NODE_DIR),
            tenant_dir: PathBuf::from(DEFAULT_TENANT_DIR),
            tenant_threads: Spanned::new(0..0, DEFAULT_TENANT_THREADS.get()),
            device_cpus: None,
            state_dir: PathBuf::from("/var/lib/gpupm"),
            trigger: TriggerConfig::default(),
            stream: StreamConfig::default(),
            mask: Vec::new(),
            history_samples: Spanned::new(0..0, 256),
            admin_gid: None,
            admin_group: None,
            tenant: Vec::new(),
            metrics: MetricsSection::default(),
            health: HealthSection::default(),
            retired: RetiredSection::default(),
            kernel_pmu: KernelPmuSection::default(),
            pages: PagesSection::default(),
            limits: LimitsSection::default(),
        }
    }
}

/// `[retired]`: how many retired contexts' final totals are kept.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RetiredSection {
    /// Most retired context instances kept (the oldest are pruned).
    pub max_contexts: Spanned<u64>,
    /// Seconds of device time a retired instance is kept (unset: no limit).
    pub max_age_s: Option<Spanned<u64>>,
}

impl Default for RetiredSection {
    fn default() -> Self {
        RetiredSection {
            max_contexts: Spanned::new(0..0, DEFAULT_MAX_CONTEXTS as u64),
            max_age_s: None,
        }
    }
}

/// `[trigger]`: unset keys leave the device's setting alone.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TriggerConfig {
    /// Periodic trigger period in µs (0 disables periodic triggers).
    pub period_us: Option<Spanned<u64>>,
    /// Period dithering (P + R, R uniform in 0..=255 cycles).
    pub dither: Option<bool>,
    /// CCU threshold trigger value.
    pub threshold: Option<Spanned<u32>>,
}

/// `[stream]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct StreamConfig {
    /// Ring fill that raises the watermark interrupt (every ring).
    pub watermark: Option<Spanned<u32>>,
    /// Milliseconds between drains of every non-empty ring (0: only on
    /// interrupts).
    pub drain_interval_ms: Spanned<u64>,
}

impl Default for StreamConfig {
    fn default() -> Self {
        StreamConfig {
            watermark: None,
            drain_interval_ms: Spanned::new(0..0, DEFAULT_DRAIN_INTERVAL_MS),
        }
    }
}

/// `[[mask]]`: one CCU mask word.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct MaskConfig {
    /// CCU index.
    pub ccu: u32,
    /// Mask word index (counters `32 * word ..`).
    pub word: u32,
    /// Mask bits (1 = counter masked).
    pub bits: u32,
}

/// `[[tenant]]`. Every key keeps its place in the file, so that a refused
/// value is reported where it is written, not at the table's header.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    /// VM id.
    pub vm: Spanned<u32>,
    /// Tenant user id.
    pub uid: Option<Spanned<u32>>,
    /// Tenant user name.
    pub user: Option<Spanned<String>>,
    /// Tenant group id.
    pub gid: Option<Spanned<u32>>,
    /// Tenant group name.
    pub group: Option<Spanned<String>>,
}

/// `[metrics]`: the local listener (device and daemon health, no
/// tenant's series, no authentication) and the bound of context series.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsSection {
    /// Listen address of the local listener (loopback expected).
    pub listen: SocketAddr,
    /// Context instances exported individually per VM.
    pub max_contexts_per_vm: Spanned<usize>,
    /// The authenticated listener, for a remote Prometheus.
    pub authenticated: Option<Spanned<AuthenticatedSection>>,
}

impl Default for MetricsSection {
    fn default() -> Self {
        MetricsSection {
            listen: SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9477)),
            max_contexts_per_vm: Spanned::new(0..0, DEFAULT_MAX_CONTEXTS_PER_VM),
            authenticated: None,
        }
    }
}

/// `[metrics.authenticated]`: a listener behind the exporter-toolkit web
/// configuration (TLS, client certificates, basic auth), the only one that
/// may serve tenants' series.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AuthenticatedSection {
    /// Listen address.
    pub listen: Spanned<SocketAddr>,
    /// The web configuration file (YAML; relative to this file's directory).
    pub web_config_file: Spanned<PathBuf>,
    /// Serve the per-VM and per-context families (needs client
    /// authentication in the web configuration).
    #[serde(default)]
    pub tenant_series: bool,
}

/// `[health]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct HealthSection {
    /// Seconds between health summaries.
    pub summary_interval_s: Spanned<u64>,
    /// journald socket.
    pub journal_socket: PathBuf,
}

impl Default for HealthSection {
    fn default() -> Self {
        HealthSection {
            summary_interval_s: Spanned::new(0..0, 60),
            journal_socket: PathBuf::from(DEFAULT_JOURNAL_SOCKET),
        }
    }
}

/// Why the configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: cannot read the configuration")]
    Read {
        /// File.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is malformed or a value is refused.
    #[error("{path}:{line}:{col}: {reason}")]
    Invalid {
        /// File.
        path: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        col: usize,
        /// What is wrong.
        reason: String,
    },
}

/// Loads `path`, or the default path when `None` (absent = all defaults).
pub fn load(path: Option<&Path>) -> Result<Settings, ConfigError> {
    let (file, explicit) = match path {
        Some(p) => (p.to_path_buf(), true),
        None => (PathBuf::from(DEFAULT_PATH), false),
    };
    match std::fs::read_to_string(&file) {
        Ok(text) => parse(&file, &text),
        Err(e) if !explicit && e.kind() == std::io::ErrorKind::NotFound => {
            resolve(Config::default(), None, "")
        }
        Err(source) => Err(ConfigError::Read {
            path: file.display().to_string(),
            source,
        }),
    }
}

/// Parses and resolves the text of `file`.
pub fn parse(file: &Path, text: &str) -> Result<Settings, ConfigError> {
    let cfg: Config = toml::from_str(text).map_err(|e| {
        let span = e.span().unwrap_or(0..0);
        invalid(file, text, &span, e.message().to_string())
    })?;
    resolve(cfg, Some(file), text)
}

pub(crate) fn invalid(file: &Path, text: &str, span: &Range<usize>, reason: String) -> ConfigError {
    let (line, col) = line_col(text, span.start);
    ConfigError::Invalid {
        path: file.display().to_string(),
        line,
        col,
        reason,
    }
}

/// 1-based line and column (in characters) of byte offset `at`.
fn line_col(text: &str, at: usize) -> (usize, usize) {
    let at = at.min(text.len());
    let before = text.get(..at).unwrap_or("");
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn parse_str(text: &str) -> Result<Settings, ConfigError> {
        parse(Path::new("t.toml"), text)
    }

    fn position(e: ConfigError) -> (usize, usize, String) {
        match e {
            ConfigError::Invalid {
                line, col, reason, ..
            } => (line, col, reason),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn empty_file_means_defaults() {
        let s = parse_str("").unwrap();
        assert_eq!(s.node_dir, PathBuf::from("/run/gpupm/dev"));
        assert_eq!(s.history_samples, 256);
        assert_eq!(s.tenant_threads, DEFAULT_TENANT_THREADS);
        assert_eq!(s.metrics_listen.to_string(), "127.0.0.1:9477");
        assert_eq!(s.metrics.max_contexts_per_vm, 64);
        assert_eq!(s.health.summary_interval, Duration::from_secs(60));
        assert_eq!(s.program, Programming::default());
        assert_eq!(s.retention, Retention::default());
    }

    #[test]
    fn retention_limits_are_checked_where_they_are_written() {
        let s = parse_str("[retired]\nmax_contexts = 5\nmax_age_s = 3600\n").unwrap();
        assert_eq!(
            s.retention,
            Retention {
                max_contexts: 5,
                max_age_s: Some(3600)
            }
        );
        let (line, col, reason) = position(parse_str("[retired]\nmax_contexts = 0\n").unwrap_err());
        assert_eq!((line, col), (2, 16));
        assert!(reason.contains("max_contexts"), "{reason}");
        let (line, _, reason) =
            position(parse_str("[retired]\nmax_contexts = 2\nmax_age_s = 0\n").unwrap_err());
        assert_eq!(line, 3);
        assert!(reason.contains("max_age_s"), "{reason}");
        assert!(parse_str("[retired]\nmax_context = 5\n").is_err());
    }

    #[test]
    fn unknown_key_is_reported_with_line_and_column() {
        let (line, col, reason) =
            position(parse_str("node_dir = \"/x\"\n[trigger]\nperiod = 5\n").unwrap_err());
        assert_eq!((line, col), (3, 1));
        assert!(reason.contains("unknown field"), "{reason}");
    }

    #[test]
    fn out_of_range_values_point_at_the_value() {
        let (line, col, _) = position(parse_str("[stream]\nwatermark = 0\n").unwrap_err());
        assert_eq!((line, col), (2, 13));
        let (line, _, reason) = position(parse_str("\n[trigger]\nthreshold = 5\n").unwrap_err());
        assert_eq!(line, 3);
        assert!(reason.contains("threshold"));
        for bad in ["tenant_threads = 0\n", "tenant_threads = 65\n"] {
            let (line, col, reason) = position(parse_str(bad).unwrap_err());
            assert_eq!((line, col), (1, 18), "{bad}");
            assert!(reason.contains("tenant_threads"), "{reason}");
        }
        assert_eq!(
            parse_str("tenant_threads = 3\n")
                .unwrap()
                .tenant_threads
                .get(),
            3
        );
    }

    #[test]
    fn device_cpus_are_a_cpu_list_refused_where_written() {
        assert_eq!(parse_str("").unwrap().device_cpus, None);
        let s = parse_str("device_cpus = \"0,2-3\"\n").unwrap();
        assert_eq!(s.device_cpus.unwrap().cpus(), [0, 2, 3]);
        for bad in [
            "device_cpus = \"\"\n",
            "device_cpus = \"2-1\"\n",
            "device_cpus = \"a\"\n",
            "device_cpus = \"99999\"\n",
        ] {
            let (line, col, reason) = position(parse_str(bad).unwrap_err());
            assert_eq!((line, col), (1, 15), "{bad}");
            assert!(reason.contains("device_cpus"), "{reason}");
        }
    }

    #[test]
    fn tenants_resolve_names_and_need_an_identity() {
        let s = parse_str("[[tenant]]\nvm = 2\nuser = \"root\"\ngroup = \"root\"\n").unwrap();
        assert_eq!(
            s.policy.tenants,
            vec![TenantMap {
                vm: 2,
                uid: Some(0),
                gid: Some(0)
            }]
        );
        assert!(parse_str("[[tenant]]\nvm = 2\n").is_err());
        assert!(parse_str("[[tenant]]\nvm = 99\nuid = 5\n").is_err());
    }

    #[test]
    fn a_refused_tenant_key_is_reported_where_it_is_written() {
        let at = |text: &str| {
            let (line, col, reason) = position(parse_str(text).unwrap_err());
            (line, col, reason)
        };
        let two = "[[tenant]]\nvm = 1\nuid = 5\n\n[[tenant]]\nvm = 2\n";
        let (line, col, reason) = at(&format!("{two}user = \"no-such-user-gpupm\"\n"));
        assert_eq!((line, col), (7, 8), "{reason}");
        assert!(reason.contains("no user named"), "{reason}");
        let (line, col, reason) = at(&format!("{two}  group = \"no-such-group-gpupm\"\n"));
        assert_eq!((line, col), (7, 11), "{reason}");
        assert!(reason.contains("no group named"), "{reason}");
        let (line, col, reason) = at(&format!("{two}uid = 7\nuser = \"root\"\n"));
        assert_eq!((line, col), (8, 8), "{reason}");
        assert!(reason.contains("not both"), "{reason}");
        let (line, col, reason) = at(&format!("{two}gid = 7\ngroup = \"root\"\n"));
        assert_eq!((line, col), (8, 9), "{reason}");
        assert!(reason.contains("not both"), "{reason}");
        let (line, col, reason) = at("[[tenant]]\nuid = 5\nvm = 64\n");
        assert_eq!((line, col), (3, 6), "{reason}");
        assert!(reason.contains("vm must lie"), "{reason}");
        // Nothing to point at but the table when no identity is given.
        let (line, _, reason) = at(two);
        assert_eq!(line, 5, "{reason}");
        assert!(reason.contains("needs uid, user, gid or group"), "{reason}");
    }

    #[test]
    fn the_authenticated_metrics_listener_is_explicit_and_its_file_resolved_here() {
        let s = parse_str("").unwrap();
        assert_eq!(s.metrics.authenticated, None);
        let s = parse(
            Path::new("/etc/gpupm/gpupmd.toml"),
            "[metrics.authenticated]\nlisten = \"[::]:9478\"\nweb_config_file = \"metrics-web.yml\"\n",
        )
        .unwrap();
        assert_eq!(
            s.metrics.authenticated,
            Some(AuthenticatedListener {
                listen: "[::]:9478".parse().unwrap(),
                web_config_file: PathBuf::from("/etc/gpupm/metrics-web.yml"),
                tenant_series: false,
            })
        );
        let s = parse_str(
            "[metrics]\nlisten = \"127.0.0.1:1\"\n[metrics.authenticated]\nlisten = \"127.0.0.1:2\"\nweb_config_file = \"/w.yml\"\ntenant_series = true\n",
        )
        .unwrap();
        assert!(s.metrics.authenticated.unwrap().tenant_series);
        // No listener without its web configuration, nor on the local one's
        // address; unknown keys refused where written.
        let (line, _, reason) =
            position(parse_str("[metrics.authenticated]\nlisten = \"[::]:9478\"\n").unwrap_err());
        assert_eq!(line, 1, "{reason}");
        assert!(reason.contains("web_config_file"), "{reason}");
        let (line, col, reason) = position(
            parse_str(
                "[metrics.authenticated]\nlisten = \"127.0.0.1:9477\"\nweb_config_file = \"/w\"\n",
            )
            .unwrap_err(),
        );
        assert_eq!((line, col), (2, 10), "{reason}");
        let (line, col, reason) = position(
            parse_str("[metrics.authenticated]\nlisten = \"[::]:1\"\nweb_config_file = \"/w\"\nbasic_auth = 1\n")
                .unwrap_err(),
        );
        assert_eq!((line, col), (4, 1), "{reason}");
        let (line, col, reason) =
            position(parse_str("[metrics]\nmax_contexts_per_vm = 5000\n").unwrap_err());
        assert_eq!((line, col), (2, 23), "{reason}");
    }

    #[test]
    fn the_periodic_drain_interval_is_checked_and_zero_turns_it_off() {
        assert_eq!(
            parse_str("").unwrap().drain_interval,
            Some(Duration::from_millis(DEFAULT_DRAIN_INTERVAL_MS))
        );
        assert_eq!(
            parse_str("[stream]\ndrain_interval_ms = 250\n")
                .unwrap()
                .drain_interval,
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            parse_str("[stream]\ndrain_interval_ms = 0\n")
                .unwrap()
                .drain_interval,
            None
        );
        let (line, col, reason) =
            position(parse_str("[stream]\ndrain_interval_ms = 60001\n").unwrap_err());
        assert_eq!((line, col), (2, 21));
        assert!(reason.contains("drain_interval_ms"), "{reason}");
    }
}
