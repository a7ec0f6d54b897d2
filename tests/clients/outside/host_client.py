#!/usr/bin/env python3
"""A host driver client of the gpupm device node, written from docs/abi.md and
include/gpupm/gpupm_uapi.h alone (every number and struct layout is read
from the header): it drives a step clock, answers every context-switch
request with the full handshake, keeps the context table (reading each
destroyed context's final block before releasing it), drains every stream
ring until it is empty, and at a quiescent point checks that its totals —
summed from stream records and read from blocks — equal the device's
ledger and each other.

Flush acks take device time (docs/abi.md section 9): a handshake whose acks
are not in yet waits for its FLUSH_ACKED record, and since this client owns
the step clock, it advances the clock by GPUPM_FLUSH_ACK_MAX_CYCLES while
any slot waits in TRIGGERED — nothing else would make the acks arrive.

Usage: host_client.py HEADER NODE_DIR STEPS STEP_CYCLES
Prints one JSON object (totals, counts, every mismatch, and a register-by-
register trace of the first switch from one context to another); exits 0 when every check holds,
1 otherwise.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from devnode import DevNode  # noqa: E402
from gpupm_header import Header  # noqa: E402



class Host:
    def __init__(self, H, dev):
        self.H, self.dev = H, dev
        self.handshakes = self.fallbacks = self.records = self.lost = 0
        self.not_requested = self.missed = 0
        self.ack_waits = self.flush_acked = self.fallback_won = 0
        self.awaiting = {}    # slot -> (incoming VM, incoming ctx): acks not in yet
        self.backlog = []     # records read inside the traced handshake
        self.next_seq = None
        self.trace = None
        self.instances = {}   # ctx id -> [created cycles, ascending]
        self.retired = {}     # (ctx, created) -> (vm, final counters)
        self.stream = {}      # ("sys",) / ("vm", v) / ("ctx", c, created) -> summed deltas
        ident = dev.identity()
        if ident["magic"] != H.GPUPM_DEVICE_MAGIC or ident["abi_version"] >> 16 != H.GPUPM_ABI_MAJOR:
            raise SystemExit(f"not a compatible gpupm device: {ident}")
        if not ident["step_clock"]:
            raise SystemExit("this client drives a step clock")
        status = dev.read_many([("r", dev.part(p, H.GPUPM_REG_PART_STATUS), 4)
                                for p in range(H.GPUPM_MAX_PARTITION_SLOTS)])
        self.slots = [p for p, s in enumerate(status) if s & H.GPUPM_PART_STATUS_CONFIGURED]
        self.slices = [p for p in self.slots if p != 0]
        self.timeout = min(dev.rd32(dev.part(p, H.GPUPM_REG_PART_SWITCH_TIMEOUT)) for p in self.slices)
        # Records raised before our open() are not ours: look at the registers.
        self.scan_contexts()
        self.service()

    # -- contexts (sections 4, 12) --------------------------------------------
    def ctx_regs(self, ctx):
        H, dev = self.H, self.dev
        c = lambda reg: H.instance("CTX", ctx, reg)  # noqa: E731
        state, vm, created, block = dev.read_many([
            ("r", c(H.GPUPM_REG_CTX_STATE), 4), ("r", c(H.GPUPM_REG_CTX_VM), 4),
            ("r", c(H.GPUPM_REG_CTX_CREATED_CYCLE), 8), ("r", c(H.GPUPM_REG_CTX_BLOCK), 8)])
        return state, vm, created, block

    def note_instance(self, ctx, created):
        seen = self.instances.setdefault(ctx, [])
        if created not in seen:
            seen.append(created)
            seen.sort()

    def scan_contexts(self):
        H = self.H
        ids = range(1, H.GPUPM_MAX_CONTEXTS)
        states = self.dev.read_many([("r", H.instance("CTX", c, H.GPUPM_REG_CTX_STATE), 4) for c in ids])
        for ctx, state in zip(ids, states):
            if state != H.GPUPM_CTX_STATE_FREE:
                self.note_instance(ctx, self.ctx_regs(ctx)[2])
                if state == H.GPUPM_CTX_STATE_DESTROYED:
                    self.retire(ctx)

    def retire(self, ctx):
        """Reads a destroyed context's final block, then releases it."""
        H = self.H
        state, vm, created, block = self.ctx_regs(ctx)
        if state != H.GPUPM_CTX_STATE_DESTROYED:
            return
        self.note_instance(ctx, created)
        self.retired[(ctx, created)] = (vm, self.dev.block(block)["counters"])
        self.dev.wr32(H.instance("CTX", ctx, H.GPUPM_REG_CTX_CMD), H.GPUPM_CTX_CMD_RELEASE)

    # -- the handshake (section 9) --------------------------------------------
    def state(self, p):
        H = self.H
        return self.dev.rd32(self.dev.part(p, H.GPUPM_REG_PART_STATUS)) & H.GPUPM_PART_STATUS_STATE_MASK

    def handshake(self, p):
        H, dev = self.H, self.dev
        P = lambda reg: dev.part(p, reg)  # noqa: E731
        if self.trace is None and dev.rd32(P(H.GPUPM_REG_PART_CUR_CTX)) != 0:
            return self.traced_handshake(p)
        err, _, v = dev.batch([
            ("r", P(H.GPUPM_REG_PART_NEXT_VM), 4), ("r", P(H.GPUPM_REG_PART_NEXT_CTX), 4),
            ("w", P(H.GPUPM_REG_PART_CTRL), H.GPUPM_PART_CTRL_CTX_PAUSE),
            ("w", P(H.GPUPM_REG_PART_CTRL), H.GPUPM_PART_CTRL_ALL),
            ("w", H.GPUPM_REG_TRIG_TARGET, 1 << p),
            ("w", H.GPUPM_REG_TRIG_CMD,
             H.GPUPM_TRIG_CMD_FLUSH_ULC | H.GPUPM_TRIG_CMD_TRIGGER | H.GPUPM_TRIG_CMD_FLUSH_REQ),
            ("r", P(H.GPUPM_REG_PART_CCU_ACKED), 8), ("r", P(H.GPUPM_REG_PART_CCU_ASSIGNED), 8)])
        if err:
            # Refused as a whole: nothing was waiting (or the fallback won).
            if self.state(p) == H.GPUPM_HS_STATE_REQUESTED:
                raise OSError(err, f"handshake of slot {p} refused while requested")
            self.not_requested += 1
            return
        vm, ctx, acked, assigned = v[0], v[1], v[6], v[7]
        if acked & assigned == assigned:
            self.commit(p, vm, ctx)
        else:
            # The acks travel in device time: resume on FLUSH_ACKED.
            self.ack_waits += 1
            self.awaiting[p] = (vm, ctx)

    def commit(self, p, vm, ctx):
        """Steps 6-7, legal only in ACKED."""
        H, dev = self.H, self.dev
        P = lambda reg: dev.part(p, reg)  # noqa: E731
        self.awaiting.pop(p, None)
        err, _, _ = dev.batch([
            ("w", P(H.GPUPM_REG_PART_RC_BIND_VM), vm), ("w", P(H.GPUPM_REG_PART_RC_BIND_CTX), ctx),
            ("w", P(H.GPUPM_REG_PART_RC_CMD), H.GPUPM_RC_CMD_COMMIT | H.GPUPM_RC_CMD_REPOINT),
            ("w", P(H.GPUPM_REG_PART_CTRL), 0)])
        if err:
            if self.state(p) == H.GPUPM_HS_STATE_ACKED:
                raise OSError(err, f"commit of slot {p} refused in ACKED")
            self.fallback_won += 1  # the fallback finished the switch first
            return
        self.handshakes += 1

    def resume_acked(self):
        """Commits every slot whose acks are in; forgets slots the fallback
        finished. Returns whether any slot still waits in TRIGGERED."""
        H, dev = self.H, self.dev
        if not self.awaiting:
            return False
        slots = sorted(self.awaiting)
        states = [s & H.GPUPM_PART_STATUS_STATE_MASK for s in
                  dev.read_many([("r", dev.part(p, H.GPUPM_REG_PART_STATUS), 4) for p in slots])]
        for p, state in zip(slots, states):
            if state == H.GPUPM_HS_STATE_ACKED:
                self.commit(p, *self.awaiting[p])
            elif state != H.GPUPM_HS_STATE_TRIGGERED:
                del self.awaiting[p]
                self.fallback_won += 1
        return bool(self.awaiting)

    def traced_handshake(self, p):
        """The first handshake, one register access at a time, recording
        every access and the handshake state after each write (the worked
        example of docs/abi.md section 17)."""
        H, dev = self.H, self.dev
        self.trace = [{"slot": p}]

        def offset(name):
            reg = H.defines[name]
            return dev.part(p, reg) if name.startswith("GPUPM_REG_PART_") else reg

        def read(name, wide=False):
            value = dev.rd64(offset(name)) if wide else dev.rd32(offset(name))
            self.trace.append({"read": name, "offset": offset(name), "value": value})
            return value

        def write(name, value):
            dev.wr32(offset(name), value)
            self.trace.append({"write": name, "offset": offset(name), "value": value,
                               "state_after": self.state(p)})

        read("GPUPM_REG_PART_STATUS")
        vm, ctx = read("GPUPM_REG_PART_NEXT_VM"), read("GPUPM_REG_PART_NEXT_CTX")
        read("GPUPM_REG_PART_CUR_VM"), read("GPUPM_REG_PART_CUR_CTX")
        read("GPUPM_REG_PART_SWITCH_REQ_CYCLE", True), read("GPUPM_REG_CYCLE", True)
        read("GPUPM_REG_PART_STREAM_HEAD")
        write("GPUPM_REG_PART_CTRL", H.GPUPM_PART_CTRL_CTX_PAUSE)
        write("GPUPM_REG_PART_CTRL", H.GPUPM_PART_CTRL_ALL)
        write("GPUPM_REG_TRIG_TARGET", 1 << p)
        write("GPUPM_REG_TRIG_CMD", H.GPUPM_TRIG_CMD_FLUSH_ULC | H.GPUPM_TRIG_CMD_TRIGGER)
        write("GPUPM_REG_TRIG_CMD", H.GPUPM_TRIG_CMD_FLUSH_REQ)
        assigned = read("GPUPM_REG_PART_CCU_ASSIGNED", True)
        read("GPUPM_REG_PART_CCU_ACKED", True)
        # The acks take device time, and this client owns the clock.
        now = dev.advance(H.GPUPM_FLUSH_ACK_MAX_CYCLES)
        self.trace.append({"advance": H.GPUPM_FLUSH_ACK_MAX_CYCLES, "now": now, "state_after": self.state(p)})
        recs = dev.records()
        self.backlog.extend(recs)
        self.trace.extend({"record": r} for r in recs
                          if r["source"] == H.GPUPM_INTR_FLUSH_ACKED and r["partition"] == p)
        if read("GPUPM_REG_PART_CCU_ACKED", True) & assigned != assigned:
            raise SystemExit("CCUs did not ack the flush request")
        write("GPUPM_REG_PART_RC_CMD", H.GPUPM_RC_CMD_COMMIT)
        head = read("GPUPM_REG_PART_STREAM_HEAD")
        cap, base = read("GPUPM_REG_PART_STREAM_CAP"), read("GPUPM_REG_PART_STREAM_BASE", True)
        slot_l, rec_l = H.struct("gpupm_stream_slot"), H.struct("gpupm_stream_record")
        slot = dev.window(base + ((head - 1) % cap) * H.GPUPM_STREAM_SLOT_SIZE, slot_l.size)
        self.trace.append({"stream_record": {
            f: rec_l.get(slot, f, slot_l.offset("payload"))
            for f in ("partition", "flags", "vm", "ctx", "seq", "start_cycle", "end_cycle")}})
        write("GPUPM_REG_PART_RC_BIND_VM", vm)
        write("GPUPM_REG_PART_RC_BIND_CTX", ctx)
        write("GPUPM_REG_PART_RC_CMD", H.GPUPM_RC_CMD_REPOINT)
        write("GPUPM_REG_PART_CTRL", 0)
        read("GPUPM_REG_PART_CUR_VM"), read("GPUPM_REG_PART_CUR_CTX")
        read("GPUPM_REG_PART_SWITCHES", True)
        self.handshakes += 1

    # -- stream rings (section 11) --------------------------------------------
    def drain(self, p):
        H, dev = self.H, self.dev
        P = lambda reg: dev.part(p, reg)  # noqa: E731
        head, tail, lost, cap, base = dev.read_many([
            ("r", P(H.GPUPM_REG_PART_STREAM_HEAD), 4), ("r", P(H.GPUPM_REG_PART_STREAM_TAIL), 4),
            ("r", P(H.GPUPM_REG_PART_STREAM_LOST), 8), ("r", P(H.GPUPM_REG_PART_STREAM_CAP), 4),
            ("r", P(H.GPUPM_REG_PART_STREAM_BASE), 8)])
        self.lost = max(self.lost, lost)
        slot_l = H.struct("gpupm_stream_slot")
        while head != tail:
            i = tail
            while i != head:
                self.consume(slot_l, dev.window(base + (i % cap) * H.GPUPM_STREAM_SLOT_SIZE, slot_l.size))
                i = (i + 1) & 0xFFFFFFFF
            # The tail write re-arms the edge-triggered watermark; the head
            # read in the same batch says whether anything came meanwhile.
            err, _, v = dev.batch([("w", P(H.GPUPM_REG_PART_STREAM_TAIL), head),
                                   ("r", P(H.GPUPM_REG_PART_STREAM_HEAD), 4)])
            if err:
                raise OSError(err, f"tail write of ring {p}")
            tail, head = head, v[1]

    def consume(self, slot_l, slot):
        H = self.H
        flags = slot_l.get(slot, "envelope.flags")
        if not flags & H.GPUPM_ENVELOPE_FLAGS_VALID or flags & H.GPUPM_ENVELOPE_FLAGS_ENCRYPTED:
            raise SystemExit("this scenario has no confidential VMs")
        rec_l, base = H.struct("gpupm_stream_record"), slot_l.offset("payload")
        if rec_l.get(slot, "magic", base) != H.GPUPM_RECORD_MAGIC:
            raise SystemExit("a published stream slot without a record")
        part, vm, ctx = (rec_l.get(slot, f, base) for f in ("partition", "vm", "ctx"))
        end, deltas = rec_l.get(slot, "end_cycle", base), rec_l.get(slot, "deltas", base)
        self.records += 1
        keys = [("sys",)] if part == 0 else []
        if part != 0 and vm:
            keys.append(("vm", vm))
        if part != 0 and ctx:
            # An id's instance is the newest created at or before the commit.
            created = max(c for c in self.instances.get(ctx, [0]) if c <= end)
            keys.append(("ctx", ctx, created))
        for k in keys:
            acc = self.stream.setdefault(k, [0] * H.GPUPM_MAX_EVENTS)
            for e, d in enumerate(deltas):
                acc[e] += d

    def drain_nonempty(self):
        H, dev = self.H, self.dev
        pos = dev.read_many([("r", dev.part(p, r), 4) for p in self.slots
                             for r in (H.GPUPM_REG_PART_STREAM_HEAD, H.GPUPM_REG_PART_STREAM_TAIL)])
        for p, head, tail in zip(self.slots, pos[0::2], pos[1::2]):
            if head != tail:
                self.drain(p)

    # -- interrupts (section 8) -----------------------------------------------
    def service(self):
        """Handles records and requests until nothing is left to do."""
        H = self.H
        while True:
            recs, self.backlog = self.backlog + self.dev.records(), []
            seen = 0
            for r in recs:
                if self.next_seq is not None and r["seq"] != self.next_seq:
                    self.missed += r["seq"] - self.next_seq
                self.next_seq = r["seq"] + 1
                seen |= r["source"]
                src, p = r["source"], r["partition"]
                if src == H.GPUPM_INTR_SWITCH_REQUESTED:
                    self.handshake(p)
                elif src in (H.GPUPM_INTR_STREAM_WATERMARK, H.GPUPM_INTR_STREAM_OVERFLOW):
                    self.drain(p)
                elif src == H.GPUPM_INTR_CTX_CREATED:
                    self.note_instance(r["arg"], self.ctx_regs(r["arg"])[2])
                elif src == H.GPUPM_INTR_CTX_DESTROYED:
                    self.retire(r["arg"])
                elif src == H.GPUPM_INTR_FLUSH_ACKED:
                    self.flush_acked += 1
                    if p in self.awaiting:
                        self.commit(p, *self.awaiting[p])
                elif src == H.GPUPM_INTR_SWITCH_FALLBACK:
                    self.fallbacks += 1
                elif src == H.GPUPM_INTR_DEVICE_RESET:
                    raise SystemExit("unexpected device reset")
            if seen:
                self.dev.wr32(H.GPUPM_REG_INTR_ACK, seen)
            status = self.dev.read_many([("r", self.dev.part(p, H.GPUPM_REG_PART_STATUS), 4)
                                         for p in self.slices])
            waiting = [p for p, s in zip(self.slices, status)
                       if s & H.GPUPM_PART_STATUS_STATE_MASK == H.GPUPM_HS_STATE_REQUESTED]
            for p in waiting:
                self.handshake(p)
            # Acks still travelling: only the owner of the step clock makes
            # them arrive (gpupmd, on a real device, never moves time).
            if self.resume_acked():
                self.dev.advance(H.GPUPM_FLUSH_ACK_MAX_CYCLES)
                continue
            if not recs and not waiting and not self.backlog:
                return

    def run(self, steps, step_cycles):
        if step_cycles >= self.timeout:
            raise SystemExit(f"steps of {step_cycles} cycles would let the fallback answer")
        for _ in range(steps):
            self.dev.advance(step_cycles)
            self.service()
            self.drain_nonempty()

    def flush(self):
        """A flush (section 7), then everything it committed drained."""
        H = self.H
        err, _, _ = self.dev.batch([
            ("w", H.GPUPM_REG_TRIG_TARGET, sum(1 << p for p in self.slots)),
            ("w", H.GPUPM_REG_TRIG_CMD, H.GPUPM_TRIG_CMD_FLUSH_ULC | H.GPUPM_TRIG_CMD_TRIGGER)])
        if err:
            raise OSError(err, "flush")
        self.service()
        self.drain_nonempty()


def check(host):
    """At a quiescent point: blocks, stream sums and the ledger agree."""
    H, dev = host.H, host.dev
    N = H.GPUPM_MAX_EVENTS
    scope = H.tables["gpupm_event_scope"] + [H.GPUPM_EVENT_SCOPE_PARTITION] * N
    mismatches = []

    def same(what, **kinds):
        values = list(kinds.values())
        if any(v != values[0] for v in values):
            diff = [e for e in range(N) if len({tuple([v[e]]) for v in values}) > 1]
            mismatches.append({"what": what, "events": diff[:8],
                               **{k: [v[e] for e in diff[:8]] for k, v in kinds.items()}})

    if any(host.state(p) != H.GPUPM_HS_STATE_IDLE for p in host.slices):
        mismatches.append({"what": "not quiescent"})
    system = dev.block(0)["counters"]
    same("system", block=system, ledger=dev.expected(H.GPUPM_LEDGER_SCOPE_SYSTEM, 0),
         stream=host.stream.get(("sys",), [0] * N))
    vms, vm_sum = {}, [0] * N
    for v in range(1, H.GPUPM_MAX_VMS):
        if dev.rd32(H.instance("VM", v, H.GPUPM_REG_VM_PARTITION)) == 0:
            continue
        block = dev.block(dev.rd64(H.instance("VM", v, H.GPUPM_REG_VM_BLOCK)))["counters"]
        same(f"vm {v}", block=block, ledger=dev.expected(H.GPUPM_LEDGER_SCOPE_VM, v),
             stream=host.stream.get(("vm", v), [0] * N))
        vms[v] = block
        vm_sum = [a + b for a, b in zip(vm_sum, block)]
    contexts, per_vm = {}, {v: [0] * N for v in vms}
    for ctx in range(1, H.GPUPM_MAX_CONTEXTS):
        state, vm, created, offset = (host.ctx_regs(ctx) if ctx in host.instances
                                      else (H.GPUPM_CTX_STATE_FREE, 0, 0, 0))
        if state == H.GPUPM_CTX_STATE_FREE:
            continue
        block = dev.block(offset)["counters"]
        same(f"ctx {ctx}@{created}", block=block, ledger=dev.expected(H.GPUPM_LEDGER_SCOPE_CONTEXT, ctx),
             stream=host.stream.get(("ctx", ctx, created), [0] * N))
        contexts[f"{ctx}@{created}"] = {"vm": vm, "totals": block}
        per_vm[vm] = [a + b for a, b in zip(per_vm[vm], block)]
    for (ctx, created), (vm, final) in host.retired.items():
        same(f"retired ctx {ctx}@{created}", block=final,
             stream=host.stream.get(("ctx", ctx, created), [0] * N))
        per_vm[vm] = [a + b for a, b in zip(per_vm[vm], final)]
    # Conservation by scope (section 6): partition and context-filtered
    # events add up from contexts to VMs to the system; device-level ones
    # are in the system block only.
    shared = [e for e in range(N) if scope[e] != H.GPUPM_EVENT_SCOPE_DEVICE]
    same("system = sum of VMs (scopes 0, 1)", system=[system[e] if e in shared else 0 for e in range(N)],
         vms=[vm_sum[e] if e in shared else 0 for e in range(N)])
    same("VMs hold no device-level counts", vms=[vm_sum[e] if e not in shared else 0 for e in range(N)],
         zero=[0] * N)
    for v, block in vms.items():
        same(f"vm {v} = its live and retired contexts", vm=block, contexts=per_vm[v])
    return {"system": system, "vms": vms, "contexts": contexts}, mismatches


def main(argv):
    if len(argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    H = Header(argv[1])
    dev = DevNode(H, argv[2])
    host = Host(H, dev)
    host.run(int(argv[3]), int(argv[4]))
    host.flush()
    totals, mismatches = check(host)
    ok = (not mismatches and host.fallbacks == 0 and host.fallback_won == 0 and host.lost == 0
          and host.missed == 0)
    print(json.dumps({
        "ok": ok, "handshakes": host.handshakes, "not_requested": host.not_requested,
        "fallbacks": host.fallbacks, "records": host.records, "lost": host.lost,
        "ack_waits": host.ack_waits, "flush_acked": host.flush_acked, "fallback_won": host.fallback_won,
        "missed_interrupts": host.missed, "retired": len(host.retired),
        "retired_totals": {f"{c}@{t}": {"vm": vm, "totals": v} for (c, t), (vm, v) in host.retired.items()},
        "slots": host.slots, "trace": host.trace, "mismatches": mismatches, **totals,
    }))
    dev.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
