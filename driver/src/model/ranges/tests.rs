//! The unit against an oracle: the walk's own visit sequence, recorded
//! once, from which entries, counts and crossings are computed by the
//! definitions in `docs/ranges.md` — independently of the watcher.

use gpupm_uapi::ranges::{
    self as rg, crossing_kind, range_ctrl, range_event, RangeRecord, RangeSlot, StackEntry,
};
use proptest::prelude::*;
use zerocopy::FromBytes;

use super::watch::RangeWatcher;
use super::*;
use crate::model::access::Reject;
use crate::model::program::run::{CallStack, Env, ProgramRun, Visit, Watch};
use crate::model::program::{CompiledExit, Program, Programs};
use crate::scenario::program::{generate, ProgramSpec};
use gpupm_uapi::sampling::BranchEntry;

const SEED: u64 = 5;

fn specs() -> Vec<ProgramSpec> {
    let mut v = crate::scenario::builtin().programs;
    v.push(generate(7, 0));
    v.push(generate(7, 1));
    v
}

/// Records every visit the walk starts.
#[derive(Default)]
struct Recorder(Vec<Visit>);

impl Watch for Recorder {
    fn entered(&mut self, visit: &Visit, _: CallStack<'_>) {
        self.0.push(*visit);
    }
    fn ran(&mut self, _: u64, _: u64, _: u16, _: u16) {}
    fn taken(&mut self, _: BranchEntry, _: u64) {}
}

fn env(run: &ProgramRun) -> Env<'static> {
    Env {
        ctx_base: run.ctx_cycles(),
        dev_base: run.ctx_cycles() + 1000,
        phase: 0,
        throttle: &[],
        seed: SEED,
    }
}

/// What the definitions say range `p` counts over `visits` up to cycle `end`.
#[derive(Debug, Default, PartialEq, Eq)]
struct Expected {
    entries: u64,
    count: u64,
    crossings: u64,
}

fn inside(p: &RangeProg, program: u32, v: &Visit) -> bool {
    let prog_ok = p.program() == 0 || p.program() == program;
    if p.ctrl & range_ctrl::DATA != 0 {
        return prog_ok && v.address.is_some_and(|a| a >= p.start && a <= p.end);
    }
    prog_ok
        && u32::from(v.kernel) == p.start >> 16
        && u32::from(v.block) >= p.start & 0xFFFF
        && u32::from(v.block) <= p.end & 0xFFFF
}

fn oracle(p: &RangeProg, program: u32, visits: &[Visit], end: u64) -> Expected {
    let mut e = Expected::default();
    let mut since = None;
    let mut latency_crossings = 0;
    for (j, v) in visits.iter().enumerate() {
        let now_in = inside(p, program, v);
        match (since, now_in) {
            (None, true) => {
                e.entries += 1;
                since = Some(v.start);
            }
            (Some(s), false) => {
                latency_crossings += u64::from(v.start - s >= u64::from(p.threshold));
                since = None;
            }
            _ => {}
        }
        if !now_in {
            continue;
        }
        let ran = (end.min(v.start + v.cycles) - v.start).min(v.cycles);
        e.count += match p.event() {
            range_event::CYCLES => ran,
            range_event::INSTRUCTIONS => ran * u64::from(v.instructions) / v.cycles,
            _ => u64::from(v.address.is_some()),
        };
        let _ = j;
    }
    if let Some(s) = since {
        latency_crossings += u64::from(end - s >= u64::from(p.threshold));
    }
    e.crossings = if p.ctrl & range_ctrl::COUNT_IRQ != 0 {
        e.count / u64::from(p.threshold)
    } else if p.ctrl & range_ctrl::LATENCY_IRQ != 0 {
        latency_crossings
    } else {
        0
    };
    e
}

/// Programs range `i` of `unit` through its registers.
fn program(unit: &mut RangeUnit, progs: &Programs, i: u32, p: RangeProg) -> Result<(), Reject> {
    let mut sh = unit.shadow();
    let regs = [
        (rg::RANGE_START, p.start),
        (rg::RANGE_END, p.end),
        (rg::RANGE_THRESHOLD, p.threshold),
        (rg::RANGE_CTRL, p.ctrl),
    ];
    let mut writes = Vec::new();
    for (reg, v) in regs {
        let off = u64::from(i) * rg::RANGE_REG_STRIDE + reg;
        writes.push(unit.check_range_write(off, v, &mut sh, progs)?);
    }
    writes.into_iter().for_each(|w| unit.apply(w));
    Ok(())
}

/// Raw draws of one range's programming.
type Draw = (bool, u32, u32, u32, u64, u64, bool);

fn draw() -> impl Strategy<Value = Draw> {
    (
        any::<bool>(),
        0..3u32,
        0..3u32,
        1..3000u32,
        any::<u64>(),
        any::<u64>(),
        any::<u64>().prop_map(|x| x % 5 == 0),
    )
}

/// A valid programming of a range over `prog` (id `id`) from `d`; with
/// `other`, for another program (it must count nothing).
// Draws are reduced modulo small lengths before narrowing.
#[allow(clippy::cast_possible_truncation)]
fn make_range(prog: &Program, id: u32, d: Draw) -> RangeProg {
    let (data, event, irq, thr, a, b, other) = d;
    let bases: Vec<(u32, u32)> = prog
        .kernels
        .iter()
        .flatten()
        .filter_map(|b| b.data.map(|d| (d.base, d.span)))
        .chain([(0, 1 << 20)])
        .collect();
    let irq_bits = [0, range_ctrl::COUNT_IRQ, range_ctrl::LATENCY_IRQ][irq as usize];
    let pid = if other { id % 6 + 1 } else { id };
    let mut ctrl = range_ctrl::ENABLE | event << range_ctrl::EVENT_SHIFT | irq_bits | pid << 16;
    let (start, end) = if other && !data {
        (0, 0)
    } else if data {
        ctrl |= range_ctrl::DATA;
        let (base, span) = bases[(a % bases.len() as u64) as usize];
        let lo = base + (b % u64::from(span)) as u32;
        (lo, lo.saturating_add((a >> 32) as u32 % span))
    } else {
        let k = (a % prog.kernels.len() as u64) as usize;
        let n = prog.kernels[k].len() as u64;
        let (x, y) = ((b % n) as u32, ((b >> 32) % n) as u32);
        let k = k as u32;
        (k << 16 | x.min(y), k << 16 | x.max(y))
    };
    RangeProg {
        ctrl,
        start,
        end,
        threshold: thr,
    }
}

fn records(unit: &RangeUnit) -> Vec<RangeRecord> {
    let size = core::mem::size_of::<RangeSlot>();
    let stored = unit.ring.head.min(unit.ring.cap);
    (0..stored as usize)
        .map(|k| {
            let mut slot = vec![0; size];
            unit.read_ring_window((k * size) as u64, &mut slot)
                .expect("slot");
            let payload = &slot[32..32 + core::mem::size_of::<RangeRecord>()];
            RangeRecord::read_from_bytes(payload).expect("record")
        })
        .collect()
}

/// A record's stack is a call path of `prog` ending in its kernel.
fn valid_path(prog: &Program, r: &RangeRecord) -> bool {
    let mut kernel = prog.entry;
    for e in &r.stack[..r.depth as usize] {
        let calls = prog.kernels[usize::from(kernel)]
            .get(usize::from(e.call_block))
            .is_some_and(|b| matches!(b.exit, CompiledExit::Call(c) if c == e.callee));
        if e.kernel != kernel || !calls || e.return_block != e.call_block + 1 {
            return false;
        }
        kernel = e.callee;
    }
    kernel == r.kernel
        && r.stack[r.depth as usize..] == [StackEntry::default(); 16][r.depth as usize..]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn counts_and_crossings_equal_the_oracle(
        pick in 0..6usize,
        draws in proptest::collection::vec(draw(), 8),
        splits in proptest::collection::vec(1..40_000u64, 1..24),
    ) {
        let table = specs();
        let progs = Programs::from_specs(&table);
        let prog = progs.get(pick).expect("program");
        let id = u32::try_from(pick + 1).unwrap_or(0);
        let mut unit = RangeUnit::new(1, true);
        let mut sh = unit.shadow();
        let cap = unit.check_ring_write(rg::RRING_CAP, 4096, &mut sh).expect("cap");
        unit.apply(cap);
        let mut chosen = Vec::new();
        for (i, d) in draws.into_iter().enumerate() {
            let p = make_range(prog, id, d);
            program(&mut unit, &progs, u32::try_from(i).unwrap(), p).expect("valid programming");
            chosen.push(p);
        }
        let mut run = ProgramRun::new(pick, prog, 3);
        let mut rec_run = run.clone();
        let total: u64 = splits.iter().sum();
        let mut rec = Recorder::default();
        rec_run.advance(total, prog, &env(&rec_run), &mut rec);
        for &n in &splits {
            let e = env(&run);
            let mut w = RangeWatcher::new(&mut unit, (9, 2, 3, id), e, false);
            run.advance(n, prog, &e, &mut w);
            drop(w);
            unit.flush(2, None);
        }
        let truth = unit.truth(9, 3);
        let mut crossings = 0;
        for (i, p) in chosen.iter().enumerate() {
            let want = oracle(p, id, &rec.0, total);
            prop_assert_eq!(unit.counts[i].entries, want.entries, "range {} entries {:?}", i, p);
            prop_assert_eq!(unit.counts[i].count, want.count, "range {} count {:?}", i, p);
            prop_assert_eq!(truth[i].entries, want.entries);
            prop_assert_eq!(truth[i].count, want.count);
            prop_assert_eq!(truth[i].crossings, want.crossings, "range {} crossings {:?}", i, p);
            crossings += want.crossings;
        }
        prop_assert_eq!(unit.ring.produced, crossings);
        prop_assert_eq!(unit.events.len() as u64, crossings);
        let lost = unit.events.iter().filter(|e| e.0 & gpupm_uapi::intr::RANGE_IRQ_LOST != 0);
        prop_assert_eq!(lost.count() as u64, unit.ring.lost);
        for (k, r) in records(&unit).iter().enumerate() {
            prop_assert_eq!(r.seq, k as u64 + 1);
            prop_assert!(valid_path(prog, r), "bad stack {:?}", r);
            let p = chosen[usize::from(r.range)];
            if r.kind == crossing_kind::COUNT {
                prop_assert_eq!(r.value % u64::from(p.threshold), 0);
            } else {
                prop_assert_eq!(r.value, u64::from(p.threshold));
            }
        }
    }
}

#[test]
fn malformed_programming_is_refused_and_changes_nothing() {
    let progs = Programs::from_specs(&specs());
    let mut unit = RangeUnit::new(1, true);
    let ok = RangeProg {
        ctrl: range_ctrl::ENABLE | 1 << 16,
        start: 0,
        end: 2,
        threshold: 0,
    };
    program(&mut unit, &progs, 0, ok).expect("valid");
    let before = format!("{unit:?}");
    let bad = [
        RangeProg { end: 1 << 16, ..ok }, // two kernels
        RangeProg {
            start: 3,
            end: 2,
            ..ok
        }, // end < start
        RangeProg {
            start: 9 << 16,
            end: 9 << 16,
            ..ok
        }, // no kernel 9
        RangeProg { end: 400, ..ok },     // no block 400
        RangeProg {
            ctrl: ok.ctrl | 3 << range_ctrl::EVENT_SHIFT,
            ..ok
        }, // unknown event
        RangeProg {
            ctrl: ok.ctrl | 1 << 3,
            ..ok
        }, // unknown bit
        RangeProg {
            ctrl: ok.ctrl | range_ctrl::COUNT_IRQ,
            ..ok
        }, // threshold 0
        RangeProg {
            ctrl: ok.ctrl | range_ctrl::LATENCY_IRQ,
            threshold: 5,
            ..ok
        }, // no ring
        RangeProg {
            ctrl: range_ctrl::ENABLE,
            ..ok
        }, // no program
        RangeProg {
            ctrl: range_ctrl::ENABLE | 99 << 16,
            ..ok
        }, // program 99
        RangeProg {
            ctrl: range_ctrl::ENABLE | range_ctrl::DATA,
            start: 8,
            end: 7,
            threshold: 0,
        },
        RangeProg {
            ctrl: 1 << 16,
            ..ok
        }, // not 0, no ENABLE
    ];
    for p in bad {
        assert!(program(&mut unit, &progs, 1, p).is_err(), "{p:?} accepted");
        assert_eq!(format!("{unit:?}"), before, "{p:?} changed the unit");
    }
    // An armed range takes only a disarm, and no staging writes.
    let mut sh = unit.shadow();
    for (reg, v) in [
        (rg::RANGE_CTRL, ok.ctrl),
        (rg::RANGE_START, 1),
        (rg::RANGE_THRESHOLD, 4),
    ] {
        assert!(unit.check_range_write(reg, v, &mut sh, &progs).is_err());
    }
    for v in [3, 8192] {
        assert!(unit.check_ring_write(rg::RRING_CAP, v, &mut sh).is_err());
    }
    assert!(unit.check_ring_write(rg::RRING_TAIL, 1, &mut sh).is_err());
    assert_eq!(format!("{unit:?}"), before);
}
