//! The CUSE request handling without a kernel: requests are built as the
//! kernel lays them out and handed to [`Session::handle`]; replies go to a
//! datagram socket (one message per write, like `/dev/cuse`) and are read
//! back from its peer. The kernel lane runs the same code against a real
//! `/dev/cuse`.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixDatagram;
use std::sync::Arc;
use std::time::Duration;

use gpupm_client::ops::access as reg_access;
use gpupm_uapi::commit_wait::WaitCommit;
use gpupm_uapi::ioctl::{
    Advance, RegAccess, Reset, GPUPM_IOC_ADVANCE, GPUPM_IOC_REG_READ, GPUPM_IOC_REG_WRITE,
    GPUPM_IOC_RESET, GPUPM_IOC_WAIT_COMMIT, IOCTL_STRUCT_VERSION,
};
use gpupm_uapi::regs;
use proptest::prelude::{any, proptest};
use zerocopy::{FromBytes, IntoBytes};

use super::abi::{
    opcode, InHeader, InterruptIn, IoctlIn, IoctlOut, OpenIn, OpenOut, OutHeader, PollIn, ReadIn,
    ReleaseIn, WriteIn, INT_REQ_BIT, NOTIFY_POLL, POLL_SCHEDULE_NOTIFY,
};
use super::session::{Channel, Session};
use crate::model::{Device, EngineKind};
use crate::node::access::AccessPolicy;
use crate::node::device::NodeCore;
use crate::node::model_backend::ModelBackend;

const ROOT: (u32, u32) = (0, 0);
const NOBODY: (u32, u32) = (65534, 65534);

struct Rig {
    session: Session,
    peer: UnixDatagram,
    next_unique: u64,
}

impl Rig {
    /// The built-in scenario on a step clock, root only.
    fn new() -> Rig {
        let dev = Device::new(&crate::scenario::builtin(), EngineKind::Batched, true)
            .expect("the built-in scenario builds");
        let core = NodeCore::new(Box::new(ModelBackend::new(dev)), AccessPolicy::new(None));
        let (ours, peer) = UnixDatagram::pair().expect("socket pair");
        peer.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("read timeout");
        let channel = Arc::new(Channel::new(File::from(OwnedFd::from(ours))));
        Rig {
            session: Session::new(core, channel),
            peer,
            next_unique: 2,
        }
    }

    /// Sends a request as `who` with argument `arg` and `payload`; returns its id.
    fn send(&mut self, op: u32, who: (u32, u32), arg: &[u8], payload: &[u8]) -> u64 {
        self.next_unique += 2;
        let unique = self.next_unique;
        let len = core::mem::size_of::<InHeader>() + arg.len() + payload.len();
        let header = InHeader {
            len: u32::try_from(len).expect("small request"),
            opcode: op,
            unique,
            uid: who.0,
            gid: who.1,
            pid: std::process::id(),
            ..InHeader::default()
        };
        handle(&self.session, &[header.as_bytes(), arg, payload]);
        unique
    }

    /// The next message the session wrote: its header and body.
    fn reply(&self) -> (OutHeader, Vec<u8>) {
        let mut buf = vec![0u8; 64 * 1024];
        let n = self
            .peer
            .recv(&mut buf)
            .expect("a reply within the deadline");
        let (header, body) = OutHeader::read_from_prefix(&buf[..n]).expect("an out header");
        assert_eq!(header.len as usize, n, "the header counts the whole reply");
        (header, body.to_vec())
    }

    /// Sends a request and returns `(error, body)` of its reply.
    fn call(&mut self, op: u32, who: (u32, u32), arg: &[u8], payload: &[u8]) -> (i32, Vec<u8>) {
        let unique = self.send(op, who, arg, payload);
        let (header, body) = self.reply();
        assert_eq!(header.unique, unique, "the reply names the request");
        (header.error, body)
    }

    fn open(&mut self) -> u64 {
        let (error, body) = self.call(opcode::OPEN, ROOT, OpenIn::default().as_bytes(), &[]);
        assert_eq!(error, 0);
        OpenOut::read_from_bytes(&body).expect("open reply").fh
    }

    fn ioctl(&mut self, who: (u32, u32), fh: u64, cmd: u32, arg: &[u8]) -> (i32, Vec<u8>) {
        let size = u32::try_from(gpupm_uapi::ioc::size(cmd)).expect("size fits");
        let head = IoctlIn {
            fh,
            cmd,
            in_size: u32::try_from(arg.len()).expect("size fits"),
            out_size: size,
            ..IoctlIn::default()
        };
        self.call(opcode::IOCTL, who, head.as_bytes(), arg)
    }

    /// `GPUPM_IOC_REG_READ` as root.
    fn reg(&mut self, fh: u64, offset: u64, width: u32) -> u64 {
        let arg = reg_access(offset, width, 0);
        let (error, body) = self.ioctl(ROOT, fh, GPUPM_IOC_REG_READ, arg.as_bytes());
        assert_eq!(error, 0, "register read at {offset:#x}");
        let (out, data) = IoctlOut::read_from_prefix(&body).expect("ioctl reply");
        assert_eq!(out.result, 0);
        RegAccess::read_from_bytes(data)
            .expect("the argument comes back")
            .value
    }
}

/// Hands `parts`, concatenated into an 8-byte-aligned buffer as the
/// serving loop reads requests, to the session.
fn handle(session: &Session, parts: &[&[u8]]) {
    let bytes: Vec<u8> = parts.concat();
    let mut words = vec![0u64; bytes.len().div_ceil(8)];
    words.as_mut_bytes()[..bytes.len()].copy_from_slice(&bytes);
    session.handle(&words.as_bytes()[..bytes.len()]);
}

fn read_in(fh: u64, size: u32, flags: u32) -> ReadIn {
    ReadIn {
        fh,
        size,
        flags,
        ..ReadIn::default()
    }
}

#[test]
fn registers_are_read_and_written_by_ioctl_on_an_open_handle() {
    let mut rig = Rig::new();
    let fh = rig.open();
    assert_eq!(rig.reg(fh, regs::ID, 4), u64::from(regs::DEVICE_MAGIC));
    assert_eq!(rig.reg(fh, regs::CYCLE, 8), 0);
    let timeout = regs::part(1, regs::PART_SWITCH_TIMEOUT);
    let write = reg_access(timeout, 4, 7_777);
    let (error, body) = rig.ioctl(ROOT, fh, GPUPM_IOC_REG_WRITE, write.as_bytes());
    assert_eq!(error, 0);
    assert_eq!(
        body.len(),
        core::mem::size_of::<IoctlOut>(),
        "_IOW: no data back"
    );
    assert_eq!(rig.reg(fh, timeout, 4), 7_777);
    let release = ReleaseIn {
        fh,
        ..ReleaseIn::default()
    };
    assert_eq!(
        rig.call(opcode::RELEASE, ROOT, release.as_bytes(), &[]).0,
        0
    );
}

#[test]
fn every_request_of_an_unprivileged_caller_is_eacces_and_changes_nothing() {
    let mut rig = Rig::new();
    let fh = rig.open();
    let timeout = regs::part(1, regs::PART_SWITCH_TIMEOUT);
    let before = rig.reg(fh, timeout, 4);
    let seq = rig.reg(fh, regs::INTR_SEQ, 8);
    let eacces = -libc::EACCES;
    let open = OpenIn::default();
    assert_eq!(
        rig.call(opcode::OPEN, NOBODY, open.as_bytes(), &[]).0,
        eacces
    );
    let read = read_in(fh, 4096, libc::O_NONBLOCK as u32);
    assert_eq!(
        rig.call(opcode::READ, NOBODY, read.as_bytes(), &[]).0,
        eacces
    );
    let write = WriteIn {
        fh,
        size: 4,
        ..WriteIn::default()
    };
    assert_eq!(
        rig.call(opcode::WRITE, NOBODY, write.as_bytes(), &[0; 8]).0,
        eacces
    );
    let poll = PollIn {
        fh,
        events: libc::POLLIN as u32,
        ..PollIn::default()
    };
    assert_eq!(
        rig.call(opcode::POLL, NOBODY, poll.as_bytes(), &[]).0,
        eacces
    );
    let write = reg_access(timeout, 4, 9_000);
    assert_eq!(
        rig.ioctl(NOBODY, fh, GPUPM_IOC_REG_WRITE, write.as_bytes())
            .0,
        eacces
    );
    let reset = Reset {
        version: IOCTL_STRUCT_VERSION,
        magic: regs::RESET_MAGIC,
    };
    assert_eq!(
        rig.ioctl(NOBODY, fh, GPUPM_IOC_RESET, reset.as_bytes()).0,
        eacces
    );
    assert_eq!(rig.reg(fh, timeout, 4), before);
    assert_eq!(rig.reg(fh, regs::INTR_SEQ, 8), seq, "no reset took place");
}

#[test]
fn writes_and_reads_shorter_than_a_record_are_einval() {
    let mut rig = Rig::new();
    let fh = rig.open();
    let write = WriteIn {
        fh,
        size: 4,
        ..WriteIn::default()
    };
    let payload = regs::DEVICE_MAGIC.to_le_bytes();
    assert_eq!(
        rig.call(opcode::WRITE, ROOT, write.as_bytes(), &payload).0,
        -libc::EINVAL
    );
    for size in [4, 8, 31] {
        let read = read_in(fh, size, 0);
        assert_eq!(
            rig.call(opcode::READ, ROOT, read.as_bytes(), &[]).0,
            -libc::EINVAL,
            "read of {size} bytes"
        );
    }
    let read = read_in(fh, 4096, libc::O_NONBLOCK as u32);
    assert_eq!(
        rig.call(opcode::READ, ROOT, read.as_bytes(), &[]).0,
        -libc::EAGAIN,
        "no record yet"
    );
}

#[test]
fn malformed_requests_get_error_replies() {
    let mut rig = Rig::new();
    let fh = rig.open();
    assert_eq!(rig.call(opcode::READ, ROOT, &[0; 12], &[]).0, -libc::EINVAL);
    assert_eq!(rig.call(4242, ROOT, &[], &[]).0, -libc::ENOSYS);
    let mut head = IoctlIn {
        fh,
        cmd: GPUPM_IOC_REG_READ,
        in_size: 64,
        out_size: 32,
        ..IoctlIn::default()
    };
    let arg = reg_access(regs::ID, 4, 0);
    assert_eq!(
        rig.call(opcode::IOCTL, ROOT, head.as_bytes(), arg.as_bytes())
            .0,
        -libc::EINVAL,
        "in_size disagrees with the payload"
    );
    head.in_size = 32;
    head.flags = super::abi::IOCTL_UNRESTRICTED;
    assert_eq!(
        rig.call(opcode::IOCTL, ROOT, head.as_bytes(), arg.as_bytes())
            .0,
        -libc::EINVAL,
        "unrestricted ioctl"
    );
    let unknown = u32::try_from(nix::request_code_readwrite!(b'G', 0x7e, 32)).expect("fits");
    assert_eq!(
        rig.ioctl(ROOT, fh, unknown, arg.as_bytes()).0,
        -libc::ENOTTY
    );
    // A header whose length disagrees with the bytes read.
    let header = InHeader {
        len: 999,
        opcode: opcode::OPEN,
        unique: 77,
        ..InHeader::default()
    };
    handle(&rig.session, &[header.as_bytes(), &[0; 8]]);
    let (out, _) = rig.reply();
    assert_eq!((out.unique, out.error), (77, -libc::EIO));
}

#[test]
fn an_interrupted_blocking_read_fails_with_eintr() {
    let mut rig = Rig::new();
    let fh = rig.open();
    let read = read_in(fh, 4096, 0);
    let unique = rig.send(opcode::READ, ROOT, read.as_bytes(), &[]);
    let interrupt = InterruptIn { unique };
    rig.send(opcode::INTERRUPT, ROOT, interrupt.as_bytes(), &[]);
    let (out, body) = rig.reply();
    assert_eq!((out.unique, out.error), (unique, -libc::EINTR), "{body:?}");

    let stranger = InterruptIn { unique: 9_999 };
    let id = rig.send(opcode::INTERRUPT, ROOT, stranger.as_bytes(), &[]);
    let (out, _) = rig.reply();
    assert_eq!((out.unique, out.error), (id | INT_REQ_BIT, -libc::EAGAIN));
}

#[test]
fn a_parked_read_gets_the_next_record_and_a_poller_its_wakeup() {
    let mut rig = Rig::new();
    let fh = rig.open();
    let poll = PollIn {
        fh,
        kh: 31,
        flags: POLL_SCHEDULE_NOTIFY,
        events: libc::POLLIN as u32,
    };
    let (error, body) = rig.call(opcode::POLL, ROOT, poll.as_bytes(), &[]);
    assert_eq!(
        (error, &body[..4]),
        (0, &0u32.to_le_bytes()[..]),
        "nothing ready"
    );
    let read = read_in(fh, 4096, 0);
    let parked = rig.send(opcode::READ, ROOT, read.as_bytes(), &[]);
    let reset = Reset {
        version: IOCTL_STRUCT_VERSION,
        magic: regs::RESET_MAGIC,
    };
    let reset_id = rig.send(
        opcode::IOCTL,
        ROOT,
        &ioctl_head(fh, GPUPM_IOC_RESET, 8),
        reset.as_bytes(),
    );
    let mut seen = Vec::new();
    for _ in 0..3 {
        let (out, body) = rig.reply();
        seen.push((out.unique, out.error, body));
    }
    let find = |unique: u64, error: i32| seen.iter().find(|(u, e, _)| *u == unique && *e == error);
    let (_, _, wake) = find(0, NOTIFY_POLL).expect("a poll wake-up notification");
    assert_eq!(wake, &31u64.to_le_bytes());
    let (_, _, records) = find(parked, 0).expect("the parked read's reply");
    let record = gpupm_uapi::intr::InterruptRecord::read_from_prefix(records)
        .expect("one record")
        .0;
    assert_eq!(record.source, gpupm_uapi::intr::source::DEVICE_RESET);
    assert!(find(reset_id, 0).is_some(), "the reset was answered");
}

/// A `GPUPM_IOC_WAIT_COMMIT` for commits after `after`, VM 1's slot.
fn wait_commit(after: u64) -> WaitCommit {
    let mut arg = <WaitCommit as zerocopy::FromZeros>::new_zeroed();
    arg.version = IOCTL_STRUCT_VERSION;
    arg.timeout_us = 10_000_000;
    arg.count = 1;
    arg.after = after;
    arg.slots[0] = 1;
    arg
}

#[test]
fn a_parked_commit_wait_is_answered_by_the_commit_an_advance_makes() {
    let mut rig = Rig::new();
    let fh = rig.open();
    let after = rig.reg(fh, regs::TRIG_COUNT_PERIODIC, 8);
    let wait = wait_commit(after);
    let size = u32::try_from(wait.as_bytes().len()).unwrap();
    let head = IoctlIn {
        out_size: size,
        ..IoctlIn::read_from_bytes(&ioctl_head(fh, GPUPM_IOC_WAIT_COMMIT, size)).unwrap()
    };
    let parked = rig.send(opcode::IOCTL, ROOT, head.as_bytes(), wait.as_bytes());
    // The built-in scenario triggers every 1 ms of device time.
    let advance = Advance {
        version: IOCTL_STRUCT_VERSION,
        flags: 0,
        cycles: 4_000_000,
        now: 0,
    };
    let advanced = rig.send(
        opcode::IOCTL,
        ROOT,
        &ioctl_head(fh, GPUPM_IOC_ADVANCE, 24),
        advance.as_bytes(),
    );
    // The wait's reply comes first: the advance's delivery sends it.
    let (out, body) = rig.reply();
    assert_eq!((out.unique, out.error), (parked, 0));
    let (out, _) = rig.reply();
    assert_eq!((out.unique, out.error), (advanced, 0));
    let (_, data) = IoctlOut::read_from_prefix(&body).expect("ioctl reply");
    let answer = WaitCommit::read_from_bytes(data).expect("the whole argument");
    assert_eq!(answer.seq, rig.reg(fh, regs::TRIG_COUNT_PERIODIC, 8));
    assert!(answer.seq > after);

    let interrupted = rig.send(
        opcode::IOCTL,
        ROOT,
        head.as_bytes(),
        wait_commit(answer.seq).as_bytes(),
    );
    rig.send(
        opcode::INTERRUPT,
        ROOT,
        InterruptIn {
            unique: interrupted,
        }
        .as_bytes(),
        &[],
    );
    let (out, _) = rig.reply();
    assert_eq!((out.unique, out.error), (interrupted, -libc::EINTR));
}

fn ioctl_head(fh: u64, cmd: u32, size: u32) -> Vec<u8> {
    IoctlIn {
        fh,
        cmd,
        in_size: size,
        out_size: 0,
        ..IoctlIn::default()
    }
    .as_bytes()
    .to_vec()
}

proptest! {
    #[test]
    fn arbitrary_request_bytes_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..256),
        op in proptest::sample::select(vec![
            opcode::OPEN, opcode::READ, opcode::WRITE, opcode::RELEASE, opcode::IOCTL,
            opcode::POLL, opcode::INTERRUPT, opcode::FLUSH, 1, 4096,
        ]),
    ) {
        let mut rig = Rig::new();
        rig.open();
        let mut request = bytes.clone();
        if request.len() >= 8 {
            // A well-framed header with arbitrary contents after it.
            let len = u32::try_from(request.len()).unwrap_or(u32::MAX);
            request[..4].copy_from_slice(&len.to_le_bytes());
            request[4..8].copy_from_slice(&op.to_le_bytes());
        }
        handle(&rig.session, &[&request]);
    }
}
