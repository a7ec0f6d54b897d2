//! Prints the C header of the gpupm ABI:
//! `cargo run -p gpupm-uapi --example gen_c > include/gpupm/gpupm_uapi.h`.
//! `uapi/tests/c_header.rs` checks that the committed header matches and
//! that it compiles with its size asserts.
//!
//! Two sources make the header:
//! - **struct bodies** come from cbindgen, which parses this crate's source,
//!   so field names, order, types and doc comments cannot drift from Rust;
//! - **everything else** comes from the hand-written emitter below, with
//!   every value taken from the crate itself: cbindgen cannot evaluate the
//!   ioctl encoding functions or the catalogue macro, flattens the nested-module
//!   constants whose names clash (`scope::VM`, `ledger_scope::VM`,
//!   `regs::ctx_state::ACTIVE`, `tenant::ctx_state::ACTIVE`, the many
//!   `ALL`s), writes `1 << 32` as an `int` shift, and makes the two slot
//!   structs opaque because their payload length is `size_of::<…>()`. Those
//!   two ([`BlockSlot`], [`StreamSlot`]) are emitted by hand between two
//!   cbindgen passes, their lengths from `size_of`.
//!
//! Every struct gets `sizeof`/`alignof` asserts with the numbers Rust
//! computes, every ioctl number an assert that its size field equals its
//! struct's size, and every offset macro an assert against the Rust helper.

use std::collections::HashMap;
use std::mem::{align_of, size_of};

use cbindgen::{Builder, Config, ItemType, Language, Style};
use gpupm_uapi::events::{UnitType, CATALOGUE};
use gpupm_uapi::intr::{self, InterruptRecord};
use gpupm_uapi::ioctl::{
    self, Advance, BlockLedgerQuery, BlockTruth, Identity, LedgerQuery, RegBatch, RegOp, Reset,
};
use gpupm_uapi::layout::{self, Block, BlockSlot, CcuRecord, Envelope, StreamRecord, StreamSlot};
use gpupm_uapi::pmu::{self, Publish, ScopeTotals, Wanted};
use gpupm_uapi::regs;
use gpupm_uapi::sampling::{BranchEntry, BranchSlot, BranchStackRecord, PcRecord, PcSlot};
use gpupm_uapi::tenant::{
    self, CtxEntry, EventInfo, ListContexts, OpenSampling, OpenStream, RateSample, ReadCounters,
    ReadInstance, ReadInstanceRates, ReadRates, SampleHeader, TenantDelta, Whoami,
};

/// Rust struct name, C struct tag, size, alignment.
type StructInfo = (&'static str, &'static str, usize, usize);

macro_rules! structs {
    ($($ty:ident => $c:literal),* $(,)?) => {
        [$((stringify!($ty), $c, size_of::<$ty>(), align_of::<$ty>())),*]
    };
}

/// Every `#[repr(C)]` struct of the ABI, in header order.
fn all_structs() -> [StructInfo; 36] {
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
        BlockSlot => "gpupm_block_slot",
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
        ScopeTotals => "gpupm_pmu_scope_totals",
        Publish => "gpupm_pmu_publish",
        Wanted => "gpupm_pmu_wanted",
        BranchEntry => "gpupm_branch_entry",
        BranchStackRecord => "gpupm_branch_stack_record",
        PcRecord => "gpupm_pc_record",
        BranchSlot => "gpupm_branch_slot",
        PcSlot => "gpupm_pc_slot",
        BlockTruth => "gpupm_block_truth",
        BlockLedgerQuery => "gpupm_block_ledger_query",
    ]
}

/// Struct of each ioctl number.
const IOCTL_STRUCTS: [(&str, &str); 17] = [
    ("GPUPM_IOC_LEDGER_BLOCKS", "gpupm_block_ledger_query"),
    ("GPUPM_IOC_IDENTITY", "gpupm_identity"),
    ("GPUPM_IOC_REG_BATCH", "gpupm_reg_batch"),
    ("GPUPM_IOC_ADVANCE", "gpupm_advance"),
    ("GPUPM_IOC_LEDGER", "gpupm_ledger_query"),
    ("GPUPM_IOC_RESET", "gpupm_reset"),
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
    ("GPUPM_PMU_IOC_PUBLISH", "gpupm_pmu_publish"),
    ("GPUPM_PMU_IOC_WANTED", "gpupm_pmu_wanted"),
];

/// Constants that size arrays in struct bodies, by their C names.
const ARRAY_LENGTHS: [(&str, &str); 10] = [
    ("BRANCH_STACK_ENTRIES", "GPUPM_BRANCH_STACK_ENTRIES"),
    ("BLOCK_LEDGER_ROWS", "GPUPM_BLOCK_LEDGER_ROWS"),
    ("MAX_EVENTS", "GPUPM_MAX_EVENTS"),
    ("MAX_BATCH_OPS", "GPUPM_MAX_BATCH_OPS"),
    ("RECORD_VALUES", "GPUPM_RECORD_VALUES"),
    ("MAX_CALLER_VMS", "GPUPM_TENANT_MAX_CALLER_VMS"),
    ("LIST_PAGE", "GPUPM_TENANT_LIST_PAGE"),
    ("RATE_SAMPLES", "GPUPM_TENANT_RATE_SAMPLES"),
    ("PUBLISH_BATCH", "GPUPM_PMU_PUBLISH_BATCH"),
    ("WANTED_WORDS", "GPUPM_PMU_WANTED_WORDS"),
];

/// An integer constant of any width.
trait Num: Copy {
    fn wide(self) -> u64;
}
macro_rules! num {
    ($($t:ty),*) => { $(impl Num for $t { fn wide(self) -> u64 { self as u64 } })* };
}
num!(u8, u16, u32, u64, usize);

/// The header being written.
struct Header(String);

impl Header {
    fn line(&mut self, text: &str) {
        self.0.push_str(text);
        self.0.push('\n');
    }

    fn section(&mut self, title: &str) {
        self.line(&format!("\n/* {title} */\n"));
    }

    /// `#define name value`, hex or decimal, suffixed when it does not fit an `int`.
    fn define(&mut self, name: &str, v: impl Num, hex: bool, note: &str) {
        let v = v.wide();
        let suffix = match v {
            0..=0x7fff_ffff => "",
            0x8000_0000..=0xffff_ffff => "U",
            _ => "ULL",
        };
        let body = if hex {
            format!("{v:#x}{suffix}")
        } else {
            format!("{v}{suffix}")
        };
        let note = if note.is_empty() {
            String::new()
        } else {
            format!(" /* {note} */")
        };
        self.line(&format!("#define {name} {body}{note}"));
    }

    fn assert(&mut self, cond: &str) {
        self.line(&format!("GPUPM_STATIC_ASSERT({cond});"));
    }
}

/// Defines each listed constant of module `$m` as `$prefix NAME`.
macro_rules! group {
    ($h:expr, $fmt:ident $prefix:literal, $($m:ident)::+ : $($name:ident),+ $(,)?) => {{
        use $($m)::+ as m;
        $( $h.define(concat!($prefix, stringify!($name)), m::$name, group!(@hex $fmt), ""); )+
    }};
    (@hex hex) => { true };
    (@hex dec) => { false };
}

/// Register offsets, with a note on the 64-bit ones; `base` places a
/// per-instance offset inside the array for [`regs::is_64bit`].
fn registers_named(h: &mut Header, base: u64, regs: &[(&str, u64)]) {
    for &(name, off) in regs {
        let wide = if regs::is_64bit(base + off) {
            "64-bit"
        } else {
            ""
        };
        h.define(&format!("GPUPM_REG_{name}"), off, true, wide);
    }
}

use registers_named as registers;

#[path = "gen_c_parts/sampling.rs"]
mod sampling;

macro_rules! offsets {
    ($($name:ident),+ $(,)?) => { [$((stringify!($name), regs::$name)),+] };
}

fn emit_regs(h: &mut Header) {
    use gpupm_uapi::regs as r;
    h.section("BAR0 register map (uapi/src/regs.rs): offsets, bits, per-instance blocks");
    h.define("GPUPM_BAR0_SIZE", r::BAR0_SIZE, true, "");
    h.define("GPUPM_DEVICE_MAGIC", r::DEVICE_MAGIC, true, "\"gPMU\"");
    h.define("GPUPM_RESET_MAGIC", r::RESET_MAGIC, true, "");
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

    h.line(
        "\n/* Per-instance blocks: GPUPM_PART(p, GPUPM_REG_PART_STATUS) etc. (slot 0 = system). */",
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
        h.define(&format!("GPUPM_{unit}_BASE"), base, true, "");
        h.define(&format!("GPUPM_{unit}_STRIDE"), stride, true, "");
        h.define(&format!("GPUPM_{max_name}"), max, false, "");
        h.line(&format!(
            "#define GPUPM_{unit}(i, reg) (GPUPM_{unit}_BASE + (uint64_t)(i) * GPUPM_{unit}_STRIDE + (reg))"
        ));
    }
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
    group!(h, hex "GPUPM_VM_FLAGS_", gpupm_uapi::regs::vm_flags: CONFIDENTIAL);
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

fn emit_events_and_intr(h: &mut Header) {
    h.section("Event catalogue (uapi/src/events.rs): ids index every counter array");
    group!(h, dec "GPUPM_", gpupm_uapi::events: MAX_EVENTS, MAX_ULC_COUNTERS, MAX_CCU_ULCS, EVENT_COUNT, MULTIBIT_SCALE);
    for t in UnitType::ALL {
        h.define(
            &format!("GPUPM_UNIT_{}", t.name().to_uppercase()),
            t as u8,
            false,
            "",
        );
    }
    for e in CATALOGUE {
        let note = format!(
            "{}{}",
            e.measure,
            if e.multibit { ", multi-bit" } else { "" }
        );
        h.define(
            &format!("GPUPM_EV_{}", e.name.to_uppercase()),
            e.id,
            false,
            &note,
        );
    }
    h.line("\n/* Event names indexed by id (the names `gpupm stat -e` takes). */");
    h.line("static const char *const gpupm_event_names[GPUPM_EVENT_COUNT] = {");
    for e in CATALOGUE {
        h.line(&format!("    \"{}\",", e.name));
    }
    h.line("};");

    h.section("Interrupt sources (uapi/src/intr.rs)");
    for (bit, name) in intr::SOURCE_NAMES.iter().enumerate() {
        h.define(
            &format!("GPUPM_INTR_{}", name.to_uppercase()),
            1u32 << bit,
            true,
            "",
        );
    }
    h.define("GPUPM_INTR_ALL", intr::source::ALL, true, "");
    h.line("\n/* Source names indexed by bit number. */");
    h.line(&format!(
        "static const char *const gpupm_intr_source_names[{}] = {{",
        intr::SOURCE_NAMES.len()
    ));
    for name in intr::SOURCE_NAMES {
        h.line(&format!("    \"{name}\","));
    }
    h.line("};");
}

fn emit_layout(h: &mut Header) {
    h.section("Memory window layouts (uapi/src/layout.rs)");
    group!(h, hex "GPUPM_", gpupm_uapi::layout: MEM_WINDOW_OFFSET, STREAM_REGION, STREAM_RING_SPAN, BLOCK_MAGIC, RECORD_MAGIC);
    group!(h, dec "GPUPM_", gpupm_uapi::layout:
        BLOCK_SLOT_SIZE, SYSTEM_BLOCK_SLOT, VM_BLOCK_SLOT_BASE, CTX_BLOCK_SLOT_BASE, CTX_BLOCK_SLOTS,
        STREAM_RING_MAX, STREAM_SLOT_SIZE, ENVELOPE_AAD_LEN, RECORD_VALUES);
    h.line(&format!(
        "#define GPUPM_SESSION_KEY_INFO \"{}\" /* HKDF-SHA256 info prefix of a session key */",
        String::from_utf8_lossy(layout::SESSION_KEY_INFO)
    ));
    h.line("#define GPUPM_BLOCK_SLOT_OFFSET(slot) ((uint64_t)(slot) * GPUPM_BLOCK_SLOT_SIZE)");
    h.line(
        "#define GPUPM_STREAM_SLOT_OFFSET(p, i) \
         (GPUPM_STREAM_REGION + (uint64_t)(p) * GPUPM_STREAM_RING_SPAN + (uint64_t)(i) * GPUPM_STREAM_SLOT_SIZE)",
    );
    group!(h, dec "GPUPM_BLOCK_KIND_", gpupm_uapi::layout::block_kind: SYSTEM, VM, CONTEXT);
    group!(h, hex "GPUPM_ENVELOPE_FLAGS_", gpupm_uapi::layout::envelope_flags: VALID, ENCRYPTED);
    group!(h, hex "GPUPM_RECORD_FLAGS_", gpupm_uapi::layout::record_flags: SWITCH, FALLBACK, SECONDARY_CLOCK, THRESHOLD);
    group!(h, hex "GPUPM_CCU_RECORD_FLAGS_", gpupm_uapi::layout::ccu_record_flags: FLUSH_ACK);
}

fn emit_ioctls(h: &mut Header) {
    h.section("Device node ioctls (uapi/src/ioctl.rs)");
    h.define("GPUPM_IOC_MAGIC", ioctl::IOC_MAGIC, true, "'G'");
    group!(h, dec "GPUPM_", gpupm_uapi::ioctl: IOCTL_STRUCT_VERSION, MAX_IOCTL_SIZE, MAX_BATCH_OPS);
    group!(h, hex "GPUPM_", gpupm_uapi::ioctl: MAX_ADVANCE_CYCLES);
    group!(h, dec "GPUPM_REG_OP_", gpupm_uapi::ioctl::reg_op: READ, WRITE);
    group!(h, dec "GPUPM_LEDGER_SCOPE_", gpupm_uapi::ioctl::ledger_scope: CONTEXT, VM, SYSTEM);
    group!(h, hex "GPUPM_LEDGER_FLAGS_", gpupm_uapi::ioctl::ledger_flags: SEALED);
    group!(h, dec "GPUPM_", gpupm_uapi::ioctl: LEDGER_SEALED_LEN);
    for &(name, cmd) in ioctl::DEVICE_IOCTLS {
        h.define(name, cmd, true, "");
    }

    h.section("Tenant node ioctls (uapi/src/tenant.rs)");
    h.define(
        "GPUPM_TENANT_IOC_MAGIC",
        tenant::TENANT_IOC_MAGIC,
        true,
        "'T'",
    );
    h.define(
        "GPUPM_TENANT_STRUCT_VERSION",
        tenant::TENANT_STRUCT_VERSION,
        false,
        "",
    );
    group!(h, dec "GPUPM_TENANT_", gpupm_uapi::tenant: MAX_CALLER_VMS, LIST_PAGE, RATE_SAMPLES);
    group!(h, dec "GPUPM_TENANT_SCOPE_", gpupm_uapi::tenant::scope: CONTEXT, VM, SYSTEM);
    group!(h, dec "GPUPM_TENANT_CTX_STATE_", gpupm_uapi::tenant::ctx_state: ACTIVE, DESTROYED, RETIRED);
    group!(h, hex "GPUPM_TENANT_COUNTER_FLAGS_", gpupm_uapi::tenant::counter_flags: SEALED);
    group!(h, hex "GPUPM_TENANT_INSTANCE_FLAGS_", gpupm_uapi::tenant::instance_flags: LATEST, ALL);
    group!(h, hex "GPUPM_TENANT_SAMPLE_KIND_", gpupm_uapi::tenant::sampling::sample_kind: BRANCH_STACK, CYCLE, ALL);
    group!(h, hex "GPUPM_TENANT_SAMPLE_FLAGS_", gpupm_uapi::tenant::sampling::sample_flags: SEALED);
    group!(h, dec "GPUPM_TENANT_", gpupm_uapi::tenant::sampling: MIN_SAMPLE_PERIOD, MAX_SAMPLE_PERIOD, MAX_SAMPLE_DITHER, MAX_BRANCH_EVERY, DEFAULT_SESSION_RECORDS, MAX_SESSION_RECORDS);
    for &(name, cmd) in tenant::TENANT_IOCTLS {
        h.define(name, cmd, true, "");
    }
    emit_pmu(h);
}

fn emit_pmu(h: &mut Header) {
    h.section("Perf PMU module: event config fields and the publication device (uapi/src/pmu.rs)");
    h.line(&format!("#define GPUPM_PMU_NAME \"{}\"", pmu::PMU_NAME));
    h.line(&format!(
        "#define GPUPM_PMU_PUBLISH_DEVICE \"{}\"",
        pmu::PUBLISH_DEVICE
    ));
    for f in pmu::FIELDS {
        let word = if f.word == 0 { "config" } else { "config1" };
        h.line(&format!(
            "#define GPUPM_PMU_FIELD_{}(attr) (((attr)->{word} >> {}) & {:#x}ULL) /* {} */",
            f.name.to_uppercase(),
            f.shift,
            (1u64 << f.bits) - 1,
            f.sysfs()
        ));
    }
    group!(h, hex "GPUPM_PMU_", gpupm_uapi::pmu: CONFIG_USED, CONFIG1_USED);
    group!(h, dec "GPUPM_PMU_SCOPE_", gpupm_uapi::pmu::scope: IMPLIED, CONTEXT, VM, SYSTEM);
    h.define("GPUPM_PMU_IOC_MAGIC", pmu::PMU_IOC_MAGIC, true, "'P'");
    group!(h, dec "GPUPM_", gpupm_uapi::pmu: PMU_STRUCT_VERSION);
    group!(h, dec "GPUPM_PMU_", gpupm_uapi::pmu: PUBLISH_BATCH, WANTED_WORDS);
    for &(name, cmd) in pmu::PMU_IOCTLS {
        h.define(name, cmd, true, "");
    }
}

/// The slot structs cbindgen cannot size (their payload length is a `size_of`).
const SLOT_STRUCTS: [&str; 4] = ["BlockSlot", "StreamSlot", "BranchSlot", "PcSlot"];

/// Struct bodies of `include` from cbindgen, named by [`all_structs`].
fn cbindgen_structs(include: &[&str]) -> String {
    cbindgen_structs_after(include, &[])
}

/// Like [`cbindgen_structs`], for structs that use `emitted`, which an
/// earlier pass already wrote.
fn cbindgen_structs_after(include: &[&str], emitted: &[&str]) -> String {
    let mut cfg = Config {
        language: Language::C,
        style: Style::Tag,
        no_includes: true,
        documentation: true,
        ..Config::default()
    };
    cfg.export.item_types = vec![ItemType::Structs];
    cfg.export.include = include.iter().map(|s| (*s).to_string()).collect();
    cfg.export.exclude = SLOT_STRUCTS
        .iter()
        .chain(emitted)
        .map(|s| (*s).to_string())
        .collect();
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
    // The excluded slot structs are unknown to cbindgen, so it would not
    // write the `struct` keyword where a field uses them; their C names
    // carry it.
    for slot in SLOT_STRUCTS.iter().chain(emitted) {
        let tag = rename
            .get(*slot)
            .map(|c| format!("struct {c}"))
            .expect("slot struct named");
        rename.insert((*slot).to_string(), tag);
    }
    cfg.export.rename = rename;
    let bindings = Builder::new()
        .with_config(cfg)
        .with_src(concat!(env!("CARGO_MANIFEST_DIR"), "/src/lib.rs"))
        .generate()
        .expect("cbindgen parses gpupm-uapi");
    let mut out = Vec::new();
    bindings.write(&mut out);
    String::from_utf8(out)
        .expect("cbindgen writes UTF-8")
        .trim()
        .to_string()
}

/// The two slot structs cbindgen cannot size.
fn slot_struct(h: &mut Header, c: &str, what: &str, payload: (&str, usize), total: usize) {
    let tag = total - size_of::<Envelope>() - payload.1;
    h.line(&format!(
        "\n/**\n * A {what} slot in the memory window: envelope, {} bytes (ciphertext when\n \
         * encrypted), GCM tag (0 when not encrypted).\n */\nstruct {c} {{\n  struct gpupm_envelope envelope;\n  \
         uint8_t payload[{}]; /* sizeof(struct {}) */\n  uint8_t tag[{tag}];\n}};",
        payload.0, payload.1, payload.0
    ));
    h.assert(&format!(
        "sizeof(((struct {c} *)0)->payload) == sizeof(struct {})",
        payload.0
    ));
}

fn emit_structs(h: &mut Header) {
    h.section("ABI structs (bodies generated by cbindgen from the Rust source)");
    h.line(&cbindgen_structs(&[
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
    ]));
    slot_struct(
        h,
        "gpupm_block_slot",
        "block",
        ("gpupm_block", size_of::<Block>()),
        size_of::<BlockSlot>(),
    );
    slot_struct(
        h,
        "gpupm_stream_slot",
        "stream-ring",
        ("gpupm_stream_record", size_of::<StreamRecord>()),
        size_of::<StreamSlot>(),
    );
    h.line("");
    h.line(&cbindgen_structs(&[
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
    ]));
    h.line("");
    h.line(&cbindgen_structs(&["ScopeTotals", "Publish", "Wanted"]));
    sampling::emit_sampling_structs(h);
}

fn emit_asserts(h: &mut Header) {
    h.section("Layout checks: sizes and alignments as Rust computes them");
    for (_, c, size, align) in all_structs() {
        h.assert(&format!("sizeof(struct {c}) == {size}"));
        h.assert(&format!("GPUPM_ALIGNOF(struct {c}) == {align}"));
    }
    h.line("/* Each ioctl number's size field names its argument struct. */");
    for (name, c) in IOCTL_STRUCTS {
        h.assert(&format!("(({name} >> 16) & 0x3fff) == sizeof(struct {c})"));
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
    .chain(sampling::sampling_offset_checks())
    {
        h.assert(&format!("{expr} == {rust}ULL"));
    }
    let last = CATALOGUE.last().expect("a non-empty catalogue");
    h.assert(&format!(
        "GPUPM_EV_{} + 1 == GPUPM_EVENT_COUNT",
        last.name.to_uppercase()
    ));
}

/// The header's text.
pub fn render() -> String {
    let mut h = Header(String::new());
    h.line(
        "/* SPDX-License-Identifier: Apache-2.0 */\n\
         /*\n \
         * gpupm ABI: BAR0 registers, event catalogue, memory-window layouts, and\n \
         * the ioctls of the device node and of the tenant node.\n \
         *\n \
         * Generated from the gpupm-uapi crate by\n \
         * `cargo run -p gpupm-uapi --example gen_c > include/gpupm/gpupm_uapi.h`;\n \
         * do not edit. The Rust source (uapi/src) documents every item.\n \
         *\n \
         * All structs are little-endian, naturally aligned and explicitly padded;\n \
         * every ioctl struct starts with a version field that must be set.\n \
         */\n\
         #ifndef GPUPM_UAPI_H\n\
         #define GPUPM_UAPI_H\n\n\
         #include <stdint.h>\n\n\
         #if defined(__cplusplus)\n\
         #define GPUPM_STATIC_ASSERT(cond) static_assert(cond, #cond)\n\
         #define GPUPM_ALIGNOF(t) alignof(t)\n\
         #else\n\
         #define GPUPM_STATIC_ASSERT(cond) _Static_assert(cond, #cond)\n\
         #define GPUPM_ALIGNOF(t) _Alignof(t)\n\
         #endif",
    );
    h.section(
        "ABI version (uapi/src/lib.rs): the ABI_VERSION register and GPUPM_IOC_IDENTITY report it",
    );
    group!(h, dec "GPUPM_", gpupm_uapi: ABI_MAJOR, ABI_MINOR);
    h.define(
        "GPUPM_ABI_VERSION",
        gpupm_uapi::ABI_VERSION,
        true,
        "major << 16 | minor",
    );
    emit_regs(&mut h);
    emit_events_and_intr(&mut h);
    emit_layout(&mut h);
    emit_ioctls(&mut h);
    sampling::emit_sampling(&mut h);
    emit_structs(&mut h);
    emit_asserts(&mut h);
    h.line("\n#endif /* GPUPM_UAPI_H */");
    h.0
}

#[allow(dead_code)]
fn main() {
    print!("{}", render());
}
