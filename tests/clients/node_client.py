#!/usr/bin/env python3
"""A minimal gpupm device-node client in Python: proves that the node ABI is
usable from another language with nothing but os.pread/pwrite/read,
fcntl.ioctl and struct, using constants generated from the uapi crate
(gpupm_uapi.py beside this file).

Usage:
  node_client.py selftest NODE_DIR   exercise registers, ioctls, interrupts
  node_client.py denied NODE_DIR     open as root, drop to nobody, expect EACCES
Prints "ok" and exits 0 on success; raises (exit 1) otherwise.
"""

import errno
import fcntl
import os
import select
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpupm_uapi as U  # noqa: E402

NOBODY = 65534


def rd32(fd, off):
    return struct.unpack("<I", os.pread(fd, 4, off))[0]


def rd64(fd, off):
    return struct.unpack("<Q", os.pread(fd, 8, off))[0]


def wr32(fd, off, value):
    assert os.pwrite(fd, struct.pack("<I", value), off) == 4


def identity(fd):
    buf = bytearray(struct.pack(U.FMT_IDENTITY, U.IOCTL_STRUCT_VERSION, *([0] * 9), 0))
    assert len(buf) == U.SIZEOF_IDENTITY
    fcntl.ioctl(fd, U.GPUPM_IOC_IDENTITY, buf)
    return struct.unpack(U.FMT_IDENTITY, buf)


def batch(fd, ops):
    """ops: list of (op, offset, width, value); returns (rc_errno, failed_index, values)."""
    buf = bytearray(U.SIZEOF_REG_BATCH)
    struct.pack_into(U.FMT_REG_BATCH_HEAD, buf, 0, U.IOCTL_STRUCT_VERSION, len(ops), 0, 0)
    head = struct.calcsize(U.FMT_REG_BATCH_HEAD)
    for i, (op, off, width, value) in enumerate(ops):
        struct.pack_into(U.FMT_REG_OP, buf, head + i * U.SIZEOF_REG_OP, off, value, op, width)
    err = 0
    try:
        fcntl.ioctl(fd, U.GPUPM_IOC_REG_BATCH, buf)
    except OSError as e:
        err = e.errno
    failed = struct.unpack_from(U.FMT_REG_BATCH_HEAD, buf, 0)[3]
    values = [struct.unpack_from(U.FMT_REG_OP, buf, head + i * U.SIZEOF_REG_OP)[1] for i in range(len(ops))]
    return err, failed, values


def expect_errno(code, fn, *args):
    try:
        fn(*args)
    except OSError as e:
        assert e.errno == code, f"expected {errno.errorcode[code]}, got {e}"
        return
    raise AssertionError(f"expected {errno.errorcode[code]}, call succeeded")


def selftest(node_dir):
    card = os.path.join(node_dir, "card0")
    fd = os.open(card, os.O_RDWR | os.O_NONBLOCK)
    ident = identity(fd)
    assert ident[0] == U.IOCTL_STRUCT_VERSION and ident[1] == U.DEVICE_MAGIC, ident
    assert ident[2] == U.ABI_VERSION
    assert rd32(fd, U.REG_ID) == U.DEVICE_MAGIC

    scratch = U.REG_PART_BASE + U.REG_PART_STRIDE + U.REG_PART_RC_BIND_VM
    err, failed, values = batch(fd, [
        (U.REG_OP_WRITE, scratch, 4, 77),
        (U.REG_OP_READ, scratch, 4, 0),
        (U.REG_OP_READ, U.REG_ID, 4, 0),
    ])
    assert (err, failed, values[1:]) == (0, 3, [77, U.DEVICE_MAGIC]), (err, failed, values)
    err, failed, _ = batch(fd, [
        (U.REG_OP_WRITE, scratch, 4, 78),
        (U.REG_OP_WRITE, U.REG_TRIG_CMD, 4, U.TRIG_CMD_TRIGGER),
        (U.REG_OP_WRITE, U.REG_ID, 4, 1),
    ])
    assert (err, failed) == (errno.EINVAL, 2), (err, failed)
    assert rd32(fd, scratch) == 77
    assert rd64(fd, U.REG_INTR_SEQ) == 0

    expect_errno(errno.ENOTTY, fcntl.ioctl, fd, (U.GPUPM_IOC_IDENTITY & ~0xFF) | 0x7F, bytearray(48))
    bad = bytearray(struct.pack(U.FMT_IDENTITY, 99, *([0] * 9), 0))
    expect_errno(errno.EINVAL, fcntl.ioctl, fd, U.GPUPM_IOC_IDENTITY, bad)
    expect_errno(errno.EINVAL, os.pread, fd, 4, U.REG_ID + 2)

    expect_errno(errno.EAGAIN, os.read, fd, U.SIZEOF_INTERRUPT_RECORD)
    wr32(fd, U.REG_TRIG_CMD, U.TRIG_CMD_TRIGGER)
    p = select.poll()
    p.register(fd, select.POLLIN)
    assert p.poll(10000), "poll timed out"
    rec = struct.unpack(U.FMT_INTERRUPT_RECORD, os.read(fd, U.SIZEOF_INTERRUPT_RECORD))
    assert rec[0] == 1 and rec[2] == U.INTR_TRIGGER_DONE, rec

    window = os.pread(fd, 4096, U.MEM_WINDOW_OFFSET)
    assert len(window) == 4096
    os.close(fd)


def denied(node_dir):
    card = os.path.join(node_dir, "card0")
    fd = os.open(card, os.O_RDWR | os.O_NONBLOCK)
    os.setgroups([])
    os.setresgid(NOBODY, NOBODY, NOBODY)
    os.setresuid(NOBODY, NOBODY, NOBODY)
    expect_errno(errno.EACCES, os.pread, fd, 4, U.REG_ID)
    expect_errno(errno.EACCES, os.pwrite, fd, struct.pack("<I", 1), U.REG_TRIG_CMD)
    expect_errno(errno.EACCES, os.read, fd, U.SIZEOF_INTERRUPT_RECORD)
    expect_errno(errno.EACCES, fcntl.ioctl, fd, U.GPUPM_IOC_IDENTITY, bytearray(U.SIZEOF_IDENTITY))
    expect_errno(errno.EACCES, os.open, card, os.O_RDONLY)
    expect_errno(errno.EACCES, os.open, os.path.join(node_dir, "card0-oob"), os.O_RDONLY)


def main(argv):
    if len(argv) != 3 or argv[1] not in ("selftest", "denied"):
        print(__doc__, file=sys.stderr)
        return 2
    {"selftest": selftest, "denied": denied}[argv[1]](argv[2])
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
