//! `GPUPM_IOC_WAIT_COMMIT` (ABI 1.8) through `card0`: a wait parks until
//! the device's next periodic commit and then carries the blocks as the
//! window holds them; it times out when none comes; a malformed one fails
//! with EINVAL and changes nothing; a caller the node does not serve gets
//! what it gets for every other ioctl.

use std::fs::File;
use std::time::{Duration, Instant};

use gpupm_test_support::rawnode::{advance, digest, drain_records, errno, ioctl, rd64};
use gpupm_test_support::users::{run_as, Cred};
use gpupm_test_support::Driver;
use gpupm_uapi::commit_wait::{WaitCommit, WAIT_COMMIT_MAX_BLOCKS, WAIT_COMMIT_MAX_TIMEOUT_US};
use gpupm_uapi::ioctl::{
    Identity, GPUPM_IOC_IDENTITY, GPUPM_IOC_WAIT_COMMIT, IOCTL_STRUCT_VERSION,
};
use gpupm_uapi::layout::{
    block_slot_offset, BlockSlot, CTX_BLOCK_SLOTS, CTX_BLOCK_SLOT_BASE, MEM_WINDOW_OFFSET,
};
use gpupm_uapi::regs;
use serde_json::json;
use zerocopy::{FromZeros, IntoBytes};

/// Makes a good wait argument bad.
type Spoiler = fn(&mut WaitCommit);

/// The small scenario's periodic trigger (dithered by up to 255 cycles).
const PERIOD: u64 = 20_000;

fn wait_arg(after: u64, timeout_us: u32, slots: &[u32]) -> WaitCommit {
    let mut a = WaitCommit::new_zeroed();
    a.version = IOCTL_STRUCT_VERSION;
    a.timeout_us = timeout_us;
    a.after = after;
    a.count = u32::try_from(slots.len()).unwrap();
    a.slots[..slots.len()].copy_from_slice(slots);
    a
}

fn wait(card: &File, arg: &mut WaitCommit) -> std::io::Result<i32> {
    ioctl(card, GPUPM_IOC_WAIT_COMMIT, arg.as_mut_bytes())
}

fn slot(card: &File, index: u32) -> BlockSlot {
    let mut s = BlockSlot::new_zeroed();
    std::os::unix::fs::FileExt::read_exact_at(
        card,
        s.as_mut_bytes(),
        MEM_WINDOW_OFFSET + block_slot_offset(index),
    )
    .unwrap();
    s
}

fn sequence(card: &File) -> u64 {
    rd64(card, regs::TRIG_COUNT_PERIODIC).unwrap()
}

/// Whether thread `tid` of this process sleeps (blocked in a request).
fn sleeping(tid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('S'))
        })
        .unwrap_or(false)
}

#[test]
fn a_wait_is_answered_by_the_next_periodic_commit_with_its_blocks() {
    let d = Driver::start();
    let card = d.card();
    advance(&card, 3 * PERIOD).unwrap();
    let after = sequence(&card);
    assert!(after >= 2, "periodic triggers run in the small scenario");

    // An old sequence is answered at once, with the blocks as they are.
    let mut stale = wait_arg(after - 1, 5_000_000, &[0, 1, 2]);
    wait(&card, &mut stale).unwrap();
    assert_eq!(stale.seq, after);
    for (i, index) in [0, 1, 2].into_iter().enumerate() {
        assert_eq!(stale.blocks[i], slot(&card, index), "slot {index}");
    }
    assert!(stale.blocks[3..]
        .iter()
        .all(|b| b.as_bytes().iter().all(|&x| x == 0)));

    // A current one parks until the clock brings the next commit.
    let waiter_card = card.try_clone().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let me = std::fs::read_link("/proc/thread-self").unwrap();
        let tid: i32 = me.file_name().unwrap().to_str().unwrap().parse().unwrap();
        tx.send(tid).unwrap();
        let mut arg = wait_arg(after, 10_000_000, &[1]);
        let t = Instant::now();
        wait(&waiter_card, &mut arg).unwrap();
        (arg, t.elapsed())
    });
    let tid = rx.recv().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !sleeping(tid) {
        assert!(Instant::now() < deadline, "the waiter never blocked");
        std::thread::yield_now();
    }
    let vm1_before = slot(&card, 1);
    advance(&card, PERIOD + 256).unwrap();
    let (arg, took) = waiter.join().unwrap();
    assert!(
        took < Duration::from_secs(9),
        "answered by the commit, not the timeout"
    );
    assert_eq!(arg.seq, sequence(&card), "the sequence of the commit");
    assert!(arg.seq > after);
    assert_eq!(arg.cycle, rd64(&card, regs::CYCLE).unwrap());
    assert_eq!(arg.blocks[0], slot(&card, 1), "VM 1's block as committed");
    assert_ne!(arg.blocks[0], vm1_before, "VM 1 counted meanwhile");
    d.stop();
}

#[test]
fn a_wait_without_a_commit_times_out_with_the_sequence_unchanged() {
    let d = Driver::start();
    let card = d.card();
    advance(&card, PERIOD + 256).unwrap();
    let after = sequence(&card);
    let mut arg = wait_arg(after, 100_000, &[1]);
    let t = Instant::now();
    wait(&card, &mut arg).unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(100),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(arg.seq, after, "timed out: the same sequence");
    assert_eq!(arg.blocks[0], slot(&card, 1));
    d.stop();
}

#[test]
fn malformed_waits_are_einval_and_change_nothing() {
    let d = Driver::start();
    let card = d.card();
    advance(&card, PERIOD + 256).unwrap();
    let after = sequence(&card);
    let bad: [(&str, Spoiler); 9] = [
        ("version 2", |a| a.version = 2),
        ("flags", |a| a.flags = 1),
        ("reserved", |a| a.reserved = 1),
        ("no slots", |a| a.count = 0),
        ("too many slots", |a| {
            a.count = u32::try_from(WAIT_COMMIT_MAX_BLOCKS).unwrap() + 1;
        }),
        ("timeout 0", |a| a.timeout_us = 0),
        ("timeout too long", |a| {
            a.timeout_us = WAIT_COMMIT_MAX_TIMEOUT_US + 1
        }),
        ("slot past the block slots", |a| {
            a.slots[0] = CTX_BLOCK_SLOT_BASE + CTX_BLOCK_SLOTS;
        }),
        ("slot u32::MAX", |a| a.slots[0] = u32::MAX),
    ];
    for (what, spoil) in bad {
        let before = digest(&card);
        // An old sequence: a good wait would be answered at once.
        let mut arg = wait_arg(after - 1, 1_000, &[1]);
        spoil(&mut arg);
        let sent = arg;
        let e = wait(&card, &mut arg).expect_err(what);
        assert_eq!(errno(&e), libc::EINVAL, "{what}: {e}");
        assert_eq!(arg, sent, "{what}: nothing copied back");
        assert!(digest(&card) == before, "{what} changed the device");
    }
    let short = u32::try_from(nix::request_code_readwrite!(
        gpupm_uapi::ioctl::IOC_MAGIC,
        0x10,
        64
    ))
    .unwrap();
    let e = ioctl(&card, short, &mut [0u8; 64]).expect_err("wrong size");
    assert_eq!(errno(&e), libc::EINVAL);
    d.stop();
}

#[test]
fn a_caller_the_node_does_not_serve_gets_what_every_ioctl_gets() {
    let d = Driver::start();
    let card = d.card();
    advance(&card, PERIOD + 256).unwrap();
    let before = digest(&card);
    // The handle was opened by root; each request is checked again.
    let answer = run_as(&Cred::user(65534), || {
        let mut id = Identity {
            version: IOCTL_STRUCT_VERSION,
            ..Identity::default()
        };
        let identity = ioctl(&card, GPUPM_IOC_IDENTITY, id.as_mut_bytes());
        let mut arg = wait_arg(0, 1_000, &[1]);
        let waited = wait(&card, &mut arg);
        json!({
            "identity": identity.err().map(|e| errno(&e)),
            "wait": waited.err().map(|e| errno(&e)),
        })
    });
    assert_eq!(answer["identity"], json!(libc::EACCES));
    assert_eq!(answer["wait"], answer["identity"]);
    assert!(digest(&card) == before);
    d.stop();
}

/// Forks a root child that opens `card0` and parks in `park` on it; returns
/// once the child sleeps in its FUSE request.
fn parked_child(
    d: &Driver,
    park: fn(&mut File) -> serde_json::Value,
) -> gpupm_test_support::users::Child {
    let path = d.card_path();
    let mut child = gpupm_test_support::users::spawn_as(&Cred::root(), move |ctl| {
        let mut card = File::options()
            .read(true)
            .write(true)
            .open(&path)
            .expect("open card0");
        ctl.ready();
        park(&mut card)
    });
    child.wait_ready();
    gpupm_test_support::procfs::wait_blocked_in_fuse(child.pid.as_raw(), Duration::from_secs(10));
    child
}

/// Reads the records already raised without blocking, then blocks for
/// the next one: the bytes read.
fn read_one_new_record(card: &mut File) -> serde_json::Value {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    use std::os::fd::AsRawFd;
    fcntl(card.as_raw_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).expect("non-blocking");
    drain_records(card);
    fcntl(card.as_raw_fd(), FcntlArg::F_SETFL(OFlag::empty())).expect("blocking");
    let mut buf = [0u8; 32];
    json!(std::io::Read::read(card, &mut buf)
        .map_err(|e| e.to_string())
        .ok())
}

/// SIGKILLs `child` and waits, at most `within`, for it to be gone: the
/// kernel keeps a killed process in its FUSE request until the node
/// answers it.
fn killed_and_released(child: gpupm_test_support::users::Child, within: Duration) {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    let pid = child.pid;
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).expect("kill the child");
    let deadline = Instant::now() + within;
    loop {
        match waitpid(pid, Some(WaitPidFlag::WNOHANG)).expect("waitpid") {
            WaitStatus::StillAlive => {
                assert!(
                    Instant::now() < deadline,
                    "a killed reader was still held in its request after {within:?}"
                );
                std::thread::yield_now();
            }
            status => {
                assert!(
                    matches!(
                        status,
                        WaitStatus::Signaled(_, nix::sys::signal::Signal::SIGKILL, _)
                    ),
                    "{status:?}"
                );
                return;
            }
        }
    }
}

/// A process killed while its interrupt read or its commit wait is parked
/// on `card0` is released (the node's reaper fails the request), long
/// before the wait's own timeout, and a reader that is alive keeps its
/// place and gets its record.
#[test]
fn killed_readers_and_waiters_are_released_and_the_living_still_served() {
    let d = Driver::start();
    let reader = parked_child(&d, read_one_new_record);
    let waiter = parked_child(&d, |card| {
        let mut arg = wait_arg(sequence(card), WAIT_COMMIT_MAX_TIMEOUT_US, &[0]);
        json!(wait(card, &mut arg).map_err(|e| e.to_string()).ok())
    });
    let living = parked_child(&d, read_one_new_record);
    // The wait's own timeout is 10 s: released well before it, or not at all.
    killed_and_released(reader, Duration::from_secs(5));
    killed_and_released(waiter, Duration::from_secs(5));
    let card = d.card();
    advance(&card, 40_000).expect("advance: records for the living reader");
    assert_eq!(
        living.finish(),
        json!(32),
        "the living reader got one record"
    );
    d.stop();
}
