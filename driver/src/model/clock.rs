//! The simulated clock: step mode (time moves only when the host advances
//! it) or real time (time follows the wall clock at the current
//! capability's frequency).

use std::time::Instant;

/// How device time moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockMode {
    /// Only [`super::Device::advance`] moves time.
    Step,
    /// [`super::Device::tick`] moves time to match the wall clock.
    Realtime,
}

/// Most wall time one real-time tick turns into device time.
pub const MAX_TICK: std::time::Duration = std::time::Duration::from_millis(1);

/// Real-time pacing: converts elapsed wall time into cycles, carrying the
/// sub-cycle remainder so no time is lost between regular ticks.
///
/// When the host is too loaded to tick on time, device time slips instead
/// of jumping: one tick advances at most [`MAX_TICK`] of wall time. A jump
/// would let the device raise a switch request and reach that switch's
/// fallback deadline inside one step, before host software could answer —
/// something real hardware, whose clock does not stall, never does.
#[derive(Clone, Copy, Debug)]
pub struct Pacer {
    last: Instant,
    carry_ps: u128,
}

impl Pacer {
    /// A pacer starting at `now`.
    pub fn new(now: Instant) -> Self {
        Pacer {
            last: now,
            carry_ps: 0,
        }
    }

    /// Cycles that elapsed at `khz` since the previous call (at most
    /// [`MAX_TICK`] worth).
    pub fn elapsed_cycles(&mut self, now: Instant, khz: u32) -> u64 {
        let ns = now
            .saturating_duration_since(self.last)
            .as_nanos()
            .min(MAX_TICK.as_nanos());
        self.last = now.max(self.last);
        // cycles = ns * khz / 1e6; keep the remainder in picocycle units.
        let total = ns * u128::from(khz) + self.carry_ps;
        self.carry_ps = total % 1_000_000;
        u64::try_from(total / 1_000_000).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn regular_ticks_lose_no_time_and_a_stalled_tick_slips() {
        let t0 = Instant::now();
        let mut p = Pacer::new(t0);
        // 1.98 GHz: 3 ticks of 333,333 ns add up to exactly 1,980,000 cycles.
        let mut total = 0;
        for i in 1..=3u32 {
            total += p.elapsed_cycles(
                t0 + Duration::from_nanos(333_333) * i + Duration::from_nanos(u64::from(i / 3)),
                1_980_000,
            );
        }
        assert_eq!(total, 1_980_000);
        let stalled = p.elapsed_cycles(t0 + Duration::from_millis(51), 1_980_000);
        assert_eq!(
            stalled, 1_980_000,
            "a 50 ms stall advances the device by MAX_TICK only"
        );
    }
}
