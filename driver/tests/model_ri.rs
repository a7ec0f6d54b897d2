//! Runtime-instrumentation control blocks on the device, against the
//! ground truth: every report group is well formed for random control
//! blocks and programs, sample points fall exactly every SF cycles or
//! instructions, both engines write the same bytes, nothing is written
//! outside the program buffer, suppression drops exactly the samples the
//! clock's throttle windows put at the suppressed capability, a context
//! the scheduler switches out leaves an abort record, and random writes
//! anywhere in the RI registers change nothing when refused.
//!
//! What one control block does by itself (the collection buffer keeping
//! the newest 32, a full buffer stopping or wrapping, each malformed
//! control block refused) is tested in the unit, `src/model/ri/tests.rs`.

#![allow(clippy::cast_possible_truncation)] // 32-bit register values are read as u64

use gpupm_driver::host::Host;
use gpupm_driver::model::{Device, EngineKind};
use gpupm_test_support::model::ri::*;
use gpupm_uapi::layout::{
    ri_group_flags, ri_record, ri_sample_flags, RiBeginRecord, RiInstructionRecord,
};
use gpupm_uapi::ri::{self as ri, ri_ctrl, ri_mode, ri_status};
use proptest::prelude::*;
use zerocopy::FromBytes;

fn device(seed: u64, program: &str, engine: EngineKind) -> Device {
    Device::new(&scenario(seed, program), engine, true).expect("device builds")
}

fn instruction(r: &[u8; 16]) -> RiInstructionRecord {
    RiInstructionRecord::read_from_bytes(r).expect("16 bytes")
}

/// The instruction records of every stored group, in order.
fn samples(dev: &Device, i: u32, cb: Cb) -> Vec<RiInstructionRecord> {
    groups(dev, i, cb)
        .iter()
        .map(|g| instruction(g.last().expect("a record")))
        .collect()
}

/// Where a context's program is: context cycles and instructions retired
/// (the per-block ledger).
struct Position {
    ctx_cycles: u64,
    retired: u64,
}

fn context_position(dev: &mut Device, ctx: u32) -> Position {
    let q = dev.ledger_blocks(ctx, 0).expect("block ledger");
    assert_eq!(q.count, q.total, "one page holds the program");
    Position {
        ctx_cycles: q.ctx_cycles,
        retired: q.rows[..q.count as usize]
            .iter()
            .map(|r| r.instructions)
            .sum(),
    }
}

const PROGRAMS: [&str; 3] = ["gemm", "reduce", "memcpy"];

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Random control blocks and programs: every group is well formed,
    /// counts reconcile with the ledger, cycle-mode samples are exactly SF
    /// apart, instruction-mode ones exactly SF instructions apart, and
    /// nothing lies outside the buffer.
    #[test]
    fn report_groups_are_well_formed_for_random_control_blocks(
        seed in 0u64..1000,
        program in 0usize..3,
        mode in 1u32..=3,
        rgs in 0u32..=7,
        sf in 200u32..20_000,
        rsic in prop_oneof![Just(0u32), 1u32..5000],
        bits in 0u32..16,
        groups_cap in 1u32..12,
        origin_groups in 0u32..4,
    ) {
        let mut dev = device(seed, PROGRAMS[program], EngineKind::Batched);
        let size = ri::group_bytes(rgs) as u32;
        let cb = Cb {
            ctx: 1,
            mode,
            rgs,
            bits: ri_ctrl::INTR_ENABLE
                | if bits & 1 != 0 { ri_ctrl::EMIT } else { 0 }
                | if bits & 2 != 0 { ri_ctrl::ABORT } else { 0 }
                | if bits & 4 != 0 { ri_ctrl::WRAP } else { 0 },
            sf,
            rsic,
            roa: origin_groups * size,
            rla: (origin_groups + groups_cap) * size - 1 + (bits >> 3) * 7,
        };
        let start = context_position(&mut dev, 1);
        arm(&mut dev, 0, cb).expect("a well-formed control block");
        let mut host = Host::new();
        for k in 0..40u32 {
            run(&mut dev, &mut host, 20_000, 20_000);
            if k % 3 == 0 {
                dev.write_reg(ri::ri(0, ri::RI_EMIT), 4, u64::from(k)).expect("RIEMIT");
            }
        }
        let truth = dev.ledger_ri(0).expect("ledger");
        let stored = groups(&dev, 0, cb);
        // In wrap mode the buffer holds the last groups; otherwise all.
        prop_assert_eq!(reg(&dev, 0, ri::RI_GROUPS), truth.stored);
        prop_assert_eq!(
            truth.sample_points,
            truth.stored + truth.not_stored + truth.suppressed_primary + truth.suppressed_secondary
        );
        for (n, g) in stored.iter().enumerate() {
            check_group(g, rgs, n == 0).map_err(|e| TestCaseError::fail(format!("group {n}: {e}")))?;
        }
        if cb.bits & ri_ctrl::WRAP == 0 {
            prop_assert_eq!(stored.len() as u64, truth.stored);
            prop_assert_eq!(truth.stored, truth.sample_points.min(u64::from(groups_cap)));
            let begin = RiBeginRecord::read_from_bytes(&stored.first().map_or([0; 16], |g| g[0])).unwrap();
            if truth.stored > 0 {
                prop_assert_eq!(u64::from(begin.groups), truth.stored);
                let stopped = truth.not_stored > 0;
                prop_assert_eq!(begin.flags & ri_group_flags::STOPPED != 0, stopped);
                prop_assert_eq!(reg(&dev, 0, ri::RI_STATUS) & u64::from(ri_status::STOPPED) != 0, stopped);
            }
        }
        let recs = samples(&dev, 0, cb);
        let min = if mode == ri_mode::CYCLE { ri::SF_MIN_CYCLES } else { ri::SF_MIN_INSTRUCTIONS };
        let sf_eff = u64::from(sf.max(min));
        let first = if rsic == 0 { sf_eff } else { u64::from(rsic) };
        let n = truth.sample_points;
        if mode == ri_mode::CYCLE && n > 0 {
            prop_assert_eq!(truth.last_sample_ctx_cycle, start.ctx_cycles + first + (n - 1) * sf_eff);
            if cb.bits & ri_ctrl::WRAP == 0 {
                for (k, r) in recs.iter().enumerate() {
                    prop_assert_eq!(r.ctx_cycle, start.ctx_cycles + first + k as u64 * sf_eff);
                }
            }
        }
        if mode == ri_mode::INSTRUCTION && n > 0 {
            prop_assert_eq!(truth.last_sample_retired, start.retired + first + (n - 1) * sf_eff);
        }
        if mode == ri_mode::DIRECTED {
            prop_assert!(recs.iter().all(|r| r.flags & ri_sample_flags::DIRECTED != 0));
        }
        // Nothing outside the buffer: bytes before ROA are zero, and the
        // span holds no byte beyond RLA.
        let bytes = span(&dev, 0, cb.rla + 4096);
        prop_assert!(bytes[..cb.roa as usize].iter().all(|&b| b == 0));
        prop_assert!(bytes[cb.rla as usize + 1..].iter().all(|&b| b == 0));
        prop_assert!(reg(&dev, 0, ri::RI_RCA) <= u64::from(cb.rla) + 1);
    }
}

/// The cycle-level engine stores the same bytes as the batched one.
#[test]
fn both_engines_store_the_same_groups() {
    for (program, mode) in [("gemm", ri_mode::CYCLE), ("reduce", ri_mode::INSTRUCTION)] {
        let cb = Cb {
            mode,
            bits: ri_ctrl::EMIT | ri_ctrl::ABORT,
            ..Cb::cycles(1, 3000, 64)
        };
        let mut out = Vec::new();
        for engine in [EngineKind::Batched, EngineKind::CycleLevel] {
            let mut dev = device(7, program, engine);
            arm(&mut dev, 3, cb).unwrap();
            let mut host = Host::new();
            run(&mut dev, &mut host, 400_000, 7_000);
            out.push((span(&dev, 3, cb.rla), dev.ledger_ri(3).unwrap()));
        }
        assert!(
            out[0].1.stored >= 10,
            "{program}: {} groups",
            out[0].1.stored
        );
        assert_eq!(out[0], out[1], "{program}");
    }
}

/// Y drops exactly the primary-capability samples, Z exactly the
/// secondary ones, compared with a run that suppresses nothing.
#[test]
fn suppression_drops_exactly_the_samples_at_the_suppressed_capability() {
    let base = Cb::cycles(1, 2000, 2048);
    let mut runs = Vec::new();
    for bits in [0, ri_ctrl::SUPPRESS_PRIMARY, ri_ctrl::SUPPRESS_SECONDARY] {
        let mut dev = device(11, "gemm", EngineKind::Batched);
        let cb = Cb { bits, ..base };
        arm(&mut dev, 0, cb).unwrap();
        let mut host = Host::new();
        run(&mut dev, &mut host, 1_500_000, 10_000);
        runs.push((samples(&dev, 0, cb), dev.ledger_ri(0).unwrap()));
    }
    let all = &runs[0].0;
    let secondary = |r: &RiInstructionRecord| r.flags & ri_sample_flags::SECONDARY != 0;
    assert!(all.iter().any(secondary) && !all.iter().all(secondary));
    let keep = |want: bool| -> Vec<u64> {
        all.iter()
            .filter(|r| secondary(r) == want)
            .map(|r| r.ctx_cycle)
            .collect()
    };
    let cycles = |v: &[RiInstructionRecord]| v.iter().map(|r| r.ctx_cycle).collect::<Vec<_>>();
    assert_eq!(cycles(&runs[1].0), keep(true));
    assert_eq!(cycles(&runs[2].0), keep(false));
    assert_eq!(runs[1].1.suppressed_primary, keep(false).len() as u64);
    assert_eq!(runs[2].1.suppressed_secondary, keep(true).len() as u64);
    assert_eq!(runs[1].1.sample_points, runs[0].1.sample_points);
}

/// The running context switched out mid-interval leaves an abort record.
#[test]
fn a_context_switched_out_leaves_an_abort_record() {
    let mut dev = device(9, "reduce", EngineKind::Batched);
    let cb = Cb {
        rgs: 5,
        bits: ri_ctrl::ABORT,
        rla: 64 * 1024 - 1,
        ..Cb::cycles(1, 100_000, 1)
    };
    arm(&mut dev, 4, cb).unwrap();
    let mut host = Host::new();
    run(&mut dev, &mut host, 2_000_000, 5000);
    let truth = dev.ledger_ri(4).unwrap();
    assert!(truth.aborts > 0, "no switch-out seen");
    let aborts: usize = groups(&dev, 4, cb)
        .iter()
        .map(|g| g.iter().filter(|r| r[0] == ri_record::ABORT).count())
        .sum();
    assert!(aborts > 0);
}

/// Snapshot of every RI register and the span of block 0.
fn snapshot(dev: &Device) -> (Vec<Option<u64>>, Vec<u8>) {
    let regs = (ri::RI_COUNT..ri::RI_COUNT + 0x100)
        .chain(ri::RI_BASE..ri::RI_BASE + 0x1000)
        .step_by(4)
        .map(|o| dev.read_reg(o, 4).ok())
        .collect();
    (regs, span(dev, 0, 8191))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Random writes anywhere in the RI register space, on a device with
    /// one session running: each either takes effect or fails and leaves
    /// every RI register and the span unchanged.
    #[test]
    fn random_ri_writes_change_nothing_when_refused(
        writes in proptest::collection::vec((0u64..0x440, any::<u32>(), 0u8..4), 1..24),
    ) {
        let mut dev = device(2, "gemm", EngineKind::Batched);
        arm(&mut dev, 0, Cb::cycles(1, 1000, 4)).unwrap();
        dev.advance(50_000).unwrap();
        for (at, value, small) in writes {
            // Half the offsets in the globals, half in the first blocks;
            // small values reach the interesting ranges.
            let offset = if at < 0x40 { ri::RI_COUNT + at * 4 % 0x100 } else { ri::RI_BASE + (at - 0x40) * 4 };
            let value = if small > 0 { value % 4096 } else { value };
            let before = snapshot(&dev);
            if dev.write_reg(offset, 4, u64::from(value)).is_err() {
                prop_assert_eq!(snapshot(&dev), before, "write {:#x} = {:#x}", offset, value);
            }
        }
    }
}
