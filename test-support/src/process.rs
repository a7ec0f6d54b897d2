//! A child process with its own `NOTIFY_SOCKET` (the sd_notify lines it
//! sends are how a test knows it is ready) and its stderr in a log file;
//! killed and reaped on drop.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use gpupm_fusemount::notify::NotifyListener;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Longest start-up, shutdown or wait for a notification.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// A running child process.
#[derive(Debug)]
pub struct Proc {
    name: String,
    child: Option<Child>,
    log: PathBuf,
    notify: NotifyListener,
    /// Every notify line received so far.
    pub notes: Vec<String>,
}

impl Proc {
    /// Spawns `cmd` with `NOTIFY_SOCKET` at `sock` and stderr appended to
    /// `log`.
    pub fn spawn(name: &str, mut cmd: Command, sock: &Path, log: &Path) -> Proc {
        let notify = NotifyListener::bind(sock).expect("bind a notify socket");
        let log_file = File::options()
            .create(true)
            .append(true)
            .open(log)
            .expect("open the log");
        cmd.env("NOTIFY_SOCKET", notify.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file);
        let child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        Proc {
            name: name.to_owned(),
            child: Some(child),
            log: log.to_path_buf(),
            notify,
            notes: Vec::new(),
        }
    }

    /// Spawns `cmd` in `dir` (`NAME.sock`, `NAME.log`) and waits for
    /// `READY=1`.
    pub fn start(name: &str, cmd: Command, dir: &Path) -> Proc {
        let mut p = Proc::spawn(
            name,
            cmd,
            &dir.join(format!("{name}.sock")),
            &dir.join(format!("{name}.log")),
        );
        p.wait_for("READY=1");
        p
    }

    /// The value of metric `name` (a series without labels) in a scrape
    /// of the endpoint this process announced in its notify status.
    // Exposition values are floats; the counters read are exact below 2^53.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    pub fn metric(&self, name: &str) -> u64 {
        let body = crate::scrape::metrics(crate::scrape::metrics_addr(&self.notes));
        crate::scrape::samples(&body)
            .into_iter()
            .find(|(n, labels, _)| n == name && labels.is_empty())
            .and_then(|(_, _, v)| v.parse::<f64>().ok())
            .map(|v| v as u64)
            .unwrap_or_else(|| panic!("no {name} in the scrape:\n{body}"))
    }

    /// The log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for a notify line starting with `prefix` (also one received
    /// earlier) and returns it; fails with the log if the process exits
    /// first or [`PATIENCE`] passes.
    pub fn wait_for(&mut self, prefix: &str) -> String {
        let starts = |l: &&str| l.starts_with(prefix);
        if let Some(found) = self.notes.iter().map(String::as_str).find(starts) {
            return found.to_owned();
        }
        let (child, notes) = (&mut self.child, &mut self.notes);
        let alive = || {
            child
                .as_mut()
                .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
        };
        let got = self.notify.wait_until(prefix, PATIENCE, alive, |n| {
            notes.extend(n.text.lines().map(str::to_owned));
            n.text.lines().any(|l| starts(&l))
        });
        match got {
            Ok(n) => n.text.lines().find(starts).unwrap_or_default().to_owned(),
            Err(e) => panic!("{}: {e}:\n{}", self.name, self.log()),
        }
    }

    /// The exit status, once it has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Whether it still runs.
    pub fn alive(&mut self) -> bool {
        self.child.is_some() && self.try_wait().is_none()
    }

    /// The process id.
    pub fn pid(&self) -> Pid {
        let child = self.child.as_ref().expect("the process runs");
        Pid::from_raw(i32::try_from(child.id()).expect("a pid fits i32"))
    }

    /// Sends `sig` to this process (by pid) and reaps it.
    pub fn signal_and_wait(&mut self, sig: Signal) -> ExitStatus {
        let pid = self.pid();
        let mut child = self.child.take().expect("the process runs");
        kill(pid, sig).unwrap_or_else(|e| panic!("kill {} {pid}: {e}", self.name));
        child.wait().expect("reap the process")
    }

    /// SIGTERM and reap; asserts a clean exit.
    pub fn stop(&mut self) {
        if self.child.is_some() {
            let status = self.signal_and_wait(Signal::SIGTERM);
            assert!(
                status.success(),
                "{} exit {status}:\n{}",
                self.name,
                self.log()
            );
        }
    }

    /// Waits for the process to exit on its own.
    pub fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + PATIENCE;
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
                eprintln!("reap {}: {e}", self.name);
            }
        }
    }
}

/// Stops a child this test started (SIGTERM by its pid, then SIGKILL after
/// ten seconds) and reaps it when dropped: for servers the test runs
/// without a notify socket (journald, Prometheus).
#[derive(Debug)]
pub struct KillOnDrop(pub Child, pub &'static str);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let pid = Pid::from_raw(i32::try_from(self.0.id()).expect("a pid fits i32"));
        if let Err(e) = kill(pid, Signal::SIGTERM) {
            eprintln!("could not stop {} ({pid}): {e}", self.1);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Err(e) = self.0.kill() {
            eprintln!("could not kill {}: {e}", self.1);
        }
        if let Err(e) = self.0.wait() {
            eprintln!("could not reap {}: {e}", self.1);
        }
    }
}
