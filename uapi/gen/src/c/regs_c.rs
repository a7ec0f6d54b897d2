//! The BAR0 register map part of the C header (`uapi/src/regs.rs`, the
//! registers from the map's table):
//! device-wide registers and their bits, then the per-instance blocks
//! (partition, CCU, VM, context) with their array macros.

use gpupm_uapi::regs as r;

use super::{block_registers, item_key, module_key, prose, Header};

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
        FLUSH_ACK_BASE_CYCLES, FLUSH_ACK_MAX_CYCLES, REKEY_NONCE_WORDS, REKEY_KEY_WORDS, REKEY_TAG_WORDS,
        UUID_WORDS, SERIAL_WORDS, MODEL_NAME_WORDS);
    group!(h, dec "GPUPM_", gpupm_uapi::identity: SERIAL_BYTES, MODEL_NAME_BYTES);
    group!(h, hex "GPUPM_", gpupm_uapi::regs: OOB_MBOX_DELTA, REKEY_NONCE_DOMAIN);
    group!(h, dec "GPUPM_", gpupm_uapi::regs: OOB_MBOX_WORDS);
    h.line(
        "/* Cycles until the flush ack of a CCU with `counters` counters arrives. */\n\
         #define GPUPM_FLUSH_ACK_LATENCY(counters) \
         (GPUPM_FLUSH_ACK_BASE_CYCLES + ((counters) + GPUPM_RECORD_VALUES - 1) / GPUPM_RECORD_VALUES)",
    );
    for block in [
        &r::IDENTITY_REGS,
        &r::TRIGGER_REGS,
        &r::RC_BUFFER_REGS,
        &r::INTERRUPT_REGS,
        &r::MAILBOX_REGS,
        &r::OOB_MAILBOX_REGS,
        &r::REKEY_REGS,
    ] {
        block_registers(h, block);
    }
    group!(h, hex "GPUPM_CLOCK_CAP_", gpupm_uapi::regs::clock_cap: PRIMARY, SECONDARY);
    group!(h, hex "GPUPM_DEVICE_STATUS_", gpupm_uapi::regs::device_status: STEP_CLOCK, FALLBACK_SEEN);
    group!(h, hex "GPUPM_TRIG_CTRL_", gpupm_uapi::regs::trig_ctrl: PERIODIC_ENABLE, DITHER, THRESHOLD_ENABLE, ALL);
    group!(h, hex "GPUPM_TRIG_CMD_", gpupm_uapi::regs::trig_cmd: FLUSH_ULC, TRIGGER, FLUSH_REQ, ALL);
    group!(h, hex "GPUPM_MBOX_OP_", gpupm_uapi::regs::mbox_op:
        GET_CAPS, READ_SYSTEM_COUNTER, READ_IDLE_CYCLES, READ_CYCLE, READ_FALLBACKS,
        OOB_CHANNEL_INFO, OOB_FLUSH, OOB_NEXT_VM, OOB_NEXT_CONTEXT, OOB_SNAPSHOT, OOB_READ_LATCH,
        OOB_READ_IDLE, OOB_HOST_STATE, OOB_DEVICE_INFO);
    group!(h, dec "GPUPM_MBOX_STATUS_", gpupm_uapi::regs::mbox_status: IDLE, OK, ERR_OPCODE, ERR_ARG,
        ERR_NOT_FOUND, ERR_STALE, ERR_CONFIDENTIAL, END, ERR_BUSY);
    group!(h, dec "GPUPM_OOB_SCOPE_", gpupm_uapi::regs::oob_scope: SYSTEM, VM, CONTEXT);
    group!(h, hex "GPUPM_OOB_VM_FLAGS_", gpupm_uapi::regs::oob_vm_flags: CONFIDENTIAL);
    group!(h, dec "GPUPM_OOB_CTX_STATE_", gpupm_uapi::regs::oob_ctx_state: ACTIVE, DESTROYED);
    group!(h, dec "GPUPM_OOB_HOST_STATE_", gpupm_uapi::regs::oob_host_state: LOADED, NOT_RESPONDING, UNLOADED);
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
    block_registers(h, &r::PART_REGS);
    group!(h, hex "GPUPM_PART_CTRL_", gpupm_uapi::regs::part_ctrl: CTX_PAUSE, TRIG_PAUSE, ULC_PAUSE, ALL);
    group!(h, hex "GPUPM_PART_STATUS_", gpupm_uapi::regs::part_status:
        STATE_MASK, CONFIGURED, LAST_FALLBACK, VM_SWITCH);
    group!(h, dec "GPUPM_HS_STATE_", gpupm_uapi::regs::hs_state:
        IDLE, REQUESTED, CTX_PAUSED, XFER_PAUSED, TRIGGERED, ACKED, COMMITTED, REPOINTED);
    group!(h, hex "GPUPM_RC_CMD_", gpupm_uapi::regs::rc_cmd: COMMIT, REPOINT, ALL);
    block_registers(h, &r::CCU_REGS);
    group!(h, dec "GPUPM_CCU_GROUP_", gpupm_uapi::regs::ccu_group: GPC, MEMORY_SLICE, SYSTEM, SHARED_LANE);
    block_registers(h, &r::VM_REGS);
    group!(h, hex "GPUPM_VM_FLAGS_", gpupm_uapi::regs::vm_flags: CONFIDENTIAL, SESSION);
    block_registers(h, &r::CTX_REGS);
    group!(h, dec "GPUPM_CTX_STATE_", gpupm_uapi::regs::ctx_state: FREE, ACTIVE, DESTROYED);
    group!(h, dec "GPUPM_CTX_CMD_", gpupm_uapi::regs::ctx_cmd: RELEASE);
}
