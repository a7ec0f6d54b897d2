//! The sampling unit by itself: a sample buffer's head, tail, watermark,
//! lost and produced counts and its register checks; the unit's register
//! checks; the cycle sampler's period and dither and the branch sampler's
//! period, driven through the unit's walk watcher with spans and branches
//! given here, and a confidential context's branch stacks on the schedule
//! of its cycles.
//!
//! Expectations follow from the register definitions in
//! `uapi::sampling` (an interval is P + R + S − A with R in 0..=R_MAX; a
//! stack every N-th taken branch holding the newest 32), computed here.

use gpupm_uapi::regs::{MAX_CONTEXTS, MAX_VMS};
use gpupm_uapi::sampling::{
    self as s, buf_kind, lost_select, samp_ctrl, samp_status, sample_flags, BranchEntry,
    BranchSlot, BranchStackRecord, PcRecord, PcSlot, BRANCH_RECORD_MAGIC, BRANCH_STACK_ENTRIES,
    CONFIDENTIAL_BRANCH_CYCLES, PC_RECORD_MAGIC, SAMPLE_SPAN,
};
use zerocopy::FromBytes;

use super::buffer::{BufEvent, BufWrite, Placement, SampleBuffer};
use super::*;
use crate::model::access::{RegValue, Reject};
use crate::model::program::run::{Env, Watch};
use crate::scenario::ThrottleWindow;

/// The unit's partition slot.
const P: u32 = 1;
const SEED: u64 = 42;
/// The partition's shortest gap between taken branches.
const GAP: u64 = 9;
/// Where the PC buffer is placed (the branch buffer is at 0).
const PC_BASE: u32 = 1 << 20;
/// Device cycle of context cycle 0 in the walks below.
const DEV_BASE: u64 = 1_000_000;
/// The context walked, its VM and serial.
const CTX: u32 = 7;
const VM: u32 = 2;

fn value(v: Option<RegValue>) -> u64 {
    match v.expect("a register") {
        RegValue::R32(x) => u64::from(x),
        RegValue::R64(x) => x,
    }
}

fn pc(reg: u64) -> u64 {
    s::buf(buf_kind::PC, reg)
}

fn br(reg: u64) -> u64 {
    s::buf(buf_kind::BRANCH, reg)
}

fn reg(unit: &Sampler, r: u64) -> u64 {
    value(unit.read(r))
}

/// Checks `writes` as one batch, in order against one shadow, and
/// applies them only if every one passes (as the device does).
fn batch(unit: &mut Sampler, writes: &[(u64, u32)]) -> Result<(), (usize, Reject)> {
    let mut sh = unit.shadow();
    let mut checked = Vec::new();
    for (i, &(r, v)) in writes.iter().enumerate() {
        checked.push(unit.check_write(r, v, &mut sh).map_err(|e| (i, e))?);
    }
    checked.into_iter().for_each(|w| unit.apply(w));
    Ok(())
}

/// The unit's settings in one batch.
#[derive(Clone, Copy, Debug)]
struct Arm {
    ctrl: u32,
    n: u32,
    period: u32,
    dither: u32,
    branch_cap: u32,
    pc_cap: u32,
}

impl Default for Arm {
    fn default() -> Self {
        Arm {
            ctrl: samp_ctrl::ALL,
            n: 4,
            period: 1000,
            dither: 0,
            branch_cap: 64,
            pc_cap: 1024,
        }
    }
}

fn armed(a: Arm) -> Sampler {
    armed_with(SEED, a)
}

/// A configured unit drawing from `seed`, its buffers placed and sized,
/// periods and enables written, in one batch.
fn armed_with(seed: u64, a: Arm) -> Sampler {
    let mut unit = Sampler::new(P, true, GAP, seed);
    batch(
        &mut unit,
        &[
            (br(s::BUF_BASE), 0),
            (br(s::BUF_CAP), a.branch_cap),
            (pc(s::BUF_BASE), PC_BASE),
            (pc(s::BUF_CAP), a.pc_cap),
            (s::SAMP_BRANCH_PERIOD, a.n),
            (s::SAMP_CYCLE_PERIOD, a.period),
            (s::SAMP_CYCLE_DITHER, a.dither),
            (s::SAMP_CTRL, a.ctrl),
        ],
    )
    .expect("a valid arming");
    unit
}

fn env(throttle: &[ThrottleWindow]) -> Env<'_> {
    Env {
        ctx_base: 0,
        dev_base: DEV_BASE,
        phase: 0,
        throttle,
        seed: SEED,
    }
}

/// The unit watching context `ctx` (serial `serial`) of VM `VM`.
fn watcher<'a>(unit: &'a mut Sampler, env: Env<'a>, ctx: u32, serial: u64) -> Watcher<'a> {
    Watcher {
        unit,
        ctx,
        vm: VM,
        serial,
        env,
        confidential: false,
        branches: 0,
        cipher: None,
    }
}

/// The records buffer `kind` holds from its tail to its head.
fn slots(unit: &Sampler, kind: u32) -> Vec<Vec<u8>> {
    let r = |x| reg(unit, s::buf(kind, x));
    let (base, cap, head, tail) = (
        r(s::BUF_BASE),
        r(s::BUF_CAP),
        r(s::BUF_HEAD),
        r(s::BUF_TAIL),
    );
    let size = s::slot_size(kind);
    (tail..head)
        .map(|i| {
            let mut b = vec![0; usize::try_from(size).expect("a slot size")];
            unit.read_buffer(base + i % cap * size, &mut b)
                .expect("a slot inside the buffer");
            b
        })
        .collect()
}

fn pc_records(unit: &Sampler) -> Vec<PcRecord> {
    slots(unit, buf_kind::PC)
        .iter()
        .map(|b| {
            let slot = PcSlot::read_from_bytes(b).expect("a PC slot");
            PcRecord::read_from_bytes(&slot.payload).expect("a PC record")
        })
        .collect()
}

fn branch_records(unit: &Sampler) -> Vec<BranchStackRecord> {
    slots(unit, buf_kind::BRANCH)
        .iter()
        .map(|b| {
            let slot = BranchSlot::read_from_bytes(b).expect("a branch slot");
            BranchStackRecord::read_from_bytes(&slot.payload).expect("a branch record")
        })
        .collect()
}

/// A record's bytes, distinct per `k`.
fn record(k: u8) -> Vec<u8> {
    vec![k; core::mem::size_of::<PcRecord>()]
}

/// The payload of slot `i` of a PC buffer.
fn payload(b: &SampleBuffer, i: u64) -> Vec<u8> {
    let mut slot = vec![0; core::mem::size_of::<PcSlot>()];
    b.read(i * s::slot_size(buf_kind::PC), &mut slot)
        .expect("a slot");
    let at = core::mem::size_of::<gpupm_uapi::layout::Envelope>();
    slot[at..at + core::mem::size_of::<PcRecord>()].to_vec()
}

/// A PC buffer of `cap` records at 0.
fn pc_buffer(cap: u32) -> SampleBuffer {
    let mut b = SampleBuffer::new(buf_kind::PC);
    let mut mine = b.placement();
    let w = b
        .check_write(s::BUF_CAP, cap, &mut mine, Placement::default(), false)
        .expect("a valid capacity");
    b.apply(w);
    b
}

fn buf_reg(b: &SampleBuffer, r: u64) -> u64 {
    value(b.read_reg(P, r, 0))
}

fn tail(b: &mut SampleBuffer, v: u32) -> Result<(), Reject> {
    let mut mine = b.placement();
    let w = b.check_write(s::BUF_TAIL, v, &mut mine, Placement::default(), true)?;
    b.apply(w);
    Ok(())
}

#[test]
fn a_buffer_keeps_records_until_full_then_counts_each_lost_and_reports_once_per_drain() {
    let mut b = pc_buffer(4);
    assert_eq!(buf_reg(&b, s::BUF_WATERMARK), 2, "half the capacity");
    let who = (VM, CTX);
    let events: Vec<_> = (1..=6).map(|k| b.push(&record(k), who, None)).collect();
    assert_eq!(
        events,
        [
            None,
            Some(BufEvent::Watermark(2)),
            None,
            None,
            Some(BufEvent::Overflow(1)),
            None
        ]
    );
    assert_eq!(
        [s::BUF_HEAD, s::BUF_TAIL, s::BUF_LOST, s::BUF_PRODUCED].map(|r| buf_reg(&b, r)),
        [4, 0, 2, 6]
    );
    assert_eq!((b.produced(), b.lost()), (6, 2));
    for k in 0..4u8 {
        assert_eq!(payload(&b, u64::from(k)), record(k + 1), "slot {k}");
    }
    // A drain re-arms both interrupts; the ring wraps onto drained slots.
    tail(&mut b, 2).expect("a tail inside [tail, head]");
    assert_eq!(b.push(&record(7), who, None), Some(BufEvent::Watermark(3)));
    assert_eq!(b.push(&record(8), who, None), None);
    assert_eq!(b.push(&record(9), who, None), Some(BufEvent::Overflow(3)));
    assert_eq!(buf_reg(&b, s::BUF_HEAD), 6);
    assert_eq!(payload(&b, 0), record(7));
    assert_eq!(payload(&b, 1), record(8));
    assert_eq!(payload(&b, 2), record(3), "not yet drained");
    assert_eq!(buf_reg(&b, s::BUF_PRODUCED), 9);
    // A buffer with no capacity loses everything.
    let mut none = SampleBuffer::new(buf_kind::PC);
    assert_eq!(
        none.push(&record(1), who, None),
        Some(BufEvent::Overflow(1))
    );
    assert_eq!((none.produced(), none.lost()), (1, 1));
}

#[test]
fn a_tail_write_must_lie_between_the_old_tail_and_the_head() {
    let mut b = pc_buffer(8);
    for k in 0..5 {
        b.push(&record(k), (VM, CTX), None);
    }
    let bad = Reject::BadValue("tail must lie between the old tail and head");
    assert_eq!(tail(&mut b, 6), Err(bad));
    tail(&mut b, 3).expect("forward, not past the head");
    assert_eq!(tail(&mut b, 2), Err(bad), "backwards");
    assert_eq!(tail(&mut b, u32::MAX), Err(bad), "backwards past 0");
    tail(&mut b, 3).expect("the same tail");
    tail(&mut b, 5).expect("up to the head");
    assert_eq!(buf_reg(&b, s::BUF_TAIL), 5);
    // In a batch, each tail write is checked against the previous one.
    let mut mine = b.placement();
    b.push(&record(9), (VM, CTX), None);
    let other = Placement::default();
    assert!(b
        .check_write(s::BUF_TAIL, 6, &mut mine, other, true)
        .is_ok());
    assert_eq!(
        b.check_write(s::BUF_TAIL, 5, &mut mine, other, true)
            .unwrap_err(),
        bad
    );
    assert_eq!(buf_reg(&b, s::BUF_TAIL), 5, "checks change nothing");
}

#[test]
fn placement_is_checked_and_placing_empties_the_buffer() {
    let mut b = pc_buffer(4);
    for k in 0..6 {
        b.push(&record(k), (VM, CTX), None);
    }
    let check = |b: &SampleBuffer, r, v, other, enabled| {
        let mut mine = b.placement();
        b.check_write(r, v, &mut mine, other, enabled)
    };
    let none = Placement::default();
    let bad = |m| Reject::BadValue(m);
    let slot = u32::try_from(s::slot_size(buf_kind::PC)).expect("a slot size");
    let span = u32::try_from(SAMPLE_SPAN).expect("the span fits");
    assert!(matches!(
        check(&b, s::BUF_BASE, 4096, none, true),
        Err(Reject::BadValue(_))
    ));
    assert_eq!(
        check(&b, s::BUF_BASE, 100, none, false).unwrap_err(),
        bad("buffer base must be a multiple of 4096")
    );
    assert_eq!(
        check(&b, s::BUF_CAP, 3, none, false).unwrap_err(),
        bad("buffer capacity must be 0 or a power of two")
    );
    // The last slot must end inside the span.
    let at_end = span - 4 * slot;
    let aligned = at_end / 4096 * 4096;
    assert!(check(&b, s::BUF_BASE, aligned, none, false).is_ok());
    assert_eq!(
        check(&b, s::BUF_BASE, span, none, false).unwrap_err(),
        bad("buffer must lie inside the partition's sample span")
    );
    // Not over the other buffer (branch slots are 608 bytes).
    let branch = Placement {
        base: 8192,
        cap: 8,
        tail: 0,
    };
    let branch_end = 8192 + 8 * 608;
    assert_eq!(
        check(&b, s::BUF_BASE, branch_end / 4096 * 4096, branch, false).unwrap_err(),
        bad("the branch and PC buffers must not overlap")
    );
    assert!(
        check(&b, s::BUF_BASE, 0, branch, false).is_ok(),
        "4 slots end before 8192"
    );
    assert!(check(&b, s::BUF_BASE, 16384, branch, false).is_ok());
    assert!(
        check(&b, s::BUF_CAP, 0, Placement { base: 0, ..branch }, false).is_ok(),
        "an empty buffer overlaps nothing"
    );
    // Watermark 1..=capacity; the rest is read-only.
    assert_eq!(
        check(&b, s::BUF_WATERMARK, 0, none, true).unwrap_err(),
        bad("watermark must be 1..=capacity")
    );
    assert_eq!(
        check(&b, s::BUF_WATERMARK, 5, none, true).unwrap_err(),
        bad("watermark must be 1..=capacity")
    );
    assert!(matches!(
        check(&b, s::BUF_WATERMARK, 4, none, true),
        Ok(BufWrite::Watermark(4))
    ));
    for r in [
        s::BUF_HEAD,
        s::BUF_LOST,
        s::BUF_ADDR,
        s::BUF_PRODUCED,
        s::BUF_LOST_SELECTED,
    ] {
        assert_eq!(check(&b, r, 0, none, false).unwrap_err(), Reject::ReadOnly);
    }
    // A placement empties the buffer and sets the watermark to half.
    let w = check(&b, s::BUF_CAP, 16, none, false).expect("valid");
    b.apply(w);
    let w = check(&b, s::BUF_BASE, 8192, none, false).expect("valid");
    b.apply(w);
    assert_eq!(
        [
            s::BUF_BASE,
            s::BUF_CAP,
            s::BUF_HEAD,
            s::BUF_TAIL,
            s::BUF_WATERMARK,
            s::BUF_LOST,
            s::BUF_PRODUCED
        ]
        .map(|r| buf_reg(&b, r)),
        [8192, 16, 0, 0, 8, 0, 0]
    );
    assert_eq!(
        buf_reg(&b, s::BUF_ADDR),
        s::sample_span_offset(P) + 8192,
        "the window offset of the first slot"
    );
}

#[test]
fn lost_records_are_counted_per_context_and_per_vm() {
    let mut b = SampleBuffer::new(buf_kind::PC);
    for (vm, ctx, n) in [(2u32, 7u32, 3), (2, 8, 2), (3, 9, 1)] {
        for _ in 0..n {
            b.push(&record(0), (vm, ctx), None);
        }
    }
    let lost = |select| value(b.read_reg(P, s::BUF_LOST_SELECTED, select));
    assert_eq!([lost(7), lost(8), lost(9), lost(10)], [3, 2, 1, 0]);
    assert_eq!(
        [lost(lost_select::VM | 2), lost(lost_select::VM | 3)],
        [5, 1]
    );
    assert_eq!(lost(7) + lost(8) + lost(9), buf_reg(&b, s::BUF_LOST));
}

#[test]
fn the_units_registers_read_their_settings_and_an_unconfigured_unit_only_its_status() {
    let unit = Sampler::new(P, true, GAP, SEED);
    let read = |r| reg(&unit, r);
    assert_eq!(read(s::SAMP_STATUS), u64::from(samp_status::CONFIGURED));
    assert_eq!(read(s::SAMP_CTRL), 0);
    assert!(!unit.armed());
    assert_eq!(
        read(s::SAMP_BRANCH_PERIOD),
        u64::from(s::DEFAULT_BRANCH_PERIOD)
    );
    assert_eq!(
        read(s::SAMP_CYCLE_PERIOD),
        u64::from(s::DEFAULT_CYCLE_PERIOD)
    );
    assert_eq!(read(s::SAMP_CYCLE_DITHER), u64::from(s::DEFAULT_DITHER));
    assert_eq!(read(s::SAMP_SKID), u64::from(s::SKID_CYCLES));
    assert_eq!(read(s::SAMP_REFILL), u64::from(s::REFILL_CYCLES));
    assert_eq!(read(s::SAMP_STACK_DEPTH), BRANCH_STACK_ENTRIES as u64);
    assert_eq!(read(s::SAMP_SPAN), SAMPLE_SPAN);
    assert_eq!(read(s::SAMP_MIN_BRANCH_GAP), GAP);
    assert_eq!(read(br(s::BUF_CAP)), 0);
    assert_eq!(read(pc(s::BUF_ADDR)), s::sample_span_offset(P));
    let off = Sampler::new(3, false, 0, SEED);
    assert_eq!(off.read(s::SAMP_STATUS), Some(RegValue::R32(0)));
    for r in [
        s::SAMP_CTRL,
        s::SAMP_CYCLE_PERIOD,
        pc(s::BUF_CAP),
        s::SAMP_SPAN,
    ] {
        assert_eq!(off.read(r), None);
        assert_eq!(
            off.check_write(r, 1, &mut off.shadow()).unwrap_err(),
            Reject::ReadOnly
        );
    }
}

/// The unit's half of `model_sampling`'s device test of the same name:
/// every bad write is refused by the unit's checks and leaves the unit
/// and the batch's view of it as they were; the values on either side of
/// each bound are accepted.
#[test]
fn every_bad_sampling_write_is_refused_and_changes_nothing() {
    let mut unit = armed(Arm {
        branch_cap: 8,
        pc_cap: 64,
        dither: 255,
        ..Arm::default()
    });
    let refused = |unit: &Sampler, writes: &[(u64, u32)]| {
        for &(r, v) in writes {
            let mut sh = unit.shadow();
            let (before, shadow) = (format!("{unit:?}"), format!("{sh:?}"));
            assert!(
                unit.check_write(r, v, &mut sh).is_err(),
                "{r:#x} <- {v} accepted"
            );
            assert_eq!(
                format!("{unit:?}"),
                before,
                "{r:#x} <- {v} changed the unit"
            );
            assert_eq!(
                format!("{sh:?}"),
                shadow,
                "{r:#x} <- {v} moved the batch's view"
            );
        }
    };
    let span = u32::try_from(SAMPLE_SPAN).expect("the span fits");
    refused(
        &unit,
        &[
            (s::SAMP_BRANCH_PERIOD, 0),
            (s::SAMP_BRANCH_PERIOD, s::BRANCH_PERIOD_MAX + 1),
            (s::SAMP_CYCLE_PERIOD, s::CYCLE_PERIOD_MIN - 1),
            (s::SAMP_CYCLE_PERIOD, s::CYCLE_PERIOD_MAX + 1),
            (s::SAMP_CYCLE_DITHER, s::DITHER_MAX + 1),
            (s::SAMP_CTRL, 1 << 5),
            (s::SAMP_SKID, 3),
            (s::SAMP_BRANCHES, 0),
            (s::SAMP_LOST_SELECT, 1 << 20),
            (s::SAMP_LOST_SELECT, MAX_CONTEXTS),
            (s::SAMP_LOST_SELECT, lost_select::VM | MAX_VMS),
            (pc(s::BUF_BASE), 1 << 20), // sampler enabled: no re-placement
            (pc(s::BUF_CAP), 128),
            (pc(s::BUF_TAIL), 1_000_000),
            (pc(s::BUF_WATERMARK), 0),
            (pc(s::BUF_WATERMARK), 65),
            (pc(s::BUF_HEAD), 0),
            (0xFC, 0), // no register
        ],
    );
    for (r, v) in [
        (s::SAMP_BRANCH_PERIOD, 1),
        (s::SAMP_BRANCH_PERIOD, s::BRANCH_PERIOD_MAX),
        (s::SAMP_CYCLE_PERIOD, s::CYCLE_PERIOD_MIN),
        (s::SAMP_CYCLE_PERIOD, s::CYCLE_PERIOD_MAX),
        (s::SAMP_CYCLE_DITHER, s::DITHER_MAX),
        (s::SAMP_CYCLE_DITHER, 0),
        (s::SAMP_LOST_SELECT, MAX_CONTEXTS - 1),
        (s::SAMP_LOST_SELECT, lost_select::VM | (MAX_VMS - 1)),
        (pc(s::BUF_WATERMARK), 64),
    ] {
        assert!(
            unit.check_write(r, v, &mut unit.shadow()).is_ok(),
            "{r:#x} <- {v}"
        );
    }
    // With the samplers off, placement is checked: misaligned, not a power
    // of two, outside the span, overlapping; enabling with no buffer.
    batch(&mut unit, &[(s::SAMP_CTRL, 0)]).expect("disabling");
    refused(
        &unit,
        &[
            (pc(s::BUF_BASE), 100),
            (pc(s::BUF_CAP), 3),
            (pc(s::BUF_BASE), span),
            (pc(s::BUF_CAP), 1 << 20),
            (pc(s::BUF_BASE), 0), // onto the branch buffer
            (br(s::BUF_CAP), 1 << 12),
        ],
    );
    batch(&mut unit, &[(pc(s::BUF_CAP), 0)]).expect("no PC buffer");
    refused(&unit, &[(s::SAMP_CTRL, samp_ctrl::CYCLE_ENABLE)]);
    // In one batch, sizing the buffer first makes the enable valid.
    assert_eq!(
        batch(
            &mut unit,
            &[
                (pc(s::BUF_CAP), 16),
                (s::SAMP_CTRL, samp_ctrl::CYCLE_ENABLE)
            ]
        ),
        Ok(())
    );
    assert_eq!(reg(&unit, s::SAMP_CTRL), u64::from(samp_ctrl::CYCLE_ENABLE));
    // And a batch that fails at its last write applies none of it.
    let before = format!("{unit:?}");
    assert_eq!(
        batch(
            &mut unit,
            &[(s::SAMP_CYCLE_PERIOD, 5000), (s::SAMP_CYCLE_DITHER, 9999)]
        ),
        Err((1, Reject::BadValue("R_MAX must lie in 0..=4095")))
    );
    assert_eq!(format!("{unit:?}"), before);
}

#[test]
fn a_fixed_period_samples_every_p_plus_skid_minus_refill_context_cycles() {
    let period = 1000;
    let mut unit = armed(Arm {
        ctrl: samp_ctrl::CYCLE_ENABLE,
        period,
        dither: 0,
        ..Arm::default()
    });
    let throttle = [ThrottleWindow {
        start: DEV_BASE + 20_000,
        end: DEV_BASE + 40_000,
    }];
    let total = 100_000;
    watcher(&mut unit, env(&throttle), CTX, 1).ran(0, total, 3, 9);
    let interval = u64::from(period + s::SKID_CYCLES - s::REFILL_CYCLES);
    let recs = pc_records(&unit);
    assert_eq!(recs.len() as u64, total / interval);
    for (k, rec) in recs.iter().enumerate() {
        let at = (k as u64 + 1) * interval;
        assert_eq!(rec.magic, PC_RECORD_MAGIC);
        assert_eq!((rec.partition, rec.vm, rec.ctx), (1, VM, CTX));
        assert_eq!(
            (rec.seq, rec.ctx_cycle, rec.cycle),
            (k as u64 + 1, at, DEV_BASE + at)
        );
        assert_eq!((rec.kernel, rec.block), (3, 9));
        assert_eq!(u64::from(rec.interval), interval);
        let secondary = (20_000..40_000).contains(&at);
        assert_eq!(
            rec.flags == sample_flags::SECONDARY_CLOCK,
            secondary,
            "sample {k}"
        );
    }
    assert_eq!(reg(&unit, s::SAMP_CYCLE_SAMPLES), recs.len() as u64);
    assert_eq!(reg(&unit, pc(s::BUF_PRODUCED)), recs.len() as u64);
}

#[test]
fn a_dithered_interval_adds_r_uniform_in_0_to_r_max_and_records_what_it_was() {
    let (period, dither) = (1000, s::DITHER_MAX);
    let mut unit = armed(Arm {
        ctrl: samp_ctrl::CYCLE_ENABLE,
        period,
        dither,
        pc_cap: 4096,
        ..Arm::default()
    });
    let total = 5_000_000;
    watcher(&mut unit, env(&[]), CTX, 1).ran(0, total, 0, 0);
    let recs = pc_records(&unit);
    let base = u64::from(period + s::SKID_CYCLES - s::REFILL_CYCLES);
    let mut last = 0;
    let mut rs = Vec::new();
    for rec in &recs {
        // Each record's interval is the context cycles since the last one.
        assert_eq!(u64::from(rec.interval), rec.ctx_cycle - last);
        last = rec.ctx_cycle;
        let r = u64::from(rec.interval) - base;
        assert!(r <= u64::from(dither), "R = {r}");
        rs.push(r);
    }
    assert!(total - last < base + u64::from(dither));
    // R is uniform: its mean is R_MAX / 2 (the standard error of the mean
    // over ~1,600 draws is ~30 cycles), and both ends are reached.
    let n = rs.len() as u64;
    assert!(n > 1500, "{n} samples");
    let mean = rs.iter().sum::<u64>() / n;
    assert!(mean.abs_diff(u64::from(dither) / 2) < 150, "mean R {mean}");
    assert!(rs.iter().any(|&r| r < 100) && rs.iter().any(|&r| r > 3995));
    // The same seed draws the same R; another draws others.
    let mut again = armed(Arm {
        ctrl: samp_ctrl::CYCLE_ENABLE,
        period,
        dither,
        pc_cap: 4096,
        ..Arm::default()
    });
    watcher(&mut again, env(&[]), CTX, 1).ran(0, total, 0, 0);
    assert_eq!(pc_records(&again), recs);
    let mut other = armed_with(
        SEED + 1,
        Arm {
            ctrl: samp_ctrl::CYCLE_ENABLE,
            period,
            dither,
            pc_cap: 4096,
            ..Arm::default()
        },
    );
    watcher(&mut other, env(&[]), CTX, 1).ran(0, total, 0, 0);
    assert_ne!(pc_records(&other), recs);
}

#[test]
fn where_the_walk_is_cut_into_spans_changes_no_record() {
    let arm = Arm {
        dither: 255,
        period: 300,
        ..Arm::default()
    };
    let mut whole = armed(arm);
    watcher(&mut whole, env(&[]), CTX, 1).ran(0, 50_000, 1, 2);
    let mut cut = armed(arm);
    let mut at = 0;
    for step in [1u64, 303, 304, 1, 7_000, 2, 12_345, 30_044] {
        watcher(&mut cut, env(&[]), CTX, 1).ran(at, at + step, 1, 2);
        at += step;
    }
    assert_eq!(at, 50_000);
    assert!(!pc_records(&whole).is_empty());
    assert_eq!(format!("{cut:?}"), format!("{whole:?}"));
}

/// The `i`-th taken branch of a walk (1-based), its target at cycle 10·i.
fn entry(i: u64) -> BranchEntry {
    let b = u16::try_from(i % 7).expect("a block");
    BranchEntry {
        from_kernel: 0,
        from_block: b,
        to_kernel: 1,
        to_block: b + 1,
        cycle: 10 * i,
    }
}

#[test]
fn every_n_th_taken_branch_writes_the_newest_32_oldest_first() {
    let n = 5;
    let mut unit = armed(Arm {
        ctrl: samp_ctrl::BRANCH_ENABLE,
        n,
        ..Arm::default()
    });
    let taken = 103;
    let mut w = watcher(&mut unit, env(&[]), CTX, 1);
    for i in 1..=taken {
        w.taken(entry(i), i);
    }
    assert_eq!(w.branches, taken);
    let recs = branch_records(&unit);
    assert_eq!(recs.len() as u64, taken / u64::from(n));
    for (k, rec) in recs.iter().enumerate() {
        let at = (k as u64 + 1) * u64::from(n);
        let count = at.min(BRANCH_STACK_ENTRIES as u64);
        assert_eq!(rec.magic, BRANCH_RECORD_MAGIC);
        assert_eq!((rec.vm, rec.ctx, rec.partition), (VM, CTX, 1));
        assert_eq!((rec.seq, rec.branches), (k as u64 + 1, at));
        assert_eq!(u64::from(rec.count), count);
        assert_eq!(rec.cycle, DEV_BASE + 10 * at, "at the capturing branch");
        let want: Vec<BranchEntry> = (at - count + 1..=at).map(entry).collect();
        assert_eq!(&rec.entries[..want.len()], &want[..], "record {k}");
        assert!(rec.entries[want.len()..]
            .iter()
            .all(|e| *e == BranchEntry::default()));
    }
    assert_eq!(reg(&unit, s::SAMP_BRANCHES), taken);
    assert_eq!(reg(&unit, br(s::BUF_PRODUCED)), taken / u64::from(n));
    // The period runs on across contexts; another context's stack starts
    // empty, so its first record holds only its own branches.
    let since = taken % u64::from(n);
    let first = u64::from(n) - since;
    let mut w = watcher(&mut unit, env(&[]), 8, 2);
    for i in 1..=5 {
        w.taken(entry(1000 + i), i);
    }
    let recs = branch_records(&unit);
    let last = recs.last().expect("a record");
    assert_eq!(
        (last.ctx, u64::from(last.count), last.branches),
        (8, first, first)
    );
    let want: Vec<BranchEntry> = (1001..=1000 + first).map(entry).collect();
    assert_eq!(&last.entries[..want.len()], &want[..]);
    // With the sampler off, nothing is captured or counted.
    batch(&mut unit, &[(s::SAMP_CTRL, 0)]).expect("disabling");
    let mut w = watcher(&mut unit, env(&[]), CTX, 1);
    for i in 1..=10 {
        w.taken(entry(i), taken + i);
    }
    assert_eq!(reg(&unit, s::SAMP_BRANCHES), taken + 5);
    assert_eq!(branch_records(&unit).len(), recs.len());
}

#[test]
fn a_confidential_contexts_stacks_follow_its_cycles_not_its_branches() {
    let n = 2;
    let period = u64::from(n) * u64::from(CONFIDENTIAL_BRANCH_CYCLES);
    let arm = Arm {
        ctrl: samp_ctrl::BRANCH_ENABLE,
        n,
        branch_cap: 1024,
        ..Arm::default()
    };
    let total = 100_000;
    // One context idles through its cycles, another branches all along.
    let mut quiet = armed(arm);
    let mut w = watcher(&mut quiet, env(&[]), CTX, 1);
    w.confidential = true;
    w.ran(0, total, 0, 0);
    let mut busy = armed(arm);
    let mut w = watcher(&mut busy, env(&[]), CTX, 1);
    w.confidential = true;
    let mut at = 0;
    for i in 1..=1000 {
        let next = at + 97;
        w.ran(at, next, 0, 0);
        w.taken(entry(i), i);
        at = next;
    }
    w.ran(at, total, 0, 0);
    let (q, b) = (branch_records(&quiet), branch_records(&busy));
    let cycles = |recs: &[BranchStackRecord]| recs.iter().map(|r| r.cycle).collect::<Vec<_>>();
    assert_eq!(cycles(&q), cycles(&b), "the schedule ignores the branches");
    // Each stack N x 64 + R context cycles after the last, R below N x 64.
    let mut last = DEV_BASE;
    for r in &q {
        let gap = r.cycle - last;
        assert!((period..2 * period).contains(&gap), "gap {gap}");
        last = r.cycle;
    }
    assert!(DEV_BASE + total - last < 2 * period);
    assert!(q.len() as u64 >= total / (2 * period));
    // The branches are in the stacks, uncounted.
    assert_eq!(reg(&busy, s::SAMP_BRANCHES), 0);
    assert!(b.iter().any(|r| r.count > 0));
    assert!(q.iter().all(|r| r.count == 0));
    let newest = b.last().expect("a record");
    assert_eq!(newest.entries[newest.count as usize - 1], entry(1000));
}

#[test]
fn selected_losses_read_per_context_and_per_vm() {
    let mut unit = armed(Arm {
        ctrl: samp_ctrl::CYCLE_ENABLE,
        pc_cap: 1,
        period: 256,
        ..Arm::default()
    });
    watcher(&mut unit, env(&[]), CTX, 1).ran(0, 10_000, 0, 0);
    watcher(&mut unit, env(&[]), 8, 2).ran(10_000, 15_000, 0, 0);
    let interval = u64::from(256 + s::SKID_CYCLES - s::REFILL_CYCLES);
    let samples = 15_000 / interval;
    let first = 10_000 / interval;
    // One stored, the rest lost: context 8's samples are all lost.
    assert_eq!(reg(&unit, pc(s::BUF_LOST)), samples - 1);
    let selected = |unit: &mut Sampler, v| {
        batch(unit, &[(s::SAMP_LOST_SELECT, v)]).expect("a valid selection");
        reg(unit, pc(s::BUF_LOST_SELECTED))
    };
    assert_eq!(selected(&mut unit, CTX), first - 1);
    assert_eq!(selected(&mut unit, 8), samples - first);
    assert_eq!(selected(&mut unit, lost_select::VM | VM), samples - 1);
    assert_eq!(selected(&mut unit, lost_select::VM | (VM + 1)), 0);
    assert_eq!(
        reg(&unit, s::SAMP_LOST_SELECT),
        u64::from(lost_select::VM | (VM + 1))
    );
}

#[test]
fn a_reset_empties_the_buffers_keeps_their_placement_and_disables_both_samplers() {
    let mut unit = armed(Arm {
        n: 3,
        period: 500,
        dither: 7,
        ..Arm::default()
    });
    let mut w = watcher(&mut unit, env(&[]), CTX, 1);
    w.ran(0, 20_000, 0, 0);
    for i in 1..=20 {
        w.taken(entry(i), i);
    }
    assert!(unit.armed() && !pc_records(&unit).is_empty() && !branch_records(&unit).is_empty());
    unit.reset();
    assert!(!unit.armed());
    for kind in [buf_kind::BRANCH, buf_kind::PC] {
        let r = |x| reg(&unit, s::buf(kind, x));
        assert_eq!(
            [
                r(s::BUF_HEAD),
                r(s::BUF_TAIL),
                r(s::BUF_PRODUCED),
                r(s::BUF_LOST)
            ],
            [0; 4]
        );
    }
    assert_eq!(reg(&unit, pc(s::BUF_BASE)), u64::from(PC_BASE));
    assert_eq!(reg(&unit, pc(s::BUF_CAP)), 1024);
    assert_eq!(reg(&unit, br(s::BUF_CAP)), 64);
    assert_eq!(
        [
            s::SAMP_CTRL,
            s::SAMP_BRANCH_PERIOD,
            s::SAMP_CYCLE_PERIOD,
            s::SAMP_CYCLE_DITHER,
            s::SAMP_BRANCHES,
            s::SAMP_CYCLE_SAMPLES
        ]
        .map(|r| reg(&unit, r)),
        [
            0,
            u64::from(s::DEFAULT_BRANCH_PERIOD),
            u64::from(s::DEFAULT_CYCLE_PERIOD),
            u64::from(s::DEFAULT_DITHER),
            0,
            0
        ]
    );
    assert_eq!(reg(&unit, s::SAMP_MIN_BRANCH_GAP), GAP);
}
