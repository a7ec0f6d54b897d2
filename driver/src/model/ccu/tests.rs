//! The counting unit by itself: a trigger swapping a CCU's banks and the
//! records the idle bank becomes, flush acks, masks and their register
//! checks, the wrap guard's horizons, ULC transfers and the multi-bit
//! accumulator, and the two engines against each other span by span.
//!
//! Expectations come from the definitions in the unit's module comment
//! (a counter at rate one generates exactly one count per cycle; ULCs
//! transfer at every multiple of 511; a multi-bit counter counts one per
//! 32 signal units), computed here, never read back from the unit.

use std::collections::BTreeMap;

use gpupm_uapi::events::MAX_EVENTS;
use gpupm_uapi::layout::{ccu_record_flags, CcuRecord, RECORD_VALUES};
use gpupm_uapi::regs::{self as r, CCU_COUNTER_BITS, FLUSH_ACK_BASE_CYCLES, ULC_COUNTER_MAX};

use super::record::flush_ack;
use super::regs::CcuWrite;
use super::*;
use crate::model::access::{RegValue, Reject};
use crate::model::ledger::{Attribution, Ledger, LedgerRow};
use crate::model::rc::{Drain, Sums};
use crate::model::topology::{h100_class, Topology};
use crate::scenario::PartitionSpec;

/// The slice most tests count.
const P: u32 = 1;
/// A second slice, owning two GPCs of 16 SMs each.
const P2: u32 = 2;
/// Whom partition `P`'s counts belong to.
const WHO: Attribution = Attribution { ctx: 5, vm: 1 };
/// Cycles between ULC transfers: a ULC counter's range (9 bits).
const PERIOD: u64 = ULC_COUNTER_MAX as u64;
/// Q16 rate of one signal unit per cycle.
const ONE: u32 = 1 << 16;
/// A CCU counter's modulus.
const WRAP: u64 = 1 << CCU_COUNTER_BITS;

fn slice(slot: u32, gpcs: Vec<u32>, memory_slices: Vec<u32>) -> PartitionSpec {
    PartitionSpec {
        slot,
        gpcs,
        memory_slices,
        ctx_timeslice_cycles: 0,
        vm_timeslice_cycles: 0,
        ri_version: 1,
        ri_max_rgs: gpupm_uapi::ri::RGS_MAX,
    }
}

/// An H100-class layout: slice 1 owns GPC 0 and memory slice 0, slice 2
/// GPCs 4 and 5 and memory slice 1.
fn topo() -> Topology {
    let slices = [slice(P, vec![0], vec![0]), slice(P2, vec![4, 5], vec![1])];
    Topology::build(&h100_class(), &slices).expect("the layout builds")
}

/// Partition `p`'s counters (flat indices).
fn counters(topo: &Topology, p: u32) -> Vec<usize> {
    topo.partition_counter_ranges(p).flatten().collect()
}

/// Rate one for single-bit counters, nothing for multi-bit ones.
fn single_bit_one(topo: &Topology, j: usize) -> u32 {
    if topo.counter_multibit[j] {
        0
    } else {
        ONE
    }
}

/// A different rate per counter (`salt` picks another set), up to the
/// largest each kind may have (1.0 single-bit, 32.0 multi-bit), a fifth
/// of them 0.
fn varied(topo: &Topology, j: usize, salt: u64) -> u32 {
    let h = (j as u64 + 1 + (salt << 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 33;
    let top = if topo.counter_multibit[j] {
        32 * u64::from(ONE)
    } else {
        u64::from(ONE)
    };
    u32::try_from(h % (top + 1) * u64::from(!h.is_multiple_of(5))).expect("a Q16 rate")
}

/// A unit counting partition `P` from cycle 0 for `WHO` at `rate(j)`.
fn counting(topo: &Topology, kind: EngineKind, rate: impl FnMut(usize) -> u32) -> Counting {
    let mut st = Counting::new(topo, kind, 7);
    st.set_generation(topo, P, 0, WHO, rate);
    st
}

fn value(v: Option<RegValue>) -> u64 {
    match v.expect("a register") {
        RegValue::R32(x) => u64::from(x),
        RegValue::R64(x) => x,
    }
}

fn mask_of(bits: u32) -> u32 {
    if bits >= 32 {
        u32::MAX
    } else {
        (1 << bits) - 1
    }
}

/// Writes mask word `w` of CCU `c` as a batch of index then data would.
fn write_mask(st: &mut Counting, topo: &Topology, c: u32, w: u32, word: u32) {
    let mut index = st.mask_index_shadow()[c as usize];
    for (reg, v) in [(r::CCU_MASK_INDEX, w), (r::CCU_MASK_DATA, word)] {
        let write = Counting::check_ccu_write(topo, c, reg, v, &mut index).expect("a valid write");
        st.apply_ccu_write(topo, c, write);
    }
}

/// Adds a record's values into per-event sums, as the RC buffer does.
fn add_record(topo: &Topology, sums: &mut Sums, rec: &CcuRecord) {
    let first =
        topo.ccus[usize::from(rec.ccu)].counters.start as usize + usize::from(rec.first_counter);
    for (k, &v) in rec.values[..usize::from(rec.valid)].iter().enumerate() {
        sums[usize::from(topo.counter_event[first + k])] += u64::from(v);
    }
}

fn rows(ledger: &Ledger) -> [LedgerRow; 3] {
    [ledger.context(WHO.ctx), ledger.vm(WHO.vm), ledger.system()]
}

#[test]
fn the_ccu_registers_describe_the_topology_and_nothing_else_reads() {
    let topo = topo();
    let st = Counting::new(&topo, EngineKind::Batched, 1);
    for (c, ccu) in topo.ccus.iter().enumerate() {
        let c = u32::try_from(c).expect("a CCU index");
        let read = |reg| value(st.read_ccu(&topo, c, reg));
        assert_eq!(read(r::CCU_OWNER), u64::from(ccu.owner.unwrap_or(u32::MAX)));
        assert_eq!(read(r::CCU_ULCS), ccu.ulcs.len() as u64);
        assert_eq!(read(r::CCU_COUNTERS), ccu.counters.len() as u64);
        assert_eq!(read(r::CCU_GROUP), u64::from(ccu.group));
        assert_eq!(read(r::CCU_GROUP_INDEX), u64::from(ccu.group_index));
        assert_eq!(read(r::CCU_ACTIVE_BANK), 0);
        assert_eq!(read(r::CCU_RECORDS), 0);
        assert_eq!(read(r::CCU_MASK_INDEX), 0);
        assert_eq!(read(r::CCU_MASK_DATA), 0);
        assert_eq!(st.read_ccu(&topo, c, 0x3C), None, "a hole in the block");
    }
    let missing = u32::try_from(topo.ccus.len()).expect("a CCU count");
    assert_eq!(st.read_ccu(&topo, missing, r::CCU_OWNER), None);
    assert_eq!(
        topo.ccus[topo.partition_ccus[P as usize][0] as usize].owner,
        Some(P)
    );
}

#[test]
fn a_trigger_swaps_the_banks_and_hands_over_the_idle_one_eight_values_a_record() {
    let topo = topo();
    let mut st = Counting::new(&topo, EngineKind::Batched, 1);
    for &c in &topo.partition_ccus[P as usize] {
        let range = topo.ccus[c as usize].counters.clone();
        let n = range.len();
        let old: Vec<[u32; 2]> = (0..n)
            .map(|k| {
                let k = u32::try_from(k).expect("a counter index");
                [k + 1, 100_000 + k]
            })
            .collect();
        st.bank[range.start as usize..range.end as usize].copy_from_slice(&old);
        let records = n.div_ceil(RECORD_VALUES);
        for (round, bank) in [(1u64, 0usize), (2, 1)] {
            let mut got = Vec::new();
            st.emit_records(&topo, c, |rec| got.push(*rec));
            assert_eq!(got.len(), records, "CCU {c}: one record per 8 counters");
            for (i, rec) in got.iter().enumerate() {
                let first = i * RECORD_VALUES;
                let valid = (n - first).min(RECORD_VALUES);
                assert_eq!(usize::from(rec.ccu), c as usize);
                assert_eq!(usize::from(rec.first_counter), first);
                assert_eq!(usize::from(rec.valid), valid);
                assert_eq!(rec.flags, 0);
                for k in 0..RECORD_VALUES {
                    let want = if k < valid { old[first + k][bank] } else { 0 };
                    assert_eq!(rec.values[k], want, "CCU {c} record {i} value {k}");
                }
            }
            // The handed-over bank is cleared; the other one is untouched.
            for (k, cells) in st.bank[range.start as usize..range.end as usize]
                .iter()
                .enumerate()
            {
                assert_eq!(cells[bank], 0);
                if round == 1 {
                    assert_eq!(cells[1], old[k][1]);
                }
            }
            let active = value(st.read_ccu(&topo, c, r::CCU_ACTIVE_BANK));
            assert_eq!(active, 1 - bank as u64, "the banks swapped");
            assert_eq!(
                value(st.read_ccu(&topo, c, r::CCU_RECORDS)),
                round * records as u64
            );
        }
    }
}

#[test]
fn a_fused_trigger_counts_the_records_emitting_would_have_sent() {
    let topo = topo();
    let mut fused = Counting::new(&topo, EngineKind::Batched, 1);
    let mut emitted = Counting::new(&topo, EngineKind::Batched, 1);
    let mut sent = 0u64;
    for &c in &topo.partition_ccus[P as usize] {
        emitted.emit_records(&topo, c, |_| sent += 1);
    }
    assert_eq!(fused.count_fused_records(&topo, P), sent);
    for &c in &topo.partition_ccus[P as usize] {
        assert_eq!(
            fused.read_ccu(&topo, c, r::CCU_RECORDS),
            emitted.read_ccu(&topo, c, r::CCU_RECORDS)
        );
    }
}

#[test]
fn flush_acks_are_due_after_each_ccus_records_and_ccus_due_together_share_a_cycle() {
    let topo = topo();
    let now = 12_345;
    for p in [P, P2] {
        let mut want: BTreeMap<u64, u64> = BTreeMap::new();
        for &c in &topo.partition_ccus[p as usize] {
            let records = topo.ccus[c as usize].counters.len().div_ceil(RECORD_VALUES);
            let due = now + u64::from(FLUSH_ACK_BASE_CYCLES) + records as u64;
            *want.entry(due).or_default() |= 1 << c;
        }
        let got = Counting::flush_ack_schedule(&topo, p, now);
        assert_eq!(got, want.into_iter().collect::<Vec<_>>(), "slice {p}");
        let all = got.iter().fold(0, |m, a| m | a.1);
        let assigned = topo.partition_ccus[p as usize]
            .iter()
            .fold(0, |m, &c| m | 1 << c);
        assert_eq!(all, assigned, "every CCU of slice {p} acks once");
    }
    // Slice 2's two GPC CCUs have the same size: one cycle, both bits.
    let gpcs: Vec<u32> = topo.partition_ccus[P2 as usize]
        .iter()
        .copied()
        .filter(|&c| topo.ccus[c as usize].group == r::ccu_group::GPC)
        .collect();
    assert_eq!(gpcs.len(), 2);
    let both = 1 << gpcs[0] | 1 << gpcs[1];
    assert!(Counting::flush_ack_schedule(&topo, P2, now)
        .iter()
        .any(|a| a.1 & both == both));
    let ack = flush_ack(gpcs[1]);
    assert_eq!(
        (u32::from(ack.ccu), ack.flags, ack.valid, ack.values),
        (gpcs[1], ccu_record_flags::FLUSH_ACK, 0, [0; RECORD_VALUES])
    );
}

#[test]
fn mask_writes_are_checked_against_the_ccus_counters_and_the_batchs_index() {
    let topo = topo();
    let st = Counting::new(&topo, EngineKind::Batched, 1);
    // A CCU whose last mask word is partial.
    let (c, n) = topo
        .ccus
        .iter()
        .enumerate()
        .map(|(c, ccu)| (u32::try_from(c).expect("a CCU index"), ccu.counters.len()))
        .find(|&(_, n)| n % 32 != 0 && n > 32)
        .expect("a CCU with a partial last mask word");
    let n = u32::try_from(n).expect("a counter count");
    let last = n.div_ceil(32) - 1;
    let valid = n - last * 32;
    let check = |reg, v, index: &mut u32| Counting::check_ccu_write(&topo, c, reg, v, index);
    let mut index = 0;
    assert_eq!(
        check(r::CCU_MASK_INDEX, last + 1, &mut index).unwrap_err(),
        Reject::BadValue("mask word index beyond the CCU's counters")
    );
    assert_eq!(index, 0, "a refused index write leaves the batch's index");
    // Word 0 is whole: every bit may be set.
    assert!(check(r::CCU_MASK_DATA, u32::MAX, &mut index).is_ok());
    // The data check follows the batch's index, not the unit's.
    assert!(matches!(
        check(r::CCU_MASK_INDEX, last, &mut index),
        Ok(CcuWrite::MaskIndex(i)) if i == last
    ));
    assert_eq!(index, last);
    assert_eq!(st.mask_index_shadow()[c as usize], 0);
    assert_eq!(
        check(r::CCU_MASK_DATA, 1 << valid, &mut index).unwrap_err(),
        Reject::BadValue("mask bits beyond the CCU's counters")
    );
    assert!(matches!(
        check(r::CCU_MASK_DATA, mask_of(valid), &mut index),
        Ok(CcuWrite::MaskData(w)) if w == mask_of(valid)
    ));
    for reg in [
        r::CCU_OWNER,
        r::CCU_ULCS,
        r::CCU_COUNTERS,
        r::CCU_ACTIVE_BANK,
        r::CCU_RECORDS,
        r::CCU_GROUP,
        r::CCU_GROUP_INDEX,
    ] {
        assert_eq!(check(reg, 0, &mut index).unwrap_err(), Reject::ReadOnly);
    }
}

#[test]
fn mask_words_read_back_and_a_reset_unmasks_every_counter() {
    let topo = topo();
    let mut st = Counting::new(&topo, EngineKind::Batched, 1);
    for (c, ccu) in topo.ccus.iter().enumerate() {
        let c = u32::try_from(c).expect("a CCU index");
        let n = u32::try_from(ccu.counters.len()).expect("a counter count");
        for w in 0..n.div_ceil(32) {
            let word = 0xA5C3_0F69u32.rotate_left(w + c) & mask_of(n - w * 32);
            write_mask(&mut st, &topo, c, w, word);
            assert_eq!(
                value(st.read_ccu(&topo, c, r::CCU_MASK_INDEX)),
                u64::from(w)
            );
            assert_eq!(
                value(st.read_ccu(&topo, c, r::CCU_MASK_DATA)),
                u64::from(word)
            );
            for b in 0..(n - w * 32).min(32) {
                let j = (ccu.counters.start + w * 32 + b) as usize;
                assert_eq!(st.masked[j], word >> b & 1 != 0, "CCU {c} counter {j}");
            }
        }
    }
    st.reset_masks();
    assert!(st.masked.iter().all(|&m| !m));
    for (c, ccu) in topo.ccus.iter().enumerate() {
        let c = u32::try_from(c).expect("a CCU index");
        assert_eq!(value(st.read_ccu(&topo, c, r::CCU_MASK_INDEX)), 0);
        let n = u32::try_from(ccu.counters.len()).expect("a counter count");
        for w in 0..n.div_ceil(32) {
            write_mask(&mut st, &topo, c, w, 0);
            assert_eq!(value(st.read_ccu(&topo, c, r::CCU_MASK_DATA)), 0);
        }
    }
}

#[test]
fn masked_counters_discard_what_their_ulcs_transfer_and_the_ledger_books_it() {
    let topo = topo();
    for kind in [EngineKind::Batched, EngineKind::CycleLevel] {
        let mut st = counting(&topo, kind, |j| single_bit_one(&topo, j));
        // Every other counter of each of the slice's CCUs masked.
        let mut masked = vec![false; topo.counter_count()];
        for &c in &topo.partition_ccus[P as usize] {
            let ccu = &topo.ccus[c as usize];
            let n = u32::try_from(ccu.counters.len()).expect("a counter count");
            for w in 0..n.div_ceil(32) {
                let word = 0x5555_5555 & mask_of(n - w * 32);
                write_mask(&mut st, &topo, c, w, word);
                for b in 0..(n - w * 32).min(32) {
                    masked[(ccu.counters.start + w * 32 + b) as usize] = word >> b & 1 != 0;
                }
            }
        }
        let mut ledger = Ledger::new(0);
        let t = 2 * PERIOD;
        st.sync(&topo, &mut ledger, P, t, None, None);
        let (mut generated, mut discarded) = ([0u64; MAX_EVENTS], [0u64; MAX_EVENTS]);
        for j in counters(&topo, P) {
            let single = !topo.counter_multibit[j];
            // One count per cycle, all of it transferred by the boundary at t.
            let want = if single && !masked[j] { t } else { 0 };
            assert_eq!(u64::from(st.bank[j][0]), want, "{kind:?}: counter {j}");
            assert_eq!(st.pending[j], 0, "{kind:?}: counter {j}");
            let e = usize::from(topo.counter_event[j]);
            if single {
                generated[e] += t;
                if masked[j] {
                    discarded[e] += t;
                }
            }
        }
        assert!(discarded.iter().sum::<u64>() > 0);
        for row in rows(&ledger) {
            assert_eq!(row.generated, generated, "{kind:?}");
            assert_eq!(row.masked, discarded, "{kind:?}");
        }
    }
}

#[test]
fn ulcs_transfer_only_at_multiples_of_511_and_not_while_paused() {
    let topo = topo();
    for kind in [EngineKind::Batched, EngineKind::CycleLevel] {
        let mut st = counting(&topo, kind, |j| single_bit_one(&topo, j));
        let mut ledger = Ledger::new(0);
        let j = counters(&topo, P)
            .into_iter()
            .find(|&j| !topo.counter_multibit[j])
            .expect("a single-bit counter");
        let at = |st: &Counting| (u64::from(st.bank[j][0]), u64::from(st.pending[j]));
        st.sync(&topo, &mut ledger, P, PERIOD - 1, None, None);
        assert_eq!(
            at(&st),
            (0, PERIOD - 1),
            "{kind:?}: nothing before the first boundary"
        );
        st.sync(&topo, &mut ledger, P, 1000, None, None);
        assert_eq!(
            at(&st),
            (PERIOD, 1000 - PERIOD),
            "{kind:?}: the boundary moved the window"
        );
        // Handshake step 2 pauses transfers; step 3 flushes the ULCs.
        st.set_ulc_paused(P, true);
        assert_eq!(st.guard_horizon(P, 1), u64::MAX);
        assert_eq!(st.threshold_horizon(P, 1), u64::MAX);
        st.flush_ulcs(&topo, &mut ledger, P, false);
        assert_eq!(at(&st), (1000, 0), "{kind:?}: the flush moved the rest");
        st.sync(&topo, &mut ledger, P, 1030, None, None);
        assert_eq!(
            at(&st),
            (1000, 30),
            "{kind:?}: no transfer at 1022 while paused"
        );
        st.flush_ulcs(&topo, &mut ledger, P, false);
        st.set_ulc_paused(P, false);
        st.sync(&topo, &mut ledger, P, 3 * PERIOD - 1, None, None);
        assert_eq!(at(&st), (1030, 3 * PERIOD - 1 - 1030), "{kind:?}");
        st.sync(&topo, &mut ledger, P, 3 * PERIOD, None, None);
        assert_eq!(
            at(&st),
            (3 * PERIOD, 0),
            "{kind:?}: transfers resumed at 1533"
        );
    }
}

#[test]
fn multi_bit_signals_count_one_per_32_units_and_a_leaving_context_drops_the_residue() {
    let topo = topo();
    let rate = 20 * ONE;
    let t = 700;
    // Twenty units a cycle for 700 cycles: 14,000 units per counter.
    let units = 20 * t;
    for kind in [EngineKind::Batched, EngineKind::CycleLevel] {
        let mut st = counting(
            &topo,
            kind,
            |j| if topo.counter_multibit[j] { rate } else { 0 },
        );
        let mut ledger = Ledger::new(0);
        st.sync(&topo, &mut ledger, P, t, None, None);
        st.flush_ulcs(&topo, &mut ledger, P, true);
        let (mut generated, mut remainder) = ([0u64; MAX_EVENTS], [0u64; MAX_EVENTS]);
        let mut multibit = 0;
        for j in counters(&topo, P) {
            let (bank, acc, pending) = (st.bank[j][0], st.acc[j], st.pending[j]);
            assert_eq!((acc, pending), (0, 0), "{kind:?}: counter {j} emptied");
            if !topo.counter_multibit[j] {
                assert_eq!(bank, 0);
                continue;
            }
            multibit += 1;
            assert_eq!(u64::from(bank), units / 32, "{kind:?}: counter {j}");
            let e = usize::from(topo.counter_event[j]);
            generated[e] += units;
            remainder[e] += units % 32;
        }
        assert!(multibit > 0);
        for row in rows(&ledger) {
            assert_eq!(row.generated, generated, "{kind:?}");
            assert_eq!(row.remainder, remainder, "{kind:?}");
        }
        // Without dropping, the residue stays for the next window.
        let mut kept = counting(
            &topo,
            kind,
            |j| if topo.counter_multibit[j] { rate } else { 0 },
        );
        kept.sync(&topo, &mut ledger, P, t, None, None);
        kept.flush_ulcs(&topo, &mut ledger, P, false);
        let live = kept.residue(&topo, P);
        assert_eq!(live, remainder, "{kind:?}: the live residue");
    }
}

#[test]
fn a_counter_past_28_bits_keeps_its_low_bits_and_counts_a_wrap() {
    let topo = topo();
    for kind in [EngineKind::Batched, EngineKind::CycleLevel] {
        let mut st = counting(&topo, kind, |j| single_bit_one(&topo, j));
        let near = WRAP - 100;
        let js: Vec<usize> = counters(&topo, P)
            .into_iter()
            .filter(|&j| !topo.counter_multibit[j])
            .take(3)
            .collect();
        for &j in &js {
            st.bank[j][0] = u32::try_from(near).expect("28 bits");
        }
        st.sync(&topo, &mut Ledger::new(0), P, PERIOD, None, None);
        for &j in &js {
            assert_eq!(u64::from(st.bank[j][0]), near + PERIOD - WRAP, "{kind:?}");
        }
        assert_eq!(st.wraps(), js.len() as u64, "{kind:?}");
    }
}

/// The first transfer boundary by which a counter counting one per cycle
/// since `from` (a boundary) holds `threshold`.
fn first_boundary_reaching(from: u64, threshold: u64) -> u64 {
    let mut b = from + PERIOD;
    while b - from < threshold {
        b += PERIOD;
    }
    b
}

#[test]
fn the_guard_horizon_is_the_first_boundary_any_workload_could_reach_the_threshold() {
    let topo = topo();
    for threshold in [1u32, 511, 512, 1000, 5000] {
        let fresh = Counting::new(&topo, EngineKind::Batched, 1);
        let want = first_boundary_reaching(0, u64::from(threshold));
        assert_eq!(
            fresh.guard_horizon(P, threshold),
            want,
            "threshold {threshold}"
        );
        // It depends on time alone: not on the rates, nor on what was counted.
        let mut busy = counting(&topo, EngineKind::Batched, |j| varied(&topo, j, 0));
        busy.sync(&topo, &mut Ledger::new(0), P, want - 1, None, None);
        assert_eq!(busy.guard_horizon(P, threshold), want);
        // Sound and tight: the busiest counters reach it there, not before.
        for kind in [EngineKind::Batched, EngineKind::CycleLevel] {
            let mut st = counting(&topo, kind, |j| single_bit_one(&topo, j));
            st.sync(&topo, &mut Ledger::new(0), P, want - 1, None, None);
            assert!(!st.reached(P, threshold), "{kind:?}: before {want}");
            st.sync(&topo, &mut Ledger::new(0), P, want, None, None);
            assert!(st.reached(P, threshold), "{kind:?}: at {want}");
        }
    }
    // After the banks were emitted, it counts from the last boundary then.
    let mut st = counting(&topo, EngineKind::Batched, |j| single_bit_one(&topo, j));
    let mut ledger = Ledger::new(0);
    st.sync(&topo, &mut ledger, P, 1500, None, None);
    for &c in &topo.partition_ccus[P as usize] {
        st.emit_records(&topo, c, |_| {});
    }
    st.banks_emitted(P);
    let from = 1500 / PERIOD * PERIOD;
    let want = first_boundary_reaching(from, 1000);
    assert_eq!(st.guard_horizon(P, 1000), want);
    st.sync(&topo, &mut ledger, P, want - 1, None, None);
    assert!(!st.reached(P, 1000));
    st.sync(&topo, &mut ledger, P, want, None, None);
    assert!(st.reached(P, 1000));
}

#[test]
fn the_threshold_horizon_bounds_a_crossing_from_the_counts_last_asked_for() {
    let topo = topo();
    for kind in [EngineKind::Batched, EngineKind::CycleLevel] {
        let mut st = counting(&topo, kind, |j| single_bit_one(&topo, j));
        let mut ledger = Ledger::new(0);
        st.sync(&topo, &mut ledger, P, 700, None, None);
        st.counted(P);
        // At 700 the largest counter holds 511; each transfer adds at most 511.
        let (threshold, max_active) = (1500, PERIOD);
        let mut b = 700 / PERIOD * PERIOD + PERIOD;
        let mut bound = max_active + PERIOD;
        while bound < u64::from(threshold) {
            b += PERIOD;
            bound += PERIOD;
        }
        assert_eq!(st.threshold_horizon(P, threshold), b, "{kind:?}");
        st.sync(&topo, &mut ledger, P, b - 1, Some(threshold), None);
        assert!(!st.reached(P, threshold), "{kind:?}");
        st.sync(&topo, &mut ledger, P, b, Some(threshold), None);
        assert!(st.reached(P, threshold), "{kind:?}");
        assert_eq!(st.missed_thresholds(), 0, "{kind:?}");
    }
    // The cycle-level engine's self-check catches a horizon that comes too
    // late: a count its base does not know of crosses at 511 and 1022,
    // before the 1533 the base allows.
    let mut st = counting(&topo, EngineKind::CycleLevel, |j| single_bit_one(&topo, j));
    let j = counters(&topo, P)
        .into_iter()
        .find(|&j| !topo.counter_multibit[j])
        .expect("a single-bit counter");
    st.bank[j][0] = 1000;
    assert_eq!(st.threshold_horizon(P, 1200), 3 * PERIOD);
    st.sync(&topo, &mut Ledger::new(0), P, 3 * PERIOD, Some(1200), None);
    assert_eq!(st.missed_thresholds(), 2);
}

#[test]
fn a_reset_zeroes_every_value_and_counting_carries_on_from_there() {
    let topo = topo();
    for kind in [EngineKind::Batched, EngineKind::CycleLevel] {
        let mut st = counting(&topo, kind, |j| single_bit_one(&topo, j));
        let mut ledger = Ledger::new(0);
        st.sync(&topo, &mut ledger, P, 700, None, None);
        st.zero_values();
        assert!(st.bank.iter().all(|b| *b == [0, 0]));
        assert!(st.pending.iter().all(|&v| v == 0) && st.acc.iter().all(|&v| v == 0));
        assert!(!st.reached(P, 1));
        st.sync(&topo, &mut ledger, P, 2 * PERIOD, None, None);
        let j = counters(&topo, P)
            .into_iter()
            .find(|&j| !topo.counter_multibit[j])
            .expect("a single-bit counter");
        assert_eq!(u64::from(st.bank[j][0]), 2 * PERIOD - 700, "{kind:?}");
    }
}

#[test]
fn a_fused_trigger_drains_what_counting_then_emitting_would_route() {
    let topo = topo();
    let mut fused = counting(&topo, EngineKind::Batched, |j| varied(&topo, j, 0));
    let mut plain = counting(&topo, EngineKind::Batched, |j| varied(&topo, j, 0));
    let (mut lf, mut lp) = (Ledger::new(0), Ledger::new(0));
    let mut drained = 0;
    // A boundary inside, none inside, generation paused, then resumed.
    for (t, pause) in [(700u64, false), (1600, false), (1601, true), (2600, false)] {
        let (mut rc, mut rc0) = ([0u64; MAX_EVENTS], [0u64; MAX_EVENTS]);
        let mut oob = [0u64; MAX_EVENTS];
        let drain = Drain {
            partition_rc: Some(&mut rc),
            system_rc: Some(&mut rc0),
            oob_rc: Some(&mut oob),
        };
        assert!(fused.sync_and_trigger(&topo, &mut lf, P, t, drain, None));
        plain.sync(&topo, &mut lp, P, t, None, None);
        let mut routed = [0u64; MAX_EVENTS];
        for &c in &topo.partition_ccus[P as usize] {
            plain.emit_records(&topo, c, |rec| add_record(&topo, &mut routed, rec));
        }
        plain.banks_emitted(P);
        assert_eq!(rc, routed, "up to {t}");
        assert_eq!(rc0, routed, "up to {t}");
        assert_eq!(oob, routed, "the OOB accumulator beside RC0, up to {t}");
        assert_eq!(fused.snapshot(), plain.snapshot(), "up to {t}");
        assert_eq!(rows(&lf), rows(&lp), "up to {t}");
        drained += rc.iter().sum::<u64>();
        if pause {
            fused.pause_generation(P, t);
            plain.pause_generation(P, t);
        } else if !fused.generating(P) {
            fused.set_generation(&topo, P, t, WHO, |j| varied(&topo, j, 0));
            plain.set_generation(&topo, P, t, WHO, |j| varied(&topo, j, 0));
        }
    }
    assert!(drained > 0);
    // The cycle-level engine leaves fused triggers to the explicit path.
    let mut reference = counting(&topo, EngineKind::CycleLevel, |j| varied(&topo, j, 0));
    let mut rc = [0u64; MAX_EVENTS];
    let drain = Drain {
        partition_rc: Some(&mut rc),
        system_rc: None,
        oob_rc: None,
    };
    assert!(!reference.sync_and_trigger(&topo, &mut lp, P, 700, drain, None));
    assert_eq!(reference.synced_to(P), 0);
}

#[test]
fn both_engines_end_every_span_in_the_same_state() {
    let topo = topo();
    let kinds = [EngineKind::Batched, EngineKind::CycleLevel];
    let mut units = kinds.map(|k| counting(&topo, k, |j| varied(&topo, j, 0)));
    let mut ledgers = [Ledger::new(0), Ledger::new(0)];
    let mut records: [Vec<CcuRecord>; 2] = [Vec::new(), Vec::new()];
    let c0 = topo.partition_ccus[P as usize][0];
    let c0_word0 = mask_of(u32::try_from(topo.ccus[c0 as usize].counters.len()).expect("a count"));
    let mut t = 0;
    for (step, span) in [1u64, 509, 1, 1, 510, 1, 2000, 300, 7, 4000, 100, 1022]
        .into_iter()
        .enumerate()
    {
        t += span;
        for (k, (st, ledger)) in units.iter_mut().zip(&mut ledgers).enumerate() {
            st.sync(&topo, ledger, P, t, None, None);
            match step {
                // Generation pauses and resumes with other rates.
                3 => st.pause_generation(P, t),
                5 => st.set_generation(&topo, P, t, WHO, |j| varied(&topo, j, 1)),
                // A mask changes mid-run.
                6 => write_mask(st, &topo, c0, 0, 0x0F0F_0F0F & c0_word0),
                // A switch: transfers paused, ULCs flushed, the residue dropped.
                7 => {
                    st.set_ulc_paused(P, true);
                    st.flush_ulcs(&topo, ledger, P, true);
                }
                8 => st.set_ulc_paused(P, false),
                // A trigger.
                9 => {
                    for &c in &topo.partition_ccus[P as usize] {
                        st.emit_records(&topo, c, |rec| records[k].push(*rec));
                    }
                    st.banks_emitted(P);
                }
                _ => {}
            }
        }
        let [a, b] = &units;
        assert_eq!(a.snapshot(), b.snapshot(), "after step {step} (cycle {t})");
        assert_eq!(rows(&ledgers[0]), rows(&ledgers[1]), "after step {step}");
        assert_eq!(a.residue(&topo, P), b.residue(&topo, P));
    }
    assert_eq!(records[0], records[1]);
    assert!(records[0].iter().any(|r| r.values.iter().any(|&v| v > 0)));
    assert_eq!(units[0].wraps() + units[1].wraps(), 0);
}
