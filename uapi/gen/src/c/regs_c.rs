//! The BAR0 register map part of the C header (`uapi/src/regs.rs`):
//! device-wide registers and their bits, then the per-instance blocks
//! (partition, CCU, VM, context) with their array macros.

use gpupm_uapi::regs as r;

use super::{item_key, module_key, prose, registers, Header};

/// Device-wide registers, limits and bits.
pub(super) fn emit_global_regs(h: &mut Header) {
    h.section(
        "BAR0 register map (uapi/src/regs.rs): offsets, bits, per-instance blocks",
        prose::REGISTERS,
    );
    h.item("regs::BAR0_SIZE", "GPUPM_BAR0_SIZE", r::BAR0_SIZE, true, "");
    h.item(
        "regs::DEVICE_MAGIC",
        "GPUPM_DEVICE_MAGIC",
        r::DEVICE_MAGIC,
        true,
        "\"gPMU\"",
    );
    h.item(
        "regs::RESET_MAGIC",
        "GPUPM_RESET_MAGIC",
        r::RESET_MAGIC,
        true,
        "",
    );
    group!(h, dec "GPUPM_", gpupm_uapi::regs: TRIG_PERIOD_MIN, TRIG_THRESHOLD_MIN, TRIG_THRESHOLD_MAX,
        DITHER_BITS, DITHER_MAX, ULC_COUNTER_BITS, ULC_COUNTER_MAX, CCU_COUNTER_BITS, MULTIBIT_ACC_BITS,
        FLUSH_ACK_BASE_CYCLES, FLUSH_ACK_MAX_CYCLES, REKEY_NONCE_WORDS, REKEY_KEY_WORDS, REKEY_TAG_WORDS);
    group!(h, hex "GPUPM_", gpupm_uapi::regs: OOB_MBOX_DELTA, REKEY_NONCE_DOMAIN);
    h.line(
        "/* Cycles until the flush ack of a CCU with `counters` counters arrives. */\n\
         #define GPUPM_FLUSH_ACK_LATENCY(counters) \
         (GPUPM_FLUSH_ACK_BASE_CYCLES + ((counters) + GPUPM_RECORD_VALUES - 1) / GPUPM_RECORD_VALUES)",
    );
    registers(
        h,
        0,
        &offsets! {
            ID, ABI_VERSION, TOPO_GPCS, TOPO_SMS, TOPO_L2_SLICES, TOPO_FB_PARTITIONS, TOPO_NVLINKS,
            TOPO_COPY_ENGINES, TOPO_CCUS, TOPO_PARTITIONS, TOPO_EVENTS, TOPO_MEMORY_SLICES,
            CLOCK_KHZ, CLOCK_CAP, CYCLE, DEVICE_STATUS, RESET, TOPO_VMS, TOPO_CONTEXTS, CCU_WRAPS,
            CLOCK_LAG,
            TRIG_PERIOD, TRIG_CTRL, TRIG_THRESHOLD, TRIG_TARGET, TRIG_CMD, TRIG_EXTERNAL,
            TRIG_COUNT_PERIODIC, TRIG_COUNT_THRESHOLD, TRIG_COUNT_COMMAND, RECORDS_ROUTED,
            INTR_STATUS, INTR_MASK, INTR_ACK, INTR_PENDING, INTR_SEQ, MBOX_ARG, MBOX_CMD,
            MBOX_STATUS, MBOX_SEQ, MBOX_DATA, OOB_MBOX_ARG, OOB_MBOX_CMD, OOB_MBOX_STATUS,
            OOB_MBOX_SEQ, OOB_MBOX_DATA, REKEY_NONCE, REKEY_KEY, REKEY_TAG
        },
    );
    group!(h, hex "GPUPM_CLOCK_CAP_", gpupm_uapi::regs::clock_cap: PRIMARY, SECONDARY);
    group!(h, hex "GPUPM_DEVICE_STATUS_", gpupm_uapi::regs::device_status: STEP_CLOCK, FALLBACK_SEEN);
    group!(h, hex "GPUPM_TRIG_CTRL_", gpupm_uapi::regs::trig_ctrl: PERIODIC_ENABLE, DITHER, THRESHOLD_ENABLE, ALL);
    group!(h, hex "GPUPM_TRIG_CMD_", gpupm_uapi::regs::trig_cmd: FLUSH_ULC, TRIGGER, FLUSH_REQ, ALL);
    group!(h, hex "GPUPM_MBOX_OP_", gpupm_uapi::regs::mbox_op:
        GET_CAPS, READ_SYSTEM_COUNTER, READ_IDLE_CYCLES, READ_CYCLE, READ_FALLBACKS);
    group!(h, dec "GPUPM_MBOX_STATUS_", gpupm_uapi::regs::mbox_status: IDLE, OK, ERR_OPCODE, ERR_ARG);
}

/// The per-instance arrays: base, stride and count, the `GPUPM_<UNIT>(i,
/// reg)` macro, then [`emit_instance_blocks`].
pub(super) fn emit_instance_regs(h: &mut Header) {
    h.section(
        "Per-instance blocks: GPUPM_PART(p, GPUPM_REG_PART_STATUS) etc. (slot 0 = system)",
        prose::INSTANCES,
    );
    for (unit, base, stride, max, max_name) in [
        (
            "PART",
            r::PART_BASE,
            r::PART_STRIDE,
            r::MAX_PARTITION_SLOTS,
            "MAX_PARTITION_SLOTS",
        ),
        ("CCU", r::CCU_BASE, r::CCU_STRIDE, r::MAX_CCUS, "MAX_CCUS"),
        ("VM", r::VM_BASE, r::VM_STRIDE, r::MAX_VMS, "MAX_VMS"),
        (
            "CTX",
            r::CTX_BASE,
            r::CTX_STRIDE,
            r::MAX_CONTEXTS,
            "MAX_CONTEXTS",
        ),
    ] {
        h.item(
            &format!("regs::{unit}_BASE"),
            &format!("GPUPM_{unit}_BASE"),
            base,
            true,
            "",
        );
        h.item(
            &format!("regs::{unit}_STRIDE"),
            &format!("GPUPM_{unit}_STRIDE"),
            stride,
            true,
            "",
        );
        h.item(
            &format!("regs::{max_name}"),
            &format!("GPUPM_{max_name}"),
            max,
            false,
            "",
        );
        h.line(&format!(
            "#define GPUPM_{unit}(i, reg) (GPUPM_{unit}_BASE + (uint64_t)(i) * GPUPM_{unit}_STRIDE + (reg))"
        ));
    }
    emit_instance_blocks(h);
}

/// Each per-instance block's registers and bits.
fn emit_instance_blocks(h: &mut Header) {
    registers(
        h,
        r::part(0, 0),
        &offsets! {
            PART_CTRL, PART_STATUS, PART_CUR_VM, PART_CUR_CTX, PART_NEXT_VM, PART_NEXT_CTX,
            PART_CCU_ASSIGNED, PART_CCU_ACKED, PART_RC_CMD, PART_RC_BIND_VM, PART_RC_BIND_CTX,
            PART_SWITCH_TIMEOUT, PART_FALLBACKS, PART_SWITCHES, PART_COMMIT_SEQ, PART_STREAM_HEAD,
            PART_STREAM_TAIL, PART_STREAM_CAP, PART_STREAM_WATERMARK, PART_STREAM_LOST,
            PART_STREAM_BASE, PART_TIMESLICE_CTX, PART_TIMESLICE_VM, PART_GPC_MASK, PART_MEM_MASK,
            PART_SWITCH_REQ_CYCLE
        },
    );
    group!(h, hex "GPUPM_PART_CTRL_", gpupm_uapi::regs::part_ctrl: CTX_PAUSE, TRIG_PAUSE, ULC_PAUSE, ALL);
    group!(h, hex "GPUPM_PART_STATUS_", gpupm_uapi::regs::part_status:
        STATE_MASK, CONFIGURED, LAST_FALLBACK, VM_SWITCH);
    group!(h, dec "GPUPM_HS_STATE_", gpupm_uapi::regs::hs_state:
        IDLE, REQUESTED, CTX_PAUSED, XFER_PAUSED, TRIGGERED, ACKED, COMMITTED, REPOINTED);
    group!(h, hex "GPUPM_RC_CMD_", gpupm_uapi::regs::rc_cmd: COMMIT, REPOINT, ALL);
    registers(
        h,
        r::ccu(0, 0),
        &offsets! {
            CCU_OWNER, CCU_ULCS, CCU_COUNTERS, CCU_ACTIVE_BANK, CCU_MASK_INDEX, CCU_MASK_DATA,
            CCU_RECORDS, CCU_GROUP, CCU_GROUP_INDEX
        },
    );
    group!(h, dec "GPUPM_CCU_GROUP_", gpupm_uapi::regs::ccu_group: GPC, MEMORY_SLICE, SYSTEM, SHARED_LANE);
    registers(
        h,
        r::vm(0, 0),
        &offsets! {
            VM_PARTITION, VM_FLAGS, VM_BLOCK, VM_KEY_COMMIT, VM_KEY_EPOCH, VM_KEY_SESSION
        },
    );
    group!(h, hex "GPUPM_VM_FLAGS_", gpupm_uapi::regs::vm_flags: CONFIDENTIAL, SESSION);
    registers(
        h,
        r::ctx(0, 0),
        &offsets! {
            CTX_VM, CTX_STATE, CTX_BLOCK, CTX_CMD, CTX_PROGRAM, CTX_CREATED_CYCLE
        },
    );
    group!(h, dec "GPUPM_CTX_STATE_", gpupm_uapi::regs::ctx_state: FREE, ACTIVE, DESTROYED);
    group!(h, dec "GPUPM_CTX_CMD_", gpupm_uapi::regs::ctx_cmd: RELEASE);
}
