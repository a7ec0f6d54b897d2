//! Test harness: runs the real `gpupm-driver` (step clock, a scenario file,
//! a private node directory) and the real `gpupmd` (a private config and
//! state directory) as processes, each with a `NOTIFY_SOCKET` the test
//! owns, and talks to the device only through the node (`gpupmd::devnode`).
//!
//! Synchronisation never sleeps: the harness waits for notify datagrams
//! (`READY=1`) or polls device registers until a condition holds.
//!
//! # Where `gpupm-driver` comes from
//! `CARGO_BIN_EXE_*` exists only for the package's own binaries, so the
//! harness runs `cargo build -p gpupm-driver --bin gpupm-driver` once per
//! test process with the profile this test was built with (a no-op when it
//! is up to date, and it never leaves a stale binary behind) and uses
//! `target/<profile>/gpupm-driver` next to the test executable. Without
//! cargo (tests run from a copied binary) it uses the binary if present
//! and otherwise fails saying how to build it.
//!
//! The tests need root and `/dev/fuse`; without them they fail with the
//! reason, they never skip.

#![allow(dead_code)]

pub mod cc;
pub mod device;

use std::fs::{self, File};
use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use gpupm_client::DevNode;
use nix::mount::{umount2, MntFlags};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// The daemon under test.
pub const GPUPMD: &str = env!("CARGO_BIN_EXE_gpupmd");
/// Longest start-up or shutdown.
const STARTUP: Duration = Duration::from_secs(60);

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Checks what every process test needs.
pub fn require_root_and_fuse() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the gpupmd tests must run as root (they mount FUSE)"
    );
    assert!(
        Path::new("/dev/fuse").exists(),
        "the gpupmd tests need /dev/fuse"
    );
}

/// Path of a `gpupm-driver` binary built from this workspace.
pub fn driver_binary() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let exe = std::env::current_exe().expect("current exe");
        let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>");
        let bin = profile_dir.join("gpupm-driver");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--quiet", "-p", "gpupm-driver", "--bin", "gpupm-driver"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("CARGO_TARGET_DIR", profile_dir.parent().expect("target dir"));
        match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("release") => cmd.arg("--release"),
            _ => cmd.args(["--profile", "test"]),
        };
        match cmd.status() {
            Ok(s) if s.success() => {}
            Ok(s) => panic!("building gpupm-driver failed ({s}); run `cargo build -p gpupm-driver`"),
            Err(e) => eprintln!("cannot run cargo ({e}); using {} as it is", bin.display()),
        }
        assert!(
            bin.exists(),
            "{} is missing: build it with `cargo build --profile test -p gpupm-driver --bin gpupm-driver`",
            bin.display()
        );
        bin
    })
    .clone()
}

/// A private scratch directory, removed on drop (after unmounting).
#[derive(Debug)]
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A new empty directory.
    pub fn new(tag: &str) -> TempDir {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("gpupmd-{tag}-{}-{n}", std::process::id()));
        if dir.exists() {
            force_unmount(&dir.join("dev"));
            force_unmount(&dir.join("tenant"));
            fs::remove_dir_all(&dir).expect("remove old scratch dir");
        }
        fs::create_dir_all(&dir).expect("create scratch dir");
        TempDir(dir)
    }

    /// A path inside.
    pub fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        force_unmount(&self.0.join("dev"));
        force_unmount(&self.0.join("tenant"));
        if let Err(e) = fs::remove_dir_all(&self.0) {
            eprintln!("leaving {}: {e}", self.0.display());
        }
    }
}

/// Lazily unmounts `dir` while something is mounted there.
pub fn force_unmount(dir: &Path) {
    while is_mounted(dir) {
        if umount2(dir, MntFlags::MNT_DETACH).is_err() {
            break;
        }
    }
}

/// Whether `dir` is a mount point.
pub fn is_mounted(dir: &Path) -> bool {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let dir = dir.to_string_lossy();
    info.lines().any(|l| l.split(' ').nth(4) == Some(&*dir))
}

/// A child process with a notify socket and a log file.
#[derive(Debug)]
pub struct Proc {
    name: &'static str,
    child: Option<Child>,
    log: PathBuf,
    notify: UnixDatagram,
    /// Every notify line received so far.
    pub notes: Vec<String>,
}

impl Proc {
    /// Spawns `cmd` with `NOTIFY_SOCKET` at `sock` and stderr into `log`.
    pub fn spawn(name: &'static str, mut cmd: Command, sock: &Path, log: &Path) -> Proc {
        if sock.exists() {
            fs::remove_file(sock).expect("remove old notify socket");
        }
        let notify = UnixDatagram::bind(sock).expect("bind notify socket");
        notify
            .set_read_timeout(Some(Duration::from_millis(100)))
            .expect("notify timeout");
        cmd.env("NOTIFY_SOCKET", sock)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(log).expect("create log"));
        let child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        Proc {
            name,
            child: Some(child),
            log: log.to_path_buf(),
            notify,
            notes: Vec::new(),
        }
    }

    /// A daemon's metric `name` (a series without labels), scraped from
    /// the endpoint its READY status names.
    // Exposition values are floats; the counters read are exact below 2^53.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    pub fn metric(&self, name: &str) -> u64 {
        use std::io::{Read, Write};
        let addr = self
            .notes
            .iter()
            .find_map(|l| l.split("metrics on http://").nth(1))
            .and_then(|rest| rest.strip_suffix("/metrics"))
            .expect("READY status names the metrics address");
        let mut conn = std::net::TcpStream::connect(addr).expect("connect to the metrics endpoint");
        write!(
            conn,
            "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )
        .expect("send the scrape");
        let mut response = String::new();
        conn.read_to_string(&mut response).expect("read the scrape");
        response
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<f64>().ok())
            .map(|v| v as u64)
            .unwrap_or_else(|| panic!("no {name} in the scrape"))
    }

    /// The log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for a notify line starting with `line` (also one received
    /// earlier); fails with the log if the process exits first.
    pub fn wait_for(&mut self, line: &str) -> String {
        let deadline = Instant::now() + STARTUP;
        let matches = |l: &str| l.starts_with(line);
        if let Some(found) = self.notes.iter().find(|l| matches(l)) {
            return found.clone();
        }
        let mut buf = [0u8; 4096];
        loop {
            match self.notify.recv(&mut buf) {
                Ok(n) => {
                    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                    let mut found = None;
                    for l in text.lines() {
                        self.notes.push(l.to_string());
                        if found.is_none() && matches(l) {
                            found = Some(l.to_string());
                        }
                    }
                    if let Some(f) = found {
                        return f;
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => panic!("notify socket: {e}"),
            }
            if let Some(status) = self.try_wait() {
                panic!(
                    "{} exited ({status}) before {line}:\n{}",
                    self.name,
                    self.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{}: no {line} within {STARTUP:?}:\n{}",
                self.name,
                self.log()
            );
        }
    }

    /// Exit status if it has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Whether it still runs.
    pub fn alive(&mut self) -> bool {
        self.child.is_some() && self.try_wait().is_none()
    }

    /// Process id.
    pub fn pid(&self) -> Pid {
        let child = self.child.as_ref().expect("process running");
        Pid::from_raw(i32::try_from(child.id()).expect("pid fits"))
    }

    /// Sends `sig` and reaps the process.
    pub fn signal_and_wait(&mut self, sig: Signal) -> ExitStatus {
        let mut child = self.child.take().expect("process running");
        if let Err(e) = kill(Pid::from_raw(i32::try_from(child.id()).expect("pid")), sig) {
            eprintln!("kill {}: {e}", self.name);
        }
        child.wait().expect("wait for process")
    }

    /// Waits for the process to exit on its own.
    pub fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + STARTUP;
        loop {
            if let Some(s) = self.try_wait() {
                self.child = None;
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not exit:\n{}",
                self.name,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Err(e) = child.kill() {
                eprintln!("kill {}: {e}", self.name);
            }
            if let Err(e) = child.wait() {
                eprintln!("wait {}: {e}", self.name);
            }
        }
    }
}

/// A running `gpupm-driver` on a step clock.
#[derive(Debug)]
pub struct Driver {
    /// The process.
    pub proc: Proc,
    /// Node directory.
    pub dir: PathBuf,
}

impl Driver {
    /// Starts the driver with `scenario` (TOML text) in `tmp` on a step clock.
    pub fn start(tmp: &TempDir, scenario: &str) -> Driver {
        Driver::start_with_clock(tmp, scenario, "step")
    }

    /// Starts the driver with `clock` (`step` or `realtime`).
    pub fn start_with_clock(tmp: &TempDir, scenario: &str, clock: &str) -> Driver {
        Driver::start_with_args(tmp, scenario, clock, &[])
    }

    /// Starts the driver with `clock` and further command-line `args`.
    pub fn start_with_args(tmp: &TempDir, scenario: &str, clock: &str, args: &[String]) -> Driver {
        require_root_and_fuse();
        let scen = tmp.join("scenario.toml");
        fs::write(&scen, scenario).expect("write scenario");
        let dir = tmp.join("dev");
        let mut cmd = Command::new(driver_binary());
        // The tests check every total against the debug ledger.
        cmd.args(["--clock", clock, "--debug-ledger", "--scenario"])
            .arg(&scen)
            .arg("--node-dir")
            .arg(&dir)
            .args(args)
            .env("RUST_LOG", "info");
        let mut proc = Proc::spawn(
            "gpupm-driver",
            cmd,
            &tmp.join("driver.sock"),
            &tmp.join("driver.log"),
        );
        proc.wait_for("READY=1");
        Driver { proc, dir }
    }

    /// A new handle on `card0`.
    pub fn card(&self) -> DevNode {
        DevNode::open(&self.dir).unwrap_or_else(|e| panic!("open card0: {e}\n{}", self.proc.log()))
    }

    /// SIGTERM; asserts a clean exit.
    pub fn stop(mut self) {
        let status = self.proc.signal_and_wait(Signal::SIGTERM);
        assert!(
            status.success(),
            "driver exit {status}:\n{}",
            self.proc.log()
        );
    }
}

/// A daemon configuration for tests: node, state and pages dirs in `tmp`
/// (unless `extra` has its own `[pages]`), the metrics endpoint on an
/// ephemeral loopback port.
pub fn daemon_config(tmp: &TempDir, extra: &str) -> String {
    let pages = if extra.contains("[pages]") {
        String::new()
    } else {
        format!("[pages]\ndir = {:?}\n", tmp.join("pages"))
    };
    format!(
        "node_dir = {:?}\ntenant_dir = {:?}\nstate_dir = {:?}\n{extra}\n{pages}[metrics]\nlisten = \"127.0.0.1:0\"\n",
        tmp.join("dev"),
        tmp.join("tenant"),
        tmp.join("state"),
    )
}

/// Starts `gpupmd` with `config` (TOML text) written into `tmp`; does not
/// wait for readiness.
pub fn spawn_daemon(tmp: &TempDir, config: &str, args: &[&str], env: &[(&str, &str)]) -> Proc {
    let path = tmp.join("gpupmd.toml");
    fs::write(&path, config).expect("write config");
    let mut cmd = Command::new(GPUPMD);
    cmd.arg("--config")
        .arg(&path)
        .args(args)
        .env("RUST_LOG", "info");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let log = tmp.join("gpupmd.log");
    // Keep earlier runs' logs (kill tests restart the daemon).
    if let Ok(old) = fs::read(&log) {
        let mut all = fs::read(tmp.join("gpupmd-all.log")).unwrap_or_default();
        all.extend(old);
        fs::write(tmp.join("gpupmd-all.log"), all).expect("keep log");
    }
    Proc::spawn("gpupmd", cmd, &tmp.join("gpupmd.sock"), &log)
}

/// Starts `gpupmd` without the tenant node (the core's test seam) and
/// waits for `READY=1`.
pub fn start_daemon(tmp: &TempDir, config: &str) -> Proc {
    let mut d = spawn_daemon(tmp, config, &[], &[]);
    d.wait_for("READY=1");
    d
}
