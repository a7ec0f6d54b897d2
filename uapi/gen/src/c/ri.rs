//! The runtime-instrumentation section of the C header (`uapi/src/ri.rs`
//! and the report-group records of `uapi/src/layout.rs`), kept apart from
//! `gen_c.rs` to keep files small.

use gpupm_uapi::ri as ri_regs;

use super::{block_registers, item_key, module_key, prose, Header};

/// Registers, bits, limits and window layout of the RI control blocks.
pub(super) fn emit_ri(h: &mut Header) {
    h.section(
        "Runtime-instrumentation control blocks and report groups (uapi/src/ri.rs, docs/ri.md)",
        prose::RI,
    );
    block_registers(h, &ri_regs::RI_GLOBAL_REGS);
    h.line("#define GPUPM_RI_PART_VERSION(p) (GPUPM_REG_RI_PART_VERSION + 4 * (uint64_t)(p))");
    h.line("#define GPUPM_RI_PART_MAX_RGS(p) (GPUPM_REG_RI_PART_MAX_RGS + 4 * (uint64_t)(p))");
    group!(h, hex "GPUPM_", gpupm_uapi::ri: RI_BASE, RI_STRIDE);
    group!(h, dec "GPUPM_", gpupm_uapi::ri: RI_BLOCKS);
    h.line("#define GPUPM_RI(i, reg) (GPUPM_RI_BASE + (uint64_t)(i) * GPUPM_RI_STRIDE + (reg))");
    block_registers(h, &ri_regs::RI_REGS);
    group!(h, hex "GPUPM_RI_CTRL_", gpupm_uapi::ri::ri_ctrl: ENABLE, MODE_MASK, RGS_MASK, EMIT,
        ABORT, SUPPRESS_PRIMARY, SUPPRESS_SECONDARY, INTR_ENABLE, WRAP, ALL);
    group!(h, dec "GPUPM_RI_CTRL_", gpupm_uapi::ri::ri_ctrl: MODE_SHIFT, RGS_SHIFT);
    group!(h, dec "GPUPM_RI_MODE_", gpupm_uapi::ri::ri_mode: CYCLE, INSTRUCTION, DIRECTED);
    group!(h, hex "GPUPM_RI_STATUS_", gpupm_uapi::ri::ri_status: ENABLED, STOPPED, HALTED,
        FULL_PENDING, HALT_PENDING);
    group!(h, dec "GPUPM_RI_HALT_", gpupm_uapi::ri::halt_reason: NONE, VERSION, RGS_LIMIT);
    group!(h, dec "GPUPM_RI_", gpupm_uapi::ri: RGS_MAX, COLLECTION_ENTRIES, SF_MIN_CYCLES,
        SF_MIN_INSTRUCTIONS, SF_MAX);
    group!(h, dec "GPUPM_", gpupm_uapi::ri: RI_RECORD_SIZE);
    group!(h, hex "GPUPM_", gpupm_uapi::ri: RI_SPAN, RI_ALIGN, RI_REGION);
    h.line("#define GPUPM_RI_GROUP_BYTES(rgs) (GPUPM_RI_RECORD_SIZE << ((rgs) + 1))");
    h.line("#define GPUPM_RI_SPAN_OFFSET(i) (GPUPM_RI_REGION + (uint64_t)(i) * GPUPM_RI_SPAN)");
    group!(h, hex "GPUPM_RI_RECORD_", gpupm_uapi::layout::ri_record: FILL, BEGIN, TIMESTAMP,
        INSTRUCTION, EMIT, ABORT);
    group!(h, hex "GPUPM_RI_GROUP_FLAGS_", gpupm_uapi::layout::ri_group_flags: SECONDARY,
        STOPPED, HALTED);
    group!(h, hex "GPUPM_RI_SAMPLE_FLAGS_", gpupm_uapi::layout::ri_sample_flags: DIRECTED,
        SECONDARY);
    group!(h, dec "GPUPM_RI_EMIT_SOURCE_", gpupm_uapi::layout::ri_emit_source: REGISTER, MARKER);
}

/// The record structs and the RI ledger query.
pub(super) fn emit_ri_structs(h: &mut Header) {
    h.line("");
    h.structs_referring(
        &[
            "RiBeginRecord",
            "RiTimestampRecord",
            "RiInstructionRecord",
            "RiEmitRecord",
            "RiAbortRecord",
            "RiLedgerQuery",
        ],
        &[],
    );
}

/// Offset-macro checks of the RI helpers.
pub(super) fn ri_offset_checks() -> [(&'static str, u64); 5] {
    [
        (
            "GPUPM_RI(63, GPUPM_REG_RI_COLLECTED)",
            ri_regs::ri(63, ri_regs::RI_COLLECTED),
        ),
        ("GPUPM_RI_SPAN_OFFSET(5)", ri_regs::ri_span_offset(5)),
        ("GPUPM_RI_GROUP_BYTES(7)", ri_regs::group_bytes(7)),
        ("GPUPM_RI_PART_VERSION(15)", ri_regs::ri_part_version(15)),
        ("GPUPM_RI_PART_MAX_RGS(15)", ri_regs::ri_part_max_rgs(15)),
    ]
}
