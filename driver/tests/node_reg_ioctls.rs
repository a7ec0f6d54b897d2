//! `GPUPM_IOC_REG_READ`, `GPUPM_IOC_REG_WRITE` and `GPUPM_IOC_WINDOW_READ(len)`
//! (the character device's register and window access) through `card0`,
//! where they run the same dispatcher as on `/dev/gpupm0`: they agree with
//! `pread`/`pwrite` byte for byte, and every malformed one fails with
//! EINVAL and changes nothing. `gpupm-client`'s `DevNode` is checked over
//! the file here and over the character device in the kernel lane.

use std::os::unix::fs::FileExt;

use gpupm_client::ops::access;
use gpupm_client::DevNode;
use gpupm_test_support::rawnode::{advance, digest, errno, flush_all, ioctl, rd32, rd64};
use gpupm_test_support::Driver;
use gpupm_uapi::ioc;
use gpupm_uapi::ioctl::{
    window_read_cmd, RegAccess, WindowRead, GPUPM_IOC_REG_READ, GPUPM_IOC_REG_WRITE,
    IOCTL_STRUCT_VERSION, IOC_MAGIC, WINDOW_READ_MAX, WINDOW_READ_NR,
};
use gpupm_uapi::layout::{block_slot_offset, BLOCK_SLOT_SIZE, MEM_WINDOW_OFFSET, STREAM_REGION};
use gpupm_uapi::regs;
use zerocopy::IntoBytes;

fn reg_read(card: &std::fs::File, offset: u64, width: u32) -> std::io::Result<u64> {
    let mut a = access(offset, width, 0);
    ioctl(card, GPUPM_IOC_REG_READ, a.as_mut_bytes())?;
    Ok(a.value)
}

const HEAD: usize = core::mem::size_of::<WindowRead>();

/// The argument of a window read: `head` followed by `len` bytes of 0xa5.
fn window_arg(head: WindowRead, len: usize) -> Vec<u8> {
    let mut arg = vec![0xa5u8; HEAD + len];
    arg[..HEAD].copy_from_slice(head.as_bytes());
    arg
}

fn head(offset: u64) -> WindowRead {
    WindowRead {
        version: IOCTL_STRUCT_VERSION,
        flags: 0,
        offset,
    }
}

/// `GPUPM_IOC_WINDOW_READ(len)` at `offset`: the bytes read.
fn window_ioctl(card: &std::fs::File, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
    let mut arg = window_arg(head(offset), len);
    ioctl(card, window_read_cmd(len), &mut arg)?;
    assert_eq!(&arg[..HEAD], head(offset).as_bytes(), "the head comes back");
    Ok(arg[HEAD..].to_vec())
}

#[test]
fn register_ioctls_agree_with_pread_and_pwrite() {
    let d = Driver::start();
    let card = d.card();
    advance(&card, 123_456).unwrap();
    for (offset, width) in [
        (regs::ID, 4),
        (regs::ABI_VERSION, 4),
        (regs::CYCLE, 8),
        (regs::CYCLE, 4),
        (regs::CYCLE + 4, 4),
        (regs::part(1, regs::PART_CCU_ASSIGNED), 8),
        (regs::part(1, regs::PART_SWITCH_TIMEOUT), 4),
    ] {
        let by_pread = if width == 8 {
            rd64(&card, offset).unwrap()
        } else {
            u64::from(rd32(&card, offset).unwrap())
        };
        assert_eq!(
            reg_read(&card, offset, width).unwrap(),
            by_pread,
            "{width}-byte read at {offset:#x}"
        );
    }
    assert_eq!(reg_read(&card, regs::CYCLE, 8).unwrap(), 123_456);

    let timeout = regs::part(1, regs::PART_SWITCH_TIMEOUT);
    let mut w = access(timeout, 4, 7_777);
    ioctl(&card, GPUPM_IOC_REG_WRITE, w.as_mut_bytes()).unwrap();
    assert_eq!(rd32(&card, timeout).unwrap(), 7_777);
    assert_eq!(w.value, 7_777, "_IOW: nothing is copied back");
    d.stop();
}

#[test]
fn window_ioctl_reads_what_pread_reads() {
    let d = Driver::start();
    let card = d.card();
    advance(&card, 200_000).unwrap();
    flush_all(&card);
    let slot = usize::try_from(BLOCK_SLOT_SIZE).unwrap();
    for (offset, len) in [
        (block_slot_offset(0), slot),
        (block_slot_offset(1) + 3, 1),
        (0, WINDOW_READ_MAX),
        (STREAM_REGION, 608),
    ] {
        let got = window_ioctl(&card, offset, len).unwrap();
        let mut want = vec![0u8; len];
        card.read_exact_at(&mut want, MEM_WINDOW_OFFSET + offset)
            .unwrap();
        assert_eq!(got, want, "{len} bytes at {offset:#x}");
    }
    let system = window_ioctl(&card, block_slot_offset(0), slot).unwrap();
    assert!(
        system.iter().any(|&b| b != 0),
        "the flushed system block has counts"
    );

    let node_dir = d.card_path().parent().unwrap().to_path_buf();
    let dev = DevNode::open(&node_dir).unwrap();
    let mut bulk = vec![0u8; 3 * WINDOW_READ_MAX + 100];
    dev.window(5, &mut bulk).unwrap();
    let mut want = vec![0u8; bulk.len()];
    card.read_exact_at(&mut want, MEM_WINDOW_OFFSET + 5)
        .unwrap();
    assert_eq!(bulk, want);
    d.stop();
}

#[test]
fn malformed_register_and_window_ioctls_are_einval_and_change_nothing() {
    let d = Driver::start();
    let card = d.card();
    advance(&card, 70_000).unwrap();
    let timeout = regs::part(1, regs::PART_SWITCH_TIMEOUT);
    let timeout_before = rd32(&card, timeout).unwrap();
    let with = |f: fn(&mut RegAccess)| {
        let mut a = access(timeout, 4, 9_000);
        f(&mut a);
        a
    };
    let bad_accesses = [
        ("version 2", with(|a| a.version = 2)),
        ("flags", with(|a| a.flags = 1)),
        ("reserved", with(|a| a.reserved = 1)),
        ("width 2", with(|a| a.width = 2)),
        ("width 16", with(|a| a.width = 16)),
        ("unaligned", with(|a| a.offset += 2)),
        ("8-byte access to a 32-bit register", with(|a| a.width = 8)),
        ("past BAR0", with(|a| a.offset = regs::BAR0_SIZE)),
        ("offset wraps", with(|a| a.offset = u64::MAX - 3)),
        (
            "4-byte value above 32 bits",
            with(|a| a.value = 1 << 32 | 9_000),
        ),
        ("read-only register", with(|a| a.offset = regs::ID)),
        ("value below the minimum", with(|a| a.value = 100)),
    ];
    for (what, a) in bad_accesses {
        for (cmd, name) in [(GPUPM_IOC_REG_WRITE, "write"), (GPUPM_IOC_REG_READ, "read")] {
            // Reads of a writable register with a good shape succeed; only
            // shape errors are refused for both.
            let read_ok = cmd == GPUPM_IOC_REG_READ
                && matches!(
                    what,
                    "4-byte value above 32 bits" | "read-only register" | "value below the minimum"
                );
            let before = digest(&card);
            let mut arg = a;
            let res = ioctl(&card, cmd, arg.as_mut_bytes());
            if read_ok {
                assert!(res.is_ok(), "{name} {what}: {res:?}");
            } else {
                let e = res.expect_err(what);
                assert_eq!(errno(&e), libc::EINVAL, "{name} {what}: {e}");
            }
            assert!(digest(&card) == before, "{name} {what} changed the device");
        }
    }
    let too_long = u32::try_from(nix::request_code_readwrite!(
        IOC_MAGIC,
        WINDOW_READ_NR,
        HEAD + WINDOW_READ_MAX + 1
    ))
    .unwrap();
    let bad_windows: [(&str, u32, Vec<u8>); 7] = [
        ("length 0", window_read_cmd(0), window_arg(head(0), 0)),
        (
            "length past the maximum",
            too_long,
            window_arg(head(0), WINDOW_READ_MAX + 1),
        ),
        (
            "shorter than its head",
            ioc::read_write(IOC_MAGIC, WINDOW_READ_NR, 8),
            vec![0; 8],
        ),
        (
            "as _IOW",
            ioc::write(IOC_MAGIC, WINDOW_READ_NR, HEAD + 8),
            window_arg(head(0), 8),
        ),
        (
            "past the window",
            window_read_cmd(8),
            window_arg(head(u64::MAX - 10), 8),
        ),
        (
            "version 2",
            window_read_cmd(8),
            window_arg(
                WindowRead {
                    version: 2,
                    ..head(0)
                },
                8,
            ),
        ),
        (
            "flags",
            window_read_cmd(8),
            window_arg(
                WindowRead {
                    flags: 1,
                    ..head(0)
                },
                8,
            ),
        ),
    ];
    for (what, cmd, mut arg) in bad_windows {
        let before = digest(&card);
        let e = ioctl(&card, cmd, &mut arg).expect_err(what);
        assert_eq!(errno(&e), libc::EINVAL, "window {what}: {e}");
        assert!(digest(&card) == before, "window {what} changed the device");
    }
    assert_eq!(rd32(&card, timeout).unwrap(), timeout_before);
    d.stop();
}
