//! Frames of a recording → one stream of [`TraceRecord`]s per record type.

use std::collections::BTreeMap;

use gpupm_client::sampling::session::SampleBody;
use gpupm_uapi::layout::{envelope_flags, StreamRecord, RECORD_MAGIC};
use gpupm_uapi::sampling::{BranchStackRecord, PcRecord};
use gpupm_uapi::tenant::sampling::{sample_flags, sample_kind, OpenSampling, SampleHeader};
use gpupm_uapi::tenant::TenantDelta;
use zerocopy::FromBytes;

use super::{Body, RecordType, TraceKey, TraceRecord};
use crate::error::{CliError, CliResult};
use crate::keyfile;
use crate::keyfile::Keyring;
use crate::record::format::{frame_kind, Frame};

/// A recording's records, one stream per type, and its metadata.
#[derive(Debug, Default)]
pub struct Streams {
    /// Records per type, in file order.
    pub streams: BTreeMap<RecordType, Vec<TraceRecord>>,
    /// The sampling session's answer, when the recording sampled.
    pub session: Option<OpenSampling>,
    /// Frames of record types this gpupm does not know (skipped).
    pub unknown: u64,
    /// Runtime-instrumentation entries (frames of kind 4).
    pub ri: RiTally,
}

/// Runtime-instrumentation entries of a recording.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RiTally {
    /// Report groups.
    pub groups: u64,
    /// Halt markers.
    pub halts: u64,
    /// Groups the session lost (Σ `lost_before`).
    pub lost: u64,
}

impl Streams {
    /// Gives the RI records the recording's context: an RI entry does not
    /// carry it, the file header does (`gpupm ri -o` records one context).
    pub fn set_ri_context(&mut self, ctx: u32) {
        for r in self.streams.get_mut(&RecordType::Ri).into_iter().flatten() {
            r.ctx = ctx;
        }
    }

    /// The streams, to [`super::merge`].
    pub fn into_trace(self) -> Vec<TraceRecord> {
        super::merge(self.streams.into_values().collect(), |r| r.key)
    }
}

fn corrupt(f: &Frame<'_>, why: &str) -> CliError {
    CliError::usage(format!("corrupt frame at byte {}: {why}", f.offset))
}

/// Decodes `frames`; sealed records are opened with `key` when given (a key
/// that does not open them is an error, never a guess).
pub fn decode(frames: &[Frame<'_>], key: Option<&Keyring>) -> CliResult<Streams> {
    let mut out = Streams::default();
    let mut last_cycle: BTreeMap<RecordType, u64> = BTreeMap::new();
    let mut sequence = 0u64;
    for f in frames {
        let rec = match f.kind {
            frame_kind::COUNTER_DELTA => counter(f, key)?,
            frame_kind::BRANCH_STACK | frame_kind::PC_SAMPLE => sample(f, key)?,
            frame_kind::RI_GROUP => {
                let ri = super::ri::decode(f)?;
                let tally = &mut out.ri;
                tally.lost += ri.header.lost_before;
                if ri.header.kind == gpupm_uapi::tenant::ri::ri_entry::HALT {
                    tally.halts += 1;
                } else {
                    tally.groups += 1;
                }
                let kind = RecordType::Ri;
                let cycle = ri
                    .time
                    .unwrap_or_else(|| last_cycle.get(&kind).copied().unwrap_or(0));
                last_cycle.insert(kind, cycle);
                let mut lost_before = ri.header.lost_before;
                for rec in ri.records {
                    out.streams.entry(kind).or_default().push(TraceRecord {
                        kind,
                        key: TraceKey { cycle, sequence },
                        session_seq: rec.group,
                        // The group's loss, once: on its first record.
                        lost_before: std::mem::take(&mut lost_before),
                        vm: 0,
                        ctx: 0,
                        body: Body::Ri(Box::new(rec)),
                    });
                    sequence += 1;
                }
                continue;
            }
            frame_kind::SAMPLING_SESSION => {
                let s = OpenSampling::read_from_bytes(f.body)
                    .map_err(|_| corrupt(f, "a sampling-session frame of the wrong size"))?;
                out.session = Some(s);
                continue;
            }
            _ => {
                out.unknown += 1;
                continue;
            }
        };
        let (kind, cycle, fields) = rec;
        let cycle = cycle.unwrap_or_else(|| last_cycle.get(&kind).copied().unwrap_or(0));
        last_cycle.insert(kind, cycle);
        out.streams.entry(kind).or_default().push(TraceRecord {
            kind,
            key: TraceKey { cycle, sequence },
            session_seq: fields.session_seq,
            lost_before: fields.lost_before,
            vm: fields.vm,
            ctx: fields.ctx,
            body: fields.body,
        });
        sequence += 1;
    }
    Ok(out)
}

/// A record's fields before it has its key.
struct Fields {
    session_seq: u64,
    lost_before: u64,
    vm: u32,
    ctx: u32,
    body: Body,
}

/// Type, cycle (None when sealed and not opened) and fields of a frame.
type Decoded = (RecordType, Option<u64>, Fields);

fn counter(f: &Frame<'_>, key: Option<&Keyring>) -> CliResult<Decoded> {
    let d = TenantDelta::read_from_bytes(f.body)
        .map_err(|_| corrupt(f, "a counter delta of the wrong size"))?;
    let sealed = d.slot.envelope.flags & envelope_flags::ENCRYPTED != 0;
    // A record withheld while the VM had no session carries nothing to
    // open: it stays sealed whatever the key.
    let withheld = d.slot.envelope.flags & envelope_flags::WITHHELD != 0;
    let record = match (sealed, key.filter(|_| !withheld)) {
        (false, _) => StreamRecord::read_from_bytes(&d.slot.payload)
            .ok()
            .filter(|r| r.magic == RECORD_MAGIC)
            .ok_or_else(|| corrupt(f, "a counter delta without record magic"))?,
        (true, Some(key)) => keyfile::open_stream(&d.slot, key)?,
        (true, None) => {
            let fields = Fields {
                session_seq: d.seq,
                lost_before: d.lost_before,
                vm: d.slot.envelope.vm,
                ctx: 0,
                body: Body::Sealed,
            };
            return Ok((RecordType::CounterDelta, None, fields));
        }
    };
    let fields = Fields {
        session_seq: d.seq,
        lost_before: d.lost_before,
        vm: record.vm,
        ctx: record.ctx,
        body: Body::Counter(Box::new(record)),
    };
    Ok((RecordType::CounterDelta, Some(record.end_cycle), fields))
}

fn sample(f: &Frame<'_>, key: Option<&Keyring>) -> CliResult<Decoded> {
    let (h, payload) = SampleHeader::read_from_prefix(f.body)
        .map_err(|_| corrupt(f, "a sample shorter than its header"))?;
    let (want_kind, kind) = if f.kind == frame_kind::PC_SAMPLE {
        (sample_kind::CYCLE, RecordType::PcSample)
    } else {
        (sample_kind::BRANCH_STACK, RecordType::BranchStack)
    };
    if h.kind != want_kind || h.size as usize != f.body.len() {
        return Err(corrupt(f, "a sample whose header does not match its frame"));
    }
    let sealed = h.flags & sample_flags::SEALED != 0;
    let withheld = sealed
        && gpupm_uapi::layout::Envelope::read_from_prefix(payload)
            .is_ok_and(|(e, _)| e.flags & envelope_flags::WITHHELD != 0);
    let body = match (sealed, key.filter(|_| !withheld)) {
        (false, _) if want_kind == sample_kind::CYCLE => SampleBody::Cycle(
            PcRecord::read_from_bytes(payload)
                .map_err(|_| corrupt(f, "a PC sample of the wrong size"))?,
        ),
        (false, _) => SampleBody::Branch(Box::new(
            BranchStackRecord::read_from_bytes(payload)
                .map_err(|_| corrupt(f, "a branch stack of the wrong size"))?,
        )),
        (true, Some(key)) => keyfile::open_sample(want_kind, payload, key)?,
        (true, None) => SampleBody::Sealed(payload.to_vec()),
    };
    let (vm, ctx, cycle, body) = match body {
        SampleBody::Cycle(pc) => (pc.vm, pc.ctx, Some(pc.cycle), Body::Pc(pc)),
        SampleBody::Branch(b) => (b.vm, b.ctx, Some(b.cycle), Body::Branch(b)),
        SampleBody::Sealed(slot) => {
            let vm = gpupm_uapi::layout::Envelope::read_from_prefix(&slot).map_or(0, |(e, _)| e.vm);
            (vm, 0, None, Body::Sealed)
        }
    };
    let fields = Fields {
        session_seq: h.seq,
        lost_before: h.lost_before,
        vm,
        ctx,
        body,
    };
    Ok((kind, cycle, fields))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Body sizes a frame of each kind can have, and a few it cannot.
    fn body_len() -> impl Strategy<Value = usize> {
        prop_oneof![
            Just(624),
            Just(24 + 48),
            Just(24 + 560),
            Just(24 + 96),
            Just(80),
            Just(32),
            Just(32 + 64),
            0usize..700
        ]
    }

    proptest! {
        /// Frames of any kind with any bytes decode or give an error
        /// naming the frame; never a panic, and every decoded record
        /// comes from one frame.
        #[test]
        fn decoding_any_frames_never_panics(
            frames in prop::collection::vec(
                (prop_oneof![Just(1u16), Just(2), Just(3), Just(4), Just(16), 0u16..20],
                 body_len().prop_flat_map(|n| prop::collection::vec(any::<u8>(), n))),
                0..8),
        ) {
            let owned: Vec<Frame<'_>> = frames
                .iter()
                .enumerate()
                .map(|(i, (kind, body))| Frame { kind: *kind, body, offset: 64 + 8 * i as u64 })
                .collect();
            match decode(&owned, None) {
                Ok(s) => {
                    let records: usize = s.streams.values().map(Vec::len).sum();
                    let ri = s.streams.get(&RecordType::Ri).map_or(0, Vec::len);
                    let entries = s.ri.groups + s.ri.halts;
                    prop_assert!(
                        (records - ri) as u64 + entries + s.unknown <= owned.len() as u64
                    );
                    // A group holds at most 2^(7+1) records, a halt one.
                    prop_assert!(ri as u64 <= 256 * s.ri.groups + s.ri.halts);
                }
                Err(e) => prop_assert!(e.msg.contains("corrupt frame at byte")),
            }
        }
    }
}
