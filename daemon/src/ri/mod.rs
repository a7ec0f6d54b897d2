//! Runtime-instrumentation sessions (`docs/ri.md`): the daemon's side of
//! the device's 64 RI control blocks.
//!
//! A session ([`RiUnit::open`]) takes a free control block, programs it
//! for one context in one register batch (`WRAP` and `INTR_ENABLE` always
//! on, the program buffer at `[0, cap · group)` of the block's span) and
//! hands every report group the block stores to its [`RiSink`]. Groups are
//! drained whole ([`drain`]): on the device's `RI_BUFFER_FULL` and
//! `RI_HALT` interrupts ([`RiUnit::notify`]), every [`DRAIN_INTERVAL`] on
//! the unit's thread ([`run`]; it sleeps while no session is open) and
//! when the session ends. A group the
//! buffer overwrote before a drain is counted lost and reported in the
//! next entry; a halt reaches the sink once, with its reason.
//!
//! A block is released when its [`RiTicket`] is dropped (the handle
//! closed), when the device unbinds it (the context was released), and by
//! [`RiUnit::reclaim`] when a daemon starts: a daemon that died with
//! sessions open leaks no block.
//!
//! Locks: the unit's table lock is held for device I/O but never while a
//! sink runs, so a sink may take the tenant node's handle table lock.

pub mod drain;
pub mod metrics;
pub mod plan;
mod resume;
mod thread;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use gpupm_client::ops::{read32, reg32, write32};
use gpupm_client::{DevError, DevNode};
use gpupm_uapi::regs as r;
use gpupm_uapi::ri::{self as ri, ri_ctrl, RI_BLOCKS};

pub use self::drain::Entry;
use self::thread::Wake;
pub use self::thread::{run, start};

/// Longest a stored group waits in the program buffer.
pub const DRAIN_INTERVAL: Duration = Duration::from_millis(20);

/// Where a session's entries go (the tenant node's handle).
pub trait RiSink: Send + Sync + std::fmt::Debug {
    /// Queues `entries` after `lost` groups the buffer overwrote; answers
    /// the groups its queue had to drop, or `None` once the session is gone.
    fn deliver(&self, lost: u64, entries: Vec<Entry>) -> Option<u64>;
    /// The device ended the session (its context was released).
    fn end(&self);
}

/// A session's control block, as checked by the tenant node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RiConfig {
    /// The context.
    pub ctx: u32,
    /// Its VM.
    pub vm: u32,
    /// `ri_mode` value.
    pub mode: u32,
    /// `ri_ctrl` bits among EMIT, ABORT, SUPPRESS_PRIMARY, SUPPRESS_SECONDARY.
    pub bits: u32,
    /// SF.
    pub sf: u32,
    /// RSIC.
    pub rsic: u32,
    /// RGS.
    pub rgs: u32,
    /// Program-buffer groups.
    pub buffer_groups: u32,
}

impl RiConfig {
    fn ctrl(&self) -> u32 {
        ri_ctrl::ENABLE
            | self.mode << ri_ctrl::MODE_SHIFT
            | self.rgs << ri_ctrl::RGS_SHIFT
            | self.bits
            | ri_ctrl::INTR_ENABLE
            | ri_ctrl::WRAP
    }
}

/// Why a session could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum RiError {
    /// The control block does not fit the context's partition.
    #[error("{0}")]
    Invalid(&'static str),
    /// Another session watches the context.
    #[error("the context has an RI session")]
    Busy,
    /// The partition cannot take the session (ABI 1.8 resume).
    #[error("{0}")]
    Unsupported(&'static str),
    /// Every control block is in use.
    #[error("every RI control block is in use")]
    NoBlock,
    /// The context's VM holds as many blocks as its quota allows.
    #[error("the VM holds its share of RI control blocks")]
    Quota,
    /// The device failed.
    #[error(transparent)]
    Device(#[from] DevError),
}

/// What a partition offers RI sessions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PartitionCaps {
    /// Slot.
    pub partition: u32,
    /// Capability version.
    pub version: u32,
    /// Largest RGS.
    pub max_rgs: u32,
    /// The device's largest RGS.
    pub device_max_rgs: u32,
}

/// Counters of the unit (the `gpupm_ri_*` metrics).
#[derive(Debug, Default)]
pub struct RiStats {
    /// Sessions open.
    pub sessions: AtomicU64,
    /// Groups drained.
    pub groups: AtomicU64,
    /// Records in those groups.
    pub records: AtomicU64,
    /// Groups lost (overwritten before a drain, or dropped by a queue).
    pub lost: AtomicU64,
    /// Halts seen.
    pub halts: AtomicU64,
    /// Blocks reclaimed from a previous daemon.
    pub reclaimed: AtomicU64,
}

/// A snapshot of [`RiStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RiCounts {
    /// Sessions open.
    pub sessions: u64,
    /// Groups drained.
    pub groups: u64,
    /// Records in them.
    pub records: u64,
    /// Groups lost.
    pub lost: u64,
    /// Halts seen.
    pub halts: u64,
}

impl RiStats {
    /// The counters now.
    pub fn counts(&self) -> RiCounts {
        RiCounts {
            sessions: self.sessions.load(Ordering::Relaxed),
            groups: self.groups.load(Ordering::Relaxed),
            records: self.records.load(Ordering::Relaxed),
            lost: self.lost.load(Ordering::Relaxed),
            halts: self.halts.load(Ordering::Relaxed),
        }
    }
}

/// One block's session.
#[derive(Debug)]
struct Slot {
    id: u64,
    /// The session's place among its VM's blocks (0..quota): what its
    /// tenant is told, rather than the device block, whose number would
    /// say how many blocks other tenants hold.
    vm_slot: u32,
    config: RiConfig,
    cap: u64,
    /// Capability version of the partition the session began on.
    version: u32,
    seen: u64,
    halt_reported: bool,
    lost: u64,
    delivered: u64,
    sink: Arc<dyn RiSink>,
}

/// The RI control blocks and their sessions.
pub struct RiUnit {
    dev: Arc<DevNode>,
    slots: Mutex<Vec<Option<Slot>>>,
    next_id: AtomicU64,
    /// The drain thread's doorbell, while it runs.
    wake: Mutex<Option<Sender<Wake>>>,
    stats: RiStats,
}

impl std::fmt::Debug for RiUnit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RiUnit")
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// An open session; dropping it ends the session and frees its block.
#[derive(Debug)]
pub struct RiTicket {
    unit: Weak<RiUnit>,
    block: u32,
    vm_slot: u32,
    id: u64,
}

impl RiTicket {
    /// Session id.
    pub fn id(&self) -> u64 {
        self.id
    }
    /// The control block.
    pub fn block(&self) -> u32 {
        self.block
    }
    /// The session's place among its VM's blocks (0..quota).
    pub fn vm_slot(&self) -> u32 {
        self.vm_slot
    }
    /// The unit, while the daemon runs.
    pub fn unit(&self) -> Option<Arc<RiUnit>> {
        self.unit.upgrade()
    }
}

impl Drop for RiTicket {
    fn drop(&mut self) {
        if let Some(unit) = self.unit.upgrade() {
            unit.close(self.block, self.id);
        }
    }
}

impl RiUnit {
    /// A unit over `dev` with every block free.
    pub fn new(dev: Arc<DevNode>) -> Arc<RiUnit> {
        Arc::new(RiUnit {
            dev,
            slots: Mutex::new((0..RI_BLOCKS).map(|_| None).collect()),
            next_id: AtomicU64::new(1),
            wake: Mutex::new(None),
            stats: RiStats::default(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Option<Slot>>> {
        // Every update leaves the table consistent; a panic elsewhere must
        // not wedge every session.
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counters.
    pub fn stats(&self) -> &RiStats {
        &self.stats
    }

    /// Disables and unbinds every block a previous daemon left in use.
    pub fn reclaim(&self) -> Result<u64, DevError> {
        let _held = self.lock();
        let mut reads: Vec<_> = (0..RI_BLOCKS)
            .map(|i| read32(ri::ri(i, ri::RI_CTRL)))
            .collect();
        self.dev.batch(&mut reads)?;
        let ctxs = self.dev.read_many(
            &(0..RI_BLOCKS)
                .map(|i| ri::ri(i, ri::RI_CTX))
                .collect::<Vec<_>>(),
        )?;
        let mut n = 0;
        for (i, (op, ctx)) in (0..RI_BLOCKS).zip(reads.iter().zip(ctxs)) {
            let ctrl = reg32(op.value);
            if ctrl & ri_ctrl::ENABLE == 0 && ctx == 0 {
                continue;
            }
            self.dev.batch(&mut [
                write32(ri::ri(i, ri::RI_CTRL), ctrl & !ri_ctrl::ENABLE),
                write32(ri::ri(i, ri::RI_CTX), 0),
            ])?;
            n += 1;
        }
        if n > 0 {
            tracing::info!(blocks = n, "reclaimed RI control blocks left in use");
        }
        self.stats.reclaimed.fetch_add(n, Ordering::Relaxed);
        Ok(n)
    }

    /// The partition VM `vm` is on, and what it offers.
    pub fn caps(&self, vm: u32) -> Result<PartitionCaps, DevError> {
        let partition = self.dev.read32(r::vm(vm, r::VM_PARTITION))?;
        let v = self.dev.read_many(&[
            ri::ri_part_version(partition),
            ri::ri_part_max_rgs(partition),
            ri::RI_MAX_RGS,
        ])?;
        Ok(PartitionCaps {
            partition,
            version: reg32(v[0]),
            max_rgs: reg32(v[1]),
            device_max_rgs: reg32(v[2]),
        })
    }

    /// Opens a session for `config`, delivering to `sink`, if the
    /// context's VM holds fewer than `quota` blocks ([`RiError::Quota`]
    /// otherwise). On any error nothing changes on the device or in the
    /// table.
    pub fn open(
        self: &Arc<Self>,
        config: RiConfig,
        quota: u32,
        sink: Arc<dyn RiSink>,
    ) -> Result<(RiTicket, PartitionCaps), RiError> {
        let caps = self.caps(config.vm)?;
        if config.rgs > caps.max_rgs || config.rgs > caps.device_max_rgs {
            return Err(RiError::Invalid("RGS above the partition's maximum"));
        }
        let mut slots = self.lock();
        if slots.iter().flatten().any(|s| s.config.ctx == config.ctx) {
            return Err(RiError::Busy);
        }
        let taken: Vec<u32> = slots
            .iter()
            .flatten()
            .filter(|s| s.config.vm == config.vm)
            .map(|s| s.vm_slot)
            .collect();
        let vm_slot = (0..quota)
            .find(|i| !taken.contains(i))
            .ok_or(RiError::Quota)?;
        let block = slots
            .iter()
            .position(Option::is_none)
            .ok_or(RiError::NoBlock)?;
        let block = u32::try_from(block).map_err(|_| RiError::NoBlock)?;
        let gb = ri::group_bytes(config.rgs);
        let limit = u64::from(config.buffer_groups) * gb - 1;
        let mut ops = [
            write32(ri::ri(block, ri::RI_CTX), config.ctx),
            write32(ri::ri(block, ri::RI_SF), config.sf),
            write32(ri::ri(block, ri::RI_RSIC), config.rsic),
            write32(ri::ri(block, ri::RI_ROA), 0),
            write32(
                ri::ri(block, ri::RI_RLA),
                u32::try_from(limit).map_err(|_| RiError::Invalid("buffer too large"))?,
            ),
            write32(ri::ri(block, ri::RI_CTRL), config.ctrl()),
        ];
        self.dev
            .batch(&mut ops)
            .map_err(|e| match drain::errno_of(&e) {
                // The context stopped being active (or was never bound) after
                // the node's checks: the device's own verdict.
                Some(libc::EINVAL) => RiError::Invalid("the device refused the control block"),
                _ => RiError::Device(e),
            })?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        slots[block as usize] = Some(Slot {
            id,
            vm_slot,
            config,
            cap: u64::from(config.buffer_groups),
            version: caps.version,
            seen: 0,
            halt_reported: false,
            lost: 0,
            delivered: 0,
            sink,
        });
        self.stats.sessions.fetch_add(1, Ordering::Relaxed);
        drop(slots);
        // The drain thread sleeps while no session is open.
        self.ring(Wake::Look);
        let ticket = RiTicket {
            unit: Arc::downgrade(self),
            block,
            vm_slot,
            id,
        };
        Ok((ticket, caps))
    }

    /// RIEMIT for session `id` on `block`.
    pub fn emit(&self, block: u32, id: u64, value: u32) -> Result<(), RiError> {
        let slots = self.lock();
        let live = slots
            .get(block as usize)
            .and_then(Option::as_ref)
            .is_some_and(|s| s.id == id);
        if !live {
            return Err(RiError::Invalid("the session ended"));
        }
        self.dev.write32(ri::ri(block, ri::RI_EMIT), value)?;
        Ok(())
    }

    /// The session's status after a drain: `None` once it ended.
    pub fn status(&self, block: u32, id: u64) -> Result<Option<drain::Status>, RiError> {
        self.drain_block(block);
        let slots = self.lock();
        let Some(s) = slots
            .get(block as usize)
            .and_then(Option::as_ref)
            .filter(|s| s.id == id)
        else {
            return Ok(None);
        };
        let mut st = drain::read_status(&self.dev, block)?;
        st.lost = s.lost;
        st.delivered = s.delivered;
        st.caps = self.caps(s.config.vm)?;
        Ok(Some(st))
    }

    /// Asks the unit's thread to drain `block` (an interrupt named it).
    pub fn notify(&self, block: u32) {
        self.ring(Wake::Drain(block));
    }

    /// Wakes the unit's thread to look at its stop flag (the engine stops).
    pub fn wake(&self) {
        self.ring(Wake::Look);
    }

    fn ring(&self, why: Wake) {
        let wake = self.wake.lock().unwrap_or_else(|e| e.into_inner());
        // The thread only stops with the engine; a wake after that is moot.
        if let Some(Err(e)) = wake.as_ref().map(|tx| tx.send(why)) {
            tracing::debug!(wake = ?e.0, "the RI drain thread is gone");
        }
    }

    fn close(&self, block: u32, id: u64) {
        let mut slots = self.lock();
        let Some(slot) = slots.get_mut(block as usize) else {
            return;
        };
        if slot.as_ref().is_none_or(|s| s.id != id) {
            return;
        }
        let ending = drain::stop(&self.dev, block).and_then(|()| {
            let s = slot
                .as_mut()
                .map(|s| drain::drain(&self.dev, block, s, &self.stats));
            drain::unbind(&self.dev, block).map(|()| s)
        });
        if let Err(e) = ending {
            tracing::warn!(
                block,
                error = gpupm_fusemount::logging::one_line(e),
                "ending an RI session failed"
            );
        }
        *slot = None;
        self.stats.sessions.fetch_sub(1, Ordering::Relaxed);
    }

    /// Drains `block`'s session, if any, and runs its sink.
    fn drain_block(&self, block: u32) {
        let out = {
            let mut slots = self.lock();
            let Some(slot) = slots.get_mut(block as usize) else {
                return;
            };
            let Some(s) = slot.as_mut() else {
                return;
            };
            let out = drain::drain(&self.dev, block, s, &self.stats);
            let sink = Arc::clone(&s.sink);
            if out.as_ref().is_ok_and(|o| o.ended) {
                *slot = None;
                self.stats.sessions.fetch_sub(1, Ordering::Relaxed);
            }
            out.map(|o| (o, sink))
        };
        match out {
            Ok((o, sink)) => {
                if o.lost > 0 || !o.entries.is_empty() {
                    let dropped = sink.deliver(o.lost, o.entries).unwrap_or(0);
                    self.stats.lost.fetch_add(dropped, Ordering::Relaxed);
                }
                if o.ended {
                    sink.end();
                }
            }
            Err(e) => tracing::warn!(
                block,
                error = gpupm_fusemount::logging::one_line(e),
                "draining an RI block failed"
            ),
        }
    }

    fn active_blocks(&self) -> Vec<u32> {
        self.lock()
            .iter()
            .zip(0..)
            .filter_map(|(s, i)| s.as_ref().map(|_| i))
            .collect()
    }
}
