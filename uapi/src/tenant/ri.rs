//! Runtime-instrumentation sessions on the tenant node (ABI 1.7):
//! [`OpenRi`] turns a file handle into a session of report groups of one
//! of the caller's own contexts. The daemon binds one of the device's RI
//! control blocks (`docs/ri.md`) to the context, programs it in one
//! register batch, owns its program buffer and drains whole groups into
//! the session's queue (on the device's buffer-full interrupt, on a timer
//! and when the session ends). `read()` returns whole entries, each an
//! [`RiGroupHeader`] followed by the group's records (`size` − 32 bytes)
//! or, for a halt marker, nothing. [`TENANT_IOC_RI_EMIT`](super::TENANT_IOC_RI_EMIT)
//! puts a value into the session's collection buffer (RIEMIT);
//! [`TENANT_IOC_RI_STATUS`](super::TENANT_IOC_RI_STATUS) answers [`RiStatus`].
//! Closing the handle ends the session and releases the block; so does
//! the context's release on the device (the session then reads end of
//! file after its queue).
//!
//! Errors: wrong size, version, flags, reserved fields, mode, control
//! bits, SF, RSIC, RGS (above [`RI_RGS_MAX`] or the maximum of the
//! context's partition), buffer or queue sizes, or ids → EINVAL; another
//! tenant's context fails exactly like a missing one (EACCES; ENOENT for
//! the admin); a context of a confidential VM → EOPNOTSUPP (the device
//! offers no RI for confidential VMs, `docs/ri.md`); a handle that holds
//! a session already → EBUSY; all 64 control blocks in use → EAGAIN. Emit
//! and status on a handle without an RI session → EINVAL; on a handle of
//! another tenant → EACCES. A refused request changes nothing.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Values of [`OpenRi::mode`] (the device's `ri_mode`).
pub mod ri_session_mode {
    /// A sample every SF context cycles.
    pub const CYCLE: u32 = 1;
    /// A sample every SF retired warp instructions.
    pub const INSTRUCTION: u32 = 2;
    /// A sample at every entry into a marker block (SF unused).
    pub const DIRECTED: u32 = 3;
}

/// Bits of [`OpenRi::controls`] (the seed's E, X, Y, Z).
pub mod ri_controls {
    /// E: RIEMIT and marker blocks collect emit records.
    pub const EMIT: u32 = 1 << 0;
    /// X: a switch-out of the context collects an abort record.
    pub const ABORT: u32 = 1 << 1;
    /// Y: drop samples taken at primary (nominal) clock capability.
    pub const SUPPRESS_PRIMARY: u32 = 1 << 2;
    /// Z: drop samples taken at secondary (throttled) clock capability.
    pub const SUPPRESS_SECONDARY: u32 = 1 << 3;
    /// Every defined bit.
    pub const ALL: u32 = EMIT | ABORT | SUPPRESS_PRIMARY | SUPPRESS_SECONDARY;
}

/// Largest RGS a session may ask for (the device's; a partition may
/// declare less, [`RiStatus::partition_max_rgs`]).
pub const RI_RGS_MAX: u32 = crate::ri::RGS_MAX;
/// Largest SF (the device's).
pub const RI_SF_MAX: u32 = crate::ri::SF_MAX;
/// Groups a session queues when [`OpenRi::queue_groups`] is 0.
pub const DEFAULT_RI_QUEUE_GROUPS: u32 = 4096;
/// Most groups a session may ask to queue.
pub const MAX_RI_QUEUE_GROUPS: u32 = 1 << 16;

/// Most program-buffer groups of RGS `rgs` (at most [`RI_RGS_MAX`]): the
/// block's span of 2^20 bytes holds 2^20 / 2^(RGS+5) of them.
pub const fn max_buffer_groups(rgs: u32) -> u32 {
    let rgs = if rgs > RI_RGS_MAX { RI_RGS_MAX } else { rgs };
    1 << (15 - rgs)
}
const _: () = assert!(crate::ri::RI_SPAN == 1 << 20);
const _: () =
    assert!(max_buffer_groups(1) as u64 * crate::ri::group_bytes(1) == crate::ri::RI_SPAN);

/// `TENANT_IOC_OPEN_RI`: make this handle an RI session of context `ctx`.
///
/// Input: `version`, `ctx`, `mode` (one of [`ri_session_mode`]), `sf`
/// (`0..=RI_SF_MAX`; the device loads 0 as 1 and raises one below the
/// mode's minimum to it; must be 0 in directed mode), `rsic` (the first
/// interval, `0..=RI_SF_MAX`, 0 = a full SF), `rgs` (`0..=RI_RGS_MAX`,
/// not above the partition's), `controls` ([`ri_controls`]),
/// `buffer_groups` (0 = the block's whole span, `max_buffer_groups(rgs)`:
/// the span is the block's alone, and a larger buffer absorbs longer
/// bursts between drains; else
/// `1..=max_buffer_groups(rgs)`), `queue_groups` (0 =
/// [`DEFAULT_RI_QUEUE_GROUPS`], else `1..=MAX_RI_QUEUE_GROUPS`); `flags`
/// and the reserved fields 0. Output: the rest.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct OpenRi {
    /// [`super::TENANT_STRUCT_VERSION`].
    pub version: u32,
    /// Context id.
    pub ctx: u32,
    /// One of [`ri_session_mode`].
    pub mode: u32,
    /// Bits of [`ri_controls`].
    pub controls: u32,
    /// SF: the scaling factor.
    pub sf: u32,
    /// RSIC: the first interval.
    pub rsic: u32,
    /// RGS: groups are 2^(RGS+1) records of 16 bytes.
    pub rgs: u32,
    /// Program-buffer size in groups.
    pub buffer_groups: u32,
    /// Groups the session queues before it drops (and counts) new ones;
    /// output (ABI 1.11): the groups granted, clamped to the caller's
    /// queue budget.
    pub queue_groups: u32,
    /// Must be 0.
    pub flags: u32,
    /// Reserved, 0.
    pub reserved: u64,
    /// Output: session id, counted per uid (ABI 1.11: before, unique
    /// daemon-wide).
    pub session: u64,
    /// Output: the session's place among its VM's RI control blocks (0 ..
    /// the VM's share; ABI 1.11: before, the device's block number).
    pub block: u32,
    /// Output: partition slot the context's VM is on.
    pub partition: u32,
    /// Output: that partition's capability version.
    pub partition_version: u32,
    /// Output: that partition's maximum RGS.
    pub partition_max_rgs: u32,
    /// Output: the device's maximum RGS.
    pub device_max_rgs: u32,
    /// Reserved, output 0.
    pub reserved2: u32,
}
const _: () = assert!(core::mem::size_of::<OpenRi>() == 80);

/// `TENANT_IOC_RI_EMIT`: RIEMIT, collect `value` as an emit record of the
/// handle's session (a no-op while the session is halted or without
/// [`ri_controls::EMIT`], as the seed says). `reserved` must be 0.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct RiEmit {
    /// [`super::TENANT_STRUCT_VERSION`].
    pub version: u32,
    /// The value (the emit record's `data`).
    pub value: u32,
    /// Reserved, 0.
    pub reserved: u64,
}
const _: () = assert!(core::mem::size_of::<RiEmit>() == 16);

/// Bits of [`RiStatus::state`].
pub mod ri_state {
    /// The device block is enabled for the session.
    pub const ENABLED: u32 = 1 << 0;
    /// The session halted ([`super::RiStatus::halt_reason`] says why).
    pub const HALTED: u32 = 1 << 2;
    /// The session ended (its context was released): `read()` returns end
    /// of file after the queue.
    pub const ENDED: u32 = 1 << 3;
}

/// `TENANT_IOC_RI_STATUS`: the handle's session as the device and the
/// daemon see it now (after a drain). Input: `version`; every other field
/// 0 (EINVAL otherwise). Output: the rest.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct RiStatus {
    /// [`super::TENANT_STRUCT_VERSION`].
    pub version: u32,
    /// Output: bits of [`ri_state`].
    pub state: u32,
    /// Output: `ri::halt_reason` (0 none, 1 version, 2 RGS limit).
    pub halt_reason: u32,
    /// Output: the session's RGS.
    pub rgs: u32,
    /// Output: groups the device stored (NRG).
    pub groups: u64,
    /// Output: groups the daemon queued for the session.
    pub delivered: u64,
    /// Output: sample points suppressed (Y/Z).
    pub suppressed: u64,
    /// Output: collection records overwritten before a group carried them.
    pub overwritten: u64,
    /// Output: groups lost (overwritten in the program buffer before the
    /// daemon drained them, or dropped by a full queue).
    pub lost: u64,
    /// Output: the device's maximum RGS.
    pub device_max_rgs: u32,
    /// Output: the maximum RGS of the partition the VM is on now.
    pub partition_max_rgs: u32,
    /// Output: the version of the partition the VM is on now.
    pub partition_version: u32,
    /// Output: the partition the VM is on now.
    pub partition: u32,
}
const _: () = assert!(core::mem::size_of::<RiStatus>() == 72);

/// `TENANT_IOC_RI_RESUME` (ABI 1.8): re-enable the handle's halted
/// session in place, on the partition its VM runs on now. Input:
/// `version`; every other field 0 (EINVAL otherwise). Output: that
/// partition. Refused, changing nothing: a session that is not halted, or
/// an RGS above the partition's maximum (EINVAL); a partition whose
/// capability version is not the one the session began on (EOPNOTSUPP:
/// its records would mix two versions in one buffer).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct RiResume {
    /// [`super::TENANT_STRUCT_VERSION`].
    pub version: u32,
    /// Input 0.
    pub flags: u32,
    /// Output: the partition the session runs on again.
    pub partition: u32,
    /// Output: its capability version.
    pub partition_version: u32,
    /// Output: its maximum RGS.
    pub partition_max_rgs: u32,
    /// Input and output 0.
    pub reserved: u32,
}
const _: () = assert!(core::mem::size_of::<RiResume>() == 24);

/// Values of [`RiGroupHeader::kind`].
pub mod ri_entry {
    /// A report group follows: 2^(RGS+1) records of 16 bytes.
    pub const GROUP: u16 = 1;
    /// The session halted: no records follow; `halt_reason` says why.
    pub const HALT: u16 = 2;
}

/// Header of every entry `read()` returns on an RI session.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct RiGroupHeader {
    /// One of [`ri_entry`].
    pub kind: u16,
    /// RGS of the group.
    pub rgs: u8,
    /// `ri::halt_reason` for a halt marker, else 0.
    pub halt_reason: u8,
    /// Bytes of the entry, header included.
    pub size: u32,
    /// The session id.
    pub session: u64,
    /// The group's number in its device session (NRG, 1-based); for a
    /// halt marker, the groups stored before the halt.
    pub group: u64,
    /// Groups lost since the previous entry (never silent).
    pub lost_before: u64,
}
const _: () = assert!(core::mem::size_of::<RiGroupHeader>() == 32);
