//! The emulated GPU performance-monitoring device and the kernel-style
//! driver layer's in-process pieces (block allocation).
//!
//! The device is a register-file state machine: everything host software
//! can do goes through [`Device::read_reg`], [`Device::write_reg`],
//! [`Device::batch`] and the memory window ([`Device::read_window`]); time
//! passes only through [`Device::advance`] (step clock) or
//! [`Device::tick`] (real-time clock).
//!
//! Each hardware unit is its own module owning its state, its registers
//! and its unit tests: [`ccu`] (ULC/CCU counting), [`trigger`], [`rc`] (RC
//! buffer and RCs), [`partition`] (scheduler and switch handshake),
//! [`memory`] (blocks and stream rings), [`mailbox`], [`intr`], [`cc`]
//! (confidential envelope), [`clock`], and the VM and context tables
//! ([`vm`], [`context`]). [`Device`] routes every register access to the
//! owning unit and wires the units together. `docs/architecture.md` has the
//! unit map.

pub mod access;
pub mod cc;
pub mod ccu;
pub mod clock;
pub mod context;
mod device;
pub mod intr;
pub mod ledger;
pub mod mailbox;
pub mod memory;
pub mod partition;
pub mod program;
pub mod ranges;
pub mod rates;
pub mod rc;
pub mod ri;
mod rng;
pub mod sampling;
pub mod topology;
pub mod trigger;
pub mod vm;
mod workload;

pub use access::{RegError, RegValue, Width};
pub use ccu::{CountingSnapshot, EngineKind};
pub use clock::ClockMode;
pub use device::api::{DeviceError, LedgerTotals};
pub use device::{BuildError, Device};
