//! The tenant example programs of `examples/` as an outside tenant author
//! builds and runs them: the C ones compiled from the generated header
//! with every warning an error, the Python ones staged with the generated
//! constants module, both run as a real unprivileged uid through
//! `setpriv` while the test drives the device clock.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::users::Cred;
use crate::workspace_root;

/// One example, built or staged in a scratch directory any uid can read.
#[derive(Clone, Debug)]
pub struct Example {
    /// `C` or `Python`, for messages.
    pub language: &'static str,
    argv: Vec<OsString>,
    dir: PathBuf,
}

impl Example {
    /// `examples/c/NAME.c` built with `cc -std=c11 -Wall -Wextra -Werror`
    /// against `include/` into `dir/NAME`.
    pub fn c(name: &str, dir: &Path) -> Example {
        let root = workspace_root();
        let exe = dir.join(name);
        let out = std::process::Command::new("cc")
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-I"])
            .arg(root.join("include"))
            .arg(root.join(format!("examples/c/{name}.c")))
            .arg("-o")
            .arg(&exe)
            .output()
            .expect("these tests need a C compiler as `cc` (gcc or clang)");
        assert!(
            out.status.success(),
            "building examples/c/{name}.c failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Example {
            language: "C",
            argv: vec![exe.into()],
            dir: dir.to_owned(),
        }
    }

    /// `examples/python/NAME.py` and the generated `gpupm_tenant.py`
    /// copied into `dir`, run by the system's `/usr/bin/python3` (a
    /// Python under /root would not run as another uid).
    pub fn python(name: &str, dir: &Path) -> Example {
        let python = crate::require_tool("/usr/bin/python3", "python3");
        let script = format!("{name}.py");
        for f in [script.as_str(), "gpupm_tenant.py"] {
            let from = workspace_root().join("examples/python").join(f);
            fs::copy(&from, dir.join(f)).unwrap_or_else(|e| panic!("copy {from:?}: {e}"));
        }
        Example {
            language: "Python",
            argv: vec![python.into(), dir.join(script).into()],
            dir: dir.to_owned(),
        }
    }

    /// Starts the example with `args` as `uid` (gid `uid`, no groups),
    /// stdout and stderr piped.
    pub fn spawn_as(&self, uid: u32, args: &[String]) -> Child {
        let mut cmd = Cred::user(uid).command(&self.argv[0]);
        cmd.args(&self.argv[1..])
            .args(args)
            .current_dir(&self.dir)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd.spawn().expect("setpriv (util-linux) runs the example")
    }

    /// Runs the example with `args` as `uid` to its end (the device
    /// clock standing still).
    pub fn run_as(&self, uid: u32, args: &[String]) -> Output {
        self.spawn_as(uid, args).wait_with_output().expect("wait")
    }

    /// Runs the example with `args` as `uid` to its end (the clock
    /// standing still) and fails unless it exits 1 with `Permission
    /// denied` (EACCES) in its stderr: how an example reports a context
    /// that is not the tenant's.
    pub fn assert_denied_as(&self, uid: u32, args: &[String]) {
        let out = self.run_as(uid, args);
        assert_eq!(out.status.code(), Some(1), "{}: {out:?}", self.language);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("Permission denied"),
            "{}: EACCES: {err}",
            self.language
        );
    }

    /// Runs the example with `args` as `uid`, calling `advance` while it
    /// runs; once `advance` answers false (the device holds what the test
    /// wants) the clock stands still until the example ends. Answers its
    /// stdout; fails with its stderr unless it exits 0.
    pub fn run_while(&self, uid: u32, args: &[String], advance: impl FnMut() -> bool) -> String {
        let mut out = run_all_while(&[(self, uid, args)], advance);
        out.pop().expect("one run")
    }
}

/// [`Example::run_while`] for several examples at once, each `(example,
/// uid, args)`: `advance` runs while any of them does. Answers their
/// stdouts in order.
pub fn run_all_while(
    runs: &[(&Example, u32, &[String])],
    mut advance: impl FnMut() -> bool,
) -> Vec<String> {
    let mut children: Vec<Child> = runs
        .iter()
        .map(|(example, uid, args)| example.spawn_as(*uid, args))
        .collect();
    while children
        .iter_mut()
        .any(|c| c.try_wait().expect("try_wait").is_none())
    {
        if !advance() {
            break;
        }
    }
    children
        .into_iter()
        .zip(runs)
        .map(|(child, (example, _, args))| {
            let out = wait_at_most(child, Duration::from_secs(60));
            assert!(
                out.status.success(),
                "the {} example {:?} {args:?} failed ({}):\n{}",
                example.language,
                example.argv,
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).expect("UTF-8 output")
        })
        .collect()
}

/// Waits for `child` to exit and collects its output; kills it and fails
/// if it is still running after `limit`.
fn wait_at_most(child: Child, limit: Duration) -> Output {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || tx.send(child.wait_with_output()));
    match rx.recv_timeout(limit) {
        Ok(out) => {
            waiter.join().expect("waiter").expect("send");
            out.expect("wait")
        }
        Err(_) => {
            // Our own child: it is ours to end (it may have just exited).
            let killed = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            panic!(
                "the example did not end within {limit:?} of the clock standing still \
                 (killed: {killed:?})"
            );
        }
    }
}

/// The `key value` pairs of an output line whose values are numbers
/// (`range 3 count 7` → `{"range": 3, "count": 7}`).
pub fn fields(line: &str) -> std::collections::BTreeMap<String, u64> {
    let words: Vec<&str> = line.split(' ').collect();
    assert!(
        words.len().is_multiple_of(2),
        "not `key value` pairs: {line:?}"
    );
    words
        .chunks(2)
        .map(|kv| {
            let value = kv[1]
                .parse()
                .unwrap_or_else(|_| panic!("{:?} is no number in {line:?}", kv[1]));
            (kv[0].to_owned(), value)
        })
        .collect()
}
