//! `GPUPM_IOC_WAIT_COMMIT` (ABI 1.8): wait for the device's next periodic
//! commit and get the blocks it committed in the same reply.
//!
//! Without it, a host that keeps copies of blocks current (the daemon's
//! tenant pages) must guess when a periodic commit lands and read the
//! blocks then: a wake-up of its own plus a window read per commit. With
//! it, one request per commit both waits and carries the data, and a host
//! that falls behind gets the latest blocks at once (the sequence it
//! passes is already old), so bursts coalesce.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::layout::BlockSlot;

/// Most block slots one wait returns.
pub const WAIT_COMMIT_MAX_BLOCKS: usize = 24;
/// Longest timeout, in microseconds (10 s).
pub const WAIT_COMMIT_MAX_TIMEOUT_US: u32 = 10_000_000;

/// The argument of `GPUPM_IOC_WAIT_COMMIT`.
///
/// The node answers as soon as the device's periodic trigger count
/// (`TRIG_COUNT_PERIODIC`; the device commits every partition's counts at
/// each periodic trigger) differs from `after` — at once if it already
/// does — or when `timeout_us` has passed (within one device-clock tick:
/// 250 µs on a real-time clock, 20 ms on a step clock). The reply carries
/// the count (`seq`), the device cycle, and the `count` block slots named
/// in `slots` as the memory window holds them at that moment (ciphertext
/// for a confidential VM's, as a window read returns them). A timeout is
/// not an error: the reply then has `seq == after`.
///
/// Errors (nothing changes, nothing is parked): EINVAL for a wrong
/// `version`, non-zero `flags` or `reserved`, `count` outside
/// `1..=WAIT_COMMIT_MAX_BLOCKS`, `timeout_us` outside
/// `1..=WAIT_COMMIT_MAX_TIMEOUT_US`, a slot index beyond the block slots;
/// the node's usual EACCES for a caller it does not serve; EINTR when the
/// waiter is killed or interrupted.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct WaitCommit {
    /// [`crate::ioctl::IOCTL_STRUCT_VERSION`].
    pub version: u32,
    /// Must be 0.
    pub flags: u32,
    /// Longest wait in microseconds (1..=[`WAIT_COMMIT_MAX_TIMEOUT_US`]).
    pub timeout_us: u32,
    /// Valid entries of `slots` (1..=[`WAIT_COMMIT_MAX_BLOCKS`]).
    pub count: u32,
    /// In: the last `seq` the caller saw (0 at first).
    pub after: u64,
    /// Out: `TRIG_COUNT_PERIODIC` when answered.
    pub seq: u64,
    /// Out: the device cycle when answered.
    pub cycle: u64,
    /// Reserved, 0.
    pub reserved: u64,
    /// In: block slot indices (`layout::block_slot_offset`), below
    /// `CTX_BLOCK_SLOT_BASE + CTX_BLOCK_SLOTS`.
    pub slots: [u32; WAIT_COMMIT_MAX_BLOCKS],
    /// Out: the slots' contents, in the order of `slots`.
    pub blocks: [BlockSlot; WAIT_COMMIT_MAX_BLOCKS],
}
const _: () = assert!(
    core::mem::size_of::<WaitCommit>()
        == 48 + 4 * WAIT_COMMIT_MAX_BLOCKS + 592 * WAIT_COMMIT_MAX_BLOCKS
);
