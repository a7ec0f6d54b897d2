//! ioctls through the node: identity, batches, advance, reset, bad input.

mod harness;

use harness::sys::ioctl;
use harness::{errno, rd32, rd64, wr32, Driver};
use gpupm_uapi::ioctl::{
    reg_op, Advance, Identity, LedgerQuery, RegBatch, RegOp, Reset, GPUPM_IOC_ADVANCE,
    GPUPM_IOC_IDENTITY, GPUPM_IOC_LEDGER, GPUPM_IOC_REG_BATCH, GPUPM_IOC_RESET,
    IOCTL_STRUCT_VERSION, IOC_MAGIC, MAX_BATCH_OPS,
};
use gpupm_uapi::regs;
use zerocopy::{FromBytes, FromZeros, IntoBytes};

fn batch(ops: &[RegOp]) -> RegBatch {
    let mut b = RegBatch::new_zeroed();
    b.version = IOCTL_STRUCT_VERSION;
    b.count = u32::try_from(ops.len()).unwrap();
    b.ops[..ops.len()].copy_from_slice(ops);
    b
}

fn write_op(offset: u64, value: u64) -> RegOp {
    RegOp {
        offset,
        value,
        op: reg_op::WRITE,
        width: 4,
    }
}

fn read_op(offset: u64, width: u32) -> RegOp {
    RegOp {
        offset,
        value: 0,
        op: reg_op::READ,
        width,
    }
}

#[test]
fn identity_reports_the_device() {
    let d = Driver::start();
    let card = d.card();
    let mut id = Identity {
        version: IOCTL_STRUCT_VERSION,
        ..Default::default()
    };
    ioctl(&card, GPUPM_IOC_IDENTITY, id.as_mut_bytes()).unwrap();
    assert_eq!(id.magic, regs::DEVICE_MAGIC);
    assert_eq!(id.abi_version, gpupm_uapi::ABI_VERSION);
    assert_eq!(id.version, IOCTL_STRUCT_VERSION);
    assert_eq!(id.step_clock, 1);
    d.stop();
}

#[test]
fn unknown_ioctl_is_enotty() {
    let d = Driver::start();
    let card = d.card();
    let unknown = u32::try_from(nix::request_code_readwrite!(IOC_MAGIC, 0x7f, 48)).unwrap();
    let other_magic = u32::try_from(nix::request_code_readwrite!(b'Z', 0x00, 48)).unwrap();
    for cmd in [unknown, other_magic] {
        let e = ioctl(&card, cmd, &mut [0u8; 48]).unwrap_err();
        assert_eq!(errno(&e), libc::ENOTTY, "cmd {cmd:#x}");
    }
    d.stop();
}

#[test]
fn wrong_size_version_flags_are_einval_and_change_nothing() {
    let d = Driver::start();
    let card = d.card();
    let scratch = regs::part(1, regs::PART_RC_BIND_VM);
    let wrong_size = u32::try_from(nix::request_code_readwrite!(IOC_MAGIC, 0x01, 64)).unwrap();
    let e = ioctl(&card, wrong_size, &mut [0u8; 64]).unwrap_err();
    assert_eq!(errno(&e), libc::EINVAL);

    let mut b = batch(&[write_op(scratch, 9)]);
    b.version = 2;
    assert_eq!(
        errno(&ioctl(&card, GPUPM_IOC_REG_BATCH, b.as_mut_bytes()).unwrap_err()),
        libc::EINVAL
    );
    let mut b = batch(&[write_op(scratch, 9)]);
    b.flags = 1;
    assert_eq!(
        errno(&ioctl(&card, GPUPM_IOC_REG_BATCH, b.as_mut_bytes()).unwrap_err()),
        libc::EINVAL
    );
    let mut b = batch(&[write_op(scratch, 9)]);
    b.count = u32::try_from(MAX_BATCH_OPS + 1).unwrap();
    assert_eq!(
        errno(&ioctl(&card, GPUPM_IOC_REG_BATCH, b.as_mut_bytes()).unwrap_err()),
        libc::EINVAL
    );

    let mut a = Advance {
        version: IOCTL_STRUCT_VERSION,
        flags: 4,
        cycles: 10,
        now: 0,
    };
    assert_eq!(
        errno(&ioctl(&card, GPUPM_IOC_ADVANCE, a.as_mut_bytes()).unwrap_err()),
        libc::EINVAL
    );
    a.flags = 0;
    a.cycles = 0;
    assert_eq!(
        errno(&ioctl(&card, GPUPM_IOC_ADVANCE, a.as_mut_bytes()).unwrap_err()),
        libc::EINVAL
    );
    let mut r = Reset {
        version: IOCTL_STRUCT_VERSION,
        magic: 1,
    };
    assert_eq!(
        errno(&ioctl(&card, GPUPM_IOC_RESET, r.as_mut_bytes()).unwrap_err()),
        libc::EINVAL
    );
    let mut q = LedgerQuery::new_zeroed();
    q.version = IOCTL_STRUCT_VERSION;
    q.scope = 99;
    assert_eq!(
        errno(&ioctl(&card, GPUPM_IOC_LEDGER, q.as_mut_bytes()).unwrap_err()),
        libc::EINVAL
    );

    assert_eq!(rd32(&card, scratch).unwrap(), 0);
    assert_eq!(rd64(&card, regs::CYCLE).unwrap(), 0);
    assert_eq!(
        rd64(&card, regs::INTR_SEQ).unwrap(),
        0,
        "nothing raised an interrupt"
    );
    d.stop();
}

#[test]
fn batch_runs_in_order_and_reads_back() {
    let d = Driver::start();
    let card = d.card();
    let scratch = regs::part(2, regs::PART_RC_BIND_CTX);
    let mut b = batch(&[
        write_op(scratch, 41),
        read_op(scratch, 4),
        write_op(scratch, 42),
        read_op(scratch, 4),
        read_op(regs::ID, 4),
        read_op(regs::CYCLE, 8),
    ]);
    assert_eq!(
        ioctl(&card, GPUPM_IOC_REG_BATCH, b.as_mut_bytes()).unwrap(),
        0
    );
    assert_eq!(b.failed_index, 6);
    let values: Vec<u64> = b.ops[..6].iter().map(|o| o.value).collect();
    assert_eq!(values, [41, 41, 42, 42, u64::from(regs::DEVICE_MAGIC), 0]);
    d.stop();
}

#[test]
fn batch_whose_third_op_is_invalid_changes_nothing() {
    let d = Driver::start();
    let card = d.card();
    let scratch = regs::part(1, regs::PART_RC_BIND_VM);
    wr32(&card, scratch, 5).unwrap();
    for bad in [
        write_op(regs::ID, 1), // refused by the device
        RegOp {
            offset: scratch + 2,
            value: 0,
            op: reg_op::READ,
            width: 4,
        }, // malformed
        RegOp {
            offset: scratch,
            value: 0,
            op: 7,
            width: 4,
        }, // unknown op kind
    ] {
        let mut b = batch(&[
            write_op(scratch, 6),
            write_op(regs::TRIG_CMD, 2),
            bad,
            write_op(scratch, 8),
        ]);
        let before = b;
        let e = ioctl(&card, GPUPM_IOC_REG_BATCH, b.as_mut_bytes()).unwrap_err();
        assert_eq!(errno(&e), libc::EINVAL);
        assert_eq!(b.failed_index, 2, "failed index is reported back");
        assert_eq!(b.ops, before.ops);
        assert_eq!(rd32(&card, scratch).unwrap(), 5);
        assert_eq!(
            rd64(&card, regs::INTR_SEQ).unwrap(),
            0,
            "the trigger in the batch did not run"
        );
    }
    d.stop();
}

#[test]
fn advance_steps_the_clock_and_reset_raises_an_interrupt() {
    let d = Driver::start();
    let card = d.card();
    let mut a = Advance {
        version: IOCTL_STRUCT_VERSION,
        flags: 0,
        cycles: 1000,
        now: 0,
    };
    ioctl(&card, GPUPM_IOC_ADVANCE, a.as_mut_bytes()).unwrap();
    assert_eq!(a.now, 1000);
    let mut q = LedgerQuery::new_zeroed();
    q.version = IOCTL_STRUCT_VERSION;
    q.scope = gpupm_uapi::ioctl::ledger_scope::SYSTEM;
    ioctl(&card, GPUPM_IOC_LEDGER, q.as_mut_bytes()).unwrap();
    assert_eq!(q.version, IOCTL_STRUCT_VERSION);
    let mut r = Reset {
        version: IOCTL_STRUCT_VERSION,
        magic: regs::RESET_MAGIC,
    };
    ioctl(&card, GPUPM_IOC_RESET, r.as_mut_bytes()).unwrap();
    assert_eq!(rd64(&card, regs::INTR_SEQ).unwrap(), 1);
    let status = rd32(&card, regs::INTR_STATUS).unwrap();
    assert_eq!(status, gpupm_uapi::intr::source::DEVICE_RESET);
    d.stop();
}

#[test]
fn identity_struct_round_trips_through_zerocopy() {
    let id = Identity::read_from_bytes(&[0u8; 48]).unwrap();
    assert_eq!(id.version, 0);
}
