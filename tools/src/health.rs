//! `gpupm health` (admin): daemon health from its metrics endpoint (the
//! address in the daemon's configuration) and device health from the device
//! node (fallback-completed switches, CCU wraps, lost stream records, clock
//! capability, and how far a real-time device fell behind the wall clock).
//!
//! JSON: [`HealthJson`] (`gpupm health --help` shows the schema). Exit 1
//! when not healthy (daemon unreachable or a CCU counter wrapped), 2 when
//! neither can be read.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use gpupm_client::DevNode;
use gpupm_uapi::regs::{self as r, clock_cap, device_status};
use schemars::JsonSchema;
use serde::Serialize;

use crate::error::{one_line, CliError, CliResult};
use crate::node::{Global, DEFAULT_NODE_DIR};
use crate::output::emit;

/// Arguments of `gpupm health`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The daemon's configuration (for the metrics address and node dir).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Metrics endpoint (overrides the configuration), e.g. 127.0.0.1:9477.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    /// JSON.
    #[arg(long)]
    json: bool,
}

fn scrape(addr: SocketAddr) -> Result<String, String> {
    let t = Duration::from_secs(2);
    let mut s = TcpStream::connect_timeout(&addr, t).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(t)).map_err(|e| e.to_string())?;
    s.write_all(
        format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\nAccept: text/plain\r\n\r\n").as_bytes(),
    )
    .map_err(|e| e.to_string())?;
    let mut body = String::new();
    s.read_to_string(&mut body).map_err(|e| e.to_string())?;
    match body.split_once("\r\n\r\n") {
        Some((head, rest))
            if head.starts_with("HTTP/1.") && head.split(' ').nth(1) == Some("200") =>
        {
            Ok(rest.to_string())
        }
        _ => Err("unexpected HTTP answer".into()),
    }
}

/// Sum of every sample of `name` in an exposition.
fn sample_sum(text: &str, name: &str) -> Option<f64> {
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (key, rest) = match line.find(['{', ' ']) {
            Some(i) => line.split_at(i),
            None => continue,
        };
        if key != name {
            continue;
        }
        let value = rest
            .rsplit_once('}')
            .map_or(rest, |(_, v)| v)
            .split_whitespace()
            .next();
        if let Some(v) = value.and_then(|v| v.parse::<f64>().ok()) {
            *found.get_or_insert(0.0) += v;
        }
    }
    found
}

/// `gpupm health --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct HealthJson {
    /// The daemon, from its metrics endpoint.
    pub daemon: DaemonHealth,
    /// The device, from the device node (null when it cannot be read,
    /// e.g. for a tenant).
    pub device: Option<DeviceHealth>,
    /// Daemon reachable and no CCU counter wrapped.
    pub healthy: bool,
}

/// The daemon's health.
#[derive(Debug, Serialize, JsonSchema)]
pub struct DaemonHealth {
    /// The metrics endpoint scraped.
    pub endpoint: String,
    /// Whether it answered.
    pub reachable: bool,
    /// What the endpoint reported (when reachable).
    #[serde(flatten)]
    pub metrics: Option<DaemonMetrics>,
}

/// The daemon's work, from its metrics (sums over label sets).
#[derive(Debug, Default, Serialize, JsonSchema)]
pub struct DaemonMetrics {
    /// Host-driven handshakes completed.
    pub handshakes: f64,
    /// Switches the device completed by its fallback.
    pub handshake_fallbacks: f64,
    /// Total handshake time in seconds.
    pub handshake_seconds_sum: f64,
    /// Stream records lost to ring overflow.
    pub stream_lost_records: f64,
    /// Stream records drained.
    pub stream_drained_records: f64,
    /// Largest ring fill seen at drain time since the previous scrape.
    pub stream_drain_lag_records: f64,
    /// Tenant requests served.
    pub tenant_requests: f64,
    /// Tenant requests answered with an error.
    pub tenant_request_errors: f64,
    /// Contexts active on the device.
    pub contexts_active: f64,
    /// Contexts retired.
    pub contexts_retired: f64,
    /// Seconds since the daemon started.
    pub uptime_seconds: f64,
    /// Device time the device's real-time clock dropped (it ran slower
    /// than the wall clock), seconds.
    pub device_lag_seconds: f64,
}

impl DaemonMetrics {
    /// From an exposition (a missing sample reads 0).
    fn of(text: &str) -> DaemonMetrics {
        let v = |name| sample_sum(text, name).unwrap_or(0.0);
        DaemonMetrics {
            handshakes: v("gpupm_handshakes_total"),
            handshake_fallbacks: v("gpupm_handshake_fallbacks_total"),
            handshake_seconds_sum: v("gpupm_handshake_duration_seconds_sum"),
            stream_lost_records: v("gpupm_stream_lost_records_total"),
            stream_drained_records: v("gpupm_stream_drained_records_total"),
            stream_drain_lag_records: v("gpupm_stream_drain_lag_records"),
            tenant_requests: v("gpupm_tenant_requests_total"),
            tenant_request_errors: v("gpupm_tenant_request_errors_total"),
            contexts_active: v("gpupm_contexts_active"),
            contexts_retired: v("gpupm_contexts_retired_total"),
            uptime_seconds: v("gpupm_uptime_seconds"),
            device_lag_seconds: v("gpupm_device_lag_seconds_total"),
        }
    }
}

/// What a clock runs at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ClockCapability {
    /// Primary (boost) clock.
    Primary,
    /// Secondary (throttled) clock.
    Secondary,
}

/// The device's health.
#[derive(Debug, Serialize, JsonSchema)]
pub struct DeviceHealth {
    /// Device cycle now.
    pub cycle: u64,
    /// Nominal clock in kHz.
    pub clock_khz: u32,
    /// Clock capability now.
    pub clock_capability: ClockCapability,
    /// Switches the device completed by its fallback (all partitions).
    pub fallbacks: u64,
    /// The device has seen a fallback since its reset.
    pub fallback_seen: bool,
    /// CCU counters that wrapped (counts lost).
    pub ccu_wraps: u64,
    /// Stream records lost to ring overflow.
    pub stream_lost_records: u64,
    /// Context switches (all partitions).
    pub switches: u64,
    /// Cycles the real-time clock dropped since it started (`CLOCK_LAG`):
    /// the device ran slower than the wall clock.
    pub clock_lag_cycles: u64,
    /// Device time per wall time since the clock started, percent
    /// (`CYCLE / (CYCLE + CLOCK_LAG)`; 100 for a step clock).
    pub realtime_pct: f64,
}

fn device(dev: &DevNode) -> Result<DeviceHealth, gpupm_client::DevError> {
    let parts = crate::list::configured_partitions(dev)?;
    let sum = |reg: u64| -> Result<u64, gpupm_client::DevError> {
        let offsets: Vec<u64> = parts.iter().map(|&p| r::part(p, reg)).collect();
        Ok(dev.read_many(&offsets)?.iter().sum())
    };
    let cap = dev.read32(r::CLOCK_CAP)?;
    let cycle = dev.read64(r::CYCLE)?;
    // A device older than ABI 1.11 has no CLOCK_LAG.
    let lag = dev.read64(r::CLOCK_LAG).unwrap_or(0);
    #[allow(clippy::cast_precision_loss)] // a ratio
    let realtime_pct = if lag == 0 {
        100.0
    } else {
        cycle as f64 * 100.0 / (cycle as f64 + lag as f64)
    };
    Ok(DeviceHealth {
        cycle,
        clock_khz: dev.read32(r::CLOCK_KHZ)?,
        clock_capability: if cap == clock_cap::SECONDARY {
            ClockCapability::Secondary
        } else {
            ClockCapability::Primary
        },
        fallbacks: sum(r::PART_FALLBACKS)?,
        fallback_seen: dev.read32(r::DEVICE_STATUS)? & device_status::FALLBACK_SEEN != 0,
        ccu_wraps: dev.read64(r::CCU_WRAPS)?,
        stream_lost_records: sum(r::PART_STREAM_LOST)?,
        switches: sum(r::PART_SWITCHES)?,
        clock_lag_cycles: lag,
        realtime_pct,
    })
}

/// Runs the command.
pub fn run(g: &Global, args: &Args) -> CliResult<ExitCode> {
    let settings = gpupm_client::config::load(args.config.as_deref())
        .map_err(|e| CliError::usage(one_line(e)))?;
    let endpoint = args.metrics.unwrap_or(settings.metrics_listen);
    let node_dir = if g.node_dir.as_os_str() == DEFAULT_NODE_DIR {
        settings.node_dir.clone()
    } else {
        g.node_dir.clone()
    };
    let scraped = if endpoint.port() == 0 {
        Err("port 0 in the configuration; pass --metrics ADDR".to_string())
    } else {
        scrape(endpoint)
    };
    let metrics = scraped.as_deref().ok().map(DaemonMetrics::of);
    // The device node's failure, as one line, when it cannot be opened.
    let dev = DevNode::open(&node_dir).map_err(one_line);
    let device = match &dev {
        Ok(d) => Some(device(d).map_err(|e| CliError::runtime(one_line(e)))?),
        Err(_) => None,
    };
    if scraped.is_err() && device.is_none() {
        let why = scraped.as_ref().err().cloned().unwrap_or_default();
        let dev_why = dev.as_ref().err().cloned().unwrap_or_default();
        return Err(CliError::usage(format!(
            "no health source: metrics at {endpoint}: {why}; {dev_why}"
        )));
    }
    let healthy = scraped.is_ok() && device.as_ref().is_none_or(|d| d.ccu_wraps == 0);
    let health = HealthJson {
        daemon: DaemonHealth {
            endpoint: endpoint.to_string(),
            reachable: scraped.is_ok(),
            metrics,
        },
        device,
        healthy,
    };
    if args.json {
        emit(&crate::output::json_line(&health)?)?;
    } else {
        emit(&text(&health, scraped.err(), dev.err(), &node_dir))?;
    }
    Ok(if healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The health as text.
fn text(
    h: &HealthJson,
    scrape_error: Option<String>,
    dev_error: Option<String>,
    node_dir: &Path,
) -> String {
    let mut t = format!("daemon (metrics at {}): ", h.daemon.endpoint);
    match scrape_error {
        None => {
            t += "reachable\n";
            let metrics = h
                .daemon
                .metrics
                .as_ref()
                .and_then(|m| serde_json::to_value(m).ok());
            if let Some(serde_json::Value::Object(m)) = metrics {
                for (key, v) in m {
                    t += &format!("  {key:<26} {v}\n");
                }
            }
        }
        Some(e) => t += &format!("UNREACHABLE ({e})\n"),
    }
    let device = h.device.as_ref().and_then(|d| serde_json::to_value(d).ok());
    match (device, dev_error) {
        (Some(serde_json::Value::Object(d)), _) => {
            t += &format!("device ({}):\n", node_dir.display());
            for (k, v) in d {
                t += &format!("  {k:<26} {v}\n");
            }
            if let Some(dev) = h.device.as_ref().filter(|d| d.clock_lag_cycles > 0) {
                #[allow(clippy::cast_precision_loss)] // seconds
                let dropped = dev.clock_lag_cycles as f64 / (f64::from(dev.clock_khz.max(1)) * 1e3);
                t += &format!(
                    "  SLOWER THAN REAL TIME: {:.1} % of real time since the clock started, {dropped:.3} s of device time dropped\n",
                    dev.realtime_pct
                );
            }
        }
        (_, Some(e)) => t += &format!("device: not readable ({e})\n"),
        _ => {}
    }
    t += if h.healthy {
        "healthy\n"
    } else {
        "NOT HEALTHY\n"
    };
    t
}
