//! The unit's drain thread: drains the blocks interrupts name and, while a
//! session is open, every block every [`DRAIN_INTERVAL`]. With no session
//! open there is nothing to drain, so it sleeps on its doorbell until a
//! session opens ([`RiUnit::open`] rings it) or the engine stops
//! ([`RiUnit::wake`]) instead of waking 50 times a second for nothing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Instant;

use super::{RiUnit, DRAIN_INTERVAL};

/// Why the drain thread's doorbell rang.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Wake {
    /// An interrupt named this block.
    Drain(u32),
    /// A session opened, or the engine stops: look at the sessions and the
    /// stop flag.
    Look,
}

/// What the drain thread drains: the unit (a stand-in in tests).
trait Blocks {
    /// Whether any session is open.
    fn any_open(&self) -> bool;
    /// The blocks with an open session.
    fn open_blocks(&self) -> Vec<u32>;
    /// Drains `block`'s session, if any.
    fn drain(&self, block: u32);
}

impl Blocks for RiUnit {
    fn any_open(&self) -> bool {
        self.lock().iter().any(Option::is_some)
    }
    fn open_blocks(&self) -> Vec<u32> {
        self.active_blocks()
    }
    fn drain(&self, block: u32) {
        self.drain_block(block);
    }
}

/// The unit's drain thread, until `stop` is set (and the unit woken).
pub fn run(unit: &RiUnit, stop: &AtomicBool) {
    let (tx, rx) = mpsc::channel();
    *unit.wake.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
    drain_loop(unit, &rx, stop);
    *unit.wake.lock().unwrap_or_else(|e| e.into_inner()) = None;
}

fn drain_loop(unit: &impl Blocks, rx: &Receiver<Wake>, stop: &AtomicBool) {
    // When the next periodic drain is due; `None` while no session is
    // open (the doorbell is then the only way out of the wait).
    let mut due: Option<Instant> = None;
    let mut named = Vec::new();
    while !stop.load(Ordering::Acquire) {
        if due.is_none() && unit.any_open() {
            due = Some(Instant::now() + DRAIN_INTERVAL);
        }
        let first = match due {
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some(at) => rx.recv_timeout(at.saturating_duration_since(Instant::now())),
        };
        match first {
            Ok(w) => named.extend(std::iter::once(w).chain(rx.try_iter()).filter_map(
                |w| match w {
                    Wake::Drain(b) => Some(b),
                    Wake::Look => None,
                },
            )),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        named.sort_unstable();
        named.dedup();
        for b in named.drain(..) {
            unit.drain(b);
        }
        if due.is_some_and(|at| Instant::now() >= at) {
            for b in unit.open_blocks() {
                unit.drain(b);
            }
            due = None;
        }
    }
}

/// Starts the unit's drain thread (after its [`RiUnit::reclaim`]).
pub fn start(
    unit: &Arc<RiUnit>,
    stop: &Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let (unit, stop) = (Arc::clone(unit), Arc::clone(stop));
    std::thread::Builder::new()
        .name("gpupmd-ri".into())
        .spawn(move || run(&unit, &stop))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::Sender;
    use std::sync::Mutex;
    use std::thread;
    use std::time::Duration;

    /// Blocks whose open set the test sets; every look and drain is
    /// reported to the test as it happens.
    struct Fake {
        open: Mutex<Vec<u32>>,
        seen: Mutex<Sender<Event>>,
    }

    #[derive(Debug, PartialEq, Eq)]
    enum Event {
        Looked,
        Drained(u32),
    }

    impl Blocks for Fake {
        fn any_open(&self) -> bool {
            self.seen.lock().unwrap().send(Event::Looked).unwrap();
            !self.open.lock().unwrap().is_empty()
        }
        fn open_blocks(&self) -> Vec<u32> {
            self.open.lock().unwrap().clone()
        }
        fn drain(&self, block: u32) {
            self.seen
                .lock()
                .unwrap()
                .send(Event::Drained(block))
                .unwrap();
        }
    }

    struct Running {
        fake: Arc<Fake>,
        doorbell: Sender<Wake>,
        events: Receiver<Event>,
        stop: Arc<AtomicBool>,
        done: Receiver<()>,
    }

    /// Deadline for anything the thread must do (generous: a loaded CI).
    const DEADLINE: Duration = Duration::from_secs(10);

    fn spawn() -> Running {
        let (seen, events) = mpsc::channel();
        let fake = Arc::new(Fake {
            open: Mutex::new(Vec::new()),
            seen: Mutex::new(seen),
        });
        let (doorbell, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let (done_tx, done) = mpsc::channel();
        {
            let (fake, stop) = (Arc::clone(&fake), Arc::clone(&stop));
            thread::spawn(move || {
                drain_loop(&*fake, &rx, &stop);
                done_tx.send(()).unwrap();
            });
        }
        Running {
            fake,
            doorbell,
            events,
            stop,
            done,
        }
    }

    impl Running {
        fn next(&self) -> Event {
            self.events
                .recv_timeout(DEADLINE)
                .expect("the drain thread did not act")
        }

        /// Asserts the thread does nothing for several drain intervals:
        /// the thread this replaced looked every interval.
        fn assert_asleep(&self) {
            let quiet = self.events.recv_timeout(5 * DRAIN_INTERVAL);
            assert_eq!(quiet, Err(RecvTimeoutError::Timeout), "woke while idle");
        }
    }

    #[test]
    fn with_no_session_it_sleeps_until_one_opens_then_drains_periodically() {
        let t = spawn();
        assert_eq!(t.next(), Event::Looked);
        t.assert_asleep();

        t.fake.open.lock().unwrap().push(7);
        t.doorbell.send(Wake::Look).unwrap();
        assert_eq!(t.next(), Event::Looked, "the open woke it");
        assert_eq!(t.next(), Event::Drained(7), "periodic drain");
        assert_eq!(t.next(), Event::Looked);
        assert_eq!(t.next(), Event::Drained(7), "and the next one");

        t.fake.open.lock().unwrap().clear();
        // The interval in progress may still end in a drain; then it
        // sleeps again.
        let mut settling = 0;
        while t.events.recv_timeout(5 * DRAIN_INTERVAL).is_ok() {
            settling += 1;
            assert!(settling <= 4, "it kept waking with no session open");
        }
    }

    #[test]
    fn an_interrupt_drains_its_block_while_no_session_is_open() {
        let t = spawn();
        assert_eq!(t.next(), Event::Looked);
        t.doorbell.send(Wake::Drain(4)).unwrap();
        assert_eq!(t.next(), Event::Drained(4));
        assert_eq!(t.next(), Event::Looked);
        t.assert_asleep();
    }

    #[test]
    fn stop_wakes_a_sleeping_thread_and_it_ends() {
        let t = spawn();
        assert_eq!(t.next(), Event::Looked);
        t.stop.store(true, Ordering::Release);
        t.doorbell.send(Wake::Look).unwrap();
        t.done
            .recv_timeout(DEADLINE)
            .expect("the thread did not end at stop");
    }

    #[test]
    fn a_gone_doorbell_ends_the_thread() {
        let t = spawn();
        assert_eq!(t.next(), Event::Looked);
        drop(t.doorbell);
        t.done
            .recv_timeout(DEADLINE)
            .expect("the thread did not end without a doorbell");
    }
}
