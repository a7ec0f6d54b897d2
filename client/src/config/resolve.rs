//! Checking the file's values against the device's limits and resolving
//! user and group names, each refusal pointing at the value.

use std::num::NonZeroUsize;
use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use gpupm_uapi::layout::STREAM_RING_MAX;
use gpupm_uapi::regs::{MAX_CCUS, MAX_VMS, TRIG_THRESHOLD_MAX, TRIG_THRESHOLD_MIN};
use toml::Spanned;

use super::settings::{
    AuthenticatedListener, HealthConfig, MetricsConfig, Programming, Retention, Settings,
    TenantMap, TenantPolicy, MAX_DRAIN_INTERVAL_MS, MAX_MAX_CONTEXTS, MAX_MAX_CONTEXTS_PER_VM,
    MAX_TENANT_THREADS,
};
use super::{invalid, Config, ConfigError, DEFAULT_PATH};
use crate::cpus::CpuList;
use crate::paths::DEFAULT_ADMIN_GROUP;

pub(super) fn resolve(
    cfg: Config,
    file: Option<&Path>,
    text: &str,
) -> Result<Settings, ConfigError> {
    let shown = file.unwrap_or(Path::new(DEFAULT_PATH));
    let err = |span: Range<usize>, reason: String| invalid(shown, text, &span, reason);

    let program = programming(&cfg, &err)?;
    let history = *cfg.history_samples.get_ref();
    if history == 0 || history > 65_536 {
        return Err(err(
            cfg.history_samples.span(),
            "history_samples must lie in 1..=65536".into(),
        ));
    }
    let retention = retention(&cfg, &err)?;
    let device_cpus = cfg
        .device_cpus
        .as_ref()
        .map(|l| {
            l.get_ref()
                .parse::<CpuList>()
                .map_err(|e| err(l.span(), format!("device_cpus: {e}")))
        })
        .transpose()?;
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
    let pages = cfg.pages.resolve().map_err(|(span, why)| err(span, why))?;
    let limits = cfg.limits.resolve().map_err(|(span, why)| err(span, why))?;
    let interval = *cfg.health.summary_interval_s.get_ref();
    if interval == 0 {
        return Err(err(
            cfg.health.summary_interval_s.span(),
            "summary_interval_s must be at least 1".into(),
        ));
    }

    let drain_interval = drain_interval(&cfg, &err)?;

    let policy = policy(&cfg, &err)?;
    let metrics = metrics(&cfg, file, &err)?;

    Ok(Settings {
        source: file.map(Path::to_path_buf),
        node_dir: cfg.node_dir,
        tenant_dir: cfg.tenant_dir,
        tenant_threads,
        device_cpus,
        state_dir: cfg.state_dir,
        program,
        history_samples: history as usize,
        drain_interval,
        policy,
        metrics_listen: cfg.metrics.listen,
        metrics,
        health: HealthConfig {
            summary_interval: Duration::from_secs(interval),
            journal_socket: cfg.health.journal_socket,
        },
        retention,
        kernel_pmu,
        pages,
        limits,
    })
}

/// How a refusal is made: the value's span and the reason.
type Refuse<'a> = dyn Fn(Range<usize>, String) -> ConfigError + 'a;

/// The retired-context limits: a count in `1..=MAX_MAX_CONTEXTS`, an age
/// of at least a second when given.
fn retention(cfg: &Config, err: &Refuse<'_>) -> Result<Retention, ConfigError> {
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
    Ok(Retention {
        max_contexts,
        max_age_s: cfg.retired.max_age_s.as_ref().map(|a| *a.get_ref()),
    })
}

/// `[metrics]`: the bound of context series, and the authenticated
/// listener with its web configuration file made absolute (relative to the
/// configuration file's directory, as exporter-toolkit resolves the paths
/// inside a web configuration).
fn metrics(
    cfg: &Config,
    file: Option<&Path>,
    err: &Refuse<'_>,
) -> Result<MetricsConfig, ConfigError> {
    let max = &cfg.metrics.max_contexts_per_vm;
    if *max.get_ref() > MAX_MAX_CONTEXTS_PER_VM {
        return Err(err(
            max.span(),
            format!("max_contexts_per_vm must lie in 0..={MAX_MAX_CONTEXTS_PER_VM}"),
        ));
    }
    let authenticated = match &cfg.metrics.authenticated {
        None => None,
        Some(section) => {
            let a = section.get_ref();
            let listen = *a.listen.get_ref();
            let local = cfg.metrics.listen;
            if listen.port() != 0 && listen == local {
                return Err(err(
                    a.listen.span(),
                    format!("the authenticated listener cannot share the local listener's address {local}"),
                ));
            }
            let path = a.web_config_file.get_ref();
            if path.as_os_str().is_empty() {
                return Err(err(
                    a.web_config_file.span(),
                    "web_config_file must name a file".into(),
                ));
            }
            let web_config_file = match file.and_then(Path::parent) {
                Some(dir) if path.is_relative() => dir.join(path),
                _ => path.clone(),
            };
            Some(AuthenticatedListener {
                listen,
                web_config_file,
                tenant_series: a.tenant_series,
            })
        }
    };
    Ok(MetricsConfig {
        max_contexts_per_vm: *max.get_ref(),
        authenticated,
    })
}

/// The stream drain interval: `None` (0, drain on interrupts only) or at
/// most `MAX_DRAIN_INTERVAL_MS`.
fn drain_interval(cfg: &Config, err: &Refuse<'_>) -> Result<Option<Duration>, ConfigError> {
    let drain_ms = *cfg.stream.drain_interval_ms.get_ref();
    if drain_ms > MAX_DRAIN_INTERVAL_MS {
        return Err(err(
            cfg.stream.drain_interval_ms.span(),
            format!("drain_interval_ms must lie in 0..={MAX_DRAIN_INTERVAL_MS}"),
        ));
    }
    Ok((drain_ms > 0).then(|| Duration::from_millis(drain_ms)))
}

/// What the daemon writes to the device, each value within the device's
/// limits.
fn programming(cfg: &Config, err: &Refuse<'_>) -> Result<Programming, ConfigError> {
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
    Ok(Programming {
        period_us: cfg.trigger.period_us.as_ref().map(|p| *p.get_ref()),
        dither: cfg.trigger.dither,
        threshold: cfg.trigger.threshold.as_ref().map(|t| *t.get_ref()),
        watermark: cfg.stream.watermark.as_ref().map(|w| *w.get_ref()),
        masks,
    })
}

/// Who may see what: the admin group and the VM → tenant mapping, names
/// resolved to ids.
fn policy(cfg: &Config, err: &Refuse<'_>) -> Result<TenantPolicy, ConfigError> {
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
        let table = t.span();
        let t = t.get_ref();
        let vm = *t.vm.get_ref();
        if !(1..MAX_VMS).contains(&vm) {
            return Err(err(t.vm.span(), format!("vm must lie in 1..{MAX_VMS}")));
        }
        let uid = identity(&t.uid, &t.user, "uid", "user", user_id, err)?;
        let gid = identity(&t.gid, &t.group, "gid", "group", group_id, err)?;
        if uid.is_none() && gid.is_none() {
            return Err(err(table, "a tenant needs uid, user, gid or group".into()));
        }
        tenants.push(TenantMap { vm, uid, gid });
    }

    Ok(TenantPolicy { admin_gid, tenants })
}

/// A tenant's user (or group): by id or by name, not both; a name that
/// does not resolve is refused where it is written.
fn identity(
    id: &Option<Spanned<u32>>,
    name: &Option<Spanned<String>>,
    id_key: &str,
    name_key: &str,
    lookup: fn(&str) -> Option<u32>,
    err: &Refuse<'_>,
) -> Result<Option<u32>, ConfigError> {
    match (id, name) {
        (Some(_), Some(n)) => Err(err(
            n.span(),
            format!("give {id_key} or {name_key}, not both"),
        )),
        (Some(id), None) => Ok(Some(*id.get_ref())),
        (None, Some(n)) => lookup(n.get_ref())
            .map(Some)
            .ok_or_else(|| err(n.span(), format!("no {name_key} named {:?}", n.get_ref()))),
        (None, None) => Ok(None),
    }
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
