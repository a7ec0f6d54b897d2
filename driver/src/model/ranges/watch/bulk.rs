//! The marked ranges over loop iterations the walk advances in aggregate
//! (a [`Window`] of whole iterations, each one of the loop's paths).
//!
//! Per range, an iteration's visits decide its entries, what it adds to
//! the count and where residences begin and end ([`Effect`]); for a code
//! range that depends only on the path (and on whether the visit before
//! the iteration was inside), for a data range also on the addresses, so
//! on the lifetime ordinals of the data visits. The watcher admits
//! iterations up to the first one in which a count or latency threshold
//! would be crossed (the walk steps through that one, so the record gets
//! the exact visit and call stack), and books the admitted ones: entries,
//! counts, the ledger rows and whether a residence is in progress.
//!
//! Where a residence in progress began (`since`) is tracked only for
//! ranges with a latency threshold, the only thing that reads it (arming
//! one re-arms the range, which starts it afresh).

use gpupm_uapi::ranges::{range_ctrl, range_event};

use super::super::{RangeProg, RANGES};
use super::{RangeWatcher, State};
use crate::model::program::run::{Path, PathVisit, Quantity, Visit, Window};
use crate::model::program::MAX_PATHS;

/// What one iteration does to one range, given whether the visit before
/// it was inside.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Effect {
    /// What the count gains.
    inc: u64,
    /// Entries.
    entries: u64,
    /// Whether the last visit (the latch) is inside.
    last_in: bool,
    /// When the visit before was inside: where the residence in progress
    /// ends (the first outside visit's offset); `None` if it lasts the
    /// whole iteration.
    lead: Option<u64>,
    /// Where the residence in progress at the end began, if it began in
    /// the iteration.
    open: Option<u64>,
    /// The longest residence that begins and ends in the iteration.
    inner: u64,
}

/// Counts `event` over the visits `inside` selects.
fn effect(
    path: &Path,
    event: u32,
    prev_in: bool,
    mut inside: impl FnMut(&PathVisit) -> bool,
) -> Effect {
    let mut e = Effect::default();
    let (mut was_in, mut carried) = (prev_in, prev_in);
    let mut begun: Option<u64> = None;
    for v in &path.visits {
        let now_in = inside(v);
        if now_in {
            e.inc += match event {
                range_event::INSTRUCTIONS => u64::from(v.instructions),
                range_event::CYCLES => v.cycles,
                range_event::MEMORY => u64::from(v.data.is_some()),
                _ => 0,
            };
            if !was_in {
                e.entries += 1;
                begun = Some(v.offset);
            }
        } else if was_in {
            if carried {
                e.lead = Some(v.offset);
                carried = false;
            } else if let Some(b) = begun.take() {
                e.inner = e.inner.max(v.offset - b);
            }
        }
        was_in = now_in;
    }
    e.last_in = was_in;
    e.open = if was_in { begun } else { None };
    e
}

/// How a range's membership is decided over a window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Kind {
    /// No visit of the window can be inside.
    #[default]
    Never,
    /// By (kernel, block): the same for every iteration of a path.
    Code,
    /// By address: per data visit.
    Data,
}

/// What the ranges make of the window the walk offers now: per range how
/// it is decided, the effects computed so far, and how many iterations
/// take each path.
#[derive(Clone, Debug, Default)]
pub(super) struct Memo {
    /// (start, length) of the window prepared.
    window: Option<(u64, u64)>,
    kinds: [Kind; RANGES],
    /// ((range, visit before inside, path), effect), computed on demand.
    effects: Vec<((usize, bool, usize), Effect)>,
    counts: [u64; MAX_PATHS],
}

/// A range's residence as a lane scan carries it.
#[derive(Clone, Copy, Debug)]
struct Residence {
    inside: bool,
    since: u64,
    fired: bool,
}

impl Residence {
    fn of(state: State) -> Self {
        match state {
            State::In { since, fired } => Residence {
                inside: true,
                since,
                fired,
            },
            State::Out | State::Unseen => Residence {
                inside: false,
                since: 0,
                fired: false,
            },
        }
    }

    fn state(self) -> State {
        if self.inside {
            State::In {
                since: self.since,
                fired: self.fired,
            }
        } else {
            State::Out
        }
    }
}

/// What a lane scan found and adds up.
#[derive(Clone, Copy, Debug)]
struct Scan {
    /// Iterations before the first with a crossing (all scanned if none).
    clear: u64,
    inc: u64,
    entries: u64,
    end: Residence,
}

/// Whether `v` lies in code range `p`.
fn in_code(p: &RangeProg, v: &PathVisit) -> bool {
    u32::from(v.kernel) == p.start >> 16
        && (p.start & 0xFFFF..=p.end & 0xFFFF).contains(&u32::from(v.block))
}

/// How range `p` is decided for a context of `program` over `w`.
fn kind(p: &RangeProg, program: u32, w: &Window<'_>) -> Kind {
    if !p.armed() || p.program() != 0 && p.program() != program {
        return Kind::Never;
    }
    if p.ctrl & range_ctrl::DATA == 0 {
        return Kind::Code;
    }
    let reaches = w
        .known_paths()
        .flat_map(|(_, path)| &path.visits)
        .filter_map(|v| v.data)
        .any(|d| d.base <= p.end && p.start <= d.base + (d.span - 1));
    if reaches {
        Kind::Data
    } else {
        Kind::Never
    }
}

impl Memo {
    /// Prepares for window `w` (once per window).
    fn prepare(&mut self, progs: &[RangeProg; RANGES], program: u32, w: &Window<'_>) {
        let id = (w.start, w.len());
        if self.window == Some(id) {
            return;
        }
        self.window = Some(id);
        self.effects.clear();
        for (k, p) in self.kinds.iter_mut().zip(progs) {
            *k = kind(p, program, w);
        }
        self.counts = [0; MAX_PATHS];
        w.tally_by_number(w.len(), |c, n| self.counts[c] = n);
    }

    /// The effect of path `c` on range `i` (not a data range touching the
    /// path's data) after a visit inside or not.
    fn effect(
        &mut self,
        p: &RangeProg,
        i: usize,
        prev_in: bool,
        c: usize,
        w: &Window<'_>,
    ) -> Effect {
        if let Some((_, e)) = self.effects.iter().find(|(k, _)| *k == (i, prev_in, c)) {
            return *e;
        }
        let kind = self.kinds[i];
        let e = w.path_number(c).map_or_else(Effect::default, |path| {
            effect(path, p.event(), prev_in, |v| {
                kind == Kind::Code && in_code(p, v)
            })
        });
        self.effects.push(((i, prev_in, c), e));
        e
    }
}

impl RangeWatcher<'_> {
    /// The iterations of `w`, from its first, the ranges can account for:
    /// those before the first crossing of an armed threshold.
    pub(super) fn admit_window(&mut self, w: &Window<'_>) -> u64 {
        let Some(cursor) = self.cursor.as_ref() else {
            return 0;
        };
        if cursor.seen_to != Some(w.start) || cursor.visit.is_none() {
            return 0;
        }
        let program = cursor.program;
        self.memo.prepare(&self.unit.progs, program, w);
        let mut n = w.len();
        for i in 0..RANGES {
            let p = self.unit.progs[i];
            let kind = self.memo.kinds[i];
            if kind == Kind::Never || !p.interrupts() {
                continue;
            }
            if kind == Kind::Code && p.ctrl & range_ctrl::LATENCY_IRQ == 0 {
                // A count threshold: the whole window if it stays below.
                let c = self.unit.counts[i];
                let (inc, _, _) = self.code_totals(i, w, n);
                if c.count + inc < c.next {
                    continue;
                }
            }
            n = n.min(self.scan(i, w, n).clear);
        }
        n
    }

    /// Books the first `n` iterations of `w` (admitted): the walk now
    /// stands at the end of visit `latch`.
    pub(super) fn skip_window(&mut self, w: &Window<'_>, n: u64, latch: &Visit) {
        let program = self.cursor().program;
        self.memo.prepare(&self.unit.progs, program, w);
        for i in 0..RANGES {
            let p = self.unit.progs[i];
            if !p.armed() {
                continue;
            }
            let kind = self.memo.kinds[i];
            let (inc, entries, end) = match kind {
                Kind::Never => (0, 0, State::Out),
                Kind::Code if p.ctrl & range_ctrl::LATENCY_IRQ == 0 => self.code_totals(i, w, n),
                _ => {
                    let s = self.scan(i, w, n);
                    debug_assert_eq!(s.clear, n, "admitted iterations cross no threshold");
                    (s.inc, s.entries, s.end.state())
                }
            };
            let cursor = self.cursor();
            cursor.state[i] = end;
            cursor.truth[i].entries += entries;
            cursor.truth[i].count += inc;
            let c = &mut self.unit.counts[i];
            c.entries += entries;
            c.count += inc;
        }
        let cursor = self.cursor();
        cursor.visit = Some(*latch);
        cursor.seen_to = Some(w.start + w.sum(Quantity::Cycles, n));
    }

    /// A code range over the first `n` iterations, path by path: (count
    /// gained, entries, state after; a residence's start is not tracked).
    fn code_totals(&mut self, i: usize, w: &Window<'_>, n: u64) -> (u64, u64, State) {
        let p = self.unit.progs[i];
        let before = self.cursor().state[i];
        let first_in = matches!(before, State::In { .. });
        let c0 = w.category(0);
        // Every iteration ends at the latch, so after the first one the
        // visit before an iteration is inside exactly when the latch is.
        let latch_in = self.memo.effect(&p, i, first_in, c0, w).last_in;
        let counts = if n == w.len() {
            self.memo.counts
        } else {
            let mut counts = [0; MAX_PATHS];
            w.tally_by_number(n, |c, k| counts[c] = k);
            counts
        };
        let (mut inc, mut entries) = (0, 0);
        for (c, &k) in counts.iter().enumerate().filter(|(_, &k)| k > 0) {
            let e = self.memo.effect(&p, i, latch_in, c, w);
            inc += k * e.inc;
            entries += k * e.entries;
        }
        let first = self.memo.effect(&p, i, first_in, c0, w);
        let steady = self.memo.effect(&p, i, latch_in, c0, w);
        entries = entries + first.entries - steady.entries;
        let end = match (latch_in, before) {
            (false, _) => State::Out,
            (true, State::In { since, fired }) => State::In { since, fired },
            (true, _) => State::In {
                since: w.start,
                fired: false,
            },
        };
        (inc, entries, end)
    }

    /// Range `i` over the first `n` iterations of `w`, iteration by
    /// iteration, stopping before the first in which a threshold is
    /// crossed.
    fn scan(&mut self, i: usize, w: &Window<'_>, n: u64) -> Scan {
        let p = self.unit.progs[i];
        let program = self.cursor().program;
        let kind = self.memo.kinds[i];
        let count_irq = p.ctrl & range_ctrl::COUNT_IRQ != 0;
        let latency = (p.ctrl & range_ctrl::LATENCY_IRQ != 0).then_some(u64::from(p.threshold));
        let c = self.unit.counts[i];
        let room = c.next.saturating_sub(c.count);
        let mut r = Residence::of(self.cursor().state[i]);
        // Data visits' lifetime ordinals, per row, as the lanes go.
        let mut ordinals: Vec<(usize, u64)> = Vec::new();
        let (mut inc, mut entries, mut s) = (0u64, 0u64, w.start);
        for lane in 0..n {
            let path = w.path(lane);
            let data = kind == Kind::Data && path.visits.iter().any(|v| v.data.is_some());
            let e = if data {
                effect(path, p.event(), r.inside, |v| {
                    let Some(d) = v.data else {
                        return false;
                    };
                    let at = match ordinals.iter_mut().find(|(row, _)| *row == v.row) {
                        Some((_, o)) => o,
                        None => {
                            ordinals.push((v.row, w.visits_before(v.row)));
                            &mut ordinals.last_mut().expect("just pushed").1
                        }
                    };
                    let address = d.address(*at);
                    *at += 1;
                    (p.program() == 0 || p.program() == program)
                        && (p.start..=p.end).contains(&address)
                })
            } else {
                self.memo.effect(&p, i, r.inside, w.category(lane), w)
            };
            let stop = Scan {
                clear: lane,
                inc,
                entries,
                end: r,
            };
            if count_irq && inc + e.inc >= room {
                return stop;
            }
            if let Some(lat) = latency {
                let carried = r.inside && !r.fired;
                let carried_len = match e.lead {
                    Some(l) => s + l - r.since,
                    None => s + path.cycles - r.since,
                };
                let open_len = e.open.map_or(0, |o| path.cycles - o);
                if carried && carried_len >= lat || e.inner >= lat || open_len >= lat {
                    return stop;
                }
            }
            inc += e.inc;
            entries += e.entries;
            match (e.last_in, e.open) {
                (true, Some(o)) => {
                    r = Residence {
                        inside: true,
                        since: s + o,
                        fired: false,
                    }
                }
                (true, None) => {}
                (false, _) => r.inside = false,
            }
            s += path.cycles;
        }
        Scan {
            clear: n,
            inc,
            entries,
            end: r,
        }
    }
}
