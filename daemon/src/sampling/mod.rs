//! The sampling plane: tenants' sampling sessions, the partition samplers
//! programmed for their union, and the routing of drained records.
//!
//! A session is opened by the tenant node ([`Plane::open`]) with a
//! [`Demand`] on one partition and a [`SampleSink`] that queues its
//! records; the returned [`Ticket`] withdraws the demand when dropped (the
//! handle closed). Opening and closing reprogram the partition's samplers
//! for the union of the remaining demands ([`demand::combine`]) before
//! they return, through a [`SamplerDevice`].
//!
//! The engine's worker drains the device buffers ([`drain`]) and hands
//! each batch to [`Plane::route`], which gives every record to the
//! sessions whose scope it belongs to, at each session's own rate
//! ([`demand::Thinning`]). Records of a confidential VM are sealed: the
//! daemon sees only the envelope's VM, so they go to every session on that
//! VM, unthinned, and the tenant filters after opening them.
//!
//! A session receives only records written after it opened: the open cuts
//! the partition's buffers ([`SamplerDevice::cut`]), draining what they
//! hold for the sessions already open, and the session takes batches of
//! the cut's epoch or later. Otherwise a session would be handed what the
//! buffers held from before — records of a previous session that closed
//! unread, or written for others before the open — which, sealed, not
//! even the daemon can tell apart, and which skews a tenant's estimate
//! (a span of branches or cycles longer than the session's).
//!
//! Lost records are attributed exactly: the device counts each record a
//! full buffer loses for the context that was running (and its VM), and
//! the daemon reads those counts for the scope of every open session
//! ([`SamplerDevice::watch_lost`], `SAMP_LOST_SELECT`). A session is told
//! the records of its own scope the device lost — not the partition's —
//! so over sessions whose scopes do not overlap the losses sum to at
//! most `BUF_LOST`, and to exactly `BUF_LOST` when they cover every
//! context that ran.
//!
//! Locks: the plane's table lock is never held while a sink runs, so a
//! sink may take its own locks (the tenant node's handle table) and the
//! tenant node may drop a [`Ticket`] once it released them.

pub mod demand;
pub mod drain;
pub mod records;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use gpupm_client::DevError;

use self::demand::Thinning;
pub use self::demand::{Demand, Settings};
use self::records::{Batch, Parsed};
use gpupm_client::tenant::{CtxId, VmId};

/// Programs a partition's samplers (the device, or a test double).
pub trait SamplerDevice: Send + Sync + std::fmt::Debug {
    /// Makes partition `p`'s samplers run `settings` (both off when
    /// [`Settings::is_off`]), resizing buffers as needed.
    fn program(&self, p: u32, settings: &Settings) -> Result<(), DevError>;

    /// Starts (`on`) or stops counting the records partition `p`'s
    /// buffers lose for `scope`: drained batches then carry them in
    /// [`Batch::lost_by`]. Nested: as many stops as starts. A device that
    /// reports no losses per scope (a test double) needs nothing here.
    fn watch_lost(&self, _p: u32, _scope: LostScope, _on: bool) -> Result<(), DevError> {
        Ok(())
    }

    /// Drains partition `p`'s buffers (their records routed with the next
    /// drain, to the sessions open now) and answers the drain epoch from
    /// which every batch holds only records written after this call
    /// ([`Batch::epoch`]). A device whose batches are all 0 (a test
    /// double) answers 0.
    fn cut(&self, _p: u32) -> Result<u64, DevError> {
        Ok(0)
    }
}

/// Whose lost records a count is: a session's scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LostScope {
    /// One context.
    Ctx(u32),
    /// Every context of a VM.
    Vm(u32),
}

impl Target {
    /// The scope whose lost records the session is told.
    pub fn lost_scope(&self) -> LostScope {
        match self.ctx {
            Some(c) => LostScope::Ctx(c),
            None => LostScope::Vm(self.vm),
        }
    }
}

/// One record handed to a sink: its kind, `tenant::sampling::sample_flags`
/// and the bytes that follow the header.
#[derive(Clone, Copy, Debug)]
pub struct Outgoing<'a> {
    /// One `sample_kind` bit.
    pub kind: u16,
    /// `sample_flags` bits.
    pub flags: u16,
    /// The record (plaintext) or the whole slot (sealed).
    pub payload: &'a [u8],
}

/// Where a session's records go.
pub trait SampleSink: Send + Sync + std::fmt::Debug {
    /// Queues `records`, after counting `lost` records of `kind` of the
    /// session's scope the device lost; false once the session is gone.
    fn deliver(&self, kind: u16, lost: u64, records: &[Outgoing<'_>]) -> bool;
}

/// Where a session samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    /// Partition slot.
    pub partition: u32,
    /// The VM.
    pub vm: VmId,
    /// The context, for a context session.
    pub ctx: Option<CtxId>,
}

struct Entry {
    target: Target,
    /// The first drain epoch whose batches the session receives.
    from_epoch: u64,
    demand: Demand,
    thinning: Thinning,
    sink: Arc<dyn SampleSink>,
}

#[derive(Default)]
struct Table {
    sessions: BTreeMap<u64, Entry>,
    programmed: BTreeMap<u32, Settings>,
}

/// Counters of the plane, for health and tests.
#[derive(Debug, Default)]
pub struct PlaneStats {
    /// Records drained from device buffers.
    pub drained: AtomicU64,
    /// Records the device lost to full buffers (from its lost counters).
    pub device_lost: AtomicU64,
    /// Records handed to sessions.
    pub delivered: AtomicU64,
    /// Sessions open.
    pub sessions: AtomicU64,
}

/// The sampling plane.
pub struct Plane {
    device: Arc<dyn SamplerDevice>,
    clock_khz: u32,
    table: Mutex<Table>,
    next_id: AtomicU64,
    stats: PlaneStats,
}

impl std::fmt::Debug for Plane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plane").field("stats", &self.stats).finish()
    }
}

/// An open session; dropping it withdraws its demand.
#[derive(Debug)]
pub struct Ticket {
    plane: Weak<Plane>,
    id: u64,
    settings: Settings,
}

impl Ticket {
    /// Session id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// What the partition's samplers ran right after the session opened.
    pub fn settings(&self) -> Settings {
        self.settings
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Some(plane) = self.plane.upgrade() {
            plane.close(self.id);
        }
    }
}

impl Plane {
    /// A plane programming `device`, whose nominal clock is `clock_khz`.
    pub fn new(device: Arc<dyn SamplerDevice>, clock_khz: u32) -> Arc<Plane> {
        Arc::new(Plane {
            device,
            clock_khz,
            table: Mutex::new(Table::default()),
            next_id: AtomicU64::new(1),
            stats: PlaneStats::default(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Nominal device clock in kHz.
    pub fn clock_khz(&self) -> u32 {
        self.clock_khz
    }

    /// Counters.
    pub fn stats(&self) -> &PlaneStats {
        &self.stats
    }

    /// What partition `p`'s samplers run (off when never programmed).
    pub fn settings(&self, p: u32) -> Settings {
        self.lock().programmed.get(&p).copied().unwrap_or_default()
    }

    /// Opens a session: programs the samplers for the union with the
    /// sessions already open on the partition. `seed` seeds the session's
    /// own dither (the id its tenant is shown, so that what the session
    /// receives does not depend on how many sessions others opened). On a
    /// device error nothing changes.
    pub fn open(
        self: &Arc<Self>,
        target: Target,
        demand: Demand,
        seed: u64,
        sink: Arc<dyn SampleSink>,
    ) -> Result<Ticket, DevError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut t = self.lock();
        let p = target.partition;
        let settings = demand::combine(
            t.sessions
                .values()
                .filter(|e| e.target.partition == p)
                .map(|e| &e.demand)
                .chain([&demand]),
        );
        self.device.watch_lost(p, target.lost_scope(), true)?;
        // Cut before programming: whatever the samplers write once they
        // run for this session is after the cut.
        let from_epoch = match self.device.cut(p) {
            Ok(epoch) => epoch,
            Err(e) => {
                self.unwatch(p, target.lost_scope());
                return Err(e);
            }
        };
        if t.programmed.get(&p).copied().unwrap_or_default() != settings {
            if let Err(e) = self.device.program(p, &settings) {
                self.unwatch(p, target.lost_scope());
                return Err(e);
            }
            t.programmed.insert(p, settings);
        }
        t.sessions.insert(
            id,
            Entry {
                target,
                from_epoch,
                demand,
                thinning: Thinning::new(demand, seed),
                sink,
            },
        );
        self.stats.sessions.fetch_add(1, Ordering::Relaxed);
        Ok(Ticket {
            plane: Arc::downgrade(self),
            id,
            settings,
        })
    }

    fn close(&self, id: u64) {
        let mut t = self.lock();
        let Some(e) = t.sessions.remove(&id) else {
            return;
        };
        self.stats.sessions.fetch_sub(1, Ordering::Relaxed);
        let p = e.target.partition;
        self.unwatch(p, e.target.lost_scope());
        self.settle(&mut t, p);
    }

    /// Programs partition `p` for the sessions open on it, if it runs
    /// anything else.
    fn settle(&self, t: &mut Table, p: u32) {
        let settings = demand::combine(
            t.sessions
                .values()
                .filter(|e| e.target.partition == p)
                .map(|e| &e.demand),
        );
        if t.programmed.get(&p).copied().unwrap_or_default() == settings {
            return;
        }
        match self.device.program(p, &settings) {
            Ok(()) => {
                t.programmed.insert(p, settings);
            }
            // The next open or close on the partition programs it again;
            // until then the device samples more than anyone asked for,
            // which no session receives.
            Err(e) => tracing::warn!(
                partition = p,
                error = gpupm_fusemount::logging::one_line(e),
                "withdrawing a sampling demand failed"
            ),
        }
    }

    fn unwatch(&self, p: u32, scope: LostScope) {
        if let Err(e) = self.device.watch_lost(p, scope, false) {
            tracing::warn!(
                partition = p,
                error = gpupm_fusemount::logging::one_line(e),
                "no longer counting a closed session's lost records failed"
            );
        }
    }

    /// Reprograms every partition that has sessions (after a device reset).
    pub fn reprogram(&self) -> Result<(), DevError> {
        let t = self.lock();
        for (&p, s) in &t.programmed {
            self.device.program(p, s)?;
        }
        Ok(())
    }

    /// Gives the records of `batch` to the sessions they belong to.
    pub fn route(&self, batch: &Batch) {
        let records: Vec<Parsed> = batch.records().collect();
        self.stats
            .drained
            .fetch_add(records.len() as u64, Ordering::Relaxed);
        self.stats
            .device_lost
            .fetch_add(batch.lost, Ordering::Relaxed);
        let mut deliveries: Vec<(Arc<dyn SampleSink>, u64, Vec<Outgoing<'_>>)> = Vec::new();
        {
            let mut t = self.lock();
            let device = t
                .programmed
                .get(&batch.partition)
                .copied()
                .unwrap_or_default();
            for e in t.sessions.values_mut() {
                if e.target.partition != batch.partition
                    || e.demand.kinds & batch.kind == 0
                    || batch.epoch < e.from_epoch
                {
                    continue;
                }
                let picks: Vec<Outgoing<'_>> = records
                    .iter()
                    .filter(|r| accepts(e, r, batch.kind, &device))
                    .map(|r| r.outgoing(batch.kind))
                    .collect();
                let lost = batch.lost_of(e.target.lost_scope());
                if !picks.is_empty() || lost > 0 {
                    deliveries.push((Arc::clone(&e.sink), lost, picks));
                }
            }
        }
        for (sink, lost, picks) in deliveries {
            self.stats
                .delivered
                .fetch_add(picks.len() as u64, Ordering::Relaxed);
            sink.deliver(batch.kind, lost, &picks);
        }
    }
}

/// Whether session `e` takes record `r` (and advances its thinning).
fn accepts(e: &mut Entry, r: &Parsed, kind: u16, device: &Settings) -> bool {
    if r.vm != e.target.vm {
        return false;
    }
    if r.sealed {
        return true;
    }
    if e.target.ctx.is_some_and(|c| c != r.ctx) {
        return false;
    }
    if kind == gpupm_uapi::tenant::sampling::sample_kind::CYCLE {
        e.thinning.take_cycle(r.ctx, r.ctx_cycle, device)
    } else {
        e.thinning.take_branch(device.branch_every.unwrap_or(1))
    }
}

#[cfg(test)]
mod tests;
