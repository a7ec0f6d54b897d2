//! A confidential VM's counters against a curious host: no (key, nonce)
//! pair is ever reused, nothing the host can read in
//! plaintext depends on the confidential VM's workload, and only the
//! holder of the current key can replace it.

#![allow(clippy::cast_possible_truncation)] // 32-bit register values are read as u64

use std::collections::HashMap;

use gpupm_driver::host::{self, Host};
use gpupm_driver::model::cc::RekeyBlob;
use gpupm_driver::model::{Device, EngineKind};
use gpupm_driver::scenario::Scenario;
use gpupm_test_support::model::*;
use gpupm_uapi::intr::InterruptRecord;
use gpupm_uapi::layout::{
    self, envelope_flags, BlockSlot, StreamSlot, CTX_BLOCK_SLOTS, CTX_BLOCK_SLOT_BASE,
};
use gpupm_uapi::regs::{self as r, mbox_op};
use zerocopy::{FromBytes, IntoBytes};

/// The confidential VM of [`small_scenario`] and its key.
const VM: u32 = 3;
const KEY: [u8; 32] = [0x5A; 32];

/// Every encrypted slot of the window: (envelope bytes after the VM and
/// flags — epoch, session and nonce —, ciphertext and tag).
fn sealed_slots(dev: &Device) -> Vec<([u8; 24], Vec<u8>)> {
    let mut out = Vec::new();
    let mut note = |envelope: &[u8], rest: &[u8]| {
        let flags = u32::from_le_bytes(envelope[4..8].try_into().unwrap());
        if flags & envelope_flags::ENCRYPTED != 0 {
            out.push((envelope[8..32].try_into().unwrap(), rest.to_vec()));
        }
    };
    for slot in 0..CTX_BLOCK_SLOT_BASE + CTX_BLOCK_SLOTS {
        let mut buf = vec![0u8; layout::BLOCK_SLOT_SIZE as usize];
        dev.read_window(layout::block_slot_offset(slot), &mut buf)
            .unwrap();
        note(&buf[..32], &buf[32..]);
    }
    for p in 0..r::MAX_PARTITION_SLOTS {
        let Ok(cap) = dev.read_reg(r::part(p, r::PART_STREAM_CAP), 4) else {
            continue;
        };
        for i in 0..cap as u32 {
            let mut buf = vec![0u8; layout::STREAM_SLOT_SIZE as usize];
            dev.read_window(layout::stream_slot_offset(p, i), &mut buf)
                .unwrap();
            note(&buf[..32], &buf[32..]);
        }
    }
    out
}

/// Records every sealed slot in `seen`; fails if one (session, epoch,
/// nonce) sealed two different ciphertexts.
fn no_nonce_reused(dev: &Device, seen: &mut HashMap<[u8; 24], Vec<u8>>, when: &str) -> usize {
    let slots = sealed_slots(dev);
    for (nonce, sealed) in &slots {
        let first = seen.entry(*nonce).or_insert_with(|| sealed.clone());
        assert!(
            first == sealed,
            "{when}: (session, epoch, nonce) {nonce:02x?} sealed two different payloads"
        );
    }
    slots.len()
}

fn run(dev: &mut Device, host: &mut Host, cycles: u64) {
    let end = dev.now() + cycles;
    while dev.now() < end {
        dev.advance(2_000.min(end - dev.now())).unwrap();
        host.service(dev).unwrap();
    }
}

#[test]
fn no_nonce_is_reused_across_device_resets() {
    let s = small_scenario();
    let mut dev = device(&s, EngineKind::Batched);
    let mut host = Host::new();
    let mut seen = HashMap::new();
    for round in 0..3 {
        run(&mut dev, &mut host, 150_000);
        host::flush_all(&mut dev).unwrap();
        let sealed = no_nonce_reused(&dev, &mut seen, &format!("round {round}"));
        assert!(sealed >= 3, "VM {VM}'s blocks are sealed");
        dev.write_reg(r::RESET, 4, u64::from(r::RESET_MAGIC))
            .unwrap();
        no_nonce_reused(&dev, &mut seen, &format!("after reset {round}"));
        assert_eq!(host_block(&dev, VM, Some(&KEY)), *dev.block(VM));
    }
    host::flush_all(&mut dev).unwrap();
    assert_blocks_match_ledger(&mut dev, &s);
}

/// Everything the host can read, with the bytes of every sealed payload and
/// tag zeroed (their length stays): every register, the whole memory
/// window, and the answers of both mailboxes to every command.
fn host_view(dev: &mut Device) -> Vec<u8> {
    let mut out = digest(dev);
    let blocks =
        (CTX_BLOCK_SLOT_BASE + CTX_BLOCK_SLOTS) as usize * layout::BLOCK_SLOT_SIZE as usize;
    let registers = out.len() - window_len(dev);
    let (block_bytes, rings) = out[registers..].split_at_mut(blocks);
    for chunk in block_bytes.chunks_exact_mut(layout::BLOCK_SLOT_SIZE as usize) {
        let mut slot = BlockSlot::read_from_bytes(chunk).unwrap();
        if slot.envelope.flags & envelope_flags::ENCRYPTED != 0 {
            slot.payload.fill(0);
            slot.tag = [0; 16];
        }
        chunk.copy_from_slice(slot.as_bytes());
    }
    for chunk in rings.chunks_exact_mut(layout::STREAM_SLOT_SIZE as usize) {
        let mut slot = StreamSlot::read_from_bytes(chunk).unwrap();
        if slot.envelope.flags & envelope_flags::ENCRYPTED != 0 {
            slot.payload.fill(0);
            slot.tag = [0; 16];
        }
        chunk.copy_from_slice(slot.as_bytes());
    }
    for (arg_reg, cmd, data) in [
        (r::MBOX_ARG, r::MBOX_CMD, r::MBOX_DATA),
        (r::OOB_MBOX_ARG, r::OOB_MBOX_CMD, r::OOB_MBOX_DATA),
    ] {
        for op in [
            mbox_op::GET_CAPS,
            mbox_op::READ_IDLE_CYCLES,
            mbox_op::READ_CYCLE,
            mbox_op::READ_FALLBACKS,
        ] {
            dev.write_reg(cmd, 4, u64::from(op)).unwrap();
            out.extend_from_slice(&dev.read_reg(data, 8).unwrap().to_le_bytes());
        }
        for e in 0..gpupm_uapi::events::EVENT_COUNT as u64 {
            dev.write_reg(arg_reg, 4, e).unwrap();
            dev.write_reg(cmd, 4, u64::from(mbox_op::READ_SYSTEM_COUNTER))
                .unwrap();
            out.extend_from_slice(&dev.read_reg(data, 8).unwrap().to_le_bytes());
        }
    }
    out
}

/// Bytes of the window part of [`digest`]: the block slots and every ring.
fn window_len(dev: &Device) -> usize {
    let blocks =
        (CTX_BLOCK_SLOT_BASE + CTX_BLOCK_SLOTS) as usize * layout::BLOCK_SLOT_SIZE as usize;
    let rings: usize = (0..r::MAX_PARTITION_SLOTS)
        .filter_map(|p| dev.read_reg(r::part(p, r::PART_STREAM_CAP), 4).ok())
        .map(|cap| cap as usize * layout::STREAM_SLOT_SIZE as usize)
        .sum();
    blocks + rings
}

/// Runs `s` serviced by the host, then flushes; returns the host's view,
/// every interrupt record, and the device.
fn observe(s: &Scenario) -> (Vec<u8>, Vec<InterruptRecord>, Device) {
    let mut dev = device(s, EngineKind::Batched);
    let mut host = Host::new();
    run(&mut dev, &mut host, 1_200_000);
    host::flush_all(&mut dev).unwrap();
    let mut records = Vec::new();
    dev.interrupts_since(0, &mut records);
    let view = host_view(&mut dev);
    (view, records, dev)
}

#[test]
fn nothing_the_host_reads_in_plaintext_depends_on_a_confidential_vms_workload() {
    let mut busy = small_scenario();
    // Thresholds low enough to fire, and periodic triggers: both must
    // reveal nothing of what the confidential partition counted.
    busy.trigger.threshold = 20_000;
    let mut idle = busy.clone();
    for c in idle.contexts.iter_mut().filter(|c| c.vm == VM) {
        c.profile = 1;
    }
    let (view_a, records_a, mut a) = observe(&busy);
    let (view_b, records_b, mut b) = observe(&idle);
    assert_eq!(records_a, records_b, "interrupt records differ");
    assert_eq!(view_a.len(), view_b.len());
    let first = view_a.iter().zip(&view_b).position(|(x, y)| x != y);
    assert_eq!(first, None, "the host's view differs at byte {first:?}");
    // The tenant, holding the key, reads exactly its ledger in both runs,
    // and the two workloads did count differently.
    assert_blocks_match_ledger(&mut a, &busy);
    assert_blocks_match_ledger(&mut b, &idle);
    let (va, vb) = (
        host_block(&a, VM, Some(&KEY)),
        host_block(&b, VM, Some(&KEY)),
    );
    assert!(sum(&va.counters) > sum(&vb.counters) && sum(&vb.counters) > 0);
    assert!(
        a.read_reg(r::TRIG_COUNT_THRESHOLD, 8).unwrap() > 0,
        "no threshold trigger fired: the test did not exercise the guard"
    );
}

#[test]
fn the_host_cannot_install_a_key_it_knows() {
    let s = small_scenario();
    let mut dev = device(&s, EngineKind::Batched);
    let mut host = Host::new();
    run(&mut dev, &mut host, 100_000);
    let host_key = [0x11u8; 32];
    let before = digest(&dev);
    // What the register file offered before: eight plain key words at
    // 0x10 of the VM entry, then a commit.
    for (i, chunk) in host_key.chunks_exact(4).enumerate() {
        let word = u32::from_le_bytes(chunk.try_into().unwrap());
        let offset = r::vm(VM, 0x10 + 4 * i as u64);
        assert!(dev.write_reg(offset, 4, u64::from(word)).is_err());
    }
    assert!(dev.write_reg(r::vm(VM, r::VM_KEY_COMMIT), 4, 1).is_err());
    assert!(
        digest(&dev) == before,
        "a refused key write changed something"
    );
    assert_eq!(dev.read_reg(r::vm(VM, r::VM_KEY_EPOCH), 4).unwrap(), 1);
    run(&mut dev, &mut host, 100_000);
    host::flush_all(&mut dev).unwrap();
    let mut buf = vec![0u8; layout::BLOCK_SLOT_SIZE as usize];
    dev.read_window(layout::block_slot_offset(VM), &mut buf)
        .unwrap();
    let mut slot = BlockSlot::read_from_bytes(&buf).unwrap();
    assert!(
        gpupm_driver::model::cc::open(&host_key, &slot.envelope, &mut slot.payload, &slot.tag)
            .is_err(),
        "the host's key opens the confidential block"
    );
    assert_eq!(host_block(&dev, VM, Some(&KEY)), *dev.block(VM));
}

/// Stages and commits `blob` for `vm` in one batch.
fn commit(
    dev: &mut Device,
    vm: u32,
    blob: &RekeyBlob,
) -> Result<(), (usize, gpupm_driver::model::DeviceError)> {
    let mut ops: Vec<_> = blob
        .register_writes(vm)
        .into_iter()
        .map(|(offset, value)| gpupm_uapi::ioctl::RegOp {
            offset,
            value: u64::from(value),
            op: gpupm_uapi::ioctl::reg_op::WRITE,
            width: 4,
        })
        .collect();
    dev.batch(&mut ops)
}

#[test]
fn only_a_key_sealed_under_the_current_one_replaces_it_and_no_blob_works_twice() {
    let s = small_scenario();
    let mut dev = device(&s, EngineKind::Batched);
    let mut host = Host::new();
    run(&mut dev, &mut host, 100_000);
    let session = dev.read_reg(r::vm(VM, r::VM_KEY_SESSION), 8).unwrap();
    let next = [0x77u8; 32];
    let good = RekeyBlob::seal(&KEY, VM, 1, session, &next, [1; 8]);
    let before = digest(&dev);
    for (what, vm, blob) in [
        (
            "sealed under another key",
            VM,
            RekeyBlob::seal(&[0x11; 32], VM, 1, session, &next, [2; 8]),
        ),
        (
            "sealed for the next epoch",
            VM,
            RekeyBlob::seal(&KEY, VM, 2, session, &next, [3; 8]),
        ),
        (
            "sealed for another session",
            VM,
            RekeyBlob::seal(&KEY, VM, 1, session ^ 1, &next, [4; 8]),
        ),
        ("committed to a plain VM", 1, good),
        (
            "tampered",
            VM,
            RekeyBlob {
                tag: [0; 16],
                ..good
            },
        ),
    ] {
        assert!(commit(&mut dev, vm, &blob).is_err(), "{what}: accepted");
        assert!(
            digest(&dev) == before,
            "{what}: a refused rekey changed something"
        );
    }
    commit(&mut dev, VM, &good).unwrap();
    assert_eq!(dev.read_reg(r::vm(VM, r::VM_KEY_EPOCH), 4).unwrap(), 2);
    let after = digest(&dev);
    assert!(
        commit(&mut dev, VM, &good).is_err(),
        "a replayed blob was accepted"
    );
    assert!(digest(&dev) == after, "a replay changed something");
    run(&mut dev, &mut host, 100_000);
    host::flush_all(&mut dev).unwrap();
    // The blocks are now sealed under the new key's session key.
    assert_eq!(host_block(&dev, VM, Some(&next)), *dev.block(VM));
    // A reset starts a new session, under the same (new) key.
    dev.write_reg(r::RESET, 4, u64::from(r::RESET_MAGIC))
        .unwrap();
    assert_ne!(
        dev.read_reg(r::vm(VM, r::VM_KEY_SESSION), 8).unwrap(),
        session
    );
    assert_eq!(dev.read_reg(r::vm(VM, r::VM_KEY_EPOCH), 4).unwrap(), 2);
    assert_eq!(host_block(&dev, VM, Some(&next)), *dev.block(VM));
}
