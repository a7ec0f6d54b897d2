//! Prints the header of the perf PMU module `gpupm_pmu.ko`:
//! `cargo run -p gpupm-uapi --example gen_kmod > kmod/gpupm_events.h`.
//! `uapi/tests/kmod_header.rs` checks that the committed file matches.
//!
//! The module's sysfs `events/` and `format/` attributes and its
//! publication ABI come from here, so the kernel side cannot drift from the
//! catalogue and the structs the daemon writes: the events are an X-macro
//! list the module expands into attributes and a scope table, the structs
//! are spelt with kernel types and pinned by `static_assert`s on every size
//! and offset Rust computes, and each ioctl number is asserted equal to the
//! one the daemon uses.

use std::mem::{offset_of, size_of};

use gpupm_uapi::events::{Scope, CATALOGUE, EVENT_COUNT, MAX_EVENTS};
use gpupm_uapi::pmu::{self, Publish, ScopeTotals, Wanted};
use gpupm_uapi::regs::{MAX_CONTEXTS, MAX_VMS};

/// The header's text.
pub fn render() -> String {
    let mut h = String::new();
    let mut line = |s: &str| {
        h.push_str(s);
        h.push('\n');
    };
    line("/* SPDX-License-Identifier: GPL-2.0 */");
    line("/*");
    line(" * gpupm_pmu: the event catalogue, the perf config fields and the");
    line(" * publication ABI, generated from the gpupm-uapi crate by");
    line(" * `cargo run -p gpupm-uapi --example gen_kmod`; do not edit.");
    line(" * uapi/src/pmu.rs and uapi/src/events.rs document every item.");
    line(" */");
    line("#ifndef GPUPM_EVENTS_H");
    line("#define GPUPM_EVENTS_H");
    line("");
    line("#include <linux/build_bug.h>");
    line("#include <linux/ioctl.h>");
    line("#include <linux/stddef.h>");
    line("#include <linux/types.h>");
    line("");
    line(&format!("#define GPUPM_PMU_NAME \"{}\"", pmu::PMU_NAME));
    line(&format!(
        "#define GPUPM_PMU_DEVICE_NAME \"{}\"",
        pmu::PUBLISH_DEVICE
    ));
    line(&format!("#define GPUPM_MAX_EVENTS {MAX_EVENTS}"));
    line(&format!("#define GPUPM_EVENT_COUNT {EVENT_COUNT}"));
    line(&format!("#define GPUPM_MAX_VMS {MAX_VMS}"));
    line(&format!("#define GPUPM_MAX_CONTEXTS {MAX_CONTEXTS}"));
    line("");
    line("/* perf config fields: GPUPM_<NAME>_WORD (0 = config, 1 = config1), _SHIFT, _BITS, _FORMAT. */");
    for f in pmu::FIELDS {
        let n = f.name.to_uppercase();
        line(&format!("#define GPUPM_{n}_WORD {}", f.word));
        line(&format!("#define GPUPM_{n}_SHIFT {}", f.shift));
        line(&format!("#define GPUPM_{n}_BITS {}", f.bits));
        line(&format!("#define GPUPM_{n}_FORMAT \"{}\"", f.sysfs()));
    }
    line(&format!(
        "#define GPUPM_CONFIG_USED {:#x}ULL",
        pmu::CONFIG_USED
    ));
    line(&format!(
        "#define GPUPM_CONFIG1_USED {:#x}ULL",
        pmu::CONFIG1_USED
    ));
    line("");
    line("/* Values of the scope field. */");
    for (name, v) in [
        ("IMPLIED", pmu::scope::IMPLIED),
        ("CONTEXT", pmu::scope::CONTEXT),
        ("VM", pmu::scope::VM),
        ("SYSTEM", pmu::scope::SYSTEM),
    ] {
        line(&format!("#define GPUPM_SCOPE_{name} {v}"));
    }
    line("");
    line("/*");
    line(" * Every catalogue event: X(id, name, device_only). A device-only event");
    line(" * (NVLink) is counted in the system block alone.");
    line(" */");
    line("#define GPUPM_EVENT_LIST(X) \\");
    for (i, e) in CATALOGUE.iter().enumerate() {
        let device_only = u8::from(e.unit.scope() == Scope::Device);
        let cont = if i + 1 == CATALOGUE.len() { "" } else { " \\" };
        line(&format!("\tX({}, {}, {device_only}){cont}", e.id, e.name));
    }
    line("");
    emit_abi(&mut line);
    line("");
    line("#endif /* GPUPM_EVENTS_H */");
    h
}

fn emit_abi(line: &mut impl FnMut(&str)) {
    line("/* The publication device's ioctls. */");
    line(&format!(
        "#define GPUPM_PMU_IOC_MAGIC {:#x}",
        pmu::PMU_IOC_MAGIC
    ));
    line(&format!(
        "#define GPUPM_PMU_STRUCT_VERSION {}",
        pmu::PMU_STRUCT_VERSION
    ));
    line(&format!(
        "#define GPUPM_PMU_PUBLISH_BATCH {}",
        pmu::PUBLISH_BATCH
    ));
    line(&format!(
        "#define GPUPM_PMU_WANTED_WORDS {}",
        pmu::WANTED_WORDS
    ));
    line("");
    line("struct gpupm_pmu_scope_totals {");
    line("\t__u32 scope;");
    line("\t__u32 id;");
    line("\t__u64 generation;");
    line("\t__u64 counters[GPUPM_MAX_EVENTS];");
    line("};");
    line("");
    line("struct gpupm_pmu_publish {");
    line("\t__u32 version;");
    line("\t__u32 count;");
    line("\tstruct gpupm_pmu_scope_totals entries[GPUPM_PMU_PUBLISH_BATCH];");
    line("};");
    line("");
    line("struct gpupm_pmu_wanted {");
    line("\t__u32 version;");
    line("\t__u32 reserved;");
    line("\t__u64 opened;");
    line("\t__u64 contexts[GPUPM_PMU_WANTED_WORDS];");
    line("};");
    line("");
    line("#define GPUPM_PMU_IOC_PUBLISH _IOW(GPUPM_PMU_IOC_MAGIC, 0x00, struct gpupm_pmu_publish)");
    line("#define GPUPM_PMU_IOC_WANTED _IOWR(GPUPM_PMU_IOC_MAGIC, 0x01, struct gpupm_pmu_wanted)");
    line("");
    line("/* Sizes, offsets and ioctl numbers as Rust computes them. */");
    for a in layout_asserts() {
        line(&format!("static_assert({a});"));
    }
}

/// The publication structs' sizes and offsets, and the ioctl numbers, as
/// Rust computes them: the C compiler checks the header against them.
fn layout_asserts() -> [String; 10] {
    [
        format!(
            "sizeof(struct gpupm_pmu_scope_totals) == {}",
            size_of::<ScopeTotals>()
        ),
        format!(
            "offsetof(struct gpupm_pmu_scope_totals, generation) == {}",
            offset_of!(ScopeTotals, generation)
        ),
        format!(
            "offsetof(struct gpupm_pmu_scope_totals, counters) == {}",
            offset_of!(ScopeTotals, counters)
        ),
        format!(
            "sizeof(struct gpupm_pmu_publish) == {}",
            size_of::<Publish>()
        ),
        format!(
            "offsetof(struct gpupm_pmu_publish, entries) == {}",
            offset_of!(Publish, entries)
        ),
        format!("sizeof(struct gpupm_pmu_wanted) == {}", size_of::<Wanted>()),
        format!(
            "offsetof(struct gpupm_pmu_wanted, opened) == {}",
            offset_of!(Wanted, opened)
        ),
        format!(
            "offsetof(struct gpupm_pmu_wanted, contexts) == {}",
            offset_of!(Wanted, contexts)
        ),
        format!(
            "GPUPM_PMU_IOC_PUBLISH == {:#x}U",
            pmu::GPUPM_PMU_IOC_PUBLISH
        ),
        format!("GPUPM_PMU_IOC_WANTED == {:#x}U", pmu::GPUPM_PMU_IOC_WANTED),
    ]
}
