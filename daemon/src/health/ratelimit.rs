//! Per-event warnings at a bounded rate: the first event of a burst is
//! logged, then at most one per period, each carrying how many were not
//! logged since the previous one; the periodic summary carries the totals.
//! A device finishing hundreds of switches a second by its fallback then
//! costs a line a minute, not hundreds, and the summary stays readable.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a rate-limited warning may be logged.
pub const PER_EVENT_LOG_PERIOD: Duration = Duration::from_secs(60);

/// A per-event log limited to one line per period.
#[derive(Debug)]
pub struct RateLimit {
    period: Duration,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    last: Option<Instant>,
    suppressed: u64,
    suppressed_total: u64,
}

impl RateLimit {
    /// At most one line per `period`.
    pub const fn new(period: Duration) -> RateLimit {
        RateLimit {
            period,
            state: Mutex::new(State {
                last: None,
                suppressed: 0,
                suppressed_total: 0,
            }),
        }
    }

    /// An event at `now`: `Some(n)` when it is to be logged (`n` events
    /// were not logged since the previous line), `None` when it is only
    /// counted.
    pub fn admit(&self, now: Instant) -> Option<u64> {
        let mut s = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if s.last
            .is_some_and(|t| now.saturating_duration_since(t) < self.period)
        {
            s.suppressed += 1;
            s.suppressed_total += 1;
            return None;
        }
        s.last = Some(now);
        Some(std::mem::take(&mut s.suppressed))
    }

    /// Events not logged since the start.
    pub fn suppressed_total(&self) -> u64 {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .suppressed_total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_period_with_the_count_it_skipped() {
        let r = RateLimit::new(Duration::from_secs(60));
        let t0 = Instant::now();
        assert_eq!(r.admit(t0), Some(0));
        for i in 1..=99 {
            assert_eq!(r.admit(t0 + Duration::from_millis(i * 100)), None);
        }
        assert_eq!(r.admit(t0 + Duration::from_secs(60)), Some(99));
        assert_eq!(r.admit(t0 + Duration::from_secs(61)), None);
        assert_eq!(r.suppressed_total(), 100);
    }
}
