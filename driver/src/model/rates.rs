//! Activity profiles turned into per-counter generation rates.
//!
//! A counter's rate is the profile's rate for its event in the current
//! phase, times a fixed per-ULC weight (units are not perfectly balanced)
//! and a per-(context, event, epoch) jitter, clamped to what one signal can
//! carry per cycle. Rates are re-evaluated when a context starts running,
//! at every epoch boundary (the jitter changes) and at the exact cycle its
//! profile's phase changes.

use gpupm_uapi::events::{self, MAX_EVENTS, MULTIBIT_SCALE};
use gpupm_uapi::regs::MAX_PARTITION_SLOTS;

use super::ccu::bank::RATE_ONE_Q16;
use super::ledger::Attribution;
use super::rng::{domain, factor_q16};
use super::topology::Topology;
use crate::scenario::{ProfileSpec, Scenario};

/// Cycles per epoch (≈ 4.2 ms at 1.98 GHz).
pub const EPOCH_CYCLES: u64 = 1 << 23;

const WEIGHT_LO: u32 = 49_152; // 0.75
const WEIGHT_HI: u32 = 81_920; // 1.25
const JITTER_LO: u32 = 55_706; // 0.85
const JITTER_HI: u32 = 75_366; // 1.15

/// A profile with rates pre-converted to Q16.
#[derive(Clone, Debug)]
pub struct CompiledProfile {
    phases: Vec<(u64, [u32; MAX_EVENTS])>,
    cycle_len: u64,
}

impl CompiledProfile {
    /// Converts `spec`.
    pub fn compile(spec: &ProfileSpec) -> Self {
        let phases: Vec<(u64, [u32; MAX_EVENTS])> = spec
            .phases
            .iter()
            .map(|ph| {
                let mut q = [0u32; MAX_EVENTS];
                for &(e, rate) in &ph.rates {
                    q[usize::from(e)] = rate_q16(rate, max_rate_q(e));
                }
                (ph.duration_cycles.max(1), q)
            })
            .collect();
        let cycle_len = phases.iter().map(|p| p.0).sum::<u64>().max(1);
        CompiledProfile { phases, cycle_len }
    }

    /// Index of the phase at `age` cycles after the context was created.
    pub fn phase_at(&self, age: u64) -> usize {
        let mut pos = age % self.cycle_len;
        for (i, (len, _)) in self.phases.iter().enumerate() {
            if pos < *len {
                return i;
            }
            pos -= len;
        }
        0
    }

    /// Q16 base rates at `age` cycles after the context was created, and
    /// the cycles until the phase changes (`None` for a single phase).
    pub fn rates_at(&self, age: u64) -> (&[u32; MAX_EVENTS], Option<u64>) {
        let mut pos = age % self.cycle_len;
        let single = self.phases.len() == 1;
        for (len, q) in &self.phases {
            if pos < *len {
                return (q, (!single).then_some(len - pos));
            }
            pos -= len;
        }
        (&self.phases[0].1, None)
    }
}

/// `rate` signal units per cycle in Q16, clamped to `0..=max`; 0 for a
/// rate that is not a finite positive number.
// The float is finite, positive and at most `max` (< 2^22) when converted.
#[allow(clippy::cast_possible_truncation)]
fn rate_q16(rate: f64, max: u32) -> u32 {
    let v = (rate * f64::from(RATE_ONE_Q16)).round();
    if v.is_finite() && v > 0.0 {
        v.min(f64::from(max)) as u32
    } else {
        0
    }
}

/// Q16 rate of a multi-bit signal at its largest (32 units per cycle).
// MULTIBIT_SCALE is 32 (asserted), so the conversion keeps every bit.
#[allow(clippy::cast_possible_truncation)]
const MULTIBIT_MAX_Q16: u32 = {
    assert!(MULTIBIT_SCALE <= 64);
    RATE_ONE_Q16 * MULTIBIT_SCALE as u32
};

/// Largest Q16 rate event `e` may have: one per cycle, or 32 for multi-bit.
pub fn max_rate_q(e: u16) -> u32 {
    match events::by_id(e) {
        Some(info) if info.multibit => MULTIBIT_MAX_Q16,
        _ => RATE_ONE_Q16,
    }
}

/// Fixed per-ULC weights (Q16).
pub fn ulc_weights(topo: &Topology, seed: u64) -> Vec<u32> {
    (0..u64::try_from(topo.ulcs.len()).unwrap_or(0))
        .map(|u| factor_q16(seed, &[domain::ULC_WEIGHT, u], WEIGHT_LO, WEIGHT_HI))
        .collect()
}

/// A context's per-event rates for one epoch: base rates times the
/// per-(context, event, epoch) jitter. Computed once per event, not per counter.
pub fn epoch_rates(seed: u64, ctx: u32, epoch: u64, base: &[u32; MAX_EVENTS]) -> [u32; MAX_EVENTS] {
    let mut out = [0u32; MAX_EVENTS];
    for (e, (o, &b)) in out.iter_mut().zip(base).enumerate() {
        if b != 0 {
            let e = u64::try_from(e).unwrap_or(u64::MAX);
            let jit = factor_q16(
                seed,
                &[domain::JITTER, u64::from(ctx), e, epoch],
                JITTER_LO,
                JITTER_HI,
            );
            *o = scale_q16(b, jit);
        }
    }
    out
}

/// Rate of flat counter `j` given its event's epoch rate: times the ULC's
/// weight, clamped to what one signal carries per cycle.
#[inline]
pub fn counter_rate(
    topo: &Topology,
    weights: &[u32],
    epoch_rates: &[u32; MAX_EVENTS],
    j: usize,
) -> u32 {
    let e = usize::from(topo.counter_event[j]);
    let r = (u64::from(epoch_rates[e]) * u64::from(weights[topo.counter_ulc[j] as usize])) >> 16;
    // Clamped to a 32-bit maximum first, so the conversion cannot fail.
    u32::try_from(r.min(u64::from(MAX_RATE_Q[e]))).unwrap_or(MAX_RATE_Q[e])
}

/// `rate * factor` for a Q16 `factor`, saturating at `u32::MAX` (rates are
/// at most 32.0 in Q16 and factors at most 1.25, so it never saturates).
#[inline]
fn scale_q16(rate: u32, factor: u32) -> u32 {
    u32::try_from((u64::from(rate) * u64::from(factor)) >> 16).unwrap_or(u32::MAX)
}

/// [`max_rate_q`] for every event id.
static MAX_RATE_Q: [u32; MAX_EVENTS] = {
    let mut out = [RATE_ONE_Q16; MAX_EVENTS];
    let mut i = 0;
    while i < events::CATALOGUE.len() {
        if events::CATALOGUE[i].multibit {
            out[i] = MULTIBIT_MAX_Q16;
        }
        i += 1;
    }
    out
};

/// What drives generation: the scenario's compiled profiles, the fixed
/// per-ULC weights, and the epochs at which rates are re-drawn.
#[derive(Clone, Debug)]
pub struct Rates {
    seed: u64,
    profiles: Vec<CompiledProfile>,
    device_profile: Option<usize>,
    ulc_weights: Vec<u32>,
    next_epoch: u64,
    /// Per partition slot: the cycle its running profile changes phase.
    phase_change: [u64; MAX_PARTITION_SLOTS as usize],
}

impl Rates {
    /// The rates of `scenario` on `topo`.
    pub fn new(scenario: &Scenario, topo: &Topology) -> Self {
        Rates {
            seed: scenario.seed,
            profiles: scenario
                .profiles
                .iter()
                .map(CompiledProfile::compile)
                .collect(),
            device_profile: scenario.device_profile,
            ulc_weights: ulc_weights(topo, scenario.seed),
            next_epoch: EPOCH_CYCLES,
            phase_change: [u64::MAX; MAX_PARTITION_SLOTS as usize],
        }
    }

    /// Base rates of the device-level units at `now` (none without a
    /// device profile; its phases run from cycle 0), and the cycle they
    /// change (`u64::MAX` if never).
    pub fn device_base(&self, now: u64) -> ([u32; MAX_EVENTS], u64) {
        match self.device_profile {
            Some(dp) => self.profile_base(dp, 0, now),
            None => ([0; MAX_EVENTS], u64::MAX),
        }
    }

    /// Base rates at `now` of profile `profile` run by a context created at
    /// `created_at`, and the cycle they change (`u64::MAX` if never).
    pub fn context_base(
        &self,
        profile: usize,
        created_at: u64,
        now: u64,
    ) -> ([u32; MAX_EVENTS], u64) {
        self.profile_base(profile, created_at, now)
    }

    /// Index of the phase profile `profile` (started at `created_at`) is
    /// in at `now`.
    pub fn context_phase(&self, profile: usize, created_at: u64, now: u64) -> usize {
        self.profiles[profile].phase_at(now - created_at)
    }

    fn profile_base(&self, profile: usize, start: u64, now: u64) -> ([u32; MAX_EVENTS], u64) {
        let (rates, left) = self.profiles[profile].rates_at(now - start);
        (*rates, left.map_or(u64::MAX, |l| now + l))
    }

    /// Records that partition `p`'s rates next change phase at `t`.
    pub fn set_phase_change(&mut self, p: u32, t: u64) {
        self.phase_change[p as usize] = t;
    }

    /// Partition `p` stopped generating: no phase change is due.
    pub fn no_phase_change(&mut self, p: u32) {
        self.phase_change[p as usize] = u64::MAX;
    }

    /// The cycle partition `p`'s rates change phase.
    #[inline]
    pub fn phase_change(&self, p: u32) -> u64 {
        self.phase_change[p as usize]
    }

    /// The earliest phase change of any partition.
    pub fn next_phase_change(&self) -> u64 {
        self.phase_change.iter().copied().min().unwrap_or(u64::MAX)
    }

    /// The generation rate (Q16) of each flat counter for `who` in the
    /// epoch of `now`, given the profile's base rates `base`.
    pub fn counter_rates<'a>(
        &'a self,
        topo: &'a Topology,
        who: Attribution,
        now: u64,
        base: &[u32; MAX_EVENTS],
    ) -> impl FnMut(usize) -> u32 + 'a {
        let epoch_rates = epoch_rates(self.seed, who.ctx, now / EPOCH_CYCLES, base);
        move |j| counter_rate(topo, &self.ulc_weights, &epoch_rates, j)
    }

    /// Cycle of the next epoch boundary.
    pub fn next_epoch(&self) -> u64 {
        self.next_epoch
    }

    /// Moves to the following epoch.
    pub fn epoch_passed(&mut self) {
        self.next_epoch += EPOCH_CYCLES;
    }
}
