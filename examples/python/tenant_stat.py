#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""tenant_stat: the cumulative counter totals of every VM the caller may see.

Usage: tenant_stat.py [--json] [NODE]     (NODE: /run/gpupm/tenant/node)

The Python twin of examples/c/tenant_stat.c, with only the standard library:
TENANT_IOC_WHOAMI names the VMs the caller may see (a tenant: its own; the
admin: all), then TENANT_IOC_READ_COUNTERS reads each VM's totals of every
event. Numbers, struct sizes and field offsets come from gpupm_tenant.py,
generated from the Rust uapi crate.

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
import os
import struct
import sys

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
    as_json, node, have_node = False, DEFAULT_NODE, False
    for arg in argv[1:]:
        if arg == "--json":
            as_json = True
        elif not arg.startswith("-") and not have_node:
            node, have_node = arg, True
        else:
            print(f"usage: {argv[0]} [--json] [NODE]", file=sys.stderr)
            return 2
    try:
        fd = os.open(node, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        print(f"tenant_stat: cannot open {node}: {e.strerror}", file=sys.stderr)
        return 1
    try:
        try:
            vms = whoami(fd)
        except OSError as e:
            print(f"tenant_stat: TENANT_IOC_WHOAMI on {node}: {e.strerror}", file=sys.stderr)
            return 1
        out = []
        for vm in vms:
            try:
                cycle, sealed, values = read_vm(fd, vm)
            except OSError as e:
                print(f"tenant_stat: TENANT_IOC_READ_COUNTERS of VM {vm}: {e.strerror}", file=sys.stderr)
                return 1
            out.append(render(vm, cycle, sealed, values, as_json))
        sys.stdout.write("".join(out))
        return 0
    finally:
        os.close(fd)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
