//! The batched engine: every span is counted in closed form.
//!
//! Transfers at all boundaries inside `(s, t]` collapse into one transfer at
//! the last boundary: the sum of per-window ULC counts telescopes (for
//! multi-bit events too, because the accumulator carries its residue across
//! windows), and no threshold can be crossed inside the span because the
//! device schedules a threshold check at the earliest boundary a crossing is
//! possible ([`super::Counting::threshold_horizon`]).

use super::{generated, ulc_counts, Counting, Tally};
use crate::model::topology::Topology;

pub(super) fn sync(
    st: &mut Counting,
    topo: &Topology,
    p: u32,
    s: u64,
    t: u64,
    boundary: Option<u64>,
    tally: &mut Tally,
) {
    let seg = st.parts[p as usize].seg_start;
    if !st.parts[p as usize].generating {
        return transfer_only(st, topo, p, boundary, tally);
    }
    for &c in &topo.partition_ccus[p as usize] {
        let range = topo.ccus[c as usize].counters.clone();
        let bank = usize::from(st.active_bank[c as usize]);
        for j in range.start as usize..range.end as usize {
            let (ph, r) = (st.phase_q[j], st.rate_q[j]);
            if r == 0 && st.pending[j] == 0 {
                continue;
            }
            let multibit = topo.counter_multibit[j];
            let g_s = generated(ph, r, seg, s);
            let g_t = generated(ph, r, seg, t);
            tally.generated[usize::from(topo.counter_event[j])] += g_t - g_s;
            match boundary {
                Some(b) => {
                    let g_b = generated(ph, r, seg, b);
                    let before = ulc_counts(&mut st.acc[j], multibit, g_b - g_s);
                    let sent = u64::from(st.pending[j]) + before;
                    st.pending[j] = 0;
                    st.transfer(topo, p, j, bank, sent, tally);
                    let after = ulc_counts(&mut st.acc[j], multibit, g_t - g_b);
                    st.pending[j] = after as u16;
                }
                None => {
                    let counts = ulc_counts(&mut st.acc[j], multibit, g_t - g_s);
                    st.pending[j] += counts as u16;
                }
            }
            debug_assert!(st.pending[j] <= super::ULC_MAX);
        }
    }
}

/// A partition that is not generating only moves what its ULCs hold, at
/// the last boundary of the span.
fn transfer_only(st: &mut Counting, topo: &Topology, p: u32, boundary: Option<u64>, tally: &mut Tally) {
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
