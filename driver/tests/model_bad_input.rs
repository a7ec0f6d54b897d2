//! Bad input at the register level: every malformed access, out-of-range id,
//! bad value and out-of-order handshake write gets its error and changes
//! nothing (every register, the whole memory window, the ledger and every
//! counter compare equal before and after).

#![allow(clippy::cast_possible_truncation)] // 32-bit register values are read as u64

use gpupm_driver::host::{self, Host};
use gpupm_driver::model::{Device, DeviceError, EngineKind, RegError};
use gpupm_test_support::model::*;
use gpupm_uapi::ioctl::{ledger_scope, reg_op, RegOp};
use gpupm_uapi::layout;
use gpupm_uapi::regs::{self as r, part_ctrl, rc_cmd, trig_cmd};
use gpupm_uapi::ri;

struct Snapshot(
    Vec<u8>,
    gpupm_driver::model::CountingSnapshot,
    gpupm_driver::model::LedgerTotals,
);

fn snapshot(dev: &mut Device) -> Snapshot {
    let ledger = dev.ledger_totals(ledger_scope::SYSTEM, 0).unwrap();
    Snapshot(digest(dev), dev.counting_snapshot(), ledger)
}

fn assert_unchanged(dev: &mut Device, before: &Snapshot, what: &str) {
    let after = snapshot(dev);
    assert!(before.0 == after.0, "{what}: host-visible state changed");
    assert_eq!(before.1, after.1, "{what}: counters changed");
    assert_eq!(before.2, after.2, "{what}: ledger changed");
}

/// A device mid-run: contexts running, one destroyed-unreleased context,
/// a confidential VM, streams with records.
fn busy_device() -> Device {
    let s = small_scenario();
    let mut dev = device(&s, EngineKind::Batched);
    let mut h = Host::new();
    h.release_destroyed = false;
    while dev.now() < 400_000 {
        dev.advance(3_000).unwrap();
        h.service(&mut dev).unwrap();
    }
    dev
}

#[test]
fn malformed_register_accesses_are_rejected_and_change_nothing() {
    let mut dev = busy_device();
    dev.write_reg(r::TRIG_TARGET, 4, 0).unwrap();
    let before = snapshot(&mut dev);
    let reads: &[(u64, u32)] = &[
        (0x2, 4),
        (0x0, 2),
        (0x0, 1),
        (0x0, 16),
        (0x4, 8),
        (r::BAR0_SIZE, 4),
        (0x00F0, 4),
        (r::ID, 8),
    ];
    for &(off, w) in reads {
        assert!(
            dev.read_reg(off, w).is_err(),
            "read {off:#x}/{w} should fail"
        );
    }
    let p1 = |reg| r::part(1, reg);
    let destroyed = dev
        .contexts()
        .find(|c| c.2 == r::ctx_state::DESTROYED)
        .map(|c| c.0)
        .expect("a destroyed context");
    let active = dev
        .contexts()
        .find(|c| c.2 == r::ctx_state::ACTIVE)
        .map(|c| c.0)
        .unwrap();
    let ccus = dev.read_reg(r::TOPO_CCUS, 4).unwrap() as u32;
    let last_ccu_counters = dev.read_reg(r::ccu(0, r::CCU_COUNTERS), 4).unwrap() as u32;
    let last_word = (last_ccu_counters - 1) / 32;
    let head = dev.read_reg(p1(r::PART_STREAM_HEAD), 4).unwrap();
    let writes: Vec<(&str, u64, u32, u64)> = vec![
        ("unaligned", 0x106, 4, 1),
        ("bad width", r::TRIG_PERIOD, 2, 5000),
        ("8-byte write", r::CYCLE, 8, 0),
        ("beyond BAR0", r::BAR0_SIZE + 8, 4, 0),
        ("hole", 0x00F0, 4, 0),
        ("read-only ID", r::ID, 4, 0),
        ("read-only CYCLE half", r::CYCLE + 4, 4, 0),
        ("wider than 32 bits", r::TRIG_PERIOD, 4, 1 << 40),
        ("reset without magic", r::RESET, 4, 1),
        ("period below min", r::TRIG_PERIOD, 4, 100),
        ("trig ctrl undefined bits", r::TRIG_CTRL, 4, 1 << 7),
        ("threshold 0", r::TRIG_THRESHOLD, 4, 0),
        (
            "threshold above max (could wrap)",
            r::TRIG_THRESHOLD,
            4,
            u64::from(r::TRIG_THRESHOLD_MAX) + 1,
        ),
        ("target unconfigured slot", r::TRIG_TARGET, 4, 1 << 9),
        (
            "trig cmd with empty target",
            r::TRIG_CMD,
            4,
            u64::from(trig_cmd::TRIGGER),
        ),
        ("trig cmd undefined bits", r::TRIG_CMD, 4, 1 << 5),
        ("external trigger value", r::TRIG_EXTERNAL, 4, 2),
        ("intr mask undefined", r::INTR_MASK, 4, 1 << 20),
        ("intr ack undefined", r::INTR_ACK, 4, 1 << 20),
        ("system partition ctrl", r::part(0, r::PART_CTRL), 4, 1),
        ("unconfigured partition", r::part(7, r::PART_CTRL), 4, 1),
        (
            "unconfigured partition tail",
            r::part(7, r::PART_STREAM_TAIL),
            4,
            0,
        ),
        ("rc cmd zero", p1(r::PART_RC_CMD), 4, 0),
        ("rc cmd undefined", p1(r::PART_RC_CMD), 4, 4),
        (
            "repoint without switch",
            p1(r::PART_RC_CMD),
            4,
            u64::from(rc_cmd::REPOINT),
        ),
        ("bind VM of another partition", p1(r::PART_RC_BIND_VM), 4, 3),
        ("bind VM out of range", p1(r::PART_RC_BIND_VM), 4, 1000),
        (
            "bind destroyed context",
            p1(r::PART_RC_BIND_CTX),
            4,
            u64::from(destroyed),
        ),
        ("bind unknown context", p1(r::PART_RC_BIND_CTX), 4, 4000),
        (
            "switch timeout too small",
            p1(r::PART_SWITCH_TIMEOUT),
            4,
            10,
        ),
        ("timeslice too small", p1(r::PART_TIMESLICE_CTX), 4, 10),
        ("tail beyond head", p1(r::PART_STREAM_TAIL), 4, head + 1),
        ("watermark 0", p1(r::PART_STREAM_WATERMARK), 4, 0),
        (
            "watermark above capacity",
            p1(r::PART_STREAM_WATERMARK),
            4,
            65,
        ),
        ("read-only partition status", p1(r::PART_STATUS), 4, 0),
        ("nonexistent CCU", r::ccu(ccus, r::CCU_MASK_INDEX), 4, 0),
        (
            "mask index beyond counters",
            r::ccu(0, r::CCU_MASK_INDEX),
            4,
            u64::from(last_word + 1),
        ),
        ("read-only CCU owner", r::ccu(0, r::CCU_OWNER), 4, 1),
        ("VM 0", r::vm(0, r::VM_KEY_COMMIT), 4, 1),
        (
            "key for a non-confidential VM",
            r::vm(1, r::VM_KEY_COMMIT),
            4,
            1,
        ),
        ("key commit value", r::vm(3, r::VM_KEY_COMMIT), 4, 2),
        (
            "commit with nothing staged",
            r::vm(3, r::VM_KEY_COMMIT),
            4,
            1,
        ),
        ("a plain key word (no such register)", r::vm(3, 0x10), 4, 1),
        ("read-only key session", r::vm(3, r::VM_KEY_SESSION), 4, 1),
        ("read-only OOB mailbox status", r::OOB_MBOX_STATUS, 4, 1),
        (
            "threshold triggers off",
            r::TRIG_CTRL,
            4,
            u64::from(r::trig_ctrl::PERIODIC_ENABLE),
        ),
        ("read-only VM partition", r::vm(1, r::VM_PARTITION), 4, 2),
        ("context 0", r::ctx(0, r::CTX_CMD), 4, 1),
        (
            "release an active context",
            r::ctx(active, r::CTX_CMD),
            4,
            1,
        ),
        (
            "unknown context command",
            r::ctx(destroyed, r::CTX_CMD),
            4,
            9,
        ),
        ("release a free context", r::ctx(4000, r::CTX_CMD), 4, 1),
    ];
    for (what, off, w, v) in writes {
        let err = dev.write_reg(off, w, v);
        assert!(err.is_err(), "{what}: write {off:#x}={v:#x} was accepted");
        assert_unchanged(&mut dev, &before, what);
    }
    // Mask bits beyond the last counter of a CCU.
    dev.write_reg(r::ccu(0, r::CCU_MASK_INDEX), 4, u64::from(last_word))
        .unwrap();
    let before = snapshot(&mut dev);
    let valid = last_ccu_counters - last_word * 32;
    if valid < 32 {
        assert!(matches!(
            dev.write_reg(r::ccu(0, r::CCU_MASK_DATA), 4, 1 << valid),
            Err(RegError::BadValue { .. })
        ));
        assert_unchanged(&mut dev, &before, "mask bits beyond counters");
    }
}

#[test]
fn out_of_order_handshake_writes_are_rejected_and_change_nothing() {
    let mut dev = busy_device();
    // Run until partition 1 has a switch request pending.
    let mut guard = 0;
    while dev.read_reg(r::part(1, r::PART_STATUS), 4).unwrap() as u32 & 0xF
        != r::hs_state::REQUESTED
    {
        dev.advance(500).unwrap();
        guard += 1;
        assert!(guard < 10_000);
    }
    let p = |reg| r::part(1, reg);
    let before = snapshot(&mut dev);
    for (what, off, v) in [
        (
            "pause transfers before the context",
            p(r::PART_CTRL),
            part_ctrl::ALL,
        ),
        ("unpause from REQUESTED", p(r::PART_CTRL), 0),
        ("undefined pause bits", p(r::PART_CTRL), 8),
        ("repoint before commit", p(r::PART_RC_CMD), rc_cmd::REPOINT),
    ] {
        assert!(
            matches!(
                dev.write_reg(off, 4, u64::from(v)),
                Err(RegError::BadSequence { .. } | RegError::BadValue { .. })
            ),
            "{what}"
        );
        assert_unchanged(&mut dev, &before, what);
    }
    // Steps 1-5 done, then re-point with wrong binds.
    let mut ops = [
        RegOp {
            offset: p(r::PART_CTRL),
            value: part_ctrl::CTX_PAUSE.into(),
            op: reg_op::WRITE,
            width: 4,
        },
        RegOp {
            offset: p(r::PART_CTRL),
            value: part_ctrl::ALL.into(),
            op: reg_op::WRITE,
            width: 4,
        },
        RegOp {
            offset: r::TRIG_TARGET,
            value: 2,
            op: reg_op::WRITE,
            width: 4,
        },
        RegOp {
            offset: r::TRIG_CMD,
            value: 7,
            op: reg_op::WRITE,
            width: 4,
        },
    ];
    dev.batch(&mut ops).unwrap();
    // The flush acks are not in yet: a commit is out of order.
    let before = snapshot(&mut dev);
    assert!(matches!(
        dev.write_reg(p(r::PART_RC_CMD), 4, rc_cmd::COMMIT.into()),
        Err(RegError::BadSequence { .. })
    ));
    assert_unchanged(&mut dev, &before, "commit before the flush acks");
    dev.advance(u64::from(r::FLUSH_ACK_MAX_CYCLES)).unwrap();
    dev.write_reg(p(r::PART_RC_CMD), 4, rc_cmd::COMMIT.into())
        .unwrap();
    let before = snapshot(&mut dev);
    assert!(matches!(
        dev.write_reg(p(r::PART_RC_CMD), 4, rc_cmd::REPOINT.into()),
        Err(RegError::BadSequence { .. })
    ));
    assert_unchanged(
        &mut dev,
        &before,
        "repoint with binds not naming the incoming context",
    );
}

#[test]
fn a_batch_with_one_bad_op_changes_nothing_and_names_the_op() {
    let mut dev = busy_device();
    let before = snapshot(&mut dev);
    let w = |offset, value| RegOp {
        offset,
        value,
        op: reg_op::WRITE,
        width: 4,
    };
    let mut ops = [
        w(r::TRIG_PERIOD, 9_999),
        w(r::TRIG_TARGET, 0b111),
        w(
            r::TRIG_CMD,
            u64::from(trig_cmd::FLUSH_ULC | trig_cmd::TRIGGER),
        ),
        w(r::TRIG_THRESHOLD, 5),
        w(r::INTR_MASK, 0),
    ];
    let (index, err) = dev.batch(&mut ops).unwrap_err();
    assert_eq!(index, 3);
    assert!(matches!(err, DeviceError::Reg(RegError::BadValue { .. })));
    assert_unchanged(&mut dev, &before, "failed batch");
    let mut bad_kind = [RegOp {
        offset: r::ID,
        value: 0,
        op: 9,
        width: 4,
    }];
    assert_eq!(
        dev.batch(&mut bad_kind).unwrap_err(),
        (0, DeviceError::BadOp(9))
    );
    // Releasing one context twice in one batch fails as a whole.
    let destroyed = dev
        .contexts()
        .find(|c| c.2 == r::ctx_state::DESTROYED)
        .map(|c| c.0)
        .unwrap();
    let mut twice = [
        w(r::ctx(destroyed, r::CTX_CMD), 1),
        w(r::ctx(destroyed, r::CTX_CMD), 1),
    ];
    assert_eq!(dev.batch(&mut twice).unwrap_err().0, 1);
    assert_unchanged(&mut dev, &before, "double release");
    // A runtime-instrumentation control block programmed and enabled in
    // one batch whose enabling write names an unknown mode: none of the five
    // writes before it took effect (the unit's reasons for refusing each
    // malformed control block are `src/model/ri/tests.rs`'s).
    let s = small_scenario();
    let plain = dev
        .contexts()
        .find(|c| {
            c.2 == r::ctx_state::ACTIVE && s.vms.iter().any(|v| v.id == c.1 && !v.is_confidential())
        })
        .map(|c| c.0)
        .expect("an active context of a plain VM");
    let block = |reg| ri::ri(0, reg);
    let mut arm = [
        w(block(ri::RI_CTX), u64::from(plain)),
        w(block(ri::RI_SF), 1000),
        w(block(ri::RI_RSIC), 0),
        w(block(ri::RI_ROA), 0),
        w(block(ri::RI_RLA), 511),
        w(
            block(ri::RI_CTRL),
            u64::from(ri::ri_ctrl::ENABLE | 5 << ri::ri_ctrl::MODE_SHIFT),
        ),
    ];
    assert_eq!(dev.batch(&mut arm).unwrap_err().0, 5);
    assert_unchanged(&mut dev, &before, "a control block with an unknown mode");
}

#[test]
fn bad_advance_ledger_and_window_requests_are_rejected_and_change_nothing() {
    let mut dev = busy_device();
    let before = snapshot(&mut dev);
    assert_eq!(dev.advance(0), Err(DeviceError::AdvanceRange(0)));
    assert!(dev.advance((1 << 40) + 1).is_err());
    assert!(dev.ledger_totals(99, 0).is_err());
    assert!(dev.ledger_totals(ledger_scope::CONTEXT, 0).is_err());
    assert!(dev.ledger_totals(ledger_scope::CONTEXT, 4000).is_err());
    assert!(dev.ledger_totals(ledger_scope::VM, 9).is_err());
    assert!(dev.ledger_totals(ledger_scope::SYSTEM, 1).is_err());
    let mut buf = [0u8; 64];
    assert!(
        dev.read_window(layout::stream_slot_offset(1, 64) - 8, &mut buf)
            .is_err(),
        "past the ring's capacity"
    );
    assert!(
        dev.read_window(layout::stream_slot_offset(9, 0), &mut buf)
            .is_err(),
        "no ring there"
    );
    assert!(dev.read_window(u64::MAX - 4, &mut buf).is_err());
    assert_unchanged(&mut dev, &before, "rejected requests");
    let mut rt = Device::new(&small_scenario(), EngineKind::Batched, false).unwrap();
    assert_eq!(rt.advance(10), Err(DeviceError::NotStepClock));
    host::flush_all(&mut rt).unwrap();
}
