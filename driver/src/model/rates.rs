//! Activity profiles turned into per-counter generation rates.
//!
//! A counter's rate is the profile's rate for its event in the current
//! phase, times a fixed per-ULC weight (units are not perfectly balanced)
//! and a per-(context, event, epoch) jitter, clamped to what one signal can
//! carry per cycle. Rates are re-evaluated at every epoch boundary and when
//! a context starts running, so phase lengths are honoured to an epoch.

use gpupm_uapi::events::{self, MAX_EVENTS, MULTIBIT_SCALE};

use super::counting::RATE_ONE_Q16;
use super::rng::{domain, factor_q16, hash};
use super::topology::Topology;
use crate::scenario::ProfileSpec;

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
                    let max = max_rate_q(e);
                    let v = (rate * f64::from(RATE_ONE_Q16)).round();
                    q[usize::from(e)] = if v.is_finite() && v > 0.0 {
                        (v as u64).min(u64::from(max)) as u32
                    } else {
                        0
                    };
                }
                (ph.duration_cycles.max(1), q)
            })
            .collect();
        let cycle_len = phases.iter().map(|p| p.0).sum::<u64>().max(1);
        CompiledProfile { phases, cycle_len }
    }

    /// Q16 base rates at `age` cycles after the context was created.
    pub fn rates_at(&self, age: u64) -> &[u32; MAX_EVENTS] {
        let mut pos = age % self.cycle_len;
        for (len, q) in &self.phases {
            if pos < *len {
                return q;
            }
            pos -= len;
        }
        &self.phases[0].1
    }
}

/// Largest Q16 rate event `e` may have: one per cycle, or 32 for multi-bit.
pub fn max_rate_q(e: u16) -> u32 {
    match events::by_id(e) {
        Some(info) if info.multibit => RATE_ONE_Q16 * MULTIBIT_SCALE as u32,
        _ => RATE_ONE_Q16,
    }
}

/// Fixed per-ULC weights (Q16).
pub fn ulc_weights(topo: &Topology, seed: u64) -> Vec<u32> {
    (0..topo.ulcs.len() as u64)
        .map(|u| factor_q16(seed, &[domain::ULC_WEIGHT, u], WEIGHT_LO, WEIGHT_HI))
        .collect()
}

/// A context's per-event rates for one epoch: base rates times the
/// per-(context, event, epoch) jitter. Computed once per event, not per counter.
pub fn epoch_rates(seed: u64, ctx: u32, epoch: u64, base: &[u32; MAX_EVENTS]) -> [u32; MAX_EVENTS] {
    let mut out = [0u32; MAX_EVENTS];
    for (e, (o, &b)) in out.iter_mut().zip(base).enumerate() {
        if b != 0 {
            let jit = JITTER_LO
                + (hash(seed, &[domain::JITTER, u64::from(ctx), e as u64, epoch])
                    % u64::from(JITTER_HI - JITTER_LO + 1)) as u32;
            *o = ((u64::from(b) * u64::from(jit)) >> 16) as u32;
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
    r.min(u64::from(MAX_RATE_Q[e])) as u32
}

/// [`max_rate_q`] for every event id.
static MAX_RATE_Q: [u32; MAX_EVENTS] = {
    let mut out = [RATE_ONE_Q16; MAX_EVENTS];
    let mut i = 0;
    while i < events::CATALOGUE.len() {
        if events::CATALOGUE[i].multibit {
            out[i] = RATE_ONE_Q16 * MULTIBIT_SCALE as u32;
        }
        i += 1;
    }
    out
};
