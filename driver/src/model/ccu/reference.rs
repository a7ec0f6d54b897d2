//! The cycle-level reference engine: steps every cycle, drives each ULC's
//! 9-bit counters and 6-bit accumulators from the per-cycle signal, and at
//! every transfer boundary serialises each ULC into a start/end-framed frame
//! that its CCU deframes and adds. Slow by design; tests compare it with the
//! batched engine bit for bit.

use super::bank::{
    generated, residue5, ulc9, Counting, Lane, Tally, ACC_MSB, INST_EVENT, ULC_MAX, ULC_PERIOD,
};
use crate::model::topology::Topology;

/// A ULC serialisation frame as the cycle-level engine sends it.
#[derive(Debug)]
struct UlcFrame<'a> {
    start: u16,
    values: &'a [u16],
    end: u16,
}

/// Frame delimiters of a ULC transfer.
const FRAME_START: u16 = 0x1FE;
const FRAME_END: u16 = 0x1FD;

#[allow(clippy::too_many_arguments)] // the sync span, the threshold check and the program
pub(super) fn sync(
    st: &mut Counting,
    topo: &Topology,
    p: u32,
    s: u64,
    t: u64,
    threshold: Option<u32>,
    mut lane: Option<&mut dyn Lane>,
    tally: &mut Tally,
) {
    let seg = st.parts[p as usize].seg_start;
    // The device checks thresholds only at the horizon the batched rule
    // computes; a crossing strictly before it would be a missed trigger.
    let horizon = threshold.map(|thr| (thr, st.threshold_horizon(p, thr)));
    let mut frame_buf: Vec<u16> = Vec::with_capacity(64);
    let generating = st.parts[p as usize].generating;
    for c in s..t {
        let retired = lane.as_mut().map(|l| l.run(1));
        for range in topo.partition_counter_ranges(p).filter(|_| generating) {
            for j in range {
                let v = match retired.filter(|_| topo.counter_event[j] == INST_EVENT) {
                    Some(v) => v,
                    None => {
                        generated(st.phase_q[j], st.rate_q[j], seg, c + 1)
                            - generated(st.phase_q[j], st.rate_q[j], seg, c)
                    }
                };
                tally.generated[usize::from(topo.counter_event[j])] += v;
                if topo.counter_multibit[j] {
                    debug_assert!(v <= ACC_MSB);
                    // 6-bit accumulator: its MSB drives the 1-bit counter input.
                    let acc = u64::from(st.acc[j]) + v;
                    if acc & ACC_MSB != 0 {
                        st.pending[j] += 1;
                    }
                    st.acc[j] = residue5(acc);
                } else {
                    debug_assert!(v <= 1);
                    st.pending[j] = ulc9(u64::from(st.pending[j]) + v);
                }
                debug_assert!(st.pending[j] <= ULC_MAX, "9-bit ULC counter would wrap");
            }
        }
        let now = c + 1;
        if now % ULC_PERIOD != 0 || st.parts[p as usize].ulc_paused {
            continue;
        }
        for &ccu in &topo.partition_ccus[p as usize] {
            let bank = usize::from(st.active_bank[ccu as usize]);
            for u in topo.ccus[ccu as usize].ulcs.clone() {
                let ulc = &topo.ulcs[u as usize];
                let first = ulc.first_counter as usize;
                frame_buf.clear();
                frame_buf.extend(
                    st.pending[first..first + ulc.counters as usize]
                        .iter()
                        .copied(),
                );
                st.pending[first..first + ulc.counters as usize].fill(0);
                let frame = UlcFrame {
                    start: FRAME_START,
                    values: &frame_buf,
                    end: FRAME_END,
                };
                deframe_into_ccu(st, topo, p, first, bank, &frame, tally);
            }
        }
        if let Some((thr, horizon)) = horizon {
            if st.parts[p as usize].max_active >= thr && now < horizon {
                st.missed_thresholds += 1;
            }
        }
    }
}

fn deframe_into_ccu(
    st: &mut Counting,
    topo: &Topology,
    p: u32,
    first: usize,
    bank: usize,
    frame: &UlcFrame<'_>,
    tally: &mut Tally,
) {
    debug_assert!(
        frame.start == FRAME_START && frame.end == FRAME_END,
        "ULC frame lost its framing"
    );
    for (k, &v) in frame.values.iter().enumerate() {
        st.transfer(topo, p, first + k, bank, u64::from(v), tally);
    }
}
