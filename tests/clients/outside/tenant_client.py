#!/usr/bin/env python3
"""A tenant client of gpupmd's tenant node, written from docs/abi.md (section 18)
and include/gpupm/gpupm_uapi.h alone (every number and struct layout is read
from the header): who am I, my VM's totals, its contexts and each one's
totals, the event catalogue, and the answers for a VM that is not mine and
one that does not exist.

Usage: tenant_client.py HEADER TENANT_NODE OWN_VM OTHER_VM
Prints one JSON object; exits 0 when the node answered as documented, 1
otherwise.
"""

import errno
import fcntl
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpupm_header import Header  # noqa: E402


class TenantNode:
    def __init__(self, H, path):
        self.H = H
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)

    def call(self, cmd, layout, **fields):
        """The ioctl with a struct whose `version` and `fields` are set;
        returns (errno, the struct as the node answered it)."""
        buf = layout.new()
        layout.set(buf, "version", self.H.GPUPM_TENANT_STRUCT_VERSION)
        for name, value in fields.items():
            layout.set(buf, name, value)
        try:
            fcntl.ioctl(self.fd, cmd, buf)
        except OSError as e:
            return e.errno, buf
        return 0, buf

    def whoami(self):
        L = self.H.struct("gpupm_tenant_whoami")
        err, buf = self.call(self.H.TENANT_IOC_WHOAMI, L)
        if err:
            return err, None
        n = L.get(buf, "n_vms")
        return 0, {"admin": L.get(buf, "admin"), "uid": L.get(buf, "uid"), "vms": L.get(buf, "vms")[:n]}

    def counters(self, scope, ident):
        H, L = self.H, self.H.struct("gpupm_tenant_read_counters")
        err, buf = self.call(H.TENANT_IOC_READ_COUNTERS, L, scope=scope, id=ident, n_events=0)
        if err:
            return err, None
        return 0, {"flags": L.get(buf, "flags"), "commit_seq": L.get(buf, "commit_seq"),
                   "cycle": L.get(buf, "cycle"), "values": L.get(buf, "values")}

    def contexts(self, vm):
        H, L = self.H, self.H.struct("gpupm_tenant_list_contexts")
        out, offset = [], 0
        while True:
            err, buf = self.call(H.TENANT_IOC_LIST_CONTEXTS, L, vm=vm, offset=offset)
            if err:
                return err, None
            count, total = L.get(buf, "count"), L.get(buf, "total")
            for i in range(count):
                out.append({f: L.get(buf, f"ctxs[{i}].{f}") for f in ("ctx", "state", "created_cycle")})
            offset += count
            if count == 0 or offset >= total:
                return 0, out

    def instance(self, ctx, created):
        H, L = self.H, self.H.struct("gpupm_tenant_read_instance")
        err, buf = self.call(H.TENANT_IOC_READ_INSTANCE, L, scope=H.GPUPM_TENANT_SCOPE_CONTEXT,
                             id=ctx, created_cycle=created)
        if err:
            return err, None
        return 0, {"state": L.get(buf, "state"), "vm": L.get(buf, "vm"), "values": L.get(buf, "values")}

    def event_names(self):
        H, L = self.H, self.H.struct("gpupm_tenant_event_info")
        names = []
        while True:
            err, buf = self.call(H.TENANT_IOC_EVENT_INFO, L, id=len(names))
            if err == errno.EINVAL:
                return names
            if err:
                raise OSError(err, "TENANT_IOC_EVENT_INFO")
            names.append(L.get(buf, "name").rstrip(b"\0").decode())


def main(argv):
    if len(argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    H = Header(argv[1])
    own, other = int(argv[3]), int(argv[4])
    try:
        node = TenantNode(H, argv[2])
    except OSError as e:
        print(json.dumps({"ok": False, "open_errno": e.errno}))
        return 1
    VM, CTX, SYSTEM = H.GPUPM_TENANT_SCOPE_VM, H.GPUPM_TENANT_SCOPE_CONTEXT, H.GPUPM_TENANT_SCOPE_SYSTEM
    problems = []
    err, me = node.whoami()
    if err or me["admin"] != 0 or own not in me["vms"] or other in me["vms"]:
        problems.append(f"whoami: errno {err}, {me}")
    err, vm_totals = node.counters(VM, own)
    if err:
        problems.append(f"own VM {own}: errno {err}")
    err, ctxs = node.contexts(own)
    contexts = {}
    for c in ctxs or []:
        e, inst = node.instance(c["ctx"], c["created_cycle"])
        if e or inst["vm"] != own:
            problems.append(f"own context {c}: errno {e}")
            continue
        contexts[f"{c['ctx']}@{c['created_cycle']}"] = {"state": c["state"], "values": inst["values"]}
    # Not mine, and not there at all: the same EACCES (section 18.1).
    refused = {
        "other_vm_counters": node.counters(VM, other)[0],
        "other_vm_contexts": node.contexts(other)[0],
        "missing_vm_counters": node.counters(VM, H.GPUPM_MAX_VMS - 1)[0],
        "system": node.counters(SYSTEM, 0)[0],
        "missing_context": node.counters(CTX, H.GPUPM_MAX_CONTEXTS - 1)[0],
    }
    problems += [f"{k}: errno {v}, not EACCES" for k, v in refused.items() if v != errno.EACCES]
    names = node.event_names()
    if names != H.tables["gpupm_event_names"]:
        problems.append("the event catalogue differs from the header's")
    print(json.dumps({
        "ok": not problems, "problems": problems, "whoami": me, "vm": own,
        "vm_totals": vm_totals, "contexts": contexts, "refused": refused, "events": len(names),
    }))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
