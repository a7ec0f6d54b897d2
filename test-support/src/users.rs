//! Running code as other users: a program through `setpriv` ([`Cred::command`]),
//! or a closure in a forked child that drops to the user's credentials
//! ([`spawn_as`], [`run_as`]) and answers in JSON. The fork is this crate's
//! one `unsafe` outside the raw node calls.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::process::{Command, Output};
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, pipe, setgroups, setresgid, setresuid, ForkResult, Gid, Pid, Uid};
use serde_json::Value;

/// A user to run a child as.
#[derive(Clone, Debug)]
pub struct Cred {
    /// Real, effective and saved uid.
    pub uid: u32,
    /// Real, effective and saved gid.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

impl Cred {
    /// `uid` with gid `uid` and no supplementary groups.
    pub fn user(uid: u32) -> Self {
        Cred {
            uid,
            gid: uid,
            groups: Vec::new(),
        }
    }

    /// `uid` with gid `uid` and the supplementary `groups`.
    pub fn with_groups(uid: u32, groups: &[u32]) -> Self {
        Cred {
            groups: groups.to_vec(),
            ..Cred::user(uid)
        }
    }

    /// Root.
    pub fn root() -> Self {
        Cred::with_groups(0, &[0])
    }

    /// `program` run as this user through `setpriv` (a fresh process, so
    /// nothing of the test's own state goes with it).
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let groups = if self.groups.is_empty() {
            "--clear-groups".to_owned()
        } else {
            let list: Vec<String> = self.groups.iter().map(u32::to_string).collect();
            format!("--groups={}", list.join(","))
        };
        let mut c = Command::new("setpriv");
        c.arg(format!("--reuid={}", self.uid))
            .arg(format!("--regid={}", self.gid))
            .arg(groups)
            .arg(program.as_ref());
        c
    }
}

/// What a finished command produced.
#[derive(Debug)]
pub struct Run {
    /// Exit code (-1 when killed by a signal).
    pub code: i32,
    /// Stdout.
    pub out: String,
    /// Stderr.
    pub err: String,
}

impl Run {
    /// Stdout as JSON (asserting success).
    pub fn json(&self) -> Value {
        assert_eq!(self.code, 0, "stderr: {}", self.err);
        serde_json::from_str(&self.out).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.out))
    }
}

impl From<Output> for Run {
    fn from(o: Output) -> Run {
        Run {
            code: o.status.code().unwrap_or(-1),
            out: String::from_utf8_lossy(&o.stdout).into(),
            err: String::from_utf8_lossy(&o.stderr).into(),
        }
    }
}

/// The child's end of the parent/child handshake.
#[derive(Debug)]
pub struct Ctl {
    ready: File,
    go: File,
}

impl Ctl {
    /// Tells the parent the child reached a step.
    pub fn ready(&mut self) {
        self.ready.write_all(b"r").expect("signal parent");
    }
    /// Waits for the parent's go-ahead.
    pub fn wait_go(&mut self) {
        let mut b = [0u8; 1];
        self.go.read_exact(&mut b).expect("wait for parent");
    }
}

/// A forked child running as another user.
#[derive(Debug)]
pub struct Child {
    /// Its process id.
    pub pid: Pid,
    ready: File,
    go: File,
    result: File,
}

const CHILD_TIMEOUT: Duration = Duration::from_secs(60);

fn wait_readable(f: &File, what: &str) {
    let mut fds = [PollFd::new(f.as_fd(), PollFlags::POLLIN)];
    let timeout = PollTimeout::try_from(CHILD_TIMEOUT).expect("timeout");
    let n = nix::poll::poll(&mut fds, timeout).expect("poll the child pipe");
    assert!(n > 0, "child did not {what} within {CHILD_TIMEOUT:?}");
}

impl Child {
    /// Waits until the child calls [`Ctl::ready`].
    pub fn wait_ready(&mut self) {
        wait_readable(&self.ready, "signal readiness");
        let mut b = [0u8; 1];
        self.ready.read_exact(&mut b).expect("child readiness");
    }
    /// Waits until the child calls [`Ctl::ready`] (true) or dies without
    /// doing so (false), for at most a minute.
    pub fn ready_or_gone(&mut self) -> bool {
        wait_readable(&self.ready, "signal readiness or die");
        let mut b = [0u8; 1];
        matches!(self.ready.read(&mut b), Ok(1))
    }
    /// Lets the child go on past [`Ctl::wait_go`].
    pub fn go(&mut self) {
        self.go.write_all(b"g").expect("signal child");
    }
    /// Whether the child wrote its answer (or died): [`Child::finish`]
    /// will not wait.
    pub fn done(&self) -> bool {
        let mut fds = [PollFd::new(self.result.as_fd(), PollFlags::POLLIN)];
        nix::poll::poll(&mut fds, PollTimeout::ZERO).expect("poll the child pipe") > 0
    }
    /// The child's answer; panics if it panicked, hung or died.
    pub fn finish(mut self) -> Value {
        wait_readable(&self.result, "finish");
        let mut out = String::new();
        self.result
            .read_to_string(&mut out)
            .expect("read child result");
        let status = waitpid(self.pid, None).expect("waitpid");
        assert_eq!(
            status,
            WaitStatus::Exited(self.pid, 0),
            "child failed: {out}"
        );
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("child result {out:?}: {e}"))
    }
    /// The child's answer, like [`Child::finish`], and how long after the
    /// answer the child took to exit; panics if that is over `exit_within`
    /// (a child held in the kernel, say).
    pub fn finish_within(mut self, exit_within: Duration) -> (Value, Duration) {
        wait_readable(&self.result, "finish");
        let mut out = String::new();
        self.result
            .read_to_string(&mut out)
            .expect("read child result");
        let answered = std::time::Instant::now();
        let status = loop {
            match waitpid(self.pid, Some(nix::sys::wait::WaitPidFlag::WNOHANG)).expect("waitpid") {
                WaitStatus::StillAlive => {
                    assert!(
                        answered.elapsed() < exit_within,
                        "the child answered but did not exit within {exit_within:?}"
                    );
                    std::thread::sleep(Duration::from_millis(2));
                }
                s => break s,
            }
        };
        assert_eq!(
            status,
            WaitStatus::Exited(self.pid, 0),
            "child failed: {out}"
        );
        let v = serde_json::from_str(&out).unwrap_or_else(|e| panic!("child result {out:?}: {e}"));
        (v, answered.elapsed())
    }
    /// Kills the child and reaps it.
    pub fn kill(self) -> WaitStatus {
        kill(self.pid, Signal::SIGKILL).expect("kill child");
        waitpid(self.pid, None).expect("waitpid")
    }
}

fn pipe_pair() -> (File, File) {
    let (r, w): (OwnedFd, OwnedFd) = pipe().expect("pipe");
    (File::from(r), File::from(w))
}

/// Forks a child that drops to `cred` and runs `f`; its JSON answer comes
/// back through [`Child::finish`].
pub fn spawn_as<F: FnOnce(&mut Ctl) -> Value>(cred: &Cred, f: F) -> Child {
    let (ready_r, ready_w) = pipe_pair();
    let (go_r, go_w) = pipe_pair();
    let (result_r, result_w) = pipe_pair();
    // SAFETY: the child only makes system calls, allocates (glibc's malloc
    // is fork-safe) and exits with _exit; it takes no lock another thread
    // of this process may have held at fork time, except on a panic, which
    // the parent detects by timeout.
    match unsafe { fork() }.expect("fork") {
        ForkResult::Parent { child } => Child {
            pid: child,
            ready: ready_r,
            go: go_w,
            result: result_r,
        },
        ForkResult::Child => {
            drop((ready_r, go_w, result_r));
            let mut result_w = result_w;
            let code = match become_user(cred) {
                Err(e) => {
                    let msg = serde_json::json!({ "setup_error": e.to_string() }).to_string();
                    if result_w.write_all(msg.as_bytes()).is_err() {
                        // The parent sees the exit code.
                    }
                    2
                }
                Ok(()) => {
                    let mut ctl = Ctl {
                        ready: ready_w,
                        go: go_r,
                    };
                    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut ctl))) {
                        Ok(v) => match result_w.write_all(v.to_string().as_bytes()) {
                            Ok(()) => 0,
                            Err(_) => 3,
                        },
                        Err(p) => {
                            let msg = p
                                .downcast_ref::<String>()
                                .cloned()
                                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                                .unwrap_or_default();
                            let msg = serde_json::json!({ "panic": msg }).to_string();
                            if result_w.write_all(msg.as_bytes()).is_err() {
                                // The parent sees the exit code.
                            }
                            101
                        }
                    }
                }
            };
            // SAFETY: ends the forked child without running the parent's
            // atexit handlers or destructors.
            unsafe { libc::_exit(code) }
        }
    }
}

/// Runs `f` as `cred` in a child and returns its answer.
pub fn run_as<F: FnOnce() -> Value>(cred: &Cred, f: F) -> Value {
    spawn_as(cred, |_| f()).finish()
}

fn become_user(cred: &Cred) -> nix::Result<()> {
    let groups: Vec<Gid> = cred.groups.iter().map(|&g| Gid::from_raw(g)).collect();
    setgroups(&groups)?;
    let gid = Gid::from_raw(cred.gid);
    setresgid(gid, gid, gid)?;
    let uid = Uid::from_raw(cred.uid);
    setresuid(uid, uid, uid)
}

/// The errno of a client result (0 for success).
pub fn errno_of<T>(r: &Result<T, gpupm_client::ClientError>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.errno().map_or(-1, |e| e as i32),
    }
}
