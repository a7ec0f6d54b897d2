//! A sample buffer: one record type's ring in the partition's sample span,
//! placed and sized by the host (`BUF_BASE`, `BUF_CAP`), drained through
//! `BUF_TAIL`; a full buffer counts the record as lost, never silently.

use std::collections::BTreeMap;

use gpupm_uapi::sampling::lost_select;
use gpupm_uapi::sampling::{self as s, BUF_ALIGN, SAMPLE_SPAN};

use crate::model::access::{r32, r64, RegValue, Reject};
use crate::model::cc::{seal_into_slot, VmCipher};

/// An interrupt a push raises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufEvent {
    /// The buffer reached its watermark; it holds this many records.
    Watermark(u32),
    /// A record was lost; this many so far.
    Overflow(u64),
}

/// A sample buffer.
#[derive(Clone, Debug)]
pub struct SampleBuffer {
    kind: u32,
    /// Byte offset in the span.
    pub base: u32,
    /// Capacity in records (0 = none).
    pub cap: u32,
    head: u32,
    tail: u32,
    watermark: u32,
    lost: u64,
    /// Lost records per context, and per VM (the same records).
    lost_by_ctx: BTreeMap<u32, u64>,
    lost_by_vm: BTreeMap<u32, u64>,
    produced: u64,
    bytes: Vec<u8>,
    overflow_reported: bool,
    watermark_reported: bool,
}

/// Shadow of a buffer's placement for checking a batch.
#[derive(Clone, Copy, Debug, Default)]
pub struct Placement {
    /// `BUF_BASE`.
    pub base: u32,
    /// `BUF_CAP`.
    pub cap: u32,
    /// The batch's view of `BUF_TAIL`.
    pub tail: u32,
}

/// A checked buffer write.
#[derive(Clone, Copy, Debug)]
pub enum BufWrite {
    /// `BUF_BASE`.
    Base(u32),
    /// `BUF_CAP`.
    Cap(u32),
    /// `BUF_TAIL`.
    Tail(u32),
    /// `BUF_WATERMARK`.
    Watermark(u32),
}

impl SampleBuffer {
    /// An empty buffer of `kind` with no capacity.
    pub fn new(kind: u32) -> Self {
        SampleBuffer {
            kind,
            base: 0,
            cap: 0,
            head: 0,
            tail: 0,
            watermark: 1,
            lost: 0,
            lost_by_ctx: BTreeMap::new(),
            lost_by_vm: BTreeMap::new(),
            produced: 0,
            bytes: Vec::new(),
            overflow_reported: false,
            watermark_reported: false,
        }
    }

    fn slot_size(&self) -> u64 {
        s::slot_size(self.kind)
    }

    /// Byte range of the buffer in the span.
    pub fn span_range(&self) -> std::ops::Range<u64> {
        let start = u64::from(self.base);
        start..start + u64::from(self.cap) * self.slot_size()
    }

    /// The batch's view of this buffer's placement.
    pub fn placement(&self) -> Placement {
        Placement {
            base: self.base,
            cap: self.cap,
            tail: self.tail,
        }
    }

    /// Stores `record` of context `ctx` sealed for `vm` (through `cipher`
    /// for a confidential VM), or counts it lost (for the buffer, the
    /// context and the VM); returns the interrupt it raises.
    pub fn push(
        &mut self,
        record: &[u8],
        (vm, ctx): (u32, u32),
        cipher: Option<&mut VmCipher>,
    ) -> Option<BufEvent> {
        self.produced += 1;
        if self.cap == 0 || self.head.wrapping_sub(self.tail) >= self.cap {
            self.lost += 1;
            *self.lost_by_ctx.entry(ctx).or_default() += 1;
            *self.lost_by_vm.entry(vm).or_default() += 1;
            return (!self.overflow_reported).then(|| {
                self.overflow_reported = true;
                BufEvent::Overflow(self.lost)
            });
        }
        let size = usize::try_from(self.slot_size()).unwrap_or(0);
        let at = usize::try_from(self.head & (self.cap - 1)).unwrap_or(0) * size;
        seal_into_slot(&mut self.bytes[at..at + size], record, vm, cipher);
        self.head = self.head.wrapping_add(1);
        self.overflow_reported = false;
        let fill = self.head.wrapping_sub(self.tail);
        (fill >= self.watermark && !self.watermark_reported).then(|| {
            self.watermark_reported = true;
            BufEvent::Watermark(fill)
        })
    }

    /// Records produced so far (the next record's `seq` is this plus one).
    pub fn produced(&self) -> u64 {
        self.produced
    }

    /// Records lost so far.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Records of the scope `select` names (a `SAMP_LOST_SELECT` value)
    /// lost so far.
    pub fn lost_selected(&self, select: u32) -> u64 {
        let id = select & lost_select::ID_MASK;
        let by = if select & lost_select::VM != 0 {
            &self.lost_by_vm
        } else {
            &self.lost_by_ctx
        };
        by.get(&id).copied().unwrap_or(0)
    }

    /// Copies bytes at `within` (offset from the buffer's first slot).
    pub fn read(&self, within: u64, buf: &mut [u8]) -> Option<()> {
        let start = usize::try_from(within).ok()?;
        let end = start.checked_add(buf.len())?;
        buf.copy_from_slice(self.bytes.get(start..end)?);
        Some(())
    }

    /// Reads register `reg` (relative to the buffer's register set) of the
    /// buffer in partition `p`; `select` is the unit's `SAMP_LOST_SELECT`.
    pub fn read_reg(&self, p: u32, reg: u64, select: u32) -> Option<RegValue> {
        match reg {
            s::BUF_BASE => r32(self.base),
            s::BUF_CAP => r32(self.cap),
            s::BUF_HEAD => r32(self.head),
            s::BUF_TAIL => r32(self.tail),
            s::BUF_WATERMARK => r32(self.watermark),
            s::BUF_LOST => r64(self.lost),
            s::BUF_ADDR => r64(s::sample_span_offset(p) + u64::from(self.base)),
            s::BUF_PRODUCED => r64(self.produced),
            s::BUF_LOST_SELECTED => r64(self.lost_selected(select)),
            _ => None,
        }
    }

    /// Checks a write of `v` to `reg`; `mine` is the batch's view of this
    /// buffer, `other` of the partition's other buffer, `enabled` whether
    /// the sampler that fills it is enabled (in the batch's view).
    pub fn check_write(
        &self,
        reg: u64,
        v: u32,
        mine: &mut Placement,
        other: Placement,
        enabled: bool,
    ) -> Result<BufWrite, Reject> {
        let head = self.head;
        match reg {
            s::BUF_BASE | s::BUF_CAP => {
                if enabled {
                    return Err(Reject::BadValue(
                        "a buffer is placed and sized only while its sampler is disabled",
                    ));
                }
                let (base, cap) = if reg == s::BUF_BASE {
                    (v, mine.cap)
                } else {
                    (mine.base, v)
                };
                self.check_placement(base, cap, other)?;
                (mine.base, mine.cap, mine.tail) = (base, cap, 0);
                Ok(if reg == s::BUF_BASE {
                    BufWrite::Base(v)
                } else {
                    BufWrite::Cap(v)
                })
            }
            s::BUF_TAIL => {
                if v.wrapping_sub(mine.tail) > head.wrapping_sub(mine.tail) {
                    return Err(Reject::BadValue(
                        "tail must lie between the old tail and head",
                    ));
                }
                mine.tail = v;
                Ok(BufWrite::Tail(v))
            }
            s::BUF_WATERMARK if v == 0 || v > mine.cap => {
                Err(Reject::BadValue("watermark must be 1..=capacity"))
            }
            s::BUF_WATERMARK => Ok(BufWrite::Watermark(v)),
            _ => Err(Reject::ReadOnly),
        }
    }

    fn check_placement(&self, base: u32, cap: u32, other: Placement) -> Result<(), Reject> {
        if u64::from(base) % BUF_ALIGN != 0 {
            return Err(Reject::BadValue("buffer base must be a multiple of 4096"));
        }
        if cap != 0 && !cap.is_power_of_two() {
            return Err(Reject::BadValue(
                "buffer capacity must be 0 or a power of two",
            ));
        }
        let end = u64::from(base) + u64::from(cap) * self.slot_size();
        if end > SAMPLE_SPAN {
            return Err(Reject::BadValue(
                "buffer must lie inside the partition's sample span",
            ));
        }
        let other_kind = s::buf_kind::COUNT - 1 - self.kind;
        let other_end = u64::from(other.base) + u64::from(other.cap) * s::slot_size(other_kind);
        let overlap = cap != 0
            && other.cap != 0
            && u64::from(base) < other_end
            && u64::from(other.base) < end;
        if overlap {
            return Err(Reject::BadValue(
                "the branch and PC buffers must not overlap",
            ));
        }
        Ok(())
    }

    /// Executes a checked write; placing or sizing empties the buffer.
    pub fn apply(&mut self, w: BufWrite) {
        match w {
            BufWrite::Base(v) => self.reset(v, self.cap),
            BufWrite::Cap(v) => self.reset(self.base, v),
            BufWrite::Tail(v) => {
                self.tail = v;
                self.overflow_reported = false;
                self.watermark_reported = false;
            }
            BufWrite::Watermark(v) => self.watermark = v,
        }
    }

    fn reset(&mut self, base: u32, cap: u32) {
        let kind = self.kind;
        *self = SampleBuffer::new(kind);
        self.base = base;
        self.cap = cap;
        self.watermark = (cap / 2).max(1);
        let bytes = u64::from(cap) * self.slot_size();
        self.bytes = vec![0; usize::try_from(bytes).unwrap_or(0)];
    }

    /// Empties the buffer, keeping placement (device reset).
    pub fn clear(&mut self) {
        self.reset(self.base, self.cap);
    }
}
