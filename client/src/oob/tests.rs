//! The client against a fake register file whose answers the test writes:
//! every status, interleaved and stuck sequence numbers, stale latches and
//! malformed answers.

use std::cell::RefCell;

use super::*;

type Handler = Box<dyn FnMut(u32, u32, u32) -> (u32, [u64; 4])>;

/// A fake OOB mailbox: `handler` answers each command; `interleave` more
/// commands than ours seem to run during each of the next commands
/// (`u32::MAX`: during every one).
struct Fake {
    state: RefCell<State>,
}

struct State {
    arg: u32,
    arg2: u32,
    seq: u32,
    status: u32,
    words: [u64; 4],
    interleave: u32,
    extra: u32,
    commands: u32,
    handler: Handler,
}

impl Fake {
    fn new(handler: impl FnMut(u32, u32, u32) -> (u32, [u64; 4]) + 'static) -> OobClient<Fake> {
        OobClient::new(Fake {
            state: RefCell::new(State {
                arg: 0,
                arg2: 0,
                seq: u32::MAX - 1,
                status: mbox_status::IDLE,
                words: [0; 4],
                interleave: 0,
                extra: 1,
                commands: 0,
                handler: Box::new(handler),
            }),
        })
    }
}

impl OobRegisters for Fake {
    fn read32(&self, offset: u64) -> io::Result<u32> {
        let s = self.state.borrow();
        match offset {
            OOB_MBOX_SEQ => Ok(s.seq),
            OOB_MBOX_STATUS => Ok(s.status),
            _ => Err(io::Error::from_raw_os_error(libc::EINVAL)),
        }
    }

    fn read64(&self, offset: u64) -> io::Result<u64> {
        let s = self.state.borrow();
        let i = [
            OOB_MBOX_DATA,
            OOB_MBOX_DATA1,
            OOB_MBOX_DATA2,
            OOB_MBOX_DATA3,
        ]
        .iter()
        .position(|&o| o == offset)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        Ok(s.words[i])
    }

    fn write32(&self, offset: u64, value: u32) -> io::Result<()> {
        let mut s = self.state.borrow_mut();
        match offset {
            OOB_MBOX_ARG => s.arg = value,
            OOB_MBOX_ARG2 => s.arg2 = value,
            OOB_MBOX_CMD => {
                let (arg, arg2) = (s.arg, s.arg2);
                let (status, words) = (s.handler)(value, arg, arg2);
                s.status = status;
                s.words = words;
                s.commands += 1;
                let mut by = s.extra;
                if s.interleave > 0 {
                    by += 1;
                    if s.interleave != u32::MAX {
                        s.interleave -= 1;
                    }
                }
                s.seq = s.seq.wrapping_add(by);
            }
            _ => return Err(io::Error::from_raw_os_error(libc::EINVAL)),
        }
        Ok(())
    }
}

fn ok(words: [u64; 4]) -> (u32, [u64; 4]) {
    (mbox_status::OK, words)
}

#[test]
fn every_status_is_its_own_error() {
    type Is = fn(&OobError) -> bool;
    let cases: [(u32, Is); 9] = [
        (mbox_status::IDLE, |e| matches!(e, OobError::Idle { .. })),
        (mbox_status::ERR_OPCODE, |e| {
            matches!(e, OobError::Opcode { op: 0x16 })
        }),
        (mbox_status::ERR_ARG, |e| matches!(e, OobError::Arg { .. })),
        (mbox_status::ERR_NOT_FOUND, |e| {
            matches!(e, OobError::NotFound { .. })
        }),
        (mbox_status::ERR_STALE, |e| {
            matches!(e, OobError::Stale { .. })
        }),
        (mbox_status::ERR_CONFIDENTIAL, |e| {
            matches!(e, OobError::Confidential { .. })
        }),
        (mbox_status::END, |e| matches!(e, OobError::End { .. })),
        (mbox_status::ERR_BUSY, |e| matches!(e, OobError::Busy)),
        (99, |e| {
            matches!(e, OobError::UnknownStatus { status: 99, .. })
        }),
    ];
    for (status, is) in cases {
        let c = Fake::new(move |_, _, _| (status, [0; 4]));
        let e = c.idle().unwrap_err();
        assert!(is(&e), "status {status}: {e:?}");
    }
}

#[test]
fn an_interleaved_command_runs_again_and_gives_up_after_the_bound() {
    let c = Fake::new(|_, _, _| ok([7, 0, 0, 0]));
    c.registers().state.borrow_mut().interleave = 2;
    assert_eq!(c.cycle().unwrap(), 7);
    assert_eq!(c.registers().state.borrow().commands, 3, "run three times");

    c.registers().state.borrow_mut().interleave = u32::MAX;
    let e = c.cycle().unwrap_err();
    assert!(
        matches!(
            e,
            OobError::Interleaved {
                tries: MAX_INTERLEAVED_TRIES,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn a_sequence_number_that_does_not_move_is_malformed() {
    let c = Fake::new(|_, _, _| ok([1, 0, 0, 0]));
    c.registers().state.borrow_mut().extra = 0;
    assert!(matches!(c.cycle(), Err(OobError::Malformed { .. })));
}

#[test]
fn a_stale_latch_takes_a_new_snapshot_within_the_bound() {
    // Snapshots answer tags 1, 2, 3...; the latch honours only tag 3.
    let mut tag = 0;
    let c = Fake::new(move |op, arg, arg2| match op {
        mbox_op::GET_CAPS => ok([(1 << 48) | (12 << 32) | 6, 0, 0, 0]),
        mbox_op::OOB_SNAPSHOT => {
            tag += 1;
            ok([tag, 9, 4, u64::from(arg)])
        }
        mbox_op::OOB_READ_LATCH if arg2 == 3 => {
            let a = u64::from(arg);
            ok([a, a + 1, a + 2, a + 3].map(|v| if v < 6 { v * 10 } else { 0 }))
        }
        mbox_op::OOB_READ_LATCH if arg2 == 2 && arg == 0 => ok([0; 4]),
        _ => (mbox_status::ERR_STALE, [0; 4]),
    });
    let b = c.read_block(OobScope::Vm(2)).unwrap();
    assert_eq!(b.snapshot.tag, 3);
    assert_eq!(b.snapshot.detail, 2);
    assert_eq!(b.counters, vec![0, 10, 20, 30, 40, 50]);

    let never = Fake::new(|op, _, _| match op {
        mbox_op::GET_CAPS => ok([6, 0, 0, 0]),
        mbox_op::OOB_SNAPSHOT => ok([5, 0, 0, 0]),
        _ => (mbox_status::ERR_STALE, [0; 4]),
    });
    let e = never.read_block(OobScope::System).unwrap_err();
    assert!(
        matches!(
            e,
            OobError::StaleAgain {
                tries: MAX_STALE_TRIES
            }
        ),
        "{e:?}"
    );
}

#[test]
fn malformed_answers_are_errors_not_panics() {
    let zero_tag = Fake::new(|_, _, _| ok([0; 4]));
    assert!(matches!(
        zero_tag.snapshot(OobScope::System),
        Err(OobError::Malformed { .. })
    ));
    let wide_tag = Fake::new(|_, _, _| ok([u64::MAX; 4]));
    assert!(matches!(
        wide_tag.snapshot(OobScope::System),
        Err(OobError::Malformed { .. })
    ));
    for events in [0, MAX_EVENTS as u64 + 1, u64::MAX] {
        let c = Fake::new(move |_, _, _| ok([events, 0, 0, 0]));
        assert!(
            matches!(
                c.read_block(OobScope::System),
                Err(OobError::Malformed { .. })
            ),
            "{events} events"
        );
    }
    let state = Fake::new(|_, _, _| ok([9, 0, 0, 0]));
    assert!(matches!(
        state.host_state(),
        Err(OobError::Malformed { .. })
    ));
    // An enumeration that does not move forward ends with an error.
    let backwards = Fake::new(|_, arg, _| ok([u64::from(arg), 1, 0, 0]));
    let got: Vec<_> = backwards.vms().collect();
    assert_eq!(got.len(), 1);
    assert!(matches!(got[0], Err(OobError::Malformed { .. })));
    let ctx_state = Fake::new(|_, arg, _| ok([u64::from(arg) + 1, 1, 0, 7]));
    let got: Vec<_> = ctx_state.contexts(None).collect();
    assert!(matches!(got[..], [Err(OobError::Malformed { .. })]));
}

#[test]
fn enumerations_end_at_end() {
    let c = Fake::new(|op, arg, arg2| match (op, arg) {
        (mbox_op::OOB_NEXT_VM, 0) => ok([2, 1, 0, 3]),
        (mbox_op::OOB_NEXT_VM, 2) => ok([4, 3, oob_vm_flags::CONFIDENTIAL, 0]),
        (mbox_op::OOB_NEXT_CONTEXT, 0) => ok([5, u64::from(arg2), 100, 2]),
        _ => (mbox_status::END, [0; 4]),
    });
    let vms: Vec<OobVm> = c.vms().collect::<Result<_, _>>().unwrap();
    assert_eq!(vms.len(), 2);
    assert!(!vms[0].confidential && vms[1].confidential);
    assert_eq!((vms[1].id, vms[1].slot), (4, 3));
    let ctxs: Vec<OobContext> = c.contexts(Some(2)).collect::<Result<_, _>>().unwrap();
    assert_eq!(
        ctxs,
        vec![OobContext {
            id: 5,
            vm: 2,
            created_cycle: 100,
            state: OobCtxState::Destroyed
        }]
    );
}

#[test]
fn a_flush_waits_through_the_callers_advance_or_gives_up() {
    // The flush completes once the caller advanced 286 cycles.
    let now = std::rc::Rc::new(std::cell::Cell::new(1_000u64));
    let clock = now.clone();
    let c = Fake::new(move |op, _, _| match op {
        mbox_op::OOB_FLUSH => ok([1, 1_286, 0, 0]),
        mbox_op::READ_CYCLE => ok([clock.get(), 0, 0, 0]),
        mbox_op::OOB_CHANNEL_INFO => ok([5, 0, 1024, u64::from(clock.get() >= 1_286)]),
        _ => (mbox_status::ERR_OPCODE, [0; 4]),
    });
    let mut asked = Vec::new();
    let info = c
        .flush(|to_go| {
            asked.push(to_go);
            now.set(now.get() + to_go);
            true
        })
        .unwrap();
    assert_eq!(info.flushes_completed, 1);
    assert_eq!(asked, vec![286]);

    now.set(0);
    let e = c.flush(|_| false).unwrap_err();
    assert!(
        matches!(
            e,
            OobError::FlushNotCompleted {
                number: 1,
                completed: 0
            }
        ),
        "{e:?}"
    );
}

#[test]
fn register_errors_are_access_errors() {
    struct Broken;
    impl OobRegisters for Broken {
        fn read32(&self, _: u64) -> io::Result<u32> {
            Err(io::Error::from_raw_os_error(libc::EIO))
        }
        fn read64(&self, _: u64) -> io::Result<u64> {
            Err(io::Error::from_raw_os_error(libc::EIO))
        }
        fn write32(&self, _: u64, _: u32) -> io::Result<()> {
            Err(io::Error::from_raw_os_error(libc::EIO))
        }
    }
    let c = OobClient::new(Broken);
    assert!(matches!(
        c.caps(),
        Err(OobError::Access {
            what: "read",
            offset: OOB_MBOX_SEQ,
            ..
        })
    ));
}
