//! The workload timeline: contexts created and destroyed at scenario times
//! (fixed contexts and generated churn) and VM migrations, in a
//! deterministic order.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::scenario::Scenario;

/// Something the workload does at a cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum WorkItem {
    /// Create fixed context `spec` (index into `Scenario::contexts`).
    CreateFixed {
        /// Spec index.
        spec: usize,
    },
    /// Create churn context number `n` of churn spec `spec`.
    Churn {
        /// Churn spec index.
        spec: usize,
        /// Sequence number within that churn.
        n: u64,
    },
    /// Destroy the context created with `serial` (ignored if gone).
    Destroy {
        /// Creation serial of the context.
        serial: u64,
    },
    /// Migration `spec` (index into `Scenario::migrations`), due or retried.
    Migrate {
        /// Migration spec index.
        spec: usize,
    },
}

/// Pending work, ordered by (cycle, insertion order).
#[derive(Clone, Debug, Default)]
pub struct Workload {
    queue: BinaryHeap<Reverse<(u64, u64, WorkItem)>>,
    inserted: u64,
}

impl Workload {
    /// The initial timeline of `scenario`.
    pub fn new(scenario: &Scenario) -> Self {
        let mut w = Workload::default();
        for (spec, c) in scenario.contexts.iter().enumerate() {
            w.push(c.create_at, WorkItem::CreateFixed { spec });
        }
        for (spec, c) in scenario.churn.iter().enumerate() {
            if c.stop_at.is_none_or(|stop| c.start_at < stop) {
                w.push(c.start_at, WorkItem::Churn { spec, n: 0 });
            }
        }
        for (spec, m) in scenario.migrations.iter().enumerate() {
            w.push(m.at, WorkItem::Migrate { spec });
        }
        w
    }

    /// Schedules `item` at `cycle`.
    pub fn push(&mut self, cycle: u64, item: WorkItem) {
        self.queue.push(Reverse((cycle, self.inserted, item)));
        self.inserted += 1;
    }

    /// Cycle of the next item.
    pub fn next_time(&self) -> u64 {
        self.queue.peek().map_or(u64::MAX, |Reverse((t, _, _))| *t)
    }

    /// Takes the next item if it is due at or before `now`.
    pub fn pop_due(&mut self, now: u64) -> Option<WorkItem> {
        if self.next_time() <= now {
            self.queue.pop().map(|Reverse((_, _, item))| item)
        } else {
            None
        }
    }
}
