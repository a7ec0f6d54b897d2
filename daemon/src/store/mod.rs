//! What the daemon knows: the VM and context tables, the retired set, the
//! recent deltas and the daemon's own counters. Implements
//! [`CounterView`] and [`HealthSource`].
//!
//! Cumulative totals are never summed here: they are read from the device's
//! memory blocks through the window (the source of truth: the system block,
//! each VM's block, each live context's block) or, for a retired context,
//! from the block slot persisted before its release. A daemon restart
//! therefore loses and double-counts nothing.
//!
//! Every context instance (id, created cycle) the daemon still knows is
//! readable: a live one from its block, a retired one from its file, until
//! the [`retention`] policy prunes it.

pub mod history;
pub mod keys;
pub mod retention;
pub mod retired;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Instant;

use gpupm_client::DevNode;
use gpupm_uapi::layout::{
    block_kind, block_slot_offset, envelope_flags, BlockSlot, SYSTEM_BLOCK_SLOT,
};
use gpupm_uapi::regs;
use zerocopy::IntoBytes;

use self::history::History;
pub use self::retention::Pruned;
use self::retention::{AgeKey, Retention};
use self::retired::{plain_block, RetiredStore};
use crate::pages::{PageSource, Pages, Source};
use crate::sampling::drain::DevSampler;
use crate::sampling::Plane;
use crate::view::{
    CounterView, CtxId, CtxInfo, CtxState, DeltaSample, DeviceIdentity, HealthSnapshot,
    HealthSource, Scope, TenantStats, Totals, VmId,
};

/// Most history samples one instance-rates request looks at (the tail of
/// the context's or VM's ring).
pub const INSTANCE_SCAN: usize = 4096;

/// A VM as the device's table describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VmInfo {
    /// Partition slot.
    pub partition: u32,
    /// Confidential: blocks and records are ciphertext.
    pub confidential: bool,
    /// Window offset of its block slot.
    pub block_offset: u64,
}

impl VmInfo {
    /// Where VM `vm`'s page gets its numbers.
    pub fn page_source(&self, vm: VmId) -> Source {
        Source {
            vm,
            partition: self.partition,
            block_offset: self.block_offset,
            confidential: self.confidential,
        }
    }
}

/// A context the device still holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveCtx {
    /// Owning VM.
    pub vm: VmId,
    /// `CTX_CREATED_CYCLE`.
    pub created_cycle: u64,
    /// Window offset of its block slot.
    pub block_offset: u64,
    /// Destroyed on the device, not yet released.
    pub destroyed: bool,
}

/// A retired instance in the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RetiredEntry {
    vm: VmId,
    /// Device cycle of its persisting (the retention clock).
    retired_cycle: u64,
}

#[derive(Debug, Default)]
struct Tables {
    vms: BTreeMap<VmId, VmInfo>,
    partitions: Vec<u32>,
    live: BTreeMap<CtxId, LiveCtx>,
    retired: BTreeMap<(CtxId, u64), RetiredEntry>,
    /// The keys of `retired` in retention order, oldest first.
    retired_order: BTreeSet<AgeKey>,
}

#[derive(Debug, Default)]
struct Stats {
    handshakes: AtomicU64,
    fallbacks_seen: AtomicU64,
    drained: AtomicU64,
    drain_lag: AtomicU64,
    response_max_cycles: AtomicU64,
    retired: AtomicU64,
    pruned: AtomicU64,
}

/// The daemon's state, shared by the engine threads and the consumers.
#[derive(Debug)]
pub struct Store {
    dev: Arc<DevNode>,
    identity: DeviceIdentity,
    started: Instant,
    retired_files: RetiredStore,
    retention: Retention,
    /// Signalled when an instance enters the retired set.
    retired_signal: tokio::sync::Notify,
    /// One pruning pass at a time.
    pruning: Mutex<()>,
    prune_log: Mutex<retention::PruneLog>,
    tables: RwLock<Tables>,
    history: Mutex<History>,
    stats: Stats,
    latencies: Mutex<Vec<u64>>,
    tenant_stats: OnceLock<Arc<TenantStats>>,
    pages: OnceLock<Arc<Pages>>,
    sampler: Arc<DevSampler>,
    sampling: Arc<Plane>,
    ranges: Arc<crate::ranges::RangeBook>,
}

impl Store {
    /// A store over `dev`, keeping `history` samples per scope and the
    /// retired set in `retired_files`, bounded by `retention`.
    pub fn new(
        dev: Arc<DevNode>,
        identity: DeviceIdentity,
        retired_files: RetiredStore,
        retention: Retention,
        history: usize,
    ) -> Store {
        let sampler = Arc::new(DevSampler::new(Arc::clone(&dev), identity.clock_khz));
        let sampling = Plane::new(sampler.clone(), identity.clock_khz);
        Store {
            ranges: Arc::new(crate::ranges::RangeBook::new(Arc::clone(&dev))),
            sampler,
            sampling,
            dev,
            identity,
            started: Instant::now(),
            retired_files,
            retention,
            retired_signal: tokio::sync::Notify::new(),
            pruning: Mutex::new(()),
            prune_log: Mutex::new(retention::PruneLog::default()),
            tables: RwLock::new(Tables::default()),
            history: Mutex::new(History::new(history)),
            stats: Stats::default(),
            latencies: Mutex::new(Vec::new()),
            tenant_stats: OnceLock::new(),
            pages: OnceLock::new(),
        }
    }

    fn read(&self) -> RwLockReadGuard<'_, Tables> {
        // The tables are consistent after every completed update; a panic
        // elsewhere must not stop the daemon from serving them.
        self.tables.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Tables> {
        self.tables.write().unwrap_or_else(|e| e.into_inner())
    }

    fn hist(&self) -> MutexGuard<'_, History> {
        self.history.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The device's samplers (drained by the engine).
    pub fn sampler(&self) -> &Arc<DevSampler> {
        &self.sampler
    }

    /// The sampling plane (sessions and routing).
    pub fn sampling_plane(&self) -> &Arc<Plane> {
        &self.sampling
    }

    /// The range plane (tenants' marked ranges and call graphs).
    pub fn ranges(&self) -> &Arc<crate::ranges::RangeBook> {
        &self.ranges
    }

    /// The persisted retired set.
    pub fn retired_files(&self) -> &RetiredStore {
        &self.retired_files
    }

    /// Device identity.
    pub fn identity(&self) -> DeviceIdentity {
        self.identity
    }

    /// Counters of the tenant node, once it is mounted.
    pub fn set_tenant_stats(&self, stats: Arc<TenantStats>) {
        if self.tenant_stats.set(stats).is_err() {
            tracing::debug!("tenant stats were already attached");
        }
    }

    /// The tenant pages, told from now on about VMs, contexts and
    /// drained commits (before the engine starts, so that they see the
    /// tables it builds).
    pub fn attach_pages(&self, pages: Arc<Pages>) {
        if self.pages.set(pages).is_err() {
            tracing::debug!("tenant pages were already attached");
        }
    }

    /// Replaces the VM table and the configured partition slots.
    pub fn set_topology(&self, vms: BTreeMap<VmId, VmInfo>, partitions: Vec<u32>) {
        let sources: BTreeMap<VmId, Source> =
            vms.iter().map(|(&vm, i)| (vm, i.page_source(vm))).collect();
        {
            let mut t = self.write();
            t.vms = vms;
            t.partitions = partitions;
        }
        if let Some(p) = self.pages.get() {
            p.vms_changed(&sources);
        }
    }

    /// Configured partition slots (including the system slot 0).
    pub fn partitions(&self) -> Vec<u32> {
        self.read().partitions.clone()
    }

    /// A VM's table entry.
    pub fn vm_info(&self, vm: VmId) -> Option<VmInfo> {
        self.read().vms.get(&vm).copied()
    }

    /// Replaces the live-context table with what the device holds.
    pub fn replace_live(&self, live: BTreeMap<CtxId, LiveCtx>) {
        let mut hist = self.hist();
        let mut t = self.write();
        for (id, c) in &live {
            if t.live
                .get(id)
                .is_some_and(|old| old.created_cycle != c.created_cycle)
            {
                hist.forget_ctx(*id);
            }
        }
        let instances: BTreeMap<CtxId, (u64, bool)> = live
            .iter()
            .map(|(&id, c)| (id, (c.created_cycle, c.destroyed)))
            .collect();
        t.live = live;
        drop(t);
        drop(hist);
        if let Some(p) = self.pages.get() {
            p.live_changed(&instances);
        }
    }

    /// A live context.
    pub fn live(&self, ctx: CtxId) -> Option<LiveCtx> {
        self.read().live.get(&ctx).copied()
    }

    /// Records a context instance the device created (idempotent).
    pub fn ctx_created(&self, ctx: CtxId, c: LiveCtx) {
        let mut t = self.write();
        let new_instance = t
            .live
            .get(&ctx)
            .is_none_or(|old| old.created_cycle != c.created_cycle);
        if new_instance {
            t.live.insert(ctx, c);
            drop(t);
            self.hist().forget_ctx(ctx);
        }
    }

    /// Marks a live instance destroyed.
    pub fn ctx_destroyed(&self, ctx: CtxId, created_cycle: u64) {
        if let Some(c) = self
            .write()
            .live
            .get_mut(&ctx)
            .filter(|c| c.created_cycle == created_cycle)
        {
            c.destroyed = true;
        }
        if let Some(p) = self.pages.get() {
            p.ctx_destroyed(ctx, created_cycle);
        }
    }

    /// Records that an instance is persisted (and about to be, or already,
    /// released): it leaves the live table and enters the retired set,
    /// ordered for retention by `retired_cycle`, the cycle its file records.
    pub fn ctx_retired(&self, ctx: CtxId, created_cycle: u64, vm: VmId, retired_cycle: u64) {
        let entered = {
            let mut t = self.write();
            if t.live
                .get(&ctx)
                .is_some_and(|c| c.created_cycle == created_cycle)
            {
                t.live.remove(&ctx);
            }
            let entry = RetiredEntry { vm, retired_cycle };
            match t.retired.insert((ctx, created_cycle), entry) {
                None => {
                    t.retired_order.insert((retired_cycle, created_cycle, ctx));
                    true
                }
                Some(old) => {
                    if old.retired_cycle != retired_cycle {
                        t.retired_order
                            .remove(&(old.retired_cycle, created_cycle, ctx));
                        t.retired_order.insert((retired_cycle, created_cycle, ctx));
                    }
                    false
                }
            }
        };
        if entered {
            self.stats.retired.fetch_add(1, Ordering::Relaxed);
            // Stores a permit if the retention task is busy, so the next
            // pass sees this instance.
            self.retired_signal.notify_one();
        }
        if let Some(p) = self.pages.get() {
            // Its page shows the persisted final totals and goes, before
            // the block is released (and its slot or id reused); after the
            // tables say retired, so that no request makes a page anew.
            p.ctx_retired(ctx, created_cycle, || {
                self.retired_files.load(ctx, created_cycle).map(|r| r.slot)
            });
        }
    }

    /// Partition `p` committed a switch to `incoming` (`None`: not known;
    /// the device's fallback included): the pages it touched are refreshed.
    pub fn switch_committed(&self, p: u32, incoming: Option<CtxId>) {
        if let Some(pages) = self.pages.get() {
            pages.switched(p, incoming);
        }
    }

    /// The device was reset: the pages start a new generation.
    pub fn device_was_reset(&self) {
        if let Some(pages) = self.pages.get() {
            pages.device_reset();
        }
    }

    /// The tables were rebuilt from the device's registers: every page is
    /// read again (whatever the missed interrupts announced).
    pub fn resynced(&self) {
        if let Some(pages) = self.pages.get() {
            pages.refresh_all();
        }
    }

    /// Adds stream deltas to the history and feeds (and the pages'
    /// latest rate samples).
    pub fn record_samples(&self, samples: Vec<DeltaSample>) {
        if let Some(p) = self.pages.get() {
            p.samples(&samples);
        }
        let mut h = self.hist();
        for s in samples {
            h.push(s);
        }
    }

    /// Counts one host-driven handshake of `latency_ns`.
    pub fn record_handshake(&self, latency_ns: u64, response_cycles: u64) {
        self.stats.handshakes.fetch_add(1, Ordering::Relaxed);
        self.stats
            .response_max_cycles
            .fetch_max(response_cycles, Ordering::Relaxed);
        let mut l = self.latencies.lock().unwrap_or_else(|e| e.into_inner());
        // Bounded between snapshots: keep the first samples if nobody reads.
        if l.len() < 1 << 20 {
            l.push(latency_ns);
        }
    }

    /// Counts a fallback-completed switch the daemon was told about.
    /// Returns the fallbacks seen so far, this one included.
    pub fn record_fallback(&self) -> u64 {
        self.stats.fallbacks_seen.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Counts a drain of `records` from a ring that held `fill`.
    pub fn record_drain(&self, records: u64, fill: u64) {
        self.stats.drained.fetch_add(records, Ordering::Relaxed);
        self.stats.drain_lag.fetch_max(fill, Ordering::Relaxed);
    }

    fn slot_totals(slot: &BlockSlot, sealed: bool, expect: Option<(u16, u32)>) -> Option<Totals> {
        if sealed || slot.envelope.flags & envelope_flags::ENCRYPTED != 0 {
            return Some(Totals::Sealed(slot.as_bytes().to_vec()));
        }
        let block = plain_block(slot)?;
        if let Some((kind, id)) = expect {
            if block.kind != kind || block.id != id {
                return None;
            }
        }
        Some(Totals::Plain {
            counters: block.counters,
            commit_seq: block.commit_seq,
            cycle: block.last_commit_cycle,
        })
    }

    /// The persisted totals of a retired instance the table still holds.
    fn retired_totals(&self, ctx: CtxId, created_cycle: u64) -> Option<Totals> {
        if !self.read().retired.contains_key(&(ctx, created_cycle)) {
            return None;
        }
        let rec = self.retired_files.load(ctx, created_cycle)?;
        if rec.ctx != ctx || rec.created_cycle != created_cycle {
            return None;
        }
        Self::slot_totals(&rec.slot, rec.sealed(), None)
    }

    /// The instance after (`ctx`, `created_cycle`) with the same id, if any.
    fn next_instance(t: &Tables, ctx: CtxId, created_cycle: u64) -> Option<u64> {
        let retired = t
            .retired
            .range((ctx, created_cycle.saturating_add(1))..=(ctx, u64::MAX))
            .next()
            .map(|(&(_, c), _)| c);
        let live = t
            .live
            .get(&ctx)
            .map(|c| c.created_cycle)
            .filter(|&c| c > created_cycle);
        retired.into_iter().chain(live).min()
    }

    fn live_info(ctx: CtxId, c: &LiveCtx) -> CtxInfo {
        CtxInfo {
            ctx,
            vm: c.vm,
            created_cycle: c.created_cycle,
            state: if c.destroyed {
                CtxState::Destroyed
            } else {
                CtxState::Active
            },
        }
    }

    fn device_sum(&self, reg: u64) -> u64 {
        let parts = self.partitions();
        let offsets: Vec<u64> = parts.iter().map(|&p| regs::part(p, reg)).collect();
        match self.dev.read_many(&offsets) {
            Ok(values) => values.iter().sum(),
            Err(e) => {
                tracing::warn!(error = %e, "reading device health registers failed");
                0
            }
        }
    }
}

impl CounterView for Store {
    fn ranges(&self) -> Option<Arc<crate::ranges::RangeBook>> {
        Some(Arc::clone(&self.ranges))
    }

    fn sampling(&self) -> Option<Arc<Plane>> {
        Some(Arc::clone(&self.sampling))
    }

    fn ctx_program(&self, ctx: CtxId) -> Option<u32> {
        self.dev
            .read32(regs::ctx(ctx, regs::CTX_PROGRAM))
            .map_err(|e| tracing::warn!(ctx, error = %e, "reading CTX_PROGRAM failed"))
            .ok()
    }

    fn vm_keys(&self) -> Option<&dyn crate::view::VmKeys> {
        Some(self)
    }

    fn vms(&self) -> Vec<VmId> {
        self.read().vms.keys().copied().collect()
    }

    fn vm_partition(&self, vm: VmId) -> Option<u32> {
        self.read().vms.get(&vm).map(|v| v.partition)
    }

    fn contexts(&self, vm: VmId) -> Option<Vec<CtxInfo>> {
        let t = self.read();
        t.vms.get(&vm)?;
        let mut out: Vec<CtxInfo> = t
            .retired
            .iter()
            .filter(|(_, e)| e.vm == vm)
            .map(|(&(ctx, created_cycle), _)| CtxInfo {
                ctx,
                vm,
                created_cycle,
                state: CtxState::Retired,
            })
            .collect();
        out.extend(
            t.live
                .iter()
                .filter(|(_, c)| c.vm == vm)
                .map(|(&ctx, c)| Self::live_info(ctx, c)),
        );
        out.sort_by_key(|c| (c.ctx, c.created_cycle));
        Some(out)
    }

    fn ctx_vm(&self, ctx: CtxId) -> Option<VmId> {
        let t = self.read();
        if let Some(c) = t.live.get(&ctx) {
            return Some(c.vm);
        }
        t.retired
            .range((ctx, 0)..=(ctx, u64::MAX))
            .next_back()
            .map(|(_, e)| e.vm)
    }

    fn totals(&self, scope: Scope) -> Option<Totals> {
        match scope {
            Scope::System => {
                let slot = self
                    .dev
                    .block_slot(block_slot_offset(SYSTEM_BLOCK_SLOT))
                    .ok()?;
                Self::slot_totals(&slot, false, Some((block_kind::SYSTEM, 0)))
            }
            Scope::Vm(vm) => {
                let info = self.vm_info(vm)?;
                let slot = self.dev.block_slot(info.block_offset).ok()?;
                Self::slot_totals(&slot, info.confidential, Some((block_kind::VM, vm)))
            }
            Scope::Ctx(ctx) => {
                let latest = self.latest_instance(ctx)?;
                self.instance_totals(ctx, latest.created_cycle)
            }
        }
    }

    fn instance(&self, ctx: CtxId, created_cycle: u64) -> Option<CtxInfo> {
        let t = self.read();
        if let Some(c) = t
            .live
            .get(&ctx)
            .filter(|c| c.created_cycle == created_cycle)
        {
            return Some(Self::live_info(ctx, c));
        }
        t.retired.get(&(ctx, created_cycle)).map(|e| CtxInfo {
            ctx,
            vm: e.vm,
            created_cycle,
            state: CtxState::Retired,
        })
    }

    fn latest_instance(&self, ctx: CtxId) -> Option<CtxInfo> {
        let t = self.read();
        if let Some(c) = t.live.get(&ctx) {
            return Some(Self::live_info(ctx, c));
        }
        t.retired
            .range((ctx, 0)..=(ctx, u64::MAX))
            .next_back()
            .map(|(&(_, created_cycle), e)| CtxInfo {
                ctx,
                vm: e.vm,
                created_cycle,
                state: CtxState::Retired,
            })
    }

    fn instance_totals(&self, ctx: CtxId, created_cycle: u64) -> Option<Totals> {
        if let Some(c) = self.live(ctx).filter(|c| c.created_cycle == created_cycle) {
            let sealed = self.vm_info(c.vm).is_some_and(|v| v.confidential);
            let slot = self.dev.block_slot(c.block_offset).ok()?;
            // Still the same instance? (It may have been persisted and
            // released since the table was read; then its file answers.)
            if let Some(t) = Self::slot_totals(&slot, sealed, Some((block_kind::CONTEXT, ctx))) {
                if self
                    .live(ctx)
                    .is_some_and(|now| now.created_cycle == created_cycle)
                {
                    return Some(t);
                }
            }
        }
        self.retired_totals(ctx, created_cycle)
    }

    fn instance_recent(
        &self,
        ctx: CtxId,
        created_cycle: u64,
        max: usize,
    ) -> Option<Vec<DeltaSample>> {
        let info = self.instance(ctx, created_cycle)?;
        let next = Self::next_instance(&self.read(), ctx, created_cycle);
        // A commit belongs to the instance the id named at its end cycle:
        // from the instance's creation until the next instance's.
        let mine = |s: &DeltaSample| {
            s.ctx == ctx
                && s.vm == info.vm
                && s.end_cycle >= created_cycle
                && next.is_none_or(|n| s.end_cycle < n)
        };
        // The newest instance: the id's own ring holds its samples. An
        // older one: the id's ring was cleared for the newer instance; what
        // is left of it is in its VM's ring.
        let scope = match next {
            None => Scope::Ctx(ctx),
            Some(_) => Scope::Vm(info.vm),
        };
        // Unpack the ring's tail, widening until `max` samples match, the
        // ring is exhausted or INSTANCE_SCAN samples were looked at: a
        // request never unpacks a whole large history (history_samples may
        // be 65536) while the drain waits for the lock.
        let mut n = max.saturating_mul(4).clamp(1, INSTANCE_SCAN);
        loop {
            let pool = self.hist().recent(scope, n);
            let looked = pool.len();
            let mut out: Vec<DeltaSample> = pool.into_iter().filter(mine).collect();
            if out.len() >= max || looked < n || n >= INSTANCE_SCAN {
                out.drain(..out.len().saturating_sub(max));
                return Some(out);
            }
            n = n.saturating_mul(4).min(INSTANCE_SCAN);
        }
    }

    fn recent(&self, scope: Scope, max: usize) -> Option<Vec<crate::view::DeltaSample>> {
        self.exists(scope).then(|| self.hist().recent(scope, max))
    }

    fn subscribe(
        &self,
        scope: Scope,
    ) -> Option<tokio::sync::broadcast::Receiver<Arc<DeltaSample>>> {
        self.exists(scope).then(|| self.hist().subscribe(scope))
    }

    fn clock_khz(&self) -> u32 {
        self.identity.clock_khz
    }
}

impl Store {
    fn exists(&self, scope: Scope) -> bool {
        match scope {
            Scope::System => true,
            Scope::Vm(vm) => self.vm_info(vm).is_some(),
            Scope::Ctx(ctx) => self.ctx_vm(ctx).is_some(),
        }
    }
}

impl PageSource for Store {
    fn vm_source(&self, vm: VmId) -> Option<Source> {
        self.vm_info(vm).map(|i| i.page_source(vm))
    }

    fn live_ctx(&self, ctx: CtxId) -> Option<(u64, Source, bool)> {
        let t = self.read();
        let c = t.live.get(&ctx)?;
        let vm = t.vms.get(&c.vm)?;
        let source = Source {
            block_offset: c.block_offset,
            ..vm.page_source(c.vm)
        };
        Some((c.created_cycle, source, c.destroyed))
    }

    fn retired_slot(&self, ctx: CtxId, created_cycle: u64) -> Option<BlockSlot> {
        self.retired_files
            .load(ctx, created_cycle)
            .filter(|r| r.ctx == ctx && r.created_cycle == created_cycle)
            .map(|r| r.slot)
    }
}

impl HealthSource for Store {
    fn snapshot(&self) -> HealthSnapshot {
        let latencies =
            std::mem::take(&mut *self.latencies.lock().unwrap_or_else(|e| e.into_inner()));
        let (active, retained) = {
            let t = self.read();
            (
                t.live.values().filter(|c| !c.destroyed).count() as u64,
                t.retired.len() as u64,
            )
        };
        let (requests, errors) = self.tenant_stats.get().map_or((0, 0), |s| {
            (
                s.requests.load(Ordering::Relaxed),
                s.errors.load(Ordering::Relaxed),
            )
        });
        HealthSnapshot {
            device: self.identity,
            uptime_s: self.started.elapsed().as_secs_f64(),
            handshakes: self.stats.handshakes.load(Ordering::Relaxed),
            handshake_latency_ns: latencies,
            fallbacks: self.device_sum(regs::PART_FALLBACKS),
            lost_records: self.device_sum(regs::PART_STREAM_LOST),
            drained_records: self.stats.drained.load(Ordering::Relaxed),
            drain_lag_records: self.stats.drain_lag.swap(0, Ordering::Relaxed),
            handshake_response_max_ns: cycles_to_ns(
                self.stats.response_max_cycles.swap(0, Ordering::Relaxed),
                self.identity.clock_khz,
            ),
            contexts_active: active,
            contexts_retired: self.stats.retired.load(Ordering::Relaxed),
            contexts_pruned: self.stats.pruned.load(Ordering::Relaxed),
            contexts_retained: retained,
            tenant_requests: requests,
            tenant_errors: errors,
            pages: self.pages.get().map(|p| p.stats()).unwrap_or_default(),
            ranges: self.ranges.stats().snapshot(),
        }
    }
}

/// Device cycles at `khz` as nanoseconds (0 for an unknown clock).
fn cycles_to_ns(cycles: u64, khz: u32) -> u64 {
    if khz == 0 {
        return 0;
    }
    u64::try_from(u128::from(cycles) * 1_000_000 / u128::from(khz)).unwrap_or(u64::MAX)
}
