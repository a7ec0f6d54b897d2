//! The event catalogue and interrupt-source parts of the C header
//! (`uapi/src/events.rs`, `uapi/src/intr.rs`): ids, per-event tables, and
//! the interrupt bits with their names.

use gpupm_uapi::events::{EventInfo, UnitType, CATALOGUE};
use gpupm_uapi::intr;

use super::{item_key, module_key, prose, Header};

/// Unit types, event ids, scopes, and the per-event tables.
pub(super) fn emit_events(h: &mut Header) {
    h.section(
        "Event catalogue (uapi/src/events.rs): ids index every counter array",
        prose::EVENTS,
    );
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
    group!(h, dec "GPUPM_EVENT_SCOPE_", gpupm_uapi::events::scope_code:
        PARTITION, CONTEXT_FILTERED, DEVICE);
    h.line("");
    h.doc("events::CATALOGUE");
    h.line("/* Event names indexed by id (the names `gpupm stat -e` takes). */");
    h.line("static const char *const gpupm_event_names[GPUPM_EVENT_COUNT] = {");
    for e in CATALOGUE {
        h.line(&format!("    \"{}\",", e.name));
    }
    h.line("};");
    for (what, name, of) in [
        (
            "Unit type (GPUPM_UNIT_*) of each event, indexed by id.",
            "gpupm_event_unit",
            (|e| e.unit as u8) as fn(&EventInfo) -> u8,
        ),
        (
            "Scope (GPUPM_EVENT_SCOPE_*) of each event, indexed by id: where its counts go.",
            "gpupm_event_scope",
            |e| e.unit.scope().code(),
        ),
        (
            "1 for a multi-bit event (one count = GPUPM_MULTIBIT_SCALE signal units), indexed by id.",
            "gpupm_event_multibit",
            |e| u8::from(e.multibit),
        ),
    ] {
        let values: Vec<String> = CATALOGUE.iter().map(|e| of(e).to_string()).collect();
        h.line(&format!("\n/* {what} */"));
        h.line(&format!(
            "static const uint8_t {name}[GPUPM_EVENT_COUNT] = {{ {} }};",
            values.join(", ")
        ));
    }
}

/// Interrupt source bits and their names.
pub(super) fn emit_intr(h: &mut Header) {
    h.section("Interrupt sources (uapi/src/intr.rs)", prose::INTERRUPTS);
    h.module("intr::source", "GPUPM_INTR_");
    for (bit, name) in intr::SOURCE_NAMES.iter().enumerate() {
        let name = name.to_uppercase();
        h.item(
            &format!("intr::source::{name}"),
            &format!("GPUPM_INTR_{name}"),
            1u32 << bit,
            true,
            "",
        );
    }
    h.item(
        "intr::source::ALL",
        "GPUPM_INTR_ALL",
        intr::source::ALL,
        true,
        "",
    );
    h.line("");
    h.doc("intr::SOURCE_NAMES");
    h.line(&format!(
        "static const char *const gpupm_intr_source_names[{}] = {{",
        intr::SOURCE_NAMES.len()
    ));
    for name in intr::SOURCE_NAMES {
        h.line(&format!("    \"{name}\","));
    }
    h.line("};");
}
