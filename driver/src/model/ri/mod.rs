//! The runtime-instrumentation unit: 64 control blocks, each bound to a
//! context and, while enabled, storing report groups into its program
//! buffer at the sample points its mode picks ([`session`]); the walk
//! watcher ([`watch`]); the partitions' capability characteristics and VM
//! migration.
//!
//! Registers: the control blocks at `uapi::ri::ri(i, reg)`
//! (`0x5000..0x6000`) and the globals at `0x0600..0x0700`. See
//! `docs/ri.md`.

pub mod session;
#[cfg(test)]
mod tests;
pub mod watch;

use gpupm_uapi::ioctl::RiLedgerQuery;
use gpupm_uapi::regs::{ctx_state, MAX_CONTEXTS, MAX_PARTITION_SLOTS, MAX_VMS};
use gpupm_uapi::ri::{self as r, group_bytes, halt_reason, ri_ctrl, ri_mode, ri_status};

use self::session::{mode_of, rgs_of, RiEvent, Session};
use super::access::{r32, r64, RegValue, Reject};
use super::context::ContextTable;
use super::partition::Partitions;
use super::vm::VmTable;
use crate::scenario::Scenario;

/// Index meaning "no control block" in the per-context map.
const NONE: u8 = u8::MAX;

/// The batch's view of one control block's writable registers.
#[derive(Clone, Copy, Debug, Default)]
pub struct BlockShadow {
    ctx: u32,
    ctrl: u32,
    roa: u32,
    rla: u32,
}

/// The batch's view of the unit.
#[derive(Clone, Debug)]
pub struct RiShadow {
    blocks: [BlockShadow; r::RI_BLOCKS as usize],
    migrate_vm: u32,
}

/// A checked write.
#[derive(Clone, Copy, Debug)]
pub enum RiWrite {
    /// `RI_CTX` of block `i`.
    Ctx(u32, u32),
    /// `RI_CTRL` of block `i`.
    Ctrl(u32, u32),
    /// `RI_SF`.
    Sf(u32, u32),
    /// `RI_RSIC`.
    Rsic(u32, u32),
    /// `RI_ROA`.
    Roa(u32, u32),
    /// `RI_RLA`.
    Rla(u32, u32),
    /// `RI_EMIT`.
    Emit(u32, u32),
    /// `RI_MIGRATE_VM`.
    MigrateVm(u32),
    /// `RI_MIGRATE`: VM `vm` to slot `to`.
    Migrate {
        /// The VM.
        vm: u32,
        /// Its new partition slot.
        to: u32,
    },
}

/// What the checks need to know of the rest of the device.
#[derive(Clone, Copy, Debug)]
pub struct Tables<'a> {
    /// VM table.
    pub vms: &'a VmTable,
    /// Context table.
    pub ctxs: &'a ContextTable,
    /// Partitions.
    pub parts: &'a Partitions,
}

/// An interrupt to raise: (source, partition, arg = block, arg2, cycle).
pub type UnitEvent = (u32, u32, u32, u32, u64);

/// The unit.
#[derive(Clone, Debug)]
pub struct RiUnit {
    sessions: Vec<Session>,
    by_ctx: Vec<u8>,
    /// Bit `i`: block `i` is enabled.
    armed: u64,
    migrate_vm: u32,
    migrations: u32,
    versions: [u8; MAX_PARTITION_SLOTS as usize],
    max_rgs: [u32; MAX_PARTITION_SLOTS as usize],
}

impl RiUnit {
    /// The unit for `scenario`'s partitions.
    pub fn new(scenario: &Scenario) -> Self {
        let mut versions = [1; MAX_PARTITION_SLOTS as usize];
        let mut max_rgs = [r::RGS_MAX; MAX_PARTITION_SLOTS as usize];
        for p in &scenario.partitions {
            if let Some(i) = usize::try_from(p.slot).ok().filter(|&i| i < versions.len()) {
                versions[i] = p.ri_version;
                max_rgs[i] = p.ri_max_rgs;
            }
        }
        RiUnit {
            sessions: vec![Session::default(); r::RI_BLOCKS as usize],
            by_ctx: vec![NONE; MAX_CONTEXTS as usize],
            armed: 0,
            migrate_vm: 0,
            migrations: 0,
            versions,
            max_rgs,
        }
    }

    /// Every block unbound and disabled (device reset).
    pub fn reset(&mut self) {
        self.sessions.fill(Session::default());
        self.by_ctx.fill(NONE);
        self.armed = 0;
        self.migrate_vm = 0;
        self.migrations = 0;
    }

    /// Whether any block is enabled.
    #[inline]
    pub fn armed(&self) -> bool {
        self.armed != 0
    }

    /// Index of the block bound to `ctx`.
    pub fn block_of(&self, ctx: u32) -> Option<u32> {
        let i = *self.by_ctx.get(ctx as usize)?;
        (i != NONE).then_some(u32::from(i))
    }

    /// The enabled session watching `ctx`.
    #[inline]
    pub fn watching(&mut self, ctx: u32) -> Option<&mut Session> {
        if self.armed == 0 {
            return None;
        }
        let i = self.block_of(ctx)?;
        Some(&mut self.sessions[i as usize]).filter(|s| s.enabled())
    }

    /// Capability version of slot `p`.
    pub fn version(&self, p: u32) -> u8 {
        self.versions.get(p as usize).copied().unwrap_or(0)
    }

    /// The batch's view.
    pub fn shadow(&self) -> RiShadow {
        RiShadow {
            blocks: std::array::from_fn(|i| {
                let s = &self.sessions[i];
                BlockShadow {
                    ctx: s.ctx,
                    ctrl: s.ctrl,
                    roa: s.roa,
                    rla: s.rla,
                }
            }),
            migrate_vm: self.migrate_vm,
        }
    }

    /// Reads global register `offset`.
    pub fn read_global(&self, offset: u64) -> Option<RegValue> {
        if let Some(p) = slot_reg(offset, r::RI_PART_VERSION) {
            return r32(u32::from(self.versions[p]));
        }
        if let Some(p) = slot_reg(offset, r::RI_PART_MAX_RGS) {
            return r32(self.max_rgs[p]);
        }
        match offset {
            r::RI_COUNT => r32(r::RI_BLOCKS),
            r::RI_MAX_RGS => r32(r::RGS_MAX),
            r::RI_SPAN_BYTES => r32(u32::try_from(r::RI_SPAN).unwrap_or(u32::MAX)),
            r::RI_MIGRATE_VM => r32(self.migrate_vm),
            r::RI_MIGRATE => r32(0),
            r::RI_MIGRATIONS => r32(self.migrations),
            _ => None,
        }
    }

    /// Reads register `reg` of block `i`.
    pub fn read(&self, i: u32, reg: u64) -> Option<RegValue> {
        let s = self.sessions.get(i as usize)?;
        match reg {
            r::RI_CTX => r32(s.ctx),
            r::RI_CTRL => r32(s.ctrl),
            r::RI_STATUS => {
                let on = if s.enabled() { ri_status::ENABLED } else { 0 };
                r32(s.status | on)
            }
            r::RI_HALT_REASON => r32(s.halt),
            r::RI_SF => r32(s.sf),
            r::RI_RSIC => r32(s.rsic_reg()),
            r::RI_ROA => r32(s.roa),
            r::RI_RLA => r32(s.rla),
            r::RI_RCA => r32(s.rca),
            r::RI_EMIT => r32(0),
            r::RI_GROUPS => r64(s.groups),
            r::RI_SUPPRESSED => r64(s.suppressed),
            r::RI_OVERWRITTEN => r32(s.overwritten),
            r::RI_COLLECTED => r32(u32::try_from(s.collected()).unwrap_or(u32::MAX)),
            _ => None,
        }
    }

    /// Checks a write of `v` to global register `offset`.
    pub fn check_global(
        &self,
        offset: u64,
        v: u32,
        sh: &mut RiShadow,
        t: Tables<'_>,
    ) -> Result<RiWrite, Reject> {
        let bad = |m| Err(Reject::BadValue(m));
        match offset {
            r::RI_MIGRATE_VM if v == 0 || v >= MAX_VMS || t.vms.partition(v) == 0 => {
                bad("no such VM")
            }
            r::RI_MIGRATE_VM => {
                sh.migrate_vm = v;
                Ok(RiWrite::MigrateVm(v))
            }
            r::RI_MIGRATE => {
                let vm = sh.migrate_vm;
                let from = t.vms.partition(vm);
                if vm == 0 || from == 0 {
                    return bad("RI_MIGRATE_VM names no VM");
                }
                if v == 0 || v >= MAX_PARTITION_SLOTS || !t.parts.is_configured(v) {
                    return bad("the target partition is not configured");
                }
                if v == from {
                    return bad("the VM is bound to that partition already");
                }
                let part = t.parts.get(from);
                if part.current().0 == vm || part.incoming().0 == vm {
                    return bad("the VM is running or about to run on its partition");
                }
                Ok(RiWrite::Migrate { vm, to: v })
            }
            _ => Err(Reject::ReadOnly),
        }
    }

    /// Checks a write of `v` to register `reg` of block `i`.
    pub fn check_write(
        &self,
        i: u32,
        reg: u64,
        v: u32,
        sh: &mut RiShadow,
        t: Tables<'_>,
    ) -> Result<RiWrite, Reject> {
        let bad = |m| Err(Reject::BadValue(m));
        let b = sh.blocks[i as usize];
        let on = b.ctrl & ri_ctrl::ENABLE != 0;
        let span = u32::try_from(r::RI_SPAN).unwrap_or(u32::MAX);
        match reg {
            r::RI_EMIT => return Ok(RiWrite::Emit(i, v)),
            r::RI_CTRL => return self.check_ctrl(i, v, sh, t),
            r::RI_CTX | r::RI_SF | r::RI_RSIC | r::RI_ROA | r::RI_RLA if on => {
                return bad("writable only while the block is disabled")
            }
            _ => {}
        }
        let w = match reg {
            r::RI_CTX => {
                self.check_ctx(i, v, sh, t)?;
                sh.blocks[i as usize].ctx = v;
                RiWrite::Ctx(i, v)
            }
            r::RI_SF => RiWrite::Sf(i, v),
            r::RI_RSIC if v > r::SF_MAX => return bad("RSIC above SF_MAX"),
            r::RI_RSIC => RiWrite::Rsic(i, v),
            r::RI_ROA | r::RI_RLA if v >= span => return bad("outside the block's span"),
            r::RI_ROA => {
                sh.blocks[i as usize].roa = v;
                RiWrite::Roa(i, v)
            }
            r::RI_RLA => {
                sh.blocks[i as usize].rla = v;
                RiWrite::Rla(i, v)
            }
            _ => return Err(Reject::ReadOnly),
        };
        Ok(w)
    }

    fn check_ctx(&self, i: u32, v: u32, sh: &RiShadow, t: Tables<'_>) -> Result<(), Reject> {
        if v == 0 {
            return Ok(());
        }
        let c = t.ctxs.get(v);
        if v >= MAX_CONTEXTS || c.state != ctx_state::ACTIVE {
            return Err(Reject::BadValue("no such active context"));
        }
        if t.vms.confidential(c.vm) {
            return Err(Reject::BadValue(
                "a confidential VM's contexts have no program buffer",
            ));
        }
        let taken = sh
            .blocks
            .iter()
            .enumerate()
            .any(|(j, b)| b.ctx == v && j != i as usize);
        if taken {
            return Err(Reject::BadValue(
                "another control block watches the context",
            ));
        }
        Ok(())
    }

    fn check_ctrl(
        &self,
        i: u32,
        v: u32,
        sh: &mut RiShadow,
        t: Tables<'_>,
    ) -> Result<RiWrite, Reject> {
        let b = sh.blocks[i as usize];
        let bad = |m| Err(Reject::BadValue(m));
        if v & !ri_ctrl::ALL != 0 {
            return bad("undefined RI_CTRL bits");
        }
        let mode = mode_of(v);
        if mode > ri_mode::DIRECTED {
            return bad("unknown mode");
        }
        let was_on = b.ctrl & ri_ctrl::ENABLE != 0;
        if was_on {
            if v & !ri_ctrl::ENABLE != b.ctrl & !ri_ctrl::ENABLE {
                return bad("only ENABLE may change while the block is enabled");
            }
        } else if v & ri_ctrl::ENABLE != 0 {
            self.check_enable(v, b, t)?;
        }
        sh.blocks[i as usize].ctrl = v;
        Ok(RiWrite::Ctrl(i, v))
    }

    /// The whole control block, at the write that enables it.
    fn check_enable(&self, v: u32, b: BlockShadow, t: Tables<'_>) -> Result<(), Reject> {
        let bad = |m| Err(Reject::BadValue(m));
        if b.ctx == 0 || t.ctxs.get(b.ctx).state != ctx_state::ACTIVE {
            return bad("no active context bound");
        }
        if mode_of(v) == 0 {
            return bad("no mode");
        }
        let rgs = rgs_of(v);
        let p = t.vms.partition(t.ctxs.get(b.ctx).vm);
        if rgs > self.max_rgs.get(p as usize).copied().unwrap_or(0) {
            return bad("RGS above the partition's limit");
        }
        let size = group_bytes(rgs);
        if b.roa > b.rla {
            return bad("origin above limit");
        }
        if u64::from(b.roa) % size != 0 {
            return bad("origin not aligned to the group size");
        }
        if u64::from(b.rla) + 1 - u64::from(b.roa) < size {
            return bad("the buffer holds no group");
        }
        Ok(())
    }

    /// Executes a checked block write (the device synced what it must).
    pub fn apply(&mut self, w: RiWrite, version_of_ctx: u8) {
        match w {
            RiWrite::Ctx(i, v) => {
                let s = &mut self.sessions[i as usize];
                if let Some(old) = self.by_ctx.get_mut(s.ctx as usize).filter(|_| s.ctx != 0) {
                    *old = NONE;
                }
                s.ctx = v;
                if v != 0 {
                    self.by_ctx[v as usize] = u8::try_from(i).unwrap_or(NONE);
                }
            }
            RiWrite::Ctrl(i, v) => {
                let s = &mut self.sessions[i as usize];
                if v & ri_ctrl::ENABLE != 0 && !s.enabled() {
                    s.enable(v, version_of_ctx);
                } else {
                    s.ctrl = v;
                }
                self.armed = if v & ri_ctrl::ENABLE != 0 {
                    self.armed | 1 << i
                } else {
                    self.armed & !(1 << i)
                };
            }
            RiWrite::Sf(i, v) => self.sessions[i as usize].sf = v,
            RiWrite::Rsic(i, v) => self.sessions[i as usize].rsic = v,
            RiWrite::Roa(i, v) => self.sessions[i as usize].roa = v,
            RiWrite::Rla(i, v) => self.sessions[i as usize].rla = v,
            RiWrite::Emit(i, v) => self.sessions[i as usize].emit(v),
            RiWrite::MigrateVm(v) => self.migrate_vm = v,
            RiWrite::Migrate { .. } => self.migrations = self.migrations.wrapping_add(1),
        }
    }

    /// After VM `vm` moved to slot `to`: halts every enabled session of
    /// its contexts whose version or RGS the new partition does not match.
    pub fn migrated(&mut self, ctxs: &ContextTable, vm: u32, to: u32, now: u64) {
        let (version, max_rgs) = (self.version(to), self.max_rgs[to as usize]);
        for s in &mut self.sessions {
            let halted = s.status & ri_status::HALTED != 0;
            if !s.enabled() || halted || s.ctx == 0 || ctxs.get(s.ctx).vm != vm {
                continue;
            }
            if s.version != version {
                s.halt(halt_reason::VERSION, to, now);
            } else if s.rgs() > max_rgs {
                s.halt(halt_reason::RGS_LIMIT, to, now);
            }
        }
    }

    /// Context `ctx` stopped running (switched out).
    pub fn switched_out(&mut self, ctx: u32) {
        if let Some(s) = self.watching(ctx) {
            s.switched_out();
        }
    }

    /// Context `ctx`'s id was released: its block (if any) ends and unbinds.
    pub fn released(&mut self, ctx: u32) {
        if let Some(i) = self.block_of(ctx) {
            self.sessions[i as usize].unbind();
            self.by_ctx[ctx as usize] = NONE;
            self.armed &= !(1 << i);
        }
    }

    /// The interrupts raised since the last call, with their block.
    pub fn take_events(&mut self) -> Vec<UnitEvent> {
        let mut out = Vec::new();
        for (i, s) in self.sessions.iter_mut().enumerate() {
            let block = u32::try_from(i).unwrap_or(0);
            out.extend(
                s.events
                    .drain(..)
                    .map(|(src, p, arg2, c): RiEvent| (src, p, block, arg2, c)),
            );
        }
        out
    }

    /// Whether any session has interrupts waiting.
    pub fn has_events(&self) -> bool {
        self.sessions.iter().any(|s| !s.events.is_empty())
    }

    /// The ground truth of block `i`.
    pub fn truth(&self, i: u32) -> Option<RiLedgerQuery> {
        self.sessions.get(i as usize).map(|s| s.truth)
    }

    /// Block `i`'s session (tests and the window).
    pub fn session(&self, i: u32) -> Option<&Session> {
        self.sessions.get(i as usize)
    }

    /// Copies RI-region bytes at `within` (relative to `RI_REGION`).
    pub fn read_window(&self, within: u64, buf: &mut [u8]) -> Option<()> {
        let i = u32::try_from(within / r::RI_SPAN).ok()?;
        let s = self.sessions.get(i as usize)?;
        s.read(within % r::RI_SPAN, buf)
    }
}

/// Slot of a per-partition global register at `base + 4p`.
fn slot_reg(offset: u64, base: u64) -> Option<usize> {
    let rel = offset.checked_sub(base)?;
    let p = usize::try_from(rel / 4).ok()?;
    (rel % 4 == 0 && p < MAX_PARTITION_SLOTS as usize).then_some(p)
}
