//! The real `gpupm-driver` and `gpupmd` as a test runs them: private node,
//! tenant and state directories in a [`Scratch`], a notify socket the test
//! owns, readiness from `READY=1`.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::process::{Command, ExitStatus};

use gpupm_client::DevNode;
use nix::sys::signal::Signal;
use nix::unistd::Pid;

use crate::process::Proc;
use crate::scratch::{is_mounted, Scratch};
use crate::{bin, scenario};

/// Options of one driver run.
#[derive(Clone, Debug)]
pub struct DriverOptions {
    /// `--clock` (`step` or `realtime`).
    pub clock: &'static str,
    /// `--admin-gid`.
    pub admin_gid: Option<u32>,
    /// The scenario served (TOML text), or the built-in one (`None`).
    pub scenario: Option<String>,
    /// `--threads` (the driver's default when `None`).
    pub threads: Option<usize>,
    /// The driver's `RUST_LOG`: `debug` keeps a full trail for failing
    /// tests but also logs every FUSE request, which a benchmark must not
    /// pay for.
    pub log: &'static str,
    /// `--debug-ledger`: most tests check the blocks against the ledger.
    pub debug_ledger: bool,
    /// `--identity`: the device identity file, provisioned (by the
    /// emulated factory, with the repository's vendor key) if missing, so
    /// that a driver restarted with the same file is the same device.
    pub identity: Option<PathBuf>,
    /// Further command-line arguments.
    pub args: Vec<String>,
}

impl Default for DriverOptions {
    /// The small scenario ([`scenario::small`]) on a step clock.
    fn default() -> Self {
        DriverOptions {
            clock: "step",
            admin_gid: None,
            scenario: Some(scenario::small()),
            threads: None,
            log: "debug",
            debug_ledger: true,
            identity: None,
            args: Vec::new(),
        }
    }
}

impl DriverOptions {
    /// Step clock, serving `toml`.
    pub fn toml(toml: impl Into<String>) -> DriverOptions {
        DriverOptions {
            scenario: Some(toml.into()),
            ..DriverOptions::default()
        }
    }

    /// The system tests' driver: step clock, `toml`, the ledger, logging
    /// at `info`.
    pub fn system(toml: impl Into<String>) -> DriverOptions {
        DriverOptions {
            log: "info",
            ..DriverOptions::toml(toml)
        }
    }

    /// These options without `--debug-ledger` (the ledger ioctls answer
    /// ENOTTY).
    pub fn without_ledger(self) -> DriverOptions {
        DriverOptions {
            debug_ledger: false,
            ..self
        }
    }

    /// These options with the device identity in `path` (provisioned if
    /// missing).
    pub fn with_identity(self, path: impl Into<PathBuf>) -> DriverOptions {
        DriverOptions {
            identity: Some(path.into()),
            ..self
        }
    }

    /// The built-in scenario on a step clock, logging at `info`.
    pub fn builtin() -> DriverOptions {
        DriverOptions {
            scenario: None,
            log: "info",
            ..DriverOptions::default()
        }
    }
}

/// A running `gpupm-driver`.
#[derive(Debug)]
pub struct Driver {
    /// The process.
    pub proc: Proc,
    /// The node directory (`dev` in the scratch dir).
    pub dir: PathBuf,
    // Dropped after the process: unmounts what it leaves.
    scratch: Option<Scratch>,
}

impl Driver {
    /// Starts a driver serving the small scenario on a step clock.
    pub fn start() -> Driver {
        Driver::start_with(DriverOptions::default())
    }

    /// Starts a driver with `opts` in a scratch dir of its own.
    pub fn start_with(opts: DriverOptions) -> Driver {
        let scratch = Scratch::new("node");
        let mut d = Driver::start_in(&scratch, opts);
        d.scratch = Some(scratch);
        d
    }

    /// Starts a driver whose node dir is `scratch/dev` (which may hold a
    /// stale mount); `scratch` outlives it.
    pub fn start_in(scratch: &Scratch, opts: DriverOptions) -> Driver {
        crate::require_root_and_fuse("the node tests");
        let dir = scratch.join("dev");
        let mut cmd = Command::new(bin!(Driver));
        cmd.args(["--clock", opts.clock, "--node-dir"])
            .arg(&dir)
            .env("RUST_LOG", opts.log);
        if let Some(text) = &opts.scenario {
            let path = scratch.join("scenario.toml");
            fs::write(&path, text).expect("write the scenario file");
            cmd.arg("--scenario").arg(path);
            // The tests' scenarios may give a confidential VM its key.
            if text.contains("confidential_key") {
                cmd.arg("--insecure-scenario-keys");
            }
        }
        if let Some(identity) = &opts.identity {
            crate::cc::provision_identity(identity);
            cmd.arg("--identity").arg(identity);
        }
        if let Some(n) = opts.threads {
            cmd.arg("--threads").arg(n.to_string());
        }
        if let Some(gid) = opts.admin_gid {
            cmd.arg("--admin-gid").arg(gid.to_string());
        }
        if opts.debug_ledger {
            cmd.arg("--debug-ledger");
        }
        cmd.args(&opts.args);
        let mut proc = Proc::spawn(
            "gpupm-driver",
            cmd,
            &scratch.join("driver.sock"),
            &scratch.join("driver.log"),
        );
        proc.wait_for("READY=1");
        Driver {
            proc,
            dir,
            scratch: None,
        }
    }

    /// The scratch dir the driver owns ([`Driver::start_with`]), taken
    /// away to start another driver in it after this one is gone.
    pub fn take_scratch(&mut self) -> Scratch {
        self.scratch
            .take()
            .expect("a driver with its own scratch dir")
    }

    /// The driver's log so far.
    pub fn log(&self) -> String {
        self.proc.log()
    }

    /// A client handle on `card0`.
    pub fn node(&self) -> DevNode {
        DevNode::open(&self.dir).unwrap_or_else(|e| panic!("open card0: {e}\n{}", self.log()))
    }

    /// Path of `card0`.
    pub fn card_path(&self) -> PathBuf {
        self.dir.join("card0")
    }

    /// Opens `card0` read-write.
    pub fn card(&self) -> File {
        self.open("card0", 0)
    }

    /// Opens `card0` read-write and non-blocking.
    pub fn card_nonblock(&self) -> File {
        self.open("card0", libc::O_NONBLOCK)
    }

    /// Opens a node file read-write with extra open flags.
    pub fn open(&self, name: &str, flags: i32) -> File {
        OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(flags)
            .open(self.dir.join(name))
            .unwrap_or_else(|e| panic!("open {name}: {e}\n{}", self.log()))
    }

    /// Process id of the driver.
    pub fn pid(&self) -> Pid {
        self.proc.pid()
    }

    /// Sends `sig` and waits for the driver to exit.
    pub fn signal_and_wait(&mut self, sig: Signal) -> ExitStatus {
        self.proc.signal_and_wait(sig)
    }

    /// SIGTERM; asserts a clean exit with the node unmounted.
    pub fn stop(mut self) {
        self.proc.stop();
        assert!(!is_mounted(&self.dir), "node still mounted after SIGTERM");
    }
}

/// A daemon configuration for tests: node, tenant, state and pages dirs
/// in `scratch` (unless `extra` has its own `[pages]`), `extra` top-level
/// keys and tables, the metrics endpoint on an ephemeral loopback port.
pub fn daemon_config(scratch: &Scratch, extra: &str) -> String {
    let pages = if extra.contains("[pages]") {
        String::new()
    } else {
        format!("[pages]\ndir = {:?}\n", scratch.join("pages"))
    };
    format!(
        "node_dir = {:?}\ntenant_dir = {:?}\nstate_dir = {:?}\n{extra}\n{pages}[metrics]\nlisten = \"127.0.0.1:0\"\n",
        scratch.join("dev"),
        scratch.join("tenant"),
        scratch.join("state"),
    )
}

/// Starts `gpupmd` with `config` (TOML text) written into `scratch`; does
/// not wait for readiness. The log of every run goes to `gpupmd.log`, one
/// after the other.
pub fn spawn_daemon(scratch: &Scratch, config: &str, args: &[&str], env: &[(&str, &str)]) -> Proc {
    let path = scratch.join("gpupmd.toml");
    fs::write(&path, config).expect("write the daemon config");
    let mut cmd = Command::new(bin!(Daemon));
    cmd.arg("--config")
        .arg(&path)
        .args(args)
        .env("RUST_LOG", "info");
    for (k, v) in env {
        cmd.env(k, v);
    }
    Proc::spawn(
        "gpupmd",
        cmd,
        &scratch.join("gpupmd.sock"),
        &scratch.join("gpupmd.log"),
    )
}

/// Starts `gpupmd` and waits for `READY=1`.
pub fn start_daemon(scratch: &Scratch, config: &str) -> Proc {
    let mut d = spawn_daemon(scratch, config, &[], &[]);
    d.wait_for("READY=1");
    d
}
