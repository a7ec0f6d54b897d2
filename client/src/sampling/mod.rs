//! Tenant-side sampling: what the daemon and the tools share.
//!
//! - [`plan`]: sizing the per-type device buffers ahead, for the daemon
//!   and `gpupm plan`.
//! - [`reconstruct`]: per-block instructions, cycles and CPI from branch
//!   stacks and dithered cycle samples.
//! - [`session`]: sampling sessions on the tenant node.

pub mod plan;
pub mod reconstruct;
#[cfg(test)]
mod reconstruct_tests;
pub mod session;
