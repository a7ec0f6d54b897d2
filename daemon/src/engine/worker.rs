//! Work the interrupt thread hands off so that handshakes never wait for
//! it: ring drains, the context table, retiring destroyed contexts (read
//! the final block, persist, release), reprogramming after a device reset,
//! and resynchronising from registers.
//!
//! Every handler is idempotent and reads the device's current state rather
//! than trusting the interrupt's arguments, so a record seen twice, late,
//! or after a restart does no harm.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use gpupm_client::ops::{read32, read64, reg32};
use gpupm_client::DevNode;
use gpupm_uapi::layout::envelope_flags;
use gpupm_uapi::regs::{self as r, ctx_cmd, ctx_state, vm_flags, MAX_CONTEXTS, MAX_VMS};
use zerocopy::FromZeros;

use super::drain::{self, Rings};
use super::program;
use super::EngineError;
use crate::config::Programming;
use crate::planes::Planes;
use crate::store::retired::{retired_flags, RetiredFile, RETIRED_MAGIC, RETIRED_VERSION};
use crate::store::{LiveCtx, Store, VmInfo};
use crate::view::CtxId;

/// One piece of deferred work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Work {
    /// Drain partition slot `p`'s ring.
    Drain(u32),
    /// Drain every ring that holds records (the periodic backstop for
    /// records below the watermark, which raise no interrupt).
    DrainNonEmpty,
    /// A context was created.
    Created(CtxId),
    /// A context was destroyed.
    Destroyed(CtxId),
    /// The device was reset: reprogram and resynchronise.
    Reset,
    /// Interrupt records were missed: resynchronise.
    Resync,
}

/// Longest pending drains wait behind retirements in one batch.
const DRAIN_LATENCY: Duration = Duration::from_millis(10);

/// Drains a batch asked for and has not run yet.
#[derive(Debug, Default)]
struct PendingDrains {
    /// Rings with a watermark or overflow interrupt.
    rings: BTreeSet<u32>,
    /// Every ring that holds records (the periodic drain).
    sweep: bool,
}

impl PendingDrains {
    fn is_empty(&self) -> bool {
        self.rings.is_empty() && !self.sweep
    }
}

/// State of the worker.
#[derive(Debug)]
pub struct Worker<'a> {
    /// The device.
    pub dev: &'a DevNode,
    /// The store.
    pub store: &'a Store,
    /// The planes (reprogrammed after a device reset).
    pub planes: &'a Planes,
    /// What to program after a reset.
    pub program: &'a Programming,
    /// Ring drain state.
    pub rings: Rings,
}

impl Worker<'_> {
    /// Runs a batch of work items, coalescing drains. Drains run at the
    /// end of the batch, and also between retirements once the pending
    /// ones have waited [`DRAIN_LATENCY`]: a retirement persists a file
    /// (fsyncs), and a burst of them under heavy churn must not hold the
    /// rings back until they overflow.
    pub fn run(&mut self, items: &[Work]) -> Result<(), EngineError> {
        let mut pending = PendingDrains::default();
        let mut since = Instant::now();
        for &w in items {
            match w {
                Work::Drain(p) => {
                    pending.rings.insert(p);
                }
                Work::DrainNonEmpty => pending.sweep = true,
                Work::Created(ctx) => self.created(ctx)?,
                Work::Destroyed(ctx) => {
                    if !pending.is_empty() && since.elapsed() >= DRAIN_LATENCY {
                        self.drain(&mut pending)?;
                        since = Instant::now();
                    }
                    self.retire(ctx)?;
                }
                Work::Reset => {
                    let id = self.store.identity();
                    program::program(
                        self.dev,
                        self.program,
                        id.clock_khz,
                        &self.store.partitions(),
                    )?;
                    self.rings.reset();
                    self.planes.sampling.reprogram()?;
                    self.store.device_was_reset();
                    tracing::info!("device reset: programming re-applied");
                    self.resync()?;
                }
                Work::Resync => self.resync()?,
            }
        }
        self.drain(&mut pending)
    }

    /// Runs and clears the pending drains: the rings asked for and, for a
    /// sweep, every other ring, together ([`drain::drain_rings`]).
    fn drain(&mut self, pending: &mut PendingDrains) -> Result<(), EngineError> {
        let mut parts: Vec<u32> = pending.rings.iter().copied().collect();
        if pending.sweep {
            parts.extend(
                self.store
                    .partitions()
                    .into_iter()
                    .filter(|p| !pending.rings.contains(p)),
            );
        }
        if !parts.is_empty() {
            drain::drain_rings(self.dev, self.store, &mut self.rings, &parts)?;
        }
        *pending = PendingDrains::default();
        Ok(())
    }

    fn created(&mut self, ctx: CtxId) -> Result<(), EngineError> {
        let Some((state, live)) = self.read_ctx(ctx)? else {
            return Ok(());
        };
        self.store.ctx_created(ctx, live);
        if state == ctx_state::DESTROYED {
            self.retire(ctx)?;
        }
        Ok(())
    }

    /// Reads a context's entry: `None` when free.
    fn read_ctx(&self, ctx: CtxId) -> Result<Option<(u32, LiveCtx)>, EngineError> {
        if !(1..MAX_CONTEXTS).contains(&ctx) {
            return Ok(None);
        }
        let mut ops = [
            read32(r::ctx(ctx, r::CTX_STATE)),
            read32(r::ctx(ctx, r::CTX_VM)),
            read64(r::ctx(ctx, r::CTX_CREATED_CYCLE)),
            read64(r::ctx(ctx, r::CTX_BLOCK)),
        ];
        self.dev.batch(&mut ops)?;
        let state = reg32(ops[0].value);
        if state == ctx_state::FREE {
            return Ok(None);
        }
        let live = LiveCtx {
            vm: reg32(ops[1].value),
            created_cycle: ops[2].value,
            block_offset: ops[3].value,
            destroyed: state == ctx_state::DESTROYED,
        };
        Ok(Some((state, live)))
    }

    /// Retires a destroyed context: final block → persisted → released.
    /// A context already persisted (a crash before its release) is only
    /// released; one no longer destroyed is left alone.
    pub fn retire(&mut self, ctx: CtxId) -> Result<(), EngineError> {
        let Some((state, c)) = self.read_ctx(ctx)? else {
            return Ok(());
        };
        if state != ctx_state::DESTROYED {
            return Ok(());
        }
        self.store.ctx_destroyed(ctx, c.created_cycle);
        let files = self.store.retired_files();
        // Persisted before a crash: its file holds the retirement cycle; a
        // file that cannot be read ages from the creation instead, which
        // prunes it no later than its real age would.
        let (retired_cycle, tenancy) = if files.contains(ctx, c.created_cycle) {
            files
                .load(ctx, c.created_cycle)
                .map_or((c.created_cycle, 0), |r| (r.retired_cycle, r.tenancy))
        } else {
            let slot = self.dev.block_slot(c.block_offset)?;
            let mut rec = RetiredFile::new_zeroed();
            rec.magic = RETIRED_MAGIC;
            rec.version = RETIRED_VERSION;
            rec.ctx = ctx;
            rec.vm = c.vm;
            rec.created_cycle = c.created_cycle;
            rec.retired_cycle = self.dev.read64(r::CYCLE)?;
            rec.tenancy = self.store.tenancy(c.vm);
            if slot.envelope.flags & envelope_flags::ENCRYPTED != 0 {
                rec.flags |= retired_flags::SEALED;
            }
            rec.slot = slot;
            files.persist(&rec)?;
            (rec.retired_cycle, rec.tenancy)
        };
        self.store
            .ctx_retired(ctx, c.created_cycle, c.vm, retired_cycle, tenancy);
        if let Err(e) = self.dev.write32(r::ctx(ctx, r::CTX_CMD), ctx_cmd::RELEASE) {
            // Refused only if it is no longer a destroyed context.
            if self.read_ctx(ctx)?.is_some_and(|(s, now)| {
                s == ctx_state::DESTROYED && now.created_cycle == c.created_cycle
            }) {
                return Err(e.into());
            }
        }
        tracing::debug!(
            ctx,
            vm = c.vm,
            created_cycle = c.created_cycle,
            "context retired"
        );
        Ok(())
    }

    /// Rebuilds the VM and context tables from the device, retires every
    /// destroyed context and drains every ring.
    pub fn resync(&mut self) -> Result<(), EngineError> {
        let partitions = program::configured_partitions(self.dev)?;
        let vms = self.read_vms()?;
        self.store.set_topology(vms, partitions.clone());

        let states = self.dev.read_many(
            &(1..MAX_CONTEXTS)
                .map(|c| r::ctx(c, r::CTX_STATE))
                .collect::<Vec<_>>(),
        )?;
        let used: Vec<CtxId> = (1..MAX_CONTEXTS)
            .zip(states)
            .filter(|&(_, s)| s != 0)
            .map(|(c, _)| c)
            .collect();
        let detail_offsets: Vec<u64> = used
            .iter()
            .flat_map(|&c| {
                [
                    r::ctx(c, r::CTX_STATE),
                    r::ctx(c, r::CTX_VM),
                    r::ctx(c, r::CTX_CREATED_CYCLE),
                    r::ctx(c, r::CTX_BLOCK),
                ]
            })
            .collect();
        let detail = self.dev.read_many(&detail_offsets)?;
        let mut live = BTreeMap::new();
        let mut destroyed = Vec::new();
        for (&ctx, d) in used.iter().zip(detail.chunks_exact(4)) {
            let state = reg32(d[0]);
            if state == ctx_state::FREE {
                continue;
            }
            if state == ctx_state::DESTROYED {
                destroyed.push(ctx);
            }
            live.insert(
                ctx,
                LiveCtx {
                    vm: reg32(d[1]),
                    created_cycle: d[2],
                    block_offset: d[3],
                    destroyed: state == ctx_state::DESTROYED,
                },
            );
        }
        let (n_live, n_destroyed) = (live.len(), destroyed.len());
        self.store.replace_live(live);
        for ctx in destroyed {
            self.retire(ctx)?;
        }
        for p in partitions {
            drain::drain(self.dev, self.store, &mut self.rings, p)?;
        }
        self.store.resynced();
        tracing::info!(
            contexts = n_live,
            retired_now = n_destroyed,
            "context table synchronised with the device"
        );
        Ok(())
    }

    /// The VMs the device has, with their partition, confidentiality and
    /// block.
    fn read_vms(&self) -> Result<BTreeMap<u32, VmInfo>, EngineError> {
        let vm_offsets: Vec<u64> = (1..MAX_VMS)
            .flat_map(|v| {
                [
                    r::vm(v, r::VM_PARTITION),
                    r::vm(v, r::VM_FLAGS),
                    r::vm(v, r::VM_BLOCK),
                ]
            })
            .collect();
        let vm_regs = self.dev.read_many(&vm_offsets)?;
        Ok((1..MAX_VMS)
            .zip(vm_regs.chunks_exact(3))
            .filter(|(_, v)| v[0] != 0)
            .map(|(vm, v)| {
                let info = VmInfo {
                    partition: reg32(v[0]),
                    confidential: reg32(v[1]) & vm_flags::CONFIDENTIAL != 0,
                    block_offset: v[2],
                };
                (vm, info)
            })
            .collect())
    }
}
