//! The device model's fidelity: the wrap guard cannot be switched off, a
//! reset restores the masks, profile phases change at their exact cycle,
//! flush acks take device time and a commit before them fails, the OOB
//! mailbox is the BMC's own, ring 0 is sized for every partition.

#![allow(clippy::cast_possible_truncation)] // 32-bit register values are read as u64

use gpupm_driver::host::{self, Host};
use gpupm_driver::model::{Device, EngineKind, RegError};
use gpupm_driver::scenario::{ContextSpec, PhaseSpec, ProfileSpec, Scenario};
use gpupm_test_support::model::*;
use gpupm_uapi::intr::source;
use gpupm_uapi::ioctl::ledger_scope;
use gpupm_uapi::regs::{self as r, hs_state, mbox_op, part_ctrl, rc_cmd, trig_cmd, trig_ctrl};

fn serviced(dev: &mut Device, host: &mut Host, cycles: u64) {
    let end = dev.now() + cycles;
    while dev.now() < end {
        dev.advance(2_000.min(end - dev.now())).unwrap();
        host.service(dev).unwrap();
    }
}

fn hs(dev: &Device, p: u32) -> u32 {
    dev.read_reg(r::part(p, r::PART_STATUS), 4).unwrap() as u32 & r::part_status::STATE_MASK
}

#[test]
fn threshold_triggers_cannot_be_switched_off_so_no_counter_wraps() {
    let mut s = small_scenario();
    s.trigger.period_cycles = 0;
    s.trigger.threshold = r::TRIG_THRESHOLD_MAX;
    for p in &mut s.partitions {
        (p.ctx_timeslice_cycles, p.vm_timeslice_cycles) = (0, 0);
    }
    s.churn.clear();
    let mut dev = device(&s, EngineKind::Batched);
    let mut host = Host::new();
    serviced(&mut dev, &mut host, 10_000);
    let before = digest(&dev);
    for ctrl in [0, trig_ctrl::PERIODIC_ENABLE, trig_ctrl::DITHER] {
        assert!(
            matches!(
                dev.write_reg(r::TRIG_CTRL, 4, u64::from(ctrl)),
                Err(RegError::BadValue { .. })
            ),
            "TRIG_CTRL {ctrl:#x} without THRESHOLD_ENABLE was accepted"
        );
        assert!(
            digest(&dev) == before,
            "a refused TRIG_CTRL changed something"
        );
    }
    // No periodic trigger: only the threshold keeps busy counters from
    // wrapping over 2^29 cycles.
    dev.advance(1 << 29).unwrap();
    host.service(&mut dev).unwrap();
    assert_eq!(dev.read_reg(r::CCU_WRAPS, 8).unwrap(), 0);
    assert!(dev.read_reg(r::TRIG_COUNT_THRESHOLD, 8).unwrap() > 0);
    settle_and_flush(&mut dev);
    assert_blocks_match_ledger(&mut dev, &s);
}

#[test]
fn a_reset_unmasks_every_counter_as_documented() {
    let s = small_scenario();
    let mut dev = device(&s, EngineKind::Batched);
    let mut host = Host::new();
    let ccus = dev.read_reg(r::TOPO_CCUS, 4).unwrap() as u32;
    for c in 0..ccus {
        let n = dev.read_reg(r::ccu(c, r::CCU_COUNTERS), 4).unwrap() as u32;
        for w in 0..n.div_ceil(32) {
            let bits = if (w + 1) * 32 <= n {
                u32::MAX
            } else {
                (1 << (n - w * 32)) - 1
            };
            dev.write_reg(r::ccu(c, r::CCU_MASK_INDEX), 4, u64::from(w))
                .unwrap();
            dev.write_reg(r::ccu(c, r::CCU_MASK_DATA), 4, u64::from(bits))
                .unwrap();
        }
    }
    serviced(&mut dev, &mut host, 100_000);
    dev.write_reg(r::RESET, 4, u64::from(r::RESET_MAGIC))
        .unwrap();
    for c in 0..ccus {
        assert_eq!(dev.read_reg(r::ccu(c, r::CCU_MASK_INDEX), 4).unwrap(), 0);
        let n = dev.read_reg(r::ccu(c, r::CCU_COUNTERS), 4).unwrap() as u32;
        for w in 0..n.div_ceil(32) {
            dev.write_reg(r::ccu(c, r::CCU_MASK_INDEX), 4, u64::from(w))
                .unwrap();
            assert_eq!(
                dev.read_reg(r::ccu(c, r::CCU_MASK_DATA), 4).unwrap(),
                0,
                "CCU {c} mask word {w} survived the reset"
            );
        }
    }
    serviced(&mut dev, &mut host, 100_000);
    host::flush_all(&mut dev).unwrap();
    let sys = dev.ledger_totals(ledger_scope::SYSTEM, 0).unwrap();
    assert_eq!(sum(&sys.masked), 0);
    assert!(sum(&dev.block(0).counters) > 0);
    assert_blocks_match_ledger(&mut dev, &s);
}

/// One partition, one VM, one context created at cycle 0 running a profile
/// that alternates 50,000 busy cycles with 50,000 silent ones.
fn on_off_scenario() -> Scenario {
    let mut s = small_scenario();
    s.partitions.truncate(1);
    s.vms.truncate(1);
    s.churn.clear();
    s.throttle.clear();
    s.device_profile = None;
    s.partitions[0].ctx_timeslice_cycles = 0;
    s.partitions[0].vm_timeslice_cycles = 0;
    let busy = busy_profile("busy", 1.0, &CONTEXT_TYPES).phases[0]
        .rates
        .clone();
    s.profiles = vec![ProfileSpec {
        program: None,
        name: "on-off".into(),
        phases: vec![
            PhaseSpec {
                duration_cycles: 50_000,
                rates: busy,
            },
            PhaseSpec {
                duration_cycles: 50_000,
                rates: vec![],
            },
        ],
    }];
    s.contexts = vec![ContextSpec {
        vm: 1,
        profile: 0,
        create_at: 0,
        destroy_at: None,
    }];
    s
}

#[test]
fn profile_phases_change_at_their_exact_cycle_in_both_engines() {
    let s = on_off_scenario();
    for engine in [EngineKind::Batched, EngineKind::CycleLevel] {
        let mut dev = device(&s, engine);
        let mut host = Host::new();
        host.service(&mut dev).unwrap();
        let ctx = dev.contexts().next().unwrap().0;
        let generated = |dev: &mut Device| {
            sum(&dev
                .ledger_totals(ledger_scope::CONTEXT, ctx)
                .unwrap()
                .generated)
        };
        dev.advance(50_000 - dev.now()).unwrap();
        let on = generated(&mut dev);
        assert!(on > 0, "{engine:?}: the busy phase generated nothing");
        dev.advance(50_000).unwrap();
        assert_eq!(
            generated(&mut dev),
            on,
            "{engine:?}: the silent phase (cycles 50,000..100,000) generated"
        );
        dev.advance(1_000).unwrap();
        assert!(
            generated(&mut dev) > on,
            "{engine:?}: the busy phase did not come back at cycle 100,000"
        );
    }
}

/// Runs `dev` until partition `p` has a switch request pending.
fn until_requested(dev: &mut Device, p: u32) {
    for _ in 0..10_000 {
        if hs(dev, p) == hs_state::REQUESTED {
            return;
        }
        dev.advance(500).unwrap();
    }
    panic!("no switch request on partition {p}");
}

#[test]
fn flush_acks_arrive_after_their_latency_and_a_commit_before_them_fails() {
    let s = small_scenario();
    let mut dev = device(&s, EngineKind::Batched);
    until_requested(&mut dev, 1);
    let part = |reg| r::part(1, reg);
    for (off, v) in [
        (part(r::PART_CTRL), part_ctrl::CTX_PAUSE),
        (part(r::PART_CTRL), part_ctrl::ALL),
        (r::TRIG_TARGET, 1 << 1),
        (r::TRIG_CMD, trig_cmd::FLUSH_ULC | trig_cmd::TRIGGER),
    ] {
        dev.write_reg(off, 4, u64::from(v)).unwrap();
    }
    let refused = |dev: &mut Device, what: &str| {
        let before = digest(dev);
        assert!(
            matches!(
                dev.write_reg(part(r::PART_RC_CMD), 4, u64::from(rc_cmd::COMMIT)),
                Err(RegError::BadSequence { .. })
            ),
            "commit {what} was accepted"
        );
        assert!(
            digest(dev) == before,
            "a refused commit {what} changed something"
        );
    };
    refused(&mut dev, "before the flush request");
    dev.write_reg(r::TRIG_CMD, 4, u64::from(trig_cmd::FLUSH_REQ))
        .unwrap();
    let assigned = dev.read_reg(part(r::PART_CCU_ASSIGNED), 8).unwrap();
    assert_eq!(dev.read_reg(part(r::PART_CCU_ACKED), 8).unwrap(), 0);
    refused(&mut dev, "before the acks");
    // Each CCU acks once its records drained: the ack latency of its size.
    let latency = (0..r::MAX_CCUS)
        .filter(|&c| assigned & (1 << c) != 0)
        .map(|c| {
            let counters = dev.read_reg(r::ccu(c, r::CCU_COUNTERS), 4).unwrap() as u32;
            (c, u64::from(r::flush_ack_latency(counters)))
        })
        .collect::<Vec<_>>();
    let last = latency.iter().map(|l| l.1).max().unwrap();
    for cycle in 1..=last {
        dev.advance(1).unwrap();
        let acked = dev.read_reg(part(r::PART_CCU_ACKED), 8).unwrap();
        let due = latency
            .iter()
            .filter(|l| l.1 <= cycle)
            .fold(0u64, |m, l| m | 1 << l.0);
        assert_eq!(acked, due, "acks {cycle} cycles after the request");
        if cycle < last {
            refused(&mut dev, "with acks missing");
        }
    }
    assert_eq!(hs(&dev, 1), hs_state::ACKED);
    dev.write_reg(part(r::PART_RC_CMD), 4, u64::from(rc_cmd::COMMIT))
        .unwrap();
    assert_eq!(hs(&dev, 1), hs_state::COMMITTED);
}

#[test]
fn the_hosts_wait_for_acks_is_bounded() {
    let s = small_scenario();
    let mut dev = device(&s, EngineKind::Batched);
    until_requested(&mut dev, 1);
    for (off, v) in [
        (r::part(1, r::PART_CTRL), part_ctrl::CTX_PAUSE),
        (r::part(1, r::PART_CTRL), part_ctrl::ALL),
        (r::TRIG_TARGET, 1 << 1),
        (
            r::TRIG_CMD,
            trig_cmd::FLUSH_ULC | trig_cmd::TRIGGER | trig_cmd::FLUSH_REQ,
        ),
    ] {
        dev.write_reg(off, 4, u64::from(v)).unwrap();
    }
    let assigned = dev.read_reg(r::part(1, r::PART_CCU_ASSIGNED), 8).unwrap();
    // A host that cannot make time pass gives up after its polls.
    let mut polls = 0;
    let waited = host::wait_for_acks(&mut dev, 1, 0, assigned, 7, |_| {
        polls += 1;
        Ok(())
    });
    assert_eq!(waited.map_err(|e| e.1), Ok(false));
    assert_eq!(polls, 7);
    // One that lets device time pass gets every ack.
    assert_eq!(
        host::wait_for_acks(&mut dev, 1, 0, assigned, 7, host::pass_time).map_err(|e| e.1),
        Ok(true)
    );
    // A host that never finishes: the fallback completes the switch.
    dev.advance(u64::from(s.switch_timeout_cycles)).unwrap();
    assert_eq!(dev.read_reg(r::part(1, r::PART_FALLBACKS), 8).unwrap(), 1);
}

#[test]
fn the_oob_mailbox_is_the_bmcs_own_and_raises_nothing_on_the_hosts_stream() {
    let s = small_scenario();
    let mut dev = device(&s, EngineKind::Batched);
    let mut host = Host::new();
    serviced(&mut dev, &mut host, 200_000);
    host::flush_all(&mut dev).unwrap();
    let system = dev.block(0).counters;
    let (e1, e2) = (ev("sm_inst_executed"), ev("nvlink_tx_flits"));
    let mut cursor = dev.interrupts_since(0, &mut Vec::new());
    // The host and the BMC interleave their sequences.
    dev.write_reg(r::MBOX_ARG, 4, u64::from(e1)).unwrap();
    dev.write_reg(r::OOB_MBOX_ARG, 4, u64::from(e2)).unwrap();
    dev.write_reg(r::OOB_MBOX_CMD, 4, u64::from(mbox_op::READ_SYSTEM_COUNTER))
        .unwrap();
    dev.write_reg(r::MBOX_CMD, 4, u64::from(mbox_op::READ_SYSTEM_COUNTER))
        .unwrap();
    assert_eq!(
        dev.read_reg(r::MBOX_DATA, 8).unwrap(),
        system[usize::from(e1)]
    );
    assert_eq!(
        dev.read_reg(r::OOB_MBOX_DATA, 8).unwrap(),
        system[usize::from(e2)]
    );
    assert_eq!(dev.read_reg(r::MBOX_SEQ, 4).unwrap(), 1);
    assert_eq!(dev.read_reg(r::OOB_MBOX_SEQ, 4).unwrap(), 1);
    let mut records = Vec::new();
    cursor = dev.interrupts_since(cursor, &mut records);
    let done: Vec<_> = records
        .iter()
        .filter(|rec| rec.source == source::MAILBOX_DONE)
        .collect();
    assert_eq!(done.len(), 1, "only the host's command raises MAILBOX_DONE");
    assert_eq!(done[0].arg, mbox_op::READ_SYSTEM_COUNTER);
    dev.write_reg(r::OOB_MBOX_CMD, 4, u64::from(mbox_op::READ_CYCLE))
        .unwrap();
    records.clear();
    dev.interrupts_since(cursor, &mut records);
    assert!(records.is_empty(), "an OOB command raised {records:?}");
    assert_eq!(
        dev.read_reg(r::INTR_STATUS, 4).unwrap() as u32 & source::MAILBOX_DONE,
        source::MAILBOX_DONE
    );
}

#[test]
fn ring_0_holds_what_every_partition_sends_it() {
    let s = small_scenario();
    let dev = device(&s, EngineKind::Batched);
    let cap = u64::from(s.stream.ring_records);
    let slices = s.partitions.len() as u64;
    assert_eq!(
        dev.read_reg(r::part(1, r::PART_STREAM_CAP), 4).unwrap(),
        cap
    );
    let cap0 = dev.read_reg(r::part(0, r::PART_STREAM_CAP), 4).unwrap();
    assert!(
        cap0 >= cap * (slices + 1) && cap0.is_power_of_two(),
        "ring 0 holds {cap0}"
    );
    let watermark0 = dev
        .read_reg(r::part(0, r::PART_STREAM_WATERMARK), 4)
        .unwrap();
    assert_eq!(watermark0 * cap, u64::from(s.stream.watermark) * cap0);
}
