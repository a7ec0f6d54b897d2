//! Tenant counter pages: one read-only, shared 4 KiB page per VM and per
//! live context instance, which `gpupmd` keeps up to date and a tenant maps
//! to read its counters without a system call (docs/pages.md).
//!
//! # Obtaining a page
//! A client connects a `SOCK_SEQPACKET` Unix socket to the daemon's page
//! socket ([`DEFAULT_PAGES_SOCKET`]), sends one [`PageRequest`] per page,
//! one per message, and receives one [`PageReply`] each, in order; a
//! message that is not exactly `size_of::<PageRequest>()` bytes is answered
//! with `status` EINVAL and every other field but `version` 0, and an
//! empty message closes the connection (docs/pages.md). A reply with
//! `status` 0 carries one
//! read-only file descriptor of the page (`SCM_RIGHTS`), which the client
//! maps with `mmap(NULL, PAGE_SIZE, PROT_READ, MAP_SHARED, fd, 0)`. Who may
//! have which page is decided exactly as on the tenant node, from the
//! credentials the kernel records for the connection (`SO_PEERCRED`,
//! `SO_PEERGROUPS`): a tenant gets its VMs' pages and their contexts' pages;
//! the admin gets every page. `status` is an errno: EINVAL for a bad
//! `version`, `flags` (an undefined bit, or any bit on a VM request),
//! scope kind (only [`crate::tenant::scope::VM`] and
//! [`crate::tenant::scope::CONTEXT`] have pages) or id, or a
//! `created_cycle` on a VM request or with
//! [`page_request_flags::LATEST`]; EACCES for a page that is
//! not the caller's and — for a tenant — one that does not exist (a
//! retired context has none), so that existence never leaks; ENOENT for
//! the admin's missing page. The descriptor refuses `PROT_WRITE` shared
//! mappings and `mprotect(PROT_WRITE)` of a shared mapping (EACCES).
//!
//! # Reading a page (the sequence lock)
//! [`Page::seq`] is odd while the daemon writes. A reader:
//! 1. loads `seq` (a relaxed atomic load) and issues an acquire fence; if
//!    `seq` is odd, it starts again;
//! 2. copies the words of [`Page::data`] it wants, each with a relaxed
//!    64-bit atomic load;
//! 3. issues an acquire fence and loads `seq` again; the copy is consistent
//!    if it equals the first load, else it starts again.
//!
//! The writer stores `seq + 1` (relaxed), issues a release fence, stores
//! the data words (relaxed atomic stores) and stores `seq + 2` with
//! release ordering. The C header has the reader as `static inline`
//! functions; docs/pages.md gives the memory-model argument. A `seq` that
//! stays odd means the daemon died while writing: the next daemon
//! republishes the page (a new [`PageCounters::generation`]).
//!
//! All multi-byte fields are little-endian; the size and offset asserts
//! below pin the layout.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::events::MAX_EVENTS;
use crate::layout::{BlockSlot, StreamSlot};
use crate::tenant::RateSample;

/// Bytes of one page, and of the file that holds it.
pub const PAGE_SIZE: usize = 4096;
/// [`PageHeader::magic`]: "gPAG".
pub const PAGE_MAGIC: u32 = u32::from_le_bytes(*b"gPAG");
/// [`PageHeader::version`]: the page layout's version.
pub const PAGE_VERSION: u32 = 1;
/// Version every [`PageRequest`] and [`PageReply`] carries.
pub const PAGE_STRUCT_VERSION: u32 = 1;
/// Where `gpupmd` listens for page requests unless configured otherwise
/// (`dir` in the `[pages]` table of `gpupmd.toml`, plus [`PAGES_SOCKET_NAME`]).
pub const DEFAULT_PAGES_SOCKET: &str = "/run/gpupm/pages/socket";
/// File name of the page socket in the daemon's pages directory.
pub const PAGES_SOCKET_NAME: &str = "socket";
/// Byte offset of [`Page::seq`].
pub const PAGE_SEQ_OFFSET: usize = 64;
/// Byte offset of [`Page::data`], the words the sequence lock protects.
pub const PAGE_DATA_OFFSET: usize = 72;
/// Attempts the reference readers make spinning before they start
/// yielding the processor between attempts: a writer holds the lock for
/// well under a microsecond unless it is preempted, and then only giving
/// the processor away lets it finish (on a busy host the reader may be
/// what keeps it off its core).
pub const PAGE_READ_SPINS: u32 = 256;
/// How long the reference readers keep failing before they report the
/// page busy, in milliseconds: long enough for a preempted writer on a
/// loaded host to be scheduled again; a writer that died mid-update
/// leaves `seq` odd for good, and only its successor's republication
/// ends that.
pub const PAGE_BUSY_MS: u32 = 1000;

/// Values of [`PageCounters::state`]: a context page follows its context;
/// a VM page is [`ACTIVE`](page_state::ACTIVE) until it is withdrawn.
pub mod page_state {
    /// Published and kept up to date.
    pub const ACTIVE: u32 = 1;
    /// The context was destroyed: the totals are final.
    pub const DESTROYED: u32 = 2;
    /// The context was retired (its final totals persisted, its device
    /// block released): the totals are final, the daemon has removed the
    /// page and will not write it again. Further reads of that instance go
    /// through `TENANT_IOC_READ_INSTANCE`.
    pub const RETIRED: u32 = 3;
    /// The daemon no longer keeps this page (the scope vanished with a
    /// device reset, or who may see it changed across a daemon restart):
    /// the values are the last it wrote; ask for the page again.
    pub const WITHDRAWN: u32 = 4;
}

/// Bits of [`PageCounters::flags`].
pub mod page_flags {
    /// A confidential VM's (or its context's) page: `totals`, `commit_seq`
    /// and `cycle` are 0 and [`PageData::sealed`] holds the block slot as
    /// the device published it: AES-256-GCM under the VM's session key,
    /// which the tenant derives from its key and the envelope's session
    /// and key epoch (docs/confidential.md).
    pub const SEALED: u32 = 1 << 0;
    /// [`PageData::rate`] holds a sample (plaintext scopes).
    pub const RATE: u32 = 1 << 1;
    /// [`PageData::sealed_rate`] holds the VM's latest stream slot as the
    /// device published it (confidential VM pages).
    pub const SEALED_RATE: u32 = 1 << 2;
}

/// The immutable start of a page: written before the page is first offered
/// and never changed afterwards, so it needs no sequence lock.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct PageHeader {
    /// [`PAGE_MAGIC`].
    pub magic: u32,
    /// [`PAGE_VERSION`].
    pub version: u32,
    /// [`PAGE_SIZE`].
    pub size: u32,
    /// [`crate::tenant::scope::VM`] or [`crate::tenant::scope::CONTEXT`].
    pub scope: u32,
    /// VM id or context id.
    pub id: u32,
    /// The VM (itself for a VM page, the owner for a context page).
    pub vm: u32,
    /// A context page's instance: its created cycle (0 for a VM page).
    pub created_cycle: u64,
    /// Fingerprint of who may see the page when it was created; a daemon
    /// restarted with another mapping for the VM withdraws the page
    /// instead of writing it again.
    pub audience: u64,
    /// Reserved, 0.
    pub reserved: [u64; 3],
}
const _: () = assert!(core::mem::size_of::<PageHeader>() == 64);

/// The counters of a page, first in [`PageData`], so that a reader that
/// wants only totals copies these 552 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct PageCounters {
    /// Changes (grows) whenever values might go backwards: each daemon
    /// start and each device reset. Within one generation no total,
    /// `commit_seq` or `cycle` ever decreases.
    pub generation: u64,
    /// One of [`page_state`].
    pub state: u32,
    /// Bits in [`page_flags`].
    pub flags: u32,
    /// Commits folded into the totals (the block header's count).
    pub commit_seq: u64,
    /// Device cycle of the last commit folded in.
    pub cycle: u64,
    /// Nominal device clock in kHz, to turn cycles into time.
    pub clock_khz: u32,
    /// Reserved, 0.
    pub reserved: u32,
    /// Cumulative totals indexed by event id: what
    /// `TENANT_IOC_READ_COUNTERS` answers for the scope.
    pub totals: [u64; MAX_EVENTS],
}
const _: () = assert!(core::mem::size_of::<PageCounters>() == 40 + 8 * MAX_EVENTS);

/// Everything the sequence lock protects.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct PageData {
    /// Totals and state.
    pub counters: PageCounters,
    /// The latest per-interval delta of the scope the daemon drained (with
    /// [`page_flags::RATE`]), as `TENANT_IOC_READ_RATES` answers it.
    pub rate: RateSample,
    /// With [`page_flags::SEALED`]: the scope's block slot as published.
    pub sealed: BlockSlot,
    /// With [`page_flags::SEALED_RATE`]: the VM's latest stream slot as
    /// published.
    pub sealed_rate: StreamSlot,
}
const _: () = assert!(core::mem::size_of::<PageData>() == 552 + 536 + 592 + 608);
const _: () = assert!(core::mem::size_of::<PageData>().is_multiple_of(8));

/// Bytes after [`Page::data`] up to [`PAGE_SIZE`].
pub const PAGE_TAIL: usize = PAGE_SIZE - PAGE_DATA_OFFSET - core::mem::size_of::<PageData>();

/// One page as mapped.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct Page {
    /// What the page is about.
    pub header: PageHeader,
    /// The sequence lock: odd while the daemon writes `data`.
    pub seq: u64,
    /// The protected words.
    pub data: PageData,
    /// Reserved, 0.
    pub tail: [u8; PAGE_TAIL],
}
const _: () = assert!(core::mem::size_of::<Page>() == PAGE_SIZE);
const _: () = assert!(core::mem::offset_of!(Page, seq) == PAGE_SEQ_OFFSET);
const _: () = assert!(core::mem::offset_of!(Page, data) == PAGE_DATA_OFFSET);
const _: () = assert!(PAGE_DATA_OFFSET.is_multiple_of(8));

/// `PageRequest::flags` bits; any other bit is EINVAL.
pub mod page_request_flags {
    /// A context request for the id's newest live instance (`created_cycle`
    /// must be 0; the reply names the instance). Without it, a context
    /// request names the instance (`id`, `created_cycle`).
    pub const LATEST: u32 = 1 << 0;
    /// Every defined bit.
    pub const ALL: u32 = LATEST;
}

/// One request on the page socket.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct PageRequest {
    /// [`PAGE_STRUCT_VERSION`].
    pub version: u32,
    /// [`crate::tenant::scope::VM`] or [`crate::tenant::scope::CONTEXT`].
    pub scope: u32,
    /// VM id or context id.
    pub id: u32,
    /// Bits in [`page_request_flags`].
    pub flags: u32,
    /// A context instance's created cycle (0 for a VM or with `LATEST`).
    pub created_cycle: u64,
}
const _: () = assert!(core::mem::size_of::<PageRequest>() == 24);

/// The answer to one [`PageRequest`]; with `status` 0 it carries the page's
/// descriptor.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct PageReply {
    /// [`PAGE_STRUCT_VERSION`].
    pub version: u32,
    /// 0, or the errno of the refusal.
    pub status: u32,
    /// The request's scope kind.
    pub scope: u32,
    /// The request's id.
    pub id: u32,
    /// The page's VM (0 on refusal).
    pub vm: u32,
    /// Bytes to map ([`PAGE_SIZE`]; 0 on refusal).
    pub size: u32,
    /// The instance's created cycle (context pages).
    pub created_cycle: u64,
    /// The daemon's generation when it answered.
    pub generation: u64,
}
const _: () = assert!(core::mem::size_of::<PageReply>() == 40);
