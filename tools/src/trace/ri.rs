//! Frames of kind 4 (`frame_kind::RI_GROUP`, written by `gpupm ri -o`) →
//! trace records: one per non-fill record of a report group, one per halt
//! marker, all keyed by the group's device time ([`super`] says why).

use gpupm_uapi::layout::ri_record;
use gpupm_uapi::tenant::ri::{ri_entry, RiGroupHeader};
use zerocopy::FromBytes;

use crate::error::{CliError, CliResult};
use crate::record::format::Frame;
use crate::ri::{decode as decode_record, RiRecordJson};

/// RGS the device can store (0..=7).
const MAX_RGS: u8 = 7;

/// One runtime-instrumentation record of the trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RiTrace {
    /// The session id.
    pub session: u64,
    /// The group's number in its device session (for a halt, the groups
    /// stored before it).
    pub group: u64,
    /// RGS of the group.
    pub rgs: u8,
    /// Halt reason (1 version, 2 RGS limit); 0 in a group.
    pub halt_reason: u8,
    /// The decoded record; `None` for a halt marker.
    pub record: Option<RiRecordJson>,
}

/// What one kind-4 frame holds.
pub struct RiFrame {
    /// The entry's header.
    pub header: RiGroupHeader,
    /// The group's time (its begin or timestamp record), if it has one.
    pub time: Option<u64>,
    /// Its trace bodies in record order (fill omitted; one for a halt).
    pub records: Vec<RiTrace>,
}

fn corrupt(f: &Frame<'_>, why: &str) -> CliError {
    CliError::usage(format!("corrupt frame at byte {}: {why}", f.offset))
}

/// Decodes one kind-4 frame: the header must describe exactly the frame
/// (a group of 2^(RGS+1) records, or a bare halt marker).
pub fn decode(f: &Frame<'_>) -> CliResult<RiFrame> {
    let (header, body) = RiGroupHeader::read_from_prefix(f.body)
        .map_err(|_| corrupt(f, "an RI entry shorter than its header"))?;
    if header.size as usize != f.body.len() {
        return Err(corrupt(f, "an RI entry whose size is not its frame's"));
    }
    let trace = |record| RiTrace {
        session: header.session,
        group: header.group,
        rgs: header.rgs,
        halt_reason: header.halt_reason,
        record,
    };
    match header.kind {
        ri_entry::HALT if body.is_empty() => {
            return Ok(RiFrame {
                header,
                time: None,
                records: vec![trace(None)],
            })
        }
        ri_entry::GROUP if header.rgs <= MAX_RGS && body.len() == 16 << (header.rgs + 1) => {}
        _ => {
            return Err(corrupt(
                f,
                "an RI entry of unknown kind or whose records do not fill its RGS",
            ))
        }
    }
    let mut time = None;
    let mut records = Vec::new();
    for chunk in body.chunks_exact(16) {
        let Ok(r) = <&[u8; 16]>::try_from(chunk) else {
            continue;
        };
        let Some(d) = decode_record(r) else { continue };
        if time.is_none() && matches!(r[0], ri_record::BEGIN | ri_record::TIMESTAMP) {
            time = d.time;
        }
        records.push(trace(Some(d)));
    }
    Ok(RiFrame {
        header,
        time,
        records,
    })
}

#[cfg(test)]
mod tests {
    use gpupm_uapi::layout::{RiInstructionRecord, RiTimestampRecord};
    use zerocopy::{FromZeros, IntoBytes};

    use super::*;

    fn entry(kind: u16, rgs: u8, records: &[[u8; 16]]) -> Vec<u8> {
        let header = RiGroupHeader {
            kind,
            rgs,
            size: u32::try_from(32 + 16 * records.len()).unwrap(),
            group: 7,
            ..RiGroupHeader::default()
        };
        let mut b = header.as_bytes().to_vec();
        b.extend(records.iter().flatten());
        b
    }

    #[test]
    fn a_group_takes_its_timestamp_and_skips_fill_and_a_bad_entry_is_refused() {
        let mut ts = RiTimestampRecord::new_zeroed();
        ts.kind = ri_record::TIMESTAMP;
        ts.time = 5_000;
        let mut ins = RiInstructionRecord::new_zeroed();
        ins.kind = ri_record::INSTRUCTION;
        ins.ctx_cycle = 42;
        let mut recs = [[0u8; 16]; 4]; // RGS 1: 4 records, two of them fill.
        recs[0].copy_from_slice(ts.as_bytes());
        recs[3].copy_from_slice(ins.as_bytes());
        let body = entry(ri_entry::GROUP, 1, &recs);
        let f = Frame {
            kind: 4,
            body: &body,
            offset: 64,
        };
        let d = decode(&f).unwrap();
        assert_eq!(d.time, Some(5_000));
        let kinds: Vec<&str> = d
            .records
            .iter()
            .map(|r| r.record.as_ref().unwrap().kind)
            .collect();
        assert_eq!(kinds, ["timestamp", "instruction"]);
        assert!(d.records.iter().all(|r| r.group == 7));

        let halt = entry(ri_entry::HALT, 1, &[]);
        let h = decode(&Frame { body: &halt, ..f }).unwrap();
        assert_eq!((h.time, h.records.len()), (None, 1));
        assert!(h.records[0].record.is_none());

        for bad in [
            entry(ri_entry::GROUP, 2, &recs), // 4 records do not fill RGS 2
            entry(ri_entry::HALT, 1, &recs),  // a halt with records
            entry(3, 1, &recs),               // unknown entry kind
            body[..40].to_vec(),              // size is not the frame's
            body[..20].to_vec(),              // shorter than the header
        ] {
            let e = decode(&Frame { body: &bad, ..f }).err().expect("refused");
            assert!(e.msg.starts_with("corrupt frame at byte 64"), "{}", e.msg);
        }
    }
}
