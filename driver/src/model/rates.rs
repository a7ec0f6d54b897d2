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

/// Cycles per epoch (≈ 0.53 ms at 1.98 GHz).
pub const EPOCH_CYCLES: u64 = 1 << 20;

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
                    q[usize::from(e)] = if v.is_finite() && v > 0.0 { (v as u64).min(u64::from(max)) as u32 } else { 0 };
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
    (0..topo.ulcs.len() as u64).map(|u| factor_q16(seed, &[domain::ULC_WEIGHT, u], WEIGHT_LO, WEIGHT_HI)).collect()
}

/// Rate of flat counter `j` for a context whose base rates are `base`.
pub fn counter_rate(
    topo: &Topology,
    weights: &[u32],
    seed: u64,
    ctx: u32,
    epoch: u64,
    base: &[u32; MAX_EVENTS],
    j: usize,
) -> u32 {
    let e = topo.counter_event[j];
    let b = base[usize::from(e)];
    if b == 0 {
        return 0;
    }
    let w = weights[topo.counter_ulc[j] as usize];
    let jit = JITTER_LO + (hash(seed, &[domain::JITTER, u64::from(ctx), u64::from(e), epoch]) % u64::from(JITTER_HI - JITTER_LO + 1)) as u32;
    let r = (u64::from(b) * u64::from(w) >> 16) * u64::from(jit) >> 16;
    r.min(u64::from(max_rate_q(u16::from(e)))) as u32
}
