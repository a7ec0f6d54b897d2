//! The health verdict: one check per subsystem, PASS, WARN or FAIL, with
//! the numbers it judged and what to do next. Warnings use the thresholds
//! of the shipped alert rules ([`gpupm_client::health`], one table for
//! both); the checks are a list ([`CHECKS`]), so a new one is one entry.

use gpupm_client::health::{
    Threshold, DEVICE_SPEED_MIN, DRAIN_LAG_RECORDS, FALLBACK_RATIO, LOST_RECORDS,
    RESPONSE_MAX_SECONDS, RETAINED_CONTEXTS,
};
use schemars::JsonSchema;
use serde::Serialize;

use super::{ClockCapability, DaemonMetrics, DeviceHealth, Quantile};
use crate::numfmt::{si, thousands};

/// A check's outcome, worst last.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Nothing to do.
    Pass,
    /// An alert rule fires (or would) on this: look at it.
    Warn,
    /// Counts or service are lost: act now.
    Fail,
}

impl Verdict {
    /// `PASS`, `WARN`, `FAIL`.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Warn => "WARN",
            Verdict::Fail => "FAIL",
        }
    }
}

/// One subsystem's check.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Check {
    /// `daemon`, `handshakes`, `streams`, `mirror`, `retention`, `device`,
    /// `clock`.
    pub subsystem: &'static str,
    /// The outcome.
    pub verdict: Verdict,
    /// What was judged, in one line.
    pub summary: String,
    /// The alert rule whose threshold was used, when one was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alert: Option<&'static str>,
    /// What to do (absent on PASS).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<&'static str>,
}

/// What the checks judge: the daemon's metrics (absent when it did not
/// answer) and the device's registers (absent when not readable).
#[derive(Debug)]
pub struct Inputs<'a> {
    /// The scrape, when the daemon answered.
    pub daemon: Option<&'a DaemonMetrics>,
    /// Why the scrape failed, when it did.
    pub daemon_error: Option<&'a str>,
    /// The device, when readable.
    pub device: Option<&'a DeviceHealth>,
}

/// A check: `None` when it has nothing to judge.
type CheckFn = fn(&Inputs<'_>) -> Option<Check>;

/// Every check, in output order.
pub const CHECKS: [CheckFn; 7] = [
    daemon, handshakes, streams, mirror, retention, device, clock,
];

/// Runs every check.
pub fn run(i: &Inputs<'_>) -> Vec<Check> {
    CHECKS.iter().filter_map(|c| c(i)).collect()
}

fn check(
    subsystem: &'static str,
    verdict: Verdict,
    summary: String,
    alert: Option<&'static str>,
    next: &'static str,
) -> Check {
    Check {
        subsystem,
        verdict,
        summary,
        alert,
        next: (verdict != Verdict::Pass).then_some(next),
    }
}

fn warn_if(t: &Threshold, v: f64) -> Verdict {
    if t.exceeded(v) {
        Verdict::Warn
    } else {
        Verdict::Pass
    }
}

/// `1.5 ms`, `410 µs`.
fn duration(seconds: f64) -> String {
    if seconds >= 1e-3 {
        format!("{:.2} ms", seconds * 1e3)
    } else {
        format!("{:.0} µs", seconds * 1e6)
    }
}

/// `42.2 s`, `6 min 7 s`, `3 h 12 min`, `2 d 4 h`.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // whole seconds
fn uptime(seconds: f64) -> String {
    if seconds < 60.0 {
        return format!("{seconds:.1} s");
    }
    let s = seconds.max(0.0) as u64;
    let (d, h, m) = (s / 86_400, s / 3600 % 24, s / 60 % 60);
    match (d, h) {
        (0, 0) => format!("{m} min {} s", s % 60),
        (0, _) => format!("{h} h {m} min"),
        _ => format!("{d} d {h} h"),
    }
}

#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // counters
fn count(v: f64) -> String {
    thousands(v.max(0.0) as u64)
}

fn daemon(i: &Inputs<'_>) -> Option<Check> {
    Some(match i.daemon {
        Some(m) => check(
            "daemon",
            Verdict::Pass,
            format!("answers, up {}", uptime(m.uptime_seconds)),
            None,
            "",
        ),
        None => check(
            "daemon",
            Verdict::Fail,
            format!("does not answer: {}", i.daemon_error.unwrap_or("no scrape")),
            Some("GpupmDaemonDown"),
            "systemctl status gpupmd gpupm-driver; journalctl -u gpupmd -p warning \
             (the device keeps counting; tenants cannot read, switches end by fallback)",
        ),
    })
}

fn handshakes(i: &Inputs<'_>) -> Option<Check> {
    let m = i.daemon?;
    // Fallbacks and switches of one epoch: the device's (since its
    // reset) when it is readable; gpupmd's handshakes count since its own
    // start while its fallback counter is the device's, so after a daemon
    // restart their ratio would mix two epochs.
    #[allow(clippy::cast_precision_loss)] // counts far below 2^52
    let (fallbacks, switches) = match i.device {
        Some(d) => (d.fallbacks as f64, d.switches as f64),
        None => (m.handshake_fallbacks, m.handshakes + m.handshake_fallbacks),
    };
    let ratio = if switches > 0.0 {
        fallbacks / switches
    } else {
        0.0
    };
    let verdict = warn_if(&FALLBACK_RATIO, ratio).max(warn_if(
        &RESPONSE_MAX_SECONDS,
        m.handshake_response_max_seconds,
    ));
    let q = |q: Quantile| {
        if q.beyond_buckets {
            format!("> {}", duration(q.seconds))
        } else {
            format!("≈ {}", duration(q.seconds))
        }
    };
    let quantiles = match (m.handshake_p50, m.handshake_p99) {
        (Some(p50), Some(p99)) => format!("p50 {}, p99 {}", q(p50), q(p99)),
        _ => "no latency samples".into(),
    };
    Some(check(
        "handshakes",
        verdict,
        format!(
            "{:.2} % of {} switches{} finished by the device's fallback (warn above {:.0} %); \
             {quantiles}; slowest request to pause since the last scrape {} (warn above {})",
            ratio * 100.0,
            count(switches),
            if i.device.is_some() {
                " since the device's reset"
            } else {
                ""
            },
            FALLBACK_RATIO.warn_above * 100.0,
            duration(m.handshake_response_max_seconds),
            duration(RESPONSE_MAX_SECONDS.warn_above)
        ),
        Some(if FALLBACK_RATIO.exceeded(ratio) {
            FALLBACK_RATIO.alert
        } else {
            RESPONSE_MAX_SECONDS.alert
        }),
        "gpupmd answers switch requests late: look for CPU starvation (systemd-cgtop), pin \
         its device threads with device_cpus (docs/operations.md), and read the health \
         summaries: journalctl -u gpupmd MESSAGE_ID=cc6ed650059e4f7c90aa08e5963e2eba",
    ))
}

fn streams(i: &Inputs<'_>) -> Option<Check> {
    let m = i.daemon?;
    let verdict = warn_if(&LOST_RECORDS, m.stream_lost_records)
        .max(warn_if(&DRAIN_LAG_RECORDS, m.stream_drain_lag_records));
    Some(check(
        "streams",
        verdict,
        format!(
            "{} stream records lost, {} drained; ring fill at drain time {} records (warn above {})",
            count(m.stream_lost_records),
            si(m.stream_drained_records, 0),
            count(m.stream_drain_lag_records),
            count(DRAIN_LAG_RECORDS.warn_above)
        ),
        Some(if LOST_RECORDS.exceeded(m.stream_lost_records) {
            LOST_RECORDS.alert
        } else {
            DRAIN_LAG_RECORDS.alert
        }),
        "rings overflow before they are drained (totals are unaffected; rate samples and \
         stream sessions miss records): lower [stream] watermark and drain_interval_ms in \
         gpupmd.toml, or give gpupmd more CPU",
    ))
}

fn mirror(i: &Inputs<'_>) -> Option<Check> {
    let m = i.daemon?;
    let unused = m.stream_drained_records > 0.0 && m.stream_mirrored_records == 0.0;
    Some(check(
        "mirror",
        if unused { Verdict::Warn } else { Verdict::Pass },
        format!(
            "{} of {} drained records came through the commit mirror, {} reads fell back to the window",
            si(m.stream_mirrored_records, 0),
            si(m.stream_drained_records, 0),
            count(m.stream_mirror_fallbacks)
        ),
        None,
        "gpupmd does not follow the driver's commit mirror (expected only with \
         gpupm-driver --no-mirror): journalctl -u gpupmd -u gpupm-driver | grep -i mirror, \
         then restart gpupm-driver and gpupmd",
    ))
}

fn retention(i: &Inputs<'_>) -> Option<Check> {
    let m = i.daemon?;
    Some(check(
        "retention",
        warn_if(&RETAINED_CONTEXTS, m.contexts_retained),
        format!(
            "{} retired contexts kept (warn above {}), {} active",
            count(m.contexts_retained),
            count(RETAINED_CONTEXTS.warn_above),
            count(m.contexts_active)
        ),
        Some(RETAINED_CONTEXTS.alert),
        "raise [retired] max_contexts or set max_age_s in gpupmd.toml if older \
         instances must stay readable",
    ))
}

fn device(i: &Inputs<'_>) -> Option<Check> {
    let d = i.device?;
    let verdict = if d.ccu_wraps > 0 {
        Verdict::Fail
    } else if d.clock_capability == ClockCapability::Secondary {
        Verdict::Warn
    } else {
        Verdict::Pass
    };
    Some(check(
        "device",
        verdict,
        format!(
            "{}{} CCU counter wraps, clock {} ({} kHz), {} switches ({} by fallback)",
            d.gpu
                .as_ref()
                .map_or_else(String::new, |g| format!("GPU {} {}: ", g.index, g.uuid)),
            thousands(d.ccu_wraps),
            match d.clock_capability {
                ClockCapability::Primary => "primary",
                ClockCapability::Secondary => "secondary (throttled)",
            },
            thousands(u64::from(d.clock_khz)),
            thousands(d.switches),
            thousands(d.fallbacks)
        ),
        None,
        if d.ccu_wraps > 0 {
            "a CCU counter wrapped: counts were lost; lower the trigger period \
             ([program] in gpupmd.toml) so counters are committed before they wrap"
        } else {
            "the device runs on its secondary (throttled) clock: check its power and \
             thermal state"
        },
    ))
}

/// A real-time device that ran slower than the wall clock: every
/// real-time figure (handshake latency, page freshness) is then one of a
/// slowed device.
fn clock(i: &Inputs<'_>) -> Option<Check> {
    let d = i.device?;
    #[allow(clippy::cast_precision_loss)] // seconds, for people
    let dropped = d.clock_lag_cycles as f64 / (f64::from(d.clock_khz.max(1)) * 1e3);
    let verdict = if d.realtime_pct < DEVICE_SPEED_MIN * 100.0 {
        Verdict::Warn
    } else {
        Verdict::Pass
    };
    Some(check(
        "clock",
        verdict,
        format!(
            "device at {:.1} % of real time since its clock started ({dropped:.3} s of device \
             time dropped)",
            d.realtime_pct
        ),
        None,
        "the device model cannot keep up with the wall clock: give gpupm-driver more \
         CPU (--cpus, --threads) or fewer armed samplers, RI sessions and ranges \
         (docs/performance.md)",
    ))
}

/// The worst verdict of `checks` (PASS without any).
pub fn overall(checks: &[Check]) -> Verdict {
    checks
        .iter()
        .map(|c| c.verdict)
        .max()
        .unwrap_or(Verdict::Pass)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics() -> DaemonMetrics {
        DaemonMetrics {
            handshakes: 9_670.0,
            handshake_fallbacks: 330.0,
            stream_lost_records: 7_576.0,
            stream_drained_records: 1.0e6,
            stream_mirrored_records: 1.0e6,
            uptime_seconds: 42.0,
            ..DaemonMetrics::default()
        }
    }

    #[test]
    fn the_issues_daemon_is_not_healthy() {
        let m = metrics();
        let c = run(&Inputs {
            daemon: Some(&m),
            daemon_error: None,
            device: None,
        });
        let by = |s: &str| c.iter().find(|c| c.subsystem == s).unwrap();
        assert_eq!(by("handshakes").verdict, Verdict::Warn);
        assert!(by("handshakes")
            .summary
            .starts_with("3.30 % of 10,000 switches"));
        assert_eq!(by("streams").verdict, Verdict::Warn);
        assert!(by("streams").next.is_some());
        assert_eq!(by("retention").verdict, Verdict::Pass);
        assert_eq!(overall(&c), Verdict::Warn);
    }

    #[test]
    fn thresholds_are_the_alerts_and_exclusive() {
        let mut m = metrics();
        m.handshake_fallbacks = 0.01 * 10_000.0;
        m.handshakes = 10_000.0 - m.handshake_fallbacks;
        m.stream_lost_records = 0.0;
        m.stream_drain_lag_records = 768.0;
        m.contexts_retained = 9000.0;
        m.handshake_response_max_seconds = 0.0015;
        let c = run(&Inputs {
            daemon: Some(&m),
            daemon_error: None,
            device: None,
        });
        assert_eq!(overall(&c), Verdict::Pass, "{c:#?}");
        m.stream_drain_lag_records = 769.0;
        let c = run(&Inputs {
            daemon: Some(&m),
            daemon_error: None,
            device: None,
        });
        assert_eq!(overall(&c), Verdict::Warn);
    }

    #[test]
    fn uptimes_read_like_durations() {
        assert_eq!(uptime(42.25), "42.2 s");
        assert_eq!(uptime(366.7), "6 min 6 s");
        assert_eq!(uptime(3.0 * 3600.0 + 720.0), "3 h 12 min");
        assert_eq!(uptime(2.0 * 86_400.0 + 4.0 * 3600.0), "2 d 4 h");
    }

    #[test]
    fn an_unreachable_daemon_fails() {
        let c = run(&Inputs {
            daemon: None,
            daemon_error: Some("connection refused"),
            device: None,
        });
        assert_eq!(c.len(), 1);
        assert_eq!(overall(&c), Verdict::Fail);
    }

    #[test]
    fn a_device_behind_real_time_warns_at_the_daemons_floor() {
        let mut d = DeviceHealth {
            gpu: None,
            cycle: 99_000_000,
            clock_khz: 1_000_000,
            clock_capability: ClockCapability::Primary,
            fallbacks: 0,
            fallback_seen: false,
            ccu_wraps: 0,
            stream_lost_records: 0,
            switches: 0,
            clock_lag_cycles: 1_000_000,
            realtime_pct: 99.0,
        };
        let clock_of = |d: &DeviceHealth| {
            run(&Inputs {
                daemon: None,
                daemon_error: Some("not asked"),
                device: Some(d),
            })
            .into_iter()
            .find(|c| c.subsystem == "clock")
            .unwrap()
        };
        let at_floor = clock_of(&d);
        assert_eq!(at_floor.verdict, Verdict::Pass, "{at_floor:?}");
        assert!(at_floor.summary.contains("0.001 s"), "{}", at_floor.summary);
        d.realtime_pct = 98.9;
        let behind = clock_of(&d);
        assert_eq!(behind.verdict, Verdict::Warn);
        assert!(behind.next.is_some_and(|n| n.contains("gpupm-driver")));
    }
}
