//! The periodic health summary and the anomaly warnings.

use std::sync::Arc;
use std::time::{Duration, Instant};

use gpupm_client::health::{FALLBACK_RATIO, LOST_RECORDS};

use super::{HealthConfig, TARGET};
use crate::view::{HealthSnapshot, HealthSource};
use crate::worker::{Doorbell, Worker};

/// `MESSAGE_ID` of the periodic health summary. Fields: `UPTIME_S`,
/// `INTERVAL_S`, `HANDSHAKES`, `HANDSHAKE_SAMPLES`, `HANDSHAKE_P50_US`,
/// `HANDSHAKE_P99_US` (of the handshakes in the interval; 0 without
/// samples), `FALLBACKS`, `FALLBACKS_INTERVAL`, `FALLBACK_RATIO` (of the
/// interval's switches), `FALLBACK_LOGS_SUPPRESSED` (per-event warnings
/// not logged, total), `LOST_RECORDS`, `LOST_INTERVAL`, `DRAINED_RECORDS`,
/// `DEVICE_LAG_MS` (device time the real-time clock dropped in the
/// interval), `DEVICE_SPEED_PCT` (device time per wall time over it),
/// `DRAIN_LAG_RECORDS`, `CONTEXTS_ACTIVE`, `CONTEXTS_RETIRED`,
/// `CONTEXTS_PRUNED`, `CONTEXTS_RETAINED`, `TENANT_REQUESTS`, `TENANT_ERRORS` (totals), `TENANT_REQUEST_RATE`
/// (requests per second over the interval), `TENANT_ERRORS_INTERVAL`.
pub const SUMMARY_ID: &str = "cc6ed650059e4f7c90aa08e5963e2eba";

/// `MESSAGE_ID` of an anomaly warning (`PRIORITY=4`). `ANOMALY` names the
/// kind: `fallbacks` (more than the alert rules' share of the interval's
/// switches, [`gpupm_client::health::FALLBACK_RATIO`]) and `lost_records`
/// (any; with `NEW` and `TOTAL`),
/// `handshake_p99` (with `HANDSHAKE_P99_US` and `THRESHOLD_US`),
/// `tenant_errors` (with `ERRORS` and `REQUESTS` of the interval),
/// `device_behind` (with `DEVICE_SPEED_PCT` and `DEVICE_LAG_MS` of the
/// interval: the device ran slower than real time).
pub const ANOMALY_ID: &str = "8477bf470b0344b186a0460076da9531";

/// When a summary interval is an anomaly.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Thresholds {
    /// Warn when the interval's handshake p99 is above this (µs).
    pub handshake_p99_us: u64,
    /// A tenant error spike needs at least this many errors in the interval…
    pub tenant_errors_min: u64,
    /// …and at least this fraction of the interval's requests failing.
    pub tenant_error_ratio: f64,
    /// Warn when the device ran below this fraction of real time.
    pub device_speed_min: f64,
}

impl Default for Thresholds {
    /// p99 above 500 µs (the handshake goal), ≥ 10 tenant errors making up
    /// ≥ 25 % of the interval's requests, a device below 99 % of real time.
    fn default() -> Self {
        Self {
            handshake_p99_us: 500,
            tenant_errors_min: 10,
            tenant_error_ratio: 0.25,
            device_speed_min: gpupm_client::health::DEVICE_SPEED_MIN,
        }
    }
}

/// One health summary: totals of the current snapshot and what changed
/// over the interval.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    /// Seconds since the daemon started.
    pub uptime_s: f64,
    /// Seconds since the previous summary.
    pub interval_s: f64,
    /// Host-driven handshakes completed (total).
    pub handshakes: u64,
    /// Latency samples in the interval.
    pub handshake_samples: usize,
    /// Median handshake latency of the interval, µs (0 without samples).
    pub handshake_p50_us: u64,
    /// 99th percentile handshake latency of the interval, µs.
    pub handshake_p99_us: u64,
    /// Longest switch request → host pause in the interval, µs of device
    /// time (the margin to the device's fallback timeout).
    pub handshake_response_max_us: u64,
    /// Fallback-completed switches (total).
    pub fallbacks: u64,
    /// Fallbacks in the interval.
    pub fallbacks_new: u64,
    /// Fallbacks per switch in the interval (0 without switches).
    pub fallback_ratio: f64,
    /// Stream records lost (total).
    pub lost_records: u64,
    /// Records lost in the interval.
    pub lost_new: u64,
    /// Stream records drained (total).
    pub drained_records: u64,
    /// Largest ring fill at drain time in the interval.
    pub drain_lag_records: u64,
    /// Contexts active.
    pub contexts_active: u64,
    /// Contexts retired.
    pub contexts_retired: u64,
    /// Retired contexts pruned by the retention policy (total).
    pub contexts_pruned: u64,
    /// Retired contexts kept.
    pub contexts_retained: u64,
    /// Tenant requests (total).
    pub tenant_requests: u64,
    /// Tenant errors (total).
    pub tenant_errors: u64,
    /// Tenant requests per second over the interval.
    pub tenant_request_rate: f64,
    /// Tenant requests in the interval.
    pub tenant_requests_interval: u64,
    /// Tenant errors in the interval.
    pub tenant_errors_interval: u64,
    /// Device time the real-time clock dropped in the interval, ms.
    pub device_lag_ms: f64,
    /// Device time per wall time over the interval (1: real time).
    pub device_speed: f64,
}

/// Something in a summary interval an operator should look at.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Anomaly {
    /// The device completed switches by fallback.
    Fallbacks {
        /// In the interval.
        new: u64,
        /// Total.
        total: u64,
    },
    /// Stream rings overflowed.
    LostRecords {
        /// In the interval.
        new: u64,
        /// Total.
        total: u64,
    },
    /// Handshakes were slow.
    HandshakeP99 {
        /// The interval's p99, µs.
        p99_us: u64,
        /// The threshold, µs.
        threshold_us: u64,
    },
    /// Many tenant requests failed.
    TenantErrors {
        /// Errors in the interval.
        errors: u64,
        /// Requests in the interval.
        requests: u64,
    },
    /// The device ran slower than real time.
    DeviceBehind {
        /// Device time per wall time, percent.
        speed_pct: f64,
        /// Device time dropped in the interval, ms.
        lag_ms: f64,
    },
}

impl Summary {
    /// The summary of `cur` over the interval since `prev`; the latency
    /// samples are `cur`'s.
    pub fn compute(prev: &HealthSnapshot, cur: &HealthSnapshot, interval: Duration) -> Self {
        let mut samples = cur.handshake_latency_ns.clone();
        samples.sort_unstable();
        let interval_s = interval.as_secs_f64();
        let tenant_requests_interval = cur.tenant_requests.saturating_sub(prev.tenant_requests);
        #[allow(clippy::cast_precision_loss)] // a rate; 2^52 requests are far away
        let tenant_request_rate = if interval_s > 0.0 {
            tenant_requests_interval as f64 / interval_s
        } else {
            0.0
        };
        let khz = f64::from(cur.device.clock_khz.max(1));
        #[allow(clippy::cast_precision_loss)] // cycles far below 2^52
        let device_lag_ms = cur.clock_lag_cycles.saturating_sub(prev.clock_lag_cycles) as f64 / khz;
        let device_speed = if interval_s > 0.0 {
            (1.0 - device_lag_ms / 1e3 / interval_s).clamp(0.0, 1.0)
        } else {
            1.0
        };
        Self {
            uptime_s: cur.uptime_s,
            interval_s,
            device_lag_ms,
            device_speed,
            handshakes: cur.handshakes,
            handshake_samples: samples.len(),
            handshake_p50_us: percentile_ns(&samples, 50).map_or(0, ns_to_us),
            handshake_p99_us: percentile_ns(&samples, 99).map_or(0, ns_to_us),
            handshake_response_max_us: ns_to_us(cur.handshake_response_max_ns),
            fallbacks: cur.fallbacks,
            fallbacks_new: cur.fallbacks.saturating_sub(prev.fallbacks),
            fallback_ratio: {
                let new = cur.fallbacks.saturating_sub(prev.fallbacks);
                let switches = new + cur.handshakes.saturating_sub(prev.handshakes);
                #[allow(clippy::cast_precision_loss)] // a ratio
                let r = if switches > 0 {
                    new as f64 / switches as f64
                } else {
                    0.0
                };
                r
            },
            lost_records: cur.lost_records,
            lost_new: cur.lost_records.saturating_sub(prev.lost_records),
            drained_records: cur.drained_records,
            drain_lag_records: cur.drain_lag_records,
            contexts_active: cur.contexts_active,
            contexts_retired: cur.contexts_retired,
            contexts_pruned: cur.contexts_pruned,
            contexts_retained: cur.contexts_retained,
            tenant_requests: cur.tenant_requests,
            tenant_errors: cur.tenant_errors,
            tenant_request_rate,
            tenant_requests_interval,
            tenant_errors_interval: cur.tenant_errors.saturating_sub(prev.tenant_errors),
        }
    }

    /// The anomalies of this interval, in a fixed order.
    pub fn anomalies(&self, t: &Thresholds) -> Vec<Anomaly> {
        let mut out = Vec::new();
        if FALLBACK_RATIO.exceeded(self.fallback_ratio) {
            out.push(Anomaly::Fallbacks {
                new: self.fallbacks_new,
                total: self.fallbacks,
            });
        }
        #[allow(clippy::cast_precision_loss)] // a count compared with a threshold
        if LOST_RECORDS.exceeded(self.lost_new as f64) {
            out.push(Anomaly::LostRecords {
                new: self.lost_new,
                total: self.lost_records,
            });
        }
        if self.handshake_samples > 0 && self.handshake_p99_us > t.handshake_p99_us {
            out.push(Anomaly::HandshakeP99 {
                p99_us: self.handshake_p99_us,
                threshold_us: t.handshake_p99_us,
            });
        }
        #[allow(clippy::cast_precision_loss)] // a ratio
        let ratio_hit = self.tenant_requests_interval > 0
            && self.tenant_errors_interval as f64
                >= t.tenant_error_ratio * self.tenant_requests_interval as f64;
        if self.tenant_errors_interval >= t.tenant_errors_min.max(1) && ratio_hit {
            out.push(Anomaly::TenantErrors {
                errors: self.tenant_errors_interval,
                requests: self.tenant_requests_interval,
            });
        }
        if self.device_lag_ms > 0.0 && self.device_speed < t.device_speed_min {
            out.push(Anomaly::DeviceBehind {
                speed_pct: self.device_speed * 100.0,
                lag_ms: self.device_lag_ms,
            });
        }
        out
    }

    /// Logs the summary (info, [`SUMMARY_ID`]).
    pub fn log(&self) {
        tracing::info!(
            target: TARGET,
            message_id = SUMMARY_ID,
            uptime_s = self.uptime_s,
            interval_s = self.interval_s,
            handshakes = self.handshakes,
            handshake_samples = self.handshake_samples,
            handshake_p50_us = self.handshake_p50_us,
            handshake_p99_us = self.handshake_p99_us,
            handshake_response_max_us = self.handshake_response_max_us,
            fallbacks = self.fallbacks,
            fallbacks_interval = self.fallbacks_new,
            fallback_ratio = self.fallback_ratio,
            fallback_logs_suppressed = super::fallback_logs_suppressed(),
            lost_records = self.lost_records,
            lost_interval = self.lost_new,
            drained_records = self.drained_records,
            drain_lag_records = self.drain_lag_records,
            contexts_active = self.contexts_active,
            contexts_retired = self.contexts_retired,
            contexts_pruned = self.contexts_pruned,
            contexts_retained = self.contexts_retained,
            tenant_requests = self.tenant_requests,
            tenant_errors = self.tenant_errors,
            tenant_request_rate = self.tenant_request_rate,
            tenant_errors_interval = self.tenant_errors_interval,
            device_lag_ms = self.device_lag_ms,
            device_speed_pct = self.device_speed * 100.0,
            "health: {} handshakes (p50 {} µs, p99 {} µs), {} fallbacks ({} in the interval, \
             {:.2} %), {} lost ({} in the interval), {} drained, {} contexts active, {:.1} tenant req/s, device at {:.0} % of real time",
            self.handshakes,
            self.handshake_p50_us,
            self.handshake_p99_us,
            self.fallbacks,
            self.fallbacks_new,
            self.fallback_ratio * 100.0,
            self.lost_records,
            self.lost_new,
            self.drained_records,
            self.contexts_active,
            self.tenant_request_rate,
            self.device_speed * 100.0
        );
    }
}

impl Anomaly {
    /// Logs the anomaly (warning, [`ANOMALY_ID`]).
    pub fn log(&self) {
        match *self {
            Anomaly::Fallbacks { new, total } => tracing::warn!(
                target: TARGET,
                message_id = ANOMALY_ID,
                anomaly = "fallbacks",
                new,
                total,
                "{new} context switches completed by device fallback since the last summary ({total} in total)"
            ),
            Anomaly::LostRecords { new, total } => tracing::warn!(
                target: TARGET,
                message_id = ANOMALY_ID,
                anomaly = "lost_records",
                new,
                total,
                "{new} stream records lost to ring overflow since the last summary ({total} in total)"
            ),
            Anomaly::HandshakeP99 {
                p99_us,
                threshold_us,
            } => tracing::warn!(
                target: TARGET,
                message_id = ANOMALY_ID,
                anomaly = "handshake_p99",
                handshake_p99_us = p99_us,
                threshold_us,
                "handshake latency p99 {p99_us} µs is above {threshold_us} µs"
            ),
            Anomaly::TenantErrors { errors, requests } => tracing::warn!(
                target: TARGET,
                message_id = ANOMALY_ID,
                anomaly = "tenant_errors",
                errors,
                requests,
                "{errors} of {requests} tenant requests failed since the last summary"
            ),
            Anomaly::DeviceBehind { speed_pct, lag_ms } => tracing::warn!(
                target: TARGET,
                message_id = ANOMALY_ID,
                anomaly = "device_behind",
                device_speed_pct = speed_pct,
                device_lag_ms = lag_ms,
                "the device ran slower than real time: {speed_pct:.1} % of real time, \
                 {lag_ms:.1} ms of device time dropped since the last summary"
            ),
        }
    }
}

/// Nearest-rank percentile `pct` (1..=100) of ascending `sorted` samples.
pub fn percentile_ns(sorted: &[u64], pct: u32) -> Option<u64> {
    let n = sorted.len();
    let pct = usize::try_from(pct.clamp(1, 100)).ok()?;
    let rank = n.checked_mul(pct)?.div_ceil(100).max(1);
    sorted.get(rank - 1).copied()
}

fn ns_to_us(ns: u64) -> u64 {
    ns.saturating_add(500) / 1000
}

/// Starts the periodic health summary and anomaly warnings with the
/// default [`Thresholds`].
pub fn start_reporter(source: Arc<dyn HealthSource>, cfg: HealthConfig) -> std::io::Result<Worker> {
    start_reporter_with(source, cfg, Thresholds::default())
}

/// Starts the periodic health summary: every `cfg.summary_interval` one
/// summary, then one warning per anomaly, until the worker is dropped.
pub fn start_reporter_with(
    source: Arc<dyn HealthSource>,
    cfg: HealthConfig,
    thresholds: Thresholds,
) -> std::io::Result<Worker> {
    let period = cfg.summary_interval.max(Duration::from_millis(1));
    let mut prev = source.snapshot();
    let mut carried = std::mem::take(&mut prev.handshake_latency_ns);
    let mut last = Instant::now();
    Worker::start("gpupmd-health", Doorbell::new(), Some(period), move || {
        let mut cur = source.snapshot();
        if !carried.is_empty() {
            carried.append(&mut cur.handshake_latency_ns);
            cur.handshake_latency_ns = std::mem::take(&mut carried);
        }
        let now = Instant::now();
        let summary = Summary::compute(&prev, &cur, now.duration_since(last));
        summary.log();
        for anomaly in summary.anomalies(&thresholds) {
            anomaly.log();
        }
        cur.handshake_latency_ns.clear();
        prev = cur;
        last = now;
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let s: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile_ns(&s, 50), Some(50));
        assert_eq!(percentile_ns(&s, 99), Some(99));
        assert_eq!(percentile_ns(&[7], 99), Some(7));
        assert_eq!(percentile_ns(&[], 50), None);
    }

    #[test]
    fn anomalies_follow_the_deltas_and_thresholds() {
        let prev = HealthSnapshot {
            fallbacks: 2,
            lost_records: 5,
            tenant_requests: 100,
            ..Default::default()
        };
        let cur = HealthSnapshot {
            fallbacks: 3,
            lost_records: 5,
            tenant_requests: 140,
            tenant_errors: 12,
            handshake_latency_ns: vec![100_000, 900_000],
            ..Default::default()
        };
        let s = Summary::compute(&prev, &cur, Duration::from_secs(2));
        assert_eq!(s.tenant_request_rate, 20.0);
        assert_eq!(
            s.anomalies(&Thresholds::default()),
            vec![
                Anomaly::Fallbacks { new: 1, total: 3 },
                Anomaly::HandshakeP99 {
                    p99_us: 900,
                    threshold_us: 500
                },
                Anomaly::TenantErrors {
                    errors: 12,
                    requests: 40
                },
            ]
        );
        // 2 s at 1.98 GHz: 0.5 s of device time dropped is 75 % of real time.
        let mut behind = cur.clone();
        behind.device.clock_khz = 1_980_000;
        behind.clock_lag_cycles = 990_000_000;
        behind.handshake_latency_ns.clear();
        let prev_lag = HealthSnapshot {
            clock_lag_cycles: 0,
            ..behind.clone()
        };
        let s = Summary::compute(&prev_lag, &behind, Duration::from_secs(2));
        assert_eq!(
            s.anomalies(&Thresholds::default()),
            vec![Anomaly::DeviceBehind {
                speed_pct: 75.0,
                lag_ms: 500.0
            }]
        );
        let quiet = HealthSnapshot {
            handshake_latency_ns: vec![],
            ..cur.clone()
        };
        assert!(Summary::compute(&quiet, &quiet, Duration::from_secs(1))
            .anomalies(&Thresholds::default())
            .is_empty());
    }
}
