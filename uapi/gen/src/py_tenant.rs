//! Prints the Python constants module of the tenant-node ABI:
//! `cargo run -p gpupm-uapi --example gen_py_tenant > examples/python/gpupm_tenant.py`.
//! `uapi/tests/py_tenant_consts.rs` checks that the committed file matches.
//!
//! Besides the numbers it gives the size of every tenant struct and the
//! offset of every field (from `offset_of!`), so a Python client packs and
//! unpacks with `struct.pack_into`/`unpack_from` at offsets Rust computed.

use std::fmt::Write;
use std::mem::{offset_of, size_of};

use gpupm_uapi::cc::{DeviceCert, Finish, KeyExchange};
use gpupm_uapi::events::{CATALOGUE, EVENT_COUNT, MAX_EVENTS};
use gpupm_uapi::page::{
    self, page_flags, page_request_flags, page_state, Page, PageCounters, PageData, PageHeader,
    PageReply, PageRequest,
};
use gpupm_uapi::sampling::PcRecord;
use gpupm_uapi::tenant::ranges::{
    range_kind, range_row_flags, range_trigger, AddRange, GraphEdge, GraphHeader, KernelSamples,
    RangeRow, ReadCallEdges, ReadCallKernels, ReadCallStacks, ReadRanges, RemoveRange, StackCount,
};
use gpupm_uapi::tenant::ri::{
    ri_controls, ri_entry, ri_session_mode, ri_state, OpenRi, RiEmit, RiGroupHeader, RiResume,
    RiStatus,
};
use gpupm_uapi::tenant::sampling::{
    self as ts, sample_flags, sample_kind, OpenSampling, SampleHeader,
};
use gpupm_uapi::tenant::{
    self, counter_flags, ctx_state, instance_flags, key_flags, scope, CtxEntry, EventInfo,
    KeyState, ListContexts, OpenStream, RateSample, ReadCounters, ReadInstance, ReadInstanceRates,
    ReadRates, Rekey, TenantDelta, Whoami,
};

/// `SIZEOF_<STRUCT>` and `OFF_<STRUCT>_<FIELD>` lines.
macro_rules! layout {
    ($s:expr, $($ty:ident => $py:literal: $($f:ident),+;)*) => {$(
        writeln!($s, "SIZEOF_{} = {}", $py, size_of::<$ty>()).expect("write to String");
        $( writeln!($s, "OFF_{}_{} = {}", $py, stringify!($f).to_uppercase(), offset_of!($ty, $f))
            .expect("write to String"); )+
    )*};
}

/// The generated module's text.
pub fn render() -> String {
    let mut s = String::from(
        "# Generated from the gpupm-uapi crate by\n\
         # `cargo run -p gpupm-uapi --example gen_py_tenant > examples/python/gpupm_tenant.py`;\n\
         # do not edit. The tenant-node ABI (uapi/src/tenant.rs): ioctl numbers,\n\
         # struct sizes and field offsets (all fields little-endian); and the\n\
         # tenant pages (uapi/src/page.rs): page layout, socket messages.\n\n",
    );
    let mut c = |name: &str, v: u64| writeln!(s, "{name} = {v:#x}").expect("write to String");
    c("ABI_VERSION", u64::from(gpupm_uapi::ABI_VERSION));
    c(
        "TENANT_STRUCT_VERSION",
        u64::from(tenant::TENANT_STRUCT_VERSION),
    );
    for &(name, cmd) in tenant::TENANT_IOCTLS {
        c(name, u64::from(cmd));
    }
    for (name, v) in [
        ("SCOPE_CONTEXT", scope::CONTEXT),
        ("SCOPE_VM", scope::VM),
        ("SCOPE_SYSTEM", scope::SYSTEM),
        ("CTX_STATE_ACTIVE", ctx_state::ACTIVE),
        ("CTX_STATE_DESTROYED", ctx_state::DESTROYED),
        ("CTX_STATE_RETIRED", ctx_state::RETIRED),
        ("COUNTER_FLAGS_SEALED", counter_flags::SEALED),
        ("INSTANCE_FLAGS_LATEST", instance_flags::LATEST),
        ("KEY_FLAGS_CONFIDENTIAL", key_flags::CONFIDENTIAL),
        ("KEY_FLAGS_SESSION", key_flags::SESSION),
        (
            "CC_FINISH_FLAGS_REPLACE",
            gpupm_uapi::cc::finish_flags::REPLACE,
        ),
        ("CC_CERT_MAGIC", gpupm_uapi::cc::CC_CERT_MAGIC),
        ("PAGE_MAGIC", page::PAGE_MAGIC),
        ("PAGE_VERSION", page::PAGE_VERSION),
        ("PAGE_STRUCT_VERSION", page::PAGE_STRUCT_VERSION),
        ("PAGE_READ_SPINS", page::PAGE_READ_SPINS),
        ("PAGE_BUSY_MS", page::PAGE_BUSY_MS),
        ("PAGE_STATE_ACTIVE", page_state::ACTIVE),
        ("PAGE_STATE_DESTROYED", page_state::DESTROYED),
        ("PAGE_STATE_RETIRED", page_state::RETIRED),
        ("PAGE_STATE_WITHDRAWN", page_state::WITHDRAWN),
        ("PAGE_FLAGS_SEALED", page_flags::SEALED),
        ("PAGE_FLAGS_RATE", page_flags::RATE),
        ("PAGE_FLAGS_SEALED_RATE", page_flags::SEALED_RATE),
        ("PAGE_REQUEST_FLAGS_LATEST", page_request_flags::LATEST),
        (
            "SAMPLE_KIND_BRANCH_STACK",
            u32::from(sample_kind::BRANCH_STACK),
        ),
        ("SAMPLE_KIND_CYCLE", u32::from(sample_kind::CYCLE)),
        ("SAMPLE_FLAGS_SEALED", u32::from(sample_flags::SEALED)),
        ("PC_RECORD_MAGIC", gpupm_uapi::sampling::PC_RECORD_MAGIC),
        ("RI_MODE_CYCLE", ri_session_mode::CYCLE),
        ("RI_MODE_INSTRUCTION", ri_session_mode::INSTRUCTION),
        ("RI_MODE_DIRECTED", ri_session_mode::DIRECTED),
        ("RI_CONTROLS_EMIT", ri_controls::EMIT),
        ("RI_CONTROLS_ABORT", ri_controls::ABORT),
        (
            "RI_CONTROLS_SUPPRESS_PRIMARY",
            ri_controls::SUPPRESS_PRIMARY,
        ),
        (
            "RI_CONTROLS_SUPPRESS_SECONDARY",
            ri_controls::SUPPRESS_SECONDARY,
        ),
        ("RI_STATE_ENABLED", ri_state::ENABLED),
        ("RI_STATE_HALTED", ri_state::HALTED),
        ("RI_STATE_ENDED", ri_state::ENDED),
        ("RI_ENTRY_GROUP", u32::from(ri_entry::GROUP)),
        ("RI_ENTRY_HALT", u32::from(ri_entry::HALT)),
        ("RANGE_KIND_CODE", range_kind::CODE),
        ("RANGE_KIND_DATA", range_kind::DATA),
        ("RANGE_TRIGGER_NONE", range_trigger::NONE),
        ("RANGE_TRIGGER_COUNT", range_trigger::COUNT),
        ("RANGE_TRIGGER_LATENCY", range_trigger::LATENCY),
        (
            "RANGE_ROW_FLAGS_INEXACT",
            u32::from(range_row_flags::INEXACT),
        ),
    ] {
        c(name, u64::from(v));
    }
    for (name, v) in [
        ("MAX_EVENTS", MAX_EVENTS),
        ("EVENT_COUNT", EVENT_COUNT),
        ("MAX_CALLER_VMS", tenant::MAX_CALLER_VMS),
        ("LIST_PAGE", tenant::LIST_PAGE),
        ("RATE_SAMPLES", tenant::RATE_SAMPLES),
        ("PAGE_SIZE", page::PAGE_SIZE),
        ("MIN_SAMPLE_PERIOD", ts::MIN_SAMPLE_PERIOD as usize),
        ("MAX_SAMPLE_DITHER", ts::MAX_SAMPLE_DITHER as usize),
    ] {
        writeln!(s, "{name} = {v}").expect("write to String");
    }
    writeln!(s, "DEFAULT_PAGES_SOCKET = {:?}", page::DEFAULT_PAGES_SOCKET)
        .expect("write to String");
    cc_constants(&mut s);
    s.push_str(
        "\n# Event names indexed by id (the names `gpupm stat -e` takes).\nEVENT_NAMES = (\n",
    );
    for e in CATALOGUE {
        writeln!(s, "    {:?},", e.name).expect("write to String");
    }
    s.push_str(")\n\n");
    struct_layouts(&mut s);
    record_and_graph_constants(&mut s);
    s
}

/// The key exchange's labels and the vendor root key, as Python bytes
/// (docs/confidential.md, "Establishing a session").
fn cc_constants(s: &mut String) {
    use gpupm_uapi::cc as c;
    for (name, bytes) in [
        ("CC_CERT_CONTEXT", c::CC_CERT_CONTEXT),
        ("CC_TRANSCRIPT_LABEL", c::CC_TRANSCRIPT_LABEL),
        ("CC_SIGNATURE_CONTEXT", c::CC_SIGNATURE_CONTEXT),
        ("CC_EXTRACT_SALT", c::CC_EXTRACT_SALT),
        ("CC_RSP_FINISHED_INFO", c::CC_RSP_FINISHED_INFO),
        ("CC_REQ_FINISHED_INFO", c::CC_REQ_FINISHED_INFO),
        ("CC_VM_KEY_INFO", c::CC_VM_KEY_INFO),
        ("CC_REPLACE_LABEL", c::CC_REPLACE_LABEL),
        ("SESSION_KEY_INFO", gpupm_uapi::layout::SESSION_KEY_INFO),
    ] {
        writeln!(s, "{name} = b{:?}", String::from_utf8_lossy(bytes)).expect("write to String");
    }
    let hex: String = c::CC_VENDOR_ROOT_KEY
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    writeln!(s, "CC_VENDOR_ROOT_KEY = bytes.fromhex({hex:?})").expect("write to String");
}

/// Size and field offsets of every tenant struct and page part.
fn struct_layouts(s: &mut String) {
    layout! { s,
        Whoami => "WHOAMI": version, admin, uid, n_vms, vms;
        CtxEntry => "CTX_ENTRY": ctx, state, created_cycle;
        ListContexts => "LIST_CONTEXTS": version, vm, offset, count, total, reserved, ctxs;
        ReadCounters => "READ_COUNTERS": version, scope, id, n_events, events, flags, reserved,
            commit_seq, cycle, values, sealed;
        RateSample => "RATE_SAMPLE": start_cycle, end_cycle, flags, ctx, deltas;
        ReadRates => "READ_RATES": version, scope, id, max, count, flags, clock_khz, reserved,
            samples;
        OpenStream => "OPEN_STREAM": version, scope, id, flags;
        TenantDelta => "TENANT_DELTA": seq, lost_before, slot;
        EventInfo => "EVENT_INFO": version, id, unit_type, multibit, scope, reserved, reserved2,
            name, measure, description;
        ReadInstance => "READ_INSTANCE": version, scope, id, flags, created_cycle, n_events,
            reserved, events, state, out_flags, vm, reserved2, commit_seq, cycle, values, sealed;
        ReadInstanceRates => "READ_INSTANCE_RATES": version, scope, id, flags, created_cycle, max,
            reserved, count, out_flags, clock_khz, reserved2, samples;
        KeyState => "KEY_STATE": version, vm, flags, key_epoch, session, reserved;
        Rekey => "REKEY": version, vm, flags, reserved, nonce, sealed_key, tag;
        DeviceCert => "CC_CERT": magic, version, algorithm, serial, device_key, vendor_key_id,
            signature;
        KeyExchange => "CC_KEY_EXCHANGE": version, vm, flags, reserved, requester_nonce,
            requester_share, session, responder_nonce, responder_share, cert, signature,
            responder_verify;
        Finish => "CC_FINISH": version, vm, flags, reserved, session, requester_verify,
            replace_proof, key_epoch, reserved2;
        PageHeader => "PAGE_HEADER": magic, version, size, scope, id, vm, created_cycle, audience;
        PageCounters => "PAGE_COUNTERS": generation, state, flags, commit_seq, cycle, clock_khz,
            totals;
        PageData => "PAGE_DATA": counters, rate, sealed, sealed_rate;
        Page => "PAGE": header, seq, data;
        PageRequest => "PAGE_REQUEST": version, scope, id, flags, created_cycle;
        PageReply => "PAGE_REPLY": version, status, scope, id, vm, size, created_cycle, generation;
        OpenSampling => "OPEN_SAMPLING": version, scope, id, kinds, period, dither, branch_every,
            queue_records, flags, reserved, session, device_period, device_dither,
            device_branch_every, clock_khz, partition, confidential, program, reserved2;
        SampleHeader => "SAMPLE_HEADER": kind, flags, size, seq, lost_before;
        OpenRi => "OPEN_RI": version, ctx, mode, controls, sf, rsic, rgs, buffer_groups,
            queue_groups, flags, reserved, session, block, partition, partition_version,
            partition_max_rgs, device_max_rgs, reserved2;
        RiEmit => "RI_EMIT": version, value, reserved;
        RiStatus => "RI_STATUS": version, state, halt_reason, rgs, groups, delivered, suppressed,
            overwritten, lost, device_max_rgs, partition_max_rgs, partition_version, partition;
        RiResume => "RI_RESUME": version, flags, partition, partition_version, partition_max_rgs,
            reserved;
        RiGroupHeader => "RI_GROUP_HEADER": kind, rgs, halt_reason, size, session, group,
            lost_before;
        AddRange => "ADD_RANGE": version, ctx, kind, event, trigger, threshold, kernel, first,
            last, flags, handle, partition, register, shared, program, reserved;
        RangeRow => "RANGE_ROW": handle, register, kind, event, trigger, flags, threshold,
            kernel, first, last, entries, count, crossings, lost;
        ReadRanges => "READ_RANGES": version, ctx, flags, reserved, count, partition, rows;
        RemoveRange => "REMOVE_RANGE": version, ctx, handle, reserved;
        GraphHeader => "GRAPH_HEADER": version, ctx, first, flags, count, total, crossings, lost,
            stacks_dropped;
        GraphEdge => "GRAPH_EDGE": kernel, call_block, callee, count;
        ReadCallEdges => "READ_CALL_EDGES": head, rows;
        KernelSamples => "KERNEL_SAMPLES": kernel, self_samples, inclusive;
        ReadCallKernels => "READ_CALL_KERNELS": head, rows;
        StackCount => "STACK_COUNT": frames_len, count, frames;
        ReadCallStacks => "READ_CALL_STACKS": head, rows;
        PcRecord => "PC_RECORD": magic, partition, flags, vm, ctx, seq, cycle, ctx_cycle, kernel,
            block, interval;
    }
}

/// What a tenant needs to walk a report group's records (`docs/ri.md`)
/// and to page a call graph (`docs/ranges.md`): record kinds, flags,
/// halt reasons, range events, page sizes and the record layouts.
fn record_and_graph_constants(s: &mut String) {
    use gpupm_uapi::layout::{
        ri_emit_source, ri_group_flags, ri_record, ri_sample_flags, RiAbortRecord, RiBeginRecord,
        RiEmitRecord, RiInstructionRecord, RiTimestampRecord,
    };
    use gpupm_uapi::ranges::range_event;
    use gpupm_uapi::ri::{halt_reason, RI_RECORD_SIZE};
    use gpupm_uapi::tenant::ranges::{
        graph_flags, GRAPH_EDGE_ROWS, GRAPH_KERNEL_ROWS, GRAPH_STACK_ROWS, MAX_CONTEXT_RANGES,
        MAX_GRAPH_STACKS, STACK_FRAMES,
    };
    use gpupm_uapi::tenant::ri::{RI_RGS_MAX, RI_SF_MAX};

    s.push_str("\n# Report-group records (docs/ri.md) and call-graph pages (docs/ranges.md).\n");
    for (name, v) in [
        ("RI_RECORD_FILL", ri_record::FILL),
        ("RI_RECORD_BEGIN", ri_record::BEGIN),
        ("RI_RECORD_TIMESTAMP", ri_record::TIMESTAMP),
        ("RI_RECORD_INSTRUCTION", ri_record::INSTRUCTION),
        ("RI_RECORD_EMIT", ri_record::EMIT),
        ("RI_RECORD_ABORT", ri_record::ABORT),
        ("RI_GROUP_FLAGS_SECONDARY", ri_group_flags::SECONDARY),
        ("RI_GROUP_FLAGS_STOPPED", ri_group_flags::STOPPED),
        ("RI_GROUP_FLAGS_HALTED", ri_group_flags::HALTED),
        ("RI_SAMPLE_FLAGS_DIRECTED", ri_sample_flags::DIRECTED),
        ("RI_SAMPLE_FLAGS_SECONDARY", ri_sample_flags::SECONDARY),
        ("RI_EMIT_SOURCE_REGISTER", ri_emit_source::REGISTER),
        ("RI_EMIT_SOURCE_MARKER", ri_emit_source::MARKER),
    ] {
        writeln!(s, "{name} = {v:#x}").expect("write to String");
    }
    for (name, v) in [
        ("RI_HALT_NONE", halt_reason::NONE),
        ("RI_HALT_VERSION", halt_reason::VERSION),
        ("RI_HALT_RGS_LIMIT", halt_reason::RGS_LIMIT),
        ("RANGE_EVENT_INSTRUCTIONS", range_event::INSTRUCTIONS),
        ("RANGE_EVENT_CYCLES", range_event::CYCLES),
        ("RANGE_EVENT_MEMORY", range_event::MEMORY),
        ("GRAPH_FLAGS_STACKS_DROPPED", graph_flags::STACKS_DROPPED),
    ] {
        writeln!(s, "{name} = {v:#x}").expect("write to String");
    }
    for (name, v) in [
        ("RI_RECORD_SIZE", RI_RECORD_SIZE),
        ("RI_RGS_MAX", u64::from(RI_RGS_MAX)),
        ("RI_SF_MAX", u64::from(RI_SF_MAX)),
        ("MAX_GRAPH_STACKS", u64::from(MAX_GRAPH_STACKS)),
    ] {
        writeln!(s, "{name} = {v}").expect("write to String");
    }
    for (name, v) in [
        ("MAX_CONTEXT_RANGES", MAX_CONTEXT_RANGES),
        ("GRAPH_EDGE_ROWS", GRAPH_EDGE_ROWS),
        ("GRAPH_KERNEL_ROWS", GRAPH_KERNEL_ROWS),
        ("GRAPH_STACK_ROWS", GRAPH_STACK_ROWS),
        ("STACK_FRAMES", STACK_FRAMES),
    ] {
        writeln!(s, "{name} = {v}").expect("write to String");
    }
    layout! { s,
        RiBeginRecord => "RI_BEGIN_RECORD": kind, flags, rgs, version, groups, time;
        RiTimestampRecord => "RI_TIMESTAMP_RECORD": kind, flags, reserved, version, group, time;
        RiInstructionRecord => "RI_INSTRUCTION_RECORD": kind, flags, kernel, block, partition,
            ctx_cycle;
        RiEmitRecord => "RI_EMIT_RECORD": kind, source, kernel, block, reserved, data;
        RiAbortRecord => "RI_ABORT_RECORD": kind, reserved, kernel, block, partition, ctx_cycle;
    }
}
