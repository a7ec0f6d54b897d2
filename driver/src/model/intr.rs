//! The interrupt controller: latched status, mask, write-one-to-clear ack,
//! and a bounded log of interrupt records that the driver layer fans out to
//! every open file handle.

use std::collections::VecDeque;

use gpupm_uapi::intr::{source, InterruptRecord};

/// Records kept for readers that lag behind; older ones are dropped (and a
/// reader sees the gap in `seq`).
pub const RECORD_RETENTION: usize = 16384;

/// Interrupt controller state.
#[derive(Clone, Debug, Default)]
pub struct Interrupts {
    /// Latched sources.
    pub status: u32,
    /// Masked sources.
    pub mask: u32,
    log: VecDeque<InterruptRecord>,
    next_seq: u64,
}

impl Interrupts {
    /// Raises `src` (one bit of [`source`]).
    pub fn raise(&mut self, src: u32, partition: u32, arg: u32, arg2: u32, cycle: u64) {
        debug_assert_eq!(src.count_ones(), 1);
        self.status |= src;
        if self.mask & src != 0 {
            return;
        }
        if self.log.len() == RECORD_RETENTION {
            self.log.pop_front();
        }
        self.log.push_back(InterruptRecord {
            seq: self.next_seq,
            cycle,
            source: src,
            partition,
            arg,
            arg2,
        });
        self.next_seq += 1;
    }

    /// `status & !mask`.
    pub fn pending(&self) -> u32 {
        self.status & !self.mask
    }

    /// Clears acknowledged sources.
    pub fn ack(&mut self, bits: u32) {
        self.status &= !(bits & source::ALL);
    }

    /// Seq the next record will get.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Appends records with `seq >= from` to `out`; returns the next seq.
    pub fn since(&self, from: u64, out: &mut Vec<InterruptRecord>) -> u64 {
        let oldest = self.next_seq - self.log.len() as u64;
        let skip = from.saturating_sub(oldest) as usize;
        out.extend(self.log.iter().skip(skip));
        self.next_seq
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_sources_latch_but_record_nothing_and_ack_clears() {
        let mut i = Interrupts {
            mask: source::TRIGGER_DONE,
            ..Default::default()
        };
        i.raise(source::TRIGGER_DONE, 0, 0, 0, 5);
        i.raise(source::CTX_CREATED, 1, 7, 2, 6);
        assert_eq!(i.status, source::TRIGGER_DONE | source::CTX_CREATED);
        assert_eq!(i.pending(), source::CTX_CREATED);
        let mut out = Vec::new();
        assert_eq!(i.since(0, &mut out), 1);
        assert_eq!(out.len(), 1);
        assert_eq!(
            (out[0].source, out[0].arg, out[0].seq),
            (source::CTX_CREATED, 7, 0)
        );
        i.ack(source::CTX_CREATED);
        assert_eq!(i.pending(), 0);
        assert_eq!(i.status, source::TRIGGER_DONE);
    }

    #[test]
    fn old_records_fall_off_and_readers_see_the_gap() {
        let mut i = Interrupts::default();
        for n in 0..RECORD_RETENTION as u64 + 10 {
            i.raise(source::TRIGGER_DONE, 0, 0, 0, n);
        }
        let mut out = Vec::new();
        i.since(0, &mut out);
        assert_eq!(out.len(), RECORD_RETENTION);
        assert_eq!(out[0].seq, 10);
    }
}
