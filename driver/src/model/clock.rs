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

/// Real-time pacing: converts elapsed wall time into cycles, carrying the
/// sub-cycle remainder so no time is lost between ticks.
#[derive(Clone, Copy, Debug)]
pub struct Pacer {
    last: Instant,
    carry_ps: u128,
}

impl Pacer {
    /// A pacer starting at `now`.
    pub fn new(now: Instant) -> Self {
        Pacer { last: now, carry_ps: 0 }
    }

    /// Cycles that elapsed at `khz` since the previous call.
    pub fn elapsed_cycles(&mut self, now: Instant, khz: u32) -> u64 {
        let ns = now.saturating_duration_since(self.last).as_nanos();
        self.last = now.max(self.last);
        // cycles = ns * khz / 1e6; keep the remainder in picocycle units.
        let total = ns * u128::from(khz) + self.carry_ps;
        self.carry_ps = total % 1_000_000;
        u64::try_from(total / 1_000_000).unwrap_or(u64::MAX)
    }
}
