//! Retention of the retired set: which persisted context instances to
//! prune so that the set stays bounded (`[retired]` in `gpupmd.toml`).
//!
//! An instance's age is counted from its retirement — the device cycle at
//! which the daemon persisted its final totals
//! ([`RetiredFile::retired_cycle`](super::retired::RetiredFile)) — in
//! device time at the nominal clock, so a context that ran for a week is
//! kept as long after its end as one that ran for a second. "Oldest" orders
//! by retirement cycle, then created cycle, then id (retirements inside one
//! step of a step clock share a cycle; the order must still be total so
//! that a restart prunes exactly what a running daemon would have).
//!
//! Pruning only ever removes retired instances — files under
//! `state_dir/retired/` and their table entries. VM and system totals are
//! read from the device's blocks and never from this set, so they do not
//! change; what an operator loses is the per-instance breakdown of the
//! pruned contexts.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpupm_uapi::regs;

use super::retired::RetiredError;
use super::Store;
use crate::view::CtxId;
use crate::worker::Worker;

/// The policy and its limits, from the configuration file's format.
pub use gpupm_client::config::{Retention, DEFAULT_MAX_CONTEXTS, MAX_MAX_CONTEXTS};

/// A retired instance in retention order: (retired cycle, created cycle, id).
pub type AgeKey = (u64, u64, CtxId);

/// What one pruning pass removes, oldest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Victims {
    /// Older than the age limit.
    pub by_age: Vec<AgeKey>,
    /// Beyond the count limit (after the aged ones are gone).
    pub by_count: Vec<AgeKey>,
}

impl Victims {
    /// Whether nothing is to be pruned.
    pub fn is_empty(&self) -> bool {
        self.by_age.is_empty() && self.by_count.is_empty()
    }

    /// Every victim.
    pub fn all(&self) -> impl Iterator<Item = &AgeKey> {
        self.by_age.iter().chain(&self.by_count)
    }
}

/// The instances of `kept` (in retention order) that the limits prune at
/// device cycle `now` (`None`: the cycle is unknown, so only the count
/// limit applies). Touches only the oldest entries: O(victims · log n).
pub fn select(
    kept: &BTreeSet<AgeKey>,
    max_contexts: usize,
    max_age_cycles: Option<u64>,
    now: Option<u64>,
) -> Victims {
    let mut v = Victims::default();
    let mut left = kept.len();
    for k in kept {
        let aged = matches!((max_age_cycles, now), (Some(age), Some(now)) if now.saturating_sub(k.0) > age);
        if aged {
            v.by_age.push(*k);
        } else if left > max_contexts {
            v.by_count.push(*k);
        } else {
            break;
        }
        left -= 1;
    }
    v
}

/// Pruning is logged at most this often: at the count limit every
/// retirement prunes one instance, and one event per retirement would
/// flood the journal. The counts add up in between.
pub const LOG_EVERY: Duration = Duration::from_secs(60);

/// Pruning not logged yet.
#[derive(Debug, Default)]
pub(super) struct PruneLog {
    last: Option<Instant>,
    by_age: usize,
    by_count: usize,
    oldest_retired_cycle: Option<u64>,
}

impl PruneLog {
    /// Adds a pass's victims and logs what has added up if the last event
    /// is [`LOG_EVERY`] old (or there was none).
    fn note(&mut self, v: &Victims, kept: usize) {
        self.by_age += v.by_age.len();
        self.by_count += v.by_count.len();
        if let Some(k) = v.all().map(|k| k.0).min() {
            self.oldest_retired_cycle = Some(self.oldest_retired_cycle.map_or(k, |o| o.min(k)));
        }
        let due = self.last.is_none_or(|t| t.elapsed() >= LOG_EVERY);
        if due && self.by_age + self.by_count > 0 {
            crate::health::retired_pruned(
                self.by_age,
                self.by_count,
                kept,
                self.oldest_retired_cycle.unwrap_or(0),
            );
            *self = PruneLog {
                last: Some(Instant::now()),
                ..PruneLog::default()
            };
        }
    }
}

/// What one pruning pass removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Instances older than the age limit.
    pub by_age: usize,
    /// Instances beyond the count limit.
    pub by_count: usize,
    /// Retired instances kept afterwards.
    pub kept: usize,
}

impl Store {
    /// The retention policy of the retired set.
    pub fn retention(&self) -> Retention {
        self.retention
    }

    /// Applies the retention policy once: drops the instances it prunes
    /// from the tables, then unlinks their files and fsyncs the directory,
    /// so that a restart does not bring them back. VM and system totals
    /// come from the device and are not touched.
    ///
    /// A crash between the two steps leaves files that the next start
    /// loads and prunes again.
    pub fn prune_retired(&self) -> Result<Pruned, RetiredError> {
        let _one_pass = self.pruning.lock().unwrap_or_else(|e| e.into_inner());
        let age = self.retention.max_age_cycles(self.identity.clock_khz);
        let now = match age {
            Some(_) => match self.dev.read64(regs::CYCLE) {
                Ok(c) => Some(c),
                Err(e) => {
                    tracing::warn!(error = %e, "reading the device cycle failed; pruning by count only");
                    None
                }
            },
            None => None,
        };
        let (victims, kept) = {
            let mut t = self.write();
            let v = select(&t.retired_order, self.retention.max_contexts, age, now);
            for &(retired_cycle, created, ctx) in v.all() {
                t.retired_order.remove(&(retired_cycle, created, ctx));
                t.retired.remove(&(ctx, created));
            }
            (v, t.retired.len())
        };
        let pruned = Pruned {
            by_age: victims.by_age.len(),
            by_count: victims.by_count.len(),
            kept,
        };
        let keys: Vec<(CtxId, u64)> = victims.all().map(|&(_, c, id)| (id, c)).collect();
        let removed = if keys.is_empty() {
            Ok(())
        } else {
            self.stats
                .pruned
                .fetch_add(keys.len() as u64, Ordering::Relaxed);
            self.retired_files.remove(&keys)
        };
        self.prune_log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .note(&victims, kept);
        removed.map(|()| pruned)
    }
}

/// Runs the retention policy for as long as the returned worker lives:
/// after every retirement (the store rings the worker) and periodically
/// (for the age limit, and to log pruning that added up). The pruning
/// (unlinks and a directory fsync) runs on the worker's thread, never on
/// the engine's.
pub fn start(store: Arc<Store>) -> std::io::Result<Worker> {
    let period = store
        .retention()
        .age_check_period()
        .map_or(LOG_EVERY, |p| p.min(LOG_EVERY));
    let bell = Arc::clone(&store.retired_bell);
    Worker::start("gpupmd-retention", bell, Some(period), move || {
        if let Err(e) = store.prune_retired() {
            tracing::warn!(
                error = gpupm_fusemount::logging::one_line(e),
                "pruning retired contexts failed; retrying after the next retirement"
            );
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(keys: &[AgeKey]) -> BTreeSet<AgeKey> {
        keys.iter().copied().collect()
    }

    #[test]
    fn count_limit_prunes_the_oldest_by_retirement_then_creation_then_id() {
        let kept = set(&[(10, 5, 2), (10, 5, 1), (10, 1, 9), (20, 0, 3), (30, 0, 4)]);
        let v = select(&kept, 2, None, Some(1_000));
        assert!(v.by_age.is_empty());
        assert_eq!(v.by_count, vec![(10, 1, 9), (10, 5, 1), (10, 5, 2)]);
        assert!(select(&kept, 5, None, None).is_empty());
    }

    #[test]
    fn age_limit_counts_from_retirement_and_needs_the_current_cycle() {
        let kept = set(&[(100, 0, 1), (200, 0, 2), (300, 0, 3)]);
        let v = select(&kept, 10, Some(100), Some(350));
        assert_eq!(v.by_age, vec![(100, 0, 1), (200, 0, 2)]);
        // Exactly the limit old is kept.
        assert_eq!(
            select(&kept, 10, Some(150), Some(350)).by_age,
            vec![(100, 0, 1)]
        );
        // A cycle counter that went back (device reset) ages nothing.
        assert!(select(&kept, 10, Some(1), Some(50)).is_empty());
        assert!(select(&kept, 10, Some(1), None).is_empty());
        // Aged ones count towards the count limit.
        let v = select(&kept, 1, Some(150), Some(350));
        assert_eq!((v.by_age.len(), v.by_count), (1, vec![(200, 0, 2)]));
    }

    #[test]
    fn age_limit_in_cycles_saturates() {
        let r = Retention {
            max_contexts: 1,
            max_age_s: Some(2),
        };
        assert_eq!(r.max_age_cycles(1_000), Some(2_000_000));
        let huge = Retention {
            max_age_s: Some(u64::MAX),
            ..r
        };
        assert_eq!(huge.max_age_cycles(1_980_000), Some(u64::MAX));
        assert_eq!(r.age_check_period(), Some(Duration::from_secs(1)));
        assert_eq!(Retention::default().age_check_period(), None);
    }
}
