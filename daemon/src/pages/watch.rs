//! The commit waiter's watchdog. Through the mirror, `gpupmd-commits`
//! sleeps on the device's doorbell with no timeout: an armed timeout cost
//! ~1 µs per wait on a VM (the hrtimer set up and cancelled at every
//! commit), ~0.15 % of a core at 1 kHz. What the timeout did — end the
//! sleep when the commits stop (triggers turned off, a driver gone), so
//! that following stops and the marked pages go back to the refresher —
//! the refresher now does on its own wake-ups: while commits are followed
//! it wakes at least every [`WATCH_EVERY`], and when the waiter has
//! applied no commit for [`STALL`] it *kicks* it: a counter the waiter
//! compares, then a `FUTEX_WAKE` on the doorbell (which rings nothing:
//! every sleeper re-reads the doorbell). A kick that lands just before the
//! waiter falls asleep is lost, and the next check repeats it; so a stall
//! is noticed within `STALL` + 2 × `WATCH_EVERY` at worst.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::mirror::OpenMirror;

/// No commit applied for this long while following: the waiter is kicked.
pub(super) const STALL: Duration = Duration::from_millis(100);
/// Longest sleep of the refresher while commits are followed. Each of
/// its timer wake-ups cost ~40 µs here (0.05 % of a core at 100 ms), so
/// the watch is coarse: a stall is rare (triggers turned off, a driver
/// gone) and costs only freshness of pages marked meanwhile.
pub(super) const WATCH_EVERY: Duration = Duration::from_millis(200);

/// What the waiter and its watchdog share.
#[derive(Debug, Default)]
pub(super) struct CommitWatch {
    /// Kicks so far: a waiter that sees it change stops its wait.
    kicks: AtomicU64,
    /// Commits the waiter applied so far: the watchdog's sign of life.
    applied: AtomicU64,
    /// The mirror the waiter sleeps on, if any.
    sleeping_on: Mutex<Option<Arc<OpenMirror>>>,
    /// The watchdog's last look: `applied` then, and since when it has
    /// not moved.
    last: Mutex<Option<(u64, Instant)>>,
}

impl CommitWatch {
    fn lock_mirror(&self) -> MutexGuard<'_, Option<Arc<OpenMirror>>> {
        self.sleeping_on.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waiter: the kicks so far, read before it looks at the doorbell.
    pub(super) fn kicks(&self) -> u64 {
        self.kicks.load(Ordering::SeqCst)
    }

    /// Waiter: it follows through `mirror` from now on (`None`: through
    /// the node's wait, which has a timeout of its own).
    pub(super) fn sleep_on(&self, mirror: Option<Arc<OpenMirror>>) {
        *self.lock_mirror() = mirror;
    }

    /// Waiter: one more commit applied.
    pub(super) fn applied(&self) {
        self.applied.fetch_add(1, Ordering::Relaxed);
    }

    /// Ends the waiter's current (or next) wait on the mirror.
    pub(super) fn kick(&self) {
        self.kicks.fetch_add(1, Ordering::SeqCst);
        if let Some(m) = self.lock_mirror().as_ref() {
            if let Err(e) = m.reader.wake_sleepers() {
                tracing::debug!(error = %e, "waking the commit waiter failed");
            }
        }
    }

    /// Watchdog, at `now`: kicks the waiter if it is `following` and has
    /// applied no commit for [`STALL`]. Returns whether it kicked.
    pub(super) fn check(&self, following: bool, now: Instant) -> bool {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if !following {
            *last = None;
            return false;
        }
        let applied = self.applied.load(Ordering::Relaxed);
        match *last {
            Some((seen, since)) if seen == applied => {
                if now.duration_since(since) < STALL {
                    return false;
                }
                *last = Some((applied, now));
                drop(last);
                self.kick();
                true
            }
            _ => {
                *last = Some((applied, now));
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_follower_that_applied_nothing_for_the_stall_is_kicked() {
        let w = CommitWatch::default();
        let t0 = Instant::now();
        assert!(!w.check(true, t0), "the first look only notes");
        assert!(!w.check(true, t0 + STALL / 2), "not stalled yet");
        w.applied();
        assert!(!w.check(true, t0 + STALL), "a commit was applied");
        assert!(!w.check(true, t0 + STALL + STALL / 2), "not stalled since");
        assert!(w.check(true, t0 + 2 * STALL), "stalled: kicked");
        assert_eq!(w.kicks(), 1);
        assert!(
            !w.check(true, t0 + 2 * STALL + STALL / 2),
            "kicked just now"
        );
        assert!(w.check(true, t0 + 3 * STALL), "still stalled: kicked again");
        assert!(!w.check(false, t0 + 5 * STALL), "not following: never");
        assert!(
            !w.check(true, t0 + 6 * STALL),
            "following again: notes first"
        );
        assert_eq!(w.kicks(), 2);
    }
}
