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
//!
//! **Comments.** Every `#define` of a Rust constant carries the constant's
//! doc comment, read from the source with `syn` (`gen_c/docs.rs`); rustdoc
//! links become the header's names. Each section opens with the part of
//! the programming model it needs (`gen_c/prose.rs`, the short form of
//! `docs/abi.md`). The header is rendered twice: the first pass learns the
//! header name of every item, so that a comment can name an item defined
//! further down.

mod docs;
mod prose;
mod structs;

use docs::{c_comment, Docs, Names};
use gpupm_uapi::regdef::{Block, Reg, Width};
use gpupm_uapi::{ioctl, pmu, tenant};
use structs::{all_structs, emit_asserts, emit_structs};

/// An integer constant of any width.
trait Num: Copy {
    fn wide(self) -> u64;
}
macro_rules! num {
    ($($t:ty),*) => { $(impl Num for $t { fn wide(self) -> u64 { self as u64 } })* };
}
num!(u8, u16, u32, u64, usize);

/// The header being written, with the doc comments still to place and
/// the header names of the items (complete from the second pass on).
struct Header {
    out: String,
    docs: Docs,
    names: Names,
}

impl Header {
    fn new(names: Names) -> Header {
        let mut h = Header {
            out: String::new(),
            docs: Docs::load(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../src")),
            names,
        };
        for (rust, c, _, _) in all_structs() {
            h.names.add(rust, &format!("struct {c}"));
        }
        h
    }

    fn line(&mut self, text: &str) {
        self.out.push_str(text);
        self.out.push('\n');
    }

    /// A section: its title, then what the programming model says about it.
    fn section(&mut self, title: &str, model: &str) {
        self.line(&format!("\n/* {title} */\n"));
        if !model.is_empty() {
            self.line(&c_comment(model).replacen("/**", "/*", 1));
            self.line("");
        }
    }

    /// The doc comment of the constant at `key` (rustdoc links resolved
    /// from its module), placed above what follows.
    fn doc(&mut self, key: &str) {
        if let Some(doc) = self.docs.take(key) {
            let module = key.rsplit_once("::").map_or("", |(m, _)| m);
            let text = self.names.rewrite_in(module, &doc);
            self.line(&c_comment(&text));
        }
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

    /// [`Header::define`] of the Rust constant at `key`, with its doc comment.
    fn item(&mut self, key: &str, name: &str, v: impl Num, hex: bool, note: &str) {
        self.names.add(key, name);
        self.doc(key);
        self.define(name, v, hex, note);
    }

    /// Names the members of module `module` (`regs::trig_cmd`) by the
    /// prefix they share in the header.
    fn module(&mut self, module: &str, prefix: &str) {
        if module.contains("::") {
            self.names.add(module, &format!("{prefix}*"));
        }
    }

    fn assert(&mut self, cond: &str) {
        self.line(&format!("GPUPM_STATIC_ASSERT({cond});"));
    }
}

/// `gpupm_uapi :: regs :: trig_cmd` (as `stringify!` writes a path) as a
/// doc key: `regs::trig_cmd`.
fn module_key(path: &str) -> String {
    let path: String = path.split_whitespace().collect();
    path.strip_prefix("gpupm_uapi")
        .map(|p| p.trim_start_matches("::"))
        .unwrap_or(&path)
        .to_string()
}

/// The key of constant `name` of module `module`.
fn item_key(module: &str, name: &str) -> String {
    if module.is_empty() {
        name.to_string()
    } else {
        format!("{module}::{name}")
    }
}

/// Defines each listed constant of module `$m` as `$prefix NAME`.
macro_rules! group {
    ($h:expr, $fmt:ident $prefix:literal, $($m:ident)::+ : $($name:ident),+ $(,)?) => {{
        use $($m)::+ as m;
        let module = module_key(stringify!($($m)::+));
        $h.module(&module, $prefix);
        $( $h.item(
            &item_key(&module, stringify!($name)),
            concat!($prefix, stringify!($name)),
            m::$name,
            group!(@hex $fmt),
            "",
        ); )+
    }};
    (@hex hex) => { true };
    (@hex dec) => { false };
}

// After `group!`, which they use.
mod cc;
mod events_c;
mod page_c;
mod ranges;
mod regs_c;
mod ri;
mod sampling;

/// Every register of `block` as `GPUPM_REG_<name>`, its offset as
/// declared (absolute for a fixed block, inside the instance for an
/// array), with its declaration's documentation after its access; a note
/// on the 64-bit ones and on word arrays.
fn block_registers(h: &mut Header, block: &Block) {
    registers_of(h, block.module, block.regs);
    for set in block.sets {
        registers_of(h, block.module, set.regs);
    }
}

/// [`block_registers`] of one list of registers of uapi module `module`.
fn registers_of(h: &mut Header, module: &str, regs: &[Reg]) {
    for reg in regs {
        let key = format!("{module}::{}", reg.name);
        let name = format!("GPUPM_REG_{}", reg.name);
        h.names.add(&key, &name);
        let doc: Vec<&str> = reg.doc.lines().map(str::trim).collect();
        let text = format!("{}: {}", reg.label(), doc.join("\n"));
        let text = h.names.rewrite_in(module, &text);
        h.line(&c_comment(&text));
        let note = match (reg.width, reg.words) {
            (Width::W64, _) => "64-bit".to_string(),
            (Width::W32, 1) => String::new(),
            (Width::W32, n) => format!("{n} words"),
        };
        h.define(&name, reg.offset, true, &note);
    }
}

fn emit_layout(h: &mut Header) {
    h.section("Memory window layouts (uapi/src/layout.rs)", prose::LAYOUT);
    group!(h, hex "GPUPM_", gpupm_uapi::layout: MEM_WINDOW_OFFSET, STREAM_REGION, STREAM_RING_SPAN, BLOCK_MAGIC, RECORD_MAGIC);
    group!(h, dec "GPUPM_", gpupm_uapi::layout:
        BLOCK_SLOT_SIZE, SYSTEM_BLOCK_SLOT, VM_BLOCK_SLOT_BASE, CTX_BLOCK_SLOT_BASE, CTX_BLOCK_SLOTS,
        STREAM_RING_MAX, STREAM_SLOT_SIZE, ENVELOPE_AAD_LEN, RECORD_VALUES);
    h.names
        .add("layout::SESSION_KEY_INFO", "GPUPM_SESSION_KEY_INFO");
    h.doc("layout::SESSION_KEY_INFO");
    h.line(&format!(
        "#define GPUPM_SESSION_KEY_INFO \"{}\"",
        String::from_utf8_lossy(gpupm_uapi::layout::SESSION_KEY_INFO)
    ));
    h.line("#define GPUPM_BLOCK_SLOT_OFFSET(slot) ((uint64_t)(slot) * GPUPM_BLOCK_SLOT_SIZE)");
    h.line(
        "#define GPUPM_STREAM_SLOT_OFFSET(p, i) \
         (GPUPM_STREAM_REGION + (uint64_t)(p) * GPUPM_STREAM_RING_SPAN + (uint64_t)(i) * GPUPM_STREAM_SLOT_SIZE)",
    );
    group!(h, dec "GPUPM_BLOCK_KIND_", gpupm_uapi::layout::block_kind: SYSTEM, VM, CONTEXT);
    group!(h, hex "GPUPM_ENVELOPE_FLAGS_", gpupm_uapi::layout::envelope_flags: VALID, ENCRYPTED, WITHHELD);
    group!(h, hex "GPUPM_RECORD_FLAGS_", gpupm_uapi::layout::record_flags: SWITCH, FALLBACK, SECONDARY_CLOCK, THRESHOLD);
    group!(h, hex "GPUPM_CCU_RECORD_FLAGS_", gpupm_uapi::layout::ccu_record_flags: FLUSH_ACK);
}

fn emit_ioctls(h: &mut Header) {
    h.section(
        "Device node ioctls (uapi/src/ioctl.rs)",
        prose::DEVICE_IOCTLS,
    );
    h.item(
        "ioctl::IOC_MAGIC",
        "GPUPM_IOC_MAGIC",
        ioctl::IOC_MAGIC,
        true,
        "'G'",
    );
    group!(h, dec "GPUPM_", gpupm_uapi::ioctl: IOCTL_STRUCT_VERSION, MAX_IOCTL_SIZE, MAX_BATCH_OPS, WINDOW_READ_NR, WINDOW_READ_MAX);
    group!(h, dec "GPUPM_", gpupm_uapi::commit_wait: WAIT_COMMIT_MAX_BLOCKS, WAIT_COMMIT_MAX_TIMEOUT_US);
    group!(h, hex "GPUPM_", gpupm_uapi::mirror: MIRROR_MAGIC);
    group!(h, dec "GPUPM_", gpupm_uapi::mirror: MIRROR_VERSION, MIRROR_HEADER_SIZE, MIRROR_PATH_MAX, MIRROR_WAITERS_SIZE, MIRROR_RINGS_HEADER_SIZE, MIRROR_RING_SIZE);
    group!(h, dec "GPUPM_MIRROR_OFFSET_", gpupm_uapi::mirror::offset: GENERATION, SEQ, COMMIT_SEQ, CYCLE, DOORBELL, RINGS, RING_HEAD, RING_CAP, RING_WINDOW_BASE, RING_SLOTS);
    group!(h, hex "GPUPM_", gpupm_uapi::ioctl: MAX_ADVANCE_CYCLES);
    group!(h, dec "GPUPM_REG_OP_", gpupm_uapi::ioctl::reg_op: READ, WRITE);
    group!(h, dec "GPUPM_LEDGER_SCOPE_", gpupm_uapi::ioctl::ledger_scope: CONTEXT, VM, SYSTEM);
    group!(h, hex "GPUPM_LEDGER_FLAGS_", gpupm_uapi::ioctl::ledger_flags: SEALED, WITHHELD);
    group!(h, dec "GPUPM_", gpupm_uapi::ioctl: LEDGER_SEALED_LEN);
    for &(name, cmd) in ioctl::DEVICE_IOCTLS {
        h.item(&format!("ioctl::{name}"), name, cmd, true, "");
    }
    h.line(
        "/* A window read of len bytes (1..GPUPM_WINDOW_READ_MAX): the argument is a\n \
         * struct gpupm_window_read followed by len bytes; the number carries the size. */",
    );
    h.line(&format!(
        "#define GPUPM_IOC_WINDOW_READ(len) \\\n    ({:#x}U | (uint32_t)(sizeof(struct gpupm_window_read) + (len)) << 16)",
        ioctl::window_read_cmd(0) & !(0x3fff << 16)
    ));

    h.section(
        "Tenant node ioctls (uapi/src/tenant.rs)",
        prose::TENANT_IOCTLS,
    );
    h.item(
        "tenant::TENANT_IOC_MAGIC",
        "GPUPM_TENANT_IOC_MAGIC",
        tenant::TENANT_IOC_MAGIC,
        true,
        "'T'",
    );
    h.item(
        "tenant::TENANT_STRUCT_VERSION",
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
    group!(h, hex "GPUPM_TENANT_KEY_FLAGS_", gpupm_uapi::tenant::key_flags: CONFIDENTIAL, SESSION);
    group!(h, dec "GPUPM_TENANT_RI_MODE_", gpupm_uapi::tenant::ri::ri_session_mode: CYCLE, INSTRUCTION, DIRECTED);
    group!(h, hex "GPUPM_TENANT_RI_CONTROLS_", gpupm_uapi::tenant::ri::ri_controls: EMIT, ABORT, SUPPRESS_PRIMARY, SUPPRESS_SECONDARY, ALL);
    group!(h, hex "GPUPM_TENANT_RI_STATE_", gpupm_uapi::tenant::ri::ri_state: ENABLED, HALTED, ENDED);
    group!(h, dec "GPUPM_TENANT_RI_ENTRY_", gpupm_uapi::tenant::ri::ri_entry: GROUP, HALT);
    group!(h, dec "GPUPM_TENANT_", gpupm_uapi::tenant::ri: RI_RGS_MAX, RI_SF_MAX, DEFAULT_RI_QUEUE_GROUPS, MAX_RI_QUEUE_GROUPS);
    group!(h, dec "GPUPM_TENANT_RANGE_KIND_", gpupm_uapi::tenant::ranges::range_kind: CODE, DATA);
    group!(h, dec "GPUPM_TENANT_RANGE_TRIGGER_", gpupm_uapi::tenant::ranges::range_trigger: NONE, COUNT, LATENCY);
    group!(h, hex "GPUPM_TENANT_RANGE_ROW_FLAGS_", gpupm_uapi::tenant::ranges::range_row_flags: INEXACT);
    group!(h, hex "GPUPM_TENANT_GRAPH_FLAGS_", gpupm_uapi::tenant::ranges::graph_flags: STACKS_DROPPED);
    group!(h, dec "GPUPM_TENANT_", gpupm_uapi::tenant::ranges: MAX_CONTEXT_RANGES, MAX_GRAPH_STACKS, GRAPH_EDGE_ROWS, GRAPH_KERNEL_ROWS, GRAPH_STACK_ROWS, STACK_FRAMES);
    for &(name, cmd) in tenant::TENANT_IOCTLS {
        h.item(&format!("tenant::{name}"), name, cmd, true, "");
    }
    emit_pmu(h);
    page_c::emit_defines(h);
}

fn emit_pmu(h: &mut Header) {
    h.section(
        "Perf PMU module: event config fields and the publication device (uapi/src/pmu.rs)",
        "",
    );
    h.doc("pmu::PMU_NAME");
    h.line(&format!("#define GPUPM_PMU_NAME \"{}\"", pmu::PMU_NAME));
    h.doc("pmu::PUBLISH_DEVICE");
    h.line(&format!(
        "#define GPUPM_PMU_PUBLISH_DEVICE \"{}\"",
        pmu::PUBLISH_DEVICE
    ));
    h.doc("pmu::FIELDS");
    for f in pmu::FIELDS {
        h.doc(&format!("pmu::FIELD_{}", f.name.to_uppercase()));
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
    h.item(
        "pmu::PMU_IOC_MAGIC",
        "GPUPM_PMU_IOC_MAGIC",
        pmu::PMU_IOC_MAGIC,
        true,
        "'P'",
    );
    group!(h, dec "GPUPM_", gpupm_uapi::pmu: PMU_STRUCT_VERSION);
    group!(h, dec "GPUPM_PMU_", gpupm_uapi::pmu: PUBLISH_BATCH, WANTED_WORDS);
    for &(name, cmd) in pmu::PMU_IOCTLS {
        h.item(&format!("pmu::{name}"), name, cmd, true, "");
    }
}

/// One pass over the whole header, resolving links with `names`.
fn render_pass(names: Names) -> Header {
    let mut h = Header::new(names);
    h.line("/* SPDX-License-Identifier: Apache-2.0 */");
    h.line(&c_comment(prose::INTRO).replacen("/**", "/*", 1));
    h.line(
        "#ifndef GPUPM_UAPI_H\n\
         #define GPUPM_UAPI_H\n\n\
         #include <sched.h>\n\
         #include <stddef.h>\n\
         #include <stdint.h>\n\
         #include <string.h>\n\
         #include <time.h>\n\n\
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
        prose::VERSION,
    );
    group!(h, dec "GPUPM_", gpupm_uapi: ABI_MAJOR, ABI_MINOR);
    h.item(
        "ABI_VERSION",
        "GPUPM_ABI_VERSION",
        gpupm_uapi::ABI_VERSION,
        true,
        "major << 16 | minor",
    );
    regs_c::emit_global_regs(&mut h);
    regs_c::emit_instance_regs(&mut h);
    events_c::emit_events(&mut h);
    events_c::emit_intr(&mut h);
    emit_layout(&mut h);
    emit_ioctls(&mut h);
    sampling::emit_sampling(&mut h);
    ri::emit_ri(&mut h);
    ranges::emit_ranges(&mut h);
    cc::emit_cc(&mut h);
    emit_structs(&mut h);
    emit_asserts(&mut h);
    h.line("\n#endif /* GPUPM_UAPI_H */");
    h
}

/// The header's text, and the documented constants it has no comment for.
pub fn render_checked() -> (String, Vec<String>) {
    let first = render_pass(Names::default());
    let second = render_pass(first.names);
    let unused = second.docs.unused();
    (second.out, unused)
}

/// The header's text.
pub fn render() -> String {
    render_checked().0
}

/// The two slot structs cbindgen cannot size.
fn slot_struct(h: &mut Header, c: &str, what: &str, payload: (&str, usize), total: usize) {
    let tag = total - size_of::<gpupm_uapi::layout::Envelope>() - payload.1;
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
