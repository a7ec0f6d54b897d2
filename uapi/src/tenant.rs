//! The tenant node's ioctl ABI (`/run/gpupm/tenant/node`, served by gpupmd).
//!
//! Every request is authorised from the kernel-supplied uid/gid of the
//! caller: a tenant sees only its VM(s) and their contexts; the admin (root
//! or the admin group) sees everything including the system scope. A caller
//! that is neither (no `[[tenant]]` entry names its user or groups) is no
//! tenant: its `open()` fails with EACCES, and so does every request it
//! makes on a descriptor it got from someone else.
//!
//! One rule for what does not exist: the admin may learn existence, a
//! tenant never.
//!
//! Errors: unknown ioctl → ENOTTY (including the legacy terminal ioctls
//! that share the type byte, `0x54xx` without a direction); a tenant ioctl
//! number with the wrong size or direction, `version` ≠
//! [`TENANT_STRUCT_VERSION`], non-zero reserved fields or unknown flags,
//! out-of-range event, VM (`1..MAX_VMS`) or context (`1..MAX_CONTEXTS`)
//! ids, scope kinds a request does not take → EINVAL. A scope that is not
//! the caller's fails with EACCES — and so does, for a tenant, a scope that does not exist, so
//! that existence never leaks; the admin gets ENOENT for scopes that do not
//! exist. After [`TENANT_IOC_OPEN_STREAM`], `read()` on the same file handle
//! returns [`TenantDelta`] records (whole records only; O_NONBLOCK → EAGAIN;
//! poll readiness when one is queued). A `read()` on a handle without a
//! session, or of fewer bytes than one record, fails with EINVAL; once the
//! daemon ends a session's feed, `read()` returns 0 after the queued records.
//!
//! # Sampling sessions (ABI 1.4)
//! [`TENANT_IOC_OPEN_SAMPLING`] makes a handle a session of branch-stack
//! and cycle sample records of the caller's own context or VM; see
//! [`sampling`]. A daemon older than ABI 1.4 answers it with ENOTTY.
//!
//! # Runtime-instrumentation sessions (ABI 1.7)
//! [`TENANT_IOC_OPEN_RI`] makes a handle a session of report groups of
//! one of the caller's contexts; see [`ri`]. A daemon older than ABI 1.7
//! answers it with ENOTTY.
//!
//! # Marked ranges and call graphs (ABI 1.7)
//! [`TENANT_IOC_ADD_RANGE`] … [`TENANT_IOC_READ_CALL_STACKS`] program
//! marked ranges for the caller's own context and read its exact share of
//! their counts and its call graph; see [`ranges`]. A daemon older than
//! ABI 1.7 answers them with ENOTTY.
//!
//! # Context instances
//! The device reuses a context id once the old context is released, so a
//! context *instance* is named by (id, created cycle), as
//! [`TENANT_IOC_LIST_CONTEXTS`] reports it. [`TENANT_IOC_READ_COUNTERS`] and
//! [`TENANT_IOC_READ_RATES`] with [`scope::CONTEXT`] reach the newest
//! instance of an id; [`TENANT_IOC_READ_INSTANCE`] and
//! [`TENANT_IOC_READ_INSTANCE_RATES`] (ABI 1.2) reach any listed instance —
//! active, destroyed or retired — until the daemon's retention policy
//! prunes it. Another tenant's instance fails exactly like one that does
//! not exist (EACCES; ENOENT for the admin). A daemon older than ABI 1.2
//! answers these two with ENOTTY.
//!
//! # Confidential VMs: key state and rekeying (ABI 1.5)
//! [`TENANT_IOC_KEY_STATE`] answers a VM's current key epoch and session
//! id (public: the tenant needs them to seal a rekey blob).
//! [`TENANT_IOC_REKEY`] carries a rekey blob — the VM's next key sealed
//! under its current session key by the tenant's tool — which the daemon
//! writes to the device's `REKEY_*` staging registers and commits with the
//! VM entry's `VM_KEY_COMMIT`, as one register batch. Only the VM's own
//! tenant may rekey: another tenant's VM, a VM that is not confidential and
//! one that does not exist fail alike with EACCES, and so does every
//! request of the admin (the admin is part of the host, which the
//! threat model does not trust with a confidential VM's key; see
//! `docs/confidential.md`). A blob that does not open under the VM's
//! current key fails with EINVAL, as the device refuses it, and changes
//! nothing. The daemon never holds a key: the blob is ciphertext to it.
//!
//! # Confidential VMs: establishing a session (ABI 1.11)
//! [`TENANT_IOC_CC_KEY_EXCHANGE`] and [`TENANT_IOC_CC_FINISH`] carry the
//! two messages of the key exchange ([`crate::cc`]) between the VM's
//! tenant tool and the device; the daemon checks the caller as for a
//! rekey (EACCES alike for another tenant's VM, a VM that is not
//! confidential, one that does not exist, and the admin) and relays the
//! struct to the device unchanged, answering the device's reply or errno.
//! Everything in them is public. A tenant's exchanges are rate limited
//! (EAGAIN when it asks faster: see `docs/confidential.md`).

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::events::MAX_EVENTS;

pub mod ranges;
pub mod ri;
pub mod sampling;
use crate::layout::{BlockSlot, StreamSlot};
use crate::regs::{REKEY_KEY_WORDS, REKEY_NONCE_WORDS, REKEY_TAG_WORDS};
pub use ranges::{
    AddRange, ReadCallEdges, ReadCallKernels, ReadCallStacks, ReadRanges, RemoveRange,
};
pub use ri::{OpenRi, RiEmit, RiGroupHeader, RiResume, RiStatus};
pub use sampling::{OpenSampling, SampleHeader};

/// ioctl "type" byte of the tenant node.
pub const TENANT_IOC_MAGIC: u8 = b'T';
/// Version every tenant ioctl struct must carry.
pub const TENANT_STRUCT_VERSION: u32 = 1;

/// Scope kinds in request structs (same numbers as `ioctl::ledger_scope`).
pub mod scope {
    /// One context (`id` = context id).
    pub const CONTEXT: u32 = 1;
    /// One VM (`id` = VM id).
    pub const VM: u32 = 2;
    /// The whole device (`id` = 0); admin only.
    pub const SYSTEM: u32 = 3;
}

/// Most VMs one caller can be mapped to.
pub const MAX_CALLER_VMS: usize = 64;

/// `TENANT_IOC_WHOAMI`: what the caller may see.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct Whoami {
    /// [`TENANT_STRUCT_VERSION`].
    pub version: u32,
    /// Output: 1 for the admin (sees everything, incl. the system scope).
    pub admin: u32,
    /// Output: caller uid as the kernel reported it.
    pub uid: u32,
    /// Output: number of valid entries in `vms`.
    pub n_vms: u32,
    /// Output: the caller's VMs that exist on the device, ascending (every
    /// VM for the admin).
    pub vms: [u32; MAX_CALLER_VMS],
}
const _: () = assert!(core::mem::size_of::<Whoami>() == 16 + 4 * MAX_CALLER_VMS);

/// Context states in [`CtxEntry::state`].
pub mod ctx_state {
    /// Exists and may run.
    pub const ACTIVE: u32 = 1;
    /// Destroyed; totals final.
    pub const DESTROYED: u32 = 2;
    /// Destroyed, persisted by the daemon, block released.
    pub const RETIRED: u32 = 3;
}

/// One context in a [`ListContexts`] answer.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct CtxEntry {
    /// Context id.
    pub ctx: u32,
    /// One of [`ctx_state`].
    pub state: u32,
    /// Device cycle of creation.
    pub created_cycle: u64,
}

/// Most contexts per [`ListContexts`] page.
pub const LIST_PAGE: usize = 256;

/// `TENANT_IOC_LIST_CONTEXTS`: contexts of a VM, paged.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct ListContexts {
    /// [`TENANT_STRUCT_VERSION`].
    pub version: u32,
    /// VM id.
    pub vm: u32,
    /// Index of the first context to return.
    pub offset: u32,
    /// Output: entries filled.
    pub count: u32,
    /// Output: contexts the VM has in all.
    pub total: u32,
    /// Reserved, 0.
    pub reserved: u32,
    /// Output.
    pub ctxs: [CtxEntry; LIST_PAGE],
}
const _: () = assert!(core::mem::size_of::<ListContexts>() == 24 + 16 * LIST_PAGE);

/// Bits of [`ReadCounters::flags`] (output).
pub mod counter_flags {
    /// The scope belongs to a confidential VM: `values` are 0 and `sealed`
    /// holds the block slot as the device published it (AES-256-GCM under
    /// the VM's key; see `layout::Envelope`).
    pub const SEALED: u32 = 1 << 0;
}

/// `TENANT_IOC_READ_COUNTERS`: cumulative totals of a scope.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct ReadCounters {
    /// [`TENANT_STRUCT_VERSION`].
    pub version: u32,
    /// One of [`scope`].
    pub scope: u32,
    /// Context or VM id (0 for the system scope).
    pub id: u32,
    /// Number of valid ids in `events`; 0 = all events.
    pub n_events: u32,
    /// Event ids to read; `values[i]` answers `events[i]` (or event `i`
    /// when `n_events` is 0).
    pub events: [u16; MAX_EVENTS],
    /// Output: bits in [`counter_flags`].
    pub flags: u32,
    /// Reserved, 0.
    pub reserved: u32,
    /// Output: commits folded into the totals.
    pub commit_seq: u64,
    /// Output: device cycle of the last commit.
    pub cycle: u64,
    /// Output: totals.
    pub values: [u64; MAX_EVENTS],
    /// Output: the sealed block slot (with `SEALED`).
    pub sealed: BlockSlot,
}
const _: () = assert!(core::mem::size_of::<ReadCounters>() == 16 + 128 + 24 + 512 + 592);

/// One interval of a [`ReadRates`] answer.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct RateSample {
    /// First cycle of the interval.
    pub start_cycle: u64,
    /// Last cycle of the interval (exclusive).
    pub end_cycle: u64,
    /// `layout::record_flags` of the commit.
    pub flags: u32,
    /// Context the interval was counted for.
    pub ctx: u32,
    /// Per-event deltas over the interval.
    pub deltas: [u64; MAX_EVENTS],
}
const _: () = assert!(core::mem::size_of::<RateSample>() == 24 + 512);

/// Most samples per [`ReadRates`].
pub const RATE_SAMPLES: usize = 16;

/// `TENANT_IOC_READ_RATES`: the most recent per-interval deltas of a scope
/// (oldest first). Confidential scopes answer `count` 0 with `SEALED` set in
/// `flags`; their deltas are available sealed through a stream session.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct ReadRates {
    /// [`TENANT_STRUCT_VERSION`].
    pub version: u32,
    /// One of [`scope`] (not SYSTEM).
    pub scope: u32,
    /// Context or VM id.
    pub id: u32,
    /// Most samples wanted (1..=RATE_SAMPLES).
    pub max: u32,
    /// Output: samples filled.
    pub count: u32,
    /// Output: bits in [`counter_flags`].
    pub flags: u32,
    /// Output: nominal device clock in kHz, to turn cycles into seconds.
    pub clock_khz: u32,
    /// Reserved, 0.
    pub reserved: u32,
    /// Output.
    pub samples: [RateSample; RATE_SAMPLES],
}
const _: () = assert!(core::mem::size_of::<ReadRates>() == 32 + 536 * RATE_SAMPLES);

/// Input bits of [`ReadInstance::flags`] and [`ReadInstanceRates::flags`];
/// any other bit is EINVAL.
pub mod instance_flags {
    /// Read the newest instance of the id: `created_cycle` is ignored on
    /// input and answers the instance that was read.
    pub const LATEST: u32 = 1 << 0;
    /// Every defined bit.
    pub const ALL: u32 = LATEST;
}

/// `TENANT_IOC_READ_INSTANCE`: cumulative totals of one context instance.
///
/// Input: `version`, `scope` = [`scope::CONTEXT`], `id`, `flags`,
/// `created_cycle` (unless [`instance_flags::LATEST`]), `n_events`,
/// `events`; `reserved` and `reserved2` must be 0. The output fields are
/// overwritten, so an answer can be sent again as the next request.
/// Values as in [`ReadCounters`]; a retired instance answers the final
/// totals the daemon persisted before the device released its block.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct ReadInstance {
    /// [`TENANT_STRUCT_VERSION`].
    pub version: u32,
    /// [`scope::CONTEXT`] (the only scope with instances).
    pub scope: u32,
    /// Context id.
    pub id: u32,
    /// Bits in [`instance_flags`].
    pub flags: u32,
    /// Created cycle of the instance ([`CtxEntry::created_cycle`]).
    pub created_cycle: u64,
    /// Number of valid ids in `events`; 0 = all events.
    pub n_events: u32,
    /// Reserved, 0.
    pub reserved: u32,
    /// Event ids to read; `values[i]` answers `events[i]` (or event `i`
    /// when `n_events` is 0).
    pub events: [u16; MAX_EVENTS],
    /// Output: one of [`ctx_state`].
    pub state: u32,
    /// Output: bits in [`counter_flags`].
    pub out_flags: u32,
    /// Output: the VM the instance belongs to.
    pub vm: u32,
    /// Reserved, 0.
    pub reserved2: u32,
    /// Output: commits folded into the totals.
    pub commit_seq: u64,
    /// Output: device cycle of the last commit.
    pub cycle: u64,
    /// Output: totals.
    pub values: [u64; MAX_EVENTS],
    /// Output: the sealed block slot (with `SEALED` in `out_flags`).
    pub sealed: BlockSlot,
}
const _: () = assert!(core::mem::size_of::<ReadInstance>() == 32 + 128 + 32 + 512 + 592);

/// `TENANT_IOC_READ_INSTANCE_RATES`: the most recent per-interval deltas
/// of one context instance (oldest first), as [`ReadRates`] answers them
/// for a scope. The daemon keeps a bounded history per VM and per context
/// id, so an old instance may answer fewer samples, or none.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct ReadInstanceRates {
    /// [`TENANT_STRUCT_VERSION`].
    pub version: u32,
    /// [`scope::CONTEXT`].
    pub scope: u32,
    /// Context id.
    pub id: u32,
    /// Bits in [`instance_flags`].
    pub flags: u32,
    /// Created cycle of the instance (output with [`instance_flags::LATEST`]).
    pub created_cycle: u64,
    /// Most samples wanted (1..=RATE_SAMPLES).
    pub max: u32,
    /// Reserved, 0.
    pub reserved: u32,
    /// Output: samples filled.
    pub count: u32,
    /// Output: bits in [`counter_flags`].
    pub out_flags: u32,
    /// Output: nominal device clock in kHz.
    pub clock_khz: u32,
    /// Reserved, 0.
    pub reserved2: u32,
    /// Output.
    pub samples: [RateSample; RATE_SAMPLES],
}
const _: () = assert!(core::mem::size_of::<ReadInstanceRates>() == 48 + 536 * RATE_SAMPLES);

/// `TENANT_IOC_OPEN_STREAM`: turn this file handle into a stream session
/// of a scope's delta records (replaces any previous session on the handle).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct OpenStream {
    /// [`TENANT_STRUCT_VERSION`].
    pub version: u32,
    /// One of [`scope`] (not SYSTEM).
    pub scope: u32,
    /// Context or VM id.
    pub id: u32,
    /// Must be 0.
    pub flags: u32,
}

/// A delta record as `read()` returns it on a stream session.
///
/// `slot` is the stream slot as the device published it: plaintext
/// `StreamRecord` in `slot.payload` for ordinary VMs, ciphertext for
/// confidential VMs (decrypt with the VM's key). `lost_before` counts
/// records of this session the daemon could not deliver (device ring
/// overflow, or the session's queue overflowing) since the previous record.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct TenantDelta {
    /// Session sequence number (1, 2, …).
    pub seq: u64,
    /// Records lost since the previous one.
    pub lost_before: u64,
    /// The published stream slot.
    pub slot: StreamSlot,
}
const _: () = assert!(core::mem::size_of::<TenantDelta>() == 16 + 608);

/// `TENANT_IOC_EVENT_INFO`: one catalogue entry (iterate `id` from 0 until EINVAL).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct EventInfo {
    /// [`TENANT_STRUCT_VERSION`].
    pub version: u32,
    /// Event id to describe.
    pub id: u32,
    /// Output: `events::UnitType` as u8.
    pub unit_type: u8,
    /// Output: 1 for multi-bit events.
    pub multibit: u8,
    /// Output: `events::scope_code` (0 partition, 1 context-filtered
    /// shared, 2 device-level).
    pub scope: u8,
    /// Reserved, 0.
    pub reserved: u8,
    /// Reserved, 0.
    pub reserved2: u32,
    /// Output: NUL-padded name.
    pub name: [u8; 32],
    /// Output: NUL-padded unit of one count.
    pub measure: [u8; 16],
    /// Output: NUL-padded description.
    pub description: [u8; 96],
}
const _: () = assert!(core::mem::size_of::<EventInfo>() == 16 + 32 + 16 + 96);

/// Output bits of [`KeyState::flags`].
pub mod key_flags {
    /// The VM is confidential.
    pub const CONFIDENTIAL: u32 = 1 << 0;
    /// The VM has an established session (ABI 1.11): `key_epoch` and
    /// `session` are its; without it both are 0 and the VM's counts are
    /// withheld.
    pub const SESSION: u32 = 1 << 1;
}

/// `TENANT_IOC_KEY_STATE` (ABI 1.5): a VM's current key epoch and device
/// session, as the VM entry's `VM_KEY_EPOCH` and `VM_KEY_SESSION` read —
/// what a rekey blob is sealed for. Not secret.
///
/// Input: `version`, `vm`; `flags` and `reserved` must be 0. A VM that is
/// not confidential answers `flags` 0, `key_epoch` 0 and `session` 0.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct KeyState {
    /// [`TENANT_STRUCT_VERSION`].
    pub version: u32,
    /// VM id.
    pub vm: u32,
    /// Output: bits in [`key_flags`] (0 on input).
    pub flags: u32,
    /// Output: key epoch (1 = the session's first key, +1 per rekey).
    pub key_epoch: u32,
    /// Output: the VM's current session id (0: no session).
    pub session: u64,
    /// Reserved, 0.
    pub reserved: u64,
}
const _: () = assert!(core::mem::size_of::<KeyState>() == 32);

/// `TENANT_IOC_REKEY` (ABI 1.5): replace a confidential VM's key with one
/// sealed under its current session key (`docs/confidential.md`, "Rekeying
/// with proof of the current key").
///
/// The three arrays are the 14 words of the device's staging registers in
/// register order — `REKEY_NONCE`, `REKEY_KEY`, `REKEY_TAG`, each word the
/// little-endian bytes `4i..4i+4` of the field. `flags` and `reserved` must
/// be 0. Nothing is answered: on success the VM's key epoch has moved on.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct Rekey {
    /// [`TENANT_STRUCT_VERSION`].
    pub version: u32,
    /// VM id.
    pub vm: u32,
    /// Must be 0.
    pub flags: u32,
    /// Reserved, 0.
    pub reserved: u32,
    /// The tenant's random nonce bytes (`REKEY_NONCE`).
    pub nonce: [u32; REKEY_NONCE_WORDS],
    /// The new key, encrypted (`REKEY_KEY`).
    pub sealed_key: [u32; REKEY_KEY_WORDS],
    /// The AES-GCM tag (`REKEY_TAG`).
    pub tag: [u32; REKEY_TAG_WORDS],
}
const _: () = assert!(core::mem::size_of::<Rekey>() == 16 + 4 * 14);

macro_rules! tenant_ioctls {
    ($( $(#[$m:meta])* $name:ident = $dir:ident($nr:literal, $ty:ty); )*) => {
        $( $(#[$m])*
           pub const $name: u32 = crate::ioc::$dir(TENANT_IOC_MAGIC, $nr, core::mem::size_of::<$ty>());
           const _: () = assert!(core::mem::size_of::<$ty>() <= crate::ioctl::MAX_IOCTL_SIZE); )*
        /// Every tenant-node ioctl number with its name.
        pub const TENANT_IOCTLS: &[(&str, u32)] = &[ $( (stringify!($name), $name), )* ];
    };
}

tenant_ioctls! {
    /// Read [`Whoami`].
    TENANT_IOC_WHOAMI = read_write(0x00, Whoami);
    /// [`ListContexts`].
    TENANT_IOC_LIST_CONTEXTS = read_write(0x01, ListContexts);
    /// [`ReadCounters`].
    TENANT_IOC_READ_COUNTERS = read_write(0x02, ReadCounters);
    /// [`ReadRates`].
    TENANT_IOC_READ_RATES = read_write(0x03, ReadRates);
    /// [`OpenStream`].
    TENANT_IOC_OPEN_STREAM = write(0x04, OpenStream);
    /// [`EventInfo`].
    TENANT_IOC_EVENT_INFO = read_write(0x05, EventInfo);
    /// [`ReadInstance`] (ABI 1.2).
    TENANT_IOC_READ_INSTANCE = read_write(0x06, ReadInstance);
    /// [`ReadInstanceRates`] (ABI 1.2).
    TENANT_IOC_READ_INSTANCE_RATES = read_write(0x07, ReadInstanceRates);
    /// [`OpenSampling`] (ABI 1.5): make the handle a sampling session.
    TENANT_IOC_OPEN_SAMPLING = read_write(0x08, OpenSampling);
    /// [`KeyState`] (ABI 1.5).
    TENANT_IOC_KEY_STATE = read_write(0x09, KeyState);
    /// [`Rekey`] (ABI 1.5).
    TENANT_IOC_REKEY = write(0x0A, Rekey);
    /// [`crate::cc::KeyExchange`] (ABI 1.11): relayed to the device.
    TENANT_IOC_CC_KEY_EXCHANGE = read_write(0x0E, crate::cc::KeyExchange);
    /// [`crate::cc::Finish`] (ABI 1.11): relayed to the device.
    TENANT_IOC_CC_FINISH = read_write(0x0F, crate::cc::Finish);
    /// [`OpenRi`] (ABI 1.7): make the handle a runtime-instrumentation session.
    TENANT_IOC_OPEN_RI = read_write(0x10, OpenRi);
    /// [`RiEmit`] (ABI 1.7): RIEMIT into the handle's RI session.
    TENANT_IOC_RI_EMIT = write(0x11, RiEmit);
    /// [`RiStatus`] (ABI 1.7): the handle's RI session.
    TENANT_IOC_RI_STATUS = read_write(0x12, RiStatus);
    /// [`RiResume`] (ABI 1.8): re-enable the handle's halted RI session.
    TENANT_IOC_RI_RESUME = read_write(0x13, RiResume);
    /// [`AddRange`] (ABI 1.7): program a range for one of the caller's contexts.
    TENANT_IOC_ADD_RANGE = read_write(0x18, AddRange);
    /// [`ReadRanges`] (ABI 1.7).
    TENANT_IOC_READ_RANGES = read_write(0x19, ReadRanges);
    /// [`RemoveRange`] (ABI 1.7).
    TENANT_IOC_REMOVE_RANGE = write(0x1A, RemoveRange);
    /// [`ReadCallEdges`] (ABI 1.7).
    TENANT_IOC_READ_CALL_EDGES = read_write(0x1B, ReadCallEdges);
    /// [`ReadCallKernels`] (ABI 1.7).
    TENANT_IOC_READ_CALL_KERNELS = read_write(0x1C, ReadCallKernels);
    /// [`ReadCallStacks`] (ABI 1.7).
    TENANT_IOC_READ_CALL_STACKS = read_write(0x1D, ReadCallStacks);
}
