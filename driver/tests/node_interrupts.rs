//! Interrupt records: blocking, non-blocking and polled reads, several
//! openers, masking, and the real-time clock thread.

mod harness;

use std::io::Read;
use std::os::fd::AsFd;
use std::thread;

use harness::{errno, records, wr32, Driver, Options};
use gpupm_uapi::intr::source;
use gpupm_uapi::regs;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

fn trigger(card: &std::fs::File) {
    wr32(card, regs::TRIG_CMD, regs::trig_cmd::TRIGGER).unwrap();
}

#[test]
fn nonblocking_read_is_eagain_until_a_record_exists() {
    let d = Driver::start();
    let mut card = d.card_nonblock();
    let mut buf = [0u8; 64];
    assert_eq!(errno(&card.read(&mut buf).unwrap_err()), libc::EAGAIN);
    trigger(&card);
    let n = card.read(&mut buf).unwrap();
    let recs = records(&buf[..n]);
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].source, source::TRIGGER_DONE);
    assert_eq!(recs[0].seq, 1);
    assert_eq!(errno(&card.read(&mut buf).unwrap_err()), libc::EAGAIN);
    d.stop();
}

#[test]
fn blocking_read_waits_for_the_next_record() {
    let d = Driver::start();
    let mut reader = d.card();
    let writer = d.card();
    let t = thread::spawn(move || {
        let mut buf = [0u8; 32 * 4];
        let n = reader.read(&mut buf).unwrap();
        records(&buf[..n])
    });
    trigger(&writer);
    let recs = t.join().unwrap();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].source, source::TRIGGER_DONE);
    d.stop();
}

#[test]
fn poll_wakes_when_a_record_arrives() {
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
        let mut buf = [0u8; 32];
        let n = reader.read(&mut buf).unwrap();
        records(&buf[..n])
    });
    trigger(&writer);
    assert_eq!(t.join().unwrap().len(), 1);
    d.stop();
}

#[test]
fn poll_reports_pri_while_a_source_is_latched_until_acked() {
    let d = Driver::start();
    let card = d.card();
    trigger(&card);
    let pri = |card: &std::fs::File| {
        let mut fds = [PollFd::new(card.as_fd(), PollFlags::POLLPRI)];
        poll(&mut fds, PollTimeout::ZERO).unwrap() == 1
    };
    assert!(pri(&card));
    wr32(&card, regs::INTR_ACK, source::TRIGGER_DONE).unwrap();
    assert!(!pri(&card));
    d.stop();
}

#[test]
fn two_openers_each_see_every_interrupt() {
    let d = Driver::start();
    let mut a = d.card_nonblock();
    let mut b = d.card_nonblock();
    for _ in 0..5 {
        trigger(&a);
    }
    wr32(&a, regs::MBOX_CMD, regs::mbox_op::READ_CYCLE).unwrap();
    for f in [&mut a, &mut b] {
        let mut buf = [0u8; 32 * 16];
        let n = f.read(&mut buf).unwrap();
        let recs = records(&buf[..n]);
        let seqs: Vec<u64> = recs.iter().map(|r| r.seq).collect();
        assert_eq!(seqs, [1, 2, 3, 4, 5, 6]);
        assert_eq!(recs[5].source, source::MAILBOX_DONE);
    }
    d.stop();
}

#[test]
fn short_buffers_get_whole_records_and_the_cursor_advances() {
    let d = Driver::start();
    let mut card = d.card_nonblock();
    trigger(&card);
    trigger(&card);
    let mut buf = [0u8; 40];
    let n = card.read(&mut buf).unwrap();
    assert_eq!(n, 32);
    assert_eq!(records(&buf[..n])[0].seq, 1);
    let n = card.read(&mut buf).unwrap();
    assert_eq!(records(&buf[..n])[0].seq, 2);
    assert_eq!(errno(&card.read(&mut buf[..16]).unwrap_err()), libc::EINVAL);
    d.stop();
}

#[test]
fn masked_sources_raise_no_record() {
    let d = Driver::start();
    let mut card = d.card_nonblock();
    wr32(&card, regs::INTR_MASK, source::TRIGGER_DONE).unwrap();
    trigger(&card);
    let mut buf = [0u8; 32];
    assert_eq!(errno(&card.read(&mut buf).unwrap_err()), libc::EAGAIN);
    d.stop();
}

#[test]
fn realtime_clock_thread_delivers_periodic_records_to_a_blocked_reader() {
    let d = Driver::start_with(Options {
        clock: "realtime",
        ..Options::default()
    });
    let mut card = d.card();
    wr32(&card, regs::TRIG_PERIOD, 1 << 20).unwrap();
    wr32(&card, regs::TRIG_CTRL, regs::trig_ctrl::PERIODIC_ENABLE).unwrap();
    let mut buf = [0u8; 32];
    let n = card.read(&mut buf).unwrap();
    assert_eq!(records(&buf[..n])[0].source, source::TRIGGER_DONE);
    d.stop();
}
