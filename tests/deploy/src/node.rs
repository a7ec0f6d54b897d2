//! One gpupm node as the tests run it: the real `gpupm-driver` on a step
//! clock and the real `gpupmd`, on private node, tenant and state
//! directories, with its metrics listeners on loopback ports of their own:
//! the local one (health only) and the authenticated one with tenant
//! series (TLS and basic auth, the fleet's [`WebAuth`]), which Prometheus
//! scrapes.

use std::fs;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use crate::device::Device;
use crate::process::Proc;
use crate::web::WebAuth;
use crate::{http, require_root_and_fuse};
use gpupm_test_support::web::Client;
use gpupm_test_support::Scratch;

/// The directory holding this build's binaries (one build per test
/// process: `CARGO_BIN_EXE_*` covers only a package's own binaries).
pub fn binaries() -> PathBuf {
    gpupm_test_support::bins::build_once().to_path_buf()
}

/// A driver and daemon pair.
#[derive(Debug)]
pub struct Node {
    /// Its name (the `instance` label the tests give it).
    pub name: String,
    /// The authenticated metrics listener (HTTPS, basic auth, tenant
    /// series); the same across daemon restarts.
    pub metrics: SocketAddr,
    /// The local metrics listener (health only, no credentials).
    pub local_metrics: SocketAddr,
    client: Client,
    daemon: Option<Proc>,
    driver: Proc,
    // Dropped last: unmounts what the processes leave.
    dir: Scratch,
}

impl Node {
    /// Starts `gpupm-driver --clock step` with `scenario` (TOML text) and
    /// `gpupmd` with `daemon_toml` (extra top-level keys and tables) and
    /// `auth`'s web configuration on ephemeral loopback ports; returns once
    /// both sent `READY=1`.
    pub fn start(name: &str, scenario: &str, daemon_toml: &str, auth: &WebAuth) -> Node {
        require_root_and_fuse();
        let bins = binaries();
        let dir = Scratch::new(&format!("node-{name}"));
        fs::write(dir.join("scenario.toml"), scenario).expect("write the scenario");
        let mut cmd = Command::new(bins.join("gpupm-driver"));
        cmd.args(["--clock", "step", "--debug-ledger", "--scenario"])
            .arg(dir.join("scenario.toml"))
            .arg("--node-dir")
            .arg(dir.join("dev"))
            .env("RUST_LOG", "info");
        if scenario.contains("confidential_key") {
            // The fleet's confidential VM has its key in the scenario.
            cmd.arg("--insecure-scenario-keys");
        }
        let mut driver = Proc::spawn(
            "gpupm-driver",
            cmd,
            &dir.join("driver.sock"),
            &dir.join("driver.log"),
        );
        driver.wait_for("READY=1");
        // Several nodes share one host: each keeps its tenant pages apart.
        let pages = if daemon_toml.contains("[pages]") {
            String::new()
        } else {
            format!("[pages]\ndir = {:?}\n", dir.join("pages"))
        };
        let config = |local: &str, authenticated: &str| {
            format!(
                "node_dir = {:?}\ntenant_dir = {:?}\nstate_dir = {:?}\n{daemon_toml}\n{pages}[metrics]\nlisten = \"{local}\"\n\
                 [metrics.authenticated]\nlisten = \"{authenticated}\"\nweb_config_file = {:?}\ntenant_series = true\n",
                dir.join("dev"),
                dir.join("tenant"),
                dir.join("state"),
                auth.web_config.display().to_string(),
            )
        };
        fs::write(
            dir.join("gpupmd.toml"),
            config("127.0.0.1:0", "127.0.0.1:0"),
        )
        .expect("write the config");
        let mut daemon = spawn_daemon(&dir);
        let status = daemon.wait_for("STATUS=serving");
        daemon.wait_for("READY=1");
        let local_metrics = status
            .split("; metrics on http://")
            .nth(1)
            .and_then(|rest| rest.strip_suffix("/metrics"))
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no metrics address in {status:?}"));
        let metrics = status
            .split("authenticated metrics at https://")
            .nth(1)
            .and_then(|rest| rest.split_once("/metrics"))
            .and_then(|(a, _)| a.parse().ok())
            .unwrap_or_else(|| panic!("no authenticated metrics address in {status:?}"));
        // Restarts listen where Prometheus already scrapes.
        fs::write(
            dir.join("gpupmd.toml"),
            config(&format!("{local_metrics}"), &format!("{metrics}")),
        )
        .expect("write the config");
        Node {
            name: name.to_owned(),
            metrics,
            local_metrics,
            client: auth.client(),
            daemon: Some(daemon),
            driver,
            dir,
        }
    }

    /// The device node.
    pub fn device(&self) -> Device {
        Device::open(&self.dir.join("dev"))
    }

    /// Whether the daemon has exited (or was killed).
    pub fn daemon_gone(&mut self) -> bool {
        self.daemon.as_mut().is_none_or(|d| d.try_wait().is_some())
    }

    /// SIGKILLs the daemon by its pid and reaps it; returns the pid.
    pub fn kill_daemon(&mut self) -> Pid {
        let mut daemon = self.daemon.take().expect("the daemon runs");
        let pid = daemon.pid();
        daemon.signal_and_wait(Signal::SIGKILL);
        pid
    }

    /// Starts the daemon again with the same configuration (and port).
    pub fn restart_daemon(&mut self) {
        assert!(self.daemon.is_none(), "the daemon still runs");
        let mut daemon = spawn_daemon(&self.dir);
        daemon.wait_for("READY=1");
        self.daemon = Some(daemon);
    }

    /// One scrape of the authenticated listener (Prometheus text format).
    pub fn scrape(&self) -> String {
        match self.client.get(self.metrics, "/metrics") {
            Ok((200, _, body)) => body,
            other => panic!("scraping {} at {}: {other:?}", self.name, self.metrics),
        }
    }

    /// One scrape of the local listener, without credentials.
    pub fn scrape_local(&self) -> String {
        match http::get(self.local_metrics, "/metrics") {
            Ok((200, body)) => body,
            other => panic!(
                "scraping {} at {}: {other:?}",
                self.name, self.local_metrics
            ),
        }
    }

    /// The daemon's and the driver's logs.
    pub fn logs(&self) -> String {
        let daemon = fs::read_to_string(self.dir.join("gpupmd.log")).unwrap_or_default();
        format!(
            "--- {} gpupmd ---\n{daemon}\n--- {} gpupm-driver ---\n{}",
            self.name,
            self.name,
            self.driver.log()
        )
    }
}

fn spawn_daemon(dir: &Scratch) -> Proc {
    let mut cmd = Command::new(binaries().join("gpupmd"));
    cmd.arg("--config")
        .arg(dir.join("gpupmd.toml"))
        .env("RUST_LOG", "info");
    Proc::spawn(
        "gpupmd",
        cmd,
        &dir.join("gpupmd.sock"),
        &dir.join("gpupmd.log"),
    )
}
