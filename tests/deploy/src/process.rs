//! A child process with its own `NOTIFY_SOCKET` (the sd_notify lines it
//! sends are how the tests know it is ready) and its stderr in a log file;
//! killed and reaped on drop.

use std::fs::{self, File};
use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Longest start-up.
pub const STARTUP: Duration = Duration::from_secs(60);

/// A running child process.
#[derive(Debug)]
pub struct Proc {
    name: String,
    child: Option<Child>,
    log: PathBuf,
    notify: UnixDatagram,
    /// Every notify line received so far.
    pub notes: Vec<String>,
}

impl Proc {
    /// Spawns `cmd` with `NOTIFY_SOCKET` at `sock` and stderr appended to
    /// `log`.
    pub fn spawn(name: &str, mut cmd: Command, sock: &Path, log: &Path) -> Proc {
        if sock.exists() {
            fs::remove_file(sock).expect("remove an old notify socket");
        }
        let notify = UnixDatagram::bind(sock).expect("bind a notify socket");
        notify
            .set_read_timeout(Some(Duration::from_millis(100)))
            .expect("notify socket timeout");
        let log_file = File::options()
            .create(true)
            .append(true)
            .open(log)
            .expect("open the log");
        cmd.env("NOTIFY_SOCKET", sock)
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

    /// The log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for a notify line starting with `prefix` (also one received
    /// earlier) and returns it; fails with the log if the process exits
    /// first or [`STARTUP`] passes.
    pub fn wait_for(&mut self, prefix: &str) -> String {
        if let Some(found) = self.notes.iter().find(|l| l.starts_with(prefix)) {
            return found.clone();
        }
        let deadline = Instant::now() + STARTUP;
        let mut buf = [0u8; 4096];
        loop {
            match self.notify.recv(&mut buf) {
                Ok(n) => {
                    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                    self.notes.extend(text.lines().map(str::to_owned));
                    if let Some(found) = text.lines().find(|l| l.starts_with(prefix)) {
                        return found.to_owned();
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => panic!("{}: notify socket: {e}", self.name),
            }
            if let Some(status) = self.try_wait() {
                panic!(
                    "{} exited ({status}) before {prefix}:\n{}",
                    self.name,
                    self.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{}: no {prefix} within {STARTUP:?}:\n{}",
                self.name,
                self.log()
            );
        }
    }

    /// The exit status, once it has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
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
