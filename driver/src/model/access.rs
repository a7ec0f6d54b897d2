//! Register accesses as the units see them: the width of a register in its
//! value's type, an access decoded once into the register it names and the
//! part of it it touches, and why a unit refuses a write.
//!
//! Every register is declared in the register map (`gpupm_uapi::map`),
//! 32 or 64 bits wide. A 64-bit register is read with one 8-byte access at
//! its offset, or one half at a time with 4-byte accesses. Writes are 4
//! bytes wide: no 64-bit register is writable. An offset where the map
//! declares no register is no register, whatever unit's block it is in.

use gpupm_uapi::map::{self, Location};
use gpupm_uapi::regdef::{self, Reg};
use gpupm_uapi::regs::{self as r};

/// Why a register access failed. All map to EINVAL at the node boundary.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum RegError {
    /// Width not 4/8 or offset not aligned to it.
    #[error("a {width}-byte access at {offset:#x} is not a naturally aligned 4- or 8-byte access")]
    BadAccess {
        /// Offset.
        offset: u64,
        /// Width.
        width: u32,
    },
    /// Nothing is mapped there (or the instance does not exist).
    #[error("no register at {offset:#x}")]
    NoRegister {
        /// Offset.
        offset: u64,
    },
    /// An 8-byte access to a 32-bit register.
    #[error("register {offset:#x} is 32 bits wide; an 8-byte access is not allowed")]
    Not64 {
        /// Offset.
        offset: u64,
    },
    /// Write to a read-only register.
    #[error("register {offset:#x} is read-only")]
    ReadOnly {
        /// Offset.
        offset: u64,
    },
    /// Value out of range or with undefined bits.
    #[error("value {value:#x} is not valid for register {offset:#x}: {reason}")]
    BadValue {
        /// Offset.
        offset: u64,
        /// Value.
        value: u64,
        /// Why.
        reason: &'static str,
    },
    /// A handshake write out of order.
    #[error("partition {partition} is in handshake state {state}: {reason}")]
    BadSequence {
        /// Partition slot.
        partition: u32,
        /// Current state.
        state: u32,
        /// Why.
        reason: &'static str,
    },
}

/// The value of a register, typed by the register's width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegValue {
    /// A 32-bit register.
    R32(u32),
    /// A 64-bit register.
    R64(u64),
}

/// A 32-bit register's value.
#[inline]
pub(crate) fn r32(v: u32) -> Option<RegValue> {
    Some(RegValue::R32(v))
}

/// A 64-bit register's value.
#[inline]
pub(crate) fn r64(v: u64) -> Option<RegValue> {
    Some(RegValue::R64(v))
}

/// A count of table entries or units as a 32-bit field. Every such count
/// is bounded by its table size (at most `MAX_CONTEXTS`), far below 2^32;
/// the saturation is never reached.
pub(crate) fn table_count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// A 32-bit register holding a count of table entries or units.
pub(crate) fn count32(n: usize) -> Option<RegValue> {
    r32(table_count(n))
}

/// Width of an access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Width {
    /// 4 bytes.
    W32,
    /// 8 bytes.
    W64,
}

impl Width {
    /// The width of a `bytes`-byte access, if it is one the device decodes.
    pub fn from_bytes(bytes: u32) -> Option<Self> {
        match bytes {
            4 => Some(Width::W32),
            8 => Some(Width::W64),
            _ => None,
        }
    }

    fn bytes(self) -> u64 {
        match self {
            Width::W32 => 4,
            Width::W64 => 8,
        }
    }
}

/// Which part of the register at [`Access::base`] an access touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The whole register, 32 or 64 bits.
    Whole(Width),
    /// The low 32 bits of a 64-bit register.
    Low,
    /// The high 32 bits of a 64-bit register.
    High,
}

/// A decoded access: the register the map declares there and the part
/// touched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    /// Offset of the register (the 64-bit register's offset for a high
    /// half; the word's for a word of a multi-word register).
    pub base: u64,
    /// The part of the register accessed.
    pub part: Part,
    /// The register's declaration.
    pub reg: &'static Reg,
    /// Where [`Access::base`] lies: block, instance, offset in the block.
    pub at: Location,
}

impl Access {
    /// Decodes a `width`-byte access at `offset`: width and alignment, the
    /// register the map declares there, and which half of it.
    #[inline]
    pub fn decode(offset: u64, width: u32) -> Result<Self, RegError> {
        let w = Width::from_bytes(width)
            .filter(|w| offset.is_multiple_of(w.bytes()))
            .ok_or(RegError::BadAccess { offset, width })?;
        let mut at = map::locate(offset).ok_or(RegError::NoRegister { offset })?;
        let (reg, first) = at.register().ok_or(RegError::NoRegister { offset })?;
        let into = at.offset - first;
        let part = match (reg.width, w) {
            (regdef::Width::W32, Width::W32) => Part::Whole(Width::W32),
            (regdef::Width::W32, Width::W64) => return Err(RegError::Not64 { offset }),
            (regdef::Width::W64, Width::W64) => Part::Whole(Width::W64),
            (regdef::Width::W64, Width::W32) if into == 0 => Part::Low,
            (regdef::Width::W64, Width::W32) => Part::High,
        };
        // A 64-bit register is one register; a word of a word array is
        // a register of its own.
        let back = if reg.width == regdef::Width::W64 {
            into
        } else {
            0
        };
        at.offset -= back;
        Ok(Access {
            base: offset - back,
            part,
            reg,
            at,
        })
    }

    /// Whether the access is one a write can be: the whole of a 32-bit register.
    #[inline]
    pub fn is_whole32(&self) -> bool {
        self.part == Part::Whole(Width::W32)
    }

    /// The bits the access reads from the register's value `v`.
    #[inline]
    pub fn extract(&self, v: RegValue) -> u64 {
        let wide = match v {
            RegValue::R32(x) => u64::from(x),
            RegValue::R64(x) => x,
        };
        let [lo, hi] = halves(wide);
        match self.part {
            Part::Whole(_) => wide,
            Part::Low => u64::from(lo),
            Part::High => u64::from(hi),
        }
    }
}

/// The low and high 32-bit halves of `v`.
#[inline]
fn halves(v: u64) -> [u32; 2] {
    let b = v.to_le_bytes();
    [
        u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
    ]
}

/// Why a unit refuses a write to one of its registers; the device adds the
/// offset and value to make the [`RegError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reject {
    /// The register is not writable.
    ReadOnly,
    /// The value is out of range or has undefined bits.
    BadValue(&'static str),
    /// A handshake write out of order.
    BadSequence {
        /// Partition slot.
        partition: u32,
        /// Handshake state at the write.
        state: u32,
        /// Why.
        reason: &'static str,
    },
}

impl Reject {
    /// The register error for this refusal of `value` at `offset`.
    pub fn at(self, offset: u64, value: u64) -> RegError {
        match self {
            Reject::ReadOnly => RegError::ReadOnly { offset },
            Reject::BadValue(reason) => RegError::BadValue {
                offset,
                value,
                reason,
            },
            Reject::BadSequence {
                partition,
                state,
                reason,
            } => RegError::BadSequence {
                partition,
                state,
                reason,
            },
        }
    }
}

/// Partition slots named by a mask (bit `p` = slot `p`).
#[inline]
pub(crate) fn slots(mask: u32) -> impl Iterator<Item = u32> {
    (0..r::MAX_PARTITION_SLOTS).filter(move |p| mask & (1 << p) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_resolves_halves_and_rejects_bad_widths() {
        let high = Access::decode(r::CYCLE + 4, 4).unwrap();
        assert_eq!(
            (high.base, high.part, high.reg.name),
            (r::CYCLE, Part::High, "CYCLE")
        );
        assert_eq!(high.at.offset, r::CYCLE);
        assert_eq!(Access::decode(r::CYCLE, 4).map(|a| a.part), Ok(Part::Low));
        let word = Access::decode(r::REKEY_KEY + 12, 4).unwrap();
        assert_eq!((word.base, word.reg.name), (r::REKEY_KEY + 12, "REKEY_KEY"));
        let counter = Access::decode(r::part(5, r::PART_STREAM_LOST) + 4, 4).unwrap();
        assert_eq!(
            (counter.at.instance, counter.at.offset),
            (5, r::PART_STREAM_LOST)
        );
        assert_eq!(
            Access::decode(r::part(0, r::PART_SWITCH_REQ_CYCLE + 8), 4),
            Err(RegError::NoRegister {
                offset: r::part(0, r::PART_SWITCH_REQ_CYCLE + 8)
            })
        );
        assert_eq!(
            Access::decode(r::ID, 8),
            Err(RegError::Not64 { offset: r::ID })
        );
        assert_eq!(
            Access::decode(2, 4),
            Err(RegError::BadAccess {
                offset: 2,
                width: 4
            })
        );
        assert_eq!(
            Access::decode(r::BAR0_SIZE, 4),
            Err(RegError::NoRegister {
                offset: r::BAR0_SIZE
            })
        );
    }

    #[test]
    fn extract_splits_a_64_bit_value_into_halves() {
        let v = RegValue::R64(0x1122_3344_5566_7788);
        let at = |part| {
            let access = Access::decode(r::CYCLE, 8).unwrap();
            Access { part, ..access }.extract(v)
        };
        assert_eq!(at(Part::Low), 0x5566_7788);
        assert_eq!(at(Part::High), 0x1122_3344);
        assert_eq!(at(Part::Whole(Width::W64)), 0x1122_3344_5566_7788);
    }
}
