//! Tenant marked ranges and call graphs (ABI 1.7): a tenant programs
//! ranges for one of its own contexts ([`AddRange`]), reads what they
//! counted for that context ([`ReadRanges`]), removes them
//! ([`RemoveRange`]), and reads the context's call graph built from the
//! call stacks of the threshold crossings ([`ReadCallEdges`],
//! [`ReadCallKernels`], [`ReadCallStacks`]).
//!
//! The device's range registers (`crate::ranges`) are per partition and
//! count every context running the program; gpupmd attributes each
//! register's counts to the contexts that ran (reading them at every
//! context switch while the outgoing context is paused), and each
//! crossing record to the context it names. See `docs/ranges.md`, "Host
//! side".
//!
//! Errors: wrong size, version, flags, reserved fields, kinds, events,
//! triggers, thresholds or ids → EINVAL, and so does a programming the
//! device refuses (a kernel or block the program does not have); another
//! tenant's context or handle → EACCES exactly like a missing one (ENOENT
//! for the admin); the VM's share of the partition's range registers
//! busy with its other programmings (ABI 1.11: an equal share for each VM
//! bound to the partition), the VM holding its most ranges, or the
//! context already holding [`MAX_CONTEXT_RANGES`] ranges → ENOSPC; a confidential VM's context →
//! EOPNOTSUPP (its records are sealed: the daemon cannot attribute them or
//! build its call graph). A refused request changes nothing.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::ranges::{RANGES_PER_PARTITION, RANGE_STACK_DEPTH};

/// What a range covers ([`AddRange::kind`], [`RangeRow::kind`]).
pub mod range_kind {
    /// Blocks `first..=last` of kernel `kernel` of the context's program.
    pub const CODE: u32 = 1;
    /// Data addresses `first..=last` the context's program touches.
    pub const DATA: u32 = 2;
}

/// What raises a crossing ([`AddRange::trigger`], [`RangeRow::trigger`]).
pub mod range_trigger {
    /// Count only; no records, no call graph.
    pub const NONE: u32 = 0;
    /// A record every time the count reaches a multiple of `threshold`.
    pub const COUNT: u32 = 1;
    /// A record when one entry's residence reaches `threshold` context
    /// cycles.
    pub const LATENCY: u32 = 2;
}

/// Bits of [`RangeRow::flags`].
pub mod range_row_flags {
    /// Some of the register's counts since the range was added could not
    /// be attributed to one context (a context switch the daemon did not
    /// see while the outgoing context was paused: the device's fallback
    /// completed it). `entries` and `count` then miss those counts.
    pub const INEXACT: u8 = 1 << 0;
}

/// Most ranges one context may hold at once.
pub const MAX_CONTEXT_RANGES: usize = RANGES_PER_PARTITION as usize;

/// `TENANT_IOC_ADD_RANGE`: program a range for context `ctx`.
///
/// Input: `version`, `ctx`, `kind` ([`range_kind`]), `event`
/// (`ranges::range_event`), `trigger` ([`range_trigger`]), `threshold`
/// (0 with [`range_trigger::NONE`], else ≥ 1), `kernel` (code ranges:
/// ≤ 0xFFFF; data ranges: 0), `first` ≤ `last` (code: block indices ≤
/// 0xFFFF; data: addresses); `flags` and `reserved` 0. The output fields
/// are overwritten.
///
/// The range counts the context's program only (the daemon programs the
/// register with the context's program id). Two ranges with the same
/// programming on one partition share a register (`shared` = 1); each
/// still reads only its own context's counts since it was added.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct AddRange {
    /// [`super::TENANT_STRUCT_VERSION`].
    pub version: u32,
    /// Context id.
    pub ctx: u32,
    /// One of [`range_kind`].
    pub kind: u32,
    /// One of `ranges::range_event`.
    pub event: u32,
    /// One of [`range_trigger`].
    pub trigger: u32,
    /// Threshold T of the trigger.
    pub threshold: u32,
    /// Kernel of a code range.
    pub kernel: u32,
    /// First block (code) or address (data), inclusive.
    pub first: u32,
    /// Last block (code) or address (data), inclusive.
    pub last: u32,
    /// Must be 0.
    pub flags: u32,
    /// Output: the range's handle, counted per VM (ABI 1.11: before,
    /// unique daemon-wide).
    pub handle: u32,
    /// Output: partition slot of the context's VM.
    pub partition: u32,
    /// Output: the register's place among the VM's own range registers
    /// of the partition (0 .. its share; ABI 1.11: before, the device's
    /// register number, 0..8).
    pub register: u32,
    /// Output: 1 when the register was already armed with this
    /// programming for another of the VM's own ranges (ABI 1.11: never
    /// another tenant's — ranges of different VMs share no register).
    pub shared: u32,
    /// Output: the program the range counts (`regs::CTX_PROGRAM`).
    pub program: u32,
    /// Reserved, 0.
    pub reserved: u32,
}
const _: () = assert!(core::mem::size_of::<AddRange>() == 64);

/// One range of a [`ReadRanges`] answer.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct RangeRow {
    /// The range's handle (counted per VM).
    pub handle: u32,
    /// The register's place among the VM's own registers (as
    /// [`AddRange::register`]).
    pub register: u16,
    /// [`range_kind`] (as u8).
    pub kind: u8,
    /// `ranges::range_event` (as u8).
    pub event: u8,
    /// [`range_trigger`] (as u8).
    pub trigger: u8,
    /// Bits of [`range_row_flags`].
    pub flags: u8,
    /// Reserved, 0.
    pub reserved: u16,
    /// Threshold.
    pub threshold: u32,
    /// Kernel (code ranges).
    pub kernel: u32,
    /// First block or address.
    pub first: u32,
    /// Last block or address.
    pub last: u32,
    /// Reserved, 0.
    pub reserved2: u32,
    /// Entries of the context into the range since the range was added.
    pub entries: u64,
    /// The event counted inside the range for the context since then.
    pub count: u64,
    /// Crossing records of the context the daemon received.
    pub crossings: u64,
    /// Crossings of the context whose record the full device ring lost.
    pub lost: u64,
}
const _: () = assert!(core::mem::size_of::<RangeRow>() == 64);

/// `TENANT_IOC_READ_RANGES`: the ranges of context `ctx`, by handle.
///
/// Input: `version`, `ctx`; `flags` and `reserved` 0. Output: `count`
/// rows ascending by handle, `partition`. The counts are the context's
/// exact share of each register up to the read (crossings once their
/// records were drained). Hot ranges: sort the rows by `count`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct ReadRanges {
    /// [`super::TENANT_STRUCT_VERSION`].
    pub version: u32,
    /// Context id.
    pub ctx: u32,
    /// Must be 0.
    pub flags: u32,
    /// Reserved, 0.
    pub reserved: u32,
    /// Output: rows filled.
    pub count: u32,
    /// Output: partition slot.
    pub partition: u32,
    /// Output.
    pub rows: [RangeRow; MAX_CONTEXT_RANGES],
}
const _: () = assert!(core::mem::size_of::<ReadRanges>() == 24 + 64 * MAX_CONTEXT_RANGES);

/// `TENANT_IOC_REMOVE_RANGE`: remove range `handle` of context `ctx`
/// (the register is disarmed when no other range uses it). `reserved` 0.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct RemoveRange {
    /// [`super::TENANT_STRUCT_VERSION`].
    pub version: u32,
    /// Context id.
    pub ctx: u32,
    /// The handle [`AddRange`] answered.
    pub handle: u32,
    /// Reserved, 0.
    pub reserved: u32,
}
const _: () = assert!(core::mem::size_of::<RemoveRange>() == 16);

/// Bits of [`GraphHeader::flags`] (output).
pub mod graph_flags {
    /// Some stacks were not kept (the context's table of distinct stacks
    /// is full, `MAX_GRAPH_STACKS`): [`ReadCallStacks`] misses
    /// `stacks_dropped` crossings; edges and per-kernel samples are still
    /// complete.
    pub const STACKS_DROPPED: u32 = 1 << 0;
}

/// Most distinct stacks the daemon keeps per context.
pub const MAX_GRAPH_STACKS: u32 = 4096;

/// Common head of the three call-graph reads.
///
/// Input: `version`, `ctx`, `first` (the first row, ≤ `total`); `flags`
/// 0. Page with `first += count` until `first == total`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct GraphHeader {
    /// [`super::TENANT_STRUCT_VERSION`].
    pub version: u32,
    /// Context id.
    pub ctx: u32,
    /// Input: first row.
    pub first: u32,
    /// Input 0; output bits of [`graph_flags`].
    pub flags: u32,
    /// Output: rows filled.
    pub count: u32,
    /// Output: rows in all.
    pub total: u32,
    /// Output: crossing records of the context in the graph.
    pub crossings: u64,
    /// Output: crossings of the context whose record the device lost
    /// (in no graph).
    pub lost: u64,
    /// Output: crossings whose stack is not in [`ReadCallStacks`].
    pub stacks_dropped: u64,
}
const _: () = assert!(core::mem::size_of::<GraphHeader>() == 48);

/// A call site edge of the graph: crossings whose stack holds the call
/// from `kernel` at `call_block` into `callee` (once per occurrence).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct GraphEdge {
    /// Calling kernel.
    pub kernel: u16,
    /// Calling block.
    pub call_block: u16,
    /// Called kernel.
    pub callee: u16,
    /// Reserved, 0.
    pub reserved: u16,
    /// Crossings whose stack holds this call.
    pub count: u64,
}
const _: () = assert!(core::mem::size_of::<GraphEdge>() == 16);

/// Rows per [`ReadCallEdges`].
pub const GRAPH_EDGE_ROWS: usize = 64;

/// `TENANT_IOC_READ_CALL_EDGES`: the caller → callee edges, ascending by
/// (kernel, call_block, callee).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct ReadCallEdges {
    /// Head.
    pub head: GraphHeader,
    /// Output.
    pub rows: [GraphEdge; GRAPH_EDGE_ROWS],
}
const _: () = assert!(core::mem::size_of::<ReadCallEdges>() == 48 + 16 * GRAPH_EDGE_ROWS);

/// Samples of one kernel: `self_samples` = crossings whose innermost
/// kernel is it; `inclusive` = crossings with it anywhere on the stack.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct KernelSamples {
    /// Kernel index.
    pub kernel: u16,
    /// Reserved, 0.
    pub reserved: u16,
    /// Reserved, 0.
    pub reserved2: u32,
    /// Crossings in the kernel itself.
    pub self_samples: u64,
    /// Crossings with the kernel on the stack.
    pub inclusive: u64,
}
const _: () = assert!(core::mem::size_of::<KernelSamples>() == 24);

/// Rows per [`ReadCallKernels`].
pub const GRAPH_KERNEL_ROWS: usize = 64;

/// `TENANT_IOC_READ_CALL_KERNELS`: self and inclusive samples per kernel,
/// ascending by kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct ReadCallKernels {
    /// Head.
    pub head: GraphHeader,
    /// Output.
    pub rows: [KernelSamples; GRAPH_KERNEL_ROWS],
}
const _: () = assert!(core::mem::size_of::<ReadCallKernels>() == 48 + 24 * GRAPH_KERNEL_ROWS);

/// Kernels a stack row holds: the entry kernel and one per call.
pub const STACK_FRAMES: usize = RANGE_STACK_DEPTH + 1;

/// One distinct call path and the crossings that had it.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct StackCount {
    /// Valid entries of `frames` (1..=[`STACK_FRAMES`]).
    pub frames_len: u32,
    /// Reserved, 0.
    pub reserved: u32,
    /// Crossings with this stack.
    pub count: u64,
    /// Kernels, outermost (the entry kernel) first; the last is where the
    /// crossing happened. Entries past `frames_len` are 0.
    pub frames: [u16; STACK_FRAMES],
    /// Reserved, 0.
    pub reserved2: [u16; 3],
}
const _: () = assert!(core::mem::size_of::<StackCount>() == 56);

/// Rows per [`ReadCallStacks`].
pub const GRAPH_STACK_ROWS: usize = 32;

/// `TENANT_IOC_READ_CALL_STACKS`: the distinct stacks with their counts
/// (the folded-stack profile), ascending by frames.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct ReadCallStacks {
    /// Head.
    pub head: GraphHeader,
    /// Output.
    pub rows: [StackCount; GRAPH_STACK_ROWS],
}
const _: () = assert!(core::mem::size_of::<ReadCallStacks>() == 48 + 56 * GRAPH_STACK_ROWS);
