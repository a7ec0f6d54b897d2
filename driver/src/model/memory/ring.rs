//! A stream ring in device memory: the records an RC writes at each
//! commit, read by the host through the memory window.
//!
//! Registers, per partition slot: `PART_STREAM_HEAD`, `PART_STREAM_TAIL`,
//! `PART_STREAM_CAP`, `PART_STREAM_WATERMARK`, `PART_STREAM_LOST`,
//! `PART_STREAM_BASE`.

use gpupm_uapi::layout::{self, StreamRecord, StreamSlot, STREAM_RING_MAX, STREAM_SLOT_SIZE};
use gpupm_uapi::regs::{self as r};
use zerocopy::{FromZeros, IntoBytes};

use crate::model::access::{r32, r64, RegValue, Reject};
use crate::model::cc::{seal, VmCipher};

/// A stream ring in device memory.
#[derive(Clone, Debug)]
pub struct Ring {
    /// Capacity in records (power of two).
    pub cap: u32,
    /// Next index the device writes (mod 2^32).
    pub head: u32,
    /// Next index the host reads (mod 2^32).
    pub tail: u32,
    /// Records lost to a full ring.
    pub lost: u64,
    /// Watermark in records.
    pub watermark: u32,
    /// Stream sequence: records produced or lost.
    pub seq: u64,
    slots: Vec<StreamSlot>,
    /// STREAM_OVERFLOW raised since the ring last stored a record.
    overflow_reported: bool,
    /// STREAM_WATERMARK raised since the host last moved the tail.
    watermark_reported: bool,
}

/// What happened to a record pushed into a ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pushed {
    /// Stored; the ring now holds this many records.
    Stored {
        /// Fill after the push.
        fill: u32,
    },
    /// The ring was full; the record was counted as lost.
    Lost,
}

/// An interrupt a push raises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingEvent {
    /// The ring reached its watermark; it holds `fill` records.
    Watermark {
        /// Records held.
        fill: u32,
    },
    /// The ring was full; `lost` records were lost so far.
    Overflow {
        /// Records lost since the ring was created or reset.
        lost: u64,
    },
}

/// A checked write to a ring register.
#[derive(Clone, Copy, Debug)]
pub enum RingWrite {
    /// `PART_STREAM_TAIL`.
    Tail(u32),
    /// `PART_STREAM_WATERMARK`.
    Watermark(u32),
}

impl Ring {
    pub(super) fn new(cap: u32, watermark: u32) -> Self {
        Ring {
            cap,
            head: 0,
            tail: 0,
            lost: 0,
            watermark,
            seq: 0,
            slots: vec![StreamSlot::new_zeroed(); cap as usize],
            overflow_reported: false,
            watermark_reported: false,
        }
    }

    /// Empties the ring, keeping capacity and watermark (device reset).
    pub(super) fn clear(&mut self) {
        *self = Ring::new(self.cap, self.watermark);
    }

    /// Records waiting for the host.
    pub fn fill(&self) -> u32 {
        self.head.wrapping_sub(self.tail)
    }

    /// Stores `record` (its `seq` is assigned here) unless the ring is full.
    pub fn push(&mut self, record: &mut StreamRecord, cipher: Option<&mut VmCipher>) -> Pushed {
        self.seq += 1;
        record.seq = self.seq;
        if self.fill() >= self.cap {
            self.lost += 1;
            return Pushed::Lost;
        }
        let slot = &mut self.slots[(self.head & (self.cap - 1)) as usize];
        slot.payload.copy_from_slice(record.as_bytes());
        seal(
            &mut slot.envelope,
            &mut slot.payload,
            &mut slot.tag,
            record.vm,
            cipher,
        );
        self.head = self.head.wrapping_add(1);
        Pushed::Stored { fill: self.fill() }
    }

    /// Pushes `record` and says which interrupt the push raises, if any.
    ///
    /// The watermark is raised once per drain: at the first push that leaves
    /// the ring at or above the watermark since the host last moved the tail,
    /// so records arriving while the host drains can never leave it waiting
    /// for an interrupt that does not come. An overflow is raised at the
    /// first record lost since the ring last stored one.
    pub fn push_and_report(
        &mut self,
        record: &mut StreamRecord,
        cipher: Option<&mut VmCipher>,
    ) -> Option<RingEvent> {
        match self.push(record, cipher) {
            Pushed::Stored { fill } => {
                self.overflow_reported = false;
                let first = !self.watermark_reported;
                (fill >= self.watermark && first).then(|| {
                    self.watermark_reported = true;
                    RingEvent::Watermark { fill }
                })
            }
            Pushed::Lost => (!self.overflow_reported).then(|| {
                self.overflow_reported = true;
                RingEvent::Overflow { lost: self.lost }
            }),
        }
    }

    /// Copies ring bytes from `within` (offset inside the ring's span of the
    /// window) into `buf`; `None` if the range leaves the ring.
    pub(super) fn read_slots(&self, within: u64, buf: &mut [u8]) -> Option<()> {
        let stop = within.checked_add(u64::try_from(buf.len()).ok()?)?;
        if stop > u64::from(self.cap) * STREAM_SLOT_SIZE {
            return None;
        }
        buf.copy_from_slice(&self.slots.as_bytes()[window_range(within, stop)?]);
        Some(())
    }

    /// Whether `offset` inside a partition block is a ring register.
    #[inline]
    pub fn owns(offset: u64) -> bool {
        (r::PART_STREAM_HEAD..r::PART_STREAM_BASE + 8).contains(&offset)
    }

    /// Reads ring `p`'s register at `offset` inside the partition block.
    pub fn read(&self, p: u32, offset: u64) -> Option<RegValue> {
        match offset {
            r::PART_STREAM_HEAD => r32(self.head),
            r::PART_STREAM_TAIL => r32(self.tail),
            r::PART_STREAM_CAP => r32(self.cap),
            r::PART_STREAM_WATERMARK => r32(self.watermark),
            r::PART_STREAM_LOST => r64(self.lost),
            r::PART_STREAM_BASE => r64(layout::stream_slot_offset(p, 0)),
            _ => None,
        }
    }

    /// Checks a write of `v`; `tail` is the batch's view of the tail
    /// (advanced past a tail write).
    pub fn check_write(&self, offset: u64, v: u32, tail: &mut u32) -> Result<RingWrite, Reject> {
        match offset {
            r::PART_STREAM_TAIL => {
                if v.wrapping_sub(*tail) > self.head.wrapping_sub(*tail) {
                    return Err(Reject::BadValue(
                        "tail must lie between the old tail and head",
                    ));
                }
                *tail = v;
                Ok(RingWrite::Tail(v))
            }
            r::PART_STREAM_WATERMARK => {
                if v == 0 || v > self.cap.min(STREAM_RING_MAX) {
                    return Err(Reject::BadValue("watermark must be 1..=capacity"));
                }
                Ok(RingWrite::Watermark(v))
            }
            _ => Err(Reject::ReadOnly),
        }
    }

    /// Executes a checked write. A tail write re-arms both interrupts.
    pub fn apply(&mut self, w: RingWrite) {
        match w {
            RingWrite::Tail(tail) => {
                self.tail = tail;
                self.overflow_reported = false;
                self.watermark_reported = false;
            }
            RingWrite::Watermark(v) => self.watermark = v,
        }
    }
}

/// `start..end` as a slice range. Callers pass ranges inside a region the
/// device allocated, which fit in `usize`; `None` otherwise.
pub(super) fn window_range(start: u64, end: u64) -> Option<std::ops::Range<usize>> {
    Some(usize::try_from(start).ok()?..usize::try_from(end).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watermark_fires_once_per_drain_and_overflow_once_per_loss() {
        let mut ring = Ring::new(4, 2);
        let mut rec = StreamRecord::new_zeroed();
        assert_eq!(ring.push_and_report(&mut rec, None), None);
        assert_eq!(
            ring.push_and_report(&mut rec, None),
            Some(RingEvent::Watermark { fill: 2 })
        );
        assert_eq!(ring.push_and_report(&mut rec, None), None);
        assert_eq!(ring.push_and_report(&mut rec, None), None);
        assert_eq!(
            ring.push_and_report(&mut rec, None),
            Some(RingEvent::Overflow { lost: 1 })
        );
        assert_eq!(ring.push_and_report(&mut rec, None), None);
        let mut tail = ring.tail;
        let w = ring.check_write(r::PART_STREAM_TAIL, 3, &mut tail).unwrap();
        ring.apply(w);
        assert_eq!(
            ring.push_and_report(&mut rec, None),
            Some(RingEvent::Watermark { fill: 2 })
        );
    }

    #[test]
    fn tail_must_stay_between_old_tail_and_head() {
        let mut ring = Ring::new(4, 2);
        ring.push(&mut StreamRecord::new_zeroed(), None);
        let mut tail = 0;
        assert!(matches!(
            ring.check_write(r::PART_STREAM_TAIL, 2, &mut tail),
            Err(Reject::BadValue(_))
        ));
        assert!(ring.check_write(r::PART_STREAM_TAIL, 1, &mut tail).is_ok());
        assert_eq!(tail, 1);
        assert!(matches!(
            ring.check_write(r::PART_STREAM_WATERMARK, 5, &mut tail),
            Err(Reject::BadValue(_))
        ));
        assert_eq!(ring.read(0, r::PART_STREAM_HEAD), r32(1));
    }
}
