//! `gpupm health` (admin): one verdict per subsystem — PASS, WARN or FAIL
//! ([`checks`]) — from the daemon's metrics endpoint (the address in the
//! daemon's configuration) and the device node (CCU wraps, clock
//! capability, switches, how far a real-time device fell behind the wall
//! clock), with the numbers judged (fallback share,
//! handshake p50/p99, losses) and what to do next. Warnings use the
//! thresholds of the shipped alert rules ([`gpupm_client::health`]).
//!
//! JSON: [`HealthJson`] (`gpupm health --help` shows the schema). Exit 0
//! when every check passes, 1 on any WARN or FAIL, 2 when neither the
//! daemon nor the device can be read.

mod checks;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use gpupm_client::DevNode;
use gpupm_uapi::regs::{self as r, clock_cap, device_status};
use schemars::JsonSchema;
use serde::Serialize;

use self::checks::{Check, Inputs, Verdict};
use crate::error::{one_line, CliError, CliResult};
use crate::gpu::GpuJson;
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

/// The buckets of histogram `name` (`le` bound, cumulative count),
/// ascending, `+Inf` last.
fn buckets(text: &str, name: &str) -> Vec<(f64, f64)> {
    let prefix = format!("{name}_bucket{{");
    let mut out: Vec<(f64, f64)> = text
        .lines()
        .filter_map(|l| l.strip_prefix(prefix.as_str()))
        .filter_map(|rest| {
            let (labels, value) = rest.rsplit_once('}')?;
            let le = labels.split(',').find_map(|l| l.strip_prefix("le=\""))?;
            let le = le.trim_end_matches('"');
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, value.split_whitespace().next()?.parse().ok()?))
        })
        .collect();
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}

/// A latency quantile estimated from the histogram.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, JsonSchema)]
pub struct Quantile {
    /// Seconds (the largest bucket bound when `beyond_buckets`).
    pub seconds: f64,
    /// The quantile is above the histogram's largest finite bucket: only
    /// a lower bound is known.
    pub beyond_buckets: bool,
}

/// Quantile `q` (0..1) of a cumulative histogram, interpolated linearly
/// within its bucket as Prometheus' `histogram_quantile` does; `None`
/// without samples.
fn quantile(buckets: &[(f64, f64)], q: f64) -> Option<Quantile> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut lower = (0.0, 0.0);
    for &(le, c) in buckets {
        if c >= rank {
            if le.is_infinite() {
                return Some(Quantile {
                    seconds: lower.0,
                    beyond_buckets: true,
                });
            }
            let span = c - lower.1;
            let frac = if span > 0.0 {
                (rank - lower.1) / span
            } else {
                1.0
            };
            return Some(Quantile {
                seconds: lower.0 + (le - lower.0) * frac,
                beyond_buckets: false,
            });
        }
        lower = (le, c);
    }
    None
}

/// `gpupm health --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct HealthJson {
    /// The worst verdict of `checks`.
    pub verdict: Verdict,
    /// One check per subsystem.
    pub checks: Vec<Check>,
    /// The daemon, from its metrics endpoint.
    pub daemon: DaemonHealth,
    /// The device, from the device node (null when it cannot be read,
    /// e.g. for a tenant).
    pub device: Option<DeviceHealth>,
    /// `verdict` is `pass` (kept from earlier releases).
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
    /// Median handshake latency, estimated from the histogram (null
    /// without samples).
    pub handshake_p50: Option<Quantile>,
    /// 99th percentile handshake latency, estimated from the histogram
    /// (null without samples).
    pub handshake_p99: Option<Quantile>,
    /// Longest switch request to pause since the previous scrape, seconds
    /// of device time.
    pub handshake_response_max_seconds: f64,
    /// Stream records lost to ring overflow.
    pub stream_lost_records: f64,
    /// Stream records drained.
    pub stream_drained_records: f64,
    /// Of those, read from the driver's commit mirror.
    pub stream_mirrored_records: f64,
    /// Drain reads of the mirror that fell back to the memory window.
    pub stream_mirror_fallbacks: f64,
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
    /// Retired contexts kept.
    pub contexts_retained: f64,
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
        let latency = buckets(text, "gpupm_handshake_duration_seconds");
        DaemonMetrics {
            handshakes: v("gpupm_handshakes_total"),
            handshake_fallbacks: v("gpupm_handshake_fallbacks_total"),
            handshake_seconds_sum: v("gpupm_handshake_duration_seconds_sum"),
            handshake_p50: quantile(&latency, 0.5),
            handshake_p99: quantile(&latency, 0.99),
            handshake_response_max_seconds: v("gpupm_handshake_response_max_seconds"),
            stream_lost_records: v("gpupm_stream_lost_records_total"),
            stream_drained_records: v("gpupm_stream_drained_records_total"),
            stream_mirrored_records: v("gpupm_stream_mirrored_records_total"),
            stream_mirror_fallbacks: v("gpupm_stream_mirror_fallbacks_total"),
            stream_drain_lag_records: v("gpupm_stream_drain_lag_records"),
            tenant_requests: v("gpupm_tenant_requests_total"),
            tenant_request_errors: v("gpupm_tenant_request_errors_total"),
            contexts_active: v("gpupm_contexts_active"),
            contexts_retired: v("gpupm_contexts_retired_total"),
            contexts_retained: v("gpupm_contexts_retained"),
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
    /// Who the device is (null for a device before ABI 1.12).
    pub gpu: Option<GpuJson>,
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
        gpu: crate::gpu::identity(dev)?,
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
    let checks = checks::run(&Inputs {
        daemon: metrics.as_ref(),
        daemon_error: scraped.as_ref().err().map(String::as_str),
        device: device.as_ref(),
    });
    let verdict = checks::overall(&checks);
    let health = HealthJson {
        verdict,
        checks,
        daemon: DaemonHealth {
            endpoint: endpoint.to_string(),
            reachable: scraped.is_ok(),
            metrics,
        },
        device,
        healthy: verdict == Verdict::Pass,
    };
    if args.json {
        emit(&crate::output::json_line(&health)?)?;
    } else {
        emit(&text(&health, dev.err(), &node_dir))?;
    }
    Ok(if verdict == Verdict::Pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The health as text: a line per check, with what to do under each one
/// that did not pass, and the verdict.
fn text(h: &HealthJson, dev_error: Option<String>, node_dir: &Path) -> String {
    let mut t = format!("gpupm health: gpupmd at {}", h.daemon.endpoint);
    match (&h.device, dev_error) {
        (Some(_), _) => t += &format!(", device {}\n", node_dir.display()),
        (None, Some(e)) => t += &format!("; device not readable ({e})\n"),
        (None, None) => t += "\n",
    }
    for c in &h.checks {
        let head = format!("  {}  {:<10}  ", c.verdict.name(), c.subsystem);
        t += &wrap(&head, &c.summary);
        if let Some(next) = c.next {
            t += &wrap(&format!("{:<20}", ""), &format!("next: {next}"));
        }
    }
    let failing = h
        .checks
        .iter()
        .filter(|c| c.verdict != Verdict::Pass)
        .count();
    t += &format!(
        "verdict: {} ({failing} of {} checks not passing; gpupmd's counts since it started)\n",
        h.verdict.name(),
        h.checks.len()
    );
    t
}

/// `text` after `head`, wrapped at 80 columns, continuation lines
/// indented as far as `head` is wide.
fn wrap(head: &str, text: &str) -> String {
    const WIDTH: usize = 80;
    let indent = head.chars().count();
    let mut out = head.to_string();
    let mut col = indent;
    for word in text.split_whitespace() {
        let w = word.chars().count();
        if col > indent && col + 1 + w > WIDTH {
            out += "\n";
            out += &" ".repeat(indent);
            col = indent;
        } else if col > indent {
            out.push(' ');
            col += 1;
        }
        out += word;
        col += w;
    }
    out + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_wrap_under_their_heading() {
        let t = wrap("  WARN  streams     ", &"word ".repeat(30));
        assert!(t.lines().all(|l| l.chars().count() <= 80), "{t}");
        assert!(
            t.lines().skip(1).all(|l| l.starts_with(&" ".repeat(20))),
            "{t}"
        );
    }

    #[test]
    fn quantiles_interpolate_within_their_bucket() {
        let b = [
            (1.0, 10.0),
            (2.0, 90.0),
            (4.0, 100.0),
            (f64::INFINITY, 100.0),
        ];
        assert_eq!(quantile(&b, 0.5).map(|q| q.seconds), Some(1.5));
        assert!(quantile(&b, 0.99).is_some_and(|q| (q.seconds - 3.8).abs() < 1e-9));
        let beyond = [(1.0, 10.0), (f64::INFINITY, 100.0)];
        assert_eq!(
            quantile(&beyond, 0.99),
            Some(Quantile {
                seconds: 1.0,
                beyond_buckets: true
            })
        );
        assert_eq!(quantile(&[(1.0, 0.0), (f64::INFINITY, 0.0)], 0.5), None);
        let text = "x_bucket{le=\"0.5\"} 3\nx_bucket{le=\"+Inf\"} 4\nx_sum 2\n";
        assert_eq!(buckets(text, "x"), vec![(0.5, 3.0), (f64::INFINITY, 4.0)]);
    }
}
