//! The OOB mailbox's commands (`docs/oob.md`) in process: every malformed
//! request answers a clear status and changes nothing; a multi-word read
//! torn by another snapshot is detected, an untorn one is a consistent
//! snapshot; one flush at a time; enumeration; the channel's own
//! schedule; idle time and how often; the host driver's state; the
//! clock, resets and partitions.

use gpupm_driver::host::Host;
use gpupm_driver::model::oob::host::HostEvent;
use gpupm_driver::model::{Device, EngineKind};
use gpupm_driver::scenario::Scenario;
use gpupm_test_support::model::oob::{created, oob, oob_flush, read_oob_block};
use gpupm_test_support::model::{device, small_scenario};
use gpupm_uapi::events::EVENT_COUNT;
use gpupm_uapi::regs::{
    self as r, mbox_op, mbox_status, oob_ctx_state, oob_host_state, oob_scope, oob_vm_flags,
    trig_ctrl,
};

/// The confidential VM of the small scenario.
const CONFIDENTIAL_VM: u32 = 3;

fn scenario() -> Scenario {
    let mut s = small_scenario();
    s.oob.period_cycles = 60_000;
    s.oob.host_timeout_cycles = 100_000;
    s
}

fn run(dev: &mut Device, host: &mut Host, cycles: u64) {
    let end = dev.now() + cycles;
    while dev.now() < end {
        dev.advance(5_000.min(end - dev.now())).unwrap();
        host.service(dev).unwrap();
    }
}

fn seq(dev: &Device) -> u64 {
    dev.read_reg(r::OOB_MBOX_SEQ, 4).unwrap()
}

/// Everything but the OOB mailbox's own result registers: every other
/// register, the window, the OOB blocks and the channel's state.
fn everything(dev: &Device) -> String {
    let mut regs = Vec::new();
    for off in (0..r::BAR0_SIZE).step_by(4) {
        if (r::OOB_MBOX_STATUS..r::OOB_MBOX_DATA + 8).contains(&off)
            || (r::OOB_MBOX_DATA1..r::OOB_MBOX_DATA3 + 8).contains(&off)
        {
            continue;
        }
        regs.push(dev.read_reg(off, 4).ok());
    }
    let mut window = vec![0u8; 1 << 20];
    dev.read_window(0, &mut window).unwrap();
    let blocks: Vec<_> = dev
        .contexts()
        .map(|c| dev.oob_block(oob_scope::CONTEXT, c.0).cloned())
        .chain((0..4).map(|vm| dev.oob_block(oob_scope::VM, vm).cloned()))
        .chain([dev.oob_block(oob_scope::SYSTEM, 0).cloned()])
        .collect();
    format!("{regs:?}{window:?}{blocks:?}{:?}", dev.oob_info())
}

#[test]
fn every_malformed_oob_request_answers_its_status_and_changes_nothing() {
    let s = scenario();
    let mut dev = device(&s, EngineKind::Batched);
    let mut host = Host::new();
    run(&mut dev, &mut host, 150_000);
    oob_flush(&mut dev);
    oob(&mut dev, mbox_op::OOB_SNAPSHOT, 0, oob_scope::SYSTEM);
    let (status, snap) = oob(&mut dev, mbox_op::OOB_SNAPSHOT, 1, oob_scope::VM);
    assert_eq!(status, mbox_status::OK);
    let tag = u32::try_from(snap[0]).unwrap();
    assert_eq!(tag, 2, "the second snapshot");
    let latched = oob(&mut dev, mbox_op::OOB_READ_LATCH, 0, tag).1;
    let ev = u32::try_from(EVENT_COUNT).unwrap();
    let conf_ctx = dev.contexts().find(|c| c.1 == CONFIDENTIAL_VM).unwrap().0;
    let cases: &[(&str, u32, u32, u32, u32)] = &[
        ("opcode 0", 0, 0, 0, mbox_status::ERR_OPCODE),
        ("an unknown opcode", 0x7E, 0, 0, mbox_status::ERR_OPCODE),
        (
            "an opcode between the host's and the OOB ones",
            0x0F,
            0,
            0,
            mbox_status::ERR_OPCODE,
        ),
        (
            "an opcode past the OOB ones",
            0x19,
            0,
            0,
            mbox_status::ERR_OPCODE,
        ),
        (
            "READ_SYSTEM_COUNTER past the events",
            mbox_op::READ_SYSTEM_COUNTER,
            ev,
            0,
            mbox_status::ERR_ARG,
        ),
        (
            "NEXT_VM past the VM ids",
            mbox_op::OOB_NEXT_VM,
            r::MAX_VMS,
            0,
            mbox_status::ERR_ARG,
        ),
        (
            "NEXT_CONTEXT past the context ids",
            mbox_op::OOB_NEXT_CONTEXT,
            r::MAX_CONTEXTS,
            0,
            mbox_status::ERR_ARG,
        ),
        (
            "NEXT_CONTEXT with a VM filter past the ids",
            mbox_op::OOB_NEXT_CONTEXT,
            0,
            r::MAX_VMS,
            mbox_status::ERR_ARG,
        ),
        (
            "NEXT_CONTEXT of a VM that does not exist",
            mbox_op::OOB_NEXT_CONTEXT,
            0,
            9,
            mbox_status::ERR_NOT_FOUND,
        ),
        (
            "NEXT_CONTEXT of the confidential VM",
            mbox_op::OOB_NEXT_CONTEXT,
            0,
            CONFIDENTIAL_VM,
            mbox_status::ERR_CONFIDENTIAL,
        ),
        (
            "SNAPSHOT of an unknown scope",
            mbox_op::OOB_SNAPSHOT,
            0,
            3,
            mbox_status::ERR_ARG,
        ),
        (
            "SNAPSHOT of the system with an id",
            mbox_op::OOB_SNAPSHOT,
            1,
            oob_scope::SYSTEM,
            mbox_status::ERR_ARG,
        ),
        (
            "SNAPSHOT of VM 0",
            mbox_op::OOB_SNAPSHOT,
            0,
            oob_scope::VM,
            mbox_status::ERR_ARG,
        ),
        (
            "SNAPSHOT of a VM id past the table",
            mbox_op::OOB_SNAPSHOT,
            r::MAX_VMS,
            oob_scope::VM,
            mbox_status::ERR_ARG,
        ),
        (
            "SNAPSHOT of a VM that does not exist",
            mbox_op::OOB_SNAPSHOT,
            9,
            oob_scope::VM,
            mbox_status::ERR_NOT_FOUND,
        ),
        (
            "SNAPSHOT of the confidential VM",
            mbox_op::OOB_SNAPSHOT,
            CONFIDENTIAL_VM,
            oob_scope::VM,
            mbox_status::ERR_CONFIDENTIAL,
        ),
        (
            "SNAPSHOT of context 0",
            mbox_op::OOB_SNAPSHOT,
            0,
            oob_scope::CONTEXT,
            mbox_status::ERR_ARG,
        ),
        (
            "SNAPSHOT of a context id past the table",
            mbox_op::OOB_SNAPSHOT,
            r::MAX_CONTEXTS,
            oob_scope::CONTEXT,
            mbox_status::ERR_ARG,
        ),
        (
            "SNAPSHOT of a context that does not exist",
            mbox_op::OOB_SNAPSHOT,
            4000,
            oob_scope::CONTEXT,
            mbox_status::ERR_NOT_FOUND,
        ),
        (
            "SNAPSHOT of a confidential VM's context",
            mbox_op::OOB_SNAPSHOT,
            conf_ctx,
            oob_scope::CONTEXT,
            mbox_status::ERR_NOT_FOUND,
        ),
        (
            "READ_LATCH with a stale tag",
            mbox_op::OOB_READ_LATCH,
            0,
            tag - 1,
            mbox_status::ERR_STALE,
        ),
        (
            "READ_LATCH with a tag not yet given",
            mbox_op::OOB_READ_LATCH,
            0,
            tag + 1,
            mbox_status::ERR_STALE,
        ),
        (
            "READ_LATCH with tag 0",
            mbox_op::OOB_READ_LATCH,
            0,
            0,
            mbox_status::ERR_STALE,
        ),
        (
            "READ_LATCH at a word past the events",
            mbox_op::OOB_READ_LATCH,
            ev,
            tag,
            mbox_status::ERR_ARG,
        ),
        (
            "READ_LATCH at the last word index",
            mbox_op::OOB_READ_LATCH,
            u32::MAX,
            tag,
            mbox_status::ERR_ARG,
        ),
    ];
    dev.write_reg(r::OOB_MBOX_ARG, 4, 0).unwrap();
    dev.write_reg(r::OOB_MBOX_ARG2, 4, 0).unwrap();
    let before = everything(&dev);
    for &(what, op, arg, arg2, want) in cases {
        let seq_before = seq(&dev);
        let (status, data) = oob(&mut dev, op, arg, arg2);
        assert_eq!(status, want, "{what}");
        assert_eq!(data, [0; 4], "{what}: the result words are cleared");
        assert_eq!(seq(&dev), seq_before + 1, "{what}: it completed");
        // The arguments are plain registers: put them back for the check.
        dev.write_reg(r::OOB_MBOX_ARG, 4, 0).unwrap();
        dev.write_reg(r::OOB_MBOX_ARG2, 4, 0).unwrap();
        assert!(everything(&dev) == before, "{what}: something changed");
        assert_eq!(
            oob(&mut dev, mbox_op::OOB_READ_LATCH, 0, tag),
            (mbox_status::OK, latched),
            "{what}: the latch changed"
        );
        dev.write_reg(r::OOB_MBOX_ARG2, 4, 0).unwrap();
    }
    // Read-only registers refuse writes and stay as they were.
    for off in [
        r::OOB_MBOX_STATUS,
        r::OOB_MBOX_SEQ,
        r::OOB_MBOX_DATA,
        r::OOB_MBOX_DATA1,
        r::OOB_MBOX_DATA2,
        r::OOB_MBOX_DATA3 + 4,
    ] {
        let value = dev.read_reg(off, 4).unwrap();
        assert!(dev.write_reg(off, 4, 1).is_err(), "{off:#x} took a write");
        assert_eq!(dev.read_reg(off, 4).unwrap(), value);
    }
    assert!(dev.read_reg(r::OOB_MBOX_DATA3 + 8, 4).is_err(), "a hole");
    assert!(everything(&dev) == before);
    // The host's mailbox has none of the OOB commands.
    for op in [
        mbox_op::OOB_FLUSH,
        mbox_op::OOB_SNAPSHOT,
        mbox_op::OOB_HOST_STATE,
    ] {
        dev.write_reg(r::MBOX_CMD, 4, u64::from(op)).unwrap();
        let status = dev.read_reg(r::MBOX_STATUS, 4).unwrap();
        assert_eq!(status, u64::from(mbox_status::ERR_OPCODE));
    }
    assert!(
        dev.oob_info() == {
            let mut d = device(&s, EngineKind::Batched);
            run(&mut d, &mut Host::new(), 150_000);
            oob_flush(&mut d);
            d.oob_info()
        },
        "the host's mailbox moved the OOB channel"
    );
}

#[test]
fn a_flush_asked_for_while_one_is_pending_is_refused_busy_and_changes_nothing() {
    let s = scenario();
    let mut dev = device(&s, EngineKind::Batched);
    let mut host = Host::new();
    run(&mut dev, &mut host, 100_000);
    let (status, [n, due, ..]) = oob(&mut dev, mbox_op::OOB_FLUSH, 0, 0);
    assert_eq!((status, n), (mbox_status::OK, 1));
    let info = dev.oob_info();
    let before = everything(&dev);
    let seq_before = seq(&dev);
    assert_eq!(
        oob(&mut dev, mbox_op::OOB_FLUSH, 0, 0),
        (mbox_status::ERR_BUSY, [0; 4])
    );
    assert_eq!(seq(&dev), seq_before + 1);
    assert!(
        everything(&dev) == before,
        "a refused flush changed something"
    );
    assert_eq!(dev.oob_info(), info);
    // Other commands are served meanwhile; the flush completes when due.
    assert_eq!(oob(&mut dev, mbox_op::OOB_CHANNEL_INFO, 0, 0).1[3], 0);
    dev.advance(due - dev.now()).unwrap();
    let (_, channel) = oob(&mut dev, mbox_op::OOB_CHANNEL_INFO, 0, 0);
    assert_eq!((channel[3], channel[1]), (1, due), "completed at its cycle");
    assert_eq!(
        oob(&mut dev, mbox_op::OOB_FLUSH, 0, 0).1[0],
        2,
        "free again"
    );
}

#[test]
fn a_torn_multi_word_read_is_detected_and_an_untorn_one_is_a_consistent_snapshot() {
    let s = scenario();
    let mut dev = device(&s, EngineKind::Batched);
    let mut host = Host::new();
    run(&mut dev, &mut host, 100_000);
    oob_flush(&mut dev);
    let at_snapshot = dev.oob_block(oob_scope::VM, 1).unwrap().counters;
    let (_, snap) = oob(&mut dev, mbox_op::OOB_SNAPSHOT, 1, oob_scope::VM);
    let tag = u32::try_from(snap[0]).unwrap();
    let generation = snap[1];
    let (_, first) = oob(&mut dev, mbox_op::OOB_READ_LATCH, 0, tag);
    // The channel commits twice while the BMC reads on: the latch does not
    // move, so the rest of the read belongs to the same snapshot.
    run(&mut dev, &mut host, 130_000);
    assert!(dev.oob_info().generation >= generation + 2);
    assert_ne!(
        dev.oob_block(oob_scope::VM, 1).unwrap().counters,
        at_snapshot
    );
    let mut read = first.to_vec();
    for at in (4..EVENT_COUNT).step_by(4) {
        let (status, words) = oob(
            &mut dev,
            mbox_op::OOB_READ_LATCH,
            u32::try_from(at).unwrap(),
            tag,
        );
        assert_eq!(status, mbox_status::OK);
        read.extend_from_slice(&words);
    }
    assert_eq!(read[..EVENT_COUNT], at_snapshot[..EVENT_COUNT]);
    // Another reader's snapshot between two of ours tears the read: the
    // next word fails ERR_STALE instead of mixing two blocks.
    let (_, snap) = oob(&mut dev, mbox_op::OOB_SNAPSHOT, 1, oob_scope::VM);
    let tag = u32::try_from(snap[0]).unwrap();
    assert_eq!(
        oob(&mut dev, mbox_op::OOB_READ_LATCH, 0, tag).0,
        mbox_status::OK
    );
    oob(&mut dev, mbox_op::OOB_SNAPSHOT, 0, oob_scope::SYSTEM);
    assert_eq!(
        oob(&mut dev, mbox_op::OOB_READ_LATCH, 4, tag),
        (mbox_status::ERR_STALE, [0; 4])
    );
    // Taken again, the snapshot reads whole.
    assert_eq!(
        read_oob_block(&mut dev, oob_scope::VM, 1),
        Some(dev.oob_block(oob_scope::VM, 1).unwrap().counters)
    );
    // The result registers of one command: SEQ read before and after
    // tells a reader whether another command ran in between.
    let s0 = seq(&dev);
    oob(&mut dev, mbox_op::OOB_CHANNEL_INFO, 0, 0);
    let words: Vec<u64> = [r::OOB_MBOX_DATA, r::OOB_MBOX_DATA1]
        .iter()
        .map(|&o| dev.read_reg(o, 8).unwrap())
        .collect();
    assert_eq!(seq(&dev), s0 + 1, "untorn: exactly our command completed");
    oob(&mut dev, mbox_op::OOB_READ_IDLE, 0, 0);
    assert_ne!(
        seq(&dev),
        s0 + 1,
        "another command ran: the words may be torn"
    );
    assert_eq!(words.len(), 2);
}

#[test]
fn enumeration_lists_every_vm_and_every_plain_context_once() {
    let s = scenario();
    let mut dev = device(&s, EngineKind::Batched);
    let mut host = Host::new();
    host.release_destroyed = false;
    run(&mut dev, &mut host, 300_000);
    let mut vms = Vec::new();
    let mut after = 0;
    loop {
        let (status, d) = oob(&mut dev, mbox_op::OOB_NEXT_VM, after, 0);
        if status == mbox_status::END {
            break;
        }
        assert_eq!(status, mbox_status::OK);
        after = u32::try_from(d[0]).unwrap();
        vms.push(d);
    }
    let plain_contexts = |vm: u32, dev: &Device| -> u64 {
        u64::try_from(dev.contexts().filter(|c| c.1 == vm).count()).unwrap()
    };
    assert_eq!(vms.len(), s.vms.len());
    for (d, v) in vms.iter().zip(&s.vms) {
        let confidential = v.is_confidential();
        let flags = if confidential {
            oob_vm_flags::CONFIDENTIAL
        } else {
            0
        };
        let contexts = if confidential {
            0
        } else {
            plain_contexts(v.id, &dev)
        };
        assert_eq!(
            *d,
            [u64::from(v.id), u64::from(v.partition), flags, contexts]
        );
    }
    let mut listed = Vec::new();
    let mut after = 0;
    loop {
        let (status, d) = oob(&mut dev, mbox_op::OOB_NEXT_CONTEXT, after, 0);
        if status == mbox_status::END {
            break;
        }
        after = u32::try_from(d[0]).unwrap();
        listed.push(d);
    }
    let want: Vec<[u64; 4]> = dev
        .contexts()
        .filter(|c| c.1 != CONFIDENTIAL_VM)
        .map(|(id, vm, state)| {
            let state = if state == r::ctx_state::ACTIVE {
                oob_ctx_state::ACTIVE
            } else {
                oob_ctx_state::DESTROYED
            };
            [u64::from(id), u64::from(vm), created(&dev, id), state]
        })
        .collect();
    assert!(want.iter().any(|c| c[3] == oob_ctx_state::DESTROYED));
    assert_eq!(listed, want);
    let (status, d) = oob(&mut dev, mbox_op::OOB_NEXT_CONTEXT, 0, 2);
    assert_eq!((status, d[1]), (mbox_status::OK, 2), "filtered by VM");
}

#[test]
fn the_channel_commits_on_its_own_schedule_whatever_the_host_programs() {
    let s = scenario();
    let mut dev = device(&s, EngineKind::Batched);
    // The host turns its periodic triggers off and never answers.
    dev.write_reg(r::TRIG_CTRL, 4, u64::from(trig_ctrl::THRESHOLD_ENABLE))
        .unwrap();
    let sum = |dev: &Device, scope, id| -> u64 {
        dev.oob_block(scope, id).unwrap().counters.iter().sum()
    };
    let mut system = 0;
    for k in 1..=5u64 {
        dev.advance(60_000).unwrap();
        let (_, info) = oob(&mut dev, mbox_op::OOB_CHANNEL_INFO, 0, 0);
        assert_eq!((info[0], info[1], info[2]), (k, 60_000 * k, 60_000));
        // The device-level units (NVLink) count all the time.
        let now = sum(&dev, oob_scope::SYSTEM, 0);
        assert!(now > system, "the system block grows at every commit");
        system = now;
    }
    // The switches the host never answers complete by the fallback, and
    // the VMs' work reaches their OOB blocks.
    assert!(sum(&dev, oob_scope::VM, 1) > 0 && sum(&dev, oob_scope::VM, 2) > 0);
    assert_eq!(dev.read_reg(r::TRIG_COUNT_PERIODIC, 8).unwrap(), 0);
}

#[test]
fn the_host_state_follows_what_the_node_reports_and_times_out_in_device_time() {
    let s = scenario();
    let timeout = s.oob.host_timeout_cycles;
    let mut dev = device(&s, EngineKind::Batched);
    let state = |dev: &mut Device| oob(dev, mbox_op::OOB_HOST_STATE, 0, 0).1;
    assert_eq!(
        state(&mut dev),
        [oob_host_state::UNLOADED, u64::MAX, 0, timeout],
        "no host node yet"
    );
    dev.host_event(HostEvent::Attached(true));
    dev.host_event(HostEvent::Handles(1));
    assert_eq!(state(&mut dev), [oob_host_state::LOADED, 0, 1, timeout]);
    dev.advance(timeout).unwrap();
    assert_eq!(state(&mut dev)[0], oob_host_state::LOADED, "at the timeout");
    dev.advance(1).unwrap();
    assert_eq!(
        state(&mut dev)[..2],
        [oob_host_state::NOT_RESPONDING, timeout + 1]
    );
    dev.host_event(HostEvent::Request);
    assert_eq!(state(&mut dev)[0], oob_host_state::LOADED);
    dev.host_event(HostEvent::Waiting(1));
    dev.advance(3 * timeout).unwrap();
    assert_eq!(
        state(&mut dev)[..2],
        [oob_host_state::LOADED, 0],
        "a reader waits"
    );
    dev.host_event(HostEvent::Waiting(0));
    dev.host_event(HostEvent::Handles(0));
    assert_eq!(
        state(&mut dev)[0],
        oob_host_state::UNLOADED,
        "the host closed its node"
    );
    dev.host_event(HostEvent::Handles(1));
    dev.host_event(HostEvent::Attached(false));
    assert_eq!(
        state(&mut dev)[0],
        oob_host_state::UNLOADED,
        "the node is gone"
    );
}

#[test]
fn idle_time_and_how_often_the_device_went_idle() {
    // Every context lives in [100k, 200k) or [300k, 350k): idle before,
    // between and after.
    let mut s = scenario();
    s.churn.clear();
    for (i, c) in s.contexts.iter_mut().enumerate() {
        let (from, to) = if i % 2 == 0 {
            (100_000, 200_000)
        } else {
            (300_000, 350_000)
        };
        c.create_at = from;
        c.destroy_at = Some(to);
    }
    let mut dev = device(&s, EngineKind::Batched);
    let mut host = Host::new();
    let idle = |dev: &mut Device| oob(dev, mbox_op::OOB_READ_IDLE, 0, 0).1;
    dev.advance(50_000).unwrap();
    assert_eq!(
        idle(&mut dev),
        [50_000, 1, 50_000, 1],
        "idle from the start"
    );
    run(&mut dev, &mut host, 100_000);
    let busy = idle(&mut dev);
    assert_eq!((busy[1], busy[3]), (1, 0), "busy at 150k");
    run(&mut dev, &mut host, 100_000);
    let mid = idle(&mut dev);
    assert_eq!(
        (mid[1], mid[3]),
        (2, 1),
        "idle again at 250k, a second time"
    );
    run(&mut dev, &mut host, 200_000);
    let end = idle(&mut dev);
    assert_eq!((end[1], end[3]), (3, 1), "idle after the last context left");
    assert_eq!(end[0], oob(&mut dev, mbox_op::READ_IDLE_CYCLES, 0, 0).1[0]);
    assert!(end[0] > 200_000 && end[0] < dev.now() - 100_000, "{end:?}");
}

#[test]
fn device_info_reports_the_clock_resets_and_partitions() {
    let s = scenario();
    let mut dev = device(&s, EngineKind::Batched);
    let info = oob(&mut dev, mbox_op::OOB_DEVICE_INFO, 0, 0).1;
    assert_eq!(info, [1_980_000, 1_980_000, 0, 0b111]);
    dev.advance(120_000).unwrap();
    let throttled = oob(&mut dev, mbox_op::OOB_DEVICE_INFO, 0, 0).1;
    assert_eq!(throttled[1], 990_000, "inside the throttle window");
    dev.reset().unwrap();
    assert_eq!(oob(&mut dev, mbox_op::OOB_DEVICE_INFO, 0, 0).1[2], 1);
    let (status, caps) = oob(&mut dev, mbox_op::GET_CAPS, 0, 0);
    assert_eq!(
        (status, caps[0] >> 32),
        (mbox_status::OK, u64::from(gpupm_uapi::ABI_VERSION))
    );
}
