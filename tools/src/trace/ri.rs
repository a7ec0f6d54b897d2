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
