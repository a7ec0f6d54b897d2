//! One control block's session: the sample-point countdown, the 32-entry
//! collection buffer, report-group assembly and the program buffer with
//! its origin, limit and current address.

use std::collections::VecDeque;

use gpupm_uapi::intr::source;
use gpupm_uapi::ioctl::RiLedgerQuery;
use gpupm_uapi::layout::{
    ri_emit_source, ri_group_flags, ri_record, ri_sample_flags, RiAbortRecord, RiBeginRecord,
    RiEmitRecord, RiInstructionRecord, RiTimestampRecord,
};
use gpupm_uapi::ri::{
    group_bytes, halt_reason, ri_ctrl, ri_mode, ri_status, COLLECTION_ENTRIES, RI_RECORD_SIZE,
    SF_MAX, SF_MIN_CYCLES, SF_MIN_INSTRUCTIONS,
};
use zerocopy::IntoBytes;

/// Bytes of one record, as a length.
const RECORD: usize = 16;
const _: () = assert!(RECORD as u64 == RI_RECORD_SIZE);

/// One 16-byte record.
pub type Record = [u8; RECORD];

/// An interrupt a session raised: (source, partition, arg2, device cycle);
/// `arg` is the block index, added by the unit.
pub type RiEvent = (u32, u32, u32, u64);

/// Where a sample point (or an abort, or an emit) happened.
#[derive(Clone, Copy, Debug, Default)]
pub struct Point {
    /// Kernel.
    pub kernel: u16,
    /// Block.
    pub block: u16,
    /// Context cycle.
    pub ctx_cycle: u64,
    /// Device cycle.
    pub dev_cycle: u64,
    /// Partition slot the context runs on.
    pub partition: u32,
    /// Clock at secondary capability.
    pub secondary: bool,
    /// Instructions the context retired up to here.
    pub retired: u64,
}

/// A control block's registers and session state.
#[derive(Clone, Debug, Default)]
pub struct Session {
    /// `RI_CTX`.
    pub ctx: u32,
    /// `RI_CTRL`.
    pub ctrl: u32,
    /// `RI_SF` as written.
    pub sf: u32,
    /// `RI_RSIC` as written (the first interval of the next session).
    pub rsic: u32,
    /// `RI_ROA`.
    pub roa: u32,
    /// `RI_RLA`.
    pub rla: u32,
    /// `RI_RCA`.
    pub rca: u32,
    /// `RI_STATUS` bits other than `ENABLED`.
    pub status: u32,
    /// `RI_HALT_REASON`.
    pub halt: u32,
    /// NRG.
    pub groups: u64,
    /// Suppressed sample points.
    pub suppressed: u64,
    /// Collection records overwritten (the register).
    pub overwritten: u32,
    /// Version of the partition the session began on.
    pub version: u8,
    /// The SF in force (clamped at enable).
    sf_eff: u64,
    /// Units left in the current interval.
    countdown: u64,
    collection: VecDeque<Record>,
    /// Marker-block entries since the session began.
    markers: u64,
    /// Where the context was last seen running.
    pub last: Point,
    /// The block's span bytes `0..=RLA` (allocated at enable).
    memory: Vec<u8>,
    /// Ground truth.
    pub truth: RiLedgerQuery,
    /// Interrupts raised, for the unit to deliver.
    pub events: Vec<RiEvent>,
}

impl Session {
    /// Whether a session runs.
    #[inline]
    pub fn enabled(&self) -> bool {
        self.ctrl & ri_ctrl::ENABLE != 0
    }

    /// The mode field.
    pub fn mode(&self) -> u32 {
        mode_of(self.ctrl)
    }

    /// The RGS field.
    pub fn rgs(&self) -> u32 {
        rgs_of(self.ctrl)
    }

    fn stopped_or_halted(&self) -> bool {
        self.status & (ri_status::STOPPED | ri_status::HALTED) != 0
    }

    /// The live countdown while enabled, else RSIC as written.
    pub fn rsic_reg(&self) -> u32 {
        if self.enabled() && self.mode() != ri_mode::DIRECTED {
            u32::try_from(self.countdown).unwrap_or(u32::MAX)
        } else {
            self.rsic
        }
    }

    /// Entries in the collection buffer.
    pub fn collected(&self) -> usize {
        self.collection.len()
    }

    /// Starts a session with control `ctrl` (checked) on a partition of
    /// capability `version`.
    pub fn enable(&mut self, ctrl: u32, version: u8) {
        self.ctrl = ctrl;
        self.status = 0;
        self.halt = halt_reason::NONE;
        self.rca = self.roa;
        self.groups = 0;
        self.suppressed = 0;
        self.overwritten = 0;
        self.version = version;
        self.markers = 0;
        self.collection.clear();
        let min = if self.mode() == ri_mode::INSTRUCTION {
            SF_MIN_INSTRUCTIONS
        } else {
            SF_MIN_CYCLES
        };
        self.sf_eff = u64::from(self.sf.max(1).clamp(min, SF_MAX));
        self.countdown = match self.rsic {
            0 => self.sf_eff,
            r => u64::from(r.min(SF_MAX)),
        };
        let len = usize::try_from(self.rla).unwrap_or(0) + 1;
        self.memory.clear();
        self.memory.resize(len, 0);
        self.truth = RiLedgerQuery {
            ctx: self.ctx,
            ..RiLedgerQuery::default()
        };
    }

    /// Reads `buf.len()` bytes of the span at `at`; `None` outside
    /// `0..=RLA` of an enabled-once session (bytes never written read 0).
    pub fn read(&self, at: u64, buf: &mut [u8]) -> Option<()> {
        let start = usize::try_from(at).ok()?;
        let end = start.checked_add(buf.len())?;
        if end > usize::try_from(gpupm_uapi::ri::RI_SPAN).ok()? {
            return None;
        }
        buf.fill(0);
        if start < self.memory.len() {
            let n = end.min(self.memory.len()) - start;
            buf[..n].copy_from_slice(&self.memory[start..start + n]);
        }
        Some(())
    }

    /// Bytes of the span ever allocated (tests: nothing outside ROA..=RLA).
    pub fn memory(&self) -> &[u8] {
        &self.memory
    }

    fn collect(&mut self, rec: Record) {
        if self.collection.len() == COLLECTION_ENTRIES {
            self.collection.pop_front();
            self.overwritten = self.overwritten.saturating_add(1);
            self.truth.overwritten += 1;
        }
        self.collection.push_back(rec);
    }

    /// RIEMIT: collects `value` (a no-op unless enabled with `EMIT` and
    /// not halted).
    pub fn emit(&mut self, value: u32) {
        if !self.enabled() || self.ctrl & ri_ctrl::EMIT == 0 || self.status & ri_status::HALTED != 0
        {
            return;
        }
        let rec = RiEmitRecord {
            kind: ri_record::EMIT,
            source: ri_emit_source::REGISTER,
            kernel: self.last.kernel,
            block: self.last.block,
            reserved: 0,
            data: u64::from(value),
        };
        self.truth.emits_register += 1;
        self.collect(to_record(rec.as_bytes()));
    }

    /// The context entered a marker block at `at`.
    pub fn marker(&mut self, at: Point) {
        self.markers += 1;
        if self.ctrl & ri_ctrl::EMIT != 0 && self.status & ri_status::HALTED == 0 {
            let rec = RiEmitRecord {
                kind: ri_record::EMIT,
                source: ri_emit_source::MARKER,
                kernel: at.kernel,
                block: at.block,
                reserved: 0,
                data: self.markers,
            };
            self.truth.emits_marker += 1;
            self.collect(to_record(rec.as_bytes()));
        }
        if self.mode() == ri_mode::DIRECTED {
            self.sample(at, true);
        }
    }

    /// `n` marker-block entries that neither emit nor sample (the session
    /// has neither `EMIT` nor directed mode): only their count moves.
    pub fn markers_passed(&mut self, n: u64) {
        self.markers += n;
    }

    /// Whether a marker-block entry is an observation: it emits a record
    /// or is a directed sample point.
    pub fn markers_observed(&self) -> bool {
        self.ctrl & ri_ctrl::EMIT != 0 || self.mode() == ri_mode::DIRECTED
    }

    /// The context stopped running at `self.last` (switched out).
    pub fn switched_out(&mut self) {
        if !self.enabled() || self.ctrl & ri_ctrl::ABORT == 0 || self.stopped_or_halted() {
            return;
        }
        let rec = RiAbortRecord {
            kind: ri_record::ABORT,
            reserved: 0,
            kernel: self.last.kernel,
            block: self.last.block,
            partition: u16::try_from(self.last.partition).unwrap_or(0),
            ctx_cycle: self.last.ctx_cycle,
        };
        self.truth.aborts += 1;
        self.collect(to_record(rec.as_bytes()));
    }

    /// Counts `n` units (cycles or instructions) down; returns how many of
    /// them remain after the next sample point, or `None` if none falls in
    /// them (the countdown took them all).
    #[inline]
    pub fn count(&mut self, n: u64) -> Option<u64> {
        if n < self.countdown {
            self.countdown -= n;
            return None;
        }
        let rest = n - self.countdown;
        self.countdown = self.sf_eff;
        Some(rest)
    }

    /// Units left before the next sample point.
    #[inline]
    pub fn countdown(&self) -> u64 {
        self.countdown
    }

    /// A sample point at `at`: stores a report group unless the session
    /// is halted or stopped, or the group is suppressed.
    pub fn sample(&mut self, at: Point, directed: bool) {
        self.truth.sample_points += 1;
        self.truth.last_sample_ctx_cycle = at.ctx_cycle;
        self.truth.last_sample_retired = at.retired;
        if self.stopped_or_halted() {
            self.truth.not_stored += 1;
            return;
        }
        if at.secondary && self.ctrl & ri_ctrl::SUPPRESS_SECONDARY != 0 {
            self.truth.suppressed_secondary += 1;
            self.suppressed += 1;
            return;
        }
        if !at.secondary && self.ctrl & ri_ctrl::SUPPRESS_PRIMARY != 0 {
            self.truth.suppressed_primary += 1;
            self.suppressed += 1;
            return;
        }
        let size = group_bytes(self.rgs());
        if u64::from(self.rca) + size > u64::from(self.rla) + 1 {
            self.raise(source::RI_BUFFER_FULL, at.partition, self.ctx, at.dev_cycle);
            self.status |= ri_status::FULL_PENDING;
            if self.ctrl & ri_ctrl::WRAP == 0 {
                self.status |= ri_status::STOPPED;
                self.refresh_begin();
                self.truth.not_stored += 1;
                return;
            }
            self.rca = self.roa;
        }
        self.store_group(at, directed);
    }

    /// Halts the session for `reason` (the VM moved to partition `p`).
    pub fn halt(&mut self, reason: u32, p: u32, now: u64) {
        self.status |= ri_status::HALTED | ri_status::HALT_PENDING;
        self.halt = reason;
        self.refresh_begin();
        self.raise(source::RI_HALT, p, reason, now);
    }

    fn raise(&mut self, src: u32, partition: u32, arg2: u32, cycle: u64) {
        if self.ctrl & ri_ctrl::INTR_ENABLE != 0 {
            self.events.push((src, partition, arg2, cycle));
        }
    }

    fn group_flags(&self, secondary: bool) -> u8 {
        let mut f = if secondary {
            ri_group_flags::SECONDARY
        } else {
            0
        };
        if self.status & ri_status::STOPPED != 0 {
            f |= ri_group_flags::STOPPED;
        }
        if self.status & ri_status::HALTED != 0 {
            f |= ri_group_flags::HALTED;
        }
        f
    }

    fn store_group(&mut self, at: Point, directed: bool) {
        let records = 1usize << (self.rgs() + 1);
        self.groups += 1;
        self.truth.stored += 1;
        let nrg = u32::try_from(self.groups).unwrap_or(u32::MAX);
        let first = if self.rca == self.roa {
            to_record(
                RiBeginRecord {
                    kind: ri_record::BEGIN,
                    flags: self.group_flags(at.secondary),
                    rgs: u8::try_from(self.rgs()).unwrap_or(0),
                    version: self.version,
                    groups: nrg,
                    time: at.dev_cycle,
                }
                .as_bytes(),
            )
        } else {
            let t = if at.secondary {
                ri_group_flags::SECONDARY
            } else {
                0
            };
            to_record(
                RiTimestampRecord {
                    kind: ri_record::TIMESTAMP,
                    flags: t,
                    reserved: 0,
                    version: self.version,
                    group: nrg,
                    time: at.dev_cycle,
                }
                .as_bytes(),
            )
        };
        let body = records - 2;
        let skip = self.collection.len().saturating_sub(body);
        self.truth.overwritten += u64::try_from(skip).unwrap_or(0);
        self.overwritten = self
            .overwritten
            .saturating_add(u32::try_from(skip).unwrap_or(u32::MAX));
        let mut flags = if directed {
            ri_sample_flags::DIRECTED
        } else {
            0
        };
        if at.secondary {
            flags |= ri_sample_flags::SECONDARY;
        }
        let last = to_record(
            RiInstructionRecord {
                kind: ri_record::INSTRUCTION,
                flags,
                kernel: at.kernel,
                block: at.block,
                partition: u16::try_from(at.partition).unwrap_or(0),
                ctx_cycle: at.ctx_cycle,
            }
            .as_bytes(),
        );
        let base = usize::try_from(self.rca).unwrap_or(0);
        let rec = RECORD;
        let group = &mut self.memory[base..base + records * rec];
        group.fill(0);
        group[..rec].copy_from_slice(&first);
        for (i, r) in self.collection.iter().skip(skip).enumerate() {
            group[(1 + i) * rec..(2 + i) * rec].copy_from_slice(r);
        }
        group[(records - 1) * rec..].copy_from_slice(&last);
        self.collection.clear();
        self.rca += u32::try_from(records * rec).unwrap_or(0);
        self.refresh_begin();
    }

    /// Rewrites NRG, S and H of the begin record at ROA, so that it always
    /// holds the current group count and stop and halt bits.
    fn refresh_begin(&mut self) {
        let at = usize::try_from(self.roa).unwrap_or(0);
        if self.groups == 0 || self.memory.get(at) != Some(&ri_record::BEGIN) {
            return;
        }
        let keep = self.memory[at + 1] & ri_group_flags::SECONDARY;
        self.memory[at + 1] = keep | self.group_flags(false);
        let nrg = u32::try_from(self.groups).unwrap_or(u32::MAX);
        self.memory[at + 4..at + 8].copy_from_slice(&nrg.to_le_bytes());
    }

    /// Ends the session and forgets the context (its id was released).
    pub fn unbind(&mut self) {
        self.ctrl &= !ri_ctrl::ENABLE;
        self.ctx = 0;
    }
}

/// The mode field of a control value.
pub fn mode_of(ctrl: u32) -> u32 {
    (ctrl & ri_ctrl::MODE_MASK) >> ri_ctrl::MODE_SHIFT
}

/// The RGS field of a control value.
pub fn rgs_of(ctrl: u32) -> u32 {
    (ctrl & ri_ctrl::RGS_MASK) >> ri_ctrl::RGS_SHIFT
}

fn to_record(bytes: &[u8]) -> Record {
    let mut r = [0; RECORD];
    r.copy_from_slice(bytes);
    r
}
