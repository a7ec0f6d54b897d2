//! What the daemon knows: the VM and context tables, the retired set, the
//! recent deltas and the daemon's own counters. Implements
//! [`CounterView`](crate::view::CounterView) and
//! [`HealthSource`](crate::view::HealthSource).
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
//!
//! This module holds the tables and their locks; `lifecycle` writes them
//! (device events), `reads` answers the counter view, `sources` serves the
//! tenant pages and the health report; `events` is what it tells its
//! follower.

pub mod events;
pub mod history;
pub mod keys;
mod lifecycle;
mod reads;
pub mod retention;
pub mod retired;
mod sources;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Instant;

use gpupm_client::DevNode;

use self::events::TableEvents;
use self::history::History;
pub use self::retention::Pruned;
use self::retention::{AgeKey, Retention};
use self::retired::RetiredStore;
use crate::view::{BlockSource, CtxId, DeviceIdentity, VmId};
use crate::worker::Doorbell;

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
    pub fn page_source(&self, vm: VmId) -> BlockSource {
        BlockSource {
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
    /// The VM's tenant mapping then (`retired::tenancy_of`; 0 unknown).
    tenancy: u32,
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
    /// Of `drained`, read from the commit mirror's ring area (a total the
    /// drains keep, stored here as they go).
    mirrored: AtomicU64,
    mirror_fallbacks: AtomicU64,
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
    /// Rung when an instance enters the retired set (it wakes the
    /// retention worker).
    retired_bell: Arc<Doorbell>,
    /// One pruning pass at a time.
    pruning: Mutex<()>,
    prune_log: Mutex<retention::PruneLog>,
    tables: RwLock<Tables>,
    /// Each VM's tenant mapping now (`retired::tenancy_of`).
    tenancies: RwLock<BTreeMap<VmId, u32>>,
    history: Mutex<History>,
    stats: Stats,
    latencies: Mutex<Vec<u64>>,
    /// Told of every change of the tables (the tenant pages, when offered).
    events: Option<Arc<dyn TableEvents>>,
    /// Tenants' confidential key exchanges, rate limited per VM.
    exchanges: keys::ExchangeBudget,
}

impl Store {
    /// A store over `dev`, keeping `history` samples per scope and the
    /// retired set in `retired_files`, bounded by `retention`, telling
    /// `events` of every change of its tables.
    pub fn new(
        dev: Arc<DevNode>,
        identity: DeviceIdentity,
        retired_files: RetiredStore,
        retention: Retention,
        history: usize,
        events: Option<Arc<dyn TableEvents>>,
    ) -> Store {
        Store {
            dev,
            identity,
            started: Instant::now(),
            retired_files,
            retention,
            retired_bell: Doorbell::new(),
            pruning: Mutex::new(()),
            prune_log: Mutex::new(retention::PruneLog::default()),
            tables: RwLock::new(Tables::default()),
            tenancies: RwLock::new(BTreeMap::new()),
            history: Mutex::new(History::new(history)),
            stats: Stats::default(),
            latencies: Mutex::new(Vec::new()),
            events,
            exchanges: keys::ExchangeBudget::default(),
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

    /// The persisted retired set.
    pub fn retired_files(&self) -> &RetiredStore {
        &self.retired_files
    }

    /// Device identity.
    pub fn identity(&self) -> DeviceIdentity {
        self.identity
    }

    /// The tenant mapping in force: retired instances persisted under
    /// another mapping of their VM are no longer its tenants' history.
    pub fn set_tenancy(&self, policy: &gpupm_client::config::TenantPolicy) {
        let vms: BTreeSet<VmId> = policy.tenants.iter().map(|t| t.vm).collect();
        let tags = vms
            .into_iter()
            .map(|vm| (vm, retired::tenancy_of(policy, vm)))
            .collect();
        *self.tenancies.write().unwrap_or_else(|e| e.into_inner()) = tags;
    }

    /// VM `vm`'s tenant mapping now (that of no tenant when none is set).
    pub fn tenancy(&self, vm: VmId) -> u32 {
        self.tenancies
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&vm)
            .copied()
            .unwrap_or_else(|| {
                retired::tenancy_of(&gpupm_client::config::TenantPolicy::default(), vm)
            })
    }

    /// Replaces the VM table and the configured partition slots.
    pub fn set_topology(&self, vms: BTreeMap<VmId, VmInfo>, partitions: Vec<u32>) {
        let sources: BTreeMap<VmId, BlockSource> =
            vms.iter().map(|(&vm, i)| (vm, i.page_source(vm))).collect();
        {
            let mut t = self.write();
            t.vms = vms;
            t.partitions = partitions;
        }
        if let Some(e) = &self.events {
            e.vms_changed(&sources);
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
}
