//! Random `perf_event_open` configs against the gpupm PMU.
//!
//! Unprivileged (`--as-uid`): every call must fail (the PMU serves every
//! tenant's counters, so it refuses callers without CAP_PERFMON even when
//! `perf_event_paranoid` lets them through to it). As root: every config
//! must get exactly the answer an independent model of the PMU's rules
//! predicts (success, EINVAL, EOPNOTSUPP); configs outside the model
//! (odd sizes, flags, pids, foreign types) must merely not crash anything.

use std::collections::BTreeMap;

use gpupm_uapi::events::{self, Scope, EVENT_COUNT, MAX_EVENTS};
use gpupm_uapi::pmu::{
    scope, CONFIG1_USED, CONFIG_USED, FIELD_CTX, FIELD_EVENT, FIELD_SCOPE, FIELD_VM,
};
use gpupm_uapi::regs::{MAX_CONTEXTS, MAX_VMS};
use nix::errno::Errno;
use perf_event_open_sys::bindings::perf_event_attr;

use gpupm_client::splitmix::SplitMix64 as Rng;

use crate::pmu::Pmu;
use crate::sys;

/// True in `percent` % of the draws from `rng`.
fn chance(rng: &mut Rng, percent: u64) -> bool {
    rng.below(100) < percent
}

/// One generated call.
struct Case {
    attr: perf_event_attr,
    pid: i32,
    cpu: i32,
    /// Within the model: its expected result.
    expect: Option<Result<(), Errno>>,
}

fn small_or_wild(rng: &mut Rng, small: u64) -> u64 {
    match rng.below(10) {
        0 => rng.next_u64(),
        1 => 0,
        _ => rng.below(small),
    }
}

fn generate(rng: &mut Rng, pmu: &Pmu, cpus: i32) -> Case {
    let in_model = chance(rng, 80);
    let mut attr = perf_event_attr {
        type_: pmu.kind,
        size: sys::attr_size(),
        ..Default::default()
    };
    let event = small_or_wild(rng, EVENT_COUNT as u64 + 8);
    let scope_v = small_or_wild(rng, 6);
    let vm = if chance(rng, 50) {
        small_or_wild(rng, u64::from(MAX_VMS) + 4)
    } else {
        0
    };
    let ctx = if chance(rng, 30) {
        small_or_wild(rng, u64::from(MAX_CONTEXTS) + 4)
    } else {
        0
    };
    attr.config = FIELD_EVENT.put(event) | FIELD_SCOPE.put(scope_v);
    attr.__bindgen_anon_3.config1 = FIELD_VM.put(vm) | FIELD_CTX.put(ctx);
    if chance(rng, 5) {
        attr.config |= rng.next_u64() & !CONFIG_USED;
    }
    if chance(rng, 5) {
        attr.__bindgen_anon_3.config1 = sys::config1(&attr) | (rng.next_u64() & !CONFIG1_USED);
    }
    if chance(rng, 3) {
        attr.__bindgen_anon_4.config2 = rng.next_u64();
    }
    if chance(rng, 15) {
        attr.__bindgen_anon_1.sample_period = 1 + rng.below(1_000_000);
    }
    if chance(rng, 10) {
        attr.set_exclude_user(1);
    }
    attr.set_disabled(u64::from(chance(rng, 30)));
    let pid = if chance(rng, 15) { 0 } else { -1 };
    let cpu = if pid == 0 && chance(rng, 50) {
        -1
    } else {
        i32::try_from(rng.below(cpus as u64)).unwrap_or(0)
    };
    if !in_model {
        match rng.below(5) {
            0 => attr.type_ = u32::try_from(rng.below(64)).unwrap_or(0),
            1 => attr.size = u32::try_from(rng.below(200)).unwrap_or(0),
            2 => attr.__bindgen_anon_1.sample_period = rng.next_u64(),
            3 => attr.read_format = rng.next_u64(),
            _ => attr.set_inherit(1),
        }
        return Case {
            attr,
            pid,
            cpu: if chance(rng, 20) {
                i32::try_from(rng.below(64)).unwrap_or(0) - 2
            } else {
                cpu
            },
            expect: None,
        };
    }
    let expect = Some(model(&attr, pid));
    Case {
        attr,
        pid,
        cpu,
        expect,
    }
}

/// The PMU's rules, written from `uapi/src/pmu.rs`, for a root caller.
fn model(attr: &perf_event_attr, pid: i32) -> Result<(), Errno> {
    // `freq` is never set, so the union word is a sample period.
    if sys::sample_period(attr) != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    if pid != -1 {
        return Err(Errno::EINVAL);
    }
    if attr.config & !CONFIG_USED != 0
        || sys::config1(attr) & !CONFIG1_USED != 0
        || sys::config2(attr) != 0
    {
        return Err(Errno::EINVAL);
    }
    let event = FIELD_EVENT.get(attr.config);
    let (vm, ctx) = (
        FIELD_VM.get(sys::config1(attr)),
        FIELD_CTX.get(sys::config1(attr)),
    );
    let mut kind = u32::try_from(FIELD_SCOPE.get(attr.config)).unwrap_or(u32::MAX);
    if event >= EVENT_COUNT as u64 {
        return Err(Errno::EINVAL);
    }
    if kind == scope::IMPLIED {
        kind = if ctx != 0 {
            scope::CONTEXT
        } else if vm != 0 {
            scope::VM
        } else {
            scope::SYSTEM
        };
    }
    let device_only = events::by_id(u16::try_from(event).unwrap_or(u16::MAX))
        .is_some_and(|e| e.unit.scope() == Scope::Device);
    let ok = match kind {
        scope::SYSTEM => vm == 0 && ctx == 0,
        scope::VM => !device_only && ctx == 0 && (1..u64::from(MAX_VMS)).contains(&vm),
        scope::CONTEXT => !device_only && vm == 0 && (1..u64::from(MAX_CONTEXTS)).contains(&ctx),
        _ => false,
    };
    if !ok {
        return Err(Errno::EINVAL);
    }
    // The core refuses exclude bits on a PERF_PMU_CAP_NO_EXCLUDE PMU after
    // the PMU accepted the event.
    if attr.exclude_user() != 0 {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// Runs `n` cases from `seed`; `Err` describes the first mismatch.
pub fn run(n: u64, seed: u64, unprivileged: bool) -> Result<(), String> {
    let pmu = Pmu::find()?;
    let cpus =
        i32::try_from(std::thread::available_parallelism().map_or(1, |n| n.get())).unwrap_or(1);
    let mut rng = Rng(seed);
    let mut errnos: BTreeMap<String, u64> = BTreeMap::new();
    let (mut opened, mut modelled) = (0u64, 0u64);
    for i in 0..n {
        let case = generate(&mut rng, &pmu, cpus);
        let got = sys::perf_open(&case.attr, case.pid, case.cpu, 0);
        let key = match &got {
            Ok(_) => "ok".to_string(),
            Err(e) => format!("{e:?}"),
        };
        *errnos.entry(key).or_default() += 1;
        if got.is_ok() {
            opened += 1;
            if unprivileged && case.attr.type_ == pmu.kind {
                return Err(format!(
                    "case {i}: an unprivileged caller opened {:?}",
                    describe(&case)
                ));
            }
        }
        if let (false, Some(want)) = (unprivileged, case.expect) {
            modelled += 1;
            let got = got.map(drop);
            if got != want {
                return Err(format!(
                    "case {i}: {} got {got:?}, the model says {want:?}",
                    describe(&case)
                ));
            }
        }
    }
    let summary: Vec<String> = errnos.iter().map(|(k, v)| format!("{k}:{v}")).collect();
    let mode = if unprivileged { "unprivileged" } else { "root" };
    println!("@@gpupm metric fuzz_{mode}_cases={n}");
    println!("@@gpupm metric fuzz_{mode}_opened={opened}");
    println!("@@gpupm metric fuzz_{mode}_modelled={modelled}");
    println!("@@gpupm metric fuzz_{mode}_results={}", summary.join(","));
    Ok(())
}

fn describe(c: &Case) -> String {
    format!(
        "type={} size={} config={:#x} config1={:#x} config2={:#x} period={} excl_user={} pid={} cpu={}",
        c.attr.type_,
        c.attr.size,
        c.attr.config,
        sys::config1(&c.attr),
        sys::config2(&c.attr),
        sys::sample_period(&c.attr),
        c.attr.exclude_user(),
        c.pid,
        c.cpu
    )
}

const _: () = assert!(EVENT_COUNT < MAX_EVENTS);
