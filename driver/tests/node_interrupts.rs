//! Interrupt records from real device events: blocking, non-blocking and
//! polled reads, several openers, masking, level status until acked, and
//! the real-time clock thread.

use std::io::Read;
use std::os::fd::AsFd;
use std::thread;

use gpupm_test_support::rawnode::{advance, drain_records, identity};
use gpupm_test_support::rawnode::{errno, rd32, rd64, records, wr32};
use gpupm_test_support::{scenario, Driver, DriverOptions};
use gpupm_uapi::intr::source;
use gpupm_uapi::regs::{self, mbox_op, trig_cmd};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

/// A register-write trigger of the system channel: raises TRIGGER_DONE.
fn trigger(card: &std::fs::File) {
    wr32(card, regs::TRIG_TARGET, 1).unwrap();
    wr32(card, regs::TRIG_CMD, trig_cmd::TRIGGER).unwrap();
}

#[test]
fn nonblocking_read_is_eagain_until_a_trigger_completes() {
    let d = Driver::start();
    let mut card = d.card_nonblock();
    let mut buf = [0u8; 64];
    assert_eq!(errno(&card.read(&mut buf).unwrap_err()), libc::EAGAIN);
    let seq = rd64(&card, regs::INTR_SEQ).unwrap();
    trigger(&card);
    let n = card.read(&mut buf).unwrap();
    let recs = records(&buf[..n]);
    assert_eq!(recs.len(), 1);
    let r = recs[0];
    assert_eq!(
        (r.seq, r.source, r.partition),
        (seq, source::TRIGGER_DONE, 0)
    );
    assert_eq!(
        (r.arg, r.arg2),
        (1, trig_cmd::TRIGGER),
        "target mask and command"
    );
    assert_eq!(errno(&card.read(&mut buf).unwrap_err()), libc::EAGAIN);
    d.stop();
}

#[test]
fn blocking_read_waits_for_records_the_advancing_clock_raises() {
    let d = Driver::start();
    let mut reader = d.card();
    let writer = d.card();
    let t = thread::spawn(move || {
        let mut buf = [0u8; 32 * 64];
        let n = reader.read(&mut buf).unwrap();
        records(&buf[..n])
    });
    // Context 2 of VM 1 is created at cycle 5,000 and the first timeslice
    // of partition 1 ends at 30,000: both raise records.
    advance(&writer, 40_000).unwrap();
    let recs = t.join().unwrap();
    assert!(!recs.is_empty());
    assert!(recs.iter().all(|r| r.cycle > 0 && r.cycle <= 40_000));
    assert!(
        recs.iter()
            .any(|r| matches!(r.source, source::CTX_CREATED | source::SWITCH_REQUESTED)),
        "{recs:?}"
    );
    d.stop();
}

#[test]
fn poll_wakes_when_the_advancing_clock_creates_contexts() {
    let d = Driver::start();
    let mut reader = d.card_nonblock();
    let writer = d.card();
    {
        let mut fds = [PollFd::new(reader.as_fd(), PollFlags::POLLIN)];
        assert_eq!(poll(&mut fds, PollTimeout::ZERO).unwrap(), 0);
    }
    let t = thread::spawn(move || {
        let mut fds = [PollFd::new(reader.as_fd(), PollFlags::POLLIN)];
        let n = poll(&mut fds, PollTimeout::from(20_000u16)).unwrap();
        assert_eq!(n, 1, "poll timed out");
        assert!(fds[0].revents().unwrap().contains(PollFlags::POLLIN));
        drain_records(&mut reader)
    });
    advance(&writer, 40_000).unwrap();
    let recs = t.join().unwrap();
    // VM 2's context (cycle 1,000), VM 1's second (5,000), churn (10,000).
    let created: Vec<(u64, u32)> = recs
        .iter()
        .filter(|r| r.source == source::CTX_CREATED)
        .map(|r| (r.cycle, r.arg2))
        .collect();
    assert_eq!(created, [(1_000, 2), (5_000, 1), (10_000, 2)], "{recs:?}");
    d.stop();
}

#[test]
fn poll_reports_pri_while_a_source_is_latched_until_acked() {
    let d = Driver::start();
    let card = d.card();
    let pri = |card: &std::fs::File| {
        let mut fds = [PollFd::new(card.as_fd(), PollFlags::POLLPRI)];
        poll(&mut fds, PollTimeout::ZERO).unwrap() == 1
    };
    // Cycle 0 created contexts and requested switches: latched already.
    assert_ne!(
        rd32(&card, regs::INTR_STATUS).unwrap() & source::CTX_CREATED,
        0
    );
    assert!(pri(&card));
    wr32(&card, regs::INTR_ACK, source::ALL).unwrap();
    assert_eq!(rd32(&card, regs::INTR_STATUS).unwrap(), 0);
    assert!(!pri(&card));
    trigger(&card);
    assert!(pri(&card));
    assert_eq!(
        rd32(&card, regs::INTR_PENDING).unwrap(),
        source::TRIGGER_DONE
    );
    wr32(&card, regs::INTR_ACK, source::TRIGGER_DONE).unwrap();
    assert!(!pri(&card));
    d.stop();
}

#[test]
fn two_openers_each_see_every_interrupt() {
    let d = Driver::start();
    let mut a = d.card_nonblock();
    let mut b = d.card_nonblock();
    let first = rd64(&a, regs::INTR_SEQ).unwrap();
    advance(&a, 200_000).unwrap();
    trigger(&a);
    wr32(&b, regs::MBOX_CMD, mbox_op::READ_CYCLE).unwrap();
    let last = rd64(&a, regs::INTR_SEQ).unwrap();
    assert!(
        last - first > 10,
        "the device raised records while advancing"
    );
    let ra = drain_records(&mut a);
    let rb = drain_records(&mut b);
    assert_eq!(ra, rb);
    let seqs: Vec<u64> = ra.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, (first..last).collect::<Vec<_>>());
    let tail: Vec<u32> = ra[ra.len() - 2..].iter().map(|r| r.source).collect();
    assert_eq!(tail, [source::TRIGGER_DONE, source::MAILBOX_DONE]);
    assert_eq!(ra[ra.len() - 1].arg, mbox_op::READ_CYCLE);
    d.stop();
}

#[test]
fn short_buffers_get_whole_records_and_the_cursor_advances() {
    let d = Driver::start();
    let mut card = d.card_nonblock();
    let seq = rd64(&card, regs::INTR_SEQ).unwrap();
    trigger(&card);
    trigger(&card);
    let mut buf = [0u8; 40];
    let n = card.read(&mut buf).unwrap();
    assert_eq!(n, 32);
    assert_eq!(records(&buf[..n])[0].seq, seq);
    let n = card.read(&mut buf).unwrap();
    assert_eq!(records(&buf[..n])[0].seq, seq + 1);
    assert_eq!(errno(&card.read(&mut buf[..16]).unwrap_err()), libc::EINVAL);
    d.stop();
}

#[test]
fn masked_sources_latch_but_raise_no_record() {
    let d = Driver::start();
    let mut card = d.card_nonblock();
    wr32(&card, regs::INTR_ACK, source::ALL).unwrap();
    wr32(&card, regs::INTR_MASK, source::TRIGGER_DONE).unwrap();
    trigger(&card);
    let mut buf = [0u8; 32];
    assert_eq!(errno(&card.read(&mut buf).unwrap_err()), libc::EAGAIN);
    assert_eq!(
        rd32(&card, regs::INTR_STATUS).unwrap(),
        source::TRIGGER_DONE
    );
    assert_eq!(rd32(&card, regs::INTR_PENDING).unwrap(), 0);
    wr32(&card, regs::INTR_MASK, 0).unwrap();
    wr32(&card, regs::MBOX_CMD, mbox_op::GET_CAPS).unwrap();
    let recs = drain_records(&mut card);
    assert_eq!(
        recs.iter().map(|r| r.source).collect::<Vec<_>>(),
        [source::MAILBOX_DONE]
    );
    d.stop();
}

#[test]
fn realtime_clock_thread_delivers_records_to_a_blocked_reader() {
    let d = Driver::start_with(DriverOptions {
        clock: "realtime",
        ..DriverOptions::toml(scenario::slow_realtime())
    });
    let probe = d.card();
    assert_eq!(identity(&probe).step_clock, 0);
    let e = advance(&probe, 10).unwrap_err();
    assert_eq!(
        errno(&e),
        libc::EINVAL,
        "a real-time clock cannot be stepped"
    );
    let c0 = rd64(&probe, regs::CYCLE).unwrap();
    let mut card = d.card();
    // Nobody services the switches: every 20 ms of wall time a switch is
    // requested and 5 ms later the device completes it itself.
    let mut buf = [0u8; 32];
    let n = card.read(&mut buf).unwrap();
    let rec = records(&buf[..n])[0];
    assert!(
        rec.cycle >= c0,
        "{rec:?} raised before the read started at {c0}"
    );
    assert!(
        matches!(
            rec.source,
            source::SWITCH_REQUESTED | source::SWITCH_FALLBACK
        ),
        "{rec:?}"
    );
    assert!(rd64(&card, regs::CYCLE).unwrap() > c0, "the clock runs");
    d.stop();
}
