//! `/dev/gpupm0`, the character device `gpupm-driver --transport cuse`
//! serves, checked through the device node only: identity, register
//! semantics through `GPUPM_IOC_REG_READ`/`REG_WRITE`, and refusals (ENOTTY
//! for unknown numbers, EINVAL for everything malformed, `read()`/`write()`
//! without an offset) with a digest of registers and window showing that
//! nothing changed.

use std::fs::File;
use std::hash::{DefaultHasher, Hasher};
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::path::Path;

use gpupm_client::devnode::NodeKind;
pub use gpupm_client::ops::access;
use gpupm_client::{sys, DevNode};
use gpupm_uapi::ioc;
use gpupm_uapi::ioctl::{
    window_read_cmd, Identity, RegAccess, WindowRead, GPUPM_IOC_IDENTITY, GPUPM_IOC_REG_BATCH,
    GPUPM_IOC_REG_READ, GPUPM_IOC_REG_WRITE, IOCTL_STRUCT_VERSION, IOC_MAGIC, WINDOW_READ_MAX,
    WINDOW_READ_NR,
};
use gpupm_uapi::layout::{BLOCK_SLOT_SIZE, CTX_BLOCK_SLOT_BASE};
use gpupm_uapi::regs::{self as r};
use nix::errno::Errno;
use zerocopy::IntoBytes;

/// Opens the character device, which must be one.
pub fn open(node: &Path) -> Result<DevNode, String> {
    let dev = DevNode::open(node).map_err(|e| format!("{}: {e}", node.display()))?;
    if dev.kind() != NodeKind::CharDevice {
        return Err(format!("{} is not a character device", node.display()));
    }
    Ok(dev)
}

/// `GPUPM_IOC_REG_READ` or `REG_WRITE` with `arg` on `file`.
pub fn reg_ioctl(file: &File, cmd: u32, arg: &mut RegAccess) -> Result<(), Errno> {
    sys::call(file.as_fd(), cmd, arg).map(drop)
}

/// Register ranges of the digest: globals, partitions, CCUs, VMs and the
/// first 64 contexts.
const DIGEST_RANGES: [(u64, u64); 5] = [
    (0, 0x400),
    (r::PART_BASE, r::CCU_BASE),
    (r::CCU_BASE, r::VM_BASE),
    (r::VM_BASE, r::VM_BASE + r::MAX_VMS as u64 * r::VM_STRIDE),
    (r::CTX_BASE, r::CTX_BASE + 64 * r::CTX_STRIDE),
];

/// Everything host-visible a request could change: every 32-bit word of
/// [`DIGEST_RANGES`] (value or errno) and the block slots of the system,
/// the VMs and the first 64 contexts, hashed.
pub fn digest(file: &File) -> Result<u64, String> {
    let mut h = DefaultHasher::new();
    for (start, end) in DIGEST_RANGES {
        for off in (start..end).step_by(4) {
            let mut a = access(off, 4, 0);
            match reg_ioctl(file, GPUPM_IOC_REG_READ, &mut a) {
                Ok(()) => h.write_u64(a.value),
                Err(e) => h.write_i32(-(e as i32)),
            }
        }
    }
    let blocks = u64::from(CTX_BLOCK_SLOT_BASE + 64) * BLOCK_SLOT_SIZE;
    let mut at = 0;
    while at < blocks {
        let n = usize::try_from((blocks - at).min(WINDOW_READ_MAX as u64)).unwrap_or(0);
        let data = window(file, at, n).map_err(|e| format!("window read at {at:#x}: {e}"))?;
        h.write(&data);
        at += n as u64;
    }
    Ok(h.finish())
}

/// `GPUPM_IOC_WINDOW_READ(len)` of `len` bytes at `offset`.
pub fn window(file: &File, offset: u64, len: usize) -> Result<Vec<u8>, Errno> {
    let mut arg = window_arg(offset, len);
    sys::call_bytes(file.as_fd(), window_read_cmd(len), &mut arg)?;
    Ok(arg.split_off(core::mem::size_of::<WindowRead>()))
}

/// A window read's argument: its head, then `len` zero bytes.
pub fn window_arg(offset: u64, len: usize) -> Vec<u8> {
    let head = WindowRead {
        version: IOCTL_STRUCT_VERSION,
        flags: 0,
        offset,
    };
    let mut arg = head.as_bytes().to_vec();
    arg.resize(arg.len() + len, 0);
    arg
}

/// `cuse-digest NODE`: prints the digest (compared across processes).
pub fn print_digest(node: &Path) -> Result<(), String> {
    let file = open_file(node)?;
    println!("{:016x}", digest(&file)?);
    Ok(())
}

/// The node opened read-write as a plain file (for raw system calls).
pub fn open_file(node: &Path) -> Result<File, String> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(node)
        .map_err(|e| format!("{}: {e}", node.display()))
}

fn expect_errno(what: &str, res: Result<(), Errno>, want: Errno) -> Result<(), String> {
    match res {
        Err(e) if e == want => Ok(()),
        other => Err(format!("{what}: {other:?}, expected {want}")),
    }
}

/// Identity through the node.
fn identity(dev: &DevNode) -> Result<(), String> {
    let id = dev.identity().map_err(|e| e.to_string())?;
    let want = (
        r::DEVICE_MAGIC,
        gpupm_uapi::ABI_VERSION,
        IOCTL_STRUCT_VERSION,
        1,
    );
    if (id.magic, id.abi_version, id.version, id.step_clock) != want {
        return Err(format!("identity {id:?}"));
    }
    let read = |off| dev.read32(off).map_err(|e| e.to_string());
    if read(r::ID)? != r::DEVICE_MAGIC || read(r::ABI_VERSION)? != gpupm_uapi::ABI_VERSION {
        return Err("ID/ABI_VERSION registers".into());
    }
    if read(r::TOPO_SMS)? != id.sms || read(r::TOPO_CCUS)? != id.ccus {
        return Err(format!("topology registers disagree with {id:?}"));
    }
    println!(
        "@@gpupm metric cuse_identity=magic {:#x} abi {:#x} sms {} ccus {} partitions {}",
        id.magic, id.abi_version, id.sms, id.ccus, id.partitions
    );
    Ok(())
}

/// Widths, halves of a 64-bit register, writes that read back, and a
/// read-only register refusing a write.
fn registers(dev: &DevNode, file: &File) -> Result<(), String> {
    let now = dev.advance(123_457).map_err(|e| e.to_string())?;
    let rd = |off, width| {
        let mut a = access(off, width, 0);
        reg_ioctl(file, GPUPM_IOC_REG_READ, &mut a).map(|()| a.value)
    };
    let cycle = (rd(r::CYCLE, 8), rd(r::CYCLE, 4), rd(r::CYCLE + 4, 4));
    if cycle != (Ok(now), Ok(now & 0xffff_ffff), Ok(now >> 32)) {
        return Err(format!(
            "CYCLE by 8 and by halves: {cycle:?}, advanced to {now}"
        ));
    }
    let switches = rd(r::part(1, r::PART_SWITCHES), 8).map_err(|e| e.to_string())?;
    let timeout = r::part(1, r::PART_SWITCH_TIMEOUT);
    dev.write32(timeout, 70_000).map_err(|e| e.to_string())?;
    if dev.read32(timeout).map_err(|e| e.to_string())? != 70_000 {
        return Err("a written register does not read back".into());
    }
    expect_errno(
        "write to the read-only ID",
        reg_ioctl(file, GPUPM_IOC_REG_WRITE, &mut access(r::ID, 4, 1)),
        Errno::EINVAL,
    )?;
    println!("@@gpupm metric cuse_cycle={now}");
    println!("@@gpupm metric cuse_partition1_switches={switches}");
    Ok(())
}

/// Every malformed or unknown request fails with its errno and changes
/// nothing.
fn refusals(file: &File) -> Result<(), String> {
    let before = digest(file)?;
    let timeout = r::part(1, r::PART_SWITCH_TIMEOUT);
    let bad: [(&str, RegAccess); 8] = [
        ("width 2", access(timeout, 2, 0)),
        ("width 16", access(timeout, 16, 0)),
        ("unaligned", access(timeout + 2, 4, 0)),
        ("unaligned 8-byte", access(r::CYCLE + 4, 8, 0)),
        ("8-byte access to a 32-bit register", access(r::ID, 8, 0)),
        ("past BAR0", access(r::BAR0_SIZE, 4, 0)),
        (
            "version 2",
            RegAccess {
                version: 2,
                ..access(timeout, 4, 0)
            },
        ),
        (
            "flags",
            RegAccess {
                flags: 1,
                ..access(timeout, 4, 0)
            },
        ),
    ];
    for (what, a) in bad {
        for cmd in [GPUPM_IOC_REG_READ, GPUPM_IOC_REG_WRITE] {
            let mut arg = a;
            expect_errno(what, reg_ioctl(file, cmd, &mut arg), Errno::EINVAL)?;
        }
    }
    expect_errno(
        "4-byte write of a 33-bit value",
        reg_ioctl(file, GPUPM_IOC_REG_WRITE, &mut access(timeout, 4, 1 << 32)),
        Errno::EINVAL,
    )?;
    unknown_and_misnumbered(file)?;
    let mut id = Identity {
        version: 9,
        ..Identity::default()
    };
    expect_errno(
        "identity version 9",
        sys::call(file.as_fd(), GPUPM_IOC_IDENTITY, &mut id).map(drop),
        Errno::EINVAL,
    )?;
    expect_errno(
        "window read past its end",
        window(file, u64::MAX - 4, 8).map(drop),
        Errno::EINVAL,
    )?;
    no_offset_io(file)?;
    if digest(file)? != before {
        return Err("a refused request changed the device".into());
    }
    Ok(())
}

/// Unknown numbers → ENOTTY; known numbers with the wrong size or
/// direction → EINVAL.
fn unknown_and_misnumbered(file: &File) -> Result<(), String> {
    let mut buf = vec![0u8; sys::RAW_MIN_BUF];
    let mut raw = |cmd: u32| {
        buf.fill(0);
        sys::raw(file.as_fd(), cmd, &mut buf).map(drop)
    };
    let rw = |nr, size| ioc::read_write(IOC_MAGIC, nr, size);
    for (what, cmd, want) in [
        ("unknown number", rw(0x7f, 48), Errno::ENOTTY),
        (
            "another driver's magic",
            ioc::read_write(b'Z', 0, 48),
            Errno::ENOTTY,
        ),
        ("REG_READ with 64 bytes", rw(0x05, 64), Errno::EINVAL),
        ("REG_WRITE as _IOWR", rw(0x06, 32), Errno::EINVAL),
        (
            "batch as _IOW",
            ioc::write(IOC_MAGIC, 0x01, 1552),
            Errno::EINVAL,
        ),
        (
            "batch of zeros (version 0)",
            GPUPM_IOC_REG_BATCH,
            Errno::EINVAL,
        ),
        ("window read of 0 bytes", window_read_cmd(0), Errno::EINVAL),
        (
            "window read as _IOW",
            ioc::write(IOC_MAGIC, WINDOW_READ_NR, 24),
            Errno::EINVAL,
        ),
    ] {
        expect_errno(what, raw(cmd), want)?;
    }
    Ok(())
}

/// `write()` has no offset on the character device, and `read()` returns
/// only whole interrupt records.
fn no_offset_io(file: &File) -> Result<(), String> {
    let errno = |e: std::io::Error| Errno::from_raw(e.raw_os_error().unwrap_or(0));
    let mut f = file;
    expect_errno(
        "write() of 4 bytes",
        f.write(&r::DEVICE_MAGIC.to_le_bytes())
            .map(drop)
            .map_err(errno),
        Errno::EINVAL,
    )?;
    for n in [4usize, 8, 31] {
        let mut buf = vec![0u8; n];
        expect_errno(
            &format!("read() of {n} bytes"),
            f.read(&mut buf).map(drop).map_err(errno),
            Errno::EINVAL,
        )?;
    }
    Ok(())
}

/// `cuse-node NODE`: identity, registers, refusals.
pub fn run(node: &Path) -> Result<(), String> {
    let dev = open(node)?;
    let file = open_file(node)?;
    identity(&dev)?;
    registers(&dev, &file)?;
    refusals(&file)?;
    Ok(())
}

/// `cuse-monotonic NODE SECS`: on a real-time clock, `CYCLE` read with one
/// 8-byte `GPUPM_IOC_REG_READ` never goes back, also when its low half
/// wraps (every 2^32 cycles, about 2.2 s at 1.98 GHz), where reading it by
/// halves could tear. Reads for `SECS` seconds, or until a wrap was seen.
pub fn monotonic(node: &Path, secs: f64) -> Result<(), String> {
    let file = open_file(node)?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs_f64(secs);
    let read = || {
        let mut a = access(r::CYCLE, 8, 0);
        reg_ioctl(&file, GPUPM_IOC_REG_READ, &mut a)
            .map(|()| a.value)
            .map_err(|e| format!("CYCLE: {e}"))
    };
    let first = read()?;
    let (mut last, mut reads, mut wraps) = (first, 0u64, 0u64);
    while std::time::Instant::now() < deadline && wraps == 0 {
        let now = read()?;
        if now < last {
            return Err(format!("CYCLE went back from {last:#x} to {now:#x}"));
        }
        wraps += (now >> 32) - (last >> 32);
        (last, reads) = (now, reads + 1);
    }
    if last == first {
        return Err("CYCLE did not advance on a real-time clock".into());
    }
    println!("@@gpupm metric cuse_cycle_reads={reads}");
    println!("@@gpupm metric cuse_cycle_low_half_wraps={wraps}");
    Ok(())
}
