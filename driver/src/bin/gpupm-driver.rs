//! `gpupm-driver`: serves the emulated device as a device node, the
//! stand-in for a kernel driver.
//!
//! `--transport fuse` (the default): when the service manager passes a
//! `/dev/fuse` descriptor named [`NODE_FDNAME`] (`LISTEN_FDS`/
//! `LISTEN_FDNAMES`, mounted at `--node-dir` by `gpupm-mount`), the driver
//! serves it and leaves the mount in place on exit; otherwise it mounts the
//! node itself (as root) and unmounts it on exit.
//!
//! `--transport cuse`: the driver creates the character device
//! `/dev/gpupm0` through `/dev/cuse` (as root) and removes it on exit;
//! `--node-dir` is not used.
//!
//! One driver per node: before it touches anything (the commit mirror, a
//! mount) the driver takes an exclusive lock on `gpupm-driver.lock` in its
//! mirror directory (made owner-only if missing, as the mirror's), holding
//! its pid and node; a second driver exits with `gpupm-driver already
//! running as pid N for NODE`, and the live driver's mirror stays intact.
//! `--check-config` checks the scenario and the options as a start would
//! (a scenario's `confidential_key` refused without
//! `--insecure-scenario-keys`, the `--identity` loaded), prints what the
//! driver would serve and exits, touching nothing.
//!
//! `gpupm-driver provision`: the emulated factory — writes a device identity
//! (an Ed25519 key and the vendor's certificate for it) that `--identity`
//! then loads (`docs/confidential.md`, "The emulation boundary").

use std::num::NonZeroUsize;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use gpupm_client::cpus::{CpuList, UnusableCpus};
use gpupm_client::instance::{InstanceError, InstanceLock};
use gpupm_client::mirror::MirrorDirs;
use gpupm_client::paths::{CUSE_DEVNAME, DEFAULT_CUSE_NODE, NODE_FDNAME};
use gpupm_driver::model::cc::{DeviceIdentity, IdentityError};
use gpupm_driver::model::{Device, EngineKind};
use gpupm_driver::node::access::{self, AccessPolicy};
use gpupm_driver::node::backend::DeviceBackend;
use gpupm_driver::node::cuse::CuseTransport;
use gpupm_driver::node::device::NodeCore;
use gpupm_driver::node::fuse::FuseTransport;
use gpupm_driver::node::mirror::DEFAULT_MIRROR_DIR;
use gpupm_driver::node::model_backend::ModelBackend;
use gpupm_driver::node::ticker::Ticker;
use gpupm_driver::node::{Transport, DEFAULT_NODE_DIR, DEFAULT_THREADS};
use gpupm_fusemount::logging;
use nix::sys::signal::{SigSet, Signal};
use sd_notify::NotifyState;

/// How the device clock advances.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Clock {
    /// With wall time.
    Realtime,
    /// Only through `GPUPM_IOC_ADVANCE`.
    Step,
}

/// How the node is made visible.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum TransportKind {
    /// A FUSE directory (`--node-dir`) holding `card0` and `card0-oob`.
    Fuse,
    /// The character device `/dev/gpupm0`, through CUSE (needs `/dev/cuse`).
    Cuse,
}

/// Serve the emulated gpupm device as a device node.
#[derive(Debug, Parser)]
#[command(version, args_conflicts_with_subcommands = true)]
struct Args {
    #[command(subcommand)]
    command: Option<Subcommand>,
    /// Scenario file (default: the built-in scenario).
    #[arg(long, value_name = "FILE")]
    scenario: Option<PathBuf>,
    /// Accept `confidential_key` in the scenario file. Such a key is
    /// written by the host, so it keeps nothing from the host: for tests
    /// and `gpupm demo` only; the shipped units never pass this.
    #[arg(long)]
    insecure_scenario_keys: bool,
    /// The device's identity (written by `gpupm-driver provision`): the key
    /// confidential VMs' tenants establish their sessions with. A missing
    /// file leaves the device without one (logged): its confidential VMs
    /// then stay without sessions and publish nothing readable.
    #[arg(long, value_name = "FILE")]
    identity: Option<PathBuf>,
    /// Device clock.
    #[arg(long, value_enum, default_value_t = Clock::Realtime)]
    clock: Clock,
    /// How the node is made visible.
    #[arg(long, value_enum, default_value_t = TransportKind::Fuse)]
    transport: TransportKind,
    /// Directory where the node files are mounted (FUSE transport).
    #[arg(long, value_name = "DIR", default_value = DEFAULT_NODE_DIR)]
    node_dir: PathBuf,
    /// Group allowed besides root (default: `gpupm-admin` if it exists).
    #[arg(long, value_name = "GID")]
    admin_gid: Option<u32>,
    /// Threads serving node requests, each on its own clone of the
    /// /dev/fuse (or /dev/cuse) descriptor: with 2 or more a register
    /// access or handshake batch does not wait behind a bulk memory-window
    /// read. 1 serves every request in turn.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_THREADS, value_parser = parse_threads)]
    threads: NonZeroUsize,
    /// Serve the debug ledger (`GPUPM_IOC_LEDGER`), the emulator's exact
    /// record of what the device generated, for tests and the demo. A
    /// confidential VM's answers are sealed under its session key.
    #[arg(long)]
    debug_ledger: bool,
    /// Directory of the commit mirror (root's or this process's, created
    /// mode 0700 if missing, refused if others may enter it or its group
    /// write it; files shared with its group when that group may search
    /// it, as in the shipped units' /run/gpupm/mirror). Default: next to
    /// the node directory (`NODE_DIR.mirror`) for FUSE, so that nodes on
    /// one host keep theirs apart; `/run/gpupm/mirror` for CUSE.
    #[arg(long, value_name = "DIR")]
    mirror_dir: Option<PathBuf>,
    /// Directory of the mirror's waiter file, which the following daemon
    /// writes (it registers there as a sleeper). Checked as the mirror's
    /// directory is; the file is shared (0660) with this directory's group
    /// when that group may search it, so give it a group of the following
    /// daemon alone, as the shipped units' /run/gpupm/mirror/waiters
    /// (gpupm-driver:gpupm 2750) does: whoever may write the file may
    /// truncate it, which kills the driver and the daemon. Default: the
    /// mirror's directory, where the file is owner-only (0600).
    #[arg(long, value_name = "DIR")]
    mirror_waiters_dir: Option<PathBuf>,
    /// Keep no commit mirror (`GPUPM_IOC_MIRROR_INFO` answers ENODEV):
    /// hosts follow commits with `GPUPM_IOC_WAIT_COMMIT`.
    #[arg(long)]
    no_mirror: bool,
    /// CPUs the device runs on (a `taskset -c` list such as `0` or `0,2-3`):
    /// its clock, interrupt delivery, commit mirror and node service — the
    /// emulator's stand-in for a real device's interrupt affinity
    /// (`/proc/irq/N/smp_affinity_list`), which gpupmd's `device_cpus`
    /// should match. Default: wherever the scheduler puts them.
    #[arg(long, value_name = "LIST")]
    cpus: Option<CpuList>,
    /// Check the scenario and the options, print what would be served,
    /// and exit (0: good, 2: refused) without touching anything.
    #[arg(long)]
    check_config: bool,
}

/// The instance lock's file, in the mirror directory.
const LOCK_FILE: &str = "gpupm-driver.lock";

#[derive(Debug, clap::Subcommand)]
enum Subcommand {
    /// The emulated factory: write a device identity certified by the
    /// vendor root's private key (exit 0 also when --if-missing keeps one).
    Provision(ProvisionArgs),
}

/// Arguments of `gpupm-driver provision`.
#[derive(Debug, clap::Args)]
struct ProvisionArgs {
    /// The vendor root's private key (32 raw bytes or 64 hex digits, a
    /// file only its owner may access; the package's is
    /// /usr/lib/gpupm/factory/vendor-root.key).
    #[arg(long, value_name = "FILE")]
    vendor_key: PathBuf,
    /// Where to write the identity (mode 0600, given to the directory's
    /// owner).
    #[arg(long, value_name = "FILE")]
    identity: PathBuf,
    /// Keep an existing identity and succeed.
    #[arg(long, conflicts_with = "force")]
    if_missing: bool,
    /// Replace an existing identity (the device becomes another device to
    /// every tenant that knew it).
    #[arg(long)]
    force: bool,
}

/// Upper bound of `--threads`: more than the requests that can usefully be
/// in flight at once (each thread reserves a 16 MiB request buffer).
const MAX_THREADS: usize = 64;

fn parse_threads(arg: &str) -> Result<NonZeroUsize, String> {
    match arg.parse::<NonZeroUsize>() {
        Ok(n) if n.get() <= MAX_THREADS => Ok(n),
        _ => Err(format!("expected a number of threads in 1..={MAX_THREADS}")),
    }
}

/// Why the driver could not start or had to stop.
#[derive(Debug, thiserror::Error)]
enum DriverError {
    #[error("bad scenario: {0}")]
    Scenario(String),
    #[error("the service manager passed a FUSE descriptor, but --transport is cuse")]
    InheritedFuse,
    #[error("device node transport failed")]
    Transport(#[from] gpupm_driver::node::TransportError),
    #[error("could not start a driver thread")]
    Thread(#[source] std::io::Error),
    #[error("signal setup failed")]
    Signals(#[source] nix::Error),
    #[error("the {0} stopped unexpectedly")]
    Died(&'static str),
    #[error("--cpus")]
    Cpus(#[source] UnusableCpus),
    #[error("cannot set the CPU affinity")]
    Affinity(#[source] nix::Error),
    #[error(transparent)]
    Instance(#[from] InstanceError),
    #[error("cannot create the directory {} for the instance lock", .0.display())]
    LockDir(PathBuf, #[source] std::io::Error),
}

/// A device model built from the scenario.
struct Built {
    dev: Device,
    /// The scenario's name.
    name: String,
    /// Confidential VMs keyed by the scenario file (accepted only with
    /// `--insecure-scenario-keys`).
    insecure_keys: Vec<u32>,
}

/// The device model `args` ask for: a scenario that keys a confidential
/// VM is refused unless `--insecure-scenario-keys` accepts it.
fn make_device(args: &Args) -> Result<Built, DriverError> {
    let scenario = match &args.scenario {
        Some(path) => gpupm_driver::scenario::parse_file(path)
            .map_err(|e| DriverError::Scenario(e.to_string()))?,
        None => gpupm_driver::scenario::builtin(),
    };
    let keyed: Vec<u32> = scenario
        .vms
        .iter()
        .filter(|v| v.confidential_key.is_some())
        .map(|v| v.id)
        .collect();
    if !keyed.is_empty() && !args.insecure_scenario_keys {
        return Err(DriverError::Scenario(format!(
            "{}: VM {keyed:?} has a confidential_key, which the host wrote and can read: \
             refusing it (use `confidential = true` and let the VM's tenant run \
             `gpupm cc establish`; --insecure-scenario-keys accepts it for tests and demos)",
            scenario.name
        )));
    }
    let step = args.clock == Clock::Step;
    let dev = Device::new(&scenario, EngineKind::Batched, step)
        .map_err(|e| DriverError::Scenario(format!("{}: {e}", scenario.name)))?;
    Ok(Built {
        dev,
        name: scenario.name.clone(),
        insecure_keys: keyed,
    })
}

/// Creates the device the node serves: the one place that chooses it.
fn make_backend(args: &Args) -> Result<Box<dyn DeviceBackend>, DriverError> {
    let Built {
        mut dev,
        name,
        insecure_keys,
    } = make_device(args)?;
    if !insecure_keys.is_empty() {
        tracing::warn!(vms = ?insecure_keys, "INSECURE: confidential VMs start with keys from the scenario file, which the host can read (--insecure-scenario-keys)");
    }
    install_identity(&mut dev, args.identity.as_deref());
    let step = args.clock == Clock::Step;
    tracing::info!(scenario = %name, step_clock = step, debug_ledger = args.debug_ledger, "device model built");
    Ok(Box::new(if args.debug_ledger {
        ModelBackend::with_debug_ledger(dev)
    } else {
        ModelBackend::new(dev)
    }))
}

/// `--check-config`: the scenario builds a device and the options are
/// usable; what would be served.
fn check_config(args: &Args) -> Result<(), DriverError> {
    if let Some(cpus) = &args.cpus {
        cpus.check_usable().map_err(DriverError::Cpus)?;
    }
    let built = make_device(args)?;
    println!("gpupm-driver: the configuration is valid:");
    println!("  scenario        {}", built.name);
    if !built.insecure_keys.is_empty() {
        println!(
            "  INSECURE        confidential VMs {:?} start with keys from the scenario file, which the host can read (--insecure-scenario-keys)",
            built.insecure_keys
        );
    }
    println!(
        "  identity        {}",
        match load_identity(args.identity.as_deref()) {
            Identity::None => "none (no --identity): confidential VMs cannot establish sessions".into(),
            Identity::Missing(path) => format!(
                "{} does not exist (run `gpupm-driver provision`): confidential VMs cannot establish sessions",
                path.display()
            ),
            Identity::Unusable(path, e) => format!(
                "{} is unusable ({}): confidential VMs cannot establish sessions",
                path.display(),
                gpupm_fusemount::logging::one_line(e)
            ),
            Identity::Loaded(path, id) => format!(
                "{} (serial {})",
                path.display(),
                hex(&id.cert().serial)
            ),
        }
    );
    println!("  clock           {:?}", args.clock);
    println!("  node            {}", node_path(args).display());
    println!(
        "  commit mirror   {}",
        if args.no_mirror {
            "off".to_string()
        } else {
            mirror_dir(args).display().to_string()
        }
    );
    println!(
        "  instance lock   {}",
        mirror_dir(args).join(LOCK_FILE).display()
    );
    Ok(())
}

/// The node the driver serves.
fn node_path(args: &Args) -> PathBuf {
    match args.transport {
        TransportKind::Fuse => args.node_dir.clone(),
        TransportKind::Cuse => PathBuf::from(DEFAULT_CUSE_NODE),
    }
}

/// The instance lock, in the mirror directory (made owner-only when
/// missing, as the mirror makes it).
fn take_lock(args: &Args) -> Result<InstanceLock, DriverError> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = mirror_dir(args);
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(DriverError::LockDir(dir, e)),
    }
    Ok(InstanceLock::acquire(
        &dir.join(LOCK_FILE),
        &node_path(args).display().to_string(),
    )?)
}

/// What `--identity` gives the device.
enum Identity<'a> {
    /// No `--identity`.
    None,
    /// The file does not exist.
    Missing(&'a Path),
    /// The file cannot be used.
    Unusable(&'a Path, IdentityError),
    /// Loaded.
    Loaded(&'a Path, Box<DeviceIdentity>),
}

/// Reads the device identity in `path`, if any (a start and
/// `--check-config` judge it alike).
fn load_identity(path: Option<&Path>) -> Identity<'_> {
    let Some(path) = path else {
        return Identity::None;
    };
    if !path.exists() {
        return Identity::Missing(path);
    }
    match DeviceIdentity::load(path) {
        Ok(id) => Identity::Loaded(path, Box::new(id)),
        Err(e) => Identity::Unusable(path, e),
    }
}

/// Loads the device identity in `path`, if any; without one the device
/// answers key exchanges with ENODEV.
fn install_identity(dev: &mut Device, path: Option<&Path>) {
    match load_identity(path) {
        Identity::None => {
            tracing::info!("no --identity: confidential VMs cannot establish sessions");
        }
        Identity::Missing(path) => {
            tracing::warn!(identity = %path.display(), "the device identity does not exist (run `gpupm-driver provision`): confidential VMs cannot establish sessions and publish nothing readable");
        }
        Identity::Unusable(path, e) => {
            tracing::error!(identity = %path.display(), error = gpupm_fusemount::logging::one_line(e), "the device identity is unusable: confidential VMs cannot establish sessions");
        }
        Identity::Loaded(path, id) => {
            tracing::info!(identity = %path.display(), serial = %hex(&id.cert().serial), "device identity loaded");
            dev.install_identity(*id);
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `gpupm-driver provision`.
fn provision(a: &ProvisionArgs) -> ExitCode {
    match gpupm_driver::model::cc::identity::provision(
        &a.vendor_key,
        &a.identity,
        a.if_missing,
        a.force,
    ) {
        Ok(true) => {
            eprintln!(
                "gpupm-driver: provisioned a device identity in {}",
                a.identity.display()
            );
            ExitCode::SUCCESS
        }
        Ok(false) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpupm-driver: {}", gpupm_fusemount::logging::one_line(e));
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(Subcommand::Provision(a)) = &args.command {
        return provision(a);
    }
    if args.check_config {
        return match check_config(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("gpupm-driver: {}", gpupm_fusemount::logging::one_line(e));
                ExitCode::from(2)
            }
        };
    }
    let sink = match logging::init(Path::new(logging::DEFAULT_JOURNAL_SOCKET)) {
        Ok(sink) => Some(sink),
        Err(e) => {
            eprintln!("gpupm-driver: {e}");
            None
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Bad input (like a bad command line, which clap exits 2 for)
            // is told apart from a failure to run.
            let code = if matches!(
                e,
                DriverError::Scenario(_) | DriverError::Cpus(UnusableCpus::NotAllowed(_))
            ) {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            };
            let msg = gpupm_fusemount::logging::one_line(e);
            tracing::error!("{msg}");
            // Logged to the journal while stderr is a terminal or a file
            // (not the journal: systemd sets JOURNAL_STREAM): say it there too.
            if sink == Some(logging::LogSink::Journald)
                && std::env::var_os("JOURNAL_STREAM").is_none()
            {
                eprintln!("gpupm-driver: {msg}");
            }
            code
        }
    }
}

/// The node transport `args` ask for, serving `core` (on the descriptor
/// the service manager passed, when it passed one).
fn make_transport(
    args: &Args,
    core: &Arc<NodeCore>,
    inherited: Option<OwnedFd>,
) -> Result<Box<dyn Transport>, DriverError> {
    Ok(match (args.transport, inherited) {
        (TransportKind::Fuse, Some(fd)) => {
            tracing::info!(node_dir = %args.node_dir.display(), "serving the node descriptor the service manager passed");
            Box::new(
                FuseTransport::inherited(&args.node_dir, core.clone(), fd)
                    .with_threads(args.threads),
            )
        }
        (TransportKind::Fuse, None) => {
            Box::new(FuseTransport::new(&args.node_dir, core.clone()).with_threads(args.threads))
        }
        (TransportKind::Cuse, Some(_)) => return Err(DriverError::InheritedFuse),
        (TransportKind::Cuse, None) => {
            Box::new(CuseTransport::new(CUSE_DEVNAME, core.clone()).with_threads(args.threads))
        }
    })
}

/// Tells the service manager `states`; a failure is only worth a warning.
fn notify(states: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!(error = %e, "sd_notify failed");
    }
}

/// Waits for a stop signal (from `signals`), pinging the watchdog and
/// checking that the node session and the clock still run.
fn supervise(
    signals: &mpsc::Receiver<Signal>,
    transport: &dyn Transport,
    ticker: &Ticker,
) -> Result<(), DriverError> {
    // Pings at half the timeout the service manager set for this process.
    let watchdog = sd_notify::watchdog_enabled()
        .filter(|timeout| !timeout.is_zero())
        .map(|timeout| timeout / 2);
    let check_every = watchdog.unwrap_or(Duration::from_secs(1));
    loop {
        match signals.recv_timeout(check_every) {
            Ok(sig) => {
                tracing::info!(signal = %sig, "stopping");
                return Ok(());
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(DriverError::Died("signal thread"))
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if !transport.is_serving() {
            return Err(DriverError::Died("node session"));
        }
        if !ticker.is_running() {
            return Err(DriverError::Died("clock thread"));
        }
        if watchdog.is_some() {
            notify(&[NotifyState::Watchdog]);
        }
    }
}

/// The commit mirror's directory `args` ask for.
fn mirror_dir(args: &Args) -> PathBuf {
    if let Some(dir) = &args.mirror_dir {
        return dir.clone();
    }
    match args.transport {
        TransportKind::Fuse => {
            // Rebuilt from its components: no trailing slash.
            let mut dir = args
                .node_dir
                .components()
                .collect::<PathBuf>()
                .into_os_string();
            dir.push(".mirror");
            PathBuf::from(dir)
        }
        TransportKind::Cuse => PathBuf::from(DEFAULT_MIRROR_DIR),
    }
}

/// Creates the commit mirror in `dirs`; without it (a failure is logged)
/// hosts fall back to `GPUPM_IOC_WAIT_COMMIT`.
fn start_mirror(core: &NodeCore, dirs: MirrorDirs<'_>) {
    // A new generation per driver start: readers of a previous driver's
    // mirror see it change.
    let generation = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    if let Err(e) = core.start_mirror(dirs, generation) {
        tracing::warn!(dir = %dirs.mirror.display(), error = %e, "no commit mirror");
    }
}

fn run(args: &Args) -> Result<(), DriverError> {
    // Before anything is touched; held until the driver exits.
    let _lock = take_lock(args)?;
    if let Some(cpus) = &args.cpus {
        cpus.check_usable().map_err(DriverError::Cpus)?;
        // Before any thread starts: every thread inherits it.
        cpus.pin_current_thread().map_err(DriverError::Affinity)?;
        tracing::info!(cpus = %cpus, "the device runs on these CPUs");
    }
    // Reads and unsets LISTEN_*: before any thread starts.
    let inherited = gpupm_fusemount::inherited_fd(NODE_FDNAME);
    let signals = SigSet::from_iter([Signal::SIGTERM, Signal::SIGINT]);
    // Every thread spawned from here on inherits the blocked mask, so the
    // signals are taken only by the waiting thread below.
    signals.thread_block().map_err(DriverError::Signals)?;

    let admin_gid = args
        .admin_gid
        .or_else(|| access::group_id(access::DEFAULT_ADMIN_GROUP));
    let core = NodeCore::new(make_backend(args)?, AccessPolicy::new(admin_gid));
    // Fails the reads and waits of killed readers until the driver exits.
    let _reaper = core.start_reaper().map_err(DriverError::Thread)?;
    if !args.no_mirror {
        let dir = mirror_dir(args);
        let dirs = MirrorDirs {
            mirror: &dir,
            waiters: args.mirror_waiters_dir.as_deref(),
        };
        start_mirror(&core, dirs);
    }
    let mut transport = make_transport(args, &core, inherited)?;
    transport.mount()?;
    if let Err(e) = transport.serve() {
        if let Err(u) = transport.unmount() {
            tracing::warn!(error = %u, "unmount after failed start");
        }
        return Err(e.into());
    }
    let mut ticker =
        Ticker::spawn(core, args.clock == Clock::Realtime).map_err(DriverError::Thread)?;

    let (tx, rx) = mpsc::channel();
    thread::Builder::new()
        .name("gpupm-signals".into())
        .spawn(move || {
            if let Ok(sig) = signals.wait() {
                // The receiver only goes away when the driver is stopping anyway.
                tx.send(sig).ok();
            }
        })
        .map_err(DriverError::Thread)?;

    let node = node_path(args);
    let node = node.display();
    notify(&[
        NotifyState::Ready,
        NotifyState::Status(&format!("serving {node}")),
    ]);
    tracing::info!(%node, transport = ?args.transport, clock = ?args.clock, admin_gid, threads = args.threads.get(), "gpupm-driver ready");

    let result = supervise(&rx, transport.as_ref(), &ticker);
    notify(&[NotifyState::Stopping]);
    ticker.stop();
    transport.unmount()?;
    result
}
