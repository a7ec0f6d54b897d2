//! What an interval row covers, and what a live view does when gpupmd
//! stops answering (`stat -I`, `dmon`, `top`).
//!
//! Every row carries its span: the device cycles it starts and ends at,
//! the device time and the wall time between its two readings, and the
//! wall-clock time of its ending reading. Rates are per second of device
//! time; when device and wall time differ by more than a tenth (a step
//! clock, a device behind real time, a late reading) the row says so.
//!
//! An interval without a reading is a gap, never a zero: `no_data` rows
//! (`<not counted>`, `-`) and one line on stderr when the outage starts.
//! The first reading after an outage is a `catch_up` row: its values cover
//! everything since the last reading before it, and its span says so. A
//! device whose cycle went back (a driver restart: the device was reset)
//! makes a `reset` row, and the next interval starts from the new counts.
//! After `--give-up-after` without an answer the command ends with exit
//! status 1.

use std::time::{Duration, Instant};

use chrono::{DateTime, Local, SecondsFormat};
use schemars::JsonSchema;
use serde::Serialize;

use crate::error::{CliError, CliResult};

/// How long a live view waits for gpupmd to answer again by default: a
/// restart of the driver and the daemon by systemd takes a few seconds.
pub const DEFAULT_GIVE_UP: &str = "30s";

/// A wall-clock point of a reading.
#[derive(Debug, Clone, Copy)]
pub struct Moment {
    /// For spans.
    pub at: Instant,
    /// For timestamps.
    pub wall: DateTime<Local>,
}

impl Moment {
    /// Now.
    pub fn now() -> Moment {
        Moment {
            at: Instant::now(),
            wall: Local::now(),
        }
    }

    /// RFC 3339 in UTC with milliseconds (`2025-06-01T12:00:01.123Z`).
    pub fn rfc3339(&self) -> String {
        self.wall
            .to_utc()
            .to_rfc3339_opts(SecondsFormat::Millis, true)
    }

    /// Local time of day with milliseconds (`12:00:01.123`).
    pub fn clock(&self) -> String {
        self.wall.format("%H:%M:%S%.3f").to_string()
    }

    /// Local date and time as `nvidia-smi dmon -o DT` prints them
    /// (`20250601`, `12:00:01`).
    pub fn date_time(&self) -> (String, String) {
        (
            self.wall.format("%Y%m%d").to_string(),
            self.wall.format("%H:%M:%S").to_string(),
        )
    }
}

/// What a row's values are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The interval's deltas.
    Ok,
    /// The first reading after an interval without one, or a reading late
    /// by half an interval or more: the values cover the whole span (the
    /// `no_data` rows before it included).
    CatchUp,
    /// No reading (gpupmd did not answer): no values.
    NoData,
    /// The device was reset (its cycle went back): no values; the next
    /// row counts from the new totals.
    Reset,
}

impl Status {
    /// The name in CSV and text.
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::CatchUp => "catch_up",
            Status::NoData => "no_data",
            Status::Reset => "reset",
        }
    }
}

/// What a row covers.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Span {
    /// Wall-clock time of the reading that ends the row (RFC 3339, UTC).
    pub timestamp: String,
    /// Device cycle of the reading the row starts from (the last commit
    /// folded into it).
    pub start_cycle: u64,
    /// Device cycle of the reading that ends the row.
    pub end_cycle: u64,
    /// Device time between the two readings, in milliseconds (the time
    /// the rates are over).
    pub device_ms: f64,
    /// Wall time between the two readings, in milliseconds (absent for
    /// totals since the device's reset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wall_ms: Option<f64>,
}

impl Span {
    /// The span from `(start, start_cycle)` to `(end, end_cycle)`.
    pub fn new(
        start: &Moment,
        start_cycle: u64,
        end: &Moment,
        end_cycle: u64,
        clock_khz: u32,
    ) -> Span {
        #[allow(clippy::cast_precision_loss)] // milliseconds for people
        let device_ms = end_cycle.saturating_sub(start_cycle) as f64 / f64::from(clock_khz.max(1));
        Span {
            timestamp: end.rfc3339(),
            start_cycle,
            end_cycle,
            device_ms,
            wall_ms: Some(end.at.saturating_duration_since(start.at).as_secs_f64() * 1000.0),
        }
    }

    /// The span of totals since the device's reset (cycle 0), read at
    /// `at`: no wall time.
    pub fn since_reset(at: &Moment, cycle: u64, clock_khz: u32) -> Span {
        let mut s = Span::new(at, 0, at, cycle, clock_khz);
        s.wall_ms = None;
        s
    }

    /// Device and wall time differ by more than a tenth (and more than
    /// 5 ms, a few commit periods of lag).
    pub fn times_differ(&self) -> bool {
        self.wall_ms
            .is_some_and(|w| (self.device_ms - w).abs() > (0.1 * w).max(5.0))
    }

    /// `over 1.000 s wall, 0.998 s device (cycles A..B)` and, when they
    /// differ, what that means for the rates.
    pub fn describe(&self) -> String {
        let mut s = match self.wall_ms {
            Some(w) => format!("{} wall, {} device time", ms(w), ms(self.device_ms)),
            None => format!(
                "{} device time since the device's reset",
                ms(self.device_ms)
            ),
        };
        s += &format!(" (cycles {}..{})", self.start_cycle, self.end_cycle);
        if self.times_differ() {
            s += "; device and wall time differ: rates are per device second";
        }
        s
    }
}

/// Milliseconds for people: `57.0 ms`, `1.000 s`.
pub fn ms(v: f64) -> String {
    if v < 1000.0 {
        format!("{v:.1} ms")
    } else {
        format!("{:.3} s", v / 1000.0)
    }
}

/// Parses `-I` values: `1s`, `500ms`, `2m`, or plain milliseconds.
pub fn parse_interval(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return match t.parse::<u64>() {
            Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
            _ => Err(format!("invalid interval \"{s}\" (e.g. 1000, 500ms, 1s)")),
        };
    }
    crate::duration::parse(t)
        .map_err(|_| format!("invalid interval \"{s}\" (e.g. 1000, 500ms, 1s)"))
}

/// An outage of the daemon, as a live view lives through it.
#[derive(Debug)]
pub struct Outages {
    give_up: Duration,
    since: Option<Moment>,
}

impl Outages {
    /// Ends the command after `give_up` without an answer.
    pub fn new(give_up: Duration) -> Outages {
        Outages {
            give_up,
            since: None,
        }
    }

    /// No answer now (`why`): the first says so on stderr; past the
    /// give-up time the command ends.
    pub fn gone(&mut self, why: &str) -> CliResult {
        let now = Moment::now();
        let since = *self.since.get_or_insert_with(|| {
            eprintln!(
                "gpupm: no data from {}: {why}; intervals are marked as not counted \
                 until it answers (giving up after {})",
                now.clock(),
                ms(self.give_up.as_secs_f64() * 1000.0)
            );
            now
        });
        let out = now.at.saturating_duration_since(since.at);
        if out >= self.give_up {
            return Err(CliError::runtime(format!(
                "no data since {}: {why}; giving up after {}",
                since.clock(),
                ms(out.as_secs_f64() * 1000.0)
            )));
        }
        Ok(())
    }

    /// An answer: ends an outage, saying so on stderr; whether one ended.
    pub fn answered(&mut self) -> bool {
        match self.since.take() {
            Some(since) => {
                let now = Moment::now();
                eprintln!(
                    "gpupm: data again at {} after {} without; the next row covers the outage",
                    now.clock(),
                    ms(now.at.saturating_duration_since(since.at).as_secs_f64() * 1000.0)
                );
                true
            }
            None => false,
        }
    }
}

/// Whether a reading arrived late enough that its row is a catch-up: half
/// an interval or more after it was due.
pub fn late(span: &Span, period: Duration) -> bool {
    span.wall_ms
        .is_some_and(|w| w >= period.as_secs_f64() * 1000.0 * 1.5)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_take_units_or_milliseconds() {
        assert_eq!(parse_interval("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_interval("200"), Ok(Duration::from_millis(200)));
        assert_eq!(parse_interval("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_interval("0").is_err());
        assert!(parse_interval("x").is_err());
    }

    #[test]
    fn a_span_says_when_device_and_wall_time_differ() {
        let a = Moment::now();
        let mut b = a;
        b.at += Duration::from_millis(200);
        let s = Span::new(&a, 1_000, &b, 1_000 + 57 * 1_980, 1_980_000 / 1000);
        assert!((s.device_ms - 57.0).abs() < 1e-9);
        assert!(s.times_differ());
        assert!(s.describe().contains("differ"), "{}", s.describe());
        let same = Span::new(&a, 0, &b, 200 * 1_980, 1_980);
        assert!(!same.times_differ());
    }
}
