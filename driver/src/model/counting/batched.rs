//! The batched engine: every span is counted in closed form.
//!
//! Transfers at all boundaries inside `(s, t]` collapse into one transfer at
//! the last boundary: the sum of per-window ULC counts telescopes (for
//! multi-bit events too, because the accumulator carries its residue across
//! windows), and no threshold can be crossed inside the span because the
//! device schedules a threshold check at the earliest boundary a crossing is
//! possible ([`super::Counting::threshold_horizon`]).

use super::{ulc_counts, Counting, Tally, CCU_MASK};
use crate::model::topology::Topology;

/// Where a trigger's bank contents go when the sync drains them: the
/// partition's RC (absent for the system CCUs) and RC0.
pub(crate) struct Drain<'a> {
    pub partition_rc: Option<&'a mut [u64; gpupm_uapi::events::MAX_EVENTS]>,
    pub system_rc: &'a mut [u64; gpupm_uapi::events::MAX_EVENTS],
}

pub(super) fn sync(
    st: &mut Counting,
    topo: &Topology,
    p: u32,
    s: u64,
    t: u64,
    boundary: Option<u64>,
    tally: &mut Tally,
) {
    run(st, topo, p, s, t, boundary, tally, None);
}

/// Counts up to `t` and, in the same pass, performs a trigger on every CCU
/// of `p`: each active bank is routed into the RCs and cleared, and the
/// banks swap. Equivalent to `sync` followed by record emission and routing
/// (the cycle-level engine takes that explicit path, and the tests compare).
#[allow(clippy::too_many_arguments)] // the sync span plus where the drained banks go
pub(super) fn sync_and_trigger(
    st: &mut Counting,
    topo: &Topology,
    p: u32,
    s: u64,
    t: u64,
    boundary: Option<u64>,
    tally: &mut Tally,
    drain: Drain<'_>,
) {
    run(st, topo, p, s, t, boundary, tally, Some(drain));
    for &c in &topo.partition_ccus[p as usize] {
        st.active_bank[c as usize] ^= 1;
    }
    st.parts[p as usize].max_active = 0;
}

#[allow(clippy::too_many_arguments)]
fn run(
    st: &mut Counting,
    topo: &Topology,
    p: u32,
    s: u64,
    t: u64,
    boundary: Option<u64>,
    tally: &mut Tally,
    mut drain: Option<Drain<'_>>,
) {
    let part = &st.parts[p as usize];
    if !part.generating && drain.is_none() {
        return transfer_only(st, topo, p, boundary, tally);
    }
    let generating = part.generating;
    let seg = part.seg_start;
    let (ds, dt) = (s - seg, t - seg);
    let db = boundary.map(|b| b - seg);
    let mut max = part.max_active;
    let mut wraps = 0;
    for &c in &topo.partition_ccus[p as usize] {
        let range = topo.ccus[c as usize].counters.clone();
        let (a, z) = (range.start as usize, range.end as usize);
        let bank = usize::from(st.active_bank[c as usize]);
        let lanes = st.rate_q[a..z]
            .iter()
            .zip(&st.phase_q[a..z])
            .zip(st.acc[a..z].iter_mut())
            .zip(st.pending[a..z].iter_mut())
            .zip(st.bank[a..z].iter_mut())
            .zip(&st.masked[a..z])
            .zip(&topo.counter_event[a..z])
            .zip(&topo.counter_multibit[a..z]);
        for (((((((&r, &ph), acc), pending), cell), &masked), &event), &multibit) in lanes {
            let r = if generating { r } else { 0 };
            if r == 0 && *pending == 0 {
                if let Some(d) = drain.as_mut() {
                    let v = std::mem::take(&mut cell[bank]);
                    route(d, event, v);
                }
                continue;
            }
            let (r, ph) = (u64::from(r), u64::from(ph));
            let g_s = (ph + ds * r) >> 16;
            let g_t = (ph + dt * r) >> 16;
            tally.generated[usize::from(event)] += g_t - g_s;
            match db {
                Some(db) => {
                    let g_b = (ph + db * r) >> 16;
                    let sent = u64::from(*pending) + ulc_counts(acc, multibit, g_b - g_s);
                    *pending = ulc_counts(acc, multibit, g_t - g_b) as u16;
                    if sent != 0 {
                        if masked {
                            tally.masked[usize::from(event)] += sent;
                        } else {
                            let sum = u64::from(cell[bank]) + sent;
                            wraps += u64::from(sum > u64::from(CCU_MASK));
                            let v = (sum & u64::from(CCU_MASK)) as u32;
                            cell[bank] = v;
                            max = max.max(v);
                        }
                    }
                }
                None => *pending += ulc_counts(acc, multibit, g_t - g_s) as u16,
            }
            debug_assert!(*pending <= super::ULC_MAX);
            if let Some(d) = drain.as_mut() {
                let v = std::mem::take(&mut cell[bank]);
                route(d, event, v);
            }
        }
    }
    st.wraps += wraps;
    st.parts[p as usize].max_active = max;
}

#[inline]
fn route(d: &mut Drain<'_>, event: u8, v: u32) {
    let (e, v) = (usize::from(event), u64::from(v));
    d.system_rc[e] += v;
    if let Some(rc) = d.partition_rc.as_deref_mut() {
        rc[e] += v;
    }
}

/// A partition that is not generating only moves what its ULCs hold, at
/// the last boundary of the span.
fn transfer_only(
    st: &mut Counting,
    topo: &Topology,
    p: u32,
    boundary: Option<u64>,
    tally: &mut Tally,
) {
    if boundary.is_none() {
        return;
    }
    for &c in &topo.partition_ccus[p as usize] {
        let range = topo.ccus[c as usize].counters.clone();
        let bank = usize::from(st.active_bank[c as usize]);
        for j in range.start as usize..range.end as usize {
            if st.pending[j] != 0 {
                let sent = u64::from(std::mem::take(&mut st.pending[j]));
                st.transfer(topo, p, j, bank, sent, tally);
            }
        }
    }
}
