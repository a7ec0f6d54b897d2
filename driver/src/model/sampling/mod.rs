//! The sampling unit of one partition (seeds 004 and 001): a branch-record
//! sampler and a cycle sampler watching the running context's program,
//! each writing its record type into its own buffer ([`buffer`]).
//!
//! Registers, per partition slot (`uapi::sampling::samp(p, reg)`):
//! `SAMP_CTRL`, `SAMP_STATUS`, `SAMP_BRANCH_PERIOD`, `SAMP_CYCLE_PERIOD`,
//! `SAMP_CYCLE_DITHER`, `SAMP_SKID`, `SAMP_REFILL`, `SAMP_STACK_DEPTH`,
//! `SAMP_BRANCHES`, `SAMP_CYCLE_SAMPLES`, `SAMP_SPAN`,
//! `SAMP_MIN_BRANCH_GAP`, and per buffer `BUF_*`. See `docs/sampling.md`.

pub mod buffer;

use gpupm_uapi::sampling::{
    self as s, buf_kind, samp_ctrl, samp_status, sample_flags, BranchEntry, BranchStackRecord,
    PcRecord, BRANCH_RECORD_MAGIC, BRANCH_STACK_ENTRIES, PC_RECORD_MAGIC,
};
use zerocopy::{FromZeros, IntoBytes};

use self::buffer::{BufEvent, BufWrite, Placement, SampleBuffer};
use super::access::{r32, r64, RegValue, Reject};
use super::cc::VmCipher;
use super::program::run::{Env, Quantity, Visit, Watch, Window};
use super::rng;

/// Random-draw domain of the cycle sampler's R.
const SAMPLE_DOMAIN: u64 = 0x5341_4D50;

/// The batch's view of a sampling unit.
#[derive(Clone, Copy, Debug, Default)]
pub struct SampShadow {
    /// `SAMP_CTRL`.
    pub ctrl: u32,
    /// Buffer placements by kind.
    pub bufs: [Placement; 2],
}

/// Whether `v` is a valid `SAMP_LOST_SELECT` value.
fn valid_lost_select(v: u32) -> bool {
    use gpupm_uapi::regs::{MAX_CONTEXTS, MAX_VMS};
    use gpupm_uapi::sampling::lost_select;
    let id = v & lost_select::ID_MASK;
    let defined = v & !(lost_select::VM | lost_select::ID_MASK) == 0;
    let limit = if v & lost_select::VM != 0 {
        MAX_VMS
    } else {
        MAX_CONTEXTS
    };
    defined && id < limit
}

/// A checked write.
#[derive(Clone, Copy, Debug)]
pub enum SampWrite {
    /// `SAMP_CTRL`.
    Ctrl(u32),
    /// `SAMP_BRANCH_PERIOD`.
    BranchPeriod(u32),
    /// `SAMP_CYCLE_PERIOD`.
    CyclePeriod(u32),
    /// `SAMP_CYCLE_DITHER`.
    Dither(u32),
    /// A buffer register of buffer `kind`.
    Buf(u32, BufWrite),
    /// `SAMP_LOST_SELECT`.
    LostSelect(u32),
}

/// A sample-buffer interrupt waiting to be raised: (kind, event, device cycle).
pub type PendingEvent = (u32, BufEvent, u64);

/// One partition's sampling unit.
#[derive(Clone, Debug)]
pub struct Sampler {
    partition: u32,
    configured: bool,
    ctrl: u32,
    n: u32,
    p: u32,
    r_max: u32,
    min_branch_gap: u32,
    lost_select: u32,
    branches: u64,
    samples: u64,
    stack: Vec<BranchEntry>,
    stack_owner: u64,
    since_capture: u32,
    remaining: u64,
    interval: u32,
    seed: u64,
    bufs: [SampleBuffer; 2],
    /// Interrupts the last walk raised, for the device to deliver.
    pub events: Vec<PendingEvent>,
}

impl Sampler {
    /// The unit of partition slot `p`; `configured` if it runs programs.
    pub fn new(p: u32, configured: bool, min_branch_gap: u64, seed: u64) -> Self {
        Sampler {
            partition: p,
            configured,
            ctrl: 0,
            n: s::DEFAULT_BRANCH_PERIOD,
            p: s::DEFAULT_CYCLE_PERIOD,
            r_max: s::DEFAULT_DITHER,
            min_branch_gap: u32::try_from(min_branch_gap).unwrap_or(u32::MAX),
            lost_select: 0,
            branches: 0,
            samples: 0,
            stack: Vec::with_capacity(BRANCH_STACK_ENTRIES),
            stack_owner: u64::MAX,
            since_capture: 0,
            remaining: 0,
            interval: 0,
            seed,
            bufs: [
                SampleBuffer::new(buf_kind::BRANCH),
                SampleBuffer::new(buf_kind::PC),
            ],
            events: Vec::new(),
        }
    }

    /// Whether any sampler is enabled.
    #[inline]
    pub fn armed(&self) -> bool {
        self.ctrl != 0
    }

    /// Empties the buffers and disables both samplers (device reset).
    pub fn reset(&mut self) {
        let (p, configured, gap, seed) = (
            self.partition,
            self.configured,
            self.min_branch_gap,
            self.seed,
        );
        let bufs = self.bufs.clone();
        *self = Sampler::new(p, configured, u64::from(gap), seed);
        self.bufs = bufs;
        self.bufs.iter_mut().for_each(SampleBuffer::clear);
    }

    /// The batch's view.
    pub fn shadow(&self) -> SampShadow {
        SampShadow {
            ctrl: self.ctrl,
            bufs: [self.bufs[0].placement(), self.bufs[1].placement()],
        }
    }

    /// Reads register `reg` of the block.
    pub fn read(&self, reg: u64) -> Option<RegValue> {
        if !self.configured {
            return (reg == s::SAMP_STATUS).then_some(RegValue::R32(0));
        }
        if let Some((kind, r)) = buf_reg(reg) {
            return self.bufs[kind as usize].read_reg(self.partition, r, self.lost_select);
        }
        match reg {
            s::SAMP_CTRL => r32(self.ctrl),
            s::SAMP_STATUS => r32(samp_status::CONFIGURED),
            s::SAMP_BRANCH_PERIOD => r32(self.n),
            s::SAMP_CYCLE_PERIOD => r32(self.p),
            s::SAMP_CYCLE_DITHER => r32(self.r_max),
            s::SAMP_SKID => r32(s::SKID_CYCLES),
            s::SAMP_REFILL => r32(s::REFILL_CYCLES),
            s::SAMP_STACK_DEPTH => r32(u32::try_from(BRANCH_STACK_ENTRIES).unwrap_or(0)),
            s::SAMP_BRANCHES => r64(self.branches),
            s::SAMP_CYCLE_SAMPLES => r64(self.samples),
            s::SAMP_SPAN => r32(u32::try_from(s::SAMPLE_SPAN).unwrap_or(u32::MAX)),
            s::SAMP_MIN_BRANCH_GAP => r32(self.min_branch_gap),
            s::SAMP_LOST_SELECT => r32(self.lost_select),
            _ => None,
        }
    }

    /// Checks a write of `v` to `reg` against the batch's view `sh`.
    pub fn check_write(&self, reg: u64, v: u32, sh: &mut SampShadow) -> Result<SampWrite, Reject> {
        if !self.configured || self.read(reg).is_none() {
            return Err(Reject::ReadOnly);
        }
        if let Some((kind, r)) = buf_reg(reg) {
            let enable = [samp_ctrl::BRANCH_ENABLE, samp_ctrl::CYCLE_ENABLE][kind as usize];
            let k = kind as usize;
            let other = sh.bufs[1 - k];
            let w =
                self.bufs[k].check_write(r, v, &mut sh.bufs[k], other, sh.ctrl & enable != 0)?;
            return Ok(SampWrite::Buf(kind, w));
        }
        let bad = |m| Err(Reject::BadValue(m));
        match reg {
            s::SAMP_CTRL if v & !samp_ctrl::ALL != 0 => bad("undefined SAMP_CTRL bits"),
            s::SAMP_CTRL if v & samp_ctrl::BRANCH_ENABLE != 0 && sh.bufs[0].cap == 0 => {
                bad("the branch-stack buffer has no capacity")
            }
            s::SAMP_CTRL if v & samp_ctrl::CYCLE_ENABLE != 0 && sh.bufs[1].cap == 0 => {
                bad("the PC buffer has no capacity")
            }
            s::SAMP_CTRL => {
                sh.ctrl = v;
                Ok(SampWrite::Ctrl(v))
            }
            s::SAMP_BRANCH_PERIOD if !(1..=s::BRANCH_PERIOD_MAX).contains(&v) => {
                bad("N must lie in 1..=BRANCH_PERIOD_MAX")
            }
            s::SAMP_BRANCH_PERIOD => Ok(SampWrite::BranchPeriod(v)),
            s::SAMP_CYCLE_PERIOD if !(s::CYCLE_PERIOD_MIN..=s::CYCLE_PERIOD_MAX).contains(&v) => {
                bad("P must lie in CYCLE_PERIOD_MIN..=CYCLE_PERIOD_MAX")
            }
            s::SAMP_CYCLE_PERIOD => Ok(SampWrite::CyclePeriod(v)),
            s::SAMP_CYCLE_DITHER if v > s::DITHER_MAX => bad("R_MAX must lie in 0..=4095"),
            s::SAMP_CYCLE_DITHER => Ok(SampWrite::Dither(v)),
            s::SAMP_LOST_SELECT if !valid_lost_select(v) => {
                bad("SAMP_LOST_SELECT names a context or (with bit 31) a VM id in range")
            }
            s::SAMP_LOST_SELECT => Ok(SampWrite::LostSelect(v)),
            _ => Err(Reject::ReadOnly),
        }
    }

    /// Executes a checked write (the partition was counted up to now).
    pub fn apply(&mut self, w: SampWrite) {
        match w {
            SampWrite::Ctrl(v) => {
                let newly = v & !self.ctrl;
                self.ctrl = v;
                if newly & samp_ctrl::CYCLE_ENABLE != 0 {
                    self.draw_interval();
                }
                if newly & samp_ctrl::BRANCH_ENABLE != 0 {
                    self.since_capture = 0;
                }
            }
            SampWrite::BranchPeriod(v) => self.n = v,
            SampWrite::CyclePeriod(v) => self.p = v,
            SampWrite::Dither(v) => self.r_max = v,
            SampWrite::Buf(kind, w) => self.bufs[kind as usize].apply(w),
            SampWrite::LostSelect(v) => self.lost_select = v,
        }
    }

    /// Draws the next interval P + R + S − A (R from the seeded generator).
    fn draw_interval(&mut self) {
        let r = rng::hash(
            self.seed,
            &[SAMPLE_DOMAIN, u64::from(self.partition), self.samples],
        ) % (u64::from(self.r_max) + 1);
        let interval =
            u64::from(self.p) + r + u64::from(s::SKID_CYCLES) - u64::from(s::REFILL_CYCLES);
        self.interval = u32::try_from(interval).unwrap_or(u32::MAX);
        self.remaining = interval;
    }

    /// Copies window bytes of buffer `kind` at `within` its first slot.
    pub fn read_buffer(&self, within_span: u64, buf: &mut [u8]) -> Option<()> {
        let end = within_span.checked_add(u64::try_from(buf.len()).ok()?)?;
        self.bufs.iter().find_map(|b| {
            let r = b.span_range();
            (r.start <= within_span && end <= r.end).then(|| b.read(within_span - r.start, buf))?
        })
    }
}

/// (kind, register within the buffer's set) of a buffer register.
fn buf_reg(reg: u64) -> Option<(u32, u64)> {
    let rel = reg.checked_sub(s::SAMP_BUF_BRANCH)?;
    let kind = u32::try_from(rel / s::SAMP_BUF_STRIDE).ok()?;
    (kind < buf_kind::COUNT).then_some((kind, rel % s::SAMP_BUF_STRIDE))
}

/// The sampling unit watching one context's walk through one span.
#[derive(Debug)]
pub struct Watcher<'a> {
    /// The unit.
    pub unit: &'a mut Sampler,
    /// The running context.
    pub ctx: u32,
    /// Its VM.
    pub vm: u32,
    /// Its serial (the branch stack holds only its branches).
    pub serial: u64,
    /// The span.
    pub env: Env<'a>,
    /// The VM's cipher when confidential.
    pub cipher: Option<&'a mut VmCipher>,
}

impl Watcher<'_> {
    fn flags(&self, ctx_cycle: u64) -> u16 {
        if self.env.secondary(ctx_cycle) {
            sample_flags::SECONDARY_CLOCK
        } else {
            0
        }
    }

    fn store(&mut self, kind: u32, bytes: &[u8], at: u64) {
        let buf = &mut self.unit.bufs[kind as usize];
        if let Some(ev) = buf.push(bytes, (self.vm, self.ctx), self.cipher.as_deref_mut()) {
            self.unit.events.push((kind, ev, at));
        }
    }
}

impl Watcher<'_> {
    /// A cycle sample at context cycle `at`, in block `block` of `kernel`.
    fn pc_sample(&mut self, at: u64, kernel: u16, block: u16) {
        let cycle = self.env.device_cycle(at);
        let rec = PcRecord {
            magic: PC_RECORD_MAGIC,
            partition: u16::try_from(self.unit.partition).unwrap_or(0),
            flags: self.flags(at),
            vm: self.vm,
            ctx: self.ctx,
            seq: self.unit.bufs[1].produced() + 1,
            cycle,
            ctx_cycle: at,
            kernel,
            block,
            interval: self.unit.interval,
        };
        self.store(buf_kind::PC, rec.as_bytes(), cycle);
        self.unit.samples += 1;
        self.unit.draw_interval();
    }

    /// A branch record of `stack` (oldest first; the newest entry is the
    /// capturing branch, the context's `branches`-th).
    fn branch_record(&mut self, stack: &[BranchEntry], branches: u64) {
        let Some(newest) = stack.last() else {
            return;
        };
        let mut rec = BranchStackRecord::new_zeroed();
        rec.magic = BRANCH_RECORD_MAGIC;
        rec.partition = u16::try_from(self.unit.partition).unwrap_or(0);
        rec.vm = self.vm;
        rec.ctx = self.ctx;
        rec.seq = self.unit.bufs[0].produced() + 1;
        rec.cycle = self.env.device_cycle(newest.cycle);
        rec.branches = branches;
        rec.count = u32::try_from(stack.len()).unwrap_or(0);
        rec.entries[..stack.len()].copy_from_slice(stack);
        rec.flags = self.flags(newest.cycle);
        let cycle = rec.cycle;
        self.store(buf_kind::BRANCH, rec.as_bytes(), cycle);
    }

    /// The stack's last entries followed by `newer` (the newest 32), into
    /// `out`.
    fn stack_with(&self, newer: &[BranchEntry], out: &mut Vec<BranchEntry>) {
        let old = &self.unit.stack;
        let keep = BRANCH_STACK_ENTRIES
            .saturating_sub(newer.len())
            .min(old.len());
        out.clear();
        out.extend_from_slice(&old[old.len() - keep..]);
        out.extend_from_slice(&newer[newer.len().saturating_sub(BRANCH_STACK_ENTRIES)..]);
    }

    /// The cycle samples that fall in the first `n` iterations of `w`:
    /// each in the visit its path runs at that cycle.
    fn skipped_cycles(&mut self, w: &Window<'_>, n: u64) {
        let total = w.sum(Quantity::Cycles, n);
        let mut at = self.unit.remaining;
        while at <= total {
            let Some((i, before)) = w.find(Quantity::Cycles, at, n) else {
                break;
            };
            let v = w.path(i).visit_at(at - before);
            self.pc_sample(w.start + at, v.kernel, v.block);
            at += self.unit.remaining;
        }
        self.unit.remaining = at - total;
    }

    /// The taken branches of the first `n` iterations of `w`: the
    /// captures among them, with their stacks from the paths, and the
    /// stack they leave.
    fn skipped_branches(&mut self, w: &Window<'_>, n: u64) {
        let total = w.sum(Quantity::Branches, n);
        if total == 0 {
            return;
        }
        if self.unit.stack_owner != self.serial {
            self.unit.stack.clear();
            self.unit.stack_owner = self.serial;
        }
        let period = u64::from(self.unit.n);
        let depth = BRANCH_STACK_ENTRIES as u64;
        let mut entries = Vec::with_capacity(BRANCH_STACK_ENTRIES);
        let mut stack = Vec::with_capacity(BRANCH_STACK_ENTRIES);
        // A period written below the count so far captures at the next branch.
        let mut k = period
            .saturating_sub(u64::from(self.unit.since_capture))
            .max(1);
        let mut since = u64::from(self.unit.since_capture) + total;
        while k <= total {
            w.branch_entries(k, k.min(depth), &mut entries);
            self.stack_with(&entries, &mut stack);
            self.branch_record(&stack, w.branches + k);
            since = total - k;
            k += period;
        }
        self.unit.branches += total;
        self.unit.since_capture = u32::try_from(since).unwrap_or(u32::MAX);
        w.branch_entries(total, total.min(depth), &mut entries);
        self.stack_with(&entries, &mut stack);
        self.unit.stack = stack;
    }
}

impl Watch for Watcher<'_> {
    fn ran(&mut self, from: u64, to: u64, kernel: u16, block: u16) {
        if self.unit.ctrl & samp_ctrl::CYCLE_ENABLE == 0 {
            return;
        }
        let mut at = from;
        while to - at >= self.unit.remaining {
            at += self.unit.remaining;
            self.pc_sample(at, kernel, block);
        }
        self.unit.remaining -= to - at;
    }

    fn taken(&mut self, entry: BranchEntry, branches: u64) {
        if self.unit.ctrl & samp_ctrl::BRANCH_ENABLE == 0 {
            return;
        }
        let unit = &mut *self.unit;
        if unit.stack_owner != self.serial {
            unit.stack.clear();
            unit.stack_owner = self.serial;
        }
        if unit.stack.len() == BRANCH_STACK_ENTRIES {
            unit.stack.remove(0);
        }
        unit.stack.push(entry);
        unit.branches += 1;
        unit.since_capture += 1;
        if unit.since_capture < unit.n {
            return;
        }
        unit.since_capture = 0;
        let stack = std::mem::take(&mut unit.stack);
        self.branch_record(&stack, branches);
        self.unit.stack = stack;
    }

    /// Everything: samples and branch records inside the iterations are
    /// taken from their paths.
    fn admit(&mut self, window: &Window<'_>) -> u64 {
        window.len()
    }

    fn skipped(&mut self, window: &Window<'_>, n: u64, _latch: &Visit) {
        if self.unit.ctrl & samp_ctrl::CYCLE_ENABLE != 0 {
            self.skipped_cycles(window, n);
        }
        if self.unit.ctrl & samp_ctrl::BRANCH_ENABLE != 0 {
            self.skipped_branches(window, n);
        }
    }
}
