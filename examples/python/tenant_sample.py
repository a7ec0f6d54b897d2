#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""tenant_sample: a minimal sampling session on one of the caller's contexts.

Usage: tenant_sample.py CTX COUNT [NODE]     (NODE: /run/gpupm/tenant/node)

The Python twin of examples/c/tenant_sample.c, standard library only:
TENANT_IOC_OPEN_SAMPLING asks for cycle samples every 4096 + U(0..=255)
cycles; read() returns whole records (a sample header, then the device's
record). Prints, per (kernel, block) ascending,
"block <kernel> <block> <samples> <cycles>", then "sealed <n>" if any
record was sealed (confidential VM), then "lost <n>" — byte for byte what
the C example prints. Exit status: 0 ok, 1 an error, 2 bad usage.
"""

import fcntl
import os
import struct
import sys

import gpupm_tenant as abi

DEFAULT_NODE = "/run/gpupm/tenant/node"


def open_session(fd, ctx):
    req = bytearray(abi.SIZEOF_OPEN_SAMPLING)
    for off, value in (
        (abi.OFF_OPEN_SAMPLING_VERSION, abi.TENANT_STRUCT_VERSION),
        (abi.OFF_OPEN_SAMPLING_SCOPE, abi.SCOPE_CONTEXT),
        (abi.OFF_OPEN_SAMPLING_ID, ctx),
        (abi.OFF_OPEN_SAMPLING_KINDS, abi.SAMPLE_KIND_CYCLE),
        (abi.OFF_OPEN_SAMPLING_PERIOD, 4096),
        (abi.OFF_OPEN_SAMPLING_DITHER, 255),
    ):
        struct.pack_into("<I", req, off, value)
    fcntl.ioctl(fd, abi.TENANT_IOC_OPEN_SAMPLING, req, True)


def main(argv):
    if len(argv) not in (3, 4):
        print(f"usage: {argv[0]} CTX COUNT [NODE]", file=sys.stderr)
        return 2
    ctx, want = int(argv[1]), int(argv[2])
    node = argv[3] if len(argv) == 4 else DEFAULT_NODE
    try:
        fd = os.open(node, os.O_RDONLY | os.O_CLOEXEC)
        open_session(fd, ctx)
        blocks, got, lost, sealed = {}, 0, 0, 0
        while got + sealed < want:
            buf = os.read(fd, 1 << 18)
            if not buf:
                raise OSError("end of session")
            at = 0
            while at < len(buf) and got + sealed < want:
                kind, flags, size = struct.unpack_from("<HHI", buf, at + abi.OFF_SAMPLE_HEADER_KIND)
                (lost_before,) = struct.unpack_from("<Q", buf, at + abi.OFF_SAMPLE_HEADER_LOST_BEFORE)
                lost += lost_before
                rec = at + abi.SIZEOF_SAMPLE_HEADER
                if flags & abi.SAMPLE_FLAGS_SEALED:
                    sealed += 1
                elif kind == abi.SAMPLE_KIND_CYCLE:
                    (kernel,) = struct.unpack_from("<H", buf, rec + abi.OFF_PC_RECORD_KERNEL)
                    (block,) = struct.unpack_from("<H", buf, rec + abi.OFF_PC_RECORD_BLOCK)
                    (interval,) = struct.unpack_from("<I", buf, rec + abi.OFF_PC_RECORD_INTERVAL)
                    n, cycles = blocks.get((kernel, block), (0, 0))
                    blocks[(kernel, block)] = (n + 1, cycles + interval)
                    got += 1
                at += size
        os.close(fd)  # ends the session: the daemon withdraws its demand
    except OSError as e:
        print(f"tenant_sample: {e}", file=sys.stderr)
        return 1
    for (kernel, block), (n, cycles) in sorted(blocks.items()):
        print(f"block {kernel} {block} {n} {cycles}")
    if sealed:
        print(f"sealed {sealed}")
    print(f"lost {lost}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
