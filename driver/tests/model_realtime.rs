//! The real-time clock's pacing: a tick stops at a switch request, so the
//! host sees each request at the device time it was raised (as with a
//! device whose clock runs continuously), and the time the tick still owed
//! is caught up once no switch waits — never while one does, which would
//! eat into the host's time before the fallback deadline.

use std::cell::Cell;
use std::time::{Duration, Instant};

use gpupm_driver::host;
use gpupm_driver::model::{Device, EngineKind};
use gpupm_test_support::model::small_scenario;
use gpupm_uapi::regs::{self as r, hs_state, part_status};

const KHZ: u64 = 1_980_000;
const TICK: Duration = Duration::from_micros(250);

fn reg(dev: &Device, off: u64, width: u32) -> u64 {
    dev.read_reg(off, width).expect("register")
}

fn requested(dev: &Device) -> Vec<u32> {
    (1..=2)
        .filter(|&p| {
            let status = u32::try_from(reg(dev, r::part(p, r::PART_STATUS), 4)).expect("32-bit");
            status & part_status::STATE_MASK == hs_state::REQUESTED
        })
        .collect()
}

#[test]
fn ticks_stop_at_switch_requests_and_catch_up_only_while_no_switch_waits() {
    let mut s = small_scenario();
    // Switches every ~0.5 ms of device time, a 2 ms fallback timeout.
    s.switch_timeout_cycles = 3_960_000;
    for part in &mut s.partitions {
        part.ctx_timeslice_cycles = 1_000_000;
        part.vm_timeslice_cycles = 0;
    }
    let mut dev = Device::new(&s, EngineKind::Batched, false).expect("scenario builds");
    let t0 = Instant::now();
    // The test's wall clock. While the host waits for flush acks, it lets
    // a microsecond of it pass (the acks take a few hundred cycles).
    let wall = Cell::new(t0);
    let answer = |dev: &mut Device, p: u32| {
        host::handshake_with(dev, p, |d| {
            wall.set(wall.get() + Duration::from_micros(1));
            d.tick(wall.get());
            Ok(())
        })
        .expect("handshake")
    };
    dev.tick(t0);
    // The first contexts are switched in at cycle 0.
    for p in requested(&dev) {
        assert!(answer(&mut dev, p));
    }

    // A late tick owes 1 ms; the first request comes well before that.
    wall.set(t0 + Duration::from_millis(1));
    dev.tick(wall.get());
    let cycle = reg(&dev, r::CYCLE, 8);
    let waiting = requested(&dev);
    assert!(
        !waiting.is_empty(),
        "no request within 1 ms at cycle {cycle}"
    );
    for &p in &waiting {
        assert_eq!(reg(&dev, r::part(p, r::PART_SWITCH_REQ_CYCLE), 8), cycle);
    }
    assert!(cycle < KHZ, "the tick ran past the request: {cycle}");

    // While the host has not answered, device time follows the wall clock
    // exactly: the owed time is not caught up.
    wall.set(wall.get() + Duration::from_micros(100));
    dev.tick(wall.get());
    assert_eq!(reg(&dev, r::CYCLE, 8), cycle + KHZ / 10);

    // The host answers every request at once from here on: over 20 ms the
    // device catches up and lags the wall clock by at most one tick's stop.
    let mut answered = 0;
    for p in requested(&dev) {
        assert!(answer(&mut dev, p));
    }
    for _ in 0..80 {
        wall.set(wall.get() + TICK);
        dev.tick(wall.get());
        let waiting = requested(&dev);
        let cycle = reg(&dev, r::CYCLE, 8);
        for &p in &waiting {
            assert_eq!(
                reg(&dev, r::part(p, r::PART_SWITCH_REQ_CYCLE), 8),
                cycle,
                "partition {p}'s request was raised before the tick's end"
            );
        }
        for p in waiting {
            assert!(answer(&mut dev, p));
            answered += 1;
        }
    }
    let t = wall.get();
    let wall = u64::try_from(t.duration_since(t0).as_micros()).unwrap() * KHZ / 1000;
    let cycle = reg(&dev, r::CYCLE, 8);
    assert!(answered >= 30, "only {answered} switches");
    assert!(
        cycle <= wall && wall - cycle <= KHZ,
        "device at {cycle}, wall clock at {wall}"
    );
    let fallbacks: u64 = (1..=2)
        .map(|p| reg(&dev, r::part(p, r::PART_FALLBACKS), 8))
        .sum();
    assert_eq!(fallbacks, 0);
}

#[test]
fn time_the_clock_could_not_run_is_counted_in_clock_lag() {
    let mut s = small_scenario();
    s.switch_timeout_cycles = 3_960_000;
    for part in &mut s.partitions {
        part.ctx_timeslice_cycles = 1_000_000;
        part.vm_timeslice_cycles = 0;
    }
    let mut dev = Device::new(&s, EngineKind::Batched, false).expect("scenario builds");
    let t0 = Instant::now();
    let wall = Cell::new(t0);
    let tick_and_answer = |dev: &mut Device, after: Duration| {
        wall.set(wall.get() + after);
        dev.tick(wall.get());
        for p in requested(dev) {
            let answered = host::handshake_with(dev, p, |d| {
                wall.set(wall.get() + Duration::from_micros(1));
                d.tick(wall.get());
                Ok(())
            })
            .expect("handshake");
            assert!(answered);
        }
    };
    dev.tick(t0);
    // Regular ticks: nothing is dropped.
    for _ in 0..40 {
        tick_and_answer(&mut dev, TICK);
    }
    assert_eq!(reg(&dev, r::CLOCK_LAG, 8), 0);
    // A tick 30 ms late runs 1 ms and drops the other 29, to the cycle.
    tick_and_answer(&mut dev, Duration::from_millis(30));
    assert_eq!(reg(&dev, r::CLOCK_LAG, 8), 29 * KHZ);
    for _ in 0..40 {
        tick_and_answer(&mut dev, TICK);
    }
    assert_eq!(
        reg(&dev, r::CLOCK_LAG, 8),
        29 * KHZ,
        "nothing more was dropped"
    );
    // The device's time and the time it dropped make up the wall clock's
    // (up to what a tick owes while it stops at a request).
    let since = u64::try_from(wall.get().duration_since(t0).as_nanos()).unwrap() * KHZ / 1_000_000;
    let accounted = reg(&dev, r::CYCLE, 8) + reg(&dev, r::CLOCK_LAG, 8);
    assert!(
        accounted <= since && since - accounted <= KHZ,
        "device time + lag {accounted}, wall clock {since}"
    );
    // A step clock drops nothing.
    let mut step = Device::new(&s, EngineKind::Batched, true).expect("scenario builds");
    step.advance(1_000_000).expect("advance");
    assert_eq!(reg(&step, r::CLOCK_LAG, 8), 0);
}
