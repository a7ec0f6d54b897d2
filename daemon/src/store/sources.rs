//! The store as a source for the tenant pages ([`PageSource`]) and of its
//! own figures of the health report ([`HealthSource`]; the daemon's whole
//! report is `health::DaemonHealth`).

use std::sync::atomic::Ordering;

use gpupm_uapi::layout::BlockSlot;
use gpupm_uapi::regs;

use super::Store;
use crate::view::{BlockSource, CtxId, HealthSnapshot, HealthSource, PageSource, VmId};

impl Store {
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

impl Store {
    /// `CLOCK_LAG` (0 on a device older than ABI 1.11, which has none).
    fn clock_lag(&self) -> u64 {
        self.dev.read64(regs::CLOCK_LAG).unwrap_or_else(|e| {
            tracing::debug!(error = %e, "reading CLOCK_LAG failed");
            0
        })
    }
}

impl PageSource for Store {
    fn vm_source(&self, vm: VmId) -> Option<BlockSource> {
        self.vm_info(vm).map(|i| i.page_source(vm))
    }

    fn live_ctx(&self, ctx: CtxId) -> Option<(u64, BlockSource, bool)> {
        let t = self.read();
        let c = t.live.get(&ctx)?;
        let vm = t.vms.get(&c.vm)?;
        let source = BlockSource {
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
        HealthSnapshot {
            device: self.identity,
            uptime_s: self.started.elapsed().as_secs_f64(),
            handshakes: self.stats.handshakes.load(Ordering::Relaxed),
            handshake_latency_ns: latencies,
            fallbacks: self.device_sum(regs::PART_FALLBACKS),
            lost_records: self.device_sum(regs::PART_STREAM_LOST),
            drained_records: self.stats.drained.load(Ordering::Relaxed),
            mirrored_records: self.stats.mirrored.load(Ordering::Relaxed),
            mirror_fallbacks: self.stats.mirror_fallbacks.load(Ordering::Relaxed),
            drain_lag_records: self.stats.drain_lag.swap(0, Ordering::Relaxed),
            handshake_response_max_ns: cycles_to_ns(
                self.stats.response_max_cycles.swap(0, Ordering::Relaxed),
                self.identity.clock_khz,
            ),
            clock_lag_cycles: self.clock_lag(),
            contexts_active: active,
            contexts_retired: self.stats.retired.load(Ordering::Relaxed),
            contexts_pruned: self.stats.pruned.load(Ordering::Relaxed),
            contexts_retained: retained,
            // The other parts' figures: `health::DaemonHealth` adds them.
            tenant_requests: 0,
            tenant_errors: 0,
            pages: Default::default(),
            ri: Default::default(),
            ranges: Default::default(),
            bounds: Default::default(),
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
