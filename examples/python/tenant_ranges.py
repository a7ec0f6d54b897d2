#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""tenant_ranges: a marked code range on one of the caller's contexts and its call graph.

Usage: tenant_ranges.py CTX KERNEL:FIRST-LAST EVENT THRESHOLD CROSSINGS [NODE]
       EVENT: instructions | cycles | memory
       NODE: /run/gpupm/tenant/node

The Python twin of examples/c/tenant_ranges.c, standard library only:
TENANT_IOC_ADD_RANGE adds a code range with a count threshold, the example
polls TENANT_IOC_READ_RANGES every 10 ms until CROSSINGS crossings arrived
(records or lost), reads the call graph page by page (edges, kernels,
stacks; `first += count` until `first == total`), prints it in the same
lines as the C example ("range ...", "graph ...", "edge K:B CALLEE N",
"kernel K self S inclusive I", one folded stack "k0;k1 N" per line,
"removed H") and removes the range.
Exit status: 0 ok, 1 an error, 2 bad usage.
"""

import fcntl
import os
import re
import struct
import sys
import time

import gpupm_tenant as abi

DEFAULT_NODE = "/run/gpupm/tenant/node"
EVENTS = {
    "instructions": abi.RANGE_EVENT_INSTRUCTIONS,
    "cycles": abi.RANGE_EVENT_CYCLES,
    "memory": abi.RANGE_EVENT_MEMORY,
}


def u32(buf, off):
    return struct.unpack_from("<I", buf, off)[0]


def u64(buf, off):
    return struct.unpack_from("<Q", buf, off)[0]


def add_range(fd, ctx, kernel, first, last, event, threshold):
    req = bytearray(abi.SIZEOF_ADD_RANGE)
    for off, value in (
        (abi.OFF_ADD_RANGE_VERSION, abi.TENANT_STRUCT_VERSION),
        (abi.OFF_ADD_RANGE_CTX, ctx),
        (abi.OFF_ADD_RANGE_KIND, abi.RANGE_KIND_CODE),
        (abi.OFF_ADD_RANGE_EVENT, event),
        (abi.OFF_ADD_RANGE_TRIGGER, abi.RANGE_TRIGGER_COUNT),
        (abi.OFF_ADD_RANGE_THRESHOLD, threshold),
        (abi.OFF_ADD_RANGE_KERNEL, kernel),
        (abi.OFF_ADD_RANGE_FIRST, first),
        (abi.OFF_ADD_RANGE_LAST, last),
    ):
        struct.pack_into("<I", req, off, value)
    fcntl.ioctl(fd, abi.TENANT_IOC_ADD_RANGE, req, True)
    return u32(req, abi.OFF_ADD_RANGE_HANDLE)


def wait_for_crossings(fd, ctx, handle, want):
    """The row of range `handle`, polled until it saw `want` crossings."""
    while True:
        req = bytearray(abi.SIZEOF_READ_RANGES)
        struct.pack_into("<II", req, abi.OFF_READ_RANGES_VERSION, abi.TENANT_STRUCT_VERSION, ctx)
        fcntl.ioctl(fd, abi.TENANT_IOC_READ_RANGES, req, True)
        rows = (
            abi.OFF_READ_RANGES_ROWS + i * abi.SIZEOF_RANGE_ROW
            for i in range(u32(req, abi.OFF_READ_RANGES_COUNT))
        )
        row = next((r for r in rows if u32(req, r + abi.OFF_RANGE_ROW_HANDLE) == handle), None)
        if row is None:
            raise OSError("the range is gone (its context ended)")
        crossings = u64(req, row + abi.OFF_RANGE_ROW_CROSSINGS)
        lost = u64(req, row + abi.OFF_RANGE_ROW_LOST)
        if crossings + lost >= want:
            (register,) = struct.unpack_from("<H", req, row + abi.OFF_RANGE_ROW_REGISTER)
            return (
                f"range {handle} register {register} "
                f"entries {u64(req, row + abi.OFF_RANGE_ROW_ENTRIES)} "
                f"count {u64(req, row + abi.OFF_RANGE_ROW_COUNT)} crossings {crossings} lost {lost} "
                f"flags {req[row + abi.OFF_RANGE_ROW_FLAGS]}"
            )
        time.sleep(0.01)


def read_pages(fd, cmd, size, ctx):
    """Every page of a paged graph read (each starts with the header)."""
    out, first = [], 0
    while True:
        req = bytearray(size)
        struct.pack_into(
            "<III", req, abi.OFF_GRAPH_HEADER_VERSION, abi.TENANT_STRUCT_VERSION, ctx, first
        )
        fcntl.ioctl(fd, cmd, req, True)
        out.append(req)
        first += u32(req, abi.OFF_GRAPH_HEADER_COUNT)
        if first >= u32(req, abi.OFF_GRAPH_HEADER_TOTAL):
            return out


def rows(pages, row_off, row_size):
    """(page, row offset) of every row of `pages`."""
    for req in pages:
        for i in range(u32(req, abi.OFF_GRAPH_HEADER_COUNT)):
            yield req, row_off + i * row_size


def print_graph(fd, ctx):
    edges = read_pages(fd, abi.TENANT_IOC_READ_CALL_EDGES, abi.SIZEOF_READ_CALL_EDGES, ctx)
    head = edges[0]
    print(
        f"graph crossings {u64(head, abi.OFF_GRAPH_HEADER_CROSSINGS)} "
        f"lost {u64(head, abi.OFF_GRAPH_HEADER_LOST)} "
        f"stacks_dropped {u64(head, abi.OFF_GRAPH_HEADER_STACKS_DROPPED)}"
    )
    for req, r in rows(edges, abi.OFF_READ_CALL_EDGES_ROWS, abi.SIZEOF_GRAPH_EDGE):
        kernel, call_block, callee = struct.unpack_from("<HHH", req, r + abi.OFF_GRAPH_EDGE_KERNEL)
        print(f"edge {kernel}:{call_block} {callee} {u64(req, r + abi.OFF_GRAPH_EDGE_COUNT)}")
    kernels = read_pages(fd, abi.TENANT_IOC_READ_CALL_KERNELS, abi.SIZEOF_READ_CALL_KERNELS, ctx)
    for req, r in rows(kernels, abi.OFF_READ_CALL_KERNELS_ROWS, abi.SIZEOF_KERNEL_SAMPLES):
        (kernel,) = struct.unpack_from("<H", req, r + abi.OFF_KERNEL_SAMPLES_KERNEL)
        print(
            f"kernel {kernel} self {u64(req, r + abi.OFF_KERNEL_SAMPLES_SELF_SAMPLES)} "
            f"inclusive {u64(req, r + abi.OFF_KERNEL_SAMPLES_INCLUSIVE)}"
        )
    stacks = read_pages(fd, abi.TENANT_IOC_READ_CALL_STACKS, abi.SIZEOF_READ_CALL_STACKS, ctx)
    for req, r in rows(stacks, abi.OFF_READ_CALL_STACKS_ROWS, abi.SIZEOF_STACK_COUNT):
        n = u32(req, r + abi.OFF_STACK_COUNT_FRAMES_LEN)
        frames = struct.unpack_from(f"<{n}H", req, r + abi.OFF_STACK_COUNT_FRAMES)
        print(";".join(f"k{k}" for k in frames), u64(req, r + abi.OFF_STACK_COUNT_COUNT))


def remove_range(fd, ctx, handle):
    req = bytearray(abi.SIZEOF_REMOVE_RANGE)
    struct.pack_into("<III", req, abi.OFF_REMOVE_RANGE_VERSION, abi.TENANT_STRUCT_VERSION, ctx, handle)
    fcntl.ioctl(fd, abi.TENANT_IOC_REMOVE_RANGE, bytes(req))


def parse(argv):
    if len(argv) not in (6, 7) or argv[3] not in EVENTS:
        return None
    code = re.fullmatch(r"(\d+):(\d+)-(\d+)", argv[2])
    if not code or not argv[1].isdigit() or not argv[4].isdigit() or not argv[5].isdigit():
        return None
    threshold = int(argv[4])
    if not 1 <= threshold <= 0xFFFFFFFF:
        return None
    kernel, first, last = (int(x) for x in code.groups())
    node = argv[6] if len(argv) == 7 else DEFAULT_NODE
    return int(argv[1]), kernel, first, last, EVENTS[argv[3]], threshold, int(argv[5]), node


def main(argv):
    args = parse(argv)
    if args is None:
        print(
            f"usage: {argv[0]} CTX KERNEL:FIRST-LAST instructions|cycles|memory THRESHOLD CROSSINGS [NODE]",
            file=sys.stderr,
        )
        return 2
    ctx, kernel, first, last, event, threshold, want, node = args
    try:
        fd = os.open(node, os.O_RDONLY | os.O_CLOEXEC)
        handle = add_range(fd, ctx, kernel, first, last, event, threshold)
        print(wait_for_crossings(fd, ctx, handle, want))
        print_graph(fd, ctx)
        remove_range(fd, ctx, handle)
        print(f"removed {handle}")
        os.close(fd)
    except OSError as e:
        print(f"tenant_ranges: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
