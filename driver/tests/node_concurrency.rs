//! The node served by several threads (`--threads 2`): each event loop
//! reads its own clone of the `/dev/fuse` descriptor; blocking interrupt
//! reads parked on more handles than there are serving threads hold none
//! of them (register reads, writes and batches from another handle go
//! through, and a poller still wakes); and `GPUPM_IOC_REG_BATCH` stays
//! atomic while two clients run read-modify-write batches on the same
//! register at once.
//!
//! Needs root and `/dev/fuse`.

use std::fs::{self, File};
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::{mpsc, Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use gpupm_test_support::rawnode::{batch, read_op, write_op};
use gpupm_test_support::rawnode::{rd32, records, wr32};
use gpupm_test_support::{Driver, DriverOptions};
use gpupm_uapi::intr::source;
use gpupm_uapi::ioctl::RegOp;
use gpupm_uapi::regs::{self, trig_cmd};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

const THREADS: usize = 2;
/// How long an operation that must not wait for anything may take before
/// the test calls it stuck (generous: the machine is shared).
const STUCK: Duration = Duration::from_secs(20);

fn driver() -> Driver {
    Driver::start_with(DriverOptions {
        threads: Some(THREADS),
        ..DriverOptions::default()
    })
}

/// Names of the driver's threads, from `/proc/<pid>/task/*/comm`.
fn thread_names(d: &Driver) -> Vec<String> {
    let pid = u32::try_from(d.pid().as_raw()).expect("a pid");
    gpupm_test_support::rawnode::thread_names_once_loops_run(pid, THREADS, STUCK)
}

/// How many of the driver's descriptors are `/dev/fuse`.
fn fuse_fds(d: &Driver) -> usize {
    fs::read_dir(format!("/proc/{}/fd", d.pid()))
        .unwrap()
        .filter_map(|e| fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.as_os_str() == "/dev/fuse")
        .count()
}

/// Thread id of the calling thread.
fn gettid() -> i32 {
    nix::unistd::gettid().as_raw()
}

/// Whether thread `tid` of this process sits in `read(fd, ..)` (per
/// `/proc/self/task/<tid>/syscall`: number, then arguments in hex).
fn blocked_in_read(tid: i32, fd: i32) -> bool {
    let Ok(text) = fs::read_to_string(format!("/proc/self/task/{tid}/syscall")) else {
        return false;
    };
    let mut fields = text.split_whitespace();
    let nr = fields.next().and_then(|n| n.parse::<i64>().ok());
    let arg0 = fields
        .next()
        .and_then(|a| i64::from_str_radix(a.trim_start_matches("0x"), 16).ok());
    nr == Some(libc::SYS_read) && arg0 == Some(i64::from(fd))
}

/// Runs `f` on its own thread and fails the test if it does not finish
/// within [`STUCK`].
fn within_deadline<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || tx.send(f()).ok());
    rx.recv_timeout(STUCK)
        .unwrap_or_else(|_| panic!("{what} did not finish within {STUCK:?}"))
}

#[test]
fn each_serving_thread_reads_its_own_clone_of_the_fuse_descriptor() {
    let d = driver();
    let names = thread_names(&d);
    let loops: Vec<&String> = names.iter().filter(|n| n.starts_with("fuser-")).collect();
    assert_eq!(loops.len(), THREADS, "event-loop threads: {names:?}");
    assert_eq!(fuse_fds(&d), THREADS, "one /dev/fuse descriptor per loop");
    d.stop();
}

#[test]
fn parked_blocking_reads_hold_no_serving_thread() {
    let d = driver();
    // More blocked readers than serving threads: if a blocking read held
    // its thread, nothing else could be served after these.
    let readers: Vec<File> = (0..THREADS + 1).map(|_| d.card()).collect();
    let poller = d.card_nonblock();
    let (tid_tx, tid_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    for mut card in readers {
        let (tid_tx, done_tx) = (tid_tx.clone(), done_tx.clone());
        thread::spawn(move || {
            tid_tx.send((gettid(), card.as_raw_fd())).unwrap();
            let mut buf = [0u8; 32 * 8];
            let res = card.read(&mut buf).map(|n| records(&buf[..n]));
            done_tx.send(res).ok();
        });
    }
    let (poll_tx, poll_rx) = mpsc::channel();
    thread::spawn(move || {
        let mut fds = [PollFd::new(poller.as_fd(), PollFlags::POLLIN)];
        let res = poll(&mut fds, PollTimeout::from(20_000u16)).map(|n| (n, fds[0].revents()));
        poll_tx.send(res).ok();
    });

    // Every reader's request is with the node before anything else is sent.
    let deadline = Instant::now() + STUCK;
    for (tid, fd) in tid_rx.iter().take(THREADS + 1) {
        while !blocked_in_read(tid, fd) {
            assert!(
                Instant::now() < deadline,
                "reader {tid} never blocked in read"
            );
            thread::yield_now();
        }
    }
    assert!(
        done_rx.try_recv().is_err(),
        "a blocking read returned with no record raised"
    );

    let path = d.card_path();
    let mbox = within_deadline(
        "open and register access while reads are parked",
        move || {
            let card = File::options().read(true).write(true).open(path).unwrap();
            assert_eq!(rd32(&card, regs::ID).unwrap(), regs::DEVICE_MAGIC);
            wr32(&card, regs::MBOX_ARG, 0x5eed).unwrap();
            let mut ops = [
                read_op(regs::MBOX_ARG, 4),
                write_op(regs::MBOX_ARG, 0xbeef),
                read_op(regs::MBOX_ARG, 4),
            ];
            batch(&card, &mut ops).unwrap();
            (ops[0].value, ops[2].value, card)
        },
    );
    assert_eq!((mbox.0, mbox.1), (0x5eed, 0xbeef), "batch read-backs");
    let card = mbox.2;

    // One record completes every parked read (each handle sees every
    // record) and wakes the poller.
    wr32(&card, regs::TRIG_TARGET, 1).unwrap();
    wr32(&card, regs::TRIG_CMD, trig_cmd::TRIGGER).unwrap();
    for _ in 0..=THREADS {
        let recs = done_rx
            .recv_timeout(STUCK)
            .expect("a parked read completes once a record exists")
            .expect("blocking read");
        assert_eq!(recs.len(), 1, "{recs:?}");
        assert_eq!(recs[0].source, source::TRIGGER_DONE);
    }
    let (n, revents) = poll_rx
        .recv_timeout(STUCK)
        .expect("the poller wakes")
        .expect("poll");
    assert_eq!(n, 1, "poll timed out");
    assert!(revents.unwrap().contains(PollFlags::POLLIN));
    drop(card);
    d.stop();
}

/// Value written by `client`'s batch `k` at op `i`; the last write of a
/// batch carries [`FINAL`] in its low byte.
fn value(client: u64, k: u64, i: u64) -> u64 {
    (client << 28) | ((k & 0xf_ffff) << 8) | i
}
const FINAL: u64 = 0xff;
const OPS_PER_BATCH: usize = 32;

/// A read-modify-write batch on `MBOX_ARG` (a plain RW register): read,
/// then pairs of write and read-back, the last write marked [`FINAL`].
fn rmw_batch(client: u64, k: u64) -> Vec<RegOp> {
    let mut ops = vec![read_op(regs::MBOX_ARG, 4)];
    let pairs = (OPS_PER_BATCH - 1) / 2;
    for i in 0..pairs as u64 {
        let i = if i + 1 == pairs as u64 { FINAL } else { i };
        ops.push(write_op(regs::MBOX_ARG, value(client, k, i)));
        ops.push(read_op(regs::MBOX_ARG, 4));
    }
    ops
}

#[test]
fn concurrent_batches_never_interleave() {
    const BATCHES: u64 = 3_000;
    let d = driver();
    let setup = d.card();
    // Start from a value that looks like the end of a batch.
    wr32(
        &setup,
        regs::MBOX_ARG,
        u32::try_from(value(0, 0, FINAL)).unwrap(),
    )
    .unwrap();
    let start = Arc::new(Barrier::new(2));
    let clients: Vec<_> = (1..=2u64)
        .map(|client| {
            let card = d.card();
            let start = Arc::clone(&start);
            thread::spawn(move || {
                start.wait();
                let mut seen_other = 0u64;
                for k in 0..BATCHES {
                    let mut ops = rmw_batch(client, k);
                    batch(&card, &mut ops).unwrap();
                    // What the batch found: the end of some whole batch.
                    let first = ops[0].value;
                    assert_eq!(
                        first & 0xff,
                        FINAL,
                        "client {client} batch {k} read {first:#x}, a value from inside another batch"
                    );
                    if first >> 28 != client {
                        seen_other += 1;
                    }
                    // Every read-back is the batch's own preceding write.
                    for pair in ops[1..].chunks_exact(2) {
                        assert_eq!(
                            pair[1].value, pair[0].value,
                            "client {client} batch {k}: another write landed inside the batch"
                        );
                    }
                }
                seen_other
            })
        })
        .collect();
    let seen_other: Vec<u64> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    // The clients did overlap: each found the other's result at least once
    // (otherwise the test would have proved nothing).
    assert!(
        seen_other.iter().all(|&n| n > 0),
        "the two clients never overlapped: {seen_other:?}"
    );
    drop(setup);
    d.stop();
}
