//! The handshake engine against the real driver (step clock, nobody else
//! servicing the device): it reports how long after the device's request
//! the host paused the partition, and the interrupt acknowledgement it is
//! given rides in its last batch only when the switch completes.

use gpupm_client::handshake::{self, Outcome};
use gpupm_client::DevNode;
use gpupm_test_support::device::{hs_states, partitions};
use gpupm_test_support::scenario::churn;
use gpupm_test_support::{Driver, DriverOptions, Scratch};
use gpupm_uapi::intr::source;
use gpupm_uapi::regs::{self as r, hs_state, part_status};

/// Cycles advanced per step while waiting for a request.
const STEP: u64 = 1000;
/// Extra device time after the request before the host answers (far
/// inside the scenario's switch timeout).
const LATE: u64 = 12_345;

/// Advances until some partition waits for the host; returns it.
fn first_request(dev: &DevNode) -> u32 {
    for _ in 0..1_000_000 {
        let states = hs_states(dev);
        if let Some(i) = states.iter().position(|&s| s == hs_state::REQUESTED) {
            return partitions(dev)[i];
        }
        dev.advance(STEP).expect("advance");
    }
    panic!("the device never requested a switch");
}

#[test]
fn a_completed_handshake_reports_its_response_time_and_carries_the_ack() {
    let tmp = Scratch::new("handshake");
    let driver = Driver::start_in(&tmp, DriverOptions::system(churn()));
    let dev = driver.node();
    let p = first_request(&dev);
    dev.advance(LATE).expect("advance");
    let status = dev.read32(r::part(p, r::PART_STATUS)).unwrap();
    assert_eq!(status & part_status::STATE_MASK, hs_state::REQUESTED);
    let requested = dev.read64(r::part(p, r::PART_SWITCH_REQ_CYCLE)).unwrap();
    let now = dev.read64(r::CYCLE).unwrap();
    assert!(now - requested >= LATE);
    assert_ne!(
        dev.read32(r::INTR_STATUS).unwrap() & source::SWITCH_REQUESTED,
        0
    );
    let switches = dev.read64(r::part(p, r::PART_SWITCHES)).unwrap();

    let mut ack = source::SWITCH_REQUESTED;
    // Steps 1-4: no device time passes in them, so the flush acks are
    // still travelling (ABI 1.3) and the ack is not written yet.
    let outcome = handshake::run(&mut &dev, p, &mut ack).expect("handshake");
    let Outcome::AwaitingAcks(pending) = outcome else {
        panic!("acks arrived without device time: {outcome:?}");
    };
    assert_eq!(pending.response_cycles, now - requested);
    assert_eq!(
        ack,
        source::SWITCH_REQUESTED,
        "no ack before the last batch"
    );
    // This test owns the step clock: it lets the acks' time pass.
    dev.advance(u64::from(r::FLUSH_ACK_MAX_CYCLES))
        .expect("advance");
    assert_ne!(dev.read32(r::INTR_STATUS).unwrap() & source::FLUSH_ACKED, 0);
    let outcome = handshake::resume(&mut &dev, &pending, &mut ack).expect("resume");
    assert_eq!(
        outcome,
        Outcome::Done {
            response_cycles: now - requested
        }
    );
    assert_eq!(ack, 0, "the ack was written with the last batch");
    assert_eq!(
        dev.read32(r::INTR_STATUS).unwrap() & source::SWITCH_REQUESTED,
        0
    );
    assert_eq!(
        dev.read64(r::part(p, r::PART_SWITCHES)).unwrap(),
        switches + 1
    );
    assert_eq!(dev.read64(r::part(p, r::PART_FALLBACKS)).unwrap(), 0);

    // Nothing requested any more: nothing is written, the ack included.
    let digest = (dev.read32(r::INTR_STATUS).unwrap(), hs_states(&dev));
    let mut ack = source::TRIGGER_DONE;
    let again = handshake::run(&mut &dev, p, &mut ack).expect("second attempt");
    assert_eq!(again, Outcome::NotRequested);
    assert_eq!(ack, source::TRIGGER_DONE, "an ack not written stays owed");
    assert_eq!(
        (dev.read32(r::INTR_STATUS).unwrap(), hs_states(&dev)),
        digest
    );
    driver.stop();
}
