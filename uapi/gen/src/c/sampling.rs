//! The sampling section of the C header (`uapi/src/sampling.rs` and the
//! per-block debug ledger), kept apart from `gen_c.rs` to keep files small.

use std::mem::size_of;

use gpupm_uapi::regs;
use gpupm_uapi::sampling::{self as s, BranchSlot, BranchStackRecord, PcRecord, PcSlot};

use super::{item_key, module_key, prose, registers_of, slot_struct, Header};

/// Registers (then [`emit_sampling_limits`]) of the sampling units.
pub(super) fn emit_sampling(h: &mut Header) {
    h.section(
        "Sampling units and sample buffers (uapi/src/sampling.rs, docs/sampling.md)",
        prose::SAMPLING,
    );
    h.item(
        "sampling::SAMP_BASE",
        "GPUPM_SAMP_BASE",
        s::SAMP_BASE,
        true,
        "",
    );
    h.item(
        "sampling::SAMP_STRIDE",
        "GPUPM_SAMP_STRIDE",
        s::SAMP_STRIDE,
        true,
        "",
    );
    h.line(
        "#define GPUPM_SAMP(p, reg) (GPUPM_SAMP_BASE + (uint64_t)(p) * GPUPM_SAMP_STRIDE + (reg))",
    );
    registers_of(h, "sampling", s::SAMP_REGS.regs);
    for name in ["SAMP_BUF_BRANCH", "SAMP_BUF_PC", "SAMP_BUF_STRIDE"] {
        let value = match name {
            "SAMP_BUF_BRANCH" => s::SAMP_BUF_BRANCH,
            "SAMP_BUF_PC" => s::SAMP_BUF_PC,
            _ => s::SAMP_BUF_STRIDE,
        };
        h.item(
            &format!("sampling::{name}"),
            &format!("GPUPM_REG_{name}"),
            value,
            true,
            "",
        );
    }
    h.line(
        "/* Buffer register `reg` of buffer `kind` inside a sampling block:\n   \
         GPUPM_SAMP(p, GPUPM_SAMP_BUF(GPUPM_BUF_KIND_PC, GPUPM_REG_BUF_TAIL)). */\n\
         #define GPUPM_SAMP_BUF(kind, reg) \
         (GPUPM_REG_SAMP_BUF_BRANCH + (uint64_t)(kind) * GPUPM_REG_SAMP_BUF_STRIDE + (reg))",
    );
    for set in s::SAMP_REGS.sets {
        registers_of(h, "sampling", set.regs);
    }
    emit_sampling_limits(h);
}

/// Bits, limits and the sample window's layout.
fn emit_sampling_limits(h: &mut Header) {
    group!(h, dec "GPUPM_BUF_KIND_", gpupm_uapi::sampling::buf_kind: BRANCH, PC, COUNT);
    group!(h, hex "GPUPM_SAMP_CTRL_", gpupm_uapi::sampling::samp_ctrl: BRANCH_ENABLE, CYCLE_ENABLE, ALL);
    group!(h, hex "GPUPM_SAMP_STATUS_", gpupm_uapi::sampling::samp_status: CONFIGURED);
    group!(h, hex "GPUPM_LOST_SELECT_", gpupm_uapi::sampling::lost_select: VM, ID_MASK);
    group!(h, hex "GPUPM_SAMPLE_FLAGS_", gpupm_uapi::sampling::sample_flags: SECONDARY_CLOCK);
    group!(h, dec "GPUPM_", gpupm_uapi::sampling: BRANCH_PERIOD_MAX, CYCLE_PERIOD_MIN,
        CYCLE_PERIOD_MAX, DEFAULT_DITHER, DEFAULT_BRANCH_PERIOD, DEFAULT_CYCLE_PERIOD, SKID_CYCLES,
        REFILL_CYCLES, BRANCH_STACK_ENTRIES, CONFIDENTIAL_BRANCH_CYCLES);
    h.item(
        "sampling::DITHER_MAX",
        "GPUPM_SAMP_DITHER_MAX",
        s::DITHER_MAX,
        false,
        "largest R_MAX",
    );
    group!(h, hex "GPUPM_", gpupm_uapi::sampling: BUF_ALIGN, SAMPLE_SPAN, SAMPLE_REGION,
        BRANCH_RECORD_MAGIC, PC_RECORD_MAGIC);
    h.line(
        "#define GPUPM_SAMPLE_SPAN_OFFSET(p) (GPUPM_SAMPLE_REGION + (uint64_t)(p) * GPUPM_SAMPLE_SPAN)",
    );
    group!(h, dec "GPUPM_", gpupm_uapi::ioctl: BLOCK_LEDGER_ROWS, BLOCK_LEDGER_SEALED_LEN);
}

/// The record structs, their slots and the per-block ledger query.
pub(super) fn emit_sampling_structs(h: &mut Header) {
    h.line("");
    h.structs_referring(
        &[
            "BranchEntry",
            "BranchStackRecord",
            "PcRecord",
            "BlockTruth",
            "BlockLedgerQuery",
        ],
        &["Envelope"],
    );
    slot_struct(
        h,
        "gpupm_branch_slot",
        "branch-stack buffer",
        ("gpupm_branch_stack_record", size_of::<BranchStackRecord>()),
        size_of::<BranchSlot>(),
    );
    slot_struct(
        h,
        "gpupm_pc_slot",
        "PC buffer",
        ("gpupm_pc_record", size_of::<PcRecord>()),
        size_of::<PcSlot>(),
    );
}

/// Offset-macro checks of the sampling helpers.
pub(super) fn sampling_offset_checks() -> [(&'static str, u64); 2] {
    [
        (
            "GPUPM_SAMP(3, GPUPM_SAMP_BUF(GPUPM_BUF_KIND_PC, GPUPM_REG_BUF_TAIL))",
            s::samp(3, s::buf(s::buf_kind::PC, s::BUF_TAIL)),
        ),
        ("GPUPM_SAMPLE_SPAN_OFFSET(2)", s::sample_span_offset(2)),
    ]
}

const _: () = assert!(regs::MAX_PARTITION_SLOTS as u64 * s::SAMP_STRIDE <= 0x1000);
