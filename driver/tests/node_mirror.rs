//! The commit mirror (ABI 1.9) through a real driver: `GPUPM_IOC_MIRROR_INFO`
//! names a root-only file that holds, after every periodic commit, what a
//! `GPUPM_IOC_WAIT_COMMIT` returns for that commit and what the window
//! holds; an unprivileged caller gets neither the info nor the file; a
//! reset changes the generation; readers never see a torn commit.

use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use gpupm_client::mirror::{MirrorReader, MIRROR_SLOTS};
use gpupm_test_support::rawnode::{advance, digest, errno, ioctl, rd64};
use gpupm_test_support::scenario::{profile, CONTEXT_TYPES};
use gpupm_test_support::services::DriverOptions;
use gpupm_test_support::users::{run_as, Cred};
use gpupm_test_support::Driver;
use gpupm_uapi::commit_wait::WaitCommit;
use gpupm_uapi::ioctl::{GPUPM_IOC_MIRROR_INFO, GPUPM_IOC_WAIT_COMMIT, IOCTL_STRUCT_VERSION};
use gpupm_uapi::layout::{block_slot_offset, Block, BlockSlot, BLOCK_SLOT_SIZE, MEM_WINDOW_OFFSET};
use gpupm_uapi::mirror::MirrorInfo;
use gpupm_uapi::regs;
use serde_json::json;
use zerocopy::{FromBytes, FromZeros, IntoBytes};

/// The small scenario's periodic trigger (dithered by up to 255 cycles).
const PERIOD: u64 = 20_000;

fn info_arg() -> MirrorInfo {
    let mut a = MirrorInfo::new_zeroed();
    a.version = IOCTL_STRUCT_VERSION;
    a
}

fn mirror_info(card: &File) -> std::io::Result<MirrorInfo> {
    let mut a = info_arg();
    ioctl(card, GPUPM_IOC_MIRROR_INFO, a.as_mut_bytes())?;
    Ok(a)
}

fn path(bytes: &[u8; 256]) -> PathBuf {
    let p = MirrorInfo::path_of(bytes).expect("a NUL-terminated path");
    PathBuf::from(std::ffi::OsStr::from_bytes(p))
}

/// Every block slot of the window, read through the node.
fn window_slots(card: &File) -> Vec<BlockSlot> {
    let mut all = vec![BlockSlot::new_zeroed(); MIRROR_SLOTS as usize];
    for (i, chunk) in all.chunks_mut(64).enumerate() {
        let at = MEM_WINDOW_OFFSET + block_slot_offset(u32::try_from(i * 64).unwrap());
        card.read_exact_at(chunk.as_mut_bytes(), at).unwrap();
    }
    all
}

fn sequence(card: &File) -> u64 {
    rd64(card, regs::TRIG_COUNT_PERIODIC).unwrap()
}

#[test]
fn the_mirror_holds_what_a_commit_wait_returns_and_the_whole_window() {
    let d = Driver::start();
    let card = d.card();
    let info = mirror_info(&card).unwrap();
    assert_eq!(info.slot_count, MIRROR_SLOTS);
    // The ring area (ABI 1.10) follows the block slots.
    assert!(info.size > 64 + u64::from(MIRROR_SLOTS) * BLOCK_SLOT_SIZE);
    assert!(path(&info.path).starts_with(d.dir.with_extension("mirror")));
    let mirror = MirrorReader::open(&info).unwrap();
    let before = mirror.doorbell();
    advance(&card, 4 * PERIOD + 256).unwrap();
    let seq = sequence(&card);
    assert!(seq >= 3, "periodic commits ran: {seq}");
    assert!(mirror.doorbell() > before, "each commit rings the doorbell");

    let slots = [0, 1, 2, 3, 64, 65];
    let mut wait = WaitCommit::new_zeroed();
    wait.version = IOCTL_STRUCT_VERSION;
    wait.timeout_us = 1_000;
    wait.after = seq - 1;
    wait.count = u32::try_from(slots.len()).unwrap();
    wait.slots[..slots.len()].copy_from_slice(&slots);
    ioctl(&card, GPUPM_IOC_WAIT_COMMIT, wait.as_mut_bytes()).unwrap();
    let mut out = vec![BlockSlot::new_zeroed(); slots.len()];
    let snap = mirror.read(&slots, &mut out).unwrap();
    assert_eq!(snap.commit_seq, wait.seq, "the same commit");
    assert_eq!(snap.cycle, wait.cycle, "copied at the commit's delivery");
    assert_eq!(snap.generation, info.generation);
    assert_eq!(out, wait.blocks[..slots.len()], "the wait's blocks");
    assert!(
        out.iter()
            .any(|b| b.envelope.flags != 0 || b.payload.iter().any(|&x| x != 0)),
        "blocks in use"
    );

    // Quiescent (a step clock): every slot equals the window's.
    assert_holds_the_window(&mirror, &card);
    d.stop();
}

/// Every slot of the mirror equals the window's.
fn assert_holds_the_window(mirror: &MirrorReader, card: &File) {
    let all: Vec<u32> = (0..MIRROR_SLOTS).collect();
    let mut copy = vec![BlockSlot::new_zeroed(); all.len()];
    mirror.read(&all, &mut copy).unwrap();
    let window = window_slots(card);
    let differ: Vec<usize> = (0..all.len()).filter(|&i| copy[i] != window[i]).collect();
    assert!(
        differ.is_empty(),
        "slots differing from the window: {differ:?}"
    );
}

#[test]
fn a_new_mirror_holds_the_window_before_any_commit() {
    let d = Driver::start();
    let card = d.card();
    assert_eq!(sequence(&card), 0, "no periodic commit yet");
    let mirror = MirrorReader::open(&mirror_info(&card).unwrap()).unwrap();
    assert_eq!(mirror.doorbell(), 1, "published once, at creation");
    assert_holds_the_window(&mirror, &card);
    d.stop();
}

#[test]
fn an_unprivileged_caller_gets_neither_the_info_nor_the_file() {
    let d = Driver::start();
    let card = d.card();
    let info = mirror_info(&card).unwrap();
    let before = digest(&card);
    let (file, waiters) = (path(&info.path), path(&info.waiters_path));
    let answer = run_as(&Cred::user(65534), || {
        let mut a = info_arg();
        let asked = ioctl(&card, GPUPM_IOC_MIRROR_INFO, a.as_mut_bytes());
        let open = |p: &PathBuf| File::open(p).err().and_then(|e| e.raw_os_error());
        json!({
            "info": asked.err().map(|e| errno(&e)),
            "copied": a == info_arg(),
            "mirror": open(&file),
            "waiters": open(&waiters),
        })
    });
    assert_eq!(
        answer,
        json!({"info": libc::EACCES, "copied": true, "mirror": libc::EACCES, "waiters": libc::EACCES})
    );
    let meta = std::fs::metadata(&file).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::mode(&meta) & 0o777, 0o600);
    let dir = std::fs::metadata(file.parent().unwrap()).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::mode(&dir) & 0o777, 0o700);
    assert!(digest(&card) == before, "nothing changed");
    d.stop();
}

#[test]
fn without_a_mirror_the_info_is_enodev_and_a_malformed_ask_einval() {
    let mut opts = DriverOptions::default();
    opts.args.push("--no-mirror".into());
    let d = Driver::start_with(opts);
    let card = d.card();
    let e = mirror_info(&card).unwrap_err();
    assert_eq!(errno(&e), libc::ENODEV);
    d.stop();

    let d = Driver::start();
    let card = d.card();
    for (what, spoil) in [
        (
            "version 2",
            (|a: &mut MirrorInfo| a.version = 2) as fn(&mut MirrorInfo),
        ),
        ("flags", |a| a.flags = 1),
    ] {
        let before = digest(&card);
        let mut a = info_arg();
        spoil(&mut a);
        let sent = a;
        let e = ioctl(&card, GPUPM_IOC_MIRROR_INFO, a.as_mut_bytes()).expect_err(what);
        assert_eq!(errno(&e), libc::EINVAL, "{what}");
        assert_eq!(a, sent, "{what}: nothing copied back");
        assert!(digest(&card) == before, "{what} changed the device");
    }
    d.stop();
}

#[test]
fn a_reset_changes_the_generation_and_republishes_the_blocks() {
    let d = Driver::start();
    let card = d.card();
    let node = d.node();
    let info = mirror_info(&card).unwrap();
    let mirror = MirrorReader::open(&info).unwrap();
    advance(&card, 4 * PERIOD + 256).unwrap();
    let mut out = [BlockSlot::new_zeroed()];
    let old = mirror.read(&[1], &mut out).unwrap();
    assert!(old.commit_seq >= 3);
    node.reset().unwrap();
    advance(&card, PERIOD + 256).unwrap();
    let new = mirror.read(&[1], &mut out).unwrap();
    assert_ne!(
        new.generation, old.generation,
        "a reset is a new generation"
    );
    assert!(new.seq > old.seq, "published since");
    assert_eq!(mirror_info(&card).unwrap().generation, new.generation);
    let mut window = BlockSlot::new_zeroed();
    card.read_exact_at(
        window.as_mut_bytes(),
        MEM_WINDOW_OFFSET + block_slot_offset(1),
    )
    .unwrap();
    assert_eq!(out[0], window, "VM 1's block as the reset left it");
    d.stop();
}

/// One VM with one context on one partition, on a real-time clock with a
/// period shorter than the clock thread's tick: a commit at every tick,
/// and the VM's block always equal to its only context's.
fn one_context_fast() -> String {
    let mut s = String::from(
        "name = \"mirror-fast\"\nseed = 4\n[clock]\nkhz = 1000000\n\
         [topology]\nsms_per_gpc = [2]\nmemory_slices = 1\nnvlinks = 0\n\
         [trigger]\nperiod_cycles = 100000\n\
         [[partition]]\nslot = 1\ngpcs = [0]\nmemory_slices = [0]\n\
         [[vm]]\nid = 1\npartition = 1\n[[context]]\nvm = 1\nprofile = \"busy\"\n",
    );
    profile(&mut s, "busy", 1.0, &CONTEXT_TYPES);
    s
}

/// The torn-read check: while the device commits at its highest rate,
/// readers of the VM's and its context's slots must always find them
/// equal (the same deltas go into both in one commit); a read mixing two
/// commits would not.
#[test]
fn readers_never_see_a_torn_commit_at_the_highest_rate() {
    let d = Driver::start_with(DriverOptions {
        clock: "realtime",
        ..DriverOptions::toml(one_context_fast())
    });
    let card = d.card();
    let info = mirror_info(&card).unwrap();
    let first = sequence(&card);
    let ctx_slot = 64;
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let mirror = MirrorReader::open(&info).unwrap();
            std::thread::spawn(move || {
                let end = Instant::now() + Duration::from_secs(5);
                let (mut reads, mut last) = (0u64, 0u64);
                let mut out = [BlockSlot::new_zeroed(), BlockSlot::new_zeroed()];
                while Instant::now() < end {
                    let snap = mirror.read(&[1, ctx_slot], &mut out).unwrap();
                    let vm = Block::read_from_bytes(&out[0].payload).unwrap();
                    let ctx = Block::read_from_bytes(&out[1].payload).unwrap();
                    assert_eq!(
                        vm.counters, ctx.counters,
                        "torn at commit {}",
                        snap.commit_seq
                    );
                    assert_eq!(vm.commit_seq, ctx.commit_seq);
                    assert!(snap.commit_seq >= last, "never backwards");
                    last = snap.commit_seq;
                    reads += 1;
                }
                (reads, last)
            })
        })
        .collect();
    for r in readers {
        let (reads, last) = r.join().unwrap();
        assert!(reads > 1000, "{reads} reads");
        assert!(
            last > first + 1000,
            "commits ran meanwhile: {first} → {last}"
        );
    }
    d.stop();
}
