//! The trigger block: sends triggers to the CCUs at a programmable period
//! (optionally dithered), on a register write, on the external trigger
//! input, or when a CCU counter reaches the programmed threshold; counts
//! what it delivered.
//!
//! Registers: `TRIG_PERIOD`, `TRIG_CTRL`, `TRIG_THRESHOLD`, `TRIG_TARGET`,
//! `TRIG_CMD`, `TRIG_EXTERNAL`, `TRIG_COUNT_*` (the block at
//! `0x0100..0x0200`; `RECORDS_ROUTED` in it belongs to the reduction-channel
//! buffer).

use gpupm_uapi::regs::{self as r, trig_cmd, trig_ctrl};

use super::access::{r32, r64, RegValue, Reject};
use super::rng;
use crate::scenario::TriggerSpec;

/// Why a trigger happened (for stream-record flags and counters).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TriggerCause {
    /// The periodic timer.
    Periodic,
    /// A CCU counter reached the threshold.
    Threshold,
    /// A register write or the external input.
    Command,
}

/// Trigger block state.
#[derive(Clone, Debug)]
pub struct TriggerBlock {
    defaults: TriggerSpec,
    seed: u64,
    period: u32,
    ctrl: u32,
    threshold: u32,
    target: u32,
    next_periodic: u64,
    periodic_index: u64,
    count_periodic: u64,
    count_threshold: u64,
    count_command: u64,
}

/// A checked write to a trigger-block register.
#[derive(Clone, Copy, Debug)]
pub enum TriggerWrite {
    /// `TRIG_PERIOD`.
    Period(u32),
    /// `TRIG_CTRL`.
    Ctrl(u32),
    /// `TRIG_THRESHOLD`.
    Threshold(u32),
    /// `TRIG_TARGET`.
    Target(u32),
    /// `TRIG_CMD`: `cmd` bits applied to the partitions in `mask`.
    Command {
        /// Partition slots targeted (`TRIG_TARGET` at the write).
        mask: u32,
        /// Command bits.
        cmd: u32,
    },
    /// `TRIG_EXTERNAL`.
    External,
}

impl TriggerBlock {
    /// The block programmed with the scenario's settings at cycle 0.
    pub fn new(defaults: TriggerSpec, seed: u64) -> Self {
        let mut t = TriggerBlock {
            defaults,
            seed,
            period: 0,
            ctrl: 0,
            threshold: 0,
            target: 0,
            next_periodic: u64::MAX,
            periodic_index: 0,
            count_periodic: 0,
            count_threshold: 0,
            count_command: 0,
        };
        t.program_defaults(0);
        t
    }

    /// Returns period, control bits and threshold to the scenario's (and
    /// the command target to none), as after a device reset at `now`.
    pub fn program_defaults(&mut self, now: u64) {
        let t = self.defaults;
        self.period = t.period_cycles;
        self.ctrl = trig_ctrl::THRESHOLD_ENABLE
            | if t.period_cycles > 0 {
                trig_ctrl::PERIODIC_ENABLE
            } else {
                0
            }
            | if t.dither { trig_ctrl::DITHER } else { 0 };
        self.threshold = t.threshold;
        self.schedule_periodic(now);
    }

    /// Clears the command target (device reset).
    pub fn clear_target(&mut self) {
        self.target = 0;
    }

    /// Schedules the next periodic trigger one period (plus the dither R,
    /// uniform in `0..=DITHER_MAX`) after `from`.
    pub fn schedule_periodic(&mut self, from: u64) {
        self.next_periodic = if self.ctrl & trig_ctrl::PERIODIC_ENABLE != 0 && self.period > 0 {
            let dither = if self.ctrl & trig_ctrl::DITHER != 0 {
                rng::hash(self.seed, &[rng::domain::DITHER, self.periodic_index])
                    & u64::from(r::DITHER_MAX)
            } else {
                0
            };
            from + u64::from(self.period) + dither
        } else {
            u64::MAX
        };
    }

    /// Cycle of the next periodic trigger (`u64::MAX` if none).
    #[inline]
    pub fn next_periodic(&self) -> u64 {
        self.next_periodic
    }

    /// Records the periodic trigger delivered at `t` and schedules the next.
    pub fn periodic_delivered(&mut self, t: u64) {
        self.periodic_index += 1;
        self.schedule_periodic(t);
    }

    /// The CCU threshold (threshold triggers are always enabled: they are
    /// the wrap guard).
    #[inline]
    pub fn threshold(&self) -> u32 {
        self.threshold
    }

    /// The command target (`TRIG_TARGET`).
    #[inline]
    pub fn target(&self) -> u32 {
        self.target
    }

    /// Counts one delivered trigger of `cause`.
    #[inline]
    pub fn count(&mut self, cause: TriggerCause) {
        match cause {
            TriggerCause::Periodic => self.count_periodic += 1,
            TriggerCause::Threshold => self.count_threshold += 1,
            TriggerCause::Command => self.count_command += 1,
        }
    }

    /// Reads one of the block's registers.
    pub fn read(&self, offset: u64) -> Option<RegValue> {
        match offset {
            r::TRIG_PERIOD => r32(self.period),
            r::TRIG_CTRL => r32(self.ctrl),
            r::TRIG_THRESHOLD => r32(self.threshold),
            r::TRIG_TARGET => r32(self.target),
            r::TRIG_CMD | r::TRIG_EXTERNAL => r32(0),
            r::TRIG_COUNT_PERIODIC => r64(self.count_periodic),
            r::TRIG_COUNT_THRESHOLD => r64(self.count_threshold),
            r::TRIG_COUNT_COMMAND => r64(self.count_command),
            _ => None,
        }
    }

    /// Checks a write of `v`; `target` is the batch's view of `TRIG_TARGET`
    /// (advanced past a target write) and `configured` the mask of
    /// configured partition slots.
    pub fn check_write(
        offset: u64,
        v: u32,
        target: &mut u32,
        configured: u32,
    ) -> Result<TriggerWrite, Reject> {
        let bad = |reason| Err(Reject::BadValue(reason));
        match offset {
            r::TRIG_PERIOD if v == 0 || v >= r::TRIG_PERIOD_MIN => Ok(TriggerWrite::Period(v)),
            r::TRIG_PERIOD => bad("period below TRIG_PERIOD_MIN"),
            r::TRIG_CTRL if v & !trig_ctrl::ALL != 0 => bad("undefined bits set"),
            r::TRIG_CTRL if v & trig_ctrl::THRESHOLD_ENABLE == 0 => bad(
                "THRESHOLD_ENABLE must stay set: threshold triggers keep CCU counters from wrapping",
            ),
            r::TRIG_CTRL => Ok(TriggerWrite::Ctrl(v)),
            r::TRIG_THRESHOLD if (r::TRIG_THRESHOLD_MIN..=r::TRIG_THRESHOLD_MAX).contains(&v) => {
                Ok(TriggerWrite::Threshold(v))
            }
            r::TRIG_THRESHOLD => {
                bad("threshold outside TRIG_THRESHOLD_MIN..=MAX (a counter could wrap)")
            }
            r::TRIG_TARGET if v & !configured == 0 => {
                *target = v;
                Ok(TriggerWrite::Target(v))
            }
            r::TRIG_TARGET => bad("names an unconfigured partition slot"),
            r::TRIG_CMD if v != 0 && v & !trig_cmd::ALL == 0 && *target != 0 => {
                Ok(TriggerWrite::Command {
                    mask: *target,
                    cmd: v,
                })
            }
            r::TRIG_CMD => bad("needs defined command bits and a non-empty TRIG_TARGET"),
            r::TRIG_EXTERNAL if v == 1 => Ok(TriggerWrite::External),
            r::TRIG_EXTERNAL => bad("undefined bits set"),
            _ => Err(Reject::ReadOnly),
        }
    }

    /// Executes a checked settings write at `now` (commands and the
    /// external input are the device's to wire to the CCUs).
    pub fn apply_setting(&mut self, w: TriggerWrite, now: u64) {
        match w {
            TriggerWrite::Period(v) => {
                self.period = v;
                self.schedule_periodic(now);
            }
            TriggerWrite::Ctrl(v) => {
                self.ctrl = v;
                self.schedule_periodic(now);
            }
            TriggerWrite::Threshold(v) => self.threshold = v,
            TriggerWrite::Target(v) => self.target = v,
            TriggerWrite::Command { .. } | TriggerWrite::External => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(period_cycles: u32, dither: bool) -> TriggerSpec {
        TriggerSpec {
            period_cycles,
            dither,
            threshold: r::TRIG_THRESHOLD_MAX,
        }
    }

    #[test]
    fn periodic_triggers_follow_the_period_and_dither_stays_below_256() {
        let mut t = TriggerBlock::new(spec(2048, false), 1);
        assert_eq!(t.next_periodic(), 2048);
        t.periodic_delivered(2048);
        assert_eq!(t.next_periodic(), 4096);
        let mut d = TriggerBlock::new(spec(2048, true), 1);
        for _ in 0..64 {
            let from = d.next_periodic();
            d.periodic_delivered(from);
            let dithered = from + 2048..=from + 2048 + u64::from(r::DITHER_MAX);
            assert!(dithered.contains(&d.next_periodic()));
        }
        assert_eq!(
            TriggerBlock::new(spec(0, false), 1).next_periodic(),
            u64::MAX
        );
    }

    #[test]
    fn threshold_triggers_cannot_be_switched_off() {
        let mut target = 0;
        let without = trig_ctrl::PERIODIC_ENABLE | trig_ctrl::DITHER;
        assert!(matches!(
            TriggerBlock::check_write(r::TRIG_CTRL, without, &mut target, 1),
            Err(Reject::BadValue(_))
        ));
        assert!(matches!(
            TriggerBlock::check_write(r::TRIG_CTRL, trig_ctrl::THRESHOLD_ENABLE, &mut target, 1),
            Ok(TriggerWrite::Ctrl(_))
        ));
    }

    #[test]
    fn command_needs_a_target_and_target_only_configured_slots() {
        let mut target = 0;
        assert!(matches!(
            TriggerBlock::check_write(r::TRIG_CMD, trig_cmd::TRIGGER, &mut target, 0b11),
            Err(Reject::BadValue(_))
        ));
        assert!(matches!(
            TriggerBlock::check_write(r::TRIG_TARGET, 0b100, &mut target, 0b11),
            Err(Reject::BadValue(_))
        ));
        assert!(TriggerBlock::check_write(r::TRIG_TARGET, 0b10, &mut target, 0b11).is_ok());
        assert!(matches!(
            TriggerBlock::check_write(r::TRIG_CMD, trig_cmd::TRIGGER, &mut target, 0b11),
            Ok(TriggerWrite::Command { mask: 0b10, .. })
        ));
        assert_eq!(
            TriggerBlock::check_write(r::TRIG_COUNT_PERIODIC, 0, &mut target, 0b11).err(),
            Some(Reject::ReadOnly)
        );
    }
}
