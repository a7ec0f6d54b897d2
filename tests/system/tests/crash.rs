//! kill -9 of the daemon at random points while the clock advances —
//! mid-handshake, mid-drain, mid-persist — and a restart after each: every
//! total is still exact, nothing retired is lost or persisted twice, and
//! every handshake a killed daemon left half done was finished: by the
//! next daemon, which takes over a switch left between its two batches
//! (`TRIGGERED` or `ACKED`, docs/abi.md §9), or by the device's fallback
//! when the switch timed out while no daemon ran.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use gpupm_system_tests::check_exact;
use gpupm_test_support::device::{
    self, flush, hs_states, step, wait_idle, wait_none_destroyed, Instances,
};
use gpupm_test_support::rng::Rng;
use gpupm_test_support::scenario::{churn, STEP};
use gpupm_test_support::services::{daemon_config, start_daemon};
use gpupm_test_support::{wait_until, Driver, DriverOptions, Scratch};
use gpupm_uapi::regs::{self as r, hs_state, part_status};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const KILLS: u32 = 24;
const SEED: u64 = 0x6770_756d_6b69_6c6c;

/// Brings the device to rest with a live daemon: every requested switch
/// handled, and any switch the daemon still leaves alone finished by the
/// device's fallback (which needs device time: advance past the timeout).
/// That is a safety net: a restarted daemon takes over what a killed one
/// left, which the two `a_restarted_daemon_*` tests below check directly.
fn settle(dev: &gpupm_client::DevNode, daemon: &mut gpupm_test_support::Proc) {
    let timeout = u64::from(
        dev.read32(r::part(1, r::PART_SWITCH_TIMEOUT))
            .expect("timeout"),
    );
    for _ in 0..100 {
        let deadline = Instant::now() + Duration::from_millis(300);
        let idle = wait_idle(dev, || Instant::now() > deadline || !daemon.alive());
        assert!(daemon.alive(), "gpupmd died:\n{}", daemon.log());
        if idle {
            return;
        }
        // Still mid-handshake after the daemon had time for it: abandoned.
        if hs_states(dev)
            .iter()
            .any(|&s| s != hs_state::IDLE && s != hs_state::REQUESTED)
        {
            dev.advance(timeout + 1).expect("advance");
        }
    }
    panic!("device did not settle: {:?}", hs_states(dev));
}

#[test]
fn totals_stay_exact_across_24_kill_9_at_random_points() {
    let t0 = Instant::now();
    let mut rng = Rng(SEED);
    let tmp = Scratch::new("crash");
    let driver = Driver::start_in(&tmp, DriverOptions::system(churn()));
    let dev = driver.node();
    let mut seen = Instances::new(&dev);
    let config = daemon_config(&tmp, "[stream]\nwatermark = 8\n");
    let mut daemon = start_daemon(&tmp, &config);

    for round in 0..KILLS {
        // Let it work for a random number of steps, then kill it after a
        // random delay while the clock keeps advancing.
        for _ in 0..rng.below(40) {
            step(&dev, STEP, &mut daemon);
            seen.update();
        }
        let delay = Duration::from_micros(rng.below(20_000));
        let killed = Arc::new(AtomicBool::new(false));
        let pid = daemon.pid();
        let killer = {
            let killed = Arc::clone(&killed);
            thread::spawn(move || {
                thread::sleep(delay);
                kill(Pid::from_raw(pid.as_raw()), Signal::SIGKILL).expect("kill -9 gpupmd");
                killed.store(true, Ordering::Release);
            })
        };
        while !killed.load(Ordering::Acquire) {
            dev.advance(STEP).expect("advance");
            seen.update();
            wait_idle(&dev, || killed.load(Ordering::Acquire));
        }
        killer.join().expect("killer thread");
        let status = daemon.wait_exit();
        assert_eq!(status.to_string(), "signal: 9 (SIGKILL)", "round {round}");
        // The device runs on without a daemon for a while; sometimes past
        // the switch timeout, so that the fallback finishes waiting switches.
        for _ in 0..rng.below(4) {
            dev.advance(STEP).expect("advance");
            seen.update();
        }
        if rng.below(3) == 0 {
            let timeout = u64::from(
                dev.read32(r::part(1, r::PART_SWITCH_TIMEOUT))
                    .expect("timeout"),
            );
            dev.advance(timeout + 1).expect("advance");
            seen.update();
        }
        daemon = start_daemon(&tmp, &config);
        settle(&dev, &mut daemon);
        flush(&dev);
        settle(&dev, &mut daemon);
        wait_none_destroyed(&dev);
        seen.update();
        let checked = check_exact(&dev, &tmp.join("state"), &seen.destroyed);
        eprintln!("round {round}: killed after {delay:?}, exact: {checked:?}");
    }
    let switches = device::part_sum(&dev, r::PART_SWITCHES);
    let fallbacks = device::part_sum(&dev, r::PART_FALLBACKS);
    eprintln!(
        "{KILLS} kills, {switches} switches, {fallbacks} by fallback, {} retired, {:.1} s",
        seen.destroyed.len(),
        t0.elapsed().as_secs_f64()
    );
    assert!(
        fallbacks > 0,
        "no switch was abandoned: the test did not exercise the fallback"
    );
    // Restarts that found a destroyed context not yet released (the daemon
    // was killed between the destroy and the release, e.g. mid-persist).
    let logs = std::fs::read_to_string(tmp.join("gpupmd.log")).unwrap_or_default();
    let mid_retire = logs
        .lines()
        .filter(|l| l.contains("retired_now=") && !l.contains("retired_now=0"))
        .count();
    eprintln!("{mid_retire} restarts found destroyed contexts not yet released and retired them");
    let status = daemon.signal_and_wait(Signal::SIGTERM);
    assert!(status.success(), "gpupmd exit {status}:\n{}", daemon.log());
    driver.stop();
}

/// Longest a daemon may take to do what needs no device time (answer a
/// switch request with its first batch, finish a switch whose acks are
/// in); nothing else bounds it, as the clock stands still meanwhile.
const ANSWER: Duration = Duration::from_secs(30);
/// Between two looks at the device's registers while waiting for the
/// daemon, which tells the test nothing when it is done.
const POLL: Duration = Duration::from_millis(1);

/// Configured partition slots whose handshake is in `state`.
fn slots_in(dev: &gpupm_client::DevNode, state: u32) -> Vec<u32> {
    device::partitions(dev)
        .into_iter()
        .zip(hs_states(dev))
        .filter(|&(_, s)| s == state)
        .map(|(p, _)| p)
        .collect()
}

/// Waits until `daemon` has done everything it can without device time:
/// no slot waits for a first batch (`REQUESTED`) or a second (`ACKED`).
fn wait_answered(dev: &gpupm_client::DevNode, daemon: &mut gpupm_test_support::Proc) {
    wait_until(
        "the daemon answers what needs no device time",
        ANSWER,
        POLL,
        || {
            assert!(daemon.alive(), "gpupmd died:\n{}", daemon.log());
            let states = hs_states(dev);
            if states.contains(&hs_state::REQUESTED) || states.contains(&hs_state::ACKED) {
                Err(format!("states {states:?}"))
            } else {
                Ok(())
            }
        },
    );
}

/// Advances the clock a trigger period at a time until `daemon` has run
/// some switch's first batch and waits for its flush acks, which only
/// this test's clock can bring; returns those slots (`TRIGGERED`).
fn switches_awaiting_acks(
    dev: &gpupm_client::DevNode,
    daemon: &mut gpupm_test_support::Proc,
) -> Vec<u32> {
    for _ in 0..1000 {
        dev.advance(STEP).expect("advance");
        wait_answered(dev, daemon);
        let triggered = slots_in(dev, hs_state::TRIGGERED);
        if !triggered.is_empty() {
            return triggered;
        }
    }
    panic!("no switch was requested in 1000 trigger periods");
}

/// Per slot: `(PART_SWITCHES, PART_FALLBACKS, PART_NEXT_VM, PART_NEXT_CTX)`.
fn switch_counts(dev: &gpupm_client::DevNode, slots: &[u32]) -> Vec<(u64, u64, u32, u32)> {
    slots
        .iter()
        .map(|&p| {
            let rd = |reg| {
                dev.read64(r::part(p, reg))
                    .expect("read a partition register")
            };
            let rd32 = |reg| {
                dev.read32(r::part(p, reg))
                    .expect("read a partition register")
            };
            (
                rd(r::PART_SWITCHES),
                rd(r::PART_FALLBACKS),
                rd32(r::PART_NEXT_VM),
                rd32(r::PART_NEXT_CTX),
            )
        })
        .collect()
}

/// Asserts that each of `slots` completed one switch since `before` was
/// read, host-driven: idle, running the incoming VM and context, one more
/// switch, no more fallbacks, `LAST_FALLBACK` clear.
fn assert_host_completed(
    dev: &gpupm_client::DevNode,
    slots: &[u32],
    before: &[(u64, u64, u32, u32)],
) {
    for (&p, &(switches, fallbacks, vm, ctx)) in slots.iter().zip(before) {
        let status = dev.read32(r::part(p, r::PART_STATUS)).expect("status");
        assert_eq!(status & part_status::STATE_MASK, hs_state::IDLE, "slot {p}");
        assert_eq!(status & part_status::LAST_FALLBACK, 0, "slot {p}");
        let after = switch_counts(dev, &[p])[0];
        assert_eq!((after.0, after.1), (switches + 1, fallbacks), "slot {p}");
        let cur = (
            dev.read32(r::part(p, r::PART_CUR_VM)).expect("current VM"),
            dev.read32(r::part(p, r::PART_CUR_CTX))
                .expect("current context"),
        );
        assert_eq!(cur, (vm, ctx), "slot {p} runs the incoming context");
    }
}

/// A switch whose first batch the killed daemon ran and whose flush acks
/// arrived (`ACKED`, its `FLUSH_ACKED` record never read) is finished by
/// the next daemon's start-up sweep (docs/abi.md §9), not by the device's
/// fallback. The test owns the step clock and does not move it after the
/// acks: the fallback needs device time past the switch timeout, so a
/// daemon that left the switch alone would leave it in `ACKED` for good.
#[test]
fn a_restarted_daemon_finishes_a_switch_left_in_acked() {
    let tmp = Scratch::new("crash-acked");
    let driver = Driver::start_in(&tmp, DriverOptions::system(churn()));
    let dev = driver.node();
    let config = daemon_config(&tmp, "");
    let mut daemon = start_daemon(&tmp, &config);
    let triggered = switches_awaiting_acks(&dev, &mut daemon);
    // Stopped, the daemon holds the switches but cannot act on their
    // FLUSH_ACKED records; then it dies with them in ACKED.
    kill(daemon.pid(), Signal::SIGSTOP).expect("stop gpupmd");
    // kill() returns before the threads have stopped, and one that has
    // not may still read the FLUSH_ACKED records and finish the switches
    // (4 runs of 15 on one loaded CPU without this wait, 0 of 15 with it).
    let pid = daemon.pid().as_raw();
    wait_until("gpupmd stops", ANSWER, POLL, || {
        if gpupm_test_support::procfs::all_threads_stopped(pid) {
            Ok(())
        } else {
            Err(format!(
                "threads {:?}",
                gpupm_test_support::procfs::thread_states(pid)
            ))
        }
    });
    dev.advance(u64::from(r::FLUSH_ACK_MAX_CYCLES))
        .expect("advance");
    assert_eq!(slots_in(&dev, hs_state::ACKED), triggered);
    let status = daemon.signal_and_wait(Signal::SIGKILL);
    assert_eq!(status.to_string(), "signal: 9 (SIGKILL)");
    let before = switch_counts(&dev, &triggered);
    let cycle = dev.read64(r::CYCLE).expect("cycle");

    let mut daemon = start_daemon(&tmp, &config);
    wait_until(
        "the new daemon finishes the ACKED switches",
        ANSWER,
        POLL,
        || {
            assert!(daemon.alive(), "gpupmd died:\n{}", daemon.log());
            let acked = slots_in(&dev, hs_state::ACKED);
            if triggered.iter().any(|p| acked.contains(p)) {
                Err(format!("still ACKED: {acked:?}"))
            } else {
                Ok(())
            }
        },
    );
    assert_eq!(
        dev.read64(r::CYCLE).expect("cycle"),
        cycle,
        "no device time passed, so no fallback can have run"
    );
    assert_host_completed(&dev, &triggered, &before);
    let expected = u64::try_from(triggered.len()).expect("a count");
    wait_until(
        "the daemon books the switches",
        ANSWER,
        POLL,
        || match daemon.metric("gpupm_handshakes_total") {
            n if n == expected => Ok(()),
            n => Err(format!("{n} handshakes booked")),
        },
    );
    assert_eq!(daemon.metric("gpupm_handshake_fallbacks_total"), 0);
    let status = daemon.signal_and_wait(Signal::SIGTERM);
    assert!(status.success(), "gpupmd exit {status}:\n{}", daemon.log());
    driver.stop();
}

/// A switch whose first batch the killed daemon ran and whose flush acks
/// arrive only after the next daemon started (`TRIGGERED` at its start)
/// is finished by that daemon on the acks' `FLUSH_ACKED` record, not by
/// the fallback: the sweep adopts it as a switch awaiting its acks.
#[test]
fn a_restarted_daemon_finishes_a_switch_left_awaiting_its_acks() {
    let tmp = Scratch::new("crash-triggered");
    let driver = Driver::start_in(&tmp, DriverOptions::system(churn()));
    let dev = driver.node();
    let config = daemon_config(&tmp, "");
    let mut daemon = start_daemon(&tmp, &config);
    let triggered = switches_awaiting_acks(&dev, &mut daemon);
    let status = daemon.signal_and_wait(Signal::SIGKILL);
    assert_eq!(status.to_string(), "signal: 9 (SIGKILL)");
    let before = switch_counts(&dev, &triggered);

    let mut daemon = start_daemon(&tmp, &config);
    dev.advance(u64::from(r::FLUSH_ACK_MAX_CYCLES))
        .expect("advance");
    let cycle = dev.read64(r::CYCLE).expect("cycle");
    wait_until("the new daemon finishes the switches", ANSWER, POLL, || {
        assert!(daemon.alive(), "gpupmd died:\n{}", daemon.log());
        let busy: Vec<u32> = triggered
            .iter()
            .copied()
            .filter(|p| !slots_in(&dev, hs_state::IDLE).contains(p))
            .collect();
        if busy.is_empty() {
            Ok(())
        } else {
            Err(format!("not idle: {busy:?}, states {:?}", hs_states(&dev)))
        }
    });
    assert_eq!(
        dev.read64(r::CYCLE).expect("cycle"),
        cycle,
        "no device time passed after the acks, so no fallback can have run"
    );
    assert_host_completed(&dev, &triggered, &before);
    let status = daemon.signal_and_wait(Signal::SIGTERM);
    assert!(status.success(), "gpupmd exit {status}:\n{}", daemon.log());
    driver.stop();
}
