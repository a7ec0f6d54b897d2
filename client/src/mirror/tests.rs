//! The writer and the reader together, on real files in a private
//! directory (the tests run as root, so that they can give the files and
//! directories to other uids and groups).

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpupm_uapi::layout::BlockSlot;
use zerocopy::{FromZeros, IntoBytes};

use super::*;

/// A fresh directory path (not created: the writer creates it).
fn scratch() -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("gpupm-mirror-{}-{n}", std::process::id()));
    fs_remove(&dir);
    dir
}

fn fs_remove(dir: &Path) {
    std::fs::remove_dir_all(dir).ok();
}

/// A block whose every byte of payload is `v` (low byte).
fn block(v: u64) -> BlockSlot {
    let mut b = BlockSlot::new_zeroed();
    for w in b.as_mut_bytes().chunks_exact_mut(8) {
        w.copy_from_slice(&v.to_le_bytes());
    }
    b
}

#[test]
fn a_commit_is_read_back_whole_with_its_sequence_cycle_and_doorbell() {
    let dir = scratch();
    let mut w = MirrorWriter::create(&dir, 77).unwrap();
    let r = MirrorReader::open(&w.info()).unwrap();
    assert_eq!(r.doorbell(), 0);
    let c = w.begin();
    c.slot(3, &block(5));
    c.slot(MIRROR_SLOTS - 1, &block(6));
    assert!(!c.finish(41, 9000), "nobody waits: no wake");
    let mut out = vec![BlockSlot::new_zeroed(); 3];
    let snap = r.read(&[MIRROR_SLOTS - 1, 3, 4], &mut out).unwrap();
    assert_eq!(
        snap,
        Snapshot {
            generation: 77,
            commit_seq: 41,
            cycle: 9000,
            seq: 2
        }
    );
    assert_eq!(out, [block(6), block(5), BlockSlot::new_zeroed()]);
    assert_eq!(r.doorbell(), 1);
    assert!(matches!(
        r.read(&[MIRROR_SLOTS], &mut out),
        Err(MirrorError::Invalid(_))
    ));
    fs_remove(&dir);
}

/// Whether opening the mirror `w` names is refused as `PermissionDenied`.
fn refused(w: &MirrorWriter) -> bool {
    match MirrorReader::open(&w.info()) {
        Err(MirrorError::Io(e)) => e.kind() == io::ErrorKind::PermissionDenied,
        Err(e) => panic!("refused for another reason: {e:?}"),
        Ok(_) => false,
    }
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn chown(path: &Path, uid: u32) {
    std::os::unix::fs::chown(path, Some(uid), None).unwrap();
}

/// A writer in a fresh directory, with the directory and both files then
/// given to `uid` (the node's server running unprivileged).
fn owned_by(uid: u32) -> (PathBuf, MirrorWriter) {
    let dir = scratch();
    let w = MirrorWriter::create(&dir, 1).unwrap();
    for p in [&dir, &dir.join(MIRROR_FILE), &dir.join(WAITERS_FILE)] {
        chown(p, uid);
    }
    (dir, w)
}

#[test]
fn a_mirror_with_its_directorys_owner_is_accepted_root_or_not() {
    let dir = scratch();
    let w = MirrorWriter::create(&dir, 1).unwrap();
    assert!(!refused(&w), "root's directory and files");
    fs_remove(&dir);
    let (dir, w) = owned_by(65534);
    assert!(!refused(&w), "uid 65534's directory and files");
    // Shared with the directory's group: the mirror group-readable, the
    // waiter word group-writable by the reader's own group (gid 0 here).
    chmod(&dir, 0o750);
    chmod(&dir.join(MIRROR_FILE), 0o640);
    chmod(&dir.join(WAITERS_FILE), 0o660);
    assert!(
        !refused(&w),
        "group read, waiter word writable by our group"
    );
    fs_remove(&dir);
}

#[test]
fn a_waiter_file_another_group_may_write_is_refused() {
    // Any member of that group could truncate it under the mappings and
    // kill the driver and the reader with SIGBUS.
    let (dir, w) = owned_by(65534);
    chmod(&dir, 0o750);
    chmod(&dir.join(WAITERS_FILE), 0o660);
    std::os::unix::fs::chown(dir.join(WAITERS_FILE), None, Some(65534)).unwrap();
    assert!(
        refused(&w),
        "a waiter word group 65534 may write was accepted"
    );
    // The same group with read only is fine: it cannot shrink the file.
    chmod(&dir.join(WAITERS_FILE), 0o640);
    assert!(!refused(&w), "a waiter word group 65534 may read");
    fs_remove(&dir);
}

#[test]
fn a_mirror_others_may_read_or_its_group_write_is_refused() {
    for (file, mode) in [
        (MIRROR_FILE, 0o644),
        (MIRROR_FILE, 0o604),
        (MIRROR_FILE, 0o660),
        (WAITERS_FILE, 0o664),
        (WAITERS_FILE, 0o606),
    ] {
        let (dir, w) = owned_by(65534);
        chmod(&dir.join(file), mode);
        assert!(refused(&w), "{file} mode {mode:o} was accepted");
        fs_remove(&dir);
    }
}

#[test]
fn a_mirror_in_a_directory_its_group_or_others_may_write_is_refused() {
    for mode in [0o770, 0o702, 0o1777] {
        let (dir, w) = owned_by(65534);
        chmod(&dir, mode);
        assert!(refused(&w), "directory mode {mode:o} was accepted");
        fs_remove(&dir);
    }
}

#[test]
fn a_file_of_another_owner_than_its_directorys_is_refused() {
    // A third uid's file in a non-root directory, a non-root file in
    // root's directory, root's file in a non-root directory.
    for (dir_uid, file_uid) in [(65534, 65533), (0, 65534), (65534, 0)] {
        let (dir, w) = owned_by(dir_uid);
        chown(&dir.join(MIRROR_FILE), file_uid);
        assert!(refused(&w), "dir {dir_uid}, file {file_uid} was accepted");
        fs_remove(&dir);
    }
}

#[test]
fn a_symlink_is_not_followed_for_the_file_or_its_directory() {
    let dir = scratch();
    let w = MirrorWriter::create(&dir, 1).unwrap();
    let path = w.path().to_path_buf();
    std::fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink(dir.join(WAITERS_FILE), &path).unwrap();
    let e = MirrorReader::open(&w.info()).unwrap_err();
    assert!(
        matches!(&e, MirrorError::Io(e) if e.raw_os_error() == Some(libc::ELOOP)),
        "{e:?}"
    );
    fs_remove(&dir);
    // The directory itself a symlink to a good one.
    let real = scratch();
    let w = MirrorWriter::create(&real, 1).unwrap();
    let moved = real.with_extension("real");
    std::fs::rename(&real, &moved).unwrap();
    std::os::unix::fs::symlink(&moved, &real).unwrap();
    let e = MirrorReader::open(&w.info()).unwrap_err();
    assert!(
        matches!(&e, MirrorError::Io(e) if e.raw_os_error() == Some(libc::ENOTDIR)),
        "{e:?}"
    );
    std::fs::remove_file(&real).unwrap();
    fs_remove(&moved);
}

#[test]
fn a_directory_its_group_may_search_gets_group_shared_files() {
    use std::os::unix::fs::MetadataExt;
    let mode_gid = |dir: &Path, name: &str| {
        let m = std::fs::symlink_metadata(dir.join(name)).unwrap();
        (m.mode() & 0o7777, m.gid(), m.uid())
    };
    let dir = scratch();
    std::fs::create_dir(&dir).unwrap();
    chmod(&dir, 0o750);
    std::os::unix::fs::chown(&dir, None, Some(65534)).unwrap();
    let w = MirrorWriter::create(&dir, 1).unwrap();
    // Next to the mirror, the waiter word is never shared: the mirror's
    // readers are not all trusted with its size.
    assert_eq!(mode_gid(&dir, MIRROR_FILE), (0o640, 65534, 0));
    assert_eq!(mode_gid(&dir, WAITERS_FILE), (0o600, 65534, 0));
    assert!(!refused(&w));
    drop(w);
    // In a directory of its own, shared with that directory's group: the
    // reader takes it only when that is its own group (gid 0 here).
    for (group, taken) in [(65534, false), (0, true)] {
        let waiters = dir.join("waiters");
        std::fs::create_dir(&waiters).unwrap();
        chmod(&waiters, 0o750);
        std::os::unix::fs::chown(&waiters, None, Some(group)).unwrap();
        let dirs = MirrorDirs {
            mirror: &dir,
            waiters: Some(&waiters),
        };
        let w = MirrorWriter::create_in(dirs, 1, &[]).unwrap();
        assert_eq!(mode_gid(&dir, MIRROR_FILE), (0o640, 65534, 0));
        assert_eq!(mode_gid(&waiters, WAITERS_FILE), (0o660, group, 0));
        assert_eq!(!refused(&w), taken, "waiter word of group {group}");
        drop(w);
        std::fs::remove_dir_all(&waiters).unwrap();
    }
    // The mirror's own directory named as the waiters' changes nothing.
    let dirs = MirrorDirs {
        mirror: &dir,
        waiters: Some(&dir),
    };
    let w = MirrorWriter::create_in(dirs, 1, &[]).unwrap();
    assert_eq!(mode_gid(&dir, WAITERS_FILE), (0o600, 65534, 0));
    drop(w);
    fs_remove(&dir);
    // An owner-only directory keeps owner-only files.
    let dir = scratch();
    let w = MirrorWriter::create(&dir, 1).unwrap();
    let dir_mode = std::fs::symlink_metadata(&dir).unwrap().mode() & 0o7777;
    assert_eq!(dir_mode & 0o077, 0, "created owner-only: {dir_mode:o}");
    assert_eq!(mode_gid(&dir, MIRROR_FILE).0, 0o600);
    assert_eq!(mode_gid(&dir, WAITERS_FILE).0, 0o600);
    drop(w);
    fs_remove(&dir);
}

#[test]
fn a_directory_open_to_others_or_group_writable_or_anothers_is_refused_by_the_writer() {
    for (mode, uid) in [(0o755, 0), (0o701, 0), (0o770, 0), (0o700, 65534)] {
        let dir = scratch();
        std::fs::create_dir(&dir).unwrap();
        chmod(&dir, mode);
        chown(&dir, uid);
        let e = MirrorWriter::create(&dir, 1).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{mode:o} {uid}");
        assert!(!dir.join(MIRROR_FILE).exists(), "nothing created");
        assert!(!dir.join(WAITERS_FILE).exists(), "nothing created");
        fs_remove(&dir);
    }
}

#[test]
fn a_failed_creation_leaves_no_file_behind() {
    let dir = scratch();
    std::fs::create_dir(&dir).unwrap();
    chmod(&dir, 0o700);
    // The mirror's name taken by a directory: its stale-file removal fails
    // after the waiter file was made.
    std::fs::create_dir(dir.join(MIRROR_FILE)).unwrap();
    MirrorWriter::create(&dir, 1).unwrap_err();
    assert!(!dir.join(WAITERS_FILE).exists(), "the waiter file was left");
    assert!(dir.join(MIRROR_FILE).is_dir(), "the directory is untouched");
    fs_remove(&dir);
}

#[test]
fn a_writer_that_died_mid_commit_reads_busy_until_the_next_commit() {
    let dir = scratch();
    let mut w = MirrorWriter::create(&dir, 1).unwrap();
    let r = MirrorReader::open(&w.info()).unwrap();
    let c = w.begin();
    c.slot(1, &block(1));
    // Never finished: the writer "died" with the sequence odd.
    let _ = c;
    let mut out = [BlockSlot::new_zeroed()];
    assert!(matches!(r.read(&[1], &mut out), Err(MirrorError::Busy)));
    let c = w.begin();
    c.slot(1, &block(2));
    c.finish(2, 2);
    assert_eq!(r.read(&[1], &mut out).unwrap().seq, 4);
    assert_eq!(out[0], block(2));
    fs_remove(&dir);
}

#[test]
fn a_sleeping_reader_is_woken_by_the_doorbell() {
    let dir = scratch();
    let mut w = MirrorWriter::create(&dir, 1).unwrap();
    let r = Arc::new(MirrorReader::open(&w.info()).unwrap());
    let sleeper = {
        let r = Arc::clone(&r);
        std::thread::spawn(move || {
            let start = Instant::now();
            while r.doorbell() == 0 {
                r.wait(0, Some(Duration::from_secs(30))).unwrap();
            }
            start.elapsed()
        })
    };
    // Ring only once the sleeper registered, so the wake path is the one
    // exercised (a reader that is late sees the new doorbell instead).
    let deadline = Instant::now() + Duration::from_secs(30);
    while r.waiters() == 0 {
        assert!(Instant::now() < deadline, "the reader never registered");
        std::thread::yield_now();
    }
    assert!(w.begin().finish(1, 1), "a registered waiter is woken");
    assert!(sleeper.join().unwrap() < Duration::from_secs(30));
    assert_eq!(w.wakes(), 1);
    fs_remove(&dir);
}

/// A reader sleeping with no timeout on a doorbell that never rings is
/// woken by `wake_sleepers` from another handle on the same mirror (as
/// the daemon's watchdog does), and finds the doorbell unchanged.
#[test]
fn wake_sleepers_ends_an_untimed_sleep_without_ringing() {
    let dir = scratch();
    let w = MirrorWriter::create(&dir, 1).unwrap();
    let r = Arc::new(MirrorReader::open(&w.info()).unwrap());
    let sleeper = {
        let r = Arc::clone(&r);
        std::thread::spawn(move || {
            r.wait(0, None).unwrap();
            r.doorbell()
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while r.waiters() == 0 {
        assert!(Instant::now() < deadline, "the reader never registered");
        std::thread::yield_now();
    }
    // Registered, but perhaps not yet asleep in the kernel: wake until the
    // sleeper returns (a wake-up with nobody asleep is lost).
    let other = MirrorReader::open(&w.info()).unwrap();
    while !sleeper.is_finished() {
        assert!(Instant::now() < deadline, "the sleeper was never woken");
        other.wake_sleepers().unwrap();
        std::thread::yield_now();
    }
    assert_eq!(sleeper.join().unwrap(), 0, "woken, not rung");
    assert_eq!(w.wakes(), 0, "the writer woke nobody");
    fs_remove(&dir);
}

/// The torn-read check: a writer publishing back to back, each commit
/// filling two slots with its number; readers require every word of a
/// read to equal the snapshot's `commit_seq`.
#[test]
fn readers_never_see_a_torn_commit() {
    let dir = scratch();
    let mut w = MirrorWriter::create(&dir, 1).unwrap();
    let info = w.info();
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (stop, r) = (Arc::clone(&stop), MirrorReader::open(&info).unwrap());
            std::thread::spawn(move || {
                let mut out = [BlockSlot::new_zeroed(), BlockSlot::new_zeroed()];
                let (mut reads, mut busy) = (0u64, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    match r.read(&[7, 900], &mut out) {
                        Ok(s) => {
                            assert_eq!(out, [block(s.commit_seq), block(s.commit_seq)], "torn");
                            reads += 1;
                        }
                        Err(MirrorError::Busy) => busy += 1,
                        Err(e) => panic!("{e}"),
                    }
                }
                (reads, busy)
            })
        })
        .collect();
    let end = Instant::now() + Duration::from_secs(2);
    let mut n = 0;
    while Instant::now() < end {
        n += 1;
        let c = w.begin();
        c.slot(7, &block(n));
        c.slot(900, &block(n));
        c.finish(n, n);
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        let (reads, _busy) = r.join().unwrap();
        assert!(reads > 0, "each reader completed reads");
    }
    assert!(n > 1000, "{n} commits");
    fs_remove(&dir);
}
