//! The committed C header matches this crate, names every constant of it,
//! and compiles as C11 with its layout asserts; a C program built with it
//! sees every struct field at the offset Rust puts it.

use gpupm_uapi_gen::c as gen_c;

use std::fmt::Write as _;
use std::mem::offset_of;
use std::path::{Path, PathBuf};
use std::process::Command;

use gpupm_uapi::events::{CATALOGUE, EVENT_COUNT};
use gpupm_uapi::intr::InterruptRecord;
use gpupm_uapi::ioctl::{
    Advance, BlockLedgerQuery, BlockTruth, Identity, LedgerQuery, RegAccess, RegBatch, RegOp,
    Reset, WindowRead, DEVICE_IOCTLS,
};
use gpupm_uapi::layout::{Block, BlockSlot, CcuRecord, Envelope, StreamRecord, StreamSlot};
use gpupm_uapi::page::{Page, PageCounters, PageData, PageHeader, PageReply, PageRequest};
use gpupm_uapi::pmu::{Publish, ScopeTotals, Wanted, PMU_IOCTLS};
use gpupm_uapi::sampling::{BranchEntry, BranchSlot, BranchStackRecord, PcRecord, PcSlot};
use gpupm_uapi::tenant::{
    CtxEntry, EventInfo, ListContexts, OpenSampling, OpenStream, RateSample, ReadCounters,
    ReadInstance, ReadInstanceRates, ReadRates, SampleHeader, TenantDelta, Whoami, TENANT_IOCTLS,
};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
const REGEN: &str = "cargo run -p gpupm-uapi --example gen_c > include/gpupm/gpupm_uapi.h";

fn header_path() -> PathBuf {
    Path::new(ROOT).join("include/gpupm/gpupm_uapi.h")
}

#[test]
fn committed_c_header_matches_uapi() {
    let path = header_path();
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == gen_c::render(),
        "{} is stale: run `{REGEN}`",
        path.display()
    );
}

/// Every documented constant of the crate (the ioctl numbers included)
/// carries its doc comment in the header, and no rustdoc link is left for
/// a C reader to decode.
#[test]
fn c_header_carries_every_constants_documentation() {
    let (header, unused) = gen_c::render_checked();
    // Tables the header writes as arrays or macros under their own comment,
    // and the map's tables, which it writes as the registers' and regions'
    // own defines.
    let tables = ["pmu::FIELDS", "map::BLOCKS", "map::WINDOW"];
    let unused: Vec<&String> = unused
        .iter()
        .filter(|k| !tables.contains(&k.as_str()))
        .collect();
    assert!(
        unused.is_empty(),
        "documented but uncommented in the header: {unused:?}"
    );
    let links: Vec<&str> = header.lines().filter(|l| l.contains("[`")).collect();
    assert!(
        links.is_empty(),
        "rustdoc links left in the header: {links:?}"
    );
    for (define, comment) in [
        (
            "#define GPUPM_REG_TRIG_TARGET ",
            "RW: target mask for GPUPM_REG_TRIG_CMD",
        ),
        (
            "#define TENANT_IOC_WHOAMI ",
            "Read struct gpupm_tenant_whoami.",
        ),
        ("#define GPUPM_INTR_STREAM_WATERMARK ", "Edge-triggered"),
    ] {
        let at = header
            .find(define)
            .unwrap_or_else(|| panic!("{define} missing"));
        let before = &header[..at];
        let comment_start = before.rfind("/**").expect("a comment above");
        assert!(
            before[comment_start..].contains(comment),
            "{define}: comment {:?}",
            &before[comment_start..]
        );
    }
}

/// Every `pub const` of the crate's source appears as a `#define` whose
/// name ends with the Rust name (tables are emitted as arrays instead),
/// and so does every register the register map declares (as
/// `GPUPM_REG_<name>`, with its offset and its access in the comment).
#[test]
fn c_header_defines_every_uapi_constant() {
    let header = gen_c::render();
    let defined: Vec<&str> = header
        .lines()
        .filter_map(|l| l.strip_prefix("#define "))
        .filter_map(|l| l.split([' ', '(']).next())
        .collect();
    let tables = [
        "CATALOGUE",
        "DEVICE_IOCTLS",
        "TENANT_IOCTLS",
        "SOURCE_NAMES",
        "FIELDS",
        "PMU_IOCTLS",
        "BLOCKS",
        "WINDOW",
    ];
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut missing = Vec::new();
    for path in sources(&src) {
        let text = std::fs::read_to_string(&path).expect("read source");
        for name in text
            .lines()
            .filter_map(|l| l.trim_start().strip_prefix("pub const "))
            .filter(|rest| !rest.starts_with("fn "))
            .filter_map(|rest| rest.split(':').next())
            .filter(|name| !name.starts_with('$'))
            // A block of the register map (`pub const X_REGS = Unit …` in
            // a `register_block!`), whose registers are checked below.
            .filter(|name| !name.contains(' '))
        {
            let ends_with = |d: &&str| *d == name || d.ends_with(&format!("_{name}"));
            if !tables.contains(&name) && !defined.iter().any(ends_with) {
                missing.push(format!("{}: {name}", path.display()));
            }
        }
    }
    for block in gpupm_uapi::map::BLOCKS {
        let sets = block.sets.iter().flat_map(|set| set.regs);
        for reg in block.regs.iter().chain(sets) {
            let define = format!("#define GPUPM_REG_{} {:#x}", reg.name, reg.offset);
            let Some(at) = header.find(&define) else {
                missing.push(define);
                continue;
            };
            let comment = &header[header[..at].rfind("/**").expect("a comment")..at];
            let access = format!("{}: ", reg.label());
            if !comment.contains(&access) {
                missing.push(format!("{define}: no {access:?} in {comment:?}"));
            }
        }
    }
    assert!(missing.is_empty(), "not in the C header: {missing:?}");
}

/// Every `.rs` file under `dir`, submodules' directories included.
fn sources(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("uapi source directory") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            out.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

/// `(C struct, [(field, Rust offset)])` for every field of every struct.
macro_rules! fields {
    ($($ty:ident => $c:literal: $($f:ident),+;)*) => {
        vec![$(($c, vec![$((stringify!($f), offset_of!($ty, $f))),+])),*]
    };
}

fn all_fields() -> Vec<(&'static str, Vec<(&'static str, usize)>)> {
    fields! {
        Block => "gpupm_block": magic, kind, version, id, vm, commit_seq, last_commit_cycle, counters;
        Envelope => "gpupm_envelope": vm, flags, key_epoch, session_lo, nonce, session_hi;
        BlockSlot => "gpupm_block_slot": envelope, payload, tag;
        StreamRecord => "gpupm_stream_record":
            magic, partition, flags, vm, ctx, seq, start_cycle, end_cycle, reserved, deltas;
        StreamSlot => "gpupm_stream_slot": envelope, payload, tag;
        CcuRecord => "gpupm_ccu_record": ccu, flags, first_counter, valid, values;
        InterruptRecord => "gpupm_interrupt_record": seq, cycle, source, partition, arg, arg2;
        Identity => "gpupm_identity": version, magic, abi_version, events, partitions, ccus, sms,
            clock_khz, step_clock, reserved, cycle;
        RegOp => "gpupm_reg_op": offset, value, op, width;
        RegBatch => "gpupm_reg_batch": version, count, flags, failed_index, ops;
        Advance => "gpupm_advance": version, flags, cycles, now;
        LedgerQuery => "gpupm_ledger_query": version, scope, id, flags, generated, masked, remainder,
            envelope, tag;
        Reset => "gpupm_reset": version, magic;
        RegAccess => "gpupm_reg_access": version, width, offset, value, flags, reserved;
        WindowRead => "gpupm_window_read": version, flags, offset;
        Whoami => "gpupm_tenant_whoami": version, admin, uid, n_vms, vms;
        CtxEntry => "gpupm_tenant_ctx_entry": ctx, state, created_cycle;
        ListContexts => "gpupm_tenant_list_contexts": version, vm, offset, count, total, reserved, ctxs;
        ReadCounters => "gpupm_tenant_read_counters": version, scope, id, n_events, events, flags,
            reserved, commit_seq, cycle, values, sealed;
        RateSample => "gpupm_tenant_rate_sample": start_cycle, end_cycle, flags, ctx, deltas;
        ReadRates => "gpupm_tenant_read_rates": version, scope, id, max, count, flags, clock_khz,
            reserved, samples;
        OpenStream => "gpupm_tenant_open_stream": version, scope, id, flags;
        TenantDelta => "gpupm_tenant_delta": seq, lost_before, slot;
        EventInfo => "gpupm_tenant_event_info": version, id, unit_type, multibit, scope, reserved,
            reserved2, name, measure, description;
        ReadInstance => "gpupm_tenant_read_instance": version, scope, id, flags, created_cycle,
            n_events, reserved, events, state, out_flags, vm, reserved2, commit_seq, cycle, values,
            sealed;
        ReadInstanceRates => "gpupm_tenant_read_instance_rates": version, scope, id, flags,
            created_cycle, max, reserved, count, out_flags, clock_khz, reserved2, samples;
        OpenSampling => "gpupm_tenant_open_sampling": version, scope, id, kinds, period, dither,
            branch_every, queue_records, flags, reserved, session, device_period, device_dither,
            device_branch_every, clock_khz, partition, confidential, program, reserved2;
        SampleHeader => "gpupm_tenant_sample_header": kind, flags, size, seq, lost_before;
        ScopeTotals => "gpupm_pmu_scope_totals": scope, id, generation, counters;
        Publish => "gpupm_pmu_publish": version, count, entries;
        Wanted => "gpupm_pmu_wanted": version, reserved, opened, contexts;
        PageHeader => "gpupm_page_header": magic, version, size, scope, id, vm, created_cycle,
            audience, reserved;
        PageCounters => "gpupm_page_counters": generation, state, flags, commit_seq, cycle,
            clock_khz, reserved, totals;
        PageData => "gpupm_page_data": counters, rate, sealed, sealed_rate;
        Page => "gpupm_page": header, seq, data, tail;
        PageRequest => "gpupm_page_request": version, scope, id, flags, created_cycle;
        PageReply => "gpupm_page_reply": version, status, scope, id, vm, size, created_cycle,
            generation;
        BranchEntry => "gpupm_branch_entry": from_kernel, from_block, to_kernel, to_block, cycle;
        BranchStackRecord => "gpupm_branch_stack_record": magic, partition, flags, vm, ctx, seq,
            cycle, branches, count, reserved, entries;
        PcRecord => "gpupm_pc_record": magic, partition, flags, vm, ctx, seq, cycle, ctx_cycle,
            kernel, block, interval;
        BranchSlot => "gpupm_branch_slot": envelope, payload, tag;
        PcSlot => "gpupm_pc_slot": envelope, payload, tag;
        BlockTruth => "gpupm_block_truth": kernel, block, reserved, visits, instructions, cycles;
        BlockLedgerQuery => "gpupm_block_ledger_query": version, ctx, first, flags, count, total,
            ctx_cycles, rows, envelope, tag;
    }
}

/// Compiles `src` against the committed header with warnings as errors,
/// runs it and returns its output.
fn compile_and_run(name: &str, src: &str) -> String {
    let dir = std::env::temp_dir().join(format!("gpupm-c-header-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let c = dir.join(format!("{name}.c"));
    let exe = dir.join(name);
    std::fs::write(&c, src).expect("write C source");
    let out = Command::new("cc")
        .args([
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Wpedantic",
            "-Werror",
            "-I",
        ])
        .arg(Path::new(ROOT).join("include"))
        .arg(&c)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("the C header test needs a C compiler as `cc` (gcc or clang)");
    assert!(
        out.status.success(),
        "cc failed on {}:\n{}",
        c.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("run the C program");
    assert!(run.status.success(), "{} failed", exe.display());
    std::fs::remove_dir_all(&dir).expect("remove scratch dir");
    String::from_utf8(run.stdout).expect("UTF-8 output")
}

#[test]
fn c_program_sees_the_rust_layouts_constants_and_event_names() {
    let mut src = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include <gpupm/gpupm_uapi.h>\n\nint main(void) {\n",
    );
    let mut want = String::new();
    for (c, fields) in all_fields() {
        for (f, off) in fields {
            writeln!(
                src,
                "    printf(\"{c}.{f} %zu\\n\", offsetof(struct {c}, {f}));"
            )
            .unwrap();
            writeln!(want, "{c}.{f} {off}").unwrap();
        }
    }
    for &(name, cmd) in DEVICE_IOCTLS.iter().chain(TENANT_IOCTLS).chain(PMU_IOCTLS) {
        writeln!(src, "    printf(\"{name} %#x\\n\", (unsigned){name});").unwrap();
        writeln!(want, "{name} {cmd:#x}").unwrap();
    }
    writeln!(src, "    for (int i = 0; i < GPUPM_EVENT_COUNT; i++) printf(\"%d %s\\n\", i, gpupm_event_names[i]);").unwrap();
    for e in CATALOGUE {
        writeln!(want, "{} {}", e.id, e.name).unwrap();
    }
    writeln!(src, "    printf(\"%d\\n\", GPUPM_EV_SM_INST_EXECUTED);").unwrap();
    writeln!(
        want,
        "{}",
        gpupm_uapi::events::by_name("sm_inst_executed").unwrap().id
    )
    .unwrap();
    writeln!(
        src,
        "    printf(\"%llx\\n\", (unsigned long long)GPUPM_PART(2, GPUPM_REG_PART_STREAM_TAIL));"
    )
    .unwrap();
    writeln!(
        want,
        "{:x}",
        gpupm_uapi::regs::part(2, gpupm_uapi::regs::PART_STREAM_TAIL)
    )
    .unwrap();
    src.push_str("    return 0;\n}\n");
    assert_eq!(EVENT_COUNT, CATALOGUE.len());
    let got = compile_and_run("layout", &src);
    let diff: Vec<_> = want
        .lines()
        .zip(got.lines())
        .filter(|(w, g)| w != g)
        .collect();
    assert!(
        diff.is_empty() && want.lines().count() == got.lines().count(),
        "C differs (rust, C): {diff:?}"
    );
}

/// The header's page readers copy a consistent page and report a page
/// whose writer never finished (odd sequence) as busy.
#[test]
fn c_page_reader_copies_an_even_page_and_reports_an_odd_one_busy() {
    let out = compile_and_run(
        "page_reader",
        r#"#include <stdio.h>
#include <gpupm/gpupm_uapi.h>

static struct gpupm_page page;

int main(void) {
    struct gpupm_page_counters c;
    struct gpupm_page_data d;
    memset(&page, 0, sizeof(page));
    page.seq = 6;
    page.data.counters.generation = 3;
    page.data.counters.totals[5] = 42;
    page.data.rate.deltas[7] = 9;
    page.data.sealed_rate.tag[15] = 0x5a;
    int r1 = gpupm_page_read_counters(&page, &c);
    int r2 = gpupm_page_read(&page, &d);
    printf("%d %d %llu %llu %llu %d\n", r1, r2, (unsigned long long)c.generation,
           (unsigned long long)c.totals[5], (unsigned long long)d.rate.deltas[7],
           d.sealed_rate.tag[15]);
    page.seq = 7;
    printf("%d\n", gpupm_page_read_counters(&page, &c));
    return 0;
}
"#,
    );
    assert_eq!(out, "0 0 3 42 9 90\n-1\n");
}

#[test]
fn c_header_compiles_as_c11_and_cxx11() {
    compile_and_run(
        "c11",
        "#include <gpupm/gpupm_uapi.h>\nint main(void) { return 0; }\n",
    );
    let dir = std::env::temp_dir();
    let out = dir.join(format!("gpupm-c-header-{}-cxx.o", std::process::id()));
    let status = Command::new("c++")
        .args([
            "-std=c++11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-x",
            "c++",
            "-c",
            "-I",
        ])
        .arg(Path::new(ROOT).join("include"))
        .arg("-o")
        .arg(&out)
        .arg("-")
        .stdin(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write as _;
            child
                .stdin
                .take()
                .expect("piped stdin")
                .write_all(b"#include <gpupm/gpupm_uapi.h>\n")?;
            child.wait()
        })
        .expect("the C header test needs a C++ compiler as `c++` (g++ or clang++)");
    assert!(status.success(), "the header does not compile as C++11");
    std::fs::remove_file(&out).expect("remove object");
}
