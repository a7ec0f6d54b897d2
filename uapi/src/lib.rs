//! The gpupm ABI, shared by the device model, the driver node, the daemon and
//! every tool, in the manner of a Linux uapi header.
//!
//! This crate is a leaf: it holds numbers, bitfields and `#[repr(C)]` layouts
//! and nothing that depends on how they are served. A C header is generated
//! from it, so every type here has a fixed, explicitly padded layout.

pub mod cc;
pub mod commit_wait;
pub mod events;
pub mod intr;
pub mod ioc;
pub mod ioctl;
pub mod layout;
pub mod map;
pub mod mirror;
pub mod page;
pub mod pmu;
pub mod ranges;
pub mod regdef;
pub mod regs;
pub mod ri;
pub mod sampling;
pub mod tenant;

/// ABI major version: bumped on any incompatible change to registers,
/// layouts or ioctls. Consumers refuse a device whose major differs.
pub const ABI_MAJOR: u16 = 1;
/// ABI minor version: bumped when the ABI grows within its major —
/// registers, ioctls, flags, interrupt sources, fields in what were
/// reserved words. A device or daemon of an older minor lacks what came
/// after it (the nodes answer `ENOTTY` to an ioctl they do not have).
/// Some minors also changed what an older client relied on (1.3 most of
/// all). Every minor, what it added or changed and which document
/// describes it: `docs/abi.md`, "Versions".
pub const ABI_MINOR: u16 = 12;
/// `ABI_MAJOR << 16 | ABI_MINOR`, as the `ABI_VERSION` register reads.
pub const ABI_VERSION: u32 = ((ABI_MAJOR as u32) << 16) | ABI_MINOR as u32;

/// Splits an `ABI_VERSION` register value into (major, minor).
pub const fn split_abi_version(raw: u32) -> (u16, u16) {
    ((raw >> 16) as u16, (raw & 0xffff) as u16)
}
