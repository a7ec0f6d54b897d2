//! The out-of-band reduction channel (`docs/oob.md`) in
//! process: its blocks equal the ledger at an OOB flush whatever the host
//! does (services switches or not, turns its triggers off, masks counters,
//! resets the device), with both engines, bit for bit alike; OOB reads
//! leave everything host-visible as it was, and the channel's own triggers
//! and flushes write no byte of the window; no OOB answer depends on a
//! confidential VM's workload. The mailbox's own behaviour (bad inputs,
//! torn reads, busy, enumeration, idle, host state) is in
//! `model_oob_mailbox.rs`.

use gpupm_driver::host::{self, Host};
use gpupm_driver::model::{Device, EngineKind};
use gpupm_driver::scenario::Scenario;
use gpupm_test_support::model::oob::{
    assert_oob_matches_ledger, oob, oob_flush, read_oob_block, OobOracle,
};
use gpupm_test_support::model::{device, small_scenario};
use gpupm_uapi::events::{EVENT_COUNT, MAX_EVENTS};
use gpupm_uapi::ioctl::ledger_scope;
use gpupm_uapi::layout::{self, CTX_BLOCK_SLOTS, CTX_BLOCK_SLOT_BASE};
use gpupm_uapi::regs::{self as r, mbox_op, mbox_status, oob_scope, trig_ctrl};

/// The confidential VM of the small scenario.
const CONFIDENTIAL_VM: u32 = 3;

/// The small scenario with an OOB period short enough to commit a few
/// times in a test's run.
fn scenario() -> Scenario {
    let mut s = small_scenario();
    s.oob.period_cycles = 60_000;
    s
}

fn reg32(dev: &Device, offset: u64) -> u32 {
    u32::try_from(dev.read_reg(offset, 4).unwrap()).unwrap()
}

/// Masks every other counter of every CCU (the host's sampling choice).
fn mask_half(dev: &mut Device) {
    for c in 0..reg32(dev, r::TOPO_CCUS) {
        let n = reg32(dev, r::ccu(c, r::CCU_COUNTERS));
        for w in 0..n.div_ceil(32) {
            dev.write_reg(r::ccu(c, r::CCU_MASK_INDEX), 4, u64::from(w))
                .unwrap();
            let valid = if (w + 1) * 32 <= n {
                u32::MAX
            } else {
                (1 << (n - w * 32)) - 1
            };
            dev.write_reg(
                r::ccu(c, r::CCU_MASK_DATA),
                4,
                u64::from(0x5555_5555 & valid),
            )
            .unwrap();
        }
    }
}

/// What the host does between checks.
#[derive(Clone, Copy, Debug)]
enum HostMood {
    /// Services every switch and drains.
    Serving,
    /// Never answers: every switch completes by the device's fallback.
    Gone,
    /// Turns periodic triggers off and masks counters, and services.
    Meddling,
}

fn run(dev: &mut Device, host: &mut Host, mood: HostMood, cycles: u64) {
    let end = dev.now() + cycles;
    while dev.now() < end {
        dev.advance(5_000.min(end - dev.now())).unwrap();
        if !matches!(mood, HostMood::Gone) {
            host.service(dev).unwrap();
        }
    }
}

/// Runs `s` through every host mood, a host reset and the checks; returns
/// the device for the engines' comparison.
fn exercise(s: &Scenario, engine: EngineKind) -> Device {
    let mut dev = device(s, engine);
    let mut host = Host::new();
    let mut oracle = OobOracle::default();
    let moods = [
        HostMood::Serving,
        HostMood::Gone,
        HostMood::Meddling,
        HostMood::Serving,
    ];
    for (i, mood) in moods.into_iter().enumerate() {
        if let HostMood::Meddling = mood {
            dev.write_reg(r::TRIG_CTRL, 4, u64::from(trig_ctrl::THRESHOLD_ENABLE))
                .unwrap();
            mask_half(&mut dev);
        }
        run(&mut dev, &mut host, mood, 230_000);
        let when = format!("{engine:?} step {i} ({mood:?})");
        assert_oob_matches_ledger(&mut dev, s, &oracle, &when);
        if i == 1 {
            // A host reset: the ledger restarts; the OOB channel does not.
            oracle = oracle.now(&mut dev, s);
            let resets = oob(&mut dev, mbox_op::OOB_DEVICE_INFO, 0, 0).1[2];
            dev.reset().unwrap();
            assert_eq!(
                oob(&mut dev, mbox_op::OOB_DEVICE_INFO, 0, 0).1[2],
                resets + 1,
                "the channel counts the reset it carried its counts across"
            );
            let when = format!("{engine:?} after the reset");
            assert_oob_matches_ledger(&mut dev, s, &oracle, &when);
        }
    }
    dev
}

#[test]
fn every_oob_block_equals_the_ledger_at_an_oob_flush_whatever_the_host_does() {
    let s = scenario();
    let mut batched = exercise(&s, EngineKind::Batched);
    let mut reference = exercise(&s, EngineKind::CycleLevel);
    let ids = [
        (oob_scope::SYSTEM, 0),
        (oob_scope::VM, 1),
        (oob_scope::VM, 2),
    ];
    for (scope, id) in ids {
        assert_eq!(
            read_oob_block(&mut batched, scope, id),
            read_oob_block(&mut reference, scope, id),
            "engines differ on block ({scope}, {id})"
        );
    }
    let (_, info) = oob(&mut batched, mbox_op::OOB_CHANNEL_INFO, 0, 0);
    // Five flushes and a reset drain; 920,000 cycles at a 60,000-cycle
    // period add 15 periodic commits.
    assert_eq!(info[3], 5, "flushes completed");
    assert_eq!(
        info[0],
        5 + 1 + 15,
        "generation: flushes, the drain, periodic commits"
    );
    assert_eq!(info[2], 60_000);
}

#[test]
fn the_oob_channel_counts_what_host_masks_discard() {
    let s = scenario();
    let mut dev = device(&s, EngineKind::Batched);
    let mut host = Host::new();
    mask_half(&mut dev);
    run(&mut dev, &mut host, HostMood::Serving, 200_000);
    oob_flush(&mut dev);
    host::flush_all(&mut dev).unwrap();
    let ledger = dev.ledger_totals(ledger_scope::VM, 1).unwrap();
    let host_block = dev.block(1).counters;
    let oob_block = read_oob_block(&mut dev, oob_scope::VM, 1).unwrap();
    assert_eq!(
        host_block,
        ledger.expected_committed(),
        "the host sees its masked view"
    );
    assert!(ledger.masked.iter().sum::<u64>() > 0);
    for e in 0..MAX_EVENTS {
        assert_eq!(oob_block[e], host_block[e] + ledger.masked[e], "event {e}");
    }
}

/// Every register the host reads (all but the OOB mailbox's own, which
/// `card0` does not reach), and the whole window: block slots and rings.
fn host_view(dev: &Device) -> (Vec<u8>, Vec<u8>) {
    let mut regs = Vec::new();
    for off in (0..r::BAR0_SIZE).step_by(4) {
        let oob_block = r::OOB_MAILBOX_REGS.range();
        if (oob_block.0..oob_block.1).contains(&off) {
            continue;
        }
        if let Ok(v) = dev.read_reg(off, 4) {
            regs.extend_from_slice(&off.to_le_bytes());
            regs.extend_from_slice(&v.to_le_bytes());
        }
    }
    let slots = u64::from(CTX_BLOCK_SLOT_BASE + CTX_BLOCK_SLOTS) * layout::BLOCK_SLOT_SIZE;
    let mut window = vec![0u8; usize::try_from(slots).unwrap()];
    dev.read_window(0, &mut window).unwrap();
    for p in 0..r::MAX_PARTITION_SLOTS {
        let Ok(cap) = dev.read_reg(r::part(p, r::PART_STREAM_CAP), 4) else {
            continue;
        };
        let mut ring = vec![0u8; usize::try_from(cap * layout::STREAM_SLOT_SIZE).unwrap()];
        if dev
            .read_window(layout::stream_slot_offset(p, 0), &mut ring)
            .is_ok()
        {
            window.extend_from_slice(&ring);
        }
    }
    (regs, window)
}

/// Every OOB command that only reads.
fn read_everything(dev: &mut Device) {
    for op in [
        mbox_op::GET_CAPS,
        mbox_op::READ_SYSTEM_COUNTER,
        mbox_op::READ_IDLE_CYCLES,
        mbox_op::READ_CYCLE,
        mbox_op::READ_FALLBACKS,
        mbox_op::OOB_CHANNEL_INFO,
        mbox_op::OOB_NEXT_VM,
        mbox_op::OOB_NEXT_CONTEXT,
        mbox_op::OOB_READ_IDLE,
        mbox_op::OOB_HOST_STATE,
        mbox_op::OOB_DEVICE_INFO,
    ] {
        oob(dev, op, 0, 0);
    }
    for vm in 1..=3 {
        read_oob_block(dev, oob_scope::VM, vm);
    }
    read_oob_block(dev, oob_scope::SYSTEM, 0);
    let ids: Vec<u32> = dev.contexts().map(|c| c.0).collect();
    for id in ids {
        read_oob_block(dev, oob_scope::CONTEXT, id);
    }
}

#[test]
fn oob_reads_change_nothing_the_host_sees_and_allocate_no_window_byte() {
    let s = scenario();
    let mut dev = device(&s, EngineKind::Batched);
    let mut host = Host::new();
    run(&mut dev, &mut host, HostMood::Serving, 150_000);
    let before = host_view(&dev);
    for _ in 0..3 {
        read_everything(&mut dev);
    }
    let after = host_view(&dev);
    assert!(after.0 == before.0, "OOB reads changed a host register");
    assert!(after.1 == before.1, "OOB reads changed the window");
    assert_eq!(after.1.len(), before.1.len(), "the window's size");
}

/// Two devices alike but for the OOB traffic `oob_side` makes on the
/// first, both run by `host` actions alike: the host-visible window of
/// both, after `settle`.
fn twins(
    s: &Scenario,
    mut oob_side: impl FnMut(&mut Device),
    settle: impl Fn(&mut Device, &mut Host),
) -> [(Vec<u8>, Vec<u8>); 2] {
    let mut out = [(Vec::new(), Vec::new()), (Vec::new(), Vec::new())];
    for (i, view) in out.iter_mut().enumerate() {
        let mut dev = device(s, EngineKind::Batched);
        let mut host = Host::new();
        for _ in 0..4 {
            run(&mut dev, &mut host, HostMood::Serving, 47_000);
            if i == 0 {
                oob_side(&mut dev);
            } else {
                dev.advance(u64::from(r::FLUSH_ACK_MAX_CYCLES)).unwrap();
            }
            settle(&mut dev, &mut host);
        }
        *view = host_view(&dev);
    }
    out
}

#[test]
fn the_oob_channels_own_trigger_writes_no_window_byte() {
    // The same device with its OOB channel committing every 20,000 cycles
    // and (all but) never: the host's window is byte for byte the same.
    let mut often = scenario();
    often.oob.period_cycles = 20_000;
    let mut never = scenario();
    never.oob.period_cycles = u64::MAX / 2;
    let views = [often, never].map(|s| {
        let mut dev = device(&s, EngineKind::Batched);
        let mut host = Host::new();
        run(&mut dev, &mut host, HostMood::Serving, 400_000);
        let commits = oob(&mut dev, mbox_op::OOB_CHANNEL_INFO, 0, 0).1[0];
        (host_view(&dev).1, commits)
    });
    assert_eq!(views[0].1, 20, "the OOB channel committed");
    assert_eq!(views[1].1, 0);
    assert!(
        views[0].0 == views[1].0,
        "the OOB trigger changed the window"
    );
}

#[test]
fn an_oob_flush_writes_no_window_byte_and_the_hosts_blocks_end_as_without_it() {
    let mut s = scenario();
    // No periodic host commit between a flush and its completion.
    s.trigger.period_cycles = 0;
    let flush = |dev: &mut Device| oob_flush(dev);
    let [with, without] = twins(&s, flush, |_, _| {});
    assert!(with.1 == without.1, "an OOB flush wrote the window");
    // With the host's own flushes after each: every block alike too.
    let settle = |dev: &mut Device, host: &mut Host| {
        host.service(dev).unwrap();
        host::flush_all(dev).unwrap();
    };
    let [with, without] = twins(&s, flush, settle);
    let slots =
        usize::try_from(u64::from(CTX_BLOCK_SLOT_BASE + CTX_BLOCK_SLOTS) * layout::BLOCK_SLOT_SIZE)
            .unwrap();
    assert!(
        with.1[..slots] == without.1[..slots],
        "the host's blocks differ after its flush"
    );
}

/// Every OOB answer, in order: enumerations, every block, idle, info.
fn oob_answers(dev: &mut Device) -> Vec<(u32, [u64; 4])> {
    let mut out = Vec::new();
    for op in [
        mbox_op::OOB_CHANNEL_INFO,
        mbox_op::OOB_READ_IDLE,
        mbox_op::GET_CAPS,
        mbox_op::OOB_DEVICE_INFO,
        mbox_op::OOB_HOST_STATE,
    ] {
        out.push(oob(dev, op, 0, 0));
    }
    for e in 0..u32::try_from(EVENT_COUNT).unwrap() {
        out.push(oob(dev, mbox_op::READ_SYSTEM_COUNTER, e, 0));
    }
    let mut after = 0;
    loop {
        let a = oob(dev, mbox_op::OOB_NEXT_VM, after, 0);
        out.push(a);
        if a.0 != mbox_status::OK {
            break;
        }
        after = u32::try_from(a.1[0]).unwrap();
        out.push(oob(dev, mbox_op::OOB_NEXT_CONTEXT, 0, after));
    }
    let mut after = 0;
    loop {
        let a = oob(dev, mbox_op::OOB_NEXT_CONTEXT, after, 0);
        out.push(a);
        if a.0 != mbox_status::OK {
            break;
        }
        after = u32::try_from(a.1[0]).unwrap();
        if let Some(c) = read_oob_block(dev, oob_scope::CONTEXT, after) {
            out.extend(c.iter().map(|&v| (0, [v, 0, 0, 0])));
        }
    }
    for id in 1..16 {
        out.push(oob(dev, mbox_op::OOB_SNAPSHOT, id, oob_scope::CONTEXT));
    }
    for (scope, id) in [
        (oob_scope::SYSTEM, 0),
        (oob_scope::VM, 1),
        (oob_scope::VM, 2),
        (oob_scope::VM, CONFIDENTIAL_VM),
    ] {
        out.push(oob(dev, mbox_op::OOB_SNAPSHOT, id, scope));
        if let Some(b) = read_oob_block(dev, scope, id) {
            out.extend(b.iter().map(|&v| (0, [v, 0, 0, 0])));
        }
    }
    out
}

/// Every OOB answer over three runs, each before and after an OOB flush,
/// and the ledger's total of what VM `vm` generated.
fn answers(s: &Scenario, vm: u32) -> (Vec<(u32, [u64; 4])>, u64) {
    let mut dev = device(s, EngineKind::Batched);
    let mut host = Host::new();
    let mut out = Vec::new();
    for _ in 0..3 {
        run(&mut dev, &mut host, HostMood::Serving, 120_000);
        out.extend(oob_answers(&mut dev));
        oob_flush(&mut dev);
        out.extend(oob_answers(&mut dev));
    }
    let generated = dev.ledger_totals(ledger_scope::VM, vm).unwrap().generated;
    (out, generated.iter().sum())
}

/// The small scenario with the contexts of `vm` running the light profile
/// instead of the busy one.
fn lighter(vm: u32) -> Scenario {
    let mut s = scenario();
    for c in s.contexts.iter_mut().filter(|c| c.vm == vm) {
        c.profile = 1;
    }
    s
}

#[test]
fn a_bmc_learns_nothing_of_a_confidential_vms_counters() {
    let (busy, generated_busy) = answers(&scenario(), CONFIDENTIAL_VM);
    let (idle, generated_idle) = answers(&lighter(CONFIDENTIAL_VM), CONFIDENTIAL_VM);
    assert_ne!(generated_busy, generated_idle, "the two workloads differ");
    assert_eq!(busy.len(), idle.len());
    let first = busy.iter().zip(&idle).position(|(x, y)| x != y);
    assert_eq!(first, None, "an OOB answer differs at {first:?}");
    // The same comparison sees a plain VM's workload: it would see a leak.
    let (plain, _) = answers(&lighter(1), 1);
    assert!(
        plain.len() != busy.len() || plain != busy,
        "the answers do not depend on a plain VM's workload either"
    );
}
