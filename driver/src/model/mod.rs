//! The emulated GPU performance-monitoring device (SPEC §2, seed 000) and
//! the kernel-style driver layer's in-process pieces (block allocation).
//!
//! The device is a register-file state machine: everything host software
//! can do goes through [`Device::read_reg`], [`Device::write_reg`],
//! [`Device::batch`] and the memory window ([`Device::read_window`]); time
//! passes only through [`Device::advance`] (step clock) or
//! [`Device::tick`] (real-time clock).

// Narrowing casts in the model convert values whose range the hardware
// bounds: ULC counts ≤ 511, CCU values < 2^28, ids below their table sizes,
// offsets already checked against the aperture.
#![allow(clippy::cast_possible_truncation)]

mod api;
pub mod cc;
mod clock;
pub mod counting;
mod device;
pub mod intr;
pub mod ledger;
mod mailbox;
pub mod memory;
mod partition;
pub mod rates;
mod registers;
mod rng;
mod throttle;
pub mod topology;
mod workload;

pub use api::{DeviceError, LedgerTotals};
pub use clock::ClockMode;
pub use counting::EngineKind;
pub use device::{BuildError, Device};
pub use registers::RegError;
