//! A partition's range-record ring: sized by the host (`RRING_CAP`),
//! drained through `RRING_TAIL`; a full ring counts the record as lost,
//! never silently (the crossing's interrupt says so, and `seq` advances).

use gpupm_uapi::ranges::{RangeSlot, RRING_MAX_RECORDS};

use crate::model::access::Reject;
use crate::model::cc::{seal_into_slot, VmCipher};

/// Bytes of one slot.
const SLOT: usize = core::mem::size_of::<RangeSlot>();

/// The ring.
#[derive(Clone, Debug, Default)]
pub struct RecordRing {
    /// Capacity in records (0 = none).
    pub cap: u32,
    /// Next index the device writes (mod 2^32).
    pub head: u32,
    /// Next index the host reads (mod 2^32).
    pub tail: u32,
    /// Records lost since the last capacity write.
    pub lost: u64,
    /// Records produced (stored or lost) since the last capacity write.
    pub produced: u64,
    bytes: Vec<u8>,
}

impl RecordRing {
    /// Checks a capacity write.
    pub fn check_cap(v: u32) -> Result<(), Reject> {
        if v != 0 && !v.is_power_of_two() {
            return Err(Reject::BadValue(
                "ring capacity must be 0 or a power of two",
            ));
        }
        if v > RRING_MAX_RECORDS {
            return Err(Reject::BadValue("ring capacity above RRING_MAX_RECORDS"));
        }
        Ok(())
    }

    /// Checks a tail write against the batch's view `tail`.
    pub fn check_tail(&self, v: u32, tail: &mut u32) -> Result<(), Reject> {
        if v.wrapping_sub(*tail) > self.head.wrapping_sub(*tail) {
            return Err(Reject::BadValue(
                "tail must lie between the old tail and head",
            ));
        }
        *tail = v;
        Ok(())
    }

    /// Sizes (and empties) the ring.
    pub fn resize(&mut self, cap: u32) {
        *self = RecordRing {
            cap,
            bytes: vec![0; cap as usize * SLOT],
            ..RecordRing::default()
        };
    }

    /// Empties the ring, keeping its capacity (device reset).
    pub fn clear(&mut self) {
        self.resize(self.cap);
    }

    /// Stores `record` sealed for `vm` (through `cipher` when confidential);
    /// false when the ring was full and the record was lost.
    pub fn push(&mut self, record: &[u8], vm: u32, cipher: Option<&mut VmCipher>) -> bool {
        self.produced += 1;
        if self.cap == 0 || self.head.wrapping_sub(self.tail) >= self.cap {
            self.lost += 1;
            return false;
        }
        let at = (self.head & (self.cap - 1)) as usize * SLOT;
        seal_into_slot(&mut self.bytes[at..at + SLOT], record, vm, cipher);
        self.head = self.head.wrapping_add(1);
        true
    }

    /// Copies bytes at `within` (offset from slot 0) into `buf`.
    pub fn read(&self, within: u64, buf: &mut [u8]) -> Option<()> {
        let start = usize::try_from(within).ok()?;
        let end = start.checked_add(buf.len())?;
        buf.copy_from_slice(self.bytes.get(start..end)?);
        Some(())
    }
}
