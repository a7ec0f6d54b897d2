//! ioctls through the node against the real device model: identity,
//! batches, advance, ledger, reset, and bad input (ENOTTY for an unknown
//! number, EINVAL with no state change for everything malformed).

use gpupm_test_support::rawnode::ioctl;
use gpupm_test_support::rawnode::{
    advance, batch, batch_of, digest, drain_records, flush_all, identity, ledger, read_block,
    read_op, total, write_op,
};
use gpupm_test_support::rawnode::{errno, rd32, rd64};
use gpupm_test_support::Driver;
use gpupm_uapi::events::EVENT_COUNT;
use gpupm_uapi::intr::source;
use gpupm_uapi::ioctl::{
    ledger_scope, Advance, Identity, LedgerQuery, RegBatch, RegOp, Reset, GPUPM_IOC_ADVANCE,
    GPUPM_IOC_IDENTITY, GPUPM_IOC_LEDGER, GPUPM_IOC_REG_BATCH, GPUPM_IOC_RESET,
    IOCTL_STRUCT_VERSION, IOC_MAGIC, MAX_ADVANCE_CYCLES, MAX_BATCH_OPS,
};
use gpupm_uapi::regs;
use zerocopy::{FromZeros, IntoBytes};

#[test]
fn identity_reports_the_device() {
    let d = Driver::start();
    let card = d.card();
    let id = identity(&card);
    assert_eq!(id.magic, regs::DEVICE_MAGIC);
    assert_eq!(id.abi_version, gpupm_uapi::ABI_VERSION);
    assert_eq!(id.version, IOCTL_STRUCT_VERSION);
    assert_eq!(id.events, u32::try_from(EVENT_COUNT).unwrap());
    assert_eq!((id.partitions, id.sms, id.clock_khz), (2, 5, 1_980_000));
    assert_eq!((id.step_clock, id.cycle), (1, 0));
    assert_eq!(id.ccus, rd32(&card, regs::TOPO_CCUS).unwrap());
    advance(&card, 4_321).unwrap();
    assert_eq!(identity(&card).cycle, 4_321);
    d.stop();
}

/// Runs `f`, which must fail with `want`, and asserts the device is unchanged.
fn refused(card: &std::fs::File, want: i32, what: &str, f: impl FnOnce() -> std::io::Result<i32>) {
    let before = digest(card);
    let seq = rd64(card, regs::INTR_SEQ).unwrap();
    let e = f().expect_err(what);
    assert_eq!(errno(&e), want, "{what}: {e}");
    assert_eq!(
        rd64(card, regs::INTR_SEQ).unwrap(),
        seq,
        "{what} raised an interrupt"
    );
    assert!(digest(card) == before, "{what} changed the device");
}

#[test]
fn unknown_ioctl_is_enotty_and_changes_nothing() {
    let d = Driver::start();
    let card = d.card();
    advance(&card, 50_000).unwrap();
    let unknown = u32::try_from(nix::request_code_readwrite!(IOC_MAGIC, 0x7f, 48)).unwrap();
    let other_magic = u32::try_from(nix::request_code_readwrite!(b'Z', 0x00, 48)).unwrap();
    // 0x09..=0x0F are taken (RI ledger, later branches); 0x7e is free.
    let no_arg = u32::try_from(nix::request_code_none!(IOC_MAGIC, 0x7e)).unwrap();
    for cmd in [unknown, other_magic, no_arg] {
        refused(&card, libc::ENOTTY, &format!("cmd {cmd:#x}"), || {
            ioctl(&card, cmd, &mut [0u8; 48])
        });
    }
    d.stop();
}

#[test]
fn wrong_size_version_flags_and_bad_ids_are_einval_and_change_nothing() {
    let d = Driver::start();
    let card = d.card();
    advance(&card, 60_000).unwrap();
    let timeout = regs::part(1, regs::PART_SWITCH_TIMEOUT);

    let wrong_size = u32::try_from(nix::request_code_readwrite!(IOC_MAGIC, 0x01, 64)).unwrap();
    refused(&card, libc::EINVAL, "batch with a 64-byte argument", || {
        ioctl(&card, wrong_size, &mut [0u8; 64])
    });
    let wrong_dir = u32::try_from(nix::request_code_read!(IOC_MAGIC, 0x00, 48)).unwrap();
    refused(&card, libc::EINVAL, "identity as _IOR", || {
        ioctl(&card, wrong_dir, &mut [0u8; 48])
    });

    let mut bad_batches: Vec<(&str, RegBatch)> = Vec::new();
    let mut b = batch_of(&[write_op(timeout, 9_000)]);
    b.version = 2;
    bad_batches.push(("batch version 2", b));
    let mut b = batch_of(&[write_op(timeout, 9_000)]);
    b.flags = 1;
    bad_batches.push(("batch flags", b));
    let mut b = batch_of(&[write_op(timeout, 9_000)]);
    b.count = u32::try_from(MAX_BATCH_OPS + 1).unwrap();
    bad_batches.push(("batch of 65 ops", b));
    let mut b = batch_of(&[write_op(timeout, 9_000)]);
    b.count = 0;
    bad_batches.push(("empty batch", b));
    bad_batches.push((
        "8-byte write",
        batch_of(&[RegOp {
            width: 8,
            ..write_op(timeout, 9_000)
        }]),
    ));
    bad_batches.push((
        "bind to a context that does not exist",
        batch_of(&[write_op(regs::part(1, regs::PART_RC_BIND_CTX), 999)]),
    ));
    bad_batches.push((
        "bind partition 2 to VM 1 of partition 1",
        batch_of(&[write_op(regs::part(2, regs::PART_RC_BIND_VM), 1)]),
    ));
    bad_batches.push((
        "partition slot 9 (not configured)",
        batch_of(&[read_op(regs::part(9, regs::PART_CUR_CTX), 4)]),
    ));
    for (what, mut b) in bad_batches {
        refused(&card, libc::EINVAL, what, || {
            ioctl(&card, GPUPM_IOC_REG_BATCH, b.as_mut_bytes())
        });
    }

    let adv = |version, flags, cycles| Advance {
        version,
        flags,
        cycles,
        now: 0,
    };
    for (what, mut a) in [
        ("advance flags", adv(IOCTL_STRUCT_VERSION, 4, 10)),
        ("advance version", adv(7, 0, 10)),
        ("advance by 0", adv(IOCTL_STRUCT_VERSION, 0, 0)),
        (
            "advance past 2^40",
            adv(IOCTL_STRUCT_VERSION, 0, MAX_ADVANCE_CYCLES + 1),
        ),
    ] {
        refused(&card, libc::EINVAL, what, || {
            ioctl(&card, GPUPM_IOC_ADVANCE, a.as_mut_bytes())
        });
    }
    let mut r = Reset {
        version: IOCTL_STRUCT_VERSION,
        magic: 1,
    };
    refused(&card, libc::EINVAL, "reset without magic", || {
        ioctl(&card, GPUPM_IOC_RESET, r.as_mut_bytes())
    });
    let mut id = Identity {
        version: 2,
        ..Default::default()
    };
    refused(&card, libc::EINVAL, "identity version 2", || {
        ioctl(&card, GPUPM_IOC_IDENTITY, id.as_mut_bytes())
    });
    for (what, scope, id, flags) in [
        ("ledger scope 99", 99, 0, 0),
        ("ledger of context 0", ledger_scope::CONTEXT, 0, 0),
        (
            "ledger of an unused context id",
            ledger_scope::CONTEXT,
            4000,
            0,
        ),
        ("ledger of context id 4096", ledger_scope::CONTEXT, 4096, 0),
        ("ledger of an unconfigured VM", ledger_scope::VM, 9, 0),
        ("ledger of VM 64", ledger_scope::VM, 64, 0),
        ("system ledger with an id", ledger_scope::SYSTEM, 5, 0),
        ("ledger flags", ledger_scope::SYSTEM, 0, 2),
    ] {
        let mut q = LedgerQuery::new_zeroed();
        q.version = IOCTL_STRUCT_VERSION;
        (q.scope, q.id, q.flags) = (scope, id, flags);
        refused(&card, libc::EINVAL, what, || {
            ioctl(&card, GPUPM_IOC_LEDGER, q.as_mut_bytes())
        });
    }
    assert_eq!(rd64(&card, regs::CYCLE).unwrap(), 60_000);
    d.stop();
}

#[test]
fn batch_runs_in_order_and_reads_back() {
    let d = Driver::start();
    let card = d.card();
    let timeout = regs::part(2, regs::PART_SWITCH_TIMEOUT);
    let mut ops = [
        write_op(timeout, 4_096),
        read_op(timeout, 4),
        write_op(timeout, 8_192),
        read_op(timeout, 4),
        read_op(regs::ID, 4),
        read_op(regs::CYCLE, 8),
        read_op(regs::part(2, regs::PART_CCU_ASSIGNED), 8),
        read_op(regs::vm(3, regs::VM_FLAGS), 4),
    ];
    batch(&card, &mut ops).unwrap();
    let values: Vec<u64> = ops.iter().map(|o| o.value).collect();
    let assigned = rd64(&card, regs::part(2, regs::PART_CCU_ASSIGNED)).unwrap();
    assert_eq!(
        values,
        [
            4_096,
            4_096,
            8_192,
            8_192,
            u64::from(regs::DEVICE_MAGIC),
            0,
            assigned,
            // VM 3's key is in the scenario: it has a session from the start.
            u64::from(regs::vm_flags::CONFIDENTIAL | regs::vm_flags::SESSION)
        ]
    );
    d.stop();
}

#[test]
fn batch_whose_third_op_is_invalid_changes_nothing() {
    let d = Driver::start();
    let card = d.card();
    advance(&card, 10_000).unwrap();
    let timeout = regs::part(1, regs::PART_SWITCH_TIMEOUT);
    for bad in [
        write_op(regs::ID, 1),  // refused by the device: read-only
        write_op(timeout, 100), // refused by the device: below the minimum
        RegOp {
            offset: timeout + 2,
            ..read_op(timeout, 4)
        }, // malformed: unaligned
        RegOp {
            op: 7,
            ..read_op(timeout, 4)
        }, // unknown op kind
    ] {
        let mut b = batch_of(&[
            write_op(regs::TRIG_TARGET, 1),
            write_op(regs::TRIG_CMD, u64::from(regs::trig_cmd::TRIGGER)),
            bad,
            write_op(timeout, 9_000),
        ]);
        let sent = b;
        let before = digest(&card);
        let seq = rd64(&card, regs::INTR_SEQ).unwrap();
        let e = ioctl(&card, GPUPM_IOC_REG_BATCH, b.as_mut_bytes()).unwrap_err();
        assert_eq!(errno(&e), libc::EINVAL);
        assert_eq!(b.failed_index, 2, "failed index is reported back");
        assert_eq!(
            b.ops, sent.ops,
            "a failed batch reports the caller's ops untouched"
        );
        assert_eq!(
            rd64(&card, regs::INTR_SEQ).unwrap(),
            seq,
            "the trigger in the batch did not run"
        );
        assert!(digest(&card) == before, "a failed batch changed the device");
    }
    d.stop();
}

#[test]
fn advance_runs_the_device_and_reset_clears_counts_and_raises_an_interrupt() {
    let d = Driver::start();
    let mut card = d.card_nonblock();
    let now = advance(&card, 100_000).unwrap();
    assert_eq!(now, 100_000);
    let recs = drain_records(&mut card);
    let sources: u32 = recs.iter().fold(0, |m, r| m | r.source);
    assert_ne!(
        sources & source::CTX_CREATED,
        0,
        "contexts were created while advancing: {recs:?}"
    );
    assert_ne!(
        sources & source::SWITCH_REQUESTED,
        0,
        "switches were requested: {recs:?}"
    );
    assert!(recs.iter().all(|r| r.cycle > 0 && r.cycle <= now));
    flush_all(&card);
    let q = ledger(&card, ledger_scope::SYSTEM, 0).unwrap();
    assert_eq!(
        (q.version, q.scope, q.id),
        (IOCTL_STRUCT_VERSION, ledger_scope::SYSTEM, 0)
    );
    assert!(q.generated.iter().sum::<u64>() > 0);
    assert!(total(&read_block(&card, 0, None).counters) > 0);

    let mut r = Reset {
        version: IOCTL_STRUCT_VERSION,
        magic: regs::RESET_MAGIC,
    };
    let seq = rd64(&card, regs::INTR_SEQ).unwrap();
    ioctl(&card, GPUPM_IOC_RESET, r.as_mut_bytes()).unwrap();
    let recs = drain_records(&mut card);
    assert_eq!(
        recs.last().map(|r| (r.seq, r.source)),
        Some((seq, source::DEVICE_RESET))
    );
    assert_ne!(
        rd32(&card, regs::INTR_STATUS).unwrap() & source::DEVICE_RESET,
        0
    );
    assert_eq!(
        total(&read_block(&card, 0, None).counters),
        0,
        "reset zeroes the system block"
    );
    let q = ledger(&card, ledger_scope::SYSTEM, 0).unwrap();
    assert_eq!(
        q.generated.iter().sum::<u64>(),
        0,
        "reset zeroes the ledger"
    );
    assert_eq!(
        rd64(&card, regs::CYCLE).unwrap(),
        now,
        "time does not go back"
    );
    d.stop();
}
