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
//! and its unit tests:
//!
//! * [`ccu`]: ULC/CCU counting.
//! * [`trigger`]: the trigger block.
//! * [`rc`]: the RC buffer and the RCs.
//! * [`partition`]: partition state, scheduler and switch handshake.
//! * [`memory`]: counter blocks, stream rings and the memory window.
//! * [`mailbox`]: the host's mailbox (and the opcodes both mailboxes share).
//! * [`oob`]: the out-of-band reduction channel, its blocks, the OOB
//!   mailbox and what the device knows of its host driver.
//! * [`intr`]: the interrupt controller.
//! * [`cc`]: the confidential envelope (identity, key exchange, sessions).
//! * [`clock`]: device time, step or real time, and throttle windows.
//! * [`vm`], [`context`]: the VM and context tables.
//! * [`program`]: the program walk, each context's cursor and its ledger.
//! * [`sampling`]: per partition, the branch and cycle samplers and buffers.
//! * [`ri`]: runtime instrumentation, 64 control blocks storing report groups.
//! * [`ranges`]: per partition, eight marked ranges and their record ring.
//!
//! Shared leaves with no registers: [`topology`], [`rates`], [`ledger`],
//! `rng`, `workload` and [`access`]. [`Device`] routes every register
//! access to the owning unit and wires the units together.
//! `docs/architecture.md` has the unit map.

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
pub mod oob;
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
