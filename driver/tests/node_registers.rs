//! Register file and memory window through `pread`/`pwrite` on the node.

mod harness;

use std::os::unix::fs::FileExt;

use harness::{errno, rd32, rd64, wr32, Driver};
use gpupm_driver::node::fake::window_byte;
use gpupm_uapi::layout::MEM_WINDOW_OFFSET;
use gpupm_uapi::regs;

#[test]
fn identity_registers_read_through_pread() {
    let d = Driver::start();
    let card = d.card();
    assert_eq!(rd32(&card, regs::ID).unwrap(), regs::DEVICE_MAGIC);
    assert_eq!(
        rd32(&card, regs::ABI_VERSION).unwrap(),
        gpupm_uapi::ABI_VERSION
    );
    d.stop();
}

#[test]
fn sixty_four_bit_counter_reads_atomically_and_by_halves() {
    let d = Driver::start();
    let card = d.card();
    let mut adv = common_advance(1 << 33 | 5);
    harness::sys::ioctl(&card, gpupm_uapi::ioctl::GPUPM_IOC_ADVANCE, &mut adv).unwrap();
    let full = rd64(&card, regs::CYCLE).unwrap();
    assert_eq!(full, 1 << 33 | 5);
    assert_eq!(rd32(&card, regs::CYCLE).unwrap(), 5);
    assert_eq!(rd32(&card, regs::CYCLE + 4).unwrap(), 2);
    d.stop();
}

fn common_advance(cycles: u64) -> Vec<u8> {
    use zerocopy::IntoBytes;
    let a = gpupm_uapi::ioctl::Advance {
        version: gpupm_uapi::ioctl::IOCTL_STRUCT_VERSION,
        flags: 0,
        cycles,
        now: 0,
    };
    a.as_bytes().to_vec()
}

#[test]
fn writes_read_back_and_read_only_registers_refuse_writes() {
    let d = Driver::start();
    let card = d.card();
    let reg = regs::part(1, regs::PART_RC_BIND_CTX);
    wr32(&card, reg, 0xdead_beef).unwrap();
    assert_eq!(rd32(&card, reg).unwrap(), 0xdead_beef);
    let e = wr32(&card, regs::ID, 1).unwrap_err();
    assert_eq!(errno(&e), libc::EINVAL);
    assert_eq!(rd32(&card, regs::ID).unwrap(), regs::DEVICE_MAGIC);
    d.stop();
}

#[test]
fn unaligned_odd_width_and_out_of_range_accesses_are_einval_and_change_nothing() {
    let d = Driver::start();
    let card = d.card();
    let reg = regs::part(1, regs::PART_RC_BIND_VM);
    wr32(&card, reg, 7).unwrap();
    let mut b4 = [0u8; 4];
    let mut b2 = [0u8; 2];
    let mut b16 = [0u8; 16];
    for (what, res) in [
        ("unaligned read", card.read_at(&mut b4, reg + 2)),
        ("2-byte read", card.read_at(&mut b2, reg)),
        ("16-byte read", card.read_at(&mut b16, reg)),
        ("read past BAR0", card.read_at(&mut b4, regs::BAR0_SIZE)),
        (
            "read far past BAR0",
            card.read_at(&mut b4, MEM_WINDOW_OFFSET - 4 - 0x1000 * 4),
        ),
        ("unaligned write", card.write_at(&[1, 2, 3, 4], reg + 1)),
        ("2-byte write", card.write_at(&[1, 2], reg)),
        (
            "write past BAR0",
            card.write_at(&[1, 2, 3, 4], regs::BAR0_SIZE),
        ),
        (
            "unaligned 8-byte read",
            card.read_at(&mut [0u8; 8], regs::CYCLE + 4),
        ),
        (
            "window write",
            card.write_at(&[1, 2, 3, 4], MEM_WINDOW_OFFSET),
        ),
    ] {
        let e = res.expect_err(what);
        assert_eq!(errno(&e), libc::EINVAL, "{what}: {e}");
    }
    assert_eq!(rd32(&card, reg).unwrap(), 7);
    d.stop();
}

#[test]
fn memory_window_reads_in_bulk() {
    let d = Driver::start();
    let card = d.card();
    let mut buf = vec![0u8; 64 * 1024];
    let base = 4096 * 3 + 17;
    let n = card.read_at(&mut buf, MEM_WINDOW_OFFSET + base).unwrap();
    assert_eq!(n, buf.len());
    assert!(buf
        .iter()
        .enumerate()
        .all(|(i, &b)| b == window_byte(base + i as u64)));
    d.stop();
}

#[test]
fn oob_node_allows_only_the_mailbox() {
    let d = Driver::start();
    let oob = d.open("card0-oob", 0);
    wr32(&oob, regs::MBOX_CMD, regs::mbox_op::GET_CAPS).unwrap();
    assert_eq!(
        rd32(&oob, regs::MBOX_STATUS).unwrap(),
        regs::mbox_status::OK
    );
    assert_eq!(
        rd64(&oob, regs::MBOX_DATA).unwrap() >> 32,
        u64::from(gpupm_uapi::ABI_VERSION)
    );
    for off in [regs::ID, regs::TRIG_CMD, regs::INTR_ACK] {
        assert_eq!(errno(&rd32(&oob, off).unwrap_err()), libc::EINVAL);
        assert_eq!(errno(&wr32(&oob, off, 0).unwrap_err()), libc::EINVAL);
    }
    let e = harness::sys::ioctl(&oob, gpupm_uapi::ioctl::GPUPM_IOC_IDENTITY, &mut [0u8; 48])
        .unwrap_err();
    assert_eq!(errno(&e), libc::ENOTTY);
    d.stop();
}
