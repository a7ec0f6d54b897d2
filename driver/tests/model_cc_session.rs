//! Confidential sessions established by the key exchange, against the
//! host that relays it: before its tenant establishes a
//! session a confidential VM publishes nothing readable and loses nothing;
//! a host that relays the exchange and reads every register, window byte
//! and interrupt meanwhile derives no key that opens anything; a reset
//! ends the session (nothing is sealed under the old key after it, no old
//! message works again) and re-establishing brings every count back.

#![allow(clippy::cast_possible_truncation)] // 32-bit register values are read as u64

use std::collections::HashSet;

use gpupm_cc::schedule::{self, Handshake};
use gpupm_driver::host::{self, Host};
use gpupm_driver::model::cc::{open, open_ledger, RekeyBlob};
use gpupm_driver::model::Device;
use gpupm_test_support::model::cc::{
    device_with_identity, establish, establish_seen, keyless, rekey, TenantSession,
};
use gpupm_test_support::model::{small_scenario, sum};
use gpupm_uapi::cc::KeyExchange;
use gpupm_uapi::intr::InterruptRecord;
use gpupm_uapi::ioctl::{ledger_flags, ledger_scope};
use gpupm_uapi::layout::{
    self, envelope_flags, Block, BlockSlot, Envelope, CTX_BLOCK_SLOTS, CTX_BLOCK_SLOT_BASE,
};
use gpupm_uapi::regs::{self as r, vm_flags};
use sha2::{Digest, Sha256};
use zerocopy::{FromBytes, IntoBytes};

/// The confidential VM of the small scenario.
const VM: u32 = 3;

fn run(dev: &mut Device, host: &mut Host, cycles: u64) {
    let end = dev.now() + cycles;
    while dev.now() < end {
        dev.advance(2_000.min(end - dev.now())).unwrap();
        host.service(dev).unwrap();
    }
}

/// The block slots of VM `vm` (its VM block and its contexts').
fn vm_slots(dev: &Device, vm: u32) -> Vec<u32> {
    let mut slots = vec![vm];
    slots.extend(
        dev.contexts()
            .filter(|&(_, v, _)| v == vm)
            .filter_map(|(id, _, _)| dev.ctx_slot(id)),
    );
    slots
}

fn slot_at(dev: &Device, slot: u32) -> BlockSlot {
    let mut buf = vec![0u8; layout::BLOCK_SLOT_SIZE as usize];
    dev.read_window(layout::block_slot_offset(slot), &mut buf)
        .unwrap();
    BlockSlot::read_from_bytes(&buf).unwrap()
}

/// Asserts that every block slot of `VM` is withheld: nothing in it but
/// the VM id and the flags.
fn assert_withheld(dev: &Device, when: &str) {
    for slot in vm_slots(dev, VM) {
        let s = slot_at(dev, slot);
        assert_eq!(
            s.envelope,
            Envelope {
                vm: VM,
                flags: envelope_flags::VALID | envelope_flags::ENCRYPTED | envelope_flags::WITHHELD,
                ..Envelope::default()
            },
            "{when}: slot {slot}"
        );
        assert!(
            s.payload.iter().all(|&b| b == 0) && s.tag == [0; 16],
            "{when}: slot {slot} publishes bytes without a session"
        );
    }
    assert_eq!(
        dev.read_reg(r::vm(VM, r::VM_FLAGS), 4).ok(),
        Some(u64::from(vm_flags::CONFIDENTIAL)),
        "{when}"
    );
    assert_eq!(dev.read_reg(r::vm(VM, r::VM_KEY_SESSION), 8).ok(), Some(0));
    assert_eq!(dev.read_reg(r::vm(VM, r::VM_KEY_EPOCH), 4).ok(), Some(0));
}

/// Asserts that every block of `VM`, opened with the tenant's key, is the
/// device's and that the VM block equals the ledger (after a flush).
fn assert_tenant_reads_its_ledger(dev: &mut Device, t: &TenantSession, when: &str) {
    for slot in vm_slots(dev, VM) {
        let mut s = slot_at(dev, slot);
        assert_eq!(
            (s.envelope.session(), s.envelope.key_epoch),
            (t.id, t.epoch),
            "{when}: slot {slot} is sealed under the current session and epoch"
        );
        open(&t.key(), &s.envelope, &mut s.payload, &s.tag).expect("the tenant's key opens it");
        assert_eq!(
            Block::read_from_bytes(&s.payload).unwrap(),
            *dev.block(slot),
            "{when}: slot {slot}"
        );
    }
    let want = dev
        .ledger_totals(ledger_scope::VM, VM)
        .unwrap()
        .expected_committed();
    assert_eq!(dev.block(VM).counters, want, "{when}: VM block != ledger");
    let mut q = dev.ledger_query(ledger_scope::VM, VM).unwrap();
    open_ledger(&mut q, &t.key()).expect("the sealed ledger opens with the session key");
    assert_eq!(
        q.generated,
        dev.ledger_totals(ledger_scope::VM, VM).unwrap().generated
    );
}

#[test]
fn without_a_session_a_confidential_vm_publishes_nothing_readable_and_loses_nothing() {
    let s = keyless(small_scenario());
    let mut dev = device_with_identity(&s);
    let mut host = Host::new();
    run(&mut dev, &mut host, 300_000);
    host::flush_all(&mut dev).unwrap();
    assert_withheld(&dev, "before any session");
    assert!(sum(&dev.block(VM).counters) > 0, "the VM counted");
    let q = dev.ledger_query(ledger_scope::VM, VM).unwrap();
    assert_eq!(
        q.flags,
        ledger_flags::SEALED | ledger_flags::WITHHELD,
        "the ledger answer is withheld too"
    );
    assert!(q.generated.iter().all(|&g| g == 0));

    let t = establish(&mut dev, VM, None, &mut Vec::new());
    assert_eq!(t.epoch, 1);
    assert_eq!(
        dev.read_reg(r::vm(VM, r::VM_FLAGS), 4).ok(),
        Some(u64::from(vm_flags::CONFIDENTIAL | vm_flags::SESSION))
    );
    assert_eq!(
        dev.read_reg(r::vm(VM, r::VM_KEY_SESSION), 8).ok(),
        Some(t.id)
    );
    // Everything counted while withheld appears at once, sealed.
    assert_tenant_reads_its_ledger(&mut dev, &t, "right after establishing");
    run(&mut dev, &mut host, 200_000);
    host::flush_all(&mut dev).unwrap();
    assert_tenant_reads_its_ledger(&mut dev, &t, "later");
}

#[test]
fn a_reset_ends_the_session_and_reestablishing_loses_nothing() {
    let s = keyless(small_scenario());
    let mut dev = device_with_identity(&s);
    let mut host = Host::new();
    let mut relay = Vec::new();
    let mut t = establish(&mut dev, VM, None, &mut relay);
    run(&mut dev, &mut host, 200_000);
    rekey(&mut dev, &mut t, [0x42; 32], &mut relay);
    host::flush_all(&mut dev).unwrap();
    assert_tenant_reads_its_ledger(&mut dev, &t, "after the rekey");
    let stale_blob = RekeyBlob::seal(&t.key(), VM, t.epoch, t.id, &[0x43; 32], [9; 8]);

    dev.write_reg(r::RESET, 4, u64::from(r::RESET_MAGIC))
        .unwrap();
    assert_withheld(&dev, "after the reset");
    run(&mut dev, &mut host, 200_000);
    host::flush_all(&mut dev).unwrap();
    assert_withheld(&dev, "running after the reset");
    // Nothing of the old session works again: its rekey blob, its FINISH.
    let mut ops: Vec<_> = stale_blob
        .register_writes(VM)
        .into_iter()
        .map(|(offset, v)| gpupm_uapi::ioctl::RegOp {
            op: gpupm_uapi::ioctl::reg_op::WRITE,
            width: 4,
            offset,
            value: u64::from(v),
        })
        .collect();
    assert!(dev.batch(&mut ops).is_err(), "a rekey without a session");
    let replayed: gpupm_uapi::cc::Finish =
        FromBytes::read_from_bytes(&relay[relay.len() - 2 * 96..relay.len() - 96]).unwrap();
    let mut replayed = replayed;
    assert!(dev.cc_finish(&mut replayed).is_err(), "a replayed FINISH");
    assert_withheld(&dev, "after the replays");

    let t2 = establish(&mut dev, VM, None, &mut relay);
    assert_ne!(t2.id, t.id);
    assert_tenant_reads_its_ledger(&mut dev, &t2, "re-established");
    for slot in vm_slots(&dev, VM) {
        let mut s = slot_at(&dev, slot);
        for epoch in 1..=t.epoch {
            assert!(
                open(&t.key_of(epoch), &s.envelope, &mut s.payload, &s.tag).is_err(),
                "the old session's key opens slot {slot}"
            );
        }
    }
    // The new session is the VM's; replacing it needs proof of it.
    let mut other = Vec::new();
    let req = gpupm_cc::Requester::new(VM).unwrap();
    let mut msg = req.request();
    dev.cc_key_exchange(&mut msg).unwrap();
    let agreed = req
        .check(&msg, &gpupm_uapi::cc::CC_VENDOR_ROOT_KEY)
        .unwrap();
    let mut fin = agreed.finish_request(None);
    other.extend_from_slice(fin.as_bytes());
    assert!(dev.cc_finish(&mut fin).is_err(), "an unproven takeover");
    assert_tenant_reads_its_ledger(&mut dev, &t2, "after a refused takeover");
}

/// What the host saw: the relayed messages and rekey words (`public`),
/// the interrupt records (`interrupts`), every readable register's value
/// (`registers`), and the memory window's bytes (`window`).
#[derive(Default)]
struct Seen {
    public: Vec<u8>,
    interrupts: Vec<u8>,
    registers: Vec<u8>,
    window: Vec<u8>,
    /// The device's KEY_EXCHANGE replies (to derive each exchange's TH3).
    replies: Vec<KeyExchange>,
}

impl Seen {
    fn look(&mut self, dev: &Device) {
        let mut off = 0u64;
        while off < r::BAR0_SIZE {
            for width in [4, 8] {
                if let Ok(v) = dev.read_reg(off, width) {
                    self.registers
                        .extend_from_slice(&v.to_le_bytes()[..width as usize]);
                }
            }
            off += 4;
        }
        let blocks =
            (CTX_BLOCK_SLOT_BASE + CTX_BLOCK_SLOTS) as usize * layout::BLOCK_SLOT_SIZE as usize;
        let mut buf = vec![0u8; blocks];
        dev.read_window(0, &mut buf).unwrap();
        self.window.extend_from_slice(&buf);
        for p in 0..r::MAX_PARTITION_SLOTS {
            let Ok(cap) = dev.read_reg(r::part(p, r::PART_STREAM_CAP), 4) else {
                continue;
            };
            let mut ring = vec![0u8; (cap * layout::STREAM_SLOT_SIZE) as usize];
            if dev
                .read_window(layout::stream_slot_offset(p, 0), &mut ring)
                .is_ok()
            {
                self.window.extend_from_slice(&ring);
            }
        }
        let mut records: Vec<InterruptRecord> = Vec::new();
        dev.interrupts_since(0, &mut records);
        for rec in &records {
            self.interrupts.extend_from_slice(rec.as_bytes());
        }
    }
}

/// The distinct 32-byte windows of the memory window's bytes: by slot-sized
/// chunks (each with the 31 bytes after it, so no window is lost), equal
/// and all-zero chunks skipped.
fn window_windows(bytes: &[u8]) -> HashSet<[u8; 32]> {
    let chunk = layout::BLOCK_SLOT_SIZE as usize;
    let mut chunks = HashSet::new();
    for start in (0..bytes.len()).step_by(chunk) {
        let part = &bytes[start..(start + chunk + 31).min(bytes.len())];
        if part.iter().any(|&b| b != 0) {
            chunks.insert(part);
        }
    }
    chunks.into_iter().flat_map(windows).collect()
}

fn windows(bytes: &[u8]) -> HashSet<[u8; 32]> {
    bytes
        .windows(32)
        .map(|w| w.try_into().expect("32 bytes"))
        .collect()
}

/// The host's search: every key it can derive from what it saw, checked
/// against the secrets (the VM keys and session keys of every session and
/// epoch — a slot opens only under its exact session key) and tried on a
/// sealed slot. The first derivation that yields a secret, if any.
fn search(
    seen: &Seen,
    secrets: &HashSet<[u8; 32]>,
    contexts: &[(u64, u32)],
    sealed: &BlockSlot,
) -> Option<String> {
    let th3s: Vec<[u8; 32]> = seen
        .replies
        .iter()
        .map(|m| {
            let th2 = schedule::th2(&schedule::th1(m.vm, m, m), &m.signature);
            schedule::th3(&th2, &m.responder_verify)
        })
        .collect();
    let shares: Vec<[u8; 32]> = seen
        .replies
        .iter()
        .flat_map(|m| [m.requester_share, m.responder_share])
        .collect();
    let opens = |k: &[u8; 32]| {
        let mut payload = sealed.payload;
        let aead_key = {
            use aes_gcm::aead::{AeadInPlace, KeyInit};
            let aead = aes_gcm::Aes256Gcm::new(k.into());
            let aad = &sealed.envelope.as_bytes()[..layout::ENVELOPE_AAD_LEN];
            aead.decrypt_in_place_detached(
                aes_gcm::Nonce::from_slice(&sealed.envelope.nonce),
                aad,
                &mut payload,
                aes_gcm::Tag::from_slice(&sealed.tag),
            )
            .is_ok()
        };
        aead_key
    };
    let public: HashSet<[u8; 32]> = windows(&seen.public)
        .into_iter()
        .chain(windows(&seen.interrupts))
        .chain(windows(&seen.registers))
        .collect();
    for w in &public {
        let sha: [u8; 32] = Sha256::digest(w).into();
        if secrets.contains(w) || secrets.contains(&sha) || opens(w) {
            return Some(format!("the window {w:02x?} itself or its SHA-256"));
        }
        for &(session, epoch) in contexts {
            if secrets.contains(&*schedule::session_key(w, VM, session, epoch)) {
                return Some(format!("HKDF of {w:02x?} as the VM key"));
            }
        }
        let hs = Handshake::new(w);
        for th3 in &th3s {
            if secrets.contains(&*hs.vm_key(th3)) {
                return Some(format!("{w:02x?} as the shared secret"));
            }
        }
    }
    // An ephemeral secret could only have leaked into the messages.
    for w in windows(&seen.public) {
        for share in &shares {
            let hs = Handshake::new(&x25519_dalek::x25519(w, *share));
            for th3 in &th3s {
                if secrets.contains(&*hs.vm_key(th3)) {
                    return Some(format!("{w:02x?} as an ephemeral secret"));
                }
            }
        }
    }
    for w in window_windows(&seen.window) {
        if secrets.contains(&w) || opens(&w) {
            return Some(format!("the window bytes {w:02x?}"));
        }
    }
    None
}

#[test]
fn a_host_relaying_the_exchange_and_reading_everything_opens_nothing() {
    let s = keyless(small_scenario());
    let mut dev = device_with_identity(&s);
    let mut host = Host::new();
    let mut seen = Seen::default();
    run(&mut dev, &mut host, 100_000);
    seen.look(&dev);
    let (mut t, reply) = establish_seen(&mut dev, VM, None, &mut seen.public);
    seen.replies.push(reply);
    seen.look(&dev);
    run(&mut dev, &mut host, 150_000);
    let mut fresh = [0u8; 32];
    getrandom::getrandom(&mut fresh).unwrap();
    rekey(&mut dev, &mut t, fresh, &mut seen.public);
    run(&mut dev, &mut host, 150_000);
    let (t2, reply) = establish_seen(&mut dev, VM, Some(&t), &mut seen.public);
    seen.replies.push(reply);
    run(&mut dev, &mut host, 150_000);
    host::flush_all(&mut dev).unwrap();
    seen.look(&dev);
    assert_tenant_reads_its_ledger(&mut dev, &t2, "the tenant");

    let mut secrets = HashSet::new();
    let mut contexts = Vec::new();
    for session in [&t, &t2] {
        for &(epoch, key) in &session.keys {
            secrets.insert(key);
            secrets.insert(*schedule::session_key(&key, VM, session.id, epoch));
            contexts.push((session.id, epoch));
        }
    }
    let sealed = slot_at(&dev, VM);
    assert_eq!(sealed.envelope.session(), t2.id);
    assert_eq!(search(&seen, &secrets, &contexts, &sealed), None);

    // The search finds a key that did leak (it can fail): the tenant's
    // key in a register the host reads, or the session key in the window.
    let mut leaky = Seen {
        public: Vec::new(),
        interrupts: Vec::new(),
        registers: [
            &seen.registers[..64],
            &t.key_of(1)[..],
            &seen.registers[64..128],
        ]
        .concat(),
        window: Vec::new(),
        replies: seen.replies.clone(),
    };
    assert!(search(&leaky, &secrets, &contexts, &sealed).is_some());
    leaky.registers = seen.registers[..4096].to_vec();
    leaky.window = [&[7u8; 5][..], &t2.session_key()[..]].concat();
    assert!(search(&leaky, &secrets, &contexts, &sealed).is_some());
}
