//! Test harness: starts the real `gpupm-driver` binary on a private node
//! directory, waits for its `READY=1` on a notify socket it owns, and talks
//! to it only through the node files.
//!
//! The tests need root and `/dev/fuse`; without them they fail with the
//! reason, they never skip.

#![allow(dead_code)]

pub mod node;
pub mod scenario;
pub mod sys;

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use gpupm_uapi::intr::InterruptRecord;
use nix::mount::{umount2, MntFlags};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use zerocopy::FromBytes;

/// Path of the driver binary under test.
pub const DRIVER: &str = env!("CARGO_BIN_EXE_gpupm-driver");
/// How long a driver may take to become ready or to stop.
const STARTUP: Duration = Duration::from_secs(30);

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A private scratch directory, removed on drop.
#[derive(Debug)]
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A new empty directory under the system temp dir.
    pub fn new(tag: &str) -> TempDir {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("gpupm-{tag}-{}-{n}", std::process::id()));
        if dir.exists() {
            force_unmount(&dir.join("dev"));
            fs::remove_dir_all(&dir).expect("remove old scratch dir");
        }
        fs::create_dir_all(&dir).expect("create scratch dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        force_unmount(&self.0.join("dev"));
        if let Err(e) = fs::remove_dir_all(&self.0) {
            eprintln!("leaving {}: {e}", self.0.display());
        }
    }
}

/// Lazily unmounts `dir` if anything is mounted there.
pub fn force_unmount(dir: &Path) {
    while is_mounted(dir) {
        if umount2(dir, MntFlags::MNT_DETACH).is_err() {
            break;
        }
    }
}

/// Whether `dir` is a mount point, per `/proc/self/mountinfo`.
pub fn is_mounted(dir: &Path) -> bool {
    let info = fs::read_to_string("/proc/self/mountinfo").expect("read mountinfo");
    let dir = dir.to_string_lossy();
    info.lines().any(|l| l.split(' ').nth(4) == Some(&*dir))
}

/// Which scenario the driver serves.
#[derive(Clone, Debug)]
pub enum Scenario {
    /// The built-in scenario (no `--scenario`).
    Builtin,
    /// A scenario file with this TOML text, written to the scratch dir.
    Toml(String),
}

/// Options of one driver run.
#[derive(Clone, Debug)]
pub struct Options {
    /// `--clock`.
    pub clock: &'static str,
    /// `--admin-gid`.
    pub admin_gid: Option<u32>,
    /// The device served.
    pub scenario: Scenario,
    /// `--threads` (the driver's default when `None`).
    pub threads: Option<usize>,
    /// The driver's `RUST_LOG`: `debug` keeps a full trail for failing
    /// tests, but also logs every FUSE request, which a benchmark must not
    /// pay for.
    pub log: &'static str,
    /// `--debug-ledger`: most tests check the blocks against the ledger.
    pub debug_ledger: bool,
}

impl Default for Options {
    /// The small scenario ([`scenario::small`]) on a step clock.
    fn default() -> Self {
        Options {
            clock: "step",
            admin_gid: None,
            scenario: Scenario::Toml(scenario::small()),
            threads: None,
            log: "debug",
            debug_ledger: true,
        }
    }
}

impl Options {
    /// Step clock, serving `toml`.
    pub fn toml(toml: String) -> Options {
        Options {
            scenario: Scenario::Toml(toml),
            ..Options::default()
        }
    }
}

/// A running driver.
#[derive(Debug)]
pub struct Driver {
    child: Option<Child>,
    /// Scratch directory (node dir is `dev` inside it).
    pub tmp: TempDir,
    /// The node directory.
    pub dir: PathBuf,
    log: PathBuf,
    notify: UnixDatagram,
}

impl Driver {
    /// Starts a driver serving the small scenario on a step clock.
    pub fn start() -> Driver {
        Driver::start_with(Options::default())
    }

    /// Starts a driver with `opts` in a fresh scratch directory.
    pub fn start_with(opts: Options) -> Driver {
        let tmp = TempDir::new("node");
        Driver::start_in(tmp, opts)
    }

    /// Starts a driver whose node dir is `tmp/dev` (which may hold a stale mount).
    pub fn start_in(tmp: TempDir, opts: Options) -> Driver {
        assert!(
            nix::unistd::geteuid().is_root(),
            "the node tests must run as root (they mount FUSE)"
        );
        assert!(
            Path::new("/dev/fuse").exists(),
            "the node tests need /dev/fuse"
        );
        let dir = tmp.0.join("dev");
        let sock_path = tmp.0.join("notify.sock");
        if sock_path.exists() {
            fs::remove_file(&sock_path).expect("remove old notify socket");
        }
        let notify = UnixDatagram::bind(&sock_path).expect("bind notify socket");
        let log = tmp.0.join("driver.log");
        let mut cmd = Command::new(DRIVER);
        cmd.args(["--clock", opts.clock, "--node-dir"])
            .arg(&dir)
            .env("NOTIFY_SOCKET", &sock_path)
            .env("RUST_LOG", opts.log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log).expect("create driver log"));
        if let Some(n) = opts.threads {
            cmd.arg("--threads").arg(n.to_string());
        }
        if let Scenario::Toml(text) = &opts.scenario {
            let path = tmp.0.join("scenario.toml");
            fs::write(&path, text).expect("write scenario file");
            cmd.arg("--scenario").arg(path);
        }
        if let Some(gid) = opts.admin_gid {
            cmd.arg("--admin-gid").arg(gid.to_string());
        }
        if opts.debug_ledger {
            cmd.arg("--debug-ledger");
        }
        let child = cmd.spawn().expect("spawn gpupm-driver");
        let mut d = Driver {
            child: Some(child),
            tmp,
            dir,
            log,
            notify,
        };
        d.wait_for_notify("READY=1");
        d
    }

    /// Waits for a notify datagram containing `state`; fails with the
    /// driver's log if it exits first or takes too long.
    pub fn wait_for_notify(&mut self, state: &str) {
        self.notify
            .set_read_timeout(Some(Duration::from_millis(200)))
            .expect("set notify timeout");
        let deadline = Instant::now() + STARTUP;
        let mut buf = [0u8; 4096];
        loop {
            match self.notify.recv(&mut buf) {
                Ok(n)
                    if String::from_utf8_lossy(&buf[..n])
                        .lines()
                        .any(|l| l == state) =>
                {
                    return
                }
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => panic!("notify socket: {e}"),
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "gpupm-driver exited ({status}) before {state}:\n{}",
                    self.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "no {state} within {STARTUP:?}:\n{}",
                self.log()
            );
        }
    }

    /// The driver's log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
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
        let child = self.child.as_ref().expect("driver running");
        Pid::from_raw(i32::try_from(child.id()).expect("pid fits"))
    }

    /// Sends `sig` and waits for the driver to exit.
    pub fn signal_and_wait(&mut self, sig: Signal) -> ExitStatus {
        kill(self.pid(), sig).expect("signal driver");
        let mut child = self.child.take().expect("driver running");
        child.wait().expect("wait for driver")
    }

    /// SIGTERM; asserts a clean exit with the node unmounted.
    pub fn stop(mut self) {
        let status = self.signal_and_wait(Signal::SIGTERM);
        assert!(status.success(), "driver exit {status}:\n{}", self.log());
        assert!(!is_mounted(&self.dir), "node still mounted after SIGTERM");
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Err(e) = child.kill() {
                eprintln!("kill driver: {e}");
            }
            if let Err(e) = child.wait() {
                eprintln!("wait driver: {e}");
            }
        }
    }
}

/// Errno of an I/O error (0 if none).
pub fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

/// 32-bit register read.
pub fn rd32(f: &File, offset: u64) -> io::Result<u32> {
    let mut b = [0u8; 4];
    let n = f.read_at(&mut b, offset)?;
    assert_eq!(n, 4, "short register read");
    Ok(u32::from_le_bytes(b))
}

/// 64-bit register read (one 8-byte access).
pub fn rd64(f: &File, offset: u64) -> io::Result<u64> {
    let mut b = [0u8; 8];
    let n = f.read_at(&mut b, offset)?;
    assert_eq!(n, 8, "short register read");
    Ok(u64::from_le_bytes(b))
}

/// 32-bit register write.
pub fn wr32(f: &File, offset: u64, value: u32) -> io::Result<()> {
    let n = f.write_at(&value.to_le_bytes(), offset)?;
    assert_eq!(n, 4, "short register write");
    Ok(())
}

/// Decodes interrupt records returned by `read()`.
pub fn records(bytes: &[u8]) -> Vec<InterruptRecord> {
    assert_eq!(bytes.len() % 32, 0, "read returned a partial record");
    bytes
        .chunks_exact(32)
        .map(|c| InterruptRecord::read_from_bytes(c).expect("32-byte record"))
        .collect()
}

/// Names of `pid`'s threads, sorted, once `loops` of them are fuser event
/// loops (`fuser-N`) or after `deadline`. A new thread names itself only
/// once it runs, so right after READY a loop may still carry its parent's
/// name.
pub fn thread_names_once_loops_run(pid: u32, loops: usize, deadline: Duration) -> Vec<String> {
    let end = Instant::now() + deadline;
    loop {
        let mut names: Vec<String> = fs::read_dir(format!("/proc/{pid}/task"))
            .map(|tasks| {
                tasks
                    .filter_map(|t| fs::read_to_string(t.ok()?.path().join("comm")).ok())
                    .map(|n| n.trim().to_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        let running = names.iter().filter(|n| n.starts_with("fuser-")).count();
        if running >= loops || Instant::now() >= end {
            return names;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
