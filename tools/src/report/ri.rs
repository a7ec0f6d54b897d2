//! The runtime-instrumentation part of `gpupm report`: report groups, halt
//! markers and lost groups of the kind-4 frames, and their records by type.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Serialize;

use crate::trace::decode::Streams;
use crate::trace::{Body, RecordType};

/// What the recording's RI entries hold (all 0 without any).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, JsonSchema)]
pub struct RiSummary {
    /// Report groups recorded.
    pub groups: u64,
    /// Halt markers recorded.
    pub halts: u64,
    /// Groups the session lost (Σ `lost_before`).
    pub lost_groups: u64,
    /// Records by type (`begin`, `timestamp`, `emit`, `abort`,
    /// `instruction`, `unknown`; fill omitted).
    pub records: BTreeMap<&'static str, u64>,
    /// Emit records from `RI_EMIT` writes.
    pub emits_register: u64,
    /// Emit records from marker blocks.
    pub emits_marker: u64,
    /// Abort records (switch-outs).
    pub aborts: u64,
}

/// Sums the RI stream of `s`.
pub fn summary(s: &Streams) -> RiSummary {
    let mut out = RiSummary {
        groups: s.ri.groups,
        halts: s.ri.halts,
        lost_groups: s.ri.lost,
        ..RiSummary::default()
    };
    let recs = s.streams.get(&RecordType::Ri).map(Vec::as_slice);
    for r in recs.unwrap_or_default() {
        let Body::Ri(ri) = &r.body else { continue };
        let Some(rec) = &ri.record else { continue };
        *out.records.entry(rec.kind).or_default() += 1;
        match (rec.kind, rec.source) {
            ("emit", Some("register")) => out.emits_register += 1,
            ("emit", _) => out.emits_marker += 1,
            ("abort", _) => out.aborts += 1,
            _ => {}
        }
    }
    out
}

/// The text of the summary; empty without RI entries.
pub fn text(s: &RiSummary) -> String {
    if s.groups + s.halts == 0 {
        return String::new();
    }
    let by_type: Vec<String> = s.records.iter().map(|(k, n)| format!("{k} {n}")).collect();
    format!(
        "\nruntime instrumentation: {} report groups, {} halts, {} groups lost\n\
         records: {}\nemits: {} register, {} marker; aborts: {}\n",
        s.groups,
        s.halts,
        s.lost_groups,
        by_type.join(", "),
        s.emits_register,
        s.emits_marker,
        s.aborts
    )
}
