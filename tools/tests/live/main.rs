//! The live views against the real driver and daemon (step clock, the
//! CLI fixture): outages of gpupmd and of the driver read as gaps, never as
//! idle intervals, and the counts across them are conserved; streams end
//! quietly when their reader goes (`| head`); every interval says what it
//! covers; `dmon` is scriptable like `nvidia-smi dmon`; values are in the
//! units `gpupm events` names.

mod gaps;
mod pipes;
mod spans;
mod units;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gpupm_test_support::cli::Fixture;
use serde_json::Value;

/// Longest wait for a row or an exit.
const PATIENCE: Duration = Duration::from_secs(20);

/// A running `gpupm` whose stdout lines arrive on a channel.
#[derive(Debug)]
pub struct Stream {
    child: Child,
    lines: Receiver<String>,
    err: Arc<Mutex<String>>,
    /// Every line read so far.
    pub seen: Vec<String>,
}

impl Stream {
    /// `gpupm ARGS` as root on the fixture's nodes.
    pub fn spawn(f: &Fixture, args: &[&str]) -> Stream {
        let mut cmd = Command::new(gpupm_test_support::bin!(Cli));
        cmd.args(args)
            .args([
                "--tenant-node",
                &f.node(),
                "--pages-socket",
                &f.pages_socket(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn gpupm");
        let (tx, lines) = mpsc::channel();
        let out = child.stdout.take().expect("stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let err = Arc::new(Mutex::new(String::new()));
        let mut stderr = child.stderr.take().expect("stderr");
        let sink = Arc::clone(&err);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stderr.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .expect("stderr")
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Stream {
            child,
            lines,
            err,
            seen: Vec::new(),
        }
    }

    /// Reads lines until one satisfies `want` (a JSON row); panics after
    /// [`PATIENCE`].
    pub fn until(&mut self, what: &str, want: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.lines.recv_timeout(left).unwrap_or_else(|_| {
                panic!(
                    "no {what} row in {PATIENCE:?}; rows:\n{}\nstderr:\n{}",
                    self.seen.join("\n"),
                    self.stderr()
                )
            });
            self.seen.push(line.clone());
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                if want(&v) {
                    return v;
                }
            }
        }
    }

    /// What it wrote on stderr so far.
    pub fn stderr(&self) -> String {
        self.err.lock().expect("stderr").clone()
    }

    /// Waits for its exit (panics after [`PATIENCE`]); the exit code.
    pub fn wait(&mut self) -> i32 {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                // The remaining lines.
                while let Ok(l) = self.lines.recv_timeout(Duration::from_millis(500)) {
                    self.seen.push(l);
                }
                return s.code().unwrap_or(-1);
            }
            assert!(
                Instant::now() < deadline,
                "gpupm did not exit; rows:\n{}\nstderr:\n{}",
                self.seen.join("\n"),
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The JSON rows read so far.
    pub fn rows(&self) -> Vec<Value> {
        self.seen
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            // By pid: only this child.
            self.child.kill().ok();
            self.child.wait().ok();
        }
    }
}

/// The device clock of the fixture, in kHz.
pub fn clock_khz(f: &Fixture) -> u64 {
    u64::from(
        f.dev
            .read32(gpupm_uapi::regs::CLOCK_KHZ)
            .expect("CLOCK_KHZ"),
    )
}
