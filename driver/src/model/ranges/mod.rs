//! The marked-range unit of one partition: eight range registers, each a
//! code range (blocks of one kernel of one program) or a data-address
//! range, counting entries and one event inside the range; thresholds on
//! the count or on one entry's latency write a record with the context's
//! call stack into the partition's ring ([`ring`]) and raise
//! `RANGE_THRESHOLD`. The counting itself watches the program walk
//! ([`watch`]); per context it keeps the exact ledger the debug node reads.
//!
//! Registers: per range `RANGE_CTRL`, `RANGE_START`, `RANGE_END`,
//! `RANGE_THRESHOLD`, `RANGE_ENTRIES`, `RANGE_COUNT`
//! (`uapi::ranges::range_reg(p, i, reg)`); per partition `RRING_CAP`,
//! `RRING_HEAD`, `RRING_TAIL`, `RRING_LOST` (`uapi::ranges::rring(p, reg)`).
//! See `docs/ranges.md`.

pub mod ring;
#[cfg(test)]
mod tests;
pub mod watch;

use std::collections::HashMap;

use gpupm_uapi::ranges::{
    self as rg, range_ctrl, range_event, RangeTruth, RANGES_PER_PARTITION, RANGE_REG_STRIDE,
};

use self::ring::RecordRing;
use self::watch::{Cursor, Pending};
use super::access::{r32, r64, RegValue, Reject};
use super::program::Programs;

/// Range registers per partition, as an array length.
pub const RANGES: usize = RANGES_PER_PARTITION as usize;

/// A range's programming registers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RangeProg {
    /// `RANGE_CTRL`.
    pub ctrl: u32,
    /// `RANGE_START`.
    pub start: u32,
    /// `RANGE_END`.
    pub end: u32,
    /// `RANGE_THRESHOLD`.
    pub threshold: u32,
}

impl RangeProg {
    /// Whether the range is armed.
    #[inline]
    pub fn armed(&self) -> bool {
        self.ctrl & range_ctrl::ENABLE != 0
    }

    /// The event counted inside.
    #[inline]
    pub fn event(&self) -> u32 {
        (self.ctrl & range_ctrl::EVENT_MASK) >> range_ctrl::EVENT_SHIFT
    }

    /// The program id (`CTX_PROGRAM`) the range applies to, 0 = any.
    #[inline]
    pub fn program(&self) -> u32 {
        (self.ctrl & range_ctrl::PROGRAM_MASK) >> range_ctrl::PROGRAM_SHIFT
    }

    /// Whether a threshold is armed.
    #[inline]
    pub fn interrupts(&self) -> bool {
        self.ctrl & (range_ctrl::COUNT_IRQ | range_ctrl::LATENCY_IRQ) != 0
    }
}

/// A range's counts since it was armed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RangeCounts {
    /// `RANGE_ENTRIES`.
    pub entries: u64,
    /// `RANGE_COUNT`.
    pub count: u64,
    /// The count at which the next count crossing happens.
    pub next: u64,
}

/// The batch's view of a unit.
#[derive(Clone, Copy, Debug, Default)]
pub struct RangeShadow {
    progs: [RangeProg; RANGES],
    cap: u32,
    tail: u32,
}

/// A checked write.
#[derive(Clone, Copy, Debug)]
pub enum RangeWrite {
    /// `RANGE_CTRL` of range `i`: arm (a value with `ENABLE`) or disarm (0).
    Ctrl(usize, u32),
    /// `RANGE_START` of range `i`.
    Start(usize, u32),
    /// `RANGE_END` of range `i`.
    End(usize, u32),
    /// `RANGE_THRESHOLD` of range `i`.
    Threshold(usize, u32),
    /// `RRING_CAP`.
    Cap(u32),
    /// `RRING_TAIL`.
    Tail(u32),
}

impl RangeWrite {
    /// Whether executing it changes what the unit counts (the partition
    /// must be counted up to now first).
    pub fn changes_counting(&self) -> bool {
        matches!(self, RangeWrite::Ctrl(..) | RangeWrite::Cap(_))
    }
}

/// A `RANGE_THRESHOLD` interrupt waiting to be raised: (arg, arg2, device cycle).
pub type PendingIrq = (u32, u32, u64);

/// One partition's marked-range unit.
#[derive(Clone, Debug)]
pub struct RangeUnit {
    partition: u32,
    configured: bool,
    progs: [RangeProg; RANGES],
    counts: [RangeCounts; RANGES],
    ring: RecordRing,
    /// Per context id: its walk state and its ledger rows.
    cursors: HashMap<u32, Cursor>,
    /// Crossings of the last walk, for [`RangeUnit::flush`].
    pending: Vec<Pending>,
    /// Interrupts the last flush raised, for the device to deliver.
    pub events: Vec<PendingIrq>,
}

impl RangeUnit {
    /// The unit of partition slot `p`; `configured` if it runs programs.
    pub fn new(p: u32, configured: bool) -> Self {
        RangeUnit {
            partition: p,
            configured,
            progs: [RangeProg::default(); RANGES],
            counts: [RangeCounts::default(); RANGES],
            ring: RecordRing::default(),
            cursors: HashMap::new(),
            pending: Vec::new(),
            events: Vec::new(),
        }
    }

    /// Whether any range is armed (the walk is then watched).
    #[inline]
    pub fn armed(&self) -> bool {
        self.progs.iter().any(RangeProg::armed)
    }

    /// Disarms every range, zeroes the counts and the ledger and empties
    /// the ring, keeping its capacity (device reset).
    pub fn reset(&mut self) {
        let cap = self.ring.cap;
        *self = RangeUnit::new(self.partition, self.configured);
        self.ring.resize(cap);
    }

    /// The batch's view.
    pub fn shadow(&self) -> RangeShadow {
        RangeShadow {
            progs: self.progs,
            cap: self.ring.cap,
            tail: self.ring.tail,
        }
    }

    /// Reads register `reg` of the range block (offset inside it).
    pub fn read_range(&self, reg: u64) -> Option<RegValue> {
        if !self.configured {
            return None;
        }
        let i = usize::try_from(reg / RANGE_REG_STRIDE).ok()?;
        let (p, c) = (self.progs.get(i)?, self.counts[i]);
        match reg % RANGE_REG_STRIDE {
            rg::RANGE_CTRL => r32(p.ctrl),
            rg::RANGE_START => r32(p.start),
            rg::RANGE_END => r32(p.end),
            rg::RANGE_THRESHOLD => r32(p.threshold),
            rg::RANGE_ENTRIES => r64(c.entries),
            rg::RANGE_COUNT => r64(c.count),
            _ => None,
        }
    }

    /// Reads ring register `reg` (offset inside the partition's set).
    pub fn read_ring(&self, reg: u64) -> Option<RegValue> {
        if !self.configured {
            return None;
        }
        match reg {
            rg::RRING_CAP => r32(self.ring.cap),
            rg::RRING_HEAD => r32(self.ring.head),
            rg::RRING_TAIL => r32(self.ring.tail),
            // Modulo 2^32, as documented.
            #[allow(clippy::cast_possible_truncation)]
            rg::RRING_LOST => r32(self.ring.lost as u32),
            _ => None,
        }
    }

    /// Checks a write of `v` to range-block register `reg`.
    pub fn check_range_write(
        &self,
        reg: u64,
        v: u32,
        sh: &mut RangeShadow,
        programs: &Programs,
    ) -> Result<RangeWrite, Reject> {
        if self.read_range(reg).is_none() {
            return Err(Reject::ReadOnly);
        }
        let i = usize::try_from(reg / RANGE_REG_STRIDE).map_err(|_| Reject::ReadOnly)?;
        let cap = sh.cap;
        let p = &mut sh.progs[i];
        let staging = |p: &RangeProg| {
            if p.armed() {
                Err(Reject::BadValue("disarm the range (RANGE_CTRL = 0) first"))
            } else {
                Ok(())
            }
        };
        match reg % RANGE_REG_STRIDE {
            rg::RANGE_CTRL => {
                check_ctrl(*p, v, cap, programs)?;
                p.ctrl = v;
                Ok(RangeWrite::Ctrl(i, v))
            }
            rg::RANGE_START => {
                staging(p)?;
                p.start = v;
                Ok(RangeWrite::Start(i, v))
            }
            rg::RANGE_END => {
                staging(p)?;
                p.end = v;
                Ok(RangeWrite::End(i, v))
            }
            rg::RANGE_THRESHOLD => {
                staging(p)?;
                p.threshold = v;
                Ok(RangeWrite::Threshold(i, v))
            }
            _ => Err(Reject::ReadOnly),
        }
    }

    /// Checks a write of `v` to ring register `reg`.
    pub fn check_ring_write(
        &self,
        reg: u64,
        v: u32,
        sh: &mut RangeShadow,
    ) -> Result<RangeWrite, Reject> {
        if self.read_ring(reg).is_none() {
            return Err(Reject::ReadOnly);
        }
        match reg {
            rg::RRING_CAP => {
                if sh.progs.iter().any(|p| p.armed() && p.interrupts()) {
                    return Err(Reject::BadValue(
                        "the ring is sized only while no range has a threshold armed",
                    ));
                }
                RecordRing::check_cap(v)?;
                (sh.cap, sh.tail) = (v, 0);
                Ok(RangeWrite::Cap(v))
            }
            rg::RRING_TAIL => {
                self.ring.check_tail(v, &mut sh.tail)?;
                Ok(RangeWrite::Tail(v))
            }
            _ => Err(Reject::ReadOnly),
        }
    }

    /// Executes a checked write (the partition was counted up to now).
    pub fn apply(&mut self, w: RangeWrite) {
        match w {
            RangeWrite::Ctrl(i, v) => {
                self.progs[i].ctrl = v;
                if v & range_ctrl::ENABLE != 0 {
                    self.arm(i);
                }
            }
            RangeWrite::Start(i, v) => self.progs[i].start = v,
            RangeWrite::End(i, v) => self.progs[i].end = v,
            RangeWrite::Threshold(i, v) => self.progs[i].threshold = v,
            RangeWrite::Cap(v) => self.ring.resize(v),
            RangeWrite::Tail(v) => self.ring.tail = v,
        }
    }

    /// Zeroes range `i`'s counts and ledger; every context is "not yet
    /// seen" by it (it counts from the next block a context starts).
    fn arm(&mut self, i: usize) {
        let p = self.progs[i];
        self.counts[i] = RangeCounts {
            entries: 0,
            count: 0,
            next: u64::from(p.threshold),
        };
        for c in self.cursors.values_mut() {
            c.rearm(i, p.ctrl);
        }
    }

    /// The ledger rows of context `ctx` (creation serial `serial`).
    pub fn truth(&self, ctx: u32, serial: u64) -> [RangeTruth; RANGES] {
        let mut rows = match self.cursors.get(&ctx) {
            Some(c) if c.serial == serial => c.truth,
            _ => [RangeTruth::default(); RANGES],
        };
        for (i, r) in rows.iter_mut().enumerate() {
            r.range = u32::try_from(i).unwrap_or(0);
        }
        rows
    }

    /// Copies window bytes of the ring at `within` its first slot.
    pub fn read_ring_window(&self, within: u64, buf: &mut [u8]) -> Option<()> {
        self.ring.read(within, buf)
    }
}

/// Checks a `RANGE_CTRL` write of `v` to a range programmed as `p`, with
/// the ring's capacity `cap`, against the program table.
fn check_ctrl(p: RangeProg, v: u32, cap: u32, programs: &Programs) -> Result<(), Reject> {
    let bad = |m| Err(Reject::BadValue(m));
    if p.armed() {
        return if v == 0 {
            Ok(())
        } else {
            bad("an armed range takes only RANGE_CTRL = 0 (disarm)")
        };
    }
    if v & !range_ctrl::ALL != 0 {
        return bad("undefined RANGE_CTRL bits");
    }
    if v == 0 {
        return Ok(());
    }
    if v & range_ctrl::ENABLE == 0 {
        return bad("RANGE_CTRL takes 0 or a value with ENABLE");
    }
    let want = RangeProg { ctrl: v, ..p };
    if want.event() >= range_event::COUNT {
        return bad("unknown range event");
    }
    let (count_irq, latency_irq) = (
        v & range_ctrl::COUNT_IRQ != 0,
        v & range_ctrl::LATENCY_IRQ != 0,
    );
    if count_irq && latency_irq {
        return bad("one threshold per range: COUNT_IRQ or LATENCY_IRQ");
    }
    if (count_irq || latency_irq) && p.threshold == 0 {
        return bad("a threshold interrupt needs RANGE_THRESHOLD >= 1");
    }
    if (count_irq || latency_irq) && cap == 0 {
        return bad("a threshold interrupt needs a record ring (RRING_CAP)");
    }
    let prog = match want.program() {
        0 => None,
        id => Some(
            programs
                .get(id as usize - 1)
                .ok_or(Reject::BadValue("no program has this id"))?,
        ),
    };
    if v & range_ctrl::DATA != 0 {
        return if p.end < p.start {
            bad("range end below its start")
        } else {
            Ok(())
        };
    }
    let Some(prog) = prog else {
        return bad("a code range names its program");
    };
    let (k, first, last) = (p.start >> 16, p.start & 0xFFFF, p.end & 0xFFFF);
    if p.end >> 16 != k {
        return bad("a code range lies in one kernel");
    }
    let Some(blocks) = prog.kernels.get(k as usize) else {
        return bad("kernel out of the program");
    };
    if last < first {
        return bad("range end below its start");
    }
    if last as usize >= blocks.len() {
        return bad("block out of the kernel");
    }
    Ok(())
}
