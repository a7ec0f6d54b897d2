//! Tenant sampling sessions (ABI 1.4): [`OpenSampling`] turns a file handle
//! of the tenant node into a session of sample records of the caller's own
//! context or VM; `read()` then returns whole records, each a
//! [`SampleHeader`] followed by the device's record bytes, and `poll()`
//! reports `POLLIN` while one is queued. Closing the handle ends the
//! session and withdraws its demands from the device.
//!
//! Errors as for every tenant ioctl: wrong size, version, flags, reserved
//! fields, record types, periods or ids → EINVAL; a scope that is not the
//! caller's → EACCES, exactly like one that does not exist (ENOENT for the
//! admin); a handle that already holds a session → EBUSY. A refused
//! request changes nothing: no session, no device register.
//!
//! Several sessions on one partition share its samplers: the device runs
//! the smallest period and the smallest N any session asked for, and the
//! largest dither; each session then receives at most its own rate (see
//! `docs/sampling.md`, "Tenant sampling sessions"). The output fields of
//! [`OpenSampling`] describe this session only (since ABI 1.11; before,
//! they said what the device ran for every session of the partition —
//! another tenant's demands, `docs/isolation.md`).
//!
//! Bounds (ABI 1.11, `docs/isolation.md`): past the caller's sampling
//! sessions, or when not even 16 records fit its queue budget → ENOSPC;
//! a larger queue than fits is clamped (`queue_records` answers it).

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Record kinds: bits of [`OpenSampling::kinds`] and values of
/// [`SampleHeader::kind`].
pub mod sample_kind {
    /// Branch-stack records (the last taken branches, captured every N).
    pub const BRANCH_STACK: u16 = 1 << 0;
    /// Cycle (PC) samples, one every P + R + S − A cycles.
    pub const CYCLE: u16 = 1 << 1;
    /// Every defined kind.
    pub const ALL: u16 = BRANCH_STACK | CYCLE;
}

/// Bits of [`SampleHeader::flags`].
pub mod sample_flags {
    /// The payload is the device's sealed slot (AES-256-GCM under the
    /// confidential VM's key, as `layout::Envelope` describes); open it
    /// with the VM's key. Without it the payload is the plaintext record.
    pub const SEALED: u16 = 1 << 0;
}

/// Smallest cycle-sampling period a session may ask for (the device's).
pub const MIN_SAMPLE_PERIOD: u32 = crate::sampling::CYCLE_PERIOD_MIN;
/// Largest cycle-sampling period a session may ask for (the device's).
pub const MAX_SAMPLE_PERIOD: u32 = crate::sampling::CYCLE_PERIOD_MAX;
/// Largest dither (R_MAX) a session may ask for (the device's).
pub const MAX_SAMPLE_DITHER: u32 = crate::sampling::DITHER_MAX;
/// Largest N, taken branches per branch-stack capture (the device's).
pub const MAX_BRANCH_EVERY: u32 = crate::sampling::BRANCH_PERIOD_MAX;
/// Most records a session queues when [`OpenSampling::queue_records`] is 0.
pub const DEFAULT_SESSION_RECORDS: u32 = 1 << 16;
/// Most records a session may ask to queue.
pub const MAX_SESSION_RECORDS: u32 = 1 << 20;

/// `TENANT_IOC_OPEN_SAMPLING`: make this handle a sampling session.
///
/// Input: `version`, `scope` ([`super::scope::CONTEXT`] or
/// [`super::scope::VM`]), `id`, `kinds` (non-empty subset of
/// [`sample_kind::ALL`]), `period` (P, with [`sample_kind::CYCLE`]:
/// `MIN_SAMPLE_PERIOD..=MAX_SAMPLE_PERIOD`, else 0), `dither` (R_MAX,
/// `0..=MAX_SAMPLE_DITHER`, 0 = fixed period, 255 = the sampler's reset
/// value; 0 without CYCLE), `branch_every` (N, with
/// [`sample_kind::BRANCH_STACK`]: `1..=MAX_BRANCH_EVERY`, else 0),
/// `queue_records` (0 = default, else `1..=MAX_SESSION_RECORDS`); `flags`
/// and the reserved fields 0. Output: the rest.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct OpenSampling {
    /// [`super::TENANT_STRUCT_VERSION`].
    pub version: u32,
    /// [`super::scope::CONTEXT`] or [`super::scope::VM`].
    pub scope: u32,
    /// Context or VM id.
    pub id: u32,
    /// Bits of [`sample_kind`] (u32 on the wire).
    pub kinds: u32,
    /// P: cycles between cycle samples before dither.
    pub period: u32,
    /// R_MAX: the dither is uniform in 0..=R_MAX.
    pub dither: u32,
    /// N: taken branches per branch-stack capture.
    pub branch_every: u32,
    /// Records the session queues before it drops (and counts) new ones;
    /// output (ABI 1.11): the records granted, at most the ones asked
    /// for (clamped to the caller's queue budget).
    pub queue_records: u32,
    /// Must be 0.
    pub flags: u32,
    /// Reserved, 0.
    pub reserved: u32,
    /// Output: session id, counted per uid (1, 2, …; ABI 1.11: before,
    /// unique daemon-wide).
    pub session: u64,
    /// Output: the period this session receives: its own `period` (ABI
    /// 1.11; before, what the device ran for the partition's sessions),
    /// for a tenant raised to the daemon's `tenant_min_sample_period`.
    pub device_period: u32,
    /// Output: the dither this session receives: its own `dither`.
    pub device_dither: u32,
    /// Output: the N this session receives: its own `branch_every`, for a
    /// tenant raised to the daemon's `tenant_min_branch_every`.
    pub device_branch_every: u32,
    /// Output: nominal device clock in kHz.
    pub clock_khz: u32,
    /// Output: partition slot the session samples.
    pub partition: u32,
    /// Output: 1 when the scope belongs to a confidential VM (records
    /// arrive [`sample_flags::SEALED`]).
    pub confidential: u32,
    /// Output: for a context session, the program the context runs, as
    /// `regs::CTX_PROGRAM` reads (0 none, else 1 + its index in the
    /// scenario's program table); 0 for a VM session.
    pub program: u32,
    /// Reserved, output 0.
    pub reserved2: u32,
}
const _: () = assert!(core::mem::size_of::<OpenSampling>() == 80);

/// Header of every record `read()` returns on a sampling session; the
/// device's record bytes follow (`size` − 24 of them).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct SampleHeader {
    /// One [`sample_kind`] bit.
    pub kind: u16,
    /// Bits of [`sample_flags`].
    pub flags: u16,
    /// Bytes of the whole record, header included (a multiple of 8).
    pub size: u32,
    /// Session sequence number (1, 2, …) over all kinds.
    pub seq: u64,
    /// Records of this kind the session did not receive since its
    /// previous record of this kind: records of the session's own scope
    /// (its context, or its VM's contexts) the device lost to a full
    /// buffer (ABI 1.6: the device counts losses per context,
    /// `SAMP_LOST_SELECT`), and records the session's queue dropped.
    pub lost_before: u64,
}
const _: () = assert!(core::mem::size_of::<SampleHeader>() == 24);
