//! A confidential VM through the device node, with the real `gpupm-driver`
//! process: the debug ledger exists only with `--debug-ledger` and answers
//! a confidential VM only sealed; no (key, nonce)
//! pair is ever reused across resets, rekeys, sessions and driver
//! restarts; a key written in a scenario is refused without
//! `--insecure-scenario-keys`, which nothing shipped passes.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;

use gpupm_cc::Requester;
use gpupm_driver::model::cc::{self, RekeyBlob};
use gpupm_test_support::rawnode::ioctl;
use gpupm_test_support::rawnode::{
    advance, batch, expected, flush_all, ledger, read_block, service, service_pending, write_op,
    Tally,
};
use gpupm_test_support::rawnode::{errno, rd32, rd64};
use gpupm_test_support::scenario::VM3_KEY;
use gpupm_test_support::{Driver, DriverOptions};
use gpupm_uapi::cc::CC_VENDOR_ROOT_KEY;
use gpupm_uapi::ioctl::{
    ledger_flags, ledger_scope, LedgerQuery, Reset, GPUPM_IOC_LEDGER, GPUPM_IOC_RESET,
    IOCTL_STRUCT_VERSION, IOC_MAGIC,
};
use gpupm_uapi::ioctl::{GPUPM_IOC_CC_FINISH, GPUPM_IOC_CC_KEY_EXCHANGE};
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

    fn envelope(&self) -> gpupm_uapi::layout::Envelope {
        match self {
            BlockOrRecord::Block(s) => s.envelope,
            BlockOrRecord::Record(s) => s.envelope,
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

/// A session the key exchange established through `card` as VM `VM`'s
/// tenant: (session id, K_vm). `replacing` proves the current session.
fn establish_raw(card: &File, replacing: Option<(&[u8; 32], u64, u32)>) -> (u64, [u8; 32]) {
    let req = Requester::new(VM).unwrap();
    let mut msg = req.request();
    ioctl(card, GPUPM_IOC_CC_KEY_EXCHANGE, msg.as_mut_bytes()).expect("KEY_EXCHANGE");
    let agreed = req
        .check(&msg, &CC_VENDOR_ROOT_KEY)
        .expect("a genuine reply");
    let mut fin = agreed.finish_request(replacing);
    ioctl(card, GPUPM_IOC_CC_FINISH, fin.as_mut_bytes()).expect("FINISH");
    assert_eq!(fin.key_epoch, 1);
    (agreed.session(), *agreed.vm_key())
}

/// Every sealed slot of `card`, opened with the key of its (session,
/// epoch) from `keys` — each must open — recorded by (session key,
/// nonce) in `seen`, failing on a pair that sealed two different slots.
/// Withheld slots carry no nonce and are counted apart. Returns (sealed,
/// withheld).
fn collect_sessions(
    card: &File,
    seen: &mut HashMap<([u8; 32], [u8; 12]), BlockOrRecord>,
    keys: &HashMap<(u64, u32), [u8; 32]>,
    when: &str,
) -> (usize, usize) {
    let (mut sealed, mut withheld) = (0, 0);
    for (_, slot) in sealed_slots(card) {
        let env = slot.envelope();
        if env.flags & envelope_flags::WITHHELD != 0 {
            withheld += 1;
            continue;
        }
        let key = keys
            .get(&(env.session(), env.key_epoch))
            .unwrap_or_else(|| panic!("{when}: a slot sealed in an unknown session {env:x?}"));
        assert!(
            slot.opens_with(key),
            "{when}: a slot does not open under its session's key"
        );
        let aes = *cc::session_key(key, env.vm, env.session(), env.key_epoch);
        let first = seen.entry((aes, env.nonce)).or_insert(slot);
        assert!(
            *first == slot,
            "{when}: one (key, nonce) sealed two different slots"
        );
        sealed += 1;
    }
    (sealed, withheld)
}

#[test]
fn no_key_and_nonce_repeat_across_sessions_resets_rekeys_and_driver_restarts() {
    let tmp = gpupm_test_support::Scratch::new("cc-sessions");
    let identity = tmp.join("identity");
    let keyless = gpupm_test_support::scenario::small().replace(
        &format!(
            "confidential_key = \"{}\"",
            gpupm_test_support::scenario::hex(&VM3_KEY)
        ),
        "confidential = true",
    );
    let mut seen = HashMap::new();
    let mut keys: HashMap<(u64, u32), [u8; 32]> = HashMap::new();
    let mut sessions = Vec::new();
    for life in 0..2u8 {
        let d = Driver::start_with(DriverOptions::toml(keyless.clone()).with_identity(&identity));
        let mut card = d.card_nonblock();
        run(&mut card, 60_000);
        let (sealed, withheld) = collect_sessions(
            &card,
            &mut seen,
            &keys,
            &format!("life {life}, before a session"),
        );
        assert_eq!(sealed, 0, "life {life}: a slot sealed before any session");
        assert!(withheld > 0);
        let (s1, k1) = establish_raw(&card, None);
        keys.insert((s1, 1), k1);
        sessions.push(s1);
        run(&mut card, 60_000);
        let next = [0x40 + life; 32];
        let blob = RekeyBlob::seal(&k1, VM, 1, s1, &next, [life; 8]);
        let mut ops: Vec<_> = blob
            .register_writes(VM)
            .into_iter()
            .map(|(off, v)| write_op(off, u64::from(v)))
            .collect();
        batch(&card, &mut ops).unwrap();
        keys.insert((s1, 2), next);
        run(&mut card, 60_000);
        let (sealed, _) =
            collect_sessions(&card, &mut seen, &keys, &format!("life {life}, rekeyed"));
        assert!(sealed > 3);
        // A new session replacing this one (with proof of its key).
        let (s2, k2) = establish_raw(&card, Some((&next, s1, 2)));
        keys.insert((s2, 1), k2);
        sessions.push(s2);
        run(&mut card, 60_000);
        collect_sessions(&card, &mut seen, &keys, &format!("life {life}, replaced"));
        let mut reset = Reset {
            version: IOCTL_STRUCT_VERSION,
            magic: r::RESET_MAGIC,
        };
        ioctl(&card, GPUPM_IOC_RESET, reset.as_mut_bytes()).unwrap();
        assert_eq!(rd64(&card, r::vm(VM, r::VM_KEY_SESSION)).unwrap(), 0);
        run(&mut card, 60_000);
        let (sealed, _) = collect_sessions(
            &card,
            &mut seen,
            &keys,
            &format!("life {life}, after the reset"),
        );
        assert_eq!(
            sealed, 0,
            "life {life}: sealed under a session the reset ended"
        );
        let (s3, k3) = establish_raw(&card, None);
        keys.insert((s3, 1), k3);
        sessions.push(s3);
        run(&mut card, 60_000);
        collect_sessions(
            &card,
            &mut seen,
            &keys,
            &format!("life {life}, re-established"),
        );
        d.stop();
    }
    let distinct: std::collections::BTreeSet<u64> = sessions.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        sessions.len(),
        "a session id repeated: {sessions:x?}"
    );
    let epochs: std::collections::BTreeSet<u32> = seen.values().map(BlockOrRecord::epoch).collect();
    assert_eq!(epochs, [1, 2].into(), "slots of both epochs were checked");
    eprintln!(
        "{} sealed slots over {} sessions in 2 driver lives, no (key, nonce) reused",
        seen.len(),
        sessions.len()
    );
}

#[test]
fn a_scenario_key_is_refused_without_the_insecure_flag() {
    let tmp = gpupm_test_support::Scratch::new("cc-scenario-key");
    let path = tmp.join("keyed.toml");
    std::fs::write(&path, gpupm_test_support::scenario::small()).unwrap();
    let dir = tmp.join("dev");
    let mut child = std::process::Command::new(gpupm_test_support::bin!(Driver))
        .args(["--clock", "step", "--scenario"])
        .arg(&path)
        .arg("--node-dir")
        .arg(&dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A driver that accepted the key would serve until stopped.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(2),
        "the driver accepted a scenario key: {stderr}"
    );
    assert!(
        stderr.contains("confidential_key") && stderr.contains("--insecure-scenario-keys"),
        "{stderr}"
    );
    assert!(!gpupm_test_support::scratch::is_mounted(&dir));
}

#[test]
fn nothing_shipped_accepts_scenario_keys_or_carries_a_key() {
    let root = gpupm_test_support::workspace_root();
    for dir in ["systemd", "packaging", "deploy"] {
        for entry in walk(&root.join(dir)) {
            let text = std::fs::read_to_string(&entry).unwrap_or_default();
            let passes = text
                .lines()
                .filter(|l| !l.trim_start().starts_with('#'))
                .any(|l| l.contains("insecure-scenario-keys"));
            assert!(
                !passes,
                "{} passes --insecure-scenario-keys",
                entry.display()
            );
        }
    }
    let unit = std::fs::read_to_string(root.join("systemd/gpupm-driver.service")).unwrap();
    assert!(
        unit.contains("--identity"),
        "the driver unit gives the device its identity"
    );
    // The key every binary used to carry for the built-in VM 4.
    let old = b"gpupm-demo-key:not-a-secret-0001";
    let bin = gpupm_test_support::bin!(Driver);
    let bytes = std::fs::read(&bin).unwrap();
    assert!(
        !bytes.windows(old.len()).any(|w| w == old),
        "{bin:?} carries the old demo key"
    );
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}
