//! One trace out of a recording's per-type record streams: the
//! post-processing merge that orders the records of every buffer in time.
//!
//! A recording holds each record type as it arrived: counter deltas from
//! the stream session, branch stacks and PC samples from the sampling
//! session, each type on its own (the device drains them from separate
//! buffers, so arrival order across types means nothing). [`decode`] turns
//! the frames into [`TraceRecord`]s, grouped into one stream per record
//! type; [`merge`] orders any number of streams into one trace by
//! [`TraceKey`] — (cycle, sequence) — without knowing what the records
//! are. Runtime-instrumentation report groups plug in as
//! another stream ([`RecordType::Ri`], [`ri`]): one record per non-fill
//! record of a group, plus one per halt marker.
//!
//! Keys: `cycle` is the device cycle the record describes (a PC sample's
//! and a branch stack's `cycle`, a counter delta's commit `end_cycle`, and
//! for every record of an RI report group the group's `time` — the device
//! cycle its begin or timestamp record says it was stored; an instruction
//! record's `ctx_cycle` counts the context's own cycles, another clock, so
//! it cannot order it among the other types. A halt marker, and a group
//! without a begin or timestamp record, take the previous group's time);
//! `sequence` is the record's ordinal among the file's records (the order
//! the recorder received them), unique, so the order is total. A sealed
//! record (a confidential VM's, without its key) shows no cycle: it takes
//! the cycle of the previous record of its stream, so it stays where it
//! arrived in its stream.

pub mod decode;
pub mod ri;

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use gpupm_uapi::layout::StreamRecord;
use gpupm_uapi::sampling::{BranchStackRecord, PcRecord};

/// The record types of a trace, one stream each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RecordType {
    /// Counter deltas (the stream session's commits).
    CounterDelta,
    /// Branch-stack records.
    BranchStack,
    /// PC (cycle) samples.
    PcSample,
    /// Runtime-instrumentation records (a report group's, or a halt).
    Ri,
}

impl RecordType {
    /// Every type, in the order summaries list them.
    pub const ALL: [RecordType; 4] = [
        RecordType::CounterDelta,
        RecordType::BranchStack,
        RecordType::PcSample,
        RecordType::Ri,
    ];

    /// The name traces and JSON show.
    pub fn name(self) -> &'static str {
        match self {
            RecordType::CounterDelta => "counter_delta",
            RecordType::BranchStack => "branch_stack",
            RecordType::PcSample => "pc_sample",
            RecordType::Ri => "ri_record",
        }
    }
}

/// Where a record sorts in the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TraceKey {
    /// Device cycle.
    pub cycle: u64,
    /// Ordinal among the file's records.
    pub sequence: u64,
}

/// What a record holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    /// A counter delta (the commit's stream record).
    Counter(Box<StreamRecord>),
    /// A branch stack.
    Branch(Box<BranchStackRecord>),
    /// A PC sample.
    Pc(PcRecord),
    /// A runtime-instrumentation record or halt marker.
    Ri(Box<ri::RiTrace>),
    /// Ciphertext of a confidential VM's record.
    Sealed,
}

/// One record of the trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceRecord {
    /// Its type (its stream).
    pub kind: RecordType,
    /// Its place in the trace.
    pub key: TraceKey,
    /// Its session's sequence number (`TenantDelta::seq` or
    /// `SampleHeader::seq`).
    pub session_seq: u64,
    /// Records of its type its session did not get before it.
    pub lost_before: u64,
    /// VM (the envelope's for a sealed record).
    pub vm: u32,
    /// Context (0 when sealed).
    pub ctx: u32,
    /// The record.
    pub body: Body,
}

/// Orders `streams` into one trace by `key`: each stream is put in key
/// order (a stable sort; the recorder's streams normally already are),
/// then the streams are merged, smallest key first. Knows nothing of what
/// the records are.
pub fn merge<T>(streams: Vec<Vec<T>>, key: impl Fn(&T) -> TraceKey) -> Vec<T> {
    let total = streams.iter().map(Vec::len).sum();
    let mut iters: Vec<std::vec::IntoIter<T>> = streams
        .into_iter()
        .map(|mut s| {
            s.sort_by_key(&key);
            s.into_iter()
        })
        .collect();
    let mut heads: Vec<Option<T>> = iters.iter_mut().map(Iterator::next).collect();
    let mut heap: BinaryHeap<Reverse<(TraceKey, usize)>> = heads
        .iter()
        .enumerate()
        .filter_map(|(i, h)| h.as_ref().map(|r| Reverse((key(r), i))))
        .collect();
    let mut out = Vec::with_capacity(total);
    while let Some(Reverse((_, i))) = heap.pop() {
        let Some(rec) = heads[i].take() else { continue };
        out.push(rec);
        heads[i] = iters[i].next();
        if let Some(next) = &heads[i] {
            heap.push(Reverse((key(next), i)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Whatever the streams, the merge keeps every record once and
        /// yields them in key order.
        #[test]
        fn merge_is_ordered_and_keeps_every_record_once(
            streams in prop::collection::vec(
                prop::collection::vec(0u64..50, 0..40), 0..5),
        ) {
            let mut next = 0u64;
            let streams: Vec<Vec<(TraceKey, usize)>> = streams
                .iter()
                .enumerate()
                .map(|(s, cycles)| cycles.iter().map(|&cycle| {
                    next += 1;
                    (TraceKey { cycle, sequence: next }, s)
                }).collect())
                .collect();
            let mut all: Vec<(TraceKey, usize)> = streams.concat();
            let merged = merge(streams, |r| r.0);
            prop_assert!(merged.windows(2).all(|w| w[0].0 <= w[1].0));
            all.sort();
            let mut got = merged.clone();
            got.sort();
            prop_assert_eq!(got, all);
        }
    }
}
