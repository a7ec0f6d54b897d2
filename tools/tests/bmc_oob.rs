//! `gpupm bmc` and `gpupm_client::oob` against the real driver and daemon
//! (step clock, built-in scenario: VM 4 is confidential): every VM's
//! counters the command shows from the out-of-band channel equal the
//! device's ledger after an OOB flush at a quiescent point; a
//! confidential VM is listed without counters; a torn latch read
//! (`ERR_STALE`) and another caller's interleaved command, made through a
//! second handle on `card0-oob`, are retried within their bounds.

use std::cell::Cell;
use std::fs::File;
use std::io;

use gpupm_client::oob::{
    OobClient, OobError, OobRegisters, OobScope, MAX_INTERLEAVED_TRIES, MAX_STALE_TRIES,
};
use gpupm_test_support::cli::Fixture;
use gpupm_uapi::events::{self, MULTIBIT_SCALE};
use gpupm_uapi::ioctl::ledger_scope;
use gpupm_uapi::regs::{mbox_op, OOB_MBOX_CMD, OOB_MBOX_SEQ};

/// The confidential VM of the built-in scenario.
const CONFIDENTIAL_VM: u64 = 4;

/// What an OOB block holds of `event` for a ledger row: everything
/// generated that became a count, masked or not (docs/oob.md,
/// "Exactness").
fn oob_expected(l: &gpupm_uapi::ioctl::LedgerQuery, event: &events::EventInfo) -> u64 {
    let e = usize::from(event.id);
    let scale = if event.multibit { MULTIBIT_SCALE } else { 1 };
    (l.generated[e] - l.remainder[e]) / scale
}

#[test]
fn bmc_json_vm_counters_equal_the_ledger_after_an_oob_flush_and_a_confidential_vm_has_none() {
    let mut f = Fixture::start_with("bmc-oob", &["--debug-ledger"]);
    f.advance_ms(30);
    // The flush, completed by advancing exactly to its due cycle: the
    // blocks then hold everything generated up to now, the ledger too.
    let oob = OobClient::open(f.tmp.join("dev").as_path()).expect("card0-oob");
    let before = oob.channel_info().expect("channel info");
    let mut advanced = 0;
    let info = oob
        .flush(|to_go| {
            advanced += to_go;
            f.dev.advance(to_go).expect("advance");
            to_go > 0
        })
        .expect("the flush completes");
    assert_eq!(info.flushes_completed, before.flushes_completed + 1);
    assert_eq!(advanced, u64::from(gpupm_uapi::regs::FLUSH_ACK_MAX_CYCLES));

    let bmc = f.gpupm(&["bmc", "--json"]).json();
    // gpupmd holds card0 open and waits for its interrupt records: the
    // device, told by the node, reports its host driver loaded.
    assert_eq!(bmc["host"]["state"], "loaded", "{bmc}");
    assert_eq!(bmc["channel"]["flushes_completed"], info.flushes_completed);
    assert_eq!(bmc["channel"]["resets"], 0, "no reset: the ledger is whole");
    let vms = bmc["vms"].as_array().expect("vms");
    assert!(vms.len() >= 3, "{bmc}");
    let mut counted = 0;
    for vm in vms {
        let id = vm["vm"].as_u64().expect("vm id");
        if id == CONFIDENTIAL_VM {
            assert_eq!(vm["confidential"], true, "{vm}");
            assert_eq!(vm["contexts"], 0, "{vm}");
            assert!(vm.get("counters").is_none(), "no counters: {vm}");
            assert!(vm.get("commits").is_none(), "{vm}");
            continue;
        }
        assert_eq!(vm["confidential"], false, "{vm}");
        let ledger = f
            .dev
            .ledger(ledger_scope::VM, u32::try_from(id).unwrap())
            .expect("ledger (--debug-ledger)");
        let counters = vm["counters"].as_object().expect("counters");
        assert_eq!(counters.len(), 5, "{vm}");
        for (name, shown) in counters {
            let event = events::by_name(name).expect("a catalogue event");
            assert_eq!(
                shown.as_u64(),
                Some(oob_expected(&ledger, event)),
                "VM {id} {name}"
            );
        }
        counted += u64::from(counters["sm_inst_executed"].as_u64() > Some(0));
    }
    assert!(counted >= 2, "VMs ran something: {bmc}");
    assert!(
        vms.iter().any(|v| v["vm"] == CONFIDENTIAL_VM),
        "the confidential VM is listed: {bmc}"
    );

    // The table shows the same, the confidential VM as such.
    let table = f.gpupm(&["bmc"]);
    assert_eq!(table.code, 0, "{}", table.err);
    assert!(table.out.contains("host driver: "), "{}", table.out);
    assert!(
        table.out.contains("confidential: not in the OOB channel"),
        "{}",
        table.out
    );

    // On a step clock `--flush` cannot complete: a clear error, not a hang.
    let flush = f.gpupm(&["bmc", "--flush"]);
    assert_eq!(flush.code, 1, "{}", flush.out);
    assert!(
        flush
            .err
            .contains("on a step clock nothing advances by itself"),
        "{}",
        flush.err
    );
}

/// `card0-oob` through which, right after one of our commands `op` ran,
/// another handle runs a command of its own: `times` times, after every
/// `every`-th of our `op`s (so that a retry may run undisturbed).
struct Meddler {
    mine: File,
    other: OobClient<File>,
    op: u32,
    times: Cell<u32>,
    every: u32,
    ops: Cell<u32>,
    meddle: fn(&OobClient<File>),
}

impl OobRegisters for Meddler {
    fn read32(&self, offset: u64) -> io::Result<u32> {
        self.mine.read32(offset)
    }

    fn read64(&self, offset: u64) -> io::Result<u64> {
        self.mine.read64(offset)
    }

    fn write32(&self, offset: u64, value: u32) -> io::Result<()> {
        self.mine.write32(offset, value)?;
        if offset == OOB_MBOX_CMD && value == self.op {
            let n = self.ops.get();
            self.ops.set(n.wrapping_add(1));
            if n.is_multiple_of(self.every) && self.times.get() > 0 {
                self.times.set(self.times.get() - 1);
                (self.meddle)(&self.other);
            }
        }
        Ok(())
    }
}

fn meddled(
    f: &Fixture,
    op: u32,
    times: u32,
    every: u32,
    meddle: fn(&OobClient<File>),
) -> OobClient<Meddler> {
    let dir = f.tmp.join("dev");
    let open = || {
        File::options()
            .read(true)
            .write(true)
            .open(dir.join("card0-oob"))
            .expect("card0-oob")
    };
    OobClient::new(Meddler {
        mine: open(),
        other: OobClient::new(open()),
        op,
        times: Cell::new(times),
        every,
        ops: Cell::new(0),
        meddle,
    })
}

#[test]
fn a_stale_latch_and_an_interleaved_command_through_two_handles_are_retried_within_bounds() {
    let mut f = Fixture::start("bmc-oob-retry");
    f.advance_ms(10);
    let dir = f.tmp.join("dev");
    let plain = OobClient::open(&dir).expect("card0-oob");
    let other = OobClient::open(&dir).expect("a second handle");

    // ERR_STALE: another handle's snapshot replaced the latch.
    let snap = plain.snapshot(OobScope::System).expect("snapshot");
    other.snapshot(OobScope::Vm(2)).expect("another snapshot");
    let e = plain.read_latch(snap.tag, 0).unwrap_err();
    assert!(
        matches!(e, OobError::Stale { tag } if tag == snap.tag),
        "{e:?}"
    );
    let want = plain.read_block(OobScope::System).expect("system block");
    assert!(want.counters.iter().any(|&c| c > 0), "{want:?}");

    // A read whose latch another snapshot replaces once takes a new
    // snapshot and answers the same consistent copy (the clock is still).
    let once = meddled(&f, mbox_op::OOB_READ_LATCH, 1, 1, |o| {
        o.snapshot(OobScope::Vm(2)).expect("meddling snapshot");
    });
    let got = once.read_block(OobScope::System).expect("read despite one");
    assert_eq!(got.counters, want.counters);
    assert!(got.snapshot.tag != want.snapshot.tag);
    // Replaced under every snapshot (the interleaved latch read runs
    // again undisturbed, and finds its tag stale): bounded.
    let always = meddled(&f, mbox_op::OOB_READ_LATCH, u32::MAX, 2, |o| {
        o.snapshot(OobScope::Vm(2)).expect("meddling snapshot");
    });
    let e = always.read_block(OobScope::System).unwrap_err();
    assert!(
        matches!(
            e,
            OobError::StaleAgain {
                tries: MAX_STALE_TRIES
            }
        ),
        "{e:?}"
    );

    // An interleaved command runs again: ours three times, theirs twice.
    let twice = meddled(&f, mbox_op::READ_CYCLE, 2, 1, |o| {
        o.caps().expect("meddling command");
    });
    let seq = |c: &OobClient<Meddler>| c.registers().mine.read32(OOB_MBOX_SEQ).unwrap();
    let s0 = seq(&twice);
    assert_eq!(twice.cycle().expect("cycle"), plain.cycle().expect("cycle"));
    assert_eq!(seq(&twice).wrapping_sub(s0), 3 + 2 + 1);
    let always = meddled(&f, mbox_op::READ_CYCLE, u32::MAX, 1, |o| {
        o.caps().expect("meddling command");
    });
    let e = always.cycle().unwrap_err();
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

    // A confidential VM's block is refused, and nothing else broke.
    let e = plain
        .read_block(OobScope::Vm(u32::try_from(CONFIDENTIAL_VM).unwrap()))
        .unwrap_err();
    assert!(matches!(e, OobError::Confidential { .. }), "{e:?}");
    assert!(plain.vms().all(|v| v.is_ok()));
}
