//! `gpupm health` (admin): daemon health from its metrics endpoint (the
//! address in the daemon's configuration) and device health from the device
//! node (fallback-completed switches, CCU wraps, lost stream records, clock
//! capability).
//!
//! JSON: `{"daemon": {"endpoint": "ADDR", "reachable": BOOL, METRIC: N…},
//! "device": {"cycle": C, "clock_khz": K, "clock_capability": "primary"|"secondary",
//! "fallbacks": N, "fallback_seen": BOOL, "ccu_wraps": N, "stream_lost_records": N,
//! "switches": N} | null, "healthy": BOOL}`. Exit 1 when not healthy (daemon
//! unreachable or a CCU counter wrapped), 2 when neither can be read.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use gpupm_client::DevNode;
use gpupm_uapi::regs::{self as r, clock_cap, device_status};
use serde_json::{json, Map, Value};

use crate::error::{one_line, CliError, CliResult};
use crate::node::{Global, DEFAULT_NODE_DIR};
use crate::output::emit;

/// Daemon metrics shown, as (JSON key, exposition sample name).
const METRICS: [(&str, &str); 11] = [
    ("handshakes", "gpupm_handshakes_total"),
    ("handshake_fallbacks", "gpupm_handshake_fallbacks_total"),
    (
        "handshake_seconds_sum",
        "gpupm_handshake_duration_seconds_sum",
    ),
    ("stream_lost_records", "gpupm_stream_lost_records_total"),
    (
        "stream_drained_records",
        "gpupm_stream_drained_records_total",
    ),
    ("stream_drain_lag_records", "gpupm_stream_drain_lag_records"),
    ("tenant_requests", "gpupm_tenant_requests_total"),
    ("tenant_request_errors", "gpupm_tenant_request_errors_total"),
    ("contexts_active", "gpupm_contexts_active"),
    ("contexts_retired", "gpupm_contexts_retired_total"),
    ("uptime_seconds", "gpupm_uptime_seconds"),
];

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

fn device(dev: &DevNode) -> Result<Value, gpupm_client::DevError> {
    let parts = crate::list::configured_partitions(dev)?;
    let fb = dev.read_many(
        &parts
            .iter()
            .map(|&p| r::part(p, r::PART_FALLBACKS))
            .collect::<Vec<_>>(),
    )?;
    let lost = dev.read_many(
        &parts
            .iter()
            .map(|&p| r::part(p, r::PART_STREAM_LOST))
            .collect::<Vec<_>>(),
    )?;
    let sw = dev.read_many(
        &parts
            .iter()
            .map(|&p| r::part(p, r::PART_SWITCHES))
            .collect::<Vec<_>>(),
    )?;
    let cap = dev.read32(r::CLOCK_CAP)?;
    Ok(json!({
        "cycle": dev.read64(r::CYCLE)?,
        "clock_khz": dev.read32(r::CLOCK_KHZ)?,
        "clock_capability": if cap == clock_cap::SECONDARY { "secondary" } else { "primary" },
        "fallbacks": fb.iter().sum::<u64>(),
        "fallback_seen": dev.read32(r::DEVICE_STATUS)? & device_status::FALLBACK_SEEN != 0,
        "ccu_wraps": dev.read64(r::CCU_WRAPS)?,
        "stream_lost_records": lost.iter().sum::<u64>(),
        "switches": sw.iter().sum::<u64>(),
    }))
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
    let mut daemon = Map::new();
    daemon.insert("endpoint".into(), json!(endpoint.to_string()));
    let scraped = if endpoint.port() == 0 {
        Err("port 0 in the configuration; pass --metrics ADDR".to_string())
    } else {
        scrape(endpoint)
    };
    daemon.insert("reachable".into(), json!(scraped.is_ok()));
    if let Ok(text) = &scraped {
        for (key, name) in METRICS {
            daemon.insert(key.into(), json!(sample_sum(text, name).unwrap_or(0.0)));
        }
    }
    // The device node's failure, as one line, when it cannot be opened.
    let dev = DevNode::open(&node_dir).map_err(one_line);
    let dev_json = match &dev {
        Ok(d) => Some(device(d).map_err(|e| CliError::runtime(one_line(e)))?),
        Err(_) => None,
    };
    if scraped.is_err() && dev_json.is_none() {
        let why = scraped.as_ref().err().cloned().unwrap_or_default();
        let dev_why = dev.as_ref().err().cloned().unwrap_or_default();
        return Err(CliError::usage(format!(
            "no health source: metrics at {endpoint}: {why}; {dev_why}"
        )));
    }
    let wraps = dev_json
        .as_ref()
        .and_then(|d| d["ccu_wraps"].as_u64())
        .unwrap_or(0);
    let healthy = scraped.is_ok() && wraps == 0;
    if args.json {
        let o = json!({"daemon": daemon, "device": dev_json, "healthy": healthy});
        emit(&format!("{o}\n"))?;
    } else {
        let mut t = format!("daemon (metrics at {endpoint}): ");
        match &scraped {
            Ok(_) => {
                t += "reachable\n";
                for (key, _) in METRICS {
                    t += &format!("  {key:<26} {}\n", daemon[key]);
                }
            }
            Err(e) => t += &format!("UNREACHABLE ({e})\n"),
        }
        match (&dev_json, &dev) {
            (Some(Value::Object(d)), _) => {
                t += &format!("device ({}):\n", node_dir.display());
                for (k, v) in d {
                    t += &format!("  {k:<26} {v}\n");
                }
            }
            (_, Err(e)) => t += &format!("device: not readable ({e})\n"),
            _ => {}
        }
        t += if healthy {
            "healthy\n"
        } else {
            "NOT HEALTHY\n"
        };
        emit(&t)?;
    }
    Ok(if healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
