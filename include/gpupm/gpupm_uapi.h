/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpupm ABI: BAR0 registers, event catalogue, memory-window layouts, and
 * the ioctls of the device node and of the tenant node.
 *
 * Generated from the gpupm-uapi crate by
 * `cargo run -p gpupm-uapi --example gen_c > include/gpupm/gpupm_uapi.h`;
 * do not edit. The Rust source (uapi/src) documents every item.
 *
 * All structs are little-endian, naturally aligned and explicitly padded;
 * every ioctl struct starts with a version field that must be set.
 */
#ifndef GPUPM_UAPI_H
#define GPUPM_UAPI_H

#include <stdint.h>

#if defined(__cplusplus)
#define GPUPM_STATIC_ASSERT(cond) static_assert(cond, #cond)
#define GPUPM_ALIGNOF(t) alignof(t)
#else
#define GPUPM_STATIC_ASSERT(cond) _Static_assert(cond, #cond)
#define GPUPM_ALIGNOF(t) _Alignof(t)
#endif

/* ABI version (uapi/src/lib.rs): the ABI_VERSION register and GPUPM_IOC_IDENTITY report it */

#define GPUPM_ABI_MAJOR 1
#define GPUPM_ABI_MINOR 4
#define GPUPM_ABI_VERSION 0x10004 /* major << 16 | minor */

/* BAR0 register map (uapi/src/regs.rs): offsets, bits, per-instance blocks */

#define GPUPM_BAR0_SIZE 0x40000
#define GPUPM_DEVICE_MAGIC 0x554d5067 /* "gPMU" */
#define GPUPM_RESET_MAGIC 0x52455345
#define GPUPM_TRIG_PERIOD_MIN 1024
#define GPUPM_TRIG_THRESHOLD_MIN 1024
#define GPUPM_TRIG_THRESHOLD_MAX 268434944
#define GPUPM_DITHER_BITS 8
#define GPUPM_DITHER_MAX 255
#define GPUPM_ULC_COUNTER_BITS 9
#define GPUPM_ULC_COUNTER_MAX 511
#define GPUPM_CCU_COUNTER_BITS 28
#define GPUPM_MULTIBIT_ACC_BITS 6
#define GPUPM_FLUSH_ACK_BASE_CYCLES 16
#define GPUPM_FLUSH_ACK_MAX_CYCLES 286
#define GPUPM_REKEY_NONCE_WORDS 2
#define GPUPM_REKEY_KEY_WORDS 8
#define GPUPM_REKEY_TAG_WORDS 4
#define GPUPM_OOB_MBOX_DELTA 0x100
#define GPUPM_REKEY_NONCE_DOMAIN 0xffffffffU
/* Cycles until the flush ack of a CCU with `counters` counters arrives. */
#define GPUPM_FLUSH_ACK_LATENCY(counters) (GPUPM_FLUSH_ACK_BASE_CYCLES + ((counters) + GPUPM_RECORD_VALUES - 1) / GPUPM_RECORD_VALUES)
#define GPUPM_REG_ID 0x0
#define GPUPM_REG_ABI_VERSION 0x4
#define GPUPM_REG_TOPO_GPCS 0x8
#define GPUPM_REG_TOPO_SMS 0xc
#define GPUPM_REG_TOPO_L2_SLICES 0x10
#define GPUPM_REG_TOPO_FB_PARTITIONS 0x14
#define GPUPM_REG_TOPO_NVLINKS 0x18
#define GPUPM_REG_TOPO_COPY_ENGINES 0x1c
#define GPUPM_REG_TOPO_CCUS 0x20
#define GPUPM_REG_TOPO_PARTITIONS 0x24
#define GPUPM_REG_TOPO_EVENTS 0x28
#define GPUPM_REG_TOPO_MEMORY_SLICES 0x2c
#define GPUPM_REG_CLOCK_KHZ 0x30
#define GPUPM_REG_CLOCK_CAP 0x34
#define GPUPM_REG_CYCLE 0x38 /* 64-bit */
#define GPUPM_REG_DEVICE_STATUS 0x40
#define GPUPM_REG_RESET 0x44
#define GPUPM_REG_TOPO_VMS 0x48
#define GPUPM_REG_TOPO_CONTEXTS 0x4c
#define GPUPM_REG_CCU_WRAPS 0x50 /* 64-bit */
#define GPUPM_REG_TRIG_PERIOD 0x100
#define GPUPM_REG_TRIG_CTRL 0x104
#define GPUPM_REG_TRIG_THRESHOLD 0x108
#define GPUPM_REG_TRIG_TARGET 0x10c
#define GPUPM_REG_TRIG_CMD 0x110
#define GPUPM_REG_TRIG_EXTERNAL 0x114
#define GPUPM_REG_TRIG_COUNT_PERIODIC 0x118 /* 64-bit */
#define GPUPM_REG_TRIG_COUNT_THRESHOLD 0x120 /* 64-bit */
#define GPUPM_REG_TRIG_COUNT_COMMAND 0x128 /* 64-bit */
#define GPUPM_REG_RECORDS_ROUTED 0x130 /* 64-bit */
#define GPUPM_REG_INTR_STATUS 0x200
#define GPUPM_REG_INTR_MASK 0x204
#define GPUPM_REG_INTR_ACK 0x208
#define GPUPM_REG_INTR_PENDING 0x20c
#define GPUPM_REG_INTR_SEQ 0x210 /* 64-bit */
#define GPUPM_REG_MBOX_ARG 0x300
#define GPUPM_REG_MBOX_CMD 0x304
#define GPUPM_REG_MBOX_STATUS 0x308
#define GPUPM_REG_MBOX_SEQ 0x30c
#define GPUPM_REG_MBOX_DATA 0x310 /* 64-bit */
#define GPUPM_REG_OOB_MBOX_ARG 0x400
#define GPUPM_REG_OOB_MBOX_CMD 0x404
#define GPUPM_REG_OOB_MBOX_STATUS 0x408
#define GPUPM_REG_OOB_MBOX_SEQ 0x40c
#define GPUPM_REG_OOB_MBOX_DATA 0x410 /* 64-bit */
#define GPUPM_REG_REKEY_NONCE 0x500
#define GPUPM_REG_REKEY_KEY 0x508
#define GPUPM_REG_REKEY_TAG 0x528
#define GPUPM_CLOCK_CAP_PRIMARY 0x0
#define GPUPM_CLOCK_CAP_SECONDARY 0x1
#define GPUPM_DEVICE_STATUS_STEP_CLOCK 0x1
#define GPUPM_DEVICE_STATUS_FALLBACK_SEEN 0x2
#define GPUPM_TRIG_CTRL_PERIODIC_ENABLE 0x1
#define GPUPM_TRIG_CTRL_DITHER 0x2
#define GPUPM_TRIG_CTRL_THRESHOLD_ENABLE 0x4
#define GPUPM_TRIG_CTRL_ALL 0x7
#define GPUPM_TRIG_CMD_FLUSH_ULC 0x1
#define GPUPM_TRIG_CMD_TRIGGER 0x2
#define GPUPM_TRIG_CMD_FLUSH_REQ 0x4
#define GPUPM_TRIG_CMD_ALL 0x7
#define GPUPM_MBOX_OP_GET_CAPS 0x1
#define GPUPM_MBOX_OP_READ_SYSTEM_COUNTER 0x2
#define GPUPM_MBOX_OP_READ_IDLE_CYCLES 0x3
#define GPUPM_MBOX_OP_READ_CYCLE 0x4
#define GPUPM_MBOX_OP_READ_FALLBACKS 0x5
#define GPUPM_MBOX_STATUS_IDLE 0
#define GPUPM_MBOX_STATUS_OK 1
#define GPUPM_MBOX_STATUS_ERR_OPCODE 2
#define GPUPM_MBOX_STATUS_ERR_ARG 3

/* Per-instance blocks: GPUPM_PART(p, GPUPM_REG_PART_STATUS) etc. (slot 0 = system). */
#define GPUPM_PART_BASE 0x1000
#define GPUPM_PART_STRIDE 0x100
#define GPUPM_MAX_PARTITION_SLOTS 16
#define GPUPM_PART(i, reg) (GPUPM_PART_BASE + (uint64_t)(i) * GPUPM_PART_STRIDE + (reg))
#define GPUPM_CCU_BASE 0x3000
#define GPUPM_CCU_STRIDE 0x40
#define GPUPM_MAX_CCUS 64
#define GPUPM_CCU(i, reg) (GPUPM_CCU_BASE + (uint64_t)(i) * GPUPM_CCU_STRIDE + (reg))
#define GPUPM_VM_BASE 0x4000
#define GPUPM_VM_STRIDE 0x40
#define GPUPM_MAX_VMS 64
#define GPUPM_VM(i, reg) (GPUPM_VM_BASE + (uint64_t)(i) * GPUPM_VM_STRIDE + (reg))
#define GPUPM_CTX_BASE 0x8000
#define GPUPM_CTX_STRIDE 0x20
#define GPUPM_MAX_CONTEXTS 4096
#define GPUPM_CTX(i, reg) (GPUPM_CTX_BASE + (uint64_t)(i) * GPUPM_CTX_STRIDE + (reg))
#define GPUPM_REG_PART_CTRL 0x0
#define GPUPM_REG_PART_STATUS 0x4
#define GPUPM_REG_PART_CUR_VM 0x8
#define GPUPM_REG_PART_CUR_CTX 0xc
#define GPUPM_REG_PART_NEXT_VM 0x10
#define GPUPM_REG_PART_NEXT_CTX 0x14
#define GPUPM_REG_PART_CCU_ASSIGNED 0x18 /* 64-bit */
#define GPUPM_REG_PART_CCU_ACKED 0x20 /* 64-bit */
#define GPUPM_REG_PART_RC_CMD 0x28
#define GPUPM_REG_PART_RC_BIND_VM 0x2c
#define GPUPM_REG_PART_RC_BIND_CTX 0x30
#define GPUPM_REG_PART_SWITCH_TIMEOUT 0x34
#define GPUPM_REG_PART_FALLBACKS 0x38 /* 64-bit */
#define GPUPM_REG_PART_SWITCHES 0x40 /* 64-bit */
#define GPUPM_REG_PART_COMMIT_SEQ 0x48 /* 64-bit */
#define GPUPM_REG_PART_STREAM_HEAD 0x50
#define GPUPM_REG_PART_STREAM_TAIL 0x54
#define GPUPM_REG_PART_STREAM_CAP 0x58
#define GPUPM_REG_PART_STREAM_WATERMARK 0x5c
#define GPUPM_REG_PART_STREAM_LOST 0x60 /* 64-bit */
#define GPUPM_REG_PART_STREAM_BASE 0x68 /* 64-bit */
#define GPUPM_REG_PART_TIMESLICE_CTX 0x70
#define GPUPM_REG_PART_TIMESLICE_VM 0x74
#define GPUPM_REG_PART_GPC_MASK 0x78
#define GPUPM_REG_PART_MEM_MASK 0x7c
#define GPUPM_REG_PART_SWITCH_REQ_CYCLE 0x80 /* 64-bit */
#define GPUPM_PART_CTRL_CTX_PAUSE 0x1
#define GPUPM_PART_CTRL_TRIG_PAUSE 0x2
#define GPUPM_PART_CTRL_ULC_PAUSE 0x4
#define GPUPM_PART_CTRL_ALL 0x7
#define GPUPM_PART_STATUS_STATE_MASK 0xf
#define GPUPM_PART_STATUS_CONFIGURED 0x100
#define GPUPM_PART_STATUS_LAST_FALLBACK 0x200
#define GPUPM_PART_STATUS_VM_SWITCH 0x400
#define GPUPM_HS_STATE_IDLE 0
#define GPUPM_HS_STATE_REQUESTED 1
#define GPUPM_HS_STATE_CTX_PAUSED 2
#define GPUPM_HS_STATE_XFER_PAUSED 3
#define GPUPM_HS_STATE_TRIGGERED 4
#define GPUPM_HS_STATE_ACKED 5
#define GPUPM_HS_STATE_COMMITTED 6
#define GPUPM_HS_STATE_REPOINTED 7
#define GPUPM_RC_CMD_COMMIT 0x1
#define GPUPM_RC_CMD_REPOINT 0x2
#define GPUPM_RC_CMD_ALL 0x3
#define GPUPM_REG_CCU_OWNER 0x0
#define GPUPM_REG_CCU_ULCS 0x4
#define GPUPM_REG_CCU_COUNTERS 0x8
#define GPUPM_REG_CCU_ACTIVE_BANK 0xc
#define GPUPM_REG_CCU_MASK_INDEX 0x10
#define GPUPM_REG_CCU_MASK_DATA 0x14
#define GPUPM_REG_CCU_RECORDS 0x18 /* 64-bit */
#define GPUPM_REG_CCU_GROUP 0x20
#define GPUPM_REG_CCU_GROUP_INDEX 0x24
#define GPUPM_CCU_GROUP_GPC 0
#define GPUPM_CCU_GROUP_MEMORY_SLICE 1
#define GPUPM_CCU_GROUP_SYSTEM 2
#define GPUPM_CCU_GROUP_SHARED_LANE 3
#define GPUPM_REG_VM_PARTITION 0x0
#define GPUPM_REG_VM_FLAGS 0x4
#define GPUPM_REG_VM_BLOCK 0x8 /* 64-bit */
#define GPUPM_REG_VM_KEY_COMMIT 0x30
#define GPUPM_REG_VM_KEY_EPOCH 0x34
#define GPUPM_REG_VM_KEY_SESSION 0x38 /* 64-bit */
#define GPUPM_VM_FLAGS_CONFIDENTIAL 0x1
#define GPUPM_REG_CTX_VM 0x0
#define GPUPM_REG_CTX_STATE 0x4
#define GPUPM_REG_CTX_BLOCK 0x8 /* 64-bit */
#define GPUPM_REG_CTX_CMD 0x10
#define GPUPM_REG_CTX_PROGRAM 0x14
#define GPUPM_REG_CTX_CREATED_CYCLE 0x18 /* 64-bit */
#define GPUPM_CTX_STATE_FREE 0
#define GPUPM_CTX_STATE_ACTIVE 1
#define GPUPM_CTX_STATE_DESTROYED 2
#define GPUPM_CTX_CMD_RELEASE 1

/* Event catalogue (uapi/src/events.rs): ids index every counter array */

#define GPUPM_MAX_EVENTS 64
#define GPUPM_MAX_ULC_COUNTERS 45
#define GPUPM_MAX_CCU_ULCS 48
#define GPUPM_EVENT_COUNT 39
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

/* Interrupt sources (uapi/src/intr.rs) */

#define GPUPM_INTR_SWITCH_REQUESTED 0x1
#define GPUPM_INTR_TRIGGER_DONE 0x2
#define GPUPM_INTR_STREAM_WATERMARK 0x4
#define GPUPM_INTR_STREAM_OVERFLOW 0x8
#define GPUPM_INTR_CTX_CREATED 0x10
#define GPUPM_INTR_CTX_DESTROYED 0x20
#define GPUPM_INTR_SWITCH_FALLBACK 0x40
#define GPUPM_INTR_MAILBOX_DONE 0x80
#define GPUPM_INTR_DEVICE_RESET 0x100
#define GPUPM_INTR_FLUSH_ACKED 0x200
#define GPUPM_INTR_SAMPLE_WATERMARK 0x400
#define GPUPM_INTR_SAMPLE_OVERFLOW 0x800
#define GPUPM_INTR_ALL 0xfff

/* Source names indexed by bit number. */
static const char *const gpupm_intr_source_names[12] = {
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
};

/* Memory window layouts (uapi/src/layout.rs) */

#define GPUPM_MEM_WINDOW_OFFSET 0x100000000ULL
#define GPUPM_STREAM_REGION 0x259400
#define GPUPM_STREAM_RING_SPAN 0x4c0000
#define GPUPM_BLOCK_MAGIC 0x4b4c4267
#define GPUPM_RECORD_MAGIC 0x43455267
#define GPUPM_BLOCK_SLOT_SIZE 592
#define GPUPM_SYSTEM_BLOCK_SLOT 0
#define GPUPM_VM_BLOCK_SLOT_BASE 0
#define GPUPM_CTX_BLOCK_SLOT_BASE 64
#define GPUPM_CTX_BLOCK_SLOTS 4096
#define GPUPM_STREAM_RING_MAX 8192
#define GPUPM_STREAM_SLOT_SIZE 608
#define GPUPM_ENVELOPE_AAD_LEN 32
#define GPUPM_RECORD_VALUES 8
#define GPUPM_SESSION_KEY_INFO "gpupm-cc-v1" /* HKDF-SHA256 info prefix of a session key */
#define GPUPM_BLOCK_SLOT_OFFSET(slot) ((uint64_t)(slot) * GPUPM_BLOCK_SLOT_SIZE)
#define GPUPM_STREAM_SLOT_OFFSET(p, i) (GPUPM_STREAM_REGION + (uint64_t)(p) * GPUPM_STREAM_RING_SPAN + (uint64_t)(i) * GPUPM_STREAM_SLOT_SIZE)
#define GPUPM_BLOCK_KIND_SYSTEM 1
#define GPUPM_BLOCK_KIND_VM 2
#define GPUPM_BLOCK_KIND_CONTEXT 3
#define GPUPM_ENVELOPE_FLAGS_VALID 0x1
#define GPUPM_ENVELOPE_FLAGS_ENCRYPTED 0x2
#define GPUPM_RECORD_FLAGS_SWITCH 0x1
#define GPUPM_RECORD_FLAGS_FALLBACK 0x2
#define GPUPM_RECORD_FLAGS_SECONDARY_CLOCK 0x4
#define GPUPM_RECORD_FLAGS_THRESHOLD 0x8
#define GPUPM_CCU_RECORD_FLAGS_FLUSH_ACK 0x1

/* Device node ioctls (uapi/src/ioctl.rs) */

#define GPUPM_IOC_MAGIC 0x47 /* 'G' */
#define GPUPM_IOCTL_STRUCT_VERSION 1
#define GPUPM_MAX_IOCTL_SIZE 16384
#define GPUPM_MAX_BATCH_OPS 64
#define GPUPM_MAX_ADVANCE_CYCLES 0x10000000000ULL
#define GPUPM_REG_OP_READ 1
#define GPUPM_REG_OP_WRITE 2
#define GPUPM_LEDGER_SCOPE_CONTEXT 1
#define GPUPM_LEDGER_SCOPE_VM 2
#define GPUPM_LEDGER_SCOPE_SYSTEM 3
#define GPUPM_LEDGER_FLAGS_SEALED 0x1
#define GPUPM_LEDGER_SEALED_LEN 1536
#define GPUPM_IOC_IDENTITY 0xc0304700U
#define GPUPM_IOC_REG_BATCH 0xc6104701U
#define GPUPM_IOC_ADVANCE 0xc0184702U
#define GPUPM_IOC_LEDGER 0xc6404703U
#define GPUPM_IOC_RESET 0x40084704
#define GPUPM_IOC_LEDGER_BLOCKS 0xc8504705U

/* Tenant node ioctls (uapi/src/tenant.rs) */

#define GPUPM_TENANT_IOC_MAGIC 0x54 /* 'T' */
#define GPUPM_TENANT_STRUCT_VERSION 1
#define GPUPM_TENANT_MAX_CALLER_VMS 64
#define GPUPM_TENANT_LIST_PAGE 256
#define GPUPM_TENANT_RATE_SAMPLES 16
#define GPUPM_TENANT_SCOPE_CONTEXT 1
#define GPUPM_TENANT_SCOPE_VM 2
#define GPUPM_TENANT_SCOPE_SYSTEM 3
#define GPUPM_TENANT_CTX_STATE_ACTIVE 1
#define GPUPM_TENANT_CTX_STATE_DESTROYED 2
#define GPUPM_TENANT_CTX_STATE_RETIRED 3
#define GPUPM_TENANT_COUNTER_FLAGS_SEALED 0x1
#define GPUPM_TENANT_INSTANCE_FLAGS_LATEST 0x1
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
#define TENANT_IOC_WHOAMI 0xc1105400U
#define TENANT_IOC_LIST_CONTEXTS 0xd0185401U
#define TENANT_IOC_READ_COUNTERS 0xc4f85402U
#define TENANT_IOC_READ_RATES 0xe1a05403U
#define TENANT_IOC_OPEN_STREAM 0x40105404
#define TENANT_IOC_EVENT_INFO 0xc0a05405U
#define TENANT_IOC_READ_INSTANCE 0xc5105406U
#define TENANT_IOC_READ_INSTANCE_RATES 0xe1b05407U
#define TENANT_IOC_OPEN_SAMPLING 0xc0505408U

/* Perf PMU module: event config fields and the publication device (uapi/src/pmu.rs) */

#define GPUPM_PMU_NAME "gpupm"
#define GPUPM_PMU_PUBLISH_DEVICE "gpupm_pmu"
#define GPUPM_PMU_FIELD_EVENT(attr) (((attr)->config >> 0) & 0xffffULL) /* config:0-15 */
#define GPUPM_PMU_FIELD_SCOPE(attr) (((attr)->config >> 16) & 0xfULL) /* config:16-19 */
#define GPUPM_PMU_FIELD_VM(attr) (((attr)->config1 >> 0) & 0xffffULL) /* config1:0-15 */
#define GPUPM_PMU_FIELD_CTX(attr) (((attr)->config1 >> 16) & 0xffffULL) /* config1:16-31 */
#define GPUPM_PMU_CONFIG_USED 0xfffff
#define GPUPM_PMU_CONFIG1_USED 0xffffffffU
#define GPUPM_PMU_SCOPE_IMPLIED 0
#define GPUPM_PMU_SCOPE_CONTEXT 1
#define GPUPM_PMU_SCOPE_VM 2
#define GPUPM_PMU_SCOPE_SYSTEM 3
#define GPUPM_PMU_IOC_MAGIC 0x50 /* 'P' */
#define GPUPM_PMU_STRUCT_VERSION 1
#define GPUPM_PMU_PUBLISH_BATCH 16
#define GPUPM_PMU_WANTED_WORDS 64
#define GPUPM_PMU_IOC_PUBLISH 0x61085000
#define GPUPM_PMU_IOC_WANTED 0xc2105001U

/* Sampling units and sample buffers (uapi/src/sampling.rs) */

#define GPUPM_SAMP_BASE 0x2000
#define GPUPM_SAMP_STRIDE 0x100
#define GPUPM_SAMP(p, reg) (GPUPM_SAMP_BASE + (uint64_t)(p) * GPUPM_SAMP_STRIDE + (reg))
#define GPUPM_REG_SAMP_CTRL 0x0
#define GPUPM_REG_SAMP_STATUS 0x4
#define GPUPM_REG_SAMP_BRANCH_PERIOD 0x8
#define GPUPM_REG_SAMP_CYCLE_PERIOD 0xc
#define GPUPM_REG_SAMP_CYCLE_DITHER 0x10
#define GPUPM_REG_SAMP_SKID 0x14
#define GPUPM_REG_SAMP_REFILL 0x18
#define GPUPM_REG_SAMP_STACK_DEPTH 0x1c
#define GPUPM_REG_SAMP_BRANCHES 0x20 /* 64-bit */
#define GPUPM_REG_SAMP_CYCLE_SAMPLES 0x28 /* 64-bit */
#define GPUPM_REG_SAMP_SPAN 0x30
#define GPUPM_REG_SAMP_MIN_BRANCH_GAP 0x34
#define GPUPM_REG_SAMP_BUF_BRANCH 0x40
#define GPUPM_REG_SAMP_BUF_PC 0x80
#define GPUPM_REG_SAMP_BUF_STRIDE 0x40
/* Buffer register `reg` of buffer `kind` inside a sampling block:
   GPUPM_SAMP(p, GPUPM_SAMP_BUF(GPUPM_BUF_KIND_PC, GPUPM_REG_BUF_TAIL)). */
#define GPUPM_SAMP_BUF(kind, reg) (GPUPM_REG_SAMP_BUF_BRANCH + (uint64_t)(kind) * GPUPM_REG_SAMP_BUF_STRIDE + (reg))
#define GPUPM_REG_BUF_BASE 0x0
#define GPUPM_REG_BUF_CAP 0x4
#define GPUPM_REG_BUF_HEAD 0x8
#define GPUPM_REG_BUF_TAIL 0xc
#define GPUPM_REG_BUF_WATERMARK 0x10
#define GPUPM_REG_BUF_LOST 0x18 /* 64-bit */
#define GPUPM_REG_BUF_ADDR 0x20 /* 64-bit */
#define GPUPM_REG_BUF_PRODUCED 0x28 /* 64-bit */
#define GPUPM_BUF_KIND_BRANCH 0
#define GPUPM_BUF_KIND_PC 1
#define GPUPM_BUF_KIND_COUNT 2
#define GPUPM_SAMP_CTRL_BRANCH_ENABLE 0x1
#define GPUPM_SAMP_CTRL_CYCLE_ENABLE 0x2
#define GPUPM_SAMP_CTRL_ALL 0x3
#define GPUPM_SAMP_STATUS_CONFIGURED 0x100
#define GPUPM_SAMPLE_FLAGS_SECONDARY_CLOCK 0x1
#define GPUPM_BRANCH_PERIOD_MAX 1048576
#define GPUPM_CYCLE_PERIOD_MIN 256
#define GPUPM_CYCLE_PERIOD_MAX 1073741824
#define GPUPM_DEFAULT_DITHER 255
#define GPUPM_DEFAULT_BRANCH_PERIOD 64
#define GPUPM_DEFAULT_CYCLE_PERIOD 4096
#define GPUPM_SKID_CYCLES 12
#define GPUPM_REFILL_CYCLES 8
#define GPUPM_BRANCH_STACK_ENTRIES 32
#define GPUPM_SAMP_DITHER_MAX 4095 /* largest R_MAX */
#define GPUPM_BUF_ALIGN 0x1000
#define GPUPM_SAMPLE_SPAN 0x1000000
#define GPUPM_SAMPLE_REGION 0x4e5a000
#define GPUPM_BRANCH_RECORD_MAGIC 0x53524267
#define GPUPM_PC_RECORD_MAGIC 0x53435067
#define GPUPM_SAMPLE_SPAN_OFFSET(p) (GPUPM_SAMPLE_REGION + (uint64_t)(p) * GPUPM_SAMPLE_SPAN)
#define GPUPM_BLOCK_LEDGER_ROWS 64
#define GPUPM_BLOCK_LEDGER_SEALED_LEN 2048

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
   * [`BLOCK_MAGIC`] once the slot is in use, 0 when free.
   */
  uint32_t magic;
  /**
   * One of [`block_kind`].
   */
  uint16_t kind;
  /**
   * Layout version, [`crate::ABI_MAJOR`].
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
   * Bits in [`envelope_flags`].
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
   * [`RECORD_MAGIC`].
   */
  uint32_t magic;
  /**
   * Partition slot of the RC.
   */
  uint16_t partition;
  /**
   * Bits in [`record_flags`].
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
   * Bits in [`ccu_record_flags`].
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
 * One interrupt occurrence, as `read()` on the device node returns it.
 *
 * `seq` increases by one per record raised by the device (masked sources
 * raise none), so a reader can detect records it missed.
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
   * Exactly one bit of [`source`].
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
   * Must be [`IOCTL_STRUCT_VERSION`] on input.
   */
  uint32_t version;
  /**
   * [`crate::regs::DEVICE_MAGIC`].
   */
  uint32_t magic;
  /**
   * [`crate::ABI_VERSION`].
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
 * One operation of a [`RegBatch`].
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
   * [`reg_op::READ`] or [`reg_op::WRITE`].
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
   * [`IOCTL_STRUCT_VERSION`].
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
   * [`IOCTL_STRUCT_VERSION`].
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
 * its blocks: `flags` has [`ledger_flags::SEALED`], the bytes of
 * `generated`, `masked` and `remainder` (in that order, 1536 bytes) are
 * AES-256-GCM ciphertext under the VM's session key with `envelope` and
 * `tag`, exactly as in a block slot. Otherwise `envelope` and `tag` are 0.
 */
struct gpupm_ledger_query {
  /**
   * [`IOCTL_STRUCT_VERSION`].
   */
  uint32_t version;
  /**
   * One of [`ledger_scope`].
   */
  uint32_t scope;
  /**
   * Context or VM id.
   */
  uint32_t id;
  /**
   * Must be 0 on input; bits of [`ledger_flags`] on output.
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
   * [`IOCTL_STRUCT_VERSION`].
   */
  uint32_t version;
  /**
   * Must be [`crate::regs::RESET_MAGIC`].
   */
  uint32_t magic;
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
   * [`TENANT_STRUCT_VERSION`].
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
   * Output: VMs the caller may see (all VMs for the admin).
   */
  uint32_t vms[GPUPM_TENANT_MAX_CALLER_VMS];
};

/**
 * One context in a [`ListContexts`] answer.
 */
struct gpupm_tenant_ctx_entry {
  /**
   * Context id.
   */
  uint32_t ctx;
  /**
   * One of [`ctx_state`].
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
   * [`TENANT_STRUCT_VERSION`].
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
   * [`TENANT_STRUCT_VERSION`].
   */
  uint32_t version;
  /**
   * One of [`scope`].
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
   * Output: bits in [`counter_flags`].
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
 * One interval of a [`ReadRates`] answer.
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
   * [`TENANT_STRUCT_VERSION`].
   */
  uint32_t version;
  /**
   * One of [`scope`] (not SYSTEM).
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
   * Output: bits in [`counter_flags`].
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
   * [`TENANT_STRUCT_VERSION`].
   */
  uint32_t version;
  /**
   * One of [`scope`] (not SYSTEM).
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
   * [`TENANT_STRUCT_VERSION`].
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
   * Output: 0 partition-scoped, 1 context-filtered shared, 2 device-level.
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
 * Input: `version`, `scope` = [`scope::CONTEXT`], `id`, `flags`,
 * `created_cycle` (unless [`instance_flags::LATEST`]), `n_events`,
 * `events`; `reserved` and `reserved2` must be 0. The output fields are
 * overwritten, so an answer can be sent again as the next request.
 * Values as in [`ReadCounters`]; a retired instance answers the final
 * totals the daemon persisted before the device released its block.
 */
struct gpupm_tenant_read_instance {
  /**
   * [`TENANT_STRUCT_VERSION`].
   */
  uint32_t version;
  /**
   * [`scope::CONTEXT`] (the only scope with instances).
   */
  uint32_t scope;
  /**
   * Context id.
   */
  uint32_t id;
  /**
   * Bits in [`instance_flags`].
   */
  uint32_t flags;
  /**
   * Created cycle of the instance ([`CtxEntry::created_cycle`]).
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
   * Output: one of [`ctx_state`].
   */
  uint32_t state;
  /**
   * Output: bits in [`counter_flags`].
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
 * of one context instance (oldest first), as [`ReadRates`] answers them
 * for a scope. The daemon keeps a bounded history per VM and per context
 * id, so an old instance may answer fewer samples, or none.
 */
struct gpupm_tenant_read_instance_rates {
  /**
   * [`TENANT_STRUCT_VERSION`].
   */
  uint32_t version;
  /**
   * [`scope::CONTEXT`].
   */
  uint32_t scope;
  /**
   * Context id.
   */
  uint32_t id;
  /**
   * Bits in [`instance_flags`].
   */
  uint32_t flags;
  /**
   * Created cycle of the instance (output with [`instance_flags::LATEST`]).
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
   * Output: bits in [`counter_flags`].
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
 * Input: `version`, `scope` ([`super::scope::CONTEXT`] or
 * [`super::scope::VM`]), `id`, `kinds` (non-empty subset of
 * [`sample_kind::ALL`]), `period` (P, with [`sample_kind::CYCLE`]:
 * `MIN_SAMPLE_PERIOD..=MAX_SAMPLE_PERIOD`, else 0), `dither` (R_MAX,
 * `0..=MAX_SAMPLE_DITHER`, 0 = fixed period, seed 004 uses 255; 0
 * without CYCLE),
 * `branch_every` (N, with [`sample_kind::BRANCH_STACK`]:
 * `1..=MAX_BRANCH_EVERY`, else 0), `queue_records` (0 = default, else
 * `1..=MAX_SESSION_RECORDS`); `flags` and the reserved fields 0. Output:
 * the rest.
 */
struct gpupm_tenant_open_sampling {
  /**
   * [`super::TENANT_STRUCT_VERSION`].
   */
  uint32_t version;
  /**
   * [`super::scope::CONTEXT`] or [`super::scope::VM`].
   */
  uint32_t scope;
  /**
   * Context or VM id.
   */
  uint32_t id;
  /**
   * Bits of [`sample_kind`] (u32 on the wire).
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
   * Records the session queues before it drops (and counts) new ones.
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
   * Output: session id (unique while the daemon runs).
   */
  uint64_t session;
  /**
   * Output: the period the device runs for the partition now.
   */
  uint32_t device_period;
  /**
   * Output: the dither the device runs now.
   */
  uint32_t device_dither;
  /**
   * Output: the N the device runs now.
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
   * arrive [`sample_flags::SEALED`]).
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
   * One [`sample_kind`] bit.
   */
  uint16_t kind;
  /**
   * Bits of [`sample_flags`].
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
   * Records of this kind the session should have received but did not
   * (device buffer overflow, or the session's queue full) since the
   * previous record of this kind.
   */
  uint64_t lost_before;
};

/**
 * The cumulative totals of one scope.
 */
struct gpupm_pmu_scope_totals {
  /**
   * [`scope::CONTEXT`], [`scope::VM`] or [`scope::SYSTEM`].
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
   * Must be [`PMU_STRUCT_VERSION`].
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
   * Must be [`PMU_STRUCT_VERSION`] on input.
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
   * [`BRANCH_RECORD_MAGIC`].
   */
  uint32_t magic;
  /**
   * Partition slot.
   */
  uint16_t partition;
  /**
   * Bits in [`sample_flags`].
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
   * [`PC_RECORD_MAGIC`].
   */
  uint32_t magic;
  /**
   * Partition slot.
   */
  uint16_t partition;
  /**
   * Bits in [`sample_flags`] (the clock capability).
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
 * `GPUPM_IOC_LEDGER_BLOCKS` (debug only, like [`LedgerQuery`]): the
 * ground truth per (kernel, block) of one context's program, counted up
 * to now. Rows come in (kernel, block) order starting at row `first`;
 * page with `first += count` until `first == total`.
 *
 * A confidential VM's context's answer is sealed like its blocks: `flags`
 * has [`ledger_flags::SEALED`] and `rows` (2048 bytes) is ciphertext
 * under the VM's session key with `envelope` and `tag`.
 */
struct gpupm_block_ledger_query {
  /**
   * [`IOCTL_STRUCT_VERSION`].
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
   * Must be 0 on input; bits of [`ledger_flags`] on output.
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
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_block_slot) == 592);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_block_slot) == 4);
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
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_pmu_scope_totals) == 528);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_pmu_scope_totals) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_pmu_publish) == 8456);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_pmu_publish) == 8);
GPUPM_STATIC_ASSERT(sizeof(struct gpupm_pmu_wanted) == 528);
GPUPM_STATIC_ASSERT(GPUPM_ALIGNOF(struct gpupm_pmu_wanted) == 8);
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
/* Each ioctl number's size field names its argument struct. */
GPUPM_STATIC_ASSERT(((GPUPM_IOC_LEDGER_BLOCKS >> 16) & 0x3fff) == sizeof(struct gpupm_block_ledger_query));
GPUPM_STATIC_ASSERT(((GPUPM_IOC_IDENTITY >> 16) & 0x3fff) == sizeof(struct gpupm_identity));
GPUPM_STATIC_ASSERT(((GPUPM_IOC_REG_BATCH >> 16) & 0x3fff) == sizeof(struct gpupm_reg_batch));
GPUPM_STATIC_ASSERT(((GPUPM_IOC_ADVANCE >> 16) & 0x3fff) == sizeof(struct gpupm_advance));
GPUPM_STATIC_ASSERT(((GPUPM_IOC_LEDGER >> 16) & 0x3fff) == sizeof(struct gpupm_ledger_query));
GPUPM_STATIC_ASSERT(((GPUPM_IOC_RESET >> 16) & 0x3fff) == sizeof(struct gpupm_reset));
GPUPM_STATIC_ASSERT(((TENANT_IOC_WHOAMI >> 16) & 0x3fff) == sizeof(struct gpupm_tenant_whoami));
GPUPM_STATIC_ASSERT(((TENANT_IOC_LIST_CONTEXTS >> 16) & 0x3fff) == sizeof(struct gpupm_tenant_list_contexts));
GPUPM_STATIC_ASSERT(((TENANT_IOC_READ_COUNTERS >> 16) & 0x3fff) == sizeof(struct gpupm_tenant_read_counters));
GPUPM_STATIC_ASSERT(((TENANT_IOC_READ_RATES >> 16) & 0x3fff) == sizeof(struct gpupm_tenant_read_rates));
GPUPM_STATIC_ASSERT(((TENANT_IOC_OPEN_STREAM >> 16) & 0x3fff) == sizeof(struct gpupm_tenant_open_stream));
GPUPM_STATIC_ASSERT(((TENANT_IOC_EVENT_INFO >> 16) & 0x3fff) == sizeof(struct gpupm_tenant_event_info));
GPUPM_STATIC_ASSERT(((TENANT_IOC_READ_INSTANCE >> 16) & 0x3fff) == sizeof(struct gpupm_tenant_read_instance));
GPUPM_STATIC_ASSERT(((TENANT_IOC_READ_INSTANCE_RATES >> 16) & 0x3fff) == sizeof(struct gpupm_tenant_read_instance_rates));
GPUPM_STATIC_ASSERT(((TENANT_IOC_OPEN_SAMPLING >> 16) & 0x3fff) == sizeof(struct gpupm_tenant_open_sampling));
GPUPM_STATIC_ASSERT(((GPUPM_PMU_IOC_PUBLISH >> 16) & 0x3fff) == sizeof(struct gpupm_pmu_publish));
GPUPM_STATIC_ASSERT(((GPUPM_PMU_IOC_WANTED >> 16) & 0x3fff) == sizeof(struct gpupm_pmu_wanted));
/* Offset macros agree with the Rust helpers. */
GPUPM_STATIC_ASSERT(GPUPM_PART(3, GPUPM_REG_PART_STATUS) == 4868ULL);
GPUPM_STATIC_ASSERT(GPUPM_CCU(5, GPUPM_REG_CCU_RECORDS) == 12632ULL);
GPUPM_STATIC_ASSERT(GPUPM_VM(7, GPUPM_REG_VM_BLOCK) == 16840ULL);
GPUPM_STATIC_ASSERT(GPUPM_CTX(4095, GPUPM_REG_CTX_CREATED_CYCLE) == 163832ULL);
GPUPM_STATIC_ASSERT(GPUPM_BLOCK_SLOT_OFFSET(70) == 41440ULL);
GPUPM_STATIC_ASSERT(GPUPM_STREAM_SLOT_OFFSET(2, 9) == 12429664ULL);
GPUPM_STATIC_ASSERT(GPUPM_SAMP(3, GPUPM_SAMP_BUF(GPUPM_BUF_KIND_PC, GPUPM_REG_BUF_TAIL)) == 9100ULL);
GPUPM_STATIC_ASSERT(GPUPM_SAMPLE_SPAN_OFFSET(2) == 115712000ULL);
GPUPM_STATIC_ASSERT(GPUPM_EV_NVLINK_CYCLES_ACTIVE + 1 == GPUPM_EVENT_COUNT);

#endif /* GPUPM_UAPI_H */
