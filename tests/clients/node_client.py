#!/usr/bin/env python3
"""A minimal gpupm device-node client in Python: proves that the node ABI is
usable from another language with nothing but os.pread/pwrite/read,
fcntl.ioctl and struct, using constants generated from the uapi crate
(gpupm_uapi.py beside this file).

Usage:
  node_client.py selftest NODE_DIR   exercise registers, ioctls, interrupts
  node_client.py report NODE_DIR CYCLES
                                     advance the step clock, read the records,
                                     flush, print identity, records, system
                                     ledger and system block (one per line)
  node_client.py denied NODE_DIR     open as root, drop to nobody, expect EACCES
selftest and denied print "ok" and exit 0 on success; any failure raises
(exit 1). The Rust test node_lifecycle.rs compares `report` with what it
reads itself.
"""

import errno
import fcntl
import os
import select
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpupm_uapi as U  # noqa: E402

REG_TRIG_TARGET = U.REG_TRIG_TARGET
REG_TOPO_PARTITIONS = U.REG_TOPO_PARTITIONS
REG_PART_STATUS = U.REG_PART_STATUS
REG_PART_SWITCH_TIMEOUT = U.REG_PART_SWITCH_TIMEOUT
TRIG_CMD_FLUSH_ULC = U.TRIG_CMD_FLUSH_ULC
PART_STATUS_CONFIGURED = U.PART_STATUS_CONFIGURED
MAX_PARTITION_SLOTS = U.MAX_PARTITION_SLOTS
LEDGER_SCOPE_SYSTEM = U.LEDGER_SCOPE_SYSTEM
MAX_EVENTS = U.MAX_EVENTS
SIZEOF_ENVELOPE = U.SIZEOF_ENVELOPE
FMT_LEDGER_QUERY = "<4I%dQ%ds16s" % (3 * MAX_EVENTS, SIZEOF_ENVELOPE)
FMT_BLOCK = "<IHHIIQQ%dQ" % MAX_EVENTS
SIZEOF_BLOCK_SLOT = U.SIZEOF_BLOCK_SLOT
assert struct.calcsize(FMT_LEDGER_QUERY) == U.SIZEOF_LEDGER_QUERY
assert SIZEOF_ENVELOPE + struct.calcsize(FMT_BLOCK) + 16 == SIZEOF_BLOCK_SLOT

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


def part(p, reg):
    return U.REG_PART_BASE + p * U.REG_PART_STRIDE + reg


def advance(fd, cycles):
    buf = bytearray(struct.pack(U.FMT_ADVANCE, U.IOCTL_STRUCT_VERSION, 0, cycles, 0))
    fcntl.ioctl(fd, U.GPUPM_IOC_ADVANCE, buf)
    return struct.unpack(U.FMT_ADVANCE, buf)[3]


def ledger(fd, scope, ident):
    buf = bytearray(U.SIZEOF_LEDGER_QUERY)
    struct.pack_into("<4I", buf, 0, U.IOCTL_STRUCT_VERSION, scope, ident, 0)
    fcntl.ioctl(fd, U.GPUPM_IOC_LEDGER, buf)
    v = struct.unpack(FMT_LEDGER_QUERY, buf)
    return (
        v[4:4 + MAX_EVENTS],
        v[4 + MAX_EVENTS:4 + 2 * MAX_EVENTS],
        v[4 + 2 * MAX_EVENTS:4 + 3 * MAX_EVENTS],
    )


def records(fd):
    """Every interrupt record available now on a non-blocking fd."""
    out = []
    while True:
        try:
            data = os.read(fd, 64 * U.SIZEOF_INTERRUPT_RECORD)
        except BlockingIOError:
            return out
        for i in range(0, len(data), U.SIZEOF_INTERRUPT_RECORD):
            out.append(struct.unpack_from(U.FMT_INTERRUPT_RECORD, data, i))


def flush_all(fd):
    mask = 1
    for p in range(1, MAX_PARTITION_SLOTS):
        if rd32(fd, part(p, REG_PART_STATUS)) & PART_STATUS_CONFIGURED:
            mask |= 1 << p
    wr32(fd, REG_TRIG_TARGET, mask)
    wr32(fd, U.REG_TRIG_CMD, TRIG_CMD_FLUSH_ULC | U.TRIG_CMD_TRIGGER)


def system_block(fd):
    raw = os.pread(fd, SIZEOF_BLOCK_SLOT, U.MEM_WINDOW_OFFSET)
    assert len(raw) == SIZEOF_BLOCK_SLOT
    return struct.unpack_from(FMT_BLOCK, raw, SIZEOF_ENVELOPE)


def selftest(node_dir):
    card = os.path.join(node_dir, "card0")
    fd = os.open(card, os.O_RDWR | os.O_NONBLOCK)
    ident = identity(fd)
    assert ident[0] == U.IOCTL_STRUCT_VERSION and ident[1] == U.DEVICE_MAGIC, ident
    assert ident[2] == U.ABI_VERSION
    assert ident[4] == rd32(fd, REG_TOPO_PARTITIONS) > 0, ident
    assert ident[8] == 1, "step clock"
    assert rd32(fd, U.REG_ID) == U.DEVICE_MAGIC

    timeout = part(1, REG_PART_SWITCH_TIMEOUT)
    err, failed, values = batch(fd, [
        (U.REG_OP_WRITE, timeout, 4, 7000),
        (U.REG_OP_READ, timeout, 4, 0),
        (U.REG_OP_READ, U.REG_ID, 4, 0),
    ])
    assert (err, failed, values[1:]) == (0, 3, [7000, U.DEVICE_MAGIC]), (err, failed, values)
    seq = rd64(fd, U.REG_INTR_SEQ)
    err, failed, _ = batch(fd, [
        (U.REG_OP_WRITE, timeout, 4, 7100),
        (U.REG_OP_WRITE, REG_TRIG_TARGET, 4, 1),
        (U.REG_OP_WRITE, U.REG_TRIG_CMD, 4, U.TRIG_CMD_TRIGGER),
        (U.REG_OP_WRITE, U.REG_ID, 4, 1),
    ])
    assert (err, failed) == (errno.EINVAL, 3), (err, failed)
    assert rd32(fd, timeout) == 7000
    assert rd64(fd, U.REG_INTR_SEQ) == seq

    expect_errno(errno.ENOTTY, fcntl.ioctl, fd, (U.GPUPM_IOC_IDENTITY & ~0xFF) | 0x7F, bytearray(48))
    bad = bytearray(struct.pack(U.FMT_IDENTITY, 99, *([0] * 9), 0))
    expect_errno(errno.EINVAL, fcntl.ioctl, fd, U.GPUPM_IOC_IDENTITY, bad)
    expect_errno(errno.EINVAL, os.pread, fd, 4, U.REG_ID + 2)
    expect_errno(errno.EINVAL, ledger, fd, 99, 0)

    expect_errno(errno.EAGAIN, os.read, fd, U.SIZEOF_INTERRUPT_RECORD)
    wr32(fd, REG_TRIG_TARGET, 1)
    wr32(fd, U.REG_TRIG_CMD, U.TRIG_CMD_TRIGGER)
    p = select.poll()
    p.register(fd, select.POLLIN)
    assert p.poll(10000), "poll timed out"
    rec = struct.unpack(U.FMT_INTERRUPT_RECORD, os.read(fd, U.SIZEOF_INTERRUPT_RECORD))
    assert rec[0] == seq and rec[2] == U.INTR_TRIGGER_DONE, rec

    assert advance(fd, 20000) == 20000
    assert any(r[2] == U.INTR_CTX_CREATED for r in records(fd)), "contexts are created"
    os.close(fd)


def report(node_dir, cycles):
    fd = os.open(os.path.join(node_dir, "card0"), os.O_RDWR | os.O_NONBLOCK)
    print("identity", *identity(fd))
    print("cycle", advance(fd, cycles))
    print("records", *[":".join(map(str, r)) for r in records(fd)])
    flush_all(fd)
    generated, masked, remainder = ledger(fd, LEDGER_SCOPE_SYSTEM, 0)
    print("generated", *generated)
    print("masked", *masked)
    print("remainder", *remainder)
    print("system_block", *system_block(fd))
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
    if len(argv) == 4 and argv[1] == "report":
        report(argv[2], int(argv[3]))
        return 0
    if len(argv) != 3 or argv[1] not in ("selftest", "denied"):
        print(__doc__, file=sys.stderr)
        return 2
    {"selftest": selftest, "denied": denied}[argv[1]](argv[2])
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
