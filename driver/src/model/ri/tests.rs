//! The runtime-instrumentation unit by itself: its register checks (the
//! whole control block at the write that enables it, migration), SF and
//! RSIC as a session counts them, report groups and the current address
//! (stop and wrap), the collection buffer keeping the newest 32 records,
//! suppression, abort records, halts after a migration, and releases.
//!
//! The unit runs against VM, context and partition tables built here,
//! and its sessions watch a context's walk through the unit's own
//! watcher ([`RiWatcher`]) over a program defined here, whose block
//! cycles make every sample point computable by hand.

use gpupm_uapi::intr::source;
use gpupm_uapi::layout::{
    ri_emit_source, ri_group_flags, ri_record, ri_sample_flags, RiAbortRecord, RiBeginRecord,
    RiEmitRecord, RiInstructionRecord,
};
use gpupm_uapi::regs::{MAX_PARTITION_SLOTS, MAX_VMS};
use gpupm_uapi::ri::{
    self as r, group_bytes, halt_reason, ri_ctrl, ri_mode, ri_status, RI_SPAN, SF_MAX,
    SF_MIN_CYCLES, SF_MIN_INSTRUCTIONS,
};
use zerocopy::FromBytes;

use super::session::Point;
use super::watch::RiWatcher;
use super::*;
use crate::model::access::{RegValue, Reject};
use crate::model::context::ContextTable;
use crate::model::partition::Partitions;
use crate::model::program::run::{Env, ProgramRun, Unwatched};
use crate::model::program::Program;
use crate::model::topology::Topology;
use crate::model::vm::VmTable;
use crate::scenario::{parse, BlockSpec, Exit, KernelSpec, ProgramSpec, Scenario, ThrottleWindow};

/// Four slices: 1 runs VMs 1 and 2, 2 has max RGS 2, 3 capability
/// version 2, 4 matches 1 and runs VM 5 (confidential).
const SCENARIO: &str = "seed = 3\n\
    [topology]\nsms_per_gpc = [1, 1, 1, 1]\nmemory_slices = 4\nl2_per_slice = 1\n\
    fb_per_slice = 1\nce_per_slice = 1\nnvlinks = 0\n\
    [[partition]]\nslot = 1\ngpcs = [0]\nmemory_slices = [0]\n\
    [[partition]]\nslot = 2\ngpcs = [1]\nmemory_slices = [1]\nri_max_rgs = 2\n\
    [[partition]]\nslot = 3\ngpcs = [2]\nmemory_slices = [2]\nri_version = 2\n\
    [[partition]]\nslot = 4\ngpcs = [3]\nmemory_slices = [3]\n\
    [[vm]]\nid = 1\npartition = 1\n[[vm]]\nid = 2\npartition = 1\n\
    [[vm]]\nid = 5\npartition = 4\n\
    confidential_key = \"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\"\n";

/// Contexts: (id, VM).
const CONTEXTS: [(u32, u32); 4] = [(1, 1), (2, 1), (3, 2), (4, 5)];
/// Device cycle minus context cycle in the walks below.
const DEV_OFFSET: u64 = 5_000;

/// The unit and the tables its checks read.
struct Fixture {
    vms: VmTable,
    ctxs: ContextTable,
    parts: Partitions,
    unit: RiUnit,
}

impl Fixture {
    fn new() -> Self {
        let s: Scenario = parse("ri.toml", SCENARIO).expect("the scenario parses");
        let topo = Topology::build(&s.topology, &s.partitions).expect("the layout builds");
        let mut parts = Partitions::new(&topo);
        for p in &s.partitions {
            parts.configure(p, &topo, 4096);
        }
        let mut vms = VmTable::default();
        for v in &s.vms {
            vms.configure(v, 1);
            parts.bind_vm(v.partition, v.id);
        }
        let mut ctxs = ContextTable::default();
        for (id, vm) in CONTEXTS {
            ctxs.insert(id, vm, 100 + id, 0, 0);
            vms.set_runnable(vm, id, true);
        }
        let unit = RiUnit::new(&s);
        Fixture {
            vms,
            ctxs,
            parts,
            unit,
        }
    }

    fn tables(&self) -> Tables<'_> {
        Tables {
            vms: &self.vms,
            ctxs: &self.ctxs,
            parts: &self.parts,
        }
    }

    /// Checks `(block, register, value)` writes as one batch against one
    /// shadow and applies them in order only if every one passes, each
    /// control write with the capability version of the partition its
    /// context runs on (as the device does).
    fn batch(&mut self, writes: &[(u32, u64, u32)]) -> Result<(), (usize, Reject)> {
        let mut sh = self.unit.shadow();
        let mut checked = Vec::new();
        for (k, &(i, reg, v)) in writes.iter().enumerate() {
            let t = self.tables();
            checked.push(
                self.unit
                    .check_write(i, reg, v, &mut sh, t)
                    .map_err(|e| (k, e))?,
            );
        }
        for w in checked {
            let i = match w {
                RiWrite::Ctrl(i, _) | RiWrite::Emit(i, _) => i,
                _ => 0,
            };
            let ctx = self.unit.session(i).map_or(0, |s| s.ctx);
            let version = self.unit.version(self.vms.partition(self.ctxs.get(ctx).vm));
            self.unit.apply(w, version);
        }
        Ok(())
    }

    /// Programs and enables block `i` in one batch; the index of the
    /// refused write, if any.
    fn arm(&mut self, i: u32, cb: Cb) -> Result<(), usize> {
        self.batch(&cb.writes(i)).map_err(|e| e.0)
    }

    fn reg(&self, i: u32, reg: u64) -> u64 {
        value(self.unit.read(i, reg))
    }

    /// Moves VM `vm` to slot `to` the way the device executes
    /// `RI_MIGRATE`: the tables first, then the unit's halts.
    fn migrate(&mut self, vm: u32, to: u32, now: u64) {
        let mut sh = self.unit.shadow();
        let t = self.tables();
        let w1 = self
            .unit
            .check_global(r::RI_MIGRATE_VM, vm, &mut sh, t)
            .expect("a VM");
        let w2 = self
            .unit
            .check_global(r::RI_MIGRATE, to, &mut sh, t)
            .expect("a migration");
        let from = self.vms.partition(vm);
        self.unit.apply(w1, 0);
        self.vms.set_partition(vm, to);
        self.parts.move_vm(vm, from, to);
        self.unit.migrated(&self.ctxs, vm, to, now);
        self.unit.apply(w2, 0);
    }

    /// Every RI register, globals and blocks, and block 0's span.
    fn snapshot(&self) -> (Vec<Option<RegValue>>, Vec<Option<RegValue>>, Vec<u8>) {
        let globals = (r::RI_COUNT..r::RI_COUNT + 0x100)
            .step_by(4)
            .map(|o| self.unit.read_global(o))
            .collect();
        let blocks = (0..r::RI_BLOCKS)
            .flat_map(|i| (0..r::RI_STRIDE).step_by(4).map(move |o| (i, o)))
            .map(|(i, o)| self.unit.read(i, o))
            .collect();
        (globals, blocks, self.span(0, 8191))
    }

    /// The span bytes `0..=rla` of block `i`, through the RI region.
    fn span(&self, i: u32, rla: u32) -> Vec<u8> {
        let mut buf = vec![0; rla as usize + 1];
        self.unit
            .read_window(u64::from(i) * RI_SPAN, &mut buf)
            .expect("the span reads");
        buf
    }

    /// The records of the groups stored in `[roa, rca)`, group by group.
    fn groups(&self, i: u32, cb: Cb) -> Vec<Vec<[u8; 16]>> {
        let rca = usize::try_from(self.reg(i, r::RI_RCA)).expect("RCA fits");
        let bytes = self.span(i, cb.rla);
        let size = usize::try_from(group_bytes(cb.rgs)).expect("a group size");
        bytes[cb.roa as usize..rca]
            .chunks(size)
            .map(|g| {
                g.chunks(16)
                    .map(|r| r.try_into().expect("16 bytes"))
                    .collect()
            })
            .collect()
    }

    /// Runs context `ctx` `cycles` context cycles on slot `partition`,
    /// watched by its block if one is enabled.
    fn walk(&mut self, w: &mut Walk, ctx: u32, partition: u32, cycles: u64) {
        let env = Env {
            ctx_base: w.run.ctx_cycles(),
            dev_base: w.run.ctx_cycles() + DEV_OFFSET,
            phase: 0,
            throttle: &w.throttle,
            seed: 1,
        };
        match self.unit.watching(ctx) {
            Some(session) => {
                let mut watcher = RiWatcher {
                    session,
                    partition,
                    env,
                };
                w.run.advance(cycles, &w.prog, &env, &mut watcher);
            }
            None => {
                w.run.advance(cycles, &w.prog, &env, &mut Unwatched);
            }
        }
    }
}

fn value(v: Option<RegValue>) -> u64 {
    match v.expect("a register") {
        RegValue::R32(x) => u64::from(x),
        RegValue::R64(x) => x,
    }
}

/// A control block's settings.
#[derive(Clone, Copy, Debug)]
struct Cb {
    ctx: u32,
    mode: u32,
    rgs: u32,
    bits: u32,
    sf: u32,
    rsic: u32,
    roa: u32,
    rla: u32,
}

impl Cb {
    /// Cycle mode, RGS 2, a buffer of `groups` groups at 0.
    fn cycles(ctx: u32, sf: u32, groups: u32) -> Cb {
        Cb {
            ctx,
            mode: ri_mode::CYCLE,
            rgs: 2,
            bits: 0,
            sf,
            rsic: 0,
            roa: 0,
            rla: groups * 128 - 1,
        }
    }

    /// The `RI_CTRL` value that enables it.
    fn ctrl(&self) -> u32 {
        ri_ctrl::ENABLE
            | self.mode << ri_ctrl::MODE_SHIFT
            | self.rgs << ri_ctrl::RGS_SHIFT
            | self.bits
    }

    /// The writes that program and enable block `i`.
    fn writes(&self, i: u32) -> [(u32, u64, u32); 6] {
        [
            (i, r::RI_CTX, self.ctx),
            (i, r::RI_SF, self.sf),
            (i, r::RI_RSIC, self.rsic),
            (i, r::RI_ROA, self.roa),
            (i, r::RI_RLA, self.rla),
            (i, r::RI_CTRL, self.ctrl()),
        ]
    }
}

/// A context's walk: a loop of two blocks, 100 cycles (50 instructions)
/// then 30 (30 instructions), the second block optionally a marker;
/// 1000 iterations, then a 10-cycle block that relaunches the kernel.
struct Walk {
    prog: Program,
    run: ProgramRun,
    throttle: Vec<ThrottleWindow>,
}

/// Cycles of one loop iteration.
const ITERATION: u64 = 130;
const ITERATION_INSTRUCTIONS: u64 = 80;

impl Walk {
    fn new(marker: bool) -> Self {
        let block = |name: &str, instructions, cpi, exit, marker| BlockSpec {
            name: name.into(),
            instructions,
            cpi: vec![cpi],
            throttle: 1.0,
            exit,
            marker,
            data: None,
        };
        let spec = ProgramSpec {
            name: "two".into(),
            entry: 0,
            kernels: vec![KernelSpec {
                name: "main".into(),
                blocks: vec![
                    block("slow", 50, 2.0, Exit::Fall, false),
                    block("fast", 30, 1.0, Exit::Loop { to: 0, trips: 1000 }, marker),
                    block("out", 10, 1.0, Exit::Ret, false),
                ],
            }],
        };
        let prog = Program::compile(&spec);
        let run = ProgramRun::new(0, &prog, 1);
        Walk {
            prog,
            run,
            throttle: Vec::new(),
        }
    }
}

fn instruction(rec: &[u8; 16]) -> RiInstructionRecord {
    RiInstructionRecord::read_from_bytes(rec).expect("16 bytes")
}

fn begin(span: &[u8]) -> RiBeginRecord {
    RiBeginRecord::read_from_bytes(&span[..16]).expect("16 bytes")
}

/// A group's shape: 2^(RGS+1) records, begin (at ROA) or timestamp first,
/// extras then fill, the instruction record last.
fn check_group(g: &[[u8; 16]], rgs: u32, at_origin: bool) {
    assert_eq!(g.len(), 1 << (rgs + 1), "records of an RGS {rgs} group");
    let head = if at_origin {
        ri_record::BEGIN
    } else {
        ri_record::TIMESTAMP
    };
    assert_eq!(g[0][0], head);
    assert_eq!(g[g.len() - 1][0], ri_record::INSTRUCTION);
    let body = &g[1..g.len() - 1];
    let extras = body
        .iter()
        .take_while(|r| matches!(r[0], ri_record::EMIT | ri_record::ABORT))
        .count();
    assert!(
        body[extras..].iter().all(|r| *r == [0; 16]),
        "fill after the extras"
    );
}

/// A primary-clock sample point at context cycle `c`.
fn point(c: u64, secondary: bool) -> Point {
    Point {
        kernel: 0,
        block: 1,
        ctx_cycle: c,
        dev_cycle: c + DEV_OFFSET,
        partition: 1,
        secondary,
        retired: c / 2,
    }
}

/// Moved from `driver/tests/model_ri.rs`: 40 RIEMITs between two sample
/// points: the group carries the newest 32, oldest first; the 8 older
/// ones are counted as overwritten.
#[test]
fn the_collection_buffer_keeps_the_newest_32_emits() {
    let mut fx = Fixture::new();
    let cb = Cb {
        rgs: 7,
        bits: ri_ctrl::EMIT,
        rsic: 256,
        rla: 4 * 4096 - 1,
        ..Cb::cycles(3, 1 << 20, 4)
    };
    fx.arm(9, cb).unwrap();
    for v in 0..40 {
        fx.batch(&[(9, r::RI_EMIT, 1000 + v)]).unwrap();
    }
    assert_eq!(fx.reg(9, r::RI_COLLECTED), 32);
    assert_eq!(fx.reg(9, r::RI_OVERWRITTEN), 8);
    let mut w = Walk::new(false);
    fx.walk(&mut w, 3, 1, 3_000);
    let g = fx.groups(9, cb);
    assert!(!g.is_empty(), "no group stored");
    let emits: Vec<u64> = g[0][1..33]
        .iter()
        .map(|r| RiEmitRecord::read_from_bytes(r).unwrap())
        .inspect(|e| {
            assert_eq!(
                (e.kind, e.source),
                (ri_record::EMIT, ri_emit_source::REGISTER)
            )
        })
        .map(|e| e.data)
        .collect();
    assert_eq!(emits, (1008..1040).collect::<Vec<_>>());
    assert_eq!(g[0][33], [0; 16], "fill after the emits");
    assert_eq!(fx.unit.truth(9).unwrap().emits_register, 40);
}

/// Moved from `driver/tests/model_ri.rs`: stop mode: the first group that
/// does not fit stops the session with one RI_BUFFER_FULL and S in the
/// begin record; wrap mode starts over at ROA with a fresh begin record
/// whose NRG counts every group.
#[test]
fn a_full_buffer_stops_or_wraps_with_its_interrupt() {
    for wrap in [false, true] {
        let mut fx = Fixture::new();
        let bits = ri_ctrl::INTR_ENABLE | if wrap { ri_ctrl::WRAP } else { 0 };
        let cb = Cb {
            bits,
            ..Cb::cycles(1, 1000, 3)
        };
        fx.arm(2, cb).unwrap();
        let mut w = Walk::new(false);
        fx.walk(&mut w, 1, 1, 40_000);
        let truth = fx.unit.truth(2).unwrap();
        let full: Vec<UnitEvent> = fx
            .unit
            .take_events()
            .into_iter()
            .filter(|e| e.0 == source::RI_BUFFER_FULL)
            .collect();
        assert!(!full.is_empty());
        assert!(full.iter().all(|e| e.2 == 2 && e.3 == 1));
        let begin = begin(&fx.span(2, cb.rla));
        if wrap {
            assert_eq!(u64::from(begin.groups), truth.stored);
            assert!(truth.stored > 3 && truth.not_stored == 0);
            assert_eq!(begin.flags & ri_group_flags::STOPPED, 0);
        } else {
            assert_eq!(full.len(), 1);
            assert_eq!((truth.stored, begin.groups), (3, 3));
            assert_ne!(begin.flags & ri_group_flags::STOPPED, 0);
            assert!(truth.not_stored > 0);
        }
    }
}

/// Moved from `driver/tests/model_ri.rs`: every malformed control block
/// is refused at the write and changes nothing, alone or as the last
/// write of a batch.
#[test]
fn malformed_control_blocks_are_refused_and_change_nothing() {
    let mut fx = Fixture::new();
    let ok = Cb::cycles(1, 1000, 4);
    let bad = [
        (
            "RGS above the partition's limit",
            Cb {
                ctx: 3,
                rgs: 7,
                ..ok
            },
        ),
        (
            "origin above limit",
            Cb {
                roa: 512,
                rla: 256,
                ..ok
            },
        ),
        ("unaligned origin", Cb { roa: 64, ..ok }),
        ("no group fits", Cb { rla: 100, ..ok }),
        ("unknown mode", Cb { mode: 5, ..ok }),
        ("no mode", Cb { mode: 0, ..ok }),
        (
            "undefined bits",
            Cb {
                bits: 1 << 30,
                ..ok
            },
        ),
        ("free context", Cb { ctx: 77, ..ok }),
        ("confidential VM's context", Cb { ctx: 4, ..ok }),
        (
            "RSIC above SF_MAX",
            Cb {
                rsic: SF_MAX + 1,
                ..ok
            },
        ),
        ("limit outside the span", Cb { rla: 1 << 20, ..ok }),
    ];
    // Context 3 runs on slice 1 (max 7); to test the RGS limit, move its
    // VM to slice 2 (max 2) first.
    fx.migrate(2, 2, 0);
    for (what, cb) in bad {
        let before = fx.snapshot();
        assert!(fx.arm(0, cb).is_err(), "{what} was accepted");
        assert_eq!(fx.snapshot(), before, "{what} changed something");
    }
    fx.arm(0, ok).unwrap();
    let before = fx.snapshot();
    for (reg, v) in [
        (r::RI_ROA, 128),
        (r::RI_CTX, 2),
        (r::RI_CTRL, ok.ctrl() | ri_ctrl::WRAP),
        (r::RI_RCA, 0),
        (r::RI_GROUPS, 1),
    ] {
        assert!(fx.batch(&[(0, reg, v)]).is_err(), "write {reg:#x}");
    }
    assert!(fx.arm(1, ok).is_err(), "a second block on the same context");
    assert_eq!(fx.snapshot(), before);
}

#[test]
fn each_malformed_control_block_is_refused_at_its_write_for_its_reason() {
    let mut fx = Fixture::new();
    fx.migrate(2, 2, 0);
    let ok = Cb::cycles(1, 1000, 4);
    let ctrl = 5;
    let cases = [
        (Cb { ctx: 0, ..ok }, ctrl, "no active context bound"),
        (Cb { ctx: 77, ..ok }, 0, "no such active context"),
        (
            Cb { ctx: 4, ..ok },
            0,
            "a confidential VM's contexts have no program buffer",
        ),
        (Cb { mode: 0, ..ok }, ctrl, "no mode"),
        (Cb { mode: 4, ..ok }, ctrl, "unknown mode"),
        (
            Cb {
                bits: 1 << 30,
                ..ok
            },
            ctrl,
            "undefined RI_CTRL bits",
        ),
        (
            Cb {
                ctx: 3,
                rgs: 3,
                ..ok
            },
            ctrl,
            "RGS above the partition's limit",
        ),
        (
            Cb {
                roa: 256,
                rla: 255,
                ..ok
            },
            ctrl,
            "origin above limit",
        ),
        (
            Cb {
                roa: 64,
                rla: 1023,
                ..ok
            },
            ctrl,
            "origin not aligned to the group size",
        ),
        (
            Cb {
                roa: 128,
                rla: 254,
                ..ok
            },
            ctrl,
            "the buffer holds no group",
        ),
        (
            Cb {
                rsic: SF_MAX + 1,
                ..ok
            },
            2,
            "RSIC above SF_MAX",
        ),
        (
            Cb {
                rla: u32::try_from(RI_SPAN).unwrap(),
                ..ok
            },
            4,
            "outside the block's span",
        ),
    ];
    for (cb, at, why) in cases {
        assert_eq!(
            fx.batch(&cb.writes(0)),
            Err((at, Reject::BadValue(why))),
            "{cb:?}"
        );
    }
    // The bounds themselves are accepted: RGS 2 on slice 2, a buffer of
    // exactly one group, RSIC at SF_MAX, the last byte of the span.
    let fits = [
        Cb {
            ctx: 3,
            rgs: 2,
            ..ok
        },
        Cb {
            roa: 128,
            rla: 255,
            ..ok
        },
        Cb { rsic: SF_MAX, ..ok },
        Cb {
            rla: u32::try_from(RI_SPAN - 1).unwrap(),
            ..ok
        },
    ];
    for (i, cb) in (10..).zip(fits) {
        fx.arm(i, cb)
            .unwrap_or_else(|at| panic!("{cb:?} refused at {at}"));
        fx.batch(&[
            (i, r::RI_CTRL, cb.ctrl() & !ri_ctrl::ENABLE),
            (i, r::RI_CTX, 0),
        ])
        .unwrap();
    }
    // While enabled, only ENABLE may change and nothing else is writable.
    fx.arm(0, ok).unwrap();
    for (reg, v, why) in [
        (
            r::RI_CTRL,
            ok.ctrl() | ri_ctrl::EMIT,
            "only ENABLE may change while the block is enabled",
        ),
        (r::RI_SF, 5, "writable only while the block is disabled"),
        (r::RI_RLA, 1023, "writable only while the block is disabled"),
    ] {
        assert_eq!(fx.batch(&[(0, reg, v)]), Err((0, Reject::BadValue(why))));
    }
    for reg in [r::RI_STATUS, r::RI_RCA, r::RI_GROUPS, r::RI_COLLECTED, 0x2C] {
        assert_eq!(fx.batch(&[(0, reg, 0)]), Err((0, Reject::ReadOnly)));
    }
    assert_eq!(
        fx.batch(&[(1, r::RI_CTX, 1)]),
        Err((
            0,
            Reject::BadValue("another control block watches the context")
        ))
    );
    // In one batch, unbinding the first block frees the context for another.
    fx.batch(&[
        (0, r::RI_CTRL, ok.ctrl() & !ri_ctrl::ENABLE),
        (0, r::RI_CTX, 0),
        (1, r::RI_CTX, 1),
    ])
    .unwrap();
    assert_eq!(fx.unit.block_of(1), Some(1));
}

#[test]
fn sf_and_rsic_are_clamped_when_a_session_begins() {
    let mut fx = Fixture::new();
    let count = |fx: &Fixture| fx.reg(0, r::RI_RSIC);
    for (mode, sf, rsic, first, then) in [
        (ri_mode::CYCLE, 0, 0, SF_MIN_CYCLES, SF_MIN_CYCLES),
        (ri_mode::CYCLE, 10, 0, SF_MIN_CYCLES, SF_MIN_CYCLES),
        (ri_mode::CYCLE, 10, 3, 3, SF_MIN_CYCLES),
        (ri_mode::CYCLE, 5000, 300, 300, 5000),
        (ri_mode::CYCLE, u32::MAX, 0, SF_MAX, SF_MAX),
        (
            ri_mode::INSTRUCTION,
            1,
            0,
            SF_MIN_INSTRUCTIONS,
            SF_MIN_INSTRUCTIONS,
        ),
        (ri_mode::INSTRUCTION, 700, SF_MAX, SF_MAX, 700),
    ] {
        let cb = Cb {
            mode,
            sf,
            rsic,
            ..Cb::cycles(1, 0, 4)
        };
        fx.arm(0, cb).unwrap();
        // RSIC reads the live countdown; SF reads as written.
        assert_eq!(count(&fx), u64::from(first), "{cb:?}");
        assert_eq!(fx.reg(0, r::RI_SF), u64::from(sf));
        let session = fx.unit.watching(1).expect("enabled");
        assert_eq!(session.count(u64::from(first) - 1), None);
        assert_eq!(session.count(1), Some(0), "{cb:?}: the first sample point");
        assert_eq!(count(&fx), u64::from(then), "{cb:?}: then every SF");
        fx.batch(&[(0, r::RI_CTRL, cb.ctrl() & !ri_ctrl::ENABLE)])
            .unwrap();
        assert_eq!(
            count(&fx),
            u64::from(rsic),
            "disabled, RSIC reads as written"
        );
    }
    let directed = Cb {
        mode: ri_mode::DIRECTED,
        rsic: 77,
        ..Cb::cycles(1, 1000, 4)
    };
    fx.arm(0, directed).unwrap();
    assert_eq!(count(&fx), 77, "no countdown in directed mode");
}

#[test]
fn cycle_mode_samples_every_sf_context_cycles_and_instruction_mode_every_sf_instructions() {
    let (sf, rsic) = (1000u64, 300u64);
    let mut fx = Fixture::new();
    let cycles = Cb {
        rsic: 300,
        rla: 64 * 128 - 1,
        ..Cb::cycles(1, 1000, 64)
    };
    fx.arm(0, cycles).unwrap();
    let mut w = Walk::new(false);
    fx.walk(&mut w, 1, 1, 50);
    fx.walk(&mut w, 1, 1, 40_000);
    let recs: Vec<RiInstructionRecord> = fx
        .groups(0, cycles)
        .iter()
        .map(|g| instruction(g.last().unwrap()))
        .collect();
    assert_eq!(recs.len() as u64, (40_050 - rsic) / sf + 1);
    for (k, rec) in recs.iter().enumerate() {
        let at = rsic + k as u64 * sf;
        assert_eq!(rec.ctx_cycle, at);
        // The block that ran the at-th cycle (cycle at - 1 counted from 0):
        // each iteration runs 100 cycles of block 0, then 30 of block 1.
        let block = u16::from((at - 1) % ITERATION >= 100);
        assert_eq!(
            (rec.kernel, rec.block, rec.flags),
            (0, block, 0),
            "sample at {at}"
        );
    }
    // Instruction mode: the SF-th instruction of each interval.
    let mut fx = Fixture::new();
    let insts = Cb {
        mode: ri_mode::INSTRUCTION,
        sf: 500,
        rla: 64 * 128 - 1,
        ..Cb::cycles(1, 1000, 64)
    };
    fx.arm(0, insts).unwrap();
    let mut w = Walk::new(false);
    let cycles = 20 * ITERATION;
    fx.walk(&mut w, 1, 1, cycles);
    let truth = fx.unit.truth(0).unwrap();
    let retired = 20 * ITERATION_INSTRUCTIONS;
    assert_eq!(truth.sample_points, retired / 500);
    assert_eq!(truth.last_sample_retired, retired / 500 * 500);
    for (k, g) in fx.groups(0, insts).iter().enumerate() {
        // Instruction n retires in the cycle its block's rate puts it at:
        // block 0 runs 50 in 100 cycles, block 1 30 in 30.
        let n = (k as u64 + 1) * 500;
        let (iter, within) = (n / ITERATION_INSTRUCTIONS, n % ITERATION_INSTRUCTIONS);
        let at = iter * ITERATION
            + if within <= 50 {
                within * 2
            } else {
                100 + within - 50
            };
        assert_eq!(
            instruction(g.last().unwrap()).ctx_cycle,
            at,
            "instruction {n}"
        );
    }
}

#[test]
fn the_current_address_advances_a_group_at_a_time_and_wraps_to_the_origin() {
    let mut fx = Fixture::new();
    let size = u32::try_from(group_bytes(2)).unwrap();
    let cb = Cb {
        bits: ri_ctrl::WRAP,
        roa: 2 * size,
        rla: 5 * size - 1,
        ..Cb::cycles(1, 1000, 5)
    };
    fx.arm(0, cb).unwrap();
    assert_eq!(fx.reg(0, r::RI_RCA), u64::from(cb.roa));
    for k in 1..=7u32 {
        fx.unit
            .watching(1)
            .unwrap()
            .sample(point(u64::from(k) * 10, false), false);
        let stored = (k - 1) % 3 + 1;
        assert_eq!(
            fx.reg(0, r::RI_RCA),
            u64::from(cb.roa + stored * size),
            "group {k}"
        );
        assert_eq!(fx.reg(0, r::RI_GROUPS), u64::from(k));
        let span = fx.span(0, cb.rla);
        let b = begin(&span[cb.roa as usize..]);
        assert_eq!((b.kind, b.groups), (ri_record::BEGIN, k), "NRG rewritten");
        assert!(span[..cb.roa as usize].iter().all(|&x| x == 0));
    }
    // Groups 5 and 6 overwrote slots 1 and 2 with timestamp groups; group
    // 7 began again at the origin.
    let g = fx.groups(0, cb);
    assert_eq!(g.len(), 1);
    let span = fx.span(0, cb.rla);
    let slot = |s: u32| &span[(cb.roa + s * size) as usize..];
    assert_eq!(slot(1)[0], ri_record::TIMESTAMP);
    let last = |s: u32| {
        let end = (cb.roa + (s + 1) * size) as usize;
        instruction(span[end - 16..end].try_into().unwrap()).ctx_cycle
    };
    assert_eq!([last(0), last(1), last(2)], [70, 50, 60]);
    // Nothing is kept beyond the limit; the span reads 0 there, and not
    // at all past its end.
    let session = fx.unit.session(0).unwrap();
    assert_eq!(session.memory().len(), cb.rla as usize + 1);
    let mut beyond = [1u8; 16];
    fx.unit
        .read_window(u64::from(cb.rla) + 1, &mut beyond)
        .unwrap();
    assert_eq!(beyond, [0; 16]);
    assert!(fx.unit.read_window(RI_SPAN - 8, &mut beyond).is_none());
}

#[test]
fn suppression_drops_exactly_the_points_at_the_suppressed_capability() {
    let points: Vec<Point> = (1..=20).map(|k| point(k * 100, k % 3 == 0)).collect();
    let mut stored = Vec::new();
    for bits in [0, ri_ctrl::SUPPRESS_PRIMARY, ri_ctrl::SUPPRESS_SECONDARY] {
        let mut fx = Fixture::new();
        let cb = Cb {
            bits,
            ..Cb::cycles(1, 1000, 32)
        };
        fx.arm(0, cb).unwrap();
        for p in &points {
            fx.unit.watching(1).unwrap().sample(*p, false);
        }
        let cycles: Vec<u64> = fx
            .groups(0, cb)
            .iter()
            .map(|g| {
                let rec = instruction(g.last().unwrap());
                let secondary = rec.flags & ri_sample_flags::SECONDARY != 0;
                assert_eq!(secondary, rec.ctx_cycle.is_multiple_of(300));
                rec.ctx_cycle
            })
            .collect();
        stored.push((
            cycles,
            fx.unit.truth(0).unwrap(),
            fx.reg(0, r::RI_SUPPRESSED),
        ));
    }
    let at = |secondary: bool| -> Vec<u64> {
        points
            .iter()
            .filter(|p| p.secondary == secondary)
            .map(|p| p.ctx_cycle)
            .collect()
    };
    assert_eq!(stored[0].0.len(), points.len());
    assert_eq!(stored[1].0, at(true), "Y drops the primary points");
    assert_eq!(stored[2].0, at(false), "Z drops the secondary ones");
    assert_eq!(stored[1].1.suppressed_primary, at(false).len() as u64);
    assert_eq!(stored[2].1.suppressed_secondary, at(true).len() as u64);
    assert_eq!(stored[1].2, at(false).len() as u64);
    for (_, truth, _) in &stored {
        assert_eq!(truth.sample_points, points.len() as u64);
    }
}

#[test]
fn a_context_switched_out_leaves_an_abort_record_only_with_abort_set() {
    for abort in [false, true] {
        let mut fx = Fixture::new();
        let cb = Cb {
            rgs: 3,
            bits: if abort { ri_ctrl::ABORT } else { 0 },
            rla: 16 * 256 - 1,
            ..Cb::cycles(1, 100_000, 1)
        };
        fx.arm(4, cb).unwrap();
        let mut w = Walk::new(false);
        fx.walk(&mut w, 1, 3, 1_234);
        fx.unit.switched_out(1);
        fx.unit.switched_out(2); // another context: no block
        assert_eq!(fx.reg(4, r::RI_COLLECTED), u64::from(abort));
        fx.unit
            .watching(1)
            .unwrap()
            .sample(point(2_000, false), false);
        let g = fx.groups(4, cb);
        check_group(&g[0], 3, true);
        let truth = fx.unit.truth(4).unwrap();
        assert_eq!(truth.aborts, u64::from(abort));
        if abort {
            let rec = RiAbortRecord::read_from_bytes(&g[0][1]).unwrap();
            // Where the walk stood: 1,234 = 9 iterations + 64 cycles into block 0.
            assert_eq!(
                (
                    rec.kind,
                    rec.kernel,
                    rec.block,
                    rec.partition,
                    rec.ctx_cycle
                ),
                (ri_record::ABORT, 0, 0, 3, 1_234)
            );
        }
    }
}

#[test]
fn a_migration_halts_a_session_only_on_a_version_change_or_an_rgs_over_the_limit() {
    for (to, rgs, want) in [
        (3, 2, halt_reason::VERSION),
        (2, 3, halt_reason::RGS_LIMIT),
        (2, 2, halt_reason::NONE),
        (4, 7, halt_reason::NONE),
    ] {
        let mut fx = Fixture::new();
        let cb = Cb {
            rgs,
            bits: ri_ctrl::INTR_ENABLE | ri_ctrl::WRAP | ri_ctrl::EMIT,
            rla: 64 * 4096 - 1,
            ..Cb::cycles(1, 1000, 1)
        };
        fx.arm(5, cb).unwrap();
        // A block of VM 2's context, and a disabled one of VM 1's.
        fx.arm(6, Cb { ctx: 3, ..cb }).unwrap();
        fx.batch(&[(7, r::RI_CTX, 2)]).unwrap();
        fx.unit
            .watching(1)
            .unwrap()
            .sample(point(100, false), false);
        fx.unit.take_events();
        fx.migrate(1, to, 777);
        assert_eq!(
            fx.unit.read_global(r::RI_MIGRATIONS),
            Some(RegValue::R32(1))
        );
        let halted = want != halt_reason::NONE;
        assert_eq!(fx.reg(5, r::RI_HALT_REASON), u64::from(want));
        let status = u32::try_from(fx.reg(5, r::RI_STATUS)).unwrap();
        assert_eq!(
            status & ri_status::HALTED != 0,
            halted,
            "to {to}, RGS {rgs}"
        );
        assert_ne!(
            status & ri_status::ENABLED,
            0,
            "a halted session stays enabled"
        );
        let events = fx.unit.take_events();
        let want_events: Vec<UnitEvent> = if halted {
            vec![(source::RI_HALT, to, 5, want, 777)]
        } else {
            vec![]
        };
        assert_eq!(events, want_events);
        // Other VMs' blocks are untouched.
        assert_eq!(fx.reg(6, r::RI_STATUS), u64::from(ri_status::ENABLED));
        assert_eq!(fx.reg(7, r::RI_STATUS), 0);
        // A halted session stores nothing more and emits nothing.
        let before = fx.unit.truth(5).unwrap();
        fx.batch(&[(5, r::RI_EMIT, 9)]).unwrap();
        fx.unit
            .watching(1)
            .unwrap()
            .sample(point(200, false), false);
        let after = fx.unit.truth(5).unwrap();
        assert_eq!(after.stored, before.stored + u64::from(!halted));
        assert_eq!(after.not_stored, u64::from(halted));
        assert_eq!(after.emits_register, u64::from(!halted));
        let b = begin(&fx.span(5, cb.rla));
        assert_eq!(b.flags & ri_group_flags::HALTED != 0, halted);
    }
}

#[test]
fn re_enabling_a_halted_block_begins_a_fresh_session_on_the_new_slices_version() {
    let mut fx = Fixture::new();
    let cb = Cb {
        bits: ri_ctrl::INTR_ENABLE,
        ..Cb::cycles(1, 2000, 256)
    };
    fx.arm(0, cb).unwrap();
    fx.migrate(1, 3, 10);
    assert_eq!(
        fx.reg(0, r::RI_HALT_REASON),
        u64::from(halt_reason::VERSION)
    );
    fx.batch(&[(0, r::RI_CTRL, cb.ctrl() & !ri_ctrl::ENABLE)])
        .unwrap();
    fx.batch(&[(0, r::RI_CTRL, cb.ctrl())]).unwrap();
    assert_eq!(fx.reg(0, r::RI_STATUS), u64::from(ri_status::ENABLED));
    assert_eq!(fx.reg(0, r::RI_HALT_REASON), u64::from(halt_reason::NONE));
    let mut w = Walk::new(false);
    fx.walk(&mut w, 1, 3, 11_000);
    let b = begin(&fx.span(0, cb.rla));
    assert_eq!(b.version, 2, "the new session began on version 2");
    assert_eq!(fx.reg(0, r::RI_GROUPS), 5);
}

#[test]
fn migration_writes_are_checked_against_the_tables() {
    let mut fx = Fixture::new();
    let bad = |m| Reject::BadValue(m);
    let global =
        |fx: &Fixture, sh: &mut RiShadow, reg, v| fx.unit.check_global(reg, v, sh, fx.tables());
    let mut sh = fx.unit.shadow();
    for vm in [0, 3, MAX_VMS, u32::MAX] {
        assert_eq!(
            global(&fx, &mut sh, r::RI_MIGRATE_VM, vm).unwrap_err(),
            bad("no such VM"),
            "VM {vm}"
        );
    }
    assert_eq!(
        global(&fx, &mut sh, r::RI_MIGRATE, 2).unwrap_err(),
        bad("RI_MIGRATE_VM names no VM")
    );
    assert!(global(&fx, &mut sh, r::RI_MIGRATE_VM, 2).is_ok());
    for to in [0, 5, MAX_PARTITION_SLOTS, u32::MAX] {
        assert_eq!(
            global(&fx, &mut sh, r::RI_MIGRATE, to).unwrap_err(),
            bad("the target partition is not configured"),
            "to {to}"
        );
    }
    assert_eq!(
        global(&fx, &mut sh, r::RI_MIGRATE, 1).unwrap_err(),
        bad("the VM is bound to that partition already")
    );
    assert!(matches!(
        global(&fx, &mut sh, r::RI_MIGRATE, 2),
        Ok(RiWrite::Migrate { vm: 2, to: 2 })
    ));
    for reg in [r::RI_COUNT, r::RI_MIGRATIONS, r::ri_part_version(1)] {
        assert_eq!(global(&fx, &mut sh, reg, 0).unwrap_err(), Reject::ReadOnly);
    }
    // A VM about to run on its partition, then running there, stays.
    assert_eq!(fx.parts.schedule(1, 0, &fx.vms, &fx.ctxs), Some((1, 1)));
    let mut sh = fx.unit.shadow();
    global(&fx, &mut sh, r::RI_MIGRATE_VM, 1).unwrap();
    let busy = bad("the VM is running or about to run on its partition");
    assert_eq!(global(&fx, &mut sh, r::RI_MIGRATE, 2).unwrap_err(), busy);
    let assigned = value(fx.parts.read(1, gpupm_uapi::regs::PART_CCU_ASSIGNED));
    fx.parts.ctx_paused(1);
    fx.parts.transfers_paused(1);
    fx.parts.triggered(1);
    fx.parts.flush_requested(1, vec![(0, assigned)]);
    fx.parts.acks_arrived(1, 0);
    fx.parts.committed(1);
    fx.parts.repointed(1);
    fx.parts.unpaused(1, 0);
    assert_eq!(fx.parts.get(1).current(), (1, 1));
    assert_eq!(global(&fx, &mut sh, r::RI_MIGRATE, 2).unwrap_err(), busy);
    // VM 2 is neither: it may go.
    global(&fx, &mut sh, r::RI_MIGRATE_VM, 2).unwrap();
    assert!(global(&fx, &mut sh, r::RI_MIGRATE, 3).is_ok());
    assert_eq!(
        fx.unit.read_global(r::RI_MIGRATIONS),
        Some(RegValue::R32(0))
    );
}

#[test]
fn the_global_registers_describe_the_unit_and_each_slices_characteristics() {
    let fx = Fixture::new();
    let g = |o| value(fx.unit.read_global(o));
    assert_eq!(g(r::RI_COUNT), u64::from(r::RI_BLOCKS));
    assert_eq!(g(r::RI_MAX_RGS), u64::from(r::RGS_MAX));
    assert_eq!(g(r::RI_SPAN_BYTES), RI_SPAN);
    assert_eq!(
        (g(r::RI_MIGRATE_VM), g(r::RI_MIGRATE), g(r::RI_MIGRATIONS)),
        (0, 0, 0)
    );
    for (p, version, max_rgs) in [(1, 1, 7), (2, 1, 2), (3, 2, 7), (4, 1, 7), (9, 1, 7)] {
        assert_eq!(g(r::ri_part_version(p)), version, "slot {p}");
        assert_eq!(g(r::ri_part_max_rgs(p)), max_rgs, "slot {p}");
        assert_eq!(u64::from(fx.unit.version(p)), version);
    }
    assert_eq!(fx.unit.read_global(r::ri_part_version(0) + 2), None);
    assert_eq!(fx.unit.read(r::RI_BLOCKS, r::RI_CTX), None);
}

#[test]
fn a_released_context_ends_and_unbinds_its_block() {
    let mut fx = Fixture::new();
    fx.arm(3, Cb::cycles(2, 1000, 4)).unwrap();
    assert!(fx.unit.armed());
    assert_eq!(fx.unit.block_of(2), Some(3));
    fx.unit.released(1); // no block
    assert!(fx.unit.armed());
    fx.unit.released(2);
    assert!(!fx.unit.armed());
    assert_eq!(fx.unit.block_of(2), None);
    assert!(fx.unit.watching(2).is_none());
    assert_eq!([fx.reg(3, r::RI_CTX), fx.reg(3, r::RI_STATUS)], [0, 0]);
    // The block can be bound again, to the context's id reused or another.
    fx.arm(3, Cb::cycles(2, 1000, 4)).unwrap();
    assert_eq!(fx.unit.block_of(2), Some(3));
    fx.unit.reset();
    assert!(!fx.unit.armed());
    assert_eq!(fx.unit.block_of(2), None);
}
