//! What sessions ask of a partition's samplers, and what the device runs
//! for all of them together.
//!
//! Several sessions share one partition's samplers. The device runs:
//! * the cycle sampler when any session wants cycle samples, at the
//!   smallest period any of them asked for, with the dither of the session
//!   that asked for that period (the largest dither among ties), so a
//!   session alone on its partition always gets exactly what it asked;
//! * the branch sampler when any session wants branch stacks, capturing
//!   every N taken branches for the smallest N asked for.
//!
//! Each session then receives at most its own rate ([`Thinning`]): a cycle
//! sample only once its own period plus its own dither has passed since
//! the last one it received, a branch stack only once its own N taken
//! branches have passed. Thinned records are not lost: the session asked
//! for fewer.

use std::collections::BTreeMap;

use gpupm_client::splitmix;
use gpupm_uapi::tenant::sampling::sample_kind;

/// One session's request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Demand {
    /// Bits of [`sample_kind`].
    pub kinds: u16,
    /// P (0 without cycle samples).
    pub period: u32,
    /// R_MAX (0 without cycle samples).
    pub dither: u32,
    /// N (0 without branch stacks).
    pub branch_every: u32,
}

impl Demand {
    /// The demand with P at least `period` and N at least `branch_every`
    /// (for the kinds it asks for; the other fields stay 0).
    pub fn at_least(self, period: u32, branch_every: u32) -> Demand {
        let has = |kind| self.kinds & kind != 0;
        Demand {
            period: if has(sample_kind::CYCLE) {
                self.period.max(period)
            } else {
                self.period
            },
            branch_every: if has(sample_kind::BRANCH_STACK) {
                self.branch_every.max(branch_every)
            } else {
                self.branch_every
            },
            ..self
        }
    }
}

/// What one partition's samplers run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// Cycle sampler: (P, R_MAX), or `None` when off.
    pub cycle: Option<(u32, u32)>,
    /// Branch sampler: N, or `None` when off.
    pub branch_every: Option<u32>,
}

impl Settings {
    /// Whether both samplers are off.
    pub fn is_off(&self) -> bool {
        self.cycle.is_none() && self.branch_every.is_none()
    }
}

/// The settings that serve every demand in `demands`.
pub fn combine<'a>(demands: impl IntoIterator<Item = &'a Demand>) -> Settings {
    let mut s = Settings::default();
    for d in demands {
        if d.kinds & sample_kind::CYCLE != 0 {
            s.cycle = Some(match s.cycle {
                Some((p, r)) if p < d.period || (p == d.period && r >= d.dither) => (p, r),
                _ => (d.period, d.dither),
            });
        }
        if d.kinds & sample_kind::BRANCH_STACK != 0 {
            s.branch_every = Some(
                s.branch_every
                    .map_or(d.branch_every, |n| n.min(d.branch_every)),
            );
        }
    }
    s
}

/// A session's own rate over what the device delivers.
#[derive(Clone, Debug)]
pub struct Thinning {
    demand: Demand,
    /// Per context: the context cycle from which its next cycle sample is
    /// accepted (a sampler's period runs in the context's own cycles).
    next_cycle: BTreeMap<u32, u64>,
    /// Taken branches the device has captured past since the last stack
    /// the session received.
    branches_due: u64,
    rng: u64,
}

impl Thinning {
    /// Thinning for `demand`, its dither drawn from a generator seeded
    /// with `seed` (the session id).
    pub fn new(demand: Demand, seed: u64) -> Self {
        Thinning {
            demand,
            next_cycle: BTreeMap::new(),
            branches_due: 0,
            rng: seed ^ 0x6a09_e667_f3bc_c908,
        }
    }

    /// Whether the session takes a cycle sample of context `ctx` at its
    /// context cycle `cycle` when the device runs `device`.
    pub fn take_cycle(&mut self, ctx: u32, cycle: u64, device: &Settings) -> bool {
        if device
            .cycle
            .is_some_and(|(p, r)| p == self.demand.period && r == self.demand.dither)
        {
            return true;
        }
        if self.next_cycle.get(&ctx).is_some_and(|&next| cycle < next) {
            return false;
        }
        let dither = if self.demand.dither == 0 {
            0
        } else {
            self.next_random() % (u64::from(self.demand.dither) + 1)
        };
        self.next_cycle
            .insert(ctx, cycle + u64::from(self.demand.period) + dither);
        true
    }

    /// Whether the session takes the next branch stack when the device
    /// captures every `device_every` taken branches.
    pub fn take_branch(&mut self, device_every: u32) -> bool {
        let want = u64::from(self.demand.branch_every.max(1));
        self.branches_due += u64::from(device_every);
        if self.branches_due < want {
            return false;
        }
        self.branches_due -= want;
        true
    }

    /// splitmix64: the session's own dither, independent of the device's.
    fn next_random(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(splitmix::GAMMA);
        splitmix::mix(self.rng)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cyc(period: u32, dither: u32) -> Demand {
        Demand {
            kinds: sample_kind::CYCLE,
            period,
            dither,
            branch_every: 0,
        }
    }

    fn branch(n: u32) -> Demand {
        Demand {
            kinds: sample_kind::BRANCH_STACK,
            period: 0,
            dither: 0,
            branch_every: n,
        }
    }

    #[test]
    fn smallest_period_wins_with_its_own_dither_and_smallest_n() {
        assert!(combine(&[]).is_off());
        let s = combine(&[cyc(8000, 255), cyc(4000, 0), branch(64), branch(16)]);
        assert_eq!(s.cycle, Some((4000, 0)));
        assert_eq!(s.branch_every, Some(16));
        assert_eq!(
            combine(&[cyc(4000, 10), cyc(4000, 200)]).cycle,
            Some((4000, 200))
        );
        assert_eq!(
            combine(&[cyc(4000, 200), cyc(4000, 10)]).cycle,
            Some((4000, 200))
        );
    }

    #[test]
    fn a_slower_session_receives_its_own_rate() {
        let device = combine(&[cyc(1000, 0), cyc(10_000, 0)]);
        let mut slow = Thinning::new(cyc(10_000, 0), 1);
        let mut fast = Thinning::new(cyc(1000, 0), 2);
        let taken_slow = (0..1000u64)
            .filter(|i| slow.take_cycle(3, i * 1000, &device))
            .count();
        let taken_fast = (0..1000u64)
            .filter(|i| fast.take_cycle(3, i * 1000, &device))
            .count();
        assert_eq!((taken_slow, taken_fast), (100, 1000));

        let mut b = Thinning::new(branch(64), 3);
        let taken = (0..1000).filter(|_| b.take_branch(16)).count();
        assert_eq!(taken, 250);
    }
}
