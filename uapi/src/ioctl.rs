//! ioctl numbers and argument structs of the device node (`card0`).
//!
//! Every argument is a flat `#[repr(C)]` struct without pointers and at most
//! 16 KiB, so the ABI works with FUSE/CUSE restricted-mode ioctls. Every
//! struct starts with a `version` field that must equal
//! [`IOCTL_STRUCT_VERSION`]; reserved fields and unknown flag bits must be
//! zero. Violations fail with EINVAL and change nothing.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::events::MAX_EVENTS;

/// ioctl "type" byte of the device node.
pub const IOC_MAGIC: u8 = b'G';
/// Version every ioctl argument struct must carry.
pub const IOCTL_STRUCT_VERSION: u32 = 1;
/// Largest argument struct the ABI allows.
pub const MAX_IOCTL_SIZE: usize = 16 * 1024;

/// `GPUPM_IOC_IDENTITY`: device identity and topology summary.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct Identity {
    /// Must be [`IOCTL_STRUCT_VERSION`] on input.
    pub version: u32,
    /// [`crate::regs::DEVICE_MAGIC`].
    pub magic: u32,
    /// [`crate::ABI_VERSION`].
    pub abi_version: u32,
    /// Number of events in the catalogue.
    pub events: u32,
    /// Partition slots (excluding system slot 0).
    pub partitions: u32,
    /// CCUs.
    pub ccus: u32,
    /// SMs.
    pub sms: u32,
    /// Nominal clock in kHz.
    pub clock_khz: u32,
    /// 1 when the clock runs in step mode.
    pub step_clock: u32,
    /// Reserved, 0.
    pub reserved: u32,
    /// Device cycle at the time of the call.
    pub cycle: u64,
}
const _: () = assert!(core::mem::size_of::<Identity>() == 48);

/// Register-op kinds in [`RegOp::op`].
pub mod reg_op {
    /// Read the register into `value`.
    pub const READ: u32 = 1;
    /// Write `value` to the register.
    pub const WRITE: u32 = 2;
}

/// One operation of a [`RegBatch`].
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct RegOp {
    /// BAR0 offset.
    pub offset: u64,
    /// Value written, or value read back.
    pub value: u64,
    /// [`reg_op::READ`] or [`reg_op::WRITE`].
    pub op: u32,
    /// Access width in bytes: 4 or 8.
    pub width: u32,
}
const _: () = assert!(core::mem::size_of::<RegOp>() == 24);

/// Most ops in one batch.
pub const MAX_BATCH_OPS: usize = 64;

/// `GPUPM_IOC_REG_BATCH`: a list of register ops executed in order with no
/// device time passing in between. If any op fails, no op takes effect,
/// `failed_index` names it and the call fails with EINVAL.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct RegBatch {
    /// [`IOCTL_STRUCT_VERSION`].
    pub version: u32,
    /// Number of valid entries in `ops` (1..=MAX_BATCH_OPS).
    pub count: u32,
    /// Must be 0.
    pub flags: u32,
    /// On failure: index of the op that failed; else `count`.
    pub failed_index: u32,
    /// The ops.
    pub ops: [RegOp; MAX_BATCH_OPS],
}
const _: () = assert!(core::mem::size_of::<RegBatch>() == 16 + 24 * MAX_BATCH_OPS);

/// `GPUPM_IOC_ADVANCE`: advance the step clock (EINVAL on a real-time clock).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct Advance {
    /// [`IOCTL_STRUCT_VERSION`].
    pub version: u32,
    /// Must be 0.
    pub flags: u32,
    /// Cycles to advance (1..=2^40).
    pub cycles: u64,
    /// Output: device cycle after the call.
    pub now: u64,
}
const _: () = assert!(core::mem::size_of::<Advance>() == 24);

/// Largest [`Advance::cycles`].
pub const MAX_ADVANCE_CYCLES: u64 = 1 << 40;

/// Ledger scopes in [`LedgerQuery::scope`].
pub mod ledger_scope {
    /// One context (`id` = context id).
    pub const CONTEXT: u32 = 1;
    /// One VM: sum over its contexts (`id` = VM id).
    pub const VM: u32 = 2;
    /// Everything, including device-level units (`id` = 0).
    pub const SYSTEM: u32 = 3;
}

/// `GPUPM_IOC_LEDGER` (debug only): exact counts of what was generated.
///
/// The ledger is the emulator's test oracle, not part of the device: the
/// ioctl exists only when `gpupm-driver` runs with `--debug-ledger`
/// (otherwise it fails with ENOTTY like an unknown ioctl).
///
/// For every event: `generated = (committed_equiv + masked) * scale + remainder`
/// where `scale` is 32 for multi-bit events and 1 otherwise, `masked` is what
/// CCU masks discarded, `remainder` is the multi-bit accumulator residue that
/// never reached a count, and `in_flight` is what sits in ULCs, CCUs and RCs
/// not yet committed. The system scope covers what the system block covers:
/// the device-level units and every VM that is not confidential.
///
/// The answer for a confidential VM or one of its contexts is sealed like
/// its blocks: `flags` has [`ledger_flags::SEALED`], the bytes of
/// `generated`, `masked` and `remainder` (in that order, 1536 bytes) are
/// AES-256-GCM ciphertext under the VM's session key with `envelope` and
/// `tag`, exactly as in a block slot. Otherwise `envelope` and `tag` are 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct LedgerQuery {
    /// [`IOCTL_STRUCT_VERSION`].
    pub version: u32,
    /// One of [`ledger_scope`].
    pub scope: u32,
    /// Context or VM id.
    pub id: u32,
    /// Must be 0 on input; bits of [`ledger_flags`] on output.
    pub flags: u32,
    /// Signal units generated (multi-bit: summed 0..=32 values).
    pub generated: [u64; MAX_EVENTS],
    /// Counts discarded by CCU masks.
    pub masked: [u64; MAX_EVENTS],
    /// Multi-bit residue (signal units) that never reached a count.
    pub remainder: [u64; MAX_EVENTS],
    /// Envelope of a sealed answer (all 0 otherwise); must be 0 on input.
    pub envelope: crate::layout::Envelope,
    /// GCM tag of a sealed answer (all 0 otherwise); must be 0 on input.
    pub tag: [u8; 16],
}
const _: () = assert!(core::mem::size_of::<LedgerQuery>() == 16 + 3 * 8 * MAX_EVENTS + 32 + 16);

/// Bytes of a [`LedgerQuery`] that a sealed answer encrypts: `generated`,
/// `masked` and `remainder`.
pub const LEDGER_SEALED_LEN: usize = 3 * 8 * MAX_EVENTS;

/// Output bits of [`LedgerQuery::flags`].
pub mod ledger_flags {
    /// The answer is sealed under the VM's session key.
    pub const SEALED: u32 = 1 << 0;
    /// The VM has no session (ABI 1.11): the answer is withheld — the
    /// counts are zero, the envelope has `WITHHELD` (with `SEALED` set too).
    pub const WITHHELD: u32 = 1 << 1;
}

/// Rows in one [`BlockLedgerQuery`] answer.
pub const BLOCK_LEDGER_ROWS: usize = 64;

/// Exact execution counts of one basic block of a context's program.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct BlockTruth {
    /// Kernel index in the program.
    pub kernel: u16,
    /// Block index in the kernel.
    pub block: u16,
    /// Reserved, 0.
    pub reserved: u32,
    /// Times the block was entered (a partly executed visit counts).
    pub visits: u64,
    /// Warp instructions the block retired on one SM (the context's
    /// `sm_inst_executed` is this summed over blocks, times the SMs of its
    /// partition that count it).
    pub instructions: u64,
    /// Context cycles spent in the block.
    pub cycles: u64,
}
const _: () = assert!(core::mem::size_of::<BlockTruth>() == 32);

/// `GPUPM_IOC_LEDGER_BLOCKS` (debug only, like [`LedgerQuery`]): the
/// ground truth per (kernel, block) of one context's program, counted up
/// to now. Rows come in (kernel, block) order starting at row `first`;
/// page with `first += count` until `first == total`.
///
/// A confidential VM's context's answer is sealed like its blocks: `flags`
/// has [`ledger_flags::SEALED`] and `rows` (2048 bytes) is ciphertext
/// under the VM's session key with `envelope` and `tag`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct BlockLedgerQuery {
    /// [`IOCTL_STRUCT_VERSION`].
    pub version: u32,
    /// Context id (an active or destroyed, not yet released context).
    pub ctx: u32,
    /// Input: first row to return (must be `<= total`).
    pub first: u32,
    /// Must be 0 on input; bits of [`ledger_flags`] on output.
    pub flags: u32,
    /// Output: rows filled.
    pub count: u32,
    /// Output: rows the context's program has (blocks over all kernels).
    pub total: u32,
    /// Output: the context's context cycles (cycles it ran) so far.
    pub ctx_cycles: u64,
    /// Output: the rows.
    pub rows: [BlockTruth; BLOCK_LEDGER_ROWS],
    /// Envelope of a sealed answer (all 0 otherwise); must be 0 on input.
    pub envelope: crate::layout::Envelope,
    /// GCM tag of a sealed answer (all 0 otherwise); must be 0 on input.
    pub tag: [u8; 16],
}
const _: () =
    assert!(core::mem::size_of::<BlockLedgerQuery>() == 32 + 32 * BLOCK_LEDGER_ROWS + 32 + 16);

/// Bytes of a [`BlockLedgerQuery`] that a sealed answer encrypts: `rows`.
pub const BLOCK_LEDGER_SEALED_LEN: usize = 32 * BLOCK_LEDGER_ROWS;

/// `GPUPM_IOC_LEDGER_RI` (debug only, like [`LedgerQuery`]): what one
/// runtime-instrumentation control block did since its session began —
/// the ground truth a test compares the program buffer with.
///
/// Every sample point is exactly one of: stored, suppressed (primary or
/// secondary), or not stored (the session was halted or stopped):
/// `sample_points = stored + suppressed_primary + suppressed_secondary +
/// not_stored`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct RiLedgerQuery {
    /// [`IOCTL_STRUCT_VERSION`].
    pub version: u32,
    /// Input: control block (`0..RI_BLOCKS`).
    pub block: u32,
    /// Must be 0.
    pub flags: u32,
    /// Output: the context the block watches (0 = none).
    pub ctx: u32,
    /// Output: sample points the mode picked while the session ran.
    pub sample_points: u64,
    /// Output: groups stored into the program buffer.
    pub stored: u64,
    /// Output: sample points at primary capability suppressed by Y.
    pub suppressed_primary: u64,
    /// Output: sample points at secondary capability suppressed by Z.
    pub suppressed_secondary: u64,
    /// Output: sample points not stored because the session was halted or
    /// stopped (buffer full).
    pub not_stored: u64,
    /// Output: emit records collected from `RI_EMIT` writes.
    pub emits_register: u64,
    /// Output: emit records collected from marker blocks.
    pub emits_marker: u64,
    /// Output: abort records collected.
    pub aborts: u64,
    /// Output: collection-buffer records overwritten before being reported.
    pub overwritten: u64,
    /// Output: instructions the context retired (one SM) up to the last
    /// sample point, 0 before the first.
    pub last_sample_retired: u64,
    /// Output: context cycle of the last sample point, 0 before the first.
    pub last_sample_ctx_cycle: u64,
}
const _: () = assert!(core::mem::size_of::<RiLedgerQuery>() == 104);

/// `GPUPM_IOC_RESET`: reset the device (same as writing `RESET`).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct Reset {
    /// [`IOCTL_STRUCT_VERSION`].
    pub version: u32,
    /// Must be [`crate::regs::RESET_MAGIC`].
    pub magic: u32,
}

/// `GPUPM_IOC_REG_READ` and `GPUPM_IOC_REG_WRITE`: one register access,
/// with the rules of a `pread`/`pwrite` on `card0`: `width` is 4 or 8,
/// `offset` is aligned to it and the access lies inside `BAR0_SIZE`; a
/// 64-bit register is read atomically with one 8-byte access. A read
/// fills `value` (a 4-byte read zero-extends); a 4-byte write's `value`
/// must fit in 32 bits.
///
/// One struct of 32 bytes rather than a one-op `GPUPM_IOC_REG_BATCH`
/// (1,552 bytes, copied in and out of the kernel on every call): register
/// reads are the node's most frequent request.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct RegAccess {
    /// [`IOCTL_STRUCT_VERSION`].
    pub version: u32,
    /// Access width in bytes: 4 or 8.
    pub width: u32,
    /// BAR0 offset.
    pub offset: u64,
    /// Value read back, or value to write.
    pub value: u64,
    /// Must be 0.
    pub flags: u32,
    /// Reserved, 0.
    pub reserved: u32,
}
const _: () = assert!(core::mem::size_of::<RegAccess>() == 32);

/// `_IOC_NR` of `GPUPM_IOC_WINDOW_READ(len)`.
pub const WINDOW_READ_NR: u8 = 0x07;
/// Most bytes one window read returns.
pub const WINDOW_READ_MAX: usize = 12 * 1024;

/// The head of a `GPUPM_IOC_WINDOW_READ(len)` argument ([`window_read_cmd`]):
/// `len` bytes of the memory window at `offset` (relative to the window's
/// start, i.e. a `card0` file offset minus `MEM_WINDOW_OFFSET`) come back
/// in the `len` bytes that follow this head in the argument. The whole
/// range must lie inside the window, or the call fails with EINVAL.
///
/// The request number carries `len` in its size field, as evdev's
/// `EVIOCGNAME(len)` does, so that a restricted ioctl copies exactly the
/// head and the bytes asked for: a 592-byte block slot costs 608 bytes
/// each way, and a ring drain reads up to [`WINDOW_READ_MAX`] bytes per
/// call.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct WindowRead {
    /// [`IOCTL_STRUCT_VERSION`].
    pub version: u32,
    /// Must be 0.
    pub flags: u32,
    /// Window offset of the first byte.
    pub offset: u64,
}
const _: () = assert!(core::mem::size_of::<WindowRead>() == 16);

/// `GPUPM_IOC_WINDOW_READ(len)`: the request number of a window read of
/// `len` bytes (1..=[`WINDOW_READ_MAX`]; another length fails with EINVAL).
pub const fn window_read_cmd(len: usize) -> u32 {
    crate::ioc::read_write(
        IOC_MAGIC,
        WINDOW_READ_NR,
        core::mem::size_of::<WindowRead>() + len,
    )
}
const _: () = assert!(core::mem::size_of::<WindowRead>() + WINDOW_READ_MAX <= MAX_IOCTL_SIZE);

macro_rules! ioctl_numbers {
    ($( $(#[$m:meta])* $name:ident = $dir:ident($nr:literal, $ty:ty); )*) => {
        $( $(#[$m])* pub const $name: u32 = crate::ioc::$dir(IOC_MAGIC, $nr, core::mem::size_of::<$ty>());
           const _: () = assert!(core::mem::size_of::<$ty>() <= MAX_IOCTL_SIZE); )*
        /// Every device-node ioctl number with its name.
        pub const DEVICE_IOCTLS: &[(&str, u32)] = &[ $( (stringify!($name), $name), )* ];
    };
}

ioctl_numbers! {
    /// Read [`Identity`].
    GPUPM_IOC_IDENTITY = read_write(0x00, Identity);
    /// Run a [`RegBatch`].
    GPUPM_IOC_REG_BATCH = read_write(0x01, RegBatch);
    /// Advance the step clock.
    GPUPM_IOC_ADVANCE = read_write(0x02, Advance);
    /// Read the ledger (debug only: `gpupm-driver --debug-ledger`).
    GPUPM_IOC_LEDGER = read_write(0x03, LedgerQuery);
    /// Reset the device.
    GPUPM_IOC_RESET = write(0x04, Reset);
    /// Read one register ([`RegAccess`]).
    GPUPM_IOC_REG_READ = read_write(0x05, RegAccess);
    /// Write one register ([`RegAccess`]).
    GPUPM_IOC_REG_WRITE = write(0x06, RegAccess);
    /// Read the per-block ground truth of a context's program (debug only).
    GPUPM_IOC_LEDGER_BLOCKS = read_write(0x08, BlockLedgerQuery);
    /// Read one runtime-instrumentation control block's ground truth (debug only).
    GPUPM_IOC_LEDGER_RI = read_write(0x09, RiLedgerQuery);
    /// Read the per-(context, range) ground truth of a partition's marked
    /// ranges (debug only; [`crate::ranges::RangeLedgerQuery`]).
    GPUPM_IOC_LEDGER_RANGES = read_write(0x0C, crate::ranges::RangeLedgerQuery);
    /// Read the call-graph ground truth of a context's program (debug
    /// only; [`crate::ranges::CallLedgerQuery`]).
    GPUPM_IOC_LEDGER_CALLS = read_write(0x0D, crate::ranges::CallLedgerQuery);
    /// Wait for the next periodic commit and read blocks in the same
    /// reply (ABI 1.8; [`crate::commit_wait::WaitCommit`]).
    GPUPM_IOC_WAIT_COMMIT = read_write(0x10, crate::commit_wait::WaitCommit);
    /// Where the commit mirror is and its layout (ABI 1.9;
    /// [`crate::mirror::MirrorInfo`]).
    GPUPM_IOC_MIRROR_INFO = read_write(0x11, crate::mirror::MirrorInfo);
    /// The device's half of a confidential session's key exchange (ABI
    /// 1.11; [`crate::cc::KeyExchange`]).
    GPUPM_IOC_CC_KEY_EXCHANGE = read_write(0x12, crate::cc::KeyExchange);
    /// Finish a confidential session's key exchange (ABI 1.11;
    /// [`crate::cc::Finish`]).
    GPUPM_IOC_CC_FINISH = read_write(0x13, crate::cc::Finish);
}
