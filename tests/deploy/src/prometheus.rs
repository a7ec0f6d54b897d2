//! A real Prometheus server (Debian's `prometheus`) scraping test nodes on
//! loopback with short scrape and evaluation intervals, and its HTTP API.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::web::WebAuth;
use crate::{http, require_tool, wait_until};
use gpupm_test_support::Scratch;

/// Scrape and rule evaluation interval of the test server.
pub const INTERVAL: &str = "500ms";
/// How often the tests poll the API while they wait for a condition.
pub const POLL: Duration = Duration::from_millis(200);

/// One scrape target: its `instance` label and address (a node's
/// authenticated listener).
#[derive(Clone, Debug)]
pub struct Target {
    /// The `instance` label.
    pub instance: String,
    /// The metrics endpoint.
    pub addr: SocketAddr,
}

/// One sample of an instant vector: its labels (with `__name__` if the
/// result kept it) and value.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Value (NaN and ±Inf as Prometheus sends them).
    pub value: f64,
}

impl Sample {
    /// The value of label `name` ("" when absent).
    pub fn label(&self, name: &str) -> &str {
        self.labels.get(name).map_or("", String::as_str)
    }
}

/// A running Prometheus server; stopped on drop.
#[derive(Debug)]
pub struct Prometheus {
    /// The API address.
    pub addr: SocketAddr,
    child: Child,
    dir: Scratch,
}

impl Prometheus {
    /// Starts a server scraping `targets` as job `gpupm` (over HTTPS with
    /// basic auth, with `auth`'s credentials) every [`INTERVAL`] and
    /// evaluating `rule_files` as often; returns once it is ready.
    pub fn start(targets: &[Target], rule_files: &[PathBuf], auth: &WebAuth) -> Prometheus {
        let binary = require_tool("prometheus", "prometheus");
        let dir = Scratch::new("prometheus");
        let mut config = format!(
            "global:\n  scrape_interval: {INTERVAL}\n  scrape_timeout: {INTERVAL}\n  evaluation_interval: {INTERVAL}\nrule_files:\n"
        );
        for f in rule_files {
            writeln!(config, "  - {:?}", f.display().to_string()).unwrap();
        }
        config.push_str("scrape_configs:\n  - job_name: gpupm\n");
        config.push_str(&auth.job_settings());
        config.push_str("    static_configs:\n");
        for t in targets {
            writeln!(
                config,
                "      - targets: [\"{}\"]\n        labels:\n          instance: {:?}",
                t.addr, t.instance
            )
            .unwrap();
        }
        fs::write(dir.join("prometheus.yml"), &config).expect("write prometheus.yml");
        let addr = free_loopback_port();
        let log = fs::File::create(dir.join("prometheus.log")).expect("create the log");
        let child = Command::new(binary)
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        let mut prom = Prometheus { addr, child, dir };
        wait_until("prometheus ready", Duration::from_secs(60), POLL, || {
            if let Some(status) = prom.child.try_wait().expect("poll prometheus") {
                panic!("prometheus exited ({status}):\n{}", prom.log());
            }
            match http::get(prom.addr, "/-/ready") {
                Ok((200, _)) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        });
        prom
    }

    /// The server's log.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    /// `GET /api/v1/{path}`: the `data` of a successful answer.
    pub fn api(&self, path: &str) -> Result<serde_json::Value, String> {
        let (status, body) = http::get(self.addr, &format!("/api/v1/{path}"))?;
        let json: serde_json::Value =
            serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
        if status != 200 || json["status"] != "success" {
            return Err(format!("HTTP {status}: {body}"));
        }
        Ok(json["data"].clone())
    }

    /// An instant query now: the samples of its vector result.
    pub fn query(&self, promql: &str) -> Result<Vec<Sample>, String> {
        let data = self.api(&format!("query?query={}", http::encode(promql)))?;
        if data["resultType"] != "vector" {
            return Err(format!("{promql}: not a vector: {data}"));
        }
        data["result"]
            .as_array()
            .ok_or_else(|| format!("{promql}: no result: {data}"))?
            .iter()
            .map(sample)
            .collect()
    }

    /// The instances whose latest scrape succeeded.
    pub fn up_instances(&self) -> Result<Vec<String>, String> {
        Ok(self
            .query("up{job=\"gpupm\"} == 1")?
            .iter()
            .map(|s| s.label("instance").to_owned())
            .collect())
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        if let Err(e) = self.child.kill() {
            eprintln!("kill prometheus: {e}");
        }
        if let Err(e) = self.child.wait() {
            eprintln!("reap prometheus: {e}");
        }
    }
}

fn sample(v: &serde_json::Value) -> Result<Sample, String> {
    let labels = v["metric"]
        .as_object()
        .ok_or_else(|| format!("no labels in {v}"))?
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
        .collect();
    // [ <unix time>, "<value>" ]; Go formats NaN and infinities as "NaN",
    // "+Inf", "-Inf", which Rust parses too.
    let value = v["value"][1]
        .as_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no value in {v}"))?;
    Ok(Sample { labels, value })
}

/// A loopback address with a port no one listens on now.
fn free_loopback_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().expect("its address")
}
