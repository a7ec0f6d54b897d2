//! Crossing records into the plane: draining a partition's ring, giving
//! each record to its context's ranges and call graph, booking lost
//! crossings, and the rows tenants read.

use std::sync::atomic::Ordering;

use gpupm_client::DevError;
use gpupm_uapi::ranges::RangeRecord;
use gpupm_uapi::tenant::ranges::{range_row_flags, RangeRow};

use super::attrib::Ledger;
use super::device::{self, Drained};
use super::{Handle, RangeBook, State};

impl RangeBook {
    /// Drains partition `p`'s ring into the handles and graphs.
    pub(super) fn drain(&self, st: &mut State, p: u32) -> Result<(), DevError> {
        let mut scratch = std::mem::take(&mut st.scratch);
        let drained = device::drain(&self.dev, p, &mut scratch);
        st.scratch = scratch;
        let (records, _) = drained?;
        for d in records {
            match d {
                Drained::Plain(rec) => self.take_record(st, p, &rec),
                Drained::Sealed(_) => {
                    self.stats.sealed.fetch_add(1, Ordering::Relaxed);
                }
                Drained::Garbage => {
                    self.stats.malformed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Ok(())
    }

    fn take_record(&self, st: &mut State, p: u32, rec: &RangeRecord) {
        self.stats.records.fetch_add(1, Ordering::Relaxed);
        let part = st.parts.entry(p).or_default();
        if rec.seq > part.last_seq.saturating_add(1) {
            let gap = rec.seq - part.last_seq - 1;
            self.stats.lost.fetch_add(gap, Ordering::Relaxed);
        }
        part.last_seq = rec.seq;
        let mut claimed = false;
        for h in st.handles.values_mut() {
            if h.partition == p && h.register == u32::from(rec.range) && h.ctx == rec.ctx {
                h.crossings += 1;
                claimed = true;
            }
        }
        if !claimed {
            self.stats.unclaimed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let Some(g) = st.graphs.get_mut(&rec.ctx) else {
            return;
        };
        match g.add(rec) {
            Ok(()) => self.stats.graph_records.fetch_add(1, Ordering::Relaxed),
            Err(_) => self.stats.malformed.fetch_add(1, Ordering::Relaxed),
        };
    }
}

/// A lost crossing of `ctx` on register `i` of partition `p`.
pub(super) fn book_lost(st: &mut State, p: u32, i: u32, ctx: u32) {
    let mut claimed = false;
    for h in st.handles.values_mut() {
        if h.partition == p && h.register == i && h.ctx == ctx {
            h.lost += 1;
            claimed = true;
        }
    }
    if claimed {
        if let Some(g) = st.graphs.get_mut(&ctx) {
            g.lost += 1;
        }
    }
}

/// The row of range `handle`, on the register its VM knows as `slot`.
pub(super) fn row(handle: u32, h: &Handle, slot: u32, ledger: &Ledger) -> RangeRow {
    let now = ledger.of(h.ctx);
    let inexact = ledger.unattributed() != h.base_unattributed;
    RangeRow {
        handle,
        register: u16::try_from(slot).unwrap_or(u16::MAX),
        kind: u8::try_from(h.spec.kind).unwrap_or(0),
        event: u8::try_from(h.spec.event).unwrap_or(0),
        trigger: u8::try_from(h.spec.trigger).unwrap_or(0),
        flags: if inexact { range_row_flags::INEXACT } else { 0 },
        reserved: 0,
        threshold: h.spec.threshold,
        kernel: u32::from(h.spec.kernel),
        first: h.spec.first,
        last: h.spec.last,
        reserved2: 0,
        entries: now.entries.saturating_sub(h.base.entries),
        count: now.count.saturating_sub(h.base.count),
        crossings: h.crossings,
        lost: h.lost,
    }
}
