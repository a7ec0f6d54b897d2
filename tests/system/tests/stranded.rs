//! No stream record is stranded: `gpupm-driver` (step clock) and `gpupmd`
//! as processes; the test stops the clock hundreds of times at seeded
//! random points and, each time, requires every ring to become empty
//! (`PART_STREAM_HEAD == PART_STREAM_TAIL`, read through the node) and
//! every partition idle within a bound, waiting on that condition.
//!
//! `STREAM_WATERMARK` is edge-triggered, so two things can strand a
//! record once the clock stops: a commit that lands while the daemon
//! drains (its tail write re-arms the interrupt, but nothing raises it
//! again), and records below the watermark (which raise nothing). The
//! first test leaves the daemon its periodic drain; the second turns the
//! periodic drain off and sets the watermark to 1, so only draining until
//! the ring is empty keeps every ring empty.

use std::time::{Duration, Instant};

use gpupm_client::ops::{read32, reg32};
use gpupm_client::DevNode;
use gpupm_test_support::rng::Rng;
use gpupm_test_support::scenario::{churn, CHURN_PARTS as PARTS, STEP};
use gpupm_test_support::services::{daemon_config, start_daemon};
use gpupm_test_support::{Driver, DriverOptions, Proc, Scratch};
use gpupm_uapi::regs::{self as r, hs_state, part_status};
use nix::sys::signal::Signal;

/// Clock stops per test.
const STOPS: u32 = 300;
/// Longest the daemon may take to empty every ring after a stop.
const BOUND: Duration = Duration::from_secs(10);

/// Seeded, reproducible stop points.
struct StopPoints(Rng);

impl StopPoints {
    /// Cycles to run before the next stop: 1 ..= 2 × [`STEP`], so a stop
    /// falls anywhere in a trigger period or a timeslice.
    fn next(&mut self) -> u64 {
        1 + self.0.below(2 * STEP)
    }
}

/// What one atomic batch saw: per ring slot (0 = RC0, then [`PARTS`])
/// `(head, tail)`, the partitions not idle, and whether one of them
/// waits for flush acks (`TRIGGERED`).
#[derive(Debug, PartialEq, Eq)]
struct Snapshot {
    rings: Vec<(u32, u32, u32)>,
    busy: Vec<u32>,
    awaiting_acks: bool,
}

impl Snapshot {
    fn take(dev: &DevNode) -> Snapshot {
        let slots: Vec<u32> = std::iter::once(0).chain(PARTS).collect();
        let mut ops: Vec<_> = slots
            .iter()
            .flat_map(|&p| {
                [
                    read32(r::part(p, r::PART_STREAM_HEAD)),
                    read32(r::part(p, r::PART_STREAM_TAIL)),
                ]
            })
            .chain(PARTS.map(|p| read32(r::part(p, r::PART_STATUS))))
            .collect();
        dev.batch(&mut ops)
            .expect("read rings and partition status");
        let (ring_ops, status_ops) = ops.split_at(2 * slots.len());
        let state = |s: &gpupm_uapi::ioctl::RegOp| reg32(s.value) & part_status::STATE_MASK;
        Snapshot {
            awaiting_acks: status_ops.iter().any(|s| state(s) == hs_state::TRIGGERED),
            rings: slots
                .iter()
                .zip(ring_ops.chunks_exact(2))
                .map(|(&p, hd)| (p, reg32(hd[0].value), reg32(hd[1].value)))
                .collect(),
            busy: PARTS
                .zip(status_ops)
                .filter(|(_, s)| state(s) != hs_state::IDLE)
                .map(|(p, _)| p)
                .collect(),
        }
    }

    fn settled(&self) -> bool {
        self.busy.is_empty() && self.rings.iter().all(|&(_, head, tail)| head == tail)
    }
}

/// Stops the clock [`STOPS`] times at points drawn from `seed`; after each
/// stop every ring must be empty and every partition idle within
/// [`BOUND`]. Returns how many stops found records waiting at first.
fn every_stop_settles(tag: &str, program: &str, seed: u64) -> u32 {
    let tmp = Scratch::new(tag);
    let driver = Driver::start_in(&tmp, DriverOptions::system(churn()));
    let dev = driver.node();
    let mut daemon = start_daemon(&tmp, &daemon_config(&tmp, program));
    let mut points = StopPoints(Rng(seed));
    let mut waited = 0;
    let mut cycle = 0;
    for stop in 0..STOPS {
        cycle = dev.advance(points.next()).expect("advance the step clock");
        let first = Snapshot::take(&dev);
        if !first.settled() {
            waited += 1;
        }
        wait_settled(&dev, &mut daemon, stop, cycle, first);
    }
    eprintln!(
        "{tag}: {STOPS} stops up to cycle {cycle}, {waited} found records or requests waiting"
    );
    let status = daemon.signal_and_wait(Signal::SIGTERM);
    assert!(status.success(), "gpupmd exit {status}:\n{}", daemon.log());
    driver.stop();
    waited
}

fn wait_settled(dev: &DevNode, daemon: &mut Proc, stop: u32, cycle: u64, first: Snapshot) {
    let deadline = Instant::now() + BOUND;
    let mut now = first;
    while !now.settled() {
        assert!(daemon.alive(), "gpupmd died:\n{}", daemon.log());
        assert!(
            Instant::now() < deadline,
            "stop {stop} at cycle {cycle}: not settled within {BOUND:?}: \
             rings (slot, head, tail) {:?}, partitions not idle {:?}",
            now.rings,
            now.busy
        );
        // Flush acks travel in device time, and only the owner of the step
        // clock (this test; gpupmd never moves it) lets that time pass.
        if now.awaiting_acks {
            dev.advance(u64::from(r::FLUSH_ACK_MAX_CYCLES))
                .expect("advance for flush acks");
        }
        std::thread::yield_now();
        now = Snapshot::take(dev);
    }
}

#[test]
fn every_ring_empties_within_the_bound_after_each_of_300_random_clock_stops() {
    let waited = every_stop_settles(
        "stranded-periodic",
        "[stream]\nwatermark = 16\ndrain_interval_ms = 20\n",
        0x5eed_0001,
    );
    assert!(
        waited > STOPS / 2,
        "only {waited} stops left anything to drain"
    );
}

#[test]
fn interrupt_driven_drains_leave_no_ring_behind_after_each_of_300_random_clock_stops() {
    let waited = every_stop_settles(
        "stranded-irq",
        "[stream]\nwatermark = 1\ndrain_interval_ms = 0\n",
        0x5eed_0002,
    );
    assert!(
        waited > STOPS / 2,
        "only {waited} stops left anything to drain"
    );
}
