//! `gpupmd.toml`: the daemon's configuration.
//!
//! Every key is optional (`#[serde(default)]`) and documented in the
//! commented example `daemon/gpupmd.toml`; unknown keys, wrong types,
//! out-of-range values and names that do not resolve (users, groups) are
//! rejected as `FILE:LINE:COL: reason`. A missing file is an error unless it
//! is the default path, which then means "all defaults".

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::num::NonZeroUsize;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gpupm_uapi::layout::STREAM_RING_MAX;
use gpupm_uapi::regs::{MAX_CCUS, MAX_VMS, TRIG_THRESHOLD_MAX, TRIG_THRESHOLD_MIN};
use serde::Deserialize;
use toml::Spanned;

use crate::health::HealthConfig;
use crate::kernel_pmu::{KernelPmuConfig, KernelPmuSection};
use crate::metrics::MetricsConfig;
use crate::store::retention::{Retention, DEFAULT_MAX_CONTEXTS, MAX_MAX_CONTEXTS};
use crate::tenant::{TenantMap, TenantPolicy, DEFAULT_THREADS};

/// Path read when `--config` is not given.
pub const DEFAULT_PATH: &str = "/etc/gpupm/gpupmd.toml";
/// Upper bound of `tenant_threads` (each thread reserves a 16 MiB request
/// buffer; more threads than concurrent requests only cost memory).
pub const MAX_TENANT_THREADS: usize = 64;
/// Admin group looked up when neither `admin_gid` nor `admin_group` is set.
pub const DEFAULT_ADMIN_GROUP: &str = "gpupm-admin";

/// The file as written.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Directory of the device node (`card0`).
    pub node_dir: PathBuf,
    /// Mount point of the tenant node.
    pub tenant_dir: PathBuf,
    /// Threads serving the tenant node.
    pub tenant_threads: Spanned<usize>,
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
}

impl Default for Config {
    fn default() -> Self {
        Config {
            node_dir: PathBuf::from("/run/gpupm/dev"),
            tenant_dir: PathBuf::from("/run/gpupm/tenant"),
            tenant_threads: Spanned::new(0..0, DEFAULT_THREADS.get()),
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
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct StreamConfig {
    /// Ring fill that raises the watermark interrupt (every ring).
    pub watermark: Option<Spanned<u32>>,
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

/// `[[tenant]]`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    /// VM id.
    pub vm: u32,
    /// Tenant user id.
    pub uid: Option<u32>,
    /// Tenant user name.
    pub user: Option<String>,
    /// Tenant group id.
    pub gid: Option<u32>,
    /// Tenant group name.
    pub group: Option<String>,
}

/// `[metrics]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsSection {
    /// Listen address (loopback expected).
    pub listen: SocketAddr,
    /// Contexts exported individually per VM.
    pub max_contexts_per_vm: usize,
}

impl Default for MetricsSection {
    fn default() -> Self {
        MetricsSection {
            listen: SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9477)),
            max_contexts_per_vm: 64,
        }
    }
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
            journal_socket: PathBuf::from("/run/systemd/journal/socket"),
        }
    }
}

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
    /// State directory.
    pub state_dir: PathBuf,
    /// Device programming.
    pub program: Programming,
    /// Delta samples kept per scope.
    pub history_samples: usize,
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

fn invalid(file: &Path, text: &str, span: &Range<usize>, reason: String) -> ConfigError {
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

fn resolve(cfg: Config, file: Option<&Path>, text: &str) -> Result<Settings, ConfigError> {
    let shown = file.unwrap_or(Path::new(DEFAULT_PATH));
    let err = |span: Range<usize>, reason: String| invalid(shown, text, &span, reason);

    if let Some(p) = &cfg.trigger.period_us {
        if *p.get_ref() > u64::from(u32::MAX) {
            return Err(err(
                p.span(),
                format!("period_us {} is too large", p.get_ref()),
            ));
        }
    }
    if let Some(t) = &cfg.trigger.threshold {
        if !(TRIG_THRESHOLD_MIN..=TRIG_THRESHOLD_MAX).contains(t.get_ref()) {
            return Err(err(
                t.span(),
                format!("threshold must lie in {TRIG_THRESHOLD_MIN}..={TRIG_THRESHOLD_MAX}"),
            ));
        }
    }
    if let Some(w) = &cfg.stream.watermark {
        if !(1..=STREAM_RING_MAX).contains(w.get_ref()) {
            return Err(err(
                w.span(),
                format!("watermark must lie in 1..={STREAM_RING_MAX}"),
            ));
        }
    }
    let mut masks = Vec::new();
    for m in &cfg.mask {
        if m.get_ref().ccu >= MAX_CCUS {
            return Err(err(m.span(), format!("ccu must be below {MAX_CCUS}")));
        }
        masks.push((m.get_ref().ccu, m.get_ref().word, m.get_ref().bits));
    }
    let history = *cfg.history_samples.get_ref();
    if history == 0 || history > 65_536 {
        return Err(err(
            cfg.history_samples.span(),
            "history_samples must lie in 1..=65536".into(),
        ));
    }
    let max_contexts = *cfg.retired.max_contexts.get_ref();
    let max_contexts = usize::try_from(max_contexts)
        .ok()
        .filter(|n| (1..=MAX_MAX_CONTEXTS).contains(n))
        .ok_or_else(|| {
            err(
                cfg.retired.max_contexts.span(),
                format!("max_contexts must lie in 1..={MAX_MAX_CONTEXTS}"),
            )
        })?;
    if let Some(age) = &cfg.retired.max_age_s {
        if *age.get_ref() == 0 {
            return Err(err(
                age.span(),
                "max_age_s must be at least 1 (leave it out for no age limit)".into(),
            ));
        }
    }
    let tenant_threads = NonZeroUsize::new(*cfg.tenant_threads.get_ref())
        .filter(|n| n.get() <= MAX_TENANT_THREADS)
        .ok_or_else(|| {
            err(
                cfg.tenant_threads.span(),
                format!("tenant_threads must lie in 1..={MAX_TENANT_THREADS}"),
            )
        })?;
    let kernel_pmu = cfg
        .kernel_pmu
        .resolve()
        .map_err(|(span, why)| err(span, why))?;
    let interval = *cfg.health.summary_interval_s.get_ref();
    if interval == 0 {
        return Err(err(
            cfg.health.summary_interval_s.span(),
            "summary_interval_s must be at least 1".into(),
        ));
    }

    let admin_gid = match (&cfg.admin_gid, &cfg.admin_group) {
        (Some(_), Some(g)) => {
            return Err(err(
                g.span(),
                "give admin_gid or admin_group, not both".into(),
            ))
        }
        (Some(gid), None) => Some(*gid),
        (None, Some(g)) => Some(
            group_id(g.get_ref())
                .ok_or_else(|| err(g.span(), format!("no group named {:?}", g.get_ref())))?,
        ),
        (None, None) => group_id(DEFAULT_ADMIN_GROUP),
    };
    let mut tenants = Vec::new();
    for t in &cfg.tenant {
        let span = t.span();
        let t = t.get_ref();
        if !(1..MAX_VMS).contains(&t.vm) {
            return Err(err(span, format!("vm must lie in 1..{MAX_VMS}")));
        }
        let uid = match (t.uid, &t.user) {
            (Some(_), Some(_)) => return Err(err(span, "give uid or user, not both".into())),
            (Some(u), None) => Some(u),
            (None, Some(name)) => Some(
                user_id(name)
                    .ok_or_else(|| err(span.clone(), format!("no user named {name:?}")))?,
            ),
            (None, None) => None,
        };
        let gid = match (t.gid, &t.group) {
            (Some(_), Some(_)) => return Err(err(span, "give gid or group, not both".into())),
            (Some(g), None) => Some(g),
            (None, Some(name)) => Some(
                group_id(name)
                    .ok_or_else(|| err(span.clone(), format!("no group named {name:?}")))?,
            ),
            (None, None) => None,
        };
        if uid.is_none() && gid.is_none() {
            return Err(err(span, "a tenant needs uid, user, gid or group".into()));
        }
        tenants.push(TenantMap { vm: t.vm, uid, gid });
    }

    Ok(Settings {
        source: file.map(Path::to_path_buf),
        node_dir: cfg.node_dir,
        tenant_dir: cfg.tenant_dir,
        tenant_threads,
        state_dir: cfg.state_dir,
        program: Programming {
            period_us: cfg.trigger.period_us.map(|p| *p.get_ref()),
            dither: cfg.trigger.dither,
            threshold: cfg.trigger.threshold.map(|t| *t.get_ref()),
            watermark: cfg.stream.watermark.map(|w| *w.get_ref()),
            masks,
        },
        history_samples: history as usize,
        policy: TenantPolicy { admin_gid, tenants },
        metrics_listen: cfg.metrics.listen,
        metrics: MetricsConfig {
            max_contexts_per_vm: cfg.metrics.max_contexts_per_vm,
        },
        health: HealthConfig {
            summary_interval: Duration::from_secs(interval),
            journal_socket: cfg.health.journal_socket,
        },
        retention: Retention {
            max_contexts,
            max_age_s: cfg.retired.max_age_s.map(|a| *a.get_ref()),
        },
        kernel_pmu,
    })
}

fn group_id(name: &str) -> Option<u32> {
    nix::unistd::Group::from_name(name)
        .ok()
        .flatten()
        .map(|g| g.gid.as_raw())
}

fn user_id(name: &str) -> Option<u32> {
    nix::unistd::User::from_name(name)
        .ok()
        .flatten()
        .map(|u| u.uid.as_raw())
}

#[cfg(test)]
mod tests {
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
        assert_eq!(s.tenant_threads, DEFAULT_THREADS);
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
        assert!(parse_str("[[tenant]]\nvm = 2\nuser = \"no-such-user-gpupm\"\n").is_err());
        assert!(parse_str("[[tenant]]\nvm = 99\nuid = 5\n").is_err());
    }

    #[test]
    fn full_example_file_parses() {
        let text = include_str!("../gpupmd.toml");
        let s = parse_str(text).unwrap();
        assert_eq!(s.program.masks.len(), 1);
        assert_eq!(s.retention.max_contexts, DEFAULT_MAX_CONTEXTS);
        assert_eq!(s.kernel_pmu, KernelPmuConfig::default());
    }
}
