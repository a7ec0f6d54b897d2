//! The marked-ranges section of the C header (`uapi/src/ranges.rs`), kept
//! apart from `gen_c.rs` to keep files small.

use std::mem::size_of;

use gpupm_uapi::ranges::{self as rg, RangeRecord, RangeSlot};

use super::{block_registers, item_key, module_key, slot_struct, Header};

/// Registers, bits, limits and window layout of the marked ranges.
pub(super) fn emit_ranges(h: &mut Header) {
    h.section(
        "Marked ranges and their record rings (uapi/src/ranges.rs, docs/ranges.md)",
        "",
    );
    group!(h, hex "GPUPM_", gpupm_uapi::ranges: RANGE_BASE, RANGE_STRIDE, RANGE_REG_STRIDE,
        RRING_BASE, RRING_STRIDE);
    group!(h, dec "GPUPM_", gpupm_uapi::ranges: RANGES_PER_PARTITION);
    h.line(
        "#define GPUPM_RANGE(p, i, reg) (GPUPM_RANGE_BASE + (uint64_t)(p) * GPUPM_RANGE_STRIDE + \
         (uint64_t)(i) * GPUPM_RANGE_REG_STRIDE + (reg))",
    );
    h.line("#define GPUPM_RRING(p, reg) (GPUPM_RRING_BASE + (uint64_t)(p) * GPUPM_RRING_STRIDE + (reg))");
    h.line("#define GPUPM_RANGE_CODE_ITEM(kernel, block) (((uint32_t)(kernel) << 16) | (uint32_t)(block))");
    block_registers(h, &rg::RANGE_REGS);
    block_registers(h, &rg::RRING_REGS);
    group!(h, hex "GPUPM_RANGE_CTRL_", gpupm_uapi::ranges::range_ctrl: ENABLE, DATA, EVENT_SHIFT,
        EVENT_MASK, COUNT_IRQ, LATENCY_IRQ, PROGRAM_SHIFT, PROGRAM_MASK, ALL);
    group!(h, dec "GPUPM_RANGE_EVENT_", gpupm_uapi::ranges::range_event: INSTRUCTIONS, CYCLES,
        MEMORY, COUNT);
    group!(h, dec "GPUPM_CROSSING_", gpupm_uapi::ranges::crossing_kind: COUNT, LATENCY);
    group!(h, hex "GPUPM_RANGE_FLAGS_", gpupm_uapi::ranges::range_flags: SECONDARY_CLOCK);
    group!(h, hex "GPUPM_", gpupm_uapi::ranges: RANGE_SPAN, RANGE_REGION, RANGE_RECORD_MAGIC);
    group!(h, dec "GPUPM_", gpupm_uapi::ranges: RRING_MAX_RECORDS, RANGE_STACK_DEPTH,
        RANGE_LEDGER_ROWS, RANGE_LEDGER_SEALED_LEN, CALL_LEDGER_ROWS, CALL_LEDGER_SEALED_LEN);
    group!(h, hex "GPUPM_", gpupm_uapi::intr: RANGE_IRQ_LATENCY, RANGE_IRQ_LOST);
    h.line(
        "#define GPUPM_RANGE_SPAN_OFFSET(p) (GPUPM_RANGE_REGION + (uint64_t)(p) * GPUPM_RANGE_SPAN)",
    );
}

/// The record struct, its slot and the ledger queries.
pub(super) fn emit_ranges_structs(h: &mut Header) {
    h.line("");
    h.structs_referring(
        &[
            "StackEntry",
            "RangeRecord",
            "RangeTruth",
            "RangeLedgerQuery",
            "CallEdge",
            "CallLedgerQuery",
        ],
        &["Envelope"],
    );
    slot_struct(
        h,
        "gpupm_range_slot",
        "range-record ring",
        ("gpupm_range_record", size_of::<RangeRecord>()),
        size_of::<RangeSlot>(),
    );
}

/// Offset-macro checks of the range helpers.
pub(super) fn ranges_offset_checks() -> [(&'static str, u64); 3] {
    [
        (
            "GPUPM_RANGE(3, 7, GPUPM_REG_RANGE_COUNT)",
            rg::range_reg(3, 7, rg::RANGE_COUNT),
        ),
        (
            "GPUPM_RRING(2, GPUPM_REG_RRING_TAIL)",
            rg::rring(2, rg::RRING_TAIL),
        ),
        ("GPUPM_RANGE_SPAN_OFFSET(5)", rg::range_span_offset(5)),
    ]
}
