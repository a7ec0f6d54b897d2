//! The sampling unit of one partition: a branch-record sampler and a cycle
//! sampler watching the running context's program, each writing its record
//! type into its own buffer ([`buffer`]).
//!
//! Registers, per partition slot (`uapi::sampling::samp(p, reg)`):
//! `SAMP_CTRL`, `SAMP_STATUS`, `SAMP_BRANCH_PERIOD`, `SAMP_CYCLE_PERIOD`,
//! `SAMP_CYCLE_DITHER`, `SAMP_SKID`, `SAMP_REFILL`, `SAMP_STACK_DEPTH`,
//! `SAMP_BRANCHES`, `SAMP_CYCLE_SAMPLES`, `SAMP_SPAN`,
//! `SAMP_MIN_BRANCH_GAP`, and per buffer `BUF_*`. See `docs/sampling.md`.
//!
//! A confidential VM's context is sampled on a schedule of its context
//! cycles alone, so that nothing the host reads (heads, counts, interrupts,
//! the envelopes' nonce counter) depends on what it executes: the cycle
//! sampler is time-driven anyway, and the branch sampler writes one stack
//! every N × [`CONFIDENTIAL_BRANCH_CYCLES`] + R context cycles (R dithered
//! below N × [`CONFIDENTIAL_BRANCH_CYCLES`] by the seeded generator)
//! instead of every N-th taken branch; its branches are not counted in
//! `SAMP_BRANCHES`.

pub mod buffer;
#[cfg(test)]
mod tests;
mod watcher;

use gpupm_uapi::sampling::{
    self as s, buf_kind, samp_ctrl, samp_status, BranchEntry, BRANCH_STACK_ENTRIES,
    CONFIDENTIAL_BRANCH_CYCLES,
};

use self::buffer::{BufEvent, BufWrite, Placement, SampleBuffer};
use super::access::{r32, r64, RegValue, Reject};
use super::rng;

pub use self::watcher::Watcher;

/// Random-draw domain of the cycle sampler's R.
const SAMPLE_DOMAIN: u64 = 0x5341_4D50;
/// Random-draw domain of the dither of confidential contexts' scheduled
/// branch stacks.
const STACK_DOMAIN: u64 = 0x5354_4B53;

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
    /// Context cycles of confidential contexts to the next scheduled
    /// branch stack.
    stack_due: u64,
    /// Scheduled branch stacks so far (the dither's draw ordinal).
    scheduled: u64,
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
            stack_due: stack_period(s::DEFAULT_BRANCH_PERIOD),
            scheduled: 0,
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
                    self.stack_due = self.stack_interval();
                }
            }
            SampWrite::BranchPeriod(v) => self.n = v,
            SampWrite::CyclePeriod(v) => self.p = v,
            SampWrite::Dither(v) => self.r_max = v,
            SampWrite::Buf(kind, w) => self.bufs[kind as usize].apply(w),
            SampWrite::LostSelect(v) => self.lost_select = v,
        }
    }

    /// Draws the context cycles to the next scheduled branch stack of a
    /// confidential context: N × `CONFIDENTIAL_BRANCH_CYCLES` + R, R
    /// uniform below N × `CONFIDENTIAL_BRANCH_CYCLES` from the seeded
    /// generator — time and the seed alone, and never in step with a loop
    /// whose period divides a fixed interval.
    fn stack_interval(&self) -> u64 {
        let period = stack_period(self.n);
        let r = rng::hash(
            self.seed,
            &[STACK_DOMAIN, u64::from(self.partition), self.scheduled],
        ) % period;
        period + r
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

/// The shortest interval, in context cycles, between two branch stacks of
/// confidential contexts at branch period `n`: N ×
/// [`CONFIDENTIAL_BRANCH_CYCLES`].
fn stack_period(n: u32) -> u64 {
    u64::from(n) * u64::from(CONFIDENTIAL_BRANCH_CYCLES)
}

/// (kind, register within the buffer's set) of a buffer register.
fn buf_reg(reg: u64) -> Option<(u32, u64)> {
    let rel = reg.checked_sub(s::SAMP_BUF_BRANCH)?;
    let kind = u32::try_from(rel / s::SAMP_BUF_STRIDE).ok()?;
    (kind < buf_kind::COUNT).then_some((kind, rel % s::SAMP_BUF_STRIDE))
}
