//! kill -9 of the daemon at random points while the clock advances —
//! mid-handshake, mid-drain, mid-persist — and a restart after each: every
//! total is still exact, nothing retired is lost or persisted twice, and
//! the device's fallback finished every handshake the daemon abandoned.

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
use gpupm_test_support::{Driver, DriverOptions, Scratch};
use gpupm_uapi::regs::{self as r, hs_state};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const KILLS: u32 = 24;
const SEED: u64 = 0x6770_756d_6b69_6c6c;

/// Brings the device to rest with a live daemon: every requested switch
/// handled, every switch abandoned by a killed daemon finished by the
/// device's fallback (which needs device time: advance past the timeout).
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
