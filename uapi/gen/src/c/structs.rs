//! The struct half of the header: the list of the ABI's structs, their
//! bodies (cbindgen, and the two slot structs it cannot size), and the
//! layout asserts that pin every size, alignment, ioctl size field and
//! offset macro to what Rust computes.

use std::collections::HashMap;
use std::mem::{align_of, size_of};

use cbindgen::{Builder, Config, ItemType, Language, Style};
use gpupm_uapi::cc::{DeviceCert, Finish, KeyExchange};
use gpupm_uapi::commit_wait::WaitCommit;
use gpupm_uapi::events::CATALOGUE;
use gpupm_uapi::intr::InterruptRecord;
use gpupm_uapi::ioctl::{
    self, Advance, BlockLedgerQuery, BlockTruth, Identity, LedgerQuery, RegAccess, RegBatch, RegOp,
    Reset, RiLedgerQuery, WindowRead,
};
use gpupm_uapi::layout::{
    self, Block, BlockSlot, CcuRecord, Envelope, RiAbortRecord, RiBeginRecord, RiEmitRecord,
    RiInstructionRecord, RiTimestampRecord, StreamRecord, StreamSlot,
};
use gpupm_uapi::mirror::{MirrorHeader, MirrorInfo, MirrorRing, MirrorRings};
use gpupm_uapi::page::{Page, PageCounters, PageData, PageHeader, PageReply, PageRequest};
use gpupm_uapi::pmu::{Publish, ScopeTotals, Wanted};
use gpupm_uapi::ranges::{
    CallEdge, CallLedgerQuery, RangeLedgerQuery, RangeRecord, RangeSlot, RangeTruth, StackEntry,
};
use gpupm_uapi::regs;
use gpupm_uapi::sampling::{BranchEntry, BranchSlot, BranchStackRecord, PcRecord, PcSlot};
use gpupm_uapi::tenant::ranges::{
    AddRange, GraphEdge, GraphHeader, KernelSamples, RangeRow, ReadCallEdges, ReadCallKernels,
    ReadCallStacks, ReadRanges, RemoveRange, StackCount,
};
use gpupm_uapi::tenant::{
    CtxEntry, EventInfo, KeyState, ListContexts, OpenSampling, OpenStream, RateSample,
    ReadCounters, ReadInstance, ReadInstanceRates, ReadRates, Rekey, SampleHeader, TenantDelta,
    Whoami,
};
use gpupm_uapi::tenant::{OpenRi, RiEmit, RiGroupHeader, RiResume, RiStatus};

use super::{slot_struct, Header};

/// Rust struct name, C struct tag, size, alignment.
type StructInfo = (&'static str, &'static str, usize, usize);

macro_rules! structs {
    ($($ty:ident => $c:literal),* $(,)?) => {
        [$((stringify!($ty), $c, size_of::<$ty>(), align_of::<$ty>())),*]
    };
}

/// Every `#[repr(C)]` struct of the ABI, in header order.
pub fn all_structs() -> [StructInfo; 83] {
    structs![
        Block => "gpupm_block",
        Envelope => "gpupm_envelope",
        StreamRecord => "gpupm_stream_record",
        CcuRecord => "gpupm_ccu_record",
        InterruptRecord => "gpupm_interrupt_record",
        Identity => "gpupm_identity",
        RegOp => "gpupm_reg_op",
        RegBatch => "gpupm_reg_batch",
        Advance => "gpupm_advance",
        LedgerQuery => "gpupm_ledger_query",
        Reset => "gpupm_reset",
        RegAccess => "gpupm_reg_access",
        WindowRead => "gpupm_window_read",
        BlockSlot => "gpupm_block_slot",
        WaitCommit => "gpupm_wait_commit",
        MirrorHeader => "gpupm_mirror_header",
        MirrorInfo => "gpupm_mirror_info",
        MirrorRings => "gpupm_mirror_rings",
        MirrorRing => "gpupm_mirror_ring",
        StreamSlot => "gpupm_stream_slot",
        Whoami => "gpupm_tenant_whoami",
        CtxEntry => "gpupm_tenant_ctx_entry",
        ListContexts => "gpupm_tenant_list_contexts",
        ReadCounters => "gpupm_tenant_read_counters",
        RateSample => "gpupm_tenant_rate_sample",
        ReadRates => "gpupm_tenant_read_rates",
        OpenStream => "gpupm_tenant_open_stream",
        TenantDelta => "gpupm_tenant_delta",
        EventInfo => "gpupm_tenant_event_info",
        ReadInstance => "gpupm_tenant_read_instance",
        ReadInstanceRates => "gpupm_tenant_read_instance_rates",
        OpenSampling => "gpupm_tenant_open_sampling",
        SampleHeader => "gpupm_tenant_sample_header",
        KeyState => "gpupm_tenant_key_state",
        Rekey => "gpupm_tenant_rekey",
        OpenRi => "gpupm_tenant_open_ri",
        RiEmit => "gpupm_tenant_ri_emit",
        RiStatus => "gpupm_tenant_ri_status",
        RiResume => "gpupm_tenant_ri_resume",
        RiGroupHeader => "gpupm_tenant_ri_group_header",
        ScopeTotals => "gpupm_pmu_scope_totals",
        Publish => "gpupm_pmu_publish",
        Wanted => "gpupm_pmu_wanted",
        PageHeader => "gpupm_page_header",
        PageCounters => "gpupm_page_counters",
        PageData => "gpupm_page_data",
        Page => "gpupm_page",
        PageRequest => "gpupm_page_request",
        PageReply => "gpupm_page_reply",
        BranchEntry => "gpupm_branch_entry",
        BranchStackRecord => "gpupm_branch_stack_record",
        PcRecord => "gpupm_pc_record",
        BranchSlot => "gpupm_branch_slot",
        PcSlot => "gpupm_pc_slot",
        BlockTruth => "gpupm_block_truth",
        BlockLedgerQuery => "gpupm_block_ledger_query",
        RiBeginRecord => "gpupm_ri_begin_record",
        RiTimestampRecord => "gpupm_ri_timestamp_record",
        RiInstructionRecord => "gpupm_ri_instruction_record",
        RiEmitRecord => "gpupm_ri_emit_record",
        RiAbortRecord => "gpupm_ri_abort_record",
        RiLedgerQuery => "gpupm_ri_ledger_query",
        StackEntry => "gpupm_stack_entry",
        RangeRecord => "gpupm_range_record",
        RangeSlot => "gpupm_range_slot",
        RangeTruth => "gpupm_range_truth",
        RangeLedgerQuery => "gpupm_range_ledger_query",
        CallEdge => "gpupm_call_edge",
        CallLedgerQuery => "gpupm_call_ledger_query",
        AddRange => "gpupm_tenant_add_range",
        RangeRow => "gpupm_tenant_range_row",
        ReadRanges => "gpupm_tenant_read_ranges",
        RemoveRange => "gpupm_tenant_remove_range",
        GraphHeader => "gpupm_tenant_graph_header",
        GraphEdge => "gpupm_tenant_graph_edge",
        ReadCallEdges => "gpupm_tenant_read_call_edges",
        KernelSamples => "gpupm_tenant_kernel_samples",
        ReadCallKernels => "gpupm_tenant_read_call_kernels",
        StackCount => "gpupm_tenant_stack_count",
        ReadCallStacks => "gpupm_tenant_read_call_stacks",
        DeviceCert => "gpupm_cc_cert",
        KeyExchange => "gpupm_cc_key_exchange",
        Finish => "gpupm_cc_finish",
    ]
}

/// Struct of each ioctl number.
const IOCTL_STRUCTS: [(&str, &str); 37] = [
    ("GPUPM_IOC_IDENTITY", "gpupm_identity"),
    ("GPUPM_IOC_REG_BATCH", "gpupm_reg_batch"),
    ("GPUPM_IOC_ADVANCE", "gpupm_advance"),
    ("GPUPM_IOC_LEDGER", "gpupm_ledger_query"),
    ("GPUPM_IOC_RESET", "gpupm_reset"),
    ("GPUPM_IOC_REG_READ", "gpupm_reg_access"),
    ("GPUPM_IOC_REG_WRITE", "gpupm_reg_access"),
    ("GPUPM_IOC_LEDGER_BLOCKS", "gpupm_block_ledger_query"),
    ("GPUPM_IOC_LEDGER_RI", "gpupm_ri_ledger_query"),
    ("GPUPM_IOC_LEDGER_RANGES", "gpupm_range_ledger_query"),
    ("GPUPM_IOC_LEDGER_CALLS", "gpupm_call_ledger_query"),
    ("TENANT_IOC_WHOAMI", "gpupm_tenant_whoami"),
    ("TENANT_IOC_LIST_CONTEXTS", "gpupm_tenant_list_contexts"),
    ("TENANT_IOC_READ_COUNTERS", "gpupm_tenant_read_counters"),
    ("TENANT_IOC_READ_RATES", "gpupm_tenant_read_rates"),
    ("TENANT_IOC_OPEN_STREAM", "gpupm_tenant_open_stream"),
    ("TENANT_IOC_EVENT_INFO", "gpupm_tenant_event_info"),
    ("TENANT_IOC_READ_INSTANCE", "gpupm_tenant_read_instance"),
    (
        "TENANT_IOC_READ_INSTANCE_RATES",
        "gpupm_tenant_read_instance_rates",
    ),
    ("TENANT_IOC_OPEN_SAMPLING", "gpupm_tenant_open_sampling"),
    ("TENANT_IOC_KEY_STATE", "gpupm_tenant_key_state"),
    ("TENANT_IOC_REKEY", "gpupm_tenant_rekey"),
    ("TENANT_IOC_OPEN_RI", "gpupm_tenant_open_ri"),
    ("TENANT_IOC_RI_EMIT", "gpupm_tenant_ri_emit"),
    ("TENANT_IOC_RI_STATUS", "gpupm_tenant_ri_status"),
    ("TENANT_IOC_ADD_RANGE", "gpupm_tenant_add_range"),
    ("TENANT_IOC_READ_RANGES", "gpupm_tenant_read_ranges"),
    ("TENANT_IOC_REMOVE_RANGE", "gpupm_tenant_remove_range"),
    ("TENANT_IOC_READ_CALL_EDGES", "gpupm_tenant_read_call_edges"),
    (
        "TENANT_IOC_READ_CALL_KERNELS",
        "gpupm_tenant_read_call_kernels",
    ),
    (
        "TENANT_IOC_READ_CALL_STACKS",
        "gpupm_tenant_read_call_stacks",
    ),
    ("GPUPM_IOC_CC_KEY_EXCHANGE", "gpupm_cc_key_exchange"),
    ("GPUPM_IOC_CC_FINISH", "gpupm_cc_finish"),
    ("TENANT_IOC_CC_KEY_EXCHANGE", "gpupm_cc_key_exchange"),
    ("TENANT_IOC_CC_FINISH", "gpupm_cc_finish"),
    ("GPUPM_PMU_IOC_PUBLISH", "gpupm_pmu_publish"),
    ("GPUPM_PMU_IOC_WANTED", "gpupm_pmu_wanted"),
];

/// Constants that size arrays in struct bodies, by their C names.
const ARRAY_LENGTHS: [(&str, &str); 31] = [
    ("MAX_EVENTS", "GPUPM_MAX_EVENTS"),
    ("MAX_BATCH_OPS", "GPUPM_MAX_BATCH_OPS"),
    ("RECORD_VALUES", "GPUPM_RECORD_VALUES"),
    ("MAX_CALLER_VMS", "GPUPM_TENANT_MAX_CALLER_VMS"),
    ("LIST_PAGE", "GPUPM_TENANT_LIST_PAGE"),
    ("RATE_SAMPLES", "GPUPM_TENANT_RATE_SAMPLES"),
    ("REKEY_NONCE_WORDS", "GPUPM_REKEY_NONCE_WORDS"),
    ("REKEY_KEY_WORDS", "GPUPM_REKEY_KEY_WORDS"),
    ("REKEY_TAG_WORDS", "GPUPM_REKEY_TAG_WORDS"),
    ("PUBLISH_BATCH", "GPUPM_PMU_PUBLISH_BATCH"),
    ("WANTED_WORDS", "GPUPM_PMU_WANTED_WORDS"),
    ("PAGE_TAIL", "GPUPM_PAGE_TAIL"),
    ("BRANCH_STACK_ENTRIES", "GPUPM_BRANCH_STACK_ENTRIES"),
    ("BLOCK_LEDGER_ROWS", "GPUPM_BLOCK_LEDGER_ROWS"),
    ("RANGE_STACK_DEPTH", "GPUPM_RANGE_STACK_DEPTH"),
    ("RANGE_LEDGER_ROWS", "GPUPM_RANGE_LEDGER_ROWS"),
    ("CALL_LEDGER_ROWS", "GPUPM_CALL_LEDGER_ROWS"),
    ("MAX_CONTEXT_RANGES", "GPUPM_TENANT_MAX_CONTEXT_RANGES"),
    ("GRAPH_EDGE_ROWS", "GPUPM_TENANT_GRAPH_EDGE_ROWS"),
    ("GRAPH_KERNEL_ROWS", "GPUPM_TENANT_GRAPH_KERNEL_ROWS"),
    ("GRAPH_STACK_ROWS", "GPUPM_TENANT_GRAPH_STACK_ROWS"),
    ("STACK_FRAMES", "GPUPM_TENANT_STACK_FRAMES"),
    ("WAIT_COMMIT_MAX_BLOCKS", "GPUPM_WAIT_COMMIT_MAX_BLOCKS"),
    ("MIRROR_PATH_MAX", "GPUPM_MIRROR_PATH_MAX"),
    ("CC_NONCE_LEN", "GPUPM_CC_NONCE_LEN"),
    ("CC_SHARE_LEN", "GPUPM_CC_SHARE_LEN"),
    ("CC_PUBLIC_KEY_LEN", "GPUPM_CC_PUBLIC_KEY_LEN"),
    ("CC_SIGNATURE_LEN", "GPUPM_CC_SIGNATURE_LEN"),
    ("CC_VERIFY_LEN", "GPUPM_CC_VERIFY_LEN"),
    ("CC_SERIAL_LEN", "GPUPM_CC_SERIAL_LEN"),
    ("CC_KEY_ID_LEN", "GPUPM_CC_KEY_ID_LEN"),
];

/// Struct bodies of `include` from cbindgen, named by [`all_structs`];
/// `elsewhere` are structs of an earlier pass that these refer to.
fn cbindgen_structs(include: &[&str], elsewhere: &[&str]) -> String {
    let mut cfg = Config {
        language: Language::C,
        style: Style::Tag,
        no_includes: true,
        documentation: true,
        ..Config::default()
    };
    cfg.export.item_types = vec![ItemType::Structs];
    cfg.export.include = include.iter().map(|s| (*s).to_string()).collect();
    // The slot structs cbindgen cannot size (their payload length is a
    // `size_of`), written by `slot_struct`.
    let mut excluded = vec![
        "BlockSlot",
        "StreamSlot",
        "BranchSlot",
        "PcSlot",
        "RangeSlot",
    ];
    excluded.extend_from_slice(elsewhere);
    cfg.export.exclude = excluded.iter().map(|s| (*s).to_string()).collect();
    cfg.export.renaming_overrides_prefixing = true;
    let mut rename: HashMap<String, String> = all_structs()
        .iter()
        .map(|(rust, c, _, _)| ((*rust).to_string(), (*c).to_string()))
        .collect();
    rename.extend(
        ARRAY_LENGTHS
            .iter()
            .map(|(r, c)| ((*r).to_string(), (*c).to_string())),
    );
    // Excluded structs are unknown to cbindgen, so it would not write the
    // `struct` keyword where a field uses them; their C names carry it.
    for slot in excluded {
        let tag = rename
            .get(slot)
            .map(|c| format!("struct {c}"))
            .expect("slot struct named");
        rename.insert(slot.to_string(), tag);
    }
    cfg.export.rename = rename;
    let bindings = Builder::new()
        .with_config(cfg)
        .with_src(concat!(env!("CARGO_MANIFEST_DIR"), "/../src/lib.rs"))
        .generate()
        .expect("cbindgen parses gpupm-uapi");
    let mut out = Vec::new();
    bindings.write(&mut out);
    String::from_utf8(out)
        .expect("cbindgen writes UTF-8")
        .trim()
        .to_string()
}

pub fn emit_structs(h: &mut Header) {
    h.section(
        "ABI structs (bodies generated by cbindgen from the Rust source)",
        "",
    );
    h.structs(&[
        "Block",
        "Envelope",
        "StreamRecord",
        "CcuRecord",
        "InterruptRecord",
        "Identity",
        "RegOp",
        "RegBatch",
        "Advance",
        "LedgerQuery",
        "Reset",
        "RegAccess",
        "WindowRead",
    ]);
    slot_struct(
        h,
        "gpupm_block_slot",
        "block",
        ("gpupm_block", size_of::<Block>()),
        size_of::<BlockSlot>(),
    );
    h.structs(&[
        "WaitCommit",
        "MirrorHeader",
        "MirrorInfo",
        "MirrorRings",
        "MirrorRing",
    ]);
    slot_struct(
        h,
        "gpupm_stream_slot",
        "stream-ring",
        ("gpupm_stream_record", size_of::<StreamRecord>()),
        size_of::<StreamSlot>(),
    );
    h.line("");
    h.structs(&[
        "Whoami",
        "CtxEntry",
        "ListContexts",
        "ReadCounters",
        "RateSample",
        "ReadRates",
        "OpenStream",
        "TenantDelta",
        "EventInfo",
        "ReadInstance",
        "ReadInstanceRates",
        "OpenSampling",
        "SampleHeader",
        "KeyState",
        "Rekey",
        "OpenRi",
        "RiEmit",
        "RiStatus",
        "RiResume",
        "RiGroupHeader",
    ]);
    h.structs(&[
        "AddRange",
        "RangeRow",
        "ReadRanges",
        "RemoveRange",
        "GraphHeader",
        "GraphEdge",
        "KernelSamples",
        "StackCount",
    ]);
    h.structs_referring(
        &["ReadCallEdges", "ReadCallKernels", "ReadCallStacks"],
        &["GraphHeader", "GraphEdge", "KernelSamples", "StackCount"],
    );
    h.line("");
    h.structs(&["ScopeTotals", "Publish", "Wanted"]);
    super::page_c::emit_structs(h);
    super::sampling::emit_sampling_structs(h);
    super::ri::emit_ri_structs(h);
    super::ranges::emit_ranges_structs(h);
    super::cc::emit_cc_structs(h);
}

pub fn emit_asserts(h: &mut Header) {
    h.section(
        "Layout checks: sizes and alignments as Rust computes them",
        "",
    );
    for (_, c, size, align) in all_structs() {
        h.assert(&format!("sizeof(struct {c}) == {size}"));
        h.assert(&format!("GPUPM_ALIGNOF(struct {c}) == {align}"));
    }
    h.line("/* Each ioctl number's size field names its argument struct. */");
    for (name, c) in IOCTL_STRUCTS {
        h.assert(&format!("(({name} >> 16) & 0x3fff) == sizeof(struct {c})"));
    }
    for len in [1, 592, ioctl::WINDOW_READ_MAX] {
        h.assert(&format!(
            "GPUPM_IOC_WINDOW_READ({len}) == {:#x}U",
            ioctl::window_read_cmd(len)
        ));
    }
    h.line("/* Offset macros agree with the Rust helpers. */");
    for (expr, rust) in [
        (
            "GPUPM_PART(3, GPUPM_REG_PART_STATUS)",
            regs::part(3, regs::PART_STATUS),
        ),
        (
            "GPUPM_CCU(5, GPUPM_REG_CCU_RECORDS)",
            regs::ccu(5, regs::CCU_RECORDS),
        ),
        (
            "GPUPM_VM(7, GPUPM_REG_VM_BLOCK)",
            regs::vm(7, regs::VM_BLOCK),
        ),
        (
            "GPUPM_CTX(4095, GPUPM_REG_CTX_CREATED_CYCLE)",
            regs::ctx(4095, regs::CTX_CREATED_CYCLE),
        ),
        ("GPUPM_BLOCK_SLOT_OFFSET(70)", layout::block_slot_offset(70)),
        (
            "GPUPM_STREAM_SLOT_OFFSET(2, 9)",
            layout::stream_slot_offset(2, 9),
        ),
    ]
    .into_iter()
    .chain(super::sampling::sampling_offset_checks())
    .chain(super::ri::ri_offset_checks())
    .chain(super::ranges::ranges_offset_checks())
    {
        h.assert(&format!("{expr} == {rust}ULL"));
    }
    super::page_c::emit_asserts(h);
    let last = CATALOGUE.last().expect("a non-empty catalogue");
    h.assert(&format!(
        "GPUPM_EV_{} + 1 == GPUPM_EVENT_COUNT",
        last.name.to_uppercase()
    ));
}

impl Header {
    /// Struct bodies of `include` from cbindgen, their doc links resolved.
    fn structs(&mut self, include: &[&str]) {
        self.structs_referring(include, &[]);
    }

    /// As [`Header::structs`], for structs whose fields use `elsewhere`,
    /// structs an earlier call already wrote.
    pub fn structs_referring(&mut self, include: &[&str], elsewhere: &[&str]) {
        let text = self
            .names
            .rewrite_in("", &cbindgen_structs(include, elsewhere));
        self.line(&text);
    }
}
