//! `gpupm report --trace`: the merged trace, one line per record with its
//! type visible, or one JSON object per line ([`TraceLine`]).

use schemars::JsonSchema;
use serde::Serialize;

use crate::error::CliResult;
use crate::ri::RiRecordJson;
use crate::trace::{Body, TraceRecord};

/// One line of `gpupm report --trace --json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct TraceLine {
    /// Device cycle (the merge key's first part).
    pub cycle: u64,
    /// Ordinal of the record in the file (the merge key's second part).
    pub sequence: u64,
    /// `counter_delta`, `branch_stack`, `pc_sample` or `ri_record`.
    #[serde(rename = "type")]
    pub record_type: &'static str,
    /// Sequence number in its session.
    pub session_seq: u64,
    /// Records of its type the session did not get before it.
    pub lost_before: u64,
    /// Whether the record is sealed (a confidential VM's, not opened; its
    /// cycle is then the previous record's of its type).
    pub sealed: bool,
    /// VM.
    pub vm: u32,
    /// Context (0 when sealed).
    pub ctx: u32,
    /// PC samples: kernel; branch stacks: kernel of the capturing branch's
    /// target; RI emit, abort and instruction records: their kernel.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<u16>,
    /// PC samples: block; branch stacks: the capturing branch's target.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block: Option<u16>,
    /// The device buffer's sequence number (samples) or the RC's commit
    /// sequence (counter deltas).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_seq: Option<u64>,
    /// PC samples: the interval the sample stands for; branch stacks: the
    /// entries; counter deltas: the cycles the commit covers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub span: Option<u64>,
    /// RI records: the group (or halt marker) and the record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ri: Option<RiLine>,
}

/// The RI part of a [`TraceLine`].
#[derive(Debug, Serialize, JsonSchema)]
pub struct RiLine {
    /// Session id.
    pub session: u64,
    /// The group's number in the device session (1-based); for a halt, the
    /// groups stored before it.
    pub group: u64,
    /// RGS of the group.
    pub rgs: u8,
    /// Halt reason (1 version, 2 RGS limit) of a halt marker; 0 in a group.
    pub halt_reason: u8,
    /// The record (as `gpupm ri --json` prints it); absent for a halt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record: Option<RiRecordJson>,
}

impl RiLine {
    fn text(&self) -> String {
        let Some(r) = &self.record else {
            return format!(
                " halt after group {} (reason {})",
                self.group, self.halt_reason
            );
        };
        let opt = |name: &str, v: Option<u64>| v.map_or(String::new(), |v| format!(" {name} {v}"));
        format!(
            " group {} {}{}{}{}{}",
            self.group,
            r.kind,
            r.source.map_or(String::new(), |s| format!(" {s}")),
            opt("data", r.data),
            opt("time", r.time),
            opt("ctx_cycle", r.ctx_cycle)
        )
    }
}

impl TraceLine {
    /// The line of `r`.
    pub fn of(r: &TraceRecord) -> TraceLine {
        let (kernel, block, device_seq, span) = match &r.body {
            Body::Pc(pc) => (
                Some(pc.kernel),
                Some(pc.block),
                Some(pc.seq),
                Some(u64::from(pc.interval)),
            ),
            Body::Branch(b) => {
                let last = usize::try_from(b.count).ok().and_then(|n| n.checked_sub(1));
                let to = last.and_then(|i| b.entries.get(i));
                (
                    to.map(|e| e.to_kernel),
                    to.map(|e| e.to_block),
                    Some(b.seq),
                    Some(u64::from(b.count)),
                )
            }
            Body::Counter(c) => (
                None,
                None,
                Some(c.seq),
                Some(c.end_cycle.saturating_sub(c.start_cycle)),
            ),
            Body::Ri(ri) => (
                ri.record.as_ref().and_then(|r| r.kernel),
                ri.record.as_ref().and_then(|r| r.block),
                None,
                None,
            ),
            Body::Sealed => (None, None, None, None),
        };
        let ri = match &r.body {
            Body::Ri(ri) => Some(RiLine {
                session: ri.session,
                group: ri.group,
                rgs: ri.rgs,
                halt_reason: ri.halt_reason,
                record: ri.record.clone(),
            }),
            _ => None,
        };
        TraceLine {
            cycle: r.key.cycle,
            sequence: r.key.sequence,
            record_type: r.kind.name(),
            session_seq: r.session_seq,
            lost_before: r.lost_before,
            sealed: matches!(r.body, Body::Sealed),
            vm: r.vm,
            ctx: r.ctx,
            kernel,
            block,
            device_seq,
            span,
            ri,
        }
    }

    fn text(&self) -> String {
        let opt = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
        let place = match (self.kernel, self.block) {
            (Some(k), Some(b)) => format!("{k}/{b}"),
            _ => "-".into(),
        };
        format!(
            "{:>16} {:>8} {:<13} {:>4} {:>6} {:<9} {:>10} {:>8} {:>6}{}{}\n",
            self.cycle,
            self.sequence,
            self.record_type,
            self.vm,
            self.ctx,
            place,
            opt(self.device_seq),
            opt(self.span),
            self.lost_before,
            if self.sealed { " sealed" } else { "" },
            self.ri.as_ref().map_or(String::new(), RiLine::text)
        )
    }
}

/// The trace as text (a header line, then one line per record) or JSON
/// lines.
pub fn render(trace: &[TraceRecord], json: bool) -> CliResult<String> {
    let mut out = String::new();
    if !json {
        out += &format!(
            "{:>16} {:>8} {:<13} {:>4} {:>6} {:<9} {:>10} {:>8} {:>6}\n",
            "CYCLE", "SEQUENCE", "TYPE", "VM", "CTX", "KERN/BLK", "DEV_SEQ", "SPAN", "LOST"
        );
    }
    for r in trace {
        let line = TraceLine::of(r);
        if json {
            out += &crate::output::json_line(&line)?;
        } else {
            out += &line.text();
        }
    }
    Ok(out)
}
