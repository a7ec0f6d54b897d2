//! Marked ranges on the device against its ledgers: range registers equal
//! the per-(context, range) ledger summed over contexts, code ranges equal
//! the per-block ledger, every crossing is one record and one interrupt,
//! stacks are call paths of the program, both engines agree bit for bit,
//! a paused context counts nothing, and bad writes change nothing.

#![allow(clippy::cast_possible_truncation)] // register values are read as u64

use gpupm_client::ops::write32 as write;
use gpupm_driver::host::Host;
use gpupm_driver::model::{Device, EngineKind};
use gpupm_driver::scenario::program::{Exit, ProgramSpec};
use gpupm_driver::scenario::Scenario;
use gpupm_test_support::model::sampling::*;
use gpupm_test_support::model::*;
use gpupm_uapi::intr::{source, InterruptRecord, RANGE_IRQ_LOST};
use gpupm_uapi::layout::envelope_flags;
use gpupm_uapi::ranges::{
    self as rg, code_item, range_ctrl, range_event, range_reg, rring, RangeRecord, RangeSlot,
};
use gpupm_uapi::regs::{self as r, part_ctrl};
use proptest::prelude::*;
use zerocopy::FromBytes;

/// One range's programming.
#[derive(Clone, Copy, Debug)]
struct Prog {
    ctrl: u32,
    start: u32,
    end: u32,
    threshold: u32,
}

/// Sizes partition `p`'s ring and arms `ranges` (one batch).
fn arm_ranges(dev: &mut Device, p: u32, cap: u32, ranges: &[Prog]) {
    let mut ops = vec![write(rring(p, rg::RRING_CAP), cap)];
    for (i, g) in ranges.iter().enumerate() {
        let i = i as u32;
        ops.extend([
            write(range_reg(p, i, rg::RANGE_START), g.start),
            write(range_reg(p, i, rg::RANGE_END), g.end),
            write(range_reg(p, i, rg::RANGE_THRESHOLD), g.threshold),
            write(range_reg(p, i, rg::RANGE_CTRL), g.ctrl),
        ]);
    }
    dev.batch(&mut ops).expect("arming succeeds");
}

fn reg64(dev: &Device, off: u64) -> u64 {
    dev.read_reg(off, 8).unwrap()
}

fn key_of(s: &Scenario, vm: u32) -> Option<[u8; 32]> {
    s.vms
        .iter()
        .find(|v| v.id == vm)
        .and_then(|v| v.confidential_key)
}

/// The records partition `p`'s ring holds, opened with their VM's key
/// when sealed (exactly a confidential VM's are).
fn ring_records(dev: &Device, s: &Scenario, p: u32) -> Vec<RangeRecord> {
    let (head, cap) = (
        dev.read_reg(rring(p, rg::RRING_HEAD), 4).unwrap() as u32,
        dev.read_reg(rring(p, rg::RRING_CAP), 4).unwrap() as u32,
    );
    let size = core::mem::size_of::<RangeSlot>();
    (head.saturating_sub(cap)..head)
        .map(|i| {
            let mut buf = vec![0u8; size];
            let at = rg::range_span_offset(p) + u64::from(i & (cap - 1)) * size as u64;
            dev.read_window(at, &mut buf).expect("slot readable");
            let mut slot = RangeSlot::read_from_bytes(&buf).unwrap();
            let sealed = slot.envelope.flags & envelope_flags::ENCRYPTED != 0;
            let key = key_of(s, slot.envelope.vm);
            assert_eq!(sealed, key.is_some(), "sealed exactly for confidential VMs");
            if let Some(k) = key {
                gpupm_driver::model::cc::open(&k, &slot.envelope, &mut slot.payload, &slot.tag)
                    .expect("opens with the VM's key");
            }
            RangeRecord::read_from_bytes(&slot.payload).unwrap()
        })
        .collect()
}

/// A record's stack is a call path of `prog` ending in its kernel.
fn valid_path(prog: &ProgramSpec, rec: &RangeRecord) -> bool {
    let mut kernel = prog.entry;
    for e in &rec.stack[..rec.depth as usize] {
        let calls = prog.kernels[usize::from(kernel)]
            .blocks
            .get(usize::from(e.call_block))
            .is_some_and(|b| b.exit == Exit::Call(e.callee));
        if e.kernel != kernel || !calls {
            return false;
        }
        kernel = e.callee;
    }
    kernel == rec.kernel
}

/// Range programmings over program id `id` (`spec`) from raw draws.
fn ranges_from(spec: &ProgramSpec, id: u32, draws: &[(u8, u64, u32)]) -> Vec<Prog> {
    draws
        .iter()
        .map(|&(kind, x, thr)| {
            let event = u32::from(kind % 3);
            let irq =
                [0, range_ctrl::COUNT_IRQ, range_ctrl::LATENCY_IRQ][usize::from(kind / 3 % 3)];
            let k = (x % spec.kernels.len() as u64) as u16;
            let n = spec.kernels[usize::from(k)].blocks.len() as u64;
            let (a, b) = (((x >> 8) % n) as u16, ((x >> 24) % n) as u16);
            Prog {
                ctrl: range_ctrl::ENABLE | event << range_ctrl::EVENT_SHIFT | irq | id << 16,
                start: code_item(k, a.min(b)),
                end: code_item(k, a.max(b)),
                threshold: thr,
            }
        })
        .collect()
}

/// Runs the scenario on `engine` with `ranges` on partition 1; returns
/// the device and its `RANGE_THRESHOLD` interrupts.
fn run_ranges(s: &Scenario, engine: EngineKind, ranges: &[Prog]) -> (Device, Vec<InterruptRecord>) {
    let mut dev = device(s, engine);
    let mut host = Host::new();
    host.release_destroyed = false;
    arm_ranges(&mut dev, 1, 4096, ranges);
    let mut irqs = Vec::new();
    let mut seq = 0;
    for step in [
        1, 777, 5_000, 1, 20_000, 3, 60_000, 511, 9_999, 150_000, 300_000,
    ] {
        dev.advance(step).unwrap();
        host.service(&mut dev).unwrap();
        let mut out = Vec::new();
        seq = dev.interrupts_since(seq, &mut out);
        irqs.extend(
            out.into_iter()
                .filter(|i| i.source == source::RANGE_THRESHOLD),
        );
    }
    (dev, irqs)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(6))]

    #[test]
    fn range_counts_equal_the_ledgers_and_crossings_are_one_record_one_interrupt(
        draws in proptest::collection::vec((any::<u8>(), any::<u64>(), 500..20_000u32), 8),
    ) {
        let s = small_with_programs();
        let ranges = ranges_from(&s.programs[0], 1, &draws);
        let (mut dev, irqs) = run_ranges(&s, EngineKind::Batched, &ranges);
        let ctxs: Vec<(u32, u32, u32)> = dev.contexts().collect();
        let mut crossings = 0;
        let mut checked = 0;
        for (i, g) in ranges.iter().enumerate() {
            let (mut entries, mut count) = (0, 0);
            for &(ctx, vm, _) in &ctxs {
                let key = key_of(&s, vm);
                let mut q = dev.ledger_ranges(ctx, 1).unwrap();
                if let Some(k) = key {
                    let mut payload = zerocopy::IntoBytes::as_bytes(&q.rows).to_vec();
                    gpupm_driver::model::cc::open(&k, &q.envelope, &mut payload, &q.tag)
                        .expect("the ledger opens with the VM's key");
                    q.rows = FromBytes::read_from_bytes(&payload[..]).unwrap();
                }
                let row = q.rows[i];
                prop_assert!(row.ctrl == g.ctrl || row.entries == 0, "{:?} {:?}", row, g);
                entries += row.entries;
                count += row.count;
                crossings += row.crossings;
                let on_p1 = dev.read_reg(r::vm(vm, r::VM_PARTITION), 4).unwrap() == 1;
                if !on_p1 || dev.read_reg(r::ctx(ctx, r::CTX_PROGRAM), 4).unwrap() != 1 {
                    prop_assert_eq!((row.entries, row.count), (0, 0));
                    continue;
                }
                // Armed before any visit: the per-block ledger says it too.
                let (blocks, _) = truth(&mut dev, ctx, key.as_ref());
                let inside = blocks.iter().filter(|b| {
                    u32::from(b.kernel) == g.start >> 16
                        && (g.start & 0xFFFF..=g.end & 0xFFFF).contains(&u32::from(b.block))
                });
                let spec = &s.programs[0].kernels;
                let want: u64 = inside
                    .map(|b| match (g.ctrl & range_ctrl::EVENT_MASK) >> range_ctrl::EVENT_SHIFT {
                        range_event::INSTRUCTIONS => b.instructions,
                        range_event::CYCLES => b.cycles,
                        _ => b.visits
                            * u64::from(spec[usize::from(b.kernel)].blocks[usize::from(b.block)]
                                .data
                                .is_some()),
                    })
                    .sum();
                prop_assert_eq!(row.count, want, "ctx {} range {}", ctx, i);
                checked += u64::from(want > 0);
            }
            prop_assert_eq!(reg64(&dev, range_reg(1, i as u32, rg::RANGE_ENTRIES)), entries);
            prop_assert_eq!(reg64(&dev, range_reg(1, i as u32, rg::RANGE_COUNT)), count);
        }
        prop_assert!(checked > 0, "no range counted anything");
        let head = u64::from(dev.read_reg(rring(1, rg::RRING_HEAD), 4).unwrap() as u32);
        let lost = dev.read_reg(rring(1, rg::RRING_LOST), 4).unwrap();
        prop_assert_eq!(irqs.len() as u64, crossings, "one interrupt per crossing");
        prop_assert_eq!(head + lost, crossings, "one record per crossing");
        let lost_irqs = irqs.iter().filter(|i| i.arg & RANGE_IRQ_LOST != 0).count() as u64;
        prop_assert_eq!(lost_irqs, lost);
        for (k, rec) in ring_records(&dev, &s, 1).iter().enumerate() {
            prop_assert_eq!(rec.seq, k as u64 + 1);
            prop_assert!(valid_path(&s.programs[0], rec), "not a call path: {:?}", rec);
            prop_assert_eq!(u32::from(rec.range) , irqs[k].arg & 0xFF);
            prop_assert_eq!(rec.cycle, irqs[k].cycle);
            let who = if key_of(&s, rec.vm).is_some() { 0 } else { rec.ctx };
            prop_assert_eq!(irqs[k].arg2, who, "a confidential VM's interrupt names no context");
        }
    }
}

/// Range registers, ring registers and ring bytes of partition `p`.
fn range_digest(dev: &Device, p: u32) -> Vec<u64> {
    let mut out: Vec<u64> = (0..rg::RANGE_STRIDE)
        .step_by(4)
        .filter_map(|o| dev.read_reg(range_reg(p, 0, o), 4).ok())
        .collect();
    out.extend(
        (0..rg::RRING_STRIDE)
            .step_by(4)
            .filter_map(|o| dev.read_reg(rring(p, o), 4).ok()),
    );
    let mut ring = vec![0u8; 64 * core::mem::size_of::<RangeSlot>()];
    dev.read_window(rg::range_span_offset(p), &mut ring)
        .unwrap();
    out.extend(
        ring.chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap())),
    );
    out
}

#[test]
fn engines_agree_bit_for_bit_with_ranges_armed() {
    let s = small_with_programs();
    let draws: Vec<(u8, u64, u32)> = (0..8u8)
        .map(|i| {
            (
                i * 7,
                0x9E37_79B9_7F4A_7C15u64.wrapping_mul(u64::from(i) + 1),
                700 + u32::from(i) * 300,
            )
        })
        .collect();
    let ranges = ranges_from(&s.programs[0], 1, &draws);
    let (mut a, ia) = run_ranges(&s, EngineKind::Batched, &ranges);
    let (mut b, ib) = run_ranges(&s, EngineKind::CycleLevel, &ranges);
    assert_eq!(a.counting_snapshot(), b.counting_snapshot());
    assert_eq!(range_digest(&a, 1), range_digest(&b, 1));
    assert_eq!(ia, ib);
    assert!(!ia.is_empty(), "the ranges crossed thresholds");
}

#[test]
fn a_paused_context_counts_nothing() {
    let mut sc = small_with_programs();
    sc.switch_timeout_cycles = 1 << 30;
    let mut dev = device(&sc, EngineKind::Batched);
    let whole = |k: u16, n: u16| (code_item(k, 0), code_item(k, n - 1));
    let (start, end) = whole(0, sc.programs[0].kernels[0].blocks.len() as u16);
    let g = Prog {
        ctrl: range_ctrl::ENABLE | range_event::CYCLES << range_ctrl::EVENT_SHIFT | 1 << 16,
        start,
        end,
        threshold: 0,
    };
    arm_ranges(&mut dev, 1, 0, &[g]);
    let count = |d: &Device| reg64(d, range_reg(1, 0, rg::RANGE_COUNT));
    run_until_switch_out_requested(&mut dev, 1);
    let before = count(&dev);
    dev.advance(5_000).unwrap();
    assert!(count(&dev) > before, "the running context counts");
    dev.write_reg(r::part(1, r::PART_CTRL), 4, u64::from(part_ctrl::CTX_PAUSE))
        .unwrap();
    let c0 = count(&dev);
    dev.advance(200_000).unwrap();
    assert_eq!(count(&dev), c0, "a paused context counted");
}

#[test]
fn every_bad_range_write_fails_and_changes_nothing() {
    let sc = small_with_programs();
    let mut dev = device(&sc, EngineKind::Batched);
    let n = sc.programs[0].kernels[0].blocks.len() as u16;
    let good = Prog {
        ctrl: range_ctrl::ENABLE | range_ctrl::COUNT_IRQ | 1 << 16,
        start: code_item(0, 0),
        end: code_item(0, 1),
        threshold: 500,
    };
    arm_ranges(&mut dev, 1, 64, &[good]);
    dev.advance(50_000).unwrap();
    let i = |reg| range_reg(1, 1, reg);
    let armed = |reg| range_reg(1, 0, reg);
    let en = range_ctrl::ENABLE | 1 << 16;
    // (staged START, END, THRESHOLD) then the CTRL write that must fail.
    let bad: Vec<(u32, u32, u32, u32)> = vec![
        (code_item(0, 2), code_item(0, 1), 0, en),    // end < start
        (code_item(0, 0), code_item(0, n), 0, en),    // block out of kernel
        (code_item(7, 0), code_item(7, 0), 0, en),    // kernel out of program
        (code_item(0, 0), code_item(1, 0), 0, en),    // two kernels
        (0, 1, 0, en | 3 << range_ctrl::EVENT_SHIFT), // unknown event
        (0, 1, 0, en | 1 << 2),                       // unknown bit
        (0, 1, 0, en | range_ctrl::COUNT_IRQ),        // threshold 0
        (0, 1, 0, en | range_ctrl::LATENCY_IRQ),      // threshold 0
        (
            0,
            1,
            5,
            en | range_ctrl::COUNT_IRQ | range_ctrl::LATENCY_IRQ,
        ), // both
        (0, 0, 0, range_ctrl::ENABLE),                // code range, no program
        (0, 0, 0, range_ctrl::ENABLE | 9 << 16),      // no such program
        (9, 8, 0, range_ctrl::ENABLE | range_ctrl::DATA), // data end < start
        (0, 0, 0, 1 << 16),                           // neither 0 nor ENABLE
    ];
    let before = (digest(&dev), range_digest(&dev, 1));
    for (start, end, thr, ctrl) in bad {
        let mut ops = [
            write(i(rg::RANGE_START), start),
            write(i(rg::RANGE_END), end),
            write(i(rg::RANGE_THRESHOLD), thr),
            write(i(rg::RANGE_CTRL), ctrl),
        ];
        assert!(
            dev.batch(&mut ops).is_err(),
            "{start:#x}..{end:#x} {ctrl:#x} accepted"
        );
        assert_eq!(
            (digest(&dev), range_digest(&dev, 1)),
            before,
            "{ctrl:#x} changed the device"
        );
    }
    let singles = [
        (armed(rg::RANGE_CTRL), good.ctrl), // an armed range takes only 0
        (armed(rg::RANGE_START), 0),        // no staging while armed
        (armed(rg::RANGE_THRESHOLD), 1),
        (armed(rg::RANGE_ENTRIES), 0),         // read-only
        (rring(1, rg::RRING_CAP), 128),        // a threshold is armed
        (rring(1, rg::RRING_TAIL), 1_000),     // beyond head
        (rring(1, rg::RRING_HEAD), 0),         // read-only
        (range_reg(0, 0, rg::RANGE_CTRL), en), // slot 0 has no ranges
    ];
    for (off, v) in singles {
        assert!(
            dev.write_reg(off, 4, u64::from(v)).is_err(),
            "{off:#x} = {v:#x} accepted"
        );
        assert_eq!(
            (digest(&dev), range_digest(&dev, 1)),
            before,
            "{off:#x} changed the device"
        );
    }
    // A ring of a size that is not a power of two, while nothing is armed.
    dev.write_reg(armed(rg::RANGE_CTRL), 4, 0).unwrap();
    let disarmed = (digest(&dev), range_digest(&dev, 1));
    for v in [3, rg::RRING_MAX_RECORDS * 2] {
        assert!(dev
            .write_reg(rring(1, rg::RRING_CAP), 4, u64::from(v))
            .is_err());
    }
    assert_eq!((digest(&dev), range_digest(&dev, 1)), disarmed);
}
