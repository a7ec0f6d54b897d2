//! gpupmd: programs the gpupm device, runs its context-switch handshakes,
//! keeps every count and serves tenants.
//!
//! One instance at a time: before it touches anything (the device, the
//! state directory, the pages, the tenant mount) the daemon takes an
//! exclusive lock on `STATE_DIR/gpupmd.lock` holding its pid and device
//! node directory; a second daemon with the same state directory exits
//! with `gpupmd already running as pid N for NODE_DIR`. Before even that,
//! it checks who may change its configuration file (it holds the tenant
//! map) and refuses one someone but root and its own user may change.
//!
//! `--check-config` reads and checks the configuration as a start would
//! (syntax, values, who may change the file, tenant users and groups,
//! `device_cpus`, the authenticated metrics listener's web configuration),
//! prints what it would serve and exits, touching nothing.
//!
//! Exit status: 0 after a clean shutdown (SIGTERM/SIGINT) or a good
//! `--check-config`, 2 for a configuration the daemon refuses (malformed
//! file, one someone but root and the daemon's user may change, an
//! incompatible device ABI, a value the device rejects, a metrics web
//! configuration it cannot use), 1 for any other failure (another
//! instance running included).

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use gpupm_client::cpus::UnusableCpus;
use gpupm_client::instance::{InstanceError, InstanceLock};
use gpupm_client::{DevError, DevNode};
use gpupmd::config::{self, ConfigError, Settings};
use gpupmd::config_access::{self, Exposure};
use gpupmd::engine::{program, Engine, EngineError};
use gpupmd::health::DaemonHealth;
use gpupmd::mirror::DeviceMirror;
use gpupmd::pages::{self, PageServer, Pages, Refresher};
use gpupmd::planes::Planes;
use gpupmd::stop_signals::{SignalError, StopSignals};
use gpupmd::store::events::TableEvents;
use gpupmd::store::retired::{RetiredError, RetiredStore};
use gpupmd::store::{retention, Store};
use gpupmd::tenant::bounds::Bounds;
use gpupmd::tenant::{Served, TenantError, TenantNode, TENANT_FDNAME};
use gpupmd::view::{CounterView, DeviceIdentity, HealthSource};
use gpupmd::worker::Worker;
use gpupmd::{health, kernel_pmu, metrics};
use sd_notify::NotifyState;

/// The gpupm privileged daemon.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Configuration file (default /etc/gpupm/gpupmd.toml; absent = defaults).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Check the configuration, print what it sets up, and exit (0: good,
    /// 2: refused) without touching the device or any file.
    #[arg(long)]
    check_config: bool,
}

/// The lock file in the state directory.
const LOCK_FILE: &str = "gpupmd.lock";

/// Why the daemon stopped.
#[derive(Debug, thiserror::Error)]
enum MainError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Device(#[from] DevError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error("cannot open the state directory")]
    State(#[from] RetiredError),
    #[error(transparent)]
    Tenant(#[from] TenantError),
    #[error(transparent)]
    Metrics(#[from] metrics::MetricsError),
    #[error("cannot start a thread")]
    Runtime(#[source] std::io::Error),
    #[error(transparent)]
    Signals(#[from] SignalError),
    #[error("the device engine stopped (see the errors above)")]
    EngineDied,
    #[error("device_cpus")]
    Cpus(#[source] UnusableCpus),
    #[error(transparent)]
    Instance(#[from] InstanceError),
    #[error("cannot create the state directory {}", .0.display())]
    StateDir(PathBuf, #[source] std::io::Error),
}

impl MainError {
    fn exit_code(&self) -> u8 {
        match self {
            MainError::Config(_)
            | MainError::Cpus(UnusableCpus::NotAllowed(_))
            | MainError::Engine(EngineError::AbiMismatch { .. })
            | MainError::Engine(EngineError::NotAGpupmDevice(_))
            | MainError::Engine(EngineError::Refused { .. })
            | MainError::Engine(EngineError::PeriodTooLong { .. }) => 2,
            MainError::Metrics(e) if e.is_config() => 2,
            _ => 1,
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let settings = match config::load(args.config.as_deref()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("gpupmd: {}", gpupm_fusemount::logging::one_line(e));
            return ExitCode::from(2);
        }
    };
    if args.check_config {
        return check_config(&settings);
    }
    // Before any thread starts, so that every thread inherits the mask.
    let signals = match StopSignals::take() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("gpupmd: {}", gpupm_fusemount::logging::one_line(e));
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = health::init_logging(&settings.health) {
        eprintln!("gpupmd: {}", gpupm_fusemount::logging::one_line(e));
    }
    // Before anything is started: the file decides who sees which VM.
    match check_access(&settings) {
        Ok(Some((path, mode))) => health::config_readable(path, mode),
        Ok(None) => {}
        Err(msg) => {
            tracing::error!(error = %msg, "gpupmd refuses its configuration");
            eprintln!("gpupmd: {msg}");
            return ExitCode::from(2);
        }
    }
    // The tenant node's descriptor, when systemd passes one (gpupmd.service
    // mounts the node with gpupm-mount; the sandboxed daemon could not).
    // Taken before the runtime starts threads: it unsets LISTEN_*.
    let inherited_tenant = gpupm_fusemount::inherited_fd(TENANT_FDNAME);
    health::startup(
        env!("CARGO_PKG_VERSION"),
        settings
            .source
            .as_deref()
            .unwrap_or(std::path::Path::new("(built-in defaults)")),
    );
    // Held until the daemon exits; nothing is touched before it.
    let result = take_lock(&settings).and_then(|_lock| run(settings, inherited_tenant, signals));
    match result {
        Ok(()) => {
            tracing::info!("gpupmd stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            let code = e.exit_code();
            let msg = gpupm_fusemount::logging::one_line(e);
            tracing::error!(error = %msg, "gpupmd failed");
            eprintln!("gpupmd: {msg}");
            notify(&[NotifyState::Status(&format!("failed: {msg}"))]);
            ExitCode::from(code)
        }
    }
}

/// The instance lock in the state directory (created owner-only when
/// missing, as the unit's `StateDirectoryMode=0700`).
fn take_lock(settings: &Settings) -> Result<InstanceLock, MainError> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = &settings.state_dir;
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => {}
        Err(e) => return Err(MainError::StateDir(dir.clone(), e)),
    }
    let lock = InstanceLock::acquire(
        &dir.join(LOCK_FILE),
        &settings.node_dir.display().to_string(),
    )?;
    tracing::debug!(lock = %lock.path().display(), "instance lock taken");
    Ok(lock)
}

/// Who may change and read the configuration file: `Ok(Some(..))` names
/// a file every local user may read, `Err` the refusal, as a message.
fn check_access(settings: &Settings) -> Result<Option<(&std::path::Path, u32)>, String> {
    let Some(path) = settings.source.as_deref() else {
        return Ok(None);
    };
    match config_access::check(path) {
        Ok(Exposure::Private) => Ok(None),
        Ok(Exposure::ReadableByOthers { mode }) => Ok(Some((path, mode))),
        Err(e) => Err(gpupm_fusemount::logging::one_line(e)),
    }
}

/// `--check-config`: what the configuration sets up, checked as far as
/// it can be without the device, with the refusals a start would make.
fn check_config(settings: &Settings) -> ExitCode {
    let readable = match check_access(settings) {
        Ok(readable) => readable,
        Err(msg) => {
            eprintln!("gpupmd: {msg}");
            return ExitCode::from(2);
        }
    };
    if let Some(cpus) = &settings.device_cpus {
        if let Err(e) = cpus.check_usable() {
            eprintln!(
                "gpupmd: device_cpus: {}",
                gpupm_fusemount::logging::one_line(e)
            );
            return ExitCode::from(2);
        }
    }
    let metrics_web = match metrics::prepare(&settings.metrics) {
        Ok(prepared) => prepared,
        Err(e) => {
            eprintln!("gpupmd: {}", gpupm_fusemount::logging::one_line(e));
            return ExitCode::from(2);
        }
    };
    let source = settings
        .source
        .as_ref()
        .map_or("(built-in defaults)".into(), |p| p.display().to_string());
    println!("configuration {source} is valid:");
    println!("  device node directory  {}", settings.node_dir.display());
    println!("  tenant node directory  {}", settings.tenant_dir.display());
    println!(
        "  state directory        {} (lock {LOCK_FILE})",
        settings.state_dir.display()
    );
    println!(
        "  tenant pages           {}",
        if settings.pages.enabled {
            settings.pages.dir.display().to_string()
        } else {
            "off".into()
        }
    );
    println!(
        "  metrics                http://{}/metrics (health only)",
        settings.metrics_listen
    );
    if let Some((addr, scheme)) = metrics_web.authenticated() {
        println!("  authenticated metrics  {scheme}://{addr}/metrics");
    }
    println!("  tenants mapped         {}", settings.policy.tenants.len());
    println!(
        "  device_cpus            {}",
        settings
            .device_cpus
            .as_ref()
            .map_or("(not pinned)".into(), ToString::to_string)
    );
    if let Some((path, mode)) = readable {
        println!(
            "warning: every local user may read {} (mode {mode:04o}): it tells them who sees which VM",
            path.display()
        );
    }
    ExitCode::SUCCESS
}

fn notify(states: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!(error = %e, "sd_notify failed");
    }
}

fn run(
    settings: Settings,
    inherited_tenant: Option<OwnedFd>,
    signals: StopSignals,
) -> Result<(), MainError> {
    let started = std::time::Instant::now();
    tracing::info!(
        config = %settings.source.as_ref().map_or("(defaults)".into(), |p| p.display().to_string()),
        node_dir = %settings.node_dir.display(),
        "gpupmd starting"
    );
    if let Some(cpus) = &settings.device_cpus {
        cpus.check_usable().map_err(MainError::Cpus)?;
    }
    // The metrics web configuration (credentials, certificates) is checked
    // before the device is touched, as the rest of the configuration is.
    let metrics_web = metrics::prepare(&settings.metrics)?;
    let (dev, identity, store, planes, mut engine, pages) = start_device(&settings)?;
    let retention = retention::start(Arc::clone(&store)).map_err(MainError::Runtime)?;
    let services = start_services(
        &settings,
        &store,
        &planes,
        inherited_tenant,
        pages,
        metrics_web,
    )?;
    // The local listener's address ends the line (tools and tests read it
    // there); the authenticated one, if any, is named before it.
    let authenticated = services
        .metrics
        .authenticated
        .map(|(addr, scheme)| format!("authenticated metrics at {scheme}://{addr}/metrics; "))
        .unwrap_or_default();
    let status = format!(
        "serving {}: {} partitions, {} VMs, {} contexts; {authenticated}metrics on http://{}/metrics",
        dev.path().display(),
        identity.partitions,
        store.vms().len(),
        store
            .vms()
            .iter()
            .filter_map(|&v| store.contexts(v))
            .map(|c| c.len())
            .sum::<usize>(),
        services.metrics.local
    );
    notify(&[NotifyState::Ready, NotifyState::Status(&status)]);
    tracing::info!(status = %status, metrics = %services.metrics.local, "gpupmd ready");

    let result = serve_until_signal(&engine, &signals);
    notify(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
    tracing::info!("gpupmd shutting down");
    drop(services.metrics);
    drop(services.reporter);
    drop(retention);
    drop(services.kernel_pmu);
    drop(services.pages);
    drop(services.tenant_node);
    engine.stop();
    log_final_summary(services.final_health.as_ref());
    health::shutdown(
        if result.is_ok() {
            "signal"
        } else {
            "engine stopped"
        },
        started.elapsed().as_secs_f64(),
    );
    result
}

/// The tenant pages, taken over from a previous daemon and refreshed once,
/// with the refresher's state.
type StartedPages = Option<(Arc<Pages>, pages::State)>;

/// Opens and identifies the device; also whether it runs on a step clock.
fn identify_device(settings: &Settings) -> Result<(Arc<DevNode>, DeviceIdentity, bool), MainError> {
    notify(&[NotifyState::Status("opening the device node")]);
    let dev = Arc::new(DevNode::open(&settings.node_dir)?);
    let (identity, step_clock) = program::identify(&dev)?;
    tracing::info!(
        abi = format!(
            "{}.{}",
            identity.abi_version >> 16,
            identity.abi_version & 0xffff
        ),
        clock_khz = identity.clock_khz,
        partitions = identity.partitions,
        ccus = identity.ccus,
        sms = identity.sms,
        step_clock,
        "device identified"
    );
    Ok((dev, identity, step_clock))
}

/// The tenant pages, when enabled and usable. Pages are an optimisation
/// over the tenant node: a pages directory that cannot be used costs
/// them, not the service.
fn open_pages(
    settings: &Settings,
    dev: &Arc<DevNode>,
    identity: &DeviceIdentity,
    mirror: &Arc<DeviceMirror>,
) -> Option<Arc<Pages>> {
    if !settings.pages.enabled {
        return None;
    }
    match Pages::open(
        settings.pages.dir.clone(),
        Arc::clone(dev),
        Arc::clone(mirror),
        settings.policy.clone(),
        identity.clock_khz,
    ) {
        Ok(p) => Some(p),
        Err(e) => {
            tracing::error!(
                error = gpupm_fusemount::logging::one_line(e),
                "tenant pages are not offered; tenants read through the node"
            );
            None
        }
    }
}

/// Prunes retired contexts to the retention policy (before READY: a
/// restart with a tighter policy serves only what it keeps).
fn apply_retention(settings: &Settings, store: &Store) {
    match store.prune_retired() {
        Ok(p) => tracing::info!(
            kept = p.kept,
            max_contexts = settings.retention.max_contexts,
            max_age_s = settings.retention.max_age_s,
            "retention of retired contexts applied"
        ),
        Err(e) => tracing::warn!(
            error = gpupm_fusemount::logging::one_line(e),
            "pruning retired contexts failed"
        ),
    }
}

/// Rewrites the previous daemon's pages from `store` (before READY) and
/// makes the refresher's first state: a real-time clock's periodic commits
/// are followed; a step clock's time cannot be predicted, so events only.
fn adopt_pages(
    p: Arc<Pages>,
    store: &Store,
    step_clock: bool,
    clock_khz: u32,
) -> (Arc<Pages>, pages::State) {
    p.adopt(store);
    let mut state = if step_clock {
        pages::State::default()
    } else {
        pages::State::following(clock_khz)
    };
    if let Err(e) = p.refresh(&mut state) {
        tracing::warn!(
            error = gpupm_fusemount::logging::one_line(e),
            "the first refresh of the tenant pages failed"
        );
    }
    (p, state)
}

/// The device, its identity, the store, the planes, the engine and the
/// tenant pages, started.
type StartedDevice = (
    Arc<DevNode>,
    DeviceIdentity,
    Arc<Store>,
    Planes,
    Engine,
    StartedPages,
);

/// Opens and identifies the device, makes its planes, loads the state
/// directory, starts the engine (programming and reconciling), applies
/// the retention policy and takes over the tenant pages.
fn start_device(settings: &Settings) -> Result<StartedDevice, MainError> {
    let (dev, identity, step_clock) = identify_device(settings)?;
    let planes = Planes::new(&dev, identity.clock_khz);
    let retired = RetiredStore::open(&settings.state_dir)?;
    // The pages follow the store's tables from the first change on.
    let pages = open_pages(settings, &dev, &identity, &planes.mirror);
    let store = Arc::new(Store::new(
        Arc::clone(&dev),
        identity,
        retired,
        settings.retention,
        settings.history_samples,
        pages.clone().map(|p| p as Arc<dyn TableEvents>),
    ));
    // Before the engine retires anything: files record the mapping.
    store.set_tenancy(&settings.policy);
    notify(&[NotifyState::Status(
        "programming the device and reconciling state",
    )]);
    let engine = Engine::start(
        Arc::clone(&dev),
        Arc::clone(&store),
        &planes,
        settings.program.clone(),
        settings.drain_interval,
        settings.device_cpus.clone(),
    )?;
    tracing::info!(
        vms = store.vms().len(),
        state_dir = %settings.state_dir.display(),
        "device programmed and state reconciled"
    );
    apply_retention(settings, &store);
    let gpu = gpupm_client::identity::read_identity(&dev).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "reading the device's identity registers failed");
        None
    });
    health::device_identity(&identity, gpu.as_ref());
    if let Some(source) = &settings.source {
        health::config_applied(source, "trigger, masks and stream watermarks programmed");
    }
    let pages = pages.map(|p| adopt_pages(p, &store, step_clock, identity.clock_khz));
    Ok((dev, identity, store, planes, engine, pages))
}

/// The daemon's services, running.
struct Services {
    tenant_node: TenantNode,
    metrics: metrics::Running,
    reporter: Worker,
    final_health: Arc<dyn HealthSource>,
    kernel_pmu: Option<kernel_pmu::Publisher>,
    pages: Option<(PageServer, Refresher)>,
}

/// Serves the tenant node, the page socket, the metrics endpoint and the
/// health reporter.
fn start_services(
    settings: &Settings,
    store: &Arc<Store>,
    planes: &Planes,
    inherited_tenant: Option<OwnedFd>,
    pages: StartedPages,
    metrics_web: metrics::Prepared,
) -> Result<Services, MainError> {
    let view: Arc<dyn CounterView> = store.clone();
    let served = Served {
        view: Arc::clone(&view),
        features: planes.features(),
    };
    let bounds = Bounds::new(settings.limits, &settings.policy);
    let tenant_node = match inherited_tenant {
        Some(fd) => TenantNode::serve_fd(
            &settings.tenant_dir,
            fd,
            served,
            settings.policy.clone(),
            Arc::clone(&bounds),
            settings.tenant_threads,
        )?,
        None => TenantNode::mount(
            &settings.tenant_dir,
            served,
            settings.policy.clone(),
            Arc::clone(&bounds),
            settings.tenant_threads,
        )?,
    };
    // Snapshots hand out latency samples once; the fan-out gives the
    // reporter, the metrics endpoint and the final summary each all of them.
    let fanout = health::HealthFanout::new(Arc::new(DaemonHealth {
        store: Arc::clone(store),
        ri: Arc::clone(&planes.ri),
        ranges: Arc::clone(&planes.ranges),
        pages: pages.as_ref().map(|(p, _)| Arc::clone(p)),
        tenant: tenant_node.stats(),
        bounds: Arc::clone(&bounds),
    }));
    let final_health = fanout.subscribe();
    let pages = match pages {
        Some((p, state)) => {
            match PageServer::start(
                Arc::clone(&p),
                store.clone(),
                gpupmd::tenant::policy::Policy::new(settings.policy.clone()),
                bounds,
            ) {
                Ok(server) => {
                    let refresher = Refresher::start(
                        p,
                        settings.pages.backstop,
                        state,
                        settings.device_cpus.clone(),
                    )
                    .map_err(MainError::Runtime)?;
                    Some((server, refresher))
                }
                Err(e) => {
                    tracing::error!(
                        error = gpupm_fusemount::logging::one_line(e),
                        "tenant pages are not offered; tenants read through the node"
                    );
                    None
                }
            }
        }
        None => None,
    };
    let metrics = metrics::start(
        settings.metrics_listen,
        &settings.metrics,
        metrics_web,
        Arc::clone(&view),
        fanout.subscribe(),
    )?;
    let reporter = health::start_reporter(fanout.subscribe(), settings.health.clone())
        .map_err(MainError::Runtime)?;
    let kernel_pmu =
        kernel_pmu::start(&settings.kernel_pmu, Arc::clone(&view)).map_err(MainError::Runtime)?;

    Ok(Services {
        tenant_node,
        metrics,
        reporter,
        final_health,
        kernel_pmu,
        pages,
    })
}

/// The daemon's work since the last health snapshot, logged at shutdown.
fn log_final_summary(health: &dyn HealthSource) {
    let snap = health.snapshot();
    let mut lat = snap.handshake_latency_ns;
    lat.sort_unstable();
    let pct = |p: usize| {
        lat.get((lat.len().saturating_sub(1)) * p / 100)
            .map_or(0.0, |&ns| ns as f64 / 1000.0)
    };
    tracing::info!(
        handshakes = snap.handshakes,
        handshake_p50_us = pct(50),
        handshake_p99_us = pct(99),
        handshake_response_max_us = snap.handshake_response_max_ns as f64 / 1000.0,
        fallbacks = snap.fallbacks,
        lost_records = snap.lost_records,
        drained_records = snap.drained_records,
        contexts_retired = snap.contexts_retired,
        contexts_pruned = snap.contexts_pruned,
        uptime_s = snap.uptime_s,
        "final summary"
    );
}

/// Serves until a stop signal (Ok) or the engine's death, notifying the
/// service manager's watchdog every half period meanwhile.
fn serve_until_signal(engine: &Engine, signals: &StopSignals) -> Result<(), MainError> {
    let watchdog = sd_notify::watchdog_enabled();
    let period = watchdog.map_or(Duration::from_secs(1), |t| {
        (t / 2).max(Duration::from_millis(10))
    });
    loop {
        if let Some(name) = signals.wait(period).map_err(MainError::Signals)? {
            tracing::info!(signal = name, "stop requested");
            return Ok(());
        }
        if !engine.is_running() {
            return Err(MainError::EngineDied);
        }
        if watchdog.is_some() {
            notify(&[NotifyState::Watchdog]);
        }
    }
}
