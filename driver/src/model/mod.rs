//! The emulated GPU performance-monitoring device (SPEC §2, seed 000) and
//! the kernel-style driver layer's in-process pieces (block allocation).
//!
//! The device is a register-file state machine: everything host software
//! can do goes through [`Device::read_reg`], [`Device::write_reg`],
//! [`Device::batch`] and the memory window ([`Device::read_window`]); time
//! passes only through [`Device::advance`] (step clock) or
//! [`Device::tick`] (real-time clock).

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
