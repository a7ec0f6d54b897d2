//! The batched engine: every span is counted in closed form.
//!
//! Transfers at all boundaries inside `(s, t]` collapse into one transfer at
//! the last boundary: the sum of per-window ULC counts telescopes (for
//! multi-bit events too, because the accumulator carries its residue across
//! windows), and no threshold can be crossed inside the span because the
//! device schedules a threshold check at the earliest boundary a crossing is
//! possible ([`super::Counting::threshold_horizon`]).

use super::bank::{ulc9, ulc_counts, wrap28, Counting, Lane, Tally, CCU_MASK, INST_EVENT, ULC_MAX};
use crate::model::rc::Drain;
use crate::model::topology::Topology;

/// The per-counter state of counters `range` side by side: (rate, phase,
/// accumulator, pending ULC count, bank cells, masked, event, multi-bit),
/// as the passes below walk them. A macro, not a function, so that each
/// pass keeps its loop over plain slices (the zip's type is unnameable
/// without boxing, and this is the device model's innermost loop).
macro_rules! counter_lanes {
    ($st:expr, $topo:expr, $range:expr) => {{
        let r = $range;
        $st.rate_q[r.clone()]
            .iter()
            .zip(&$st.phase_q[r.clone()])
            .zip($st.acc[r.clone()].iter_mut())
            .zip($st.pending[r.clone()].iter_mut())
            .zip($st.bank[r.clone()].iter_mut())
            .zip(&$st.masked[r.clone()])
            .zip(&$topo.counter_event[r.clone()])
            .zip(&$topo.counter_multibit[r])
    }};
}

/// Splits a counter's generated signal `(g_s, g_b, g_t)` at the transfer
/// boundary: answers what its ULC sends at the boundary (what it held
/// before the span plus `[g_s, g_b)`) and keeps `[g_b, g_t)` pending.
#[inline]
fn split_at_boundary(
    acc: &mut u8,
    multibit: bool,
    pending: &mut u16,
    (g_s, g_b, g_t): (u64, u64, u64),
) -> u64 {
    let sent = u64::from(*pending) + ulc_counts(acc, multibit, g_b - g_s);
    *pending = ulc9(ulc_counts(acc, multibit, g_t - g_b));
    sent
}

/// A program's instructions over a span `[s, t)`: retired in `[s, b)` and
/// in `[s, t)` (per SM), `b` the span's last transfer boundary.
#[derive(Clone, Copy, Debug)]
pub(super) struct ProgSpan {
    at_boundary: u64,
    at_end: u64,
}

impl ProgSpan {
    /// Runs `lane` over `[s, t)`.
    pub(super) fn run(lane: &mut dyn Lane, s: u64, t: u64, boundary: Option<u64>) -> Self {
        let b = boundary.unwrap_or(s);
        let at_boundary = lane.run(b - s);
        ProgSpan {
            at_boundary,
            at_end: at_boundary + lane.run(t - b),
        }
    }
}

#[allow(clippy::too_many_arguments)] // the sync span plus the program's part of it
pub(super) fn sync(
    st: &mut Counting,
    topo: &Topology,
    p: u32,
    s: u64,
    t: u64,
    boundary: Option<u64>,
    prog: Option<ProgSpan>,
    tally: &mut Tally,
) {
    run(st, topo, p, s, t, boundary, prog, tally, None);
}

/// Counts up to `t` and, in the same pass, performs a trigger on every CCU
/// of `p`: each active bank is routed into the RCs and cleared, and the
/// banks swap. Equivalent to `sync` followed by record emission and routing
/// (the cycle-level engine takes that explicit path, and the tests compare).
pub(super) fn sync_and_trigger(
    st: &mut Counting,
    topo: &Topology,
    p: u32,
    (s, t, boundary): (u64, u64, Option<u64>),
    prog: Option<ProgSpan>,
    tally: &mut Tally,
    drain: Drain<'_>,
) {
    match boundary {
        Some(b) if st.parts[p as usize].generating => {
            trigger_pass(st, topo, p, (s, b, t), prog, tally, drain);
        }
        _ => run(st, topo, p, s, t, boundary, prog, tally, Some(drain)),
    }
    for &c in &topo.partition_ccus[p as usize] {
        st.active_bank[c as usize] ^= 1;
    }
    st.parts[p as usize].synced_to = t.max(st.parts[p as usize].synced_to);
    st.banks_emitted(p);
}

/// [`run`] specialised for the periodic trigger of a generating
/// partition with a transfer boundary `b` in `(s, t]`, the common case:
/// every cell is counted, moved to the RCs and cleared in one pass, with
/// no branch on what the general pass must decide per counter. The largest
/// active value is not tracked: the banks are emptied.
fn trigger_pass(
    st: &mut Counting,
    topo: &Topology,
    p: u32,
    (s, b, t): (u64, u64, u64),
    prog: Option<ProgSpan>,
    tally: &mut Tally,
    mut drain: Drain<'_>,
) {
    let seg = st.parts[p as usize].seg_start;
    let (ds, db, dt) = (s - seg, b - seg, t - seg);
    let mut wraps = 0;
    for &c in &topo.partition_ccus[p as usize] {
        let range = topo.ccus[c as usize].counters.clone();
        let (a, z) = (range.start as usize, range.end as usize);
        let bank = usize::from(st.active_bank[c as usize]);
        let lanes = counter_lanes!(st, topo, a..z);
        for (((((((&r, &ph), acc), pending), cell), &masked), &event), &multibit) in lanes {
            let (r, ph) = (u64::from(r), u64::from(ph));
            let (g_s, g_b, g_t) = match prog.filter(|_| event == INST_EVENT) {
                Some(l) => (0, l.at_boundary, l.at_end),
                None => (
                    (ph + ds * r) >> 16,
                    (ph + db * r) >> 16,
                    (ph + dt * r) >> 16,
                ),
            };
            let e = usize::from(event);
            tally.generated[e] += g_t - g_s;
            let sent = split_at_boundary(acc, multibit, pending, (g_s, g_b, g_t));
            let held = std::mem::take(&mut cell[bank]);
            if masked {
                tally.masked[e] += sent;
                drain.add(event, held);
            } else {
                let sum = u64::from(held) + sent;
                wraps += u64::from(sum > u64::from(CCU_MASK));
                drain.add(event, wrap28(sum));
            }
        }
    }
    st.wraps += wraps;
}

/// [`run`] specialised for counting a generating partition without a
/// trigger (no branch on what only a trigger needs).
fn sync_pass(
    st: &mut Counting,
    topo: &Topology,
    p: u32,
    (s, t, boundary): (u64, u64, Option<u64>),
    prog: Option<ProgSpan>,
    tally: &mut Tally,
) {
    let part = &st.parts[p as usize];
    let seg = part.seg_start;
    let (ds, dt) = (s - seg, t - seg);
    // Without a boundary the whole span stays in the ULCs.
    let db = boundary.map_or(ds, |b| b - seg);
    let transfer = boundary.is_some();
    let mut max = part.max_active;
    let mut wraps = 0;
    for &c in &topo.partition_ccus[p as usize] {
        let range = topo.ccus[c as usize].counters.clone();
        let (a, z) = (range.start as usize, range.end as usize);
        let bank = usize::from(st.active_bank[c as usize]);
        let lanes = counter_lanes!(st, topo, a..z);
        for (((((((&r, &ph), acc), pending), cell), &masked), &event), &multibit) in lanes {
            let (r, ph) = (u64::from(r), u64::from(ph));
            let (g_s, g_b, g_t) = match prog.filter(|_| event == INST_EVENT) {
                Some(l) if transfer => (0, l.at_boundary, l.at_end),
                Some(l) => (0, 0, l.at_end),
                None => (
                    (ph + ds * r) >> 16,
                    (ph + db * r) >> 16,
                    (ph + dt * r) >> 16,
                ),
            };
            let e = usize::from(event);
            tally.generated[e] += g_t - g_s;
            if !transfer {
                *pending = ulc9(u64::from(*pending) + ulc_counts(acc, multibit, g_t - g_s));
                continue;
            }
            let sent = split_at_boundary(acc, multibit, pending, (g_s, g_b, g_t));
            if sent != 0 && masked {
                tally.masked[e] += sent;
            } else if sent != 0 {
                wraps += u64::from(add_to_cell(&mut cell[bank], sent, &mut max));
            }
        }
    }
    st.wraps += wraps;
    st.parts[p as usize].max_active = max;
}

#[allow(clippy::too_many_arguments)]
fn run(
    st: &mut Counting,
    topo: &Topology,
    p: u32,
    s: u64,
    t: u64,
    boundary: Option<u64>,
    prog: Option<ProgSpan>,
    tally: &mut Tally,
    mut drain: Option<Drain<'_>>,
) {
    if drain.is_none() && st.parts[p as usize].generating {
        return sync_pass(st, topo, p, (s, t, boundary), prog, tally);
    }
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
        let lanes = counter_lanes!(st, topo, a..z);
        for (((((((&r, &ph), acc), pending), cell), &masked), &event), &multibit) in lanes {
            let r = if generating { r } else { 0 };
            let lane = prog.filter(|_| event == INST_EVENT);
            if r == 0 && *pending == 0 && lane.is_none() {
                if let Some(d) = drain.as_mut() {
                    let v = std::mem::take(&mut cell[bank]);
                    d.add(event, v);
                }
                continue;
            }
            let (r, ph) = (u64::from(r), u64::from(ph));
            let g = |d: u64| (ph + d * r) >> 16;
            let (g_s, g_t) = match lane {
                Some(l) => (0, l.at_end),
                None => (g(ds), g(dt)),
            };
            tally.generated[usize::from(event)] += g_t - g_s;
            match db {
                Some(db) => {
                    let g_b = lane.map_or_else(|| g(db), |l| l.at_boundary);
                    let sent = split_at_boundary(acc, multibit, pending, (g_s, g_b, g_t));
                    if sent != 0 && masked {
                        tally.masked[usize::from(event)] += sent;
                    } else if sent != 0 {
                        wraps += u64::from(add_to_cell(&mut cell[bank], sent, &mut max));
                    }
                }
                None => {
                    *pending = ulc9(u64::from(*pending) + ulc_counts(acc, multibit, g_t - g_s));
                }
            }
            debug_assert!(*pending <= ULC_MAX);
            if let Some(d) = drain.as_mut() {
                let v = std::mem::take(&mut cell[bank]);
                d.add(event, v);
            }
        }
    }
    st.wraps += wraps;
    st.parts[p as usize].max_active = max;
}

/// Adds `sent` transferred counts to a bank cell (28 bits, wrapping),
/// raising `max` to the new value; true when the cell wrapped.
#[inline]
fn add_to_cell(cell: &mut u32, sent: u64, max: &mut u32) -> bool {
    let sum = u64::from(*cell) + sent;
    let v = wrap28(sum);
    *cell = v;
    *max = (*max).max(v);
    sum > u64::from(CCU_MASK)
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
