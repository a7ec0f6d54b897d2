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
/// ABI minor version: bumped on compatible additions (2: the tenant
/// node's context-instance reads; 3: confidential sessions and rekeying,
/// the OOB mailbox's own registers, flush-ack latency, the debug-only
/// sealed ledger — see `docs/confidential.md`; 4: register and window
/// ioctls for the CUSE character device — see `docs/kernel.md`; 5: the
/// sampling units, their buffers and interrupts, the per-block debug
/// ledger, tenant sampling sessions — see `docs/sampling.md`; the tenant
/// node's key-state and rekey ioctls — see `docs/confidential.md`; 6:
/// runtime-instrumentation control blocks, report-group records, their
/// interrupts, VM migration between partitions and the RI debug ledger —
/// see `docs/ri.md`; marked ranges, their threshold records and `RANGE_THRESHOLD`, the
/// range and call-graph debug ledgers — see `docs/ranges.md`;
/// per-context lost sample records, `SAMP_LOST_SELECT` and
/// `BUF_LOST_SELECTED` — see `docs/sampling.md`; 7: the tenant node's
/// runtime-instrumentation sessions — see `docs/ri.md` — and its
/// marked-range and call-graph ioctls — see `docs/ranges.md`; 8: the
/// tenant node's `TENANT_IOC_RI_RESUME` — see `docs/ri.md` — and the
/// device node's `GPUPM_IOC_WAIT_COMMIT` — see `docs/pages.md`; 9: the
/// commit mirror and `GPUPM_IOC_MIRROR_INFO` — see `docs/pages.md`; 10:
/// the commit mirror's ring area — see `docs/pages.md`; 11: tenant answers
/// describe the caller's own view only (per-tenant session ids and range
/// handles, per-VM register and RI block numbers, a sampling session's own
/// rates), queue sizes clamped to the caller's budget, and the bounds'
/// errnos — see `docs/isolation.md`; confidential sessions established by
/// an authenticated key exchange — the device node's
/// `GPUPM_IOC_CC_KEY_EXCHANGE` / `GPUPM_IOC_CC_FINISH`, the tenant node's
/// relays of them, `VM_FLAGS.SESSION`, the envelope's `WITHHELD` bit and
/// the ledger's — see `docs/confidential.md`; `CLOCK_LAG`, the device
/// time a real-time clock dropped — see `docs/performance.md`).
pub const ABI_MINOR: u16 = 11;
/// `ABI_MAJOR << 16 | ABI_MINOR`, as the `ABI_VERSION` register reads.
pub const ABI_VERSION: u32 = ((ABI_MAJOR as u32) << 16) | ABI_MINOR as u32;

/// Splits an `ABI_VERSION` register value into (major, minor).
pub const fn split_abi_version(raw: u32) -> (u16, u16) {
    ((raw >> 16) as u16, (raw & 0xffff) as u16)
}
