//! Programs and sampling units against the ledger: programs drive
//! `sm_inst_executed` exactly, both engines agree with samplers armed,
//! records are consistent (blocks exist, cycles monotone, none while a
//! context is paused, losses exact, sealed exactly for confidential VMs),
//! bad register writes change nothing, and PC samples estimate CPI well
//! with a dithered period and badly with a fixed one on a resonant loop.

#![allow(clippy::cast_possible_truncation)] // 32-bit register values are read as u64

mod common;

use common::sampling::*;
use common::*;
use gpupm_driver::host::Host;
use gpupm_driver::model::{Device, EngineKind};
use gpupm_driver::scenario::Scenario;
use gpupm_uapi::intr::{source, InterruptRecord};
use gpupm_uapi::ioctl::ledger_scope;
use gpupm_uapi::regs::{self as r, hs_state, part_ctrl};
use gpupm_uapi::sampling::{self as s, buf_kind, samp};
use proptest::prelude::*;

const INST: usize = 3;
const CYCLES: usize = 0;

fn run(dev: &mut Device, host: &mut Host, total: u64, step: u64) {
    let end = dev.now() + total;
    while dev.now() < end {
        dev.advance(step.min(end - dev.now())).unwrap();
        host.service(dev).unwrap();
    }
}

fn key_of(s: &Scenario, vm: u32) -> Option<[u8; 32]> {
    s.vms.iter().find(|v| v.id == vm).and_then(|v| v.confidential_key)
}

/// For every live context running a program: its `sm_cycles_elapsed` is
/// S × its context cycles and its `sm_inst_executed` is S × the sum of its
/// per-block instructions; the rows' cycles add up to its context cycles.
fn assert_programs_match_ledger(dev: &mut Device, s: &Scenario) -> usize {
    let ctxs: Vec<_> = dev.contexts().collect();
    let mut checked = 0;
    for (id, vm, _) in ctxs {
        if dev.read_reg(r::ctx(id, r::CTX_PROGRAM), 4).unwrap() == 0 {
            continue;
        }
        let (rows, ctx_cycles) = truth(dev, id, key_of(s, vm).as_ref());
        let l = dev.ledger_totals(ledger_scope::CONTEXT, id).unwrap();
        assert_eq!(rows.iter().map(|r| r.cycles).sum::<u64>(), ctx_cycles, "ctx {id}");
        if ctx_cycles == 0 {
            continue;
        }
        assert_eq!(l.generated[CYCLES] % ctx_cycles, 0, "ctx {id}");
        let sms = l.generated[CYCLES] / ctx_cycles;
        let insts: u64 = rows.iter().map(|r| r.instructions).sum();
        assert_eq!(l.generated[INST], sms * insts, "ctx {id}: sm_inst_executed != SMs × program");
        checked += 1;
    }
    checked
}

#[test]
fn programs_drive_sm_inst_executed_exactly_and_blocks_stay_exact() {
    let s = gpupm_driver::scenario::builtin();
    let mut dev = device(&s, EngineKind::Batched);
    let mut host = Host::new();
    host.release_destroyed = false;
    arm(&mut dev, 2, Arm { pc_cap: 1 << 12, branch_cap: 256, period: 4096, dither: 255, n: 64 });
    run(&mut dev, &mut host, 30_000_000, 1_000_000);
    let checked = assert_programs_match_ledger(&mut dev, &s);
    assert!(checked >= 5, "only {checked} program contexts");
    gpupm_driver::host::flush_all(&mut dev).unwrap();
    assert_blocks_match_ledger(&mut dev, &s);
}

fn sample_digest(dev: &mut Device, s: &Scenario) -> Vec<u8> {
    let mut out = digest(dev);
    for p in [1, 2] {
        for kind in [buf_kind::BRANCH, buf_kind::PC] {
            slots(dev, p, kind).iter().for_each(|b| out.extend_from_slice(b));
        }
    }
    let ctxs: Vec<_> = dev.contexts().collect();
    for (id, vm, _) in ctxs {
        let (rows, c) = truth(dev, id, key_of(s, vm).as_ref());
        out.extend_from_slice(&c.to_le_bytes());
        rows.iter().for_each(|r| out.extend_from_slice(zerocopy::IntoBytes::as_bytes(r)));
    }
    out
}

#[test]
fn engines_agree_bit_for_bit_with_programs_and_samplers_armed() {
    let s = small_with_programs();
    let mut devs = [device(&s, EngineKind::Batched), device(&s, EngineKind::CycleLevel)];
    let mut hosts = [Host::new(), Host::new()];
    let a = Arm { pc_cap: 64, branch_cap: 8, period: 300, dither: 255, n: 3 };
    for (dev, host) in devs.iter_mut().zip(&mut hosts) {
        host.release_destroyed = false;
        arm(dev, 1, a);
        arm(dev, 2, Arm { dither: 0, ..a });
        for step in [1, 777, 5_000, 1, 20_000, 3, 60_000, 511, 9_999] {
            dev.advance(step).unwrap();
            host.service(dev).unwrap();
        }
    }
    let [b, c] = &mut devs;
    assert_eq!(b.counting_snapshot(), c.counting_snapshot());
    assert_eq!(sample_digest(b, &s), sample_digest(c, &s));
    assert!(b.read_reg(samp(1, s::SAMP_CYCLE_SAMPLES), 8).unwrap() > 50);
}
