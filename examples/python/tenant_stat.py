#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""tenant_stat: the cumulative counter totals of every VM the caller may see.

Usage: tenant_stat.py [--json] [--pages SOCKET | --no-pages] [-v] [NODE]
       (NODE: /run/gpupm/tenant/node, SOCKET: /run/gpupm/pages/socket)

The Python twin of examples/c/tenant_stat.c, with only the standard library:
TENANT_IOC_WHOAMI names the VMs the caller may see (a tenant: its own; the
admin: all). Each VM's totals come from its tenant page when gpupmd offers
one (one request on the page socket returns a read-only descriptor, which
is mapped with mmap and read with struct under the page's sequence lock),
else from TENANT_IOC_READ_COUNTERS. -v says on stderr which way each VM was
read ("vm <id> page" or "vm <id> ioctl"). Numbers, struct sizes and field
offsets come from gpupm_tenant.py, generated from the Rust uapi crate.

Python has no atomic loads or fences: the sequence check below relies on
a CPU that keeps loads in order (x86-64) and on each 8-byte field being
copied by one load. On other CPUs, read pages with the C header's
gpupm_page_read_counters() (e.g. through ctypes).

Output (stable; byte for byte what the C example prints):
  text    one line per VM and event, "vm <id> <event_name> <value>", VMs by
          ascending id, events by id (catalogue order); a confidential VM,
          whose totals are sealed, prints "vm <id> sealed".
  --json  one JSON object per line per VM, same order, with the keys of
          `gpupm stat --json`:
          {"scope":"vm","id":ID,"cycle":C,"events":{NAME:VALUE,...}}
          a sealed VM has "events":{} and "sealed":true.
Exit status: 0 ok, 1 the node could not be opened or an ioctl failed (one
line on stderr naming the cause), 2 bad usage.
"""

import fcntl
import json
import mmap
import os
import socket
import struct
import sys
import time

import gpupm_tenant as abi

DEFAULT_NODE = "/run/gpupm/tenant/node"


def whoami(fd):
    """The VMs the caller may see, ascending."""
    buf = bytearray(abi.SIZEOF_WHOAMI)
    struct.pack_into("<I", buf, abi.OFF_WHOAMI_VERSION, abi.TENANT_STRUCT_VERSION)
    fcntl.ioctl(fd, abi.TENANT_IOC_WHOAMI, buf, True)
    (n,) = struct.unpack_from("<I", buf, abi.OFF_WHOAMI_N_VMS)
    n = min(n, abi.MAX_CALLER_VMS)
    return sorted(struct.unpack_from(f"<{n}I", buf, abi.OFF_WHOAMI_VMS))


def read_vm(fd, vm):
    """(cycle, sealed, values) of VM `vm`, every event."""
    buf = bytearray(abi.SIZEOF_READ_COUNTERS)
    struct.pack_into("<I", buf, abi.OFF_READ_COUNTERS_VERSION, abi.TENANT_STRUCT_VERSION)
    struct.pack_into("<I", buf, abi.OFF_READ_COUNTERS_SCOPE, abi.SCOPE_VM)
    struct.pack_into("<I", buf, abi.OFF_READ_COUNTERS_ID, vm)
    struct.pack_into("<I", buf, abi.OFF_READ_COUNTERS_N_EVENTS, 0)  # all events
    fcntl.ioctl(fd, abi.TENANT_IOC_READ_COUNTERS, buf, True)
    (flags,) = struct.unpack_from("<I", buf, abi.OFF_READ_COUNTERS_FLAGS)
    (cycle,) = struct.unpack_from("<Q", buf, abi.OFF_READ_COUNTERS_CYCLE)
    values = struct.unpack_from(f"<{abi.MAX_EVENTS}Q", buf, abi.OFF_READ_COUNTERS_VALUES)
    return cycle, bool(flags & abi.COUNTER_FLAGS_SEALED), values


def map_vm_page(sock, vm):
    """VM `vm`'s page mapped read-only, or None when it is not offered."""
    req = bytearray(abi.SIZEOF_PAGE_REQUEST)
    struct.pack_into("<I", req, abi.OFF_PAGE_REQUEST_VERSION, abi.PAGE_STRUCT_VERSION)
    struct.pack_into("<I", req, abi.OFF_PAGE_REQUEST_SCOPE, abi.SCOPE_VM)
    struct.pack_into("<I", req, abi.OFF_PAGE_REQUEST_ID, vm)
    sock.sendall(req)
    reply, fds, _, _ = socket.recv_fds(sock, abi.SIZEOF_PAGE_REPLY, 1)
    try:
        if len(reply) != abi.SIZEOF_PAGE_REPLY or len(fds) != 1:
            return None
        (version,) = struct.unpack_from("<I", reply, abi.OFF_PAGE_REPLY_VERSION)
        (status,) = struct.unpack_from("<I", reply, abi.OFF_PAGE_REPLY_STATUS)
        if version != abi.PAGE_STRUCT_VERSION or status != 0:
            return None
        page = mmap.mmap(fds[0], abi.PAGE_SIZE, mmap.MAP_SHARED, mmap.PROT_READ)
    finally:
        for fd in fds:
            os.close(fd)
    (magic,) = struct.unpack_from("<I", page, abi.OFF_PAGE_HEADER_MAGIC)
    if magic != abi.PAGE_MAGIC:
        page.close()
        return None
    return page


def read_page(page):
    """(cycle, sealed, values) from a page's counters, or None when the
    page is busy or no longer kept."""
    seq_at = abi.OFF_PAGE_SEQ
    start = abi.OFF_PAGE_DATA + abi.OFF_PAGE_DATA_COUNTERS
    attempts, yielding_since = 0, None
    while True:
        (s1,) = struct.unpack_from("<Q", page, seq_at)
        if not s1 & 1:
            counters = page[start : start + abi.SIZEOF_PAGE_COUNTERS]
            (s2,) = struct.unpack_from("<Q", page, seq_at)
            if s1 == s2:
                break
        # Spin briefly, then give the processor away: a writer preempted
        # mid-update needs it back; busy only after PAGE_BUSY_MS of that.
        attempts += 1
        if attempts < abi.PAGE_READ_SPINS:
            continue
        now = time.monotonic()
        if yielding_since is None:
            yielding_since = now
        elif now - yielding_since >= abi.PAGE_BUSY_MS / 1000:
            return None
        os.sched_yield()
    (state,) = struct.unpack_from("<I", counters, abi.OFF_PAGE_COUNTERS_STATE)
    if state not in (abi.PAGE_STATE_ACTIVE, abi.PAGE_STATE_DESTROYED):
        return None
    (flags,) = struct.unpack_from("<I", counters, abi.OFF_PAGE_COUNTERS_FLAGS)
    (cycle,) = struct.unpack_from("<Q", counters, abi.OFF_PAGE_COUNTERS_CYCLE)
    values = struct.unpack_from(f"<{abi.MAX_EVENTS}Q", counters, abi.OFF_PAGE_COUNTERS_TOTALS)
    return cycle, bool(flags & abi.PAGE_FLAGS_SEALED), values


def connect_pages(path):
    """A connection to the page socket, or None."""
    if path is None:
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        return None
    return sock


def read_vm_page(sock, vm):
    """VM `vm`'s totals from its page, or None."""
    if sock is None:
        return None
    try:
        page = map_vm_page(sock, vm)
    except OSError:
        return None
    if page is None:
        return None
    try:
        return read_page(page)
    finally:
        page.close()


def render(vm, cycle, sealed, values, as_json):
    if as_json:
        events = {} if sealed else {abi.EVENT_NAMES[e]: values[e] for e in range(abi.EVENT_COUNT)}
        obj = {"scope": "vm", "id": vm, "cycle": cycle, "events": events}
        if sealed:
            obj["sealed"] = True
        return json.dumps(obj, separators=(",", ":")) + "\n"
    if sealed:
        return f"vm {vm} sealed\n"
    return "".join(f"vm {vm} {abi.EVENT_NAMES[e]} {values[e]}\n" for e in range(abi.EVENT_COUNT))


def main(argv):
    as_json, node, have_node, verbose = False, DEFAULT_NODE, False, False
    pages = abi.DEFAULT_PAGES_SOCKET
    args = list(argv[1:])
    while args:
        arg = args.pop(0)
        if arg == "--json":
            as_json = True
        elif arg == "--pages" and args:
            pages = args.pop(0)
        elif arg == "--no-pages":
            pages = None
        elif arg == "-v":
            verbose = True
        elif not arg.startswith("-") and not have_node:
            node, have_node = arg, True
        else:
            print(f"usage: {argv[0]} [--json] [--pages SOCKET | --no-pages] [-v] [NODE]", file=sys.stderr)
            return 2
    try:
        fd = os.open(node, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        print(f"tenant_stat: cannot open {node}: {e.strerror}", file=sys.stderr)
        return 1
    sock = connect_pages(pages)
    try:
        try:
            vms = whoami(fd)
        except OSError as e:
            print(f"tenant_stat: TENANT_IOC_WHOAMI on {node}: {e.strerror}", file=sys.stderr)
            return 1
        out = []
        for vm in vms:
            totals = read_vm_page(sock, vm)
            source = "page"
            if totals is None:
                source = "ioctl"
                try:
                    totals = read_vm(fd, vm)
                except OSError as e:
                    print(f"tenant_stat: TENANT_IOC_READ_COUNTERS of VM {vm}: {e.strerror}", file=sys.stderr)
                    return 1
            if verbose:
                print(f"vm {vm} {source}", file=sys.stderr)
            out.append(render(vm, *totals, as_json))
        sys.stdout.write("".join(out))
        return 0
    finally:
        os.close(fd)
        if sock is not None:
            sock.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
