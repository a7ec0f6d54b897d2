//! The systemd descriptor-store path, with this test standing in for the
//! service manager: the real `gpupm-mount` mounts the node directory and
//! stores the `/dev/fuse` descriptor on our notify socket; the real
//! `gpupm-driver` is started with it as fd 3 (`LISTEN_FDS=1`,
//! `LISTEN_FDNAMES=node`, `LISTEN_PID` = its own pid), serves it, and
//! leaves the mount behind on SIGTERM; `gpupm-mount --unmount` removes it.
//! Run again in a mount namespace whose `/dev` is empty (as under the
//! unit's `PrivateDevices=yes`), the driver cannot clone the descriptor
//! and its serving threads share it instead.
//!
//! `gpupm-mount` is another package's binary: it is taken from beside
//! `gpupm-driver` (built by `cargo test --workspace`, or with
//! `-p gpupm-fusemount`). Needs root and `/dev/fuse`.

use std::fs::{self, File};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::Duration;

use gpupm_fusemount::notify::NotifyListener;
use gpupm_test_support::rawnode::rd32;
use gpupm_test_support::scratch::{is_mounted, mount_type};
use gpupm_test_support::{bin, Scratch};
use gpupm_uapi::regs;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const WAIT: Duration = Duration::from_secs(30);

fn mount_helper() -> PathBuf {
    bin!(Mount)
}

/// Runs `gpupm-mount --dir DIR --fdname node` with `NOTIFY_SOCKET` on our
/// socket and returns the descriptor it stored.
fn mount_and_store(tmp: &Scratch, dir: &Path) -> OwnedFd {
    let manager = NotifyListener::bind(tmp.join("store.sock")).unwrap();
    let mut helper = Command::new(mount_helper())
        .args(["--fdname", "node", "--dir"])
        .arg(dir)
        .env("NOTIFY_SOCKET", manager.path())
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn gpupm-mount");
    let stored = manager.recv_stored(WAIT, || helper.try_wait().unwrap().is_none());
    let out = helper.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "gpupm-mount: {log}");
    let (name, fd) = stored.unwrap_or_else(|e| panic!("no descriptor stored: {e}\n{log}"));
    assert_eq!(name, "node", "FDNAME");
    fd
}

/// Starts `gpupm-driver` as systemd would after the store: `fd` as fd 3,
/// `LISTEN_PID` set by the shell to the pid it then execs into. With
/// `private_dev`, the driver runs in its own mount namespace whose `/dev`
/// is an empty tmpfs, as under the unit's `PrivateDevices=yes`: it cannot
/// open `/dev/fuse` there.
fn start_driver(
    tmp: &Scratch,
    dir: &Path,
    fd: &OwnedFd,
    ready: &NotifyListener,
    private_dev: bool,
) -> Child {
    let scenario = tmp.join("scenario.toml");
    fs::write(&scenario, gpupm_test_support::scenario::small()).unwrap();
    let log = File::create(tmp.join("driver.log")).unwrap();
    let raw = fd.as_raw_fd();
    let mut cmd = if private_dev {
        let mut c = Command::new("unshare");
        c.args(["--mount", "--propagation", "private", "sh", "-c"]);
        c.arg(r#"mount -t tmpfs none /dev && LISTEN_PID=$$ exec "$0" "$@""#);
        c
    } else {
        let mut c = Command::new("sh");
        c.args(["-c", r#"LISTEN_PID=$$ exec "$0" "$@""#]);
        c
    };
    cmd.arg(bin!(Driver))
        .args(["--clock", "step", "--insecure-scenario-keys", "--scenario"])
        .arg(&scenario)
        .arg("--node-dir")
        .arg(dir)
        .env("LISTEN_FDS", "1")
        .env("LISTEN_FDNAMES", "node")
        .env("NOTIFY_SOCKET", ready.path())
        .env("RUST_LOG", "debug")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    // SAFETY: the closure runs in the forked child before exec and calls
    // only async-signal-safe functions (dup2, fcntl) on descriptor numbers
    // it owns there; `raw` stays open in the parent until after spawn.
    unsafe {
        cmd.pre_exec(move || {
            let r = if raw == 3 {
                libc::fcntl(3, libc::F_SETFD, 0)
            } else {
                libc::dup2(raw, 3)
            };
            if r < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn().expect("spawn gpupm-driver through sh")
}

/// [`start_driver`] with a notify socket of ours, once the driver said
/// `READY=1`; the socket stays open as long as the caller keeps it.
fn start_ready_driver(
    tmp: &Scratch,
    dir: &Path,
    fd: &OwnedFd,
    private_dev: bool,
) -> (Child, NotifyListener) {
    let ready = NotifyListener::bind(tmp.join("ready.sock")).unwrap();
    let mut driver = start_driver(tmp, dir, fd, &ready, private_dev);
    ready
        .wait_for("READY=1", WAIT, || driver.try_wait().unwrap().is_none())
        .unwrap_or_else(|e| panic!("{e}\n{}", driver_log(tmp)));
    (driver, ready)
}

/// What the driver of [`start_driver`] logged so far.
fn driver_log(tmp: &Scratch) -> String {
    fs::read_to_string(tmp.join("driver.log")).unwrap_or_default()
}

#[test]
fn driver_serves_the_stored_descriptor_and_leaves_the_mount_to_the_helper() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the node tests must run as root (they mount FUSE)"
    );
    let tmp = Scratch::new("fdstore");
    let dir = tmp.join("dev");
    let fd = mount_and_store(&tmp, &dir);
    assert_eq!(mount_type(&dir).as_deref(), Some("fuse.gpupm-node"));

    let (driver, _ready) = start_ready_driver(&tmp, &dir, &fd, false);
    let log = || driver_log(&tmp);
    assert!(
        log().contains("serving the node descriptor the service manager passed"),
        "{}",
        log()
    );

    let card = File::open(dir.join("card0")).unwrap();
    assert_eq!(rd32(&card, regs::ID).unwrap(), regs::DEVICE_MAGIC);
    drop(card);
    let fuse_fds = fuse_fds_of_two_loops(driver.id());
    assert_eq!(fuse_fds, 2, "the passed descriptor and one clone of it");

    stop_then_unmount(driver, &dir, &log);
    drop(fd);
}

/// SIGTERMs the driver, checks it exits cleanly and leaves the helper's
/// mount in place, then has `gpupm-mount --unmount` remove it.
fn stop_then_unmount(mut driver: Child, dir: &Path, log: &dyn Fn() -> String) {
    let pid = Pid::from_raw(i32::try_from(driver.id()).unwrap());
    kill(pid, Signal::SIGTERM).unwrap();
    let status = driver.wait().unwrap();
    assert!(status.success(), "driver exit {status}:\n{}", log());
    assert_eq!(
        mount_type(dir).as_deref(),
        Some("fuse.gpupm-node"),
        "the driver must leave the helper's mount in place:\n{}",
        log()
    );
    let out = Command::new(mount_helper())
        .args(["--unmount", "--dir"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "gpupm-mount --unmount: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!is_mounted(dir));
}

/// How many of `pid`'s descriptors are `/dev/fuse`, once both default
/// event loops run (and checked to be two).
fn fuse_fds_of_two_loops(pid: u32) -> usize {
    let names = gpupm_test_support::rawnode::thread_names_once_loops_run(pid, 2, WAIT);
    let loops = names.iter().filter(|n| n.starts_with("fuser-")).count();
    assert_eq!(loops, 2, "two event loops (the default): {names:?}");
    fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.as_os_str() == "/dev/fuse")
        .count()
}

#[test]
fn without_dev_fuse_the_serving_threads_share_the_stored_descriptor() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the node tests must run as root (they mount FUSE)"
    );
    let tmp = Scratch::new("fdstore-privdev");
    let dir = tmp.join("dev");
    let fd = mount_and_store(&tmp, &dir);
    let (driver, _ready) = start_ready_driver(&tmp, &dir, &fd, true);
    let log = || driver_log(&tmp);
    assert!(
        log().contains("the serving threads share it"),
        "the clone must have failed without /dev/fuse:\n{}",
        log()
    );
    let fuse_fds = fuse_fds_of_two_loops(driver.id());
    assert_eq!(fuse_fds, 1, "one shared descriptor, no clones");

    // Requests from several client threads are answered through the one
    // shared descriptor.
    let card = File::open(dir.join("card0")).unwrap();
    thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..200 {
                    assert_eq!(rd32(&card, regs::ID).unwrap(), regs::DEVICE_MAGIC);
                }
            });
        }
    });
    drop(card);

    stop_then_unmount(driver, &dir, &log);
    drop(fd);
}
