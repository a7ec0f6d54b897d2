//! A confidential VM through the device node, with the real `gpupm-driver`
//! process: the debug ledger exists only with `--debug-ledger` and answers
//! a confidential VM only sealed (issue #9, defect 4), and no (key, nonce)
//! pair is ever reused across resets, rekeys and driver restarts.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;

use gpupm_driver::model::cc::{self, RekeyBlob};
use gpupm_test_support::rawnode::ioctl;
use gpupm_test_support::rawnode::{
    advance, batch, expected, flush_all, ledger, read_block, service, service_pending, write_op,
    Tally,
};
use gpupm_test_support::rawnode::{errno, rd32, rd64};
use gpupm_test_support::scenario::VM3_KEY;
use gpupm_test_support::{Driver, DriverOptions};
use gpupm_uapi::ioctl::{
    ledger_flags, ledger_scope, LedgerQuery, Reset, GPUPM_IOC_LEDGER, GPUPM_IOC_RESET,
    IOCTL_STRUCT_VERSION, IOC_MAGIC,
};
use gpupm_uapi::layout::{
    self, envelope_flags, BlockSlot, StreamSlot, BLOCK_SLOT_SIZE, CTX_BLOCK_SLOTS,
    CTX_BLOCK_SLOT_BASE, MEM_WINDOW_OFFSET, STREAM_SLOT_SIZE,
};
use gpupm_uapi::regs as r;
use zerocopy::{FromBytes, FromZeros, IntoBytes};

const VM: u32 = 3;

fn run(card: &mut File, cycles: u64) {
    let mut tally = Tally::default();
    service_pending(card);
    for _ in 0..cycles / 5_000 {
        advance(card, 5_000).unwrap();
        service(card, &mut tally);
    }
    flush_all(card);
}

#[test]
fn without_debug_ledger_the_ledger_ioctl_does_not_exist() {
    let d = Driver::start_with(DriverOptions::default().without_ledger());
    let card = d.card();
    advance(&card, 50_000).unwrap();
    for (scope, id) in [
        (ledger_scope::SYSTEM, 0),
        (ledger_scope::VM, VM),
        (ledger_scope::VM, 1),
    ] {
        let e = ledger(&card, scope, id).unwrap_err();
        assert_eq!(errno(&e), libc::ENOTTY, "ledger {scope}/{id}: {e}");
    }
    // Any size with the ledger's number is unknown too, not malformed.
    let wrong = u32::try_from(nix::request_code_readwrite!(IOC_MAGIC, 0x03, 64)).unwrap();
    let e = ioctl(&card, wrong, &mut [0u8; 64]).unwrap_err();
    assert_eq!(errno(&e), libc::ENOTTY);
    assert_eq!(rd64(&card, r::CYCLE).unwrap(), 50_000);
    d.stop();
}

#[test]
fn the_debug_ledger_answers_a_confidential_vm_only_sealed_under_its_session_key() {
    let d = Driver::start();
    let mut card = d.card_nonblock();
    run(&mut card, 200_000);
    let q = ledger(&card, ledger_scope::VM, VM).unwrap();
    assert_ne!(q.flags & ledger_flags::SEALED, 0);
    assert_ne!(q.envelope.flags & envelope_flags::ENCRYPTED, 0);
    assert_eq!(
        q.envelope.session(),
        rd64(&card, r::vm(VM, r::VM_KEY_SESSION)).unwrap()
    );
    let mut wrong = q;
    assert!(cc::open_ledger(&mut wrong, &[0; 32]).is_err());
    let mut opened = q;
    cc::open_ledger(&mut opened, &VM3_KEY).unwrap();
    assert_ne!(
        opened.generated, q.generated,
        "the sealed answer was plaintext"
    );
    let block = read_block(&card, layout::block_slot_offset(VM), Some(&VM3_KEY));
    assert_eq!(block.counters, expected(&opened));
    // A context of the confidential VM is sealed too; plain scopes are not.
    let ctx = rd32(&card, r::part(2, r::PART_CUR_CTX)).unwrap();
    assert_ne!(
        ledger(&card, ledger_scope::CONTEXT, ctx).unwrap().flags & ledger_flags::SEALED,
        0
    );
    for (scope, id) in [(ledger_scope::SYSTEM, 0), (ledger_scope::VM, 1)] {
        let q = ledger(&card, scope, id).unwrap();
        assert_eq!(
            (q.flags, q.envelope, q.tag),
            (0, Default::default(), [0; 16])
        );
    }
    // An envelope or tag on input is malformed.
    let mut bad = LedgerQuery::new_zeroed();
    (bad.version, bad.scope, bad.id, bad.tag[0]) =
        (IOCTL_STRUCT_VERSION, ledger_scope::SYSTEM, 0, 1);
    let e = ioctl(&card, GPUPM_IOC_LEDGER, bad.as_mut_bytes()).unwrap_err();
    assert_eq!(errno(&e), libc::EINVAL);
    d.stop();
}

/// Every sealed slot of the window: (epoch, session, nonce) → ciphertext.
fn sealed_slots(card: &File) -> Vec<([u8; 24], BlockOrRecord)> {
    let mut out = Vec::new();
    let blocks = u64::from(CTX_BLOCK_SLOT_BASE + CTX_BLOCK_SLOTS) * BLOCK_SLOT_SIZE;
    let mut buf = vec![0u8; usize::try_from(blocks).unwrap()];
    let n = card.read_at(&mut buf, MEM_WINDOW_OFFSET).unwrap();
    assert_eq!(n, buf.len(), "short window read");
    for chunk in buf.chunks_exact(usize::try_from(BLOCK_SLOT_SIZE).unwrap()) {
        let slot = BlockSlot::read_from_bytes(chunk).unwrap();
        if slot.envelope.flags & envelope_flags::ENCRYPTED != 0 {
            out.push((nonce_key(chunk), BlockOrRecord::Block(slot)));
        }
    }
    for p in 0..r::MAX_PARTITION_SLOTS {
        if rd32(card, r::part(p, r::PART_STATUS)).unwrap() & r::part_status::CONFIGURED == 0 {
            continue;
        }
        let cap = rd32(card, r::part(p, r::PART_STREAM_CAP)).unwrap();
        let mut ring = vec![0u8; usize::try_from(u64::from(cap) * STREAM_SLOT_SIZE).unwrap()];
        let n = card
            .read_at(
                &mut ring,
                MEM_WINDOW_OFFSET + layout::stream_slot_offset(p, 0),
            )
            .unwrap();
        assert_eq!(n, ring.len(), "short ring read");
        for chunk in ring.chunks_exact(usize::try_from(STREAM_SLOT_SIZE).unwrap()) {
            let slot = StreamSlot::read_from_bytes(chunk).unwrap();
            if slot.envelope.flags & envelope_flags::ENCRYPTED != 0 {
                out.push((nonce_key(chunk), BlockOrRecord::Record(slot)));
            }
        }
    }
    out
}

/// A sealed slot.
#[derive(Clone, Copy, PartialEq, Eq)]
enum BlockOrRecord {
    Block(BlockSlot),
    Record(StreamSlot),
}

impl BlockOrRecord {
    /// Opens the slot with `key`; whether it opened.
    fn opens_with(&self, key: &[u8; 32]) -> bool {
        match *self {
            BlockOrRecord::Block(mut s) => {
                cc::open(key, &s.envelope, &mut s.payload, &s.tag).is_ok()
            }
            BlockOrRecord::Record(mut s) => {
                cc::open(key, &s.envelope, &mut s.payload, &s.tag).is_ok()
            }
        }
    }

    fn epoch(&self) -> u32 {
        match self {
            BlockOrRecord::Block(s) => s.envelope.key_epoch,
            BlockOrRecord::Record(s) => s.envelope.key_epoch,
        }
    }
}

/// The envelope's epoch, session and nonce (bytes 8..32).
fn nonce_key(slot: &[u8]) -> [u8; 24] {
    slot[8..32].try_into().unwrap()
}

/// Collects `card`'s sealed slots into `seen`, failing on a (session,
/// epoch, nonce) that sealed two different slots; checks each opens under
/// the key of its epoch. Returns how many sealed slots it saw.
fn collect(
    card: &File,
    seen: &mut HashMap<[u8; 24], BlockOrRecord>,
    keys: &[[u8; 32]],
    when: &str,
) -> usize {
    let slots = sealed_slots(card);
    for (key, slot) in &slots {
        let epoch = usize::try_from(slot.epoch()).unwrap();
        assert!(
            slot.opens_with(&keys[epoch - 1]),
            "{when}: a slot of epoch {epoch} does not open under that epoch's key"
        );
        let first = seen.entry(*key).or_insert(*slot);
        assert!(
            first == slot,
            "{when}: (epoch, session, nonce) {key:02x?} sealed two different slots"
        );
    }
    slots.len()
}

#[test]
fn no_key_and_nonce_repeat_across_resets_rekeys_and_driver_restarts() {
    let mut seen = HashMap::new();
    let mut sessions = Vec::new();
    let next_key = [0x3Cu8; 32];
    let keys = [VM3_KEY, next_key];
    for life in 0..2 {
        let d = Driver::start();
        let mut card = d.card_nonblock();
        sessions.push(rd64(&card, r::vm(VM, r::VM_KEY_SESSION)).unwrap());
        run(&mut card, 100_000);
        assert!(collect(&card, &mut seen, &keys, &format!("life {life}")) > 3);
        let mut reset = Reset {
            version: IOCTL_STRUCT_VERSION,
            magic: r::RESET_MAGIC,
        };
        ioctl(&card, GPUPM_IOC_RESET, reset.as_mut_bytes()).unwrap();
        sessions.push(rd64(&card, r::vm(VM, r::VM_KEY_SESSION)).unwrap());
        collect(
            &card,
            &mut seen,
            &keys,
            &format!("life {life}, after reset"),
        );
        run(&mut card, 100_000);
        collect(
            &card,
            &mut seen,
            &keys,
            &format!("life {life}, after the reset's run"),
        );
        // The tenant rekeys with proof of the provisioned key.
        let session = rd64(&card, r::vm(VM, r::VM_KEY_SESSION)).unwrap();
        let epoch = rd32(&card, r::vm(VM, r::VM_KEY_EPOCH)).unwrap();
        assert_eq!(epoch, 1, "a restart provisions the scenario's key again");
        let blob = RekeyBlob::seal(&VM3_KEY, VM, epoch, session, &next_key, [life; 8]);
        let mut ops: Vec<_> = blob
            .register_writes(VM)
            .into_iter()
            .map(|(off, v)| write_op(off, u64::from(v)))
            .collect();
        batch(&card, &mut ops).unwrap();
        assert_eq!(rd32(&card, r::vm(VM, r::VM_KEY_EPOCH)).unwrap(), 2);
        run(&mut card, 100_000);
        collect(
            &card,
            &mut seen,
            &keys,
            &format!("life {life}, after the rekey"),
        );
        d.stop();
    }
    let epochs: std::collections::BTreeSet<u32> = seen.values().map(BlockOrRecord::epoch).collect();
    assert_eq!(epochs, [1, 2].into(), "slots of both keys were checked");
    let distinct: std::collections::BTreeSet<u64> = sessions.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        sessions.len(),
        "a session id repeated: {sessions:x?}"
    );
    eprintln!(
        "{} sealed slots over {} sessions, no nonce reused",
        seen.len(),
        sessions.len()
    );
}
