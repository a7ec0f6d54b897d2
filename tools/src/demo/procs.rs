//! The demo's child processes and private directory: spawning with a
//! `NOTIFY_SOCKET` of our own, waiting for `READY=1` (no sleeps: a datagram
//! or the child's exit ends the wait), SIGTERM teardown, and removal of the
//! temporary directory (after unmounting anything left mounted there).

use std::fs::{self, File};
use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::mount::{umount2, MntFlags};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::error::{CliError, CliResult};
use crate::progress::Spinner;

/// Longest wait for READY or for an exit.
const PATIENCE: Duration = Duration::from_secs(60);

/// Finds `name` next to the running `gpupm` or on PATH.
pub fn find_binary(name: &str) -> CliResult<PathBuf> {
    let exe = std::env::current_exe()
        .map_err(|e| CliError::usage(format!("cannot locate the gpupm executable: {e}")))?;
    let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    let beside = dir.join(name);
    if beside.is_file() {
        return Ok(beside);
    }
    if let Some(path) = std::env::var_os("PATH") {
        for d in std::env::split_paths(&path) {
            if d.join(name).is_file() {
                return Ok(d.join(name));
            }
        }
    }
    Err(CliError::usage(format!(
        "cannot find {name} next to {} or on PATH (build it: cargo build -p gpupm-driver -p gpupmd)",
        dir.display()
    )))
}

/// The demo's private directory, removed on drop.
#[derive(Debug)]
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A new directory under the system temp dir.
    pub fn new() -> CliResult<TempDir> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!("gpupm-demo-{}-{nanos}", std::process::id()));
        fs::create_dir_all(&dir)
            .map_err(|e| CliError::usage(format!("cannot create {}: {e}", dir.display())))?;
        Ok(TempDir(dir))
    }

    /// A path inside.
    pub fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

fn is_mounted(dir: &Path) -> bool {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let dir = dir.to_string_lossy();
    info.lines().any(|l| l.split(' ').nth(4) == Some(&*dir))
}

impl Drop for TempDir {
    fn drop(&mut self) {
        for sub in ["dev", "tenant"] {
            let d = self.0.join(sub);
            while is_mounted(&d) {
                if umount2(&d, MntFlags::MNT_DETACH).is_err() {
                    break;
                }
            }
        }
        if let Err(e) = fs::remove_dir_all(&self.0) {
            eprintln!("gpupm: leaving {}: {e}", self.0.display());
        }
    }
}

/// A child that reports readiness through its own notify socket.
#[derive(Debug)]
pub struct Proc {
    name: &'static str,
    child: Option<Child>,
    notify: UnixDatagram,
    log: PathBuf,
}

impl Proc {
    /// Spawns `cmd` with `NOTIFY_SOCKET=sock`, stderr into `log`.
    pub fn spawn(name: &'static str, mut cmd: Command, sock: &Path, log: &Path) -> CliResult<Proc> {
        let env = |e: io::Error| CliError::usage(format!("{name}: {e}"));
        let notify = UnixDatagram::bind(sock).map_err(env)?;
        notify
            .set_read_timeout(Some(Duration::from_millis(100)))
            .map_err(env)?;
        cmd.env("NOTIFY_SOCKET", sock)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(log).map_err(env)?);
        let child = cmd
            .spawn()
            .map_err(|e| CliError::usage(format!("cannot start {name}: {e}")))?;
        Ok(Proc {
            name,
            child: Some(child),
            notify,
            log: log.to_owned(),
        })
    }

    fn last_log_line(&self) -> String {
        let log = fs::read_to_string(&self.log).unwrap_or_default();
        log.lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("(no output)")
            .trim()
            .to_string()
    }

    /// Whether the child has exited (with its status).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Waits for `READY=1`.
    pub fn wait_ready(&mut self) -> CliResult {
        let mut spin = Spinner::new(format!("starting {}", self.name));
        let deadline = Instant::now() + PATIENCE;
        let mut buf = [0u8; 4096];
        loop {
            spin.tick();
            match self.notify.recv(&mut buf) {
                Ok(n)
                    if String::from_utf8_lossy(&buf[..n])
                        .lines()
                        .any(|l| l == "READY=1") =>
                {
                    return Ok(())
                }
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => return Err(CliError::usage(format!("{} notify socket: {e}", self.name))),
            }
            if let Some(st) = self.exited() {
                return Err(CliError::usage(format!(
                    "{} exited before READY ({st}): {}",
                    self.name,
                    self.last_log_line()
                )));
            }
            if Instant::now() > deadline {
                return Err(CliError::usage(format!(
                    "{} not READY within {PATIENCE:?}: {}",
                    self.name,
                    self.last_log_line()
                )));
            }
        }
    }

    /// The last log line (for error messages).
    pub fn why(&self) -> String {
        format!("{}: {}", self.name, self.last_log_line())
    }

    /// SIGTERM, then waits (SIGKILL after the patience runs out).
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        let pid = Pid::from_raw(i32::try_from(child.id()).ok()?);
        if kill(pid, Signal::SIGTERM).is_err() {
            return child.wait().ok();
        }
        let deadline = Instant::now() + PATIENCE;
        loop {
            match child.try_wait() {
                Ok(Some(st)) => return Some(st),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                _ => {
                    if let Err(e) = child.kill() {
                        eprintln!("gpupm: kill {}: {e}", self.name);
                    }
                    return child.wait().ok();
                }
            }
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}
