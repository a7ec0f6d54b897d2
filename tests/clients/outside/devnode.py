"""The device node (card0) as docs/abi.md section 2 describes it: registers by
pread/pwrite at BAR0 offsets, device memory by pread at GPUPM_MEM_WINDOW_OFFSET
plus a window offset, interrupt records by read(), and the GPUPM_IOC_*
ioctls. Every number and layout comes from the header (gpupm_header.py)."""

import errno
import fcntl
import os
import struct


class DevNode:
    def __init__(self, H, node_dir):
        self.H = H
        # Opened first: this handle's interrupt cursor starts now, and
        # records raised before are found from registers (section 8).
        self.fd = os.open(os.path.join(node_dir, "card0"), os.O_RDWR | os.O_NONBLOCK)
        self.rec = H.struct("gpupm_interrupt_record")
        self.op = H.struct("gpupm_reg_op")
        self.batch_layout = H.struct("gpupm_reg_batch")

    def close(self):
        os.close(self.fd)

    # -- registers (section 3) ------------------------------------------------
    def rd32(self, off):
        return struct.unpack("<I", os.pread(self.fd, 4, off))[0]

    def rd64(self, off):
        return struct.unpack("<Q", os.pread(self.fd, 8, off))[0]

    def wr32(self, off, value):
        if os.pwrite(self.fd, struct.pack("<I", value), off) != 4:
            raise OSError(errno.EIO, "short register write")

    def part(self, p, reg):
        return self.H.instance("PART", p, reg)

    def batch(self, ops):
        """ops: ("r", offset, width) or ("w", offset, value). Atomic. Returns
        (errno, failed_index, values): errno 0 and values read on success;
        on failure nothing happened and failed_index names the op."""
        H, B = self.H, self.batch_layout
        if not 1 <= len(ops) <= H.GPUPM_MAX_BATCH_OPS:
            raise ValueError(f"a batch holds 1..{H.GPUPM_MAX_BATCH_OPS} ops")
        buf = B.new()
        B.set(buf, "version", H.GPUPM_IOCTL_STRUCT_VERSION)
        B.set(buf, "count", len(ops))
        for i, op in enumerate(ops):
            kind, offset = op[0], op[1]
            B.set(buf, f"ops[{i}].offset", offset)
            if kind == "r":
                B.set(buf, f"ops[{i}].op", H.GPUPM_REG_OP_READ)
                B.set(buf, f"ops[{i}].width", op[2])
            else:
                B.set(buf, f"ops[{i}].op", H.GPUPM_REG_OP_WRITE)
                B.set(buf, f"ops[{i}].width", 4)
                B.set(buf, f"ops[{i}].value", op[2])
        err = 0
        try:
            fcntl.ioctl(self.fd, H.GPUPM_IOC_REG_BATCH, buf)
        except OSError as e:
            err = e.errno
        values = [B.get(buf, f"ops[{i}].value") for i in range(len(ops))]
        return err, B.get(buf, "failed_index"), values

    def read_many(self, ops):
        """Reads in batches of at most GPUPM_MAX_BATCH_OPS; raises on failure."""
        out = []
        step = self.H.GPUPM_MAX_BATCH_OPS
        for i in range(0, len(ops), step):
            err, failed, values = self.batch(ops[i:i + step])
            if err:
                raise OSError(err, f"batch failed at op {i + failed}")
            out.extend(values)
        return out

    # -- memory window (section 5) --------------------------------------------
    def window(self, offset, size):
        data = os.pread(self.fd, size, self.H.GPUPM_MEM_WINDOW_OFFSET + offset)
        if len(data) != size:
            raise OSError(errno.EIO, "short window read")
        return data

    def block(self, offset):
        """The plaintext counters of the block slot at window `offset` (None
        for an empty or encrypted slot)."""
        H = self.H
        slot_l, block_l = H.struct("gpupm_block_slot"), H.struct("gpupm_block")
        slot = self.window(offset, slot_l.size)
        flags = slot_l.get(slot, "envelope.flags")
        if not flags & H.GPUPM_ENVELOPE_FLAGS_VALID or flags & H.GPUPM_ENVELOPE_FLAGS_ENCRYPTED:
            return None
        base = slot_l.offset("payload")
        if block_l.get(slot, "magic", base) != H.GPUPM_BLOCK_MAGIC:
            return None
        return {
            "kind": block_l.get(slot, "kind", base),
            "id": block_l.get(slot, "id", base),
            "vm": block_l.get(slot, "vm", base),
            "commit_seq": block_l.get(slot, "commit_seq", base),
            "counters": block_l.get(slot, "counters", base),
        }

    # -- interrupts (section 8) -----------------------------------------------
    def records(self):
        """Every interrupt record this handle has not read yet."""
        size = self.rec.size
        out = []
        while True:
            try:
                data = os.read(self.fd, 64 * size)
            except BlockingIOError:
                return out
            for i in range(0, len(data), size):
                out.append({f: self.rec.get(data, f, i) for f in ("seq", "cycle", "source", "partition", "arg", "arg2")})

    # -- ioctls (section 2.1) -------------------------------------------------
    def identity(self):
        H, L = self.H, self.H.struct("gpupm_identity")
        buf = L.new()
        L.set(buf, "version", H.GPUPM_IOCTL_STRUCT_VERSION)
        fcntl.ioctl(self.fd, H.GPUPM_IOC_IDENTITY, buf)
        return {f: L.get(buf, f) for f in L.fields}

    def advance(self, cycles):
        H, L = self.H, self.H.struct("gpupm_advance")
        buf = L.new()
        L.set(buf, "version", H.GPUPM_IOCTL_STRUCT_VERSION)
        L.set(buf, "cycles", cycles)
        fcntl.ioctl(self.fd, H.GPUPM_IOC_ADVANCE, buf)
        return L.get(buf, "now")

    def expected(self, scope, ident):
        """What the scope's block must hold after a flush at a quiescent
        point, from the ledger: (generated - remainder) / scale - masked."""
        H, L = self.H, self.H.struct("gpupm_ledger_query")
        buf = L.new()
        L.set(buf, "version", H.GPUPM_IOCTL_STRUCT_VERSION)
        L.set(buf, "scope", scope)
        L.set(buf, "id", ident)
        # Only with `gpupm-driver --debug-ledger` (ENOTTY otherwise).
        fcntl.ioctl(self.fd, H.GPUPM_IOC_LEDGER, buf)
        if L.get(buf, "flags") & H.GPUPM_LEDGER_FLAGS_SEALED:
            raise SystemExit("a sealed ledger answer: this scenario has no confidential VMs")
        gen, masked, rem = (L.get(buf, f) for f in ("generated", "masked", "remainder"))
        multibit = H.tables["gpupm_event_multibit"]
        out = []
        for e in range(H.GPUPM_MAX_EVENTS):
            scale = H.GPUPM_MULTIBIT_SCALE if e < len(multibit) and multibit[e] else 1
            out.append((gen[e] - rem[e]) // scale - masked[e])
        return out
