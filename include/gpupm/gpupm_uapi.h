/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpupm ABI: BAR0 registers, event catalogue, memory-window layouts, and
 * the ioctls of the device node and of the tenant node.
 *
 * Generated from the gpupm-uapi crate by
 * `cargo run -p gpupm-uapi --example gen_c > include/gpupm/gpupm_uapi.h`;
 * do not edit. The comments are the crate's documentation; docs/abi.md is
 * the programming model in full, with a worked example. This header and
 * docs/abi.md are all a host or tenant client needs.
 *
 * All structs are little-endian, naturally aligned and explicitly padded;
 * every ioctl struct starts with a version field that must be set.
 *
 * Nodes (docs/abi.md sections 1-2):
 *   card0 (/run/gpupm/dev/card0, root and the driver's admin group only):
 *     pread/pwrite of 4 or 8 bytes at an offset below GPUPM_MEM_WINDOW_OFFSET
 *       access the register at that BAR0 offset (writes: 4 bytes only);
 *     pread at GPUPM_MEM_WINDOW_OFFSET + w reads device memory at window
 *       offset w (blocks, stream rings; read-only);
 *     read() (or pread below the window) of >= 32 bytes returns whole
 *       struct gpupm_interrupt_record, blocking (EAGAIN with O_NONBLOCK);
 *     poll: POLLIN = unread records, POLLPRI = INTR_PENDING != 0;
 *     ioctl GPUPM_IOC_*.
 *   card0-oob: the OOB_MBOX_* registers only (the BMC's path; card0 does
 *     not reach them, and card0-oob reaches nothing else).
 *   tenant node (/run/gpupm/tenant/node, served by gpupmd): TENANT_IOC_*.
 * Access is checked on every request, not only at open: EACCES.
 * A request that fails changes nothing.
 */
#ifndef GPUPM_UAPI_H
#define GPUPM_UAPI_H

#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#if defined(__cplusplus)
#define GPUPM_STATIC_ASSERT(cond) static_assert(cond, #cond)
#define GPUPM_ALIGNOF(t) alignof(t)
#else
#define GPUPM_STATIC_ASSERT(cond) _Static_assert(cond, #cond)
#define GPUPM_ALIGNOF(t) _Alignof(t)
#endif

/* ABI version (uapi/src/lib.rs): the ABI_VERSION register and GPUPM_IOC_IDENTITY report it */

/*
 * A client refuses a device whose ABI major differs from GPUPM_ABI_MAJOR;
 * a newer minor normally only adds; 1.3 also changed some 1.2 behaviour
 * (flush acks take device time, COMMIT only in ACKED, TRIG_CTRL needs
 * THRESHOLD_ENABLE, the OOB mailbox's own registers, the sealed debug-only
 * ledger, the envelope's session fields): docs/abi.md section 19.
 */

/**
 * ABI major version: bumped on any incompatible change to registers,
 * layouts or ioctls. Consumers refuse a device whose major differs.
 */
#define GPUPM_ABI_MAJOR 1
/**
 * ABI minor version: bumped when the ABI grows within its major —
 * registers, ioctls, flags, interrupt sources, fields in what were
 * reserved words. A device or daemon of an older minor lacks what came
 * after it (the nodes answer `ENOTTY` to an ioctl they do not have).
 * Some minors also changed what an older client relied on (1.3 most of
 * all). Every minor, what it added or changed and which document
 * describes it: `docs/abi.md`, "Versions".
 */
#define GPUPM_ABI_MINOR 12
/** `ABI_MAJOR << 16 | ABI_MINOR`, as the `ABI_VERSION` register reads. */
#define GPUPM_ABI_VERSION 0x1000c /* major << 16 | minor */

/* BAR0 register map (uapi/src/regs.rs): offsets, bits, per-instance blocks */

/*
 * Registers are 32 bits wide unless marked 64-bit. A 64-bit register is
 * read atomically with one 8-byte access at its offset; either half may
 * also be read with a 4-byte access (low half at the offset, high half at
 * offset + 4), but two half reads are two accesses and may tear. Only whole
 * 32-bit registers are writable (4-byte writes); every 64-bit register is
 * read-only. A write is checked first: out of range, undefined bits, a
 * read-only register, or out of handshake order -> EINVAL, nothing changes.
 * Offsets beyond GPUPM_BAR0_SIZE or where no register is -> EINVAL.
 * (docs/abi.md section 3)
 *
 * TRIG_TARGET is 0 at start and after every device reset, and a TRIG_CMD
 * write while it is 0 fails (EINVAL): write the target first, in the same
 * register batch. A target naming an unconfigured slot fails. A flush is
 * TRIG_TARGET = every configured slot (bit 0 included) and TRIG_CMD =
 * FLUSH_ULC | TRIGGER in one batch: when it returns, every count up to now
 * is in the blocks, except those of partitions in a switch (they commit at
 * its step 6). At a flush with every partition's handshake IDLE (a
 * quiescent point) every block equals the ledger. (docs/abi.md section 7)
 *
 * TRIG_CTRL writes must keep GPUPM_TRIG_CTRL_THRESHOLD_ENABLE set (the
 * threshold trigger keeps 28-bit CCU counters from wrapping): a write
 * without it fails (EINVAL).
 *
 * INTR_ACK is write-one-to-clear of INTR_STATUS; it affects only the latch,
 * INTR_PENDING and POLLPRI, never the delivery of records. INTR_MASK stops a
 * source's records (it still latches). (docs/abi.md section 8)
 *
 * Which GPUPM_REG_* names are registers (docs/abi.md section 3.1): the
 * prefix does not always say. A name is the absolute BAR0 offset of a
 * register, or an offset inside a per-instance block (absolute = the
 * block's macro: BASE + index * STRIDE + name), or a layout offset that
 * is no register at all.
 *   Absolute: ID, ABI_VERSION, TOPO_*, CLOCK_KHZ, CLOCK_CAP, CLOCK_LAG,
 *     CYCLE, DEVICE_STATUS, RESET, CCU_WRAPS, TRIG_*, RECORDS_ROUTED,
 *     INTR_*, MBOX_*, OOB_MBOX_*, REKEY_NONCE/KEY/TAG (the first of 2/8/4
 *     words, word i at name + 4i), RI_COUNT, RI_MAX_RGS, RI_SPAN_BYTES,
 *     RI_MIGRATE_VM, RI_MIGRATE, RI_MIGRATIONS.
 *   Absolute, first of a per-slot array: RI_PART_VERSION, RI_PART_MAX_RGS
 *     (slot p: GPUPM_RI_PART_VERSION(p), GPUPM_RI_PART_MAX_RGS(p)).
 *   Inside a block:
 *     PART_*                       GPUPM_PART(p, reg)
 *     CCU_* except CCU_WRAPS       GPUPM_CCU(c, reg)
 *     VM_*                         GPUPM_VM(v, reg)
 *     CTX_*                        GPUPM_CTX(c, reg)
 *     SAMP_* except SAMP_BUF_*     GPUPM_SAMP(p, reg)
 *     BUF_*                        GPUPM_SAMP(p, GPUPM_SAMP_BUF(kind, reg))
 *     RI_CTX .. RI_COLLECTED       GPUPM_RI(i, reg)
 *     RANGE_*                      GPUPM_RANGE(p, i, reg)
 *     RRING_*                      GPUPM_RRING(p, reg)
 *   Layout offsets, not registers: SAMP_BUF_BRANCH and SAMP_BUF_PC (where
 *     a buffer's BUF_* set starts in a sampling block), SAMP_BUF_STRIDE (the
 *     distance between the sets); GPUPM_SAMP_BUF uses them.
 *   Not offsets: REG_OP_READ, REG_OP_WRITE (values of gpupm_reg_op.op).
 * The Rust crate gpupm_uapi has the macros as functions: regs::part, ccu,
 * vm, ctx; sampling::samp, buf; ri::ri, ri_part_version, ri_part_max_rgs;
 * ranges::range_reg, rring.
 */

/** Size of the BAR0 register aperture in bytes. */
#define GPUPM_BAR0_SIZE 0x40000
/** Value of the `ID` register: ASCII "gPMU" little-endian. */
#define GPUPM_DEVICE_MAGIC 0x554d5067 /* "gPMU" */
/** Value that must be written to GPUPM_REG_RESET. */
#define GPUPM_RESET_MAGIC 0x52455345
/** Smallest non-zero periodic trigger period in cycles. */
#define GPUPM_TRIG_PERIOD_MIN 1024
/** Smallest threshold. */
#define GPUPM_TRIG_THRESHOLD_MIN 1024
/**
 * Largest threshold: one more ULC transfer (at most GPUPM_ULC_COUNTER_MAX)
 * can never carry a CCU counter at or below this value past
 * GPUPM_CCU_COUNTER_BITS bits.
 */
#define GPUPM_TRIG_THRESHOLD_MAX 268434944
/**
 * Bits of the dither R added to each dithered period: R is uniform in
 * `0..=DITHER_MAX`, the cycle sampler's default range, so that a
 * periodic trigger does not stay in step with a loop.
 */
#define GPUPM_DITHER_BITS 8
/** Largest dither R in cycles. */
#define GPUPM_DITHER_MAX 255
/** Width of a ULC counter (a ULC has up to 45 counters of up to 9 bits). */
#define GPUPM_ULC_COUNTER_BITS 9
/**
 * Largest ULC count, which is also the ULC transfer period in cycles
 * (the ULC transfers every 2^9 − 1 = 511 cycles, so a counter that
 * counts at most once per cycle never wraps).
 */
#define GPUPM_ULC_COUNTER_MAX 511
/** Width of a CCU counter (28 bits). */
#define GPUPM_CCU_COUNTER_BITS 28
/**
 * Width of the multi-bit accumulator in front of a 1-bit ULC counter
 * input (a six-bit counter whose most significant bit drives the count,
 * so the count is the signal sum modulo 32).
 */
#define GPUPM_MULTIBIT_ACC_BITS 6
/**
 * Cycles from a flush request until a CCU's flush ack reaches the RC
 * buffer, before the CCU's own records: the ack follows the records the
 * CCU still sends, one record per cycle (see flush_ack_latency).
 */
#define GPUPM_FLUSH_ACK_BASE_CYCLES 16
/**
 * Largest flush-ack latency of any CCU: a host on a step clock that
 * advances this many cycles after a flush request finds every ack in.
 */
#define GPUPM_FLUSH_ACK_MAX_CYCLES 286
/** Words in GPUPM_REG_REKEY_NONCE. */
#define GPUPM_REKEY_NONCE_WORDS 2
/** Words in GPUPM_REG_REKEY_KEY. */
#define GPUPM_REKEY_KEY_WORDS 8
/** Words in GPUPM_REG_REKEY_TAG. */
#define GPUPM_REKEY_TAG_WORDS 4
/** Words of GPUPM_REG_UUID. */
#define GPUPM_UUID_WORDS 4
/** Words of GPUPM_REG_SERIAL. */
#define GPUPM_SERIAL_WORDS 4
/** Words of GPUPM_REG_MODEL_NAME. */
#define GPUPM_MODEL_NAME_WORDS 8
/** Bytes of the `SERIAL` field. */
#define GPUPM_SERIAL_BYTES 16
/** Bytes of the `MODEL_NAME` field. */
#define GPUPM_MODEL_NAME_BYTES 32
/** Offset of the OOB mailbox's register set from the host's. */
#define GPUPM_OOB_MBOX_DELTA 0x100
/**
 * First four nonce bytes (LE) of every rekey blob. The device's own
 * nonces start with the VM id (below GPUPM_MAX_VMS), so a tenant's rekey
 * nonce can never equal a nonce the device uses under the same key.
 */
#define GPUPM_REKEY_NONCE_DOMAIN 0xffffffffU
/**
 * Result words of one OOB command: `OOB_MBOX_DATA`, `_DATA1`, `_DATA2`,
 * `_DATA3`.
 */
#define GPUPM_OOB_MBOX_WORDS 4
/* Cycles until the flush ack of a CCU with `counters` counters arrives. */
#define GPUPM_FLUSH_ACK_LATENCY(counters) (GPUPM_FLUSH_ACK_BASE_CYCLES + ((counters) + GPUPM_RECORD_VALUES - 1) / GPUPM_RECORD_VALUES)
/** RO: GPUPM_DEVICE_MAGIC. */
#define GPUPM_REG_ID 0x0
/** RO: GPUPM_ABI_VERSION of the device. */
#define GPUPM_REG_ABI_VERSION 0x4
/** RO: number of GPCs. */
#define GPUPM_REG_TOPO_GPCS 0x8
/** RO: number of SMs. */
#define GPUPM_REG_TOPO_SMS 0xc
/** RO: number of L2 slices. */
#define GPUPM_REG_TOPO_L2_SLICES 0x10
/** RO: number of frame-buffer partitions. */
#define GPUPM_REG_TOPO_FB_PARTITIONS 0x14
/** RO: number of NVLinks. */
#define GPUPM_REG_TOPO_NVLINKS 0x18
/** RO: number of copy engines. */
#define GPUPM_REG_TOPO_COPY_ENGINES 0x1c
/** RO: number of CCUs. */
#define GPUPM_REG_TOPO_CCUS 0x20
/** RO: number of partition slots (RC1..RCn); RC0 is the system channel. */
#define GPUPM_REG_TOPO_PARTITIONS 0x24
/** RO: number of events in the catalogue (GPUPM_EVENT_COUNT). */
#define GPUPM_REG_TOPO_EVENTS 0x28
/** RO: number of memory slices. */
#define GPUPM_REG_TOPO_MEMORY_SLICES 0x2c
/** RO: nominal clock frequency in kHz. */
#define GPUPM_REG_CLOCK_KHZ 0x30
/** RO: current clock capability, see GPUPM_CLOCK_CAP_*. */
#define GPUPM_REG_CLOCK_CAP 0x34
/** RO 64-bit: current device cycle. */
#define GPUPM_REG_CYCLE 0x38 /* 64-bit */
/** RO: device status bits, see GPUPM_DEVICE_STATUS_*. */
#define GPUPM_REG_DEVICE_STATUS 0x40
/** WO: write GPUPM_RESET_MAGIC to reset counters, blocks and rings. */
#define GPUPM_REG_RESET 0x44
/** RO: number of VM table entries. */
#define GPUPM_REG_TOPO_VMS 0x48
/** RO: number of context table entries. */
#define GPUPM_REG_TOPO_CONTEXTS 0x4c
/** RO 64-bit: CCU counter wraps ever observed (must stay 0; a model self-check). */
#define GPUPM_REG_CCU_WRAPS 0x50 /* 64-bit */
/**
 * RO 64-bit: device cycles a real-time clock dropped since it started:
 * wall time it could not run (the device ran slower than the wall clock,
 * or was not ticked for longer than 1 ms). GPUPM_REG_CYCLE plus this is the
 * wall time since the clock started, in cycles; 0 on a step clock. Not
 * cleared by GPUPM_REG_RESET (ABI 1.11).
 */
#define GPUPM_REG_CLOCK_LAG 0x58 /* 64-bit */
/**
 * RO: the device's index on its host (0 for the first GPU), as the
 * host numbers its devices; set by the scenario, stable across
 * restarts (ABI 1.12).
 */
#define GPUPM_REG_GPU_INDEX 0x60
/**
 * RO: PCI address, shown `DDDD:BB:dd.f` in hexadecimal: domain in
 * bits 31..16, bus 15..8, device 7..3, function 2..0 (ABI 1.12).
 */
#define GPUPM_REG_PCI_ADDRESS 0x64
/**
 * RO: four words: the device's UUID, bytes 0..16 in RFC 9562 order,
 * word `i` holding bytes `4i..4i+4` little-endian; shown as
 * `GPU-` and the 8-4-4-4-12 hex groups (ABI 1.12).
 */
#define GPUPM_REG_UUID 0x68 /* 4 words */
/**
 * RO: four words: the board serial number, ASCII, NUL-padded to 16
 * bytes, packed like GPUPM_REG_UUID (ABI 1.12).
 */
#define GPUPM_REG_SERIAL 0x78 /* 4 words */
/**
 * RO: eight words: the model name, ASCII, NUL-padded to 32 bytes,
 * packed like GPUPM_REG_UUID (ABI 1.12).
 */
#define GPUPM_REG_MODEL_NAME 0x88 /* 8 words */
/**
 * RW: periodic trigger period in cycles; 0 disables periodic triggers.
 * Non-zero values below GPUPM_TRIG_PERIOD_MIN are rejected.
 */
#define GPUPM_REG_TRIG_PERIOD 0x100
/** RW: trigger control bits, see GPUPM_TRIG_CTRL_*. */
#define GPUPM_REG_TRIG_CTRL 0x104
/**
 * RW: CCU threshold: when any active-bank CCU counter reaches this value
 * the partition owning the CCU is triggered. Must lie in
 * `[TRIG_THRESHOLD_MIN, TRIG_THRESHOLD_MAX]`.
 */
#define GPUPM_REG_TRIG_THRESHOLD 0x108
/**
 * RW: target mask for GPUPM_REG_TRIG_CMD: bit `p` selects partition slot `p`
 * (bit 0 = system CCUs).
 */
#define GPUPM_REG_TRIG_TARGET 0x10c
/**
 * WO: register-write trigger, bits in GPUPM_TRIG_CMD_*, applied to the CCUs of
 * the partitions selected in GPUPM_REG_TRIG_TARGET.
 */
#define GPUPM_REG_TRIG_CMD 0x110
/** WO: external trigger input; writing 1 triggers every unpaused partition. */
#define GPUPM_REG_TRIG_EXTERNAL 0x114
/** RO 64-bit: periodic triggers delivered. */
#define GPUPM_REG_TRIG_COUNT_PERIODIC 0x118 /* 64-bit */
/** RO 64-bit: threshold triggers delivered. */
#define GPUPM_REG_TRIG_COUNT_THRESHOLD 0x120 /* 64-bit */
/** RO 64-bit: register-write and external triggers delivered. */
#define GPUPM_REG_TRIG_COUNT_COMMAND 0x128 /* 64-bit */
/** RO 64-bit: records routed by the reduction-channel buffer. */
#define GPUPM_REG_RECORDS_ROUTED 0x130 /* 64-bit */
/** RO: latched interrupt sources, bits in GPUPM_INTR_*. */
#define GPUPM_REG_INTR_STATUS 0x200
/** RW: 1 = source masked (does not wake, no records delivered). */
#define GPUPM_REG_INTR_MASK 0x204
/** W1C: acknowledges latched sources. */
#define GPUPM_REG_INTR_ACK 0x208
/** RO: `INTR_STATUS & !INTR_MASK`. */
#define GPUPM_REG_INTR_PENDING 0x20c
/**
 * RO 64-bit: the `seq` the next interrupt record will get, which is the
 * number of records raised so far (a masked source raises none); the
 * last record raised has `INTR_SEQ - 1`.
 */
#define GPUPM_REG_INTR_SEQ 0x210 /* 64-bit */
/** RW: argument for the next command (e.g. an event id). */
#define GPUPM_REG_MBOX_ARG 0x300
/** WO: writing an opcode from GPUPM_MBOX_OP_* runs the command. */
#define GPUPM_REG_MBOX_CMD 0x304
/** RO: status of the last command, see GPUPM_MBOX_STATUS_*. */
#define GPUPM_REG_MBOX_STATUS 0x308
/**
 * RO: commands completed on this mailbox (modulo 2^32); a caller knows
 * its command completed when the value moved past the one it read before.
 */
#define GPUPM_REG_MBOX_SEQ 0x30c
/** RO 64-bit: result data of the last command. */
#define GPUPM_REG_MBOX_DATA 0x310 /* 64-bit */
/** RW: the OOB mailbox's GPUPM_REG_MBOX_ARG: the first argument. */
#define GPUPM_REG_OOB_MBOX_ARG 0x400
/**
 * WO: the OOB mailbox's GPUPM_REG_MBOX_CMD: writing an opcode from
 * GPUPM_MBOX_OP_* runs the command within the write.
 */
#define GPUPM_REG_OOB_MBOX_CMD 0x404
/** RO: the OOB mailbox's GPUPM_REG_MBOX_STATUS. */
#define GPUPM_REG_OOB_MBOX_STATUS 0x408
/**
 * RO: the OOB mailbox's GPUPM_REG_MBOX_SEQ: every command, refused or not,
 * moves it by one.
 */
#define GPUPM_REG_OOB_MBOX_SEQ 0x40c
/** RO 64-bit: the OOB mailbox's GPUPM_REG_MBOX_DATA: the first result word. */
#define GPUPM_REG_OOB_MBOX_DATA 0x410 /* 64-bit */
/**
 * RW: the second argument of the commands that take one (a scope, a
 * VM filter, a snapshot tag); ABI 1.12.
 */
#define GPUPM_REG_OOB_MBOX_ARG2 0x418
/**
 * RO 64-bit: the second result word of the last command (0 when it failed
 * or has none); ABI 1.12.
 */
#define GPUPM_REG_OOB_MBOX_DATA1 0x420 /* 64-bit */
/** RO 64-bit: the third result word of the last command; ABI 1.12. */
#define GPUPM_REG_OOB_MBOX_DATA2 0x428 /* 64-bit */
/** RO 64-bit: the fourth result word of the last command; ABI 1.12. */
#define GPUPM_REG_OOB_MBOX_DATA3 0x430 /* 64-bit */
/**
 * WO: the tenant-chosen 64 bits of the rekey blob's AES-GCM nonce, two
 * words (low word first). The nonce is GPUPM_REKEY_NONCE_DOMAIN (LE)
 * followed by these 8 bytes.
 */
#define GPUPM_REG_REKEY_NONCE 0x500 /* 2 words */
/**
 * WO: eight words: the new AES-256 key encrypted under the current
 * session key (word `i` = bytes `4i..4i+4`, little-endian).
 */
#define GPUPM_REG_REKEY_KEY 0x508 /* 8 words */
/** WO: four words: the AES-GCM tag of the sealed key. */
#define GPUPM_REG_REKEY_TAG 0x528 /* 4 words */
/** Running at primary (boost) capability. */
#define GPUPM_CLOCK_CAP_PRIMARY 0x0
/** Running at secondary (throttled) capability. */
#define GPUPM_CLOCK_CAP_SECONDARY 0x1
/** The clock runs in step mode (advanced only by the host). */
#define GPUPM_DEVICE_STATUS_STEP_CLOCK 0x1
/** At least one switch was completed by the device's fallback. */
#define GPUPM_DEVICE_STATUS_FALLBACK_SEEN 0x2
/** Periodic triggers enabled. */
#define GPUPM_TRIG_CTRL_PERIODIC_ENABLE 0x1
/** Period dithering: each period is P + R, R uniform in 0..=255. */
#define GPUPM_TRIG_CTRL_DITHER 0x2
/**
 * Threshold triggers enabled. They are the guard that keeps a 28-bit
 * CCU counter from ever wrapping, so the bit must be set in every
 * `TRIG_CTRL` write (a write without it fails with EINVAL).
 */
#define GPUPM_TRIG_CTRL_THRESHOLD_ENABLE 0x4
/** All defined bits. */
#define GPUPM_TRIG_CTRL_ALL 0x7
/** ULCs send their partial counts to their CCUs first. */
#define GPUPM_TRIG_CMD_FLUSH_ULC 0x1
/** CCUs swap banks and emit records of the idle bank. */
#define GPUPM_TRIG_CMD_TRIGGER 0x2
/**
 * CCUs send pending records, then an empty record (the flush ack); a
 * CCU's ack reaches the RC buffer flush_ack_latency cycles
 * after the request and sets its bit in `PART_CCU_ACKED`.
 */
#define GPUPM_TRIG_CMD_FLUSH_REQ 0x4
/** All defined bits. */
#define GPUPM_TRIG_CMD_ALL 0x7
/** DATA = ABI version << 32 | number of events. */
#define GPUPM_MBOX_OP_GET_CAPS 0x1
/**
 * DATA = system (RC0) total of event ARG: the committed total of the
 * work of non-confidential VMs and of the device-level units (a
 * confidential VM's counts never reach RC0).
 */
#define GPUPM_MBOX_OP_READ_SYSTEM_COUNTER 0x2
/** DATA = cycles with no context running on any partition. */
#define GPUPM_MBOX_OP_READ_IDLE_CYCLES 0x3
/** DATA = current device cycle. */
#define GPUPM_MBOX_OP_READ_CYCLE 0x4
/** DATA = number of fallback-completed switches, all partitions. */
#define GPUPM_MBOX_OP_READ_FALLBACKS 0x5
/**
 * OOB: DATA = the OOB channel's generation (its commits so far),
 * DATA1 = the cycle of its last commit, DATA2 = its trigger period in
 * cycles, DATA3 = OOB flushes completed.
 */
#define GPUPM_MBOX_OP_OOB_CHANNEL_INFO 0x10
/**
 * OOB: requests a flush of the OOB channel: when the CCUs' flush acks
 * are in, GPUPM_FLUSH_ACK_MAX_CYCLES later, every CCU's pending
 * and ULC partial counts of a VM that is not confidential go into the
 * channel and it commits, so that every OOB block then holds
 * everything generated up to that cycle. DATA = the flush's number
 * (`OOB_CHANNEL_INFO`'s DATA3 reaches it when it completed), DATA1 =
 * the cycle it completes at. Status ERR_BUSY
 * while an earlier flush has not completed.
 */
#define GPUPM_MBOX_OP_OOB_FLUSH 0x11
/**
 * OOB: ARG = a VM id (0 to start); DATA = the next configured VM id
 * above it, DATA1 = its partition slot, DATA2 =
 * oob_vm_flags, DATA3 = its contexts in the OOB table (0
 * for a confidential VM). Status `END` after the last.
 */
#define GPUPM_MBOX_OP_OOB_NEXT_VM 0x12
/**
 * OOB: ARG = a context id (0 to start), ARG2 = a VM id to list only
 * its contexts (0 = every VM); DATA = the next context id above ARG
 * in the OOB table, DATA1 = its VM, DATA2 = its created cycle, DATA3
 * = oob_ctx_state. Contexts of confidential VMs are not in
 * the table. Status `END` after the last.
 */
#define GPUPM_MBOX_OP_OOB_NEXT_CONTEXT 0x13
/**
 * OOB: ARG2 = oob_scope, ARG = the VM or context id (0 for
 * the system); copies the block's counters into the mailbox's latch.
 * DATA = the latch tag (never 0), DATA1 = the channel generation,
 * DATA2 = commits into the block, DATA3 = the context's created cycle
 * (context scope) or the VM's partition slot (VM scope), else 0.
 */
#define GPUPM_MBOX_OP_OOB_SNAPSHOT 0x14
/**
 * OOB: ARG = the first word (event id) to read, below the number of
 * events; ARG2 = the latch tag `OOB_SNAPSHOT` answered; DATA..DATA3
 * = the latched counters of events ARG..ARG+3 (0 past the last
 * event). Status ERR_STALE when ARG2 is not
 * the current latch's tag: another snapshot replaced the latch.
 */
#define GPUPM_MBOX_OP_OOB_READ_LATCH 0x15
/**
 * OOB: DATA = cycles with no context running on any partition,
 * DATA1 = idle periods begun (how often the device went idle), DATA2
 * = the current cycle, DATA3 = 1 while the device is idle now.
 */
#define GPUPM_MBOX_OP_OOB_READ_IDLE 0x16
/**
 * OOB: DATA = oob_host_state, DATA1 = cycles since the
 * host's last request (`u64::MAX`: never; 0 while a host reader
 * waits), DATA2 = handles open on the host's node, DATA3 = the
 * timeout in cycles after which an open but silent host is not
 * responding.
 */
#define GPUPM_MBOX_OP_OOB_HOST_STATE 0x17
/**
 * OOB: DATA = the nominal clock in kHz, DATA1 = the clock now in kHz
 * (lower while throttled), DATA2 = device resets the host made (the
 * OOB channel carried its counts across each), DATA3 = the mask of
 * configured partition slots.
 */
#define GPUPM_MBOX_OP_OOB_DEVICE_INFO 0x18
/** No command run yet. */
#define GPUPM_MBOX_STATUS_IDLE 0
/** Last command succeeded; DATA holds its result. */
#define GPUPM_MBOX_STATUS_OK 1
/** Unknown opcode. */
#define GPUPM_MBOX_STATUS_ERR_OPCODE 2
/** Argument out of range. */
#define GPUPM_MBOX_STATUS_ERR_ARG 3
/** OOB: the VM or context named is not in the OOB channel. */
#define GPUPM_MBOX_STATUS_ERR_NOT_FOUND 4
/**
 * OOB: ARG2 is not the tag of the current latch (another snapshot
 * replaced it, or none was taken): take a new snapshot.
 */
#define GPUPM_MBOX_STATUS_ERR_STALE 5
/** OOB: a confidential VM, which the OOB channel leaves out. */
#define GPUPM_MBOX_STATUS_ERR_CONFIDENTIAL 6
/** OOB: an enumeration passed its last entry. */
#define GPUPM_MBOX_STATUS_END 7
/** OOB: an OOB flush is still in progress; ask again after it. */
#define GPUPM_MBOX_STATUS_ERR_BUSY 8
/**
 * The system block (`ARG` = 0): the device-level units and every VM
 * that is not confidential.
 */
#define GPUPM_OOB_SCOPE_SYSTEM 0
/** A VM's block (`ARG` = the VM). */
#define GPUPM_OOB_SCOPE_VM 1
/** A context's block (`ARG` = the context). */
#define GPUPM_OOB_SCOPE_CONTEXT 2
/**
 * The VM is confidential: the OOB channel holds no block and no
 * context of it.
 */
#define GPUPM_OOB_VM_FLAGS_CONFIDENTIAL 0x1
/** The context exists on the device. */
#define GPUPM_OOB_CTX_STATE_ACTIVE 1
/**
 * The context was destroyed; its OOB block keeps its final counts
 * until the device reuses the id.
 */
#define GPUPM_OOB_CTX_STATE_DESTROYED 2
/**
 * The host's node is served, a handle is open on it, and it was used
 * (or a host reader waited on it) within the timeout.
 */
#define GPUPM_OOB_HOST_STATE_LOADED 1
/**
 * The host's node is served and open, but nothing used it and no
 * reader waited on it for longer than the timeout.
 */
#define GPUPM_OOB_HOST_STATE_NOT_RESPONDING 2
/**
 * The host's node is not served (never attached, unmounted, or the
 * driver closed it) or no handle is open on it.
 */
#define GPUPM_OOB_HOST_STATE_UNLOADED 3

/* Per-instance blocks: GPUPM_PART(p, GPUPM_REG_PART_STATUS) etc. (slot 0 = system) */

/*
 * Per-instance blocks: register REG of instance i is at
 * GPUPM_<UNIT>(i, GPUPM_REG_REG). Partition slots 0..15 (slot 0 = the system
 * channel RC0, always configured; GPU slices are the slots whose PART_STATUS
 * has GPUPM_PART_STATUS_CONFIGURED: scan all 16, TOPO_PARTITIONS only counts
 * them); an unconfigured slot answers only PART_STATUS (= 0). CCUs
 * 0..TOPO_CCUS-1. VM ids 1..63 (in use iff VM_PARTITION != 0). Context ids
 * 1..4095 (in use iff CTX_STATE != FREE; ids are reused after release, so
 * (id, CTX_CREATED_CYCLE) names an instance). Blocks: read VM_BLOCK and
 * CTX_BLOCK for their window offsets. (docs/abi.md section 4)
 *
 * Switch handshake (docs/abi.md section 9, a worked example in section 17):
 * when PART_STATUS's state is REQUESTED, the host writes, in order (out of
 * order -> EINVAL):
 *   1  PART_CTRL = CTX_PAUSE                                -> CTX_PAUSED
 *   2  PART_CTRL = ALL                                      -> XFER_PAUSED
 *   3  TRIG_TARGET = 1 << p; TRIG_CMD = FLUSH_ULC | TRIGGER -> TRIGGERED
 *   4  TRIG_CMD = FLUSH_REQ (may join step 3)    state stays TRIGGERED
 *   5  wait: every CCU's flush ack arrives GPUPM_FLUSH_ACK_LATENCY(counters)
 *      cycles of device time after FLUSH_REQ (at most
 *      GPUPM_FLUSH_ACK_MAX_CYCLES); then the state is ACKED, PART_CCU_ACKED
 *      covers PART_CCU_ASSIGNED and GPUPM_INTR_FLUSH_ACKED is raised. Resume
 *      on that record (or poll PART_STATUS/PART_CCU_ACKED, bounded). On a
 *      step clock time moves only in GPUPM_IOC_ADVANCE: whoever owns the
 *      clock advances it (e.g. by GPUPM_FLUSH_ACK_MAX_CYCLES) while a slot
 *      is TRIGGERED; a host that does not own it just waits for the record.
 *   6  PART_RC_BIND_VM = PART_NEXT_VM, PART_RC_BIND_CTX = PART_NEXT_CTX,
 *      PART_RC_CMD = COMMIT | REPOINT                        -> REPOINTED
 *      (COMMIT is legal only in ACKED: EINVAL anywhere else)
 *   7  PART_CTRL = 0                                         -> IDLE
 * Steps 1-4 fit one GPUPM_IOC_REG_BATCH, 6-7 another. If the host has not
 * finished PART_SWITCH_TIMEOUT cycles after PART_SWITCH_REQ_CYCLE, the
 * device completes the switch itself (PART_FALLBACKS, LAST_FALLBACK,
 * GPUPM_INTR_SWITCH_FALLBACK); the host's later writes then fail (EINVAL).
 *
 * Stream rings (docs/abi.md section 11): fill = HEAD - TAIL (mod 2^32);
 * record i is at window offset PART_STREAM_BASE + (i % PART_STREAM_CAP) *
 * GPUPM_STREAM_SLOT_SIZE. STREAM_WATERMARK is edge-triggered: raised once,
 * at the first commit that brings the ring to its watermark since the host
 * last wrote TAIL; a TAIL write only re-arms it. So drain until empty: write
 * TAIL and re-read HEAD in one batch, and repeat while they differ. Records
 * below the watermark raise nothing: drain periodically too.
 */

/** Base of the partition block array. */
#define GPUPM_PART_BASE 0x1000
/** Stride between partition blocks. */
#define GPUPM_PART_STRIDE 0x100
/** Maximum partition slots including the system slot 0. */
#define GPUPM_MAX_PARTITION_SLOTS 16
#define GPUPM_PART(i, reg) (GPUPM_PART_BASE + (uint64_t)(i) * GPUPM_PART_STRIDE + (reg))
/** Base of the CCU block array. */
#define GPUPM_CCU_BASE 0x3000
/** Stride between CCU blocks. */
#define GPUPM_CCU_STRIDE 0x40
/** Maximum CCUs. */
#define GPUPM_MAX_CCUS 64
#define GPUPM_CCU(i, reg) (GPUPM_CCU_BASE + (uint64_t)(i) * GPUPM_CCU_STRIDE + (reg))
/** Base of the VM table; VM ids start at 1, entry `v` is at `VM_BASE + v * VM_STRIDE`. */
#define GPUPM_VM_BASE 0x4000
/** Stride between VM entries. */
#define GPUPM_VM_STRIDE 0x40
/** Largest VM id + 1. */
#define GPUPM_MAX_VMS 64
#define GPUPM_VM(i, reg) (GPUPM_VM_BASE + (uint64_t)(i) * GPUPM_VM_STRIDE + (reg))
/** Base of the context table; context ids start at 1. */
#define GPUPM_CTX_BASE 0x8000
/** Stride between context entries. */
#define GPUPM_CTX_STRIDE 0x20
/** Largest context id + 1. */
#define GPUPM_MAX_CONTEXTS 4096
#define GPUPM_CTX(i, reg) (GPUPM_CTX_BASE + (uint64_t)(i) * GPUPM_CTX_STRIDE + (reg))
/** RW: pause bits, see GPUPM_PART_CTRL_*; writable only during a switch. */
#define GPUPM_REG_PART_CTRL 0x0
/** RO: handshake state (bits 0..4, GPUPM_HS_STATE_*) and flags (GPUPM_PART_STATUS_*). */
#define GPUPM_REG_PART_STATUS 0x4
/** RO: VM whose block the RC is bound to (0 = none). */
#define GPUPM_REG_PART_CUR_VM 0x8
/** RO: context whose block the RC is bound to (0 = none). */
#define GPUPM_REG_PART_CUR_CTX 0xc
/** RO: VM the pending switch brings in (0 = none). */
#define GPUPM_REG_PART_NEXT_VM 0x10
/** RO: context the pending switch brings in (0 = none, partition goes idle). */
#define GPUPM_REG_PART_NEXT_CTX 0x14
/** RO 64-bit: CCUs assigned to this partition (bit = CCU index). */
#define GPUPM_REG_PART_CCU_ASSIGNED 0x18 /* 64-bit */
/**
 * RO 64-bit: CCUs whose flush ack has arrived since the last flush
 * request; a CCU's bit is set flush_ack_latency cycles after the
 * request (device time), so a host polls it (bounded; on a step clock it
 * advances the clock, e.g. by GPUPM_FLUSH_ACK_MAX_CYCLES).
 */
#define GPUPM_REG_PART_CCU_ACKED 0x20 /* 64-bit */
/** WO: reduction-channel command, bits in GPUPM_RC_CMD_*. */
#define GPUPM_REG_PART_RC_CMD 0x28
/** RW: VM to bind at the next re-point. */
#define GPUPM_REG_PART_RC_BIND_VM 0x2c
/** RW: context to bind at the next re-point. */
#define GPUPM_REG_PART_RC_BIND_CTX 0x30
/**
 * RW: cycles the device waits for host software to finish a requested
 * switch before completing it itself.
 */
#define GPUPM_REG_PART_SWITCH_TIMEOUT 0x34
/** RO 64-bit: switches completed by the device's fallback. */
#define GPUPM_REG_PART_FALLBACKS 0x38 /* 64-bit */
/** RO 64-bit: switches completed (host-driven and fallback). */
#define GPUPM_REG_PART_SWITCHES 0x40 /* 64-bit */
/** RO 64-bit: RC commits (= stream records produced or lost). */
#define GPUPM_REG_PART_COMMIT_SEQ 0x48 /* 64-bit */
/** RO: stream ring head (next record index the device writes), modulo 2^32. */
#define GPUPM_REG_PART_STREAM_HEAD 0x50
/**
 * RW: stream ring tail (next record index the host reads), modulo 2^32.
 * Writes must lie in `[old tail, head]`.
 */
#define GPUPM_REG_PART_STREAM_TAIL 0x54
/**
 * RO: ring capacity in records (a power of two). Ring 0 (RC0) receives a
 * commit for the triggers of every partition, so it is larger: the
 * scenario's capacity times (GPU slices + 1), rounded up to a power of
 * two, at most `layout::STREAM_RING_MAX`.
 */
#define GPUPM_REG_PART_STREAM_CAP 0x58
/**
 * RW: raise `STREAM_WATERMARK` when `head - tail` reaches this (1..=cap);
 * raised once per drain (re-armed by a tail write).
 */
#define GPUPM_REG_PART_STREAM_WATERMARK 0x5c
/** RO 64-bit: records lost because the ring was full. */
#define GPUPM_REG_PART_STREAM_LOST 0x60 /* 64-bit */
/** RO 64-bit: memory-window offset of the ring's first slot. */
#define GPUPM_REG_PART_STREAM_BASE 0x68 /* 64-bit */
/** RW: context timeslice in cycles (0 = never rotate contexts). */
#define GPUPM_REG_PART_TIMESLICE_CTX 0x70
/** RW: VM timeslice in cycles (0 = never rotate VMs). */
#define GPUPM_REG_PART_TIMESLICE_VM 0x74
/** RO: GPC ownership mask. */
#define GPUPM_REG_PART_GPC_MASK 0x78
/** RO: memory-slice ownership mask. */
#define GPUPM_REG_PART_MEM_MASK 0x7c
/** RO 64-bit: cycle at which the pending switch was requested. */
#define GPUPM_REG_PART_SWITCH_REQ_CYCLE 0x80 /* 64-bit */
/** Step 1: the running context is paused (generates nothing). */
#define GPUPM_PART_CTRL_CTX_PAUSE 0x1
/** Step 2: periodic triggers trigger-block→CCU are paused. */
#define GPUPM_PART_CTRL_TRIG_PAUSE 0x2
/** Step 2: periodic ULC→CCU transfers are paused. */
#define GPUPM_PART_CTRL_ULC_PAUSE 0x4
/** All defined bits. */
#define GPUPM_PART_CTRL_ALL 0x7
/** Mask of the handshake state field. */
#define GPUPM_PART_STATUS_STATE_MASK 0xf
/** The partition slot is configured (owns units). */
#define GPUPM_PART_STATUS_CONFIGURED 0x100
/** The last switch was completed by the device's fallback. */
#define GPUPM_PART_STATUS_LAST_FALLBACK 0x200
/** The pending switch is a VM switch (re-points the VM block too). */
#define GPUPM_PART_STATUS_VM_SWITCH 0x400
/** No switch pending. */
#define GPUPM_HS_STATE_IDLE 0
/** The device asked for a switch; the outgoing context still runs. */
#define GPUPM_HS_STATE_REQUESTED 1
/** Step 1 done. */
#define GPUPM_HS_STATE_CTX_PAUSED 2
/** Step 2 done. */
#define GPUPM_HS_STATE_XFER_PAUSED 3
/** Step 3 done: ULC partials flushed, CCUs triggered. */
#define GPUPM_HS_STATE_TRIGGERED 4
/** Steps 4-5 done: every assigned CCU acked. */
#define GPUPM_HS_STATE_ACKED 5
/** Step 6a done: RC committed into the outgoing blocks. */
#define GPUPM_HS_STATE_COMMITTED 6
/** Step 6b done: RC re-pointed to the incoming blocks. */
#define GPUPM_HS_STATE_REPOINTED 7
/**
 * Step 6a: commit the RC's counters into the bound blocks and reset
 * them. Legal only in `hs_state::ACKED` (after the flush request and
 * every assigned CCU's ack); anywhere else the write fails.
 */
#define GPUPM_RC_CMD_COMMIT 0x1
/** Re-point the RC to `PART_RC_BIND_VM`/`PART_RC_BIND_CTX`. */
#define GPUPM_RC_CMD_REPOINT 0x2
/** All defined bits. */
#define GPUPM_RC_CMD_ALL 0x3
/** RO: partition slot owning this CCU (0 = system). */
#define GPUPM_REG_CCU_OWNER 0x0
/** RO: number of ULCs served. */
#define GPUPM_REG_CCU_ULCS 0x4
/** RO: number of counters (sum of the ULCs' counters). */
#define GPUPM_REG_CCU_COUNTERS 0x8
/** RO: index of the active bank (0 or 1). */
#define GPUPM_REG_CCU_ACTIVE_BANK 0xc
/** RW: index of the 32-bit mask word that `CCU_MASK_DATA` accesses. */
#define GPUPM_REG_CCU_MASK_INDEX 0x10
/** RW: mask word: bit i masks counter `32 * index + i` (1 = masked). */
#define GPUPM_REG_CCU_MASK_DATA 0x14
/** RO 64-bit: records emitted. */
#define GPUPM_REG_CCU_RECORDS 0x18 /* 64-bit */
/** RO: unit group kind, see GPUPM_CCU_GROUP_*. */
#define GPUPM_REG_CCU_GROUP 0x20
/** RO: unit group index within its kind. */
#define GPUPM_REG_CCU_GROUP_INDEX 0x24
/** One GPC's SMs. */
#define GPUPM_CCU_GROUP_GPC 0
/** One memory slice: L2 slices, FB partitions and copy engines. */
#define GPUPM_CCU_GROUP_MEMORY_SLICE 1
/** Device-level shared units (NVLink), counted into RC0 only. */
#define GPUPM_CCU_GROUP_SYSTEM 2
/** A partition's lane of the context-filtered shared units (PCIe). */
#define GPUPM_CCU_GROUP_SHARED_LANE 3
/** RO: partition slot the VM is bound to (0 = entry unused). */
#define GPUPM_REG_VM_PARTITION 0x0
/** RO: flags, see GPUPM_VM_FLAGS_*. */
#define GPUPM_REG_VM_FLAGS 0x4
/** RO 64-bit: memory-window offset of the VM block slot. */
#define GPUPM_REG_VM_BLOCK 0x8 /* 64-bit */
/**
 * WO: 1 = open the rekey blob staged in `REKEY_*` with this VM's current
 * session key and, only if it opens, install the key it carries (the key
 * epoch increments). A blob that does not open (forged, replayed, for
 * another VM, epoch or session, or malformed) fails with EINVAL and
 * changes nothing. Confidential VMs only.
 */
#define GPUPM_REG_VM_KEY_COMMIT 0x30
/**
 * RO: key epoch within the VM's session (1 = the key the session started
 * with, +1 per rekey); 0 while the VM has no session and for a VM that is
 * not confidential.
 */
#define GPUPM_REG_VM_KEY_EPOCH 0x34
/**
 * RO 64-bit: the VM's current session id — the device's choice in the
 * key exchange that established it (or, for a key given in the scenario
 * under `--insecure-scenario-keys`, drawn at device start and at every
 * reset); 0 while the VM has no session and for a VM that is not
 * confidential.
 */
#define GPUPM_REG_VM_KEY_SESSION 0x38 /* 64-bit */
/**
 * The VM is confidential: its blocks and stream records leave the
 * device only as AES-256-GCM ciphertext.
 */
#define GPUPM_VM_FLAGS_CONFIDENTIAL 0x1
/**
 * The confidential VM has an established session (ABI 1.11): its
 * counts are sealed under it. Without it they are withheld.
 */
#define GPUPM_VM_FLAGS_SESSION 0x2
/** RO: VM owning the context. */
#define GPUPM_REG_CTX_VM 0x0
/** RO: lifecycle state, see GPUPM_CTX_STATE_*. */
#define GPUPM_REG_CTX_STATE 0x4
/** RO 64-bit: memory-window offset of the context block slot. */
#define GPUPM_REG_CTX_BLOCK 0x8 /* 64-bit */
/** WO: context command, see GPUPM_CTX_CMD_*. */
#define GPUPM_REG_CTX_CMD 0x10
/**
 * RO: program the context runs: 0 = none (it counts by its profile's
 * rates alone), else 1 + its index in the scenario's program table
 * (`Scenario::programs`: the `[[program]]` entries in file order, then the
 * programs generated for churn contexts), see `docs/sampling.md`.
 */
#define GPUPM_REG_CTX_PROGRAM 0x14
/**
 * RO 64-bit: cycle at which the context was created. Context ids are
 * reused after release; (id, created cycle) names one context instance.
 */
#define GPUPM_REG_CTX_CREATED_CYCLE 0x18 /* 64-bit */
/** Entry unused. */
#define GPUPM_CTX_STATE_FREE 0
/** Context exists and may be scheduled. */
#define GPUPM_CTX_STATE_ACTIVE 1
/** Context was destroyed; its block stays readable until released. */
#define GPUPM_CTX_STATE_DESTROYED 2
/** Release a destroyed context's block; the entry becomes free. */
#define GPUPM_CTX_CMD_RELEASE 1

/* Event catalogue (uapi/src/events.rs): ids index every counter array */

/*
 * Event scopes decide where counts go and what is conserved (docs/abi.md
 * section 6; gpupm_event_scope[] below gives each event's): SM, L2, FB and
 * CE events (GPUPM_EVENT_SCOPE_PARTITION) and PCIe events
 * (GPUPM_EVENT_SCOPE_CONTEXT_FILTERED, one lane per partition filtered by
 * the running context) go to the running context's block, its VM's block
 * and the system block; after a flush at a quiescent point, system = sum of
 * VMs and VM = sum of its context instances. NVLink events
 * (GPUPM_EVENT_SCOPE_DEVICE) go to the system block only. Multi-bit events
 * (gpupm_event_multibit[]): one count = GPUPM_MULTIBIT_SCALE signal units.
 */

/**
 * Number of counter slots in a block or stream record. Ids `>= EVENT_COUNT`
 * are reserved and always read 0.
 */
#define GPUPM_MAX_EVENTS 64
/** Most counters one ULC may have. */
#define GPUPM_MAX_ULC_COUNTERS 45
/** Most ULCs one CCU may serve. */
#define GPUPM_MAX_CCU_ULCS 48
/** Number of defined events. */
#define GPUPM_EVENT_COUNT 39
/**
 * Divisor that turns one count of `event` into signal units (32 for
 * multi-bit): the value of the multi-bit accumulator's most significant
 * bit, which drives the count.
 */
#define GPUPM_MULTIBIT_SCALE 32
#define GPUPM_UNIT_SM 0
#define GPUPM_UNIT_L2 1
#define GPUPM_UNIT_FB 2
#define GPUPM_UNIT_CE 3
#define GPUPM_UNIT_PCIE 4
#define GPUPM_UNIT_NVLINK 5
#define GPUPM_EV_SM_CYCLES_ELAPSED 0 /* cycles */
#define GPUPM_EV_SM_CYCLES_ACTIVE 1 /* cycles */
#define GPUPM_EV_SM_ISSUE_ACTIVE 2 /* cycles */
#define GPUPM_EV_SM_INST_EXECUTED 3 /* warp-insts */
#define GPUPM_EV_SM_THREADS_ACTIVE 4 /* 32 threads, multi-bit */
#define GPUPM_EV_SM_WARPS_ACTIVE 5 /* 32 warps, multi-bit */
#define GPUPM_EV_SM_WARPS_LAUNCHED 6 /* warps */
#define GPUPM_EV_SM_INST_FP32 7 /* warp-insts */
#define GPUPM_EV_SM_INST_FP64 8 /* warp-insts */
#define GPUPM_EV_SM_TENSOR_ACTIVE 9 /* cycles */
#define GPUPM_EV_SM_LD_GLOBAL 10 /* requests */
#define GPUPM_EV_SM_ST_GLOBAL 11 /* requests */
#define GPUPM_EV_SM_LD_SHARED 12 /* requests */
#define GPUPM_EV_SM_ST_SHARED 13 /* requests */
#define GPUPM_EV_SM_L1_HIT 14 /* sectors */
#define GPUPM_EV_SM_L1_MISS 15 /* sectors */
#define GPUPM_EV_SM_BRANCH 16 /* warp-insts */
#define GPUPM_EV_SM_BRANCH_DIVERGENT 17 /* warp-insts */
#define GPUPM_EV_SM_STALL_MEMORY 18 /* cycles */
#define GPUPM_EV_SM_STALL_SYNC 19 /* cycles */
#define GPUPM_EV_SM_ATOMIC 20 /* requests */
#define GPUPM_EV_L2_READ_REQ 21 /* requests */
#define GPUPM_EV_L2_WRITE_REQ 22 /* requests */
#define GPUPM_EV_L2_HIT 23 /* sectors */
#define GPUPM_EV_L2_MISS 24 /* sectors */
#define GPUPM_EV_L2_CYCLES_ACTIVE 25 /* cycles */
#define GPUPM_EV_L2_ATOMIC 26 /* requests */
#define GPUPM_EV_FB_READ_SECTORS 27 /* sectors */
#define GPUPM_EV_FB_WRITE_SECTORS 28 /* sectors */
#define GPUPM_EV_FB_CYCLES_ACTIVE 29 /* cycles */
#define GPUPM_EV_FB_BYTES 30 /* 32 bytes, multi-bit */
#define GPUPM_EV_CE_CYCLES_ACTIVE 31 /* cycles */
#define GPUPM_EV_CE_BYTES 32 /* 32 bytes, multi-bit */
#define GPUPM_EV_PCIE_RX_BYTES 33 /* 32 bytes, multi-bit */
#define GPUPM_EV_PCIE_TX_BYTES 34 /* 32 bytes, multi-bit */
#define GPUPM_EV_PCIE_CYCLES_ACTIVE 35 /* cycles */
#define GPUPM_EV_NVLINK_RX_FLITS 36 /* flits */
#define GPUPM_EV_NVLINK_TX_FLITS 37 /* flits */
#define GPUPM_EV_NVLINK_CYCLES_ACTIVE 38 /* cycles */
/**
 * Units a partition owns (SM, L2 slice, FB partition, copy engine):
 * counted into the running context's block, its VM's block and the
 * system block.
 */
#define GPUPM_EVENT_SCOPE_PARTITION 0
/**
 * Shared units filtered by each partition's running context (PCIe, one
 * lane per partition): counted like `PARTITION`.
 */
#define GPUPM_EVENT_SCOPE_CONTEXT_FILTERED 1
/**
 * Device-level shared units (NVLink): counted into the system block
 * only; VM and context blocks hold 0 for them.
 */
#define GPUPM_EVENT_SCOPE_DEVICE 2

/* Event names indexed by id (the names `gpupm stat -e` takes). */
static const char *const gpupm_event_names[GPUPM_EVENT_COUNT] = {
    "sm_cycles_elapsed",
    "sm_cycles_active",
    "sm_issue_active",
    "sm_inst_executed",
    "sm_threads_active",
    "sm_warps_active",
    "sm_warps_launched",
    "sm_inst_fp32",
    "sm_inst_fp64",
    "sm_tensor_active",
    "sm_ld_global",
    "sm_st_global",
    "sm_ld_shared",
    "sm_st_shared",
    "sm_l1_hit",
    "sm_l1_miss",
    "sm_branch",
    "sm_branch_divergent",
    "sm_stall_memory",
    "sm_stall_sync",
    "sm_atomic",
    "l2_read_req",
    "l2_write_req",
    "l2_hit",
    "l2_miss",
    "l2_cycles_active",
    "l2_atomic",
    "fb_read_sectors",
    "fb_write_sectors",
    "fb_cycles_active",
    "fb_bytes",
    "ce_cycles_active",
    "ce_bytes",
    "pcie_rx_bytes",
    "pcie_tx_bytes",
    "pcie_cycles_active",
    "nvlink_rx_flits",
    "nvlink_tx_flits",
    "nvlink_cycles_active",
};

/* Unit type (GPUPM_UNIT_*) of each event, indexed by id. */
static const uint8_t gpupm_event_unit[GPUPM_EVENT_COUNT] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 4, 4, 4, 5, 5, 5 };

/* Scope (GPUPM_EVENT_SCOPE_*) of each event, indexed by id: where its counts go. */
static const uint8_t gpupm_event_scope[GPUPM_EVENT_COUNT] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2 };

/* 1 for a multi-bit event (one count = GPUPM_MULTIBIT_SCALE signal units), indexed by id. */
static const uint8_t gpupm_event_multibit[GPUPM_EVENT_COUNT] = { 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 1, 1, 0, 0, 0, 0 };

/* Interrupt sources (uapi/src/intr.rs) */

/*
 * Interrupt records (docs/abi.md section 8): every open handle of card0 has
 * its own cursor, starting at the next record raised after open(); it never
 * sees earlier ones. A host that starts must therefore scan PART_STATUS of
 * every configured slot for REQUESTED (run the handshake) and for TRIGGERED
 * or ACKED (a switch its previous run left between the two batches: take
 * it over with PART_NEXT_VM/PART_NEXT_CTX, finishing an ACKED one at once),
 * read the context table and drain every ring after opening its interrupt
 * handle. seq counts every record raised;
 * a gap means records were missed (the device keeps the last 16384).
 * Record arguments: SWITCH_REQUESTED and SWITCH_FALLBACK: partition, arg =
 * incoming context, arg2 = incoming VM; CTX_CREATED/CTX_DESTROYED:
 * partition, arg = context, arg2 = VM; STREAM_WATERMARK: arg = fill;
 * STREAM_OVERFLOW: arg = records lost so far; TRIGGER_DONE: arg = target
 * mask, arg2 = command; FLUSH_ACKED: partition, arg = incoming context,
 * arg2 = incoming VM (a host-driven switch reached ACKED; not raised when
 * the fallback finishes a switch); MAILBOX_DONE (the host's mailbox only,
 * never the OOB one): arg = opcode, arg2 = status.
 */

/**
 * The device asks host software to run a context/VM switch handshake
 * (`partition`; `arg` = incoming context, 0 = the slice goes idle;
 * `arg2` = incoming VM).
 */
#define GPUPM_INTR_SWITCH_REQUESTED 0x1
/**
 * A register-write or external trigger finished (records routed, RC
 * committed; `arg` = target mask, `arg2` = command bits, 0 for
 * `TRIG_EXTERNAL`).
 */
#define GPUPM_INTR_TRIGGER_DONE 0x2
/**
 * A commit brought a stream ring to its watermark (`partition`, `arg` =
 * fill). Edge-triggered: raised once, at the first such commit since
 * the host last wrote `PART_STREAM_TAIL`; a tail write re-arms it. A
 * drain must write the tail and re-read the head in one batch until
 * they are equal, or a record committed during the drain waits for the
 * next commit.
 */
#define GPUPM_INTR_STREAM_WATERMARK 0x4
/**
 * A stream ring was full and a record was lost (`partition`, `arg` =
 * records lost so far, saturating); raised at the first loss since the
 * ring last stored a record.
 */
#define GPUPM_INTR_STREAM_OVERFLOW 0x8
/**
 * A context was created: its block is allocated and bound
 * (`partition`, `arg` = context, `arg2` = VM).
 */
#define GPUPM_INTR_CTX_CREATED 0x10
/**
 * A context was destroyed: its block holds its final totals until the
 * host releases it with `CTX_CMD` (`partition`, `arg` = context,
 * `arg2` = VM).
 */
#define GPUPM_INTR_CTX_DESTROYED 0x20
/**
 * The device completed a switch itself after the host timed out
 * (`partition`, `arg` = incoming context, `arg2` = incoming VM).
 */
#define GPUPM_INTR_SWITCH_FALLBACK 0x40
/**
 * A command of the host's mailbox (`MBOX_CMD`) completed (`arg` =
 * opcode, `arg2` = `MBOX_STATUS`). A command of the out-of-band
 * mailbox (`OOB_MBOX_CMD`) raises nothing: no record and no
 * `INTR_STATUS` bit (its completion is `OOB_MBOX_SEQ` alone).
 */
#define GPUPM_INTR_MAILBOX_DONE 0x80
/**
 * The device was reset: settings the host programmed are gone
 * (`TRIG_TARGET` is 0 again); re-apply them.
 */
#define GPUPM_INTR_DEVICE_RESET 0x100
/**
 * Every CCU assigned to a partition acknowledged the flush request of
 * a switch in progress (`hs_state::ACKED`): the host may commit
 * (step 6). Not raised when the device's fallback finishes the switch
 * itself. A host that cannot poll `PART_CCU_ACKED` until the acks
 * arrive (they take up to `FLUSH_ACK_MAX_CYCLES` of device time, and
 * a step clock moves only when host software advances it) resumes the
 * handshake on this record.
 */
#define GPUPM_INTR_FLUSH_ACKED 0x200
/**
 * A sample buffer reached its watermark (raised once, then again only
 * after the host moved its tail): `arg` = fill, `arg2` = buffer kind
 * (`sampling::buf_kind`).
 */
#define GPUPM_INTR_SAMPLE_WATERMARK 0x400
/**
 * A sample buffer was full and a record was lost (raised at the first
 * loss since the buffer last stored a record or the host moved its
 * tail): `arg` = records lost so far (low 32 bits of `BUF_LOST`),
 * `arg2` = buffer kind.
 */
#define GPUPM_INTR_SAMPLE_OVERFLOW 0x800
/**
 * A runtime-instrumentation program buffer was full (`partition` =
 * the context's slot, `arg` = control block, `arg2` = context): the
 * session stopped, or (`WRAP`) its next group goes to ROA. Only with
 * `ri_ctrl::INTR_ENABLE` (see `docs/ri.md`).
 */
#define GPUPM_INTR_RI_BUFFER_FULL 0x1000
/**
 * A runtime-instrumentation session halted (`partition` = the slot
 * its VM moved to, `arg` = control block, `arg2` = reason,
 * `ri::halt_reason`). Only with `ri_ctrl::INTR_ENABLE`.
 */
#define GPUPM_INTR_RI_HALT 0x2000
/**
 * A marked range's count or one entry's latency crossed its threshold
 * (`partition`; `arg` = range index | `RANGE_IRQ_LATENCY` for a
 * latency crossing | `RANGE_IRQ_LOST` when the ring was full and the
 * record was lost; `arg2` = the context, 0 for a confidential VM's).
 * Exactly one per crossing, with exactly one record produced.
 */
#define GPUPM_INTR_RANGE_THRESHOLD 0x4000
/** All defined sources. */
#define GPUPM_INTR_ALL 0x7fff

/** Names of the sources, indexed by bit number. */
static const char *const gpupm_intr_source_names[15] = {
    "switch_requested",
    "trigger_done",
    "stream_watermark",
    "stream_overflow",
    "ctx_created",
    "ctx_destroyed",
    "switch_fallback",
    "mailbox_done",
    "device_reset",
    "flush_acked",
    "sample_watermark",
    "sample_overflow",
    "ri_buffer_full",
    "ri_halt",
    "range_threshold",
};

/* Memory window layouts (uapi/src/layout.rs) */

/*
 * Memory window (docs/abi.md section 5): block slots from window offset 0
 * (slot 0 system, slot v VM v, the context pool from GPUPM_CTX_BLOCK_SLOT_BASE),
 * stream rings from GPUPM_STREAM_REGION, GPUPM_STREAM_RING_SPAN bytes per
 * partition slot. A read may span slots but must stay inside one region
 * (EINVAL otherwise). A slot is valid iff envelope.flags has VALID; with
 * ENCRYPTED the payload is AES-256-GCM ciphertext under the VM's session
 * key and the tag follows; the envelope carries key_epoch, the nonce and
 * the session id (session_hi << 32 | session_lo), and all 32 bytes of it
 * are the associated data (confidential VMs: docs/confidential.md).
 */

/**
 * Offset in the device node's file space where the memory window starts;
 * offsets below it address BAR0 registers.
 */
#define GPUPM_MEM_WINDOW_OFFSET 0x100000000ULL
/** Window offset where stream rings start. */
#define GPUPM_STREAM_REGION 0x259400
/** Window bytes reserved per partition slot's ring (the ring may be smaller). */
#define GPUPM_STREAM_RING_SPAN 0x4c0000
/** Magic of a plaintext counter block: "gBLK". */
#define GPUPM_BLOCK_MAGIC 0x4b4c4267
/** Magic of a plaintext stream record: "gREC". */
#define GPUPM_RECORD_MAGIC 0x43455267
/** Size of one block slot in the memory window. */
#define GPUPM_BLOCK_SLOT_SIZE 592
/** Slot index of the system block (RC0). */
#define GPUPM_SYSTEM_BLOCK_SLOT 0
/** Slot index of VM `v`'s block is `v` (VM ids are 1..MAX_VMS). */
#define GPUPM_VM_BLOCK_SLOT_BASE 0
/** First slot of the context-block pool. */
#define GPUPM_CTX_BLOCK_SLOT_BASE 64
/** Number of slots in the context-block pool. */
#define GPUPM_CTX_BLOCK_SLOTS 4096
/** Largest ring capacity in records. */
#define GPUPM_STREAM_RING_MAX 8192
/** Size of one stream-ring slot. */
#define GPUPM_STREAM_SLOT_SIZE 608
/** Bytes of the envelope bound as AES-GCM associated data: all of it. */
#define GPUPM_ENVELOPE_AAD_LEN 32
/** Values per CCU record. */
#define GPUPM_RECORD_VALUES 8
/** `info` prefix of the session-key derivation (HKDF-SHA256). */
#define GPUPM_SESSION_KEY_INFO "gpupm-cc-v1"
#define GPUPM_BLOCK_SLOT_OFFSET(slot) ((uint64_t)(slot) * GPUPM_BLOCK_SLOT_SIZE)
#define GPUPM_STREAM_SLOT_OFFSET(p, i) (GPUPM_STREAM_REGION + (uint64_t)(p) * GPUPM_STREAM_RING_SPAN + (uint64_t)(i) * GPUPM_STREAM_SLOT_SIZE)
/** The system block (RC0): everything counted on the device. */
#define GPUPM_BLOCK_KIND_SYSTEM 1
/** A VM block: everything its contexts were counted for. */
#define GPUPM_BLOCK_KIND_VM 2
/** A context block. */
#define GPUPM_BLOCK_KIND_CONTEXT 3
/** The slot holds data. */
#define GPUPM_ENVELOPE_FLAGS_VALID 0x1
/** The payload is ciphertext followed by a tag. */
#define GPUPM_ENVELOPE_FLAGS_ENCRYPTED 0x2
/**
 * A confidential VM's slot while it has no session (ABI 1.11): set
 * with `ENCRYPTED`; the payload, tag, key epoch, session and nonce
 * are all 0. The counts stay inside the device and appear, sealed,
 * once the VM's tenant establishes a session.
 */
#define GPUPM_ENVELOPE_FLAGS_WITHHELD 0x4
/** The commit was step 6 of a context/VM switch. */
#define GPUPM_RECORD_FLAGS_SWITCH 0x1
/** The commit followed a fallback-completed switch. */
#define GPUPM_RECORD_FLAGS_FALLBACK 0x2
/** The clock ran at secondary (throttled) capability at commit time. */
#define GPUPM_RECORD_FLAGS_SECONDARY_CLOCK 0x4
/** Caused by a threshold trigger. */
#define GPUPM_RECORD_FLAGS_THRESHOLD 0x8
/** The empty record that acknowledges a flush request. */
#define GPUPM_CCU_RECORD_FLAGS_FLUSH_ACK 0x1

/* Device node ioctls (uapi/src/ioctl.rs) */

/*
 * Device-node ioctls (docs/abi.md sections 2.1, 16): version must be
 * GPUPM_IOCTL_STRUCT_VERSION, flags and reserved fields 0, else EINVAL;
 * unknown number -> ENOTTY. GPUPM_IOC_REG_BATCH runs 1..64 ops atomically
 * (no device time passes, nothing interleaves, all or nothing); on failure
 * the call fails with EINVAL and the struct comes back with failed_index =
 * the failing op. GPUPM_IOC_ADVANCE (step clock only, else EINVAL) runs
 * every event in its span and does NOT stop at a switch request: advance by
 * less than PART_SWITCH_TIMEOUT and answer requests between advances, or
 * the fallback completes them. GPUPM_IOC_LEDGER is the emulator's debug
 * oracle, answered only when gpupm-driver runs with --debug-ledger (ENOTTY
 * otherwise) and sealed (GPUPM_LEDGER_FLAGS_SEALED) for a confidential VM:
 * after a flush at a quiescent point a scope's block holds
 * (generated - remainder) / scale - masked per event.
 */

/** ioctl "type" byte of the device node. */
#define GPUPM_IOC_MAGIC 0x47 /* 'G' */
/** Version every ioctl argument struct must carry. */
#define GPUPM_IOCTL_STRUCT_VERSION 1
/** Largest argument struct the ABI allows. */
#define GPUPM_MAX_IOCTL_SIZE 16384
/** Most ops in one batch. */
#define GPUPM_MAX_BATCH_OPS 64
/** `_IOC_NR` of `GPUPM_IOC_WINDOW_READ(len)`. */
#define GPUPM_WINDOW_READ_NR 7
/** Most bytes one window read returns. */
#define GPUPM_WINDOW_READ_MAX 12288
/** Most block slots one wait returns. */
#define GPUPM_WAIT_COMMIT_MAX_BLOCKS 24
/** Longest timeout, in microseconds (10 s). */
#define GPUPM_WAIT_COMMIT_MAX_TIMEOUT_US 10000000
/** gpupm_mirror_header.magic: "GPMM" little-endian. */
#define GPUPM_MIRROR_MAGIC 0x4d4d5047
/** Layout version of this header and slot array. */
#define GPUPM_MIRROR_VERSION 1
/** Bytes before the first block slot (one cache line). */
#define GPUPM_MIRROR_HEADER_SIZE 64
/** Longest path struct gpupm_mirror_info carries, NUL included. */
#define GPUPM_MIRROR_PATH_MAX 256
/** Size of the waiter file: one page, holding the `waiters` word at 0. */
#define GPUPM_MIRROR_WAITERS_SIZE 4096
/** Bytes of the struct gpupm_mirror_rings header. */
#define GPUPM_MIRROR_RINGS_HEADER_SIZE 32
/** Bytes of one struct gpupm_mirror_ring descriptor. */
#define GPUPM_MIRROR_RING_SIZE 32
/** generation. */
#define GPUPM_MIRROR_OFFSET_GENERATION 16
/** seq. */
#define GPUPM_MIRROR_OFFSET_SEQ 24
/** commit_seq. */
#define GPUPM_MIRROR_OFFSET_COMMIT_SEQ 32
/** cycle. */
#define GPUPM_MIRROR_OFFSET_CYCLE 40
/** doorbell. */
#define GPUPM_MIRROR_OFFSET_DOORBELL 48
/** rings. */
#define GPUPM_MIRROR_OFFSET_RINGS 56
/** head, from a descriptor's start. */
#define GPUPM_MIRROR_OFFSET_RING_HEAD 0
/** cap, from a descriptor's start. */
#define GPUPM_MIRROR_OFFSET_RING_CAP 4
/** window_base, from a descriptor's start. */
#define GPUPM_MIRROR_OFFSET_RING_WINDOW_BASE 8
/** slots, from a descriptor's start. */
#define GPUPM_MIRROR_OFFSET_RING_SLOTS 16
/** Largest gpupm_advance.cycles. */
#define GPUPM_MAX_ADVANCE_CYCLES 0x10000000000ULL
/** Read the register into `value`. */
#define GPUPM_REG_OP_READ 1
/** Write `value` to the register. */
#define GPUPM_REG_OP_WRITE 2
/** One context (`id` = context id). */
#define GPUPM_LEDGER_SCOPE_CONTEXT 1
/** One VM: sum over its contexts (`id` = VM id). */
#define GPUPM_LEDGER_SCOPE_VM 2
/** Everything, including device-level units (`id` = 0). */
#define GPUPM_LEDGER_SCOPE_SYSTEM 3
/** The answer is sealed under the VM's session key. */
#define GPUPM_LEDGER_FLAGS_SEALED 0x1
/**
 * The VM has no session (ABI 1.11): the answer is withheld — the
 * counts are zero, the envelope has `WITHHELD` (with `SEALED` set too).
 */
#define GPUPM_LEDGER_FLAGS_WITHHELD 0x2
/**
 * Bytes of a struct gpupm_ledger_query that a sealed answer encrypts: `generated`,
 * `masked` and `remainder`.
 */
#define GPUPM_LEDGER_SEALED_LEN 1536
/** Read struct gpupm_identity. */
#define GPUPM_IOC_IDENTITY 0xc0304700U
/** Run a struct gpupm_reg_batch. */
#define GPUPM_IOC_REG_BATCH 0xc6104701U
/** Advance the step clock. */
#define GPUPM_IOC_ADVANCE 0xc0184702U
/** Read the ledger (debug only: `gpupm-driver --debug-ledger`). */
#define GPUPM_IOC_LEDGER 0xc6404703U
/** Reset the device. */
#define GPUPM_IOC_RESET 0x40084704
/** Read one register (struct gpupm_reg_access). */
#define GPUPM_IOC_REG_READ 0xc0204705U
/** Write one register (struct gpupm_reg_access). */
#define GPUPM_IOC_REG_WRITE 0x40204706
/** Read the per-block ground truth of a context's program (debug only). */
#define GPUPM_IOC_LEDGER_BLOCKS 0xc8504708U
/** Read one runtime-instrumentation control block's ground truth (debug only). */
#define GPUPM_IOC_LEDGER_RI 0xc0684709U
/**
 * Read the per-(context, range) ground truth of a partition's marked
 * ranges (debug only; RangeLedgerQuery).
 */
#define GPUPM_IOC_LEDGER_RANGES 0xc140470cU
/**
 * Read the call-graph ground truth of a context's program (debug
 * only; CallLedgerQuery).
 */
#define GPUPM_IOC_LEDGER_CALLS 0xc448470dU
/**
 * Wait for the next periodic commit and read blocks in the same
 * reply (ABI 1.8; WaitCommit).
 */
#define GPUPM_IOC_WAIT_COMMIT 0xf8104710U
/**
 * Where the commit mirror is and its layout (ABI 1.9;
 * MirrorInfo).
 */
#define GPUPM_IOC_MIRROR_INFO 0xc2204711U
/**
 * The device's half of a confidential session's key exchange (ABI
 * 1.11; KeyExchange).
 */
#define GPUPM_IOC_CC_KEY_EXCHANGE 0xc1784712U
/**
 * Finish a confidential session's key exchange (ABI 1.11;
 * Finish).
 */
#define GPUPM_IOC_CC_FINISH 0xc0604713U
/* A window read of len bytes (1..GPUPM_WINDOW_READ_MAX): the argument is a
 * struct gpupm_window_read followed by len bytes; the number carries the size. */
#define GPUPM_IOC_WINDOW_READ(len) \
    (0xc0004707U | (uint32_t)(sizeof(struct gpupm_window_read) + (len)) << 16)

/* Tenant node ioctls (uapi/src/tenant.rs) */

/*
 * Tenant node (docs/abi.md section 18): root and the daemon's admin group see
 * everything including the system scope; a tenant (named by a [[tenant]]
 * entry of gpupmd.toml) sees its VMs and their contexts; anyone else gets
 * EACCES at open() and on every request. The admin may learn existence, a
 * tenant never: for a tenant, what is not theirs and what does not exist
 * both fail with EACCES; the admin gets ENOENT for what does not exist.
 * Checks in order: ioctl number (ENOTTY), argument shape (EINVAL), access
 * (EACCES), existence.
 */

/** ioctl "type" byte of the tenant node. */
#define GPUPM_TENANT_IOC_MAGIC 0x54 /* 'T' */
/** Version every tenant ioctl struct must carry. */
#define GPUPM_TENANT_STRUCT_VERSION 1
/** Most VMs one caller can be mapped to. */
#define GPUPM_TENANT_MAX_CALLER_VMS 64
/** Most contexts per struct gpupm_tenant_list_contexts page. */
#define GPUPM_TENANT_LIST_PAGE 256
/** Most samples per struct gpupm_tenant_read_rates. */
#define GPUPM_TENANT_RATE_SAMPLES 16
/** One context (`id` = context id). */
#define GPUPM_TENANT_SCOPE_CONTEXT 1
/** One VM (`id` = VM id). */
#define GPUPM_TENANT_SCOPE_VM 2
/** The whole device (`id` = 0); admin only. */
#define GPUPM_TENANT_SCOPE_SYSTEM 3
/** Exists and may run. */
#define GPUPM_TENANT_CTX_STATE_ACTIVE 1
/** Destroyed; totals final. */
#define GPUPM_TENANT_CTX_STATE_DESTROYED 2
/** Destroyed, persisted by the daemon, block released. */
#define GPUPM_TENANT_CTX_STATE_RETIRED 3
/**
 * The scope belongs to a confidential VM: `values` are 0 and `sealed`
 * holds the block slot as the device published it (AES-256-GCM under
 * the VM's key; see `layout::Envelope`).
 */
#define GPUPM_TENANT_COUNTER_FLAGS_SEALED 0x1
/**
 * Read the newest instance of the id: `created_cycle` is ignored on
 * input and answers the instance that was read.
 */
#define GPUPM_TENANT_INSTANCE_FLAGS_LATEST 0x1
/** Every defined bit. */
#define GPUPM_TENANT_INSTANCE_FLAGS_ALL 0x1
#define GPUPM_TENANT_SAMPLE_KIND_BRANCH_STACK 0x1
#define GPUPM_TENANT_SAMPLE_KIND_CYCLE 0x2
#define GPUPM_TENANT_SAMPLE_KIND_ALL 0x3
#define GPUPM_TENANT_SAMPLE_FLAGS_SEALED 0x1
#define GPUPM_TENANT_MIN_SAMPLE_PERIOD 256
#define GPUPM_TENANT_MAX_SAMPLE_PERIOD 1073741824
#define GPUPM_TENANT_MAX_SAMPLE_DITHER 4095
#define GPUPM_TENANT_MAX_BRANCH_EVERY 1048576
#define GPUPM_TENANT_DEFAULT_SESSION_RECORDS 65536
#define GPUPM_TENANT_MAX_SESSION_RECORDS 1048576
/** The VM is confidential. */
#define GPUPM_TENANT_KEY_FLAGS_CONFIDENTIAL 0x1
/**
 * The VM has an established session (ABI 1.11): `key_epoch` and
 * `session` are its; without it both are 0 and the VM's counts are
 * withheld.
 */
#define GPUPM_TENANT_KEY_FLAGS_SESSION 0x2
#define GPUPM_TENANT_RI_MODE_CYCLE 1
#define GPUPM_TENANT_RI_MODE_INSTRUCTION 2
#define GPUPM_TENANT_RI_MODE_DIRECTED 3
#define GPUPM_TENANT_RI_CONTROLS_EMIT 0x1
#define GPUPM_TENANT_RI_CONTROLS_ABORT 0x2
#define GPUPM_TENANT_RI_CONTROLS_SUPPRESS_PRIMARY 0x4
#define GPUPM_TENANT_RI_CONTROLS_SUPPRESS_SECONDARY 0x8
#define GPUPM_TENANT_RI_CONTROLS_ALL 0xf
#define GPUPM_TENANT_RI_STATE_ENABLED 0x1
#define GPUPM_TENANT_RI_STATE_HALTED 0x4
#define GPUPM_TENANT_RI_STATE_ENDED 0x8
#define GPUPM_TENANT_RI_ENTRY_GROUP 1
#define GPUPM_TENANT_RI_ENTRY_HALT 2
#define GPUPM_TENANT_RI_RGS_MAX 7
#define GPUPM_TENANT_RI_SF_MAX 1073741824
#define GPUPM_TENANT_DEFAULT_RI_QUEUE_GROUPS 4096
#define GPUPM_TENANT_MAX_RI_QUEUE_GROUPS 65536
#define GPUPM_TENANT_RANGE_KIND_CODE 1
#define GPUPM_TENANT_RANGE_KIND_DATA 2
#define GPUPM_TENANT_RANGE_TRIGGER_NONE 0
#define GPUPM_TENANT_RANGE_TRIGGER_COUNT 1
#define GPUPM_TENANT_RANGE_TRIGGER_LATENCY 2
#define GPUPM_TENANT_RANGE_ROW_FLAGS_INEXACT 0x1
#define GPUPM_TENANT_GRAPH_FLAGS_STACKS_DROPPED 0x1
#define GPUPM_TENANT_MAX_CONTEXT_RANGES 8
#define GPUPM_TENANT_MAX_GRAPH_STACKS 4096
#define GPUPM_TENANT_GRAPH_EDGE_ROWS 64
#define GPUPM_TENANT_GRAPH_KERNEL_ROWS 64
#define GPUPM_TENANT_GRAPH_STACK_ROWS 32
#define GPUPM_TENANT_STACK_FRAMES 17
/** Read struct gpupm_tenant_whoami. */
#define TENANT_IOC_WHOAMI 0xc1105400U
/** struct gpupm_tenant_list_contexts. */
#define TENANT_IOC_LIST_CONTEXTS 0xd0185401U
/** struct gpupm_tenant_read_counters. */
#define TENANT_IOC_READ_COUNTERS 0xc4f85402U
/** struct gpupm_tenant_read_rates. */
#define TENANT_IOC_READ_RATES 0xe1a05403U
/** struct gpupm_tenant_open_stream. */
#define TENANT_IOC_OPEN_STREAM 0x40105404
/** struct gpupm_tenant_event_info. */
#define TENANT_IOC_EVENT_INFO 0xc0a05405U
/** struct gpupm_tenant_read_instance (ABI 1.2). */
#define TENANT_IOC_READ_INSTANCE 0xc5105406U
/** struct gpupm_tenant_read_instance_rates (ABI 1.2). */
#define TENANT_IOC_READ_INSTANCE_RATES 0xe1b05407U
/** struct gpupm_tenant_open_sampling (ABI 1.5): make the handle a sampling session. */
#define TENANT_IOC_OPEN_SAMPLING 0xc0505408U
/** struct gpupm_tenant_key_state (ABI 1.5). */
#define TENANT_IOC_KEY_STATE 0xc0205409U
/** struct gpupm_tenant_rekey (ABI 1.5). */
#define TENANT_IOC_REKEY 0x4048540a
/** KeyExchange (ABI 1.11): relayed to the device. */
#define TENANT_IOC_CC_KEY_EXCHANGE 0xc178540eU
/** Finish (ABI 1.11): relayed to the device. */
#define TENANT_IOC_CC_FINISH 0xc060540fU
/** struct gpupm_tenant_open_ri (ABI 1.7): make the handle a runtime-instrumentation session. */
#define TENANT_IOC_OPEN_RI 0xc0505410U
/** struct gpupm_tenant_ri_emit (ABI 1.7): RIEMIT into the handle's RI session. */
#define TENANT_IOC_RI_EMIT 0x40105411
/** struct gpupm_tenant_ri_status (ABI 1.7): the handle's RI session. */
#define TENANT_IOC_RI_STATUS 0xc0485412U
/** struct gpupm_tenant_ri_resume (ABI 1.8): re-enable the handle's halted RI session. */
#define TENANT_IOC_RI_RESUME 0xc0185413U
/** struct gpupm_tenant_add_range (ABI 1.7): program a range for one of the caller's contexts. */
#define TENANT_IOC_ADD_RANGE 0xc0405418U
/** struct gpupm_tenant_read_ranges (ABI 1.7). */
#define TENANT_IOC_READ_RANGES 0xc2185419U
/** struct gpupm_tenant_remove_range (ABI 1.7). */
#define TENANT_IOC_REMOVE_RANGE 0x4010541a
/** struct gpupm_tenant_read_call_edges (ABI 1.7). */
#define TENANT_IOC_READ_CALL_EDGES 0xc430541bU
/** struct gpupm_tenant_read_call_kernels (ABI 1.7). */
#define TENANT_IOC_READ_CALL_KERNELS 0xc630541cU
/** struct gpupm_tenant_read_call_stacks (ABI 1.7). */
#define TENANT_IOC_READ_CALL_STACKS 0xc730541dU

/* Perf PMU module: event config fields and the publication device (uapi/src/pmu.rs) */

/** Name of the perf PMU (`/sys/bus/event_source/devices/gpupm`). */
#define GPUPM_PMU_NAME "gpupm"
/** Name of the publication misc device (`/dev/gpupm_pmu`). */
#define GPUPM_PMU_PUBLISH_DEVICE "gpupm_pmu"
/** Every format field, in `format/` order. */
/** Catalogue id. */
#define GPUPM_PMU_FIELD_EVENT(attr) (((attr)->config >> 0) & 0xffffULL) /* config:0-15 */
/** GPUPM_PMU_SCOPE_* value. */
#define GPUPM_PMU_FIELD_SCOPE(attr) (((attr)->config >> 16) & 0xfULL) /* config:16-19 */
/** VM id. */
#define GPUPM_PMU_FIELD_VM(attr) (((attr)->config1 >> 0) & 0xffffULL) /* config1:0-15 */
/** Context id. */
#define GPUPM_PMU_FIELD_CTX(attr) (((attr)->config1 >> 16) & 0xffffULL) /* config1:16-31 */
/** Bits of `config` that some field uses; the rest must be zero. */
#define GPUPM_PMU_CONFIG_USED 0xfffff
/** Bits of `config1` that some field uses; the rest must be zero. */
#define GPUPM_PMU_CONFIG1_USED 0xffffffffU
/** Implied: system, or the VM or context whose id is set. */
#define GPUPM_PMU_SCOPE_IMPLIED 0
/** One context (`ctx`). */
#define GPUPM_PMU_SCOPE_CONTEXT 1
/** One VM (`vm`). */
#define GPUPM_PMU_SCOPE_VM 2
/** The whole device. */
#define GPUPM_PMU_SCOPE_SYSTEM 3
/** ioctl "type" byte of the publication device. */
#define GPUPM_PMU_IOC_MAGIC 0x50 /* 'P' */
/** Version every publication argument struct must carry. */
#define GPUPM_PMU_STRUCT_VERSION 1
/** Most scopes one struct gpupm_pmu_publish carries (keeps it under 16 KiB). */
#define GPUPM_PMU_PUBLISH_BATCH 16
/** Words of the context bitmap of struct gpupm_pmu_wanted. */
#define GPUPM_PMU_WANTED_WORDS 64
/** Publish the totals of up to GPUPM_PMU_PUBLISH_BATCH scopes. */
#define GPUPM_PMU_IOC_PUBLISH 0x61085000
/** Read which context scopes are wanted. */
#define GPUPM_PMU_IOC_WANTED 0xc2105001U

/* Tenant counter pages (uapi/src/page.rs, docs/pages.md) */

/** Bytes of one page, and of the file that holds it. */
#define GPUPM_PAGE_SIZE 4096
/** gpupm_page_header.version: the page layout's version. */
#define GPUPM_PAGE_VERSION 1
/** Version every struct gpupm_page_request and struct gpupm_page_reply carries. */
#define GPUPM_PAGE_STRUCT_VERSION 1
/** Byte offset of gpupm_page.seq. */
#define GPUPM_PAGE_SEQ_OFFSET 64
/** Byte offset of gpupm_page.data, the words the sequence lock protects. */
#define GPUPM_PAGE_DATA_OFFSET 72
/**
 * Attempts the reference readers make spinning before they start
 * yielding the processor between attempts: a writer holds the lock for
 * well under a microsecond unless it is preempted, and then only giving
 * the processor away lets it finish (on a busy host the reader may be
 * what keeps it off its core).
 */
#define GPUPM_PAGE_READ_SPINS 256
/**
 * How long the reference readers keep failing before they report the
 * page busy, in milliseconds: long enough for a preempted writer on a
 * loaded host to be scheduled again; a writer that died mid-update
 * leaves `seq` odd for good, and only its successor's republication
 * ends that.
 */
#define GPUPM_PAGE_BUSY_MS 1000
/** Bytes after gpupm_page.data up to GPUPM_PAGE_SIZE. */
#define GPUPM_PAGE_TAIL 1736
/** gpupm_page_header.magic: "gPAG". */
#define GPUPM_PAGE_MAGIC 0x47415067 /* "gPAG" */
/**
 * Where `gpupmd` listens for page requests unless configured otherwise
 * (`dir` in the `[pages]` table of `gpupmd.toml`, plus PAGES_SOCKET_NAME).
 */
#define GPUPM_DEFAULT_PAGES_SOCKET "/run/gpupm/pages/socket"
/** File name of the page socket in the daemon's pages directory. */
#define GPUPM_PAGES_SOCKET_NAME "socket"
/** Published and kept up to date. */
#define GPUPM_PAGE_STATE_ACTIVE 1
/** The context was destroyed: the totals are final. */
#define GPUPM_PAGE_STATE_DESTROYED 2
/**
 * The context was retired (its final totals persisted, its device
 * block released): the totals are final, the daemon has removed the
 * page and will not write it again. Further reads of that instance go
 * through `TENANT_IOC_READ_INSTANCE`.
 */
#define GPUPM_PAGE_STATE_RETIRED 3
/**
 * The daemon no longer keeps this page (the scope vanished with a
 * device reset, or who may see it changed across a daemon restart):
 * the values are the last it wrote; ask for the page again.
 */
#define GPUPM_PAGE_STATE_WITHDRAWN 4
/**
 * A confidential VM's (or its context's) page: `totals`, `commit_seq`
 * and `cycle` are 0 and gpupm_page_data.sealed holds the block slot as
 * the device published it: AES-256-GCM under the VM's session key,
 * which the tenant derives from its key and the envelope's session
 * and key epoch (docs/confidential.md).
 */
#define GPUPM_PAGE_FLAGS_SEALED 0x1
/** gpupm_page_data.rate holds a sample (plaintext scopes). */
#define GPUPM_PAGE_FLAGS_RATE 0x2
/**
 * gpupm_page_data.sealed_rate holds the VM's latest stream slot as the
 * device published it (confidential VM pages).
 */
#define GPUPM_PAGE_FLAGS_SEALED_RATE 0x4
/**
 * A context request for the id's newest live instance (`created_cycle`
 * must be 0; the reply names the instance). Without it, a context
 * request names the instance (`id`, `created_cycle`).
 */
#define GPUPM_PAGE_REQUEST_FLAGS_LATEST 0x1
/** Every defined bit. */
#define GPUPM_PAGE_REQUEST_FLAGS_ALL 0x1

/* Sampling units and sample buffers (uapi/src/sampling.rs, docs/sampling.md) */

/*
 * GPUPM_REG_SAMP_* except SAMP_BUF_* are offsets inside partition slot p's
 * sampling block: GPUPM_SAMP(p, reg). GPUPM_REG_SAMP_BUF_BRANCH, _PC and
 * _STRIDE are no registers: they place the two buffers' GPUPM_REG_BUF_*
 * sets inside the block, so buffer register reg of buffer kind is at
 * GPUPM_SAMP(p, GPUPM_SAMP_BUF(kind, reg)). (docs/abi.md section 3.1)
 */

/** Base of the sampling block array. */
#define GPUPM_SAMP_BASE 0x2000
/** Stride between sampling blocks. */
#define GPUPM_SAMP_STRIDE 0x100
#define GPUPM_SAMP(p, reg) (GPUPM_SAMP_BASE + (uint64_t)(p) * GPUPM_SAMP_STRIDE + (reg))
/**
 * RW: sampler enables, see GPUPM_SAMP_CTRL_*. Enabling a sampler whose
 * buffer has no capacity fails.
 */
#define GPUPM_REG_SAMP_CTRL 0x0
/** RO: status bits, see GPUPM_SAMP_STATUS_*. */
#define GPUPM_REG_SAMP_STATUS 0x4
/**
 * RW: N — the branch-record sampler captures its stack into a record
 * every N taken branches (`1..=BRANCH_PERIOD_MAX`; 0 fails).
 */
#define GPUPM_REG_SAMP_BRANCH_PERIOD 0x8
/**
 * RW: P — the cycle sampler's base period in context cycles
 * (`CYCLE_PERIOD_MIN..=CYCLE_PERIOD_MAX`).
 */
#define GPUPM_REG_SAMP_CYCLE_PERIOD 0xc
/**
 * RW: R_MAX — each cycle-sampler interval adds R uniform in `0..=R_MAX`
 * from the device's seeded generator (`0..=DITHER_MAX`; 0 = the fixed
 * period, for comparison). Default GPUPM_DEFAULT_DITHER.
 */
#define GPUPM_REG_SAMP_CYCLE_DITHER 0x10
/** RO: S, the interrupt skid in cycles (a device parameter). */
#define GPUPM_REG_SAMP_SKID 0x14
/** RO: A, the pipeline-refill cycles (a device parameter). */
#define GPUPM_REG_SAMP_REFILL 0x18
/** RO: entries in the branch stack (GPUPM_BRANCH_STACK_ENTRIES). */
#define GPUPM_REG_SAMP_STACK_DEPTH 0x1c
/** RO 64-bit: taken branches the branch-record sampler saw while enabled. */
#define GPUPM_REG_SAMP_BRANCHES 0x20 /* 64-bit */
/** RO 64-bit: cycle samples taken while enabled. */
#define GPUPM_REG_SAMP_CYCLE_SAMPLES 0x28 /* 64-bit */
/** RO: bytes in this partition's sample span (GPUPM_SAMPLE_SPAN). */
#define GPUPM_REG_SAMP_SPAN 0x30
/**
 * RO: fewest context cycles between two taken branches of any program a
 * context of this partition can run (the `min_branch_gap` argument of
 * branch_records_per_drain); 0 when none runs a program.
 */
#define GPUPM_REG_SAMP_MIN_BRANCH_GAP 0x34
/**
 * RW: the scope whose lost records the buffers' GPUPM_REG_BUF_LOST_SELECTED
 * registers count (GPUPM_LOST_SELECT_*: a context id, or a VM id with
 * GPUPM_LOST_SELECT_VM). An id out of range or undefined bits fail.
 * 0 after reset (context 0: no context, counts 0).
 */
#define GPUPM_REG_SAMP_LOST_SELECT 0x38
/** Offset of the branch-stack buffer's registers in the sampling block. */
#define GPUPM_REG_SAMP_BUF_BRANCH 0x40
/** Offset of the PC buffer's registers in the sampling block. */
#define GPUPM_REG_SAMP_BUF_PC 0x80
/** Stride between the buffers' register sets. */
#define GPUPM_REG_SAMP_BUF_STRIDE 0x40
/* Buffer register `reg` of buffer `kind` inside a sampling block:
   GPUPM_SAMP(p, GPUPM_SAMP_BUF(GPUPM_BUF_KIND_PC, GPUPM_REG_BUF_TAIL)). */
#define GPUPM_SAMP_BUF(kind, reg) (GPUPM_REG_SAMP_BUF_BRANCH + (uint64_t)(kind) * GPUPM_REG_SAMP_BUF_STRIDE + (reg))
/**
 * RW: byte offset of the buffer's first slot inside the partition's
 * sample span; a multiple of GPUPM_BUF_ALIGN. Writable only while the
 * buffer's sampler is disabled; a write empties the buffer.
 */
#define GPUPM_REG_BUF_BASE 0x0
/**
 * RW: capacity in records: 0 (no buffer) or a power of two, with the
 * buffer inside the span and not overlapping the other buffer. Writable
 * only while the buffer's sampler is disabled; a write empties the buffer
 * (head, tail, lost and sequence return to 0).
 */
#define GPUPM_REG_BUF_CAP 0x4
/** RO: next record index the device writes, modulo 2^32. */
#define GPUPM_REG_BUF_HEAD 0x8
/**
 * RW: next record index the host reads, modulo 2^32; writes must lie in
 * `[old tail, head]`.
 */
#define GPUPM_REG_BUF_TAIL 0xc
/**
 * RW: raise `SAMPLE_WATERMARK` when `head - tail` reaches this (1..=cap);
 * raised once per drain (re-armed by a tail write). A `BUF_CAP` write sets
 * it to half the capacity (at least 1).
 */
#define GPUPM_REG_BUF_WATERMARK 0x10
/** RO 64-bit: records lost because the buffer was full. */
#define GPUPM_REG_BUF_LOST 0x18 /* 64-bit */
/** RO 64-bit: memory-window offset of the buffer's first slot. */
#define GPUPM_REG_BUF_ADDR 0x20 /* 64-bit */
/**
 * RO 64-bit: records produced (stored or lost) since the last `BUF_CAP`
 * write; a record's `seq` is this count after it.
 */
#define GPUPM_REG_BUF_PRODUCED 0x28 /* 64-bit */
/**
 * RO 64-bit: records of the scope GPUPM_REG_SAMP_LOST_SELECT names (a context,
 * or every context of a VM) this buffer lost since the last `BUF_CAP`
 * write. Each lost record counts for exactly one context (the one that
 * was running), so over the contexts of the partition these sum to
 * GPUPM_REG_BUF_LOST. Select and read in one batch (batches are atomic).
 */
#define GPUPM_REG_BUF_LOST_SELECTED 0x30 /* 64-bit */
/** Branch-stack records (BranchStackRecord). */
#define GPUPM_BUF_KIND_BRANCH 0
/** PC records (PcRecord). */
#define GPUPM_BUF_KIND_PC 1
/** Number of kinds. */
#define GPUPM_BUF_KIND_COUNT 2
/** The branch-record sampler is enabled. */
#define GPUPM_SAMP_CTRL_BRANCH_ENABLE 0x1
/** The cycle sampler is enabled. */
#define GPUPM_SAMP_CTRL_CYCLE_ENABLE 0x2
/** All defined bits. */
#define GPUPM_SAMP_CTRL_ALL 0x3
/** The partition slot is configured (it has SMs and runs programs). */
#define GPUPM_SAMP_STATUS_CONFIGURED 0x100
/** The low bits name a VM, not a context. */
#define GPUPM_LOST_SELECT_VM 0x80000000U
/** The id bits. */
#define GPUPM_LOST_SELECT_ID_MASK 0xffff
/**
 * The clock ran at secondary (throttled) capability when the record
 * was taken (the record's clock capability).
 */
#define GPUPM_SAMPLE_FLAGS_SECONDARY_CLOCK 0x1
/** Largest N. */
#define GPUPM_BRANCH_PERIOD_MAX 1048576
/** Smallest P. */
#define GPUPM_CYCLE_PERIOD_MIN 256
/** Largest P. */
#define GPUPM_CYCLE_PERIOD_MAX 1073741824
/** R_MAX after reset: R uniform in 0..=255. */
#define GPUPM_DEFAULT_DITHER 255
/** N after reset. */
#define GPUPM_DEFAULT_BRANCH_PERIOD 64
/** P after reset. */
#define GPUPM_DEFAULT_CYCLE_PERIOD 4096
/**
 * S: cycles from the sampler's counter expiring to the interrupt taking
 * the sample.
 */
#define GPUPM_SKID_CYCLES 12
/** A: cycles the pipeline refills after the sample, not counted. */
#define GPUPM_REFILL_CYCLES 8
/** Entries in the branch stack. */
#define GPUPM_BRANCH_STACK_ENTRIES 32
/**
 * A confidential VM's context gets one branch stack every N × this many
 * of its context cycles plus a dither below that (not every N-th taken
 * branch), so that nothing the host reads depends on its branches;
 * `SAMP_MIN_BRANCH_GAP` of a slot with a confidential VM is at most this.
 */
#define GPUPM_CONFIDENTIAL_BRANCH_CYCLES 64
/** Largest R_MAX. */
#define GPUPM_SAMP_DITHER_MAX 4095 /* largest R_MAX */
/** Alignment of a buffer's base inside the span. */
#define GPUPM_BUF_ALIGN 0x1000
/**
 * Bytes of the memory window reserved per partition slot for sample
 * buffers.
 */
#define GPUPM_SAMPLE_SPAN 0x1000000
/** Window offset of the sample region: after the stream rings, page aligned. */
#define GPUPM_SAMPLE_REGION 0x4e5a000
/** Magic of a branch-stack record: "gBRS". */
#define GPUPM_BRANCH_RECORD_MAGIC 0x53524267
/** Magic of a PC record: "gPCS". */
#define GPUPM_PC_RECORD_MAGIC 0x53435067
#define GPUPM_SAMPLE_SPAN_OFFSET(p) (GPUPM_SAMPLE_REGION + (uint64_t)(p) * GPUPM_SAMPLE_SPAN)
/** Rows in one struct gpupm_block_ledger_query answer. */
#define GPUPM_BLOCK_LEDGER_ROWS 64
/** Bytes of a struct gpupm_block_ledger_query that a sealed answer encrypts: `rows`. */
#define GPUPM_BLOCK_LEDGER_SEALED_LEN 2048

/* Runtime-instrumentation control blocks and report groups (uapi/src/ri.rs, docs/ri.md) */

/*
 * GPUPM_REG_RI_* holds two kinds (docs/abi.md section 3.1): RI_COUNT ..
 * RI_MIGRATIONS are absolute registers; RI_PART_VERSION and RI_PART_MAX_RGS
 * are the first of a per-slot array (GPUPM_RI_PART_VERSION(p),
 * GPUPM_RI_PART_MAX_RGS(p)); RI_CTX .. RI_COLLECTED are offsets inside
 * control block i: GPUPM_RI(i, reg).
 */

/** RO: number of control blocks (GPUPM_RI_BLOCKS). */
#define GPUPM_REG_RI_COUNT 0x600
/**
 * RO: the largest RGS the device accepts (GPUPM_RI_RGS_MAX); a partition may
 * declare a smaller limit (ri_part_max_rgs).
 */
#define GPUPM_REG_RI_MAX_RGS 0x604
/**
 * RO: bytes of each control block's span of the memory window
 * (GPUPM_RI_SPAN).
 */
#define GPUPM_REG_RI_SPAN_BYTES 0x608
/** RW: the VM that the next GPUPM_REG_RI_MIGRATE write moves (staging). */
#define GPUPM_REG_RI_MIGRATE_VM 0x60c
/**
 * WO: migrate the VM staged in GPUPM_REG_RI_MIGRATE_VM to the partition slot
 * written here. Refused (EINVAL, nothing changes) when the VM does not
 * exist, the slot is not configured or is the VM's own, or the VM is
 * running or about to run on its partition (current or incoming of a
 * switch). On success every enabled control block bound to a context
 * of the VM is checked against the new partition and halts when the
 * partition's version differs from the one its session began on, or
 * its maximum RGS is below the session's RGS.
 */
#define GPUPM_REG_RI_MIGRATE 0x610
/** RO: migrations performed (register writes and scenario timeline). */
#define GPUPM_REG_RI_MIGRATIONS 0x614
/**
 * RO: per partition slot `p`, at `RI_PART_VERSION + 4p`: the partition's
 * capability version (scenario key `ri_version`, default 1).
 */
#define GPUPM_REG_RI_PART_VERSION 0x640 /* 16 words */
/**
 * RO: per partition slot `p`, at `RI_PART_MAX_RGS + 4p`: the largest RGS
 * a session may use on the partition (scenario key `ri_max_rgs`, default
 * GPUPM_RI_RGS_MAX).
 */
#define GPUPM_REG_RI_PART_MAX_RGS 0x680 /* 16 words */
#define GPUPM_RI_PART_VERSION(p) (GPUPM_REG_RI_PART_VERSION + 4 * (uint64_t)(p))
#define GPUPM_RI_PART_MAX_RGS(p) (GPUPM_REG_RI_PART_MAX_RGS + 4 * (uint64_t)(p))
/** Base of the control-block array. */
#define GPUPM_RI_BASE 0x5000
/** Stride between control blocks. */
#define GPUPM_RI_STRIDE 0x40
/** Number of control blocks. */
#define GPUPM_RI_BLOCKS 64
#define GPUPM_RI(i, reg) (GPUPM_RI_BASE + (uint64_t)(i) * GPUPM_RI_STRIDE + (reg))
/**
 * RW: the context the block watches (0 = none). Writable only while the
 * block is disabled; a context another block watches, a free context, or
 * a context of a confidential VM is refused.
 */
#define GPUPM_REG_RI_CTX 0x0
/**
 * RW: control bits, see GPUPM_RI_CTRL_*. Setting `ENABLE` checks the whole
 * control block (context bound, mode, RGS within the limit of the
 * context's partition, origin and limit) and starts a session: RCA =
 * ROA, the next group is a begin group, the countdown starts from RSIC
 * (or SF when RSIC is 0), the halt and stop conditions are cleared.
 * While enabled only `ENABLE` may change (clearing it ends the session;
 * the buffer and counts stay readable).
 */
#define GPUPM_REG_RI_CTRL 0x4
/** RO: status bits, see GPUPM_RI_STATUS_*. */
#define GPUPM_REG_RI_STATUS 0x8
/** RO: why the session halted, see GPUPM_RI_HALT_*. */
#define GPUPM_REG_RI_HALT_REASON 0xc
/**
 * RW: SF, the scaling factor: sample every SF units of the mode (cycles
 * or instructions). 0 loads 1; values outside
 * `SF_MIN..=SF_MAX` of the mode load the nearest bound when the block is
 * enabled. Writable only while disabled.
 */
#define GPUPM_REG_RI_SF 0x10
/**
 * RW: RSIC, the remaining sample-interval count. Reads the live
 * countdown; a write (only while disabled) sets the first interval of
 * the next session (0 = a full SF interval).
 */
#define GPUPM_REG_RI_RSIC 0x14
/**
 * RW: ROA, byte offset of the program buffer's first byte in the block's
 * span; a multiple of the group size 2^(RGS+5) (checked at enable).
 * Writable only while disabled.
 */
#define GPUPM_REG_RI_ROA 0x18
/**
 * RW: RLA, byte offset of the program buffer's last byte in the block's
 * span (< GPUPM_RI_SPAN); the buffer must hold at least one group
 * (checked at enable). Writable only while disabled.
 */
#define GPUPM_REG_RI_RLA 0x1c
/**
 * RO: RCA, byte offset in the span where the next group goes: ROA plus
 * a multiple of the group size. An enable sets it to ROA; a full buffer
 * in `WRAP` mode sets it back to ROA.
 */
#define GPUPM_REG_RI_RCA 0x20
/**
 * WO: RIEMIT — puts an emit record with this value into the collection
 * buffer (while enabled with `EMIT`, not halted or stopped; otherwise the
 * write is accepted and does nothing, as RIEMIT is a no-op then).
 */
#define GPUPM_REG_RI_EMIT 0x24
/** RO 64-bit: report groups stored since the session began (NRG). */
#define GPUPM_REG_RI_GROUPS 0x28 /* 64-bit */
/** RO 64-bit: sample points whose group was suppressed (Y/Z). */
#define GPUPM_REG_RI_SUPPRESSED 0x30 /* 64-bit */
/** RO: collection-buffer records overwritten before a group reported them. */
#define GPUPM_REG_RI_OVERWRITTEN 0x38
/** RO: entries in the collection buffer now (0..=GPUPM_RI_COLLECTION_ENTRIES). */
#define GPUPM_REG_RI_COLLECTED 0x3c
/** The session runs. */
#define GPUPM_RI_CTRL_ENABLE 0x1
/** Mode field mask. */
#define GPUPM_RI_CTRL_MODE_MASK 0xf0
/** RGS field mask. */
#define GPUPM_RI_CTRL_RGS_MASK 0x700
/**
 * E: RIEMIT (RI_EMIT) and marker blocks put emit records
 * into the collection buffer.
 */
#define GPUPM_RI_CTRL_EMIT 0x1000
/**
 * X: a context switched out mid-interval puts an abort record into
 * the collection buffer.
 */
#define GPUPM_RI_CTRL_ABORT 0x2000
/** Y: suppress groups whose sample point ran at primary clock capability. */
#define GPUPM_RI_CTRL_SUPPRESS_PRIMARY 0x10000
/**
 * Z: suppress groups whose sample point ran at secondary (throttled)
 * clock capability.
 */
#define GPUPM_RI_CTRL_SUPPRESS_SECONDARY 0x20000
/** U: raise `RI_BUFFER_FULL` and `RI_HALT` interrupts. */
#define GPUPM_RI_CTRL_INTR_ENABLE 0x40000
/** On a full buffer, wrap to ROA (a new begin group) instead of stopping. */
#define GPUPM_RI_CTRL_WRAP 0x80000
/** All defined bits and fields. */
#define GPUPM_RI_CTRL_ALL 0xf37f1
/** Mode field: bits 4..=7, values in ri_mode. */
#define GPUPM_RI_CTRL_MODE_SHIFT 4
/** RGS field: bits 8..=10 (a group is 2^(RGS+1) records). */
#define GPUPM_RI_CTRL_RGS_SHIFT 8
/** Sample every SF context cycles. */
#define GPUPM_RI_MODE_CYCLE 1
/** Sample every SF retired warp instructions. */
#define GPUPM_RI_MODE_INSTRUCTION 2
/** Sample at every entry into a marker block (the RINEXT analogue). */
#define GPUPM_RI_MODE_DIRECTED 3
/** A session is enabled. */
#define GPUPM_RI_STATUS_ENABLED 0x1
/** S: the buffer was full (stop mode): no more groups are stored. */
#define GPUPM_RI_STATUS_STOPPED 0x2
/**
 * H: the session halted (RI_HALT_REASON says why): no more
 * groups are stored, RIEMIT does nothing.
 */
#define GPUPM_RI_STATUS_HALTED 0x4
/** L: a buffer-full notification was raised (pending until the next enable). */
#define GPUPM_RI_STATUS_FULL_PENDING 0x8
/** G: a halt notification was raised (pending until the next enable). */
#define GPUPM_RI_STATUS_HALT_PENDING 0x10
/** Not halted. */
#define GPUPM_RI_HALT_NONE 0
/** The VM moved to a partition of another capability version. */
#define GPUPM_RI_HALT_VERSION 1
/** The VM moved to a partition whose maximum RGS is below the session's. */
#define GPUPM_RI_HALT_RGS_LIMIT 2
/** Largest RGS (groups of 256 records). */
#define GPUPM_RI_RGS_MAX 7
/** Entries of a control block's collection buffer (the newest are kept). */
#define GPUPM_RI_COLLECTION_ENTRIES 32
/** Smallest SF in cycle mode (a smaller one loads this). */
#define GPUPM_RI_SF_MIN_CYCLES 256
/** Smallest SF in instruction mode. */
#define GPUPM_RI_SF_MIN_INSTRUCTIONS 16
/** Largest SF in any mode. */
#define GPUPM_RI_SF_MAX 1073741824
/** Bytes of one record. */
#define GPUPM_RI_RECORD_SIZE 16
/** Bytes of each control block's span of the memory window. */
#define GPUPM_RI_SPAN 0x100000
/** Alignment of the RI region. */
#define GPUPM_RI_ALIGN 0x1000
/** Window offset of the program-buffer region: after the sample spans. */
#define GPUPM_RI_REGION 0x14e5a000
#define GPUPM_RI_GROUP_BYTES(rgs) (GPUPM_RI_RECORD_SIZE << ((rgs) + 1))
#define GPUPM_RI_SPAN_OFFSET(i) (GPUPM_RI_REGION + (uint64_t)(i) * GPUPM_RI_SPAN)
/** Padding: the collection buffer held too few records to fill the group. */
#define GPUPM_RI_RECORD_FILL 0x0
/** First record of a group stored at ROA (RiBeginRecord). */
#define GPUPM_RI_RECORD_BEGIN 0x2
/** First record of every other group (RiTimestampRecord). */
#define GPUPM_RI_RECORD_TIMESTAMP 0x3
/** Last record of every group: the sample (RiInstructionRecord). */
#define GPUPM_RI_RECORD_INSTRUCTION 0x4
/**
 * A value put into the collection buffer by RIEMIT or a marker block
 * (RiEmitRecord).
 */
#define GPUPM_RI_RECORD_EMIT 0x10
/** The context was switched out mid-interval (RiAbortRecord). */
#define GPUPM_RI_RECORD_ABORT 0x11
/**
 * T: the sample point ran at secondary (throttled) clock capability
 * (0 = primary).
 */
#define GPUPM_RI_GROUP_FLAGS_SECONDARY 0x1
/** S (begin record): the buffer was full and the session stopped. */
#define GPUPM_RI_GROUP_FLAGS_STOPPED 0x2
/** H (begin record): the session halted. */
#define GPUPM_RI_GROUP_FLAGS_HALTED 0x4
/** The sample point was a marker block (directed sampling). */
#define GPUPM_RI_SAMPLE_FLAGS_DIRECTED 0x1
/** The sample point ran at secondary clock capability. */
#define GPUPM_RI_SAMPLE_FLAGS_SECONDARY 0x2
/** A write of `RI_EMIT` (the daemon, on a tenant's RIEMIT). */
#define GPUPM_RI_EMIT_SOURCE_REGISTER 0
/** A marker block of the program. */
#define GPUPM_RI_EMIT_SOURCE_MARKER 1

/* Marked ranges and their record rings (uapi/src/ranges.rs, docs/ranges.md) */

/** Base of the range blocks (one per partition slot). */
#define GPUPM_RANGE_BASE 0x6000
/** Stride between partition slots' range blocks. */
#define GPUPM_RANGE_STRIDE 0x100
/** Stride between the register sets of two ranges of one partition. */
#define GPUPM_RANGE_REG_STRIDE 0x20
/** Base of the record-ring register sets (one per partition slot). */
#define GPUPM_RRING_BASE 0x700
/** Stride between partition slots' ring register sets. */
#define GPUPM_RRING_STRIDE 0x10
/** Range registers per partition slot. */
#define GPUPM_RANGES_PER_PARTITION 8
#define GPUPM_RANGE(p, i, reg) (GPUPM_RANGE_BASE + (uint64_t)(p) * GPUPM_RANGE_STRIDE + (uint64_t)(i) * GPUPM_RANGE_REG_STRIDE + (reg))
#define GPUPM_RRING(p, reg) (GPUPM_RRING_BASE + (uint64_t)(p) * GPUPM_RRING_STRIDE + (reg))
#define GPUPM_RANGE_CODE_ITEM(kernel, block) (((uint32_t)(kernel) << 16) | (uint32_t)(block))
/**
 * RW: what the range is and counts, see GPUPM_RANGE_CTRL_*. Writing a value
 * with GPUPM_RANGE_CTRL_ENABLE *arms* the range: it checks the whole
 * programming (`RANGE_START`, `RANGE_END`, `RANGE_THRESHOLD` and this
 * value) and zeroes the counts. While armed, the only accepted write is
 * 0 (disarm; the counts stay readable).
 */
#define GPUPM_REG_RANGE_CTRL 0x0
/**
 * RW: first item of the range, inclusive: `kernel << 16 | block` for a
 * code range, a data address for a data range. Writable only while the
 * range is disarmed.
 */
#define GPUPM_REG_RANGE_START 0x4
/**
 * RW: last item of the range, inclusive (same encoding as
 * GPUPM_REG_RANGE_START). Writable only while the range is disarmed.
 */
#define GPUPM_REG_RANGE_END 0x8
/**
 * RW: the threshold GPUPM_RANGE_CTRL_COUNT_IRQ or
 * GPUPM_RANGE_CTRL_LATENCY_IRQ compares against (1..=2^32 − 1 when one
 * is set). Writable only while the range is disarmed.
 */
#define GPUPM_REG_RANGE_THRESHOLD 0xc
/** RO 64-bit: entries into the range since it was armed. */
#define GPUPM_REG_RANGE_ENTRIES 0x10 /* 64-bit */
/** RO 64-bit: the chosen event counted inside the range since it was armed. */
#define GPUPM_REG_RANGE_COUNT 0x18 /* 64-bit */
/**
 * RW: ring capacity in records: 0 or a power of two up to
 * GPUPM_RRING_MAX_RECORDS. Writable only while no range of the partition
 * has a threshold armed; a write empties the ring (head, tail, lost and
 * sequence return to 0).
 */
#define GPUPM_REG_RRING_CAP 0x0
/** RO: next record index the device writes, modulo 2^32. */
#define GPUPM_REG_RRING_HEAD 0x4
/**
 * RW: next record index the host reads, modulo 2^32; writes must lie in
 * `[old tail, head]`.
 */
#define GPUPM_REG_RRING_TAIL 0x8
/**
 * RO: records lost to a full ring since the last GPUPM_REG_RRING_CAP write,
 * modulo 2^32 (a record's 64-bit `seq` counts lost records too, so gaps
 * in `seq` are exact).
 */
#define GPUPM_REG_RRING_LOST 0xc
/** The range is armed. */
#define GPUPM_RANGE_CTRL_ENABLE 0x1
/** A data-address range (clear: a code range). */
#define GPUPM_RANGE_CTRL_DATA 0x2
/** Shift of the event field (range_event). */
#define GPUPM_RANGE_CTRL_EVENT_SHIFT 0x4
/** Mask of the event field. */
#define GPUPM_RANGE_CTRL_EVENT_MASK 0x30
/**
 * Every time the count reaches a multiple of `RANGE_THRESHOLD`, write
 * a record and raise `RANGE_THRESHOLD`.
 */
#define GPUPM_RANGE_CTRL_COUNT_IRQ 0x100
/**
 * When one entry's residence reaches `RANGE_THRESHOLD` context cycles,
 * write a record and raise `RANGE_THRESHOLD` (once per entry).
 */
#define GPUPM_RANGE_CTRL_LATENCY_IRQ 0x200
/**
 * Shift of the program field: the program id (`CTX_PROGRAM`, 1 + the
 * index in the scenario's program table) the range applies to;
 * required for a code range, 0 = every program for a data range.
 */
#define GPUPM_RANGE_CTRL_PROGRAM_SHIFT 0x10
/** Mask of the program field. */
#define GPUPM_RANGE_CTRL_PROGRAM_MASK 0xffff0000U
/** All defined bits. */
#define GPUPM_RANGE_CTRL_ALL 0xffff0333U
/** Warp instructions retired (one SM). */
#define GPUPM_RANGE_EVENT_INSTRUCTIONS 0
/** Context cycles. */
#define GPUPM_RANGE_EVENT_CYCLES 1
/** Memory accesses (one per visit of a block that touches data). */
#define GPUPM_RANGE_EVENT_MEMORY 2
/** Number of events. */
#define GPUPM_RANGE_EVENT_COUNT 3
/** The count reached a multiple of the threshold. */
#define GPUPM_CROSSING_COUNT 1
/** One entry's residence reached the threshold. */
#define GPUPM_CROSSING_LATENCY 2
/** The clock ran at secondary (throttled) capability at the crossing. */
#define GPUPM_RANGE_FLAGS_SECONDARY_CLOCK 0x1
/**
 * Bytes of the memory window reserved per partition slot for its record
 * ring.
 */
#define GPUPM_RANGE_SPAN 0x100000
/**
 * Window offset of the range region: after the runtime-instrumentation
 * region, page aligned.
 */
#define GPUPM_RANGE_REGION 0x18e5a000
/** Magic of a range record: "gRNG". */
#define GPUPM_RANGE_RECORD_MAGIC 0x474e5267
/**
 * Most records a ring holds (the largest power of two whose slots fit
 * GPUPM_RANGE_SPAN).
 */
#define GPUPM_RRING_MAX_RECORDS 4096
/**
 * Entries in a record's call stack (at least the deepest a program can
 * call: 15 frames below the entry kernel).
 */
#define GPUPM_RANGE_STACK_DEPTH 16
/** Rows of a struct gpupm_range_ledger_query: one per range register. */
#define GPUPM_RANGE_LEDGER_ROWS 8
/** Bytes of a struct gpupm_range_ledger_query that a sealed answer encrypts: `rows`. */
#define GPUPM_RANGE_LEDGER_SEALED_LEN 256
/** Rows in one struct gpupm_call_ledger_query answer. */
#define GPUPM_CALL_LEDGER_ROWS 64
/** Bytes of a struct gpupm_call_ledger_query that a sealed answer encrypts: `rows`. */
#define GPUPM_CALL_LEDGER_SEALED_LEN 1024
/**
 * `arg` bit of a `RANGE_THRESHOLD` record: a latency crossing (clear: a
 * count crossing).
 */
#define GPUPM_RANGE_IRQ_LATENCY 0x100
/**
 * `arg` bit of a `RANGE_THRESHOLD` record: the ring was full and the
 * record was lost (counted in `RRING_LOST`).
 */
#define GPUPM_RANGE_IRQ_LOST 0x200
#define GPUPM_RANGE_SPAN_OFFSET(p) (GPUPM_RANGE_REGION + (uint64_t)(p) * GPUPM_RANGE_SPAN)

/* Confidential sessions: the key exchange (uapi/src/cc.rs, docs/confidential.md) */

/** Bytes of a nonce (each side draws its own from a random source). */
#define GPUPM_CC_NONCE_LEN 32
/** Bytes of an X25519 public key (a key share). */
#define GPUPM_CC_SHARE_LEN 32
/** Bytes of an Ed25519 public key. */
#define GPUPM_CC_PUBLIC_KEY_LEN 32
/** Bytes of an Ed25519 signature. */
#define GPUPM_CC_SIGNATURE_LEN 64
/** Bytes of an HMAC-SHA256 (the verify data of both sides). */
#define GPUPM_CC_VERIFY_LEN 32
/** Bytes of a device serial number. */
#define GPUPM_CC_SERIAL_LEN 16
/**
 * Bytes of the vendor key id (the first bytes of SHA-256 of the vendor
 * root's public key).
 */
#define GPUPM_CC_KEY_ID_LEN 8
/** Bytes of a struct gpupm_cc_cert the vendor signs (all before `signature`). */
#define GPUPM_CC_CERT_SIGNED_LEN 64
/** gpupm_cc_cert.version. */
#define GPUPM_CC_CERT_VERSION 1
/**
 * gpupm_cc_cert.algorithm: Ed25519 (RFC 8032) for both the device key
 * and the vendor's signature.
 */
#define GPUPM_CC_ALG_ED25519 1
/** gpupm_cc_cert.magic: "GPCC" in little-endian byte order. */
#define GPUPM_CC_CERT_MAGIC 0x43435047
/**
 * The VM has an established session that this one replaces:
 * replace_proof proves its current key.
 */
#define GPUPM_CC_FINISH_FLAGS_REPLACE 0x1
/** Signed by the vendor root: `CC_CERT_CONTEXT || cert bytes 0..64`. */
#define GPUPM_CC_CERT_CONTEXT "gpupm-cc-spdm-v1 vendor certificate" /* 35 bytes, no NUL */
/** Start of the transcript hash TH1. */
#define GPUPM_CC_TRANSCRIPT_LABEL "gpupm-cc-spdm-v1 key exchange" /* 29 bytes, no NUL */
/** Signed by the device: `CC_SIGNATURE_CONTEXT || TH1`. */
#define GPUPM_CC_SIGNATURE_CONTEXT "gpupm-cc-spdm-v1 device signature" /* 33 bytes, no NUL */
/** HKDF-Extract salt of the handshake secret. */
#define GPUPM_CC_EXTRACT_SALT "gpupm-cc-spdm-v1" /* 16 bytes, no NUL */
/** HKDF-Expand info prefix of the device's finished key (then TH2). */
#define GPUPM_CC_RSP_FINISHED_INFO "rsp finished" /* 12 bytes, no NUL */
/** HKDF-Expand info prefix of the tenant's finished key (then TH2). */
#define GPUPM_CC_REQ_FINISHED_INFO "req finished" /* 12 bytes, no NUL */
/** HKDF-Expand info prefix of the VM key (then TH3). */
#define GPUPM_CC_VM_KEY_INFO "vm key" /* 6 bytes, no NUL */
/** HMAC message prefix of gpupm_cc_finish.replace_proof (then TH3). */
#define GPUPM_CC_REPLACE_LABEL "gpupm-cc-spdm-v1 replace" /* 24 bytes, no NUL */
/**
 * The (emulated) vendor root's Ed25519 public key, which every tenant
 * tool ships with and checks a struct gpupm_cc_cert against. Its private half
 * stands for the vendor's signing service: in this emulation it is the
 * file `packaging/factory/vendor-root.key`, used only to provision a
 * device's identity (`gpupm-driver provision`; see `docs/confidential.md`,
 * "The emulation boundary").
 */
#define GPUPM_CC_VENDOR_ROOT_KEY { 0x95, 0x86, 0x78, 0xee, 0x4a, 0x81, 0x77, 0x2a, 0xb1, 0x23, 0x04, 0x5f, 0x07, 0x57, 0x13, 0x12, 0xfc, 0x44, 0x76, 0xde, 0xd7, 0x0e, 0x20, 0xb2, 0xdf, 0x63, 0x0b, 0xbf, 0xe1, 0xe5, 0x97, 0x07 }

/* ABI structs (bodies generated by cbindgen from the Rust source) */

/**
 * A counter block as the device keeps it (plaintext).
 *
 * Invariants: `counters[e]` is the cumulative count of event `e` committed
 * into this block; it only grows, by atomic adds from one RC at a time;
 * `commit_seq` counts the commits that touched the block.
 */
struct gpupm_block {
  /**
   * GPUPM_BLOCK_MAGIC once the slot is in use, 0 when free.
   */
  uint32_t magic;
  /**
   * One of GPUPM_BLOCK_KIND_*.
   */
  uint16_t kind;
  /**
   * Layout version, GPUPM_ABI_MAJOR.
   */
  uint16_t version;
  /**
   * VM id for VM blocks, context id for context blocks, 0 for system.
   */
  uint32_t id;
  /**
   * Owning VM (context blocks), the VM itself (VM blocks), 0 (system).
   */
  uint32_t vm;
  /**
   * Number of commits added into this block.
   */
  uint64_t commit_seq;
  /**
   * Device cycle of the last commit.
   */
  uint64_t last_commit_cycle;
  /**
   * Cumulative counts indexed by event id.
   */
  uint64_t counters[GPUPM_MAX_EVENTS];
};

/**
 * Envelope in front of every host-visible block or stream record.
 *
 * For a confidential VM the payload that follows is AES-256-GCM ciphertext
 * and the 16-byte tag follows the payload. The key is the VM's *session
 * key*: `HKDF-SHA256(ikm = K_vm, salt = session (8 bytes LE), info =
 * "gpupm-cc-v1" || vm (4 bytes LE) || key_epoch (4 bytes LE))`, 32 bytes,
 * where `K_vm` is the VM's key of that epoch (epoch 1 = the key provisioned
 * when the VM was created) and `session = session_hi << 32 | session_lo`
 * is the device's boot id, drawn afresh at every device start and reset.
 * The nonce is `vm (4 bytes LE) || counter (8 bytes LE)` with a counter
 * that only increases within a session, so (session, key_epoch, nonce)
 * never repeats and no (key, nonce) pair is ever reused. The whole 32-byte
 * envelope is the associated data (see `docs/confidential.md`).
 */
struct gpupm_envelope {
  /**
   * VM the payload belongs to (0 = system).
   */
  uint32_t vm;
  /**
   * Bits in GPUPM_ENVELOPE_FLAGS_*.
   */
  uint32_t flags;
  /**
   * Key epoch the payload was encrypted under (confidential only).
   */
  uint32_t key_epoch;
  /**
   * Low half of the session (boot) id (confidential only, else 0).
   */
  uint32_t session_lo;
  /**
   * AES-GCM nonce (confidential only, else 0).
   */
  uint8_t nonce[12];
  /**
   * High half of the session (boot) id (confidential only, else 0).
   */
  uint32_t session_hi;
};

/**
 * A stream-ring commit record: the deltas one RC commit added.
 *
 * Invariants: for one ring, `seq` increases by one per commit, including
 * commits whose record was lost to overflow, so `seq` gaps equal the lost
 * count; summing `deltas` over all records of a context (plus lost records)
 * gives its block.
 */
struct gpupm_stream_record {
  /**
   * GPUPM_RECORD_MAGIC.
   */
  uint32_t magic;
  /**
   * Partition slot of the RC.
   */
  uint16_t partition;
  /**
   * Bits in GPUPM_RECORD_FLAGS_*.
   */
  uint16_t flags;
  /**
   * VM the commit went to (0 = none / system).
   */
  uint32_t vm;
  /**
   * Context the commit went to (0 = none).
   */
  uint32_t ctx;
  /**
   * Commit sequence number of the RC.
   */
  uint64_t seq;
  /**
   * First cycle covered (the previous commit's cycle).
   */
  uint64_t start_cycle;
  /**
   * Cycle of this commit.
   */
  uint64_t end_cycle;
  /**
   * Reserved, 0.
   */
  uint64_t reserved;
  /**
   * Per-event deltas.
   */
  uint64_t deltas[GPUPM_MAX_EVENTS];
};

/**
 * A record a CCU sends to the reduction-channel buffer: eight consecutive
 * counter values of one bank, or (with `FLUSH_ACK`) no data at all.
 */
struct gpupm_ccu_record {
  /**
   * Sending CCU.
   */
  uint16_t ccu;
  /**
   * Bits in GPUPM_CCU_RECORD_FLAGS_*.
   */
  uint16_t flags;
  /**
   * Index of the first counter (within the CCU) this record carries.
   */
  uint16_t first_counter;
  /**
   * Number of valid values (0..=8).
   */
  uint16_t valid;
  /**
   * Counter values (28-bit).
   */
  uint32_t values[GPUPM_RECORD_VALUES];
};

/**
 * One interrupt occurrence, as `read()` on the device node returns it
 * (whole records only, at the handle's own cursor).
 *
 * `seq` increases by one per record raised by the device (masked sources
 * raise none), so a reader can detect records it missed: the device keeps
 * the last 16,384 for slow readers, and a reader further behind sees a
 * gap and must resynchronise from registers.
 */
struct gpupm_interrupt_record {
  /**
   * Device-wide sequence number.
   */
  uint64_t seq;
  /**
   * Device cycle at which it was raised.
   */
  uint64_t cycle;
  /**
   * Exactly one bit of GPUPM_INTR_*.
   */
  uint32_t source;
  /**
   * Partition slot concerned (0 = device/system).
   */
  uint32_t partition;
  /**
   * Source-specific argument: context id (switch, created, destroyed),
   * lost-record count (overflow), ring fill (watermark).
   */
  uint32_t arg;
  /**
   * Second argument: VM id where applicable.
   */
  uint32_t arg2;
};

/**
 * `GPUPM_IOC_IDENTITY`: device identity and topology summary.
 */
struct gpupm_identity {
  /**
   * Must be GPUPM_IOCTL_STRUCT_VERSION on input.
   */
  uint32_t version;
  /**
   * GPUPM_DEVICE_MAGIC.
   */
  uint32_t magic;
  /**
   * GPUPM_ABI_VERSION.
   */
  uint32_t abi_version;
  /**
   * Number of events in the catalogue.
   */
  uint32_t events;
  /**
   * Partition slots (excluding system slot 0).
   */
  uint32_t partitions;
  /**
   * CCUs.
   */
  uint32_t ccus;
  /**
   * SMs.
   */
  uint32_t sms;
  /**
   * Nominal clock in kHz.
   */
  uint32_t clock_khz;
  /**
   * 1 when the clock runs in step mode.
   */
  uint32_t step_clock;
  /**
   * Reserved, 0.
   */
  uint32_t reserved;
  /**
   * Device cycle at the time of the call.
   */
  uint64_t cycle;
};

/**
 * One operation of a struct gpupm_reg_batch.
 */
struct gpupm_reg_op {
  /**
   * BAR0 offset.
   */
  uint64_t offset;
  /**
   * Value written, or value read back.
   */
  uint64_t value;
  /**
   * GPUPM_REG_OP_READ or GPUPM_REG_OP_WRITE.
   */
  uint32_t op;
  /**
   * Access width in bytes: 4 or 8.
   */
  uint32_t width;
};

/**
 * `GPUPM_IOC_REG_BATCH`: a list of register ops executed in order with no
 * device time passing in between. If any op fails, no op takes effect,
 * `failed_index` names it and the call fails with EINVAL.
 */
struct gpupm_reg_batch {
  /**
   * GPUPM_IOCTL_STRUCT_VERSION.
   */
  uint32_t version;
  /**
   * Number of valid entries in `ops` (1..=MAX_BATCH_OPS).
   */
  uint32_t count;
  /**
   * Must be 0.
   */
  uint32_t flags;
  /**
   * On failure: index of the op that failed; else `count`.
   */
  uint32_t failed_index;
  /**
   * The ops.
   */
  struct gpupm_reg_op ops[GPUPM_MAX_BATCH_OPS];
};

/**
 * `GPUPM_IOC_ADVANCE`: advance the step clock (EINVAL on a real-time clock).
 */
struct gpupm_advance {
  /**
   * GPUPM_IOCTL_STRUCT_VERSION.
   */
  uint32_t version;
  /**
   * Must be 0.
   */
  uint32_t flags;
  /**
   * Cycles to advance (1..=2^40).
   */
  uint64_t cycles;
  /**
   * Output: device cycle after the call.
   */
  uint64_t now;
};

/**
 * `GPUPM_IOC_LEDGER` (debug only): exact counts of what was generated.
 *
 * The ledger is the emulator's test oracle, not part of the device: the
 * ioctl exists only when `gpupm-driver` runs with `--debug-ledger`
 * (otherwise it fails with ENOTTY like an unknown ioctl).
 *
 * For every event: `generated = (committed_equiv + masked) * scale + remainder`
 * where `scale` is 32 for multi-bit events and 1 otherwise, `masked` is what
 * CCU masks discarded, `remainder` is the multi-bit accumulator residue that
 * never reached a count, and `in_flight` is what sits in ULCs, CCUs and RCs
 * not yet committed. The system scope covers what the system block covers:
 * the device-level units and every VM that is not confidential.
 *
 * The answer for a confidential VM or one of its contexts is sealed like
 * its blocks: `flags` has GPUPM_LEDGER_FLAGS_SEALED, the bytes of
 * `generated`, `masked` and `remainder` (in that order, 1536 bytes) are
 * AES-256-GCM ciphertext under the VM's session key with `envelope` and
 * `tag`, exactly as in a block slot. Otherwise `envelope` and `tag` are 0.
 */
struct gpupm_ledger_query {
  /**
   * GPUPM_IOCTL_STRUCT_VERSION.
   */
  uint32_t version;
  /**
   * One of GPUPM_LEDGER_SCOPE_*.
   */
  uint32_t scope;
  /**
   * Context or VM id.
   */
  uint32_t id;
  /**
   * Must be 0 on input; bits of GPUPM_LEDGER_FLAGS_* on output.
   */
  uint32_t flags;
  /**
   * Signal units generated (multi-bit: summed 0..=32 values).
   */
  uint64_t generated[GPUPM_MAX_EVENTS];
  /**
   * Counts discarded by CCU masks.
   */
  uint64_t masked[GPUPM_MAX_EVENTS];
  /**
   * Multi-bit residue (signal units) that never reached a count.
   */
  uint64_t remainder[GPUPM_MAX_EVENTS];
  /**
   * Envelope of a sealed answer (all 0 otherwise); must be 0 on input.
   */
  struct gpupm_envelope envelope;
  /**
   * GCM tag of a sealed answer (all 0 otherwise); must be 0 on input.
   */
  uint8_t tag[16];
};

/**
 * `GPUPM_IOC_RESET`: reset the device (same as writing `RESET`).
 */
struct gpupm_reset {
  /**
   * GPUPM_IOCTL_STRUCT_VERSION.
   */
  uint32_t version;
  /**
   * Must be GPUPM_RESET_MAGIC.
   */
  uint32_t magic;
};

/**
 * `GPUPM_IOC_REG_READ` and `GPUPM_IOC_REG_WRITE`: one register access,
 * with the rules of a `pread`/`pwrite` on `card0`: `width` is 4 or 8,
 * `offset` is aligned to it and the access lies inside `BAR0_SIZE`; a
 * 64-bit register is read atomically with one 8-byte access. A read
 * fills `value` (a 4-byte read zero-extends); a 4-byte write's `value`
 * must fit in 32 bits.
 *
 * One struct of 32 bytes rather than a one-op `GPUPM_IOC_REG_BATCH`
 * (1,552 bytes, copied in and out of the kernel on every call): register
 * reads are the node's most frequent request.
 */
struct gpupm_reg_access {
  /**
   * GPUPM_IOCTL_STRUCT_VERSION.
   */
  uint32_t version;
  /**
   * Access width in bytes: 4 or 8.
   */
  uint32_t width;
  /**
   * BAR0 offset.
   */
  uint64_t offset;
  /**
   * Value read back, or value to write.
   */
  uint64_t value;
  /**
   * Must be 0.
   */
  uint32_t flags;
  /**
   * Reserved, 0.
   */
  uint32_t reserved;
};

/**
 * The head of a `GPUPM_IOC_WINDOW_READ(len)` argument (window_read_cmd):
 * `len` bytes of the memory window at `offset` (relative to the window's
 * start, i.e. a `card0` file offset minus `MEM_WINDOW_OFFSET`) come back
 * in the `len` bytes that follow this head in the argument. The whole
 * range must lie inside the window, or the call fails with EINVAL.
 *
 * The request number carries `len` in its size field, as evdev's
 * `EVIOCGNAME(len)` does, so that a restricted ioctl copies exactly the
 * head and the bytes asked for: a 592-byte block slot costs 608 bytes
 * each way, and a ring drain reads up to GPUPM_WINDOW_READ_MAX bytes per
 * call.
 */
struct gpupm_window_read {
  /**
   * GPUPM_IOCTL_STRUCT_VERSION.
   */
  uint32_t version;
  /**
   * Must be 0.
   */
  uint32_t flags;
  /**
   * Window offset of the first byte.
   */
  uint64_t offset;
};

/**
 * A block slot in the memory window: envelope, gpupm_block bytes (ciphertext when
 * encrypted), GCM tag (0 when not encrypted).
 */
struct gpupm_block_slot {
  struct gpupm_envelope envelope;
  uint8_t payload[544]; /* sizeof(struct gpupm_block) */
  uint8_t tag[16];
};
GPUPM_STATIC_ASSERT(sizeof(((struct gpupm_block_slot *)0)->payload) == sizeof(struct gpupm_block));
/**
 * The argument of `GPUPM_IOC_WAIT_COMMIT`.
 *
 * The node answers as soon as the device's periodic trigger count
 * (`TRIG_COUNT_PERIODIC`; the device commits every partition's counts at
 * each periodic trigger) differs from `after` — at once if it already
 * does — or when `timeout_us` has passed (within one device-clock tick:
 * 250 µs on a real-time clock, 20 ms on a step clock). The reply carries
 * the count (`seq`), the device cycle, and the `count` block slots named
 * in `slots` as the memory window holds them at that moment (ciphertext
 * for a confidential VM's, as a window read returns them). A timeout is
 * not an error: the reply then has `seq == after`.
 *
 * Errors (nothing changes, nothing is parked): EINVAL for a wrong
 * `version`, non-zero `flags` or `reserved`, `count` outside
 * `1..=WAIT_COMMIT_MAX_BLOCKS`, `timeout_us` outside
 * `1..=WAIT_COMMIT_MAX_TIMEOUT_US`, a slot index beyond the block slots;
 * the node's usual EACCES for a caller it does not serve; EINTR when the
 * waiter is killed or interrupted.
 */
struct gpupm_wait_commit {
  /**
   * GPUPM_IOCTL_STRUCT_VERSION.
   */
  uint32_t version;
  /**
   * Must be 0.
   */
  uint32_t flags;
  /**
   * Longest wait in microseconds (1..=GPUPM_WAIT_COMMIT_MAX_TIMEOUT_US).
   */
  uint32_t timeout_us;
  /**
   * Valid entries of `slots` (1..=GPUPM_WAIT_COMMIT_MAX_BLOCKS).
   */
  uint32_t count;
  /**
   * In: the last `seq` the caller saw (0 at first).
   */
  uint64_t after;
  /**
   * Out: `TRIG_COUNT_PERIODIC` when answered.
   */
  uint64_t seq;
  /**
   * Out: the device cycle when answered.
   */
  uint64_t cycle;
  /**
   * Reserved, 0.
   */
  uint64_t reserved;
  /**
   * In: block slot indices (`layout::block_slot_offset`), below
   * `CTX_BLOCK_SLOT_BASE + CTX_BLOCK_SLOTS`.
   */
  uint32_t slots[GPUPM_WAIT_COMMIT_MAX_BLOCKS];
  /**
   * Out: the slots' contents, in the order of `slots`.
   */
  struct gpupm_block_slot blocks[GPUPM_WAIT_COMMIT_MAX_BLOCKS];
};

/**
 * The first GPUPM_MIRROR_HEADER_SIZE bytes of the mirror file.
 */
struct gpupm_mirror_header {
  /**
   * GPUPM_MIRROR_MAGIC.
   */
  uint32_t magic;
  /**
   * GPUPM_MIRROR_VERSION.
   */
  uint32_t version;
  /**
   * Block slots that follow (`CTX_BLOCK_SLOT_BASE + CTX_BLOCK_SLOTS`).
   */
  uint32_t slot_count;
  /**
   * Bytes per slot (`sizeof(struct gpupm_block_slot)`).
   */
  uint32_t slot_size;
  /**
   * Changes when the mirror is (re)created or the device is reset.
   */
  uint64_t generation;
  /**
   * Sequence lock: odd while the device writes.
   */
  uint64_t seq;
  /**
   * `TRIG_COUNT_PERIODIC` of the last commit copied.
   */
  uint64_t commit_seq;
  /**
   * The device cycle when it was copied.
   */
  uint64_t cycle;
  /**
   * Incremented after every copied commit; the futex word.
   */
  uint32_t doorbell;
  /**
   * Reserved, 0 (the readers' `waiters` word is in the waiter file).
   */
  uint32_t reserved0;
  /**
   * ABI 1.10: file offset of the ring area (struct gpupm_mirror_rings); 0 when
   * the mirror has none (a 1.9 driver's, where this word was reserved).
   */
  uint64_t rings;
};

/**
 * The argument of `GPUPM_IOC_MIRROR_INFO`: the caller sets `version` (and
 * zeroes the rest); the node fills the other fields. ENODEV when the
 * driver keeps no mirror; EINVAL for a wrong `version` or non-zero
 * `flags`.
 */
struct gpupm_mirror_info {
  /**
   * GPUPM_IOCTL_STRUCT_VERSION.
   */
  uint32_t version;
  /**
   * Must be 0.
   */
  uint32_t flags;
  /**
   * Out: GPUPM_MIRROR_VERSION.
   */
  uint32_t mirror_version;
  /**
   * Out: block slots in the mirror.
   */
  uint32_t slot_count;
  /**
   * Out: bytes of the mirror file.
   */
  uint64_t size;
  /**
   * Out: gpupm_mirror_header.generation now.
   */
  uint64_t generation;
  /**
   * Out: the mirror file's absolute path, NUL-terminated.
   */
  uint8_t path[GPUPM_MIRROR_PATH_MAX];
  /**
   * Out: the waiter file's absolute path, NUL-terminated.
   */
  uint8_t waiters_path[GPUPM_MIRROR_PATH_MAX];
};

/**
 * The head of the ring area (ABI 1.10), at gpupm_mirror_header.rings.
 */
struct gpupm_mirror_rings {
  /**
   * Descriptors that follow: one per partition slot
   * (`MAX_PARTITION_SLOTS`).
   */
  uint32_t ring_count;
  /**
   * Bytes per descriptor (GPUPM_MIRROR_RING_SIZE).
   */
  uint32_t ring_size;
  /**
   * Bytes per ring slot (`sizeof(struct gpupm_stream_slot)`).
   */
  uint32_t slot_size;
  /**
   * Reserved, 0.
   */
  uint32_t reserved0;
  /**
   * Bytes from gpupm_mirror_header.rings to the end of the last ring's
   * slots.
   */
  uint64_t area_size;
  /**
   * Reserved, 0.
   */
  uint64_t reserved;
};

/**
 * One ring's descriptor in the ring area.
 */
struct gpupm_mirror_ring {
  /**
   * Published head: the ring index after the last record copied,
   * modulo 2^32 (32-bit atomic, stored with release ordering after the
   * slots it covers). Restarts at 0 with a device reset.
   */
  uint32_t head;
  /**
   * Capacity in records (`PART_STREAM_CAP`); 0: the ring is not
   * mirrored.
   */
  uint32_t cap;
  /**
   * `PART_STREAM_BASE`: the window offset of the ring's first slot.
   */
  uint64_t window_base;
  /**
   * File offset of the ring's first slot (ring index 0).
   */
  uint64_t slots;
  /**
   * Reserved, 0.
   */
  uint64_t reserved;
};

/**
 * A stream-ring slot in the memory window: envelope, gpupm_stream_record bytes (ciphertext when
 * encrypted), GCM tag (0 when not encrypted).
 */
struct gpupm_stream_slot {
  struct gpupm_envelope envelope;
  uint8_t payload[560]; /* sizeof(struct gpupm_stream_record) */
  uint8_t tag[16];
};
GPUPM_STATIC_ASSERT(sizeof(((struct gpupm_stream_slot *)0)->payload) == sizeof(struct gpupm_stream_record));

/**
 * `TENANT_IOC_WHOAMI`: what the caller may see.
 */
struct gpupm_tenant_whoami {
  /**
   * GPUPM_TENANT_STRUCT_VERSION.
   */
  uint32_t version;
  /**
   * Output: 1 for the admin (sees everything, incl. the system scope).
   */
  uint32_t admin;
  /**
   * Output: caller uid as the kernel reported it.
   */
  uint32_t uid;
  /**
   * Output: number of valid entries in `vms`.
   */
  uint32_t n_vms;
  /**
   * Output: the caller's VMs that exist on the device, ascending (every
   * VM for the admin).
   */
  uint32_t vms[GPUPM_TENANT_MAX_CALLER_VMS];
};

/**
 * One context in a struct gpupm_tenant_list_contexts answer.
 */
struct gpupm_tenant_ctx_entry {
  /**
   * Context id.
   */
  uint32_t ctx;
  /**
   * One of ctx_state.
   */
  uint32_t state;
  /**
   * Device cycle of creation.
   */
  uint64_t created_cycle;
};

/**
 * `TENANT_IOC_LIST_CONTEXTS`: contexts of a VM, paged.
 */
struct gpupm_tenant_list_contexts {
  /**
   * GPUPM_TENANT_STRUCT_VERSION.
   */
  uint32_t version;
  /**
   * VM id.
   */
  uint32_t vm;
  /**
   * Index of the first context to return.
   */
  uint32_t offset;
  /**
   * Output: entries filled.
   */
  uint32_t count;
  /**
   * Output: contexts the VM has in all.
   */
  uint32_t total;
  /**
   * Reserved, 0.
   */
  uint32_t reserved;
  /**
   * Output.
   */
  struct gpupm_tenant_ctx_entry ctxs[GPUPM_TENANT_LIST_PAGE];
};

/**
 * `TENANT_IOC_READ_COUNTERS`: cumulative totals of a scope.
 */
struct gpupm_tenant_read_counters {
  /**
   * GPUPM_TENANT_STRUCT_VERSION.
   */
  uint32_t version;
  /**
   * One of scope.
   */
  uint32_t scope;
  /**
   * Context or VM id (0 for the system scope).
   */
  uint32_t id;
  /**
   * Number of valid ids in `events`; 0 = all events.
   */
  uint32_t n_events;
  /**
   * Event ids to read; `values[i]` answers `events[i]` (or event `i`
   * when `n_events` is 0).
   */
  uint16_t events[GPUPM_MAX_EVENTS];
  /**
   * Output: bits in GPUPM_TENANT_COUNTER_FLAGS_*.
   */
  uint32_t flags;
  /**
   * Reserved, 0.
   */
  uint32_t reserved;
  /**
   * Output: commits folded into the totals.
   */
  uint64_t commit_seq;
  /**
   * Output: device cycle of the last commit.
   */
  uint64_t cycle;
  /**
   * Output: totals.
   */
  uint64_t values[GPUPM_MAX_EVENTS];
  /**
   * Output: the sealed block slot (with `SEALED`).
   */
  struct gpupm_block_slot sealed;
};

/**
 * One interval of a struct gpupm_tenant_read_rates answer.
 */
struct gpupm_tenant_rate_sample {
  /**
   * First cycle of the interval.
   */
  uint64_t start_cycle;
  /**
   * Last cycle of the interval (exclusive).
   */
  uint64_t end_cycle;
  /**
   * `layout::record_flags` of the commit.
   */
  uint32_t flags;
  /**
   * Context the interval was counted for.
   */
  uint32_t ctx;
  /**
   * Per-event deltas over the interval.
   */
  uint64_t deltas[GPUPM_MAX_EVENTS];
};

/**
 * `TENANT_IOC_READ_RATES`: the most recent per-interval deltas of a scope
 * (oldest first). Confidential scopes answer `count` 0 with `SEALED` set in
 * `flags`; their deltas are available sealed through a stream session.
 */
struct gpupm_tenant_read_rates {
  /**
   * GPUPM_TENANT_STRUCT_VERSION.
   */
  uint32_t version;
  /**
   * One of scope (not SYSTEM).
   */
  uint32_t scope;
  /**
   * Context or VM id.
   */
  uint32_t id;
  /**
   * Most samples wanted (1..=RATE_SAMPLES).
   */
  uint32_t max;
  /**
   * Output: samples filled.
   */
  uint32_t count;
  /**
   * Output: bits in GPUPM_TENANT_COUNTER_FLAGS_*.
   */
  uint32_t flags;
  /**
   * Output: nominal device clock in kHz, to turn cycles into seconds.
   */
  uint32_t clock_khz;
  /**
   * Reserved, 0.
   */
  uint32_t reserved;
  /**
   * Output.
   */
  struct gpupm_tenant_rate_sample samples[GPUPM_TENANT_RATE_SAMPLES];
};

/**
 * `TENANT_IOC_OPEN_STREAM`: turn this file handle into a stream session
 * of a scope's delta records (replaces any previous session on the handle).
 */
struct gpupm_tenant_open_stream {
  /**
   * GPUPM_TENANT_STRUCT_VERSION.
   */
  uint32_t version;
  /**
   * One of scope (not SYSTEM).
   */
  uint32_t scope;
  /**
   * Context or VM id.
   */
  uint32_t id;
  /**
   * Must be 0.
   */
  uint32_t flags;
};

/**
 * A delta record as `read()` returns it on a stream session.
 *
 * `slot` is the stream slot as the device published it: plaintext
 * `StreamRecord` in `slot.payload` for ordinary VMs, ciphertext for
 * confidential VMs (decrypt with the VM's key). `lost_before` counts
 * records of this session the daemon could not deliver (device ring
 * overflow, or the session's queue overflowing) since the previous record.
 */
struct gpupm_tenant_delta {
  /**
   * Session sequence number (1, 2, …).
   */
  uint64_t seq;
  /**
   * Records lost since the previous one.
   */
  uint64_t lost_before;
  /**
   * The published stream slot.
   */
  struct gpupm_stream_slot slot;
};

/**
 * `TENANT_IOC_EVENT_INFO`: one catalogue entry (iterate `id` from 0 until EINVAL).
 */
struct gpupm_tenant_event_info {
  /**
   * GPUPM_TENANT_STRUCT_VERSION.
   */
  uint32_t version;
  /**
   * Event id to describe.
   */
  uint32_t id;
  /**
   * Output: `events::UnitType` as u8.
   */
  uint8_t unit_type;
  /**
   * Output: 1 for multi-bit events.
   */
  uint8_t multibit;
  /**
   * Output: `events::scope_code` (0 partition, 1 context-filtered
   * shared, 2 device-level).
   */
  uint8_t scope;
  /**
   * Reserved, 0.
   */
  uint8_t reserved;
  /**
   * Reserved, 0.
   */
  uint32_t reserved2;
  /**
   * Output: NUL-padded name.
   */
  uint8_t name[32];
  /**
   * Output: NUL-padded unit of one count.
   */
  uint8_t measure[16];
  /**
   * Output: NUL-padded description.
   */
  uint8_t description[96];
};

/**
 * `TENANT_IOC_READ_INSTANCE`: cumulative totals of one context instance.
 *
 * Input: `version`, `scope` = CONTEXT, `id`, `flags`,
 * `created_cycle` (unless GPUPM_TENANT_INSTANCE_FLAGS_LATEST), `n_events`,
 * `events`; `reserved` and `reserved2` must be 0. The output fields are
 * overwritten, so an answer can be sent again as the next request.
 * Values as in struct gpupm_tenant_read_counters; a retired instance answers the final
 * totals the daemon persisted before the device released its block.
 */
struct gpupm_tenant_read_instance {
  /**
   * GPUPM_TENANT_STRUCT_VERSION.
   */
  uint32_t version;
  /**
   * CONTEXT (the only scope with instances).
   */
  uint32_t scope;
  /**
   * Context id.
   */
  uint32_t id;
  /**
   * Bits in GPUPM_TENANT_INSTANCE_FLAGS_*.
   */
  uint32_t flags;
  /**
   * Created cycle of the instance (gpupm_tenant_ctx_entry.created_cycle).
   */
  uint64_t created_cycle;
  /**
   * Number of valid ids in `events`; 0 = all events.
   */
  uint32_t n_events;
  /**
   * Reserved, 0.
   */
  uint32_t reserved;
  /**
   * Event ids to read; `values[i]` answers `events[i]` (or event `i`
   * when `n_events` is 0).
   */
  uint16_t events[GPUPM_MAX_EVENTS];
  /**
   * Output: one of ctx_state.
   */
  uint32_t state;
  /**
   * Output: bits in GPUPM_TENANT_COUNTER_FLAGS_*.
   */
  uint32_t out_flags;
  /**
   * Output: the VM the instance belongs to.
   */
  uint32_t vm;
  /**
   * Reserved, 0.
   */
  uint32_t reserved2;
  /**
   * Output: commits folded into the totals.
   */
  uint64_t commit_seq;
  /**
   * Output: device cycle of the last commit.
   */
  uint64_t cycle;
  /**
   * Output: totals.
   */
  uint64_t values[GPUPM_MAX_EVENTS];
  /**
   * Output: the sealed block slot (with `SEALED` in `out_flags`).
   */
  struct gpupm_block_slot sealed;
};

/**
 * `TENANT_IOC_READ_INSTANCE_RATES`: the most recent per-interval deltas
 * of one context instance (oldest first), as struct gpupm_tenant_read_rates answers them
 * for a scope. The daemon keeps a bounded history per VM and per context
 * id, so an old instance may answer fewer samples, or none.
 */
struct gpupm_tenant_read_instance_rates {
  /**
   * GPUPM_TENANT_STRUCT_VERSION.
   */
  uint32_t version;
  /**
   * CONTEXT.
   */
  uint32_t scope;
  /**
   * Context id.
   */
  uint32_t id;
  /**
   * Bits in GPUPM_TENANT_INSTANCE_FLAGS_*.
   */
  uint32_t flags;
  /**
   * Created cycle of the instance (output with GPUPM_TENANT_INSTANCE_FLAGS_LATEST).
   */
  uint64_t created_cycle;
  /**
   * Most samples wanted (1..=RATE_SAMPLES).
   */
  uint32_t max;
  /**
   * Reserved, 0.
   */
  uint32_t reserved;
  /**
   * Output: samples filled.
   */
  uint32_t count;
  /**
   * Output: bits in GPUPM_TENANT_COUNTER_FLAGS_*.
   */
  uint32_t out_flags;
  /**
   * Output: nominal device clock in kHz.
   */
  uint32_t clock_khz;
  /**
   * Reserved, 0.
   */
  uint32_t reserved2;
  /**
   * Output.
   */
  struct gpupm_tenant_rate_sample samples[GPUPM_TENANT_RATE_SAMPLES];
};

/**
 * `TENANT_IOC_OPEN_SAMPLING`: make this handle a sampling session.
 *
 * Input: `version`, `scope` (CONTEXT or
 * VM), `id`, `kinds` (non-empty subset of
 * GPUPM_TENANT_SAMPLE_KIND_ALL), `period` (P, with GPUPM_TENANT_SAMPLE_KIND_CYCLE:
 * `MIN_SAMPLE_PERIOD..=MAX_SAMPLE_PERIOD`, else 0), `dither` (R_MAX,
 * `0..=MAX_SAMPLE_DITHER`, 0 = fixed period, 255 = the sampler's reset
 * value; 0 without CYCLE), `branch_every` (N, with
 * GPUPM_TENANT_SAMPLE_KIND_BRANCH_STACK: `1..=MAX_BRANCH_EVERY`, else 0),
 * `queue_records` (0 = default, else `1..=MAX_SESSION_RECORDS`); `flags`
 * and the reserved fields 0. Output: the rest.
 */
struct gpupm_tenant_open_sampling {
  /**
   * TENANT_STRUCT_VERSION.
   */
  uint32_t version;
  /**
   * CONTEXT or VM.
   */
  uint32_t scope;
  /**
   * Context or VM id.
   */
  uint32_t id;
  /**
   * Bits of GPUPM_TENANT_SAMPLE_KIND_* (u32 on the wire).
   */
  uint32_t kinds;
  /**
   * P: cycles between cycle samples before dither.
   */
  uint32_t period;
  /**
   * R_MAX: the dither is uniform in 0..=R_MAX.
   */
  uint32_t dither;
  /**
   * N: taken branches per branch-stack capture.
   */
  uint32_t branch_every;
  /**
   * Records the session queues before it drops (and counts) new ones;
   * output (ABI 1.11): the records granted, at most the ones asked
   * for (clamped to the caller's queue budget).
   */
  uint32_t queue_records;
  /**
   * Must be 0.
   */
  uint32_t flags;
  /**
   * Reserved, 0.
   */
  uint32_t reserved;
  /**
   * Output: session id, counted per uid (1, 2, …; ABI 1.11: before,
   * unique daemon-wide).
   */
  uint64_t session;
  /**
   * Output: the period this session receives: its own `period` (ABI
   * 1.11; before, what the device ran for the partition's sessions),
   * for a tenant raised to the daemon's `tenant_min_sample_period`.
   */
  uint32_t device_period;
  /**
   * Output: the dither this session receives: its own `dither`.
   */
  uint32_t device_dither;
  /**
   * Output: the N this session receives: its own `branch_every`, for a
   * tenant raised to the daemon's `tenant_min_branch_every`.
   */
  uint32_t device_branch_every;
  /**
   * Output: nominal device clock in kHz.
   */
  uint32_t clock_khz;
  /**
   * Output: partition slot the session samples.
   */
  uint32_t partition;
  /**
   * Output: 1 when the scope belongs to a confidential VM (records
   * arrive GPUPM_TENANT_SAMPLE_FLAGS_SEALED).
   */
  uint32_t confidential;
  /**
   * Output: for a context session, the program the context runs, as
   * `regs::CTX_PROGRAM` reads (0 none, else 1 + its index in the
   * scenario's program table); 0 for a VM session.
   */
  uint32_t program;
  /**
   * Reserved, output 0.
   */
  uint32_t reserved2;
};

/**
 * Header of every record `read()` returns on a sampling session; the
 * device's record bytes follow (`size` − 24 of them).
 */
struct gpupm_tenant_sample_header {
  /**
   * One GPUPM_TENANT_SAMPLE_KIND_* bit.
   */
  uint16_t kind;
  /**
   * Bits of sample_flags.
   */
  uint16_t flags;
  /**
   * Bytes of the whole record, header included (a multiple of 8).
   */
  uint32_t size;
  /**
   * Session sequence number (1, 2, …) over all kinds.
   */
  uint64_t seq;
  /**
   * Records of this kind the session did not receive since its
   * previous record of this kind: records of the session's own scope
   * (its context, or its VM's contexts) the device lost to a full
   * buffer (ABI 1.6: the device counts losses per context,
   * `SAMP_LOST_SELECT`), and records the session's queue dropped.
   */
  uint64_t lost_before;
};

/**
 * `TENANT_IOC_KEY_STATE` (ABI 1.5): a VM's current key epoch and device
 * session, as the VM entry's `VM_KEY_EPOCH` and `VM_KEY_SESSION` read —
 * what a rekey blob is sealed for. Not secret.
 *
 * Input: `version`, `vm`; `flags` and `reserved` must be 0. A VM that is
 * not confidential answers `flags` 0, `key_epoch` 0 and `session` 0.
 */
struct gpupm_tenant_key_state {
  /**
   * GPUPM_TENANT_STRUCT_VERSION.
   */
  uint32_t version;
  /**
   * VM id.
   */
  uint32_t vm;
  /**
   * Output: bits in GPUPM_TENANT_KEY_FLAGS_* (0 on input).
   */
  uint32_t flags;
  /**
   * Output: key epoch (1 = the session's first key, +1 per rekey).
   */
  uint32_t key_epoch;
  /**
   * Output: the VM's current session id (0: no session).
   */
  uint64_t session;
  /**
   * Reserved, 0.
   */
  uint64_t reserved;
};

/**
 * `TENANT_IOC_REKEY` (ABI 1.5): replace a confidential VM's key with one
 * sealed under its current session key (`docs/confidential.md`, "Rekeying
 * with proof of the current key").
 *
 * The three arrays are the 14 words of the device's staging registers in
 * register order — `REKEY_NONCE`, `REKEY_KEY`, `REKEY_TAG`, each word the
 * little-endian bytes `4i..4i+4` of the field. `flags` and `reserved` must
 * be 0. Nothing is answered: on success the VM's key epoch has moved on.
 */
struct gpupm_tenant_rekey {
  /**
   * GPUPM_TENANT_STRUCT_VERSION.
   */
  uint32_t version;
  /**
   * VM id.
   */
  uint32_t vm;
  /**
   * Must be 0.
   */
  uint32_t flags;
  /**
   * Reserved, 0.
   */
  uint32_t reserved;
  /**
   * The tenant's random nonce bytes (`REKEY_NONCE`).
   */
  uint32_t nonce[GPUPM_REKEY_NONCE_WORDS];
  /**
   * The new key, encrypted (`REKEY_KEY`).
   */
  uint32_t sealed_key[GPUPM_REKEY_KEY_WORDS];
  /**
   * The AES-GCM tag (`REKEY_TAG`).
   */
  uint32_t tag[GPUPM_REKEY_TAG_WORDS];
};

/**
 * `TENANT_IOC_OPEN_RI`: make this handle an RI session of context `ctx`.
 *
 * Input: `version`, `ctx`, `mode` (one of GPUPM_TENANT_RI_MODE_*), `sf`
 * (`0..=RI_SF_MAX`; the device loads 0 as 1 and raises one below the
 * mode's minimum to it; must be 0 in directed mode), `rsic` (the first
 * interval, `0..=RI_SF_MAX`, 0 = a full SF), `rgs` (`0..=RI_RGS_MAX`,
 * not above the partition's), `controls` (GPUPM_TENANT_RI_CONTROLS_*),
 * `buffer_groups` (0 = the block's whole span, `max_buffer_groups(rgs)`:
 * the span is the block's alone, and a larger buffer absorbs longer
 * bursts between drains; else
 * `1..=max_buffer_groups(rgs)`), `queue_groups` (0 =
 * GPUPM_TENANT_DEFAULT_RI_QUEUE_GROUPS, else `1..=MAX_RI_QUEUE_GROUPS`); `flags`
 * and the reserved fields 0. Output: the rest.
 */
struct gpupm_tenant_open_ri {
  /**
   * TENANT_STRUCT_VERSION.
   */
  uint32_t version;
  /**
   * Context id.
   */
  uint32_t ctx;
  /**
   * One of GPUPM_TENANT_RI_MODE_*.
   */
  uint32_t mode;
  /**
   * Bits of GPUPM_TENANT_RI_CONTROLS_*.
   */
  uint32_t controls;
  /**
   * SF: the scaling factor.
   */
  uint32_t sf;
  /**
   * RSIC: the first interval.
   */
  uint32_t rsic;
  /**
   * RGS: groups are 2^(RGS+1) records of 16 bytes.
   */
  uint32_t rgs;
  /**
   * Program-buffer size in groups.
   */
  uint32_t buffer_groups;
  /**
   * Groups the session queues before it drops (and counts) new ones;
   * output (ABI 1.11): the groups granted, clamped to the caller's
   * queue budget.
   */
  uint32_t queue_groups;
  /**
   * Must be 0.
   */
  uint32_t flags;
  /**
   * Reserved, 0.
   */
  uint64_t reserved;
  /**
   * Output: session id, counted per uid (ABI 1.11: before, unique
   * daemon-wide).
   */
  uint64_t session;
  /**
   * Output: the session's place among its VM's RI control blocks (0 ..
   * the VM's share; ABI 1.11: before, the device's block number).
   */
  uint32_t block;
  /**
   * Output: partition slot the context's VM is on.
   */
  uint32_t partition;
  /**
   * Output: that partition's capability version.
   */
  uint32_t partition_version;
  /**
   * Output: that partition's maximum RGS.
   */
  uint32_t partition_max_rgs;
  /**
   * Output: the device's maximum RGS.
   */
  uint32_t device_max_rgs;
  /**
   * Reserved, output 0.
   */
  uint32_t reserved2;
};

/**
 * `TENANT_IOC_RI_EMIT`: RIEMIT, collect `value` as an emit record of the
 * handle's session (a no-op while the session is halted or without
 * GPUPM_TENANT_RI_CONTROLS_EMIT, as the seed says). `reserved` must be 0.
 */
struct gpupm_tenant_ri_emit {
  /**
   * TENANT_STRUCT_VERSION.
   */
  uint32_t version;
  /**
   * The value (the emit record's `data`).
   */
  uint32_t value;
  /**
   * Reserved, 0.
   */
  uint64_t reserved;
};

/**
 * `TENANT_IOC_RI_STATUS`: the handle's session as the device and the
 * daemon see it now (after a drain). Input: `version`; every other field
 * 0 (EINVAL otherwise). Output: the rest.
 */
struct gpupm_tenant_ri_status {
  /**
   * TENANT_STRUCT_VERSION.
   */
  uint32_t version;
  /**
   * Output: bits of GPUPM_TENANT_RI_STATE_*.
   */
  uint32_t state;
  /**
   * Output: `ri::halt_reason` (0 none, 1 version, 2 RGS limit).
   */
  uint32_t halt_reason;
  /**
   * Output: the session's RGS.
   */
  uint32_t rgs;
  /**
   * Output: groups the device stored (NRG).
   */
  uint64_t groups;
  /**
   * Output: groups the daemon queued for the session.
   */
  uint64_t delivered;
  /**
   * Output: sample points suppressed (Y/Z).
   */
  uint64_t suppressed;
  /**
   * Output: collection records overwritten before a group carried them.
   */
  uint64_t overwritten;
  /**
   * Output: groups lost (overwritten in the program buffer before the
   * daemon drained them, or dropped by a full queue).
   */
  uint64_t lost;
  /**
   * Output: the device's maximum RGS.
   */
  uint32_t device_max_rgs;
  /**
   * Output: the maximum RGS of the partition the VM is on now.
   */
  uint32_t partition_max_rgs;
  /**
   * Output: the version of the partition the VM is on now.
   */
  uint32_t partition_version;
  /**
   * Output: the partition the VM is on now.
   */
  uint32_t partition;
};

/**
 * `TENANT_IOC_RI_RESUME` (ABI 1.8): re-enable the handle's halted
 * session in place, on the partition its VM runs on now. Input:
 * `version`; every other field 0 (EINVAL otherwise). Output: that
 * partition. Refused, changing nothing: a session that is not halted, or
 * an RGS above the partition's maximum (EINVAL); a partition whose
 * capability version is not the one the session began on (EOPNOTSUPP:
 * its records would mix two versions in one buffer).
 */
struct gpupm_tenant_ri_resume {
  /**
   * TENANT_STRUCT_VERSION.
   */
  uint32_t version;
  /**
   * Input 0.
   */
  uint32_t flags;
  /**
   * Output: the partition the session runs on again.
   */
  uint32_t partition;
  /**
   * Output: its capability version.
   */
  uint32_t partition_version;
  /**
   * Output: its maximum RGS.
   */
  uint32_t partition_max_rgs;
  /**
   * Input and output 0.
   */
  uint32_t reserved;
};

/**
 * Header of every entry `read()` returns on an RI session.
 */
struct gpupm_tenant_ri_group_header {
  /**
   * One of GPUPM_TENANT_RI_ENTRY_*.
   */
  uint16_t kind;
  /**
   * RGS of the group.
   */
  uint8_t rgs;
  /**
   * `ri::halt_reason` for a halt marker, else 0.
   */
  uint8_t halt_reason;
  /**
   * Bytes of the entry, header included.
   */
  uint32_t size;
  /**
   * The session id.
   */
  uint64_t session;
  /**
   * The group's number in its device session (NRG, 1-based); for a
   * halt marker, the groups stored before the halt.
   */
  uint64_t group;
  /**
   * Groups lost since the previous entry (never silent).
   */
  uint64_t lost_before;
};
/**
 * `TENANT_IOC_ADD_RANGE`: program a range for context `ctx`.
 *
 * Input: `version`, `ctx`, `kind` (GPUPM_TENANT_RANGE_KIND_*), `event`
 * (`ranges::range_event`), `trigger` (GPUPM_TENANT_RANGE_TRIGGER_*), `threshold`
 * (0 with GPUPM_TENANT_RANGE_TRIGGER_NONE, else ≥ 1), `kernel` (code ranges:
 * ≤ 0xFFFF; data ranges: 0), `first` ≤ `last` (code: block indices ≤
 * 0xFFFF; data: addresses); `flags` and `reserved` 0. The output fields
 * are overwritten.
 *
 * The range counts the context's program only (the daemon programs the
 * register with the context's program id). Two ranges with the same
 * programming on one partition share a register (`shared` = 1); each
 * still reads only its own context's counts since it was added.
 */
struct gpupm_tenant_add_range {
  /**
   * TENANT_STRUCT_VERSION.
   */
  uint32_t version;
  /**
   * Context id.
   */
  uint32_t ctx;
  /**
   * One of GPUPM_TENANT_RANGE_KIND_*.
   */
  uint32_t kind;
  /**
   * One of `ranges::range_event`.
   */
  uint32_t event;
  /**
   * One of GPUPM_TENANT_RANGE_TRIGGER_*.
   */
  uint32_t trigger;
  /**
   * Threshold T of the trigger.
   */
  uint32_t threshold;
  /**
   * Kernel of a code range.
   */
  uint32_t kernel;
  /**
   * First block (code) or address (data), inclusive.
   */
  uint32_t first;
  /**
   * Last block (code) or address (data), inclusive.
   */
  uint32_t last;
  /**
   * Must be 0.
   */
  uint32_t flags;
  /**
   * Output: the range's handle, counted per VM (ABI 1.11: before,
   * unique daemon-wide).
   */
  uint32_t handle;
  /**
   * Output: partition slot of the context's VM.
   */
  uint32_t partition;
  /**
   * Output: the register's place among the VM's own range registers
   * of the partition (0 .. its share; ABI 1.11: before, the device's
   * register number, 0..8).
   */
  uint32_t register_;
  /**
   * Output: 1 when the register was already armed with this
   * programming for another of the VM's own ranges (ABI 1.11: never
   * another tenant's — ranges of different VMs share no register).
   */
  uint32_t shared;
  /**
   * Output: the program the range counts (`regs::CTX_PROGRAM`).
   */
  uint32_t program;
  /**
   * Reserved, 0.
   */
  uint32_t reserved;
};

/**
 * One range of a struct gpupm_tenant_read_ranges answer.
 */
struct gpupm_tenant_range_row {
  /**
   * The range's handle (counted per VM).
   */
  uint32_t handle;
  /**
   * The register's place among the VM's own registers (as
   * gpupm_tenant_add_range.register).
   */
  uint16_t register_;
  /**
   * GPUPM_TENANT_RANGE_KIND_* (as u8).
   */
  uint8_t kind;
  /**
   * `ranges::range_event` (as u8).
   */
  uint8_t event;
  /**
   * GPUPM_TENANT_RANGE_TRIGGER_* (as u8).
   */
  uint8_t trigger;
  /**
   * Bits of GPUPM_TENANT_RANGE_ROW_FLAGS_*.
   */
  uint8_t flags;
  /**
   * Reserved, 0.
   */
  uint16_t reserved;
  /**
   * Threshold.
   */
  uint32_t threshold;
  /**
   * Kernel (code ranges).
   */
  uint32_t kernel;
  /**
   * First block or address.
   */
  uint32_t first;
  /**
   * Last block or address.
   */
  uint32_t last;
  /**
   * Reserved, 0.
   */
  uint32_t reserved2;
  /**
   * Entries of the context into the range since the range was added.
   */
  uint64_t entries;
  /**
   * The event counted inside the range for the context since then.
   */
  uint64_t count;
  /**
   * Crossing records of the context the daemon received.
   */
  uint64_t crossings;
  /**
   * Crossings of the context whose record the full device ring lost.
   */
  uint64_t lost;
};

/**
 * `TENANT_IOC_READ_RANGES`: the ranges of context `ctx`, by handle.
 *
 * Input: `version`, `ctx`; `flags` and `reserved` 0. Output: `count`
 * rows ascending by handle, `partition`. The counts are the context's
 * exact share of each register up to the read (crossings once their
 * records were drained). Hot ranges: sort the rows by `count`.
 */
struct gpupm_tenant_read_ranges {
  /**
   * TENANT_STRUCT_VERSION.
   */
  uint32_t version;
  /**
   * Context id.
   */
  uint32_t ctx;
  /**
   * Must be 0.
   */
  uint32_t flags;
  /**
   * Reserved, 0.
   */
  uint32_t reserved;
  /**
   * Output: rows filled.
   */
  uint32_t count;
  /**
   * Output: partition slot.
   */
  uint32_t partition;
  /**
   * Output.
   */
  struct gpupm_tenant_range_row rows[GPUPM_TENANT_MAX_CONTEXT_RANGES];
};

/**
 * `TENANT_IOC_REMOVE_RANGE`: remove range `handle` of context `ctx`
 * (the register is disarmed when no other range uses it). `reserved` 0.
 */
struct gpupm_tenant_remove_range {
  /**
   * TENANT_STRUCT_VERSION.
   */
  uint32_t version;
  /**
   * Context id.
   */
  uint32_t ctx;
  /**
   * The handle struct gpupm_tenant_add_range answered.
   */
  uint32_t handle;
  /**
   * Reserved, 0.
   */
  uint32_t reserved;
};

/**
 * Common head of the three call-graph reads.
 *
 * Input: `version`, `ctx`, `first` (the first row, ≤ `total`); `flags`
 * 0. Page with `first += count` until `first == total`.
 */
struct gpupm_tenant_graph_header {
  /**
   * TENANT_STRUCT_VERSION.
   */
  uint32_t version;
  /**
   * Context id.
   */
  uint32_t ctx;
  /**
   * Input: first row.
   */
  uint32_t first;
  /**
   * Input 0; output bits of GPUPM_TENANT_GRAPH_FLAGS_*.
   */
  uint32_t flags;
  /**
   * Output: rows filled.
   */
  uint32_t count;
  /**
   * Output: rows in all.
   */
  uint32_t total;
  /**
   * Output: crossing records of the context in the graph.
   */
  uint64_t crossings;
  /**
   * Output: crossings of the context whose record the device lost
   * (in no graph).
   */
  uint64_t lost;
  /**
   * Output: crossings whose stack is not in struct gpupm_tenant_read_call_stacks.
   */
  uint64_t stacks_dropped;
};

/**
 * A call site edge of the graph: crossings whose stack holds the call
 * from `kernel` at `call_block` into `callee` (once per occurrence).
 */
struct gpupm_tenant_graph_edge {
  /**
   * Calling kernel.
   */
  uint16_t kernel;
  /**
   * Calling block.
   */
  uint16_t call_block;
  /**
   * Called kernel.
   */
  uint16_t callee;
  /**
   * Reserved, 0.
   */
  uint16_t reserved;
  /**
   * Crossings whose stack holds this call.
   */
  uint64_t count;
};

/**
 * Samples of one kernel: `self_samples` = crossings whose innermost
 * kernel is it; `inclusive` = crossings with it anywhere on the stack.
 */
struct gpupm_tenant_kernel_samples {
  /**
   * Kernel index.
   */
  uint16_t kernel;
  /**
   * Reserved, 0.
   */
  uint16_t reserved;
  /**
   * Reserved, 0.
   */
  uint32_t reserved2;
  /**
   * Crossings in the kernel itself.
   */
  uint64_t self_samples;
  /**
   * Crossings with the kernel on the stack.
   */
  uint64_t inclusive;
};

/**
 * One distinct call path and the crossings that had it.
 */
struct gpupm_tenant_stack_count {
  /**
   * Valid entries of `frames` (1..=GPUPM_TENANT_STACK_FRAMES).
   */
  uint32_t frames_len;
  /**
   * Reserved, 0.
   */
  uint32_t reserved;
  /**
   * Crossings with this stack.
   */
  uint64_t count;
  /**
   * Kernels, outermost (the entry kernel) first; the last is where the
   * crossing happened. Entries past `frames_len` are 0.
   */
  uint16_t frames[GPUPM_TENANT_STACK_FRAMES];
  /**
   * Reserved, 0.
   */
  uint16_t reserved2[3];
};
/**
 * `TENANT_IOC_READ_CALL_EDGES`: the caller → callee edges, ascending by
 * (kernel, call_block, callee).
 */
struct gpupm_tenant_read_call_edges {
  /**
   * Head.
   */
  struct gpupm_tenant_graph_header head;
  /**
   * Output.
   */
  struct gpupm_tenant_graph_edge rows[GPUPM_TENANT_GRAPH_EDGE_ROWS];
};

/**
 * `TENANT_IOC_READ_CALL_KERNELS`: self and inclusive samples per kernel,
 * ascending by kernel.
 */
struct gpupm_tenant_read_call_kernels {
  /**
   * Head.
   */
  struct gpupm_tenant_graph_header head;
  /**
   * Output.
   */
  struct gpupm_tenant_kernel_samples rows[GPUPM_TENANT_GRAPH_KERNEL_ROWS];
};

/**
 * `TENANT_IOC_READ_CALL_STACKS`: the distinct stacks with their counts
 * (the folded-stack profile), ascending by frames.
 */
struct gpupm_tenant_read_call_stacks {
  /**
   * Head.
   */
  struct gpupm_tenant_graph_header head;
  /**
   * Output.
   */
  struct gpupm_tenant_stack_count rows[GPUPM_TENANT_GRAPH_STACK_ROWS];
};

/**
 * The cumulative totals of one scope.
 */
struct gpupm_pmu_scope_totals {
  /**
   * CONTEXT, VM or SYSTEM.
   */
  uint32_t scope;
  /**
   * Context or VM id; 0 for the system.
   */
  uint32_t id;
  /**
   * Context scope: the instance's created cycle; otherwise 0.
   */
  uint64_t generation;
  /**
   * Totals by event id; slots `>= EVENT_COUNT` must be 0.
   */
  uint64_t counters[GPUPM_MAX_EVENTS];
};

/**
 * `GPUPM_PMU_IOC_PUBLISH`: the totals of `count` scopes, applied
 * atomically with respect to every perf read (all or nothing).
 */
struct gpupm_pmu_publish {
  /**
   * Must be GPUPM_PMU_STRUCT_VERSION.
   */
  uint32_t version;
  /**
   * Entries used, `1..=PUBLISH_BATCH`.
   */
  uint32_t count;
  /**
   * The scopes; entries past `count` must be all zero.
   */
  struct gpupm_pmu_scope_totals entries[GPUPM_PMU_PUBLISH_BATCH];
};

/**
 * `GPUPM_PMU_IOC_WANTED`: which context scopes have open perf events (the
 * system and every VM are always published).
 */
struct gpupm_pmu_wanted {
  /**
   * Must be GPUPM_PMU_STRUCT_VERSION on input.
   */
  uint32_t version;
  /**
   * Reserved, 0 on input.
   */
  uint32_t reserved;
  /**
   * Out: perf events of this PMU initialised since the module loaded
   * (every open counts, so a changed number means the set may have
   * changed).
   */
  uint64_t opened;
  /**
   * Out: bit `c % 64` of word `c / 64` is set while context `c` has an
   * open event.
   */
  uint64_t contexts[GPUPM_PMU_WANTED_WORDS];
};

/**
 * The immutable start of a page: written before the page is first offered
 * and never changed afterwards, so it needs no sequence lock.
 */
struct gpupm_page_header {
  /**
   * GPUPM_PAGE_MAGIC.
   */
  uint32_t magic;
  /**
   * GPUPM_PAGE_VERSION.
   */
  uint32_t version;
  /**
   * GPUPM_PAGE_SIZE.
   */
  uint32_t size;
  /**
   * GPUPM_TENANT_SCOPE_VM or GPUPM_TENANT_SCOPE_CONTEXT.
   */
  uint32_t scope;
  /**
   * VM id or context id.
   */
  uint32_t id;
  /**
   * The VM (itself for a VM page, the owner for a context page).
   */
  uint32_t vm;
  /**
   * A context page's instance: its created cycle (0 for a VM page).
   */
  uint64_t created_cycle;
  /**
   * Fingerprint of who may see the page when it was created; a daemon
   * restarted with another mapping for the VM withdraws the page
   * instead of writing it again.
   */
  uint64_t audience;
  /**
   * Reserved, 0.
   */
  uint64_t reserved[3];
};

/**
 * The counters of a page, first in struct gpupm_page_data, so that a reader that
 * wants only totals copies these 552 bytes.
 */
struct gpupm_page_counters {
  /**
   * Changes (grows) whenever values might go backwards: each daemon
   * start and each device reset. Within one generation no total,
   * `commit_seq` or `cycle` ever decreases.
   */
  uint64_t generation;
  /**
   * One of GPUPM_PAGE_STATE_*.
   */
  uint32_t state;
  /**
   * Bits in GPUPM_PAGE_FLAGS_*.
   */
  uint32_t flags;
  /**
   * Commits folded into the totals (the block header's count).
   */
  uint64_t commit_seq;
  /**
   * Device cycle of the last commit folded in.
   */
  uint64_t cycle;
  /**
   * Nominal device clock in kHz, to turn cycles into time.
   */
  uint32_t clock_khz;
  /**
   * Reserved, 0.
   */
  uint32_t reserved;
  /**
   * Cumulative totals indexed by event id: what
   * `TENANT_IOC_READ_COUNTERS` answers for the scope.
   */
  uint64_t totals[GPUPM_MAX_EVENTS];
};

/**
 * Everything the sequence lock protects.
 */
struct gpupm_page_data {
  /**
   * Totals and state.
   */
  struct gpupm_page_counters counters;
  /**
   * The latest per-interval delta of the scope the daemon drained (with
   * GPUPM_PAGE_FLAGS_RATE), as `TENANT_IOC_READ_RATES` answers it.
   */
  struct gpupm_tenant_rate_sample rate;
  /**
   * With GPUPM_PAGE_FLAGS_SEALED: the scope's block slot as published.
   */
  struct gpupm_block_slot sealed;
  /**
   * With GPUPM_PAGE_FLAGS_SEALED_RATE: the VM's latest stream slot as
   * published.
   */
  struct gpupm_stream_slot sealed_rate;
};

/**
 * One page as mapped.
 */
struct gpupm_page {
  /**
   * What the page is about.
   */
  struct gpupm_page_header header;
  /**
   * The sequence lock: odd while the daemon writes `data`.
   */
  uint64_t seq;
  /**
   * The protected words.
   */
  struct gpupm_page_data data;
  /**
   * Reserved, 0.
   */
  uint8_t tail[GPUPM_PAGE_TAIL];
};

/**
 * One request on the page socket.
 */
struct gpupm_page_request {
  /**
   * GPUPM_PAGE_STRUCT_VERSION.
   */
  uint32_t version;
  /**
   * GPUPM_TENANT_SCOPE_VM or GPUPM_TENANT_SCOPE_CONTEXT.
   */
  uint32_t scope;
  /**
   * VM id or context id.
   */
  uint32_t id;
  /**
   * Bits in GPUPM_PAGE_REQUEST_FLAGS_*.
   */
  uint32_t flags;
  /**
   * A context instance's created cycle (0 for a VM or with `LATEST`).
   */
  uint64_t created_cycle;
};

/**
 * The answer to one struct gpupm_page_request; with `status` 0 it carries the page's
 * descriptor.
 */
struct gpupm_page_reply {
  /**
   * GPUPM_PAGE_STRUCT_VERSION.
   */
  uint32_t version;
  /**
   * 0, or the errno of the refusal.
   */
  uint32_t status;
  /**
   * The request's scope kind.
   */
  uint32_t scope;
  /**
   * The request's id.
   */
  uint32_t id;
  /**
   * The page's VM (0 on refusal).
   */
  uint32_t vm;
  /**
   * Bytes to map (GPUPM_PAGE_SIZE; 0 on refusal).
   */
  uint32_t size;
  /**
   * The instance's created cycle (context pages).
   */
  uint64_t created_cycle;
  /**
   * The daemon's generation when it answered.
   */
  uint64_t generation;
};

/*
 * Reading a page: a consistent copy of its protected words under the
 * page's sequence lock (docs/pages.md). `seq` is odd while the daemon
 * writes; a copy is consistent when `seq` was even before it and the same
 * after it. Every access to the page is a 64-bit atomic load (relaxed);
 * the ordering comes from the two acquire fences, which pair with the
 * writer's release fence and release store. GCC and Clang builtins.
 *
 * A failed attempt is retried at once GPUPM_PAGE_READ_SPINS times, then
 * after sched_yield(): a writer preempted mid-update on a loaded host
 * needs the processor back to finish. Returns 0, or -1 when the page
 * stayed locked or kept changing for GPUPM_PAGE_BUSY_MS after that (a
 * daemon that died while writing: its successor republishes). The time is
 * C11's timespec_get, read only once spinning failed.
 */
static inline int gpupm_page_copy(const struct gpupm_page *page, void *out, size_t words)
{
	const uint64_t *src = (const uint64_t *)(const void *)&page->data;
	struct timespec since = { 0, 0 };
	int yielding = 0;
	for (uint32_t attempt = 1;; attempt++) {
		uint64_t s1 = __atomic_load_n(&page->seq, __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (!(s1 & 1)) {
			for (size_t i = 0; i < words; i++) {
				uint64_t v = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
				memcpy((char *)out + 8 * i, &v, sizeof(v));
			}
			__atomic_thread_fence(__ATOMIC_ACQUIRE);
			if (__atomic_load_n(&page->seq, __ATOMIC_RELAXED) == s1)
				return 0;
		}
		if (!yielding && attempt < GPUPM_PAGE_READ_SPINS)
			continue;
		struct timespec now;
		timespec_get(&now, TIME_UTC);
		if (!yielding) {
			since = now;
			yielding = 1;
		} else if ((now.tv_sec - since.tv_sec) * 1000 + (now.tv_nsec - since.tv_nsec) / 1000000 >=
			   GPUPM_PAGE_BUSY_MS) {
			return -1;
		}
		sched_yield();
	}
}

/* The counters only (totals, state, generation): 552 bytes. */
static inline int gpupm_page_read_counters(const struct gpupm_page *page,
					   struct gpupm_page_counters *out)
{
	return gpupm_page_copy(page, out, sizeof(*out) / 8);
}

/* Everything the lock protects (counters, rate sample, sealed slots). */
static inline int gpupm_page_read(const struct gpupm_page *page, struct gpupm_page_data *out)
{
	return gpupm_page_copy(page, out, sizeof(*out) / 8);
}

/**
 * One taken branch: from the block that ended with it to its target.
 * A call, a return and a kernel relaunch are taken branches too.
 */
struct gpupm_branch_entry {
  /**
   * Kernel of the branching block.
   */
  uint16_t from_kernel;
  /**
   * Branching block (index within its kernel).
   */
  uint16_t from_block;
  /**
   * Kernel of the target block.
   */
  uint16_t to_kernel;
  /**
   * Target block.
   */
  uint16_t to_block;
  /**
   * Context cycle (cycles the context has run) at which the target
   * block started.
   */
  uint64_t cycle;
};

/**
 * A branch-stack record: the last (up to) 32 taken branches of the
 * context, oldest first, captured at every N-th taken branch.
 *
 * Invariants: per buffer `seq` increases by one per record produced,
 * including lost ones; `entries[count - 1]` is the capturing branch and
 * `branches` the context's taken-branch count including it.
 */
struct gpupm_branch_stack_record {
  /**
   * GPUPM_BRANCH_RECORD_MAGIC.
   */
  uint32_t magic;
  /**
   * Partition slot.
   */
  uint16_t partition;
  /**
   * Bits in sample_flags.
   */
  uint16_t flags;
  /**
   * VM of the context.
   */
  uint32_t vm;
  /**
   * Context.
   */
  uint32_t ctx;
  /**
   * Buffer sequence number (1-based).
   */
  uint64_t seq;
  /**
   * Device cycle of the capture.
   */
  uint64_t cycle;
  /**
   * Taken branches the context executed so far (this one included).
   */
  uint64_t branches;
  /**
   * Valid entries (1..=32).
   */
  uint32_t count;
  /**
   * Reserved, 0.
   */
  uint32_t reserved;
  /**
   * The branches, oldest first.
   */
  struct gpupm_branch_entry entries[GPUPM_BRANCH_STACK_ENTRIES];
};

/**
 * A PC record: where the context was when the cycle sampler fired.
 *
 * Invariants: per buffer `seq` increases by one per record produced,
 * including lost ones; `ctx_cycle` increases within one context by the
 * record's `interval` plus the cycles the context ran while the sampler
 * was disabled.
 */
struct gpupm_pc_record {
  /**
   * GPUPM_PC_RECORD_MAGIC.
   */
  uint32_t magic;
  /**
   * Partition slot.
   */
  uint16_t partition;
  /**
   * Bits in sample_flags (the clock capability).
   */
  uint16_t flags;
  /**
   * VM of the context.
   */
  uint32_t vm;
  /**
   * Context.
   */
  uint32_t ctx;
  /**
   * Buffer sequence number (1-based).
   */
  uint64_t seq;
  /**
   * Device cycle of the sample.
   */
  uint64_t cycle;
  /**
   * Context cycle (cycles the context has run) of the sample.
   */
  uint64_t ctx_cycle;
  /**
   * Kernel executing.
   */
  uint16_t kernel;
  /**
   * Block executing (index within the kernel).
   */
  uint16_t block;
  /**
   * Context cycles since the previous sample point: P + R + S − A for
   * the interval that ended here (each sample stands for this many cycles).
   */
  uint32_t interval;
};

/**
 * Exact execution counts of one basic block of a context's program.
 */
struct gpupm_block_truth {
  /**
   * Kernel index in the program.
   */
  uint16_t kernel;
  /**
   * Block index in the kernel.
   */
  uint16_t block;
  /**
   * Reserved, 0.
   */
  uint32_t reserved;
  /**
   * Times the block was entered (a partly executed visit counts).
   */
  uint64_t visits;
  /**
   * Warp instructions the block retired on one SM (the context's
   * `sm_inst_executed` is this summed over blocks, times the SMs of its
   * partition that count it).
   */
  uint64_t instructions;
  /**
   * Context cycles spent in the block.
   */
  uint64_t cycles;
};

/**
 * `GPUPM_IOC_LEDGER_BLOCKS` (debug only, like struct gpupm_ledger_query): the
 * ground truth per (kernel, block) of one context's program, counted up
 * to now. Rows come in (kernel, block) order starting at row `first`;
 * page with `first += count` until `first == total`.
 *
 * A confidential VM's context's answer is sealed like its blocks: `flags`
 * has GPUPM_LEDGER_FLAGS_SEALED and `rows` (2048 bytes) is ciphertext
 * under the VM's session key with `envelope` and `tag`.
 */
struct gpupm_block_ledger_query {
  /**
   * GPUPM_IOCTL_STRUCT_VERSION.
   */
  uint32_t version;
  /**
   * Context id (an active or destroyed, not yet released context).
   */
  uint32_t ctx;
  /**
   * Input: first row to return (must be `<= total`).
   */
  uint32_t first;
  /**
   * Must be 0 on input; bits of GPUPM_LEDGER_FLAGS_* on output.
   */
  uint32_t flags;
  /**
   * Output: rows filled.
   */
  uint32_t count;
  /**
   * Output: rows the context's program has (blocks over all kernels).
   */
  uint32_t total;
  /**
   * Output: the context's context cycles (cycles it ran) so far.
   */
  uint64_t ctx_cycles;
  /**
   * Output: the rows.
   */
  struct gpupm_block_truth rows[GPUPM_BLOCK_LEDGER_ROWS];
  /**
   * Envelope of a sealed answer (all 0 otherwise); must be 0 on input.
   */
  struct gpupm_envelope envelope;
  /**
   * GCM tag of a sealed answer (all 0 otherwise); must be 0 on input.
   */
  uint8_t tag[16];
};

/**
 * A branch-stack buffer slot in the memory window: envelope, gpupm_branch_stack_record bytes (ciphertext when
 * encrypted), GCM tag (0 when not encrypted).
 */
struct gpupm_branch_slot {
  struct gpupm_envelope envelope;
  uint8_t payload[560]; /* sizeof(struct gpupm_branch_stack_record) */
  uint8_t tag[16];
};
GPUPM_STATIC_ASSERT(sizeof(((struct gpupm_branch_slot *)0)->payload) == sizeof(struct gpupm_branch_stack_record));

/**
 * A PC buffer slot in the memory window: envelope, gpupm_pc_record bytes (ciphertext when
 * encrypted), GCM tag (0 when not encrypted).
 */
struct gpupm_pc_slot {
  struct gpupm_envelope envelope;
  uint8_t payload[48]; /* sizeof(struct gpupm_pc_record) */
  uint8_t tag[16];
};
GPUPM_STATIC_ASSERT(sizeof(((struct gpupm_pc_slot *)0)->payload) == sizeof(struct gpupm_pc_record));

/**
 * Begin record: the first record of the group stored at ROA. The device
 * rewrites it whenever it stores a later group (NRG) or stops or halts
 * the session (S, H), so it always holds the current group count and
 * the session's stop and halt bits.
 */
struct gpupm_ri_begin_record {
  /**
   * GPUPM_RI_RECORD_BEGIN.
   */
  uint8_t kind;
  /**
   * Bits of GPUPM_RI_GROUP_FLAGS_*.
   */
  uint8_t flags;
  /**
   * RGS of every group in the buffer.
   */
  uint8_t rgs;
  /**
   * Capability version of the partition the session began on.
   */
  uint8_t version;
  /**
   * NRG: groups stored since the session began (this one included).
   */
  uint32_t groups;
  /**
   * Device cycle at which the group was stored (the time of day).
   */
  uint64_t time;
};

/**
 * Timestamp record: the first record of every group not at ROA.
 */
struct gpupm_ri_timestamp_record {
  /**
   * GPUPM_RI_RECORD_TIMESTAMP.
   */
  uint8_t kind;
  /**
   * Bits of GPUPM_RI_GROUP_FLAGS_* (only `SECONDARY`).
   */
  uint8_t flags;
  /**
   * Reserved, 0.
   */
  uint8_t reserved;
  /**
   * Capability version of the partition the sample ran on.
   */
  uint8_t version;
  /**
   * Number of this group in the session (1-based; NRG after it).
   */
  uint32_t group;
  /**
   * Device cycle of the sample point.
   */
  uint64_t time;
};

/**
 * Instruction record: the last record of every group, the sample.
 */
struct gpupm_ri_instruction_record {
  /**
   * GPUPM_RI_RECORD_INSTRUCTION.
   */
  uint8_t kind;
  /**
   * Bits of GPUPM_RI_SAMPLE_FLAGS_*.
   */
  uint8_t flags;
  /**
   * Kernel executing at the sample point (the instruction address).
   */
  uint16_t kernel;
  /**
   * Block executing (index within the kernel).
   */
  uint16_t block;
  /**
   * Partition slot the context ran on.
   */
  uint16_t partition;
  /**
   * Context cycle (cycles the context has run) of the sample point.
   */
  uint64_t ctx_cycle;
};

/**
 * Emit record: a value collected by RIEMIT or a marker block.
 */
struct gpupm_ri_emit_record {
  /**
   * GPUPM_RI_RECORD_EMIT.
   */
  uint8_t kind;
  /**
   * One of GPUPM_RI_EMIT_SOURCE_*.
   */
  uint8_t source;
  /**
   * Kernel executing when the value was collected (0 for a register
   * emit while the context was not running).
   */
  uint16_t kernel;
  /**
   * Block executing.
   */
  uint16_t block;
  /**
   * Reserved, 0.
   */
  uint16_t reserved;
  /**
   * The value: the `RI_EMIT` write, or for a marker the number of
   * marker-block entries of the context since the session began.
   */
  uint64_t data;
};

/**
 * Abort record: the context was switched out while an interval was in
 * progress (the model's analogue of a transaction abort).
 */
struct gpupm_ri_abort_record {
  /**
   * GPUPM_RI_RECORD_ABORT.
   */
  uint8_t kind;
  /**
   * Reserved, 0.
   */
  uint8_t reserved;
  /**
   * Kernel executing when the context stopped.
   */
  uint16_t kernel;
  /**
   * Block executing.
   */
  uint16_t block;
  /**
   * Partition slot the context left.
   */
  uint16_t partition;
  /**
   * Context cycle at which it stopped.
   */
  uint64_t ctx_cycle;
};

/**
 * `GPUPM_IOC_LEDGER_RI` (debug only, like struct gpupm_ledger_query): what one
 * runtime-instrumentation control block did since its session began —
 * the ground truth a test compares the program buffer with.
 *
 * Every sample point is exactly one of: stored, suppressed (primary or
 * secondary), or not stored (the session was halted or stopped):
 * `sample_points = stored + suppressed_primary + suppressed_secondary +
 * not_stored`.
 */
struct gpupm_ri_ledger_query {
  /**
   * GPUPM_IOCTL_STRUCT_VERSION.
   */
  uint32_t version;
  /**
   * Input: control block (`0..RI_BLOCKS`).
   */
  uint32_t block;
  /**
   * Must be 0.
   */
  uint32_t flags;
  /**
   * Output: the context the block watches (0 = none).
   */
  uint32_t ctx;
  /**
   * Output: sample points the mode picked while the session ran.
   */
  uint64_t sample_points;
  /**
   * Output: groups stored into the program buffer.
   */
  uint64_t stored;
  /**
   * Output: sample points at primary capability suppressed by Y.
   */
  uint64_t suppressed_primary;
  /**
   * Output: sample points at secondary capability suppressed by Z.
   */
  uint64_t suppressed_secondary;
  /**
   * Output: sample points not stored because the session was halted or
   * stopped (buffer full).
   */
  uint64_t not_stored;
  /**
   * Output: emit records collected from `RI_EMIT` writes.
   */
  uint64_t emits_register;
  /**
   * Output: emit records collected from marker blocks.
   */
  uint64_t emits_marker;
  /**
   * Output: abort records collected.
   */
  uint64_t aborts;
  /**
   * Output: collection-buffer records overwritten before being reported.
   */
  uint64_t overwritten;
  /**
   * Output: instructions the context retired (one SM) up to the last
   * sample point, 0 before the first.
   */
  uint64_t last_sample_retired;
  /**
   * Output: context cycle of the last sample point, 0 before the first.
   */
  uint64_t last_sample_ctx_cycle;
};

/**
 * One frame of the device-side call stack: the call in kernel `kernel`
 * at block `call_block` into kernel `callee`, which returns to block
 * `return_block` of `kernel` (`call_block + 1`; equal to the kernel's
 * block count when the call was its last block, which then returns on).
 */
struct gpupm_stack_entry {
  /**
   * Calling kernel.
   */
  uint16_t kernel;
  /**
   * Calling block (index within `kernel`).
   */
  uint16_t call_block;
  /**
   * Return block (index within `kernel`).
   */
  uint16_t return_block;
  /**
   * Called kernel.
   */
  uint16_t callee;
};

/**
 * A threshold crossing: written to the partition's ring (sealed like
 * sample records), one per crossing, with `RANGE_THRESHOLD` raised.
 *
 * Invariants: per ring `seq` increases by one per record produced,
 * including lost ones; `stack[..depth]` is the context's call stack at
 * the crossing, outermost call first, and `stack[depth - 1].callee` (or
 * the program's entry kernel when `depth` is 0) is `kernel`.
 */
struct gpupm_range_record {
  /**
   * GPUPM_RANGE_RECORD_MAGIC.
   */
  uint32_t magic;
  /**
   * Partition slot.
   */
  uint16_t partition;
  /**
   * Range index (0..GPUPM_RANGES_PER_PARTITION).
   */
  uint8_t range;
  /**
   * What crossed (GPUPM_CROSSING_*).
   */
  uint8_t kind;
  /**
   * VM of the context.
   */
  uint32_t vm;
  /**
   * Context running at the crossing.
   */
  uint32_t ctx;
  /**
   * Ring sequence number (1-based).
   */
  uint64_t seq;
  /**
   * Device cycle of the crossing.
   */
  uint64_t cycle;
  /**
   * Context cycle (cycles the context has run) of the crossing.
   */
  uint64_t ctx_cycle;
  /**
   * Count crossing: the range's count reached (a multiple of
   * `threshold`). Latency crossing: context cycles since the entry
   * (equal to `threshold`).
   */
  uint64_t value;
  /**
   * The range's `RANGE_ENTRIES` at the crossing.
   */
  uint64_t entries;
  /**
   * `RANGE_THRESHOLD`.
   */
  uint32_t threshold;
  /**
   * Bits in GPUPM_RANGE_FLAGS_*.
   */
  uint16_t flags;
  /**
   * The range's event (GPUPM_RANGE_EVENT_*).
   */
  uint8_t event;
  /**
   * Reserved, 0.
   */
  uint8_t reserved;
  /**
   * Kernel executing at the crossing.
   */
  uint16_t kernel;
  /**
   * Block executing at the crossing.
   */
  uint16_t block;
  /**
   * Valid entries of `stack` (calls below the entry kernel).
   */
  uint32_t depth;
  /**
   * The call stack, outermost call first.
   */
  struct gpupm_stack_entry stack[GPUPM_RANGE_STACK_DEPTH];
};

/**
 * Exact counts of one range for one context since the range was armed.
 */
struct gpupm_range_truth {
  /**
   * Range index.
   */
  uint32_t range;
  /**
   * The range's `RANGE_CTRL` (0: never armed).
   */
  uint32_t ctrl;
  /**
   * Entries of the context into the range.
   */
  uint64_t entries;
  /**
   * The range's event counted inside the range for the context.
   */
  uint64_t count;
  /**
   * Threshold crossings attributed to the context.
   */
  uint64_t crossings;
};

/**
 * `GPUPM_IOC_LEDGER_RANGES` (debug only): the ground truth of every range
 * of partition slot `partition` for context `ctx`. A confidential VM's
 * context's answer is sealed like `GPUPM_IOC_LEDGER_BLOCKS`' (`rows` is
 * ciphertext, `flags` has `ledger_flags::SEALED`).
 */
struct gpupm_range_ledger_query {
  /**
   * `IOCTL_STRUCT_VERSION`.
   */
  uint32_t version;
  /**
   * Context id (active, or destroyed and not yet released).
   */
  uint32_t ctx;
  /**
   * Partition slot (1..16, configured).
   */
  uint32_t partition;
  /**
   * Must be 0 on input; bits of `ledger_flags` on output.
   */
  uint32_t flags;
  /**
   * Output: one row per range register.
   */
  struct gpupm_range_truth rows[GPUPM_RANGE_LEDGER_ROWS];
  /**
   * Envelope of a sealed answer (all 0 otherwise); must be 0 on input.
   */
  struct gpupm_envelope envelope;
  /**
   * GCM tag of a sealed answer (all 0 otherwise); must be 0 on input.
   */
  uint8_t tag[16];
};

/**
 * Calls made from one call site of a context's program.
 */
struct gpupm_call_edge {
  /**
   * Calling kernel.
   */
  uint16_t kernel;
  /**
   * Calling block.
   */
  uint16_t call_block;
  /**
   * Called kernel.
   */
  uint16_t callee;
  /**
   * Reserved, 0.
   */
  uint16_t reserved;
  /**
   * Calls made (the callee was entered) since the context started or
   * the device was last reset.
   */
  uint64_t calls;
};

/**
 * `GPUPM_IOC_LEDGER_CALLS` (debug only): the call-graph ground truth of
 * context `ctx` — one row per call site of its program, in (kernel,
 * block) order, from row `first`; page with `first += count` until
 * `first == total`. Sealed for a confidential VM's context like
 * `GPUPM_IOC_LEDGER_BLOCKS`.
 */
struct gpupm_call_ledger_query {
  /**
   * `IOCTL_STRUCT_VERSION`.
   */
  uint32_t version;
  /**
   * Context id.
   */
  uint32_t ctx;
  /**
   * Input: first row (must be `<= total`).
   */
  uint32_t first;
  /**
   * Must be 0 on input; bits of `ledger_flags` on output.
   */
  uint32_t flags;
  /**
   * Output: rows filled.
   */
  uint32_t count;
  /**
   * Output: call sites the program has.
   */
  uint32_t total;
  /**
   * The rows.
   */
  struct gpupm_call_edge rows[GPUPM_CALL_LEDGER_ROWS];
  /**
   * Envelope of a sealed answer (all 0 otherwise); must be 0 on input.
   */
  struct gpupm_envelope envelope;
  /**
   * GCM tag of a sealed answer (all 0 otherwise); must be 0 on input.
   */
  uint8_t tag[16];
};

/**
 * A range-record ring slot in the memory window: envelope, gpupm_range_record bytes (ciphertext when
 * encrypted), GCM tag (0 when not encrypted).
 */
struct gpupm_range_slot {
  struct gpupm_envelope envelope;
  uint8_t payload[200]; /* sizeof(struct gpupm_range_record) */
  uint8_t tag[16];
};
GPUPM_STATIC_ASSERT(sizeof(((struct gpupm_range_slot *)0)->payload) == sizeof(struct gpupm_range_record));

/**
 * A device certificate: the device's Ed25519 public key, signed by the
 * vendor root. 128 bytes; `signature` is Ed25519 by the vendor root over
 * GPUPM_CC_CERT_CONTEXT followed by the first 64 bytes (every field before
 * `signature`).
 */
struct gpupm_cc_cert {
  /**
   * GPUPM_CC_CERT_MAGIC.
   */
  uint32_t magic;
  /**
   * GPUPM_CC_CERT_VERSION.
   */
  uint16_t version;
  /**
   * GPUPM_CC_ALG_ED25519.
   */
  uint16_t algorithm;
  /**
   * The device's serial number (random at provisioning).
   */
  uint8_t serial[GPUPM_CC_SERIAL_LEN];
  /**
   * The device's Ed25519 identity public key.
   */
  uint8_t device_key[GPUPM_CC_PUBLIC_KEY_LEN];
  /**
   * First 8 bytes of SHA-256 of the vendor root's public key.
   */
  uint8_t vendor_key_id[GPUPM_CC_KEY_ID_LEN];
  /**
   * The vendor root's Ed25519 signature.
   */
  uint8_t signature[GPUPM_CC_SIGNATURE_LEN];
};

/**
 * `GPUPM_IOC_CC_KEY_EXCHANGE` / `TENANT_IOC_CC_KEY_EXCHANGE`: the
 * tenant's half of the exchange in, the device's half out.
 *
 * Input: `version` (1), `vm`, `requester_nonce`, `requester_share`;
 * `flags`, `reserved` and every output field must be 0. The device keeps
 * one pending exchange per VM (a new one replaces it); it does not change
 * the VM's current session, which keeps sealing until a struct gpupm_cc_finish for
 * the new one succeeds.
 *
 * Output: `session` (the new session's id, never 0), `responder_nonce`,
 * `responder_share`, `cert`, `signature` (Ed25519 by `cert.device_key`
 * over GPUPM_CC_SIGNATURE_CONTEXT || TH1) and `responder_verify`
 * (HMAC-SHA256 with the device's finished key over TH2).
 *
 * Errors: EINVAL for a malformed request, a VM that is not confidential
 * or an all-zero share; ENODEV when the device has no identity (the
 * driver was started without one).
 */
struct gpupm_cc_key_exchange {
  /**
   * 1 (`IOCTL_STRUCT_VERSION` / `TENANT_STRUCT_VERSION`).
   */
  uint32_t version;
  /**
   * The confidential VM.
   */
  uint32_t vm;
  /**
   * Must be 0.
   */
  uint32_t flags;
  /**
   * Reserved, 0.
   */
  uint32_t reserved;
  /**
   * The tenant's random nonce.
   */
  uint8_t requester_nonce[GPUPM_CC_NONCE_LEN];
  /**
   * The tenant's ephemeral X25519 public key.
   */
  uint8_t requester_share[GPUPM_CC_SHARE_LEN];
  /**
   * Output: the id of the session this exchange establishes.
   */
  uint64_t session;
  /**
   * Output: the device's random nonce.
   */
  uint8_t responder_nonce[GPUPM_CC_NONCE_LEN];
  /**
   * Output: the device's ephemeral X25519 public key.
   */
  uint8_t responder_share[GPUPM_CC_SHARE_LEN];
  /**
   * Output: the device's certificate.
   */
  struct gpupm_cc_cert cert;
  /**
   * Output: the device's signature over the transcript.
   */
  uint8_t signature[GPUPM_CC_SIGNATURE_LEN];
  /**
   * Output: the device's verify data (key confirmation).
   */
  uint8_t responder_verify[GPUPM_CC_VERIFY_LEN];
};

/**
 * `GPUPM_IOC_CC_FINISH` / `TENANT_IOC_CC_FINISH`: the tenant proves it
 * derived the same handshake secret; the device then makes the session
 * the VM's own.
 *
 * Input: `version` (1), `vm`, `session` (from the exchange),
 * `requester_verify` (HMAC-SHA256 with the tenant's finished key over
 * TH3), `flags` (GPUPM_CC_FINISH_FLAGS_*) and, with `REPLACE`, `replace_proof`
 * (HMAC-SHA256 under the VM's *current* session key over
 * GPUPM_CC_REPLACE_LABEL || TH3); otherwise `replace_proof` must be 0.
 * `reserved`, `key_epoch` and `reserved2` must be 0.
 *
 * Output: `key_epoch` = 1. Every counter of the VM is republished under
 * the new session at once.
 *
 * Errors (the pending exchange is consumed by any attempt that names it,
 * successful or not): EINVAL for a malformed request, no pending exchange
 * of this VM with this session id, or a verify data or proof that does
 * not check; EBUSY when the VM already has an established session and
 * `REPLACE` is missing.
 */
struct gpupm_cc_finish {
  /**
   * 1 (`IOCTL_STRUCT_VERSION` / `TENANT_STRUCT_VERSION`).
   */
  uint32_t version;
  /**
   * The confidential VM.
   */
  uint32_t vm;
  /**
   * Bits of GPUPM_CC_FINISH_FLAGS_*.
   */
  uint32_t flags;
  /**
   * Reserved, 0.
   */
  uint32_t reserved;
  /**
   * The session id the exchange answered.
   */
  uint64_t session;
  /**
   * The tenant's verify data.
   */
  uint8_t requester_verify[GPUPM_CC_VERIFY_LEN];
  /**
   * With GPUPM_CC_FINISH_FLAGS_REPLACE: proof of the current session key.
   */
  uint8_t replace_proof[GPUPM_CC_VERIFY_LEN];
  /**
   * Output: the new session's key epoch (1).
   */
  uint32_t key_epoch;
  /**
   * Reserved, 0.
   */
  uint32_t reserved2;
};

/* Layout checks: sizes and alignments as Rust computes them */

GPUPM_STATIC_ASSERT(sizeof(struct gpupm_block) == 544);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_block) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_envelope) == 32);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_envelope) == 4);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_stream_record) == 560);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_stream_record) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_ccu_record) == 40);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_ccu_record) == 4);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_interrupt_record) == 32);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_interrupt_record) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_identity) == 48);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_identity) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_reg_op) == 24);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_reg_op) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_reg_batch) == 1552);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_reg_batch) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_advance) == 24);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_advance) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_ledger_query) == 1600);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_ledger_query) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_reset) == 8);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_reset) == 4);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_reg_access) == 32);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_reg_access) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_window_read) == 16);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_window_read) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_block_slot) == 592);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_block_slot) == 4);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_wait_commit) == 14352);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_wait_commit) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_mirror_header) == 64);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_mirror_header) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_mirror_info) == 544);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_mirror_info) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_mirror_rings) == 32);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_mirror_rings) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_mirror_ring) == 32);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_mirror_ring) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_stream_slot) == 608);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_stream_slot) == 4);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_tenant_whoami) == 272);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_tenant_whoami) == 4);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_tenant_ctx_entry) == 16);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_tenant_ctx_entry) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_tenant_list_contexts) == 4120);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_tenant_list_contexts) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_tenant_read_counters) == 1272);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_tenant_read_counters) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_tenant_rate_sample) == 536);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_tenant_rate_sample) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_tenant_read_rates) == 8608);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_tenant_read_rates) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_tenant_open_stream) == 16);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_tenant_open_stream) == 4);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_tenant_delta) == 624);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_tenant_delta) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_tenant_event_info) == 160);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_tenant_event_info) == 4);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_tenant_read_instance) == 1296);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_tenant_read_instance) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_tenant_read_instance_rates) == 8624);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_tenant_read_instance_rates) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_tenant_open_sampling) == 80);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_tenant_open_sampling) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_tenant_sample_header) == 24);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_tenant_sample_header) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_tenant_key_state) == 32);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_tenant_key_state) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_tenant_rekey) == 72);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_tenant_rekey) == 4);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_tenant_open_ri) == 80);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_tenant_open_ri) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_tenant_ri_emit) == 16);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_tenant_ri_emit) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_tenant_ri_status) == 72);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_tenant_ri_status) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_tenant_ri_resume) == 24);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_tenant_ri_resume) == 4);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_tenant_ri_group_header) == 32);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_tenant_ri_group_header) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_pmu_scope_totals) == 528);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_pmu_scope_totals) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_pmu_publish) == 8456);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_pmu_publish) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_pmu_wanted) == 528);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_pmu_wanted) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_page_header) == 64);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_page_header) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_page_counters) == 552);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_page_counters) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_page_data) == 2288);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_page_data) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_page) == 4096);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_page) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_page_request) == 24);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_page_request) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_page_reply) == 40);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_page_reply) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_branch_entry) == 16);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_branch_entry) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_branch_stack_record) == 560);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_branch_stack_record) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_pc_record) == 48);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_pc_record) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_branch_slot) == 608);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_branch_slot) == 4);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_pc_slot) == 96);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_pc_slot) == 4);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_block_truth) == 32);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_block_truth) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_block_ledger_query) == 2128);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_block_ledger_query) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_ri_begin_record) == 16);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_ri_begin_record) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_ri_timestamp_record) == 16);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_ri_timestamp_record) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_ri_instruction_record) == 16);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_ri_instruction_record) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_ri_emit_record) == 16);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_ri_emit_record) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_ri_abort_record) == 16);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_ri_abort_record) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_ri_ledger_query) == 104);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_ri_ledger_query) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_stack_entry) == 8);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_stack_entry) == 2);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_range_record) == 200);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_range_record) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_range_slot) == 248);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_range_slot) == 4);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_range_truth) == 32);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_range_truth) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_range_ledger_query) == 320);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_range_ledger_query) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_call_edge) == 16);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_call_edge) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_call_ledger_query) == 1096);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_call_ledger_query) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_tenant_add_range) == 64);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_tenant_add_range) == 4);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_tenant_range_row) == 64);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_tenant_range_row) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_tenant_read_ranges) == 536);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_tenant_read_ranges) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_tenant_remove_range) == 16);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_tenant_remove_range) == 4);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_tenant_graph_header) == 48);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_tenant_graph_header) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_tenant_graph_edge) == 16);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_tenant_graph_edge) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_tenant_read_call_edges) == 1072);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_tenant_read_call_edges) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_tenant_kernel_samples) == 24);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_tenant_kernel_samples) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_tenant_read_call_kernels) == 1584);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_tenant_read_call_kernels) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_tenant_stack_count) == 56);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_tenant_stack_count) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_tenant_read_call_stacks) == 1840);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_tenant_read_call_stacks) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_cc_cert) == 128);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_cc_cert) == 4);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_cc_key_exchange) == 376);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_cc_key_exchange) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_cc_finish) == 96);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_cc_finish) == 8);
/* Each ioctl number's size field names its argument struct. */
GPUPM_STATIC_ASSERT(((GPUPM_IOC_IDENTITY >> 16) & 0x3fff) == sizeof(struct gpupm_identity));
GPUPM_STATIC_ASSERT(((GPUPM_IOC_REG_BATCH >> 16) & 0x3fff) == sizeof(struct gpupm_reg_batch));
GPUPM_STATIC_ASSERT(((GPUPM_IOC_ADVANCE >> 16) & 0x3fff) == sizeof(struct gpupm_advance));
GPUPM_STATIC_ASSERT(((GPUPM_IOC_LEDGER >> 16) & 0x3fff) == sizeof(struct gpupm_ledger_query));
GPUPM_STATIC_ASSERT(((GPUPM_IOC_RESET >> 16) & 0x3fff) == sizeof(struct gpupm_reset));
GPUPM_STATIC_ASSERT(((GPUPM_IOC_REG_READ >> 16) & 0x3fff) == sizeof(struct gpupm_reg_access));
GPUPM_STATIC_ASSERT(((GPUPM_IOC_REG_WRITE >> 16) & 0x3fff) == sizeof(struct gpupm_reg_access));
GPUPM_STATIC_ASSERT(((GPUPM_IOC_LEDGER_BLOCKS >> 16) & 0x3fff) == sizeof(struct gpupm_block_ledger_query));
GPUPM_STATIC_ASSERT(((GPUPM_IOC_LEDGER_RI >> 16) & 0x3fff) == sizeof(struct gpupm_ri_ledger_query));
GPUPM_STATIC_ASSERT(((GPUPM_IOC_LEDGER_RANGES >> 16) & 0x3fff) == sizeof(struct gpupm_range_ledger_query));
GPUPM_STATIC_ASSERT(((GPUPM_IOC_LEDGER_CALLS >> 16) & 0x3fff) == sizeof(struct gpupm_call_ledger_query));
GPUPM_STATIC_ASSERT(((TENANT_IOC_WHOAMI >> 16) & 0x3fff) == sizeof(struct gpupm_tenant_whoami));
GPUPM_STATIC_ASSERT(((TENANT_IOC_LIST_CONTEXTS >> 16) & 0x3fff) == sizeof(struct gpupm_tenant_list_contexts));
GPUPM_STATIC_ASSERT(((TENANT_IOC_READ_COUNTERS >> 16) & 0x3fff) == sizeof(struct gpupm_tenant_read_counters));
GPUPM_STATIC_ASSERT(((TENANT_IOC_READ_RATES >> 16) & 0x3fff) == sizeof(struct gpupm_tenant_read_rates));
GPUPM_STATIC_ASSERT(((TENANT_IOC_OPEN_STREAM >> 16) & 0x3fff) == sizeof(struct gpupm_tenant_open_stream));
GPUPM_STATIC_ASSERT(((TENANT_IOC_EVENT_INFO >> 16) & 0x3fff) == sizeof(struct gpupm_tenant_event_info));
GPUPM_STATIC_ASSERT(((TENANT_IOC_READ_INSTANCE >> 16) & 0x3fff) == sizeof(struct gpupm_tenant_read_instance));
GPUPM_STATIC_ASSERT(((TENANT_IOC_READ_INSTANCE_RATES >> 16) & 0x3fff) == sizeof(struct gpupm_tenant_read_instance_rates));
GPUPM_STATIC_ASSERT(((TENANT_IOC_OPEN_SAMPLING >> 16) & 0x3fff) == sizeof(struct gpupm_tenant_open_sampling));
GPUPM_STATIC_ASSERT(((TENANT_IOC_KEY_STATE >> 16) & 0x3fff) == sizeof(struct gpupm_tenant_key_state));
GPUPM_STATIC_ASSERT(((TENANT_IOC_REKEY >> 16) & 0x3fff) == sizeof(struct gpupm_tenant_rekey));
GPUPM_STATIC_ASSERT(((TENANT_IOC_OPEN_RI >> 16) & 0x3fff) == sizeof(struct gpupm_tenant_open_ri));
GPUPM_STATIC_ASSERT(((TENANT_IOC_RI_EMIT >> 16) & 0x3fff) == sizeof(struct gpupm_tenant_ri_emit));
GPUPM_STATIC_ASSERT(((TENANT_IOC_RI_STATUS >> 16) & 0x3fff) == sizeof(struct gpupm_tenant_ri_status));
GPUPM_STATIC_ASSERT(((TENANT_IOC_ADD_RANGE >> 16) & 0x3fff) == sizeof(struct gpupm_tenant_add_range));
GPUPM_STATIC_ASSERT(((TENANT_IOC_READ_RANGES >> 16) & 0x3fff) == sizeof(struct gpupm_tenant_read_ranges));
GPUPM_STATIC_ASSERT(((TENANT_IOC_REMOVE_RANGE >> 16) & 0x3fff) == sizeof(struct gpupm_tenant_remove_range));
GPUPM_STATIC_ASSERT(((TENANT_IOC_READ_CALL_EDGES >> 16) & 0x3fff) == sizeof(struct gpupm_tenant_read_call_edges));
GPUPM_STATIC_ASSERT(((TENANT_IOC_READ_CALL_KERNELS >> 16) & 0x3fff) == sizeof(struct gpupm_tenant_read_call_kernels));
GPUPM_STATIC_ASSERT(((TENANT_IOC_READ_CALL_STACKS >> 16) & 0x3fff) == sizeof(struct gpupm_tenant_read_call_stacks));
GPUPM_STATIC_ASSERT(((GPUPM_IOC_CC_KEY_EXCHANGE >> 16) & 0x3fff) == sizeof(struct gpupm_cc_key_exchange));
GPUPM_STATIC_ASSERT(((GPUPM_IOC_CC_FINISH >> 16) & 0x3fff) == sizeof(struct gpupm_cc_finish));
GPUPM_STATIC_ASSERT(((TENANT_IOC_CC_KEY_EXCHANGE >> 16) & 0x3fff) == sizeof(struct gpupm_cc_key_exchange));
GPUPM_STATIC_ASSERT(((TENANT_IOC_CC_FINISH >> 16) & 0x3fff) == sizeof(struct gpupm_cc_finish));
GPUPM_STATIC_ASSERT(((GPUPM_PMU_IOC_PUBLISH >> 16) & 0x3fff) == sizeof(struct gpupm_pmu_publish));
GPUPM_STATIC_ASSERT(((GPUPM_PMU_IOC_WANTED >> 16) & 0x3fff) == sizeof(struct gpupm_pmu_wanted));
GPUPM_STATIC_ASSERT(GPUPM_IOC_WINDOW_READ(1) == 0xc0114707U);
GPUPM_STATIC_ASSERT(GPUPM_IOC_WINDOW_READ(592) == 0xc2604707U);
GPUPM_STATIC_ASSERT(GPUPM_IOC_WINDOW_READ(12288) == 0xf0104707U);
/* Offset macros agree with the Rust helpers. */
GPUPM_STATIC_ASSERT(GPUPM_PART(3, GPUPM_REG_PART_STATUS) == 4868ULL);
GPUPM_STATIC_ASSERT(GPUPM_CCU(5, GPUPM_REG_CCU_RECORDS) == 12632ULL);
GPUPM_STATIC_ASSERT(GPUPM_VM(7, GPUPM_REG_VM_BLOCK) == 16840ULL);
GPUPM_STATIC_ASSERT(GPUPM_CTX(4095, GPUPM_REG_CTX_CREATED_CYCLE) == 163832ULL);
GPUPM_STATIC_ASSERT(GPUPM_BLOCK_SLOT_OFFSET(70) == 41440ULL);
GPUPM_STATIC_ASSERT(GPUPM_STREAM_SLOT_OFFSET(2, 9) == 12429664ULL);
GPUPM_STATIC_ASSERT(GPUPM_SAMP(3, GPUPM_SAMP_BUF(GPUPM_BUF_KIND_PC, GPUPM_REG_BUF_TAIL)) == 9100ULL);
GPUPM_STATIC_ASSERT(GPUPM_SAMPLE_SPAN_OFFSET(2) == 115712000ULL);
GPUPM_STATIC_ASSERT(GPUPM_RI(63, GPUPM_REG_RI_COLLECTED) == 24572ULL);
GPUPM_STATIC_ASSERT(GPUPM_RI_SPAN_OFFSET(5) == 355835904ULL);
GPUPM_STATIC_ASSERT(GPUPM_RI_GROUP_BYTES(7) == 4096ULL);
GPUPM_STATIC_ASSERT(GPUPM_RI_PART_VERSION(15) == 1660ULL);
GPUPM_STATIC_ASSERT(GPUPM_RI_PART_MAX_RGS(15) == 1724ULL);
GPUPM_STATIC_ASSERT(GPUPM_RANGE(3, 7, GPUPM_REG_RANGE_COUNT) == 25592ULL);
GPUPM_STATIC_ASSERT(GPUPM_RRING(2, GPUPM_REG_RRING_TAIL) == 1832ULL);
GPUPM_STATIC_ASSERT(GPUPM_RANGE_SPAN_OFFSET(5) == 422944768ULL);
GPUPM_STATIC_ASSERT(offsetof(struct gpupm_page, seq) == 64);
GPUPM_STATIC_ASSERT(offsetof(struct gpupm_page, data) == 72);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_page) == GPUPM_PAGE_SIZE);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_page_data) % 8 == 0);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_page_counters) % 8 == 0);
GPUPM_STATIC_ASSERT(GPUPM_EV_NVLINK_CYCLES_ACTIVE + 1 == GPUPM_EVENT_COUNT);

#endif /* GPUPM_UAPI_H */
