//! Test fixture: the real `gpupm-driver` (step clock, built-in scenario) and
//! the real `gpupmd` (a private config mapping two numeric tenant uids to
//! VMs) on private directories, each started with a `NOTIFY_SOCKET` the test
//! owns; `gpupm` runs as a process, as root or as a tenant via `setpriv`.
//!
//! The tests need root and `/dev/fuse`; without them they fail with the
//! reason, they never skip.

#![allow(dead_code)]

use std::fs::{self, File};
use std::io;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use gpupm_client::ops::reg32;
use gpupm_client::DevNode;
use gpupm_uapi::regs::{self as r, hs_state, part_status};
use nix::mount::{umount2, MntFlags};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// The command under test.
pub const GPUPM: &str = env!("CARGO_BIN_EXE_gpupm");
/// Tenant uid mapped to VM [`VM_A`].
pub const UID_A: u32 = 47001;
/// Tenant uid mapped to VM [`VM_B`].
pub const UID_B: u32 = 47002;
/// A uid mapped to nothing.
pub const UID_NOBODY: u32 = 47009;
/// VM of tenant A (built-in scenario).
pub const VM_A: u32 = 2;
/// VM of tenant B.
pub const VM_B: u32 = 5;
/// Tenant uid mapped to VM 1 (alone on partition 1) by
/// [`Fixture::start_with_tenants`].
pub const UID_VM1: u32 = 47003;
/// Tenant uid mapped to VM 3 (time-sliced with VM 2 on partition 2) by
/// [`Fixture::start_with_tenants`].
pub const UID_VM3: u32 = 47005;
/// Tenant uid mapped to VM 4 (confidential, alone on partition 3) by
/// [`Fixture::start_with_tenants`].
pub const UID_VM4: u32 = 47004;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Checks what the tests need.
pub fn require_root_and_fuse() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the gpupm CLI tests must run as root (they mount FUSE and switch users)"
    );
    assert!(
        Path::new("/dev/fuse").exists(),
        "the gpupm CLI tests need /dev/fuse"
    );
}

/// Builds `gpupm-driver` and `gpupmd` beside the `gpupm` under test (same
/// profile directory), once per test process.
pub fn build_helpers() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let profile_dir = Path::new(GPUPM).parent().expect("target/<profile>");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args([
            "build",
            "--quiet",
            "-p",
            "gpupm-driver",
            "-p",
            "gpupmd",
            "--bins",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env(
            "CARGO_TARGET_DIR",
            profile_dir.parent().expect("target dir"),
        );
        match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("release") => cmd.arg("--release"),
            _ => cmd.args(["--profile", "test"]),
        };
        match cmd.status() {
            Ok(s) if s.success() => {}
            Ok(s) => panic!("building gpupm-driver and gpupmd failed ({s})"),
            Err(e) => eprintln!("cannot run cargo ({e}); using the binaries as they are"),
        }
        for b in ["gpupm-driver", "gpupmd"] {
            assert!(profile_dir.join(b).exists(), "{} missing beside {GPUPM}", b);
        }
    });
}

/// A scratch directory (world-writable so tenants can write recordings),
/// removed on drop after unmounting.
#[derive(Debug)]
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A new directory.
    pub fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "gpupm-cli-{tag}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        if dir.exists() {
            unmount(&dir.join("dev"));
            unmount(&dir.join("tenant"));
            fs::remove_dir_all(&dir).expect("remove old scratch dir");
        }
        fs::create_dir_all(&dir).expect("scratch dir");
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o1777)).expect("chmod scratch dir");
        TempDir(dir)
    }

    /// A path inside.
    pub fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

fn mounted(dir: &Path) -> bool {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let d = dir.to_string_lossy();
    info.lines().any(|l| l.split(' ').nth(4) == Some(&*d))
}

fn unmount(dir: &Path) {
    while mounted(dir) {
        if umount2(dir, MntFlags::MNT_DETACH).is_err() {
            break;
        }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        unmount(&self.0.join("dev"));
        unmount(&self.0.join("tenant"));
        if let Err(e) = fs::remove_dir_all(&self.0) {
            eprintln!("leaving {}: {e}", self.0.display());
        }
    }
}

/// A child with a notify socket.
#[derive(Debug)]
pub struct Proc {
    name: &'static str,
    child: Option<Child>,
    notify: UnixDatagram,
    log: PathBuf,
}

impl Proc {
    /// Spawns `cmd` and waits for `READY=1`.
    pub fn start(name: &'static str, mut cmd: Command, dir: &TempDir) -> Proc {
        let sock = dir.join(&format!("{name}.sock"));
        let log = dir.join(&format!("{name}.log"));
        let notify = UnixDatagram::bind(&sock).expect("bind notify socket");
        notify
            .set_read_timeout(Some(Duration::from_millis(100)))
            .expect("timeout");
        cmd.env("NOTIFY_SOCKET", &sock)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log).expect("log"));
        let child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        let mut p = Proc {
            name,
            child: Some(child),
            notify,
            log,
        };
        p.wait_ready();
        p
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut buf = [0u8; 4096];
        loop {
            match self.notify.recv(&mut buf) {
                Ok(n)
                    if String::from_utf8_lossy(&buf[..n])
                        .lines()
                        .any(|l| l == "READY=1") =>
                {
                    return
                }
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => panic!("notify: {e}"),
            }
            if let Some(st) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("{} exited ({st}) before READY:\n{}", self.name, self.log());
            }
            assert!(
                Instant::now() < deadline,
                "{} not READY:\n{}",
                self.name,
                self.log()
            );
        }
    }

    /// The log.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether it still runs.
    pub fn alive(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    /// SIGTERM and wait; asserts a clean exit.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill(
                Pid::from_raw(i32::try_from(c.id()).expect("pid")),
                Signal::SIGTERM,
            )
            .expect("SIGTERM");
            let st = c.wait().expect("wait");
            assert!(st.success(), "{} exit {st}:\n{}", self.name, self.log());
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            if let Err(e) = c.kill() {
                eprintln!("kill {}: {e}", self.name);
            }
            if let Err(e) = c.wait() {
                eprintln!("wait {}: {e}", self.name);
            }
        }
    }
}

/// A free loopback port.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// Driver + daemon with two tenants.
#[derive(Debug)]
pub struct Fixture {
    /// The daemon (dropped first).
    pub daemon: Proc,
    /// The driver.
    pub driver: Proc,
    /// The device node.
    pub dev: DevNode,
    /// Configured partitions.
    pub parts: Vec<u32>,
    /// Daemon config path.
    pub config: PathBuf,
    /// Metrics port.
    pub metrics_port: u16,
    /// Scratch directory (dropped last).
    pub tmp: TempDir,
}

impl Fixture {
    /// Starts both processes.
    pub fn start(tag: &str) -> Fixture {
        Fixture::start_with(tag, &[])
    }

    /// Like [`Fixture::start`], with further `gpupm-driver` arguments
    /// (e.g. `--debug-ledger`).
    pub fn start_with(tag: &str, driver_args: &[&str]) -> Fixture {
        Fixture::start_with_tenants(tag, driver_args, &[])
    }

    /// Like [`Fixture::start_with`], mapping further `(vm, uid)` tenants.
    pub fn start_with_tenants(tag: &str, driver_args: &[&str], more: &[(u32, u32)]) -> Fixture {
        require_root_and_fuse();
        build_helpers();
        let tmp = TempDir::new(tag);
        let bin = |n: &str| Path::new(GPUPM).with_file_name(n);
        let mut cmd = Command::new(bin("gpupm-driver"));
        cmd.args(["--clock", "step", "--node-dir"])
            .arg(tmp.join("dev"))
            .args(driver_args);
        let driver = Proc::start("driver", cmd, &tmp);
        let metrics_port = free_port();
        let config = tmp.join("gpupmd.toml");
        let more: String = more
            .iter()
            .map(|(vm, uid)| format!("[[tenant]]\nvm = {vm}\nuid = {uid}\n"))
            .collect();
        fs::write(
            &config,
            format!(
                "node_dir = {:?}\ntenant_dir = {:?}\nstate_dir = {:?}\n\
                 [[tenant]]\nvm = {VM_A}\nuid = {UID_A}\n[[tenant]]\nvm = {VM_B}\nuid = {UID_B}\n{more}\
                 [stream]\nwatermark = 16\n[metrics]\nlisten = \"127.0.0.1:{metrics_port}\"\n[health]\njournal_socket = {:?}\n\
                 [pages]\ndir = {:?}\n",
                tmp.join("dev"),
                tmp.join("tenant"),
                tmp.join("state"),
                tmp.join("no-journal"),
                tmp.join("pages")
            ),
        )
        .expect("config");
        let mut cmd = Command::new(bin("gpupmd"));
        cmd.arg("--config").arg(&config);
        let daemon = Proc::start("gpupmd", cmd, &tmp);
        let dev = DevNode::open(&tmp.join("dev")).expect("card0");
        let st = dev
            .read_many(
                &(1..16)
                    .map(|p| r::part(p, r::PART_STATUS))
                    .collect::<Vec<_>>(),
            )
            .expect("PART_STATUS");
        let parts = (1..16u32)
            .zip(st)
            .filter(|(_, s)| reg32(*s) & part_status::CONFIGURED != 0)
            .map(|(p, _)| p)
            .collect();
        Fixture {
            daemon,
            driver,
            dev,
            parts,
            config,
            metrics_port,
            tmp,
        }
    }

    /// Tenant node path.
    pub fn node(&self) -> String {
        self.tmp.join("tenant/node").display().to_string()
    }

    /// Node directory.
    pub fn node_dir(&self) -> String {
        self.tmp.join("dev").display().to_string()
    }

    /// The daemon's page socket.
    pub fn pages_socket(&self) -> String {
        self.tmp.join("pages/socket").display().to_string()
    }

    /// Advances device time by `ms` in 1 ms chunks, letting the daemon
    /// finish every handshake after each chunk.
    pub fn advance_ms(&mut self, ms: u64) {
        for _ in 0..ms {
            self.dev.advance(1_980_000).expect("advance");
            self.wait_idle();
        }
    }

    /// Waits until every partition's handshake is idle.
    pub fn wait_idle(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let st = self
                .dev
                .read_many(
                    &self
                        .parts
                        .iter()
                        .map(|&p| r::part(p, r::PART_STATUS))
                        .collect::<Vec<_>>(),
                )
                .expect("status");
            let states = st.iter().map(|&s| reg32(s) & part_status::STATE_MASK);
            if states.clone().all(|s| s == hs_state::IDLE) {
                return;
            }
            // A switch whose flush acks are still travelling: only the
            // owner of the step clock (this test) makes them arrive.
            if states.clone().any(|s| s == hs_state::TRIGGERED) {
                self.dev
                    .advance(u64::from(r::FLUSH_ACK_MAX_CYCLES))
                    .expect("advance");
            }
            assert!(self.daemon.alive(), "gpupmd died:\n{}", self.daemon.log());
            assert!(Instant::now() < deadline, "handshakes not idle");
            std::thread::yield_now();
        }
    }

    /// `gpupm ARGS` as root with the fixture's node paths.
    pub fn gpupm(&self, args: &[&str]) -> Run {
        run_as(None, &self.with_nodes(args))
    }

    /// `gpupm ARGS` as `uid` (gid = uid, no supplementary groups).
    pub fn gpupm_as(&self, uid: u32, args: &[&str]) -> Run {
        run_as(Some(uid), &self.with_nodes(args))
    }

    fn with_nodes(&self, args: &[&str]) -> Vec<String> {
        let mut v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        v.extend([
            "--tenant-node".into(),
            self.node(),
            "--node-dir".into(),
            self.node_dir(),
            "--pages-socket".into(),
            self.pages_socket(),
        ]);
        v
    }

    /// Stops the daemon and the driver, asserting clean exits.
    pub fn stop(mut self) {
        self.daemon.stop();
        self.driver.stop();
    }
}

/// What a `gpupm` run produced.
#[derive(Debug)]
pub struct Run {
    /// Exit code.
    pub code: i32,
    /// Stdout.
    pub out: String,
    /// Stderr.
    pub err: String,
}

impl Run {
    /// Stdout as JSON (asserting success).
    pub fn json(&self) -> serde_json::Value {
        assert_eq!(self.code, 0, "stderr: {}", self.err);
        serde_json::from_str(&self.out).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.out))
    }
}

fn output_to_run(o: Output) -> Run {
    Run {
        code: o.status.code().unwrap_or(-1),
        out: String::from_utf8_lossy(&o.stdout).into(),
        err: String::from_utf8_lossy(&o.stderr).into(),
    }
}

/// Runs `gpupm ARGS`, as root or as `uid` through `setpriv`.
pub fn run_as(uid: Option<u32>, args: &[String]) -> Run {
    let mut cmd = match uid {
        Some(u) => {
            let mut c = Command::new("setpriv");
            c.args([
                format!("--reuid={u}"),
                format!("--regid={u}"),
                "--clear-groups".into(),
                GPUPM.into(),
            ]);
            c
        }
        None => Command::new(GPUPM),
    };
    cmd.args(args).stdin(Stdio::null());
    output_to_run(cmd.output().expect("run gpupm"))
}

/// Starts `gpupm ARGS` (as `uid`) without waiting.
pub fn spawn_as(uid: Option<u32>, args: &[String]) -> Child {
    let mut cmd = match uid {
        Some(u) => {
            let mut c = Command::new("setpriv");
            c.args([
                format!("--reuid={u}"),
                format!("--regid={u}"),
                "--clear-groups".into(),
                GPUPM.into(),
            ]);
            c
        }
        None => Command::new(GPUPM),
    };
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.spawn().expect("spawn gpupm")
}

/// Waits for a spawned run.
pub fn finish(c: Child) -> Run {
    output_to_run(c.wait_with_output().expect("wait gpupm"))
}
