//! Following the device's periodic commits: after a refresh that found
//! pages whose blocks moved, the refresher reads those pages again just
//! after the device's next periodic commit lands, and goes on doing so
//! while they keep moving.
//!
//! The device raises no interrupt for a periodic commit (only the
//! stream watermark, edge-triggered and re-armed by a drain, which would
//! cost a ring drain per commit), so nothing tells the daemon a commit
//! has happened until a drain or a switch — on the reference load up to
//! 40 ms later. But the block says when its last commit was
//! (`last_commit_cycle`) and `TRIG_PERIOD` when the next one is due, so
//! the refresher can be there when it lands: one window read per commit
//! period for all the moving VM pages, and no read at all once they stop
//! moving (an idle device, periodic triggers off, a step clock).
//!
//! Device cycles are mapped to the daemon's clock by watching when
//! commits are first seen: `seen − cycle / rate` over the refreshes is the
//! instant of cycle 0 plus how late a commit was seen; its minimum over
//! the last [`WINDOW`] to 2 × [`WINDOW`] observations (a late wake-up
//! does not count; a device clock that drifts — a throttled capability —
//! is tracked within a window) is when commits land. A read scheduled too
//! early finds nothing new and is retried shortly after, ever later, for
//! about 40 ms; then the refresher stops following until an event.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::table::Key;

/// How long after a commit is due to land the pages are read: jitter of
/// the landing (the real-time driver lands commits at its ticks, 250 µs,
/// whose phase against the commits drifts slowly; the estimate follows
/// it within a window, and a read that comes too early is retried).
const MARGIN: Duration = Duration::from_micros(120);
/// Retry delay after a read found nothing new (early, a dithered period,
/// a device clock catching up late on a loaded host), doubled at each
/// further miss.
const RETRY: Duration = Duration::from_micros(150);
/// Reads in a row that found nothing new before following stops: with
/// the doubling, about 40 ms after the last commit seen.
const MAX_MISSES: u32 = 8;
/// Observations per window of the landing estimate.
const WINDOW: u32 = 32;
/// Due reads in a row in which a followed page did not move before it is
/// no longer followed (a partition paused for a switch misses a commit or
/// two; one that went idle stops).
const KEY_MISSES: u32 = 8;

/// The follower's state.
#[derive(Debug)]
pub struct Follow {
    /// Off on a step clock (device time passes only when someone
    /// advances it, so it cannot be predicted).
    enabled: bool,
    /// Device cycles per second.
    hz: f64,
    /// `TRIG_PERIOD` while periodic triggers are on.
    period: Option<u64>,
    base: Instant,
    /// Seconds after `base` at which cycle 0 would have landed: the
    /// minimum of the previous window's observations and of this one's.
    landed_at_zero: [Option<f64>; 2],
    /// Observations in the current window.
    observed: u32,
    /// Pages to read at `due`, each with the due reads in a row it did
    /// not move.
    keys: BTreeMap<Key, u32>,
    /// The keys, as handed out.
    key_list: Vec<Key>,
    /// The cycle of the last periodic commit seen: the trigger's grid.
    grid: Option<u64>,
    due: Option<Instant>,
    misses: u32,
}

impl Follow {
    /// A follower for a device clock of `clock_khz`; `enabled` false on a
    /// step clock.
    pub fn new(enabled: bool, clock_khz: u32) -> Follow {
        Follow {
            enabled: enabled && clock_khz > 0,
            hz: f64::from(clock_khz) * 1000.0,
            period: None,
            base: Instant::now(),
            landed_at_zero: [None, None],
            observed: 0,
            keys: BTreeMap::new(),
            key_list: Vec::new(),
            grid: None,
            due: None,
            misses: 0,
        }
    }

    /// The periodic trigger as the device has it now (`None`: off).
    pub fn set_period(&mut self, period: Option<u64>) {
        let period = period.filter(|&p| p > 0);
        if period != self.period {
            self.stop();
        }
        self.period = period;
    }

    /// When the followed pages are to be read next (`None`: not
    /// following).
    pub fn due(&self) -> Option<Instant> {
        self.due
    }

    /// The pages to read at [`Self::due`].
    pub fn keys(&self) -> &[Key] {
        &self.key_list
    }

    fn stop(&mut self) {
        self.due = None;
        self.keys.clear();
        self.key_list.clear();
        self.grid = None;
        self.misses = 0;
    }

    /// Follows the pages that moved; forgets those that stopped moving.
    fn update_keys(&mut self, moved: &[Key]) {
        for n in self.keys.values_mut() {
            *n += 1;
        }
        for &k in moved {
            self.keys.insert(k, 0);
        }
        self.keys.retain(|_, n| *n <= KEY_MISSES);
        self.key_list = self.keys.keys().copied().collect();
    }

    /// The newest periodic commit among `cycles`: on the grid of the
    /// last one seen when known, else the cycle most pages share.
    fn periodic(&self, period: u64, cycles: &[u64]) -> Option<u64> {
        match self.grid {
            Some(g) => cycles
                .iter()
                .copied()
                .filter(|&c| c > g && (c - g) % period == 0)
                .max(),
            None => periodic_commit(cycles),
        }
    }

    /// After a refresh that started at `now`: `moved` are the pages whose
    /// block changed, `cycles` their blocks' last commit cycles.
    #[allow(clippy::cast_precision_loss)] // cycles: exact below 2^53
    pub fn observe(&mut self, now: Instant, moved: &[Key], cycles: &[u64]) {
        let (Some(period), true) = (self.period, self.enabled) else {
            self.stop();
            return;
        };
        if self.due.is_none() && moved.is_empty() {
            return;
        }
        self.update_keys(moved);
        let hz = self.hz;
        let secs = |cycle: u64| cycle as f64 / hz;
        let at_wall = now.duration_since(self.base).as_secs_f64();
        let Some(cycle) = self.periodic(period, cycles) else {
            // The next periodic commit has not landed: the device clock
            // is later than estimated (it loses time when the driver is
            // not scheduled), so its landing is after now.
            if let Some(expected) = self.grid.map(|g| g + period) {
                let floor = at_wall - secs(expected);
                for z in self.landed_at_zero.iter_mut().flatten() {
                    *z = z.max(floor);
                }
            }
            if self.due.is_some() && self.misses < MAX_MISSES && !self.keys.is_empty() {
                self.due = Some(now + RETRY * (1 << self.misses));
                self.misses += 1;
            } else {
                self.stop();
            }
            return;
        };
        let zero = self.landed(at_wall - secs(cycle));
        let next = zero + secs(cycle + period);
        let at = self.base + Duration::from_secs_f64(next.max(0.0)) + MARGIN;
        self.due = Some(at.max(now + RETRY));
        self.grid = Some(cycle);
        self.misses = 0;
    }
}

/// The cycle of the periodic commit among the last commits of the pages
/// that moved: the one most of them share (the periodic trigger is
/// device-wide; a page whose last commit was a switch's has its own
/// cycle, off the trigger's grid), the latest on a tie.
fn periodic_commit(cycles: &[u64]) -> Option<u64> {
    let mut sorted = cycles.to_vec();
    sorted.sort_unstable();
    let mut best: Option<(usize, u64)> = None;
    for run in sorted.chunk_by(|a, b| a == b) {
        if best.is_none_or(|(n, _)| run.len() >= n) {
            best = Some((run.len(), run[0]));
        }
    }
    best.map(|(_, c)| c)
}

impl Follow {
    /// Takes observation `seen` into the windowed minimum; returns it.
    fn landed(&mut self, seen: f64) -> f64 {
        if self.observed >= WINDOW {
            self.landed_at_zero = [self.landed_at_zero[1], None];
            self.observed = 0;
        }
        self.observed += 1;
        let cur = &mut self.landed_at_zero[1];
        *cur = Some(cur.map_or(seen, |z| z.min(seen)));
        match self.landed_at_zero {
            [Some(prev), Some(cur)] => prev.min(cur),
            [_, cur] => cur.unwrap_or(seen),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KHZ: u32 = 1_000_000; // 1 GHz: 1 ms = 1,000,000 cycles
    const PERIOD: u64 = 1_000_000;

    fn follow() -> Follow {
        let mut f = Follow::new(true, KHZ);
        f.set_period(Some(PERIOD));
        f
    }

    /// Whether `a` and `b` are within 2 µs of each other.
    fn near(a: Instant, b: Instant) -> bool {
        a.max(b) - a.min(b) < Duration::from_micros(2)
    }

    fn ms(f: &Follow, t: f64) -> Instant {
        f.base + Duration::from_secs_f64(t / 1000.0)
    }

    #[test]
    fn the_next_read_is_a_margin_after_the_next_commit_lands() {
        let mut f = follow();
        // Commit at cycle 10 ms, seen at 10.2 ms (landed late by 0.2 ms).
        f.observe(ms(&f, 10.2), &[Key::Vm(1)], &[10 * PERIOD]);
        let due = f.due().expect("following");
        let want = ms(&f, 11.2) + MARGIN;
        assert!(near(due, want), "{due:?} vs {want:?}");
        assert_eq!(f.keys(), &[Key::Vm(1)]);
        // Seen earlier next time: the envelope follows down at once.
        f.observe(ms(&f, 11.05), &[Key::Vm(1)], &[11 * PERIOD]);
        let want = ms(&f, 12.05) + MARGIN;
        assert!(near(f.due().unwrap(), want));
        // Seen late once (a delayed wake-up): the estimate keeps the
        // earliest landing.
        f.observe(ms(&f, 12.85), &[Key::Vm(1)], &[12 * PERIOD]);
        let want = ms(&f, 13.05) + MARGIN;
        assert!(near(f.due().unwrap(), want));
    }

    #[test]
    fn a_device_clock_that_falls_behind_is_tracked_within_two_windows() {
        let mut f = follow();
        f.observe(ms(&f, 1.0), &[Key::Vm(1)], &[PERIOD]);
        // From now on every commit lands 0.5 ms later than before.
        for i in 2..(2 + 2 * u64::from(WINDOW) + 1) {
            let t = i as f64 + 0.5;
            f.observe(ms(&f, t), &[Key::Vm(1)], &[i * PERIOD]);
        }
        let last = 2 + 2 * u64::from(WINDOW);
        let want = ms(&f, (last + 1) as f64 + 0.5) + MARGIN;
        assert!(near(f.due().unwrap(), want));
    }

    #[test]
    fn the_periodic_commit_is_the_cycle_most_pages_share() {
        assert_eq!(periodic_commit(&[]), None);
        assert_eq!(periodic_commit(&[5, 9, 5, 5, 7]), Some(5));
        assert_eq!(periodic_commit(&[5, 9]), Some(9), "a tie: the latest");
    }

    #[test]
    fn off_grid_commits_do_not_move_the_schedule_and_idle_pages_are_dropped() {
        let mut f = follow();
        let (a, b) = (Key::Vm(1), Key::Vm(2));
        f.observe(ms(&f, 1.0), &[a, b], &[PERIOD, PERIOD]);
        // Only b moved, by a switch's commit off the grid: a miss for the
        // schedule, and a stays followed (paused for the switch).
        f.observe(ms(&f, 2.0), &[b], &[PERIOD + PERIOD / 3]);
        assert_eq!(f.keys(), &[a, b]);
        let due = f.due().unwrap();
        assert!(
            due < ms(&f, 2.5),
            "retried soon, not a period after the switch"
        );
        f.observe(ms(&f, 2.3), &[b], &[2 * PERIOD]);
        let want = ms(&f, 3.0) + MARGIN;
        assert!(near(f.due().unwrap(), want), "back on the grid");
        for i in 3..(3 + u64::from(KEY_MISSES) + 1) {
            f.observe(ms(&f, i as f64), &[b], &[i * PERIOD]);
        }
        assert_eq!(f.keys(), &[b], "a, idle since, is no longer followed");
    }

    #[test]
    fn reads_that_find_nothing_new_retry_then_stop() {
        let mut f = follow();
        f.observe(ms(&f, 1.0), &[Key::Vm(2)], &[PERIOD]);
        for i in 0..MAX_MISSES {
            f.observe(ms(&f, 2.0 + f64::from(i)), &[], &[]);
            assert!(f.due().is_some(), "miss {i} retries");
        }
        f.observe(ms(&f, 9.0), &[], &[]);
        assert_eq!(f.due(), None, "stopped after {MAX_MISSES} misses");
        assert!(f.keys().is_empty());
    }

    #[test]
    fn no_following_on_a_step_clock_or_without_periodic_triggers() {
        let mut step = Follow::new(false, KHZ);
        step.set_period(Some(PERIOD));
        step.observe(Instant::now(), &[Key::Vm(1)], &[PERIOD]);
        assert_eq!(step.due(), None);
        let mut off = follow();
        off.observe(Instant::now(), &[Key::Vm(1)], &[PERIOD]);
        assert!(off.due().is_some());
        off.set_period(None);
        assert_eq!(off.due(), None, "periodic triggers turned off");
        off.observe(Instant::now(), &[Key::Vm(1)], &[PERIOD]);
        assert_eq!(off.due(), None);
    }
}
