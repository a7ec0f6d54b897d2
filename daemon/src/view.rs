//! What the daemon knows, as the tenant node, the health log and the
//! metrics endpoint see it. The counter store implements [`CounterView`]
//! and [`HealthSource`]; the consumers depend only on this module, so each
//! can be tested against a small in-process implementation.

use std::sync::atomic::{AtomicU64, Ordering};

pub use gpupm_client::tenant::{CtxId, Scope, VmId};
/// Who is asking, as the kernel reported it for the request.
pub use gpupm_fusemount::Caller;
use gpupm_uapi::events::MAX_EVENTS;
use gpupm_uapi::layout::BlockSlot;

use crate::feed::FeedReceiver;

/// Lifecycle of a context as the daemon tracks it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CtxState {
    /// Exists on the device and may run.
    Active,
    /// Destroyed on the device; its block is still there.
    Destroyed,
    /// Destroyed, final totals persisted, block released.
    Retired,
}

/// One context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CtxInfo {
    /// Context id.
    pub ctx: CtxId,
    /// Owning VM.
    pub vm: VmId,
    /// Device cycle of creation.
    pub created_cycle: u64,
    /// State.
    pub state: CtxState,
}

/// Cumulative totals of one scope.
#[derive(Clone, Debug, PartialEq, Eq)]
// Totals are short-lived values answered per request; boxing the counters
// would cost an allocation on every tenant read.
#[allow(clippy::large_enum_variant)]
pub enum Totals {
    /// Readable counters, indexed by event id.
    Plain {
        /// Per-event totals.
        counters: [u64; MAX_EVENTS],
        /// Commits folded in (from the block header).
        commit_seq: u64,
        /// Device cycle of the last commit.
        cycle: u64,
    },
    /// A confidential VM's scope: the daemon only holds ciphertext. The
    /// bytes are the block slot exactly as the device published it
    /// (`gpupm_uapi::layout::BlockSlot`), for the tenant to decrypt.
    Sealed(Vec<u8>),
}

/// One stream commit record (a per-interval delta) of a scope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeltaSample {
    /// Stream sequence number of the partition ring.
    pub seq: u64,
    /// VM and context the commit went to.
    pub vm: VmId,
    /// Context (0 = none).
    pub ctx: CtxId,
    /// First cycle covered.
    pub start_cycle: u64,
    /// Cycle of the commit.
    pub end_cycle: u64,
    /// `gpupm_uapi::layout::record_flags`.
    pub flags: u16,
    /// Records of this ring lost to overflow before this one.
    pub lost_before: u64,
    /// Per-event deltas (all zero when `sealed` is set).
    pub deltas: [u64; MAX_EVENTS],
    /// For confidential VMs: the stream slot bytes as published.
    pub sealed: Option<Vec<u8>>,
}

/// Read access to the daemon's counters. Every method answers `None` for
/// a scope that does not exist; authorisation is the caller's job.
pub trait CounterView: Send + Sync + 'static {
    /// VMs the device has.
    fn vms(&self) -> Vec<VmId>;
    /// Partition slot of a VM.
    fn vm_partition(&self, vm: VmId) -> Option<u32>;
    /// Contexts of a VM (active, destroyed and retired).
    fn contexts(&self, vm: VmId) -> Option<Vec<CtxInfo>>;
    /// VM of a context.
    fn ctx_vm(&self, ctx: CtxId) -> Option<VmId>;
    /// Cumulative totals.
    fn totals(&self, scope: Scope) -> Option<Totals>;
    /// The most recent `max` delta samples of a scope, oldest first.
    fn recent(&self, scope: Scope, max: usize) -> Option<Vec<DeltaSample>>;
    /// A live feed of delta samples of a scope.
    fn subscribe(&self, scope: Scope) -> Option<FeedReceiver<DeltaSample>>;
    /// Nominal device clock in kHz (to turn cycles into time).
    fn clock_khz(&self) -> u32;

    /// The program a context runs, as its `CTX_PROGRAM` register reads
    /// (0 none, else 1 + its index in the scenario's program table).
    fn ctx_program(&self, _ctx: CtxId) -> Option<u32> {
        None
    }

    /// The device's key registers of confidential VMs, for the tenant
    /// node's key-state and rekey requests; `None` for a view without a
    /// device behind it (those requests then fail with ENOTTY, as on a
    /// daemon without them).
    fn vm_keys(&self) -> Option<&dyn VmKeys> {
        None
    }

    /// Whether (`ctx`, `created_cycle`) is a retired instance persisted
    /// under an earlier tenant mapping of its VM: the history of the
    /// VM's previous tenants, which its tenants now must not see (the
    /// default: a view that records no mappings has none).
    fn earlier_tenancy(&self, _ctx: CtxId, _created_cycle: u64) -> bool {
        false
    }

    /// One context instance, named by (id, created cycle), whatever its
    /// state. The default searches [`CounterView::contexts`] of every VM.
    fn instance(&self, ctx: CtxId, created_cycle: u64) -> Option<CtxInfo> {
        self.vms().into_iter().find_map(|vm| {
            self.contexts(vm)?
                .into_iter()
                .find(|c| c.ctx == ctx && c.created_cycle == created_cycle)
        })
    }

    /// The newest instance of a context id (the one [`Scope::Ctx`] names).
    /// The default searches [`CounterView::contexts`] of the id's VM.
    fn latest_instance(&self, ctx: CtxId) -> Option<CtxInfo> {
        self.contexts(self.ctx_vm(ctx)?)?
            .into_iter()
            .filter(|c| c.ctx == ctx)
            .max_by_key(|c| c.created_cycle)
    }

    /// Cumulative totals of one instance. The default answers only the
    /// newest instance (through [`Scope::Ctx`]), which is right for a view
    /// that keeps nothing of older ones.
    fn instance_totals(&self, ctx: CtxId, created_cycle: u64) -> Option<Totals> {
        let latest = self.latest_instance(ctx)?;
        (latest.created_cycle == created_cycle)
            .then(|| self.totals(Scope::Ctx(ctx)))
            .flatten()
    }

    /// The most recent `max` delta samples of one instance, oldest first;
    /// the default, like [`CounterView::instance_totals`], knows only the
    /// newest instance.
    fn instance_recent(
        &self,
        ctx: CtxId,
        created_cycle: u64,
        max: usize,
    ) -> Option<Vec<DeltaSample>> {
        let latest = self.latest_instance(ctx)?;
        (latest.created_cycle == created_cycle)
            .then(|| self.recent(Scope::Ctx(ctx), max))
            .flatten()
    }
}

/// A VM's key registers (`VM_FLAGS`, `VM_KEY_EPOCH`, `VM_KEY_SESSION`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyStatus {
    /// The VM is confidential.
    pub confidential: bool,
    /// The VM has an established session.
    pub established: bool,
    /// Key epoch (0 without a session and for a plain VM).
    pub epoch: u32,
    /// Session id (0 without a session and for a plain VM).
    pub session: u64,
}

/// Words of a rekey blob in staging-register order (`REKEY_NONCE`,
/// `REKEY_KEY`, `REKEY_TAG`).
pub type RekeyWords = [u32; gpupm_client::ops::REKEY_WORDS];

/// Why a key request to the device failed.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The device refused the commit: the blob does not open under the
    /// VM's current session key (or the VM is not confidential); or it
    /// refused a key-exchange message (EINVAL).
    #[error("the device refused the request")]
    Refused,
    /// The VM has a session and the FINISH does not replace it (EBUSY).
    #[error("the VM already has a session")]
    SessionExists,
    /// The device has no identity (ENODEV).
    #[error("the device has no identity")]
    NoIdentity,
    /// The VM's exchanges came faster than the daemon allows.
    #[error("too many key exchanges for this VM")]
    RateLimited,
    /// The device node failed otherwise.
    #[error(transparent)]
    Device(#[from] gpupm_client::DevError),
}

/// Access to confidential VMs' key registers on the device. The daemon
/// only moves sealed blobs: it never holds a key.
pub trait VmKeys: Send + Sync {
    /// The key registers of `vm`.
    fn key_status(&self, vm: VmId) -> Result<KeyStatus, KeyError>;
    /// Stages `blob` in the `REKEY_*` registers and commits it with the
    /// VM entry's `VM_KEY_COMMIT`, as one register batch (all or nothing).
    fn commit_rekey(&self, vm: VmId, blob: &RekeyWords) -> Result<(), KeyError>;
    /// Relays a KEY_EXCHANGE to the device (`msg.vm`'s; rate limited per
    /// VM); the device's half comes back in `msg`.
    fn key_exchange(&self, msg: &mut gpupm_uapi::cc::KeyExchange) -> Result<(), KeyError>;
    /// Relays a FINISH to the device.
    fn finish(&self, msg: &mut gpupm_uapi::cc::Finish) -> Result<(), KeyError>;
}

/// Identity of the device the daemon serves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceIdentity {
    /// `ABI_VERSION` of the device.
    pub abi_version: u32,
    /// Nominal clock.
    pub clock_khz: u32,
    /// Partition slots configured.
    pub partitions: u32,
    /// CCUs.
    pub ccus: u32,
    /// SMs.
    pub sms: u32,
}

/// Counters of the daemon's own work, for health logs and metrics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HealthSnapshot {
    /// Device identity.
    pub device: DeviceIdentity,
    /// Seconds since the daemon started.
    pub uptime_s: f64,
    /// Host-driven handshakes completed.
    pub handshakes: u64,
    /// Handshake latencies (request interrupt read → unpause written), ns,
    /// of the handshakes since the previous snapshot.
    pub handshake_latency_ns: Vec<u64>,
    /// Switches the device completed by fallback (all partitions).
    pub fallbacks: u64,
    /// Stream records lost to ring overflow (all rings).
    pub lost_records: u64,
    /// Stream records drained.
    pub drained_records: u64,
    /// Of those, read from the commit mirror's ring area (the rest came
    /// through the memory window).
    pub mirrored_records: u64,
    /// Drain reads of the mirror that fell back to the window (a reset or
    /// a driver restart raced the drain).
    pub mirror_fallbacks: u64,
    /// Largest ring fill seen at drain time since the previous snapshot.
    pub drain_lag_records: u64,
    /// Longest time, in device time, from a switch request to the host's
    /// pause since the previous snapshot: how close the host came to the
    /// device's fallback timeout.
    pub handshake_response_max_ns: u64,
    /// Device cycles the device's real-time clock dropped since it
    /// started (`CLOCK_LAG`): it ran slower than the wall clock.
    pub clock_lag_cycles: u64,
    /// Contexts active on the device.
    pub contexts_active: u64,
    /// Context instances that entered the retired set (persisted and
    /// released, or loaded from the state directory at start).
    pub contexts_retired: u64,
    /// Retired instances the retention policy removed since the start.
    pub contexts_pruned: u64,
    /// Retired instances kept now (readable through the tenant node).
    pub contexts_retained: u64,
    /// Tenant requests served.
    pub tenant_requests: u64,
    /// Tenant requests answered with an error.
    pub tenant_errors: u64,
    /// Tenant counter pages.
    pub pages: PageStats,
    /// Runtime-instrumentation sessions and their groups.
    pub ri: crate::ri::RiCounts,
    /// Marked ranges and call graphs.
    pub ranges: crate::ranges::RangeMetrics,
    /// What tenants hold against the `[limits]`.
    pub bounds: BoundsSnapshot,
}

/// What tenants hold against the `[limits]` (docs/isolation.md), and what
/// was refused, for the `gpupm_bound_*` metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BoundsSnapshot {
    /// The limits in force.
    pub limits: gpupm_client::config::Limits,
    /// Queue bytes one VM's callers (or the admin) may reserve.
    pub share_bytes: u64,
    /// Tenant-node handles open.
    pub handles: u64,
    /// Stream sessions open.
    pub stream_sessions: u64,
    /// Sampling sessions open.
    pub sampling_sessions: u64,
    /// RI sessions open.
    pub ri_sessions: u64,
    /// Reads waiting.
    pub parked_reads: u64,
    /// Queue bytes reserved.
    pub queued_bytes: u64,
    /// The most handles one uid holds.
    pub max_uid_handles: u64,
    /// The most reads of one uid waiting.
    pub max_uid_parked_reads: u64,
    /// The most queue bytes one uid reserved.
    pub max_uid_queued_bytes: u64,
    /// The most queue bytes one share (a VM's callers, the admin) reserved.
    pub max_share_queued_bytes: u64,
    /// Page-socket connections open.
    pub page_connections: u64,
    /// Handles refused (EMFILE, ENFILE).
    pub refused_handles: u64,
    /// Sessions refused for their count (ENOSPC).
    pub refused_sessions: u64,
    /// Sessions refused for their queue bytes (ENOSPC).
    pub refused_queued: u64,
    /// Reads refused rather than parked (EBUSY).
    pub refused_parked_reads: u64,
    /// Device reads refused (EAGAIN).
    pub refused_device_reads: u64,
    /// Page-socket connections refused.
    pub refused_page_connections: u64,
}

/// Counts of the tenant counter pages (`crate::pages`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageStats {
    /// VM pages published.
    pub vm_pages: u64,
    /// Context pages published.
    pub ctx_pages: u64,
    /// Page publications (each a sequence-lock write of a changed page).
    pub updates: u64,
    /// Refreshes that read the device.
    pub refreshes: u64,
    /// Page requests answered.
    pub requests: u64,
    /// Page requests refused.
    pub request_errors: u64,
}

/// Source of [`HealthSnapshot`]s.
pub trait HealthSource: Send + Sync + 'static {
    /// Current snapshot; takes (and clears) the latency samples.
    fn snapshot(&self) -> HealthSnapshot;
}

/// Request counters of the tenant node.
///
/// `requests` counts ioctls and reads; `errors` those answered with an
/// errno other than EAGAIN. `open_handles` and `open_sessions` are gauges.
#[derive(Debug, Default)]
pub struct TenantStats {
    /// Requests served.
    pub requests: AtomicU64,
    /// Requests answered with an error.
    pub errors: AtomicU64,
    /// File handles currently open on the node.
    pub open_handles: AtomicU64,
    /// Stream sessions currently open.
    pub open_sessions: AtomicU64,
    /// Records stream sessions dropped because their queue was full.
    pub session_drops: AtomicU64,
}

impl TenantStats {
    /// Loads one counter.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// Where a scope's numbers come from: its VM's partition and block slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockSource {
    /// The VM (itself, or the context's owner).
    pub vm: VmId,
    /// Partition slot of the VM.
    pub partition: u32,
    /// Window offset of the block slot.
    pub block_offset: u64,
    /// Confidential: the page holds ciphertext only.
    pub confidential: bool,
}

/// What the daemon's tables say about scopes, for creating and adopting
/// pages (the store implements it, the pages use it).
pub trait PageSource: Send + Sync + 'static {
    /// A VM the device has.
    fn vm_source(&self, vm: VmId) -> Option<BlockSource>;
    /// The newest instance of a context id if the device still holds it
    /// (active or destroyed, not retired): its created cycle, source and
    /// whether it is destroyed.
    fn live_ctx(&self, ctx: CtxId) -> Option<(u64, BlockSource, bool)>;
    /// The persisted final block of a retired instance.
    fn retired_slot(&self, ctx: CtxId, created_cycle: u64) -> Option<BlockSlot>;
}
