//! Register-op builders for [`RegBatch`](gpupm_uapi::ioctl::RegBatch)es,
//! named by what they do and how wide they access, the argument of a single
//! register ioctl ([`access`]), and the narrowing of a 32-bit register's
//! value as a batch returns it; the batch that stages and commits a rekey
//! blob ([`rekey_writes`]).

pub use gpupm_cc::REKEY_WORDS;
use gpupm_uapi::ioctl::{reg_op, RegAccess, RegOp, IOCTL_STRUCT_VERSION};

/// The register batch that stages a rekey blob (`words` in staging-register
/// order) and commits it for VM `vm`, as [`RegOp`]s: the writes of
/// [`gpupm_cc::rekey::register_writes`] — the 14 staging writes from
/// `REKEY_NONCE` up, then `VM_KEY_COMMIT` = 1 (`docs/confidential.md`).
/// Run it as one batch: the device opens the blob at the commit, and a
/// refused commit leaves every op of the batch undone.
pub fn rekey_writes(vm: u32, words: &[u32; REKEY_WORDS]) -> Vec<RegOp> {
    gpupm_cc::rekey::register_writes(vm, words)
        .into_iter()
        .map(|(offset, word)| write32(offset, word))
        .collect()
}

/// Reads a 32-bit register.
pub const fn read32(offset: u64) -> RegOp {
    RegOp {
        offset,
        value: 0,
        op: reg_op::READ,
        width: 4,
    }
}

/// Reads a 64-bit register in one access.
pub const fn read64(offset: u64) -> RegOp {
    RegOp {
        offset,
        value: 0,
        op: reg_op::READ,
        width: 8,
    }
}

/// Reads a register at its natural width ([`width_of`]).
pub fn read(offset: u64) -> RegOp {
    if gpupm_uapi::map::is_64bit(offset) {
        read64(offset)
    } else {
        read32(offset)
    }
}

/// Writes a 32-bit register.
pub const fn write32(offset: u64, value: u32) -> RegOp {
    RegOp {
        offset,
        value: value as u64,
        op: reg_op::WRITE,
        width: 4,
    }
}

/// Writes a 64-bit register in one access.
pub const fn write64(offset: u64, value: u64) -> RegOp {
    RegOp {
        offset,
        value,
        op: reg_op::WRITE,
        width: 8,
    }
}

/// The argument of `GPUPM_IOC_REG_READ` (`value` 0) or
/// `GPUPM_IOC_REG_WRITE` of `width` bytes at `offset`.
pub const fn access(offset: u64, width: u32, value: u64) -> RegAccess {
    RegAccess {
        version: IOCTL_STRUCT_VERSION,
        width,
        offset,
        value,
        flags: 0,
        reserved: 0,
    }
}

/// Width in bytes of register `offset`: 8 for 64-bit registers, else 4.
pub fn width_of(offset: u64) -> u32 {
    if gpupm_uapi::map::is_64bit(offset) {
        8
    } else {
        4
    }
}

/// The value of a 32-bit register as a batch returns it (ops carry 64
/// bits; a 32-bit read leaves the upper half zero, so nothing is lost).
pub const fn reg32(value: u64) -> u32 {
    let b = value.to_le_bytes();
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}
