//! The store's writers: context lifecycle events from the device (created,
//! destroyed, retired, switched), resets and resyncs, and the daemon's own
//! counters (deltas, handshakes, fallbacks, drains).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use super::{LiveCtx, RetiredEntry, Store};
use crate::view::{CtxId, DeltaSample, VmId};

impl Store {
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
        if let Some(e) = &self.events {
            e.live_changed(&instances);
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
        if let Some(e) = &self.events {
            e.ctx_destroyed(ctx, created_cycle);
        }
    }

    /// Records that an instance is persisted (and about to be, or already,
    /// released): it leaves the live table and enters the retired set,
    /// ordered for retention by `retired_cycle`, the cycle its file records,
    /// under `tenancy`, the VM's tenant mapping its file records.
    pub fn ctx_retired(
        &self,
        ctx: CtxId,
        created_cycle: u64,
        vm: VmId,
        retired_cycle: u64,
        tenancy: u32,
    ) {
        let entered = {
            let mut t = self.write();
            if t.live
                .get(&ctx)
                .is_some_and(|c| c.created_cycle == created_cycle)
            {
                t.live.remove(&ctx);
            }
            let entry = RetiredEntry {
                vm,
                retired_cycle,
                tenancy,
            };
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
            // A ring during a pass runs another pass after it, which sees
            // this instance.
            self.retired_bell.ring();
        }
        if let Some(e) = &self.events {
            // Its page shows the persisted final totals and goes, before
            // the block is released (and its slot or id reused); after the
            // tables say retired, so that no request makes a page anew.
            e.ctx_retired(ctx, created_cycle, &|| {
                self.retired_files.load(ctx, created_cycle).map(|r| r.slot)
            });
        }
    }

    /// Partition `p` committed a switch to `incoming` (`None`: not known;
    /// the device's fallback included): the follower is told (the pages it
    /// touched are refreshed).
    pub fn switch_committed(&self, p: u32, incoming: Option<CtxId>) {
        if let Some(e) = &self.events {
            e.switched(p, incoming);
        }
    }

    /// The device was reset: the pages start a new generation.
    pub fn device_was_reset(&self) {
        if let Some(e) = &self.events {
            e.device_reset();
        }
    }

    /// The tables were rebuilt from the device's registers: every page is
    /// read again (whatever the missed interrupts announced).
    pub fn resynced(&self) {
        if let Some(e) = &self.events {
            e.resynced();
        }
    }

    /// Adds stream deltas to the history and feeds (and the pages'
    /// latest rate samples).
    pub fn record_samples(&self, samples: &[DeltaSample]) {
        if let Some(e) = &self.events {
            e.samples(samples);
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

    /// The drains' totals so far: records read from the commit mirror's
    /// ring area, and mirror reads that fell back to the window.
    pub fn record_mirror_reads(&self, mirrored: u64, fallbacks: u64) {
        self.stats.mirrored.store(mirrored, Ordering::Relaxed);
        self.stats
            .mirror_fallbacks
            .store(fallbacks, Ordering::Relaxed);
    }
}
