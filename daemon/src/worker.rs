//! The daemon's one way to run background work: a named thread that
//! sleeps on a [`Doorbell`] until something rings it or its period ends,
//! runs one pass, and stops (joined) when its [`Worker`] is dropped.
//!
//! gpupmd runs on threads: the engine, the drains, the tenant node's
//! serving threads, the pages refresher and these workers. tokio is used
//! by the metrics endpoint alone, on a runtime of its own
//! ([`crate::metrics::Running`]), for its HTTP and TLS stack.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::Duration;

#[derive(Debug, Default)]
struct BellState {
    /// Rings so far (a generation: a wait compares it, so a ring between
    /// two waits is never lost).
    rung: u64,
    stop: bool,
}

/// Wakes a [`Worker`]: rung by whoever has work for it.
#[derive(Debug, Default)]
pub struct Doorbell {
    state: Mutex<BellState>,
    cond: Condvar,
}

/// Why a wait on a [`Doorbell`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Woken {
    /// Rung since the generation the waiter had seen (the new one).
    Rung(u64),
    /// The period ended without a ring.
    Timeout,
    /// The worker is stopping.
    Stopped,
}

impl Doorbell {
    /// A new doorbell, shared by ringers and its worker.
    pub fn new() -> Arc<Doorbell> {
        Arc::new(Doorbell::default())
    }

    /// Wakes the worker (once, however often it is rung before it wakes).
    pub fn ring(&self) {
        let mut s = self.lock();
        s.rung = s.rung.wrapping_add(1);
        self.cond.notify_all();
    }

    /// The current generation, to wait from.
    pub fn generation(&self) -> u64 {
        self.lock().rung
    }

    /// Waits until the generation moves past `seen`, `period` passes (if
    /// given) or the bell stops.
    pub fn wait(&self, seen: u64, period: Option<Duration>) -> Woken {
        let s = self.lock();
        let pending = |s: &mut BellState| s.rung == seen && !s.stop;
        let s = match period {
            Some(p) => {
                self.cond
                    .wait_timeout_while(s, p, pending)
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            }
            None => self
                .cond
                .wait_while(s, pending)
                .unwrap_or_else(|e| e.into_inner()),
        };
        if s.stop {
            Woken::Stopped
        } else if s.rung != seen {
            Woken::Rung(s.rung)
        } else {
            Woken::Timeout
        }
    }

    fn stop(&self) {
        self.lock().stop = true;
        self.cond.notify_all();
    }

    fn lock(&self) -> MutexGuard<'_, BellState> {
        // Two plain fields, consistent after every update.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A background thread running one pass per ring of its doorbell or per
/// period; stopped and joined on drop.
#[derive(Debug)]
pub struct Worker {
    bell: Arc<Doorbell>,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    /// Starts the thread `name`: `pass` runs after every ring of `bell`
    /// from the moment this is called and, when `period` is given, at
    /// least once per period. A ring during a pass runs another pass
    /// right after it.
    pub fn start(
        name: &str,
        bell: Arc<Doorbell>,
        period: Option<Duration>,
        mut pass: impl FnMut() + Send + 'static,
    ) -> std::io::Result<Worker> {
        // Taken here, not on the thread: a ring between this call's
        // return and the thread's first wait must run a pass.
        let mut seen = bell.generation();
        let thread = {
            let bell = Arc::clone(&bell);
            thread::Builder::new()
                .name(name.into())
                .spawn(move || loop {
                    match bell.wait(seen, period) {
                        Woken::Stopped => return,
                        Woken::Rung(now) => seen = now,
                        Woken::Timeout => {}
                    }
                    pass();
                })?
        };
        Ok(Worker {
            bell,
            thread: Some(thread),
        })
    }

    /// The doorbell that wakes this worker.
    pub fn bell(&self) -> &Arc<Doorbell> {
        &self.bell
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.bell.stop();
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!("a gpupmd worker thread panicked");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    #[test]
    fn a_ring_before_the_wait_is_not_lost() {
        let bell = Doorbell::new();
        let seen = bell.generation();
        bell.ring();
        bell.ring();
        assert_eq!(bell.wait(seen, None), Woken::Rung(seen + 2));
        assert_eq!(
            bell.wait(seen + 2, Some(Duration::from_millis(1))),
            Woken::Timeout
        );
    }

    #[test]
    fn every_ring_runs_a_pass_and_drop_stops_the_thread() {
        let (tx, rx) = mpsc::channel();
        let bell = Doorbell::new();
        let worker = Worker::start("gpupm-test-worker", Arc::clone(&bell), None, move || {
            tx.send(()).unwrap();
        })
        .unwrap();
        for _ in 0..3 {
            worker.bell().ring();
            // One pass per ring seen: the next ring waits for this pass.
            rx.recv().unwrap();
        }
        drop(worker);
        // The sender went with the thread: no pass runs after the stop.
        assert!(rx.recv().is_err());
    }

    #[test]
    fn a_periodic_worker_runs_without_rings() {
        let (tx, rx) = mpsc::channel();
        let worker = Worker::start(
            "gpupm-test-periodic",
            Doorbell::new(),
            Some(Duration::from_millis(1)),
            // The worker is dropped (joined) before the receiver.
            move || tx.send(()).unwrap(),
        )
        .unwrap();
        rx.recv().unwrap();
        rx.recv().unwrap();
        drop(worker);
    }
}
