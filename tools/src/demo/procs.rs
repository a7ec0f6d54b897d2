//! The demo's child processes and private directory: spawning with a
//! `NOTIFY_SOCKET` of our own, waiting for `READY=1` (no sleeps: a datagram
//! or the child's exit ends the wait), SIGTERM teardown, and removal of the
//! temporary directory (after unmounting anything left mounted there).

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gpupm_fusemount::notify::NotifyListener;
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

/// Prefix of the demo's private directory under the temp dir.
pub const DIR_PREFIX: &str = "gpupm-demo-";
/// Random characters in its name.
const NAME_RANDOM_CHARS: usize = 12;

/// The demo's private directory (mode 0700, a fresh random name created
/// exclusively, so nothing planted beforehand is ever used), removed on
/// drop after anything left mounted inside is unmounted.
#[derive(Debug)]
pub struct TempDir(Option<tempfile::TempDir>);

impl TempDir {
    /// A new directory under the system temp dir.
    pub fn new() -> CliResult<TempDir> {
        let parent = std::env::temp_dir();
        TempDir::create(&parent, NAME_RANDOM_CHARS).map_err(|e| {
            CliError::usage(format!(
                "cannot create a private directory in {}: {e}",
                parent.display()
            ))
        })
    }

    /// A new directory in `parent` named [`DIR_PREFIX`] and `random`
    /// random characters; an existing entry of that name (a directory or a
    /// link someone planted) is never taken over.
    fn create(parent: &Path, random: usize) -> io::Result<TempDir> {
        tempfile::Builder::new()
            .prefix(DIR_PREFIX)
            .rand_bytes(random)
            .permissions(fs::Permissions::from_mode(0o700))
            .tempdir_in(parent)
            .map(|d| TempDir(Some(d)))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        self.0
            .as_ref()
            .map_or(Path::new(""), tempfile::TempDir::path)
    }

    /// A path inside.
    pub fn join(&self, p: &str) -> PathBuf {
        self.path().join(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        for sub in ["dev", "tenant"] {
            // Each round takes the topmost FUSE mount away.
            while let Ok(true) = gpupm_fusemount::unmount(&self.join(sub)) {}
        }
        if let Some(dir) = self.0.take() {
            let shown = dir.path().display().to_string();
            if let Err(e) = dir.close() {
                eprintln!("gpupm: leaving {shown}: {e}");
            }
        }
    }
}

/// A child that reports readiness through its own notify socket.
#[derive(Debug)]
pub struct Proc {
    name: &'static str,
    child: Option<Child>,
    notify: NotifyListener,
    log: PathBuf,
}

impl Proc {
    /// Spawns `cmd` with `NOTIFY_SOCKET=sock`, stderr into `log`.
    pub fn spawn(name: &'static str, mut cmd: Command, sock: &Path, log: &Path) -> CliResult<Proc> {
        let env = |e: io::Error| CliError::usage(format!("{name}: {e}"));
        let notify = NotifyListener::bind(sock).map_err(env)?;
        cmd.env("NOTIFY_SOCKET", notify.path())
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
        let child = &mut self.child;
        let waited = self.notify.wait_for("READY=1", PATIENCE, || {
            spin.tick();
            child
                .as_mut()
                .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
        });
        match (waited, self.exited()) {
            (Ok(_), _) => Ok(()),
            (Err(_), Some(st)) => Err(CliError::usage(format!(
                "{} exited before READY ({st}): {}",
                self.name,
                self.last_log_line()
            ))),
            (Err(e), None) => Err(CliError::usage(format!(
                "{}: {e}: {}",
                self.name,
                self.last_log_line()
            ))),
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

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    /// With no random characters the name is predictable, as the old
    /// `create_dir_all` one was: a planted directory or link at that name
    /// is refused, not used, and left as it was.
    #[test]
    fn a_planted_directory_or_link_at_the_name_is_never_used() {
        let scratch = tempfile::tempdir().unwrap();
        let victim = scratch.path().join("victim");
        fs::create_dir(&victim).unwrap();
        let parent = scratch.path().join("tmp");
        fs::create_dir(&parent).unwrap();
        let name = parent.join(DIR_PREFIX);
        symlink(&victim, &name).unwrap();
        let e = TempDir::create(&parent, 0).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(
            fs::read_link(&name).unwrap(),
            victim,
            "the link is untouched"
        );
        fs::remove_file(&name).unwrap();
        fs::create_dir(&name).unwrap();
        fs::write(name.join("planted"), "x").unwrap();
        let e = TempDir::create(&parent, 0).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(fs::read_dir(&victim).unwrap().count(), 0);
        assert_eq!(fs::read_to_string(name.join("planted")).unwrap(), "x");
    }

    #[test]
    fn the_private_directory_is_fresh_owner_only_and_removed_on_drop() {
        let parent = tempfile::tempdir().unwrap();
        let dir = TempDir::create(parent.path(), NAME_RANDOM_CHARS).unwrap();
        let path = dir.path().to_owned();
        let meta = fs::symlink_metadata(&path).unwrap();
        assert!(meta.is_dir());
        assert_eq!(meta.permissions().mode() & 0o777, 0o700);
        assert!(path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(DIR_PREFIX));
        fs::write(dir.join("driver.log"), "log").unwrap();
        drop(dir);
        assert!(!path.exists());
    }
}
