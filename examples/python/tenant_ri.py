#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""tenant_ri: a runtime-instrumentation session on one of the caller's contexts.

Usage: tenant_ri.py CTX MODE INTERVAL RGS GROUPS [NODE]
       MODE: cycle | instr | directed (INTERVAL, the SF, must be 0 then)
       NODE: /run/gpupm/tenant/node

The Python twin of examples/c/tenant_ri.c, standard library only:
TENANT_IOC_OPEN_RI opens the session with emit records on, three
TENANT_IOC_RI_EMIT markers (0x51000001..0x51000003) follow, and read()
returns whole entries (a group header, then the group's records). Reads
until GROUPS groups were delivered or lost, or the session halted; checks
every group (size and RGS, numbering, begin/timestamp first, emit/abort
then fill, instruction record last, our markers at most once each and in
order) and prints the same line as the C example:
"block <b> groups <n> records <r> emits <e> markers <m> lost <l>
first_cycle <c0> last_cycle <c1>[ halt <reason>]".
Exit status: 0 ok, 1 an error or a malformed group, 2 bad usage.
"""

import fcntl
import os
import struct
import sys

import gpupm_tenant as abi

DEFAULT_NODE = "/run/gpupm/tenant/node"
MARKERS = 3
MARKER_BASE = 0x51000000
MODES = {"cycle": abi.RI_MODE_CYCLE, "instr": abi.RI_MODE_INSTRUCTION, "directed": abi.RI_MODE_DIRECTED}


class BadGroup(Exception):
    pass


def open_session(fd, ctx, mode, sf, rgs):
    req = bytearray(abi.SIZEOF_OPEN_RI)
    for off, value in (
        (abi.OFF_OPEN_RI_VERSION, abi.TENANT_STRUCT_VERSION),
        (abi.OFF_OPEN_RI_CTX, ctx),
        (abi.OFF_OPEN_RI_MODE, mode),
        (abi.OFF_OPEN_RI_CONTROLS, abi.RI_CONTROLS_EMIT),
        (abi.OFF_OPEN_RI_SF, sf),
        (abi.OFF_OPEN_RI_RGS, rgs),
    ):
        struct.pack_into("<I", req, off, value)
    fcntl.ioctl(fd, abi.TENANT_IOC_OPEN_RI, req, True)
    (block,) = struct.unpack_from("<I", req, abi.OFF_OPEN_RI_BLOCK)
    return block


def emit(fd, value):
    req = bytearray(abi.SIZEOF_RI_EMIT)
    struct.pack_into("<I", req, abi.OFF_RI_EMIT_VERSION, abi.TENANT_STRUCT_VERSION)
    struct.pack_into("<I", req, abi.OFF_RI_EMIT_VALUE, value)
    fcntl.ioctl(fd, abi.TENANT_IOC_RI_EMIT, bytes(req))


class Tally:
    def __init__(self, rgs, want):
        self.rgs, self.want = rgs, want
        self.groups = self.records = self.lost = self.last_group = 0
        self.emits = self.markers = self.last_emit = 0
        self.first_cycle = self.last_cycle = 0
        self.halt = 0

    def check_group(self, buf, at):
        """Checks the group entry at `at` and counts what it carries."""
        _, rgs, _, size = struct.unpack_from("<HBBI", buf, at)
        group, lost_before = struct.unpack_from("<QQ", buf, at + abi.OFF_RI_GROUP_HEADER_GROUP)
        n = 2 << self.rgs
        if rgs != self.rgs or size != abi.SIZEOF_RI_GROUP_HEADER + n * abi.RI_RECORD_SIZE:
            raise BadGroup(f"group {group}: wrong RGS or size")
        if group != self.last_group + 1 + lost_before:
            raise BadGroup(f"group {group}: out of sequence")
        recs = at + abi.SIZEOF_RI_GROUP_HEADER
        first = buf[recs]
        if first == abi.RI_RECORD_BEGIN:
            if buf[recs + abi.OFF_RI_BEGIN_RECORD_RGS] != self.rgs:
                raise BadGroup(f"group {group}: begin record with another RGS")
        elif first == abi.RI_RECORD_TIMESTAMP:
            (named,) = struct.unpack_from("<I", buf, recs + abi.OFF_RI_TIMESTAMP_RECORD_GROUP)
            if named != group:
                raise BadGroup(f"group {group}: timestamp record names another group")
        else:
            raise BadGroup(f"group {group}: neither begin nor timestamp first")
        filling = False
        for i in range(1, n - 1):
            r = recs + i * abi.RI_RECORD_SIZE
            if buf[r] == abi.RI_RECORD_FILL:
                filling = True
            elif filling or buf[r] not in (abi.RI_RECORD_EMIT, abi.RI_RECORD_ABORT):
                raise BadGroup(f"group {group}: an extra record out of place")
            elif buf[r] == abi.RI_RECORD_EMIT:
                (data,) = struct.unpack_from("<Q", buf, r + abi.OFF_RI_EMIT_RECORD_DATA)
                if buf[r + abi.OFF_RI_EMIT_RECORD_SOURCE] == abi.RI_EMIT_SOURCE_MARKER:
                    self.markers += 1
                elif MARKER_BASE + self.last_emit < data <= MARKER_BASE + MARKERS:
                    self.last_emit = data - MARKER_BASE
                    self.emits += 1
                else:
                    raise BadGroup(f"group {group}: an emit record we did not emit, or out of order")
        last = recs + (n - 1) * abi.RI_RECORD_SIZE
        if buf[last] != abi.RI_RECORD_INSTRUCTION:
            raise BadGroup(f"group {group}: no instruction record last")
        (cycle,) = struct.unpack_from("<Q", buf, last + abi.OFF_RI_INSTRUCTION_RECORD_CTX_CYCLE)
        if self.groups == 0:
            self.first_cycle = cycle
        self.last_cycle = cycle
        self.groups += 1
        self.records += n
        self.lost += lost_before
        self.last_group = group
        return size

    def read_groups(self, fd):
        while self.groups + self.lost < self.want and not self.halt:
            buf = os.read(fd, 1 << 18)
            if not buf:
                raise OSError("end of session")
            at = 0
            while at < len(buf) and self.groups + self.lost < self.want and not self.halt:
                kind, _, reason, size = struct.unpack_from("<HBBI", buf, at)
                if kind == abi.RI_ENTRY_HALT:
                    (lost_before,) = struct.unpack_from(
                        "<Q", buf, at + abi.OFF_RI_GROUP_HEADER_LOST_BEFORE
                    )
                    self.lost += lost_before
                    self.halt = reason
                else:
                    self.check_group(buf, at)
                at += size


def parse(argv):
    if len(argv) not in (6, 7) or argv[2] not in MODES:
        return None
    try:
        ctx, sf, rgs, want = (int(a) for a in (argv[1], argv[3], argv[4], argv[5]))
    except ValueError:
        return None
    if min(ctx, sf, rgs, want) < 0 or rgs > abi.RI_RGS_MAX:
        return None
    return ctx, MODES[argv[2]], sf, rgs, want, argv[6] if len(argv) == 7 else DEFAULT_NODE


def main(argv):
    args = parse(argv)
    if args is None:
        print(f"usage: {argv[0]} CTX cycle|instr|directed INTERVAL RGS GROUPS [NODE]", file=sys.stderr)
        return 2
    ctx, mode, sf, rgs, want, node = args
    tally = Tally(rgs, want)
    try:
        fd = os.open(node, os.O_RDONLY | os.O_CLOEXEC)
        block = open_session(fd, ctx, mode, sf, rgs)
        for i in range(1, MARKERS + 1):
            emit(fd, MARKER_BASE + i)
        tally.read_groups(fd)
        os.close(fd)  # ends the session: gpupmd disables and frees the block
    except (OSError, BadGroup) as e:
        print(f"tenant_ri: {e}", file=sys.stderr)
        return 1
    t = tally
    line = (
        f"block {block} groups {t.groups} records {t.records} emits {t.emits} "
        f"markers {t.markers} lost {t.lost} first_cycle {t.first_cycle} last_cycle {t.last_cycle}"
    )
    print(line + (f" halt {t.halt}" if t.halt else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
