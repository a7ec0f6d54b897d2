//! How a sequence-lock reader waits between failed attempts, shared by
//! the page reader and the commit-mirror reader.

use std::time::{Duration, Instant};

/// Spin for the first `spins` attempts, then yield until `busy` has
/// passed since the spinning ended. The clock is read only once spinning
/// failed, so an uncontended read never pays for it.
///
/// `busy` must outlast a writer preempted in the middle of an update: on
/// a host with every CPU taken, that writer waits at least one scheduler
/// time slice (milliseconds) with the sequence odd, and a reader that
/// gave up sooner would report a live writer as dead.
pub(crate) struct Patience {
    spins: u32,
    busy: Duration,
    attempts: u32,
    yielding_since: Option<Instant>,
}

impl Patience {
    pub(crate) fn new(spins: u32, busy: Duration) -> Self {
        Self {
            spins,
            busy,
            attempts: 0,
            yielding_since: None,
        }
    }

    /// Waits before the next attempt; `false` once the lock counts as
    /// busy.
    pub(crate) fn wait(&mut self) -> bool {
        self.attempts = self.attempts.saturating_add(1);
        if self.attempts < self.spins {
            std::hint::spin_loop();
            return true;
        }
        let since = *self.yielding_since.get_or_insert_with(Instant::now);
        if since.elapsed() >= self.busy {
            return false;
        }
        std::thread::yield_now();
        true
    }
}
