//! The real `gpupm-mount` binary against a stand-in for systemd's notify
//! socket: mounts and stores the descriptor (`FDSTORE=1`, `FDNAME=`,
//! `SCM_RIGHTS`, then a barrier), refuses to mount without a manager,
//! undoes the mount when the store fails, and unmounts idempotently, also
//! a mount whose server never answered `FUSE_INIT`; `--unmount --fdname`
//! asks the manager to drop the stored descriptor (`FDSTOREREMOVE=1`, then
//! a barrier); with `--mount-namespace` it mounts and unmounts in another
//! process's mount namespace (`unshare --mount`), not its own.
//!
//! Needs root and `/dev/fuse`; without them the tests fail with the reason.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use gpupm_fusemount::notify::NotifyListener;

const HELPER: &str = env!("CARGO_BIN_EXE_gpupm-mount");
const WAIT: Duration = Duration::from_secs(20);

static NEXT: AtomicU32 = AtomicU32::new(0);

fn require_root_and_fuse() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the gpupm-mount tests must run as root (they mount FUSE)"
    );
    assert!(
        Path::new("/dev/fuse").exists(),
        "the gpupm-mount tests need /dev/fuse"
    );
}

/// A scratch directory, removed (after a lazy unmount of `node`) on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        require_root_and_fuse();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("gpupm-mount-{}-{n}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn node(&self) -> PathBuf {
        self.0.join("node")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        while is_mounted(&self.node()) {
            if nix::mount::umount2(&self.node(), nix::mount::MntFlags::MNT_DETACH).is_err() {
                break;
            }
        }
        if let Err(e) = fs::remove_dir_all(&self.0) {
            eprintln!("leaving {}: {e}", self.0.display());
        }
    }
}

fn is_mounted(dir: &Path) -> bool {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let dir = dir.to_string_lossy();
    info.lines().any(|l| l.split(' ').nth(4) == Some(&*dir))
}

fn fs_type(dir: &Path) -> Option<String> {
    fs_type_in("/proc/self/mountinfo", dir)
}

/// The type of the topmost mount at `dir` per `mountinfo` (a process's
/// `/proc/PID/mountinfo`), read here rather than through the crate under
/// test.
fn fs_type_in(mountinfo: &str, dir: &Path) -> Option<String> {
    let info = fs::read_to_string(mountinfo).unwrap();
    let dir = dir.to_string_lossy();
    info.lines()
        .rev()
        .find(|l| l.split(' ').nth(4) == Some(&*dir))
        .and_then(|l| l.split(" - ").nth(1)?.split(' ').next().map(str::to_owned))
}

fn helper(args: &[&str], dir: &Path, notify: Option<&Path>) -> Command {
    let mut cmd = Command::new(HELPER);
    cmd.args(args)
        .arg("--dir")
        .arg(dir)
        .env_remove("NOTIFY_SOCKET");
    if let Some(sock) = notify {
        cmd.env("NOTIFY_SOCKET", sock);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn mounts_stores_the_descriptor_and_unmounts_an_unserved_mount() {
    let tmp = Scratch::new();
    let manager = NotifyListener::bind(tmp.0.join("notify.sock")).unwrap();
    let mut child = helper(
        &["--fdname", "node", "--mode", "0750"],
        &tmp.node(),
        Some(manager.path()),
    )
    .spawn()
    .unwrap();
    let (name, fd) = manager
        .recv_stored(WAIT, || child.try_wait().unwrap().is_none())
        .expect("the helper stores a descriptor");
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(name, "node");
    assert_eq!(fs_type(&tmp.node()).as_deref(), Some("fuse.gpupm-node"));
    let dev_fuse = fs::metadata("/dev/fuse").unwrap();
    let stored = fs::File::from(fd);
    assert_eq!(
        std::os::unix::fs::MetadataExt::rdev(&stored.metadata().unwrap()),
        std::os::unix::fs::MetadataExt::rdev(&dev_fuse),
        "the stored descriptor is /dev/fuse"
    );

    // Nobody serves the mount (FUSE_INIT is unanswered): unmounting must
    // neither stat it nor block.
    let out = helper(&["--unmount"], &tmp.node(), None).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("unmounted"), "{}", stderr(&out));
    assert!(!is_mounted(&tmp.node()));
    let out = helper(&["--unmount"], &tmp.node(), None).output().unwrap();
    assert!(
        out.status.success(),
        "a second unmount is fine: {}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("nothing mounted"), "{}", stderr(&out));
}

#[test]
fn without_a_manager_nothing_is_mounted_and_the_exit_is_2() {
    let tmp = Scratch::new();
    let out = helper(&["--fdname", "node"], &tmp.node(), None)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let text = stderr(&out);
    assert_eq!(text.lines().count(), 1, "one line: {text}");
    assert!(text.contains("NOTIFY_SOCKET is not set"), "{text}");
    assert!(!is_mounted(&tmp.node()));
}

#[test]
fn a_failed_store_undoes_the_mount() {
    let tmp = Scratch::new();
    let missing = tmp.0.join("no-manager.sock");
    let out = helper(&["--fdname", "node"], &tmp.node(), Some(&missing))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let text = stderr(&out);
    assert_eq!(text.lines().count(), 1, "one line: {text}");
    assert!(text.contains("could not store the descriptor"), "{text}");
    assert!(!is_mounted(&tmp.node()), "mount left behind");
}

#[test]
fn unmount_leaves_a_non_fuse_mount_alone_and_fails() {
    let tmp = Scratch::new();
    fs::create_dir_all(tmp.node()).unwrap();
    nix::mount::mount(
        Some("tmpfs"),
        &tmp.node(),
        Some("tmpfs"),
        nix::mount::MsFlags::empty(),
        None::<&str>,
    )
    .unwrap();
    let out = helper(&["--unmount"], &tmp.node(), None).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("not a FUSE one"), "{}", stderr(&out));
    assert_eq!(fs_type(&tmp.node()).as_deref(), Some("tmpfs"));
}

/// `unshare --mount` running `sleep`: a mount namespace of its own with
/// private propagation (nothing mounted in it shows up here). Killed on
/// drop.
struct OtherNamespace(std::process::Child);

impl OtherNamespace {
    fn start() -> OtherNamespace {
        let child = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sleep", "600"])
            .stdin(Stdio::null())
            .spawn()
            .expect("unshare (util-linux)");
        let ns = OtherNamespace(child);
        // unshare makes propagation private before it executes sleep.
        let comm = format!("/proc/{}/comm", ns.0.id());
        let deadline = std::time::Instant::now() + WAIT;
        while fs::read_to_string(&comm).unwrap_or_default().trim() != "sleep" {
            assert!(
                std::time::Instant::now() < deadline,
                "unshare did not start sleep"
            );
            std::thread::yield_now();
        }
        ns
    }

    fn ns_file(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/ns/mnt", self.0.id()))
    }

    fn fs_type(&self, dir: &Path) -> Option<String> {
        fs_type_in(&format!("/proc/{}/mountinfo", self.0.id()), dir)
    }
}

impl Drop for OtherNamespace {
    fn drop(&mut self) {
        if let Err(e) = self.0.kill() {
            eprintln!("kill unshare: {e}");
        }
        if let Err(e) = self.0.wait() {
            eprintln!("reap unshare: {e}");
        }
    }
}

#[test]
fn mount_namespace_puts_the_mount_and_the_unmount_in_that_namespace() {
    let tmp = Scratch::new();
    fs::create_dir_all(tmp.node()).unwrap();
    let other = OtherNamespace::start();
    let ns = other.ns_file();
    let ns_arg = ns.to_str().unwrap();
    let manager = NotifyListener::bind(tmp.0.join("notify.sock")).unwrap();
    let mut child = helper(
        &["--mount-namespace", ns_arg, "--fdname", "node"],
        &tmp.node(),
        Some(manager.path()),
    )
    .spawn()
    .unwrap();
    manager
        .recv_stored(WAIT, || child.try_wait().unwrap().is_none())
        .expect("the helper stores a descriptor");
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        other.fs_type(&tmp.node()).as_deref(),
        Some("fuse.gpupm-node"),
        "mounted in the namespace named"
    );
    assert!(
        !is_mounted(&tmp.node()),
        "not in the helper's own namespace"
    );

    // Unmounting here finds nothing; in that namespace it takes the mount.
    let out = helper(&["--unmount"], &tmp.node(), None).output().unwrap();
    assert!(stderr(&out).contains("nothing mounted"), "{}", stderr(&out));
    let out = helper(
        &["--mount-namespace", ns_arg, "--unmount"],
        &tmp.node(),
        None,
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("unmounted"), "{}", stderr(&out));
    assert_eq!(other.fs_type(&tmp.node()), None);
}

#[test]
fn a_namespace_that_cannot_be_joined_fails_with_1_and_mounts_nothing() {
    let tmp = Scratch::new();
    let out = helper(
        &["--mount-namespace", "/nonexistent/ns/mnt", "--unmount"],
        &tmp.node(),
        None,
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stderr(&out);
    assert_eq!(text.lines().count(), 1, "one line: {text}");
    assert!(
        text.contains("could not open mount namespace /nonexistent/ns/mnt"),
        "{text}"
    );
}

#[test]
fn unmount_with_fdname_has_the_manager_drop_the_stored_descriptor() {
    let tmp = Scratch::new();
    let manager = NotifyListener::bind(tmp.0.join("notify.sock")).unwrap();
    let mut child = helper(&["--fdname", "node"], &tmp.node(), Some(manager.path()))
        .spawn()
        .unwrap();
    let (_, stored) = manager
        .recv_stored(WAIT, || child.try_wait().unwrap().is_none())
        .expect("the helper stores a descriptor");
    assert!(child.wait().unwrap().success());

    let mut child = helper(
        &["--unmount", "--fdname", "node"],
        &tmp.node(),
        Some(manager.path()),
    )
    .spawn()
    .unwrap();
    let removal = manager
        .wait_for("FDSTOREREMOVE=1", WAIT, || {
            child.try_wait().unwrap().is_none()
        })
        .expect("the helper asks to drop the descriptor");
    assert_eq!(removal.get("FDNAME"), Some("node"));
    // The manager's part: drop its copy, then answer the barrier.
    drop(stored);
    let barrier = manager.recv(WAIT).expect("a barrier follows");
    assert!(barrier.has("BARRIER=1"), "{}", barrier.text);
    drop(barrier);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("unmounted") && stderr(&out).contains("dropped"),
        "{}",
        stderr(&out)
    );
    assert!(!is_mounted(&tmp.node()));

    // By hand (no manager) the drop is skipped, not an error.
    let out = helper(&["--unmount", "--fdname", "node"], &tmp.node(), None)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("dropped"), "{}", stderr(&out));
}
