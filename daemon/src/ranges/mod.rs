//! The range plane: tenants' marked ranges multiplexed onto the device's
//! range registers, each register's counts attributed per context
//! ([`attrib`]), crossing records drained from the partition rings and
//! turned into per-context call graphs ([`CallGraphData`]).
//!
//! A tenant range ([`RangeBook::add`]) names a context and a range of its
//! program; ranges of one VM's contexts with the same programming share a
//! register (each reads only its own context's share since it was
//! added); a new programming takes a free register. Each VM may hold at
//! most its quota of a partition's [`RANGES_PER_PARTITION`] registers
//! (the tenant node gives every VM bound to the partition an equal
//! share) and its quota of ranges; past either the request fails
//! ([`RangeError::NoSpace`]), whatever other VMs hold. Handles are counted
//! per VM and a register is named to its tenant by its place among its
//! VM's registers, so nothing a tenant is told depends on another's ranges.
//!
//! The interrupt thread calls [`RangeBook::snapshot`] right after it paused
//! the outgoing contexts of a handshake (the counts up to the switch are
//! then final for them), and [`RangeBook::on_interrupts`] with every batch
//! of interrupt records: `RANGE_THRESHOLD` drains the partition's ring,
//! a lost crossing (`RANGE_IRQ_LOST`) is booked to the context the
//! record names, a destroyed context's ranges are removed, a device reset
//! (which disarms every range) drops every range.
//!
//! Memory: per partition at most 8 registers, each with one attribution
//! row per context that ran its program while armed; at most
//! [`MAX_CONTEXT_RANGES`] ranges per context; one call graph per context
//! holding ranges (bounded as [`gpupm_client::ranges::graph`] says). All of it goes when the
//! ranges go; a restarted daemon starts empty and disarms every register
//! ([`RangeBook::start`]).
//!
//! One lock serialises everything, including the register batches, so
//! that an attribution never interleaves with another batch's.

pub mod attrib;
pub mod device;
mod records;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

pub use gpupm_client::ranges::CallGraphData;
use gpupm_client::{DevError, DevNode};
use gpupm_uapi::intr::{source, InterruptRecord, RANGE_IRQ_LOST};
use gpupm_uapi::ranges::{code_item, range_ctrl, RANGES_PER_PARTITION};
use gpupm_uapi::regs::{self, ctx_state};
use gpupm_uapi::tenant::ranges::{range_kind, range_trigger, RangeRow, MAX_CONTEXT_RANGES};

use self::attrib::{Counts, Ledger};
use self::device::Programming;
use self::records::{book_lost, row};

/// A range as a tenant asked for it (checked by the tenant node).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RangeSpec {
    /// `range_kind`.
    pub kind: u32,
    /// `ranges::range_event`.
    pub event: u32,
    /// `range_trigger`.
    pub trigger: u32,
    /// Threshold.
    pub threshold: u32,
    /// Kernel (code).
    pub kernel: u16,
    /// First block or address.
    pub first: u32,
    /// Last block or address.
    pub last: u32,
}

impl RangeSpec {
    /// The register programming counting `program`.
    fn programming(&self, program: u32) -> Programming {
        let irq = match self.trigger {
            range_trigger::COUNT => range_ctrl::COUNT_IRQ,
            range_trigger::LATENCY => range_ctrl::LATENCY_IRQ,
            _ => 0,
        };
        let (ctrl_kind, start, end) = if self.kind == range_kind::DATA {
            (range_ctrl::DATA, self.first, self.last)
        } else {
            let block = |b: u32| u16::try_from(b).unwrap_or(u16::MAX);
            (
                0,
                code_item(self.kernel, block(self.first)),
                code_item(self.kernel, block(self.last)),
            )
        };
        Programming {
            ctrl: range_ctrl::ENABLE
                | ctrl_kind
                | (self.event << range_ctrl::EVENT_SHIFT) & range_ctrl::EVENT_MASK
                | irq
                | (program << range_ctrl::PROGRAM_SHIFT) & range_ctrl::PROGRAM_MASK,
            start,
            end,
            threshold: self.threshold,
        }
    }
}

/// Why a range request failed.
#[derive(Debug, thiserror::Error)]
pub enum RangeError {
    /// Every register of the partition is busy, or the context holds
    /// `MAX_CONTEXT_RANGES` ranges.
    #[error("no range register free")]
    NoSpace,
    /// No such range of the context.
    #[error("no such range")]
    Missing,
    /// The device refused the programming (a kernel or block the program
    /// does not have).
    #[error("the device refused the range")]
    Refused,
    /// The context is no longer active (destroyed, perhaps not yet
    /// released): it runs nothing a range could count.
    #[error("the context is not active")]
    Inactive,
    /// The device failed.
    #[error(transparent)]
    Device(#[from] DevError),
}

/// What [`RangeBook::add`] answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Added {
    /// Handle (counted per VM).
    pub handle: u32,
    /// The register's place among its VM's registers of the partition.
    pub register: u32,
    /// Whether the register already ran this programming for another of
    /// the VM's ranges.
    pub shared: bool,
}

/// What one VM may hold: registers of one partition, and ranges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RangeQuota {
    /// Registers of the partition the VM's ranges may use.
    pub registers: u32,
    /// Ranges the VM's contexts may hold together.
    pub ranges: usize,
}

/// A range, as the book knows it: its VM and its per-VM handle.
type HandleKey = (u32, u32);

struct Register {
    /// The VM whose ranges use it.
    vm: u32,
    /// Its place among the VM's registers of the partition.
    slot: u32,
    prog: Programming,
    users: BTreeSet<HandleKey>,
    ledger: Ledger,
}

#[derive(Default)]
struct Partition {
    regs: [Option<Register>; RANGES_PER_PARTITION as usize],
    /// `seq` of the last record drained.
    last_seq: u64,
}

impl Partition {
    fn armed(&self) -> Vec<u32> {
        (0..RANGES_PER_PARTITION)
            .filter(|&i| self.regs[i as usize].is_some())
            .collect()
    }
}

struct Handle {
    ctx: u32,
    partition: u32,
    register: u32,
    spec: RangeSpec,
    base: Counts,
    base_unattributed: Counts,
    crossings: u64,
    lost: u64,
}

#[derive(Default)]
struct State {
    parts: BTreeMap<u32, Partition>,
    handles: BTreeMap<HandleKey, Handle>,
    graphs: BTreeMap<u32, CallGraphData>,
    /// Per VM, the last handle given out.
    next_handle: BTreeMap<u32, u32>,
    scratch: Vec<u8>,
}

impl State {
    /// The partitions where context `ctx` holds ranges.
    fn partitions_of(&self, ctx: u32) -> BTreeSet<u32> {
        self.handles
            .values()
            .filter(|h| h.ctx == ctx)
            .map(|h| h.partition)
            .collect()
    }
}

/// Counters of the plane (metrics `gpupm_range_*`, `gpupm_callgraph_*`).
#[derive(Debug, Default)]
pub struct RangeStats {
    /// Ranges tenants hold.
    pub ranges: AtomicU64,
    /// Registers armed.
    pub registers: AtomicU64,
    /// Crossing records drained.
    pub records: AtomicU64,
    /// Records the rings lost (gaps in `seq`).
    pub lost: AtomicU64,
    /// Sealed records (confidential VMs), counted and not opened.
    pub sealed: AtomicU64,
    /// Records of contexts holding no range there (not kept).
    pub unclaimed: AtomicU64,
    /// Slots that were no record, and records whose stack is no call path.
    pub malformed: AtomicU64,
    /// Records added to a call graph.
    pub graph_records: AtomicU64,
    /// Call graphs kept.
    pub graphs: AtomicU64,
}

/// [`RangeStats`] at one moment (plain numbers, for health and metrics).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeMetrics {
    /// Ranges tenants hold.
    pub ranges: u64,
    /// Registers armed.
    pub registers: u64,
    /// Crossing records drained.
    pub records: u64,
    /// Records the rings lost.
    pub lost: u64,
    /// Sealed records counted and dropped.
    pub sealed: u64,
    /// Records of contexts holding no range there.
    pub unclaimed: u64,
    /// Malformed slots and stacks.
    pub malformed: u64,
    /// Records added to call graphs.
    pub graph_records: u64,
    /// Call graphs kept.
    pub graphs: u64,
}

impl RangeStats {
    /// The counters now.
    pub fn snapshot(&self) -> RangeMetrics {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RangeMetrics {
            ranges: get(&self.ranges),
            registers: get(&self.registers),
            records: get(&self.records),
            lost: get(&self.lost),
            sealed: get(&self.sealed),
            unclaimed: get(&self.unclaimed),
            malformed: get(&self.malformed),
            graph_records: get(&self.graph_records),
            graphs: get(&self.graphs),
        }
    }
}

/// The range plane.
pub struct RangeBook {
    dev: Arc<DevNode>,
    state: Mutex<State>,
    stats: RangeStats,
}

impl std::fmt::Debug for RangeBook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RangeBook")
            .field("stats", &self.stats)
            .finish()
    }
}

impl RangeBook {
    /// A plane over `dev`, holding nothing.
    pub fn new(dev: Arc<DevNode>) -> RangeBook {
        RangeBook {
            dev,
            state: Mutex::new(State::default()),
            stats: RangeStats::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counters.
    pub fn stats(&self) -> &RangeStats {
        &self.stats
    }

    /// Disarms every range of `partitions` (slot 0 has none) and sizes
    /// their rings: this daemon knows no range yet.
    pub fn start(&self, partitions: &[u32]) -> Result<(), DevError> {
        let mut st = self.lock();
        *st = State {
            next_handle: std::mem::take(&mut st.next_handle),
            ..State::default()
        };
        for &p in partitions.iter().filter(|&&p| p != 0) {
            device::reset_partition(&self.dev, p)?;
        }
        self.publish(&st);
        Ok(())
    }

    /// Programs `spec` for context `ctx` of VM `vm` running `program` on
    /// partition `p`, within the VM's `quota`. Nothing changes when it
    /// fails.
    pub fn add(
        &self,
        ctx: u32,
        vm: u32,
        p: u32,
        program: u32,
        spec: RangeSpec,
        quota: RangeQuota,
    ) -> Result<Added, RangeError> {
        let mut st = self.lock();
        // Checked under the lock that `ctx_destroyed` takes: a context
        // destroyed before this read was disarmed already and is refused
        // here; one destroyed after it gets its destruction interrupt
        // handled after this range is booked, which disarms it. Without
        // the check a range added between the destruction's handling and
        // the context's release stayed armed for good.
        if self.dev.read32(regs::ctx(ctx, regs::CTX_STATE))? != ctx_state::ACTIVE {
            return Err(RangeError::Inactive);
        }
        if st.handles.values().filter(|h| h.ctx == ctx).count() >= MAX_CONTEXT_RANGES
            || st.handles.range((vm, 0)..=(vm, u32::MAX)).count() >= quota.ranges
        {
            return Err(RangeError::NoSpace);
        }
        let prog = spec.programming(program);
        let part = st.parts.entry(p).or_default();
        let mine = |r: &&Register| r.vm == vm;
        let same = (0..RANGES_PER_PARTITION).find(|&i| {
            part.regs[i as usize]
                .as_ref()
                .filter(mine)
                .is_some_and(|r| r.prog == prog)
        });
        let (register, shared) = match same {
            Some(i) => {
                self.fold(part, p)?;
                (i, true)
            }
            None => {
                let taken: Vec<u32> = part
                    .regs
                    .iter()
                    .flatten()
                    .filter(mine)
                    .map(|r| r.slot)
                    .collect();
                let slot = (0..quota.registers)
                    .find(|s| !taken.contains(s))
                    .ok_or(RangeError::NoSpace)?;
                let i = (0..RANGES_PER_PARTITION)
                    .find(|&i| part.regs[i as usize].is_none())
                    .ok_or(RangeError::NoSpace)?;
                let at = device::arm(&self.dev, p, i, &prog).map_err(refusal)?;
                part.regs[i as usize] = Some(Register {
                    vm,
                    slot,
                    prog,
                    users: BTreeSet::new(),
                    ledger: Ledger::armed(at),
                });
                (i, false)
            }
        };
        let last = st.next_handle.entry(vm).or_insert(0);
        *last = last.wrapping_add(1).max(1);
        let key = (vm, *last);
        let reg = st
            .parts
            .get_mut(&p)
            .and_then(|part| part.regs[register as usize].as_mut())
            .ok_or(RangeError::Missing)?;
        reg.users.insert(key);
        let (base, base_unattributed, slot) =
            (reg.ledger.of(ctx), reg.ledger.unattributed(), reg.slot);
        st.handles.insert(
            key,
            Handle {
                ctx,
                partition: p,
                register,
                spec,
                base,
                base_unattributed,
                crossings: 0,
                lost: 0,
            },
        );
        st.graphs.entry(ctx).or_default();
        self.publish(&st);
        Ok(Added {
            handle: key.1,
            register: slot,
            shared,
        })
    }

    /// Removes range `handle` of context `ctx` of VM `vm`.
    pub fn remove(&self, ctx: u32, vm: u32, handle: u32) -> Result<(), RangeError> {
        let mut st = self.lock();
        let key = (vm, handle);
        if st.handles.get(&key).is_none_or(|h| h.ctx != ctx) {
            return Err(RangeError::Missing);
        }
        self.drop_handle(&mut st, key)?;
        self.publish(&st);
        Ok(())
    }

    /// Takes a handle out, disarming its register when it was the last
    /// user; the context's graph goes with its last range.
    fn drop_handle(&self, st: &mut State, handle: HandleKey) -> Result<(), DevError> {
        let Some(h) = st.handles.get(&handle) else {
            return Ok(());
        };
        let (p, i, ctx) = (h.partition, h.register, h.ctx);
        if let Some(part) = st.parts.get_mut(&p) {
            let last = part.regs[i as usize]
                .as_ref()
                .is_some_and(|r| r.users.len() == 1 && r.users.contains(&handle));
            if last {
                device::disarm(&self.dev, p, i)?;
                part.regs[i as usize] = None;
            } else if let Some(r) = part.regs[i as usize].as_mut() {
                r.users.remove(&handle);
            }
        }
        st.handles.remove(&handle);
        if !st.handles.values().any(|h| h.ctx == ctx) {
            st.graphs.remove(&ctx);
        }
        Ok(())
    }

    /// Reads partition `p`'s armed registers and books their growth.
    fn fold(&self, part: &mut Partition, p: u32) -> Result<(), DevError> {
        let armed = part.armed();
        if armed.is_empty() {
            return Ok(());
        }
        let snaps = device::snapshot(&self.dev, p, &armed)?;
        for (i, s) in armed.into_iter().zip(snaps) {
            if let Some(r) = part.regs[i as usize].as_mut() {
                r.ledger.fold(s);
            }
        }
        Ok(())
    }

    /// Books every armed register of `parts` now (right after their
    /// running contexts were paused for a switch).
    pub fn snapshot(&self, parts: &[u32]) {
        if parts.is_empty() {
            return;
        }
        let mut st = self.lock();
        for &p in parts {
            if let Some(part) = st.parts.get_mut(&p) {
                if let Err(e) = self.fold(part, p) {
                    tracing::warn!(
                        partition = p,
                        error = gpupm_fusemount::logging::one_line(e),
                        "reading range registers at a switch failed"
                    );
                }
            }
        }
    }

    /// Context `ctx`'s ranges, ascending by handle, with its share of
    /// their counts up to now and every crossing drained so far.
    pub fn read(&self, ctx: u32) -> Result<Vec<RangeRow>, RangeError> {
        let mut st = self.lock();
        let parts = st.partitions_of(ctx);
        for &p in &parts {
            self.drain(&mut st, p)?;
            if let Some(part) = st.parts.get_mut(&p) {
                self.fold(part, p)?;
            }
        }
        let mut rows = Vec::new();
        for (&(_, handle), h) in st.handles.iter().filter(|(_, h)| h.ctx == ctx) {
            let Some(reg) = st
                .parts
                .get(&h.partition)
                .and_then(|part| part.regs[h.register as usize].as_ref())
            else {
                continue;
            };
            rows.push(row(handle, h, reg.slot, &reg.ledger));
        }
        Ok(rows)
    }

    /// Runs `f` on context `ctx`'s call graph, after draining its
    /// partitions' rings (None: the context holds no range).
    pub fn with_graph<T>(
        &self,
        ctx: u32,
        f: impl FnOnce(&CallGraphData) -> T,
    ) -> Result<Option<T>, RangeError> {
        let mut st = self.lock();
        let parts = st.partitions_of(ctx);
        for &p in &parts {
            self.drain(&mut st, p)?;
        }
        Ok(st.graphs.get(&ctx).map(f))
    }

    /// Handles the range plane's share of a batch of interrupt records.
    pub fn on_interrupts(&self, recs: &[InterruptRecord]) {
        let mut to_drain = BTreeSet::new();
        let mut st = self.lock();
        for rec in recs {
            match rec.source {
                source::RANGE_THRESHOLD => {
                    if rec.arg & RANGE_IRQ_LOST != 0 {
                        book_lost(&mut st, rec.partition, rec.arg & 0xFF, rec.arg2);
                    }
                    to_drain.insert(rec.partition);
                }
                source::CTX_DESTROYED => self.ctx_destroyed(&mut st, rec.arg),
                source::DEVICE_RESET => {
                    // The reset disarmed every range and emptied the rings.
                    let next_handle = std::mem::take(&mut st.next_handle);
                    *st = State {
                        next_handle,
                        ..State::default()
                    };
                }
                _ => {}
            }
        }
        for p in to_drain {
            if let Err(e) = self.drain(&mut st, p) {
                tracing::warn!(
                    partition = p,
                    error = gpupm_fusemount::logging::one_line(e),
                    "draining a range ring failed"
                );
            }
        }
        self.publish(&st);
    }

    fn ctx_destroyed(&self, st: &mut State, ctx: u32) {
        let mine: Vec<HandleKey> = st
            .handles
            .iter()
            .filter(|(_, h)| h.ctx == ctx)
            .map(|(&id, _)| id)
            .collect();
        for handle in mine {
            if let Err(e) = self.drop_handle(st, handle) {
                tracing::warn!(
                    ctx,
                    error = gpupm_fusemount::logging::one_line(e),
                    "disarming a destroyed context's range failed"
                );
            }
        }
        for part in st.parts.values_mut() {
            for r in part.regs.iter_mut().flatten() {
                r.ledger.forget(ctx);
            }
        }
    }

    fn publish(&self, st: &State) {
        let regs: usize = st.parts.values().map(|p| p.armed().len()).sum();
        self.stats.registers.store(regs as u64, Ordering::Relaxed);
        self.stats
            .ranges
            .store(st.handles.len() as u64, Ordering::Relaxed);
        self.stats
            .graphs
            .store(st.graphs.len() as u64, Ordering::Relaxed);
    }
}

/// A refused arming is the tenant's bad programming (EINVAL from the
/// device); anything else is the device failing.
fn refusal(e: DevError) -> RangeError {
    match &e {
        DevError::Ioctl { source, .. } if *source == nix::Error::EINVAL => RangeError::Refused,
        _ => RangeError::Device(e),
    }
}
