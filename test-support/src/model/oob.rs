//! The out-of-band channel as its tests drive it (`docs/oob.md`): OOB
//! mailbox commands, a block read through a snapshot and its latch, a
//! flush driven to its completion, and the oracle an OOB block must equal
//! — its scope's ledger row, counting masked counts too, plus what the
//! scope held before each host reset (the ledger restarts at a reset; the
//! channel does not).

use std::collections::HashMap;

use gpupm_driver::model::{Device, LedgerTotals};
use gpupm_driver::scenario::Scenario;
use gpupm_uapi::events::{self, EVENT_COUNT, MAX_EVENTS, MULTIBIT_SCALE};
use gpupm_uapi::ioctl::ledger_scope;
use gpupm_uapi::regs::{self as r, mbox_op, mbox_status, oob_scope, FLUSH_ACK_MAX_CYCLES};

/// A 32-bit register value (the device returns it in a `u64`).
fn low32(v: u64) -> u32 {
    u32::try_from(v).expect("a 32-bit register")
}

/// Runs one OOB command with `arg` and `arg2`; returns (status, DATA..DATA3).
pub fn oob(dev: &mut Device, op: u32, arg: u32, arg2: u32) -> (u32, [u64; 4]) {
    dev.write_reg(r::OOB_MBOX_ARG, 4, u64::from(arg)).unwrap();
    dev.write_reg(r::OOB_MBOX_ARG2, 4, u64::from(arg2)).unwrap();
    dev.write_reg(r::OOB_MBOX_CMD, 4, u64::from(op)).unwrap();
    let status = low32(dev.read_reg(r::OOB_MBOX_STATUS, 4).unwrap());
    let data = [
        r::OOB_MBOX_DATA,
        r::OOB_MBOX_DATA1,
        r::OOB_MBOX_DATA2,
        r::OOB_MBOX_DATA3,
    ]
    .map(|o| dev.read_reg(o, 8).unwrap());
    (status, data)
}

/// A block's counters through the mailbox, as a BMC reads them: a
/// snapshot, then the latch four words at a time; `None` when the
/// snapshot is refused.
pub fn read_oob_block(dev: &mut Device, scope: u32, id: u32) -> Option<[u64; MAX_EVENTS]> {
    let (status, snap) = oob(dev, mbox_op::OOB_SNAPSHOT, id, scope);
    if status != mbox_status::OK {
        return None;
    }
    let tag = low32(snap[0]);
    let mut out = [0; MAX_EVENTS];
    for first in (0..EVENT_COUNT).step_by(4) {
        let at = u32::try_from(first).unwrap();
        let (status, words) = oob(dev, mbox_op::OOB_READ_LATCH, at, tag);
        assert_eq!(status, mbox_status::OK, "latch read at {first}");
        for (k, w) in words.iter().enumerate().take(EVENT_COUNT - first) {
            out[first + k] = *w;
        }
    }
    Some(out)
}

/// Requests an OOB flush and advances the step clock until it completed:
/// every OOB block then holds everything generated up to now.
pub fn oob_flush(dev: &mut Device) {
    let (status, [n, due, ..]) = oob(dev, mbox_op::OOB_FLUSH, 0, 0);
    assert_eq!(status, mbox_status::OK, "OOB_FLUSH");
    assert_eq!(due, dev.now() + u64::from(FLUSH_ACK_MAX_CYCLES));
    dev.advance(u64::from(FLUSH_ACK_MAX_CYCLES)).unwrap();
    let (_, info) = oob(dev, mbox_op::OOB_CHANNEL_INFO, 0, 0);
    assert_eq!(info[3], n, "the flush completed");
}

/// What an OOB block must hold for a ledger row: everything generated
/// that became a count, masked or not.
pub fn oob_expected(t: &LedgerTotals) -> [u64; MAX_EVENTS] {
    let mut out = [0; MAX_EVENTS];
    for (e, o) in out.iter_mut().enumerate() {
        let scale = match events::by_id(u16::try_from(e).unwrap()) {
            Some(info) if info.multibit => MULTIBIT_SCALE,
            _ => 1,
        };
        *o = (t.generated[e] - t.remainder[e]) / scale;
    }
    out
}

fn add(into: &mut [u64; MAX_EVENTS], v: &[u64; MAX_EVENTS]) {
    for (a, b) in into.iter_mut().zip(v) {
        *a += b;
    }
}

/// The oracle of every OOB block: per scope, what it must hold.
#[derive(Clone, Debug)]
pub struct OobOracle {
    /// The system block.
    pub system: [u64; MAX_EVENTS],
    /// Per plain VM.
    pub vms: HashMap<u32, [u64; MAX_EVENTS]>,
    /// Per context instance (id, created cycle) of a plain VM.
    pub contexts: HashMap<(u32, u64), [u64; MAX_EVENTS]>,
}

impl Default for OobOracle {
    fn default() -> Self {
        OobOracle {
            system: [0; MAX_EVENTS],
            vms: HashMap::new(),
            contexts: HashMap::new(),
        }
    }
}

/// Context `id`'s created cycle.
pub fn created(dev: &Device, id: u32) -> u64 {
    dev.read_reg(r::ctx(id, r::CTX_CREATED_CYCLE), 8).unwrap()
}

impl OobOracle {
    /// Every scope's expectation now: this oracle (what the scopes held
    /// before the last host reset) plus the ledger since.
    pub fn now(&self, dev: &mut Device, s: &Scenario) -> OobOracle {
        let mut now = OobOracle {
            system: self.system,
            vms: HashMap::new(),
            contexts: HashMap::new(),
        };
        let system = dev.ledger_totals(ledger_scope::SYSTEM, 0).unwrap();
        add(&mut now.system, &oob_expected(&system));
        let plain = |vm: u32| s.vms.iter().any(|v| v.id == vm && !v.is_confidential());
        for v in s.vms.iter().filter(|v| !v.is_confidential()) {
            let mut e = self.vms.get(&v.id).copied().unwrap_or([0; MAX_EVENTS]);
            add(
                &mut e,
                &oob_expected(&dev.ledger_totals(ledger_scope::VM, v.id).unwrap()),
            );
            now.vms.insert(v.id, e);
        }
        let live: Vec<(u32, u32, u32)> = dev.contexts().collect();
        for (id, _, _) in live.into_iter().filter(|c| plain(c.1)) {
            let key = (id, created(dev, id));
            let mut e = self.contexts.get(&key).copied().unwrap_or([0; MAX_EVENTS]);
            add(
                &mut e,
                &oob_expected(&dev.ledger_totals(ledger_scope::CONTEXT, id).unwrap()),
            );
            now.contexts.insert(key, e);
        }
        now
    }
}

/// Flushes the OOB channel and requires every OOB block the ledger speaks
/// for to equal `oracle` brought up to now (read as a BMC reads them),
/// and neither a block nor a context of a confidential VM to be there.
pub fn assert_oob_matches_ledger(dev: &mut Device, s: &Scenario, oracle: &OobOracle, when: &str) {
    oob_flush(dev);
    let want = oracle.now(dev, s);
    assert_eq!(
        read_oob_block(dev, oob_scope::SYSTEM, 0),
        Some(want.system),
        "{when}: OOB system block"
    );
    for (vm, e) in &want.vms {
        assert_eq!(
            read_oob_block(dev, oob_scope::VM, *vm),
            Some(*e),
            "{when}: OOB block of VM {vm}"
        );
    }
    for ((id, cycle), e) in &want.contexts {
        let (status, snap) = oob(dev, mbox_op::OOB_SNAPSHOT, *id, oob_scope::CONTEXT);
        assert_eq!(
            (status, snap[3]),
            (mbox_status::OK, *cycle),
            "{when}: context {id}"
        );
        assert_eq!(
            read_oob_block(dev, oob_scope::CONTEXT, *id),
            Some(*e),
            "{when}: OOB block of context {id} (created {cycle})"
        );
    }
    for v in s.vms.iter().filter(|v| v.is_confidential()) {
        assert_eq!(
            oob(dev, mbox_op::OOB_SNAPSHOT, v.id, oob_scope::VM).0,
            mbox_status::ERR_CONFIDENTIAL,
            "{when}: confidential VM {}",
            v.id
        );
        let theirs: Vec<u32> = dev
            .contexts()
            .filter(|c| c.1 == v.id)
            .map(|c| c.0)
            .collect();
        for id in theirs {
            assert_eq!(
                oob(dev, mbox_op::OOB_SNAPSHOT, id, oob_scope::CONTEXT).0,
                mbox_status::ERR_NOT_FOUND,
                "{when}: context {id} of confidential VM {}",
                v.id
            );
        }
    }
}
