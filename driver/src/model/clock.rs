//! The clock unit: device time, in step mode (time moves only when the host
//! advances it) or real time (time follows the wall clock at the current
//! capability's frequency), the clock capability over time (primary outside
//! the scenario's throttle windows, secondary inside), and the idle-cycle
//! count and idle periods the mailboxes report.
//!
//! Registers: `CLOCK_KHZ`, `CLOCK_CAP`, `CYCLE`, `CLOCK_LAG` (in the
//! identity block).

use std::time::Instant;

use gpupm_uapi::regs::{self as r, clock_cap};

use super::access::{r32, r64, RegValue};
use crate::scenario::{ClockSpec, ThrottleWindow};

/// How device time moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockMode {
    /// Only [`super::Device::advance`] moves time.
    Step,
    /// [`super::Device::tick`] moves time to match the wall clock.
    Realtime,
}

/// Device time and its pacing.
#[derive(Clone, Debug)]
pub struct Clock {
    now: u64,
    step: bool,
    spec: ClockSpec,
    throttle: Vec<ThrottleWindow>,
    pacer: Option<Pacer>,
    /// Real-time cycles a tick owed but did not run because it stopped at
    /// a switch request, or ran too slowly (see [`Clock::tick_target`]).
    tick_debt: u64,
    /// Real-time cycles dropped for good: the device's clock fell behind
    /// the wall clock by this much (`CLOCK_LAG`).
    dropped: u64,
    idle_cycles: u64,
    /// Idle periods begun so far (a run of idle spans is one).
    idle_entries: u64,
    /// Whether the span moved over last was idle.
    idle_last: bool,
}

impl Clock {
    /// A clock at cycle 0.
    pub fn new(spec: ClockSpec, throttle: &[ThrottleWindow], step: bool) -> Self {
        Clock {
            now: 0,
            step,
            spec,
            throttle: throttle.to_vec(),
            pacer: None,
            tick_debt: 0,
            dropped: 0,
            idle_cycles: 0,
            idle_entries: 0,
            idle_last: false,
        }
    }

    /// Real-time cycles the device never ran: wall time a tick could not
    /// turn into device time (it came more than [`MAX_TICK`] after the
    /// previous one), or time owed beyond [`MAX_TICK`] (the model ran
    /// slower than the wall clock). 0 on a step clock.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Current device cycle.
    #[inline]
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Whether the clock runs in step mode.
    #[inline]
    pub fn is_step(&self) -> bool {
        self.step
    }

    /// Moves time to `t`; `idle` says no context ran on any partition since
    /// the previous cycle moved to.
    #[inline]
    pub fn move_to(&mut self, t: u64, idle: bool) {
        if idle {
            self.idle_cycles += t - self.now;
            if !self.idle_last {
                self.idle_entries += 1;
            }
        }
        self.idle_last = idle;
        self.now = t;
    }

    /// Idle periods begun so far (how often the device went idle), and
    /// whether the last cycle was idle.
    pub fn idle_periods(&self) -> (u64, bool) {
        (self.idle_entries, self.idle_last)
    }

    /// Cycles during which no context ran on any partition.
    pub fn idle_cycles(&self) -> u64 {
        self.idle_cycles
    }

    /// Whether cycle `t` runs at secondary capability.
    #[inline]
    pub fn secondary_at(&self, t: u64) -> bool {
        self.throttle.iter().any(|w| (w.start..w.end).contains(&t))
    }

    /// Frequency now, in kHz (the secondary one inside a throttle window).
    pub fn khz_now(&self) -> u32 {
        if self.secondary_at(self.now) {
            self.spec.secondary_khz
        } else {
            self.spec.khz
        }
    }

    /// The cycle a real-time tick at wall time `wall` runs the device to.
    ///
    /// Time owed by earlier ticks is caught up only while no switch waits
    /// for the host (`switch_pending` false): running the device faster than
    /// the wall clock then would eat into the host's time to answer before
    /// the fallback deadline.
    pub fn tick_target(&mut self, wall: Instant, switch_pending: bool) -> u64 {
        let khz = self.khz_now();
        let pacer = self.pacer.get_or_insert_with(|| Pacer::new(wall));
        let (elapsed, slipped) = pacer.elapsed_cycles(wall, khz);
        self.dropped += slipped;
        let owed = if switch_pending {
            elapsed
        } else {
            elapsed + std::mem::take(&mut self.tick_debt)
        };
        self.now + owed
    }

    /// Records what a tick that aimed at `target` (frequency `khz` at its
    /// start) left unrun, bounded by [`MAX_TICK`] worth of cycles.
    pub fn settle_tick(&mut self, target: u64, khz: u32) {
        let max_debt = u64::from(khz) * u64::try_from(MAX_TICK.as_micros()).unwrap_or(0) / 1000;
        let owed = self.tick_debt + (target - self.now);
        self.dropped += owed.saturating_sub(max_debt);
        self.tick_debt = owed.min(max_debt);
    }

    /// The frequency a tick starting now is paced at, in kHz.
    pub fn tick_khz(&self) -> u32 {
        self.khz_now()
    }

    /// Reads one of the clock's registers.
    pub fn read(&self, offset: u64) -> Option<RegValue> {
        match offset {
            r::CLOCK_KHZ => r32(self.spec.khz),
            r::CLOCK_CAP => r32(if self.secondary_at(self.now) {
                clock_cap::SECONDARY
            } else {
                clock_cap::PRIMARY
            }),
            r::CYCLE => r64(self.now),
            r::CLOCK_LAG => r64(self.dropped),
            _ => None,
        }
    }
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
    /// The same for the wall time dropped.
    dropped_ps: u128,
}

impl Pacer {
    /// A pacer starting at `now`.
    pub fn new(now: Instant) -> Self {
        Pacer {
            last: now,
            carry_ps: 0,
            dropped_ps: 0,
        }
    }

    /// Cycles that elapsed at `khz` since the previous call (at most
    /// [`MAX_TICK`] worth), and the cycles of the wall time beyond that,
    /// which the device drops.
    pub fn elapsed_cycles(&mut self, now: Instant, khz: u32) -> (u64, u64) {
        let all = now.saturating_duration_since(self.last).as_nanos();
        let ns = all.min(MAX_TICK.as_nanos());
        self.last = now.max(self.last);
        // cycles = ns * khz / 1e6; keep the remainder in picocycle units.
        let total = ns * u128::from(khz) + self.carry_ps;
        self.carry_ps = total % 1_000_000;
        let dropped = (all - ns) * u128::from(khz) + self.dropped_ps;
        self.dropped_ps = dropped % 1_000_000;
        (
            u64::try_from(total / 1_000_000).unwrap_or(u64::MAX),
            u64::try_from(dropped / 1_000_000).unwrap_or(u64::MAX),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn debt_beyond_one_tick_is_dropped_and_counted() {
        let spec = ClockSpec {
            khz: 1_980_000,
            secondary_khz: 990_000,
        };
        let mut c = Clock::new(spec, &[], false);
        // A tick that aimed 3 ms ahead ran nothing: 1 ms stays owed.
        c.settle_tick(3 * 1_980_000, 1_980_000);
        assert_eq!((c.tick_debt, c.dropped()), (1_980_000, 2 * 1_980_000));
        c.settle_tick(1_000, 1_980_000);
        assert_eq!(
            (c.tick_debt, c.dropped()),
            (1_980_000, 2 * 1_980_000 + 1_000)
        );
    }

    #[test]
    fn regular_ticks_lose_no_time_and_a_stalled_tick_slips() {
        let t0 = Instant::now();
        let mut p = Pacer::new(t0);
        // 1.98 GHz: 3 ticks of 333,333 ns add up to exactly 1,980,000 cycles.
        let mut total = 0;
        for i in 1..=3u32 {
            let (ran, dropped) = p.elapsed_cycles(
                t0 + Duration::from_nanos(333_333) * i + Duration::from_nanos(u64::from(i / 3)),
                1_980_000,
            );
            assert_eq!(dropped, 0);
            total += ran;
        }
        assert_eq!(total, 1_980_000);
        let stalled = p.elapsed_cycles(t0 + Duration::from_millis(51), 1_980_000);
        assert_eq!(
            stalled,
            (1_980_000, 49 * 1_980_000),
            "a 50 ms stall advances the device by MAX_TICK only and drops the rest"
        );
    }
}
