//! The interrupt controller: latched status, mask, write-one-to-clear ack,
//! and a bounded log of interrupt records that the driver layer fans out to
//! every open file handle.
//!
//! Registers: `INTR_STATUS`, `INTR_MASK`, `INTR_ACK`, `INTR_PENDING`,
//! `INTR_SEQ` (the block at `0x0200..0x0300`).

use std::collections::VecDeque;

use gpupm_uapi::intr::{source, InterruptRecord};
use gpupm_uapi::regs::{self as r};

use super::access::{r32, r64, RegValue, Reject};

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
        let oldest = self.next_seq - u64::try_from(self.log.len()).unwrap_or(0);
        // Beyond the log's length the skip only has to skip everything.
        let skip = usize::try_from(from.saturating_sub(oldest)).unwrap_or(usize::MAX);
        out.extend(self.log.iter().skip(skip));
        self.next_seq
    }
}

/// A checked write to an interrupt register.
#[derive(Clone, Copy, Debug)]
pub enum IntrWrite {
    /// `INTR_MASK`.
    Mask(u32),
    /// `INTR_ACK`.
    Ack(u32),
}

impl Interrupts {
    /// Reads one of the controller's registers.
    pub fn read(&self, offset: u64) -> Option<RegValue> {
        match offset {
            r::INTR_STATUS => r32(self.status),
            r::INTR_MASK => r32(self.mask),
            r::INTR_ACK => r32(0),
            r::INTR_PENDING => r32(self.pending()),
            r::INTR_SEQ => r64(self.next_seq()),
            _ => None,
        }
    }

    /// Checks a write of `v` to one of the controller's registers.
    pub fn check_write(offset: u64, v: u32) -> Result<IntrWrite, Reject> {
        let defined = v & !source::ALL == 0;
        match offset {
            r::INTR_MASK if defined => Ok(IntrWrite::Mask(v)),
            r::INTR_ACK if defined => Ok(IntrWrite::Ack(v)),
            r::INTR_MASK | r::INTR_ACK => Err(Reject::BadValue("undefined bits set")),
            _ => Err(Reject::ReadOnly),
        }
    }

    /// Executes a checked write.
    pub fn apply(&mut self, w: IntrWrite) {
        match w {
            IntrWrite::Mask(v) => self.mask = v,
            IntrWrite::Ack(v) => self.ack(v),
        }
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
    fn undefined_bits_are_refused_and_status_is_read_only() {
        let undefined = !source::ALL;
        assert_eq!(
            Interrupts::check_write(r::INTR_MASK, undefined).err(),
            Some(Reject::BadValue("undefined bits set"))
        );
        assert_eq!(
            Interrupts::check_write(r::INTR_STATUS, 0).err(),
            Some(Reject::ReadOnly)
        );
        let mut i = Interrupts::default();
        i.raise(source::CTX_CREATED, 1, 0, 0, 0);
        if let Ok(w) = Interrupts::check_write(r::INTR_ACK, source::CTX_CREATED) {
            i.apply(w);
        }
        assert_eq!(i.read(r::INTR_STATUS), r32(0));
        assert_eq!(i.read(r::INTR_SEQ), r64(1));
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
