//! BAR0 register map.
//!
//! All registers are 32 bits wide and naturally aligned unless marked
//! "64-bit"; those are read atomically with one 8-byte access at their offset
//! (a 4-byte access to either half is also allowed and reads that half).
//! Access notes: RO = read-only (writes are rejected), RW = read/write,
//! WO = write-only command register (reads return 0), W1C = write one to clear.
//!
//! Per-instance blocks (partitions, CCUs, VMs, contexts) are laid out as an
//! array with a fixed stride; use the helper functions instead of computing
//! offsets at call sites.

/// Size of the BAR0 register aperture in bytes.
pub const BAR0_SIZE: u64 = 0x0004_0000;

mod ccu;
mod ctx;
mod device;
mod mailbox;
mod partition;
mod trigger;
mod vm;

pub use self::ccu::*;
pub use self::ctx::*;
pub use self::device::*;
pub use self::mailbox::*;
pub use self::partition::*;
pub use self::trigger::*;
pub use self::vm::*;
