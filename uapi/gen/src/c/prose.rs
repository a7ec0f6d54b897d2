//! The programming model, section by section, as the header states it
//! above each section's definitions. `docs/abi.md` is the long form (with
//! a worked example); each text names the section of it that it
//! summarises. The per-item comments come from the Rust doc comments.

/// The header's opening comment.
pub const INTRO: &str = "\
gpupm ABI: BAR0 registers, event catalogue, memory-window layouts, and
the ioctls of the device node and of the tenant node.

Generated from the gpupm-uapi crate by
`cargo run -p gpupm-uapi --example gen_c > include/gpupm/gpupm_uapi.h`;
do not edit. The comments are the crate's documentation; docs/abi.md is
the programming model in full, with a worked example. This header and
docs/abi.md are all a host or tenant client needs.

All structs are little-endian, naturally aligned and explicitly padded;
every ioctl struct starts with a version field that must be set.

Nodes (docs/abi.md sections 1-2):
  card0 (/run/gpupm/dev/card0, root and the driver's admin group only):
    pread/pwrite of 4 or 8 bytes at an offset below GPUPM_MEM_WINDOW_OFFSET
      access the register at that BAR0 offset (writes: 4 bytes only);
    pread at GPUPM_MEM_WINDOW_OFFSET + w reads device memory at window
      offset w (blocks, stream rings; read-only);
    read() (or pread below the window) of >= 32 bytes returns whole
      struct gpupm_interrupt_record, blocking (EAGAIN with O_NONBLOCK);
    poll: POLLIN = unread records, POLLPRI = INTR_PENDING != 0;
    ioctl GPUPM_IOC_*.
  card0-oob: the OOB_MBOX_* registers only (the BMC's path; card0 does
    not reach them, and card0-oob reaches nothing else).
  tenant node (/run/gpupm/tenant/node, served by gpupmd): TENANT_IOC_*.
Access is checked on every request, not only at open: EACCES.
A request that fails changes nothing.";

/// Above the ABI version.
pub const VERSION: &str = "\
A client refuses a device whose ABI major differs from GPUPM_ABI_MAJOR;
a newer minor normally only adds; 1.3 also changed some 1.2 behaviour
(flush acks take device time, COMMIT only in ACKED, TRIG_CTRL needs
THRESHOLD_ENABLE, the OOB mailbox's own registers, the sealed debug-only
ledger, the envelope's session fields): docs/abi.md section 19.";

/// Above the register map.
pub const REGISTERS: &str = "\
Registers are 32 bits wide unless marked 64-bit. A 64-bit register is
read atomically with one 8-byte access at its offset; either half may
also be read with a 4-byte access (low half at the offset, high half at
offset + 4), but two half reads are two accesses and may tear. Only whole
32-bit registers are writable (4-byte writes); every 64-bit register is
read-only. A write is checked first: out of range, undefined bits, a
read-only register, or out of handshake order -> EINVAL, nothing changes.
Offsets beyond GPUPM_BAR0_SIZE or where no register is -> EINVAL.
(docs/abi.md section 3)

TRIG_TARGET is 0 at start and after every device reset, and a TRIG_CMD
write while it is 0 fails (EINVAL): write the target first, in the same
register batch. A target naming an unconfigured slot fails. A flush is
TRIG_TARGET = every configured slot (bit 0 included) and TRIG_CMD =
FLUSH_ULC | TRIGGER in one batch: when it returns, every count up to now
is in the blocks, except those of partitions in a switch (they commit at
its step 6). At a flush with every partition's handshake IDLE (a
quiescent point) every block equals the ledger. (docs/abi.md section 7)

TRIG_CTRL writes must keep GPUPM_TRIG_CTRL_THRESHOLD_ENABLE set (the
threshold trigger keeps 28-bit CCU counters from wrapping): a write
without it fails (EINVAL).

INTR_ACK is write-one-to-clear of INTR_STATUS; it affects only the latch,
INTR_PENDING and POLLPRI, never the delivery of records. INTR_MASK stops a
source's records (it still latches). (docs/abi.md section 8)

Which GPUPM_REG_* names are registers (docs/abi.md section 3.1): the
prefix does not always say. A name is the absolute BAR0 offset of a
register, or an offset inside a per-instance block (absolute = the
block's macro: BASE + index * STRIDE + name), or a layout offset that
is no register at all.
  Absolute: ID, ABI_VERSION, TOPO_*, CLOCK_KHZ, CLOCK_CAP, CLOCK_LAG,
    CYCLE, DEVICE_STATUS, RESET, CCU_WRAPS, TRIG_*, RECORDS_ROUTED,
    INTR_*, MBOX_*, OOB_MBOX_*, REKEY_NONCE/KEY/TAG (the first of 2/8/4
    words, word i at name + 4i), RI_COUNT, RI_MAX_RGS, RI_SPAN_BYTES,
    RI_MIGRATE_VM, RI_MIGRATE, RI_MIGRATIONS.
  Absolute, first of a per-slot array: RI_PART_VERSION, RI_PART_MAX_RGS
    (slot p: GPUPM_RI_PART_VERSION(p), GPUPM_RI_PART_MAX_RGS(p)).
  Inside a block:
    PART_*                       GPUPM_PART(p, reg)
    CCU_* except CCU_WRAPS       GPUPM_CCU(c, reg)
    VM_*                         GPUPM_VM(v, reg)
    CTX_*                        GPUPM_CTX(c, reg)
    SAMP_* except SAMP_BUF_*     GPUPM_SAMP(p, reg)
    BUF_*                        GPUPM_SAMP(p, GPUPM_SAMP_BUF(kind, reg))
    RI_CTX .. RI_COLLECTED       GPUPM_RI(i, reg)
    RANGE_*                      GPUPM_RANGE(p, i, reg)
    RRING_*                      GPUPM_RRING(p, reg)
  Layout offsets, not registers: SAMP_BUF_BRANCH and SAMP_BUF_PC (where
    a buffer's BUF_* set starts in a sampling block), SAMP_BUF_STRIDE (the
    distance between the sets); GPUPM_SAMP_BUF uses them.
  Not offsets: REG_OP_READ, REG_OP_WRITE (values of gpupm_reg_op.op).
The Rust crate gpupm_uapi has the macros as functions: regs::part, ccu,
vm, ctx; sampling::samp, buf; ri::ri, ri_part_version, ri_part_max_rgs;
ranges::range_reg, rring.";

/// Above the sampling registers: the one group there whose names are no
/// registers.
pub const SAMPLING: &str = "\
GPUPM_REG_SAMP_* except SAMP_BUF_* are offsets inside partition slot p's
sampling block: GPUPM_SAMP(p, reg). GPUPM_REG_SAMP_BUF_BRANCH, _PC and
_STRIDE are no registers: they place the two buffers' GPUPM_REG_BUF_*
sets inside the block, so buffer register reg of buffer kind is at
GPUPM_SAMP(p, GPUPM_SAMP_BUF(kind, reg)). (docs/abi.md section 3.1)";

/// Above the runtime-instrumentation registers: the group that mixes
/// absolute registers and block offsets.
pub const RI: &str = "\
GPUPM_REG_RI_* holds two kinds (docs/abi.md section 3.1): RI_COUNT ..
RI_MIGRATIONS are absolute registers; RI_PART_VERSION and RI_PART_MAX_RGS
are the first of a per-slot array (GPUPM_RI_PART_VERSION(p),
GPUPM_RI_PART_MAX_RGS(p)); RI_CTX .. RI_COLLECTED are offsets inside
control block i: GPUPM_RI(i, reg).";

/// Above the per-instance arrays.
pub const INSTANCES: &str = "\
Per-instance blocks: register REG of instance i is at
GPUPM_<UNIT>(i, GPUPM_REG_REG). Partition slots 0..15 (slot 0 = the system
channel RC0, always configured; GPU slices are the slots whose PART_STATUS
has GPUPM_PART_STATUS_CONFIGURED: scan all 16, TOPO_PARTITIONS only counts
them); an unconfigured slot answers only PART_STATUS (= 0). CCUs
0..TOPO_CCUS-1. VM ids 1..63 (in use iff VM_PARTITION != 0). Context ids
1..4095 (in use iff CTX_STATE != FREE; ids are reused after release, so
(id, CTX_CREATED_CYCLE) names an instance). Blocks: read VM_BLOCK and
CTX_BLOCK for their window offsets. (docs/abi.md section 4)

Switch handshake (docs/abi.md section 9, a worked example in section 17):
when PART_STATUS's state is REQUESTED, the host writes, in order (out of
order -> EINVAL):
  1  PART_CTRL = CTX_PAUSE                                -> CTX_PAUSED
  2  PART_CTRL = ALL                                      -> XFER_PAUSED
  3  TRIG_TARGET = 1 << p; TRIG_CMD = FLUSH_ULC | TRIGGER -> TRIGGERED
  4  TRIG_CMD = FLUSH_REQ (may join step 3)    state stays TRIGGERED
  5  wait: every CCU's flush ack arrives GPUPM_FLUSH_ACK_LATENCY(counters)
     cycles of device time after FLUSH_REQ (at most
     GPUPM_FLUSH_ACK_MAX_CYCLES); then the state is ACKED, PART_CCU_ACKED
     covers PART_CCU_ASSIGNED and GPUPM_INTR_FLUSH_ACKED is raised. Resume
     on that record (or poll PART_STATUS/PART_CCU_ACKED, bounded). On a
     step clock time moves only in GPUPM_IOC_ADVANCE: whoever owns the
     clock advances it (e.g. by GPUPM_FLUSH_ACK_MAX_CYCLES) while a slot
     is TRIGGERED; a host that does not own it just waits for the record.
  6  PART_RC_BIND_VM = PART_NEXT_VM, PART_RC_BIND_CTX = PART_NEXT_CTX,
     PART_RC_CMD = COMMIT | REPOINT                        -> REPOINTED
     (COMMIT is legal only in ACKED: EINVAL anywhere else)
  7  PART_CTRL = 0                                         -> IDLE
Steps 1-4 fit one GPUPM_IOC_REG_BATCH, 6-7 another. If the host has not
finished PART_SWITCH_TIMEOUT cycles after PART_SWITCH_REQ_CYCLE, the
device completes the switch itself (PART_FALLBACKS, LAST_FALLBACK,
GPUPM_INTR_SWITCH_FALLBACK); the host's later writes then fail (EINVAL).

Stream rings (docs/abi.md section 11): fill = HEAD - TAIL (mod 2^32);
record i is at window offset PART_STREAM_BASE + (i % PART_STREAM_CAP) *
GPUPM_STREAM_SLOT_SIZE. STREAM_WATERMARK is edge-triggered: raised once,
at the first commit that brings the ring to its watermark since the host
last wrote TAIL; a TAIL write only re-arms it. So drain until empty: write
TAIL and re-read HEAD in one batch, and repeat while they differ. Records
below the watermark raise nothing: drain periodically too.";

/// Above the interrupt sources.
pub const INTERRUPTS: &str = "\
Interrupt records (docs/abi.md section 8): every open handle of card0 has
its own cursor, starting at the next record raised after open(); it never
sees earlier ones. A host that starts must therefore scan PART_STATUS of
every configured slot for REQUESTED (run the handshake) and for TRIGGERED
or ACKED (a switch its previous run left between the two batches: take
it over with PART_NEXT_VM/PART_NEXT_CTX, finishing an ACKED one at once),
read the context table and drain every ring after opening its interrupt
handle. seq counts every record raised;
a gap means records were missed (the device keeps the last 16384).
Record arguments: SWITCH_REQUESTED and SWITCH_FALLBACK: partition, arg =
incoming context, arg2 = incoming VM; CTX_CREATED/CTX_DESTROYED:
partition, arg = context, arg2 = VM; STREAM_WATERMARK: arg = fill;
STREAM_OVERFLOW: arg = records lost so far; TRIGGER_DONE: arg = target
mask, arg2 = command; FLUSH_ACKED: partition, arg = incoming context,
arg2 = incoming VM (a host-driven switch reached ACKED; not raised when
the fallback finishes a switch); MAILBOX_DONE (the host's mailbox only,
never the OOB one): arg = opcode, arg2 = status.";

/// Above the event catalogue.
pub const EVENTS: &str = "\
Event scopes decide where counts go and what is conserved (docs/abi.md
section 6; gpupm_event_scope[] below gives each event's): SM, L2, FB and
CE events (GPUPM_EVENT_SCOPE_PARTITION) and PCIe events
(GPUPM_EVENT_SCOPE_CONTEXT_FILTERED, one lane per partition filtered by
the running context) go to the running context's block, its VM's block
and the system block; after a flush at a quiescent point, system = sum of
VMs and VM = sum of its context instances. NVLink events
(GPUPM_EVENT_SCOPE_DEVICE) go to the system block only. Multi-bit events
(gpupm_event_multibit[]): one count = GPUPM_MULTIBIT_SCALE signal units.";

/// Above the memory-window layouts.
pub const LAYOUT: &str = "\
Memory window (docs/abi.md section 5): block slots from window offset 0
(slot 0 system, slot v VM v, the context pool from GPUPM_CTX_BLOCK_SLOT_BASE),
stream rings from GPUPM_STREAM_REGION, GPUPM_STREAM_RING_SPAN bytes per
partition slot. A read may span slots but must stay inside one region
(EINVAL otherwise). A slot is valid iff envelope.flags has VALID; with
ENCRYPTED the payload is AES-256-GCM ciphertext under the VM's session
key and the tag follows; the envelope carries key_epoch, the nonce and
the session id (session_hi << 32 | session_lo), and all 32 bytes of it
are the associated data (confidential VMs: docs/confidential.md).";

/// Above the device-node ioctls.
pub const DEVICE_IOCTLS: &str = "\
Device-node ioctls (docs/abi.md sections 2.1, 16): version must be
GPUPM_IOCTL_STRUCT_VERSION, flags and reserved fields 0, else EINVAL;
unknown number -> ENOTTY. GPUPM_IOC_REG_BATCH runs 1..64 ops atomically
(no device time passes, nothing interleaves, all or nothing); on failure
the call fails with EINVAL and the struct comes back with failed_index =
the failing op. GPUPM_IOC_ADVANCE (step clock only, else EINVAL) runs
every event in its span and does NOT stop at a switch request: advance by
less than PART_SWITCH_TIMEOUT and answer requests between advances, or
the fallback completes them. GPUPM_IOC_LEDGER is the emulator's debug
oracle, answered only when gpupm-driver runs with --debug-ledger (ENOTTY
otherwise) and sealed (GPUPM_LEDGER_FLAGS_SEALED) for a confidential VM:
after a flush at a quiescent point a scope's block holds
(generated - remainder) / scale - masked per event.";

/// Above the tenant-node ioctls.
pub const TENANT_IOCTLS: &str = "\
Tenant node (docs/abi.md section 18): root and the daemon's admin group see
everything including the system scope; a tenant (named by a [[tenant]]
entry of gpupmd.toml) sees its VMs and their contexts; anyone else gets
EACCES at open() and on every request. The admin may learn existence, a
tenant never: for a tenant, what is not theirs and what does not exist
both fail with EACCES; the admin gets ENOENT for what does not exist.
Checks in order: ioctl number (ENOTTY), argument shape (EINVAL), access
(EACCES), existence.";
